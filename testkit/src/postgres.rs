//! A throwaway PostgreSQL server: `initdb` into its own temp dir, started with `pg_ctl` on a
//! free local port (and a socket in that dir), trust authentication for local connections;
//! stopped (and its dir removed) on drop. For tests where the resource a lock protects is a
//! real database, as in production: a table that rejects writes with an old fencing token.
//!
//! The binaries come from `PG_BIN` (a directory holding `initdb` and `pg_ctl`), else from the
//! newest `/usr/lib/postgresql/<version>/bin` (Debian's `postgresql` package). PostgreSQL
//! refuses to run as root: as root, the server runs as the `postgres` user the package
//! creates (through `runuser`), and the temp dir is handed to it.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use crate::server::free_port;

/// How many free ports a start tries (a port can be taken between probing and binding).
const START_TRIES: usize = 5;

/// A PostgreSQL server owned by one test or example; stopped on drop.
pub struct PostgresServer {
    port: u16,
    dir: tempfile::TempDir,
    bin: PathBuf,
    /// The user the server runs as when this process is root.
    run_as: Option<String>,
}

impl PostgresServer {
    /// Starts a server, or panics with what is missing (`apt-get install postgresql`).
    pub fn start() -> PostgresServer {
        PostgresServer::try_start().unwrap_or_else(|e| panic!("{e}"))
    }

    /// Starts a server: `initdb` (user `postgres`, trust authentication, no fsync), then
    /// `pg_ctl start` on a free port, waiting until it accepts connections.
    pub fn try_start() -> Result<PostgresServer, String> {
        let bin = pg_bin()?;
        let dir = tempfile::Builder::new()
            .prefix("lockwise-pg-")
            .tempdir()
            .map_err(|e| format!("temp dir: {e}"))?;
        let run_as = is_root().then(|| "postgres".to_string());
        if let Some(user) = &run_as {
            let owned = Command::new("chown")
                .arg(user)
                .arg(dir.path())
                .status()
                .map_err(|e| format!("chown: {e}"))?;
            if !owned.success() {
                return Err(format!(
                    "running as root, PostgreSQL needs the `{user}` user (apt-get install postgresql)"
                ));
            }
        }
        let mut server = PostgresServer {
            port: 0,
            dir,
            bin,
            run_as,
        };
        let data = server.data_dir();
        server.run(
            "initdb",
            &[
                "-D",
                path_str(&data)?,
                "-U",
                "postgres",
                "--auth=trust",
                "--no-sync",
                "-E",
                "UTF8",
            ],
        )?;
        let mut last = String::new();
        for _ in 0..START_TRIES {
            server.port = free_port();
            let options = format!(
                "-p {} -k {} -c listen_addresses=127.0.0.1 -c fsync=off -c max_connections=200",
                server.port,
                path_str(server.dir.path())?
            );
            let log = server.dir.path().join("server.log");
            match server.run(
                "pg_ctl",
                &[
                    "start",
                    "-w",
                    "-t",
                    "30",
                    "-D",
                    path_str(&data)?,
                    "-l",
                    path_str(&log)?,
                    "-o",
                    &options,
                ],
            ) {
                Ok(()) => return Ok(server),
                Err(e) => {
                    let log = std::fs::read_to_string(&log).unwrap_or_default();
                    last = format!("{e}\n{log}");
                }
            }
        }
        Err(format!("PostgreSQL did not start: {last}"))
    }

    /// The port it listens on (127.0.0.1).
    pub fn port(&self) -> u16 {
        self.port
    }

    /// A connection string for `tokio-postgres` / libpq: user `postgres`, database
    /// `postgres`, no password.
    pub fn url(&self) -> String {
        format!(
            "host=127.0.0.1 port={} user=postgres dbname=postgres",
            self.port
        )
    }

    fn data_dir(&self) -> PathBuf {
        self.dir.path().join("data")
    }

    /// Runs `<bin>/<tool> <args>` (as the server's user when root); `Err` with its output when
    /// it fails.
    fn run(&self, tool: &str, args: &[&str]) -> Result<(), String> {
        let exe = self.bin.join(tool);
        let mut cmd = match &self.run_as {
            Some(user) => {
                let mut c = Command::new("runuser");
                c.args(["-u", user, "--"]).arg(&exe);
                c
            }
            None => Command::new(&exe),
        };
        let out: Output = cmd
            .args(args)
            .current_dir(self.dir.path())
            .output()
            .map_err(|e| format!("cannot run {}: {e}", exe.display()))?;
        if out.status.success() {
            Ok(())
        } else {
            Err(format!(
                "{tool} failed ({}): {}{}",
                out.status,
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            ))
        }
    }
}

impl Drop for PostgresServer {
    fn drop(&mut self) {
        if let Ok(data) = path_str(&self.data_dir()) {
            let data = data.to_string();
            let _ = self.run("pg_ctl", &["stop", "-m", "immediate", "-D", &data]);
        }
    }
}

/// The directory of `initdb` and `pg_ctl`: `PG_BIN`, else the newest Debian install.
fn pg_bin() -> Result<PathBuf, String> {
    if let Ok(dir) = std::env::var("PG_BIN") {
        return Ok(PathBuf::from(dir));
    }
    let mut versions: Vec<(u32, PathBuf)> = std::fs::read_dir("/usr/lib/postgresql")
        .map_err(|_| "PostgreSQL is not installed: apt-get install postgresql (or set PG_BIN)")?
        .filter_map(|e| {
            let e = e.ok()?;
            let version = e.file_name().to_str()?.parse().ok()?;
            let bin = e.path().join("bin");
            bin.join("initdb").exists().then_some((version, bin))
        })
        .collect();
    versions.sort();
    versions.pop().map(|(_, bin)| bin).ok_or_else(|| {
        "no initdb under /usr/lib/postgresql/*/bin: apt-get install postgresql".into()
    })
}

fn is_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).trim() == "0")
}

fn path_str(p: &Path) -> Result<&str, String> {
    p.to_str()
        .ok_or_else(|| format!("non-UTF-8 path {}", p.display()))
}

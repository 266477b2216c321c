//! A throwaway redis-server for the examples when `REDIS_URL` is not set: a free local port,
//! its own temp dir, no persistence; killed and removed on drop. Shared by the examples with
//! `#[path = "common/temp_redis.rs"] mod temp_redis;`.
#![allow(dead_code)]

use std::net::TcpListener;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use lockwise::redis;

/// The examples' error type.
pub type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// `REDIS_URL` if set, otherwise a fresh server (returned so it lives as long as needed).
pub fn url_or_start() -> Result<(String, Option<TempRedis>), BoxError> {
    url_or_start_with(&[])
}

/// [`url_or_start`], passing `extra` arguments to a server it starts.
pub fn url_or_start_with(extra: &[&str]) -> Result<(String, Option<TempRedis>), BoxError> {
    match std::env::var("REDIS_URL") {
        Ok(url) if !url.is_empty() => Ok((url, None)),
        _ => {
            let server = TempRedis::start_with(extra)?;
            Ok((server.url(), Some(server)))
        }
    }
}

// ---------------------------------------------------------------------------------------
// A throwaway redis-server for when REDIS_URL is not set.
// ---------------------------------------------------------------------------------------

/// A redis-server on a free local port in its own temp dir; killed and removed on drop.
pub struct TempRedis {
    child: Child,
    port: u16,
    dir: PathBuf,
}

impl TempRedis {
    pub fn start() -> Result<TempRedis, BoxError> {
        TempRedis::start_with(&[])
    }

    /// [`TempRedis::start`] with extra `redis-server` arguments (e.g.
    /// `--enable-debug-command local`).
    pub fn start_with(extra: &[&str]) -> Result<TempRedis, BoxError> {
        let bin = std::env::var("REDIS_SERVER_BIN").unwrap_or_else(|_| "redis-server".into());
        let mut last_err = String::new();
        // A free port can be taken between probing and binding: retry a few times.
        for attempt in 0..10 {
            let port = TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
            let dir = std::env::temp_dir().join(format!(
                "lockwise-example-{}-{}-{attempt}",
                std::process::id(),
                uuid::Uuid::new_v4().simple()
            ));
            std::fs::create_dir_all(&dir)?;
            let child = Command::new(&bin)
                .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
                .args(["--save", "", "--appendonly", "no", "--daemonize", "no"])
                .arg("--dir")
                .arg(&dir)
                .args(extra)
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn();
            let child = match child {
                Ok(child) => child,
                Err(e) => {
                    let _ = std::fs::remove_dir_all(&dir);
                    return Err(format!(
                        "cannot run {bin:?}: {e}\nInstall redis-server (bash scripts/with-redis.sh \
                         cargo run --example <name>), set REDIS_SERVER_BIN, or set REDIS_URL"
                    )
                    .into());
                }
            };
            let mut server = TempRedis { child, port, dir };
            match server.wait_ready(Duration::from_secs(5)) {
                Ok(()) => return Ok(server),
                Err(e) => last_err = e.to_string(), // Drop kills it and removes the dir
            }
        }
        Err(format!("redis-server did not start: {last_err}").into())
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/", self.port)
    }

    /// The server's process id (to SIGSTOP / SIGCONT it).
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    fn wait_ready(&mut self, timeout: Duration) -> Result<(), BoxError> {
        let deadline = Instant::now() + timeout;
        let client = redis::Client::open(self.url().as_str())?;
        loop {
            if let Some(status) = self.child.try_wait()? {
                return Err(format!("redis-server exited ({status})").into());
            }
            if let Ok(mut conn) = client.get_connection() {
                if redis::cmd("PING").query::<String>(&mut conn).is_ok() {
                    return Ok(());
                }
            }
            if Instant::now() >= deadline {
                return Err("no answer to PING".into());
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}

impl Drop for TempRedis {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

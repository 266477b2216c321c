//! A throwaway `redis-server`: a free local port, its own temp dir, no persistence; killed
//! (and its dir removed) on drop. `REDIS_SERVER_BIN` selects the binary.
//!
//! The tests' servers ([`RedisServer::start`]) answer `DEBUG` (`--enable-debug-command local`,
//! Redis 7) and a failed start panics. The examples go through [`url_or_start`]: the server
//! at `REDIS_URL` if set, else one from [`RedisServer::try_start_with`] without that option,
//! and a failed start is an error to report.

use std::net::TcpListener;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// How many free ports a start tries (a port can be taken between probing and binding).
const START_TRIES: usize = 20;

/// A redis-server process owned by one test or example; killed on drop.
pub struct RedisServer {
    port: u16,
    child: Option<Child>,
    dir: tempfile::TempDir,
    url: String,
    /// Pass `--enable-debug-command local` on every (re)start.
    debug_command: bool,
    /// The server binary, for every (re)start.
    bin: String,
}

/// A free local TCP port (racy by nature: callers retry when the spawn fails).
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .expect("bind an ephemeral port")
        .local_addr()
        .unwrap()
        .port()
}

/// Path of the redis-server binary (`REDIS_SERVER_BIN` or `redis-server` on PATH).
pub fn redis_server_bin() -> String {
    std::env::var("REDIS_SERVER_BIN").unwrap_or_else(|_| "redis-server".to_string())
}

/// `REDIS_URL` if set and not empty, otherwise a fresh server started with `extra` arguments
/// (returned so it lives as long as needed; dropping it stops it). For the examples.
pub fn url_or_start(extra: &[&str]) -> Result<(String, Option<RedisServer>), String> {
    match std::env::var("REDIS_URL") {
        Ok(url) if !url.is_empty() => Ok((url, None)),
        _ => {
            let server = RedisServer::try_start_with(extra, false)?;
            Ok((server.url().to_owned(), Some(server)))
        }
    }
}

/// Why one spawn gave no ready server.
enum SpawnError {
    /// The binary could not be run at all: no other port will help.
    Fatal(String),
    /// The server exited (port taken, bad arguments) or did not answer: try another port.
    Retry(String),
}

impl RedisServer {
    /// Start a fresh redis-server on a free port in a temp dir and wait until it answers.
    pub fn start() -> Self {
        Self::start_with(&[])
    }

    /// Like [`RedisServer::start`], with extra `redis-server` arguments.
    pub fn start_with(extra: &[&str]) -> Self {
        Self::try_start_with(extra, true).unwrap_or_else(|e| panic!("{e}"))
    }

    /// Like [`RedisServer::start_with`], but returns an error instead of panicking.
    /// `debug_command`: enable `DEBUG` (`--enable-debug-command local`, an option Redis 7
    /// added; an older server refuses to start with it) on this start and every restart.
    pub fn try_start_with(extra: &[&str], debug_command: bool) -> Result<Self, String> {
        Self::try_start_bin_with(&redis_server_bin(), extra, debug_command)
    }

    /// Like [`RedisServer::start_with`], running the server binary `bin` instead of
    /// [`redis_server_bin`] (for a test that needs a server built with an optional feature,
    /// such as TLS).
    pub fn start_bin_with(bin: &str, extra: &[&str]) -> Self {
        Self::try_start_bin_with(bin, extra, true).unwrap_or_else(|e| panic!("{e}"))
    }

    fn try_start_bin_with(bin: &str, extra: &[&str], debug_command: bool) -> Result<Self, String> {
        let mut last = String::new();
        for _ in 0..START_TRIES {
            let port = free_port();
            let mut server = RedisServer {
                port,
                child: None,
                dir: tempfile::tempdir().map_err(|e| format!("temp dir: {e}"))?,
                url: format!("redis://127.0.0.1:{port}/"),
                debug_command,
                bin: bin.to_string(),
            };
            match server.spawn(extra) {
                Ok(()) => return Ok(server),
                Err(SpawnError::Fatal(e)) => return Err(e),
                Err(SpawnError::Retry(e)) => last = e,
            }
        }
        Err(format!(
            "could not start redis-server ({last}; is it installed? set REDIS_SERVER_BIN)"
        ))
    }

    /// Runs the server on `self.port` in `self.dir` and waits (at most 5 s) until it answers
    /// PING.
    fn spawn(&mut self, extra: &[&str]) -> Result<(), SpawnError> {
        let port = self.port.to_string();
        let dir: PathBuf = self.dir.path().to_path_buf();
        let bin = &self.bin;
        let mut cmd = Command::new(bin);
        cmd.args([
            "--port",
            &port,
            "--bind",
            "127.0.0.1",
            "--save",
            "",
            "--appendonly",
            "no",
        ])
        .args(["--daemonize", "no"]);
        if self.debug_command {
            cmd.args(["--enable-debug-command", "local"]);
        }
        cmd.arg("--dir")
            .arg(&dir)
            .args(extra)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        let child = cmd.spawn().map_err(|e| {
            SpawnError::Fatal(format!(
                "cannot run {bin:?}: {e}\ninstall redis-server (bash scripts/with-redis.sh \
                 <cargo command>), set REDIS_SERVER_BIN, or (examples) set REDIS_URL"
            ))
        })?;
        self.child = Some(child);
        let deadline = Instant::now() + Duration::from_secs(5);
        while Instant::now() < deadline {
            match self.child.as_mut().unwrap().try_wait() {
                Ok(None) => {}
                Ok(Some(status)) => {
                    self.child = None;
                    // Port taken or bad args: try another port.
                    return Err(SpawnError::Retry(format!("redis-server exited ({status})")));
                }
                Err(e) => {
                    self.kill();
                    return Err(SpawnError::Retry(format!("redis-server: {e}")));
                }
            }
            if let Ok(client) = redis::Client::open(self.url.as_str()) {
                if let Ok(mut c) = client.get_connection() {
                    if redis::cmd("PING").query::<String>(&mut c).is_ok() {
                        return Ok(());
                    }
                }
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        self.kill();
        Err(SpawnError::Retry("no answer to PING".into()))
    }

    /// `redis://127.0.0.1:<port>/`
    pub fn url(&self) -> &str {
        &self.url
    }

    /// The TCP port the server listens on.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// OS process id of the server (for SIGSTOP / SIGCONT / SIGKILL); `None` once killed.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(|c| c.id())
    }

    /// Kill the server process (SIGKILL) and reap it.
    pub fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// Kill and start again on the same port with an empty dataset (restart without persistence).
    pub fn restart(&mut self) {
        self.kill();
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if self.respawn(&[]) {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        panic!("redis-server did not restart on port {}", self.port);
    }

    /// The server's data directory (where `dump.rdb` and `appendonlydir/` live).
    pub fn dir(&self) -> &std::path::Path {
        self.dir.path()
    }

    /// Start the server again after [`RedisServer::kill`], on the same port and in the same
    /// dir, with `extra` arguments: unlike [`RedisServer::restart`] it loads whatever the dir
    /// holds (an RDB snapshot, an AOF), as a real restart does.
    pub fn start_again_with(&mut self, extra: &[&str]) {
        assert!(
            self.child.is_none(),
            "start_again_with: the server still runs"
        );
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if self.respawn(extra) {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        panic!("redis-server did not restart on port {}", self.port);
    }

    /// One restart attempt on the same port: whether the server answers; panics if the
    /// binary cannot be run.
    fn respawn(&mut self, extra: &[&str]) -> bool {
        match self.spawn(extra) {
            Ok(()) => true,
            Err(SpawnError::Retry(_)) => false,
            Err(SpawnError::Fatal(e)) => panic!("{e}"),
        }
    }

    /// SIGKILL, then [`RedisServer::start_again_with`]: a crash and a restart that keeps the
    /// data dir.
    pub fn restart_keeping_data(&mut self, extra: &[&str]) {
        self.kill();
        self.start_again_with(extra);
    }

    /// Send a signal through kill(1), e.g. `"-STOP"` / `"-CONT"`.
    pub fn signal(&self, sig: &str) {
        let pid = self.pid().expect("signal: the server is not running");
        let status = Command::new("kill")
            .args([sig, &pid.to_string()])
            .status()
            .expect("run kill(1)");
        assert!(status.success(), "kill {sig} {pid} failed");
    }

    /// Pauses the server process (SIGSTOP): it accepts nothing and answers nothing until
    /// [`RedisServer::resume`]; clients see their response timeouts.
    ///
    /// ```no_run
    /// # fn demo(server: &lockwise_testkit::RedisServer) {
    /// server.pause();
    /// std::thread::sleep(std::time::Duration::from_millis(300));
    /// server.resume();
    /// # }
    /// ```
    pub fn pause(&self) {
        self.signal("-STOP");
    }

    /// Resumes a server paused with [`RedisServer::pause`] (SIGCONT).
    ///
    /// ```no_run
    /// # fn demo(server: &lockwise_testkit::RedisServer) {
    /// server.resume();
    /// # }
    /// ```
    pub fn resume(&self) {
        self.signal("-CONT");
    }

    /// A plain async connection for the test's own inspection and fault injection.
    pub async fn conn(&self) -> redis::aio::MultiplexedConnection {
        redis::Client::open(self.url.as_str())
            .unwrap()
            .get_multiplexed_async_connection()
            .await
            .expect("connect to test redis")
    }

    /// A plain blocking connection.
    pub fn sync_conn(&self) -> redis::Connection {
        redis::Client::open(self.url.as_str())
            .unwrap()
            .get_connection()
            .expect("connect to test redis")
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        self.kill();
    }
}

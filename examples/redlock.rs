//! Redlock over five throwaway redis-servers, printed as a story: a lock taken on all five,
//! a minority of nodes dies and the lock is still taken (on three), one more dies and no
//! majority is possible any more.
//!
//! ```text
//! cargo run --example redlock        # starts five redis-servers (REDIS_SERVER_BIN to choose)
//! ```
//!
//! Exits non-zero if a step does not behave as described.

use std::net::TcpListener;
use std::process::{Child, Command, ExitCode, Stdio};
use std::time::{Duration, Instant};

use lockwise::{Client, RedLockOptions, RedLockSet};

type BoxError = Box<dyn std::error::Error + Send + Sync>;

#[tokio::main]
async fn main() -> ExitCode {
    match run().await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}

async fn run() -> Result<(), BoxError> {
    let mut servers = Vec::new();
    for _ in 0..5 {
        servers.push(Server::start()?);
    }
    let mut clients = Vec::new();
    for s in &servers {
        clients.push(Client::connect(&s.url()).await?);
    }
    let set = RedLockSet::with_options(
        &clients,
        RedLockOptions::default()
            .ttl(Duration::from_secs(10))
            .node_timeout(Duration::from_millis(100)),
    );
    let lock = set.lock("report:daily");
    println!("five independent masters, quorum {}", set.quorum());

    let guard = lock.lock().await?;
    println!(
        "1. locked on {} nodes; validity {:?} of a 10 s TTL",
        guard.acquired_nodes(),
        guard.validity()
    );
    guard.unlock().await?;

    servers[0].kill();
    servers[1].kill();
    let started = Instant::now();
    let guard = lock
        .try_lock(Duration::from_secs(2), None)
        .await?
        .ok_or("not acquired with 3 of 5 nodes up")?;
    println!(
        "2. two nodes down: locked on {} nodes in {:?}",
        guard.acquired_nodes(),
        started.elapsed()
    );
    guard.unlock().await?;

    servers[2].kill();
    match lock.try_lock(Duration::from_secs(1), None).await {
        Err(e) => println!("3. three nodes down: no majority possible: {e}"),
        Ok(Some(_)) => return Err("acquired without a majority".into()),
        Ok(None) => return Err("expected an error, got a timeout".into()),
    }
    Ok(())
}

/// A redis-server on a free port, no persistence; killed on drop.
struct Server {
    child: Option<Child>,
    port: u16,
    _dir: tempfile::TempDir,
}

impl Server {
    fn start() -> Result<Server, BoxError> {
        let bin = std::env::var("REDIS_SERVER_BIN").unwrap_or_else(|_| "redis-server".into());
        let dir = tempfile::tempdir()?;
        let port = TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
        let child = Command::new(&bin)
            .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
            .args(["--save", "", "--appendonly", "no"])
            .arg("--dir")
            .arg(dir.path())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| format!("cannot run {bin:?}: {e} (set REDIS_SERVER_BIN)"))?;
        let server = Server {
            child: Some(child),
            port,
            _dir: dir,
        };
        let deadline = Instant::now() + Duration::from_secs(5);
        while Instant::now() < deadline {
            if std::net::TcpStream::connect(("127.0.0.1", port)).is_ok() {
                return Ok(server);
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        Err(format!("redis-server on port {port} did not start").into())
    }

    fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/", self.port)
    }

    fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.kill();
    }
}

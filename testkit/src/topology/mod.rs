//! Real local Redis Cluster and Sentinel topologies.
//!
//! [`RedisCluster`] starts `masters * (1 + replicas_per_master)` cluster-enabled `redis-server`s
//! (own port, own cluster-bus port, own temp dir, no persistence) and joins them with
//! `redis-cli --cluster create`. [`RedisSentinel`] starts a master, one replica and three
//! `redis-sentinel`s. Every process is SIGKILLed on drop; faults are real signals
//! (SIGKILL, SIGSTOP/SIGCONT through `kill(1)`).
//!
//! Every wait is bounded and panics with the last observed state, so a topology that does not
//! converge fails the test with a reason instead of hanging it. Missing binaries panic too:
//! `scripts/with-redis.sh` installs them. `REDIS_SERVER_BIN`, `REDIS_CLI_BIN` and
//! `REDIS_SENTINEL_BIN` select the binaries (`scripts/with-valkey.sh` points them at
//! `valkey-server`, `valkey-cli` and a `valkey-sentinel` link to `valkey-server`).
//!
//! The process plumbing (spawn, PING, signals, bounded waits) is here, the topologies in
//! `cluster.rs` and `sentinel.rs`.

mod cluster;
mod sentinel;

// Each binary that includes this module uses a different part of it.
#[allow(unused_imports)]
pub use cluster::{ClusterNode, RedisCluster, Role, CLUSTER_NODE_TIMEOUT_MS};
#[allow(unused_imports)]
pub use sentinel::{RedisSentinel, SENTINEL_MASTER_NAME};

use std::collections::HashMap;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::server::{free_port, redis_server_bin};

/// Number of hash slots in a Redis Cluster.
pub const SLOTS: u16 = 16384;

/// Path of `redis-cli` (`REDIS_CLI_BIN` or `redis-cli` on PATH).
pub fn redis_cli_bin() -> String {
    std::env::var("REDIS_CLI_BIN").unwrap_or_else(|_| "redis-cli".to_string())
}

/// Path of `redis-sentinel` (`REDIS_SENTINEL_BIN` or `redis-sentinel` on PATH).
pub fn redis_sentinel_bin() -> String {
    std::env::var("REDIS_SENTINEL_BIN").unwrap_or_else(|_| "redis-sentinel".to_string())
}

/// Panics with an install hint unless `bin --version` runs.
fn require_binary(bin: &str, package: &str) {
    let ok = Command::new(bin)
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .map(|s| s.success())
        .unwrap_or(false);
    assert!(
        ok,
        "`{bin}` is not runnable: install it (Debian: apt-get install {package}; \
         `bash scripts/with-redis.sh cargo test` does it) or point the matching *_BIN \
         variable at it"
    );
}

fn url(port: u16) -> String {
    format!("redis://127.0.0.1:{port}/")
}

/// A blocking connection with short connect/read/write timeouts (a paused node times out
/// instead of hanging the caller).
pub fn try_connect(port: u16) -> redis::RedisResult<redis::Connection> {
    let client = redis::Client::open(url(port))?;
    let con = client.get_connection_with_timeout(Duration::from_secs(1))?;
    con.set_read_timeout(Some(Duration::from_secs(2)))?;
    con.set_write_timeout(Some(Duration::from_secs(2)))?;
    Ok(con)
}

/// Whether the server on `port` answers PING within `timeout` (a raw socket, so a paused
/// process costs exactly `timeout`).
pub fn answers_ping(port: u16, timeout: Duration) -> bool {
    use std::io::{Read, Write};
    let deadline = Instant::now() + timeout;
    let addr = std::net::SocketAddr::from(([127, 0, 0, 1], port));
    let Ok(mut s) = std::net::TcpStream::connect_timeout(&addr, timeout) else {
        return false;
    };
    if s.write_all(b"PING\r\n").is_err() {
        return false;
    }
    let mut buf = Vec::new();
    let mut chunk = [0u8; 64];
    while !buf.ends_with(b"\r\n") {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() || s.set_read_timeout(Some(left)).is_err() {
            return false;
        }
        match s.read(&mut chunk) {
            Ok(0) | Err(_) => return false,
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
        }
    }
    buf.starts_with(b"+PONG")
}

/// Like [`try_connect`], panicking on failure.
pub fn connect(port: u16) -> redis::Connection {
    try_connect(port).unwrap_or_else(|e| panic!("connect to 127.0.0.1:{port}: {e}"))
}

fn query<T: redis::FromRedisValue>(port: u16, cmd: &redis::Cmd) -> Result<T, String> {
    let mut con = try_connect(port).map_err(|e| format!("{port}: connect: {e}"))?;
    cmd.query(&mut con).map_err(|e| format!("{port}: {e}"))
}

/// `field:value` lines of an INFO / CLUSTER INFO reply.
fn info_fields(text: &str) -> HashMap<String, String> {
    text.lines()
        .filter_map(|l| l.trim().split_once(':'))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

fn signal(pid: u32, sig: &str) {
    let status = Command::new("kill")
        .args([sig, &pid.to_string()])
        .status()
        .expect("run kill(1)");
    assert!(status.success(), "kill {sig} {pid} failed");
}

/// Poll `check` until it returns `Ok(v)`; panic with `what` and the last error after `timeout`.
fn wait_for<T>(what: &str, timeout: Duration, mut check: impl FnMut() -> Result<T, String>) -> T {
    let deadline = Instant::now() + timeout;
    let mut last;
    loop {
        match check() {
            Ok(v) => return v,
            Err(e) => last = e,
        }
        if Instant::now() >= deadline {
            panic!("timed out after {timeout:?} waiting for {what}; last state: {last}");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Whether a process we started is running, stopped (SIGSTOP) or gone (SIGKILL).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ProcState {
    /// Started and neither stopped nor killed.
    Running,
    /// Stopped with SIGSTOP; resumes on SIGCONT.
    Paused,
    /// Killed with SIGKILL; no process left.
    Killed,
}

/// One redis-server / redis-sentinel process owned by a topology.
struct Proc {
    port: u16,
    child: Option<Child>,
    paused: bool,
    dir: tempfile::TempDir,
}

impl Proc {
    /// Spawn `bin args` and wait until it answers PING. `None` if it exited (port taken) or
    /// never answered; the caller retries with other ports.
    fn spawn(bin: &str, args: &[String], port: u16, dir: tempfile::TempDir) -> Option<Proc> {
        let child = Command::new(bin)
            .args(args)
            .current_dir(dir.path())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot run {bin}: {e}"));
        let mut proc = Proc {
            port,
            child: Some(child),
            paused: false,
            dir,
        };
        let deadline = Instant::now() + Duration::from_secs(5);
        while Instant::now() < deadline {
            if proc.child.as_mut().unwrap().try_wait().unwrap().is_some() {
                proc.child = None;
                return None;
            }
            if query::<String>(port, &redis::cmd("PING")).is_ok() {
                return Some(proc);
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        proc.kill();
        None
    }

    fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(|c| c.id())
    }

    fn state(&self) -> ProcState {
        match (&self.child, self.paused) {
            (None, _) => ProcState::Killed,
            (Some(_), true) => ProcState::Paused,
            (Some(_), false) => ProcState::Running,
        }
    }

    fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill(); // SIGKILL also ends a stopped process
            let _ = c.wait();
        }
        self.paused = false;
    }

    fn pause(&mut self) {
        let pid = self.pid().expect("pause: process already killed");
        signal(pid, "-STOP");
        self.paused = true;
    }

    fn resume(&mut self) {
        let pid = self.pid().expect("resume: process already killed");
        signal(pid, "-CONT");
        self.paused = false;
    }

    /// Last lines of the process log (for panic messages).
    fn log_tail(&self, lines: usize) -> String {
        let text = std::fs::read_to_string(self.dir.path().join("redis.log")).unwrap_or_default();
        let all: Vec<&str> = text.lines().collect();
        all[all.len().saturating_sub(lines)..].join("\n")
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        self.kill();
    }
}

fn log_args(dir: &Path) -> Vec<String> {
    vec![
        "--dir".into(),
        dir.display().to_string(),
        "--logfile".into(),
        dir.join("redis.log").display().to_string(),
    ]
}

/// ROLE of one node: ("master" | "slave", master port for a replica).
fn role_of(port: u16) -> Result<(String, Option<u16>), String> {
    let v: redis::Value = query(port, &redis::cmd("ROLE"))?;
    let items = match v {
        redis::Value::Array(items) => items,
        other => return Err(format!("{port}: ROLE answered {other:?}")),
    };
    let role: String = redis::from_redis_value(items[0].clone()).map_err(|e| e.to_string())?;
    let master = if role == "slave" {
        items
            .get(2)
            .and_then(|v| redis::from_redis_value::<u16>(v.clone()).ok())
    } else {
        None
    };
    Ok((role, master))
}

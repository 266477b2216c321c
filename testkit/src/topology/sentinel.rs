//! A local Sentinel deployment: a master, a replica and three `redis-sentinel`s that fail
//! over for real.

use std::collections::HashMap;
use std::time::Duration;

use super::{
    free_port, info_fields, log_args, query, redis_sentinel_bin, redis_server_bin, require_binary,
    role_of, url, wait_for, Proc, ProcState,
};

/// Name the sentinels monitor.
pub const SENTINEL_MASTER_NAME: &str = "mymaster";

/// A local Sentinel deployment: one master, one replica (`--replicaof`), three sentinels
/// (quorum 2, down-after 1000 ms, failover-timeout 5000 ms).
pub struct RedisSentinel {
    /// Data servers: the initial master first, then the replica.
    servers: Vec<Proc>,
    sentinels: Vec<Proc>,
    /// Master at the last [`RedisSentinel::kill_master`] (what a failover moves away from).
    failed_master: Option<u16>,
}

impl RedisSentinel {
    /// Start master, replica and sentinels; wait (bounded) until the replica is in sync and
    /// all three sentinels agree on the master, see the replica and see each other.
    pub fn start() -> RedisSentinel {
        require_binary(&redis_server_bin(), "redis-server");
        require_binary(&redis_sentinel_bin(), "redis-sentinel");
        let master = Self::spawn_server(None);
        let replica = Self::spawn_server(Some(master.port));
        let master_port = master.port;
        let sentinels = (0..3).map(|_| Self::spawn_sentinel(master_port)).collect();
        let s = RedisSentinel {
            servers: vec![master, replica],
            failed_master: None,
            sentinels,
        };
        s.wait_healthy(Duration::from_secs(30));
        s
    }

    fn spawn_server(replica_of: Option<u16>) -> Proc {
        for _ in 0..20 {
            let port = free_port();
            let dir = tempfile::tempdir().expect("temp dir");
            let mut args: Vec<String> = [
                "--port",
                &port.to_string(),
                "--bind",
                "127.0.0.1",
                "--save",
                "",
                "--appendonly",
                "no",
                "--daemonize",
                "no",
                "--enable-debug-command",
                "local",
                // Replicas sync at once instead of after the default 5 s diskless delay.
                "--repl-diskless-sync-delay",
                "0",
            ]
            .iter()
            .map(|s| s.to_string())
            .collect();
            if let Some(m) = replica_of {
                args.extend(["--replicaof".into(), "127.0.0.1".into(), m.to_string()]);
            }
            args.extend(log_args(dir.path()));
            if let Some(p) = Proc::spawn(&redis_server_bin(), &args, port, dir) {
                return p;
            }
        }
        panic!("could not start redis-server (20 attempts)");
    }

    fn spawn_sentinel(master_port: u16) -> Proc {
        for _ in 0..20 {
            let port = free_port();
            let dir = tempfile::tempdir().expect("temp dir");
            // Sentinel rewrites its config file (myid, known replicas and sentinels), so it
            // lives in the sentinel's own writable temp dir.
            let conf = dir.path().join("sentinel.conf");
            let d = dir.path().display();
            let m = SENTINEL_MASTER_NAME;
            let text = format!(
                "port {port}\nbind 127.0.0.1\nprotected-mode no\ndaemonize no\ndir {d}\n\
                 logfile {d}/redis.log\n\
                 sentinel monitor {m} 127.0.0.1 {master_port} 2\n\
                 sentinel down-after-milliseconds {m} 1000\n\
                 sentinel failover-timeout {m} 5000\n\
                 sentinel parallel-syncs {m} 1\n"
            );
            std::fs::write(&conf, text).expect("write sentinel.conf");
            let args = vec![conf.display().to_string()];
            if let Some(p) = Proc::spawn(&redis_sentinel_bin(), &args, port, dir) {
                return p;
            }
        }
        panic!("could not start redis-sentinel (20 attempts)");
    }

    fn server(&self, port: u16) -> &Proc {
        self.servers
            .iter()
            .chain(&self.sentinels)
            .find(|p| p.port == port)
            .unwrap_or_else(|| panic!("no process on port {port}"))
    }

    fn server_mut(&mut self, port: u16) -> &mut Proc {
        self.servers
            .iter_mut()
            .chain(&mut self.sentinels)
            .find(|p| p.port == port)
            .unwrap_or_else(|| panic!("no process on port {port}"))
    }

    fn live_sentinels(&self) -> Vec<u16> {
        self.sentinels
            .iter()
            .filter(|p| p.state() == ProcState::Running)
            .map(|p| p.port)
            .collect()
    }

    /// `redis://127.0.0.1:<port>/` of every sentinel.
    pub fn sentinel_urls(&self) -> Vec<String> {
        self.sentinels.iter().map(|p| url(p.port)).collect()
    }

    /// Ports of the sentinels.
    pub fn sentinel_ports(&self) -> Vec<u16> {
        self.sentinels.iter().map(|p| p.port).collect()
    }

    /// The monitored master's name (`mymaster`).
    pub fn master_name(&self) -> &'static str {
        SENTINEL_MASTER_NAME
    }

    /// Ports of the data servers (initial master first), whatever their state.
    pub fn server_ports(&self) -> Vec<u16> {
        self.servers.iter().map(|p| p.port).collect()
    }

    /// The master's port according to the first sentinel that answers.
    pub fn master_port(&self) -> u16 {
        for port in self.live_sentinels() {
            if let Ok(Some(p)) = sentinel_master_addr(port) {
                return p;
            }
        }
        panic!("no sentinel knows the address of {SENTINEL_MASTER_NAME}");
    }

    /// Data servers that are not the current master and not killed.
    pub fn replica_ports(&self) -> Vec<u16> {
        let master = self.master_port();
        self.servers
            .iter()
            .filter(|p| p.port != master && p.state() != ProcState::Killed)
            .map(|p| p.port)
            .collect()
    }

    /// PID of a server or sentinel (None once killed).
    pub fn pid(&self, port: u16) -> Option<u32> {
        self.server(port).pid()
    }

    /// SIGKILL the current master; returns its port. Follow with
    /// [`RedisSentinel::wait_for_failover`].
    pub fn kill_master(&mut self) -> u16 {
        let port = self.master_port();
        self.server_mut(port).kill();
        self.failed_master = Some(port);
        port
    }

    /// SIGSTOP the current master; returns its port. Follow with
    /// [`RedisSentinel::wait_for_failover`] (a stall past down-after fails it over) and
    /// [`RedisSentinel::resume`].
    pub fn pause_master(&mut self) -> u16 {
        let port = self.master_port();
        self.server_mut(port).pause();
        self.failed_master = Some(port);
        port
    }

    /// Wait until the server on `port` answers ROLE as a replica of `master` (a deposed
    /// master that the sentinels reconfigured).
    pub fn wait_replica_of(&self, port: u16, master: u16, timeout: std::time::Duration) {
        wait_for(
            &format!("{port} to become a replica of {master}"),
            timeout,
            || match role_of(port)? {
                (role, Some(m)) if role == "slave" && m == master => Ok(()),
                other => Err(format!("{port} has role {other:?}")),
            },
        )
    }

    /// Wait until every running sentinel names the same master, different from the one the
    /// last [`RedisSentinel::kill_master`] killed (or the initial master), and that server
    /// answers ROLE as master. Returns the new master's port.
    pub fn wait_for_failover(&self, timeout: Duration) -> u16 {
        let old_master = self.failed_master.unwrap_or_else(|| self.servers[0].port);
        wait_for(
            &format!("a sentinel failover away from {old_master}"),
            timeout,
            || {
                let mut seen = Vec::new();
                for port in self.live_sentinels() {
                    seen.push(sentinel_master_addr(port)?);
                }
                let first = seen.first().copied().flatten();
                match first {
                    Some(p) if p != old_master && seen.iter().all(|s| *s == Some(p)) => {
                        let role = role_of(p)?;
                        if role.0 == "master" {
                            Ok(p)
                        } else {
                            Err(format!("{p} named master but ROLE is {role:?}"))
                        }
                    }
                    _ => Err(format!("sentinels name {seen:?}")),
                }
            },
        )
    }

    /// SIGKILL the replica (first non-master data server); returns its port.
    pub fn stop_replica(&mut self) -> u16 {
        let port = *self.replica_ports().first().expect("no replica left");
        self.server_mut(port).kill();
        port
    }

    /// SIGSTOP the replica (first non-master data server); returns its port.
    pub fn pause_replica(&mut self) -> u16 {
        let port = *self.replica_ports().first().expect("no replica left");
        self.server_mut(port).pause();
        port
    }

    /// SIGKILL any server or sentinel.
    pub fn kill(&mut self, port: u16) {
        self.server_mut(port).kill();
    }

    /// SIGSTOP any server or sentinel.
    pub fn pause(&mut self, port: u16) {
        self.server_mut(port).pause();
    }

    /// SIGCONT a paused server or sentinel.
    pub fn resume(&mut self, port: u16) {
        self.server_mut(port).resume();
    }

    /// Wait until every running sentinel names the same running master, sees every running
    /// replica as healthy (no s_down / disconnected, link ok) and sees the other running
    /// sentinels, and every running replica's link to the master is up.
    pub fn wait_healthy(&self, timeout: Duration) {
        wait_for("a healthy sentinel deployment", timeout, || {
            self.check_healthy()
        })
    }

    fn check_healthy(&self) -> Result<(), String> {
        let sentinels = self.live_sentinels();
        let mut master = None;
        for &s in &sentinels {
            let m = sentinel_master_addr(s)?;
            match (master, m) {
                (_, None) => return Err(format!("sentinel {s} knows no master")),
                (None, Some(p)) => master = Some(p),
                (Some(a), Some(b)) if a != b => {
                    return Err(format!("sentinels disagree: {a} vs {b}"));
                }
                _ => {}
            }
        }
        let master = master.ok_or("no running sentinel")?;
        if self.server(master).state() != ProcState::Running {
            return Err(format!("master {master} is not running"));
        }
        let replicas: Vec<u16> = self
            .servers
            .iter()
            .filter(|p| p.port != master && p.state() == ProcState::Running)
            .map(|p| p.port)
            .collect();
        for &r in &replicas {
            let info: String = query(r, redis::cmd("INFO").arg("replication"))?;
            let info = info_fields(&info);
            if info.get("master_link_status").map(String::as_str) != Some("up")
                || info.get("master_port") != Some(&master.to_string())
            {
                return Err(format!("replica {r} not in sync with {master}: {info:?}"));
            }
        }
        for &s in &sentinels {
            let m = sentinel_entries(s, "MASTER")?;
            let flags = m.first().and_then(|e| e.get("flags")).cloned();
            if flags.as_deref() != Some("master") {
                return Err(format!("sentinel {s}: master flags {flags:?}"));
            }
            let seen = sentinel_entries(s, "REPLICAS")?;
            for &r in &replicas {
                let e = seen
                    .iter()
                    .find(|e| e.get("port") == Some(&r.to_string()))
                    .ok_or_else(|| format!("sentinel {s} does not see replica {r}"))?;
                if e.get("flags").map(String::as_str) != Some("slave")
                    || e.get("master-link-status").map(String::as_str) != Some("ok")
                {
                    return Err(format!("sentinel {s} sees replica {r} as {e:?}"));
                }
            }
            let peers = sentinel_entries(s, "SENTINELS")?;
            for &o in sentinels.iter().filter(|&&o| o != s) {
                let e = peers
                    .iter()
                    .find(|e| e.get("port") == Some(&o.to_string()))
                    .ok_or_else(|| format!("sentinel {s} does not see sentinel {o}"))?;
                if e.get("flags").map(String::as_str) != Some("sentinel") {
                    return Err(format!("sentinel {s} sees sentinel {o} as {e:?}"));
                }
            }
        }
        Ok(())
    }

    /// Last log lines of a server or sentinel (for diagnostics).
    pub fn log_tail(&self, port: u16, lines: usize) -> String {
        self.server(port).log_tail(lines)
    }
}

/// SENTINEL get-master-addr-by-name from one sentinel.
fn sentinel_master_addr(sentinel: u16) -> Result<Option<u16>, String> {
    let addr: Option<(String, String)> = query(
        sentinel,
        redis::cmd("SENTINEL")
            .arg("get-master-addr-by-name")
            .arg(SENTINEL_MASTER_NAME),
    )?;
    Ok(addr.and_then(|(_, p)| p.parse().ok()))
}

/// SENTINEL MASTER / REPLICAS / SENTINELS <name> as field maps (one per entry).
fn sentinel_entries(sentinel: u16, what: &str) -> Result<Vec<HashMap<String, String>>, String> {
    let v: redis::Value = query(
        sentinel,
        redis::cmd("SENTINEL").arg(what).arg(SENTINEL_MASTER_NAME),
    )?;
    let to_map = |v: &redis::Value| -> Result<HashMap<String, String>, String> {
        let flat: Vec<String> = redis::from_redis_value(v.clone()).map_err(|e| e.to_string())?;
        Ok(flat
            .chunks(2)
            .filter(|c| c.len() == 2)
            .map(|c| (c[0].clone(), c[1].clone()))
            .collect())
    };
    match &v {
        // SENTINEL MASTER: one flat array of fields.
        redis::Value::Array(_) if what == "MASTER" => Ok(vec![to_map(&v)?]),
        redis::Value::Array(items) => items.iter().map(to_map).collect(),
        other => Err(format!("SENTINEL {what} answered {other:?}")),
    }
}

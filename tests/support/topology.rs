//! Real local Redis Cluster and Sentinel topologies for the integration tests.
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
//! `REDIS_SENTINEL_BIN` select the binaries.
#![allow(dead_code)]

use std::collections::{BTreeMap, HashMap};
use std::fmt::Write as _;
use std::net::TcpListener;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use super::redis_server_bin;

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

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .expect("bind an ephemeral port")
        .local_addr()
        .unwrap()
        .port()
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
    Running,
    Paused,
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

// ---------------------------------------------------------------------------------------------
// Cluster
// ---------------------------------------------------------------------------------------------

/// Role of a cluster node, as the cluster sees it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    Master,
    Replica,
}

/// One node of a [`RedisCluster`] in the cluster's current view.
#[derive(Clone, Debug)]
pub struct ClusterNode {
    pub port: u16,
    pub pid: Option<u32>,
    pub id: String,
    pub role: Role,
    /// For a replica: the port of its master.
    pub master_port: Option<u16>,
    /// For a master: its slot ranges, inclusive.
    pub slots: Vec<(u16, u16)>,
    /// Process state as this fixture knows it.
    pub state: ProcState,
    /// Flagged `fail` / `pfail` by the node whose view this is.
    pub failing: bool,
}

/// One line of CLUSTER NODES.
#[derive(Clone, Debug, PartialEq, Eq)]
struct NodeLine {
    id: String,
    port: u16,
    flags: Vec<String>,
    master_id: Option<String>,
    slots: Vec<(u16, u16)>,
}

impl NodeLine {
    fn has(&self, flag: &str) -> bool {
        self.flags.iter().any(|f| f == flag)
    }
    fn is_master(&self) -> bool {
        self.has("master")
    }
    fn failing(&self) -> bool {
        self.has("fail") || self.has("fail?") || self.has("handshake") || self.has("noaddr")
    }
}

fn parse_cluster_nodes(text: &str) -> Vec<NodeLine> {
    let mut out = Vec::new();
    for line in text.lines().filter(|l| !l.trim().is_empty()) {
        let f: Vec<&str> = line.split_whitespace().collect();
        if f.len() < 8 {
            continue;
        }
        let addr = f[1].split(['@', ',']).next().unwrap_or("");
        let port = addr
            .rsplit(':')
            .next()
            .and_then(|p| p.parse().ok())
            .unwrap_or(0);
        let slots = f[8..]
            .iter()
            .filter(|s| !s.starts_with('['))
            .filter_map(|s| match s.split_once('-') {
                Some((a, b)) => Some((a.parse().ok()?, b.parse().ok()?)),
                None => s.parse().ok().map(|x| (x, x)),
            })
            .collect();
        out.push(NodeLine {
            id: f[0].to_string(),
            port,
            flags: f[2].split(',').map(str::to_string).collect(),
            master_id: (f[3] != "-").then(|| f[3].to_string()),
            slots,
        });
    }
    out
}

/// One node's view of the running nodes: port -> (is master, master port, slot ranges).
type Shape = BTreeMap<u16, (bool, Option<u16>, Vec<(u16, u16)>)>;

/// A local Redis Cluster: `masters` masters with `replicas_per_master` replicas each.
pub struct RedisCluster {
    procs: Vec<Proc>,
}

/// `--cluster-node-timeout` in milliseconds: low so failovers are quick.
pub const CLUSTER_NODE_TIMEOUT_MS: u64 = 1000;

impl RedisCluster {
    /// Start the servers, `redis-cli --cluster create` them, and wait (bounded) until every
    /// node reports `cluster_state:ok`, all 16384 slots are covered, every node agrees on the
    /// topology and every replica's link to its master is up.
    pub fn start(masters: usize, replicas_per_master: usize) -> RedisCluster {
        assert!(
            masters >= 3,
            "redis-cli --cluster create needs at least 3 masters"
        );
        require_binary(&redis_server_bin(), "redis-server");
        require_binary(&redis_cli_bin(), "redis-tools");
        let n = masters * (1 + replicas_per_master);
        let procs: Vec<Proc> = (0..n).map(|_| Self::spawn_node()).collect();
        let cluster = RedisCluster { procs };

        let mut create = Command::new(redis_cli_bin());
        create.arg("--cluster").arg("create");
        for p in &cluster.procs {
            create.arg(format!("127.0.0.1:{}", p.port));
        }
        create
            .args(["--cluster-replicas", &replicas_per_master.to_string()])
            .arg("--cluster-yes")
            .stdin(Stdio::null());
        let out = create.output().expect("run redis-cli --cluster create");
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success() && stdout.contains("All 16384 slots covered"),
            "redis-cli --cluster create failed ({}):\n{stdout}\n{}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );

        cluster.wait_healthy(Duration::from_secs(30));
        let masters_now = cluster.master_ports();
        assert_eq!(masters_now.len(), masters, "{}", cluster.describe());
        for m in masters_now {
            let r = cluster.replicas_of(m).len();
            assert_eq!(
                r,
                replicas_per_master,
                "replicas of {m}: {}",
                cluster.describe()
            );
        }
        cluster
    }

    /// One cluster-enabled server on a free port + free bus port (retrying on port races).
    fn spawn_node() -> Proc {
        for _ in 0..20 {
            let port = free_port();
            let bus = free_port();
            if bus == port {
                continue;
            }
            let dir = tempfile::tempdir().expect("temp dir");
            let mut args: Vec<String> = [
                "--port",
                &port.to_string(),
                "--cluster-port",
                &bus.to_string(),
                "--bind",
                "127.0.0.1",
                "--cluster-enabled",
                "yes",
                "--cluster-config-file",
                "nodes.conf",
                "--cluster-node-timeout",
                &CLUSTER_NODE_TIMEOUT_MS.to_string(),
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
            args.extend(log_args(dir.path()));
            if let Some(p) = Proc::spawn(&redis_server_bin(), &args, port, dir) {
                return p;
            }
        }
        panic!("could not start a cluster-enabled redis-server (20 attempts)");
    }

    fn proc(&self, port: u16) -> &Proc {
        self.procs
            .iter()
            .find(|p| p.port == port)
            .unwrap_or_else(|| panic!("no cluster node on port {port}"))
    }

    fn proc_mut(&mut self, port: u16) -> &mut Proc {
        self.procs
            .iter_mut()
            .find(|p| p.port == port)
            .unwrap_or_else(|| panic!("no cluster node on port {port}"))
    }

    fn live_ports(&self) -> Vec<u16> {
        self.procs
            .iter()
            .filter(|p| p.state() == ProcState::Running)
            .map(|p| p.port)
            .collect()
    }

    /// CLUSTER NODES as seen by one running node (the first that answers).
    fn view(&self) -> Vec<NodeLine> {
        for port in self.live_ports() {
            if let Ok(text) = query::<String>(port, redis::cmd("CLUSTER").arg("NODES")) {
                return parse_cluster_nodes(&text);
            }
        }
        panic!("no running cluster node answers CLUSTER NODES");
    }

    /// `redis://127.0.0.1:<port>/` of every node started (seed list for a cluster client).
    pub fn seed_urls(&self) -> Vec<String> {
        self.procs.iter().map(|p| url(p.port)).collect()
    }

    /// A sync cluster-aware client over [`RedisCluster::seed_urls`].
    pub fn client(&self) -> redis::cluster::ClusterClient {
        redis::cluster::ClusterClient::new(self.seed_urls()).expect("cluster client")
    }

    /// Every node with its role in the cluster's current view.
    pub fn nodes(&self) -> Vec<ClusterNode> {
        let view = self.view();
        let port_of: HashMap<&str, u16> = view.iter().map(|l| (l.id.as_str(), l.port)).collect();
        self.procs
            .iter()
            .map(|p| {
                let line = view
                    .iter()
                    .find(|l| l.port == p.port)
                    .unwrap_or_else(|| panic!("node {} missing from CLUSTER NODES", p.port));
                ClusterNode {
                    port: p.port,
                    pid: p.pid(),
                    id: line.id.clone(),
                    role: if line.is_master() {
                        Role::Master
                    } else {
                        Role::Replica
                    },
                    master_port: line
                        .master_id
                        .as_deref()
                        .and_then(|id| port_of.get(id).copied()),
                    slots: line.slots.clone(),
                    state: p.state(),
                    failing: line.failing(),
                }
            })
            .collect()
    }

    /// Ports of the masters that own slots.
    pub fn master_ports(&self) -> Vec<u16> {
        self.nodes()
            .into_iter()
            .filter(|n| n.role == Role::Master && !n.slots.is_empty())
            .map(|n| n.port)
            .collect()
    }

    /// Ports of the replicas of `master_port`.
    pub fn replicas_of(&self, master_port: u16) -> Vec<u16> {
        self.nodes()
            .into_iter()
            .filter(|n| n.role == Role::Replica && n.master_port == Some(master_port))
            .map(|n| n.port)
            .collect()
    }

    /// `(first slot, last slot, master port)` for every slot range, sorted.
    pub fn slot_map(&self) -> Vec<(u16, u16, u16)> {
        let mut out: Vec<(u16, u16, u16)> = self
            .view()
            .iter()
            .filter(|l| l.is_master() && !l.failing())
            .flat_map(|l| l.slots.iter().map(move |&(a, b)| (a, b, l.port)))
            .collect();
        out.sort_unstable();
        out
    }

    /// Port of the master serving `slot`.
    pub fn master_for_slot(&self, slot: u16) -> u16 {
        self.slot_map()
            .into_iter()
            .find(|&(a, b, _)| a <= slot && slot <= b)
            .map(|(_, _, port)| port)
            .unwrap_or_else(|| panic!("slot {slot} is not served by any master"))
    }

    /// CLUSTER KEYSLOT of `key`.
    pub fn key_slot(&self, key: &str) -> u16 {
        let port = *self.live_ports().first().expect("no running node");
        query(port, redis::cmd("CLUSTER").arg("KEYSLOT").arg(key)).unwrap()
    }

    /// PID of a node's process (None once killed).
    pub fn pid(&self, port: u16) -> Option<u32> {
        self.proc(port).pid()
    }

    /// Manual failover: CLUSTER FAILOVER on `replica_port`, then wait until it is a master,
    /// its former master (if running) is its replica, and the whole cluster is healthy again.
    /// Returns the former master's port.
    pub fn failover(&self, replica_port: u16) -> u16 {
        let node = self
            .nodes()
            .into_iter()
            .find(|n| n.port == replica_port)
            .unwrap();
        assert_eq!(
            node.role,
            Role::Replica,
            "failover: {replica_port} is not a replica"
        );
        let old_master = node.master_port.expect("replica without a master");
        let old_running = self.proc(old_master).state() == ProcState::Running;
        let deadline = Instant::now() + Duration::from_secs(30);
        // A manual failover aborts after 5 s if it cannot complete; ask again then.
        let mut sent_at: Option<Instant> = None;
        wait_for(
            &format!("CLUSTER FAILOVER of {old_master} to {replica_port}"),
            deadline - Instant::now(),
            || {
                if sent_at.is_none_or(|t| t.elapsed() > Duration::from_secs(6)) {
                    let ok: String = query(replica_port, redis::cmd("CLUSTER").arg("FAILOVER"))?;
                    if ok != "OK" {
                        return Err(format!("CLUSTER FAILOVER answered {ok}"));
                    }
                    sent_at = Some(Instant::now());
                }
                let role = role_of(replica_port)?;
                if role.0 != "master" {
                    return Err(format!("{replica_port} still {}", role.0));
                }
                if old_running {
                    let old = role_of(old_master)?;
                    if old != ("slave".to_string(), Some(replica_port)) {
                        return Err(format!("old master {old_master} is {old:?}"));
                    }
                }
                Ok(())
            },
        );
        self.wait_healthy(deadline.saturating_duration_since(Instant::now()));
        old_master
    }

    /// SIGKILL a node (and reap it). The cluster fails a killed master over to one of its
    /// replicas on its own after about the node timeout; see [`RedisCluster::wait_healthy`].
    pub fn kill(&mut self, port: u16) {
        self.proc_mut(port).kill();
    }

    /// SIGSTOP a node.
    pub fn pause(&mut self, port: u16) {
        self.proc_mut(port).pause();
    }

    /// SIGCONT a paused node.
    pub fn resume(&mut self, port: u16) {
        self.proc_mut(port).resume();
    }

    /// Wait until every running node says `cluster_state:ok` with all slots ok, no slot is
    /// left on a killed or paused master (so after killing a master this waits for the
    /// automatic failover), all running nodes agree on roles and slots and see no running node
    /// as failing, and every running replica's replication link is up. Panics with the last
    /// disagreement after `timeout`.
    pub fn wait_healthy(&self, timeout: Duration) {
        wait_for("a healthy cluster", timeout, || self.check_healthy());
    }

    fn check_healthy(&self) -> Result<(), String> {
        let live = self.live_ports();
        let mut reference: Option<(u16, Shape)> = None;
        for &port in &live {
            let info: String = query(port, redis::cmd("CLUSTER").arg("INFO"))?;
            let info = info_fields(&info);
            let field = |k: &str| info.get(k).map(String::as_str).unwrap_or("?").to_string();
            if field("cluster_state") != "ok" || field("cluster_slots_ok") != SLOTS.to_string() {
                return Err(format!(
                    "{port}: cluster_state={} slots_ok={} slots_pfail={} slots_fail={}",
                    field("cluster_state"),
                    field("cluster_slots_ok"),
                    field("cluster_slots_pfail"),
                    field("cluster_slots_fail")
                ));
            }
            if field("cluster_known_nodes") != self.procs.len().to_string() {
                return Err(format!(
                    "{port}: knows {} nodes",
                    field("cluster_known_nodes")
                ));
            }
            let text: String = query(port, redis::cmd("CLUSTER").arg("NODES"))?;
            let lines = parse_cluster_nodes(&text);
            let port_of: HashMap<&str, u16> =
                lines.iter().map(|l| (l.id.as_str(), l.port)).collect();
            if let Some(l) = lines
                .iter()
                .find(|l| l.is_master() && !l.slots.is_empty() && !live.contains(&l.port))
            {
                return Err(format!(
                    "{port} still sees slots {:?} on stopped master {}",
                    l.slots, l.port
                ));
            }
            let mut shape = BTreeMap::new();
            for l in lines.iter().filter(|l| live.contains(&l.port)) {
                if l.failing() {
                    return Err(format!("{port} sees {} as {:?}", l.port, l.flags));
                }
                let master = l
                    .master_id
                    .as_deref()
                    .and_then(|id| port_of.get(id).copied());
                shape.insert(l.port, (l.is_master(), master, l.slots.clone()));
            }
            if shape.len() != live.len() {
                return Err(format!("{port} sees only {:?} of {live:?}", shape.keys()));
            }
            match &reference {
                None => reference = Some((port, shape)),
                Some((rport, r)) if *r != shape => {
                    return Err(format!("{rport} and {port} disagree: {r:?} vs {shape:?}"));
                }
                Some(_) => {}
            }
        }
        let (_, shape) = reference.ok_or("no running node")?;
        for (&port, (is_master, master, _)) in &shape {
            if *is_master {
                continue;
            }
            let info: String = query(port, redis::cmd("INFO").arg("replication"))?;
            let info = info_fields(&info);
            let link = info.get("master_link_status").map(String::as_str);
            let mport = info.get("master_port").and_then(|p| p.parse::<u16>().ok());
            if link != Some("up") || mport != *master {
                return Err(format!(
                    "replica {port}: link {link:?} to {mport:?}, cluster says {master:?}"
                ));
            }
        }
        Ok(())
    }

    /// Last log lines of one node (for diagnostics).
    pub fn log_tail(&self, port: u16, lines: usize) -> String {
        self.proc(port).log_tail(lines)
    }

    /// A readable dump of the cluster (roles, slots, process states) for assertion messages.
    pub fn describe(&self) -> String {
        let mut s = String::new();
        for n in self.nodes() {
            let _ = writeln!(
                s,
                "{} {:?} master={:?} slots={:?} {:?}{}",
                n.port,
                n.role,
                n.master_port,
                n.slots,
                n.state,
                if n.failing { " failing" } else { "" }
            );
        }
        s
    }
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

// ---------------------------------------------------------------------------------------------
// Sentinel
// ---------------------------------------------------------------------------------------------

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

//! A local Redis Cluster: cluster-enabled servers joined by `redis-cli --cluster create`,
//! inspected through CLUSTER NODES / CLUSTER INFO, failed over for real.

use std::collections::{BTreeMap, HashMap};
use std::fmt::Write as _;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use super::{
    free_port, info_fields, log_args, query, redis_cli_bin, redis_server_bin, require_binary,
    role_of, url, wait_for, Proc, ProcState, SLOTS,
};

/// Role of a cluster node, as the cluster sees it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    /// A master (flagged `master` in CLUSTER NODES), with or without slots.
    Master,
    /// Any node not flagged `master`: a replica of another node.
    Replica,
}

/// One node of a [`RedisCluster`] in the cluster's current view.
#[derive(Clone, Debug)]
pub struct ClusterNode {
    /// Client port on 127.0.0.1.
    pub port: u16,
    /// Process id of its `redis-server`; `None` once killed.
    pub pid: Option<u32>,
    /// Node id (40 hex characters) from CLUSTER NODES.
    pub id: String,
    /// Master or replica.
    pub role: Role,
    /// For a replica: the port of its master.
    pub master_port: Option<u16>,
    /// For a master: its slot ranges, inclusive.
    pub slots: Vec<(u16, u16)>,
    /// Process state as this fixture knows it.
    pub state: ProcState,
    /// Not usable in the view of the node asked: flagged `fail` or `fail?` (pfail), still in
    /// `handshake`, or without an address (`noaddr`).
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

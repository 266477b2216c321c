//! A RESP-aware fault proxy: a TCP proxy between Redis clients and one server that pairs every
//! request with its reply, so a fault hits exactly one command.
//!
//! A command connection's replies come back in request order (RESP2 and RESP3 alike), so the
//! proxy keeps, per connection, a queue of what to do with each reply as it forwards the
//! requests: deliver it, swallow it (the second reply of a command sent twice), hold it back,
//! drop it, or reset the connection instead of delivering it. RESP3 push frames (`>`) are not
//! replies and always go through; attributes (`|`) travel with the reply they precede; maps,
//! sets, big numbers, verbatim strings, doubles, booleans and nulls are parsed as frames. A
//! connection that sends `SUBSCRIBE`, `SSUBSCRIBE` or `PSUBSCRIBE` (or anything the parser does
//! not understand, such as RESP3 streamed strings) becomes a plain pass-through.
//!
//! # Faults
//!
//! Each [`Fault`] is armed for the next command(s) matching a [`Match`] (command names and/or
//! an argument containing a substring, such as a key) with [`FaultProxy::arm`] (one shot) or
//! [`FaultProxy::arm_with`] (several shots, each with a probability):
//!
//! * [`Fault::DropReply`]: the command runs; its reply is withheld, and so are the replies
//!   behind it on that connection (replies are ordered: skipping one would hand the next reply
//!   to the wrong request). The connection is closed [`FaultProxy::set_drop_close_after`]
//!   later (default 1 s), so the client sees nothing until its response timeout, then a dead
//!   connection.
//! * [`Fault::HoldReply`]: the reply (and those behind it) is delivered after a delay.
//! * [`Fault::ResetAfterSend`]: the command is forwarded, the server runs it, and the
//!   connection is closed when its reply arrives, instead of delivering it.
//! * [`Fault::SendTwice`]: the command is forwarded twice back to back (the server runs it
//!   twice, as redis-rs's Cluster retry did after a lost connection); the client gets the
//!   first reply, the duplicate's reply is swallowed.
//!
//! Besides: [`FaultProxy::set_refuse_connections`], [`FaultProxy::set_connect_delay`],
//! [`FaultProxy::reset_connections`]. A server pause is a signal to the server process:
//! [`RedisServer::pause`](crate::RedisServer::pause) / [`RedisServer::resume`](crate::RedisServer::resume).
//!
//! # Cluster
//!
//! Cluster nodes tell clients their own addresses (CLUSTER SLOTS / SHARDS / NODES, `MOVED`,
//! `ASK`). Instead of rewriting those replies, [`proxy_cluster`] starts one proxy per node and
//! sets each node's `cluster-announce-port` to its proxy's port (`CONFIG SET`, at run time):
//! the nodes then announce the proxies in every reply and redirect, while the cluster bus
//! (its own `--cluster-port`) is untouched. A client seeded with [`FaultProxy::url`]s reaches
//! every node only through its proxy. After that, [`RedisCluster`](crate::topology::RedisCluster)'s
//! port-based helpers see the proxies' ports, so call them before.

// This file: the faults, the matching, the proxy's handle and `proxy_cluster`. `relay`
// forwards one connection (requests up, replies down, each reply with its request's fault);
// `resp` finds where each RESP frame ends and parses requests.
mod relay;
mod resp;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::net::TcpListener;
use tokio::sync::watch;

/// What happens to one command (see the module docs).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Fault {
    /// The command runs; the client never gets its reply (the connection closes later).
    DropReply,
    /// The command runs; its reply arrives this much later.
    HoldReply(Duration),
    /// The command runs; the connection is closed instead of delivering its reply.
    ResetAfterSend,
    /// The command runs twice; the client gets one reply.
    SendTwice,
}

/// Which commands a fault is armed for: command names (case-insensitive; empty: any) and
/// optionally an argument (after the name) containing a substring.
///
/// ```
/// use lockwise_testkit::faults::Match;
///
/// let m = Match::scripts().arg_contains("orders:42");
/// assert!(m.matches(&[b"EVALSHA".to_vec(), b"abc".to_vec(), b"1".to_vec(), b"lw:{orders:42}".to_vec()]));
/// assert!(!m.matches(&[b"GET".to_vec(), b"orders:42".to_vec()]));
/// ```
#[derive(Clone, Debug, Default)]
pub struct Match {
    commands: Vec<String>,
    arg: Option<Vec<u8>>,
}

impl Match {
    /// Every command.
    ///
    /// ```
    /// assert!(lockwise_testkit::faults::Match::any().matches(&[b"PING".to_vec()]));
    /// ```
    pub fn any() -> Match {
        Match::default()
    }

    /// Commands named `name` (or any other name added with another call).
    ///
    /// ```
    /// use lockwise_testkit::faults::Match;
    /// let m = Match::command("GET").or_command("SET");
    /// assert!(m.matches(&[b"set".to_vec(), b"k".to_vec(), b"v".to_vec()]));
    /// ```
    pub fn command(name: &str) -> Match {
        Match::default().or_command(name)
    }

    /// Adds a command name.
    ///
    /// ```
    /// let m = lockwise_testkit::faults::Match::command("EVAL").or_command("EVALSHA");
    /// assert!(m.matches(&[b"evalsha".to_vec()]));
    /// ```
    pub fn or_command(mut self, name: &str) -> Match {
        self.commands.push(name.to_ascii_uppercase());
        self
    }

    /// Script calls: EVAL, EVALSHA, their `_RO` forms, FCALL, FCALL_RO.
    ///
    /// ```
    /// assert!(lockwise_testkit::faults::Match::scripts().matches(&[b"FCALL".to_vec()]));
    /// ```
    pub fn scripts() -> Match {
        [
            "EVAL",
            "EVALSHA",
            "EVAL_RO",
            "EVALSHA_RO",
            "FCALL",
            "FCALL_RO",
        ]
        .iter()
        .fold(Match::default(), |m, c| m.or_command(c))
    }

    /// Only commands with an argument (after the name) containing `needle`, e.g. a key.
    ///
    /// ```
    /// use lockwise_testkit::faults::Match;
    /// let m = Match::any().arg_contains("cart");
    /// assert!(m.matches(&[b"GET".to_vec(), b"cart:7".to_vec()]));
    /// ```
    pub fn arg_contains(mut self, needle: impl AsRef<[u8]>) -> Match {
        self.arg = Some(needle.as_ref().to_vec());
        self
    }

    /// Whether a request (name first, then its arguments) matches.
    ///
    /// ```
    /// let m = lockwise_testkit::faults::Match::command("PING");
    /// assert!(m.matches(&[b"ping".to_vec()]));
    /// ```
    pub fn matches(&self, request: &[Vec<u8>]) -> bool {
        let Some(name) = request.first() else {
            return false;
        };
        if !self.commands.is_empty()
            && !self
                .commands
                .iter()
                .any(|c| c.as_bytes().eq_ignore_ascii_case(name))
        {
            return false;
        }
        match &self.arg {
            None => true,
            Some(needle) => request[1..]
                .iter()
                .any(|a| a.windows(needle.len().max(1)).any(|w| w == &needle[..])),
        }
    }
}

/// One fault the proxy injected: when, which, on what command.
#[derive(Clone, Debug)]
pub struct Fired {
    /// When the command was forwarded.
    pub at: Instant,
    /// The fault.
    pub fault: Fault,
    /// The command name and its first few arguments, lossily as text.
    pub command: String,
}

struct Armed {
    fault: Fault,
    when: Match,
    probability: f64,
    shots: u64,
}

struct Shared {
    upstream: u16,
    armed: Mutex<Vec<Armed>>,
    rng: Mutex<u64>,
    fired: Mutex<Vec<Fired>>,
    connections: AtomicU64,
    commands: AtomicU64,
    refuse: AtomicBool,
    connect_delay_ms: AtomicU64,
    drop_close_after_ms: AtomicU64,
    generation: watch::Sender<u64>,
}

impl Shared {
    /// xorshift64*: a probability draw without a dependency.
    fn draw(&self) -> f64 {
        let mut s = self.rng.lock().unwrap();
        *s ^= *s >> 12;
        *s ^= *s << 25;
        *s ^= *s >> 27;
        (s.wrapping_mul(0x2545_F491_4F6C_DD1D) >> 11) as f64 / (1u64 << 53) as f64
    }

    fn pick(&self, request: &[Vec<u8>]) -> Option<Fault> {
        self.commands.fetch_add(1, Ordering::Relaxed);
        let mut armed = self.armed.lock().unwrap();
        let i = armed.iter().position(|a| a.when.matches(request))?;
        if armed[i].probability < 1.0 && self.draw() >= armed[i].probability {
            return None;
        }
        let fault = armed[i].fault;
        armed[i].shots -= 1;
        if armed[i].shots == 0 {
            armed.remove(i);
        }
        drop(armed);
        let command = request
            .iter()
            .take(6)
            .map(|a| String::from_utf8_lossy(&a[..a.len().min(80)]).into_owned())
            .collect::<Vec<_>>()
            .join(" ");
        self.fired.lock().unwrap().push(Fired {
            at: Instant::now(),
            fault,
            command,
        });
        Some(fault)
    }
}

/// A RESP-aware fault proxy to `127.0.0.1:<upstream>`; see the module docs. Dropping it stops
/// accepting and ends every forwarded connection.
///
/// ```no_run
/// use lockwise_testkit::faults::{Fault, FaultProxy, Match};
/// use lockwise_testkit::RedisServer;
///
/// # async fn demo() {
/// let server = RedisServer::start();
/// let proxy = FaultProxy::start(server.port()).await;
/// // Clients connect to proxy.url(); the next script call on key "orders:42" runs, but its
/// // client never sees the reply:
/// proxy.arm(Fault::DropReply, Match::scripts().arg_contains("orders:42"));
/// # }
/// ```
pub struct FaultProxy {
    port: u16,
    shared: Arc<Shared>,
    accept: tokio::task::JoinHandle<()>,
}

impl FaultProxy {
    /// Listens on a free local port and forwards every connection to `127.0.0.1:<upstream>`.
    ///
    /// ```no_run
    /// # async fn demo(server: lockwise_testkit::RedisServer) {
    /// let proxy = lockwise_testkit::faults::FaultProxy::start(server.port()).await;
    /// let client = redis::Client::open(proxy.url()).unwrap();
    /// # }
    /// ```
    pub async fn start(upstream: u16) -> FaultProxy {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let shared = Arc::new(Shared {
            upstream,
            armed: Mutex::new(Vec::new()),
            rng: Mutex::new(0x9E37_79B9_7F4A_7C15 ^ u64::from(port)),
            fired: Mutex::new(Vec::new()),
            connections: AtomicU64::new(0),
            commands: AtomicU64::new(0),
            refuse: AtomicBool::new(false),
            connect_delay_ms: AtomicU64::new(0),
            drop_close_after_ms: AtomicU64::new(1000),
            generation: watch::channel(0).0,
        });
        let sh = shared.clone();
        let accept = tokio::spawn(async move {
            while let Ok((down, _)) = listener.accept().await {
                tokio::spawn(relay::serve(sh.clone(), down));
            }
        });
        FaultProxy {
            port,
            shared,
            accept,
        }
    }

    /// The port clients connect to.
    ///
    /// ```no_run
    /// # fn demo(proxy: &lockwise_testkit::faults::FaultProxy) {
    /// println!("127.0.0.1:{}", proxy.port());
    /// # }
    /// ```
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The upstream port (the server behind the proxy).
    ///
    /// ```no_run
    /// # fn demo(proxy: &lockwise_testkit::faults::FaultProxy) {
    /// println!("forwards to 127.0.0.1:{}", proxy.upstream());
    /// # }
    /// ```
    pub fn upstream(&self) -> u16 {
        self.shared.upstream
    }

    /// `redis://127.0.0.1:<port>/`: the server as seen through the proxy.
    ///
    /// ```no_run
    /// # async fn demo(proxy: &lockwise_testkit::faults::FaultProxy) {
    /// let client = redis::Client::open(proxy.url()).unwrap();
    /// # }
    /// ```
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/", self.port)
    }

    /// Arms `fault` for the next command matching `when` (one shot).
    ///
    /// ```no_run
    /// use lockwise_testkit::faults::{Fault, Match};
    /// # fn demo(proxy: &lockwise_testkit::faults::FaultProxy) {
    /// proxy.arm(Fault::ResetAfterSend, Match::scripts());
    /// # }
    /// ```
    pub fn arm(&self, fault: Fault, when: Match) {
        self.arm_with(fault, when, 1, 1.0);
    }

    /// Arms `fault` for up to `shots` matching commands, each hit with `probability`
    /// (a deterministic draw seeded by [`FaultProxy::seed`]). Faults armed earlier are tried
    /// first.
    ///
    /// ```no_run
    /// use std::time::Duration;
    /// use lockwise_testkit::faults::{Fault, Match};
    /// # fn demo(proxy: &lockwise_testkit::faults::FaultProxy) {
    /// proxy.seed(7);
    /// proxy.arm_with(Fault::HoldReply(Duration::from_millis(300)), Match::any(), 10, 0.1);
    /// # }
    /// ```
    pub fn arm_with(&self, fault: Fault, when: Match, shots: u64, probability: f64) {
        if shots == 0 {
            return;
        }
        self.shared.armed.lock().unwrap().push(Armed {
            fault,
            when,
            probability,
            shots,
        });
    }

    /// Seeds the probability draws of [`FaultProxy::arm_with`].
    ///
    /// ```no_run
    /// # fn demo(proxy: &lockwise_testkit::faults::FaultProxy) {
    /// proxy.seed(42);
    /// # }
    /// ```
    pub fn seed(&self, seed: u64) {
        *self.shared.rng.lock().unwrap() = seed | 1;
    }

    /// Disarms every fault not fired yet; returns how many were armed.
    ///
    /// ```no_run
    /// # fn demo(proxy: &lockwise_testkit::faults::FaultProxy) {
    /// proxy.disarm();
    /// # }
    /// ```
    pub fn disarm(&self) -> usize {
        std::mem::take(&mut *self.shared.armed.lock().unwrap()).len()
    }

    /// How many faults are armed and not fired yet.
    ///
    /// ```no_run
    /// # fn demo(proxy: &lockwise_testkit::faults::FaultProxy) {
    /// assert_eq!(proxy.armed(), 0);
    /// # }
    /// ```
    pub fn armed(&self) -> usize {
        self.shared.armed.lock().unwrap().len()
    }

    /// Every fault injected so far, in order.
    ///
    /// ```no_run
    /// # fn demo(proxy: &lockwise_testkit::faults::FaultProxy) {
    /// for f in proxy.fired() {
    ///     println!("{:?} on {}", f.fault, f.command);
    /// }
    /// # }
    /// ```
    pub fn fired(&self) -> Vec<Fired> {
        self.shared.fired.lock().unwrap().clone()
    }

    /// (connections accepted, commands seen on command connections) so far.
    ///
    /// ```no_run
    /// # fn demo(proxy: &lockwise_testkit::faults::FaultProxy) {
    /// let (connections, commands) = proxy.counts();
    /// # }
    /// ```
    pub fn counts(&self) -> (u64, u64) {
        (
            self.shared.connections.load(Ordering::Relaxed),
            self.shared.commands.load(Ordering::Relaxed),
        )
    }

    /// Closes new connections at once (`true`) or forwards them again.
    ///
    /// ```no_run
    /// # fn demo(proxy: &lockwise_testkit::faults::FaultProxy) {
    /// proxy.set_refuse_connections(true);
    /// # }
    /// ```
    pub fn set_refuse_connections(&self, refuse: bool) {
        self.shared.refuse.store(refuse, Ordering::Relaxed);
    }

    /// Delays every new connection's link to the server by `delay`.
    ///
    /// ```no_run
    /// # fn demo(proxy: &lockwise_testkit::faults::FaultProxy) {
    /// proxy.set_connect_delay(std::time::Duration::from_millis(500));
    /// # }
    /// ```
    pub fn set_connect_delay(&self, delay: Duration) {
        self.shared
            .connect_delay_ms
            .store(delay.as_millis() as u64, Ordering::Relaxed);
    }

    /// How long after a [`Fault::DropReply`] its connection is closed (default 1 s).
    ///
    /// ```no_run
    /// # fn demo(proxy: &lockwise_testkit::faults::FaultProxy) {
    /// proxy.set_drop_close_after(std::time::Duration::from_secs(2));
    /// # }
    /// ```
    pub fn set_drop_close_after(&self, after: Duration) {
        self.shared
            .drop_close_after_ms
            .store(after.as_millis() as u64, Ordering::Relaxed);
    }

    /// Closes every connection forwarded so far (clients reconnect through the proxy).
    ///
    /// ```no_run
    /// # fn demo(proxy: &lockwise_testkit::faults::FaultProxy) {
    /// proxy.reset_connections();
    /// # }
    /// ```
    pub fn reset_connections(&self) {
        self.shared.generation.send_modify(|g| *g += 1);
    }
}

impl Drop for FaultProxy {
    fn drop(&mut self) {
        self.accept.abort();
        self.reset_connections();
    }
}

/// One proxy per node of `cluster`, each node announcing its proxy's port (see the module
/// docs); waits (bounded: 10 s) until every node's CLUSTER SLOTS names only proxies. Seed the
/// client with the proxies' [`FaultProxy::url`]s.
///
/// ```no_run
/// # async fn demo() {
/// let cluster = lockwise_testkit::topology::RedisCluster::start(3, 0);
/// let proxies = lockwise_testkit::faults::proxy_cluster(&cluster).await;
/// let seeds: Vec<String> = proxies.iter().map(|p| p.url()).collect();
/// # }
/// ```
pub async fn proxy_cluster(cluster: &crate::topology::RedisCluster) -> Vec<FaultProxy> {
    let ports: Vec<u16> = cluster.nodes().iter().map(|n| n.port).collect();
    let mut proxies = Vec::new();
    for &port in &ports {
        let proxy = FaultProxy::start(port).await;
        let mut con = crate::topology::connect(port);
        redis::cmd("CONFIG")
            .arg("SET")
            .arg("cluster-announce-port")
            .arg(proxy.port())
            .query::<()>(&mut con)
            .unwrap_or_else(|e| panic!("{port}: CONFIG SET cluster-announce-port: {e}"));
        proxies.push(proxy);
    }
    let wanted: std::collections::BTreeSet<u16> = proxies.iter().map(|p| p.port()).collect();
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let mut last = String::new();
        let ok = ports.iter().all(|&port| {
            let slots: redis::RedisResult<redis::Value> = crate::topology::try_connect(port)
                .and_then(|mut c| redis::cmd("CLUSTER").arg("SLOTS").query(&mut c));
            let seen = match slots {
                Ok(v) => slot_ports(&v),
                Err(e) => {
                    last = format!("{port}: {e}");
                    return false;
                }
            };
            let good = !seen.is_empty() && seen.iter().all(|p| wanted.contains(p));
            if !good {
                last = format!("{port} announces {seen:?}, proxies {wanted:?}");
            }
            good
        });
        if ok {
            return proxies;
        }
        assert!(
            Instant::now() < deadline,
            "cluster nodes did not announce their proxies within 10 s: {last}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The node ports of a CLUSTER SLOTS reply.
fn slot_ports(v: &redis::Value) -> Vec<u16> {
    let mut out = Vec::new();
    if let redis::Value::Array(ranges) = v {
        for r in ranges {
            if let redis::Value::Array(items) = r {
                for node in items.iter().skip(2) {
                    if let redis::Value::Array(n) = node {
                        if let Some(redis::Value::Int(p)) = n.get(1) {
                            out.push(*p as u16);
                        }
                    }
                }
            }
        }
    }
    out
}

//! A Redisson-protocol peer for the interop tests: it plays the "Java service" that shares lock
//! names with lockwise, speaking the Redisson 3.45–4.7 wire format of
//! Redisson's own sources (keys, ARGV order, replies, pub/sub payloads) with its own
//! Lua ([`scripts`]) and a RESP2 subscriber (`pubsub.rs`).
//!
//! One [`RedissonPeer`] is one `RedissonClient`: a random v4 UUID id, script connections and a
//! pub/sub side. Lock owners are `<id>:<thread>` ([`RedissonPeer::owner`]). Leases are explicit
//! (`30000` mimics a watchdog lock; there is no watchdog: call [`RedissonPeer::renew`]).
//! Timestamps are this machine's wall clock in ms, as Redisson's `System.currentTimeMillis()`.
//!
//! | file | what |
//! |---|---|
//! | `mod.rs` | the peer, routing, ids, the wait loop, the message log |
//! | `names.rs` | key and channel names, the Cluster hash slot |
//! | `lock.rs` | RLock, non-reentrant lock, RFencedLock, RFairLock, LockTask renewal |
//! | `rwlock.rs` | RReadWriteLock and ReadLockTask renewal |
//! | `sync.rs` | RSemaphore, RPermitExpirableSemaphore, RCountDownLatch |
//! | `scripts.rs` | every Lua script |
//! | `pubsub.rs` | the subscriber connection and Redisson's listener semantics |
//!
//! Every received message is decoded as Java's `Long.valueOf` would; payloads it would reject
//! are listed by [`RedissonPeer::bad_payloads`].

mod lock;
mod names;
mod pubsub;
mod rwlock;
pub mod scripts;
mod sync;
pub mod sync_scripts;
#[cfg(test)]
mod tests;

pub use lock::NonReentrantReacquire;
pub use names::*;
pub use pubsub::java_long;

use std::collections::HashMap;
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use rand::Rng as _;
use redis::aio::MultiplexedConnection;
use redis::{FromRedisValue, RedisResult, Script};

use lockwise_testkit::topology::RedisCluster;
use pubsub::{Kind, Log, SubConn, Wake};

/// Redisson's `lockWatchdogTimeout` default: the lease of a lock taken without one (ms).
pub const WATCHDOG_LEASE_MS: u64 = 30_000;
/// Redisson's `fairLockWaitTimeout` default (ms).
pub const FAIR_LOCK_WAIT_TIMEOUT_MS: u64 = 300_000;
/// Redisson's `lockWatchdogBatchSize`: keys per renewal EVAL.
pub const RENEW_BATCH: usize = 100;
/// The "never expires" score of RPermitExpirableSemaphore.
pub const PES_NEVER: i64 = 922_337_203_685_477;

/// How the peer publishes and subscribes (Redisson's `getPublishCommand()`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// PUBLISH / SUBSCRIBE (single, sentinel, cluster without sharded pub/sub).
    Classic,
    /// SPUBLISH / SSUBSCRIBE (cluster with sharded pub/sub, Redisson's AUTO on Redis 7).
    Sharded,
}

/// Maps a key or channel name to the URL of the server that serves it.
type Route = Arc<dyn Fn(&str) -> String + Send + Sync>;

/// One Redisson client (see the module docs).
pub struct RedissonPeer {
    id: String,
    mode: Mode,
    route: Route,
    conns: tokio::sync::Mutex<HashMap<String, MultiplexedConnection>>,
    subs: tokio::sync::Mutex<HashMap<String, Arc<SubConn>>>,
    log: Arc<Mutex<Log>>,
    fair_wait_timeout_ms: u64,
    /// Renewal batches are grouped per hash slot (cluster setups), as Redisson's RenewalTask.
    per_slot: bool,
}

impl RedissonPeer {
    /// A peer on one server (standalone; PUBLISH/SUBSCRIBE).
    pub async fn connect(url: &str) -> RedissonPeer {
        let url = url.to_string();
        let mut peer = Self::connect_routed(Mode::Classic, move |_: &str| url.clone());
        peer.per_slot = false;
        peer.conn_for("").await;
        peer.sub_for("").await;
        peer
    }

    /// A peer on a Cluster with sharded pub/sub: every script runs on `route(first key)`,
    /// subscriptions use SSUBSCRIBE on `route(channel)`, publishes use SPUBLISH.
    pub fn connect_sharded(route: impl Fn(&str) -> String + Send + Sync + 'static) -> RedissonPeer {
        Self::connect_routed(Mode::Sharded, route)
    }

    /// A peer on `cluster` with sharded pub/sub, routing by a snapshot of its slot map (make a
    /// new peer after a failover).
    pub fn connect_cluster(cluster: &RedisCluster) -> RedissonPeer {
        let map = cluster.slot_map();
        Self::connect_sharded(move |key: &str| {
            let slot = key_slot(key.as_bytes());
            let port = map
                .iter()
                .find(|&&(a, b, _)| a <= slot && slot <= b)
                .map(|&(_, _, p)| p)
                .unwrap_or_else(|| panic!("slot {slot} of {key:?} has no master"));
            format!("redis://127.0.0.1:{port}/")
        })
    }

    /// A peer in `mode` whose connections go to `route(key or channel)` (e.g. a Cluster whose
    /// Java fleet runs `shardedSubscriptionMode = OFF`: `Mode::Classic` with slot routing).
    pub fn connect_routed(
        mode: Mode,
        route: impl Fn(&str) -> String + Send + Sync + 'static,
    ) -> RedissonPeer {
        RedissonPeer {
            id: uuid_v4(),
            mode,
            route: Arc::new(route),
            conns: tokio::sync::Mutex::new(HashMap::new()),
            subs: tokio::sync::Mutex::new(HashMap::new()),
            log: Arc::new(Mutex::new(Log::default())),
            fair_wait_timeout_ms: FAIR_LOCK_WAIT_TIMEOUT_MS,
            per_slot: true,
        }
    }

    /// The same peer with another `fairLockWaitTimeout` (the `wait` of fair scripts run
    /// without a caller's wait time).
    pub fn with_fair_wait_timeout(mut self, ms: u64) -> Self {
        self.fair_wait_timeout_ms = ms;
        self
    }

    /// The client id: a lower-case v4 UUID (36 chars).
    pub fn id(&self) -> &str {
        &self.id
    }

    /// The pub/sub mode.
    pub fn mode(&self) -> Mode {
        self.mode
    }

    /// The owner field of `thread`: `<id>:<thread>`.
    pub fn owner(&self, thread: u64) -> String {
        format!("{}:{thread}", self.id)
    }

    /// The write-lock owner field of `thread`: `<id>:<thread>:write`.
    pub fn write_owner(&self, thread: u64) -> String {
        format!("{}:{thread}:write", self.id)
    }

    /// The publish command scripts receive as ARGV: `publish` or `spublish`.
    pub fn publish_command(&self) -> &'static str {
        match self.mode {
            Mode::Classic => "publish",
            Mode::Sharded => "spublish",
        }
    }

    /// Every message received so far: (channel, payload), in arrival order.
    pub fn messages(&self) -> Vec<(String, Vec<u8>)> {
        self.log.lock().unwrap().all.clone()
    }

    /// The received payloads that Java's `Long.valueOf` would reject (a lost wake-up in
    /// Redisson); interop tests assert this stays empty.
    pub fn bad_payloads(&self) -> Vec<(String, Vec<u8>)> {
        self.log.lock().unwrap().bad.clone()
    }

    /// How many messages arrived on `channel`.
    pub fn wakeups(&self, channel: &str) -> u64 {
        self.log
            .lock()
            .unwrap()
            .counts
            .get(channel)
            .copied()
            .unwrap_or(0)
    }

    /// A script connection to the server of `key` (one per server, reused).
    pub async fn conn_for(&self, key: &str) -> MultiplexedConnection {
        let url = (self.route)(key);
        let mut conns = self.conns.lock().await;
        if let Some(c) = conns.get(&url) {
            return c.clone();
        }
        let client =
            redis::Client::open(url.as_str()).unwrap_or_else(|e| panic!("bad url {url}: {e}"));
        let conn = client
            .get_multiplexed_async_connection()
            .await
            .unwrap_or_else(|e| panic!("connect to {url}: {e}"));
        conns.insert(url, conn.clone());
        conn
    }

    async fn sub_for(&self, channel: &str) -> Arc<SubConn> {
        let url = (self.route)(channel);
        let mut subs = self.subs.lock().await;
        if let Some(s) = subs.get(&url) {
            return s.clone();
        }
        let sub =
            Arc::new(SubConn::connect(&url, self.mode == Mode::Sharded, self.log.clone()).await);
        subs.insert(url, sub.clone());
        sub
    }

    /// Runs `script` (EVALSHA, NOSCRIPT → load and retry) on the server of `keys[0]`.
    async fn eval<T: FromRedisValue>(
        &self,
        script: &Script,
        keys: &[&str],
        args: &[&[u8]],
    ) -> RedisResult<T> {
        let mut conn = self.conn_for(keys.first().copied().unwrap_or("")).await;
        let mut inv = script.prepare_invoke();
        for k in keys {
            inv.key(*k);
        }
        for a in args {
            inv.arg(*a);
        }
        inv.invoke_async(&mut conn).await
    }

    /// [`Self::eval`], panicking with `what` on an error reply.
    async fn run<T: FromRedisValue>(
        &self,
        what: &str,
        script: &Script,
        keys: &[&str],
        args: &[&[u8]],
    ) -> T {
        self.eval(script, keys, args)
            .await
            .unwrap_or_else(|e| panic!("redisson {what} on {keys:?}: {e}"))
    }

    /// DEL `key` on its server.
    async fn del(&self, key: &str) {
        let mut conn = self.conn_for(key).await;
        let _: i64 = redis::cmd("DEL")
            .arg(key)
            .query_async(&mut conn)
            .await
            .unwrap_or_else(|e| panic!("DEL {key}: {e}"));
    }

    /// GET `key` as a number (0 when absent), as `RSemaphore.availablePermits` and
    /// `RCountDownLatch.getCount` read it.
    async fn get_long(&self, key: &str) -> i64 {
        let mut conn = self.conn_for(key).await;
        let v: Option<i64> = redis::cmd("GET")
            .arg(key)
            .query_async(&mut conn)
            .await
            .unwrap_or_else(|e| panic!("GET {key}: {e}"));
        v.unwrap_or(0)
    }

    /// Subscribes to `channel` (refcounted), returning its wake-up state.
    async fn subscribe(&self, channel: &str, kind: Kind) -> Arc<Wake> {
        self.sub_for(channel).await.subscribe(channel, kind).await
    }

    /// Drops one reference to `channel`.
    async fn unsubscribe(&self, channel: &str) {
        self.sub_for(channel).await.unsubscribe(channel).await;
    }

    /// Redisson's wait loop (`RedissonLock.java`): try → subscribe → try again → wait on the channel for
    /// min(ttl, remaining) (the whole remaining time when ttl < 0) → retry; `None` on timeout.
    /// `attempt` gives `Ok` when acquired, `Err(ttl)` otherwise.
    async fn wait_loop<T, F, Fut>(
        &self,
        channel: &str,
        kind: Kind,
        wait: Duration,
        mut attempt: F,
    ) -> Option<T>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<T, i64>>,
    {
        let start = Instant::now();
        if let Ok(v) = attempt().await {
            return Some(v);
        }
        if start.elapsed() >= wait {
            return None;
        }
        let wake = self.subscribe(channel, kind).await;
        let out = loop {
            let ttl = match attempt().await {
                Ok(v) => break Some(v),
                Err(ttl) => ttl,
            };
            let remaining = wait.saturating_sub(start.elapsed());
            if remaining.is_zero() {
                break None;
            }
            let pause = match u64::try_from(ttl) {
                Ok(ms) if Duration::from_millis(ms) < remaining => Duration::from_millis(ms),
                _ => remaining,
            };
            wake.wait(pause).await;
            if start.elapsed() >= wait {
                break None;
            }
        };
        self.unsubscribe(channel).await;
        out
    }
}

/// Milliseconds since the Unix epoch (Java's `System.currentTimeMillis()`).
pub fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("clock after 1970")
        .as_millis() as i64
}

/// A random v4 UUID as `UUID.toString()` writes it (lower-case, 36 chars).
pub fn uuid_v4() -> String {
    let mut b: [u8; 16] = rand::rng().random();
    b[6] = (b[6] & 0x0f) | 0x40;
    b[8] = (b[8] & 0x3f) | 0x80;
    let h = hex(&b);
    format!(
        "{}-{}-{}-{}-{}",
        &h[0..8],
        &h[8..12],
        &h[12..16],
        &h[16..20],
        &h[20..32]
    )
}

/// A request id: 16 random bytes, lower-case hex (32 chars).
pub fn request_id() -> String {
    hex(&rand::rng().random::<[u8; 16]>())
}

/// The unlock latch TTL of one call: (timeout 3000 + EqualJitterDelay 1000..=2000) × 4
/// retry attempts, i.e. 16–20 s.
pub fn latch_ttl_ms() -> u64 {
    (3000 + rand::rng().random_range(1000..=2000)) * 4
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Decimal text of a number, as the scripts' arguments.
fn dec(v: impl std::fmt::Display) -> Vec<u8> {
    v.to_string().into_bytes()
}

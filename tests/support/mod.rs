//! Shared fixture for the integration tests: a throwaway `redis-server` per test.
//!
//! Every test gets its own server on a free port in a temp dir (no persistence), so
//! fault injection (CLIENT KILL, SCRIPT FLUSH, restart, DEBUG SLEEP) never disturbs another
//! test. `REDIS_SERVER_BIN` selects the binary. Clients still use unique key namespaces.
//!
//! # Layout
//!
//! Every test binary has `mod support;` (this file: inspection helpers, client builders, and
//! the server from `server.rs`). The rest is compiled only by the binaries that use it,
//! through `#[path]`:
//!
//! | file | what | included by |
//! |---|---|---|
//! | `support/mod.rs` | inspection and client helpers | every test binary |
//! | `support/server.rs` | [`RedisServer`]: the throwaway server launcher | every test binary (through `mod.rs`), the examples `bench`, `chaos`, `inventory`, `soak` |
//! | `support/checker/` | history checker of the fault suite: recording (`mod.rs`), checks (`checks.rs`) | `faults`, `deployments`, the child |
//! | `support/child.rs` | parent side of child processes (`ChildProc`) | `faults`, `lease_semaphore` |
//! | `support/test_child.rs` | the child process itself: the `test-child` example target | built on demand by `child.rs` |
//! | `support/topology/` | local Redis Cluster and Sentinel | `deployments` |
//! | `support/overtake.rs` | the overtake scenarios: a busy `Client`, a remote task's waits, a claimant leaving a free lock | `overtake`, `deployments` |
//! | `support/seen.rs` | what a metrics `DebuggingRecorder` saw, by name and labels (`Seen`) | `metrics`, `deployments` (with the `metrics` feature) |
//!
//! # Why not `redis-test`
//!
//! `redis-test` (the redis-rs team's fixture, 1.0.4 read for this) starts servers, clusters
//! and sentinels, but does not keep what these tests rely on, so it is not used:
//!
//! - Binaries: it reads `REDISRS_SERVER_BIN` (not `REDIS_SERVER_BIN`), asks `redis-server -v`
//!   from `PATH` for the version even when that variable points elsewhere, runs `redis-cli`
//!   from `PATH` for `--cluster create` and starts sentinels as `redis-server --sentinel`, so
//!   `REDIS_CLI_BIN` / `REDIS_SENTINEL_BIN` could not keep working.
//! - Restarts: no restart at all, neither on the same port with an empty dataset
//!   ([`RedisServer::restart`]) nor one that loads the data dir ([`RedisServer::restart_keeping_data`]),
//!   which the restart, RDB and AOF scenarios need; it passes no `--dir`, so a snapshot would
//!   land in the test's working directory.
//! - Readiness: `RedisServer::new` returns before the server answers; port races are not
//!   retried for a single server.
//! - Cluster: node timeout fixed at 5 s (ours 1 s, so failovers take seconds), an ACL user
//!   added to every node, the bus port left at port + 10000 (may collide with another test's
//!   random port), readiness judged from log lines; no kill / pause / failover by port and no
//!   view of roles and slots.
//! - Sentinel: always generates TLS keys with `openssl` (a 4096-bit CA key per deployment),
//!   quorum 1 and the default 30 s down-after, so a failover would take over 30 s; no waits
//!   for sentinels agreeing on the master, replicas or each other.
//!
//! What `server.rs` and `topology/` add instead is small: spawn with retries on port races,
//! PING until ready, SIGKILL / SIGSTOP / SIGCONT by pid, restart on the same port with or
//! without the data dir, bounded waits that panic with the last observed state.
#![allow(dead_code)]

pub mod kit;
pub mod server;

use std::time::{Duration, Instant};

use redis::AsyncCommands;

pub use server::RedisServer;

/// `try_lock` / `try_acquire` results in the shape they had before a timeout became
/// [`lockwise::Error::Timeout`]: `Ok(None)` on a timeout. The tests that check what a timed
/// out call left behind keep their assertions with it.
pub trait OrNone<T> {
    /// `Ok(Some(v))`, `Ok(None)` for [`lockwise::Error::Timeout`], or the error.
    fn or_none(self) -> lockwise::Result<Option<T>>;
}

impl<T> OrNone<T> for lockwise::Result<T> {
    fn or_none(self) -> lockwise::Result<Option<T>> {
        match self {
            Ok(v) => Ok(Some(v)),
            Err(e) if e.is_timeout() => Ok(None),
            Err(e) => Err(e),
        }
    }
}

/// A unique key namespace so tests sharing one server (REDIS_URL) never collide.
pub fn unique_ns(test: &str) -> String {
    format!("t-{test}-{}", uuid::Uuid::new_v4().simple())
}

/// Number of calls of a command (e.g. "evalsha", "eval") from INFO commandstats.
pub async fn command_calls(conn: &mut redis::aio::MultiplexedConnection, command: &str) -> u64 {
    let info: String = redis::cmd("INFO")
        .arg("commandstats")
        .query_async(conn)
        .await
        .unwrap();
    let needle = format!("cmdstat_{}:calls=", command.to_ascii_lowercase());
    info.lines()
        .find_map(|l| l.strip_prefix(&needle))
        .map(|rest| rest.split(',').next().unwrap().parse().unwrap())
        .unwrap_or(0)
}

/// Total script executions (EVALSHA + EVAL) so far.
pub async fn script_calls(conn: &mut redis::aio::MultiplexedConnection) -> u64 {
    command_calls(conn, "evalsha").await + command_calls(conn, "eval").await
}

/// PUBSUB NUMSUB of one channel.
pub async fn numsub(conn: &mut redis::aio::MultiplexedConnection, channel: &str) -> u64 {
    let v: Vec<(String, u64)> = redis::cmd("PUBSUB")
        .arg("NUMSUB")
        .arg(channel)
        .query_async(conn)
        .await
        .unwrap();
    v.first().map(|(_, n)| *n).unwrap_or(0)
}

/// Number of channels with at least one subscriber (PUBSUB CHANNELS).
pub async fn active_channels(conn: &mut redis::aio::MultiplexedConnection) -> Vec<String> {
    redis::cmd("PUBSUB")
        .arg("CHANNELS")
        .query_async(conn)
        .await
        .unwrap()
}

/// Whether no channel is subscribed on the server within `timeout` (every waiter gone).
pub async fn no_channels_within(conn: &Conn, timeout: Duration) -> bool {
    eventually(timeout, || {
        let mut c = conn.clone();
        async move { active_channels(&mut c).await.is_empty() }
    })
    .await
}

/// `CLIENT KILL TYPE pubsub`: drops every subscription connection; returns how many.
pub async fn kill_pubsub(conn: &mut Conn) -> i64 {
    redis::cmd("CLIENT")
        .arg("KILL")
        .arg("TYPE")
        .arg("pubsub")
        .query_async(conn)
        .await
        .unwrap()
}

/// A live `Client`'s presence key (`<ns>:client:{<id>}`, TTL = its watchdog timeout): the
/// client's own, not a lock's, so the "nothing left behind" checks leave it out.
pub fn is_presence(key: &str) -> bool {
    key.contains(":client:{")
}

/// Every key in the database with its PTTL (-1 = no TTL).
pub async fn keys_with_pttl(conn: &mut redis::aio::MultiplexedConnection) -> Vec<(String, i64)> {
    let keys: Vec<String> = conn.keys("*").await.unwrap();
    let mut out = Vec::new();
    for k in keys.into_iter().filter(|k| !is_presence(k)) {
        let pttl: i64 = conn.pttl(&k).await.unwrap();
        if pttl != -2 {
            out.push((k, pttl));
        }
    }
    out
}

/// Poll `check` until it returns true or `timeout` passes; returns whether it became true.
pub async fn eventually<F, Fut>(timeout: Duration, mut check: F) -> bool
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = Instant::now() + timeout;
    loop {
        if check().await {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Install a tracing subscriber once (RUST_LOG controls it); harmless if called often.
pub fn init_tracing() {
    let _ = tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .with_test_writer()
        .try_init();
}

/// A recorded critical section: [start, end) on this host's monotonic clock.
#[derive(Clone, Copy, Debug)]
pub struct Interval {
    pub start: Instant,
    pub end: Instant,
    pub who: usize,
}

/// Panics with the first pair of overlapping intervals, if any.
pub fn assert_no_overlap(intervals: &mut [Interval]) {
    intervals.sort_by_key(|i| i.start);
    for w in intervals.windows(2) {
        assert!(
            w[0].end <= w[1].start,
            "hold intervals overlap: {:?} and {:?}",
            w[0],
            w[1]
        );
    }
}

/// Runs a test body in its own spawned task, so it has a real tokio task id (the lock owner)
/// like application code; a panic inside is re-raised with its own message.
pub async fn in_task<F>(body: F)
where
    F: std::future::Future<Output = ()> + Send + 'static,
{
    if let Err(e) = tokio::spawn(body).await {
        if e.is_panic() {
            std::panic::resume_unwind(e.into_panic());
        }
        panic!("test task failed: {e}");
    }
}

/// The async connection type the tests inspect Redis with.
pub type Conn = redis::aio::MultiplexedConnection;

/// A lockwise client on `server` with key namespace `ns` and the given watchdog timeout.
pub async fn client(
    server: &RedisServer,
    ns: &str,
    watchdog: std::time::Duration,
) -> lockwise::Client {
    lockwise::Client::builder(server.url())
        .namespace(ns)
        .watchdog_timeout(watchdog)
        .build()
        .await
        .expect("build client")
}

/// Whether `key` exists.
pub async fn exists(conn: &mut Conn, key: &str) -> bool {
    let n: i64 = redis::cmd("EXISTS")
        .arg(key)
        .query_async(conn)
        .await
        .unwrap();
    n == 1
}

/// `HGET key field`, typed by the caller.
pub async fn hget<T: redis::FromRedisValue>(conn: &mut Conn, key: &str, field: &str) -> Option<T> {
    redis::cmd("HGET")
        .arg(key)
        .arg(field)
        .query_async(conn)
        .await
        .unwrap()
}

/// `n` independent servers (Redlock nodes).
pub fn servers(n: usize) -> Vec<RedisServer> {
    (0..n).map(|_| RedisServer::start()).collect()
}

/// One client per server, all with namespace `ns` (Redlock nodes).
pub async fn node_clients(servers: &[RedisServer], ns: &str) -> Vec<lockwise::Client> {
    let mut out = Vec::new();
    for s in servers {
        out.push(
            lockwise::Client::builder(s.url())
                .namespace(ns)
                .connect_timeout(Duration::from_secs(1))
                .build()
                .await
                .expect("build client"),
        );
    }
    out
}

/// One inspection connection per server.
pub async fn conns(servers: &[RedisServer]) -> Vec<Conn> {
    let mut out = Vec::new();
    for s in servers {
        out.push(s.conn().await);
    }
    out
}

/// Redlock node timeout for the tests: generous for a loaded 2-core machine (the default,
/// 50 ms, suits a quiet network).
pub const NODE_TIMEOUT: Duration = Duration::from_millis(400);

/// Redlock options for the tests: `ttl`, [`NODE_TIMEOUT`], 60 ms retry delay.
pub fn redlock_options(ttl: Duration) -> lockwise::RedLockOptions {
    lockwise::RedLockOptions::default()
        .ttl(ttl)
        .node_timeout(NODE_TIMEOUT)
        .retry_delay(Duration::from_millis(60))
}

/// Polls PUBSUB NUMSUB of `channel` until `pred` holds or `timeout` passes; returns whether it
/// held.
pub async fn numsub_until(
    conn: &Conn,
    channel: &str,
    timeout: Duration,
    pred: impl Fn(u64) -> bool,
) -> bool {
    eventually(timeout, || {
        let mut c = conn.clone();
        let ch = channel.to_string();
        let pred = &pred;
        async move { pred(numsub(&mut c, &ch).await) }
    })
    .await
}

/// Waits (at most 5 s) until the fair lock's queue holds `n` entries.
pub async fn queue_reaches(lock: &lockwise::FairLock, n: usize) {
    let ok = eventually(Duration::from_secs(5), || async {
        lock.queue_len().await.unwrap() == n
    })
    .await;
    assert!(
        ok,
        "queue length stayed {} (wanted {n})",
        lock.queue_len().await.unwrap()
    );
}

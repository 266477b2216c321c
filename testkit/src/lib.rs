//! Real throwaway Redis servers, Cluster and Sentinel topologies, fault injection and a
//! history checker for testing code that takes locks with `lockwise`, the way lockwise's
//! own suite tests itself. No mocks: every server is a real `redis-server` (or Valkey) on a
//! free local port in its own temporary directory, killed and removed on drop.
//!
//! * [`RedisServer`]: start, kill, restart (with or without its data), signal (`SIGSTOP`,
//!   `SIGCONT`, `SIGKILL`), connect. `REDIS_SERVER_BIN` picks the binary.
//! * [`topology`]: a local Redis Cluster (masters and replicas) and a Sentinel set, with
//!   failovers, kills and pauses of single nodes.
//! * [`faults`]: a RESP-aware fault proxy: drop, hold or duplicate one command's reply, or
//!   reset its connection after the server ran it; for one server or every node of a Cluster.
//! * [`checker`]: records every hold interval (and fencing token) of a run, across
//!   processes, and checks that no two holds of one lock overlap, that tokens rise, and that
//!   the server holds nothing no task believes it owns.
//! * [`PostgresServer`]: a throwaway PostgreSQL (`initdb` in a temp dir, a free port), for
//!   tests where the resource a lock protects is a real database table.
//! * The inspection helpers below: keys and their TTLs, subscribed channels, script calls.
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
//! What [`server`] and [`topology`] add instead is small: spawn with retries on port races,
//! PING until ready, SIGKILL / SIGSTOP / SIGCONT by pid, restart on the same port with or
//! without the data dir, bounded waits that panic with the last observed state.
//!
//! # Example
//!
//! ```no_run
//! use lockwise_testkit::RedisServer;
//!
//! # async fn demo() {
//! let server = RedisServer::start();
//! let mut conn = server.conn().await;
//! // ... run the code under test against server.url() ...
//! assert!(lockwise_testkit::keys_with_pttl(&mut conn).await.iter().all(|(_, pttl)| *pttl > 0));
//! # }
//! ```

#![warn(missing_docs)]

pub mod checker;
pub mod faults;
pub mod postgres;
pub mod server;
pub mod topology;

use std::time::{Duration, Instant};

use redis::AsyncCommands;

pub use postgres::PostgresServer;
pub use server::{url_or_start, RedisServer};

/// The async connection type the helpers inspect Redis with.
pub type Conn = redis::aio::MultiplexedConnection;

/// The waiter mark: the field of a lock hash that an attempt finding the lock taken sets
/// (see lockwise's `lua/unlock.lua`). Not a holder.
pub const WAITER_MARK: &str = "waiting";

/// Whether `field` of a lock hash names a holder: not a fenced lock's `token`, nor the
/// [`WAITER_MARK`] (owner fields start with a client uuid).
pub fn is_owner_field(field: &str) -> bool {
    field != "token" && field != WAITER_MARK
}

/// A unique key namespace so tests sharing one server (REDIS_URL) never collide.
pub fn unique_ns(test: &str) -> String {
    format!("t-{test}-{}", uuid::Uuid::new_v4().simple())
}

/// Number of calls of a command (e.g. "evalsha", "eval") from INFO commandstats.
pub async fn command_calls(conn: &mut Conn, command: &str) -> u64 {
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
pub async fn script_calls(conn: &mut Conn) -> u64 {
    command_calls(conn, "evalsha").await + command_calls(conn, "eval").await
}

/// PUBSUB NUMSUB of one channel.
pub async fn numsub(conn: &mut Conn, channel: &str) -> u64 {
    let v: Vec<(String, u64)> = redis::cmd("PUBSUB")
        .arg("NUMSUB")
        .arg(channel)
        .query_async(conn)
        .await
        .unwrap();
    v.first().map(|(_, n)| *n).unwrap_or(0)
}

/// Number of channels with at least one subscriber (PUBSUB CHANNELS).
pub async fn active_channels(conn: &mut Conn) -> Vec<String> {
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

/// Every key in the database with its PTTL (-1 = no TTL).
pub async fn keys_with_pttl(conn: &mut Conn) -> Vec<(String, i64)> {
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

/// One inspection connection per server.
pub async fn conns(servers: &[RedisServer]) -> Vec<Conn> {
    let mut out = Vec::new();
    for s in servers {
        out.push(s.conn().await);
    }
    out
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

/// A live `Client`'s presence key (`<ns>:client:{<id>}`, TTL = its watchdog timeout): the
/// client's own, not a lock's, so the "nothing left behind" checks leave it out.
pub fn is_presence(key: &str) -> bool {
    key.contains(":client:{")
}

/// A recorded critical section: [start, end) on this host's monotonic clock.
#[derive(Clone, Copy, Debug)]
pub struct Interval {
    /// When the critical section began (the lock was held).
    pub start: Instant,
    /// When the critical section ended (taken before the unlock is sent).
    pub end: Instant,
    /// Index of the task or worker that held the lock, for the panic message.
    pub who: usize,
}

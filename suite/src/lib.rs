//! What lockwise's integration tests share beyond the `lockwise-testkit` crate (the servers,
//! topologies, history checker and inspection helpers, re-exported here so every test names
//! them `suite::…`): lockwise clients for the tests, the `Ok(None)` shape of timeouts, and
//! the modules below. The test binaries (`tests/<area>/main.rs`) depend on this crate, whose
//! library is named `suite`.
//!
//! | module | what |
//! |---|---|
//! | [`kit`] | small helpers: clients with the suite's watchdog, key inspection, timeouts |
//! | [`lua`] | the engine's scripts as Redis receives them, for checks that run them directly |
//! | [`redisson`] | a Redisson-protocol peer (`RedissonPeer`): the "Java service" of the interop tests |
//! | [`child`] | the parent side of child processes (`ChildProc`) |
//! | [`proxy`] | a black-holing TCP fault proxy between a client and a server (`Proxy`) |
//! | [`scenarios`] | the overtake scenarios: a busy `Client`, a remote task's waits, a claimant leaving a free lock |
//! | [`seen`] | what a metrics `DebuggingRecorder` saw, by name and labels (`Seen`) |
//! | [`stock`] | the PostgreSQL stock table the fencing tests write with tokens |
//!
//! The child process itself is this crate's `test-child` binary (`src/bin/test-child/`).

pub mod child;
pub mod kit;
pub mod lua;
pub mod proxy;
pub mod redisson;
pub mod scenarios;
pub mod seen;
pub mod stock;

pub use lockwise_testkit::*;

use std::time::Duration;

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

/// Install a tracing subscriber once (RUST_LOG controls it); harmless if called often.
pub fn init_tracing() {
    let _ = tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .with_test_writer()
        .try_init();
}

/// Runs a test body in its own spawned task, so it has a real tokio task id (the lock owner)
/// like application code; returns its output, and a panic inside is re-raised with its own
/// message.
pub async fn in_task<F, T>(body: F) -> T
where
    F: std::future::Future<Output = T> + Send + 'static,
    T: Send + 'static,
{
    match tokio::spawn(body).await {
        Ok(v) => v,
        Err(e) if e.is_panic() => std::panic::resume_unwind(e.into_panic()),
        Err(e) => panic!("test task failed: {e}"),
    }
}

/// A lockwise client on `server` with key namespace `ns` and the given watchdog timeout.
pub async fn client(
    server: &RedisServer,
    ns: &str,
    watchdog: std::time::Duration,
) -> lockwise::Client {
    client_at(server.url(), ns, watchdog).await
}

/// A lockwise client of the server at `url` with key namespace `ns` and the given watchdog
/// timeout (a child process knows its server by URL).
pub async fn client_at(url: &str, ns: &str, watchdog: std::time::Duration) -> lockwise::Client {
    lockwise::Client::builder(url)
        .namespace(ns)
        .watchdog_timeout(watchdog)
        .build()
        .await
        .expect("build client")
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

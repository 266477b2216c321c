//! Fault injection on the server side (scenarios 3, 4, 5, 6, 8 and 11 of the fault matrix in tests/faults/): the
//! redis-server is stalled (SIGSTOP), paused (CLIENT PAUSE), put to sleep (DEBUG SLEEP), its
//! subscription connections are killed, its script cache is flushed and it runs out of memory,
//! while many tasks contend.
//!
//! Every scenario records a history (each hold interval on this host's monotonic clock, each
//! call's outcome) and checks it, not by eye: no two holds of one lock overlap (a hold ends when
//! its holder calls unlock or learns from `lost()` that the lock is gone, whichever comes
//! first), fencing tokens rise, no library key is without a TTL while the run goes on, no key
//! and no subscription is left after quiescence, no caller waits forever.
//!
//! Timings are short (watchdog ~1 s) so these scenarios stay well under 2.5 minutes on 2 cores.
//!
//! This file is the shared harness (contending tasks, history, TTL sampler, quiescence);
//! the scenarios are in `stall.rs` (the server stops, slows down or fills up) and `loss.rs`
//! (the server drops subscriptions or scripts, renewals race releases).
mod loss;
mod stall;

use suite::OrNone;

use suite::Conn;

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::checker;
use futures::StreamExt;
use lockwise::{Client, Error};
use suite::RedisServer;

/// Watchdog timeout (= TTL of a held lock) in the stall / slow-server scenarios.
const TTL: Duration = Duration::from_secs(1);

async fn client(url: &str, ns: &str, watchdog: Duration) -> Client {
    Client::builder(url)
        .namespace(ns)
        .watchdog_timeout(watchdog)
        .build()
        .await
        .expect("build client")
}

fn signal(pid: u32, sig: &str) {
    let ok = std::process::Command::new("kill")
        .arg(format!("-{sig}"))
        .arg(pid.to_string())
        .status()
        .expect("run kill")
        .success();
    assert!(ok, "kill -{sig} {pid} failed");
}

// ---------------------------------------------------------------------------------------
// History and checker
// ---------------------------------------------------------------------------------------

/// What happened to the calls of one scenario: the acquisitions go into the shared checker's
/// history ([`checker::History`]: overlaps within validity, fencing order); besides, outcome
/// counters and what a caller must never see.
#[derive(Default)]
struct History {
    acqs: checker::History,
    /// Outcome counters: "acquired", "try_lock-timeout", "lock-redis-retryable", ...
    counts: Mutex<BTreeMap<String, u64>>,
    /// Anything a caller must never see (non-typed or non-retryable errors, NOSCRIPT, ...).
    fatal: Mutex<Vec<String>>,
    /// Keys seen without a TTL while the run went on.
    no_ttl: Mutex<Vec<String>>,
    /// Longest single lock call (wait included).
    max_wait: Mutex<Duration>,
}

impl History {
    fn count(&self, what: &str) {
        *self.counts.lock().unwrap().entry(what.into()).or_default() += 1;
    }
    fn get(&self, what: &str) -> u64 {
        self.counts.lock().unwrap().get(what).copied().unwrap_or(0)
    }
    fn fatal(&self, what: String) {
        self.fatal.lock().unwrap().push(what);
    }
    fn waited(&self, d: Duration) {
        let mut m = self.max_wait.lock().unwrap();
        if d > *m {
            *m = d;
        }
    }

    fn summary(&self) -> String {
        format!(
            "{} holds, max wait {:?}, {:?}",
            self.acqs.ok_count(),
            *self.max_wait.lock().unwrap(),
            self.counts.lock().unwrap()
        )
    }
}

/// Every 50 ms: every key under `ns` must have a TTL (the library writes none without one in
/// these scenarios). Tolerates a stalled server (each probe is bounded).
fn spawn_ttl_sampler(
    conn: Conn,
    ns: String,
    hist: Arc<History>,
    stop: Arc<AtomicBool>,
) -> tokio::task::JoinHandle<u64> {
    tokio::spawn(async move {
        let mut samples = 0;
        while !stop.load(Ordering::Relaxed) {
            let mut c = conn.clone();
            let probe = async {
                let keys: Vec<String> = redis::cmd("KEYS")
                    .arg(format!("{ns}*"))
                    .query_async(&mut c)
                    .await?;
                let mut bad = Vec::new();
                for k in keys.into_iter().filter(|k| !is_fence(k)) {
                    let pttl: i64 = redis::cmd("PTTL").arg(&k).query_async(&mut c).await?;
                    if pttl == -1 {
                        bad.push(k);
                    }
                }
                redis::RedisResult::Ok(bad)
            };
            if let Ok(Ok(bad)) = tokio::time::timeout(Duration::from_millis(300), probe).await {
                samples += 1;
                // A key may be read between a script's HSET and PEXPIRE? No: scripts are
                // atomic. Any -1 is a real key without TTL.
                hist.no_ttl.lock().unwrap().extend(bad);
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        samples
    })
}

/// Fencing counters (`<ns>:fence:{name}`) are the one kind of key lockwise keeps on purpose,
/// without a TTL (invariant 7).
fn is_fence(key: &str) -> bool {
    key.contains(":fence:{")
}

/// Keys under `ns` with their PTTL, fencing counters excepted.
async fn keys_in(conn: &mut Conn, ns: &str) -> Vec<(String, i64)> {
    let keys: Vec<String> = redis::cmd("KEYS")
        .arg(format!("{ns}*"))
        .query_async(conn)
        .await
        .unwrap();
    let mut out = Vec::new();
    for k in keys
        .into_iter()
        .filter(|k| !is_fence(k) && !suite::is_presence(k))
    {
        let pttl: i64 = redis::cmd("PTTL").arg(&k).query_async(conn).await.unwrap();
        if pttl != -2 {
            out.push((k, pttl));
        }
    }
    out
}

/// After quiescence (the shared checker): no key under `ns` (holds whose unlock failed expire
/// within their TTL; fencing counters excepted), no channel subscribed, no key without TTL.
async fn assert_quiescent(conn: &Conn, ns: &str, within: Duration) {
    let t0 = Instant::now();
    let mut c = conn.clone();
    checker::assert_clean(&checker::check_quiescent(&mut c, ns, within).await);
    println!(
        "quiescent after {:?}: 0 keys, 0 subscriptions",
        t0.elapsed()
    );
}

// ---------------------------------------------------------------------------------------
// Contending tasks
// ---------------------------------------------------------------------------------------

/// Which lock kind a contending task uses.
#[derive(Clone, Copy, Debug)]
enum Kind {
    Reentrant,
    Lease,
    Fair,
    Fenced,
    Multi,
    /// A `SpinLock`: polls with backoff, never subscribes; shares the `RLock` hash.
    Spin,
    /// A `RwLock`'s write side (exclusive, like the others; its keys are its own).
    Write,
}

/// A held guard of any kind.
enum AnyGuard {
    R(lockwise::RLockGuard),
    F(lockwise::FairLockGuard),
    Fe(lockwise::FencedLockGuard),
    M(lockwise::MultiLockGuard),
    S(lockwise::SpinLockGuard),
    W(lockwise::WriteLockGuard),
}

impl AnyGuard {
    fn lost(&self) -> tokio_util::sync::CancellationToken {
        match self {
            AnyGuard::R(g) => g.lost(),
            AnyGuard::F(g) => g.lost(),
            AnyGuard::Fe(g) => g.lost(),
            AnyGuard::M(g) => g.lost(),
            AnyGuard::S(g) => g.lost(),
            AnyGuard::W(g) => g.lost(),
        }
    }
    fn owner(&self) -> &str {
        match self {
            AnyGuard::R(g) => g.owner(),
            AnyGuard::F(g) => g.owner(),
            AnyGuard::Fe(g) => g.owner(),
            AnyGuard::M(g) => g.owner(),
            AnyGuard::S(g) => g.owner(),
            AnyGuard::W(g) => g.owner(),
        }
    }
    fn lease(&self) -> Option<Duration> {
        match self {
            AnyGuard::R(g) => g.lease(),
            AnyGuard::F(g) => g.lease(),
            AnyGuard::Fe(g) => g.lease(),
            AnyGuard::M(g) => g.lease(),
            AnyGuard::S(g) => g.lease(),
            AnyGuard::W(g) => g.lease(),
        }
    }
    fn token(&self) -> Option<u64> {
        match self {
            AnyGuard::Fe(g) => Some(g.token()),
            _ => None,
        }
    }
    async fn unlock(self) -> lockwise::Result<()> {
        match self {
            AnyGuard::R(g) => g.unlock().await,
            AnyGuard::F(g) => g.unlock().await,
            AnyGuard::Fe(g) => g.unlock().await,
            AnyGuard::M(g) => g.unlock().await,
            AnyGuard::S(g) => g.unlock().await,
            AnyGuard::W(g) => g.unlock().await,
        }
    }
}

/// Names a kind's acquisition covers (a multi-lock holds two).
fn names_of(kind: Kind, name: &str) -> Vec<String> {
    match kind {
        Kind::Multi => vec![format!("{name}-a"), format!("{name}-b")],
        _ => vec![name.to_string()],
    }
}

async fn try_acquire(
    c: &Client,
    kind: Kind,
    name: &str,
    wait: Duration,
) -> lockwise::Result<Option<AnyGuard>> {
    Ok(match kind {
        Kind::Reentrant => c
            .lock(name)
            .try_lock(wait, None)
            .await
            .or_none()?
            .map(AnyGuard::R),
        Kind::Lease => c
            .lock(name)
            .try_lock(wait, Some(Duration::from_secs(2)))
            .await
            .or_none()?
            .map(AnyGuard::R),
        Kind::Fair => c
            .fair_lock(name)
            .try_lock(wait, None)
            .await
            .or_none()?
            .map(AnyGuard::F),
        Kind::Fenced => c
            .fenced_lock(name)
            .try_lock(wait, None)
            .await
            .or_none()?
            .map(AnyGuard::Fe),
        Kind::Multi => c
            .multi_lock(names_of(kind, name))
            .try_lock(wait, None)
            .await
            .or_none()?
            .map(AnyGuard::M),
        Kind::Spin => c
            .spin_lock(name)
            .try_lock(wait, None)
            .await
            .or_none()?
            .map(AnyGuard::S),
        Kind::Write => c
            .rw_lock(name)
            .write()
            .try_lock(wait, None)
            .await
            .or_none()?
            .map(AnyGuard::W),
    })
}

/// How a contending task treats errors.
#[derive(Clone, Copy, PartialEq)]
enum Errors {
    /// Typed, retryable `Error::Redis` is expected (the server is being broken): count, retry.
    RetryableOk,
    /// No error may reach the caller at all.
    None,
}

struct Task {
    client: Client,
    who: String,
    kind: Kind,
    name: String,
    hold: (u64, u64),
}

/// One contending task: acquire (bounded wait), hold a random few ms while watching `lost()`,
/// unlock, until `until`. Every outcome goes into `hist`.
async fn contend(t: Task, until: Instant, hist: Arc<History>, errors: Errors) {
    let names = names_of(t.kind, &t.name);
    while Instant::now() < until {
        let t0 = Instant::now();
        let ids: Vec<_> = names.iter().map(|n| hist.acqs.invoke(&t.who, n)).collect();
        let r = try_acquire(&t.client, t.kind, &t.name, Duration::from_secs(3)).await;
        hist.waited(t0.elapsed());
        let g = match r {
            Ok(Some(g)) => g,
            Ok(None) => {
                hist.count("try_lock-timeout");
                ids.iter().for_each(|id| hist.acqs.fail(id, "timeout"));
                continue;
            }
            Err(e) => {
                // A failed attempt may have taken the lock for an instant (unknown outcome).
                ids.iter().for_each(|id| hist.acqs.unknown(id, "error"));
                classify_err(&hist, "lock", &e, errors);
                tokio::time::sleep(Duration::from_millis(20)).await;
                continue;
            }
        };
        for id in &ids {
            hist.acqs.ok(id, g.owner(), g.token(), g.lease());
        }
        hist.count("acquired");
        let lost = g.lost();
        let hold = Duration::from_millis(rand::random_range(t.hold.0..=t.hold.1));
        let lost_early = tokio::select! {
            _ = tokio::time::sleep(hold) => false,
            _ = lost.cancelled() => true,
        };
        // The hold ends here: the holder stops relying on it (unlock next, or lost seen).
        let end = checker::now_ns();
        let lost_seen = lost_early || lost.is_cancelled();
        if lost_seen {
            hist.count("lost-seen");
        }
        for id in &ids {
            hist.acqs
                .release_at(id, end, if lost_seen { "lost-seen" } else { "unlock" });
        }
        match g.unlock().await {
            Ok(()) => hist.count("unlock-ok"),
            Err(Error::NotHeld { .. }) => {
                hist.count("unlock-notheld");
                if !lost_seen && !matches!(t.kind, Kind::Lease) {
                    // Told at unlock instead of by lost(): allowed (renewals run every
                    // TTL / 3), but counted.
                    hist.count("notheld-without-lost");
                }
            }
            Err(e) => classify_err(&hist, "unlock", &e, errors),
        }
    }
}

fn classify_err(hist: &History, op: &str, e: &Error, errors: Errors) {
    let typed_retryable = matches!(e, Error::Redis(_)) && e.is_retryable();
    if errors == Errors::RetryableOk && typed_retryable {
        hist.count(&format!("{op}-redis-retryable"));
    } else {
        hist.fatal(format!("{op}: {e:?}"));
    }
}

/// Spawns `tasks`; returns the handles.
fn spawn_all(
    tasks: Vec<Task>,
    until: Instant,
    hist: &Arc<History>,
    errors: Errors,
) -> Vec<tokio::task::JoinHandle<()>> {
    tasks
        .into_iter()
        .map(|t| tokio::spawn(contend(t, until, hist.clone(), errors)))
        .collect()
}

/// Joins every handle by `deadline`; returns how many were still running (stuck).
async fn join_by(handles: Vec<tokio::task::JoinHandle<()>>, deadline: Instant) -> usize {
    let mut stuck = 0;
    for h in handles {
        let left = deadline.saturating_duration_since(Instant::now());
        match tokio::time::timeout(left, h).await {
            Ok(r) => {
                if let Err(e) = r {
                    if e.is_panic() {
                        std::panic::resume_unwind(e.into_panic());
                    }
                }
            }
            Err(_) => stuck += 1,
        }
    }
    stuck
}

fn assert_history(hist: &History, what: &str) {
    let v = hist.acqs.check();
    let fatal = hist.fatal.lock().unwrap().clone();
    let no_ttl = hist.no_ttl.lock().unwrap().clone();
    println!(
        "{what}: {}; violations {}; fatal errors {}; keys without TTL {}",
        hist.summary(),
        v.len(),
        fatal.len(),
        no_ttl.len()
    );
    checker::assert_clean(&v);
    assert!(
        fatal.is_empty(),
        "{what}: errors a caller must not see: {fatal:#?}"
    );
    assert!(no_ttl.is_empty(), "{what}: keys without TTL: {no_ttl:?}");
    assert!(hist.acqs.ok_count() > 0, "{what}: nothing was acquired");
}

/// The common shape of a "break the server while 2 clients x 4 tasks contend" scenario:
/// contend for `before`, inject `fault`, contend for `after`, then check the history.
async fn contend_through<F, Fut>(
    server: &RedisServer,
    label: &str,
    before: Duration,
    after: Duration,
    fault: F,
) -> Arc<History>
where
    F: FnOnce(Conn) -> Fut,
    Fut: std::future::Future<Output = ()>,
{
    let ns = suite::unique_ns(label);
    let clients = [
        client(server.url(), &ns, TTL).await,
        client(server.url(), &ns, TTL).await,
    ];
    let conn = server.conn().await;
    let hist = Arc::new(History::default());
    let stop = Arc::new(AtomicBool::new(false));
    let sampler = spawn_ttl_sampler(server.conn().await, ns.clone(), hist.clone(), stop.clone());
    // Each client: 3 tasks on "hot" (RLock, watchdog), 1 task holding "long" for up to
    // 1.5 x TTL at a time, so some hold spans the fault.
    let until = Instant::now() + before + after;
    let mut tasks = Vec::new();
    for (ci, c) in clients.iter().enumerate() {
        for t in 0..4 {
            let (name, hold) = if t == 3 {
                ("long", (1000, 1500))
            } else {
                ("hot", (2, 20))
            };
            tasks.push(Task {
                client: c.clone(),
                who: format!("c{ci}t{t}"),
                kind: Kind::Reentrant,
                name: name.into(),
                hold,
            });
        }
    }
    let handles = spawn_all(tasks, until, &hist, Errors::RetryableOk);
    tokio::time::sleep(before).await;
    let t0 = Instant::now();
    fault(conn.clone()).await;
    println!("{label}: fault injected for {:?}", t0.elapsed());
    let stuck = join_by(handles, until + Duration::from_secs(10)).await;
    stop.store(true, Ordering::Relaxed);
    let samples = sampler.await.unwrap();
    assert_eq!(
        stuck, 0,
        "{label}: {stuck} tasks still running 10 s after the end"
    );
    assert!(samples > 5, "TTL sampler ran only {samples} times");
    assert_history(&hist, label);
    // Every task made progress after the fault.
    assert_quiescent(&conn, &ns, TTL * 3).await;
    hist
}

// ---------------------------------------------------------------------------------------
// 3. Server stall
// ---------------------------------------------------------------------------------------

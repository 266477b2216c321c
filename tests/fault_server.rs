//! Fault injection on the server side (issue 6, scenarios 3, 4, 5, 6, 8 and 11): the
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
//! Timings are short (watchdog ~1 s) so the whole file stays well under 2.5 minutes on 2 cores.
mod support;

#[path = "support/checker.rs"]
mod checker;

use support::Conn;

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::StreamExt;
use lockwise::{Client, Error};
use support::RedisServer;

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
    for k in keys.into_iter().filter(|k| !is_fence(k)) {
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
}

/// A held guard of any kind.
enum AnyGuard {
    R(lockwise::RLockGuard),
    F(lockwise::FairLockGuard),
    Fe(lockwise::FencedLockGuard),
    M(lockwise::MultiLockGuard),
}

impl AnyGuard {
    fn lost(&self) -> tokio_util::sync::CancellationToken {
        match self {
            AnyGuard::R(g) => g.lost(),
            AnyGuard::F(g) => g.lost(),
            AnyGuard::Fe(g) => g.lost(),
            AnyGuard::M(g) => g.lost(),
        }
    }
    fn owner(&self) -> &str {
        match self {
            AnyGuard::R(g) => g.owner(),
            AnyGuard::F(g) => g.owner(),
            AnyGuard::Fe(g) => g.owner(),
            AnyGuard::M(g) => g.owner(),
        }
    }
    fn lease(&self) -> Option<Duration> {
        match self {
            AnyGuard::R(g) => g.lease(),
            AnyGuard::F(g) => g.lease(),
            AnyGuard::Fe(g) => g.lease(),
            AnyGuard::M(g) => g.lease(),
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
        Kind::Reentrant => c.lock(name).try_lock(wait, None).await?.map(AnyGuard::R),
        Kind::Lease => c
            .lock(name)
            .try_lock(wait, Some(Duration::from_secs(2)))
            .await?
            .map(AnyGuard::R),
        Kind::Fair => c
            .fair_lock(name)
            .try_lock(wait, None)
            .await?
            .map(AnyGuard::F),
        Kind::Fenced => c
            .fenced_lock(name)
            .try_lock(wait, None)
            .await?
            .map(AnyGuard::Fe),
        Kind::Multi => c
            .multi_lock(names_of(kind, name))
            .try_lock(wait, None)
            .await?
            .map(AnyGuard::M),
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
    let ns = support::unique_ns(label);
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

async fn server_stall(factor_tenths: u32, label: &str) -> Arc<History> {
    let server = RedisServer::start();
    let pid = server.pid().expect("server pid");
    let stall = TTL * factor_tenths / 10;
    let hist = contend_through(
        &server,
        label,
        Duration::from_millis(1500),
        Duration::from_millis(3000),
        |_conn| async move {
            signal(pid, "STOP");
            tokio::time::sleep(stall).await;
            signal(pid, "CONT");
        },
    )
    .await;
    drop(server);
    hist
}

/// SIGSTOP the server for half the TTL: renewals are merely late, nothing overlaps, all
/// tasks go on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn server_stall_sigstop_half_ttl() {
    server_stall(5, "stall-half").await;
}

/// SIGSTOP the server for twice the TTL: held locks expire during the stall; their holders
/// learn it (lost() or NotHeld), nobody overlaps, all tasks go on afterwards.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn server_stall_sigstop_twice_ttl() {
    let hist = server_stall(20, "stall-twice").await;
    assert!(
        hist.get("lost-seen") + hist.get("unlock-notheld") + hist.get("unlock-redis-retryable") > 0,
        "a 2 x TTL stall under a 1-1.5 s hold went unnoticed by every holder"
    );
}

// ---------------------------------------------------------------------------------------
// 4. Slow server
// ---------------------------------------------------------------------------------------

/// CLIENT PAUSE 1500 ALL: every call is late (some beyond the 1 s response timeout: typed,
/// retryable Error::Redis), no overlap, nothing leaked after quiescence.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slow_server_client_pause() {
    let server = RedisServer::start();
    let hist = contend_through(
        &server,
        "pause",
        Duration::from_millis(1500),
        Duration::from_millis(3000),
        |mut conn| async move {
            let _: String = redis::cmd("CLIENT")
                .arg("PAUSE")
                .arg(1500)
                .arg("ALL")
                .query_async(&mut conn)
                .await
                .unwrap();
            tokio::time::sleep(Duration::from_millis(1500)).await;
        },
    )
    .await;
    println!(
        "pause: {} typed retryable errors",
        hist.get("lock-redis-retryable") + hist.get("unlock-redis-retryable")
    );
}

/// DEBUG SLEEP 1.5: the server does nothing for 1.5 x TTL (its clock runs on, so held locks
/// expire); same checks.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slow_server_debug_sleep() {
    let server = RedisServer::start();
    let url = server.url().to_string();
    contend_through(
        &server,
        "debug-sleep",
        Duration::from_millis(1500),
        Duration::from_millis(3000),
        |_conn| async move {
            // Our own connection may give up on the reply (response timeout); the server
            // sleeps the 1.5 s regardless.
            let t0 = Instant::now();
            let c = redis::Client::open(url.as_str()).unwrap();
            let mut c = c.get_multiplexed_async_connection().await.unwrap();
            let r: redis::RedisResult<String> = redis::cmd("DEBUG")
                .arg("SLEEP")
                .arg("1.5")
                .query_async(&mut c)
                .await;
            let _ = r;
            tokio::time::sleep_until((t0 + Duration::from_millis(1500)).into()).await;
        },
    )
    .await;
}

// ---------------------------------------------------------------------------------------
// 5. Subscription loss
// ---------------------------------------------------------------------------------------

/// CLIENT KILL TYPE pubsub every 200 ms for 3 s while 3 clients x 12 tasks wait for 4
/// reentrant locks and a fair lock (watchdog 30 s, so a lost wakeup would show as a wait of
/// up to 30 s): every task finishes within 10 s of the end (0 stuck), no overlap, NUMSUB 0.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn subscription_loss_every_200ms() {
    let server = RedisServer::start();
    let ns = support::unique_ns("subloss");
    let mut clients = Vec::new();
    for _ in 0..3 {
        clients.push(client(server.url(), &ns, Duration::from_secs(30)).await);
    }
    let mut conn = server.conn().await;
    let hist = Arc::new(History::default());
    let stop = Arc::new(AtomicBool::new(false));
    let sampler = spawn_ttl_sampler(server.conn().await, ns.clone(), hist.clone(), stop.clone());
    let until = Instant::now() + Duration::from_secs(3);
    let mut tasks = Vec::new();
    for (ci, c) in clients.iter().enumerate() {
        for t in 0..12 {
            let (kind, name) = if t < 10 {
                (Kind::Reentrant, format!("s{}", t % 4))
            } else {
                (Kind::Fair, "fair".to_string())
            };
            tasks.push(Task {
                client: c.clone(),
                who: format!("c{ci}t{t}"),
                kind,
                name,
                hold: (5, 15),
            });
        }
    }
    let killer = {
        let mut c = conn.clone();
        tokio::spawn(async move {
            let (mut kills, mut killed) = (0, 0);
            while Instant::now() < until {
                tokio::time::sleep(Duration::from_millis(200)).await;
                let n: i64 = redis::cmd("CLIENT")
                    .arg("KILL")
                    .arg("TYPE")
                    .arg("pubsub")
                    .query_async(&mut c)
                    .await
                    .unwrap();
                kills += 1;
                killed += n;
            }
            (kills, killed)
        })
    };
    // A waiter that lost its wakeup would wait out the 30 s TTL; none may.
    let handles = spawn_all(tasks, until, &hist, Errors::RetryableOk);
    let stuck = join_by(handles, until + Duration::from_secs(10)).await;
    let (kills, killed) = killer.await.unwrap();
    stop.store(true, Ordering::Relaxed);
    sampler.await.unwrap();
    println!(
        "{kills} CLIENT KILLs closed {killed} subscription connections; stuck waiters: {stuck}"
    );
    assert_eq!(stuck, 0, "{stuck} waiters stuck 10 s after the end");
    assert!(killed >= 5, "the kills hit only {killed} connections");
    assert_history(&hist, "subscription loss");
    let mut channels: Vec<String> = (0..4)
        .map(|i| clients[0].lock(format!("s{i}")).channel().to_string())
        .collect();
    channels.push(clients[0].lock("fair").channel().to_string());
    for ch in &channels {
        let zero = support::eventually(Duration::from_secs(3), || {
            let mut c = conn.clone();
            let ch = ch.clone();
            async move { support::numsub(&mut c, &ch).await == 0 }
        })
        .await;
        assert!(
            zero,
            "NUMSUB {ch} = {}",
            support::numsub(&mut conn, ch).await
        );
    }
    assert_quiescent(&conn, &ns, Duration::from_secs(3)).await;
}

// ---------------------------------------------------------------------------------------
// 6. Script cache loss
// ---------------------------------------------------------------------------------------

/// SCRIPT FLUSH every second for 4 s while 2 clients x 10 tasks use every lock kind
/// (watchdog, lease, fair, fenced, multi) and a watchdog hold is renewed throughout: every
/// call is Ok (no NOSCRIPT, no error at all reaches a caller), no overlap, tokens rise.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn script_cache_loss_every_second() {
    let server = RedisServer::start();
    let ns = support::unique_ns("flush");
    let clients = [
        client(server.url(), &ns, TTL).await,
        client(server.url(), &ns, TTL).await,
    ];
    let mut conn = server.conn().await;
    let hist = Arc::new(History::default());
    let stop = Arc::new(AtomicBool::new(false));
    let sampler = spawn_ttl_sampler(server.conn().await, ns.clone(), hist.clone(), stop.clone());
    let until = Instant::now() + Duration::from_millis(4200);
    let kinds = [
        (Kind::Reentrant, "r"),
        (Kind::Reentrant, "r"),
        (Kind::Lease, "r"),
        (Kind::Fair, "q"),
        (Kind::Fair, "q"),
        (Kind::Fenced, "f"),
        (Kind::Fenced, "f"),
        (Kind::Multi, "m"),
        (Kind::Reentrant, "m-a"),
        (Kind::Reentrant, "m-b"),
    ];
    let mut tasks = Vec::new();
    for (ci, c) in clients.iter().enumerate() {
        for (t, (kind, name)) in kinds.iter().enumerate() {
            tasks.push(Task {
                client: c.clone(),
                who: format!("c{ci}t{t}"),
                kind: *kind,
                name: name.to_string(),
                hold: (1, 5),
            });
        }
    }
    let steady = clients[0].clone();
    let steady_task = tokio::spawn(async move {
        let g = steady.lock("steady").lock().await.expect("steady lock");
        tokio::time::sleep_until(until.into()).await;
        let lost = g.is_lost();
        (lost, g.unlock().await)
    });
    let flusher = {
        let mut c = conn.clone();
        tokio::spawn(async move {
            let mut n = 0;
            while Instant::now() + Duration::from_secs(1) < until {
                tokio::time::sleep(Duration::from_secs(1)).await;
                let _: String = redis::cmd("SCRIPT")
                    .arg("FLUSH")
                    .query_async(&mut c)
                    .await
                    .unwrap();
                n += 1;
            }
            n
        })
    };
    let evals_before = support::command_calls(&mut conn, "eval").await;
    let handles = spawn_all(tasks, until, &hist, Errors::None);
    let stuck = join_by(handles, until + Duration::from_secs(10)).await;
    let flushes = flusher.await.unwrap();
    let (steady_lost, steady_unlock) = steady_task.await.unwrap();
    stop.store(true, Ordering::Relaxed);
    sampler.await.unwrap();
    let evals = support::command_calls(&mut conn, "eval").await - evals_before;
    println!("{flushes} SCRIPT FLUSHes, {evals} EVAL fallbacks");
    assert_eq!(stuck, 0);
    assert!(flushes >= 3, "only {flushes} flushes");
    assert!(evals > 0, "the NOSCRIPT fallback never ran");
    assert_history(&hist, "script cache loss");
    assert!(
        !steady_lost,
        "the renewed watchdog lock was lost across SCRIPT FLUSH"
    );
    steady_unlock.expect("steady unlock");
    assert_quiescent(&conn, &ns, Duration::from_secs(3)).await;
}

// ---------------------------------------------------------------------------------------
// 8. Watchdog / unlock race
// ---------------------------------------------------------------------------------------

/// Per lock key, from keyspace notifications: an `expire` event (PEXPIRE by the lock or renew
/// script) on a key whose last event was `del` or `expired`, with no `hset` / `hincrby` in
/// between, is a renewal that revived (raised the TTL of) a released lock.
#[derive(Default)]
struct KeyspaceAudit {
    alive: HashMap<String, bool>,
    events: BTreeMap<String, u64>,
    violations: Vec<String>,
}

impl KeyspaceAudit {
    fn event(&mut self, key: &str, event: &str) {
        *self.events.entry(event.to_string()).or_default() += 1;
        match event {
            "hset" | "hincrby" => {
                self.alive.insert(key.to_string(), true);
            }
            "del" | "expired" | "evicted" => {
                self.alive.insert(key.to_string(), false);
            }
            "expire" if !self.alive.get(key).copied().unwrap_or(false) => {
                self.violations
                    .push(format!("TTL set on released key {key} (no write since)"));
            }
            _ => {}
        }
    }
}

/// Lock -> (unlock | drop | cancel mid-acquire | try_lock timeout) cycles with a 30 ms
/// watchdog (renewals every 10 ms, constantly racing the releases), audited through keyspace
/// notifications: no renewal ever raises the TTL of a released lock, nothing is left.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watchdog_unlock_race_no_ttl_rise() {
    const TARGET: u64 = 100_000;
    const TIME_LIMIT: Duration = Duration::from_secs(35);
    const TASKS: usize = 48;
    const WATCHDOG: Duration = Duration::from_millis(30);
    let server = RedisServer::start();
    let ns = support::unique_ns("race");
    let mut conn = server.conn().await;
    let _: String = redis::cmd("CONFIG")
        .arg("SET")
        .arg("notify-keyspace-events")
        .arg("KEA")
        .query_async(&mut conn)
        .await
        .unwrap();
    let _: String = redis::cmd("CONFIG")
        .arg("SET")
        .arg("client-output-buffer-limit")
        .arg("pubsub 0 0 0")
        .query_async(&mut conn)
        .await
        .unwrap();
    let mut pubsub = redis::Client::open(server.url())
        .unwrap()
        .get_async_pubsub()
        .await
        .unwrap();
    let prefix = "__keyspace@0__:";
    pubsub.psubscribe(format!("{prefix}{ns}*")).await.unwrap();
    let sentinel = format!("{ns}:zz-sentinel");
    let audit = Arc::new(Mutex::new(KeyspaceAudit::default()));
    let auditor = {
        let audit = audit.clone();
        let sentinel = sentinel.clone();
        tokio::spawn(async move {
            let mut stream = pubsub.on_message();
            while let Some(msg) = stream.next().await {
                let channel = msg.get_channel_name().to_string();
                let event: String = msg.get_payload().unwrap_or_default();
                let key = channel.strip_prefix(prefix).unwrap_or(&channel);
                if key == sentinel {
                    return true;
                }
                audit.lock().unwrap().event(key, &event);
            }
            false
        })
    };

    let c = client(server.url(), &ns, WATCHDOG).await;
    let cycles = Arc::new(AtomicU64::new(0));
    let outcomes = Arc::new(History::default());
    let t0 = Instant::now();
    let deadline = t0 + TIME_LIMIT;
    let mut handles = Vec::new();
    for t in 0..TASKS {
        let c = c.clone();
        let cycles = cycles.clone();
        let out = outcomes.clone();
        handles.push(tokio::spawn(async move {
            let own = c.lock(format!("own-{t}"));
            let shared_name = format!("shared-{}", t % 4);
            let shared = c.lock(&shared_name);
            let who = format!("t{t}");
            let mut i: u64 = t as u64;
            while cycles.load(Ordering::Relaxed) < TARGET && Instant::now() < deadline {
                i += 1;
                let hold = Duration::from_millis(rand::random_range(0..=12));
                match i % 4 {
                    0 => match own.lock().await {
                        Ok(g) => {
                            tokio::time::sleep(hold).await;
                            match g.unlock().await {
                                Ok(()) => out.count("unlock-ok"),
                                Err(e) if e.is_not_held() => out.count("unlock-notheld"),
                                Err(e) => out.fatal(format!("unlock: {e:?}")),
                            }
                        }
                        Err(e) => out.fatal(format!("lock: {e:?}")),
                    },
                    1 => match own.lock().await {
                        Ok(g) => {
                            tokio::time::sleep(hold).await;
                            drop(g);
                            out.count("dropped");
                        }
                        Err(e) => out.fatal(format!("lock: {e:?}")),
                    },
                    2 => {
                        // Cancel an acquire at a random point (before, during or after the
                        // script ran); a hold it took is released in the background.
                        let cut = Duration::from_micros(rand::random_range(0..3000));
                        match tokio::time::timeout(cut, own.lock()).await {
                            Ok(Ok(g)) => {
                                tokio::time::sleep(hold).await;
                                let _ = g.unlock().await;
                                out.count("cancel-too-late");
                            }
                            Ok(Err(e)) => out.fatal(format!("lock: {e:?}")),
                            Err(_) => out.count("cancelled"),
                        }
                    }
                    _ => {
                        let wait = Duration::from_millis(rand::random_range(0..5));
                        let id = out.acqs.invoke(&who, &shared_name);
                        match shared.try_lock(wait, None).await {
                            Ok(Some(g)) => {
                                // Counted up to invoke + 30 ms only: the TTL the lock
                                // script set is the one certain validity. A 30 ms watchdog
                                // loses to a client that is late (2 loaded cores, debug
                                // build) by more than that, and such an expiry is the
                                // documented TTL caveat, not a mutual-exclusion bug.
                                out.acqs.ok(&id, g.owner(), None, Some(WATCHDOG));
                                tokio::time::sleep(hold).await;
                                out.acqs.release(&id);
                                match g.unlock().await {
                                    Ok(()) => out.count("unlock-ok"),
                                    Err(e) if e.is_not_held() => out.count("unlock-notheld"),
                                    Err(e) => out.fatal(format!("unlock: {e:?}")),
                                }
                            }
                            Ok(None) => {
                                out.acqs.fail(&id, "timeout");
                                out.count("try_lock-timeout")
                            }
                            Err(e) => out.fatal(format!("try_lock: {e:?}")),
                        }
                    }
                }
                cycles.fetch_add(1, Ordering::Relaxed);
            }
        }));
    }
    let stuck = join_by(handles, deadline + Duration::from_secs(10)).await;
    let elapsed = t0.elapsed();
    let n = cycles.load(Ordering::Relaxed);
    assert_eq!(stuck, 0);
    // Quiescence: background releases of dropped guards and cancelled acquires are done,
    // then the sentinel tells the auditor it has seen every event before it.
    assert_quiescent(&conn, &ns, Duration::from_secs(3)).await;
    let _: () = redis::cmd("SET")
        .arg(&sentinel)
        .arg(1)
        .arg("PX")
        .arg(1000)
        .query_async(&mut conn)
        .await
        .unwrap();
    let drained = tokio::time::timeout(Duration::from_secs(10), auditor)
        .await
        .expect("keyspace events not drained within 10 s")
        .unwrap();
    assert!(drained, "the keyspace notification stream ended early");
    let audit = audit.lock().unwrap();
    println!(
        "{n} cycles in {elapsed:?} ({:.0} cycles/s), {TASKS} tasks, watchdog 30 ms; outcomes {:?}; \
         keyspace events {:?}; violations {}",
        n as f64 / elapsed.as_secs_f64(),
        outcomes.counts.lock().unwrap(),
        audit.events,
        audit.violations.len()
    );
    let fatal = outcomes.fatal.lock().unwrap().clone();
    assert!(fatal.is_empty(), "errors: {fatal:?}");
    checker::assert_clean(&outcomes.acqs.check());
    assert!(
        audit.violations.is_empty(),
        "TTL raised after release: {:?}",
        &audit.violations[..audit.violations.len().min(10)]
    );
    assert!(
        audit.events.get("expire").copied().unwrap_or(0) > n / 2,
        "too few expire events seen: is the audit listening?"
    );
}

// ---------------------------------------------------------------------------------------
// 11. Eviction
// ---------------------------------------------------------------------------------------

/// A `tracing` writer that keeps what is written, to see lockwise's warning.
#[derive(Clone, Default)]
struct Captured(Arc<Mutex<Vec<u8>>>);

impl std::io::Write for Captured {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Under an evicting policy, connecting works and lockwise warns once; under noeviction a full
/// server makes every lock kind fail closed with a typed OOM error (retryable), nothing is
/// written, and locking works again once memory is freed.
#[tokio::test(flavor = "current_thread")]
async fn eviction_policy_warns_and_oom_fails_closed() {
    // (a) allkeys-lru: a warning at connect, locks still work.
    let lru = RedisServer::start_with(&["--maxmemory", "2mb", "--maxmemory-policy", "allkeys-lru"]);
    let captured = Captured::default();
    let writer = captured.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_writer(move || writer.clone())
        .with_ansi(false)
        .with_max_level(tracing::Level::WARN)
        .finish();
    let c = {
        let _guard = tracing::subscriber::set_default(subscriber);
        client(lru.url(), &support::unique_ns("evict"), TTL).await
    };
    let log = String::from_utf8(captured.0.lock().unwrap().clone()).unwrap();
    let warnings = log.lines().filter(|l| l.contains("may evict")).count();
    println!("warning at connect: {}", log.trim());
    assert_eq!(
        warnings, 1,
        "expected one eviction warning at connect, got: {log}"
    );
    let g = c.lock("x").lock().await.expect("lock under allkeys-lru");
    g.unlock().await.expect("unlock");
    drop(c);

    // (b) noeviction, filled with junk until OOM.
    let full = RedisServer::start_with(&["--maxmemory", "2mb", "--maxmemory-policy", "noeviction"]);
    let ns = support::unique_ns("oom");
    let c = client(full.url(), &ns, TTL).await;
    let mut conn = full.conn().await;
    let junk = "j".repeat(16 * 1024);
    let mut filled = 0;
    loop {
        let r: redis::RedisResult<()> = redis::cmd("SET")
            .arg(format!("junk:{filled}"))
            .arg(&junk)
            .query_async(&mut conn)
            .await;
        match r {
            Ok(()) => filled += 1,
            Err(e) if e.code() == Some("OOM") => break,
            Err(e) => panic!("filling: {e:?}"),
        }
        assert!(filled < 10_000, "never reached OOM");
    }
    // Used memory moves a little (buffers): pin it above the limit so every write is refused.
    let info: String = redis::cmd("INFO")
        .arg("memory")
        .query_async(&mut conn)
        .await
        .unwrap();
    let used: u64 = info
        .lines()
        .find_map(|l| l.strip_prefix("used_memory:"))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    let _: () = redis::cmd("CONFIG")
        .arg("SET")
        .arg("maxmemory")
        .arg(used - 256 * 1024)
        .query_async(&mut conn)
        .await
        .unwrap();
    println!("OOM after {filled} x 16 KiB of junk (used_memory {used})");
    let check = |what: &str, r: lockwise::Result<()>| match r {
        Err(ref e @ Error::Redis(ref re)) => {
            assert!(e.is_oom(), "{what}: not is_oom(): {e:?}");
            assert_eq!(re.code(), Some("OOM"), "{what}: {e:?}");
            assert!(e.is_retryable(), "{what}: OOM should be retryable");
            println!("{what}: {e}");
        }
        other => panic!("{what}: expected Err(Error::Redis OOM), got {other:?}"),
    };
    let s = Duration::from_millis(300);
    check("lock()", c.lock("a").lock().await.map(drop));
    check(
        "try_lock(lease)",
        c.lock("a").try_lock(s, Some(s)).await.map(drop),
    );
    check("fair lock()", c.fair_lock("b").lock().await.map(drop));
    check("fenced lock()", c.fenced_lock("c").lock().await.map(drop));
    check(
        "multi lock()",
        c.multi_lock(["d", "e"]).try_lock(s, None).await.map(drop),
    );
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(
        keys_in(&mut conn, &ns).await.is_empty(),
        "something was written under OOM: {:?}",
        keys_in(&mut conn, &ns).await
    );
    assert!(support::active_channels(&mut conn).await.is_empty());
    // Memory freed: it works again.
    let _: () = redis::cmd("FLUSHALL").query_async(&mut conn).await.unwrap();
    let g = c
        .lock("a")
        .lock()
        .await
        .expect("lock after memory was freed");
    g.unlock().await.expect("unlock");
    assert!(keys_in(&mut conn, &ns).await.is_empty());
}

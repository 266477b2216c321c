//! lockwise soak: `cargo run --release -p lockwise-stress --bin soak -- [--seconds N] [--tasks N] [--locks N]`.
//!
//! 10,000 tasks (4 `Client`s) contend for 100 locks (90 `RLock`s, 10 `FairLock`s) for N seconds
//! (default 30) while the subscription connections are killed every 200 ms
//! (`CLIENT KILL TYPE pubsub`) and the script cache is flushed every second (`SCRIPT FLUSH`),
//! except in the last `--quiet` seconds (default 6). Every hold interval is recorded per lock
//! on this host's monotonic clock; at the end the program checks that no two holds of one lock
//! overlapped, that no task got stuck, that no call failed, that no key was ever seen without
//! a TTL and that no key or subscription is left once everything is released.
//!
//! The quiet phase checks recovery: with 100 tasks per lock there is always a waiter, so the
//! time from a hold's end to the next hold's start is how long a free lock stayed untaken.
//! It must stay below `--quiet-bound-ms` (2 s, far above what a loaded 2-core CI machine
//! needs, below a lost wakeup that waits for the holder's 5 s TTL, and below the 0.5-2 s and
//! the outright collapse that waking every waiter after each subscription loss caused here).
//! It prints the figures and exits non-zero on any violation.
//!
//! With `--lock` the tasks call `lock()` ("waits as long as it takes") instead of
//! `try_lock(20 s)`, and any error a caller sees is a failure, retryable or not: a wait with
//! budget left retries what failed inside the library, so on a healthy server (`--no-faults`)
//! and through the faults above alike, `lock()` only returns a guard.
//!
//! Without `REDIS_URL` it starts its own redis-server; with it, it uses a fresh namespace there
//! (and still injects the faults: do not point it at a server others use).

use lockwise_testkit::checker::{self, Acquisition, History, Op};
use lockwise_testkit::server;

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use lockwise::redis::{self, aio::MultiplexedConnection};
use lockwise::Client;

/// The example's error type.
type BoxError = Box<dyn std::error::Error + Send + Sync>;

struct Args {
    seconds: f64,
    tasks: usize,
    locks: usize,
    clients: usize,
    faults: bool,
    /// `lock()` instead of `try_lock(20 s)`; every error is a failure.
    forever: bool,
    /// The last seconds run without faults; their handoffs are measured.
    quiet: f64,
    quiet_bound: Duration,
}

fn parse_args() -> Result<Args, BoxError> {
    let mut args = Args {
        seconds: 30.0,
        tasks: 10_000,
        locks: 100,
        clients: 4,
        faults: true,
        forever: false,
        quiet: 6.0,
        quiet_bound: Duration::from_secs(2),
    };
    let mut it = std::env::args().skip(1);
    while let Some(a) = it.next() {
        let mut value = || it.next().ok_or_else(|| format!("{a} needs a value"));
        match a.as_str() {
            "--seconds" => args.seconds = value()?.parse()?,
            "--tasks" => args.tasks = value()?.parse()?,
            "--locks" => args.locks = value()?.parse()?,
            "--clients" => args.clients = value()?.parse()?,
            "--no-faults" => args.faults = false,
            "--lock" => args.forever = true,
            "--quiet" => args.quiet = value()?.parse()?,
            "--quiet-bound-ms" => args.quiet_bound = Duration::from_millis(value()?.parse()?),
            "-h" | "--help" => {
                println!(
                    "usage: soak [--seconds N (30)] [--tasks N (10000)] [--locks N (100)] \
                     [--clients N (4)] [--no-faults] [--lock] [--quiet SECONDS (6)] [--quiet-bound-ms N (2000)]"
                );
                std::process::exit(0);
            }
            other => return Err(format!("unknown argument {other:?} (try --help)").into()),
        }
    }
    if args.locks == 0 || args.tasks == 0 || args.clients == 0 {
        return Err("--tasks, --locks and --clients must be positive".into());
    }
    if args.quiet < 2.0 || args.quiet >= args.seconds {
        return Err("--quiet must be at least 2 and below --seconds".into());
    }
    Ok(args)
}

fn main() -> Result<(), BoxError> {
    let args = parse_args()?;
    if std::env::var_os("RUST_LOG").is_some() {
        tracing_subscriber::fmt()
            .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
            .init();
    }
    let (url, server) = server::url_or_start(&[])?;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    let failures = rt.block_on(run(args, url))?;
    if failures > 0 {
        eprintln!("FAILED: {failures} problem(s), see above");
        drop(rt);
        drop(server); // `exit` skips destructors: stop the temp redis-server first
        std::process::exit(1);
    }
    println!("OK");
    Ok(())
}

/// One recorded hold: [start, end) and the task that held it.
type Hold = (Instant, Instant, u32);

#[derive(Default)]
struct Stats {
    acquisitions: AtomicU64,
    fair_acquisitions: AtomicU64,
    timeouts: AtomicU64,
    retryable: AtomicU64,
    max_wait_us: AtomicU64,
    errors: Mutex<BTreeMap<String, u64>>,
    no_ttl: Mutex<Vec<String>>,
}

impl Stats {
    fn error(&self, what: String) {
        *self.errors.lock().unwrap().entry(what).or_default() += 1;
    }
}

fn is_fair(lock: usize) -> bool {
    lock % 10 == 9
}

async fn run(args: Args, url: String) -> Result<usize, BoxError> {
    let ns = format!("soak-{}", lockwise::Uuid::new_v4().simple());
    let fair_locks = (0..args.locks).filter(|l| is_fair(*l)).count();
    println!(
        "lockwise soak: {} tasks calling {}, {} Clients, {} locks ({} RLock, {} FairLock), \
         {} s, {}\nredis: {url}",
        args.tasks,
        if args.forever {
            "lock()"
        } else {
            "try_lock(20 s)"
        },
        args.clients,
        args.locks,
        args.locks - fair_locks,
        fair_locks,
        args.seconds,
        if args.faults {
            "CLIENT KILL TYPE pubsub every 200 ms, SCRIPT FLUSH every 1 s"
        } else {
            "no faults"
        }
    );
    let mut clients = Vec::new();
    for _ in 0..args.clients {
        clients.push(
            Client::builder(url.as_str())
                .namespace(ns.as_str())
                .watchdog_timeout(Duration::from_secs(5))
                .build()
                .await?,
        );
    }
    let admin = redis::Client::open(url.as_str())?
        .get_multiplexed_async_connection()
        .await?;
    let holds: Arc<Vec<Mutex<Vec<Hold>>>> =
        Arc::new((0..args.locks).map(|_| Mutex::new(Vec::new())).collect());
    let stats = Arc::new(Stats::default());
    let stop = Arc::new(AtomicBool::new(false));
    let t0 = Instant::now();
    let until = t0 + Duration::from_secs_f64(args.seconds);

    // Faults 5 (subscription loss) and 6 (script cache loss), and a TTL sampler.
    let fault_until = if args.faults {
        until - Duration::from_secs_f64(args.quiet)
    } else {
        t0
    };
    let kills = spawn_every(
        admin.clone(),
        fault_until,
        Duration::from_millis(200),
        |c| {
            Box::pin(async move {
                redis::cmd("CLIENT")
                    .arg("KILL")
                    .arg("TYPE")
                    .arg("pubsub")
                    .query_async::<i64>(c)
                    .await
                    .map(|n| n as u64)
            })
        },
    );
    let flushes = spawn_every(admin.clone(), fault_until, Duration::from_secs(1), |c| {
        Box::pin(async move {
            redis::cmd("SCRIPT")
                .arg("FLUSH")
                .query_async::<String>(c)
                .await
                .map(|_| 1)
        })
    });
    let sampler = {
        let (conn, ns, stats, stop) = (admin.clone(), ns.clone(), stats.clone(), stop.clone());
        tokio::spawn(async move {
            while !stop.load(Ordering::Relaxed) {
                let mut c = conn.clone();
                if let Ok(keys) = keys_without_ttl(&mut c, &ns).await {
                    stats.no_ttl.lock().unwrap().extend(keys);
                }
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
        })
    };

    let mut handles = Vec::with_capacity(args.tasks);
    for t in 0..args.tasks {
        let client = clients[t % clients.len()].clone();
        let lock_ix = t % args.locks;
        let (holds, stats) = (holds.clone(), stats.clone());
        let args_forever = args.forever;
        handles.push(tokio::spawn(async move {
            let name = format!("soak-{lock_ix}");
            let rlock = client.lock(&name);
            let fair = client.fair_lock(&name);
            while Instant::now() < until {
                let started = Instant::now();
                let wait = Duration::from_secs(20);
                let forever = args_forever;
                // Both kinds: one enum-free path per kind keeps the guard types apart.
                let held = if is_fair(lock_ix) {
                    let got = if forever {
                        fair.lock().await
                    } else {
                        fair.try_lock(wait, None).await
                    };
                    match got {
                        Ok(g) => {
                            let start = Instant::now();
                            tokio::task::yield_now().await;
                            let end = Instant::now();
                            holds[lock_ix].lock().unwrap().push((start, end, t as u32));
                            stats.fair_acquisitions.fetch_add(1, Ordering::Relaxed);
                            g.unlock().await.map(|_| true)
                        }
                        Err(e) if e.is_timeout() => Ok(false),
                        Err(e) => Err(e),
                    }
                } else {
                    let got = if forever {
                        rlock.lock().await
                    } else {
                        rlock.try_lock(wait, None).await
                    };
                    match got {
                        Ok(g) => {
                            let start = Instant::now();
                            tokio::task::yield_now().await;
                            let end = Instant::now();
                            holds[lock_ix].lock().unwrap().push((start, end, t as u32));
                            g.unlock().await.map(|_| true)
                        }
                        Err(e) if e.is_timeout() => Ok(false),
                        Err(e) => Err(e),
                    }
                };
                let waited = started.elapsed().as_micros() as u64;
                stats.max_wait_us.fetch_max(waited, Ordering::Relaxed);
                match held {
                    Ok(true) => {
                        stats.acquisitions.fetch_add(1, Ordering::Relaxed);
                    }
                    Ok(false) => {
                        stats.timeouts.fetch_add(1, Ordering::Relaxed);
                    }
                    Err(e) => {
                        // Typed and retryable (e.g. a response timeout while every waiter
                        // retries after a subscription loss): counted, not a failure.
                        if e.is_retryable() && !forever {
                            stats.retryable.fetch_add(1, Ordering::Relaxed);
                        } else {
                            stats.error(e.to_string());
                        }
                        tokio::time::sleep(Duration::from_millis(50)).await;
                    }
                }
            }
        }));
    }

    // Progress once in a while.
    let progress = {
        let stats = stats.clone();
        tokio::spawn(async move {
            let mut last = 0;
            while Instant::now() < until {
                tokio::time::sleep(Duration::from_secs(5).min(until - Instant::now())).await;
                let n = stats.acquisitions.load(Ordering::Relaxed);
                println!(
                    "  +{:>5.1} s  {:>9} acquisitions ({:.0}/s)",
                    t0.elapsed().as_secs_f64(),
                    n,
                    (n - last) as f64 / 5.0
                );
                last = n;
            }
        })
    };

    // Every task must finish within a bound after the end (a stuck waiter would not).
    let join_deadline = until + Duration::from_secs(30);
    let mut stuck = 0;
    for h in handles {
        let left = join_deadline.saturating_duration_since(Instant::now());
        match tokio::time::timeout(left, h).await {
            Ok(r) => r?,
            Err(_) => stuck += 1,
        }
    }
    let elapsed = t0.elapsed();
    progress.abort();
    let kills = kills.await?;
    let flushes = flushes.await?;
    stop.store(true, Ordering::Relaxed);
    sampler.await?;

    // Quiescence: nothing left (keys, subscriptions) within a few seconds.
    let mut conn = admin.clone();
    let quiet_deadline = Instant::now() + Duration::from_secs(10);
    let (leaked, channels) = loop {
        let leaked = keys_of(&mut conn, &ns).await?;
        let channels: Vec<String> = redis::cmd("PUBSUB")
            .arg("CHANNELS")
            .arg(format!("{ns}*"))
            .query_async(&mut conn)
            .await?;
        if (leaked.is_empty() && channels.is_empty()) || Instant::now() >= quiet_deadline {
            break (leaked, channels);
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };

    // The checker: overlapping holds per lock, by the history checker the tests use
    // (lockwise-testkit). A task's holds of one lock are never an overlap with each other.
    let history = History::new();
    let mut recorded = 0;
    for (ix, h) in holds.iter().enumerate() {
        let mut h = h.lock().unwrap();
        recorded += h.len();
        h.sort_by_key(|x| x.0);
        for (n, &(start, end, task)) in h.iter().enumerate() {
            let acquired = checker::ns_of(start);
            history.record(Acquisition {
                id: format!("{ix}-{n}"),
                client: format!("task {task}"),
                lock: format!("soak-{ix}"),
                owner: format!("task {task}"),
                op: Op::Ok,
                invoke: acquired,
                acquired: Some(acquired),
                released: Some(checker::ns_of(end)),
                validity: None,
                token: None,
                note: String::new(),
            });
        }
    }
    let violations: Vec<String> = history
        .check_overlaps()
        .iter()
        .map(ToString::to_string)
        .collect();

    // The quiet phase: every lock has waiters all the time (tasks / locks of them), so the
    // time from one hold's end to the next hold's start is how long a released lock stayed
    // free while waited for. Measured on the RLocks from a second after the faults stopped
    // (calls in flight at the last fault have had their response timeout) to shortly before
    // the end (when tasks stop coming back). Fair locks are left out: a fair waiter whose
    // call failed during the faults keeps its place until its waiter lease runs out (5 s
    // here), by design.
    let (q0, q1) = (
        fault_until + Duration::from_secs(1),
        until - Duration::from_millis(500),
    );
    let mut handoffs: Vec<(Duration, usize, Instant)> = Vec::new();
    for (ix, h) in holds.iter().enumerate().filter(|(ix, _)| !is_fair(*ix)) {
        let h = h.lock().unwrap(); // sorted by start above
        for w in h.windows(2) {
            if w[0].1 >= q0 && w[0].1 <= q1 {
                handoffs.push((w[1].0.saturating_duration_since(w[0].1), ix, w[0].1));
            }
        }
    }
    handoffs.sort();
    let slow: Vec<_> = handoffs.iter().filter(|h| h.0 > args.quiet_bound).collect();

    let acquisitions = stats.acquisitions.load(Ordering::Relaxed);
    let errors = stats.errors.lock().unwrap().clone();
    let error_count: u64 = errors.values().sum();
    let mut no_ttl = stats.no_ttl.lock().unwrap().clone();
    no_ttl.dedup();
    println!();
    println!(
        "acquisitions      {acquisitions} in {:.1} s ({:.0}/s; {} on fair locks; {} holds recorded)",
        elapsed.as_secs_f64(),
        acquisitions as f64 / elapsed.as_secs_f64(),
        stats.fair_acquisitions.load(Ordering::Relaxed),
        recorded
    );
    println!("faults            {kills} subscription connections killed, {flushes} SCRIPT FLUSHes");
    println!(
        "try_lock timeouts {} (wait 20 s); longest call {:.3} s",
        stats.timeouts.load(Ordering::Relaxed),
        stats.max_wait_us.load(Ordering::Relaxed) as f64 / 1e6
    );
    let pct = |p: f64| {
        handoffs
            .get(((handoffs.len().max(1) - 1) as f64 * p) as usize)
            .map_or(0.0, |h| h.0.as_secs_f64() * 1e3)
    };
    println!(
        "quiet handoffs    {} on RLocks in the last {} s (from 1 s after the faults): free for \
         p50 {:.1} ms, p99 {:.1} ms, max {:.1} ms (bound {:?})",
        handoffs.len(),
        args.quiet,
        pct(0.5),
        pct(0.99),
        pct(1.0),
        args.quiet_bound
    );
    for h in slow.iter().rev().take(5) {
        println!(
            "  soak-{}: free for {:.1} ms from +{:.3} s while waited for",
            h.1,
            h.0.as_secs_f64() * 1e3,
            (h.2 - t0).as_secs_f64()
        );
    }
    println!("violations        {}", violations.len());
    println!("leaked keys       {}", leaked.len());
    println!("keys without TTL  {}", no_ttl.len());
    println!("subscriptions     {} channel(s) left", channels.len());
    println!("stuck tasks       {stuck}");
    println!(
        "errors            {error_count} (besides {} typed retryable ones, retried)",
        stats.retryable.load(Ordering::Relaxed)
    );
    for v in violations.iter().take(10) {
        println!("  violation: {v}");
    }
    for k in leaked.iter().take(10) {
        println!("  leaked: {k:?}");
    }
    for k in no_ttl.iter().take(10) {
        println!("  no TTL: {k}");
    }
    for c in channels.iter().take(10) {
        println!("  subscribed: {c}");
    }
    for (e, n) in errors.iter().take(10) {
        println!("  error x{n}: {e}");
    }
    let mut failures = violations.len() + leaked.len() + no_ttl.len() + channels.len() + stuck;
    failures += error_count as usize;
    if !slow.is_empty() {
        println!(
            "{} handoffs in the quiet phase left a lock free for more than {:?}",
            slow.len(),
            args.quiet_bound
        );
        failures += slow.len();
    }
    if handoffs.is_empty() {
        println!("no handoff measured in the quiet phase");
        failures += 1;
    }
    if acquisitions == 0 {
        println!("no acquisitions at all");
        failures += 1;
    }
    Ok(failures)
}

/// Runs `fault` every `every` until `until`; returns the sum of what it returned.
fn spawn_every<F>(
    conn: MultiplexedConnection,
    until: Instant,
    every: Duration,
    fault: F,
) -> tokio::task::JoinHandle<u64>
where
    F: for<'a> Fn(
            &'a mut MultiplexedConnection,
        ) -> std::pin::Pin<
            Box<dyn std::future::Future<Output = redis::RedisResult<u64>> + Send + 'a>,
        > + Send
        + 'static,
{
    tokio::spawn(async move {
        let mut conn = conn;
        let mut total = 0;
        loop {
            tokio::time::sleep(every).await;
            if Instant::now() >= until {
                return total;
            }
            match fault(&mut conn).await {
                Ok(n) => total += n,
                Err(e) => eprintln!("fault injection failed: {e}"),
            }
        }
    })
}

/// Keys of the namespace with their PTTL.
async fn keys_of(
    conn: &mut MultiplexedConnection,
    ns: &str,
) -> redis::RedisResult<Vec<(String, i64)>> {
    let keys: Vec<String> = redis::cmd("KEYS")
        .arg(format!("{ns}*"))
        .query_async(conn)
        .await?;
    let mut out = Vec::new();
    // A live client's presence key (`<ns>:client:{<id>}`) is the client's, not a lock's.
    for k in keys.into_iter().filter(|k| !k.contains(":client:{")) {
        let pttl: i64 = redis::cmd("PTTL").arg(&k).query_async(conn).await?;
        if pttl != -2 {
            out.push((k, pttl));
        }
    }
    Ok(out)
}

async fn keys_without_ttl(
    conn: &mut MultiplexedConnection,
    ns: &str,
) -> redis::RedisResult<Vec<String>> {
    Ok(keys_of(conn, ns)
        .await?
        .into_iter()
        .filter(|(_, pttl)| *pttl == -1)
        .map(|(k, _)| k)
        .collect())
}

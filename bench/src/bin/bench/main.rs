//! lockwise benchmark: `cargo run --release -p lockwise-bench --bin bench [-- --json PATH] [--seconds N]`.
//!
//! A program, not a test: it prints a table and (with `--json`) writes the figures; nothing
//! asserts a timing. Without `REDIS_URL` it starts its own redis-server. Every library figure
//! is set against a ceiling measured in the same run on the same kind of connection, because
//! shared machines are noisy: read the ratios, not the absolute numbers.
//!
//! Workloads (see BENCHMARKS.md for what each figure means):
//! 1. ceiling: the raw lock and unlock scripts (EVALSHA) at the same concurrency; PING RTT.
//! 2. uncontended: 64 tasks, lock -> unlock on their own keys.
//! 3. contended handoff: 4 Clients x 8 tasks on one lock, 1,600 acquisitions (`bench_handoff.rs`).
//! 4. watchdog scale: 100,000 watchdog locks held for 3 renewal periods.
//! 5. waiter scale: 10,000 waiters on 10,000 locks held by another Client (`bench_scale.rs`).
//! 6. fair handoff: workload 3 on a FairLock; lock-script calls per handoff; the handoff
//!    floor: a publish-only script and the release script sent raw (plain, and on a fair
//!    queue), each timed from the send to a task woken by its message (`bench_handoff.rs`).
//! 7. rwlock: 64 readers vs the plain lock; write handoff gap (`bench_rwlock.rs`).
//! 8. semaphore: 64 tasks, 8 permits, acquire -> release vs its scripts' ceiling (`bench_semaphore.rs`).
//! 9. lease semaphore: 64 tasks on 8 permits vs its raw scripts (`bench_lease_semaphore.rs`).
//! 10. throughput sweep: `SET NX PX` reference, ceiling, lockwise and the two-empty-scripts
//!     floor at 1, 8, 64 and 256 tasks, with server and client CPU per pair; lone-caller
//!     latency; script calls per pair; the batched floor (`bench_throughput.rs`).
//! 11. metrics: workload 2 with the Prometheus recorder on vs off (`bench_metrics.rs`).
//! 12. overtake: a remote waiter's waits against a busy Client re-locking at once, and the
//!     worst wait and most overtakes of one wait with 4 Clients x 4 tasks, each with the
//!     overtake limit on and off (`bench_overtake.rs`).
//! 13. peers: lockwise, rslock and redis-lock with their defaults: lone-caller latency,
//!     pairs/s at 64 tasks and the contended handoff gap (`bench_peers.rs`).
//! 15. fast path (`--fastpath-only`, not in the full run): the uncontended pair of a lock taken
//!     by a native `SET NX PX`, and of today's hash lock with a release of 1 key + 2 arguments,
//!     on raw calls, against the reference measured twice (`bench_fastpath.rs`).

mod args;
mod bench_fastpath;
mod bench_handoff;
mod bench_lease_semaphore;
mod bench_metrics;
mod bench_overtake;
mod bench_peers;
mod bench_redisson;
mod bench_rwlock;
mod bench_scale;
mod bench_semaphore;
mod bench_throughput;
use args::{parse_args, Args};
use bench_handoff::*;
use bench_scale::*;
use lockwise_testkit::server;

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::stream::{self, StreamExt};
use lockwise::redis::{self, aio::ConnectionManager};
use serde_json::{json, Value as Json};

/// The example's error type.
type BoxError = Box<dyn std::error::Error + Send + Sync>;

const CONCURRENCY: usize = 64;

fn main() -> Result<(), BoxError> {
    let args = parse_args()?;
    if std::env::var_os("RUST_LOG").is_some() {
        tracing_subscriber::fmt()
            .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
            .init();
    }
    let (url, _server) = server::url_or_start(&[])?;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    rt.block_on(run(args, url))
}

async fn run(args: Args, url: String) -> Result<(), BoxError> {
    if args.metrics_only {
        return bench_metrics::only(&url, args.seconds, 1).await;
    }
    if args.sweep_only {
        bench_throughput::run(&url, args.seconds).await?;
        return Ok(());
    }
    if args.overtake_only {
        bench_overtake::run(&url, args.seconds).await?;
        return Ok(());
    }
    if args.waiters_only {
        for limit in [Some(lockwise::DEFAULT_OVERTAKE_LIMIT), None] {
            let s = waiter_scale(&url, args.waiters, limit).await?;
            println!(
                "waiter scale (overtake limit {limit:?}): {} waiters, all acquired {:.0} ms after \
                 release, {} channels left",
                s.waiters, s.all_acquired_ms, s.channels_left
            );
        }
        return Ok(());
    }
    if args.peers_only {
        bench_peers::run(&url, args.seconds).await?;
        return Ok(());
    }
    if args.redisson_only {
        return bench_redisson::run(&url, args.seconds).await;
    }
    if args.fastpath_only {
        return bench_fastpath::run(&url, args.seconds).await;
    }
    if args.handoff_only {
        for _ in 0..3 {
            let ping = ping_rtt(&url).await?;
            println!(
                "PING round trip          p50 {:>7.1} µs   p99 {:>7.1} µs",
                ping.0, ping.1
            );
            let c = contended(&url, LockKind::Plain, 0).await?;
            print_contended("contended handoff", &c, ping.0);
            let f = contended(&url, LockKind::Fair, 800).await?;
            print_contended("fair handoff", &f, ping.0);
            print_wake_floor(&wake_floor(&url).await?, ping.0);
        }
        return Ok(());
    }
    let mut report = serde_json::Map::new();
    let machine = machine(&url).await?;
    println!(
        "lockwise bench: {} cores ({}), redis {}, tokio workers = cores\n",
        machine["cores"], machine["cpu"], machine["redis_version"]
    );
    report.insert("machine".into(), machine);

    let ping = ping_rtt(&url).await?;
    println!(
        "PING round trip          p50 {:>7.1} µs   p99 {:>7.1} µs",
        ping.0, ping.1
    );
    report.insert("ping_rtt_us".into(), json!({"p50": ping.0, "p99": ping.1}));

    // Ceiling and library interleaved, twice, so drift on a shared machine hits both.
    let mut ceiling_rounds = Vec::new();
    let mut library_rounds = Vec::new();
    for _ in 0..2 {
        ceiling_rounds.push(ceiling(&url, args.seconds).await?);
        library_rounds.push(uncontended(&url, args.seconds).await?);
    }
    let ceiling_rate = mean(&ceiling_rounds.iter().map(|r| r.rate).collect::<Vec<_>>());
    let library_rate = mean(&library_rounds.iter().map(|r| r.rate).collect::<Vec<_>>());
    let last = library_rounds.last().expect("two rounds");
    let last_ceiling = ceiling_rounds.last().expect("two rounds");
    println!(
        "ceiling (raw EVALSHA)    {:>9.0} pairs/s  p50 {:>7.1} µs   p99 {:>7.1} µs",
        ceiling_rate, last_ceiling.p50, last_ceiling.p99
    );
    println!(
        "uncontended (lockwise)     {:>9.0} pairs/s  p50 {:>7.1} µs   p99 {:>7.1} µs   ratio {:.2}",
        library_rate,
        last.p50,
        last.p99,
        library_rate / ceiling_rate
    );
    report.insert(
        "ceiling".into(),
        json!({"pairs_per_s": ceiling_rate, "rounds": ceiling_rounds.iter().map(|r| r.rate).collect::<Vec<_>>(),
               "pair_p50_us": last_ceiling.p50, "pair_p99_us": last_ceiling.p99, "tasks": CONCURRENCY}),
    );
    report.insert(
        "uncontended".into(),
        json!({"pairs_per_s": library_rate, "rounds": library_rounds.iter().map(|r| r.rate).collect::<Vec<_>>(),
               "pair_p50_us": last.p50, "pair_p99_us": last.p99, "ratio_to_ceiling": library_rate / ceiling_rate,
               "tasks": CONCURRENCY}),
    );

    let c = contended(&url, LockKind::Plain, 0).await?;
    print_contended("contended handoff", &c, ping.0);
    report.insert("contended".into(), contended_json(&c, ping.0));

    let w = watchdog_scale(&url, args.watchdog_locks).await?;
    println!(
        "watchdog scale           {} locks (taken in {:.1} s): {:.1} renew calls/period (N/100 = {}), \
         {:.1} keys/call, {} lost, client CPU {:.2}% of a core at period {:?} ({:.2}% projected at the default 30 s \
         timeout), {:.0} bytes RSS per lock",
        w.locks,
        w.acquire_s,
        w.calls_per_period,
        w.locks / 100,
        w.keys_per_call,
        w.lost,
        w.cpu_percent,
        w.period,
        w.cpu_percent_default,
        w.rss_per_lock
    );
    report.insert(
        "watchdog".into(),
        json!({"locks": w.locks, "watchdog_timeout_ms": w.period.as_millis() as u64 * 3,
               "renew_calls_per_period": w.calls_per_period, "renewed_keys_per_call": w.keys_per_call,
               "lost": w.lost,
               "client_cpu_percent_of_core": w.cpu_percent,
               "client_cpu_percent_projected_default_timeout": w.cpu_percent_default,
               "rss_bytes_per_lock": w.rss_per_lock, "acquire_all_s": w.acquire_s}),
    );

    let s = waiter_scale(&url, args.waiters, Some(lockwise::DEFAULT_OVERTAKE_LIMIT)).await?;
    println!(
        "waiter scale             {} waiters: {} subscription connection(s) for 1 waiting Client, \
         all acquired {:.0} ms after release, {} channels left",
        s.waiters, s.pubsub_connections, s.all_acquired_ms, s.channels_left
    );
    report.insert(
        "waiters".into(),
        json!({"waiters": s.waiters, "acquired": s.acquired, "pubsub_connections": s.pubsub_connections,
               "all_acquired_ms": s.all_acquired_ms, "channels_left": s.channels_left}),
    );

    let f = contended(&url, LockKind::Fair, 800).await?;
    print_contended("fair handoff", &f, ping.0);
    report.insert("fair".into(), contended_json(&f, ping.0));
    let floor = wake_floor(&url).await?;
    print_wake_floor(&floor, ping.0);
    report.insert(
        "handoff_floor".into(),
        json!({"publish_only_script_p50_us": floor.publish, "release_script_p50_us": floor.release,
               "fair_release_script_p50_us": floor.fair_release,
               "publish_only_over_ping_p50": floor.publish / ping.0,
               "release_over_ping_p50": floor.release / ping.0,
               "fair_release_over_ping_p50": floor.fair_release / ping.0}),
    );

    let rw = bench_rwlock::rwlock_rows(&url, args.seconds, ping.0).await?;
    report.insert("rwlock".into(), rw);
    let sem = bench_semaphore::run(&url, args.seconds).await?;
    println!("{}", sem.line);
    report.insert("semaphore".into(), sem.json);
    let lease = bench_lease_semaphore::run(&url, args.seconds).await?;
    report.insert("lease_semaphore".into(), lease);
    let sweep = bench_throughput::run(&url, args.seconds).await?;
    report.insert("throughput".into(), sweep);
    let metrics = bench_metrics::run(&url, args.seconds).await?;
    report.insert("metrics".into(), metrics);
    let overtake = bench_overtake::run(&url, args.seconds).await?;
    report.insert("overtake".into(), overtake);
    let peers = bench_peers::run(&url, args.seconds).await?;
    report.insert("peers".into(), peers);

    if let Some(path) = args.json {
        std::fs::write(&path, serde_json::to_string_pretty(&Json::Object(report))?)?;
        println!("\nfigures written to {path}");
    }
    Ok(())
}

fn print_contended(label: &str, c: &Contended, ping_p50: f64) {
    println!(
        "{label:<24} {:>9.0} acq/s    gap p50 {:>7.1} µs  p99 {:>7.1} µs  max {:>7.1} µs  \
         (p50 = {:.2} x PING)  lock calls/acq {:.2}  overlaps {}  counter {}/{}",
        c.rate,
        c.gap_p50,
        c.gap_p99,
        c.gap_max,
        c.gap_p50 / ping_p50,
        c.lock_calls_per_acquisition,
        c.overlaps,
        c.counter,
        c.acquisitions
    );
    let worst_p99 = c.per_client.iter().map(|p| p.1).fold(0.0, f64::max);
    let worst_max = c.per_client.iter().map(|p| p.2).fold(0.0, f64::max);
    let shares: Vec<usize> = c.per_client.iter().map(|p| p.0).collect();
    println!(
        "{:<24} wait per Client: worst p99 {worst_p99:.1} ms, worst max {worst_max:.1} ms; \
         acquisitions per Client {shares:?}",
        ""
    );
}

fn contended_json(c: &Contended, ping_p50: f64) -> Json {
    json!({"clients": 4, "tasks_per_client": 8, "acquisitions": c.acquisitions, "acq_per_s": c.rate,
           "gap_p50_us": c.gap_p50, "gap_p99_us": c.gap_p99, "gap_max_us": c.gap_max,
           "gap_p50_over_ping_p50": c.gap_p50 / ping_p50,
           "lock_script_calls_per_acquisition": c.lock_calls_per_acquisition,
           "overlaps": c.overlaps, "counter": c.counter,
           "per_client": c.per_client.iter().map(|(n, p99, max)| json!({"acquisitions": n, "wait_p99_ms": p99, "wait_max_ms": max})).collect::<Vec<_>>()})
}

async fn machine(url: &str) -> Result<Json, BoxError> {
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split(':').nth(1))
                .map(|m| m.trim().to_string())
        })
        .unwrap_or_else(|| "unknown cpu".into());
    let mut conn = raw_conn(url).await?;
    let info = Info::read(&mut conn, "server").await?;
    let version = info.field("redis_version").unwrap_or("?").to_string();
    Ok(json!({"cores": cores, "cpu": cpu, "redis_version": version}))
}

/// The same kind of connection lockwise uses: a RESP3 ConnectionManager.
async fn raw_conn(url: &str) -> Result<ConnectionManager, BoxError> {
    Ok(ConnectionManager::new(resp3_client(url)?).await?)
}

/// A client of `url` speaking RESP3, as lockwise's connections do.
fn resp3_client(url: &str) -> Result<redis::Client, BoxError> {
    Ok(redis::Client::open(format!(
        "{url}{}protocol=resp3",
        if url.contains('?') { "&" } else { "?" }
    ))?)
}

/// Loads `source` (SCRIPT LOAD) and returns its SHA1, for EVALSHA.
async fn load_script(conn: &ConnectionManager, source: &str) -> Result<String, BoxError> {
    Ok(redis::cmd("SCRIPT")
        .arg("LOAD")
        .arg(source)
        .query_async(&mut conn.clone())
        .await?)
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let i = ((sorted.len() - 1) as f64 * p).round() as usize;
    sorted[i]
}

fn mean(v: &[f64]) -> f64 {
    v.iter().sum::<f64>() / v.len().max(1) as f64
}

async fn ping_rtt(url: &str) -> Result<(f64, f64), BoxError> {
    let mut conn = raw_conn(url).await?;
    let mut samples = Vec::with_capacity(2000);
    for i in 0..2200 {
        let t = Instant::now();
        let _: String = redis::cmd("PING").query_async(&mut conn).await?;
        if i >= 200 {
            samples.push(t.elapsed().as_secs_f64() * 1e6);
        }
    }
    samples.sort_by(f64::total_cmp);
    Ok((percentile(&samples, 0.5), percentile(&samples, 0.99)))
}

struct Rate {
    rate: f64,
    p50: f64,
    p99: f64,
    /// Pairs completed in the round.
    pairs: usize,
}

/// Runs `CONCURRENCY` tasks of `pair` for `seconds`; pairs/s and pair latency percentiles.
async fn timed_pairs<F, Fut>(seconds: f64, pair: F) -> Result<Rate, BoxError>
where
    F: Fn(usize) -> Fut + Send + Sync + 'static,
    Fut: std::future::Future<Output = Result<(), BoxError>> + Send,
{
    timed_pairs_at(CONCURRENCY, seconds, pair).await
}

/// Runs `tasks` tasks of `pair` for `seconds`; pairs/s and pair latency percentiles.
async fn timed_pairs_at<F, Fut>(tasks: usize, seconds: f64, pair: F) -> Result<Rate, BoxError>
where
    F: Fn(usize) -> Fut + Send + Sync + 'static,
    Fut: std::future::Future<Output = Result<(), BoxError>> + Send,
{
    let concurrency = tasks;
    let pair = Arc::new(pair);
    let deadline = Instant::now() + Duration::from_secs_f64(seconds);
    let started = Instant::now();
    let mut tasks = Vec::new();
    for i in 0..concurrency {
        let pair = pair.clone();
        tasks.push(tokio::spawn(async move {
            let mut lat = Vec::new();
            while Instant::now() < deadline {
                let t = Instant::now();
                pair(i).await?;
                lat.push(t.elapsed().as_secs_f64() * 1e6);
            }
            Ok::<_, BoxError>(lat)
        }));
    }
    let mut all = Vec::new();
    for t in tasks {
        all.extend(t.await??);
    }
    let elapsed = started.elapsed().as_secs_f64();
    all.sort_by(f64::total_cmp);
    Ok(Rate {
        rate: all.len() as f64 / elapsed,
        p50: percentile(&all, 0.5),
        p99: percentile(&all, 0.99),
        pairs: all.len(),
    })
}

/// 1. The raw scripts through the same kind of connection: what Redis itself can serve.
async fn ceiling(url: &str, seconds: f64) -> Result<Rate, BoxError> {
    ceiling_at(url, seconds, CONCURRENCY).await
}

/// The raw lock and unlock scripts with `tasks` tasks, each on its own key.
async fn ceiling_at(url: &str, seconds: f64, tasks: usize) -> Result<Rate, BoxError> {
    ceiling_with(url, seconds, tasks, false).await
}

/// A release of one key and two arguments (workload 15): `lua/unlock.lua`'s path for an
/// unmarked hold, with the channel, the fair-queue keys, the message and the publish command
/// left out, as a release that derived them from the lock key when marked would send. A
/// marked hold or one not held answers -3 (that slower path is not built).
const LEAN_RELEASE: &str = "\
local got = redis.call('hmget', KEYS[1], ARGV[1], 'waiting') \
local holds = got[1] \
if not holds or got[2] then return -3 end \
local expected = tonumber(ARGV[2]) \
if expected > 0 and tonumber(holds) ~= expected then return -2 end \
if tonumber(holds) > 1 then return redis.call('hincrby', KEYS[1], ARGV[1], '-1') end \
redis.call('del', KEYS[1]) \
return 0";

/// [`ceiling_at`]; with `lean`, the release is [`LEAN_RELEASE`] instead of `lua/unlock.lua`.
async fn ceiling_with(url: &str, seconds: f64, tasks: usize, lean: bool) -> Result<Rate, BoxError> {
    let conn = raw_conn(url).await?;
    let unlock_source = if lean {
        LEAN_RELEASE.to_string()
    } else {
        unlock_source()
    };
    // lua/lock.lua as the engine sends it.
    let lock_source = suite::lua::script("LOCK");
    let (lock_sha, unlock_sha) = (
        load_script(&conn, &lock_source).await?,
        load_script(&conn, &unlock_source).await?,
    );
    let run_id = lockwise::Uuid::new_v4().simple().to_string();
    timed_pairs_at(tasks, seconds, move |i| {
        let mut conn = conn.clone();
        let (lock_sha, unlock_sha) = (lock_sha.clone(), unlock_sha.clone());
        let key = format!("bench:ceiling:lock:{{{run_id}-{i}}}");
        let claim = format!("bench:ceiling:claim:{{{run_id}-{i}}}");
        let channel = format!("bench:ceiling:channel:{{{run_id}-{i}}}");
        let queue = format!("bench:ceiling:fairqueue:{{{run_id}-{i}}}");
        let deadlines = format!("bench:ceiling:fairtimeouts:{{{run_id}-{i}}}");
        let fair_channel = format!("bench:ceiling:fairchannel:{{{run_id}-{i}}}");
        let owner = format!("{run_id}:{i}");
        let run_id = run_id.clone();
        async move {
            let _: Vec<i64> = redis::cmd("EVALSHA")
                .arg(&lock_sha)
                .arg(2)
                .arg(&key)
                .arg(&claim)
                .arg(30_000)
                .arg(&owner)
                .arg(0)
                .query_async(&mut conn)
                .await?;
            let mut release = redis::cmd("EVALSHA");
            release.arg(&unlock_sha);
            if lean {
                release.arg(1).arg(&key).arg(&owner).arg(0);
            } else {
                release
                    .arg(4)
                    .arg(&key)
                    .arg(&channel)
                    .arg(&queue)
                    .arg(&deadlines)
                    .arg(&owner)
                    .arg(&run_id)
                    .arg(0)
                    .arg("publish")
                    .arg(&fair_channel);
            }
            let released: i64 = release.query_async(&mut conn).await?;
            if released != 0 {
                return Err(format!("{key}: the release answered {released}").into());
            }
            Ok(())
        }
    })
    .await
}

/// The release script as src/wire/scripts.rs composes it: lua/unlock.lua, then the fair-queue
/// helpers and lua/unlock_fair.lua (reached only with a fair queue).
fn unlock_source() -> String {
    suite::lua::script("UNLOCK")
}

/// 2. The library: lock() -> unlock() with the watchdog, each task on its own lock.
async fn uncontended(url: &str, seconds: f64) -> Result<Rate, BoxError> {
    uncontended_at(url, seconds, CONCURRENCY).await
}

/// `lock()` -> `unlock()` with `tasks` tasks of one `Client`, each on its own lock.
async fn uncontended_at(url: &str, seconds: f64, tasks: usize) -> Result<Rate, BoxError> {
    uncontended_in(url, seconds, tasks, lockwise::KeyLayout::Lockwise).await
}

/// [`uncontended_at`] with a client in `layout`.
async fn uncontended_in(
    url: &str,
    seconds: f64,
    tasks: usize,
    layout: lockwise::KeyLayout,
) -> Result<Rate, BoxError> {
    let client = lockwise::Client::builder(url)
        .namespace("bench-uncontended")
        .key_layout(layout)
        .build()
        .await?;
    let locks: Arc<Vec<lockwise::RLock>> =
        Arc::new((0..tasks).map(|i| client.lock(format!("k{i}"))).collect());
    timed_pairs_at(tasks, seconds, move |i| {
        let lock = locks[i].clone();
        async move {
            lock.lock().await?.unlock().await?;
            Ok(())
        }
    })
    .await
}

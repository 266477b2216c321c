//! Workload 7, semaphore: acquire(1) -> release pairs of 64 tasks on one semaphore with 8 permits,
//! against the ceiling of its own two scripts (acquire + add, EVALSHA, always granted: each
//! task on its own key) at the same concurrency on the same kind of connection, and the
//! script calls per acquisition under contention (the herd: every call beyond 2 per pair is a
//! waiter woken that retried).

use serde_json::{json, Value as Json};

use super::{raw_conn, script_calls, timed_pairs, BoxError, Rate};
use lockwise::redis;

/// Permits of the contended semaphore.
const PERMITS: u64 = 8;

/// What the semaphore rows print and write.
pub(crate) struct SemaphoreBench {
    pub(crate) line: String,
    pub(crate) json: Json,
}

pub(crate) async fn run(url: &str, seconds: f64) -> Result<SemaphoreBench, BoxError> {
    let (mut ceilings, mut library) = (Vec::new(), Vec::new());
    let mut calls_per_acquisition = Vec::new();
    for round in 0..2 {
        ceilings.push(ceiling(url, seconds).await?);
        let (rate, calls) = contended(url, seconds, round).await?;
        library.push(rate);
        calls_per_acquisition.push(calls);
    }
    let mean = |v: &[f64]| v.iter().sum::<f64>() / v.len() as f64;
    let ceiling_rate = mean(&ceilings.iter().map(|r| r.rate).collect::<Vec<_>>());
    let library_rate = mean(&library.iter().map(|r| r.rate).collect::<Vec<_>>());
    let calls = mean(&calls_per_acquisition);
    let last = library.last().expect("two rounds");
    let line = format!(
        "semaphore (8 permits)    {library_rate:>9.0} pairs/s  p50 {:>7.1} µs   p99 {:>7.1} µs   \
         ratio {:.2} to its scripts' ceiling ({ceiling_rate:.0} pairs/s), {calls:.2} script calls per acquisition",
        last.p50,
        last.p99,
        library_rate / ceiling_rate
    );
    let json = json!({
        "permits": PERMITS, "tasks": super::CONCURRENCY,
        "pairs_per_s": library_rate, "rounds": library.iter().map(|r| r.rate).collect::<Vec<_>>(),
        "pair_p50_us": last.p50, "pair_p99_us": last.p99,
        "ceiling_pairs_per_s": ceiling_rate, "ratio_to_ceiling": library_rate / ceiling_rate,
        "script_calls_per_acquisition": calls,
    });
    Ok(SemaphoreBench { line, json })
}

/// The semaphore's acquire and add scripts, raw, each task on its own semaphore.
async fn ceiling(url: &str, seconds: f64) -> Result<Rate, BoxError> {
    let conn = raw_conn(url).await?;
    let acquire = suite::lua::script("SEMAPHORE_ACQUIRE");
    let add = suite::lua::script("SEMAPHORE_ADD");
    let mut c = conn.clone();
    let mut shas = Vec::new();
    for script in [&acquire, &add] {
        let sha: String = redis::cmd("SCRIPT")
            .arg("LOAD")
            .arg(script.as_str())
            .query_async(&mut c)
            .await?;
        shas.push(sha);
    }
    let run_id = lockwise::Uuid::new_v4().simple().to_string();
    timed_pairs(seconds, move |i| {
        let mut conn = conn.clone();
        let (acquire_sha, add_sha) = (shas[0].clone(), shas[1].clone());
        let key = format!("bench:ceiling:semaphore:{{{run_id}-{i}}}");
        let channel = format!("bench:ceiling:semaphorechannel:{{{run_id}-{i}}}");
        let run_id = run_id.clone();
        async move {
            let reply: Vec<i64> = redis::cmd("EVALSHA")
                .arg(&acquire_sha)
                .arg(1)
                .arg(&key)
                .arg(1)
                .arg(60_000)
                .query_async(&mut conn)
                .await?;
            // The first pair of each key finds it missing; the add creates it.
            let delta = if reply.first() == Some(&1) { 1 } else { 2 };
            let _: Vec<i64> = redis::cmd("EVALSHA")
                .arg(&add_sha)
                .arg(2)
                .arg(&key)
                .arg(&channel)
                .arg(delta)
                .arg(60_000)
                .arg("publish")
                .arg(&run_id)
                .query_async(&mut conn)
                .await?;
            Ok(())
        }
    })
    .await
}

/// 64 tasks of one Client on one semaphore: pairs/s, and script calls per acquisition.
async fn contended(url: &str, seconds: f64, round: usize) -> Result<(Rate, f64), BoxError> {
    let client = lockwise::Client::builder(url)
        .namespace("bench-semaphore")
        .build()
        .await?;
    let sem = client.semaphore(format!("pool-{round}"));
    sem.try_set_permits(PERMITS).await?;
    let mut stats = raw_conn(url).await?;
    let calls0 = script_calls(&mut stats).await?.0;
    let acquisitions = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
    let counted = acquisitions.clone();
    let rate = timed_pairs(seconds, move |_| {
        let (sem, counted) = (sem.clone(), counted.clone());
        async move {
            sem.acquire().await?.release().await?;
            counted.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            Ok(())
        }
    })
    .await?;
    let calls = script_calls(&mut stats).await?.0 - calls0;
    // Each pair is an acquire and a release script call at the least.
    let n = acquisitions
        .load(std::sync::atomic::Ordering::Relaxed)
        .max(1);
    Ok((rate, (calls as f64) / n as f64))
}

//! The `LeaseSemaphore` rows of `bench/src/bin/bench/`: acquire/release pairs per second of 64
//! tasks on one semaphore of 8 permits, against the ceiling of its own two scripts called
//! raw (EVALSHA, each task on a semaphore of its own, so every acquire is granted) in the
//! same run, and the script calls per acquisition under contention (every wakeup that did not
//! win a permit costs one).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use lockwise::redis;
use serde_json::{json, Value as Json};

use super::{mean, raw_conn, script_calls, timed_pairs, BoxError, Rate, CONCURRENCY};

const PERMITS: u64 = 8;
const LEASE: Duration = Duration::from_secs(30);

/// The figures of this kind, printed and returned for the JSON report.
pub(crate) async fn run(url: &str, seconds: f64) -> Result<Json, BoxError> {
    let mut ceilings = Vec::new();
    let mut libs = Vec::new();
    let mut per_acq = Vec::new();
    for _ in 0..2 {
        ceilings.push(ceiling(url, seconds).await?);
        let (rate, calls) = contended(url, seconds, 1).await?;
        libs.push(rate);
        per_acq.push(calls);
    }
    let (rate4, calls4) = contended(url, seconds, 4).await?;
    let ceiling_rate = mean(&ceilings.iter().map(|r| r.rate).collect::<Vec<_>>());
    let lib_rate = mean(&libs.iter().map(|r| r.rate).collect::<Vec<_>>());
    let calls1 = mean(&per_acq);
    println!(
        "lease semaphore ceiling  {ceiling_rate:>9.0} pairs/s  (raw acquire + release scripts, {CONCURRENCY} tasks)"
    );
    println!(
        "lease semaphore          {lib_rate:>9.0} pairs/s  ratio {:.2}   {CONCURRENCY} tasks on {PERMITS} permits, 1 Client: \
         {calls1:.2} script calls per acquisition (1 = acquire, +1 release)",
        lib_rate / ceiling_rate
    );
    println!(
        "lease semaphore 4 Clients {:>8.0} pairs/s  ratio {:.2}   {calls4:.2} script calls per acquisition",
        rate4.rate,
        rate4.rate / ceiling_rate
    );
    Ok(json!({
        "ceiling_pairs_per_s": ceiling_rate, "pairs_per_s": lib_rate,
        "ratio_to_ceiling": lib_rate / ceiling_rate, "permits": PERMITS, "tasks": CONCURRENCY,
        "script_calls_per_acquisition": calls1,
        "four_clients": {"pairs_per_s": rate4.rate, "ratio_to_ceiling": rate4.rate / ceiling_rate,
                         "script_calls_per_acquisition": calls4},
    }))
}

/// The raw acquire and release scripts, each task on a semaphore of its own with one permit.
async fn ceiling(url: &str, seconds: f64) -> Result<Rate, BoxError> {
    let conn = raw_conn(url).await?;
    let acquire = suite::lua::script("LEASE_SEM_ACQUIRE");
    let release = suite::lua::script("LEASE_SEM_RELEASE");
    let mut shas = Vec::new();
    for src in [&acquire, &release] {
        let sha: String = redis::cmd("SCRIPT")
            .arg("LOAD")
            .arg(src.as_str())
            .query_async(&mut conn.clone())
            .await?;
        shas.push(sha);
    }
    let run_id = lockwise::Uuid::new_v4().simple().to_string();
    let shas = Arc::new(shas);
    for i in 0..CONCURRENCY {
        let _: () = redis::cmd("SET")
            .arg(format!("bench:ls:leasesem:{{{run_id}-{i}}}"))
            .arg(1)
            .arg("PX")
            .arg(600_000)
            .query_async(&mut conn.clone())
            .await?;
    }
    timed_pairs(seconds, move |i| {
        let mut conn = conn.clone();
        let shas = shas.clone();
        let keys = [
            format!("bench:ls:leasesem:{{{run_id}-{i}}}"),
            format!("bench:ls:leasesemleases:{{{run_id}-{i}}}"),
            format!("bench:ls:leasesemchannel:{{{run_id}-{i}}}"),
        ];
        let id = lockwise::Uuid::new_v4().to_string();
        async move {
            let granted: Vec<i64> = redis::cmd("EVALSHA")
                .arg(&shas[0])
                .arg(3)
                .arg(&keys)
                .arg(1)
                .arg(LEASE.as_millis() as u64)
                .arg(600_000)
                .arg("publish")
                .arg("bench")
                .arg(&id)
                .query_async(&mut conn)
                .await?;
            assert_eq!(granted.first(), Some(&1), "an own semaphore always grants");
            let _: i64 = redis::cmd("EVALSHA")
                .arg(&shas[1])
                .arg(3)
                .arg(&keys)
                .arg(600_000)
                .arg("publish")
                .arg("bench")
                .arg(&id)
                .query_async(&mut conn)
                .await?;
            Ok(())
        }
    })
    .await
}

/// `CONCURRENCY` tasks over `clients` Clients on one semaphore of `PERMITS` permits:
/// pairs/s, and script calls per acquisition (counted by the server).
async fn contended(url: &str, seconds: f64, clients: usize) -> Result<(Rate, f64), BoxError> {
    let mut stats = raw_conn(url).await?;
    let ns = format!("bench-lease-{}", lockwise::Uuid::new_v4().simple());
    let mut sems = Vec::new();
    // The Clients stay alive for the whole run: a handle's waits end once its Client is gone.
    let mut keep = Vec::new();
    for _ in 0..clients {
        let c = lockwise::Client::builder(url)
            .namespace(ns.clone())
            .build()
            .await?;
        sems.push(c.lease_semaphore("pool"));
        keep.push(c);
    }
    sems[0].try_set_permits(PERMITS).await?;
    let acquisitions = Arc::new(AtomicU64::new(0));
    let calls0 = script_calls(&mut stats).await?.0;
    let counted = acquisitions.clone();
    let sems = Arc::new(sems);
    let rate = timed_pairs(seconds, move |i| {
        let sem = sems[i % sems.len()].clone();
        let counted = counted.clone();
        async move {
            let permit = sem.acquire(LEASE).await?;
            counted.fetch_add(1, Ordering::Relaxed);
            permit.release().await?;
            Ok(())
        }
    })
    .await?;
    let calls = script_calls(&mut stats).await?.0 - calls0;
    let n = acquisitions.load(Ordering::Relaxed).max(1);
    drop(keep);
    Ok((rate, calls as f64 / n as f64))
}

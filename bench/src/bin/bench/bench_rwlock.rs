//! Bench rows of the read-write lock: read throughput of 64 concurrent readers on one
//! `RwLock` against 64 tasks on one `RLock` (which serializes them), and the write handoff
//! gap between two clients over the PING round trip.

use std::sync::Arc;
use std::time::{Duration, Instant};

use lockwise::Client;
use serde_json::{json, Value};

type BoxError = Box<dyn std::error::Error + Send + Sync>;

const TASKS: usize = 64;
const CLIENTS: usize = 4;
/// What each reader does while holding: long enough that holds overlap.
const HOLD: Duration = Duration::from_millis(1);

async fn clients(url: &str, ns: &str) -> Result<Vec<Client>, BoxError> {
    let mut out = Vec::new();
    for _ in 0..CLIENTS {
        out.push(Client::builder(url).namespace(ns).build().await?);
    }
    Ok(out)
}

/// Holds per second of `TASKS` tasks over `CLIENTS` clients for `seconds`.
async fn holds_per_s(url: &str, seconds: f64, rw: bool) -> Result<f64, BoxError> {
    let ns = format!("bench-rw-{}", lockwise::Uuid::new_v4().simple());
    let cs = clients(url, &ns).await?;
    let deadline = Instant::now() + Duration::from_secs_f64(seconds);
    let started = Instant::now();
    let mut tasks = Vec::new();
    for t in 0..TASKS {
        let c = cs[t % CLIENTS].clone();
        tasks.push(tokio::spawn(async move {
            let mut n = 0u64;
            while Instant::now() < deadline {
                if rw {
                    let g = c.rw_lock("bench").read().lock().await?;
                    tokio::time::sleep(HOLD).await;
                    g.unlock().await?;
                } else {
                    let g = c.lock("bench").lock().await?;
                    tokio::time::sleep(HOLD).await;
                    g.unlock().await?;
                }
                n += 1;
            }
            Ok::<_, BoxError>(n)
        }));
    }
    let mut total = 0;
    for t in tasks {
        total += t.await??;
    }
    Ok(total as f64 / started.elapsed().as_secs_f64())
}

/// Write handoff gap: client A unlocks its write hold while client B waits for it;
/// microseconds from the unlock call to B's grant (p50, p99).
async fn handoff(url: &str, rounds: usize) -> Result<(f64, f64), BoxError> {
    let ns = format!("bench-rwh-{}", lockwise::Uuid::new_v4().simple());
    let cs = clients(url, &ns).await?;
    let (a, b) = (cs[0].clone(), cs[1].clone());
    let mut gaps = Vec::with_capacity(rounds);
    for _ in 0..rounds {
        let g = a.rw_lock("h").write().lock().await?;
        let released = Arc::new(std::sync::Mutex::new(None::<Instant>));
        let waiter = tokio::spawn({
            let (b, released) = (b.clone(), released.clone());
            async move {
                let g = b.rw_lock("h").write().lock().await?;
                let at = Instant::now();
                g.unlock().await?;
                let from = released.lock().unwrap().expect("released first");
                Ok::<_, BoxError>(at.duration_since(from))
            }
        });
        tokio::time::sleep(Duration::from_millis(2)).await;
        *released.lock().unwrap() = Some(Instant::now());
        g.unlock().await?;
        gaps.push(waiter.await??.as_secs_f64() * 1e6);
    }
    gaps.sort_by(f64::total_cmp);
    let at = |p: f64| gaps[((gaps.len() - 1) as f64 * p).round() as usize];
    Ok((at(0.5), at(0.99)))
}

/// Runs the rows, prints them, returns them for the JSON report.
pub(crate) async fn rwlock_rows(url: &str, seconds: f64, ping_p50: f64) -> Result<Value, BoxError> {
    let reads = holds_per_s(url, seconds, true).await?;
    let plain = holds_per_s(url, seconds, false).await?;
    println!(
        "rwlock reads             {reads:>9.0} holds/s with {TASKS} readers ({HOLD:?} each) vs \
         {plain:>7.0} holds/s on one RLock: ratio {:.1}",
        reads / plain
    );
    let (p50, p99) = handoff(url, 300).await?;
    println!(
        "rwlock write handoff     p50 {p50:>7.1} µs   p99 {p99:>7.1} µs   = {:.1} PING RTTs",
        p50 / ping_p50
    );
    Ok(
        json!({"reads_per_s": reads, "rlock_holds_per_s": plain, "ratio": reads / plain,
              "tasks": TASKS, "hold_ms": HOLD.as_millis() as u64,
              "write_handoff_p50_us": p50, "write_handoff_p99_us": p99,
              "write_handoff_rtts": p50 / ping_p50}),
    )
}

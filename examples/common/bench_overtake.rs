//! Workload 12: how long a waiter in another process is overtaken by a busy one.
//!
//! A busy Client runs 8 tasks that each lock one lock, hold it 2 ms, unlock and lock again at
//! once; a remote Client's single task takes the same lock again and again (hold 2 ms, pause
//! 20 ms) for the round's time. Each unlock wakes the releasing Client's own waiters before the
//! remote one hears the message, and a task locking again right after its unlock sends its
//! attempt before either: without a rule the remote task only gets in by luck. The round runs
//! with the overtake limit on (the default, 200 ms) and off (`overtake_limit(None)` on both
//! Clients), and prints the remote task's waits and the busy Client's holds per second.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use lockwise::Client;
use serde_json::{json, Value as Json};

use super::{percentile, BoxError};

const BUSY_TASKS: usize = 8;
const HOLD: Duration = Duration::from_millis(2);
const REMOTE_PAUSE: Duration = Duration::from_millis(20);

/// One round's figures.
struct Round {
    /// The remote task's completed waits, in ms, sorted.
    waits_ms: Vec<f64>,
    /// Its wait still running when the round ended (ms), if any: a lower bound.
    unfinished_ms: Option<f64>,
    busy_holds_per_s: f64,
}

/// Both rounds; prints one line each and returns their JSON.
pub async fn run(url: &str, seconds: f64) -> Result<Json, BoxError> {
    let length = Duration::from_secs_f64((seconds * 2.0).max(2.0));
    let mut report = serde_json::Map::new();
    for (label, limit) in [
        ("limit 200 ms", Some(lockwise::DEFAULT_OVERTAKE_LIMIT)),
        ("limit off", None),
    ] {
        let r = round(url, limit, length).await?;
        let max = r.waits_ms.last().copied().unwrap_or(0.0);
        let done = if r.waits_ms.is_empty() {
            "none done".to_string()
        } else {
            format!(
                "{} done, p50 {:>7.1} ms  p99 {:>7.1} ms  max {:>7.1} ms",
                r.waits_ms.len(),
                percentile(&r.waits_ms, 0.5),
                percentile(&r.waits_ms, 0.99),
                max
            )
        };
        let unfinished = r.unfinished_ms.map_or(String::new(), |u| {
            format!(", one still waiting after {u:.0} ms")
        });
        println!(
            "overtake ({label:<12})  remote waits: {done}{unfinished}; busy Client {:.0} holds/s",
            r.busy_holds_per_s
        );
        report.insert(
            label.into(),
            json!({"overtake_limit_ms": limit.map(|l| l.as_millis() as u64),
                   "remote_waits": r.waits_ms.len(),
                   "remote_wait_p50_ms": percentile(&r.waits_ms, 0.5),
                   "remote_wait_p99_ms": percentile(&r.waits_ms, 0.99),
                   "remote_wait_max_ms": max,
                   "remote_wait_unfinished_ms": r.unfinished_ms,
                   "busy_holds_per_s": r.busy_holds_per_s}),
        );
    }
    Ok(Json::Object(report))
}

async fn round(url: &str, limit: Option<Duration>, length: Duration) -> Result<Round, BoxError> {
    let ns = format!("bench-overtake-{}", uuid::Uuid::new_v4().simple());
    let client = || {
        Client::builder(url)
            .namespace(ns.clone())
            .overtake_limit(limit)
            .build()
    };
    let (busy, remote) = (client().await?, client().await?);
    let stop = Arc::new(AtomicBool::new(false));
    let busy_holds = Arc::new(AtomicU64::new(0));
    let tasks: Vec<_> = (0..BUSY_TASKS)
        .map(|_| {
            let (lock, stop, holds) = (busy.lock("hot"), stop.clone(), busy_holds.clone());
            tokio::spawn(async move {
                while !stop.load(Ordering::Relaxed) {
                    let guard = lock.lock().await?;
                    tokio::time::sleep(HOLD).await;
                    guard.unlock().await?;
                    holds.fetch_add(1, Ordering::Relaxed);
                }
                Ok::<(), lockwise::Error>(())
            })
        })
        .collect();
    // Let the busy Client settle into its loop first.
    tokio::time::sleep(Duration::from_millis(200)).await;
    let start = Instant::now();
    let end = start + length;
    let lock = remote.lock("hot");
    let mut waits_ms = Vec::new();
    let mut unfinished_ms = None;
    while Instant::now() < end {
        let asked = Instant::now();
        let left = end.saturating_duration_since(asked);
        match lock.try_lock(left, None).await {
            Ok(guard) => {
                waits_ms.push(asked.elapsed().as_secs_f64() * 1e3);
                tokio::time::sleep(HOLD).await;
                guard.unlock().await?;
                tokio::time::sleep(REMOTE_PAUSE).await;
            }
            Err(e) if e.is_timeout() => unfinished_ms = Some(asked.elapsed().as_secs_f64() * 1e3),
            Err(e) => return Err(e.into()),
        }
    }
    let elapsed = start.elapsed().as_secs_f64();
    stop.store(true, Ordering::Relaxed);
    for t in tasks {
        t.await??;
    }
    waits_ms.sort_by(f64::total_cmp);
    Ok(Round {
        waits_ms,
        unfinished_ms,
        busy_holds_per_s: busy_holds.load(Ordering::Relaxed) as f64 / elapsed,
    })
}

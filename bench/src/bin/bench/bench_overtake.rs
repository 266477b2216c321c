//! Workload 12: how long a waiter in another process is overtaken by a busy one.
//!
//! A busy Client runs 8 tasks that each lock one lock, hold it 2 ms, unlock and lock again at
//! once; a remote Client's single task takes the same lock again and again (hold 2 ms, pause
//! 20 ms) for the round's time. Each unlock wakes the releasing Client's own waiters before the
//! remote one hears the message, and a task locking again right after its unlock sends its
//! attempt before either: without a rule the remote task only gets in by luck. The round runs
//! with the overtake limit on (the default, 200 ms) and off (`overtake_limit(None)` on both
//! Clients), and prints the remote task's waits and the busy Client's holds per second.
//!
//! Then several clients: 4 Clients x 4 tasks take one lock in turn (holds of 5-40 ms, one in
//! ten 200 ms, a short pause), with the limit on and off; printed: the worst single wait, the
//! largest lead of an overtaker (how much later than a waiter an acquire began that was
//! served before it) and the most acquisitions that overtook one wait.

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
    for (label, limit) in [
        ("limit 200 ms", Some(lockwise::DEFAULT_OVERTAKE_LIMIT)),
        ("limit off", None),
    ] {
        let turns = many_round(url, limit, length).await?;
        let (worst, lead, most) = overtaking(&turns);
        println!(
            "overtake ({label:<12})  {MANY_CLIENTS} Clients x {MANY_TASKS} tasks: {} holds, \
             worst wait {:>7.1} ms, largest lead of an overtaker {:>7.1} ms, \
             most overtakes of one wait {most}",
            turns.len(),
            worst.as_secs_f64() * 1e3,
            lead.as_secs_f64() * 1e3,
        );
        report.insert(
            format!("{label}, {MANY_CLIENTS} clients"),
            json!({"overtake_limit_ms": limit.map(|l| l.as_millis() as u64),
                   "holds": turns.len(),
                   "worst_wait_ms": worst.as_secs_f64() * 1e3,
                   "largest_lead_ms": lead.as_secs_f64() * 1e3,
                   "most_overtakes_of_one_wait": most}),
        );
    }
    Ok(Json::Object(report))
}

const MANY_CLIENTS: usize = 4;
const MANY_TASKS: usize = 4;

/// One acquisition of the several-clients round: when it was asked for and granted.
#[derive(Clone, Copy)]
struct Turn {
    asked: Instant,
    granted: Instant,
}

/// The worst wait, the largest lead of an overtaker and the most overtakes of one wait.
fn overtaking(turns: &[Turn]) -> (Duration, Duration, usize) {
    let worst = turns
        .iter()
        .map(|t| t.granted - t.asked)
        .max()
        .unwrap_or_default();
    let (mut lead, mut most) = (Duration::ZERO, 0);
    for a in turns {
        let overtakers = turns
            .iter()
            .filter(|b| b.asked > a.asked && b.granted < a.granted)
            .inspect(|b| lead = lead.max(b.asked - a.asked))
            .count();
        most = most.max(overtakers);
    }
    (worst, lead, most)
}

/// [`MANY_CLIENTS`] Clients x [`MANY_TASKS`] tasks take one lock in turn for `length`.
async fn many_round(
    url: &str,
    limit: Option<Duration>,
    length: Duration,
) -> Result<Vec<Turn>, BoxError> {
    let ns = format!("bench-overtake-many-{}", lockwise::Uuid::new_v4().simple());
    let mut clients = Vec::new();
    for _ in 0..MANY_CLIENTS {
        let client = Client::builder(url)
            .namespace(ns.clone())
            .overtake_limit(limit)
            .build()
            .await?;
        clients.push(client);
    }
    let until = Instant::now() + length;
    let mut tasks = Vec::new();
    for (c, client) in clients.iter().enumerate() {
        for t in 0..MANY_TASKS {
            let lock = client.lock("hot");
            let who = (c * MANY_TASKS + t) as u64;
            tasks.push(tokio::spawn(async move {
                let mut turns = Vec::new();
                let mut n = 0u64;
                while Instant::now() < until {
                    n += 1;
                    let asked = Instant::now();
                    let guard = lock.lock().await?;
                    let granted = Instant::now();
                    let hold = if (n + who).is_multiple_of(10) {
                        200
                    } else {
                        5 + (n * 7 + who * 13) % 36
                    };
                    tokio::time::sleep(Duration::from_millis(hold)).await;
                    guard.unlock().await?;
                    turns.push(Turn { asked, granted });
                    tokio::time::sleep(Duration::from_millis(1 + (n + who) % 5)).await;
                }
                Ok::<_, lockwise::Error>(turns)
            }));
        }
    }
    let mut turns = Vec::new();
    for t in tasks {
        turns.extend(t.await??);
    }
    Ok(turns)
}

async fn round(url: &str, limit: Option<Duration>, length: Duration) -> Result<Round, BoxError> {
    let ns = format!("bench-overtake-{}", lockwise::Uuid::new_v4().simple());
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

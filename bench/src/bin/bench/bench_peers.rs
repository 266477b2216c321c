//! Workload 13: lockwise against the Rust crates its README compares it with, `rslock` and
//! `redis-lock`, each used the way its docs show, with its defaults, on the same server in the
//! same run.
//!
//! - rslock 0.10 (`LockManager::acquire` → `LockGuard::release`): `SET NX PX` with a random
//!   value and a compare-and-delete script; a waiter retries after a random pause of up to
//!   200 ms (its default retry delay).
//! - redis-lock 0.5 (`MultiResourceLock::acquire` → `release`): two Redis Functions
//!   (`FCALL`); a waiter sleeps 1 s between attempts (`DEFAULT_SLEEP`), and every call opens
//!   a new connection, as the crate does.
//! - lockwise: `lock()` → `unlock()` on an `RLock` with the watchdog (its defaults).
//!
//! For each: a lone caller's lock → unlock p50 / p99, uncontended pairs/s with 64 tasks (each
//! on its own name, one handle per process as each crate suggests) and a contended lock:
//! 4 handles × 8 tasks on one name, each task pausing 1 ms after its release (work outside
//! the lock) before it asks again, so a release finds others waiting and the releasing task
//! cannot simply take the lock back. The gap is the time the lock sits free between one hold's
//! end and the next one's start while tasks wait (p50 in PING round trips); the wait is from a
//! task's call to its acquire's return. The rounds are interleaved, so drift on a shared
//! machine hits every crate. Redisson (Java) is not measured: this machine runs no JVM.

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{json, Value as Json};

use super::{mean, percentile, ping_rtt, timed_pairs_at, BoxError};

type BoxFuture<T> = Pin<Box<dyn Future<Output = T> + Send>>;
/// Ends a hold.
type Release = Box<dyn FnOnce() -> BoxFuture<Result<(), BoxError>> + Send>;
/// Takes the lock `name` through handle `handle` (waiting as the crate waits).
type Acquire = Arc<dyn Fn(usize, String) -> BoxFuture<Result<Release, BoxError>> + Send + Sync>;

/// Handles per crate in the contended handoff (one per simulated process).
const HANDLES: usize = 4;
/// Tasks per handle in the contended handoff.
const TASKS_PER_HANDLE: usize = 8;
/// Tasks of the uncontended rows.
const UNCONTENDED_TASKS: usize = 64;
/// The lease the peers are given (they have no watchdog).
const LEASE: Duration = Duration::from_secs(30);

const PEERS: [&str; 3] = ["lockwise", "rslock", "redis-lock"];

async fn acquirer(peer: &str, url: &str, run: &str) -> Result<Acquire, BoxError> {
    match peer {
        "lockwise" => {
            let mut clients = Vec::new();
            for _ in 0..HANDLES {
                clients.push(
                    lockwise::Client::builder(url)
                        .namespace(format!("bench-peers-{run}"))
                        .build()
                        .await?,
                );
            }
            let clients = Arc::new(clients);
            Ok(Arc::new(move |h, name| {
                let lock = clients[h].lock(name);
                Box::pin(async move {
                    let guard = lock.lock().await?;
                    Ok(Box::new(move || {
                        Box::pin(async move { Ok(guard.unlock().await?) }) as BoxFuture<_>
                    }) as Release)
                })
            }))
        }
        "rslock" => {
            let managers: Arc<Vec<rslock::LockManager>> = Arc::new(
                (0..HANDLES)
                    .map(|_| rslock::LockManager::new(vec![url.to_string()]))
                    .collect(),
            );
            let run = run.to_string();
            Ok(Arc::new(move |h, name| {
                let manager = managers[h].clone();
                let resource = format!("bench-peers-{run}:{name}");
                Box::pin(async move {
                    let guard = manager
                        .acquire(resource.as_str(), LEASE)
                        .await
                        .map_err(|e| format!("rslock: {e}"))?;
                    Ok(Box::new(move || {
                        Box::pin(async move {
                            guard.release().await;
                            Ok(())
                        }) as BoxFuture<_>
                    }) as Release)
                })
            }))
        }
        "redis-lock" => {
            let client = redis_027::Client::open(url)?;
            redis_lock::setup(&client)
                .await
                .map_err(|e| format!("redis-lock setup: {e}"))?;
            let run = run.to_string();
            Ok(Arc::new(move |_h, name| {
                let client = client.clone();
                let resource = vec![format!("bench-peers-{run}:{name}")];
                Box::pin(async move {
                    let mut lock = redis_lock::MultiResourceLock::new(client)?;
                    let id = lock
                        .acquire(
                            &resource,
                            LEASE,
                            redis_lock::DEFAULT_TIMEOUT,
                            redis_lock::DEFAULT_SLEEP,
                        )
                        .await?
                        .ok_or("redis-lock: timed out")?;
                    Ok(Box::new(move || {
                        Box::pin(async move {
                            lock.release(&id).await?;
                            Ok(())
                        }) as BoxFuture<_>
                    }) as Release)
                })
            }))
        }
        other => Err(format!("unknown peer {other}").into()),
    }
}

/// `tasks` tasks, each on its own name, lock → unlock for `seconds`.
async fn uncontended(
    acquire: &Acquire,
    tasks: usize,
    seconds: f64,
) -> Result<super::Rate, BoxError> {
    let acquire = acquire.clone();
    timed_pairs_at(tasks, seconds, move |i| {
        let held = acquire(i % HANDLES, format!("u{i}"));
        async move {
            let release = held.await?;
            release().await
        }
    })
    .await
}

/// The pause of a contending task between its release and its next acquire.
const PAUSE: Duration = Duration::from_millis(1);

/// Handoff gaps and waits (µs, each sorted) over `seconds` of 4 handles × 8 tasks on one
/// name, or at most `max_holds` holds.
async fn handoff(
    acquire: &Acquire,
    seconds: f64,
    max_holds: usize,
) -> Result<(Vec<f64>, Vec<f64>), BoxError> {
    let holds: Arc<Mutex<Vec<(Instant, Instant)>>> = Arc::default();
    let waits: Arc<Mutex<Vec<f64>>> = Arc::default();
    let deadline = Instant::now() + Duration::from_secs_f64(seconds);
    let mut tasks = Vec::new();
    for h in 0..HANDLES {
        for _ in 0..TASKS_PER_HANDLE {
            let (acquire, holds, waits) = (acquire.clone(), holds.clone(), waits.clone());
            tasks.push(tokio::spawn(async move {
                while Instant::now() < deadline && holds.lock().unwrap().len() < max_holds {
                    let asked = Instant::now();
                    let release = acquire(h, "contended".into()).await?;
                    let start = Instant::now();
                    tokio::task::yield_now().await;
                    let end = Instant::now();
                    release().await?;
                    holds.lock().unwrap().push((start, end));
                    waits
                        .lock()
                        .unwrap()
                        .push((start - asked).as_secs_f64() * 1e6);
                    tokio::time::sleep(PAUSE).await;
                }
                Ok::<_, BoxError>(())
            }));
        }
    }
    for t in tasks {
        t.await??;
    }
    let mut holds = std::mem::take(&mut *holds.lock().unwrap());
    holds.sort_by_key(|h| h.0);
    let mut gaps: Vec<f64> = holds
        .windows(2)
        .map(|w| w[1].0.saturating_duration_since(w[0].1).as_secs_f64() * 1e6)
        .collect();
    gaps.sort_by(f64::total_cmp);
    let mut waits = std::mem::take(&mut *waits.lock().unwrap());
    waits.sort_by(f64::total_cmp);
    Ok((gaps, waits))
}

/// Runs the workload; prints a table and returns its JSON.
pub(super) async fn run(url: &str, seconds: f64) -> Result<Json, BoxError> {
    let run = lockwise::Uuid::new_v4().simple().to_string();
    let ping = ping_rtt(url).await?;
    let mut acquirers = Vec::new();
    for peer in PEERS {
        acquirers.push(acquirer(peer, url, &run).await?);
    }
    // Two interleaved rounds of the throughput rows, then the handoffs.
    let mut lone: Vec<Vec<super::Rate>> = PEERS.iter().map(|_| Vec::new()).collect();
    let mut many: Vec<Vec<f64>> = PEERS.iter().map(|_| Vec::new()).collect();
    for _ in 0..2 {
        for (p, acquire) in acquirers.iter().enumerate() {
            lone[p].push(uncontended(acquire, 1, seconds / 2.0).await?);
            many[p].push(
                uncontended(acquire, UNCONTENDED_TASKS, seconds / 2.0)
                    .await?
                    .rate,
            );
        }
    }
    let mut handoffs = Vec::new();
    for acquire in &acquirers {
        handoffs.push(handoff(acquire, seconds * 2.0, 1_600).await?);
    }
    println!(
        "peers (defaults, same server)  lone p50     lone p99   pairs/s @{UNCONTENDED_TASKS}   \
         handoff gap p50 (x PING)     wait p99   holds"
    );
    let lockwise_rate = mean(&many[0]);
    let mut rows = Vec::new();
    for (p, peer) in PEERS.iter().enumerate() {
        let last = lone[p].last().expect("two rounds");
        let rate = mean(&many[p]);
        let (gaps, waits) = &handoffs[p];
        let gap_p50 = percentile(gaps, 0.5);
        let wait_p99 = percentile(waits, 0.99) / 1e3;
        println!(
            "  {peer:<28} {:>7.1} µs {:>9.1} µs {:>11.0} {:>12.1} µs ({:>6.1}) {:>9.1} ms {:>7}",
            last.p50,
            last.p99,
            rate,
            gap_p50,
            gap_p50 / ping.0,
            wait_p99,
            waits.len()
        );
        rows.push(json!({
            "peer": peer,
            "lone_p50_us": last.p50, "lone_p99_us": last.p99,
            "pairs_per_s": rate, "rounds": many[p],
            "lockwise_pairs_over_peer": lockwise_rate / rate,
            "handoff_gap_p50_us": gap_p50, "handoff_gap_p99_us": percentile(gaps, 0.99),
            "handoff_gap_p50_over_ping": gap_p50 / ping.0, "holds": waits.len(),
            "wait_p50_ms": percentile(waits, 0.5) / 1e3, "wait_p99_ms": wait_p99,
        }));
    }
    Ok(
        json!({"ping_p50_us": ping.0, "tasks": UNCONTENDED_TASKS, "handles": HANDLES,
              "tasks_per_handle": TASKS_PER_HANDLE, "rows": rows}),
    )
}

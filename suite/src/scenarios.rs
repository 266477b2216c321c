//! The overtake scenarios that both the single-server tests (`tests/locks/overtake.rs`) and the
//! Cluster test (`tests/deployments/overtake.rs`) run: a busy `Client` whose tasks re-lock at
//! once, a remote task's waits against it, and a claimant that leaves a free lock.

use crate::OrNone;
use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use lockwise::{Client, RLock};

use crate::Interval;

/// Who the remote task's holds are recorded as.
const REMOTE: usize = 99;

/// `tasks` tasks of `busy` lock `name`, hold it for `hold` and lock again at once, until
/// `stop`; every hold is recorded in `log`, as the task's index.
fn hammer(
    busy: &Client,
    name: &str,
    tasks: usize,
    hold: Duration,
    stop: &Arc<AtomicBool>,
    log: &Arc<Mutex<Vec<Interval>>>,
) -> Vec<tokio::task::JoinHandle<()>> {
    (0..tasks)
        .map(|who| {
            let (lock, stop, log) = (busy.lock(name), stop.clone(), log.clone());
            tokio::spawn(async move {
                while !stop.load(Ordering::Relaxed) {
                    let guard = lock.lock().await.expect("busy lock");
                    let start = Instant::now();
                    tokio::time::sleep(hold).await;
                    let end = Instant::now();
                    guard.unlock().await.expect("busy unlock");
                    log.lock().unwrap().push(Interval { start, end, who });
                }
            })
        })
        .collect()
}

/// A remote task takes `lock` `rounds` times (hold 2 ms, then 20 ms apart), each within
/// 20 s; returns how long each took. Its holds are recorded in `log` as [`REMOTE`].
async fn remote_waits(
    lock: &RLock,
    rounds: usize,
    log: &Arc<Mutex<Vec<Interval>>>,
) -> Vec<Duration> {
    let mut waits = Vec::new();
    for _ in 0..rounds {
        let t0 = Instant::now();
        let guard = lock
            .try_lock(Duration::from_secs(20), None)
            .await
            .or_none()
            .unwrap();
        let start = Instant::now();
        waits.push(start - t0);
        let guard = guard.expect("the remote waiter got the lock within 20 s");
        tokio::time::sleep(Duration::from_millis(2)).await;
        let end = Instant::now();
        guard.unlock().await.unwrap();
        log.lock().unwrap().push(Interval {
            start,
            end,
            who: REMOTE,
        });
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    waits
}

/// The starvation case: 8 tasks of `busy` lock `name`, hold it 2 ms and lock again at once;
/// after 200 ms a task of `remote` takes it `rounds` times (see `remote_waits`). Returns
/// how long each remote take waited, and every hold of both sides.
pub async fn waits_against_busy(
    busy: &Client,
    remote: &Client,
    name: &str,
    rounds: usize,
) -> (Vec<Duration>, Vec<Interval>) {
    let (stop, log) = (Arc::new(AtomicBool::new(false)), Arc::default());
    let tasks = hammer(busy, name, 8, Duration::from_millis(2), &stop, &log);
    tokio::time::sleep(Duration::from_millis(200)).await;
    let waits = remote_waits(&remote.lock(name), rounds, &log).await;
    stop.store(true, Ordering::Relaxed);
    for t in tasks {
        tokio::time::timeout(Duration::from_secs(10), t)
            .await
            .expect("a busy task stopped")
            .unwrap();
    }
    let holds = std::mem::take(&mut *log.lock().unwrap());
    (waits, holds)
}

/// A claimant leaves a free lock: with lock `name` held by another owner (on a long lease),
/// `eager`'s task waits and claims it (`claimed` returns once the claim key exists), and
/// `patient`'s task waits too. Then `expire` deletes the holder's key as an expiry would (no
/// unlock, no message) and the claimant is cancelled. Returns how long after that
/// `patient`'s task took the lock.
pub async fn taken_after_claimant_leaves(
    eager: &Client,
    patient: &Client,
    name: &str,
    claimed: impl Future<Output = ()>,
    expire: impl Future<Output = ()>,
) -> Duration {
    let lock = eager.lock(name);
    let claimant = tokio::spawn(async move { lock.lock().await.map(drop) });
    claimed.await;
    let lock = patient.lock(name);
    let waiter = tokio::spawn(async move {
        let guard = lock
            .try_lock(Duration::from_secs(15), None)
            .await
            .or_none()
            .unwrap();
        let acquired = Instant::now();
        guard.expect("acquired").unlock().await.unwrap();
        acquired
    });
    // The other waiter has looked and sleeps on the holder's lease.
    tokio::time::sleep(Duration::from_millis(300)).await;
    expire.await;
    claimant.abort();
    let t0 = Instant::now();
    let acquired = tokio::time::timeout(Duration::from_secs(20), waiter)
        .await
        .expect("the waiter finished")
        .unwrap();
    acquired.saturating_duration_since(t0)
}

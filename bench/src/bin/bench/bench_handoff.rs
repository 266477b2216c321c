//! Workloads 3 and 6: the contended handoff on an `RLock` and on a `FairLock`, 4 Clients x 8
//! tasks on one lock; gaps between holds, overlaps and a shared counter that must end exact.

use super::*;

pub(super) struct Contended {
    pub(super) acquisitions: usize,
    pub(super) rate: f64,
    pub(super) gap_p50: f64,
    pub(super) gap_p99: f64,
    pub(super) gap_max: f64,
    pub(super) overlaps: usize,
    pub(super) counter: u64,
    pub(super) lock_calls_per_acquisition: f64,
    /// Per Client: (acquisitions, wait p99 ms, wait max ms), the wait measured from the
    /// `lock()` call to its return.
    pub(super) per_client: Vec<(usize, f64, f64)>,
}

#[derive(Clone, Copy, PartialEq)]
pub(super) enum LockKind {
    Plain,
    Fair,
}

/// An acquired lock of either kind, released by `unlock`.
pub(super) enum AnyGuard {
    Plain(lockwise::RLockGuard),
    Fair(lockwise::FairLockGuard),
}

impl AnyGuard {
    pub(super) async fn unlock(self) -> lockwise::Result<()> {
        match self {
            AnyGuard::Plain(g) => g.unlock().await,
            AnyGuard::Fair(g) => g.unlock().await,
        }
    }
}

/// 3 and 6. 4 Clients x 8 tasks on one lock; each hold does a non-atomic read-modify-write.
pub(super) async fn contended(
    url: &str,
    kind: LockKind,
    total: usize,
) -> Result<Contended, BoxError> {
    contended_in(url, kind, total, lockwise::KeyLayout::Lockwise).await
}

/// [`contended`] with clients in `layout`.
pub(super) async fn contended_in(
    url: &str,
    kind: LockKind,
    total: usize,
    layout: lockwise::KeyLayout,
) -> Result<Contended, BoxError> {
    const TOTAL_DEFAULT: usize = 1600;
    let total = if total == 0 { TOTAL_DEFAULT } else { total };
    let mut stats = raw_conn(url).await?;
    let ns = format!("bench-contended-{}", lockwise::Uuid::new_v4().simple());
    let mut clients = Vec::new();
    for _ in 0..4 {
        clients.push(
            lockwise::Client::builder(url)
                .namespace(ns.clone())
                .key_layout(layout)
                .build()
                .await?,
        );
    }
    let calls0 = script_calls(&mut stats).await?.0;
    let remaining = Arc::new(AtomicUsize::new(total));
    let counter = Arc::new(AtomicU64::new(0));
    let holds: Arc<Mutex<Vec<(Instant, Instant)>>> = Arc::new(Mutex::new(Vec::new()));
    let started = Instant::now();
    let mut tasks = Vec::new();
    let waits: Arc<Mutex<Vec<(usize, f64)>>> = Arc::new(Mutex::new(Vec::new()));
    for (ci, client) in clients.iter().enumerate() {
        for _ in 0..8 {
            let (plain, fair) = (client.lock("the-lock"), client.fair_lock("the-fair-lock"));
            let (remaining, counter, holds) = (remaining.clone(), counter.clone(), holds.clone());
            let waits = waits.clone();
            tasks.push(tokio::spawn(async move {
                loop {
                    if remaining
                        .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |r| r.checked_sub(1))
                        .is_err()
                    {
                        return Ok::<_, BoxError>(());
                    }
                    let asked = Instant::now();
                    let guard = match kind {
                        LockKind::Plain => AnyGuard::Plain(plain.lock().await?),
                        LockKind::Fair => AnyGuard::Fair(fair.lock().await?),
                    };
                    let acquired = Instant::now();
                    let waited = (acquired - asked).as_secs_f64() * 1e3;
                    waits.lock().unwrap().push((ci, waited));
                    // The protected read-modify-write: racy without the lock.
                    let v = counter.load(Ordering::Relaxed);
                    tokio::task::yield_now().await;
                    counter.store(v + 1, Ordering::Relaxed);
                    let released = Instant::now();
                    guard.unlock().await?;
                    holds.lock().unwrap().push((acquired, released));
                }
            }));
        }
    }
    for t in tasks {
        t.await??;
    }
    let elapsed = started.elapsed().as_secs_f64();
    let calls = script_calls(&mut stats).await?.0 - calls0;
    let mut holds = std::mem::take(&mut *holds.lock().unwrap());
    holds.sort_by_key(|h| h.0);
    let mut gaps = Vec::new();
    let mut overlaps = 0;
    for w in holds.windows(2) {
        if w[1].0 < w[0].1 {
            overlaps += 1;
        } else {
            gaps.push((w[1].0 - w[0].1).as_secs_f64() * 1e6);
        }
    }
    gaps.sort_by(f64::total_cmp);
    let waits = std::mem::take(&mut *waits.lock().unwrap());
    let per_client = (0..clients.len())
        .map(|ci| {
            let mut w: Vec<f64> = waits
                .iter()
                .filter(|(c, _)| *c == ci)
                .map(|(_, ms)| *ms)
                .collect();
            w.sort_by(f64::total_cmp);
            (
                w.len(),
                percentile(&w, 0.99),
                w.last().copied().unwrap_or(0.0),
            )
        })
        .collect();
    Ok(Contended {
        per_client,
        acquisitions: holds.len(),
        rate: holds.len() as f64 / elapsed,
        gap_p50: percentile(&gaps, 0.5),
        gap_p99: percentile(&gaps, 0.99),
        gap_max: gaps.last().copied().unwrap_or(0.0),
        overlaps,
        counter: counter.load(Ordering::SeqCst),
        // Every acquisition costs one unlock call; the rest are lock attempts.
        lock_calls_per_acquisition: calls as f64 / holds.len().max(1) as f64 - 1.0,
    })
}

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

/// What a handoff by message costs with no library code: a release script sent on one
/// connection, its message heard on another connection's subscription (RESP3 push, as
/// lockwise's listener hears it) and a waiting task woken through a `Notify`. Timed from the
/// send to the woken task, p50 over [`FLOOR_SAMPLES`] handoffs per row, one at a time, the
/// rows interleaved.
pub(super) struct WakeFloor {
    /// A script that only publishes: the least any handoff by message can take.
    pub(super) publish: f64,
    /// lockwise's own release script (`lua/unlock.lua`) on a marked hold with no fair queue,
    /// its waiter on the lock's channel: a plain release that wakes a waiter, no queue work.
    pub(super) release: f64,
    /// The same script on a prepared fair queue: it hands the lock to the queue's head and
    /// tells it. What a fair handoff takes before any client code runs.
    pub(super) fair_release: f64,
}

/// Handoffs timed per row of [`wake_floor`].
const FLOOR_SAMPLES: usize = 500;

/// One lock's keys for [`wake_floor`]: lock hash, channel, fair queue, its deadlines.
fn floor_keys() -> [String; 4] {
    let tag = lockwise::Uuid::new_v4().simple().to_string();
    ["lock", "channel", "fairqueue", "fairtimeouts"].map(|role| format!("floor:{role}:{{{tag}}}"))
}

/// Measures [`WakeFloor`].
pub(super) async fn wake_floor(url: &str) -> Result<WakeFloor, BoxError> {
    // Two locks: the plain row's waiter listens on its lock's channel; the fair row's on its
    // own channel, while its release also publishes on its lock's (unheard) channel. So each
    // release sends exactly one message that the subscription hears.
    let (plain, fair) = (floor_keys(), floor_keys());
    let prefix = fair[1].replace(":channel:", ":fairchannel:");
    // The head is a watchdog waiter ("<owner>:g<n>"): the release hands it the lock.
    let head = "floor-waiter:g1";
    let heard = format!("{prefix}:{head}");

    let woken = Arc::new(tokio::sync::Notify::new());
    let on_push = woken.clone();
    let config = redis::AsyncConnectionConfig::new().set_push_sender(move |p: redis::PushInfo| {
        if p.kind == redis::PushKind::Message {
            on_push.notify_one();
        }
        Ok::<(), redis::aio::SendError>(())
    });
    let mut sub = resp3_client(url)?
        .get_multiplexed_async_connection_with_config(&config)
        .await?;
    sub.subscribe(&heard).await?;
    sub.subscribe(&plain[1]).await?;
    let mut conn = raw_conn(url).await?;
    let publish = load_script(&conn, "redis.call('publish', KEYS[1], ARGV[1]) return 0").await?;
    let release = load_script(&conn, &unlock_source()).await?;
    // The holder "floor-holder:1" with a waiter mark, as a hold some waiter found taken.
    let holder = [
        ("floor-holder:1", "1"),
        (lockwise_testkit::WAITER_MARK, "1"),
    ];
    let args = ["floor-holder:1", "floor-holder", "0", "publish", &prefix];

    let mut rows = [Vec::new(), Vec::new(), Vec::new()];
    for i in 0..3 * FLOOR_SAMPLES {
        let row = i % 3;
        let mut call = redis::cmd("EVALSHA");
        match row {
            0 => {
                call.arg(&publish).arg(1).arg(&heard).arg("grant:0");
            }
            1 => {
                let _: () = redis::pipe()
                    .atomic()
                    .hset_multiple(&plain[0], &holder)
                    .pexpire(&plain[0], 30_000)
                    .query_async(&mut conn)
                    .await?;
                call.arg(&release).arg(4).arg(&plain).arg(&args);
            }
            _ => {
                // The head queued behind the holder with 5 s left (the state a FairLock
                // waiter leaves), every key with a TTL.
                let (secs, micros): (u64, u64) = redis::cmd("TIME").query_async(&mut conn).await?;
                let now = secs * 1000 + micros / 1000;
                let _: () = redis::pipe()
                    .atomic()
                    .del(&fair)
                    .hset_multiple(&fair[0], &holder)
                    .pexpire(&fair[0], 30_000)
                    .rpush(&fair[2], head)
                    .zadd(&fair[3], head, now + 5_000)
                    .pexpire(&fair[2], 6_000)
                    .pexpire(&fair[3], 6_000)
                    .query_async(&mut conn)
                    .await?;
                call.arg(&release).arg(4).arg(&fair).arg(&args);
            }
        }
        let waiter = woken.clone();
        let wait = tokio::spawn(async move {
            waiter.notified().await;
            Instant::now()
        });
        // The waiter is parked, as a waiter is when its release comes.
        tokio::time::sleep(Duration::from_millis(1)).await;
        let sent = Instant::now();
        let released: i64 = call.query_async(&mut conn).await?;
        if released != 0 {
            return Err(format!("the release answered {released}").into());
        }
        let heard_at = tokio::time::timeout(Duration::from_secs(5), wait).await??;
        rows[row].push((heard_at - sent).as_secs_f64() * 1e6);
    }
    let _: () = redis::cmd("DEL")
        .arg(&plain)
        .arg(&fair)
        .query_async(&mut conn)
        .await?;
    for row in &mut rows {
        row.sort_by(f64::total_cmp);
    }
    Ok(WakeFloor {
        publish: percentile(&rows[0], 0.5),
        release: percentile(&rows[1], 0.5),
        fair_release: percentile(&rows[2], 0.5),
    })
}

/// Prints [`WakeFloor`] against PING.
pub(super) fn print_wake_floor(floor: &WakeFloor, ping_p50: f64) {
    println!(
        "handoff floor            publish-only script p50 {:>6.1} µs ({:.2} x PING); release \
         script alone: plain {:>6.1} µs ({:.2} x), fair {:>6.1} µs ({:.2} x)",
        floor.publish,
        floor.publish / ping_p50,
        floor.release,
        floor.release / ping_p50,
        floor.fair_release,
        floor.fair_release / ping_p50
    );
}

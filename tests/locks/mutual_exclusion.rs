//! Mutual exclusion under contention: several Clients x 16 tasks hammer one lock name.
//!
//! Each critical section records its [start, end) interval and performs two deliberately
//! NON-atomic read-modify-writes (an in-process counter and a Redis GET/SET counter). If the
//! lock ever admitted two holders at once, intervals would overlap and increments would be lost.

use suite::Conn;
use suite::OrNone;

use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use lockwise::{Client, RLock, RLockGuard};
use suite::{Interval, RedisServer};

const WATCHDOG: Duration = Duration::from_secs(2);
const TASKS_PER_CLIENT: usize = 16;

/// How a task acquires the lock.
#[derive(Clone, Copy, Debug)]
enum Acquire {
    /// `lock()`: wait forever, watchdog mode.
    Lock,
    /// `try_lock(wait, Some(lease))`, retried on `Ok(None)`.
    TryWithLease,
    /// `try_lock(ZERO, None)`: single attempts with a short pause in between.
    TryZeroWatchdog,
}

#[derive(Default)]
struct Shared {
    /// Updated with a non-atomic load / yield / store sequence.
    counter: AtomicU64,
    intervals: Mutex<Vec<Interval>>,
    /// Count of `try_lock` calls that returned `Ok(None)`.
    timeouts: AtomicU64,
}

async fn within<F: Future>(secs: u64, fut: F) -> F::Output {
    tokio::time::timeout(Duration::from_secs(secs), fut)
        .await
        .expect("did not finish in time")
}

async fn acquire(lock: &RLock, how: Acquire, shared: &Shared) -> RLockGuard {
    match how {
        Acquire::Lock => lock.lock().await.expect("lock()"),
        Acquire::TryWithLease => loop {
            match lock
                .try_lock(Duration::from_millis(200), Some(Duration::from_secs(10)))
                .await
                .or_none()
                .expect("try_lock(200ms, lease)")
            {
                Some(g) => {
                    assert_eq!(g.lease(), Some(Duration::from_secs(10)));
                    break g;
                }
                None => {
                    shared.timeouts.fetch_add(1, Ordering::Relaxed);
                }
            }
        },
        Acquire::TryZeroWatchdog => loop {
            match lock
                .try_lock(Duration::ZERO, None)
                .await
                .or_none()
                .expect("try_lock(ZERO)")
            {
                Some(g) => break g,
                None => {
                    shared.timeouts.fetch_add(1, Ordering::Relaxed);
                    tokio::time::sleep(Duration::from_millis(2)).await;
                }
            }
        },
    }
}

/// The critical section: two non-atomic read-modify-writes and an interval record.
async fn critical_section(
    shared: &Shared,
    conn: &mut Conn,
    counter_key: &str,
    who: usize,
    iteration: usize,
) {
    let start = Instant::now();

    let v = shared.counter.load(Ordering::SeqCst);
    if iteration.is_multiple_of(8) {
        tokio::time::sleep(Duration::from_millis(1)).await;
    } else {
        tokio::task::yield_now().await;
    }
    shared.counter.store(v + 1, Ordering::SeqCst);

    let r: Option<u64> = lockwise::redis::cmd("GET")
        .arg(counter_key)
        .query_async(conn)
        .await
        .unwrap();
    tokio::task::yield_now().await;
    let () = lockwise::redis::cmd("SET")
        .arg(counter_key)
        .arg(r.unwrap_or(0) + 1)
        .query_async(conn)
        .await
        .unwrap();

    let end = Instant::now();
    shared
        .intervals
        .lock()
        .unwrap()
        .push(Interval { start, end, who });
}

/// Runs `clients.len() x TASKS_PER_CLIENT` tasks, each doing `per_task` acquisitions of
/// the lock `name`; `how` picks each task's acquisition style from its index.
/// Returns the shared state after all tasks are done.
async fn hammer(
    server: &RedisServer,
    clients: &[Client],
    name: &str,
    per_task: usize,
    how: fn(usize) -> Acquire,
    reenter_every: Option<usize>,
) -> Arc<Shared> {
    let shared = Arc::new(Shared::default());
    let counter_key = format!("{}:test-counter", clients[0].namespace());
    let conn = server.conn().await;
    let mut handles = Vec::new();
    let mut who = 0;
    for client in clients {
        for _ in 0..TASKS_PER_CLIENT {
            let lock = client.lock(name);
            let shared = shared.clone();
            let mut conn = conn.clone();
            let counter_key = counter_key.clone();
            let kind = how(who);
            let me = who;
            handles.push(tokio::spawn(async move {
                for i in 0..per_task {
                    let g = acquire(&lock, kind, &shared).await;
                    critical_section(&shared, &mut conn, &counter_key, me, i).await;
                    if let Some(n) = reenter_every {
                        if i % n == 0 {
                            // Re-entrant hold inside the critical section (same task).
                            let inner = lock
                                .try_lock(Duration::ZERO, None)
                                .await
                                .or_none()
                                .unwrap()
                                .expect("the holder re-enters at once");
                            assert_eq!(inner.owner(), g.owner());
                            assert_eq!(lock.hold_count().await.unwrap(), 2);
                            inner.unlock().await.expect("inner unlock");
                        }
                    }
                    g.unlock().await.expect("unlock");
                }
            }));
            who += 1;
        }
    }
    within(60, async {
        for h in handles {
            h.await.expect("worker task panicked");
        }
    })
    .await;
    shared
}

async fn check_outcome(
    server: &RedisServer,
    clients: &[Client],
    name: &str,
    shared: &Shared,
    expected: u64,
) {
    let mut conn = server.conn().await;
    let counter_key = format!("{}:test-counter", clients[0].namespace());

    let mut intervals = shared.intervals.lock().unwrap().clone();
    assert_eq!(
        intervals.len() as u64,
        expected,
        "one interval per acquisition"
    );
    suite::assert_no_overlap(&mut intervals);
    assert_eq!(
        shared.counter.load(Ordering::SeqCst),
        expected,
        "lost in-process increments: two holders at once"
    );
    let redis_counter: Option<u64> = lockwise::redis::cmd("GET")
        .arg(&counter_key)
        .query_async(&mut conn)
        .await
        .unwrap();
    assert_eq!(
        redis_counter,
        Some(expected),
        "lost Redis increments: two holders at once"
    );

    let lock = clients[0].lock(name);
    let exists: u64 = lockwise::redis::cmd("EXISTS")
        .arg(lock.key())
        .query_async(&mut conn)
        .await
        .unwrap();
    assert_eq!(exists, 0, "lock key left behind after the last unlock");
    assert!(!lock.is_locked().await.unwrap());

    let c = conn.clone();
    let unsubscribed = suite::eventually(Duration::from_secs(3), || {
        let mut c = c.clone();
        async move { suite::active_channels(&mut c).await.is_empty() }
    })
    .await;
    assert!(
        unsubscribed,
        "channels still subscribed after all waiters left: {:?}",
        suite::active_channels(&mut conn).await
    );
    assert_eq!(suite::numsub(&mut conn, lock.channel()).await, 0);

    for (key, pttl) in suite::keys_with_pttl(&mut conn).await {
        if key != counter_key {
            assert_ne!(pttl, -1, "library key {key:?} has no TTL");
        }
    }
}

async fn clients(server: &RedisServer, n: usize, test: &str) -> Vec<Client> {
    let ns = suite::unique_ns(test);
    let mut out = Vec::new();
    for _ in 0..n {
        out.push(
            within(
                10,
                Client::builder(server.url())
                    .namespace(ns.clone())
                    .watchdog_timeout(WATCHDOG)
                    .build(),
            )
            .await
            .expect("build client"),
        );
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_clients_sixteen_tasks_lock_never_overlap() {
    let server = RedisServer::start();
    let clients = clients(&server, 3, "mutex-lock").await;
    let per_task = 21; // 3 x 16 x 21 = 1,008 acquisitions
    let expected = (clients.len() * TASKS_PER_CLIENT * per_task) as u64;
    assert!(expected >= 1_000);

    let t = Instant::now();
    let shared = hammer(&server, &clients, "hot", per_task, |_| Acquire::Lock, None).await;
    let took = t.elapsed();
    check_outcome(&server, &clients, "hot", &shared, expected).await;

    // Everyone got a turn; every task recorded all of its sections.
    let intervals = shared.intervals.lock().unwrap().clone();
    for who in 0..clients.len() * TASKS_PER_CLIENT {
        let n = intervals.iter().filter(|i| i.who == who).count();
        assert_eq!(n, per_task, "task {who} recorded {n} sections");
    }
    eprintln!("{expected} acquisitions with lock() in {took:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mixed_lock_and_try_lock_callers_never_overlap() {
    let server = RedisServer::start();
    let clients = clients(&server, 2, "mutex-mixed").await;
    let per_task = 32; // 2 x 16 x 32 = 1,024 acquisitions
    let expected = (clients.len() * TASKS_PER_CLIENT * per_task) as u64;
    assert!(expected >= 1_000);

    let how = |who: usize| match who % 3 {
        0 => Acquire::Lock,
        1 => Acquire::TryWithLease,
        _ => Acquire::TryZeroWatchdog,
    };
    let t = Instant::now();
    let shared = hammer(&server, &clients, "mixed", per_task, how, Some(5)).await;
    let took = t.elapsed();
    check_outcome(&server, &clients, "mixed", &shared, expected).await;
    eprintln!(
        "{expected} mixed acquisitions in {took:?}, {} try_lock timeouts",
        shared.timeouts.load(Ordering::Relaxed)
    );
}

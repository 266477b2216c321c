//! FairLock against a real redis-server: FIFO order across clients, crashed and cancelled
//! waiters, handoff cost, re-entry, mutual exclusion, TTLs on every key, nothing left behind.
//!
//! Waiter processes killed while queued are in the fault matrix (tests/faults/); a stale
//! lease guard in tests/locks/stale_guard.rs.

use suite::Conn;
use suite::OrNone;

use suite::{in_task, queue_reaches};

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use lockwise::{Client, FairLock};
use suite::{Interval, RedisServer};

const WATCHDOG: Duration = Duration::from_secs(30);

pub(super) async fn client(url: &str, ns: &str, watchdog: Duration) -> Client {
    Client::builder(url)
        .namespace(ns)
        .watchdog_timeout(watchdog)
        .build()
        .await
        .expect("build client")
}

/// Eventually (within 3 s) the database has no key and no channel is subscribed.
pub(super) async fn assert_clean(conn: &Conn, context: &str) {
    let clean = suite::eventually(Duration::from_secs(3), || {
        let mut c = conn.clone();
        async move {
            suite::keys_with_pttl(&mut c).await.is_empty()
                && suite::active_channels(&mut c).await.is_empty()
        }
    })
    .await;
    if !clean {
        let mut c = conn.clone();
        panic!(
            "{context}: not clean: keys {:?}, channels {:?}",
            suite::keys_with_pttl(&mut c).await,
            suite::active_channels(&mut c).await
        );
    }
}

/// Spawns a task that takes `lock`, notes when, and releases it; returns that instant.
pub(super) fn spawn_timed_waiter(lock: &FairLock) -> tokio::task::JoinHandle<Instant> {
    let lock = lock.clone();
    tokio::spawn(async move {
        let g = lock.lock().await.unwrap();
        let at = Instant::now();
        g.unlock().await.unwrap();
        at
    })
}

/// The hold count `owner` has in `lock`'s hash (`None`: no field).
pub(super) async fn holds_of(conn: &mut Conn, lock: &FairLock, owner: &str) -> Option<u32> {
    redis::cmd("HGET")
        .arg(lock.key())
        .arg(owner)
        .query_async(conn)
        .await
        .unwrap()
}

/// Redis server time in ms (the clock the queue deadlines use).
async fn server_ms(conn: &mut Conn) -> u64 {
    let (s, us): (u64, u64) = redis::cmd("TIME").query_async(conn).await.unwrap();
    s * 1000 + us / 1000
}

/// Puts a waiter that will never retry (a crashed process) at the tail of the queue, with
/// the layout the scripts use: list entry + deadline in the sorted set, both with TTLs.
pub(super) async fn insert_dead_waiter(
    conn: &mut Conn,
    lock: &FairLock,
    who: &str,
    deadline_in: Duration,
) {
    let deadline = server_ms(conn).await + deadline_in.as_millis() as u64;
    let ttl = deadline_in.as_millis() as u64 + 1000;
    let _: () = redis::pipe()
        .cmd("RPUSH")
        .arg(lock.queue_key())
        .arg(who)
        .ignore()
        .cmd("ZADD")
        .arg(lock.timeouts_key())
        .arg(deadline)
        .arg(who)
        .ignore()
        .cmd("PEXPIRE")
        .arg(lock.queue_key())
        .arg(ttl)
        .ignore()
        .cmd("PEXPIRE")
        .arg(lock.timeouts_key())
        .arg(ttl)
        .ignore()
        .query_async(conn)
        .await
        .unwrap();
    // A waiter that queues behind a held lock marks it (lua/fair_lock.lua), so that the
    // release serves the queue; a lock that is not held is left alone.
    let _: () = redis::cmd("EVAL")
        .arg("if redis.call('exists', KEYS[1]) == 1 then redis.call('hset', KEYS[1], 'waiting', '1') end")
        .arg(1)
        .arg(lock.key())
        .query_async(conn)
        .await
        .unwrap();
}

pub(super) async fn queue_entries(conn: &mut Conn, lock: &FairLock) -> (Vec<String>, Vec<String>) {
    let list: Vec<String> = redis::cmd("LRANGE")
        .arg(lock.queue_key())
        .arg(0)
        .arg(-1)
        .query_async(conn)
        .await
        .unwrap();
    let zset: Vec<String> = redis::cmd("ZRANGE")
        .arg(lock.timeouts_key())
        .arg(0)
        .arg(-1)
        .query_async(conn)
        .await
        .unwrap();
    (list, zset)
}

/// Samples every key's PTTL until stopped; returns (samples taken, keys seen without TTL).
fn ttl_sampler(conn: Conn, stop: Arc<AtomicBool>) -> tokio::task::JoinHandle<(u32, Vec<String>)> {
    tokio::spawn(async move {
        let mut conn = conn;
        let (mut samples, mut bad) = (0, Vec::new());
        while !stop.load(Ordering::SeqCst) {
            for (k, pttl) in suite::keys_with_pttl(&mut conn).await {
                if pttl == -1 {
                    bad.push(k);
                }
            }
            samples += 1;
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        (samples, bad)
    })
}

/// 16 waiters on two clients, queued one at a time while the lock is held, acquire in
/// exactly that order; holds never overlap; each handoff costs one unlock and no lock script
/// call (a 3 ms hold needs no confirmation); every key has a TTL all along and nothing is
/// left afterwards.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sixteen_waiters_on_two_clients_acquire_in_arrival_order() {
    suite::init_tracing();
    let server = RedisServer::start();
    let ns = suite::unique_ns("fair-order");
    let clients = [
        client(server.url(), &ns, WATCHDOG).await,
        client(server.url(), &ns, WATCHDOG).await,
    ];
    let conn = server.conn().await;
    in_task(async move {
        let mut conn = conn;
        let stop = Arc::new(AtomicBool::new(false));
        let sampler = ttl_sampler(conn.clone(), stop.clone());
        let holder_lock = clients[0].fair_lock("orders");
        // Load the scripts (a first EVALSHA answers NOSCRIPT and counts as a call).
        holder_lock.lock().await.unwrap().unlock().await.unwrap();
        let holder = holder_lock.lock().await.unwrap();

        let order = Arc::new(Mutex::new(Vec::new()));
        let intervals = Arc::new(Mutex::new(Vec::new()));
        let mut tasks = Vec::new();
        for i in 0..16 {
            let lock = clients[i % 2].fair_lock("orders");
            let (order, intervals) = (order.clone(), intervals.clone());
            tasks.push(tokio::spawn(async move {
                let g = lock.lock().await.unwrap();
                let start = Instant::now();
                order.lock().unwrap().push(i);
                tokio::time::sleep(Duration::from_millis(3)).await;
                let end = Instant::now();
                intervals
                    .lock()
                    .unwrap()
                    .push(Interval { start, end, who: i });
                g.unlock().await.unwrap();
            }));
            queue_reaches(&holder_lock, i + 1).await;
        }
        // Let the last waiters finish their post-subscription attempt before counting.
        tokio::time::sleep(Duration::from_millis(200)).await;
        let before = suite::script_calls(&mut conn).await;
        let released = Instant::now();
        holder.unlock().await.unwrap();
        for t in tasks {
            tokio::time::timeout(Duration::from_secs(10), t)
                .await
                .expect("waiters finish")
                .unwrap();
        }
        let took = released.elapsed();
        let scripts = suite::script_calls(&mut conn).await - before;
        // 17 unlock calls (the holder and 16 waiters); the rest are lock attempts.
        let lock_calls = scripts - 17;
        let per_handoff = lock_calls as f64 / 16.0;
        println!(
            "16 handoffs in {took:?}: {scripts} script calls, {lock_calls} lock-script calls \
             = {per_handoff:.2} per handoff"
        );
        assert_eq!(*order.lock().unwrap(), (0..16).collect::<Vec<_>>());
        suite::assert_no_overlap(&mut intervals.lock().unwrap());
        // Each head returns on the release's message, and its 3 ms hold ends long before its
        // confirmation is due: no lock-script call at all (2 of slack for a loaded machine).
        assert!(lock_calls <= 2, "{per_handoff} lock calls per handoff");

        assert_clean(&conn, "after the handoffs").await;
        stop.store(true, Ordering::SeqCst);
        let (samples, without_ttl) = sampler.await.unwrap();
        println!("TTL sampler: {samples} samples, keys without TTL: {without_ttl:?}");
        assert!(samples > 5);
        assert!(without_ttl.is_empty(), "keys without TTL: {without_ttl:?}");
    })
    .await;
}

/// Re-entry, counts and single attempts: a single attempt never queues and fails while
/// someone is queued, even when the lock is free.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reentrant_holds_and_single_attempts() {
    let server = RedisServer::start();
    let ns = suite::unique_ns("fair-reentrant");
    let c = client(server.url(), &ns, WATCHDOG).await;
    let mut conn = server.conn().await;
    in_task(async move {
        let lock = c.fair_lock("re");
        let outer = lock.lock().await.unwrap();
        let inner = lock
            .try_lock(Duration::ZERO, Some(Duration::from_secs(5)))
            .await
            .or_none()
            .unwrap()
            .expect("re-entry by the holder");
        assert_eq!(lock.hold_count().await.unwrap(), 2);
        assert_eq!(outer.owner(), inner.owner());
        assert_eq!(inner.lease(), Some(Duration::from_secs(5)));
        assert!(lock.is_locked().await.unwrap());
        let ttl = lock.remaining_ttl().await.unwrap().unwrap();
        assert!(ttl > Duration::from_secs(20), "{ttl:?}"); // the watchdog TTL is kept

        // Another task: a single attempt fails and does not queue; a timed one times out
        // and leaves the queue.
        let other = lock.clone();
        tokio::spawn(async move {
            assert!(other
                .try_lock(Duration::ZERO, None)
                .await
                .or_none()
                .unwrap()
                .is_none());
            assert_eq!(other.queue_len().await.unwrap(), 0);
            let t = Instant::now();
            assert!(other
                .try_lock(Duration::from_millis(200), None)
                .await
                .or_none()
                .unwrap()
                .is_none());
            assert!(t.elapsed() >= Duration::from_millis(190));
            assert_eq!(other.queue_len().await.unwrap(), 0);
            assert_eq!(other.hold_count().await.unwrap(), 0);
        })
        .await
        .unwrap();

        inner.unlock().await.unwrap();
        assert_eq!(lock.hold_count().await.unwrap(), 1);
        assert!(lock.is_locked().await.unwrap());
        outer.unlock().await.unwrap();
        assert!(!lock.is_locked().await.unwrap());
        assert_eq!(lock.remaining_ttl().await.unwrap(), None);

        // Free, but a (live) waiter is queued: a single attempt must not overtake it.
        insert_dead_waiter(&mut conn, &lock, "someone:1", Duration::from_secs(2)).await;
        assert!(lock
            .try_lock(Duration::ZERO, None)
            .await
            .or_none()
            .unwrap()
            .is_none());
        assert_eq!(lock.queue_len().await.unwrap(), 1);
        let _: () = redis::cmd("DEL")
            .arg(lock.queue_key())
            .arg(lock.timeouts_key())
            .query_async(&mut conn)
            .await
            .unwrap();
        let g = lock
            .try_lock(Duration::ZERO, None)
            .await
            .or_none()
            .unwrap()
            .unwrap();
        g.unlock().await.unwrap();
        assert!(lock.hold_count().await.unwrap() == 0);
        assert_clean(&conn, "after re-entry").await;
    })
    .await;
}

/// A crashed waiter at the head (it never retries, never leaves) delays the live waiter
/// behind it by at most its deadline: the live one wakes when that deadline passes, purges
/// it and takes the lock. Both for a head the release wakes (`crashed:7`) and for one it hands
/// the lock to (`crashed:g7`, a watchdog waiter): the handoff's TTL is what was left of the
/// dead head's deadline, so it expires then.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stale_head_delays_the_queue_at_most_its_deadline() {
    let server = RedisServer::start();
    let ns = suite::unique_ns("fair-stale");
    let c = client(server.url(), &ns, WATCHDOG).await;
    let mut conn = server.conn().await;
    in_task(async move {
        for (name, dead) in [("stale", "crashed:7"), ("stale-handed", "crashed:g7")] {
            let lock = c.fair_lock(name);
            let holder = lock.lock().await.unwrap();
            let dead_for = Duration::from_millis(1500);
            let inserted = Instant::now();
            insert_dead_waiter(&mut conn, &lock, dead, dead_for).await;
            let waiter = spawn_timed_waiter(&lock);
            queue_reaches(&lock, 2).await;
            // The unlock serves the (dead) head only.
            holder.unlock().await.unwrap();
            if dead.contains(":g") {
                let holds = holds_of(&mut conn, &lock, "crashed").await;
                assert_eq!(holds, Some(1), "the release handed the lock to the head");
                let pttl: i64 = redis::cmd("PTTL")
                    .arg(lock.key())
                    .query_async(&mut conn)
                    .await
                    .unwrap();
                assert!(pttl > 0 && pttl <= dead_for.as_millis() as i64, "{pttl}");
            }
            let acquired = waiter.await.unwrap();
            let delay = acquired - inserted;
            println!(
                "waiter behind dead head {dead} acquired {delay:?} after it was queued \
                 (deadline {dead_for:?})"
            );
            assert!(delay >= dead_for - Duration::from_millis(100), "{delay:?}");
            assert!(delay <= dead_for + Duration::from_millis(800), "{delay:?}");
            assert_clean(&conn, "after the stale head").await;
        }
    })
    .await;
}

/// Waiters that are aborted, time out, or are dropped at any moment of their attempt leave
/// no queue entry; the others keep their order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancelled_waiters_leave_no_queue_entry() {
    let server = RedisServer::start();
    let ns = suite::unique_ns("fair-cancel");
    let c1 = client(server.url(), &ns, WATCHDOG).await;
    let c2 = client(server.url(), &ns, WATCHDOG).await;
    let mut conn = server.conn().await;
    in_task(async move {
        let lock = c1.fair_lock("cx");
        let holder = lock.lock().await.unwrap();
        let order = Arc::new(Mutex::new(Vec::new()));
        let spawn_waiter = |name: &'static str, lock: FairLock| {
            let order = order.clone();
            tokio::spawn(async move {
                let g = lock.lock().await.unwrap();
                order.lock().unwrap().push(name);
                g.unlock().await.unwrap();
            })
        };
        let a = spawn_waiter("a", c1.fair_lock("cx"));
        queue_reaches(&lock, 1).await;
        let b = spawn_waiter("b", c2.fair_lock("cx"));
        queue_reaches(&lock, 2).await;
        let timed = {
            let lock = c2.fair_lock("cx");
            tokio::spawn(async move {
                let t = Instant::now();
                let r = lock
                    .try_lock(Duration::from_millis(400), None)
                    .await
                    .or_none()
                    .unwrap();
                (r.is_none(), t.elapsed())
            })
        };
        queue_reaches(&lock, 3).await;
        let d = spawn_waiter("d", c1.fair_lock("cx"));
        queue_reaches(&lock, 4).await;

        b.abort();
        let (timed_out, waited) = timed.await.unwrap();
        assert!(
            timed_out && waited >= Duration::from_millis(390),
            "{waited:?}"
        );
        queue_reaches(&lock, 2).await;

        // lock() futures dropped at many points of their first attempts.
        for k in 0..20u64 {
            let l = if k % 2 == 0 {
                &lock
            } else {
                &c2.fair_lock("cx")
            };
            let _ = tokio::time::timeout(Duration::from_micros(250 * k), l.lock()).await;
        }
        queue_reaches(&lock, 2).await;
        tokio::time::sleep(Duration::from_millis(200)).await;
        let (list, zset) = queue_entries(&mut conn, &lock).await;
        assert_eq!(list.len(), 2, "{list:?}");
        assert_eq!(zset.len(), 2, "{zset:?}");

        holder.unlock().await.unwrap();
        a.await.unwrap();
        d.await.unwrap();
        assert_eq!(*order.lock().unwrap(), ["a", "d"]);
        assert_clean(&conn, "after cancellations").await;
    })
    .await;
}

/// The head waiter is cancelled around the time the lock is released: the next waiter is
/// woken at once (by the unlock or by the leave script), not at its refresh interval.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancelled_head_passes_the_turn_on() {
    let server = RedisServer::start();
    let ns = suite::unique_ns("fair-head");
    let c1 = client(server.url(), &ns, WATCHDOG).await;
    let c2 = client(server.url(), &ns, WATCHDOG).await;
    let conn = server.conn().await;
    in_task(async move {
        let lock = c1.fair_lock("head");
        assert!(lock.waiter_lease() >= Duration::from_secs(5));
        for round in 0..4 {
            let holder = lock.lock().await.unwrap();
            let head = {
                let lock = c2.fair_lock("head");
                tokio::spawn(async move { lock.lock().await.unwrap().unlock().await })
            };
            queue_reaches(&lock, 1).await;
            let next = {
                let lock = c1.fair_lock("head");
                tokio::spawn(async move {
                    let g = lock.lock().await.unwrap();
                    let at = Instant::now();
                    g.unlock().await.unwrap();
                    at
                })
            };
            queue_reaches(&lock, 2).await;
            let released = Instant::now();
            if round % 2 == 0 {
                head.abort();
                holder.unlock().await.unwrap();
            } else {
                holder.unlock().await.unwrap();
                head.abort();
            }
            let acquired = next.await.unwrap();
            let delay = acquired.saturating_duration_since(released);
            // The refresh interval is 5 s / 3: anything well below proves a wakeup.
            assert!(
                delay < Duration::from_millis(800),
                "round {round}: {delay:?}"
            );
            assert!(
                suite::eventually(Duration::from_secs(2), || async {
                    !lock.is_locked().await.unwrap() && lock.queue_len().await.unwrap() == 0
                })
                .await
            );
        }
        assert_clean(&conn, "after head cancellations").await;
    })
    .await;
}

/// Contended lock / unlock from two clients, with and without leases: holds never overlap.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn holds_never_overlap_under_contention() {
    let server = RedisServer::start();
    let ns = suite::unique_ns("fair-mutex");
    let clients = [
        client(server.url(), &ns, WATCHDOG).await,
        client(server.url(), &ns, WATCHDOG).await,
    ];
    let conn = server.conn().await;
    in_task(async move {
        let intervals = Arc::new(Mutex::new(Vec::new()));
        let mut tasks = Vec::new();
        for who in 0..6 {
            let lock = clients[who % 2].fair_lock("mutex");
            let intervals = intervals.clone();
            tasks.push(tokio::spawn(async move {
                for i in 0..8 {
                    let g = match (who + i) % 3 {
                        0 => lock.lock().await.unwrap(),
                        1 => lock.lock_with_lease(Duration::from_secs(10)).await.unwrap(),
                        _ => loop {
                            if let Some(g) = lock
                                .try_lock(Duration::from_millis(300), None)
                                .await
                                .or_none()
                                .unwrap()
                            {
                                break g;
                            }
                        },
                    };
                    let start = Instant::now();
                    tokio::time::sleep(Duration::from_millis(2)).await;
                    let end = Instant::now();
                    intervals.lock().unwrap().push(Interval { start, end, who });
                    g.unlock().await.unwrap();
                }
            }));
        }
        for t in tasks {
            tokio::time::timeout(Duration::from_secs(15), t)
                .await
                .expect("no stall")
                .unwrap();
        }
        let mut all = intervals.lock().unwrap().clone();
        assert_eq!(all.len(), 48);
        suite::assert_no_overlap(&mut all);
        assert_clean(&conn, "after contention").await;
    })
    .await;
}

/// A lease hold that is never released expires and the head takes the lock then; a
/// force-unlock wakes the head at once and the old guard's unlock is `NotHeld`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lease_expiry_and_force_unlock_hand_over_to_the_head() {
    let server = RedisServer::start();
    let ns = suite::unique_ns("fair-lease");
    let c1 = client(server.url(), &ns, WATCHDOG).await;
    let c2 = client(server.url(), &ns, WATCHDOG).await;
    let conn = server.conn().await;
    in_task(async move {
        let lock = c1.fair_lock("lease");
        let leased = lock
            .lock_with_lease(Duration::from_millis(400))
            .await
            .unwrap();
        let taken = Instant::now();
        let waiter = {
            let lock = c2.fair_lock("lease");
            tokio::spawn(async move { (lock.lock().await.unwrap(), Instant::now()) })
        };
        let (g, at) = waiter.await.unwrap();
        let waited = at - taken;
        assert!(waited >= Duration::from_millis(380), "{waited:?}");
        assert!(waited < Duration::from_millis(1200), "{waited:?}");
        assert!(leased.unlock().await.unwrap_err().is_not_held());

        // g (client 2) holds; a waiter queues; force-unlock hands over at once.
        let next = {
            let lock = c1.fair_lock("lease");
            tokio::spawn(async move {
                let g = lock.lock().await.unwrap();
                let at = Instant::now();
                g.unlock().await.unwrap();
                at
            })
        };
        queue_reaches(&lock, 1).await;
        let forced = Instant::now();
        assert!(lock.force_unlock().await.unwrap());
        let at = next.await.unwrap();
        assert!(
            at - forced < Duration::from_millis(800),
            "{:?}",
            at - forced
        );
        assert!(g.unlock().await.unwrap_err().is_not_held());
        assert!(!lock.force_unlock().await.unwrap());
        assert_clean(&conn, "after lease and force-unlock").await;
    })
    .await;
}

/// An invalid name is an error from every method, never a panic.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn invalid_name_is_reported() {
    let server = RedisServer::start();
    let c = client(server.url(), &suite::unique_ns("fair-bad"), WATCHDOG).await;
    let lock = c.fair_lock("");
    assert!(matches!(
        lock.lock().await,
        Err(lockwise::Error::InvalidArgument { .. })
    ));
    assert!(lock.try_lock(Duration::ZERO, None).await.or_none().is_err());
    assert!(lock.queue_len().await.is_err());
    assert!(lock.force_unlock().await.is_err());
    let ok = c.fair_lock("fine");
    assert!(ok
        .try_lock(Duration::from_secs(1), Some(Duration::ZERO))
        .await
        .or_none()
        .is_err());
}

/// Two lock calls of one task (joined futures) queue behind another holder. The second call
/// is granted by re-entry once the first one holds; its queue entry must go too, or it stays
/// head of the queue with nobody behind it listening: the next waiter then sleeps until that
/// entry's deadline although the lock is free.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reentry_of_a_queued_call_leaves_no_queue_entry_behind() {
    let server = RedisServer::start();
    let ns = suite::unique_ns("review-fair-reentry");
    let c = client(server.url(), &ns, Duration::from_secs(30)).await;
    let lock = c.fair_lock("re");
    in_task(async move {
        let holder = lock.lock().await.unwrap();
        let l = lock.clone();
        let joined = tokio::spawn(async move {
            let (a, b) = tokio::join!(l.lock(), l.lock());
            (a.unwrap(), b.unwrap())
        });
        queue_reaches(&lock, 2).await;
        let l = lock.clone();
        let (tx, rx) = tokio::sync::oneshot::channel::<Instant>();
        let last = tokio::spawn(async move {
            let g = l.lock().await.unwrap();
            let at = Instant::now();
            let released: Instant = rx.await.unwrap();
            g.unlock().await.unwrap();
            at.saturating_duration_since(released)
        });
        queue_reaches(&lock, 3).await;
        holder.unlock().await.unwrap();
        let (a, b) = tokio::time::timeout(Duration::from_secs(5), joined)
            .await
            .expect("both calls of the task get the lock")
            .unwrap();
        let left = lock.queue_len().await.unwrap();
        a.unlock().await.unwrap();
        b.unlock().await.unwrap();
        let released = Instant::now();
        // `last` sends its acquisition time only after it got the lock; give it the release
        // instant meanwhile through the channel.
        let _ = tx.send(released);
        let waited = tokio::time::timeout(Duration::from_secs(10), last)
            .await
            .expect("the last waiter gets the lock")
            .unwrap();
        assert!(
            left == 1 && waited < Duration::from_secs(1),
            "queue entries left once the task held both holds: {left} (want 1: the last \
             waiter); the last waiter got the free lock {waited:?} after the release"
        );
    })
    .await;
}

/// A waiter cancelled while its attempt is stuck on a frozen server (DEBUG SLEEP), an attempt
/// that will find the lock free (the holder's lease ran out meanwhile) and take it for
/// nobody: afterwards the lock is free, the queue is empty, and a newcomer gets in at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancelled_waiter_with_a_granting_attempt_in_flight_leaves_nothing() {
    let server = RedisServer::start();
    suite::init_tracing();
    let ns = suite::unique_ns("review-fair-inflight");
    let c = client(server.url(), &ns, Duration::from_secs(30)).await;
    let lock = c.fair_lock("inflight");
    let mut admin = server.conn().await;
    in_task(async move {
        let holder = lock
            .lock_with_lease(Duration::from_millis(400))
            .await
            .unwrap();
        let l = lock.clone();
        let waiter = tokio::spawn(async move { l.lock().await.map(|g| g.owner().to_string()) });
        queue_reaches(&lock, 1).await;
        // Freeze the server; the waiter's next attempt (at the holder's pttl) is sent into it.
        let sleeper = tokio::spawn(async move {
            // The test connection's own response timeout may fire first: ignore the reply.
            let _: redis::RedisResult<()> = redis::cmd("DEBUG")
                .arg("SLEEP")
                .arg(1.0)
                .query_async(&mut admin)
                .await;
        });
        tokio::time::sleep(Duration::from_millis(700)).await;
        waiter.abort();
        assert!(waiter.await.unwrap_err().is_cancelled());
        sleeper.await.unwrap();
        tokio::time::sleep(Duration::from_millis(500)).await;
        std::mem::forget(holder); // its lease ran out; nothing to release
        let clean = suite::eventually(Duration::from_secs(2), || async {
            !lock.is_locked().await.unwrap() && lock.queue_len().await.unwrap() == 0
        })
        .await;
        assert!(
            clean,
            "locked: {}, queue: {}",
            lock.is_locked().await.unwrap(),
            lock.queue_len().await.unwrap()
        );
        let l = lock.clone();
        let newcomer = tokio::spawn(async move {
            match l.try_lock(Duration::ZERO, None).await.or_none().unwrap() {
                Some(g) => g.unlock().await.is_ok(),
                None => false,
            }
        });
        assert!(newcomer.await.unwrap(), "a newcomer takes the free lock");
    })
    .await;
}

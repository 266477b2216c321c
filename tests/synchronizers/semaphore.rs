//! `Semaphore` against real redis-servers: permit accounting checked over many tasks and
//! several clients, a waiter for k > 1 permits woken when they came back one at a time (with
//! k = 1 waiters around), cancellation at every phase, a killed subscription connection and
//! SCRIPT FLUSH while waiting, and bad input. After each: no key without a TTL and no
//! channel left subscribed.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use suite::OrNone;

use lockwise::{Client, Error, Semaphore};
use suite::{Conn, RedisServer};

async fn clients(server: &RedisServer, test: &str, n: usize) -> Vec<Client> {
    let ns = suite::unique_ns(test);
    let mut out = Vec::new();
    for _ in 0..n {
        out.push(suite::client(server, &ns, Duration::from_secs(5)).await);
    }
    out
}

/// Every key under `ns` has a TTL and no channel stays subscribed.
async fn assert_clean(conn: &mut Conn, ns: &str) {
    suite::kit::assert_ns_clean(conn, ns).await;
    assert!(
        suite::no_channels_within(conn, Duration::from_secs(2)).await,
        "channels left subscribed: {:?}",
        suite::active_channels(conn).await
    );
}

/// The available permits reach `n` within 2 s (background give-backs are done).
async fn available_becomes(sem: &Semaphore, n: i64) {
    let ok = suite::eventually(Duration::from_secs(2), || async {
        sem.available_permits().await.unwrap() == n
    })
    .await;
    assert!(
        ok,
        "available {} instead of {n}",
        sem.available_permits().await.unwrap()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn counts_permits_and_keeps_a_ttl() {
    let server = RedisServer::start();
    let c = &clients(&server, "sem-basics", 1).await[0];
    let mut conn = server.conn().await;
    let sem = c.semaphore("pool");
    assert_eq!(sem.available_permits().await.unwrap(), 0);
    assert!(sem
        .try_acquire_many(1, Duration::ZERO)
        .await
        .or_none()
        .unwrap()
        .is_none());
    assert!(sem.try_set_permits(3).await.unwrap());
    assert!(!sem.try_set_permits(9).await.unwrap(), "set only once");
    let ttl = suite::kit::pttl(&mut conn, sem.key()).await;
    let day = Semaphore::DEFAULT_IDLE_TTL.as_millis() as i64;
    assert!(ttl > day - 5_000 && ttl <= day, "pttl {ttl}");
    let two = sem.acquire_many(2).await.unwrap();
    assert_eq!(two.permits(), 2);
    assert_eq!(sem.available_permits().await.unwrap(), 1);
    let started = Instant::now();
    assert!(sem
        .try_acquire_many(2, Duration::from_millis(200))
        .await
        .or_none()
        .unwrap()
        .is_none());
    assert!(started.elapsed() >= Duration::from_millis(200));
    assert_eq!(two.release().await.unwrap(), 3);
    // A forgotten guard keeps its permits until Semaphore::release.
    assert_eq!(sem.acquire_many(3).await.unwrap().forget(), 3);
    assert_eq!(sem.available_permits().await.unwrap(), 0);
    assert_eq!(sem.release(3).await.unwrap(), 3);
    // A dropped guard gives its permits back in the background.
    drop(sem.acquire_many(1).await.unwrap());
    available_becomes(&sem, 3).await;
    // Negative adds go below zero; acquires wait until the count is back.
    assert_eq!(sem.add_permits(-5).await.unwrap(), -2);
    assert_eq!(
        sem.drain_permits().await.unwrap(),
        0,
        "a negative count is kept"
    );
    assert_eq!(sem.add_permits(4).await.unwrap(), 2);
    assert_eq!(sem.drain_permits().await.unwrap(), 2);
    assert_eq!(sem.available_permits().await.unwrap(), 0);
    // A shorter-lived handle never lowers the TTL; a longer one raises it.
    let short = c.semaphore("pool").with_idle_ttl(Duration::from_secs(10));
    short.release(1).await.unwrap();
    assert!(suite::kit::pttl(&mut conn, sem.key()).await > day - 5_000);
    let long = c
        .semaphore("pool")
        .with_idle_ttl(Duration::from_secs(2 * 86_400));
    long.release(1).await.unwrap();
    assert!(suite::kit::pttl(&mut conn, sem.key()).await > 2 * day - 5_000);
    // An idle semaphore is forgotten at its TTL, and try_set_permits creates it again.
    let brief = c
        .semaphore("brief")
        .with_idle_ttl(Duration::from_millis(200));
    assert!(brief.try_set_permits(2).await.unwrap());
    tokio::time::sleep(Duration::from_millis(400)).await;
    assert_eq!(brief.available_permits().await.unwrap(), 0);
    assert!(brief.try_set_permits(2).await.unwrap());
    assert_clean(&mut conn, c.namespace()).await;
}

/// One acquisition as the checker sees it: k permits held from `start` to `end`.
struct Held {
    k: i64,
    start: Instant,
    end: Instant,
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn permit_accounting_over_many_tasks_and_clients() {
    const TOTAL: i64 = 5;
    let server = RedisServer::start();
    let cs = clients(&server, "sem-checker", 3).await;
    let mut conn = server.conn().await;
    assert!(cs[0]
        .semaphore("acct")
        .try_set_permits(TOTAL as u64)
        .await
        .unwrap());
    let history = Arc::new(Mutex::new(Vec::new()));
    let mut tasks = Vec::new();
    for t in 0..24 {
        let sem = cs[t % 3].semaphore("acct");
        let history = history.clone();
        tasks.push(tokio::spawn(async move {
            for round in 0..15 {
                let k = rand::random_range(1..=3u64);
                let guard = if round % 2 == 0 {
                    sem.acquire_many(k).await.unwrap()
                } else {
                    match sem
                        .try_acquire_many(k, Duration::from_millis(50))
                        .await
                        .or_none()
                        .unwrap()
                    {
                        Some(g) => g,
                        None => continue,
                    }
                };
                let start = Instant::now();
                tokio::time::sleep(Duration::from_millis(rand::random_range(0..4))).await;
                let end = Instant::now();
                if round % 3 == 0 {
                    // Kept past the guard, then given back through the handle.
                    let n = guard.forget();
                    sem.release(n).await.unwrap();
                } else {
                    guard.release().await.unwrap();
                }
                history.lock().unwrap().push(Held {
                    k: k as i64,
                    start,
                    end,
                });
            }
        }));
    }
    for t in tasks {
        suite::kit::within(60, t).await.unwrap();
    }
    let history = std::mem::take(&mut *history.lock().unwrap());
    assert!(history.len() > 100, "only {} acquisitions", history.len());
    // Sweep: at every start, the permits held at that instant fit in the total.
    let mut events: Vec<(Instant, i64)> = Vec::new();
    for h in history.iter() {
        events.push((h.start, h.k));
        events.push((h.end, -h.k));
    }
    // Ends before starts at the same instant.
    events.sort_by_key(|(at, d)| (*at, *d));
    let mut held = 0;
    let mut peak = 0;
    for (_, d) in events {
        held += d;
        peak = peak.max(held);
        assert!(held <= TOTAL, "{held} permits held at once, total {TOTAL}");
    }
    println!(
        "{} acquisitions, peak {peak} of {TOTAL} permits held",
        history.len()
    );
    assert_eq!(
        cs[1].semaphore("acct").available_permits().await.unwrap(),
        TOTAL
    );
    assert_clean(&mut conn, cs[0].namespace()).await;
}

/// Redisson #6664: permits come back one at a time while k = 1 waiters are around and a
/// waiter for more permits than exist is first in line; the waiter for 3 must be served as
/// soon as 3 are free, not at its timeout. Run with the waiters in the releasing client and
/// in another one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_for_several_permits_is_woken_when_they_come_back_one_by_one() {
    let server = RedisServer::start();
    let cs = clients(&server, "sem-k", 2).await;
    let mut conn = server.conn().await;
    for (round, waiter_client) in [0usize, 1].into_iter().enumerate() {
        let name = format!("k{round}");
        let releaser = cs[0].semaphore(&name);
        assert!(releaser.try_set_permits(5).await.unwrap());
        let held: Vec<_> = {
            let mut v = Vec::new();
            for _ in 0..5 {
                v.push(releaser.acquire_many(1).await.unwrap());
            }
            v
        };
        let waiters = &cs[waiter_client];
        // First in line, a waiter that no release here can serve: it must not swallow
        // the wakeups of those behind it.
        let blocker = {
            let sem = waiters.semaphore(&name);
            tokio::spawn(async move { sem.acquire_many(10).await.map(|g| g.forget()) })
        };
        tokio::time::sleep(Duration::from_millis(100)).await;
        let big = {
            let sem = waiters.semaphore(&name);
            tokio::spawn(async move {
                let g = sem
                    .try_acquire_many(3, Duration::from_secs(30))
                    .await
                    .or_none()
                    .unwrap();
                (g.map(|g| g.forget()), Instant::now())
            })
        };
        // Two k = 1 waiters that keep what they get.
        let small: Vec<_> = (0..2)
            .map(|_| {
                let sem = waiters.semaphore(&name);
                tokio::spawn(async move { sem.acquire_many(1).await.unwrap().forget() })
            })
            .collect();
        tokio::time::sleep(Duration::from_millis(200)).await;
        let mut last = Instant::now();
        for g in held {
            g.release().await.unwrap();
            last = Instant::now();
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        for s in small {
            assert_eq!(suite::kit::within(5, s).await.unwrap(), 1);
        }
        let (got, at) = suite::kit::within(10, big).await.unwrap();
        assert_eq!(got, Some(3), "round {round}: the waiter for 3 was served");
        let after = at.saturating_duration_since(last);
        assert!(
            after < Duration::from_secs(2),
            "round {round}: woken {after:?} late"
        );
        assert_eq!(releaser.available_permits().await.unwrap(), 0);
        blocker.abort();
        assert!(blocker.await.unwrap_err().is_cancelled());
    }
    assert_clean(&mut conn, cs[0].namespace()).await;
}

/// Polls `fut` up to `polls` times and drops it if still pending (1 poll: the script was
/// sent, its answer never read).
async fn poll_then_drop<F: std::future::Future>(fut: F, polls: u32) -> Option<F::Output> {
    let mut fut = std::pin::pin!(fut);
    for _ in 0..polls {
        if let std::task::Poll::Ready(out) = futures::poll!(fut.as_mut()) {
            return Some(out);
        }
        tokio::task::yield_now().await;
    }
    None
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancellation_at_every_phase_leaks_no_permit() {
    let server = RedisServer::start();
    let cs = clients(&server, "sem-cancel", 2).await;
    let mut conn = server.conn().await;
    let sem = cs[0].semaphore("cx");
    assert!(sem.try_set_permits(4).await.unwrap());
    // Before send: never polled.
    drop(sem.acquire_many(2));
    assert_eq!(sem.available_permits().await.unwrap(), 4);
    // Right after the script ran (and at other random points), on a free semaphore.
    let mut cancelled = 0;
    for i in 0..200u32 {
        let got = match i % 2 {
            0 => poll_then_drop(sem.acquire_many(1 + i as u64 % 4), 1 + i % 3).await,
            _ => tokio::time::timeout(
                Duration::from_micros(rand::random_range(0..3000)),
                sem.acquire_many(1 + i as u64 % 4),
            )
            .await
            .ok(),
        };
        match got {
            Some(g) => {
                g.unwrap().release().await.unwrap();
            }
            None => cancelled += 1,
        }
    }
    assert!(
        cancelled > 0,
        "nothing was cancelled: the test proved nothing"
    );
    available_becomes(&sem, 4).await;
    // While waiting, in both clients: the permits stay, the waiters' wakeups pass on.
    let all = sem.acquire_many(4).await.unwrap();
    let waiting: Vec<_> = (0..6)
        .map(|i| {
            let sem = cs[i % 2].semaphore("cx");
            tokio::spawn(async move { sem.acquire_many(1).await.map(|g| g.forget()) })
        })
        .collect();
    let survivor = {
        let sem = cs[1].semaphore("cx");
        tokio::spawn(async move { sem.acquire_many(2).await.unwrap() })
    };
    tokio::time::sleep(Duration::from_millis(200)).await;
    for w in &waiting {
        w.abort();
    }
    for w in waiting {
        assert!(w.await.unwrap_err().is_cancelled());
    }
    all.release().await.unwrap();
    let g = suite::kit::within(5, survivor).await.unwrap();
    assert_eq!(sem.available_permits().await.unwrap(), 2);
    g.release().await.unwrap();
    println!("{cancelled} of 200 acquires cancelled");
    available_becomes(&sem, 4).await;
    assert_clean(&mut conn, cs[0].namespace()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiters_survive_a_killed_subscription_and_script_flush() {
    let server = RedisServer::start();
    let cs = clients(&server, "sem-faults", 2).await;
    let mut conn = server.conn().await;
    let sem = cs[0].semaphore("faults");
    assert!(sem.try_set_permits(0).await.unwrap());
    let waiters: Vec<_> = (0..10)
        .map(|i| {
            let sem = cs[i % 2].semaphore("faults");
            tokio::spawn(async move {
                sem.acquire_many(1 + (i as u64 % 2))
                    .await
                    .map(|g| g.forget())
            })
        })
        .collect();
    let channel = format!("{}:semaphorechannel:{{faults}}", cs[0].namespace());
    assert!(suite::numsub_until(&conn, &channel, Duration::from_secs(5), |n| n == 2).await);
    let _: () = redis::cmd("SCRIPT")
        .arg("FLUSH")
        .query_async(&mut conn)
        .await
        .unwrap();
    suite::kill_pubsub(&mut conn).await;
    assert!(suite::numsub_until(&conn, &channel, Duration::from_secs(5), |n| n == 2).await);
    // 5 waiters want 1, 5 want 2: 15 permits serve them all.
    let started = Instant::now();
    cs[1].semaphore("faults").release(15).await.unwrap();
    let mut taken = 0;
    for w in waiters {
        taken += suite::kit::within(5, w).await.unwrap().unwrap();
    }
    assert_eq!(taken, 15);
    assert!(started.elapsed() < Duration::from_secs(5));
    assert_eq!(sem.available_permits().await.unwrap(), 0);
    assert_clean(&mut conn, cs[0].namespace()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_input_is_a_typed_error_and_changes_nothing() {
    let server = RedisServer::start();
    let c = &clients(&server, "sem-bad", 1).await[0];
    let mut conn = server.conn().await;
    let sem = c.semaphore("bad");
    let huge = (1u64 << 53) + 1;
    let invalid = |r: lockwise::Result<_>| matches!(r, Err(Error::InvalidArgument { .. }));
    assert!(invalid(sem.try_set_permits(huge).await.map(|_| ())));
    assert!(invalid(sem.acquire_many(0).await.map(|_| ())));
    assert!(invalid(sem.acquire_many(huge).await.map(|_| ())));
    assert!(invalid(
        sem.try_acquire_many(0, Duration::ZERO)
            .await
            .or_none()
            .map(|_| ())
    ));
    assert!(invalid(sem.release(0).await.map(|_| ())));
    assert!(invalid(sem.release(huge).await.map(|_| ())));
    assert!(invalid(sem.add_permits(0).await.map(|_| ())));
    assert!(invalid(sem.add_permits(-(huge as i64)).await.map(|_| ())));
    assert!(invalid(sem.add_permits(i64::MIN).await.map(|_| ())));
    let zero_ttl = c.semaphore("bad").with_idle_ttl(Duration::ZERO);
    assert!(invalid(zero_ttl.release(1).await.map(|_| ())));
    assert!(invalid(
        c.semaphore("").available_permits().await.map(|_| ())
    ));
    assert!(
        !suite::exists(&mut conn, sem.key()).await,
        "nothing written"
    );
    // The limits are accepted; beyond them the script refuses and changes nothing.
    assert!(sem.try_set_permits(1 << 53).await.unwrap());
    assert!(invalid(sem.release(1).await.map(|_| ())));
    assert_eq!(sem.available_permits().await.unwrap(), 1 << 53);
    assert_eq!(sem.add_permits(-(1i64 << 53)).await.unwrap(), 0);
    assert_eq!(sem.add_permits(-(1i64 << 53)).await.unwrap(), -(1i64 << 53));
    assert!(invalid(sem.add_permits(-1).await.map(|_| ())));
    assert_eq!(sem.available_permits().await.unwrap(), -(1i64 << 53));
    // Another type at the key: a Redis error from every call, the key left as it was.
    let other = c.semaphore("other");
    let _: () = redis::cmd("SET")
        .arg(other.key())
        .arg("x")
        .query_async(&mut conn)
        .await
        .unwrap();
    let redis_err = |r: lockwise::Result<_>| matches!(r, Err(Error::Redis(_)));
    assert!(redis_err(other.try_set_permits(1).await.map(|_| ())));
    assert!(redis_err(other.acquire_many(1).await.map(|_| ())));
    assert!(redis_err(other.release(1).await.map(|_| ())));
    assert!(redis_err(other.add_permits(-1).await.map(|_| ())));
    assert!(redis_err(other.drain_permits().await.map(|_| ())));
    assert!(redis_err(other.available_permits().await.map(|_| ())));
    let value: String = redis::cmd("GET")
        .arg(other.key())
        .query_async(&mut conn)
        .await
        .unwrap();
    assert_eq!(value, "x");
    assert_eq!(
        suite::kit::pttl(&mut conn, other.key()).await,
        -1,
        "untouched"
    );
    let _: i64 = redis::cmd("DEL")
        .arg(other.key())
        .query_async(&mut conn)
        .await
        .unwrap();
    assert_clean(&mut conn, c.namespace()).await;
}

/// A holder process SIGKILLed while it holds 3 of 5 permits: the permits are lost (the
/// semaphore cannot know who held them: exactly 2 stay available), the key keeps its TTL,
/// and add_permits brings the pool back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_holders_permits_are_lost() {
    let server = RedisServer::start();
    let c = &clients(&server, "sem-kill", 1).await[0];
    let mut conn = server.conn().await;
    let sem = c.semaphore("crash");
    assert!(sem.try_set_permits(5).await.unwrap());
    let mut holder = suite::child::ChildProc::spawn(
        "semaphore-holder",
        server.url(),
        c.namespace(),
        "h",
        &[
            ("LOCKWISE_FP_LOCK", "crash".to_string()),
            ("LOCKWISE_FP_PERMITS", "3".to_string()),
            ("LOCKWISE_FP_HOLD_MS", "60000".to_string()),
        ],
    );
    holder.wait_line("@acquired", Duration::from_secs(60)).await;
    holder.sigkill();
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(sem.available_permits().await.unwrap(), 2, "3 permits lost");
    assert!(sem
        .try_acquire_many(3, Duration::from_millis(300))
        .await
        .or_none()
        .unwrap()
        .is_none());
    let pttl = suite::kit::pttl(&mut conn, sem.key()).await;
    assert!(pttl > 0, "the key keeps its TTL: {pttl}");
    assert_eq!(sem.add_permits(3).await.unwrap(), 5);
    assert_clean(&mut conn, c.namespace()).await;
}

/// No unbounded sleep: a waiter whose wakeup never comes (permits added behind the
/// semaphore's back, with no message) looks again within the client's watchdog timeout
/// (1 s here), not at the key's idle TTL (24 h).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_that_misses_its_wakeup_is_served_within_the_watchdog_timeout() {
    let server = RedisServer::start();
    let ns = suite::unique_ns("sem-nowake");
    let client = suite::client(&server, &ns, Duration::from_secs(1)).await;
    let sem = client.semaphore("quiet");
    assert!(sem.try_set_permits(0).await.unwrap());
    let waiter = tokio::spawn({
        let sem = sem.clone();
        async move { sem.acquire().await.map(|p| (p.forget(), Instant::now())) }
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    let mut conn = server.conn().await;
    let added = Instant::now();
    let _: i64 = redis::cmd("HINCRBY")
        .arg(sem.key())
        .arg("p")
        .arg(1)
        .query_async(&mut conn)
        .await
        .unwrap();
    let (n, served) = tokio::time::timeout(Duration::from_secs(10), waiter)
        .await
        .expect("served long before the idle TTL")
        .unwrap()
        .unwrap();
    assert_eq!(n, 1);
    let after = served - added;
    eprintln!("served {after:?} after a permit came back without a wakeup");
    assert!(after < Duration::from_secs(3), "{after:?}");
}

//! `MultiLock` against a real redis-server: overlapping sets asked for in random orders by
//! many tasks on two Clients never overlap per name and never deadlock; a timeout,
//! a cancellation or an error releases what was taken; empty and duplicate names; the
//! guard's lost() and unlock() errors.

mod support;

use support::in_task;

use std::collections::HashMap;
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use relock::{Client, Error};
use support::{Interval, RedisServer};

const WATCHDOG: Duration = Duration::from_secs(1);

async fn within<F: Future>(secs: u64, fut: F) -> F::Output {
    tokio::time::timeout(Duration::from_secs(secs), fut)
        .await
        .expect("did not finish in time (deadlock?)")
}

async fn client(server: &RedisServer, ns: &str) -> Client {
    within(
        10,
        Client::builder(server.url())
            .namespace(ns)
            .watchdog_timeout(WATCHDOG)
            .build(),
    )
    .await
    .expect("build client")
}

/// Lock hashes (`<ns>:lock:...`) still in Redis.
async fn lock_keys(conn: &mut redis::aio::MultiplexedConnection) -> Vec<String> {
    support::keys_with_pttl(conn)
        .await
        .into_iter()
        .map(|(k, _)| k)
        .filter(|k| k.contains(":lock:"))
        .collect()
}

/// 12 tasks on 2 Clients, 10 rounds each: every round takes 2-3 random names of {a,b,c,d}
/// given in random order (lock(), lock_with_lease or try_lock with retries), works 1-3 ms
/// and records one interval per name. No two intervals of one name overlap, and everyone
/// finishes well within the bound (no deadlock).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn overlapping_sets_in_random_orders_never_overlap_or_deadlock() {
    let server = RedisServer::start();
    let ns = support::unique_ns("multi-overlap");
    let clients = [client(&server, &ns).await, client(&server, &ns).await];
    let per_name: Arc<Mutex<HashMap<String, Vec<Interval>>>> = Arc::default();
    let started = Instant::now();
    let mut tasks = Vec::new();
    for who in 0..12 {
        let client = clients[who % 2].clone();
        let per_name = per_name.clone();
        tasks.push(tokio::spawn(async move {
            let mut rng = StdRng::seed_from_u64(0x5eed + who as u64);
            let mut timeouts = 0;
            for round in 0..10 {
                let mut names = vec!["a", "b", "c", "d"];
                names.shuffle(&mut rng);
                names.truncate(rng.random_range(2..=3));
                let multi = client.multi_lock(&names);
                let guard = match (who + round) % 3 {
                    0 => multi.lock().await.expect("lock"),
                    1 => multi
                        .lock_with_lease(Duration::from_secs(10))
                        .await
                        .expect("lock_with_lease"),
                    _ => loop {
                        match multi
                            .try_lock(Duration::from_millis(50), None)
                            .await
                            .expect("try_lock")
                        {
                            Some(g) => break g,
                            None => timeouts += 1,
                        }
                    },
                };
                let start = Instant::now();
                let work = rng.random_range(1..=3);
                tokio::time::sleep(Duration::from_millis(work)).await;
                let end = Instant::now();
                assert!(!guard.is_lost());
                guard.unlock().await.expect("unlock");
                let mut map = per_name.lock().unwrap();
                for n in names {
                    map.entry(n.to_string())
                        .or_default()
                        .push(Interval { start, end, who });
                }
            }
            timeouts
        }));
    }
    let timeouts: u32 = within(20, async {
        let mut sum = 0;
        for t in tasks {
            sum += t.await.unwrap();
        }
        sum
    })
    .await;
    let elapsed = started.elapsed();
    let mut map = per_name.lock().unwrap().clone();
    let mut total = 0;
    for (name, intervals) in map.iter_mut() {
        total += intervals.len();
        support::assert_no_overlap(intervals);
        println!("{name}: {} critical sections, 0 overlaps", intervals.len());
    }
    println!(
        "120 multi-lock rounds ({total} member holds) by 12 tasks in {elapsed:?}; \
         {timeouts} try_lock timeouts"
    );
    let mut conn = server.conn().await;
    assert!(
        support::eventually(Duration::from_secs(2), || {
            let mut conn = conn.clone();
            async move { lock_keys(&mut conn).await.is_empty() }
        })
        .await,
        "locks left behind: {:?}",
        lock_keys(&mut conn).await
    );
}

/// try_lock over {a, b, c} while another owner holds c: Ok(None) after about the wait, and
/// a and b are already free when it returns. A cancelled lock() releases what it took too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn timeout_and_cancellation_release_what_was_taken() {
    let server = RedisServer::start();
    let ns = support::unique_ns("multi-timeout");
    let (c1, c2) = (client(&server, &ns).await, client(&server, &ns).await);
    let mut conn = server.conn().await;
    let blocker = c2.lock("c").lock().await.expect("hold c");
    in_task(async move {
        let multi = c1.multi_lock(["c", "b", "a"]);
        let t0 = Instant::now();
        let got = multi
            .try_lock(Duration::from_millis(300), None)
            .await
            .expect("try_lock");
        let waited = t0.elapsed();
        assert!(got.is_none());
        assert!(
            waited >= Duration::from_millis(290) && waited < Duration::from_secs(3),
            "{waited:?}"
        );
        let left = lock_keys(&mut conn).await;
        assert_eq!(left.len(), 1, "only c may be held: {left:?}");
        assert!(left[0].ends_with("{c}"), "{left:?}");
        assert!(!multi.names().is_empty());

        // Cancelled while waiting for c, holding a and b: both are released.
        let cancelled = tokio::time::timeout(Duration::from_millis(300), multi.lock()).await;
        assert!(cancelled.is_err(), "lock() should still be waiting for c");
        assert!(
            support::eventually(Duration::from_secs(2), || {
                let mut conn = conn.clone();
                async move { lock_keys(&mut conn).await.len() == 1 }
            })
            .await,
            "a cancelled multi-lock left holds: {:?}",
            lock_keys(&mut conn).await
        );

        // Once c is free the same multi-lock takes all three.
        blocker.unlock().await.unwrap();
        let guard = within(5, multi.lock()).await.expect("lock");
        assert_eq!(guard.names(), ["a", "b", "c"]);
        assert_eq!(lock_keys(&mut conn).await.len(), 3);
        assert!(support::keys_with_pttl(&mut conn)
            .await
            .iter()
            .all(|(_, pttl)| *pttl > 0));
        guard.unlock().await.unwrap();
        assert!(lock_keys(&mut conn).await.is_empty());
    })
    .await;
}

/// Empty lists and invalid names are typed errors; duplicates collapse (one hold per name);
/// a member the task already holds is re-entered and stays held after the multi-lock.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn empty_duplicate_and_reentered_names() {
    let server = RedisServer::start();
    let c = client(&server, &support::unique_ns("multi-names")).await;
    in_task(async move {
        let empty = c.multi_lock(Vec::<String>::new());
        assert!(matches!(
            empty.lock().await,
            Err(Error::InvalidArgument {
                argument: "names",
                ..
            })
        ));
        assert!(matches!(
            c.multi_lock(["a", ""]).try_lock(Duration::ZERO, None).await,
            Err(Error::InvalidArgument { .. })
        ));
        assert!(matches!(
            c.multi_lock(["a"])
                .try_lock(Duration::ZERO, Some(Duration::ZERO))
                .await,
            Err(Error::InvalidArgument { .. })
        ));

        let dup = c.multi_lock(["b", "a", "b", "a"]);
        assert_eq!(dup.names(), ["a", "b"]);
        let outer_a = c.lock("a").lock().await.unwrap();
        let guard = dup.lock().await.unwrap();
        assert_eq!(c.lock("a").hold_count().await.unwrap(), 2, "re-entered a");
        assert_eq!(c.lock("b").hold_count().await.unwrap(), 1, "b once");
        assert!(dup.is_any_locked().await.unwrap());
        guard.unlock().await.unwrap();
        assert_eq!(c.lock("a").hold_count().await.unwrap(), 1);
        assert!(!c.lock("b").is_locked().await.unwrap());
        outer_a.unlock().await.unwrap();
        assert!(!dup.is_any_locked().await.unwrap());
    })
    .await;
}

/// lost() fires when one member is force-unlocked; unlock() still releases the others and
/// reports NotHeld. A lease guard whose lease ran out reports NotHeld too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lost_member_fires_lost_and_unlock_reports_it() {
    let server = RedisServer::start();
    let c = client(&server, &support::unique_ns("multi-lost")).await;
    let mut conn = server.conn().await;
    in_task(async move {
        let multi = c.multi_lock(["x", "y"]);
        let guard = multi.lock().await.unwrap();
        assert_eq!(guard.lease(), None);
        let lost = guard.lost();
        assert!(c.lock("y").force_unlock().await.unwrap());
        within(5, lost.cancelled()).await;
        assert!(guard.is_lost());
        assert!(guard.unlock().await.unwrap_err().is_not_held());
        assert!(lock_keys(&mut conn).await.is_empty(), "x was not released");

        let leased = multi
            .lock_with_lease(Duration::from_millis(150))
            .await
            .unwrap();
        assert_eq!(leased.lease(), Some(Duration::from_millis(150)));
        assert!(leased.acquired_in() < Duration::from_millis(150));
        tokio::time::sleep(Duration::from_millis(300)).await;
        assert!(leased.unlock().await.unwrap_err().is_not_held());
    })
    .await;
}

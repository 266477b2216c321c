//! Redlock against real, independent redis-servers: node failures, a pre-locked minority, a
//! restarted node, late replies, cancellation and mutual exclusion between two independent
//! client sets (five servers); an unlock racing extensions (three servers). Partial expiry,
//! partial release and re-entry on every subset of the nodes are in [`redlock_subsets`].

mod redlock_subsets;

use suite::OrNone;
use suite::{conns, hget, node_clients, redlock_options};

use suite::in_task;
use suite::{exists, Conn};

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::future::join_all;
use lockwise::{Error, RedLockOptions, RedLockSet};
use suite::{Interval, RedisServer};

fn servers() -> Vec<RedisServer> {
    suite::servers(5)
}

async fn pttl(conn: &mut Conn, key: &str) -> i64 {
    redis::cmd("PTTL").arg(key).query_async(conn).await.unwrap()
}

/// How many of `conns` hold `key`.
async fn holders(conns: &mut [Conn], key: &str) -> usize {
    let mut n = 0;
    for c in conns.iter_mut() {
        n += exists(c, key).await as usize;
    }
    n
}

/// Whether, within `timeout`, no node of `conns` has `key` any more.
async fn eventually_free(conns: &[Conn], key: &str, timeout: Duration) -> bool {
    suite::eventually(timeout, || {
        let mut conns = conns.to_vec();
        let key = key.to_string();
        async move { holders(&mut conns, &key).await == 0 }
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn all_nodes_up_acquires_on_every_node_with_bounded_validity() {
    let servers = servers();
    let ns = suite::unique_ns("redlock-all");
    let ttl = Duration::from_secs(5);
    let set = RedLockSet::with_options(&node_clients(&servers, &ns).await, redlock_options(ttl));
    let mut conns = conns(&servers).await;
    in_task(async move {
        let lock = set.lock("order:1");
        let key = lock.key(0).unwrap().to_string();
        assert_eq!(key, format!("{ns}:lock:{{order:1}}"));
        let guard = lock.lock().await.expect("lock");
        assert_eq!(guard.acquired_nodes(), 5);
        assert_eq!(holders(&mut conns, &key).await, 5);
        for c in conns.iter_mut() {
            let p = pttl(c, &key).await;
            assert!(p > 0 && p <= ttl.as_millis() as i64, "pttl {p}");
            assert_eq!(hget(c, &key, guard.owner()).await, Some(1));
        }
        let v = guard.validity();
        assert!(v > Duration::ZERO && v <= ttl, "validity {v:?}");
        assert!(guard.owner().starts_with(&set.id().to_string()));
        assert!(!guard.is_lost());
        assert_eq!(guard.lease(), None);
        guard.unlock().await.expect("unlock");
        assert_eq!(holders(&mut conns, &key).await, 0);
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_nodes_down_still_acquires() {
    let mut servers = servers();
    let ns = suite::unique_ns("redlock-2down");
    let set = RedLockSet::with_options(
        &node_clients(&servers, &ns).await,
        redlock_options(Duration::from_secs(5)),
    );
    servers[0].kill();
    servers[3].kill();
    let mut live = vec![
        servers[1].conn().await,
        servers[2].conn().await,
        servers[4].conn().await,
    ];
    in_task(async move {
        let lock = set.lock("two-down");
        let key = lock.key(1).unwrap().to_string();
        let started = Instant::now();
        let guard = lock
            .try_lock(Duration::from_secs(5), None)
            .await
            .or_none()
            .expect("no error with a majority up")
            .expect("acquired with 3 of 5");
        assert!(started.elapsed() < Duration::from_secs(3));
        assert_eq!(guard.acquired_nodes(), 3);
        assert_eq!(holders(&mut live, &key).await, 3);
        assert!(guard.validity() > Duration::ZERO);
        guard.unlock().await.expect("unlock with 3 of 5");
        assert_eq!(holders(&mut live, &key).await, 0);
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_nodes_down_fails_and_releases_the_rest() {
    let mut servers = servers();
    let ns = suite::unique_ns("redlock-3down");
    let set = RedLockSet::with_options(
        &node_clients(&servers, &ns).await,
        redlock_options(Duration::from_secs(5)),
    );
    for i in [0, 2, 4] {
        servers[i].kill();
    }
    let live = vec![servers[1].conn().await, servers[3].conn().await];
    in_task(async move {
        let lock = set.lock("three-down");
        let key = lock.key(1).unwrap().to_string();
        let err = lock
            .try_lock(Duration::from_secs(2), None)
            .await
            .or_none()
            .expect_err("no majority can be reached");
        assert!(matches!(err, Error::Redis(_)), "{err:?}");
        assert!(err.is_retryable(), "{err:?}");
        let err = lock.lock().await.expect_err("lock() fails the same way");
        assert!(matches!(err, Error::Redis(_)), "{err:?}");
        // The two live nodes granted holds; the failed rounds gave them back.
        assert!(eventually_free(&live, &key, Duration::from_secs(3)).await);
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn minority_prelocked_by_another_owner_still_acquires() {
    let servers = servers();
    let ns = suite::unique_ns("redlock-minority");
    let set = RedLockSet::with_options(
        &node_clients(&servers, &ns).await,
        redlock_options(Duration::from_secs(5)),
    );
    let mut conns = conns(&servers).await;
    let key = set.lock("shared").key(0).unwrap().to_string();
    for c in &mut conns[..2] {
        let _: () = redis::pipe()
            .cmd("HSET")
            .arg(&key)
            .arg("someone-else:1")
            .arg(1)
            .ignore()
            .cmd("PEXPIRE")
            .arg(&key)
            .arg(10_000)
            .ignore()
            .query_async(c)
            .await
            .unwrap();
    }
    in_task(async move {
        let guard = set
            .lock("shared")
            .try_lock(Duration::from_secs(5), None)
            .await
            .or_none()
            .unwrap()
            .expect("the free majority grants it");
        assert_eq!(guard.acquired_nodes(), 3);
        for (i, c) in conns.iter_mut().enumerate() {
            let mine = hget(c, &key, guard.owner()).await;
            let theirs = hget(c, &key, "someone-else:1").await;
            if i < 2 {
                assert_eq!((mine, theirs), (None, Some(1)), "node {i}");
            } else {
                assert_eq!((mine, theirs), (Some(1), None), "node {i}");
            }
        }
        guard.unlock().await.unwrap();
        // The other owner's holds are untouched.
        for c in &mut conns[..2] {
            assert_eq!(hget(c, &key, "someone-else:1").await, Some(1));
        }
        assert!(!exists(&mut conns[2], &key).await);
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn majority_held_by_another_set_times_out_with_none_and_leaves_nothing() {
    let servers = servers();
    let ns = suite::unique_ns("redlock-majority");
    let all = node_clients(&servers, &ns).await;
    // Another owner holding only nodes 0..3 (a RedLock over just those three clients).
    let other = RedLockSet::with_options(&all[..3], redlock_options(Duration::from_secs(10)));
    let set = RedLockSet::with_options(&all, redlock_options(Duration::from_secs(5)));
    let conns = conns(&servers).await;
    in_task(async move {
        let theirs = other.lock("busy").lock().await.unwrap();
        let lock = set.lock("busy");
        let key = lock.key(0).unwrap().to_string();
        let started = Instant::now();
        let got = lock
            .try_lock(Duration::from_millis(600), None)
            .await
            .or_none()
            .expect("contention is not an error");
        assert!(got.is_none());
        let waited = started.elapsed();
        assert!(
            waited >= Duration::from_millis(550) && waited < Duration::from_secs(4),
            "{waited:?}"
        );
        // Zero wait: exactly one round.
        assert!(lock
            .try_lock(Duration::ZERO, None)
            .await
            .or_none()
            .unwrap()
            .is_none());
        // Nodes 3 and 4 granted holds in every round; all were given back.
        assert!(eventually_free(&conns[3..], &key, Duration::from_secs(3)).await);
        theirs.unlock().await.unwrap();
        let mine = lock
            .try_lock(Duration::from_secs(3), None)
            .await
            .or_none()
            .unwrap();
        assert_eq!(mine.expect("free now").acquired_nodes(), 5);
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn node_restarted_while_held_keeps_quorum_until_a_majority_is_gone() {
    let mut servers = servers();
    let ns = suite::unique_ns("redlock-restart");
    let ttl = Duration::from_millis(1500);
    let set = RedLockSet::with_options(&node_clients(&servers, &ns).await, redlock_options(ttl));
    let lock = set.lock("restart");
    let key = lock.key(0).unwrap().to_string();
    let guard = tokio::spawn(async move { lock.lock().await.expect("lock") })
        .await
        .unwrap();
    assert_eq!(guard.acquired_nodes(), 5);

    // Node 0 restarts without persistence: its hold is gone, 4 of 5 still hold it.
    servers[0].restart();
    tokio::time::sleep(ttl * 2).await; // several extension periods
    assert!(!guard.is_lost(), "4 of 5 nodes still extend it");
    let v = guard.validity();
    assert!(v > Duration::ZERO && v <= ttl, "validity {v:?}");
    let mut conns = conns(&servers).await;
    assert!(
        !exists(&mut conns[0], &key).await,
        "a restart does not bring the hold back"
    );
    for c in &mut conns[1..] {
        assert!(pttl(c, &key).await > 0);
    }

    // Two more nodes die: only 2 of 5 confirm, the guard is lost once its validity ends.
    let lost = guard.lost();
    servers[1].kill();
    servers[2].kill();
    let started = Instant::now();
    tokio::time::timeout(ttl * 3, lost.cancelled())
        .await
        .expect("lost() fires when no majority extends the lock");
    assert!(started.elapsed() <= ttl + Duration::from_millis(700));
    assert!(guard.is_lost());
    assert_eq!(guard.validity(), Duration::ZERO);
    let err = guard.unlock().await.expect_err("not held by a majority");
    assert!(err.is_not_held(), "{err:?}");
    // The survivors' holds were released.
    assert!(eventually_free(&conns[3..], &key, Duration::from_secs(2)).await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watchdog_extends_by_quorum_past_the_ttl() {
    let servers = servers();
    let ns = suite::unique_ns("redlock-watchdog");
    let ttl = Duration::from_millis(900);
    let set = RedLockSet::with_options(&node_clients(&servers, &ns).await, redlock_options(ttl));
    let mut conns = conns(&servers).await;
    in_task(async move {
        let lock = set.lock("long-job");
        let key = lock.key(0).unwrap().to_string();
        let guard = lock.lock().await.unwrap();
        tokio::time::sleep(ttl * 3).await;
        assert!(!guard.is_lost());
        assert_eq!(holders(&mut conns, &key).await, 5);
        let v = guard.validity();
        assert!(v > Duration::ZERO && v <= ttl, "validity {v:?}");
        guard.unlock().await.unwrap();
        assert_eq!(holders(&mut conns, &key).await, 0);
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lease_hold_expires_reports_lost_and_unlock_is_not_held() {
    let servers = servers();
    let ns = suite::unique_ns("redlock-lease");
    let set = RedLockSet::with_options(
        &node_clients(&servers, &ns).await,
        redlock_options(Duration::from_secs(30)),
    );
    let conns = conns(&servers).await;
    in_task(async move {
        let lease = Duration::from_millis(700);
        let lock = set.lock("leased");
        let key = lock.key(0).unwrap().to_string();
        let guard = lock.lock_with_lease(lease).await.unwrap();
        assert_eq!(guard.lease(), Some(lease));
        let v = guard.validity();
        assert!(v > Duration::ZERO && v < lease, "validity {v:?}");
        tokio::time::timeout(Duration::from_secs(2), guard.lost().cancelled())
            .await
            .expect("a lease hold reports lost when its validity ends");
        assert!(guard.is_lost());
        assert!(eventually_free(&conns, &key, Duration::from_secs(2)).await);
        let err = guard.unlock().await.expect_err("expired");
        assert!(err.is_not_held(), "{err:?}");
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reentrant_on_every_node_across_handles_of_one_set() {
    let servers = servers();
    let ns = suite::unique_ns("redlock-reentrant");
    let set = RedLockSet::with_options(
        &node_clients(&servers, &ns).await,
        redlock_options(Duration::from_secs(5)),
    );
    let mut conns = conns(&servers).await;
    in_task(async move {
        let outer = set.lock("re").lock().await.unwrap();
        let key = set.lock("re").key(0).unwrap().to_string();
        // Another handle of the same set, same task: the same owner.
        let inner = set
            .lock("re")
            .try_lock(Duration::ZERO, Some(Duration::from_secs(2)))
            .await
            .or_none()
            .unwrap()
            .expect("re-entry");
        assert_eq!(inner.owner(), outer.owner());
        for c in conns.iter_mut() {
            assert_eq!(hget(c, &key, outer.owner()).await, Some(2));
        }
        // Another task is another owner: it must not get in.
        let other = set.lock("re");
        let blocked = tokio::spawn(async move {
            other
                .try_lock(Duration::from_millis(200), None)
                .await
                .or_none()
                .unwrap()
                .is_none()
        });
        assert!(blocked.await.unwrap());
        inner.unlock().await.unwrap();
        for c in conns.iter_mut() {
            assert_eq!(hget(c, &key, outer.owner()).await, Some(1));
        }
        outer.unlock().await.unwrap();
        assert_eq!(holders(&mut conns, &key).await, 0);
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mutual_exclusion_two_client_sets_four_tasks_each() {
    const ROUNDS: usize = 3;
    let servers = servers();
    let ns = suite::unique_ns("redlock-mutex");
    let mut sets = Vec::new();
    for _ in 0..2 {
        // Each set has its own five Clients to the same five servers.
        let clients = node_clients(&servers, &ns).await;
        sets.push(RedLockSet::with_options(
            &clients,
            redlock_options(Duration::from_secs(5)),
        ));
    }
    let intervals = Arc::new(Mutex::new(Vec::new()));
    let started = Instant::now();
    let mut tasks = Vec::new();
    for who in 0..8 {
        let lock = sets[who % 2].lock("contended");
        let intervals = intervals.clone();
        tasks.push(tokio::spawn(async move {
            for _ in 0..ROUNDS {
                let guard = lock
                    .try_lock(Duration::from_secs(15), None)
                    .await
                    .or_none()
                    .unwrap()
                    .expect("acquired within the wait");
                assert!(guard.validity() > Duration::ZERO);
                let start = Instant::now();
                tokio::time::sleep(Duration::from_millis(5)).await;
                let end = Instant::now();
                intervals.lock().unwrap().push(Interval { start, end, who });
                guard.unlock().await.unwrap();
            }
        }));
    }
    for r in join_all(tasks).await {
        r.unwrap();
    }
    let mut intervals = intervals.lock().unwrap().clone();
    assert_eq!(intervals.len(), 8 * ROUNDS);
    suite::assert_no_overlap(&mut intervals);
    eprintln!(
        "redlock: {} acquisitions by 8 tasks in 2 sets in {:?}",
        intervals.len(),
        started.elapsed()
    );
    let key = sets[0].lock("contended").key(0).unwrap().to_string();
    assert!(eventually_free(&conns(&servers).await, &key, Duration::from_secs(2)).await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropped_guard_releases_on_every_node_in_the_background() {
    let servers = servers();
    let ns = suite::unique_ns("redlock-drop");
    let set = RedLockSet::with_options(
        &node_clients(&servers, &ns).await,
        redlock_options(Duration::from_secs(30)),
    );
    let conns = conns(&servers).await;
    in_task(async move {
        let lock = set.lock("dropped");
        let key = lock.key(0).unwrap().to_string();
        let guard = lock.lock().await.unwrap();
        drop(guard);
        assert!(eventually_free(&conns, &key, Duration::from_secs(2)).await);
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn late_reply_from_a_stalled_node_is_released_after_it_answers() {
    let servers = servers();
    let ns = suite::unique_ns("redlock-late");
    let set = RedLockSet::with_options(
        &node_clients(&servers, &ns).await,
        redlock_options(Duration::from_secs(10)).node_timeout(Duration::from_millis(300)),
    );
    let mut conns = conns(&servers).await;
    // Node 4 stalls for 1.5 s: its lock call times out but runs once the node wakes up.
    let mut sleeper = servers[4].conn().await;
    let stall = tokio::spawn(async move {
        let _: redis::RedisResult<()> = redis::cmd("DEBUG")
            .arg("SLEEP")
            .arg(1.5)
            .query_async(&mut sleeper)
            .await;
    });
    // (The test connection's own 500 ms response timeout ends `stall` early: wait for this.)
    let awake = tokio::time::Instant::now() + Duration::from_millis(1700);
    tokio::time::sleep(Duration::from_millis(100)).await;
    in_task(async move {
        let lock = set.lock("late");
        let key = lock.key(0).unwrap().to_string();
        let started = Instant::now();
        let guard = lock.lock().await.unwrap();
        assert!(
            started.elapsed() < Duration::from_secs(1),
            "bounded by the node timeout"
        );
        assert_eq!(guard.acquired_nodes(), 4);
        stall.await.unwrap();
        tokio::time::sleep_until(awake).await;
        // The stalled node ran the call late and granted a hold nobody awaited: given back.
        let mut node4 = conns.pop().unwrap();
        assert!(
            suite::eventually(Duration::from_secs(3), || {
                let mut c = node4.clone();
                let key = key.clone();
                async move { !exists(&mut c, &key).await }
            })
            .await
        );
        assert_eq!(holders(&mut conns, &key).await, 4);
        guard.unlock().await.unwrap();
        assert_eq!(holders(&mut conns, &key).await, 0);
        assert!(!exists(&mut node4, &key).await);
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancelled_lock_with_calls_in_flight_leaves_no_hold() {
    let servers = servers();
    let ns = suite::unique_ns("redlock-cancel");
    let set = RedLockSet::with_options(
        &node_clients(&servers, &ns).await,
        redlock_options(Duration::from_secs(10)).node_timeout(Duration::from_secs(3)),
    );
    let conns = conns(&servers).await;
    // Every node stalls: the lock calls are queued when the future is dropped.
    let mut stalls = Vec::new();
    for s in &servers {
        let mut c = s.conn().await;
        stalls.push(tokio::spawn(async move {
            let _: redis::RedisResult<()> = redis::cmd("DEBUG")
                .arg("SLEEP")
                .arg(0.6)
                .query_async(&mut c)
                .await;
        }));
    }
    let awake = tokio::time::Instant::now() + Duration::from_millis(800);
    tokio::time::sleep(Duration::from_millis(100)).await;
    in_task(async move {
        let lock = set.lock("cancelled");
        let key = lock.key(0).unwrap().to_string();
        let attempt = tokio::time::timeout(Duration::from_millis(150), lock.lock()).await;
        assert!(attempt.is_err(), "cancelled while every node is stalled");
        join_all(stalls).await;
        tokio::time::sleep_until(awake).await;
        // The calls ran after the nodes woke up and were undone.
        assert!(eventually_free(&conns, &key, Duration::from_secs(3)).await);
        // And the lock is free for the next owner.
        let g = lock
            .try_lock(Duration::from_secs(2), None)
            .await
            .or_none()
            .unwrap();
        assert_eq!(g.expect("free").acquired_nodes(), 5);
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_input_is_rejected_before_anything_is_sent() {
    let server = RedisServer::start();
    let ns = suite::unique_ns("redlock-bad");
    let clients = node_clients(std::slice::from_ref(&server), &ns).await;
    let invalid = |r: lockwise::Result<_>| matches!(r, Err(Error::InvalidArgument { .. }));

    assert!(invalid(
        RedLockSet::new(&[]).lock("x").lock().await.map(drop)
    ));
    assert!(invalid(
        RedLockSet::new(&clients).lock("").lock().await.map(drop)
    ));
    let lock = lockwise::RedLock::new(&clients, "x");
    assert!(invalid(
        lock.lock_with_lease(Duration::ZERO).await.map(drop)
    ));
    // A lease not longer than its drift allowance (1% + 2 ms) could never be valid.
    assert!(invalid(
        lock.lock_with_lease(Duration::from_millis(2))
            .await
            .map(drop)
    ));
    let bad = RedLockSet::with_options(
        &clients,
        RedLockOptions::default().node_timeout(Duration::ZERO),
    );
    assert!(invalid(
        bad.lock("x")
            .try_lock(Duration::ZERO, None)
            .await
            .or_none()
            .map(drop)
    ));
    let mut conn = server.conn().await;
    assert!(suite::keys_with_pttl(&mut conn).await.is_empty());
    // A single node is a valid (if pointless) set: quorum 1.
    let set = RedLockSet::new(&clients);
    assert_eq!((set.nodes(), set.quorum()), (1, 1));
}

// Partial expiry, partial release and re-entry on every subset of three nodes.
//
// Each node counts the holds of one owner, so the holds of two guards of one task look alike
// there. These tests check that a guard never counts, extends or releases a node where its
// own hold is gone, and that a second owner never takes the majority while a guard claims
// validity.

/// Unlocks racing the extension task (TTL 150 ms: an extension every 50 ms): an extension in
/// flight when the guard is released must never revive or keep the released lock; every
/// node is free right after each unlock and stays free.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unlock_racing_extensions_never_leaves_a_hold() {
    let servers = suite::servers(3);
    let ns = suite::unique_ns("review-redlock-extend-race");
    let set = RedLockSet::with_options(
        &node_clients(&servers, &ns).await,
        redlock_options(Duration::from_millis(150)),
    );
    let mut conns = conns(&servers).await;
    in_task(async move {
        let lock = set.lock("race");
        let key = lock.key(0).unwrap().to_string();
        for i in 0..25u64 {
            let g = lock.lock().await.unwrap();
            // Land the unlock at varying points of the 50 ms extension period.
            tokio::time::sleep(Duration::from_millis(40 + (i * 7) % 30)).await;
            assert!(!g.is_lost(), "round {i}: extended hold reported lost");
            g.unlock().await.unwrap();
            tokio::time::sleep(Duration::from_millis(60)).await;
            for (n, c) in conns.iter_mut().enumerate() {
                let exists: i64 = redis::cmd("EXISTS").arg(&key).query_async(c).await.unwrap();
                assert_eq!(exists, 0, "round {i}: node {n} still holds after unlock");
            }
        }
    })
    .await;
}

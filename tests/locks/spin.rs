//! `SpinLock`: the reentrant lock of a name whose waiters never subscribe. What sets it apart
//! from an `RLock` is checked here against a real server: no subscription while waiting, a
//! handoff within its pauses, a wait bounded by the holder's TTL, the same lock (and holds)
//! as the `RLock` of the name, the others' overtake queue honoured, bad backoffs refused
//! with nothing written, a dropped wait leaving nothing, and several clients never
//! overlapping. The contract (tests/locks/contract.rs) and the same-name tests run on it too.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use lockwise::{Client, Error};
use suite::kit::{in_task, within};
use suite::{assert_no_overlap, Conn, Interval, RedisServer};

/// Channels this server has subscribers on (plain and sharded), and their count.
async fn subscribed_channels(conn: &mut Conn) -> Vec<String> {
    let mut channels: Vec<String> = redis::cmd("PUBSUB")
        .arg("CHANNELS")
        .query_async(conn)
        .await
        .unwrap();
    let sharded: Vec<String> = redis::cmd("PUBSUB")
        .arg("SHARDCHANNELS")
        .query_async(conn)
        .await
        .unwrap_or_default();
    channels.extend(sharded);
    channels
}

async fn two_clients(server: &RedisServer, test: &str) -> (Client, Client) {
    let ns = suite::unique_ns(test);
    let a = suite::client(server, &ns, Duration::from_secs(5)).await;
    let b = suite::client(server, &ns, Duration::from_secs(5)).await;
    (a, b)
}

/// A spin waiter sends no SUBSCRIBE; it finds the released lock at its next try, within the
/// longest pause (plus the call) of the release.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waits_without_subscribing_and_takes_the_lock_within_a_pause() {
    let server = RedisServer::start();
    let (a, b) = two_clients(&server, "spin-nosub").await;
    let mut conn = server.conn().await;
    let lock = b
        .spin_lock("s")
        .with_backoff(Duration::from_millis(2), Duration::from_millis(40));
    let held = a.spin_lock("s").lock().await.unwrap();
    let waiter = tokio::spawn(async move {
        let g = lock.lock().await.unwrap();
        let got = Instant::now();
        g.unlock().await.unwrap();
        got
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(!waiter.is_finished(), "the lock is held");
    let channels = subscribed_channels(&mut conn).await;
    assert!(
        channels.is_empty(),
        "a spin waiter subscribed: {channels:?}"
    );
    let released = Instant::now();
    held.unlock().await.unwrap();
    let got = within(5, waiter).await.unwrap();
    let handoff = got.duration_since(released);
    println!("spin handoff after the release: {handoff:?} (longest pause 40 ms)");
    assert!(handoff < Duration::from_millis(500), "handoff {handoff:?}");
    assert!(subscribed_channels(&mut conn).await.is_empty());
}

/// A holder that never releases: the waiter's pauses are cut at the holder's TTL, so it takes
/// the lock soon after the lease ends although its longest pause is far longer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wait_is_bounded_by_the_holders_ttl() {
    let server = RedisServer::start();
    let (a, b) = two_clients(&server, "spin-ttl").await;
    let held = a
        .spin_lock("t")
        .lock_with_lease(Duration::from_millis(400))
        .await
        .unwrap();
    let started = Instant::now();
    let g = within(
        5,
        b.spin_lock("t")
            .with_backoff(Duration::from_secs(1), Duration::from_secs(10))
            .lock(),
    )
    .await
    .unwrap();
    let waited = started.elapsed();
    println!("spin waiter took the expired lock after {waited:?} (lease 400 ms)");
    assert!(waited < Duration::from_millis(1200), "waited {waited:?}");
    g.unlock().await.unwrap();
    assert!(held.unlock().await.unwrap_err().is_not_held());
}

/// The spin lock is the `RLock` of its name: one task re-enters a hold across the two
/// handles (one hash field, hold count 2), and another client's `RLock` waits for both.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn it_is_the_rlock_of_its_name() {
    let server = RedisServer::start();
    let (a, b) = two_clients(&server, "spin-same").await;
    let mut conn = server.conn().await;
    in_task(async move {
        let (spin, plain) = (a.spin_lock("n"), a.lock("n"));
        assert_eq!(spin.key(), plain.key());
        let g1 = plain.lock().await.unwrap();
        let g2 = spin.try_lock(Duration::ZERO, None).await.unwrap();
        assert_eq!(spin.hold_count().await.unwrap(), 2);
        let fields: Vec<String> = redis::cmd("HKEYS")
            .arg(spin.key())
            .query_async(&mut conn)
            .await
            .unwrap();
        assert_eq!(fields.len(), 1, "one owner field: {fields:?}");
        let other = b.lock("n");
        assert!(other
            .try_lock(Duration::from_millis(100), None)
            .await
            .unwrap_err()
            .is_timeout());
        g2.unlock().await.unwrap();
        assert!(other.try_lock(Duration::ZERO, None).await.is_err());
        g1.unlock().await.unwrap();
        // The last release published: the RLock waiter of the name is woken by it.
        let g = within(2, other.lock()).await.unwrap();
        g.unlock().await.unwrap();
        assert!(suite::keys_with_pttl(&mut conn).await.is_empty());
    })
    .await;
}

/// Bad backoffs are typed errors before anything is sent; a valid one is reported back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_backoffs_are_refused_and_nothing_is_written() {
    let server = RedisServer::start();
    let (a, _) = two_clients(&server, "spin-bad").await;
    let mut conn = server.conn().await;
    let calls = suite::script_calls(&mut conn).await;
    let lock = a.spin_lock("b");
    assert_eq!(
        lock.backoff(),
        (lockwise::DEFAULT_SPIN_INITIAL, lockwise::DEFAULT_SPIN_MAX)
    );
    for (initial, max) in [
        (Duration::ZERO, Duration::from_millis(10)),
        (Duration::from_micros(500), Duration::from_millis(10)),
        (Duration::from_millis(20), Duration::from_millis(10)),
    ] {
        let bad = lock.with_backoff(initial, max);
        assert_eq!(bad.backoff(), (initial, max));
        for err in [
            bad.lock().await.unwrap_err(),
            bad.try_lock(Duration::ZERO, None).await.unwrap_err(),
            bad.lock_with_lease(Duration::from_secs(1))
                .await
                .unwrap_err(),
        ] {
            assert!(
                matches!(
                    err,
                    Error::InvalidArgument {
                        argument: "backoff",
                        ..
                    }
                ),
                "{initial:?}..{max:?}: {err:?}"
            );
        }
    }
    assert!(matches!(
        a.spin_lock("").lock().await.unwrap_err(),
        Error::InvalidArgument { .. }
    ));
    assert_eq!(suite::script_calls(&mut conn).await, calls, "nothing sent");
    assert!(suite::keys_with_pttl(&mut conn).await.is_empty());
}

/// A wait dropped midway (a timeout around `lock()`) leaves nothing: no hold appears later,
/// the lock is free once its holder releases it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dropped_wait_leaves_nothing() {
    let server = RedisServer::start();
    let (a, b) = two_clients(&server, "spin-drop").await;
    let mut conn = server.conn().await;
    let held = a.spin_lock("d").lock().await.unwrap();
    let lock = b
        .spin_lock("d")
        .with_backoff(Duration::from_millis(1), Duration::from_millis(5));
    for _ in 0..20 {
        let r = tokio::time::timeout(Duration::from_millis(37), lock.lock()).await;
        assert!(r.is_err(), "the lock is held");
    }
    held.unlock().await.unwrap();
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(!lock.is_locked().await.unwrap());
    assert!(suite::keys_with_pttl(&mut conn).await.is_empty());
}

/// An `RLock` waiter past the overtake limit heads the name's claim queue: spin waiters
/// polling every millisecond do not take the freed lock before it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn spin_waiters_honour_the_claim_queue() {
    let server = RedisServer::start();
    let (a, b) = two_clients(&server, "spin-claims").await;
    let held = a.lock("q").lock().await.unwrap();
    let queued = {
        let lock = b.lock("q");
        tokio::spawn(async move {
            let g = lock.lock().await.unwrap();
            let got = Instant::now();
            tokio::time::sleep(Duration::from_millis(50)).await;
            g.unlock().await.unwrap();
            got
        })
    };
    // Past the 200 ms limit: the RLock waiter is in the claim queue.
    tokio::time::sleep(Duration::from_millis(600)).await;
    let spinners: Vec<_> = (0..4)
        .map(|_| {
            let lock = a
                .spin_lock("q")
                .non_reentrant()
                .with_backoff(Duration::from_millis(1), Duration::from_millis(1));
            tokio::spawn(async move {
                let g = lock.lock().await.unwrap();
                let got = Instant::now();
                g.unlock().await.unwrap();
                got
            })
        })
        .collect();
    tokio::time::sleep(Duration::from_millis(100)).await;
    held.unlock().await.unwrap();
    let first = within(5, queued).await.unwrap();
    for s in spinners {
        let got = within(5, s).await.unwrap();
        assert!(
            got > first,
            "a spin waiter took the lock before the queue's head"
        );
    }
}

/// Three clients × four tasks on one spin lock: no two holds overlap, every task gets it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn several_clients_never_overlap() {
    let server = RedisServer::start();
    let ns = suite::unique_ns("spin-many");
    let mut clients = Vec::new();
    for _ in 0..3 {
        clients.push(suite::client(&server, &ns, Duration::from_secs(2)).await);
    }
    let intervals = Arc::new(Mutex::new(Vec::new()));
    let deadline = Instant::now() + Duration::from_secs(2);
    let mut tasks = Vec::new();
    for (who, client) in clients.iter().cycle().take(12).enumerate() {
        let lock = client.spin_lock("many");
        let intervals = intervals.clone();
        tasks.push(tokio::spawn(async move {
            let mut held = 0;
            while Instant::now() < deadline {
                let g = lock.lock().await.unwrap();
                let start = Instant::now();
                tokio::time::sleep(Duration::from_millis(3)).await;
                let end = Instant::now();
                g.unlock().await.unwrap();
                intervals.lock().unwrap().push(Interval { start, end, who });
                held += 1;
            }
            held
        }));
    }
    let mut counts = Vec::new();
    for t in tasks {
        counts.push(within(30, t).await.unwrap());
    }
    let mut all = intervals.lock().unwrap().clone();
    println!("holds per task: {counts:?} ({} in all)", all.len());
    assert!(
        counts.iter().all(|&n| n > 0),
        "every task got the lock: {counts:?}"
    );
    assert_no_overlap(&mut all);
    let mut conn = server.conn().await;
    assert!(suite::keys_with_pttl(&mut conn).await.is_empty());
}

//! `Semaphore` and `CountDownLatch` in Redisson's layout against the Redisson-protocol peer:
//! both directions share permits and counts, wake each other by pub/sub (well before any
//! bound), never hand out more permits than there are under mixed contention, and write
//! Redisson's bytes (a string with the decimal count, decimal messages).

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use lockwise::Error;
use suite::kit::within;
use suite::redisson::{self, RedissonPeer};
use suite::RedisServer;

use super::{client, get, keys_without_ttl, payloads, pttl, record, type_of, Holders, WOKEN};

/// The clients' watchdog timeout, which also bounds a waiter's sleep on a key without TTL:
/// a waiter woken only by that bound would wait about this long.
const WATCHDOG: Duration = Duration::from_secs(30);

fn assert_decimal(payloads: &[String]) {
    for p in payloads {
        assert!(
            redisson::java_long(p.as_bytes()).is_some() && p.parse::<i64>().is_ok(),
            "not a decimal integer: {p:?}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn semaphore_permits_set_by_redisson_are_taken_and_given_back_by_lockwise() {
    let server = RedisServer::start();
    let mut conn = server.conn().await;
    let c = client(&server, WATCHDOG).await;
    let peer = RedissonPeer::connect(server.url()).await;
    assert!(peer.sem_try_set_permits("pool", 2).await);
    let sem = c.semaphore("pool");
    assert_eq!(sem.key(), "pool");
    assert_eq!(sem.available_permits().await.unwrap(), 2);
    assert!(
        !sem.try_set_permits(5).await.unwrap(),
        "Java's semaphore exists"
    );
    // lockwise takes both: Java finds none.
    let both = sem.try_acquire_many(2, Duration::ZERO).await.unwrap();
    assert!(!peer.sem_try_acquire("pool", 1).await);
    assert_eq!(peer.sem_available("pool").await, 0);
    assert!(
        pttl(&mut conn, "pool").await > 0,
        "lockwise's write set its idle TTL"
    );
    assert_eq!(both.release().await.unwrap(), 2);
    // Java takes one: lockwise sees one left, and waits in vain for two.
    assert!(peer.sem_try_acquire("pool", 1).await);
    assert_eq!(sem.available_permits().await.unwrap(), 1);
    let e = sem
        .try_acquire_many(2, Duration::from_millis(200))
        .await
        .unwrap_err();
    assert!(e.is_timeout(), "{e}");
    assert_eq!(sem.drain_permits().await.unwrap(), 1);
    assert_eq!(peer.sem_available("pool").await, 0);
    assert_eq!(peer.sem_release("pool", 1).await, 1);
    assert_eq!(sem.add_permits(2).await.unwrap(), 3);
    assert_eq!(peer.sem_available("pool").await, 3);
    assert_eq!(sem.release(1).await.unwrap(), 4);
    assert_eq!(peer.sem_drain("pool").await, 4);
    assert_eq!(sem.available_permits().await.unwrap(), 0);
    assert!(peer.bad_payloads().is_empty(), "{:?}", peer.bad_payloads());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lockwise_waiter_on_zero_permits_is_woken_by_a_redisson_release() {
    let server = RedisServer::start();
    let c = client(&server, WATCHDOG).await;
    let peer = RedissonPeer::connect(server.url()).await;
    // Java's key has no TTL: only the message (or the watchdog bound) wakes the waiter.
    assert!(peer.sem_try_set_permits("pool", 0).await);
    let sem = c.semaphore("pool");
    let waiters: Vec<_> = (0..2)
        .map(|_| {
            let sem = sem.clone();
            tokio::spawn(async move {
                let permit = sem.acquire().await.unwrap();
                (permit, Instant::now())
            })
        })
        .collect();
    tokio::time::sleep(Duration::from_millis(300)).await;
    let released = Instant::now();
    assert_eq!(peer.sem_release("pool", 2).await, 2);
    for waiter in waiters {
        let (permit, at) = within(25, waiter).await.unwrap();
        assert!(
            at - released < WOKEN,
            "woken by `2`, not a bound: {:?}",
            at - released
        );
        permit.forget();
    }
    assert_eq!(peer.sem_available("pool").await, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lockwise_waiter_for_one_permit_is_not_starved_by_one_for_two() {
    let server = RedisServer::start();
    let c = client(&server, WATCHDOG).await;
    let peer = RedissonPeer::connect(server.url()).await;
    assert!(peer.sem_try_set_permits("pool", 0).await);
    let sem = c.semaphore("pool");
    // The waiter for two waits first: the message `1` wakes it first, and it passes on.
    let big = {
        let sem = sem.clone();
        tokio::spawn(async move { sem.try_acquire_many(2, Duration::from_secs(20)).await })
    };
    tokio::time::sleep(Duration::from_millis(200)).await;
    let small = {
        let sem = sem.clone();
        tokio::spawn(async move {
            let permit = sem.acquire().await.unwrap();
            (permit, Instant::now())
        })
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    let released = Instant::now();
    assert_eq!(peer.sem_release("pool", 1).await, 1);
    let (permit, at) = within(25, small).await.unwrap();
    assert!(
        at - released < WOKEN,
        "woken through the chain: {:?}",
        at - released
    );
    // One more, twice over (the count comes back to 1): the waiter for two is served.
    permit.release().await.unwrap();
    assert_eq!(peer.sem_release("pool", 1).await, 2);
    let two = within(25, big).await.unwrap().unwrap();
    assert_eq!(two.permits(), 2);
    two.release().await.unwrap();
    assert_eq!(peer.sem_available("pool").await, 2);
}

/// Redisson's count has no version: a count that comes back to a value a waiter failed at
/// (a take, then a release, between two of its looks) must still reach the waiter behind it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_is_served_when_the_count_comes_back_to_a_value() {
    let server = RedisServer::start();
    let c = client(&server, WATCHDOG).await;
    let peer = RedissonPeer::connect(server.url()).await;
    assert!(peer.sem_try_set_permits("pool", 1).await);
    let sem = c.semaphore("pool");
    // The waiter for two fails at 1 (and then looks again every half second at most).
    let big = {
        let sem = sem.clone();
        tokio::spawn(async move { sem.try_acquire_many(2, Duration::from_secs(20)).await })
    };
    tokio::time::sleep(Duration::from_millis(100)).await;
    // Java takes the permit; a waiter for one arrives and fails at 0.
    assert!(peer.sem_try_acquire("pool", 1).await);
    let small = {
        let sem = sem.clone();
        tokio::spawn(async move {
            let permit = sem.acquire().await.unwrap();
            (permit, Instant::now())
        })
    };
    tokio::time::sleep(Duration::from_millis(100)).await;
    // Back to 1: `1` wakes the older waiter, which failed at 1 already.
    let released = Instant::now();
    assert_eq!(peer.sem_release("pool", 1).await, 1);
    let (permit, at) = within(25, small).await.unwrap();
    assert!(
        at - released < WOKEN,
        "served within a re-check: {:?}",
        at - released
    );
    permit.release().await.unwrap();
    assert_eq!(peer.sem_release("pool", 1).await, 2);
    let two = within(25, big).await.unwrap().unwrap();
    two.release().await.unwrap();
    assert_eq!(peer.sem_available("pool").await, 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redisson_waiter_is_woken_by_a_lockwise_release() {
    let server = RedisServer::start();
    let c = client(&server, WATCHDOG).await;
    let peer = Arc::new(RedissonPeer::connect(server.url()).await);
    let sem = c.semaphore("pool");
    assert!(sem.try_set_permits(1).await.unwrap());
    assert!(
        !peer.sem_try_set_permits("pool", 7).await,
        "lockwise's semaphore exists"
    );
    let permit = sem.acquire().await.unwrap();
    let waiter = {
        let peer = peer.clone();
        tokio::spawn(async move {
            let ok = peer.sem_acquire("pool", 1, Duration::from_secs(20)).await;
            (ok, Instant::now())
        })
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    let released = Instant::now();
    assert_eq!(permit.release().await.unwrap(), 1);
    let (ok, at) = within(25, waiter).await.unwrap();
    assert!(ok, "the Java-side waiter got the permit");
    assert!(
        at - released < WOKEN,
        "woken by `1`, not its wait: {:?}",
        at - released
    );
    assert!(peer.wakeups(&redisson::semaphore_channel("pool")) >= 1);
    assert_eq!(sem.available_permits().await.unwrap(), 0);
    assert_eq!(peer.sem_release("pool", 1).await, 1);
    assert!(peer.bad_payloads().is_empty(), "{:?}", peer.bad_payloads());
}

/// Two lockwise tasks (one of them taking two permits every other round) and two peer
/// "threads" take permits of one semaphore of `N`; the permits held at once are counted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn permits_never_exceed_the_count_under_mixed_contention() {
    const N: i64 = 2;
    const ROUNDS: usize = 20;
    let server = RedisServer::start();
    let c = client(&server, WATCHDOG).await;
    let peers = [
        Arc::new(RedissonPeer::connect(server.url()).await),
        Arc::new(RedissonPeer::connect(server.url()).await),
    ];
    assert!(peers[0].sem_try_set_permits("pool", N).await);
    let holders = Arc::new(Holders::default());
    let mut tasks = Vec::new();
    for t in 0..2 {
        let (sem, holders) = (c.semaphore("pool"), holders.clone());
        tasks.push(tokio::spawn(async move {
            for round in 0..ROUNDS {
                let k = if t == 0 && round % 2 == 1 { 2 } else { 1 };
                let permits = sem.acquire_many(k).await.unwrap();
                holders.take(k as i64);
                tokio::time::sleep(Duration::from_millis(2)).await;
                holders.give(k as i64);
                permits.release().await.unwrap();
            }
        }));
    }
    for peer in &peers {
        let (peer, holders) = (peer.clone(), holders.clone());
        tasks.push(tokio::spawn(async move {
            for _ in 0..ROUNDS {
                assert!(peer.sem_acquire("pool", 1, Duration::from_secs(20)).await);
                holders.take(1);
                tokio::time::sleep(Duration::from_millis(2)).await;
                holders.give(1);
                peer.sem_release("pool", 1).await;
            }
        }));
    }
    let started = Instant::now();
    for task in tasks {
        within(60, task).await.unwrap();
    }
    let most = holders.most.load(Ordering::SeqCst);
    assert!(most <= N, "{most} permits held at once");
    assert_eq!(most, N, "the permits were shared at all");
    assert_eq!(peers[0].sem_available("pool").await, N);
    assert!(
        started.elapsed() < Duration::from_secs(30),
        "{:?}",
        started.elapsed()
    );
    for peer in &peers {
        assert!(peer.bad_payloads().is_empty(), "{:?}", peer.bad_payloads());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn semaphore_is_redissons_string_and_publishes_decimal_counts() {
    let server = RedisServer::start();
    let mut conn = server.conn().await;
    let c = client(&server, WATCHDOG).await;
    let seen = record(&server, "redisson_sc:{pool}").await;
    let sem = c.semaphore("pool");
    assert!(sem.try_set_permits(3).await.unwrap());
    assert_eq!(type_of(&mut conn, "pool").await, "string");
    assert_eq!(get(&mut conn, "pool").await.as_deref(), Some("3"));
    let idle = Duration::from_secs(24 * 3600).as_millis() as i64;
    let ttl = pttl(&mut conn, "pool").await;
    assert!(ttl > idle - 60_000 && ttl <= idle, "the idle TTL: {ttl}");
    let two = sem.acquire_many(2).await.unwrap();
    assert_eq!(get(&mut conn, "pool").await.as_deref(), Some("1"));
    assert_eq!(two.release().await.unwrap(), 3);
    assert_eq!(sem.add_permits(2).await.unwrap(), 5);
    assert_eq!(
        sem.add_permits(-1).await.unwrap(),
        4,
        "a removal publishes nothing"
    );
    assert_eq!(get(&mut conn, "pool").await.as_deref(), Some("4"));
    assert_eq!(
        sem.drain_permits().await.unwrap(),
        4,
        "a drain publishes nothing"
    );
    assert_eq!(get(&mut conn, "pool").await.as_deref(), Some("0"));
    assert_eq!(sem.release(1).await.unwrap(), 1);
    // A short idle TTL is raised to, never lowered below, what the key has.
    let short = c.semaphore("pool").with_idle_ttl(Duration::from_secs(60));
    assert_eq!(short.release(1).await.unwrap(), 2);
    assert!(pttl(&mut conn, "pool").await > 60_000);
    let got = payloads(&seen, 5).await;
    assert_eq!(got, ["3", "3", "5", "1", "2"]);
    assert_decimal(&got);
    // Nothing but Redisson's key, and it has a TTL.
    let keys: Vec<String> = suite::keys_with_pttl(&mut conn)
        .await
        .into_iter()
        .map(|(k, _)| k)
        .collect();
    assert_eq!(keys, ["pool"]);
    assert!(keys_without_ttl(&mut conn).await.is_empty());
    // A name Redisson would split across slots is refused, writing nothing.
    match c.semaphore("a{b").try_set_permits(1).await {
        Err(Error::InvalidArgument { argument, .. }) => assert_eq!(argument, "name"),
        other => panic!("expected InvalidArgument, got {other:?}"),
    }
    assert!(!suite::exists(&mut conn, "a{b").await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redisson_waiter_is_woken_when_lockwise_counts_the_latch_down() {
    let server = RedisServer::start();
    let c = client(&server, WATCHDOG).await;
    let peer = Arc::new(RedissonPeer::connect(server.url()).await);
    let latch = c.count_down_latch("gate");
    assert!(latch
        .try_set_count(2, Duration::from_secs(60))
        .await
        .unwrap());
    assert!(
        !peer.latch_try_set_count("gate", 5).await,
        "lockwise's latch exists"
    );
    assert_eq!(peer.latch_count("gate").await, 2);
    let waiter = {
        let peer = peer.clone();
        tokio::spawn(async move {
            let open = peer.latch_await("gate", Duration::from_secs(20)).await;
            (open, Instant::now())
        })
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(latch.count_down().await.unwrap(), 1);
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(!waiter.is_finished(), "one count-down left");
    let opened = Instant::now();
    assert_eq!(latch.count_down().await.unwrap(), 0);
    let (open, at) = within(25, waiter).await.unwrap();
    assert!(open, "the Java-side waiter saw the latch open");
    assert!(
        at - opened < WOKEN,
        "woken by `0`, not its wait: {:?}",
        at - opened
    );
    assert!(peer.wakeups(&redisson::latch_channel("gate")) >= 1);
    assert!(peer.bad_payloads().is_empty(), "{:?}", peer.bad_payloads());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lockwise_waiters_are_woken_when_redisson_counts_the_latch_down() {
    let server = RedisServer::start();
    let c = client(&server, WATCHDOG).await;
    let peer = RedissonPeer::connect(server.url()).await;
    // Java's latch has no TTL: only the message (or the watchdog bound) wakes the waiters.
    assert!(peer.latch_try_set_count("gate", 2).await);
    let latch = c.count_down_latch("gate");
    assert_eq!(latch.count().await.unwrap(), 2);
    assert!(!latch
        .try_set_count(9, Duration::from_secs(60))
        .await
        .unwrap());
    let waiters: Vec<_> = (0..2)
        .map(|_| {
            let latch = latch.clone();
            tokio::spawn(async move {
                let open = latch.wait_timeout(Duration::from_secs(20)).await.unwrap();
                (open, Instant::now())
            })
        })
        .collect();
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(peer.latch_count_down("gate").await, 1);
    assert_eq!(latch.count().await.unwrap(), 1);
    let opened = Instant::now();
    assert_eq!(peer.latch_count_down("gate").await, 0);
    for waiter in waiters {
        let (open, at) = within(25, waiter).await.unwrap();
        assert!(open);
        assert!(
            at - opened < WOKEN,
            "woken by `0`, not a bound: {:?}",
            at - opened
        );
    }
    // Java's delete opens the latch too.
    assert!(peer.latch_try_set_count("gate", 1).await);
    assert_eq!(latch.count().await.unwrap(), 1);
    assert!(peer.latch_delete("gate").await);
    assert!(latch.wait_timeout(Duration::ZERO).await.unwrap());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn latch_is_redissons_string_and_messages() {
    let server = RedisServer::start();
    let mut conn = server.conn().await;
    let c = client(&server, WATCHDOG).await;
    let seen = record(&server, "redisson_countdownlatch__channel__{gate}").await;
    let latch = c.count_down_latch("gate");
    assert_eq!(latch.key(), "gate");
    assert!(latch
        .try_set_count(2, Duration::from_secs(60))
        .await
        .unwrap());
    assert!(!latch
        .try_set_count(3, Duration::from_secs(60))
        .await
        .unwrap());
    assert_eq!(type_of(&mut conn, "gate").await, "string");
    assert_eq!(get(&mut conn, "gate").await.as_deref(), Some("2"));
    let ttl = pttl(&mut conn, "gate").await;
    assert!(ttl > 50_000 && ttl <= 60_000, "try_set_count's TTL: {ttl}");
    assert!(keys_without_ttl(&mut conn).await.is_empty());
    assert_eq!(latch.count_down().await.unwrap(), 1);
    assert_eq!(get(&mut conn, "gate").await.as_deref(), Some("1"));
    assert!(
        pttl(&mut conn, "gate").await > 50_000,
        "a count-down keeps the TTL"
    );
    assert_eq!(latch.count_down().await.unwrap(), 0);
    assert!(!suite::exists(&mut conn, "gate").await, "opened: deleted");
    assert_eq!(
        latch.count_down().await.unwrap(),
        0,
        "an open latch stays open"
    );
    let got = payloads(&seen, 2).await;
    assert_eq!(got, ["1", "0"], "set, then open");
    assert_decimal(&got);
    assert!(suite::keys_with_pttl(&mut conn).await.is_empty());
    // Braces in a latch's name are refused: its channel wraps the name in braces.
    match c.count_down_latch("{gate}").count_down().await {
        Err(Error::InvalidArgument { argument, .. }) => assert_eq!(argument, "name"),
        other => panic!("expected InvalidArgument, got {other:?}"),
    }
}

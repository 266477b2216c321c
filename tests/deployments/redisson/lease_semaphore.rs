//! `LeaseSemaphore` in Redisson's layout as `RPermitExpirableSemaphore`, against the
//! Redisson-protocol peer: Redisson's bytes (the name's decimal count, 16-byte ids scored by
//! client-clock expiry in `{name}:timeout`, decimal counts on `redisson_sc:{name}`), permits
//! taken on one side and released on the other, wakeups both ways by pub/sub, expired
//! permits reclaimed across sides, and never more permits in use than there are.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use lockwise::Error;
use suite::kit::within;
use suite::redisson::{self, RedissonPeer, PES_NEVER};
use suite::{Conn, RedisServer};

use super::{client, get, keys_without_ttl, pttl, record, type_of, Holders, WOKEN};

/// The clients' watchdog timeout, which also bounds a waiter's sleep when nothing expires:
/// a waiter woken only by that bound would wait about this long.
const WATCHDOG: Duration = Duration::from_secs(30);
const MINUTE: Duration = Duration::from_secs(60);

/// The 16 bytes a permit id's 32 hex digits spell.
fn bytes_of(id: &str) -> [u8; 16] {
    assert_eq!(id.len(), 32, "{id}");
    let mut out = [0u8; 16];
    for (i, byte) in out.iter_mut().enumerate() {
        *byte = u8::from_str_radix(&id[2 * i..2 * i + 2], 16).unwrap();
    }
    out
}

/// A Java permit id as Redisson's API shows it: 32 lower-case hex digits.
fn hex_of(id: &[u8; 16]) -> String {
    id.iter().map(|b| format!("{b:02x}")).collect()
}

/// The members (raw bytes) and scores of `{name}:timeout`, by score.
async fn leases(conn: &mut Conn, name: &str) -> Vec<(Vec<u8>, f64)> {
    redis::cmd("ZRANGE")
        .arg(redisson::expirable_timeouts(name))
        .arg(0)
        .arg(-1)
        .arg("WITHSCORES")
        .query_async(conn)
        .await
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lease_semaphore_is_redissons_string_and_timeout_set() {
    let server = RedisServer::start();
    let mut conn = server.conn().await;
    let c = client(&server, WATCHDOG).await;
    let peer = RedissonPeer::connect(server.url()).await;
    let seen = record(&server, "redisson_sc:{pool}").await;
    let sem = c.lease_semaphore("pool");
    assert_eq!(sem.key(), "pool");
    assert_eq!(sem.leases_key(), "{pool}:timeout");
    assert!(sem.try_set_permits(4).await.unwrap());
    assert!(
        !peer.sem_try_set_permits("pool", 9).await,
        "lockwise's exists"
    );
    assert_eq!(type_of(&mut conn, "pool").await, "string");
    assert_eq!(get(&mut conn, "pool").await.as_deref(), Some("4"));
    // Two lockwise permits: 16-byte members scored by the client's now + lease.
    let before = redisson::now_ms() as f64;
    let two = sem.acquire_many(2, MINUTE).await.unwrap();
    let after = redisson::now_ms() as f64;
    assert_eq!(type_of(&mut conn, "{pool}:timeout").await, "zset");
    assert_eq!(get(&mut conn, "pool").await.as_deref(), Some("2"));
    let zset = leases(&mut conn, "pool").await;
    assert_eq!(zset.len(), 2);
    for id in two.ids() {
        assert!(id.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')));
        let (_, score) = zset
            .iter()
            .find(|(m, _)| m.as_slice() == bytes_of(id))
            .expect("the id's 16 bytes are a member");
        assert!(*score >= before + 60_000.0 && *score <= after + 60_000.0);
    }
    // A Java permit without lease: the never score, counted as leased.
    let forever = peer.pes_try_acquire("pool", 1, None).await.unwrap();
    let zset = leases(&mut conn, "pool").await;
    assert_eq!(zset[2], (forever[0].to_vec(), PES_NEVER as f64));
    assert!(zset.iter().all(|(m, _)| m.len() == 16));
    assert_eq!(sem.available_permits().await.unwrap(), 1);
    assert_eq!(sem.leased_permits().await.unwrap(), 3);
    // Idle TTL on both keys; a longer lease raises both, never beyond it.
    let idle = 24 * 3600 * 1000;
    for key in ["pool", "{pool}:timeout"] {
        let ttl = pttl(&mut conn, key).await;
        assert!(ttl > idle - 60_000 && ttl <= idle, "{key}: {ttl}");
    }
    let long = sem.acquire(Duration::from_secs(48 * 3600)).await.unwrap();
    for key in ["pool", "{pool}:timeout"] {
        let ttl = pttl(&mut conn, key).await;
        assert!(ttl > 2 * idle - 60_000 && ttl <= 2 * idle, "{key}: {ttl}");
    }
    // Releases publish the new count; a string that is no permit id changes nothing.
    two.release().await.unwrap();
    long.release().await.unwrap();
    assert!(!sem.release("not-a-permit").await.unwrap());
    assert!(!sem.update_lease("0123", MINUTE).await.unwrap());
    assert!(sem.release(&hex_of(&forever[0])).await.unwrap());
    assert_eq!(sem.add_permits(-1).await.unwrap(), 3);
    assert!(
        suite::eventually(Duration::from_secs(5), || async {
            seen.lock().unwrap().len() >= 4
        })
        .await
    );
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(*seen.lock().unwrap(), ["4", "2", "3", "4"]);
    assert_eq!(sem.leased_permits().await.unwrap(), 0);
    assert!(keys_without_ttl(&mut conn).await.is_empty());
    let keys: Vec<String> = suite::keys_with_pttl(&mut conn)
        .await
        .into_iter()
        .map(|(k, _)| k)
        .collect();
    assert!(
        keys.iter().all(|k| k == "pool" || k == "{pool}:timeout"),
        "{keys:?}"
    );
    // A name Redisson would split across slots is refused, writing nothing.
    match c.lease_semaphore("a{b").try_set_permits(1).await {
        Err(Error::InvalidArgument { argument, .. }) => assert_eq!(argument, "name"),
        other => panic!("expected InvalidArgument, got {other:?}"),
    }
    assert!(!suite::exists(&mut conn, "a{b").await);
    assert!(peer.bad_payloads().is_empty(), "{:?}", peer.bad_payloads());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn permits_taken_on_one_side_are_seen_and_released_on_the_other() {
    let server = RedisServer::start();
    let mut conn = server.conn().await;
    let c = client(&server, WATCHDOG).await;
    let peer = RedissonPeer::connect(server.url()).await;
    assert!(peer.sem_try_set_permits("pool", 2).await);
    let sem = c.lease_semaphore("pool");
    assert!(!sem.try_set_permits(5).await.unwrap(), "Java's exists");
    // Java acquires; lockwise sees it, extends it and releases it by its hex id.
    let java = peer.pes_try_acquire("pool", 1, Some(60_000)).await.unwrap();
    assert_eq!(sem.available_permits().await.unwrap(), 1);
    assert_eq!(sem.leased_permits().await.unwrap(), 1);
    let id = hex_of(&java[0]);
    let now = redisson::now_ms() as f64;
    assert!(sem
        .update_lease(&id, Duration::from_secs(600))
        .await
        .unwrap());
    let score = leases(&mut conn, "pool").await[0].1;
    assert!(
        (score - (now + 600_000.0)).abs() < 5_000.0,
        "{score} vs {now}"
    );
    assert!(sem.release(&id).await.unwrap());
    assert!(!sem.release(&id).await.unwrap(), "released already");
    assert!(!peer.pes_release("pool", &java[0]).await);
    assert_eq!(peer.sem_available("pool").await, 2);
    // lockwise acquires; Java sees it and releases it; lockwise's guard then finds it gone.
    let permit = sem.acquire(MINUTE).await.unwrap();
    assert_eq!(peer.sem_available("pool").await, 1);
    assert!(peer.pes_release("pool", &bytes_of(permit.id())).await);
    match permit.release().await {
        Err(e) if e.is_not_held() => {}
        other => panic!("expected NotHeld, got {other:?}"),
    }
    // Both take the last permits: nobody gets a third.
    let mine = sem.acquire(MINUTE).await.unwrap();
    let theirs = peer.pes_try_acquire("pool", 1, Some(60_000)).await.unwrap();
    assert!(peer.pes_try_acquire("pool", 1, None).await.is_none());
    let e = sem
        .try_acquire(Duration::from_millis(200), MINUTE)
        .await
        .unwrap_err();
    assert!(e.is_timeout(), "{e}");
    mine.release().await.unwrap();
    assert!(peer.pes_release("pool", &theirs[0]).await);
    assert_eq!(sem.available_permits().await.unwrap(), 2);
    assert!(keys_without_ttl(&mut conn).await.is_empty());
    assert!(peer.bad_payloads().is_empty(), "{:?}", peer.bad_payloads());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lockwise_waiter_on_zero_permits_is_woken_by_a_redisson_release() {
    let server = RedisServer::start();
    let c = client(&server, WATCHDOG).await;
    let peer = RedissonPeer::connect(server.url()).await;
    // Java holds both permits without lease and its keys have no TTL: only the message
    // (or the watchdog bound) wakes the waiters.
    assert!(peer.sem_try_set_permits("pool", 2).await);
    let java = peer.pes_try_acquire("pool", 2, None).await.unwrap();
    let sem = c.lease_semaphore("pool");
    let waiters: Vec<_> = (0..2)
        .map(|_| {
            let sem = sem.clone();
            tokio::spawn(async move {
                let permit = sem.acquire(MINUTE).await.unwrap();
                (permit, Instant::now())
            })
        })
        .collect();
    tokio::time::sleep(Duration::from_millis(300)).await;
    let released = Instant::now();
    for id in &java {
        assert!(peer.pes_release("pool", id).await);
    }
    for waiter in waiters {
        let (permit, at) = within(25, waiter).await.unwrap();
        assert!(
            at - released < WOKEN,
            "woken by the count, not a bound: {:?}",
            at - released
        );
        permit.release().await.unwrap();
    }
    assert_eq!(peer.sem_available("pool").await, 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redisson_waiter_is_woken_by_a_lockwise_release() {
    let server = RedisServer::start();
    let c = client(&server, WATCHDOG).await;
    let peer = Arc::new(RedissonPeer::connect(server.url()).await);
    let sem = c.lease_semaphore("pool");
    assert!(sem.try_set_permits(1).await.unwrap());
    let permit = sem.acquire(MINUTE).await.unwrap();
    let waiter = {
        let peer = peer.clone();
        tokio::spawn(async move {
            let got = peer
                .pes_acquire("pool", 1, Some(60_000), Duration::from_secs(20))
                .await;
            (got, Instant::now())
        })
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    let released = Instant::now();
    permit.release().await.unwrap();
    let (got, at) = within(25, waiter).await.unwrap();
    let got = got.expect("the Java-side waiter got the permit");
    assert!(
        at - released < WOKEN,
        "woken by `1`, not its wait: {:?}",
        at - released
    );
    assert!(peer.wakeups(&redisson::semaphore_channel("pool")) >= 1);
    assert_eq!(sem.available_permits().await.unwrap(), 0);
    assert!(sem.release(&hex_of(&got[0])).await.unwrap());
    assert!(peer.bad_payloads().is_empty(), "{:?}", peer.bad_payloads());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn expired_permits_are_reclaimed_across_sides() {
    let server = RedisServer::start();
    let mut conn = server.conn().await;
    let c = client(&server, WATCHDOG).await;
    let peer = RedissonPeer::connect(server.url()).await;
    assert!(peer.sem_try_set_permits("pool", 1).await);
    let sem = c.lease_semaphore("pool");
    // A Java permit runs out: a lockwise waiter takes it at its expiry, without a message.
    let java = peer.pes_try_acquire("pool", 1, Some(400)).await.unwrap();
    let started = Instant::now();
    let permit = sem
        .try_acquire(Duration::from_secs(10), MINUTE)
        .await
        .unwrap();
    let waited = started.elapsed();
    assert!(
        waited >= Duration::from_millis(250) && waited < WOKEN,
        "at the expiry: {waited:?}"
    );
    assert!(!peer.pes_release("pool", &java[0]).await, "it had run out");
    assert_eq!(leases(&mut conn, "pool").await.len(), 1);
    permit.release().await.unwrap();
    // And the reverse: a lockwise permit runs out, a Java waiter takes it.
    let id = sem
        .acquire(Duration::from_millis(400))
        .await
        .unwrap()
        .into_id();
    let started = Instant::now();
    let theirs = peer
        .pes_acquire("pool", 1, Some(60_000), Duration::from_secs(10))
        .await
        .expect("reclaimed by Java's acquire");
    assert!(started.elapsed() < WOKEN, "{:?}", started.elapsed());
    assert!(!sem.release(&id).await.unwrap(), "it had run out");
    // An expired permit nobody reclaimed yet: released, it is counted back, and not held.
    assert!(peer.pes_release("pool", &theirs[0]).await);
    let short = sem.acquire(Duration::from_millis(50)).await.unwrap();
    tokio::time::sleep(Duration::from_millis(150)).await;
    assert!(short.release().await.unwrap_err().is_not_held());
    assert_eq!(peer.sem_available("pool").await, 1);
    assert!(keys_without_ttl(&mut conn).await.is_empty());
    assert!(peer.bad_payloads().is_empty(), "{:?}", peer.bad_payloads());
}

/// A waiter for more permits than are free must not sleep to its bound when a message is
/// lost (here: permits added without one): it looks again within the re-check.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_for_more_than_is_free_looks_again_without_a_message() {
    let server = RedisServer::start();
    let mut conn = server.conn().await;
    let c = client(&server, WATCHDOG).await;
    let sem = c.lease_semaphore("pool");
    assert!(sem.try_set_permits(1).await.unwrap());
    let waiter = {
        let sem = sem.clone();
        tokio::spawn(async move {
            let permits = sem.acquire_many(2, MINUTE).await.unwrap();
            (permits, Instant::now())
        })
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    let added = Instant::now();
    let _: i64 = redis::cmd("INCRBY")
        .arg("pool")
        .arg(1)
        .query_async(&mut conn)
        .await
        .unwrap();
    let (permits, at) = within(25, waiter).await.unwrap();
    assert!(at - added < WOKEN, "within the re-check: {:?}", at - added);
    permits.release().await.unwrap();
}

/// Two lockwise tasks (one of them taking two permits every other round) and two peer
/// "threads" take permits of one semaphore of `N`; the permits held at once are counted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn permits_in_use_never_exceed_the_count_under_mixed_contention() {
    const N: i64 = 2;
    const ROUNDS: usize = 20;
    let server = RedisServer::start();
    let mut conn = server.conn().await;
    let c = client(&server, WATCHDOG).await;
    let peers = [
        Arc::new(RedissonPeer::connect(server.url()).await),
        Arc::new(RedissonPeer::connect(server.url()).await),
    ];
    assert!(peers[0].sem_try_set_permits("pool", N).await);
    let holders = Arc::new(Holders::default());
    let mut tasks = Vec::new();
    for t in 0..2 {
        let (sem, holders) = (c.lease_semaphore("pool"), holders.clone());
        tasks.push(tokio::spawn(async move {
            for round in 0..ROUNDS {
                let k = if t == 0 && round % 2 == 1 { 2 } else { 1 };
                let permits = sem.acquire_many(k, MINUTE).await.unwrap();
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
                let ids = peer
                    .pes_acquire("pool", 1, Some(60_000), Duration::from_secs(20))
                    .await
                    .expect("a permit within 20 s");
                holders.take(1);
                tokio::time::sleep(Duration::from_millis(2)).await;
                holders.give(1);
                assert!(peer.pes_release("pool", &ids[0]).await);
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
    assert!(leases(&mut conn, "pool").await.is_empty());
    assert!(
        started.elapsed() < Duration::from_secs(30),
        "{:?}",
        started.elapsed()
    );
    for peer in &peers {
        assert!(peer.bad_payloads().is_empty(), "{:?}", peer.bad_payloads());
    }
    // lockwise wrote last: its TTLs are on whatever keys are left.
    assert!(keys_without_ttl(&mut conn).await.is_empty());
}

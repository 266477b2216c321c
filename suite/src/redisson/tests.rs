//! Peer-vs-peer checks of the Redisson peer on a throwaway server, and the name helpers
//! against the contract's examples.

use std::sync::Arc;
use std::time::{Duration, Instant};

use lockwise_testkit::topology::RedisCluster;
use lockwise_testkit::{eventually, numsub_until, Conn, RedisServer};
use redis::AsyncCommands;

use super::*;

const LONG: Duration = Duration::from_secs(10);

async fn setup() -> (RedisServer, Conn, Arc<RedissonPeer>, Arc<RedissonPeer>) {
    let server = RedisServer::start();
    let conn = server.conn().await;
    let a = Arc::new(RedissonPeer::connect(server.url()).await);
    let b = Arc::new(RedissonPeer::connect(server.url()).await);
    (server, conn, a, b)
}

async fn subscribed(conn: &Conn, channel: &str, n: u64) {
    assert!(
        numsub_until(conn, channel, LONG, |k| k >= n).await,
        "nobody subscribed to {channel}"
    );
}

async fn pttl(conn: &mut Conn, key: &str) -> i64 {
    conn.pttl(key).await.unwrap()
}

async fn hget_i64(conn: &mut Conn, key: &str, field: &str) -> Option<i64> {
    conn.hget(key, field).await.unwrap()
}

fn assert_clean(peers: &[&RedissonPeer]) {
    for p in peers {
        assert!(p.bad_payloads().is_empty(), "{:?}", p.bad_payloads());
    }
}

#[test]
fn names_follow_the_contract() {
    assert_eq!(
        prefix_name("redisson_lock__channel", "a{b"),
        "redisson_lock__channel:a{b"
    );
    assert_eq!(
        prefix_name("redisson_lock__channel", "ab"),
        "redisson_lock__channel:{ab}"
    );
    assert_eq!(suffix_name("ab", "timeout"), "{ab}:timeout");
    assert_eq!(suffix_name("a{b", "timeout"), "a{b:timeout");
    assert_eq!(lock_channel("L"), "redisson_lock__channel:{L}");
    assert_eq!(unlock_latch("L", "ff00"), "redisson_unlock_latch:{L}:ff00");
    assert_eq!(unlock_latch("a{b}", "ff"), "redisson_unlock_latch:a{b}:ff");
    assert_eq!(token_key("L"), "redisson_lock_token:{L}");
    assert_eq!(fair_queue("F"), "redisson_lock_queue:{F}");
    assert_eq!(fair_timeouts("F"), "redisson_lock_timeout:{F}");
    assert_eq!(fair_channel("F", "u:7"), "redisson_lock__channel:{F}:u:7");
    assert_eq!(rwlock_channel("R"), "redisson_rwlock:{R}");
    assert_eq!(rw_timeout_prefix("R", "u:7"), "{R}:u:7:rwlock_timeout");
    assert_eq!(rw_timeout_prefix("x{R}", "u:7"), "x{R}:u:7:rwlock_timeout");
    assert_eq!(rw_key_prefix("R"), "{R}");
    assert_eq!(rw_key_prefix("x{R}"), "x{R}");
    assert_eq!(semaphore_channel("S"), "redisson_sc:{S}");
    assert_eq!(expirable_timeouts("P"), "{P}:timeout");
    assert_eq!(latch_channel("x"), "redisson_countdownlatch__channel__{x}");
    assert_eq!(
        latch_channel("a{b"),
        "redisson_countdownlatch__channel__{a{b}"
    );
    // The `contains("{")` quirk: `a{b` has no hash tag, so its satellites leave its slot.
    assert_ne!(key_slot(b"a{b"), key_slot(lock_channel("a{b").as_bytes()));
    assert_eq!(key_slot(b"123456789"), 0x31C3);
    assert_eq!(key_slot(b"foo"), 12182);
    assert_eq!(key_slot(b"{user1000}.following"), key_slot(b"user1000"));
    assert_ne!(key_slot(b"foo{}{bar}"), key_slot(b"bar"));
    assert_eq!(key_slot(lock_channel("L").as_bytes()), key_slot(b"L"));
    assert_eq!(key_slot(latch_channel("L").as_bytes()), key_slot(b"L"));
}

#[test]
fn ids_and_payload_decoding() {
    let id = uuid_v4();
    assert_eq!(id.len(), 36);
    assert_eq!(id.as_bytes()[14], b'4');
    assert!(matches!(id.as_bytes()[19], b'8' | b'9' | b'a' | b'b'));
    assert!(id
        .chars()
        .all(|c| c == '-' || c.is_ascii_digit() || c.is_ascii_lowercase()));
    let r = request_id();
    assert_eq!(r.len(), 32);
    assert!(r
        .chars()
        .all(|c| c.is_ascii_hexdigit() && !c.is_ascii_uppercase()));
    assert!((16_000..=20_000).contains(&latch_ttl_ms()));
    assert_eq!(java_long(b"0"), Some(0));
    assert_eq!(java_long(b"-12"), Some(-12));
    assert_eq!(java_long(b"+3"), Some(3));
    for bad in [&b""[..], b" 1", b"1.0", b"x", b"99999999999999999999", b"-"] {
        assert_eq!(java_long(bad), None, "{bad:?}");
    }
}

#[tokio::test]
async fn rlock_waiter_is_woken_by_unlock_and_reentry_counts() {
    let (_server, mut conn, a, b) = setup().await;
    assert_eq!(a.try_lock("L", 1, 30_000).await, None);
    assert_eq!(a.try_lock("L", 1, 30_000).await, None);
    assert_eq!(hget_i64(&mut conn, "L", &a.owner(1)).await, Some(2));
    assert!(b.try_lock("L", 1, 30_000).await.unwrap() > 25_000);

    let waiter = {
        let b = b.clone();
        tokio::spawn(async move {
            let t = Instant::now();
            (
                b.lock("L", 1, 30_000, Duration::from_secs(20)).await,
                t.elapsed(),
            )
        })
    };
    subscribed(&conn, &lock_channel("L"), 1).await;
    assert_eq!(a.unlock("L", 1, 30_000).await, Some(0));
    assert_eq!(hget_i64(&mut conn, "L", &a.owner(1)).await, Some(1));
    assert_eq!(a.unlock("L", 1, 30_000).await, Some(1));
    let (got, took) = waiter.await.unwrap();
    assert!(got);
    assert!(took < Duration::from_secs(5), "woken only after {took:?}");
    assert_eq!(hget_i64(&mut conn, "L", &b.owner(1)).await, Some(1));
    assert!(b.wakeups(&lock_channel("L")) >= 1);
    assert_eq!(a.unlock("L", 1, 30_000).await, None);
    assert_eq!(b.unlock("L", 1, 30_000).await, Some(1));
    let keys: Vec<String> = conn.keys("*").await.unwrap();
    assert!(keys.is_empty(), "left behind: {keys:?}");
    assert!(lockwise_testkit::no_channels_within(&conn, LONG).await);
    assert_clean(&[&a, &b]);
}

#[tokio::test]
async fn unlock_latch_replays_a_lost_reply() {
    let (_server, mut conn, a, _b) = setup().await;
    a.try_lock("L", 1, 30_000).await;
    a.try_lock("L", 1, 30_000).await;
    let id = request_id();
    assert_eq!(a.unlock_with_request("L", 1, 30_000, &id).await, Some(0));
    assert_eq!(a.unlock_with_request("L", 1, 30_000, &id).await, Some(0));
    assert_eq!(hget_i64(&mut conn, "L", &a.owner(1)).await, Some(1));
    let latch = unlock_latch("L", &id);
    let v: String = conn.get(&latch).await.unwrap();
    assert_eq!(v, "0");
    assert!((15_000..=20_000).contains(&pttl(&mut conn, &latch).await));
    let id2 = request_id();
    assert_eq!(a.unlock_with_request("L", 1, 30_000, &id2).await, Some(1));
    assert!(!lockwise_testkit::exists(&mut conn, "L").await);
    assert_eq!(a.unlock_with_request("L", 1, 30_000, &id2).await, Some(1));
    let v: String = conn.get(unlock_latch("L", &id2)).await.unwrap();
    assert_eq!(v, "1");
    // A fresh request on the free lock: not held.
    assert_eq!(a.unlock("L", 1, 30_000).await, None);
    assert!(!a.force_unlock("none").await);
}

#[tokio::test]
async fn fenced_tokens_rise_on_every_acquire() {
    let (_server, mut conn, a, b) = setup().await;
    assert_eq!(a.try_lock_fenced("F", 1, 30_000).await, Ok(1));
    assert_eq!(a.try_lock_fenced("F", 1, 30_000).await, Ok(2));
    assert!(b.try_lock_fenced("F", 1, 30_000).await.unwrap_err() > 25_000);
    assert_eq!(pttl(&mut conn, &token_key("F")).await, -1);
    let waiter = {
        let b = b.clone();
        tokio::spawn(async move { b.lock_fenced("F", 1, 30_000, LONG).await })
    };
    subscribed(&conn, &lock_channel("F"), 1).await;
    a.unlock("F", 1, 30_000).await;
    assert_eq!(a.unlock("F", 1, 30_000).await, Some(1));
    assert_eq!(waiter.await.unwrap(), Some(3));
    assert!(b.force_unlock("F").await);
    assert_eq!(a.try_lock_fenced("F", 1, 30_000).await, Ok(4));
    // Non-reentrant: a second acquire by the owner is an error reply.
    assert_eq!(a.try_lock_non_reentrant("N", 1, 30_000).await, Ok(None));
    assert_eq!(
        a.try_lock_non_reentrant("N", 1, 30_000).await,
        Err(NonReentrantReacquire)
    );
    assert!(
        b.try_lock_non_reentrant("N", 1, 30_000)
            .await
            .unwrap()
            .unwrap()
            > 0
    );
    assert_clean(&[&a, &b]);
}

#[tokio::test]
async fn fair_lock_serves_three_waiters_in_order() {
    let (_server, mut conn, a, b) = setup().await;
    assert_eq!(a.fair_try_lock_no_wait("Q", 9, 30_000).await, None);
    assert_eq!(b.fair_try_lock_no_wait("Q", 9, 30_000).await, Some(1));
    let order = Arc::new(std::sync::Mutex::new(Vec::new()));
    let mut tasks = Vec::new();
    for thread in 1..=3u64 {
        let (peer, order) = (b.clone(), order.clone());
        tasks.push(tokio::spawn(async move {
            assert!(
                peer.fair_lock("Q", thread, 30_000, Duration::from_secs(20), 60_000)
                    .await
            );
            order.lock().unwrap().push(thread);
            tokio::time::sleep(Duration::from_millis(50)).await;
            assert_eq!(peer.fair_unlock("Q", thread, 30_000).await, Some(1));
        }));
        let mut c = conn.clone();
        let n = thread as usize;
        assert!(
            eventually(LONG, || {
                let mut c = c.clone();
                async move { c.llen::<_, usize>(fair_queue("Q")).await.unwrap() == n }
            })
            .await
        );
        subscribed(&conn, &fair_channel("Q", &b.owner(thread)), 1).await;
        let deadline: Option<f64> = c.zscore(fair_timeouts("Q"), b.owner(thread)).await.unwrap();
        assert!(deadline.unwrap() > now_ms() as f64 + 60_000.0);
    }
    assert_eq!(a.fair_unlock("Q", 9, 30_000).await, Some(1));
    for t in tasks {
        t.await.unwrap();
    }
    assert_eq!(*order.lock().unwrap(), vec![1, 2, 3]);
    for thread in 1..=3 {
        assert!(b.wakeups(&fair_channel("Q", &b.owner(thread))) >= 1);
    }
    // A waiter that times out leaves the queue (acquireFailed).
    assert_eq!(a.fair_try_lock_no_wait("Q", 9, 30_000).await, None);
    assert!(
        !b.fair_lock("Q", 1, 30_000, Duration::from_millis(300), 60_000)
            .await
    );
    assert_eq!(conn.llen::<_, usize>(fair_queue("Q")).await.unwrap(), 0);
    assert!(a.fair_force_unlock("Q").await);
    // The quirk: unlocking a free fair lock answers 1.
    assert_eq!(a.fair_unlock("Q", 9, 30_000).await, Some(1));
    assert_clean(&[&a, &b]);
}

#[tokio::test]
async fn rwlock_readers_share_and_writers_exclude() {
    let (_server, mut conn, a, b) = setup().await;
    assert_eq!(a.try_read_lock("R", 1, 30_000).await, None);
    assert_eq!(a.try_read_lock("R", 1, 30_000).await, None);
    assert_eq!(b.try_read_lock("R", 1, 30_000).await, None);
    let mode: String = conn.hget("R", "mode").await.unwrap();
    assert_eq!(mode, "read");
    assert_eq!(hget_i64(&mut conn, "R", &a.owner(1)).await, Some(2));
    let a_prefix = rw_timeout_prefix("R", &a.owner(1));
    for n in 1..=2 {
        assert!(pttl(&mut conn, &format!("{a_prefix}:{n}")).await > 25_000);
    }
    assert!(
        pttl(
            &mut conn,
            &format!("{}:1", rw_timeout_prefix("R", &b.owner(1)))
        )
        .await
            > 0
    );
    assert!(b.try_write_lock("R", 2, 30_000).await.unwrap() > 0);

    let writer = {
        let b = b.clone();
        tokio::spawn(async move { b.write_lock("R", 2, 30_000, Duration::from_secs(20)).await })
    };
    subscribed(&conn, &rwlock_channel("R"), 1).await;
    assert_eq!(a.read_unlock("R", 1).await, Some(0));
    assert!(!lockwise_testkit::exists(&mut conn, &format!("{a_prefix}:2")).await);
    assert_eq!(a.read_unlock("R", 1).await, Some(0));
    assert_eq!(hget_i64(&mut conn, "R", &a.owner(1)).await, None);
    assert_eq!(b.read_unlock("R", 1).await, Some(1));
    assert!(writer.await.unwrap());
    let mode: String = conn.hget("R", "mode").await.unwrap();
    assert_eq!(mode, "write");
    assert!(a.try_read_lock("R", 1, 30_000).await.unwrap() > 0);
    // Downgrade: the writer reads, then its write unlock leaves mode=read.
    assert_eq!(b.try_write_lock("R", 2, 30_000).await, None);
    assert_eq!(b.write_unlock("R", 2, 30_000).await, Some(0));
    assert_eq!(b.try_read_lock("R", 2, 30_000).await, None);
    assert_eq!(b.write_unlock("R", 2, 30_000).await, Some(1));
    let mode: String = conn.hget("R", "mode").await.unwrap();
    assert_eq!(mode, "read");
    assert_eq!(a.try_read_lock("R", 1, 1_000).await, None);
    assert_eq!(
        b.renew_read(
            &[("R", vec![b.owner(2)]), ("nothing", vec![b.owner(2)])],
            60_000
        )
        .await,
        vec![1, 0]
    );
    assert!(pttl(&mut conn, "R").await > 55_000);
    assert!(
        pttl(
            &mut conn,
            &format!("{}:1", rw_timeout_prefix("R", &b.owner(2)))
        )
        .await
            > 55_000
    );
    assert!(pttl(&mut conn, &format!("{a_prefix}:1")).await <= 1_000);
    assert!(!b.write_force_unlock("R").await);
    assert!(a.read_force_unlock("R").await);
    assert_eq!(a.read_unlock("R", 1).await, None);
    assert_clean(&[&a, &b]);
}

#[tokio::test]
async fn renew_extends_only_own_holds() {
    let (_server, mut conn, a, b) = setup().await;
    a.try_lock("x", 1, 1_000).await;
    b.try_lock("y", 1, 1_000).await;
    let got = a
        .renew(&[("x", &a.owner(1)), ("y", &a.owner(1))], 30_000)
        .await;
    assert_eq!(got, vec![1, 0]);
    assert!(pttl(&mut conn, "x").await > 25_000);
    assert!(pttl(&mut conn, "y").await <= 1_000);
    let many: Vec<String> = (0..150).map(|i| format!("k{i}")).collect();
    for k in &many {
        a.try_lock(k, 1, 1_000).await;
    }
    let owner = a.owner(1);
    let pairs: Vec<(&str, &str)> = many.iter().map(|k| (k.as_str(), owner.as_str())).collect();
    assert_eq!(a.renew(&pairs, 30_000).await, vec![1; 150]);
}

#[tokio::test]
async fn semaphore_release_wakes_a_waiter() {
    let (_server, conn, a, b) = setup().await;
    assert!(a.sem_try_set_permits("S", 1).await);
    assert!(!a.sem_try_set_permits("S", 5).await);
    assert!(a.sem_try_acquire("S", 1).await);
    assert!(!b.sem_try_acquire("S", 1).await);
    let waiter = {
        let b = b.clone();
        tokio::spawn(async move {
            let t = Instant::now();
            (
                b.sem_acquire("S", 1, Duration::from_secs(20)).await,
                t.elapsed(),
            )
        })
    };
    subscribed(&conn, &semaphore_channel("S"), 1).await;
    assert_eq!(a.sem_release("S", 1).await, 1);
    let (got, took) = waiter.await.unwrap();
    assert!(got && took < Duration::from_secs(5), "{got} after {took:?}");
    assert_eq!(a.sem_available("S").await, 0);
    assert_eq!(a.sem_add_permits("S", 3).await, 3);
    assert_eq!(a.sem_drain("S").await, 3);
    assert_eq!(a.sem_available("S").await, 0);
    assert!(!a.sem_acquire("S", 1, Duration::from_millis(200)).await);
    assert!(b
        .messages()
        .contains(&(semaphore_channel("S"), b"1".to_vec())));
    assert_clean(&[&a, &b]);
}

#[tokio::test]
async fn latch_open_wakes_awaiters() {
    let (_server, mut conn, a, b) = setup().await;
    assert!(a.latch_try_set_count("C", 2).await);
    assert!(!a.latch_try_set_count("C", 3).await);
    let mut waiters = Vec::new();
    for p in [a.clone(), b.clone()] {
        waiters.push(tokio::spawn(async move {
            p.latch_await("C", Duration::from_secs(20)).await
        }));
    }
    subscribed(&conn, &latch_channel("C"), 2).await;
    assert_eq!(a.latch_count_down("C").await, 1);
    assert_eq!(a.latch_count("C").await, 1);
    assert_eq!(a.latch_count_down("C").await, 0);
    for w in waiters {
        assert!(w.await.unwrap());
    }
    assert!(!lockwise_testkit::exists(&mut conn, "C").await);
    assert!(b.messages().contains(&(latch_channel("C"), b"0".to_vec())));
    assert!(a.latch_try_set_count("C", 1).await);
    assert!(!b.latch_await("C", Duration::from_millis(200)).await);
    assert!(a.latch_delete("C").await);
    assert_clean(&[&a, &b]);
}

#[tokio::test]
async fn expirable_permits_are_raw_ids_in_the_timeout_zset() {
    let (_server, mut conn, a, b) = setup().await;
    assert!(a.sem_try_set_permits("P", 2).await);
    let forever = a.pes_try_acquire("P", 1, None).await.unwrap();
    let short = b.pes_try_acquire("P", 1, Some(1_000)).await.unwrap();
    assert_eq!((forever.len(), short.len()), (1, 1));
    let zset: Vec<(Vec<u8>, f64)> = conn
        .zrange_withscores(expirable_timeouts("P"), 0, -1)
        .await
        .unwrap();
    assert_eq!(zset.len(), 2);
    assert!(zset.iter().all(|(m, _)| m.len() == 16));
    assert_eq!(zset[0].0, short[0].to_vec());
    assert_eq!(zset[1], (forever[0].to_vec(), PES_NEVER as f64));
    assert_eq!(a.pes_try_acquire("P", 1, None).await, None);
    // The short permit expires; the waiting acquire reclaims it.
    let t = Instant::now();
    let got = a.pes_acquire("P", 1, Some(10_000), LONG).await.unwrap();
    assert!(t.elapsed() < Duration::from_secs(5));
    assert!(!b.pes_release("P", &short[0]).await);
    assert!(a.pes_release("P", &forever[0]).await);
    assert!(!a.pes_release("P", &forever[0]).await);
    assert!(a.pes_release("P", &got[0]).await);
    assert_eq!(a.sem_available("P").await, 2);
    assert_clean(&[&a, &b]);
}

#[tokio::test]
async fn sharded_mode_uses_spublish_and_bad_payloads_are_recorded() {
    let server = RedisServer::start();
    let mut conn = server.conn().await;
    let url = server.url().to_string();
    let route = move |_: &str| url.clone();
    let a = Arc::new(RedissonPeer::connect_sharded(route.clone()));
    let b = Arc::new(RedissonPeer::connect_sharded(route));
    let classic = RedissonPeer::connect(server.url()).await;
    assert_eq!(a.publish_command(), "spublish");
    assert_eq!(a.try_lock("L", 1, 30_000).await, None);
    let waiter = {
        let b = b.clone();
        tokio::spawn(async move { b.lock("L", 1, 30_000, Duration::from_secs(20)).await })
    };
    let channel = lock_channel("L");
    assert!(
        eventually(LONG, || {
            let mut c = conn.clone();
            let ch = channel.clone();
            async move {
                let v: Vec<(String, u64)> = redis::cmd("PUBSUB")
                    .arg("SHARDNUMSUB")
                    .arg(&ch)
                    .query_async(&mut c)
                    .await
                    .unwrap();
                v.first().is_some_and(|(_, n)| *n == 1)
            }
        })
        .await
    );
    // A classic waiter would never see the SPUBLISH: prove the channel kinds are separate.
    assert!(
        !classic
            .lock("L", 2, 30_000, Duration::from_millis(100))
            .await
    );
    let _: i64 = conn.spublish(&channel, "not-a-number").await.unwrap();
    assert_eq!(a.unlock("L", 1, 30_000).await, Some(1));
    assert!(waiter.await.unwrap());
    assert_eq!(
        b.bad_payloads(),
        vec![(channel.clone(), b"not-a-number".to_vec())]
    );
    assert_eq!(b.wakeups(&channel), 2);
    assert!(classic.messages().is_empty());
}

mod cluster;

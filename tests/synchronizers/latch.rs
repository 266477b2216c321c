//! `CountDownLatch` against real redis-servers: counting, every waiter in several clients
//! woken by one broadcast when the count reaches zero (well before the latch's TTL, so by
//! pub/sub), timeouts and cancelled waits leaving nothing subscribed, a killed subscription
//! connection and SCRIPT FLUSH while waiting, and bad input.

use std::time::{Duration, Instant};

use lockwise::{Client, Error};
use suite::{Conn, RedisServer};

/// The latches' TTL in these tests: a waiter woken well before it was woken by pub/sub.
const TTL: Duration = Duration::from_secs(60);

async fn clients(server: &RedisServer, test: &str, n: usize) -> Vec<Client> {
    let ns = suite::unique_ns(test);
    let mut out = Vec::new();
    for _ in 0..n {
        out.push(suite::client(server, &ns, Duration::from_secs(5)).await);
    }
    out
}

async fn assert_nothing_left(conn: &mut Conn, ns: &str) {
    let keys: Vec<String> = redis::cmd("KEYS")
        .arg(format!("{ns}:*"))
        .query_async(conn)
        .await
        .unwrap();
    let keys: Vec<String> = keys
        .into_iter()
        .filter(|k| !suite::is_presence(k))
        .collect();
    assert!(keys.is_empty(), "keys left: {keys:?}");
    assert!(
        suite::no_channels_within(conn, Duration::from_secs(2)).await,
        "channels left subscribed"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn counts_down_to_open_and_sets_only_when_open() {
    let server = RedisServer::start();
    let c = &clients(&server, "latch-basics", 1).await[0];
    let mut conn = server.conn().await;
    let latch = c.count_down_latch("job");
    assert_eq!(latch.count().await.unwrap(), 0, "an unset latch is open");
    assert!(latch.wait_timeout(Duration::ZERO).await.unwrap());
    assert!(latch.try_set_count(3, TTL).await.unwrap());
    assert!(
        !latch.try_set_count(7, TTL).await.unwrap(),
        "a closed latch keeps its count"
    );
    assert_eq!(latch.count().await.unwrap(), 3);
    let pttl: i64 = redis::cmd("PTTL")
        .arg(latch.key())
        .query_async(&mut conn)
        .await
        .unwrap();
    assert!(pttl > 0 && pttl <= TTL.as_millis() as i64, "pttl {pttl}");
    assert!(!latch.wait_timeout(Duration::from_millis(50)).await.unwrap());
    assert_eq!(latch.count_down().await.unwrap(), 2);
    assert_eq!(latch.count_down().await.unwrap(), 1);
    assert_eq!(latch.count_down().await.unwrap(), 0);
    assert!(
        !suite::exists(&mut conn, latch.key()).await,
        "open: key deleted"
    );
    assert_eq!(
        latch.count_down().await.unwrap(),
        0,
        "an open latch stays open"
    );
    latch.wait().await.unwrap();
    // It can be closed again once open.
    assert!(latch.try_set_count(1, TTL).await.unwrap());
    assert_eq!(latch.count_down().await.unwrap(), 0);
    assert_nothing_left(&mut conn, c.namespace()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_waiter_in_every_client_is_woken_when_the_count_reaches_zero() {
    let server = RedisServer::start();
    let cs = clients(&server, "latch-many", 3).await;
    let mut conn = server.conn().await;
    let name = "start";
    assert!(cs[0]
        .count_down_latch(name)
        .try_set_count(5, TTL)
        .await
        .unwrap());
    let mut waiters = Vec::new();
    for i in 0..60 {
        let latch = cs[i % 3].count_down_latch(name);
        waiters.push(tokio::spawn(async move {
            latch.wait().await.unwrap();
            Instant::now()
        }));
    }
    // Every waiter is subscribed (one subscription per client).
    assert!(
        suite::numsub_until(
            &conn,
            &format!("{}:latchchannel:{{{name}}}", cs[0].namespace()),
            Duration::from_secs(5),
            |n| n == 3
        )
        .await,
        "each client subscribed once"
    );
    for (i, c) in cs.iter().cycle().take(4).enumerate() {
        assert_eq!(
            c.count_down_latch(name).count_down().await.unwrap(),
            4 - i as u64
        );
    }
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(
        waiters.iter().all(|w| !w.is_finished()),
        "nobody passes a closed latch"
    );
    let opened = Instant::now();
    assert_eq!(cs[1].count_down_latch(name).count_down().await.unwrap(), 0);
    for w in waiters {
        let woke = w.await.unwrap();
        let after = woke.saturating_duration_since(opened);
        assert!(
            after < Duration::from_secs(2),
            "woken {after:?} after opening"
        );
    }
    assert_nothing_left(&mut conn, cs[0].namespace()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn timed_out_and_cancelled_waits_leave_nothing_subscribed() {
    let server = RedisServer::start();
    let c = &clients(&server, "latch-cancel", 1).await[0];
    let mut conn = server.conn().await;
    let latch = c.count_down_latch("x");
    assert!(latch.try_set_count(1, TTL).await.unwrap());
    let started = Instant::now();
    assert!(!latch
        .wait_timeout(Duration::from_millis(300))
        .await
        .unwrap());
    assert!(started.elapsed() >= Duration::from_millis(300));
    // Cancelled while subscribed.
    let waiting = tokio::spawn({
        let latch = latch.clone();
        async move { latch.wait().await }
    });
    tokio::time::sleep(Duration::from_millis(200)).await;
    waiting.abort();
    let _ = waiting.await;
    assert!(
        suite::no_channels_within(&conn, Duration::from_secs(2)).await,
        "a cancelled wait unsubscribes"
    );
    assert_eq!(latch.count().await.unwrap(), 1, "waiting changes nothing");
    latch.count_down().await.unwrap();
    assert_nothing_left(&mut conn, c.namespace()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiters_survive_a_killed_subscription_and_script_flush() {
    let server = RedisServer::start();
    let cs = clients(&server, "latch-faults", 2).await;
    let mut conn = server.conn().await;
    let name = "faults";
    assert!(cs[0]
        .count_down_latch(name)
        .try_set_count(2, TTL)
        .await
        .unwrap());
    let mut waiters = Vec::new();
    for i in 0..20 {
        let latch = cs[i % 2].count_down_latch(name);
        waiters.push(tokio::spawn(async move { latch.wait().await }));
    }
    let channel = format!("{}:latchchannel:{{{name}}}", cs[0].namespace());
    assert!(suite::numsub_until(&conn, &channel, Duration::from_secs(5), |n| n == 2).await);
    let _: () = redis::cmd("SCRIPT")
        .arg("FLUSH")
        .query_async(&mut conn)
        .await
        .unwrap();
    let _: i64 = suite::kill_pubsub(&mut conn).await;
    assert_eq!(cs[1].count_down_latch(name).count_down().await.unwrap(), 1);
    // Resubscribed after the kill, then opened.
    assert!(suite::numsub_until(&conn, &channel, Duration::from_secs(5), |n| n == 2).await);
    let opened = Instant::now();
    assert_eq!(cs[0].count_down_latch(name).count_down().await.unwrap(), 0);
    for w in waiters {
        tokio::time::timeout(Duration::from_secs(5), w)
            .await
            .expect("woken well before the latch's TTL")
            .unwrap()
            .unwrap();
    }
    assert!(opened.elapsed() < Duration::from_secs(5));
    assert_nothing_left(&mut conn, cs[0].namespace()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_input_is_a_typed_error_and_changes_nothing() {
    let server = RedisServer::start();
    let c = &clients(&server, "latch-bad", 1).await[0];
    let mut conn = server.conn().await;
    let latch = c.count_down_latch("bad");
    for (count, ttl) in [
        (0, TTL),
        ((1u64 << 53) + 1, TTL),
        (1, Duration::ZERO),
        (1, Duration::from_millis((1 << 53) + 1)),
    ] {
        let err = latch.try_set_count(count, ttl).await.expect_err("rejected");
        assert!(
            matches!(err, Error::InvalidArgument { .. }),
            "{count} {ttl:?}: {err:?}"
        );
    }
    assert!(!suite::exists(&mut conn, latch.key()).await);
    let unnamed = c.count_down_latch("");
    assert!(matches!(
        unnamed.count_down().await,
        Err(Error::InvalidArgument {
            argument: "name",
            ..
        })
    ));
    assert!(unnamed.wait_timeout(Duration::ZERO).await.is_err());
    // The largest count is accepted.
    assert!(latch.try_set_count(1 << 53, TTL).await.unwrap());
    assert_eq!(latch.count().await.unwrap(), 1 << 53);
    let _: i64 = redis::cmd("DEL")
        .arg(latch.key())
        .query_async(&mut conn)
        .await
        .unwrap();
    // Another type at the key: a Redis error, and the key is left as it was.
    let _: i64 = redis::cmd("HSET")
        .arg(latch.key())
        .arg("f")
        .arg("v")
        .query_async(&mut conn)
        .await
        .unwrap();
    assert!(matches!(latch.count_down().await, Err(Error::Redis(_))));
    assert!(matches!(latch.count().await, Err(Error::Redis(_))));
    assert!(
        !latch.try_set_count(1, TTL).await.unwrap(),
        "exists: not set"
    );
    let kind: String = redis::cmd("TYPE")
        .arg(latch.key())
        .query_async(&mut conn)
        .await
        .unwrap();
    assert_eq!(kind, "hash", "left as it was");
}

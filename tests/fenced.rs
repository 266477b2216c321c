//! `FencedLock` and `FencedValue` against a real redis-server: tokens grow with every new
//! owner (under contention, and across a restart that wipes the counter), re-entry keeps
//! the token, stale writes are rejected with a typed error, and only the fence counter is
//! left without a TTL.

mod support;

use support::in_task;

use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use relock::{Client, Error};
use support::{Interval, RedisServer};

const WATCHDOG: Duration = Duration::from_secs(2);

async fn within<F: Future>(secs: u64, fut: F) -> F::Output {
    tokio::time::timeout(Duration::from_secs(secs), fut)
        .await
        .expect("did not finish in time")
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

/// The server clock in microseconds since the epoch (what a fresh counter starts from).
async fn server_micros(conn: &mut redis::aio::MultiplexedConnection) -> u64 {
    let (s, us): (u64, u64) = redis::cmd("TIME").query_async(conn).await.unwrap();
    s * 1_000_000 + us
}

/// 2 Clients x 8 tasks x 5 acquisitions of one fenced lock: sorted by start time, the
/// critical sections never overlap and their tokens strictly increase.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tokens_strictly_increase_in_acquisition_order_under_contention() {
    let server = RedisServer::start();
    let ns = support::unique_ns("fenced-contention");
    let clients = [client(&server, &ns).await, client(&server, &ns).await];
    let records: Arc<Mutex<Vec<(Interval, u64)>>> = Arc::default();
    let started = Instant::now();
    let mut tasks = Vec::new();
    for (c, client) in clients.iter().enumerate() {
        for t in 0..8 {
            let lock = client.fenced_lock("contended");
            let records = records.clone();
            tasks.push(tokio::spawn(async move {
                for i in 0..5 {
                    let guard = if (t + i) % 2 == 0 {
                        lock.lock().await.expect("lock")
                    } else {
                        lock.lock_with_lease(Duration::from_secs(10))
                            .await
                            .expect("lock_with_lease")
                    };
                    let start = Instant::now();
                    let token = guard.token();
                    tokio::time::sleep(Duration::from_millis(1)).await;
                    let end = Instant::now();
                    guard.unlock().await.expect("unlock");
                    let who = c * 8 + t;
                    records
                        .lock()
                        .unwrap()
                        .push((Interval { start, end, who }, token));
                }
            }));
        }
    }
    within(20, async {
        for t in tasks {
            t.await.unwrap();
        }
    })
    .await;
    let mut records = records.lock().unwrap().clone();
    assert_eq!(records.len(), 80);
    records.sort_by_key(|(i, _)| i.start);
    for w in records.windows(2) {
        assert!(
            w[0].1 < w[1].1,
            "tokens not increasing in acquisition order: {:?} then {:?}",
            w[0],
            w[1]
        );
    }
    let mut intervals: Vec<Interval> = records.iter().map(|(i, _)| *i).collect();
    support::assert_no_overlap(&mut intervals);
    println!(
        "80 fenced acquisitions by 16 tasks in {:?}; tokens {}..={}",
        started.elapsed(),
        records[0].1,
        records[79].1
    );
}

/// A restart without persistence wipes the counter; the next tokens are still larger than
/// every token issued before (the counter restarts from the server clock).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tokens_after_a_restart_without_persistence_are_larger() {
    let mut server = RedisServer::start();
    let ns = support::unique_ns("fenced-restart");
    let c = client(&server, &ns).await;
    let lock = c.fenced_lock("restarted");
    let mut conn = server.conn().await;
    let before_clock = server_micros(&mut conn).await;
    let mut before = Vec::new();
    for _ in 0..20 {
        let g = lock.lock().await.expect("lock");
        before.push(g.token());
        g.unlock().await.expect("unlock");
    }
    assert!(before.windows(2).all(|w| w[0] < w[1]), "{before:?}");
    assert!(
        before[0] > before_clock,
        "a fresh counter starts from the server clock: {} <= {before_clock}",
        before[0]
    );
    let highest_before = *before.last().unwrap();

    tokio::task::block_in_place(|| server.restart());
    let mut conn = server.conn().await;
    let fence_exists: bool = redis::cmd("EXISTS")
        .arg(lock.fence_key())
        .query_async(&mut conn)
        .await
        .unwrap();
    assert!(!fence_exists, "the restart must have wiped the counter");

    // The client reconnects in the background: tolerate transient errors meanwhile.
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut after = Vec::new();
    while after.len() < 5 {
        match lock.try_lock(Duration::from_secs(1), None).await {
            Ok(Some(g)) => {
                after.push(g.token());
                g.unlock().await.expect("unlock");
            }
            Ok(None) => panic!("nobody holds the lock after the restart"),
            Err(e) if e.is_retryable() && Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            Err(e) => panic!("lock after restart: {e:?}"),
        }
    }
    assert!(
        after[0] > highest_before,
        "token after restart {} <= {highest_before} before",
        after[0]
    );
    assert!(after.windows(2).all(|w| w[0] < w[1]), "{after:?}");
    println!(
        "before restart: {}..={highest_before}; after: {}..={}",
        before[0],
        after[0],
        after.last().unwrap()
    );
}

/// Kleppmann's scenario in a test: holder 1 overruns its lease, holder 2 takes the lock and
/// writes; holder 1's late write is a typed StaleToken error and leaves the value unchanged.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stale_write_is_rejected_and_leaves_the_value_unchanged() {
    let server = RedisServer::start();
    let ns = support::unique_ns("fenced-stale");
    let (c1, c2) = (client(&server, &ns).await, client(&server, &ns).await);
    let value = c1.fenced_value(format!("{ns}:resource"));
    let g1 = c1
        .fenced_lock("file")
        .lock_with_lease(Duration::from_millis(200))
        .await
        .expect("lock 1");
    let t1 = g1.token();
    value
        .write(t1, "from 1 (early)")
        .await
        .expect("first write");
    value
        .write(t1, "from 1 (again)")
        .await
        .expect("equal token");
    tokio::time::sleep(Duration::from_millis(400)).await; // "GC pause" past the lease

    let g2 = within(5, c2.fenced_lock("file").lock())
        .await
        .expect("lock 2");
    let t2 = g2.token();
    assert!(t2 > t1, "{t2} <= {t1}");
    value.write(t2, "from 2").await.expect("write 2");

    let err = value.write(t1, "from 1 (late)").await.unwrap_err();
    match err {
        Error::StaleToken { presented, highest } => {
            assert_eq!((presented, highest), (t1, t2));
        }
        other => panic!("expected StaleToken, got {other:?}"),
    }
    assert!(err_is_stale(&value, t1).await);
    assert_eq!(
        value.read::<String>().await.unwrap().as_deref(),
        Some("from 2")
    );
    assert_eq!(value.highest_token().await.unwrap(), Some(t2));
    // The late holder also learns it lost the lock when it unlocks.
    assert!(g1.unlock().await.unwrap_err().is_not_held());
    g2.unlock().await.unwrap();

    // Bad tokens are refused before anything is sent.
    assert!(matches!(
        value.write(0, "x").await,
        Err(Error::InvalidArgument { .. })
    ));
    assert!(matches!(
        value.write(1 << 53, "x").await,
        Err(Error::InvalidArgument { .. })
    ));
    assert!(matches!(
        c1.fenced_value("").read::<String>().await,
        Err(Error::InvalidArgument { .. })
    ));
}

async fn err_is_stale(value: &relock::FencedValue, token: u64) -> bool {
    let e = value.write(token, "x").await.unwrap_err();
    e.is_stale_token() && !e.is_retryable() && e.to_string().contains("stale fencing token")
}

/// Re-entry by the holder returns the same token and raises the hold count; the next owner
/// (even the same task, after the last release) gets a larger one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reentry_keeps_the_token() {
    let server = RedisServer::start();
    let c = client(&server, &support::unique_ns("fenced-reentry")).await;
    in_task(async move {
        let lock = c.fenced_lock("reentrant");
        let outer = lock.lock().await.expect("outer");
        let inner = lock
            .try_lock(Duration::ZERO, Some(Duration::from_secs(5)))
            .await
            .expect("inner")
            .expect("re-entry never waits");
        assert_eq!(inner.token(), outer.token());
        assert_eq!(lock.hold_count().await.unwrap(), 2);
        // Another task of the same client is another owner: it must wait.
        let other = lock.clone();
        let waited = tokio::spawn(async move {
            other
                .try_lock(Duration::from_millis(100), None)
                .await
                .unwrap()
                .is_none()
        });
        assert!(waited.await.unwrap(), "another task re-entered");
        // An RLock of the same name is the same lock.
        let plain = c.lock("reentrant");
        let t = tokio::spawn(async move {
            plain
                .try_lock(Duration::ZERO, None)
                .await
                .unwrap()
                .is_none()
        });
        assert!(t.await.unwrap(), "the RLock of the same name was free");
        let token = outer.token();
        inner.unlock().await.unwrap();
        assert!(lock.is_locked().await.unwrap());
        outer.unlock().await.unwrap();
        assert!(!lock.is_locked().await.unwrap());
        let next = lock.lock().await.unwrap();
        assert!(next.token() > token);
        assert!(lock.force_unlock().await.unwrap());
        let after_force = lock.lock().await.unwrap();
        assert!(after_force.token() > next.token());
        assert!(next.unlock().await.unwrap_err().is_not_held());
        after_force.unlock().await.unwrap();
    })
    .await;
}

/// While held (watchdog and lease) every key has a TTL except the counter; after the
/// release only the counter is left.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_the_fence_counter_has_no_ttl() {
    let server = RedisServer::start();
    let c = client(&server, &support::unique_ns("fenced-ttl")).await;
    let mut conn = server.conn().await;
    in_task(async move {
        let (a, b) = (c.fenced_lock("a"), c.fenced_lock("b"));
        let ga = a.lock().await.unwrap();
        let gb = b.lock_with_lease(Duration::from_secs(5)).await.unwrap();
        let fences = [a.fence_key().to_string(), b.fence_key().to_string()];
        let keys = support::keys_with_pttl(&mut conn).await;
        assert_eq!(keys.len(), 4, "{keys:?}");
        for (key, pttl) in &keys {
            if fences.contains(key) {
                assert_eq!(*pttl, -1, "{key}");
            } else {
                assert!(*pttl > 0, "{key} has no TTL");
            }
        }
        let ttl = a.remaining_ttl().await.unwrap().unwrap();
        assert!(ttl <= WATCHDOG, "{ttl:?}");
        ga.unlock().await.unwrap();
        gb.unlock().await.unwrap();
        let mut left: Vec<String> = support::keys_with_pttl(&mut conn)
            .await
            .into_iter()
            .map(|(k, _)| k)
            .collect();
        left.sort();
        assert_eq!(left, fences.to_vec());
    })
    .await;
}

/// A watchdog holder keeps its token while the watchdog renews the hash (with the extra
/// token field) past several TTLs; invalid names are typed errors.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watchdog_renews_a_fenced_hold_and_bad_names_are_rejected() {
    let server = RedisServer::start();
    let c = client(&server, &support::unique_ns("fenced-watchdog")).await;
    in_task(async move {
        let lock = c.fenced_lock("long");
        let g = lock.lock().await.unwrap();
        tokio::time::sleep(WATCHDOG * 2).await;
        assert!(!g.is_lost());
        let again = lock.lock().await.unwrap();
        assert_eq!(again.token(), g.token());
        again.unlock().await.unwrap();
        g.unlock().await.unwrap();
        assert!(matches!(
            c.fenced_lock("").lock().await,
            Err(Error::InvalidArgument { .. })
        ));
        assert!(matches!(
            lock.try_lock(Duration::ZERO, Some(Duration::ZERO)).await,
            Err(Error::InvalidArgument { .. })
        ));
    })
    .await;
}

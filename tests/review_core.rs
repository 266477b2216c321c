//! Review of the core (raw wait loop, guarded calls, holds, watchdog registry, listener):
//! scenarios at the edges of the invariants, each against a real redis-server.
mod support;

use std::future::Future;
use std::time::{Duration, Instant};

use relock::Client;
use support::RedisServer;

/// Run the test body in a spawned task (so it has a tokio task id, like real callers)
/// and re-raise its panic with the original message.
async fn in_task<F>(body: F)
where
    F: Future<Output = ()> + Send + 'static,
{
    if let Err(e) = tokio::spawn(body).await {
        if e.is_panic() {
            std::panic::resume_unwind(e.into_panic());
        }
        panic!("test task failed: {e}");
    }
}

async fn client(server: &RedisServer, ns: &str, watchdog: Duration) -> Client {
    Client::builder(server.url())
        .namespace(ns)
        .watchdog_timeout(watchdog)
        .build()
        .await
        .expect("build client")
}

/// Guards and the client dropped after their runtime shut down (e.g. stored in a static,
/// or a runtime built per request): no panic, and the watchdog lock expires by its TTL.
#[test]
fn guard_dropped_after_runtime_shutdown_does_not_panic() {
    let server = RedisServer::start();
    let ns = support::unique_ns("rc-rtdown");
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let (c, lock, guard, lease_guard) = rt.block_on(async {
        let c = client(&server, &ns, Duration::from_millis(600)).await;
        let lock = c.lock("rtdown");
        let (guard, lease_guard) = tokio::spawn({
            let lock = lock.clone();
            let lease = c.lock("rtdown-lease");
            async move {
                let g = lock.lock().await.unwrap();
                let l = lease.lock_with_lease(Duration::from_secs(1)).await.unwrap();
                (g, l)
            }
        })
        .await
        .unwrap();
        (c, lock, guard, lease_guard)
    });
    let key = lock.key().to_string();
    drop(rt);
    drop(guard);
    drop(lease_guard);
    drop(lock);
    drop(c);
    let mut sync = server.sync_conn();
    let deadline = Instant::now() + Duration::from_secs(3);
    loop {
        let n: i64 = redis::cmd("EXISTS").arg(&key).query(&mut sync).unwrap();
        if n == 0 {
            break;
        }
        assert!(Instant::now() < deadline, "the lock never expired");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// A long waiter shares its channel with short-lived waiters that come and go (each last
/// one out spawns an UNSUBSCRIBE racing the next SUBSCRIBE). The long waiter's channel must
/// stay subscribed: the unlock wakes it promptly (the holder's TTL is 30 s), and at the end
/// no subscription is left.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiter_survives_subscription_churn_on_its_channel() {
    let server = RedisServer::start();
    let ns = support::unique_ns("rc-churn");
    let holder = client(&server, &ns, Duration::from_secs(30)).await;
    let c = client(&server, &ns, Duration::from_secs(30)).await;
    let mut conn = server.conn().await;
    let channel = holder.lock("churn").channel().to_string();
    let hl = holder.lock("churn");
    in_task(async move {
        for round in 0..5 {
            let g = hl.lock().await.unwrap();
            let lock = c.lock("churn");
            let long = tokio::spawn(async move {
                let g = lock.lock().await.unwrap();
                let at = Instant::now();
                g.unlock().await.unwrap();
                at
            });
            // Short waiters, one after another and a few at once, on the same channel.
            for i in 0..40 {
                let lock = c.lock("churn");
                let n = 1 + i % 3;
                let mut short = Vec::new();
                for _ in 0..n {
                    let lock = lock.clone();
                    short.push(tokio::spawn(async move {
                        lock.try_lock(Duration::from_millis(3), None).await.unwrap()
                    }));
                }
                for s in short {
                    assert!(s.await.unwrap().is_none());
                }
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
            let t0 = Instant::now();
            g.unlock().await.unwrap();
            let at = tokio::time::timeout(Duration::from_secs(3), long)
                .await
                .unwrap_or_else(|_| panic!("round {round}: the long waiter was not woken"))
                .unwrap();
            assert!(
                at.duration_since(t0) < Duration::from_secs(1),
                "round {round}: woken after {:?}",
                at.duration_since(t0)
            );
        }
        let gone = support::eventually(Duration::from_secs(2), || {
            let mut c = conn.clone();
            let ch = channel.clone();
            async move { support::numsub(&mut c, &ch).await == 0 }
        })
        .await;
        assert!(gone, "a subscription was left behind");
        assert!(support::keys_with_pttl(&mut conn).await.is_empty());
    })
    .await;
}

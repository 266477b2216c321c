//! Dropping the last `Client` while lock handles live: every kind's acquire methods fail with
//! `Error::ClientClosed` instead of handing out a guard that is already lost, a call waiting
//! at that moment returns it too, and nothing is left locked.

use std::time::Duration;
use suite::OrNone;

use lockwise::Error;
use suite::{in_task, RedisServer};

fn assert_closed<T: std::fmt::Debug>(r: lockwise::Result<T>, what: &str) {
    match r {
        Err(Error::ClientClosed) => {}
        other => panic!("{what}: expected ClientClosed, got {other:?}"),
    }
}

const LEASE: Duration = Duration::from_secs(5);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_kind_refuses_to_lock_once_the_client_is_dropped() {
    let server = RedisServer::start();
    let ns = suite::unique_ns("closed");
    let client = suite::client(&server, &ns, Duration::from_secs(5)).await;
    let (rlock, fair, fenced) = (
        client.lock("r"),
        client.fair_lock("f"),
        client.fenced_lock("x"),
    );
    let multi = client.multi_lock(["m1", "m2"]);
    let spin = client.spin_lock("s");
    let rw = client.rw_lock("rw");
    let named = client.lock("n").with_owner("job");
    let per_hold = client.lock("p").non_reentrant();
    drop(client);
    in_task(async move {
        assert_closed(rlock.lock().await, "rlock lock");
        assert_closed(rlock.lock_with_lease(LEASE).await, "rlock lease");
        assert_closed(
            rlock.try_lock(Duration::ZERO, None).await.or_none(),
            "rlock try",
        );
        assert_closed(named.lock().await, "named owner lock");
        assert_closed(per_hold.lock().await, "per-hold lock");
        assert_closed(fair.lock().await, "fair lock");
        assert_closed(fair.lock_with_lease(LEASE).await, "fair lease");
        assert_closed(fair.try_lock(LEASE, None).await.or_none(), "fair try");
        assert_closed(fenced.lock().await, "fenced lock");
        assert_closed(fenced.lock_with_lease(LEASE).await, "fenced lease");
        assert_closed(
            fenced.try_lock(Duration::ZERO, None).await.or_none(),
            "fenced try",
        );
        assert_closed(multi.lock().await, "multi lock");
        assert_closed(multi.lock_with_lease(LEASE).await, "multi lease");
        assert_closed(multi.try_lock(LEASE, None).await.or_none(), "multi try");
        assert_closed(spin.lock().await, "spin lock");
        assert_closed(spin.lock_with_lease(LEASE).await, "spin lease");
        assert_closed(
            spin.try_lock(Duration::ZERO, None).await.or_none(),
            "spin try",
        );
        assert_closed(rw.read().lock().await, "rw read lock");
        assert_closed(rw.write().lock_with_lease(LEASE).await, "rw write lease");
        assert_closed(
            rw.write().try_lock(Duration::ZERO, None).await.or_none(),
            "rw write try",
        );
    })
    .await;
    let mut conn = server.conn().await;
    let keys: Vec<String> = redis::cmd("KEYS")
        .arg(format!("{ns}:*"))
        .query_async(&mut conn)
        .await
        .unwrap();
    let keys: Vec<String> = keys
        .into_iter()
        .filter(|k| !suite::is_presence(k))
        .collect();
    assert!(keys.is_empty(), "nothing taken: {keys:?}");
}

/// Waiters of each kind are waiting on a lock held by another client when their own client
/// is dropped: they return `ClientClosed` at once, not after the holder's lease.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiting_calls_return_client_closed_when_the_client_is_dropped() {
    let server = RedisServer::start();
    let ns = suite::unique_ns("closed-wait");
    let holder = suite::client(&server, &ns, Duration::from_secs(5)).await;
    let client = suite::client(&server, &ns, Duration::from_secs(5)).await;
    in_task(async move {
        let hold = Duration::from_secs(20);
        let _a = holder.lock("a").lock_with_lease(hold).await.unwrap();
        let _b = holder.fair_lock("b").lock_with_lease(hold).await.unwrap();
        let _c = holder.lock("c").lock_with_lease(hold).await.unwrap();
        let waiters = vec![
            {
                let l = client.lock("a");
                tokio::spawn(async move { l.lock().await.map(drop) })
            },
            {
                let l = client.fair_lock("b");
                tokio::spawn(async move { l.try_lock(hold, None).await.or_none().map(drop) })
            },
            {
                let l = client.fenced_lock("a");
                tokio::spawn(async move { l.lock().await.map(drop) })
            },
            {
                let l = client.multi_lock(["c", "z"]);
                tokio::spawn(async move { l.lock().await.map(drop) })
            },
            {
                // Polls with backoff, never subscribes: the close still ends its wait.
                let l = client.spin_lock("c");
                tokio::spawn(async move { l.lock().await.map(drop) })
            },
        ];
        tokio::time::sleep(Duration::from_millis(300)).await;
        drop(client);
        for (i, w) in waiters.into_iter().enumerate() {
            let r = tokio::time::timeout(Duration::from_secs(3), w)
                .await
                .unwrap_or_else(|_| panic!("waiter {i} still waiting"))
                .unwrap();
            assert_closed(r, &format!("waiter {i}"));
        }
    })
    .await;
}

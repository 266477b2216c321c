//! `Client::shutdown`: a closed client leaves nothing on the server (holds of every kind,
//! re-entries, permits, fair-queue entries, presence keys), wakes its waiters with
//! `ClientClosed`, refuses new acquires, and its guards report lost and send nothing.

use std::time::Duration;

use lockwise::{Client, Error, RedLockSet};
use redis::AsyncCommands;
use suite::kit::{in_task, within};
use suite::{Conn, RedisServer};

async fn client(server: &RedisServer, ns: &str) -> Client {
    Client::builder(server.url())
        .namespace(ns)
        .watchdog_timeout(Duration::from_secs(5))
        .build()
        .await
        .expect("client")
}

/// Keys under `ns` (presence keys included), sorted.
async fn keys(conn: &mut Conn, ns: &str) -> Vec<String> {
    let mut keys: Vec<String> = conn.keys(format!("{ns}:*")).await.unwrap();
    keys.sort();
    keys
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_releases_every_kind_and_closes_the_client() {
    let server = RedisServer::start();
    let ns = suite::unique_ns("shutdown");
    let a = client(&server, &ns).await;
    let b = client(&server, &ns).await;
    let mut conn = server.conn().await;
    let sem = b.semaphore("pool");
    assert!(sem.try_set_permits(5).await.unwrap());
    let lsem = b.lease_semaphore("leases");
    assert!(lsem.try_set_permits(4).await.unwrap());
    let held_by_b = b.fair_lock("queue").lock().await.unwrap();

    let (a2, lost_tokens, guards_report) = in_task({
        let a = a.clone();
        async move {
            let set = RedLockSet::new(std::slice::from_ref(&a));
            let r1 = a.lock("plain").lock().await.unwrap();
            let r2 = a.lock("plain").lock().await.unwrap(); // re-entered: count 2
            let leased = a
                .lock("leased")
                .lock_with_lease(Duration::from_secs(60))
                .await
                .unwrap();
            let fair = a.fair_lock("fair").lock().await.unwrap();
            let fenced = a.fenced_lock("fenced").lock().await.unwrap();
            let read = a.rw_lock("rw-r").read().lock().await.unwrap();
            let write = a.rw_lock("rw-w").write().lock().await.unwrap();
            let multi = a.multi_lock(["m1", "m2"]).lock().await.unwrap();
            let red = set.lock("red").lock().await.unwrap();
            let spin = a.spin_lock("spin").lock().await.unwrap();
            let permits = a.semaphore("pool").acquire_many(3).await.unwrap();
            let leases = a
                .lease_semaphore("leases")
                .acquire_many(2, Duration::from_secs(60))
                .await
                .unwrap();
            let lost = vec![
                r1.lost(),
                leased.lost(),
                fair.lost(),
                fenced.lost(),
                read.lost(),
                write.lost(),
                multi.lost(),
                red.lost(),
                spin.lost(),
            ];
            // A waiter in the fair queue behind B, and one on a plain lock B... A holds.
            let waiter = tokio::spawn({
                let a = a.clone();
                async move { a.fair_lock("queue").lock().await.map(|_| ()) }
            });
            tokio::time::sleep(Duration::from_millis(200)).await;
            let report = a.shutdown(Duration::from_secs(5)).await;
            let waited = within(5, waiter).await.unwrap();
            assert!(
                matches!(waited, Err(Error::ClientClosed)),
                "the waiter is woken with ClientClosed: {waited:?}"
            );
            // Guards alive afterwards: lost, and their release sends nothing.
            assert!(r2.is_lost() && leased.is_lost() && red.is_lost());
            let mut results = Vec::new();
            results.push(r2.unlock().await);
            results.push(r1.unlock().await);
            results.push(leased.unlock().await);
            results.push(fair.unlock().await);
            results.push(fenced.unlock().await);
            results.push(read.unlock().await);
            results.push(write.unlock().await);
            results.push(multi.unlock().await);
            results.push(red.unlock().await);
            results.push(spin.unlock().await);
            results.push(permits.release().await.map(|_| ()));
            results.push(leases.release().await);
            (a, lost, (report, results))
        }
    })
    .await;
    let (report, results) = guards_report;
    eprintln!("{report:?}");
    assert!(report.closed_now && report.is_complete(), "{report:?}");
    // plain x2, leased, fair, fenced, read, write, two members, the redlock's node hold,
    // the spin lock.
    assert_eq!(report.holds_released, 11, "{report:?}");
    assert_eq!(report.permits_returned, 5, "{report:?}");
    // What a service logs or serves on its way out (feature `serde`).
    #[cfg(feature = "serde")]
    assert_eq!(
        serde_json::to_value(&report).unwrap(),
        serde_json::json!({
            "closed_now": true, "holds_released": 11, "permits_returned": 5, "failed": []
        })
    );
    for r in &results {
        assert!(matches!(r, Err(Error::ClientClosed)), "{results:?}");
    }
    assert!(lost_tokens.iter().all(|t| t.is_cancelled()), "lost() fired");

    // What the server holds: B's fair lock and the semaphores' own keys, all permits back,
    // the fencing counter (no owner), nothing of A (no presence key either).
    assert_eq!(sem.available_permits().await.unwrap(), 5);
    assert_eq!(lsem.available_permits().await.unwrap(), 4);
    assert_eq!(b.fair_lock("queue").queue_len().await.unwrap(), 0);
    let left = keys(&mut conn, &ns).await;
    let id = a2.id().to_string();
    let of_a: Vec<&String> = left.iter().filter(|k| k.contains(&id)).collect();
    assert!(of_a.is_empty(), "keys of the closed client: {of_a:?}");
    for k in &left {
        let mine = [
            "plain", "leased", ":fair}", "{rw-", "{m1}", "{m2}", "{red}", "{spin}",
        ];
        assert!(
            !mine.iter().any(|m| k.contains(m)) || k.contains(":fence:"),
            "left behind: {k} (all: {left:?})"
        );
    }
    // Closed: idempotent, and nothing new is taken.
    let again = a2.shutdown(Duration::from_secs(1)).await;
    assert!(!again.closed_now && again.holds_released == 0);
    assert!(a2.is_closed());
    let refused = a2.lock("plain").try_lock(Duration::ZERO, None).await;
    assert!(matches!(refused, Err(Error::ClientClosed)), "{refused:?}");
    let refused = a2.semaphore("pool").try_acquire(Duration::ZERO).await;
    assert!(matches!(refused, Err(Error::ClientClosed)), "{refused:?}");
    held_by_b.unlock().await.unwrap();
}

/// A client announces itself before `build` returns: its presence key exists at once, so
/// another process's `Admin::leaks` never calls its first holds leaks (several clients,
/// each checked the moment it is built); a shutdown deletes the key.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn presence_key_is_written_before_build_returns() {
    let server = RedisServer::start();
    let ns = suite::unique_ns("presence");
    let mut conn = server.conn().await;
    let observer = client(&server, &ns).await;
    for _ in 0..8 {
        let c = client(&server, &ns).await;
        let key = format!("{ns}:client:{{{}}}", c.id());
        let exists: bool = conn.exists(&key).await.unwrap();
        assert!(exists, "{key} missing right after build");
        let ttl: i64 = conn.pttl(&key).await.unwrap();
        assert!(ttl > 0 && ttl <= 5_000, "TTL {ttl}");
        let guard = c.lock("first").lock().await.unwrap();
        let report = observer.admin().leaks().await.unwrap();
        assert!(report.leaks.is_empty(), "{:?}", report.leaks);
        guard.unlock().await.unwrap();
        c.shutdown(Duration::from_secs(5)).await;
        let exists: bool = conn.exists(&key).await.unwrap();
        assert!(!exists, "{key} left after shutdown");
    }
}

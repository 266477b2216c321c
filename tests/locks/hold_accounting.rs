//! Hold accounting: the server's hold count of an owner always comes back to the number of
//! guards that owner has, whatever happened to the calls in between.
//!
//! | scenario | fault | what must hold |
//! |---|---|---|
//! | unlock on a killed connection | `CLIENT KILL TYPE normal` before the unlock | the hold is settled: no phantom that the same task re-enters; the key is gone after the last unlock |
//! | unlock on a killed connection, task keeps locking | same, then lock/unlock in a loop | another client gets the lock (no starvation) |
//! | server count above the guards | an extra hold appears on the server | a re-entry does not adopt it; the count is trimmed |
//! | `join!` of two `lock()`s in one task | none (reply order) | both guards hold; neither is lost; both unlock `Ok`; the key is gone |
//! | guard found forgotten on re-entry | `force_unlock` between two holds | the old guard is lost, its unlock sends nothing that touches the new hold |
//! | unlock reply lost to a server stall | `DEBUG SLEEP` past the response timeout | settled; no key left; the next lock is a fresh hold |
//! | re-entry timed out, then re-entry again | `DEBUG SLEEP` past the response timeout of a re-entry | the re-entry rides through; the late hold is undone before it is tried again; after the last unlock the lock is free |

use std::time::Duration;
use suite::OrNone;

use lockwise::{Client, Error};
use suite::{exists, hget, in_task, Conn, RedisServer};

const WATCHDOG: Duration = Duration::from_secs(30);

async fn kill_normal(conn: &mut Conn) -> i64 {
    redis::cmd("CLIENT")
        .arg("KILL")
        .arg("TYPE")
        .arg("normal")
        .query_async(conn)
        .await
        .unwrap()
}

/// Every key under the namespace has a TTL.
async fn all_keys_have_ttl(conn: &mut Conn) {
    for (key, pttl) in suite::keys_with_pttl(conn).await {
        assert!(pttl > 0, "{key} has pttl {pttl}");
    }
}

async fn setup(name: &str) -> (RedisServer, Client, Conn) {
    let server = RedisServer::start();
    let ns = suite::unique_ns(name);
    let client = suite::client(&server, &ns, WATCHDOG).await;
    let conn = server.conn().await;
    (server, client, conn)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unlock_on_killed_connection_leaves_no_phantom_hold() {
    let (_server, client, conn) = setup("phantom-unlock").await;
    let lock = client.lock("job");
    let key = lock.key().to_string();
    in_task(async move {
        let mut admin = conn.clone();
        // Whether the unlock meets the dead connection or a fresh one depends on timing:
        // repeat so the dead-connection case surely happens.
        let mut broken = 0;
        for i in 0..100 {
            if broken == 5 {
                break;
            }
            let g1 = lock.lock().await.unwrap();
            let owner = g1.owner().to_string();
            // The command connection dies before the unlock is sent: its outcome is unknown
            // to the client (broken pipe), though the server never ran it.
            assert!(kill_normal(&mut admin).await >= 1);
            let first = g1.unlock().await;
            broken += usize::from(first.is_err());
            // The same task takes the lock again: it must not re-enter a forgotten hold.
            let g2 = lock.lock().await.unwrap();
            let count: Option<u32> = hget(&mut admin, &key, &owner).await;
            assert_eq!(
                count,
                Some(1),
                "round {i}: re-entered a phantom hold (first unlock: {first:?})"
            );
            g2.unlock().await.unwrap();
            assert!(
                !exists(&mut admin, &key).await,
                "round {i}: the key outlived the last unlock"
            );
        }
        println!("{broken} unlocks met the dead connection");
        assert!(broken > 0, "the fault never hit an unlock");
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unlock_on_killed_connection_does_not_starve_other_clients() {
    let server = RedisServer::start();
    let ns = suite::unique_ns("phantom-starve");
    let a = suite::client(&server, &ns, WATCHDOG).await;
    let mut admin = server.conn().await;
    let a_lock = a.lock("job");
    let stop = tokio_util::sync::CancellationToken::new();
    let (killed_tx, killed_rx) = tokio::sync::oneshot::channel();
    let busy = {
        let stop = stop.clone();
        let mut admin = admin.clone();
        tokio::spawn(async move {
            let mut killed_tx = Some(killed_tx);
            while !stop.is_cancelled() {
                let Ok(g) = a_lock.lock().await else {
                    continue;
                };
                tokio::time::sleep(Duration::from_millis(2)).await;
                if let Some(tx) = killed_tx.take() {
                    // Only A's connections exist yet: its unlock meets a dead connection.
                    kill_normal(&mut admin).await;
                    let _ = g.unlock().await;
                    let _ = tx.send(());
                } else {
                    let _ = g.unlock().await;
                }
                // Leave room for another client between two holds.
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        })
    };
    killed_rx.await.unwrap();
    let b = suite::client(&server, &ns, WATCHDOG).await;
    // With a phantom hold, A's task keeps the key alive forever; B would wait for it.
    let got = b
        .lock("job")
        .try_lock(Duration::from_secs(5), None)
        .await
        .or_none()
        .unwrap();
    stop.cancel();
    assert!(got.is_some(), "B never got the lock while A kept locking");
    got.unwrap().unlock().await.unwrap();
    busy.await.unwrap();
    all_keys_have_ttl(&mut admin).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn server_count_above_guards_is_trimmed_not_adopted() {
    let (_server, client, conn) = setup("trim").await;
    let lock = client.lock("job");
    let key = lock.key().to_string();
    in_task(async move {
        let mut admin = conn.clone();
        let g1 = lock.lock().await.unwrap();
        let owner = g1.owner().to_string();
        // A hold nobody owns appears under this owner (as a lost unlock reply would leave).
        let _: i64 = redis::cmd("HINCRBY")
            .arg(&key)
            .arg(&owner)
            .arg(1)
            .query_async(&mut admin)
            .await
            .unwrap();
        let g2 = lock.lock().await.unwrap();
        // The reply said 3 while the owner knows 2 guards: trimmed to 2 right after (the
        // next call of this owner waits for that).
        let trimmed = suite::eventually(Duration::from_secs(1), || {
            let lock = lock.clone();
            async move { lock.hold_count().await.unwrap() == 2 }
        })
        .await;
        assert!(trimmed, "count {}", lock.hold_count().await.unwrap());
        assert!(!g1.is_lost() && !g2.is_lost());
        g2.unlock().await.unwrap();
        g1.unlock().await.unwrap();
        assert!(
            !exists(&mut admin, &key).await,
            "the extra hold was adopted"
        );
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn joined_lock_futures_in_one_task_both_hold() {
    let (_server, client, conn) = setup("join").await;
    let lock = client.lock("job");
    let key = lock.key().to_string();
    in_task(async move {
        let mut admin = conn.clone();
        for i in 0..200 {
            let (a, b) = tokio::join!(lock.lock(), lock.lock());
            let (a, b) = (a.unwrap(), b.unwrap());
            assert!(
                !a.is_lost() && !b.is_lost(),
                "iteration {i}: a guard is lost"
            );
            assert_eq!(lock.hold_count().await.unwrap(), 2, "iteration {i}");
            // Unlock in either order.
            if i % 2 == 0 {
                a.unlock().await.unwrap();
                b.unlock().await.unwrap();
            } else {
                b.unlock().await.unwrap();
                a.unlock().await.unwrap();
            }
            assert!(!exists(&mut admin, &key).await, "iteration {i}: key left");
        }
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forgotten_hold_found_on_reentry_is_lost_and_never_releases_the_new_one() {
    let (_server, client, conn) = setup("forgotten").await;
    let lock = client.lock("job");
    let key = lock.key().to_string();
    in_task(async move {
        let mut admin = conn.clone();
        let old = lock.lock().await.unwrap();
        assert!(lock.force_unlock().await.unwrap());
        // The server forgot the old hold: this is a new run, not a re-entry.
        let new = lock.lock().await.unwrap();
        assert!(old.is_lost(), "the old guard was not told");
        assert!(!new.is_lost());
        assert!(matches!(old.unlock().await, Err(Error::NotHeld { .. })));
        assert_eq!(
            lock.hold_count().await.unwrap(),
            1,
            "old unlock took the new hold"
        );
        new.unlock().await.unwrap();
        assert!(!exists(&mut admin, &key).await);
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unlock_reply_lost_to_server_stall_is_settled() {
    let server = RedisServer::start();
    let ns = suite::unique_ns("stall-unlock");
    let client = Client::builder(server.url())
        .namespace(&ns)
        .watchdog_timeout(WATCHDOG)
        .response_timeout(Duration::from_millis(200))
        .build()
        .await
        .unwrap();
    let lock = client.lock("job");
    let key = lock.key().to_string();
    let mut admin = server.conn().await;
    let sleeper = server.conn().await;
    in_task(async move {
        let g = lock.lock().await.unwrap();
        let owner = g.owner().to_string();
        let stall = tokio::spawn(async move {
            let mut c = sleeper;
            let _: () = redis::cmd("DEBUG")
                .arg("SLEEP")
                .arg("0.4")
                .query_async(&mut c)
                .await
                .unwrap();
        });
        tokio::time::sleep(Duration::from_millis(50)).await;
        // The reply comes after the response timeout: the outcome is unknown to the client.
        let r = g.unlock().await;
        stall.await.unwrap();
        // Whatever the reply said, the next lock of this task is a fresh hold, and after its
        // unlock nothing is left.
        let g2 = lock.lock().await.unwrap();
        let count: Option<u32> = hget(&mut admin, &key, &owner).await;
        assert_eq!(count, Some(1), "phantom hold after {r:?}");
        g2.unlock().await.unwrap();
        assert!(!exists(&mut admin, &key).await);
    })
    .await;
}

/// Blocks the server for `secs` from another OS thread (DEBUG SLEEP on a blocking
/// connection), so no tokio runtime is involved.
fn debug_sleep(mut c: redis::Connection, secs: f64) -> std::thread::JoinHandle<()> {
    std::thread::spawn(move || {
        let _: redis::RedisResult<String> =
            redis::cmd("DEBUG").arg("SLEEP").arg(secs).query(&mut c);
    })
}

/// A re-entrant `lock()` whose reply comes too late (response timeout) has an unknown
/// outcome: its conditional undo must remove the hold it took. If the caller re-enters
/// again right away, the undo must still reach Redis first (its expected hold count would
/// be stale otherwise): after every guard is unlocked the lock must be free, not held by
/// nobody until its TTL runs out. (Review finding: the undo used to be spawned and raced
/// the caller's next attempt.)
#[tokio::test(flavor = "current_thread")]
async fn timed_out_reentry_then_reentry_leaks_no_hold() {
    let server = RedisServer::start();
    let ns = suite::unique_ns("rc-reenter");
    let c = Client::builder(server.url())
        .namespace(ns.clone())
        .watchdog_timeout(Duration::from_secs(10))
        .response_timeout(Duration::from_millis(200))
        .build()
        .await
        .expect("build client");
    let mut conn = server.conn().await;
    let sleeper = server.sync_conn();
    let lock = c.lock("reenter");
    let key = lock.key().to_string();
    in_task(async move {
        let g1 = lock.lock().await.expect("first hold");
        let stall = debug_sleep(sleeper, 0.6);
        tokio::time::sleep(Duration::from_millis(100)).await; // the server sleeps now
                                                              // The first attempt's reply is lost to the response timeout: `lock()` has budget
                                                              // left, so the late hold is settled away and the re-entry tried again (invariant 14).
        let late = lock.lock().await.expect("re-entry rides through the stall");
        let g2 = lock.lock().await.expect("re-entry after the stall");
        tokio::time::sleep(Duration::from_millis(300)).await;
        let count = hget::<i64>(&mut conn, &key, g1.owner()).await;
        assert_eq!(count, Some(3), "the late hold was adopted or lost");
        g2.unlock().await.expect("unlock g2");
        late.unlock().await.expect("unlock the re-entry");
        g1.unlock().await.expect("unlock g1");
        let freed = suite::eventually(Duration::from_secs(1), || {
            let mut c = conn.clone();
            let key = key.clone();
            async move { !exists(&mut c, &key).await }
        })
        .await;
        let pttl: i64 = redis::cmd("PTTL")
            .arg(&key)
            .query_async(&mut conn)
            .await
            .unwrap();
        assert!(
            freed,
            "after unlocking both guards the lock is still held (count before unlock \
             {count:?}, pttl {pttl} ms): the timed-out re-entry's hold leaked"
        );
        stall.join().unwrap();
    })
    .await;
}

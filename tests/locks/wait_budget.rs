//! A wait budget is a promise (invariant 14): a call given a wait returns within it plus one
//! response timeout (an unlock, which waits for nothing, within two), with `Timeout` or a
//! retryable error; and while budget is left, a transient error is settled and retried, not
//! returned.
//!
//! | scenario | fault | what must hold |
//! |---|---|---|
//! | `try_lock(100 ms)` and `unlock()` while this owner's settlement waits for a stalled server | `DEBUG SLEEP 3` | each returns within its bound; after the stall the count is settled and nothing is left |
//! | `lock()` whose first attempt's reply is lost to a response timeout | `DEBUG SLEEP 0.6` (response timeout 200 ms) | `lock()` returns a guard once the server answers, not the timeout |

use std::time::{Duration, Instant};

use lockwise::Client;
use suite::{exists, in_task, RedisServer};

const RESPONSE_TIMEOUT: Duration = Duration::from_millis(300);
/// Scheduling slack on a loaded 2-core machine.
const SLACK: Duration = Duration::from_millis(300);

async fn client(server: &RedisServer, test: &str, response: Duration) -> Client {
    Client::builder(server.url())
        .namespace(suite::unique_ns(test))
        .watchdog_timeout(Duration::from_secs(10))
        .response_timeout(response)
        .build()
        .await
        .expect("build client")
}

/// Blocks the server for `secs` from another OS thread.
fn debug_sleep(mut c: redis::Connection, secs: f64) -> std::thread::JoinHandle<()> {
    std::thread::spawn(move || {
        let _: redis::RedisResult<String> =
            redis::cmd("DEBUG").arg("SLEEP").arg(secs).query(&mut c);
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn try_lock_and_unlock_keep_their_budget_while_a_settlement_waits_for_redis() {
    let server = RedisServer::start();
    let c = client(&server, "budget-stall", RESPONSE_TIMEOUT).await;
    let lock = c.lock("job");
    let key = lock.key().to_string();
    let mut admin = server.conn().await;
    let sleeper = server.sync_conn();
    in_task(async move {
        let held = lock.lock().await.unwrap();
        let stall = debug_sleep(sleeper, 3.0);
        tokio::time::sleep(Duration::from_millis(100)).await;
        let wait = Duration::from_millis(100);
        // A re-entry whose reply is lost: a settlement of this owner starts and waits for
        // the server to answer again.
        let mut took = Vec::new();
        for round in 0..2 {
            let t = Instant::now();
            let r = lock.try_lock(wait, None).await;
            let elapsed = t.elapsed();
            assert!(
                matches!(&r, Err(e) if e.is_timeout() || e.is_retryable()),
                "round {round}: try_lock during the stall answered {:?}",
                r.map(|_| ())
            );
            assert!(
                elapsed <= wait + RESPONSE_TIMEOUT + SLACK,
                "round {round}: try_lock({wait:?}) took {elapsed:?} (response timeout {RESPONSE_TIMEOUT:?})"
            );
            took.push(elapsed);
        }
        let t = Instant::now();
        let r = held.unlock().await;
        let elapsed = t.elapsed();
        assert!(
            r.as_ref().is_ok() || r.as_ref().is_err_and(|e| e.is_retryable()),
            "unlock during the stall answered {r:?}"
        );
        assert!(
            elapsed <= RESPONSE_TIMEOUT * 2 + SLACK,
            "unlock took {elapsed:?} (response timeout {RESPONSE_TIMEOUT:?})"
        );
        took.push(elapsed);
        eprintln!("during a 3 s stall: try_lock(100 ms) x2, unlock took {took:?}");
        stall.join().unwrap();
        // Once Redis answers, everything is settled: nothing is left, the lock is free.
        assert!(
            suite::eventually(Duration::from_secs(5), || {
                let (mut admin, key) = (admin.clone(), key.clone());
                async move { !exists(&mut admin, &key).await }
            })
            .await,
            "a hold was left behind after the stall"
        );
        let g = lock.lock().await.unwrap();
        assert_eq!(lock.hold_count().await.unwrap(), 1);
        g.unlock().await.unwrap();
        assert!(!exists(&mut admin, &key).await);
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lock_rides_through_a_lost_reply_on_its_first_attempt() {
    let server = RedisServer::start();
    let c = client(&server, "budget-first", Duration::from_millis(200)).await;
    let lock = c.lock("job");
    let key = lock.key().to_string();
    let admin = server.conn().await;
    let sleepers: Vec<_> = (0..3).map(|_| server.sync_conn()).collect();
    in_task(async move {
        for (round, sleeper) in sleepers.into_iter().enumerate() {
            let stall = debug_sleep(sleeper, 0.6);
            tokio::time::sleep(Duration::from_millis(50)).await;
            let t = Instant::now();
            let g = lock
                .lock()
                .await
                .unwrap_or_else(|e| panic!("round {round}: lock() gave up on one lost reply: {e}"));
            eprintln!(
                "round {round}: lock() took {:?} through a 0.6 s stall",
                t.elapsed()
            );
            stall.join().unwrap();
            assert_eq!(lock.hold_count().await.unwrap(), 1, "round {round}");
            g.unlock().await.unwrap();
            assert!(
                suite::eventually(Duration::from_secs(3), || {
                    let (mut admin, key) = (admin.clone(), key.clone());
                    async move { !exists(&mut admin, &key).await }
                })
                .await,
                "round {round}: a hold was left behind"
            );
        }
    })
    .await;
}

//! Real faults against a real server: SCRIPT FLUSH while contending, CLIENT KILL of the
//! subscription connection while waiters wait, and a server restart under a held lock.
mod support;

use support::in_task;
use support::{client, exists, Conn};

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::future::join_all;
use lockwise::{Client, Error};
use support::{Interval, RedisServer};

const WATCHDOG: Duration = Duration::from_secs(30);

async fn numsub_until(
    conn: &Conn,
    channel: &str,
    timeout: Duration,
    pred: impl Fn(u64) -> bool,
) -> bool {
    support::eventually(timeout, || {
        let mut c = conn.clone();
        let ch = channel.to_string();
        let pred = &pred;
        async move { pred(support::numsub(&mut c, &ch).await) }
    })
    .await
}

async fn kill_pubsub(conn: &mut Conn) -> i64 {
    redis::cmd("CLIENT")
        .arg("KILL")
        .arg("TYPE")
        .arg("pubsub")
        .query_async(conn)
        .await
        .unwrap()
}

/// Contending tasks: each loops lock -> record interval -> unlock until `until`; even tasks
/// use lock(), odd ones try_lock(10 s, watchdog). Returns Err(description) on the first
/// library error; Ok(number of critical sections) otherwise.
fn spawn_contenders(
    clients: &[Client],
    per_client: usize,
    name: &str,
    until: Instant,
    intervals: Arc<Mutex<Vec<Interval>>>,
) -> Vec<tokio::task::JoinHandle<Result<u64, String>>> {
    let mut tasks = Vec::new();
    for (ci, c) in clients.iter().enumerate() {
        for t in 0..per_client {
            let lock = c.lock(name);
            let intervals = intervals.clone();
            let who = ci * per_client + t;
            tasks.push(tokio::spawn(async move {
                let mut n = 0;
                while Instant::now() < until {
                    let g = if who.is_multiple_of(2) {
                        lock.lock().await.map_err(|e| format!("lock(): {e:?}"))?
                    } else {
                        match lock.try_lock(Duration::from_secs(10), None).await {
                            Ok(Some(g)) => g,
                            Ok(None) => return Err("try_lock(10 s) timed out".into()),
                            Err(e) => return Err(format!("try_lock(): {e:?}")),
                        }
                    };
                    let start = Instant::now();
                    tokio::time::sleep(Duration::from_millis(1)).await;
                    let end = Instant::now();
                    intervals.lock().unwrap().push(Interval { start, end, who });
                    g.unlock().await.map_err(|e| format!("unlock(): {e:?}"))?;
                    n += 1;
                }
                Ok(n)
            }));
        }
    }
    tasks
}

async fn join_contenders(
    tasks: Vec<tokio::task::JoinHandle<Result<u64, String>>>,
    limit: Duration,
) -> u64 {
    let results = tokio::time::timeout(limit, join_all(tasks))
        .await
        .unwrap_or_else(|_| panic!("contending tasks still not done after {limit:?} (TTL 30 s)"));
    let mut total = 0;
    for r in results {
        match r.expect("task panicked") {
            Ok(n) => total += n,
            Err(e) => panic!("a lock call failed: {e}"),
        }
    }
    total
}

/// SCRIPT FLUSH every 100 ms while 2 clients x 8 tasks lock/unlock one lock for 3 s and
/// a third client holds a 1 s watchdog lock: no call fails, no overlap, the watchdog
/// lock survives, and EVAL was used (the NOSCRIPT fallback ran).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn script_flush_mid_run() {
    let server = RedisServer::start();
    let ns = support::unique_ns("flt-flush");
    let clients = vec![
        client(&server, &ns, WATCHDOG).await,
        client(&server, &ns, WATCHDOG).await,
    ];
    let steady = client(&server, &ns, Duration::from_secs(1)).await;
    let mut conn = server.conn().await;
    in_task(async move {
        let steady_lock = steady.lock("steady");
        let steady_guard = steady_lock.lock().await.expect("steady lock");
        let until = Instant::now() + Duration::from_secs(3);
        let flushes = Arc::new(AtomicU64::new(0));
        let flusher = {
            let mut c = conn.clone();
            let flushes = flushes.clone();
            tokio::spawn(async move {
                while Instant::now() < until {
                    let _: String = redis::cmd("SCRIPT")
                        .arg("FLUSH")
                        .query_async(&mut c)
                        .await
                        .unwrap();
                    flushes.fetch_add(1, Ordering::Relaxed);
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            })
        };
        let intervals = Arc::new(Mutex::new(Vec::new()));
        let tasks = spawn_contenders(&clients, 8, "flushed", until, intervals.clone());
        let total = join_contenders(tasks, Duration::from_secs(10)).await;
        flusher.await.unwrap();
        let evals = support::command_calls(&mut conn, "eval").await;
        let evalshas = support::command_calls(&mut conn, "evalsha").await;
        println!(
            "{total} critical sections, {} SCRIPT FLUSHes, EVAL {evals}, EVALSHA {evalshas}",
            flushes.load(Ordering::Relaxed)
        );
        assert!(total > 0);
        let mut iv = intervals.lock().unwrap().clone();
        support::assert_no_overlap(&mut iv);
        assert!(evals > 0, "NOSCRIPT fallback (EVAL) never ran");

        assert!(
            !steady_guard.is_lost(),
            "watchdog lock lost during SCRIPT FLUSHes"
        );
        let p: i64 = redis::cmd("PTTL")
            .arg(steady_lock.key())
            .query_async(&mut conn)
            .await
            .unwrap();
        assert!(p > 0 && p <= 1000, "watchdog lock PTTL {p}");
        steady_guard.unlock().await.expect("steady unlock");
        assert!(support::keys_with_pttl(&mut conn).await.is_empty());
    })
    .await;
}

async fn kill_pubsub_while_waiting(pause_after_kill: Duration) {
    let server = RedisServer::start();
    let ns = support::unique_ns("flt-kill");
    let a = client(&server, &ns, WATCHDOG).await;
    let b = client(&server, &ns, WATCHDOG).await;
    let mut conn = server.conn().await;
    in_task(async move {
        let hl = a.lock("killed");
        let channel = hl.channel().to_string();
        let guard = hl.lock().await.expect("holder lock");
        let intervals = Arc::new(Mutex::new(Vec::new()));
        let mut tasks = Vec::new();
        for t in 0..8 {
            let l = b.lock("killed");
            let intervals = intervals.clone();
            tasks.push(tokio::spawn(async move {
                let g = l.lock().await.map_err(|e| format!("lock(): {e:?}"))?;
                let start = Instant::now();
                tokio::time::sleep(Duration::from_millis(5)).await;
                let end = Instant::now();
                intervals
                    .lock()
                    .unwrap()
                    .push(Interval { start, end, who: t });
                g.unlock().await.map_err(|e| format!("unlock(): {e:?}"))?;
                Ok::<u64, String>(1)
            }));
        }
        assert!(
            numsub_until(&conn, &channel, Duration::from_secs(3), |n| n >= 1).await,
            "waiters never subscribed"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
        let killed = kill_pubsub(&mut conn).await;
        assert!(
            killed >= 1,
            "CLIENT KILL TYPE pubsub killed {killed} connections"
        );
        tokio::time::sleep(pause_after_kill).await;
        let t0 = Instant::now();
        guard.unlock().await.expect("holder unlock");
        let n = join_contenders(tasks, Duration::from_secs(5)).await;
        assert_eq!(n, 8);
        println!(
            "after CLIENT KILL ({killed} killed, unlock {pause_after_kill:?} later) all 8 waiters \
             acquired within {:?}",
            t0.elapsed()
        );
        let mut iv = intervals.lock().unwrap().clone();
        support::assert_no_overlap(&mut iv);
        assert!(
            numsub_until(&conn, &channel, Duration::from_secs(2), |n| n == 0).await,
            "NUMSUB of {channel} did not drop to 0"
        );
        assert!(!exists(&mut conn, hl.key()).await);
    })
    .await;
}

/// CLIENT KILL TYPE pubsub while 8 tasks of client B wait; A unlocks right after the kill
/// (the publish may land while B resubscribes): every waiter still acquires within 5 s.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn client_kill_pubsub_then_unlock_at_once() {
    kill_pubsub_while_waiting(Duration::ZERO).await;
}

/// Same, A unlocks 500 ms after the kill (B has reconnected and resubscribed by then).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn client_kill_pubsub_then_unlock_after_reconnect() {
    kill_pubsub_while_waiting(Duration::from_millis(500)).await;
}

/// CLIENT KILL TYPE pubsub every 200 ms for 2 s while 2 clients x 6 tasks contend: every
/// call succeeds, all tasks finish within 10 s (TTL 30 s), no overlap, no subscription left.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn client_kill_pubsub_repeatedly_while_contending() {
    let server = RedisServer::start();
    let ns = support::unique_ns("flt-kills");
    let clients = vec![
        client(&server, &ns, WATCHDOG).await,
        client(&server, &ns, WATCHDOG).await,
    ];
    let mut conn = server.conn().await;
    in_task(async move {
        let until = Instant::now() + Duration::from_secs(2);
        let killer = {
            let mut c = conn.clone();
            tokio::spawn(async move {
                let mut killed = 0;
                while Instant::now() < until {
                    tokio::time::sleep(Duration::from_millis(200)).await;
                    killed += kill_pubsub(&mut c).await;
                }
                killed
            })
        };
        let intervals = Arc::new(Mutex::new(Vec::new()));
        let tasks = spawn_contenders(&clients, 6, "hammered", until, intervals.clone());
        let t0 = Instant::now();
        let total = join_contenders(tasks, Duration::from_secs(10)).await;
        let killed = killer.await.unwrap();
        println!(
            "{total} critical sections in {:?} with {killed} subscription connections killed",
            t0.elapsed()
        );
        assert!(killed >= 1, "the kills never hit a subscription connection");
        let mut iv = intervals.lock().unwrap().clone();
        support::assert_no_overlap(&mut iv);
        let channel = clients[0].lock("hammered").channel().to_string();
        assert!(
            numsub_until(&conn, &channel, Duration::from_secs(2), |n| n == 0).await,
            "NUMSUB of {channel} did not drop to 0"
        );
        assert!(support::keys_with_pttl(&mut conn).await.is_empty());
    })
    .await;
}

/// Server restart (same port, empty data) under a held 1 s watchdog lock: lost() fires
/// within a few renewal periods, the client reconnects and a new lock() works, and the
/// old guard's unlock is NotHeld without touching the new hold.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn server_restart_marks_watchdog_lock_lost() {
    let mut server = RedisServer::start();
    let c = client(
        &server,
        &support::unique_ns("flt-restart"),
        Duration::from_secs(1),
    )
    .await;
    in_task(async move {
        let lock = c.lock("restarted");
        let guard = lock.lock().await.expect("lock");
        let token = guard.lost();
        tokio::task::block_in_place(|| server.restart());
        let t0 = Instant::now();
        tokio::time::timeout(Duration::from_secs(3), token.cancelled())
            .await
            .expect("lost() not cancelled within 3 s of a restart that wiped the lock");
        println!("lost() fired {:?} after the restart", t0.elapsed());
        assert!(guard.is_lost());

        // Re-acquire from another task (another owner), tolerating transient connection
        // errors while the client reconnects.
        let l2 = lock.clone();
        let newer = tokio::spawn(async move {
            let deadline = Instant::now() + Duration::from_secs(5);
            let mut transient = 0;
            loop {
                match l2.lock().await {
                    Ok(g) => return (g, transient),
                    Err(e) if e.is_retryable() && Instant::now() < deadline => {
                        transient += 1;
                        tokio::time::sleep(Duration::from_millis(100)).await;
                    }
                    Err(e) => panic!("lock() after restart: {e:?}"),
                }
            }
        })
        .await
        .unwrap();
        let (g2, transient) = newer;
        println!("re-acquired after restart ({transient} transient errors first)");
        match guard.unlock().await {
            Err(Error::NotHeld { .. }) => {}
            other => panic!("unlock of the wiped hold: expected NotHeld, got {other:?}"),
        }
        let mut conn = server.conn().await;
        assert!(
            exists(&mut conn, lock.key()).await,
            "old guard's unlock released the new hold"
        );
        tokio::time::sleep(Duration::from_millis(1200)).await;
        assert!(!g2.is_lost());
        assert!(exists(&mut conn, lock.key()).await, "new lock not renewed");
        g2.unlock().await.expect("unlock new hold");
        assert!(!exists(&mut conn, lock.key()).await);
    })
    .await;
}

/// DEBUG SLEEP 0.8 s stalls the server while lock() runs with a 200 ms response timeout:
/// the call fails with a retryable error (or succeeds late), but the script still runs
/// after the sleep and takes the lock for nobody; that unknown-outcome hold must be
/// released in the background, so the key is gone within 2 s and another client can lock.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn late_reply_after_response_timeout_leaves_no_hold() {
    let server = RedisServer::start();
    let ns = support::unique_ns("flt-late");
    let c = Client::builder(server.url())
        .namespace(ns.clone())
        .watchdog_timeout(WATCHDOG)
        .response_timeout(Duration::from_millis(200))
        .build()
        .await
        .expect("build client");
    let other = client(&server, &ns, WATCHDOG).await;
    let sleeper = server.conn().await;
    let conn = server.conn().await;
    in_task(async move {
        let lock = c.lock("late");
        let key = lock.key().to_string();
        let calls_before = support::script_calls(&mut conn.clone()).await;
        let sleep = {
            let mut s = sleeper.clone();
            tokio::spawn(async move {
                // Our own connection may time out on this; the server sleeps regardless.
                let _: redis::RedisResult<String> = redis::cmd("DEBUG")
                    .arg("SLEEP")
                    .arg("0.8")
                    .query_async(&mut s)
                    .await;
            })
        };
        tokio::time::sleep(Duration::from_millis(50)).await;
        let t0 = Instant::now();
        let outcome = match lock.lock().await {
            Ok(g) => {
                g.unlock().await.expect("unlock");
                "succeeded late".to_string()
            }
            Err(e) => {
                assert!(
                    e.is_retryable(),
                    "a response timeout should be retryable: {e:?}"
                );
                format!("failed after {:?}: {e}", t0.elapsed())
            }
        };
        println!("lock() during DEBUG SLEEP {outcome}");
        sleep.await.unwrap();
        let gone = support::eventually(Duration::from_secs(2), || {
            let mut c = conn.clone();
            let key = key.clone();
            async move { !exists(&mut c, &key).await }
        })
        .await;
        let mut cc = conn.clone();
        let fields: std::collections::HashMap<String, String> = redis::cmd("HGETALL")
            .arg(&key)
            .query_async(&mut cc)
            .await
            .unwrap();
        assert!(
            gone,
            "a hold taken by the timed-out lock() is still there: {fields:?}"
        );
        let calls = support::script_calls(&mut cc).await - calls_before;
        println!("script calls during the stall and clean-up: {calls}");
        assert!(
            calls >= 2,
            "expected the late lock script and its undo to run ({calls} script calls)"
        );
        let g = other
            .lock("late")
            .try_lock(Duration::ZERO, None)
            .await
            .expect("try_lock")
            .expect("lock free after the stall");
        g.unlock().await.expect("unlock");
        // The timed-out client works again once the server answers.
        let deadline = Instant::now() + Duration::from_secs(3);
        let g = loop {
            match lock.lock().await {
                Ok(g) => break g,
                Err(e) if e.is_retryable() && Instant::now() < deadline => {
                    tokio::time::sleep(Duration::from_millis(50)).await
                }
                Err(e) => panic!("lock() after the stall: {e:?}"),
            }
        };
        g.unlock().await.expect("unlock");
        let mut cc = conn.clone();
        assert!(support::keys_with_pttl(&mut cc).await.is_empty());
    })
    .await;
}

/// A waiter in lock() while the server restarts (the held lock is wiped): it must not sleep
/// out the holder's 30 s TTL; within 5 s it either acquires or fails with a retryable error.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiter_during_server_restart_does_not_hang() {
    let mut server = RedisServer::start();
    let ns = support::unique_ns("flt-rwait");
    let a = client(&server, &ns, WATCHDOG).await;
    let b = client(&server, &ns, WATCHDOG).await;
    let conn = server.conn().await;
    in_task(async move {
        let hl = a.lock("restart-wait");
        let guard = hl.lock().await.expect("holder lock");
        let wl = b.lock("restart-wait");
        let waiter = tokio::spawn(async move {
            let t = Instant::now();
            let r = wl.lock().await;
            (r, t.elapsed())
        });
        assert!(numsub_until(&conn, hl.channel(), Duration::from_secs(3), |n| n >= 1).await);
        tokio::time::sleep(Duration::from_millis(100)).await;
        tokio::task::block_in_place(|| server.restart());
        let t0 = Instant::now();
        let (r, _) = tokio::time::timeout(Duration::from_secs(5), waiter)
            .await
            .expect("waiter still blocked 5 s after a restart wiped the lock (TTL 30 s)")
            .unwrap();
        match r {
            Ok(g) => {
                println!("waiter acquired {:?} after the restart", t0.elapsed());
                g.unlock().await.expect("unlock");
            }
            Err(e) => {
                println!("waiter failed {:?} after the restart: {e}", t0.elapsed());
                assert!(e.is_retryable(), "non-retryable error: {e:?}");
            }
        }
        // The old holder's hold is gone with the data.
        assert!(matches!(
            guard.unlock().await,
            Err(Error::NotHeld { .. }) | Err(Error::Redis(_))
        ));
        let mut conn = server.conn().await;
        assert!(support::keys_with_pttl(&mut conn).await.is_empty());
    })
    .await;
}

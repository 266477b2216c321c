//! The server restarts (same port, empty dataset) or goes down for good under held locks and
//! waiters: held locks are reported lost, waiters do not sleep out the TTL, old guards are
//! `NotHeld` without touching new holds, tokens keep rising, clients reconnect.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::checker::{self, History, Op};
use lockwise::{Client, Error};
use suite::in_task;
use suite::{exists, numsub_until, Conn, RedisServer};

/// Watchdog timeout of the restart-without-persistence scenario: short, so faults play out in
/// seconds.
const WATCHDOG: Duration = Duration::from_secs(1);
/// Watchdog timeout of the waiter scenario (long: a waiter must not sleep it out).
const WAITER_WATCHDOG: Duration = Duration::from_secs(30);

async fn client(url: &str, ns: &str) -> Client {
    suite::client_at(url, ns, WATCHDOG).await
}

/// The checker's server-side checks after quiescence (fencing counters excepted), within 5 s.
async fn quiescent(conn: &mut Conn, ns: &str) -> Vec<checker::Violation> {
    checker::check_quiescent(conn, ns, Duration::from_secs(5)).await
}

async fn within<F: std::future::Future>(secs: u64, fut: F) -> F::Output {
    tokio::time::timeout(Duration::from_secs(secs), fut)
        .await
        .unwrap_or_else(|_| panic!("call did not return within {secs} s"))
}

/// Server restart (same port, empty data) under a held 1 s watchdog lock: lost() fires
/// within a few renewal periods, the client reconnects and a new lock() works, and the
/// old guard's unlock is NotHeld without touching the new hold.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn server_restart_marks_watchdog_lock_lost() {
    let mut server = RedisServer::start();
    let c = suite::client(
        &server,
        &suite::unique_ns("flt-restart"),
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

/// A waiter in lock() while the server restarts (the held lock is wiped): it must not sleep
/// out the holder's 30 s TTL; within 5 s it either acquires or fails with a retryable error.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiter_during_server_restart_does_not_hang() {
    let mut server = RedisServer::start();
    let ns = suite::unique_ns("flt-rwait");
    let a = suite::client(&server, &ns, WAITER_WATCHDOG).await;
    let b = suite::client(&server, &ns, WAITER_WATCHDOG).await;
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
        assert!(suite::keys_with_pttl(&mut conn).await.is_empty());
    })
    .await;
}

// ---------------------------------------------------------------------------------------------
// 10. Restart without persistence

/// One contender of `restart_without_persistence`: loops `lock()` (watchdog) -> 1 ms -> unlock
/// on the fenced lock "f" until `until_ns` (read each round), each call bounded by 5 s (a hang
/// is an error); errors of the restart window are recorded as unknown outcomes and retried.
fn restart_contender(
    c: Client,
    h: History,
    who: String,
    until_ns: Arc<AtomicU64>,
) -> tokio::task::JoinHandle<Vec<String>> {
    tokio::spawn(async move {
        let lock = c.fenced_lock("f");
        let mut problems = Vec::new();
        while checker::now_ns() < until_ns.load(Ordering::Relaxed) {
            let id = h.invoke(&who, "f");
            let g = match tokio::time::timeout(Duration::from_secs(5), lock.lock()).await {
                Ok(Ok(g)) => g,
                Ok(Err(e)) => {
                    h.unknown(&id, &e.to_string());
                    if !e.is_retryable() {
                        problems.push(format!("{who}: lock: {e}"));
                    }
                    tokio::time::sleep(Duration::from_millis(20)).await;
                    continue;
                }
                Err(_) => {
                    h.unknown(&id, "lock() hung for 5 s");
                    problems.push(format!("{who}: lock() hung for 5 s"));
                    continue;
                }
            };
            h.ok(&id, g.owner(), Some(g.token()), None);
            tokio::time::sleep(Duration::from_millis(1)).await;
            let lost = g.is_lost();
            h.release(&id);
            match g.unlock().await {
                Ok(()) if lost => h.note(&id, "lost-but-unlocked"),
                Ok(()) => {}
                Err(e) => h.note(&id, &format!("unlock:{e}")),
            }
        }
        problems
    })
}

/// Scenario 10: SHUTDOWN NOSAVE and a restart on the same port (empty dataset) while
/// a watchdog RLock and a watchdog FencedLock are held. Before the restart 2 clients x 2 tasks
/// contend on another fenced lock; they stop before the restart and start again once both
/// clients have reconnected. The held locks are reported lost (`lost()` fires, unlock is
/// `NotHeld`), fencing tokens after the restart are above every token before it, both clients
/// continue, and the checker is clean.
///
/// Contenders that keep retrying `lock()` in the same task *across* the restart window are left
/// out: that reveals a library bug (the background undo of an attempt with an unknown outcome
/// releases the same owner's next, successful hold: two holders), reported separately.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn restart_without_persistence() {
    let mut server = RedisServer::start();
    let ns = suite::unique_ns("fp-restart");
    let a = client(server.url(), &ns).await;
    let b = client(server.url(), &ns).await;
    let h = History::new();
    // The two held locks, each in its own task.
    let (rguard, rid) = {
        let (a, h) = (a.clone(), h.clone());
        in_task(async move {
            let id = h.invoke("holder-r", "r");
            let g = a.lock("r").lock().await.unwrap();
            h.ok(&id, g.owner(), None, None);
            (g, id)
        })
        .await
    };
    let (fguard, fid) = {
        let (b, h) = (b.clone(), h.clone());
        in_task(async move {
            let id = h.invoke("holder-f", "held-f");
            let g = b.fenced_lock("held-f").lock().await.unwrap();
            h.ok(&id, g.owner(), Some(g.token()), None);
            (g, id)
        })
        .await
    };
    let contend = |phase: &str, ms: u64| {
        let until = Arc::new(AtomicU64::new(checker::now_ns() + ms * 1_000_000));
        (0..4)
            .map(|i| {
                let c = if i % 2 == 0 { a.clone() } else { b.clone() };
                restart_contender(c, h.clone(), format!("{phase}{i}"), until.clone())
            })
            .collect::<Vec<_>>()
    };
    let mut problems = Vec::new();
    for c in contend("before", 500) {
        problems.extend(c.await.unwrap());
    }
    let (rlost, flost) = (rguard.lost(), fguard.lost());
    let killed = checker::now_ns();
    tokio::task::block_in_place(|| {
        let mut conn = server.sync_conn();
        let _ = redis::cmd("SHUTDOWN").arg("NOSAVE").query::<()>(&mut conn);
        server.restart();
    });
    let restarted = checker::now_ns();
    // The held locks are reported lost.
    let mut lost_after = Vec::new();
    for t in [&rlost, &flost] {
        tokio::time::timeout(Duration::from_secs(3), t.cancelled())
            .await
            .expect("lost() did not fire within 3 s of the restart");
        lost_after.push(Duration::from_nanos(checker::now_ns() - restarted));
    }
    h.release_at(&rid, killed, "wiped by the restart");
    h.release_at(&fid, killed, "wiped by the restart");
    let fence_before = fguard.token();
    let r1 = in_task(async move { rguard.unlock().await }).await;
    let r2 = in_task(async move { fguard.unlock().await }).await;
    assert!(matches!(r1, Err(Error::NotHeld { .. })), "{r1:?}");
    assert!(matches!(r2, Err(Error::NotHeld { .. })), "{r2:?}");
    // Each client reconnects: a new fenced acquisition of the held lock, retried on transient
    // errors in a fresh task each time (a new owner per try), gets a larger token.
    let mut transient = 0;
    let mut fence_after = Vec::new();
    for (who, c) in [("after-a", a.clone()), ("after-b", b.clone())] {
        let deadline = Instant::now() + Duration::from_secs(5);
        loop {
            let (c, h) = (c.clone(), h.clone());
            let r = in_task(async move {
                let id = h.invoke(who, "held-f");
                match c.fenced_lock("held-f").lock().await {
                    Ok(g) => {
                        h.ok(&id, g.owner(), Some(g.token()), None);
                        h.release(&id);
                        g.unlock().await.unwrap();
                        Ok(g_token(&h, &id))
                    }
                    Err(e) => {
                        h.unknown(&id, &e.to_string());
                        Err(e)
                    }
                }
            })
            .await;
            match r {
                Ok(t) => {
                    fence_after.push(t);
                    break;
                }
                Err(e) if e.is_retryable() && Instant::now() < deadline => {
                    transient += 1;
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
                Err(e) => panic!("{who}: lock() after the restart: {e}"),
            }
        }
    }
    assert!(
        fence_after.iter().all(|&t| t > fence_before),
        "{fence_after:?} not above {fence_before}"
    );
    for c in contend("after", 1000) {
        problems.extend(c.await.unwrap());
    }
    assert!(problems.is_empty(), "{problems:?}");
    let all = h.acquisitions();
    let ok = |prefix: &str, clients: [usize; 2]| {
        all.iter()
            .filter(|x| x.op == Op::Ok)
            .filter(|x| clients.iter().any(|i| x.client == format!("{prefix}{i}")))
            .count()
    };
    let max_before = all
        .iter()
        .filter(|x| x.lock == "f" && x.op == Op::Ok && x.acquired.unwrap() < killed)
        .filter_map(|x| x.token)
        .max()
        .unwrap();
    let min_after = all
        .iter()
        .filter(|x| x.lock == "f" && x.op == Op::Ok && x.invoke > restarted)
        .filter_map(|x| x.token)
        .min()
        .unwrap();
    println!(
        "restart: lost() fired {lost_after:?} after the restart; {} transient errors while reconnecting; \
         contenders: {} acquisitions before, {} after (client a {}, client b {}); tokens: held {fence_before} -> \
         {fence_after:?}, contended max before {max_before} < min after {min_after}",
        transient,
        ok("before", [0, 1]) + ok("before", [2, 3]),
        ok("after", [0, 1]) + ok("after", [2, 3]),
        ok("after", [0, 2]),
        ok("after", [1, 3]),
    );
    assert!(min_after > max_before);
    // An RLock is not fair: one task may starve another of its client for a while, but each
    // client as a whole continues.
    assert!(ok("after", [0, 2]) >= 1 && ok("after", [1, 3]) >= 1);
    let mut violations = h.check();
    let mut conn = server.conn().await;
    violations.extend(quiescent(&mut conn, &ns).await);
    checker::assert_clean(&violations);
}

fn g_token(h: &History, id: &checker::AcqId) -> u64 {
    h.get(id).token.unwrap()
}

// ---------------------------------------------------------------------------------------------
// Redis down for good

/// Redis killed (not restarted) while a lock() waits behind a holder: the waiter does not
/// hang until the holder's 30 s TTL; it returns a typed, retryable `Error::Redis` once the
/// connection manager gives up reconnecting (6 retries, about 15 s). The holder's unlock is a typed error too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_down_while_waiting_is_a_retryable_error() {
    let mut server = RedisServer::start();
    let ns = suite::unique_ns("down-wait");
    let build = || {
        Client::builder(server.url())
            .namespace(ns.as_str())
            .connect_timeout(Duration::from_secs(1))
            .build()
    };
    let (a, b) = (build().await.unwrap(), build().await.unwrap());
    let conn = server.conn().await;
    let holder = tokio::spawn({
        let a = a.clone();
        async move { a.lock("down").lock().await.expect("holder") }
    })
    .await
    .unwrap();
    let channel = b.lock("down").channel().to_string();
    let waiter = tokio::spawn(async move {
        let t = Instant::now();
        (b.lock("down").lock().await, t)
    });
    assert!(
        suite::eventually(Duration::from_secs(3), || {
            let mut c = conn.clone();
            let ch = channel.clone();
            async move { suite::numsub(&mut c, &ch).await >= 1 }
        })
        .await,
        "waiter never subscribed"
    );
    let t0 = Instant::now();
    server.kill();
    let (r, _) = tokio::time::timeout(Duration::from_secs(25), waiter)
        .await
        .expect("waiter still blocked 25 s after Redis went down (TTL 30 s)")
        .unwrap();
    let took = t0.elapsed();
    match r {
        Err(ref e @ Error::Redis(_)) => {
            assert!(e.is_retryable(), "{e:?}");
            println!("waiter failed {took:?} after Redis went down: {e}");
        }
        other => panic!("expected Err(Error::Redis), got {other:?}"),
    }
    match within(20, holder.unlock()).await {
        Err(Error::Redis(_)) => {}
        other => panic!("holder unlock with Redis down: {other:?}"),
    }
}

/// A fleet refused together does not come back in step: 12 clients start an acquire each
/// (on names of their own) while their server refuses writes (`READONLY`, as a demoted master
/// does during a failover), and retry with the failover retry's pauses (50 ms doubling to
/// 1 s). Writes are taken again 1.2 s later; the acquires then complete spread over at least
/// 100 ms, not in one burst, because every pause is jittered. Before, all 12 retried at the
/// same instants (50, 150, 350, 750, 1550 ms) and completed within a millisecond or two.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fleet_retries_out_of_step_after_a_failover() {
    const CLIENTS: usize = 12;
    let server = RedisServer::start();
    let mut conn = server.conn().await;
    let ns = suite::unique_ns("fleet");
    let mut clients = Vec::new();
    for _ in 0..CLIENTS {
        let c = Client::builder(server.url())
            .namespace(&ns)
            .watchdog_timeout(WATCHDOG)
            .failover_retry(Duration::from_secs(10))
            .build()
            .await
            .unwrap();
        clients.push(c);
    }
    // A replica of a master that does not exist: it refuses every write with READONLY.
    let nowhere = lockwise_testkit::server::free_port().to_string();
    let _: () = redis::cmd("REPLICAOF")
        .arg("127.0.0.1")
        .arg(&nowhere)
        .query_async(&mut conn)
        .await
        .unwrap();
    let start = Instant::now();
    let tasks: Vec<_> = clients
        .iter()
        .enumerate()
        .map(|(i, c)| {
            let lock = c.lock(format!("own-{i}"));
            tokio::spawn(async move {
                let g = lock.try_lock(Duration::from_secs(8), None).await;
                (g, Instant::now())
            })
        })
        .collect();
    tokio::time::sleep(Duration::from_millis(1200)).await;
    let _: () = redis::cmd("REPLICAOF")
        .arg("NO")
        .arg("ONE")
        .query_async(&mut conn)
        .await
        .unwrap();
    let mut done = Vec::new();
    for t in tasks {
        let (g, at) = within(10, t).await.unwrap();
        let g = g.unwrap_or_else(|e| panic!("acquire through the refusals: {e:?}"));
        g.unlock().await.unwrap();
        done.push(at.duration_since(start));
    }
    done.sort();
    let spread = done[CLIENTS - 1] - done[0];
    println!(
        "acquires completed between {:?} and {:?}",
        done[0],
        done[CLIENTS - 1]
    );
    assert!(
        spread >= Duration::from_millis(100),
        "the fleet came back in step: all {CLIENTS} within {spread:?} ({done:?})"
    );
}

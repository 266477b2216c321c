//! Watchdog: renewal keeps watchdog locks alive, stops at unlock / client drop, reports lost
//! locks, and batches renewals so 1,000 held locks cost ~10 script calls per period.

use suite::in_task;
use suite::OrNone;
use suite::{client, exists, Conn};

use std::time::{Duration, Instant};

use futures::future::join_all;
use lockwise::Error;
use suite::RedisServer;

async fn pttl(conn: &mut Conn, key: &str) -> i64 {
    redis::cmd("PTTL").arg(key).query_async(conn).await.unwrap()
}

/// Keys matching `pattern`, clients' presence keys left out (see `suite::is_presence`).
async fn keys_matching(conn: &mut Conn, pattern: &str) -> Vec<String> {
    let keys: Vec<String> = redis::cmd("KEYS")
        .arg(pattern)
        .query_async(conn)
        .await
        .unwrap();
    keys.into_iter()
        .filter(|k| !suite::is_presence(k))
        .collect()
}

/// With a 1 s watchdog timeout, a held lock survives 3.5 s (3.5x its TTL): the key is
/// present with 0 < PTTL <= 1000 at every sample, the guard is not lost, and unlock deletes it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watchdog_keeps_lock_alive_past_three_timeouts() {
    let server = RedisServer::start();
    let c = client(
        &server,
        &suite::unique_ns("wd-keep"),
        Duration::from_secs(1),
    )
    .await;
    let mut conn = server.conn().await;
    in_task(async move {
        let lock = c.lock("keep");
        let guard = lock.lock().await.expect("lock");
        assert_eq!(guard.lease(), None, "lock() must be in watchdog mode");
        let start = Instant::now();
        let mut min_pttl = i64::MAX;
        let mut samples = 0;
        while start.elapsed() < Duration::from_millis(3500) {
            let p = pttl(&mut conn, lock.key()).await;
            assert!(
                p > 0 && p <= 1000,
                "after {:?} the watchdog lock has PTTL {p} (expected 0 < pttl <= 1000)",
                start.elapsed()
            );
            min_pttl = min_pttl.min(p);
            samples += 1;
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        println!("watchdog kept the lock 3.5 s: {samples} samples, lowest PTTL seen {min_pttl} ms");
        assert!(!guard.is_lost(), "guard reported lost while renewed");
        assert!(!guard.lost().is_cancelled());
        assert!(lock.is_locked().await.unwrap());
        guard.unlock().await.expect("unlock");
        assert!(
            !exists(&mut conn, lock.key()).await,
            "key left after unlock"
        );
    })
    .await;
}

/// While held, renewals run (script calls grow); after unlock nothing renews: the key stays
/// absent and the script call count stays flat over 3 renewal periods.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nothing_renews_after_unlock() {
    let server = RedisServer::start();
    let c = client(
        &server,
        &suite::unique_ns("wd-after"),
        Duration::from_secs(1),
    )
    .await;
    let mut conn = server.conn().await;
    in_task(async move {
        let lock = c.lock("after-unlock");
        let guard = lock.lock().await.expect("lock");
        let held_from = suite::script_calls(&mut conn).await;
        tokio::time::sleep(Duration::from_millis(1200)).await;
        let held_to = suite::script_calls(&mut conn).await;
        println!(
            "renewal script calls while held for 1.2 s (period 333 ms): {}",
            held_to - held_from
        );
        assert!(held_to > held_from, "no renewal while the lock was held");

        guard.unlock().await.expect("unlock");
        let after_unlock = suite::script_calls(&mut conn).await;
        let start = Instant::now();
        while start.elapsed() < Duration::from_millis(1000) {
            assert!(
                !exists(&mut conn, lock.key()).await,
                "key reappeared {:?} after unlock",
                start.elapsed()
            );
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
        let later = suite::script_calls(&mut conn).await;
        assert_eq!(
            later - after_unlock,
            0,
            "script calls after unlock (a renewal of a released lock?)"
        );
        assert!(suite::keys_with_pttl(&mut conn).await.is_empty());
    })
    .await;
}

/// Re-check the renew/unlock race many times: lock, hold a random part of a period, unlock;
/// no key may ever be found afterwards and the script calls stop once all are released.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unlock_near_renewal_never_resurrects() {
    let server = RedisServer::start();
    let c = client(
        &server,
        &suite::unique_ns("wd-race"),
        Duration::from_millis(300),
    )
    .await;
    let mut conn = server.conn().await;
    in_task(async move {
        let locks: Vec<_> = (0..20).map(|i| c.lock(format!("race-{i}"))).collect();
        let start = Instant::now();
        while start.elapsed() < Duration::from_secs(2) {
            let guards = join_all(locks.iter().map(|l| l.lock())).await;
            let hold = rand::random_range(0..200u64);
            tokio::time::sleep(Duration::from_millis(hold)).await;
            for r in join_all(guards.into_iter().map(|g| g.expect("lock").unlock())).await {
                r.expect("unlock of a held, renewed lock");
            }
        }
        let base = suite::script_calls(&mut conn).await;
        let t = Instant::now();
        while t.elapsed() < Duration::from_millis(500) {
            let left = keys_matching(&mut conn, "*").await;
            assert!(left.is_empty(), "keys after all unlocks: {left:?}");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        assert_eq!(suite::script_calls(&mut conn).await - base, 0);
    })
    .await;
}

/// A client dropped without unlocking (guard forgotten, RLock and Client dropped) stops
/// renewing: its key expires within the watchdog timeout + slack, while another client's
/// lock keeps being renewed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropped_client_lets_its_locks_expire() {
    let server = RedisServer::start();
    let ns = suite::unique_ns("wd-drop");
    let gone = client(&server, &ns, Duration::from_secs(1)).await;
    let kept = client(&server, &ns, Duration::from_secs(1)).await;
    let mut conn = server.conn().await;
    in_task(async move {
        let kept_lock = kept.lock("kept");
        let kept_guard = kept_lock.lock().await.expect("lock kept");

        let lock = gone.lock("abandoned");
        let key = lock.key().to_string();
        let guard = lock.lock().await.expect("lock abandoned");
        std::mem::forget(guard);
        drop(lock);
        drop(gone);
        let dropped_at = Instant::now();

        let expired = suite::eventually(Duration::from_millis(2500), || {
            let mut c = conn.clone();
            let key = key.clone();
            async move { !exists(&mut c, &key).await }
        })
        .await;
        let took = dropped_at.elapsed();
        println!("abandoned watchdog lock expired {took:?} after its client was dropped");
        assert!(
            expired,
            "lock of a dropped client still alive after {took:?} (watchdog 1 s)"
        );
        // Let the kept lock live past its own TTL twice over.
        tokio::time::sleep(Duration::from_millis(1200)).await;
        let p = pttl(&mut conn, kept_lock.key()).await;
        assert!(p > 0 && p <= 1000, "kept lock PTTL {p}");
        assert!(!kept_guard.is_lost());
        kept_guard.unlock().await.expect("unlock kept");
        assert!(suite::keys_with_pttl(&mut conn).await.is_empty());
    })
    .await;
}

/// Dropping the last Client clone while a guard is still alive: the guard's lost() token is
/// cancelled (watchdog stopped) and the key is gone within the watchdog timeout + slack.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropped_client_cancels_lost_token() {
    let server = RedisServer::start();
    let c = client(
        &server,
        &suite::unique_ns("wd-droptok"),
        Duration::from_secs(1),
    )
    .await;
    let conn = server.conn().await;
    in_task(async move {
        let lock = c.lock("orphan");
        let key = lock.key().to_string();
        let guard = lock.lock().await.expect("lock");
        let token = guard.lost();
        drop(lock);
        drop(c);
        let t = Instant::now();
        tokio::time::timeout(Duration::from_millis(2500), token.cancelled())
            .await
            .expect("lost() not cancelled within 2.5 s of dropping the client");
        println!(
            "lost() cancelled {:?} after the client was dropped",
            t.elapsed()
        );
        assert!(guard.is_lost());
        let expired = suite::eventually(Duration::from_millis(2500), || {
            let mut c = conn.clone();
            let key = key.clone();
            async move { !exists(&mut c, &key).await }
        })
        .await;
        assert!(
            expired,
            "key still alive {:?} after client drop",
            t.elapsed()
        );
        drop(guard);
    })
    .await;
}

async fn lost_signal(by_force_unlock: bool) {
    let server = RedisServer::start();
    let ns = suite::unique_ns("wd-lost");
    let c = client(&server, &ns, Duration::from_secs(1)).await;
    let other = client(&server, &ns, Duration::from_secs(1)).await;
    let mut conn = server.conn().await;
    in_task(async move {
        let lock = c.lock("lost");
        let guard = lock.lock().await.expect("lock");
        let token = guard.lost();
        assert!(!guard.is_lost());
        let t = Instant::now();
        if by_force_unlock {
            assert!(other
                .lock("lost")
                .force_unlock()
                .await
                .expect("force_unlock"));
        } else {
            let n: i64 = redis::cmd("DEL")
                .arg(lock.key())
                .query_async(&mut conn)
                .await
                .unwrap();
            assert_eq!(n, 1);
        }
        tokio::time::timeout(Duration::from_millis(1500), token.cancelled())
            .await
            .expect("lost() not cancelled within 1.5 s (renewal period 333 ms)");
        println!(
            "lost() cancelled {:?} after the key was removed ({})",
            t.elapsed(),
            if by_force_unlock {
                "force_unlock"
            } else {
                "DEL"
            }
        );
        assert!(guard.is_lost());
        // The renewal must not have re-created the key.
        assert!(!exists(&mut conn, lock.key()).await);
        match guard.unlock().await {
            Err(Error::NotHeld { name }) => assert_eq!(name, "lost"),
            other => panic!("unlock of a lost lock: expected Err(NotHeld), got {other:?}"),
        }
        assert!(suite::keys_with_pttl(&mut conn).await.is_empty());
    })
    .await;
}

/// DEL of a held watchdog lock -> lost() cancelled within ~1 period, unlock -> NotHeld.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lost_signal_after_del() {
    lost_signal(false).await;
}

/// force_unlock from another client -> lost() cancelled within ~1 period, unlock -> NotHeld.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lost_signal_after_force_unlock() {
    lost_signal(true).await;
}

/// Lost lock taken over by another owner: the old guard is told, its unlock is NotHeld and
/// does not release the new owner's hold, and the new owner's lock is still renewed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lost_lock_taken_over_by_other_owner() {
    let server = RedisServer::start();
    let ns = suite::unique_ns("wd-take");
    let c = client(&server, &ns, Duration::from_secs(1)).await;
    let other = client(&server, &ns, Duration::from_secs(1)).await;
    let mut conn = server.conn().await;
    in_task(async move {
        let lock = c.lock("taken");
        let guard = lock.lock().await.expect("lock");
        let _: i64 = redis::cmd("DEL")
            .arg(lock.key())
            .query_async(&mut conn)
            .await
            .unwrap();
        let thief = other
            .lock("taken")
            .try_lock(Duration::ZERO, None)
            .await
            .or_none()
            .expect("try_lock")
            .expect("free after DEL");
        tokio::time::timeout(Duration::from_millis(1500), guard.lost().cancelled())
            .await
            .expect("lost() not cancelled although another owner holds the lock");
        assert!(matches!(guard.unlock().await, Err(Error::NotHeld { .. })));
        tokio::time::sleep(Duration::from_millis(1200)).await;
        let p = pttl(&mut conn, lock.key()).await;
        assert!(p > 0, "new owner's lock gone (PTTL {p})");
        assert!(!thief.is_lost());
        thief.unlock().await.expect("new owner unlock");
        assert!(!exists(&mut conn, lock.key()).await);
    })
    .await;
}

/// 1,000 held watchdog locks are renewed in batches: over 3 renewal periods the script
/// calls average <= 15 per period (and > 0), every key stays alive with a TTL, and after
/// unlocking all no key is left and renewals stop.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn thousand_locks_renewed_in_batches() {
    const N: usize = 1000;
    let server = RedisServer::start();
    let ns = suite::unique_ns("wd-batch");
    let c = client(&server, &ns, Duration::from_secs(3)).await;
    let mut conn = server.conn().await;
    in_task(async move {
        let locks: Vec<_> = (0..N).map(|i| c.lock(format!("batch-{i}"))).collect();
        let t = Instant::now();
        let mut guards = Vec::with_capacity(N);
        for chunk in locks.chunks(250) {
            for r in join_all(chunk.iter().map(|l| l.lock())).await {
                guards.push(r.expect("lock"));
            }
        }
        println!("acquired {N} watchdog locks in {:?}", t.elapsed());

        // Let the renewal schedule settle for one period (1 s), then measure 3 periods.
        tokio::time::sleep(Duration::from_millis(1200)).await;
        let c0 = suite::script_calls(&mut conn).await;
        tokio::time::sleep(Duration::from_secs(3)).await;
        let c1 = suite::script_calls(&mut conn).await;
        let delta = c1 - c0;
        println!(
            "renew script calls over 3 periods for {N} locks: {delta} ({:.1} per period)",
            delta as f64 / 3.0
        );
        assert!(delta >= 3, "no renewals measured ({delta} calls in 3 s)");
        assert!(
            delta <= 45,
            "renewals not batched: {delta} script calls over 3 periods for {N} locks"
        );

        let mut pipe = redis::pipe();
        for l in &locks {
            pipe.cmd("PTTL").arg(l.key());
        }
        let ttls: Vec<i64> = pipe.query_async(&mut conn).await.unwrap();
        for (l, p) in locks.iter().zip(&ttls) {
            assert!(
                *p > 0 && *p <= 3000,
                "lock {} has PTTL {p} after 4 s held",
                l.name()
            );
        }
        assert!(guards.iter().all(|g| !g.is_lost()), "a guard was lost");

        for r in join_all(guards.into_iter().map(|g| g.unlock())).await {
            r.expect("unlock");
        }
        let left = keys_matching(&mut conn, &format!("{ns}*")).await;
        assert!(left.is_empty(), "{} keys left after unlock", left.len());
        let u0 = suite::script_calls(&mut conn).await;
        tokio::time::sleep(Duration::from_millis(1500)).await;
        assert_eq!(
            suite::script_calls(&mut conn).await - u0,
            0,
            "renewals continue after all locks were released"
        );
    })
    .await;
}

/// A guard moved to another task and unlocked there: the key is deleted and renewals stop
/// (the watchdog entry follows the guard, not the task).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unlock_from_another_task_stops_renewal() {
    let server = RedisServer::start();
    let c = client(
        &server,
        &suite::unique_ns("wd-move"),
        Duration::from_secs(1),
    )
    .await;
    let mut conn = server.conn().await;
    in_task(async move {
        let lock = c.lock("moved");
        let guard = lock.lock().await.expect("lock");
        tokio::time::sleep(Duration::from_millis(500)).await;
        tokio::spawn(async move { guard.unlock().await })
            .await
            .unwrap()
            .expect("unlock from another task");
        assert!(!exists(&mut conn, lock.key()).await);
        let base = suite::script_calls(&mut conn).await;
        tokio::time::sleep(Duration::from_millis(1000)).await;
        assert_eq!(suite::script_calls(&mut conn).await - base, 0);
        assert!(!exists(&mut conn, lock.key()).await);
    })
    .await;
}

/// A lease lock is never renewed: no script calls while it is held, it expires after its
/// 1 s lease (its TTL is not extended), and its unlock afterwards is NotHeld.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lease_lock_is_not_renewed() {
    let server = RedisServer::start();
    let c = client(
        &server,
        &suite::unique_ns("wd-lease"),
        Duration::from_millis(600),
    )
    .await;
    let conn = server.conn().await;
    in_task(async move {
        let lock = c.lock("leased");
        let key = lock.key().to_string();
        let mut cc = conn.clone();
        // Warm the script cache (the first call of a script is EVALSHA + EVAL on NOSCRIPT).
        c.lock("warm-up")
            .lock_with_lease(Duration::from_secs(1))
            .await
            .expect("warm-up lock")
            .unlock()
            .await
            .expect("warm-up unlock");
        let base = suite::script_calls(&mut cc).await;
        let t0 = Instant::now();
        let guard = lock
            .lock_with_lease(Duration::from_secs(1))
            .await
            .expect("lock");
        assert_eq!(guard.lease(), Some(Duration::from_secs(1)));
        let p = pttl(&mut cc, &key).await;
        assert!(p > 600 && p <= 1000, "lease TTL {p}");
        let expired = suite::eventually(Duration::from_millis(2000), || {
            let mut c = conn.clone();
            let key = key.clone();
            async move { !exists(&mut c, &key).await }
        })
        .await;
        let took = t0.elapsed();
        assert!(expired, "1 s lease still alive after {took:?}");
        assert!(
            took >= Duration::from_millis(900),
            "lease lock gone early: {took:?}"
        );
        println!("1 s lease expired after {took:?}");
        // Only the lock script ran: no renewals of a lease lock.
        assert_eq!(suite::script_calls(&mut cc).await - base, 1);
        assert!(matches!(guard.unlock().await, Err(Error::NotHeld { .. })));
    })
    .await;
}

/// The holder's whole process is paused (as by SIGSTOP or a long GC) past the watchdog
/// timeout: no task runs, so no renewal is sent and the watchdog task cannot mark the guard.
/// When it resumes, `is_lost()` must already say so, before any task of the client ran.
#[test]
fn paused_holder_sees_is_lost_at_once_on_resume() {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let server = RedisServer::start();
    rt.block_on(async {
        let ns = suite::unique_ns("paused");
        let c = client(&server, &ns, Duration::from_secs(1)).await;
        let lock = c.lock("p");
        let g = tokio::spawn(async move { lock.lock().await.unwrap() })
            .await
            .unwrap();
        assert!(!g.is_lost());
        assert!(
            g.validity() > Duration::from_millis(500),
            "{:?}",
            g.validity()
        );
        // Block the only runtime thread: the watchdog cannot run.
        std::thread::sleep(Duration::from_millis(1200));
        assert!(g.is_lost(), "validity {:?} after the pause", g.validity());
        assert_eq!(g.validity(), Duration::ZERO);
        let _ = g.unlock().await;
    });
}

/// A lease hold says how long it is still valid, counted from when its lock call was sent.
#[tokio::test]
async fn lease_guard_validity_counts_down_from_send() {
    let server = RedisServer::start();
    let ns = suite::unique_ns("lease-validity");
    let c = client(&server, &ns, Duration::from_secs(30)).await;
    let lock = c.lock("p");
    in_task(async move {
        let before = Instant::now();
        let g = lock.lock_with_lease(Duration::from_secs(2)).await.unwrap();
        let v = g.validity();
        // 2 s less a 100 ms margin, less what passed since the call was sent.
        assert!(v <= Duration::from_millis(1900), "{v:?}");
        assert!(v >= Duration::from_millis(1900) - before.elapsed(), "{v:?}");
        tokio::time::sleep(Duration::from_millis(1000)).await;
        assert!(g.validity() <= Duration::from_millis(900));
        assert!(!g.is_lost());
        tokio::time::sleep(Duration::from_millis(950)).await;
        assert!(g.is_lost(), "the lease ran out: {:?}", g.validity());
        let _ = g.unlock().await;
    })
    .await;
}

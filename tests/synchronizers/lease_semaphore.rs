//! `LeaseSemaphore` against real redis-servers: permit accounting checked from many tasks over
//! several clients, leases that run out (also of a SIGKILLed holder process) freeing waiters
//! without any release, `update_lease` and release by id, cancellation at every phase, a
//! killed subscription connection and SCRIPT FLUSH while waiting, bad input; after each: no
//! key without a TTL, no channel left subscribed.

use std::future::Future;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use suite::OrNone;

use lockwise::{Client, Error, LeaseSemaphore};
use suite::child::ChildProc;
use suite::{Conn, RedisServer};

/// A lease far longer than any test: a waiter served well before it was served by pub/sub.
const LONG: Duration = Duration::from_secs(60);

async fn clients(server: &RedisServer, test: &str, n: usize) -> Vec<Client> {
    let ns = suite::unique_ns(test);
    let mut out = Vec::new();
    for _ in 0..n {
        out.push(suite::client(server, &ns, Duration::from_secs(5)).await);
    }
    out
}

/// Every key under `ns` has a TTL and, soon, no channel is subscribed.
async fn assert_tidy(conn: &mut Conn, ns: &str) {
    suite::kit::assert_ns_clean(conn, ns).await;
    assert!(
        suite::no_channels_within(conn, Duration::from_secs(3)).await,
        "channels left subscribed: {:?}",
        suite::active_channels(conn).await
    );
}

async fn pttl(conn: &mut Conn, key: &str) -> i64 {
    redis::cmd("PTTL").arg(key).query_async(conn).await.unwrap()
}

/// Awaits `fut` for at most `secs` seconds.
async fn within<F: Future>(secs: u64, fut: F) -> F::Output {
    tokio::time::timeout(Duration::from_secs(secs), fut)
        .await
        .expect("did not finish in time")
}

/// Polls `fut` `polls` times (yielding between), then drops it.
async fn poll_then_drop<F: Future>(fut: F, polls: u32) -> Option<F::Output> {
    tokio::pin!(fut);
    for _ in 0..polls {
        if let Some(out) = futures::FutureExt::now_or_never(fut.as_mut()) {
            return Some(out);
        }
        tokio::task::yield_now().await;
    }
    None
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sets_adds_acquires_and_releases_by_id() {
    let server = RedisServer::start();
    let c = &clients(&server, "lsem-basics", 1).await[0];
    let mut conn = server.conn().await;
    let sem = c.lease_semaphore("pool");
    assert_eq!(sem.available_permits().await.unwrap(), 0, "unset: 0");
    assert!(
        sem.try_acquire(Duration::ZERO, LONG)
            .await
            .or_none()
            .unwrap()
            .is_none(),
        "nothing to take from an unset semaphore"
    );
    assert!(sem.try_set_permits(2).await.unwrap());
    assert!(!sem.try_set_permits(5).await.unwrap(), "set once");
    assert_eq!(sem.available_permits().await.unwrap(), 2);
    assert_eq!(sem.add_permits(1).await.unwrap(), 3);
    assert_eq!(sem.add_permits(-1).await.unwrap(), 2);
    let idle = pttl(&mut conn, sem.key()).await;
    assert!(
        idle > 23 * 3600 * 1000,
        "the count key lives the idle TTL: {idle}"
    );

    let a = sem.acquire(Duration::from_secs(30)).await.unwrap();
    let b = sem
        .try_acquire(Duration::ZERO, LONG)
        .await
        .or_none()
        .unwrap()
        .unwrap();
    assert_ne!(a.id(), b.id());
    assert_eq!(a.id().len(), 36, "a UUID as text: {}", a.id());
    assert_eq!(sem.available_permits().await.unwrap(), 0);
    assert_eq!(sem.leased_permits().await.unwrap(), 2);
    assert!(sem
        .try_acquire(Duration::from_millis(50), LONG)
        .await
        .or_none()
        .unwrap()
        .is_none());
    let leases = pttl(&mut conn, sem.leases_key()).await;
    let count = pttl(&mut conn, sem.key()).await;
    assert!(
        leases > 0 && (count - leases).abs() < 1_000,
        "the leases key expires with the count key: {leases} vs {count}"
    );

    // By id: released once; a second time, or an id that was never ours, is false.
    let id = b.into_id();
    assert!(sem.release(&id).await.unwrap());
    assert!(!sem.release(&id).await.unwrap());
    assert!(!sem.release("not-an-id").await.unwrap());
    assert!(!sem.update_lease("not-an-id", LONG).await.unwrap());
    assert_eq!(sem.available_permits().await.unwrap(), 1);
    a.release().await.unwrap();
    assert_eq!(sem.available_permits().await.unwrap(), 2);
    assert_eq!(sem.leased_permits().await.unwrap(), 0);
    assert!(!suite::exists(&mut conn, sem.leases_key()).await);

    // All or none: 3 of 2 is not granted; 2 of 2 is, each with its own id.
    assert!(sem
        .try_acquire_many(3, Duration::from_millis(50), LONG)
        .await
        .or_none()
        .unwrap()
        .is_none());
    let two = sem.acquire_many(2, LONG).await.unwrap();
    assert_eq!(two.len(), 2);
    assert_ne!(two[0].id(), two[1].id());
    assert_eq!(sem.available_permits().await.unwrap(), 0);
    // Dropped: released in the background.
    drop(two);
    let sem2 = sem.clone();
    assert!(
        suite::eventually(Duration::from_secs(2), move || {
            let s = sem2.clone();
            async move { s.available_permits().await.unwrap() == 2 }
        })
        .await
    );
    assert_tidy(&mut conn, c.namespace()).await;
}

/// Many tasks over three clients take 1 or 2 permits at a time; at every instant the permits
/// held (counted by the tasks themselves, between the grant and the release) stay within the
/// total, every acquisition is served, and at the end all permits are back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn permit_accounting_under_contention_over_several_clients() {
    const TOTAL: u64 = 3;
    const ROUNDS: usize = 15;
    let server = RedisServer::start();
    let cs = clients(&server, "lsem-accounting", 3).await;
    let mut conn = server.conn().await;
    assert!(cs[0]
        .lease_semaphore("acct")
        .try_set_permits(TOTAL)
        .await
        .unwrap());
    let held = Arc::new(AtomicI64::new(0));
    let max_seen = Arc::new(AtomicI64::new(0));
    let granted = Arc::new(AtomicU64::new(0));
    let before = suite::script_calls(&mut conn).await;
    let mut tasks = Vec::new();
    for t in 0..12 {
        let sem = cs[t % cs.len()].lease_semaphore("acct");
        let (held, max_seen, granted) = (held.clone(), max_seen.clone(), granted.clone());
        let k = if t % 4 == 3 { 2 } else { 1 };
        tasks.push(tokio::spawn(async move {
            for _ in 0..ROUNDS {
                let permits = sem.acquire_many(k, LONG).await.unwrap();
                let now = held.fetch_add(k as i64, Ordering::SeqCst) + k as i64;
                max_seen.fetch_max(now, Ordering::SeqCst);
                assert!(now <= TOTAL as i64, "{now} permits held of {TOTAL}");
                granted.fetch_add(1, Ordering::SeqCst);
                tokio::time::sleep(Duration::from_millis(1)).await;
                held.fetch_sub(k as i64, Ordering::SeqCst);
                for p in permits {
                    p.release().await.unwrap();
                }
            }
        }));
    }
    for t in tasks {
        within(120, t).await.unwrap();
    }
    let calls = suite::script_calls(&mut conn).await - before;
    let acquisitions = granted.load(Ordering::SeqCst);
    assert_eq!(acquisitions, 12 * ROUNDS as u64);
    println!(
        "{acquisitions} acquisitions, {calls} script calls ({:.2} per acquisition incl. releases), max held {}",
        calls as f64 / acquisitions as f64,
        max_seen.load(Ordering::SeqCst)
    );
    assert!(max_seen.load(Ordering::SeqCst) >= 2, "there was contention");
    let sem = cs[1].lease_semaphore("acct");
    assert_eq!(sem.available_permits().await.unwrap(), TOTAL as i64);
    assert_eq!(sem.leased_permits().await.unwrap(), 0);
    assert_tidy(&mut conn, cs[0].namespace()).await;
}

/// A permit whose lease runs out comes back by itself: a waiter in another client gets it
/// without any release, at about the lease's end (well before its own timeout), and the
/// expired id can no longer be released or extended.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn expired_lease_frees_a_waiter_without_a_release() {
    let server = RedisServer::start();
    let cs = clients(&server, "lsem-expiry", 2).await;
    let mut conn = server.conn().await;
    let sem = cs[0].lease_semaphore("exp");
    assert!(sem.try_set_permits(1).await.unwrap());
    let lost = sem.acquire(Duration::from_millis(400)).await.unwrap();
    let waiter = cs[1].lease_semaphore("exp");
    let t = Instant::now();
    let got = waiter
        .try_acquire(Duration::from_secs(20), LONG)
        .await
        .or_none()
        .unwrap()
        .expect("the expired permit is handed out");
    let waited = t.elapsed();
    assert!(
        waited >= Duration::from_millis(300) && waited < Duration::from_secs(3),
        "served at the lease's end: {waited:?}"
    );
    // The lost holder finds out; nothing changes.
    assert!(!sem.update_lease(lost.id(), LONG).await.unwrap());
    assert!(matches!(
        lost.update_lease(LONG).await,
        Err(Error::NotHeld { .. })
    ));
    assert!(!sem.release(lost.id()).await.unwrap());
    assert!(matches!(lost.release().await, Err(Error::NotHeld { .. })));
    assert_eq!(
        sem.available_permits().await.unwrap(),
        0,
        "the waiter holds it"
    );
    got.release().await.unwrap();
    assert_eq!(sem.available_permits().await.unwrap(), 1);
    assert_tidy(&mut conn, cs[0].namespace()).await;
}

/// A holder process SIGKILLed while holding a permit: the permit comes back after its lease,
/// and a waiter gets it without any release, well before its own timeout.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killed_holder_permit_comes_back_after_its_lease() {
    let server = RedisServer::start();
    let c = &clients(&server, "lsem-crash", 1).await[0];
    let mut conn = server.conn().await;
    let sem = c.lease_semaphore("crash");
    assert!(sem.try_set_permits(1).await.unwrap());
    let mut child = ChildProc::spawn(
        "lease-holder",
        server.url(),
        c.namespace(),
        "child",
        &[
            ("LOCKWISE_FP_LOCK", "crash".to_string()),
            ("LOCKWISE_FP_LEASE_MS", "1500".to_string()),
        ],
    );
    let line = child.wait_line("@acquired", Duration::from_secs(60)).await;
    let acquired = Instant::now();
    let id = line.trim_start_matches("@acquired ").trim().to_string();
    child.sigkill();
    assert_eq!(sem.available_permits().await.unwrap(), 0);
    let permit = sem
        .try_acquire(Duration::from_secs(30), LONG)
        .await
        .or_none()
        .unwrap()
        .expect("the killed holder's permit comes back");
    let after = acquired.elapsed();
    assert!(
        after >= Duration::from_millis(1000) && after < Duration::from_secs(5),
        "served after the child's lease, well before the timeout: {after:?}"
    );
    assert!(
        !sem.release(&id).await.unwrap(),
        "the dead holder's id is gone"
    );
    permit.release().await.unwrap();
    assert_eq!(sem.available_permits().await.unwrap(), 1);
    assert_tidy(&mut conn, c.namespace()).await;
}

/// `update_lease` moves the deadline: the permit does not expire at the old one, and expires
/// at the new one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn update_lease_extends_the_permit() {
    let server = RedisServer::start();
    let c = &clients(&server, "lsem-update", 1).await[0];
    let mut conn = server.conn().await;
    let sem = c.lease_semaphore("upd");
    assert!(sem.try_set_permits(1).await.unwrap());
    let p = sem.acquire(Duration::from_millis(300)).await.unwrap();
    p.update_lease(Duration::from_millis(1500)).await.unwrap();
    tokio::time::sleep(Duration::from_millis(600)).await;
    assert_eq!(
        sem.available_permits().await.unwrap(),
        0,
        "not expired at the old deadline"
    );
    assert!(sem
        .update_lease(p.id(), Duration::from_millis(300))
        .await
        .unwrap());
    let t = Instant::now();
    let next = sem
        .try_acquire(Duration::from_secs(10), LONG)
        .await
        .or_none()
        .unwrap()
        .expect("expires at the new deadline");
    assert!(t.elapsed() < Duration::from_secs(2), "{:?}", t.elapsed());
    assert!(matches!(p.release().await, Err(Error::NotHeld { .. })));
    assert_eq!(sem.available_permits().await.unwrap(), 0);
    next.release().await.unwrap();
    assert_eq!(sem.available_permits().await.unwrap(), 1);
    assert_tidy(&mut conn, c.namespace()).await;
}

/// Released permits wake waiters by pub/sub, in this client and in others; a release of
/// several permits (`add_permits`) serves several waiters; a waiter for 2 that cannot use a
/// single free permit passes the wakeup to a local waiter for 1.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn releases_wake_waiters_and_wakeups_are_passed_on() {
    let server = RedisServer::start();
    let cs = clients(&server, "lsem-wake", 2).await;
    let mut conn = server.conn().await;
    let sem = cs[0].lease_semaphore("wake");
    assert!(sem.try_set_permits(0).await.unwrap());
    let mut waiters = Vec::new();
    for i in 0..4 {
        let s = cs[i % 2].lease_semaphore("wake");
        waiters.push(tokio::spawn(async move { s.acquire(LONG).await.unwrap() }));
    }
    let channel_ready = suite::eventually(Duration::from_secs(5), || {
        let mut c = conn.clone();
        async move { suite::active_channels(&mut c).await.len() == 1 }
    })
    .await;
    assert!(channel_ready);
    tokio::time::sleep(Duration::from_millis(100)).await;
    let t = Instant::now();
    assert_eq!(sem.add_permits(4).await.unwrap(), 4);
    let mut permits = Vec::new();
    for w in waiters {
        permits.push(within(5, w).await.unwrap());
    }
    assert!(t.elapsed() < Duration::from_secs(3), "{:?}", t.elapsed());
    assert_eq!(sem.available_permits().await.unwrap(), 0);

    // A waiter for 2 first, then one for 1, both in client 0; one permit comes free.
    let s2 = cs[0].lease_semaphore("wake");
    let big = tokio::spawn(async move { s2.acquire_many(2, LONG).await.unwrap() });
    tokio::time::sleep(Duration::from_millis(200)).await;
    let s1 = cs[0].lease_semaphore("wake");
    let small = tokio::spawn(async move { s1.acquire(LONG).await.unwrap() });
    tokio::time::sleep(Duration::from_millis(200)).await;
    // Released by the other client: one message, one wakeup in client 0.
    let p = permits.pop().unwrap();
    assert!(cs[1].lease_semaphore("wake").release(p.id()).await.unwrap());
    let _ = p.into_id();
    let one = within(3, small).await.unwrap();
    assert!(!big.is_finished());
    drop(one);
    for p in permits.drain(..) {
        p.release().await.unwrap();
    }
    let two = within(5, big).await.unwrap();
    assert_eq!(two.len(), 2);
    drop(two);
    let s = sem.clone();
    assert!(
        suite::eventually(Duration::from_secs(3), move || {
            let s = s.clone();
            async move { s.available_permits().await.unwrap() == 4 }
        })
        .await
    );
    assert_tidy(&mut conn, cs[0].namespace()).await;
}

/// Cancellation at every phase: before the first poll (nothing sent), while waiting (no
/// subscription left, the wakeup passed on), and right after the script ran (a grant nobody
/// awaits is released in the background). No permit leaks.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancelled_acquires_leak_nothing() {
    let server = RedisServer::start();
    let c = &clients(&server, "lsem-cancel", 1).await[0];
    let mut conn = server.conn().await;
    let sem = c.lease_semaphore("cx");
    assert!(sem.try_set_permits(1).await.unwrap());

    // Before the first poll: no script call.
    let before = suite::script_calls(&mut conn).await;
    drop(sem.acquire(LONG));
    drop(sem.try_acquire(LONG, LONG));
    drop(sem.acquire_many(1, LONG));
    assert_eq!(suite::script_calls(&mut conn).await - before, 0);

    // While waiting: the subscription goes, the permit stays with its holder.
    let held = sem.acquire(LONG).await.unwrap();
    let s = sem.clone();
    let waiter = tokio::spawn(async move { s.acquire(LONG).await });
    assert!(
        suite::eventually(Duration::from_secs(5), || {
            let mut c = conn.clone();
            async move { suite::active_channels(&mut c).await.len() == 1 }
        })
        .await
    );
    waiter.abort();
    assert!(waiter.await.unwrap_err().is_cancelled());
    assert!(suite::no_channels_within(&conn, Duration::from_secs(3)).await);
    held.release().await.unwrap();
    assert_eq!(sem.available_permits().await.unwrap(), 1);

    // Right after the script was sent, at many points: whatever was granted comes back.
    for polls in 0..40u32 {
        let got = poll_then_drop(sem.acquire(LONG), polls % 8 + 1).await;
        if let Some(p) = got {
            p.unwrap().release().await.unwrap();
        }
        if polls % 3 == 0 {
            tokio::time::sleep(Duration::from_micros(200 * u64::from(polls))).await;
        }
    }
    let s = sem.clone();
    assert!(
        suite::eventually(Duration::from_secs(3), move || {
            let s = s.clone();
            async move {
                s.available_permits().await.unwrap() == 1 && s.leased_permits().await.unwrap() == 0
            }
        })
        .await,
        "a cancelled acquire kept a permit"
    );
    assert_tidy(&mut conn, c.namespace()).await;
}

/// A killed subscription connection, then SCRIPT FLUSH, while tasks wait: both waiters are
/// still served by the releases (long before the holders' leases would free them).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiters_survive_a_killed_subscription_and_script_flush() {
    let server = RedisServer::start();
    let cs = clients(&server, "lsem-faults", 2).await;
    let mut conn = server.conn().await;
    let sem = cs[0].lease_semaphore("faults");
    assert!(sem.try_set_permits(2).await.unwrap());
    let a = sem.acquire(LONG).await.unwrap();
    let b = sem.acquire(LONG).await.unwrap();
    let mut waiters = Vec::new();
    for _ in 0..2 {
        let s = cs[1].lease_semaphore("faults");
        waiters.push(tokio::spawn(async move { s.acquire(LONG).await.unwrap() }));
    }
    let channel = {
        let mut found = Vec::new();
        for _ in 0..100 {
            found = suite::active_channels(&mut conn).await;
            if !found.is_empty() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        found.pop().expect("the waiters subscribed")
    };
    let _: () = redis::cmd("SCRIPT")
        .arg("FLUSH")
        .query_async(&mut conn)
        .await
        .unwrap();
    let _: i64 = suite::kill_pubsub(&mut conn).await;
    assert!(suite::numsub_until(&conn, &channel, Duration::from_secs(5), |n| n >= 1).await);
    let t = Instant::now();
    a.release().await.unwrap();
    b.release().await.unwrap();
    let mut got = Vec::new();
    for w in waiters {
        got.push(within(10, w).await.unwrap());
    }
    assert!(t.elapsed() < Duration::from_secs(8), "{:?}", t.elapsed());
    for p in got {
        p.release().await.unwrap();
    }
    assert_eq!(sem.available_permits().await.unwrap(), 2);
    assert_tidy(&mut conn, cs[0].namespace()).await;
}

fn invalid<T: std::fmt::Debug>(r: lockwise::Result<T>, argument: &str) {
    match r {
        Err(Error::InvalidArgument { argument: a, .. }) => assert_eq!(a, argument),
        other => panic!("expected InvalidArgument({argument}), got {other:?}"),
    }
}

/// Bad input is a typed error and changes nothing; a key of the wrong type at the name is a
/// Redis WRONGTYPE error and changes nothing either.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_input_is_refused_and_changes_nothing() {
    let server = RedisServer::start();
    let c = &clients(&server, "lsem-bad", 1).await[0];
    let mut conn = server.conn().await;
    let sem = c.lease_semaphore("bad");
    let huge = Duration::from_millis((1u64 << 53) + 1);
    let before = suite::script_calls(&mut conn).await;
    invalid(sem.try_set_permits((1 << 53) + 1).await, "permits");
    invalid(sem.add_permits(i64::MIN).await, "delta");
    invalid(sem.add_permits((1 << 53) + 1).await, "delta");
    invalid(sem.acquire(Duration::ZERO).await, "lease");
    invalid(sem.acquire(Duration::from_micros(999)).await, "lease");
    invalid(
        sem.try_acquire(Duration::ZERO, huge).await.or_none(),
        "lease",
    );
    invalid(sem.acquire_many(0, LONG).await, "permits");
    invalid(
        sem.acquire_many(LeaseSemaphore::MAX_ACQUIRE_MANY + 1, LONG)
            .await,
        "permits",
    );
    invalid(sem.update_lease("x", Duration::ZERO).await, "lease");
    let no_idle = sem.clone().with_idle_ttl(Duration::ZERO);
    invalid(no_idle.try_set_permits(1).await, "idle_ttl");
    invalid(no_idle.available_permits().await, "idle_ttl");
    let unnamed = c.lease_semaphore("");
    invalid(unnamed.try_set_permits(1).await, "name");
    invalid(unnamed.release("x").await, "name");
    assert_eq!(
        suite::script_calls(&mut conn).await - before,
        0,
        "nothing sent"
    );

    // A state-dependent refusal: below zero.
    assert!(sem.try_set_permits(2).await.unwrap());
    invalid(sem.add_permits(-3).await, "delta");
    assert_eq!(sem.available_permits().await.unwrap(), 2, "unchanged");
    assert_eq!(
        sem.add_permits(-2).await.unwrap(),
        0,
        "down to zero is fine"
    );
    assert_eq!(sem.add_permits(2).await.unwrap(), 2);

    // Wrong key types at the count key and at the leases key.
    for (name, key_of) in [("wt-count", 0), ("wt-leases", 1)] {
        let s = c.lease_semaphore(name);
        let key = if key_of == 0 { s.key() } else { s.leases_key() }.to_string();
        let _: () = redis::cmd("RPUSH")
            .arg(&key)
            .arg("x")
            .query_async(&mut conn)
            .await
            .unwrap();
        let _: () = redis::cmd("PEXPIRE")
            .arg(&key)
            .arg(60_000)
            .query_async(&mut conn)
            .await
            .unwrap();
        let dump = |mut conn: Conn, key: String| async move {
            let v: Vec<String> = redis::cmd("LRANGE")
                .arg(&key)
                .arg(0)
                .arg(-1)
                .query_async(&mut conn)
                .await
                .unwrap();
            v
        };
        for r in [
            s.try_set_permits(1).await.map(|_| ()),
            s.add_permits(1).await.map(|_| ()),
            s.available_permits().await.map(|_| ()),
            s.try_acquire(Duration::ZERO, LONG)
                .await
                .or_none()
                .map(|_| ()),
            s.release("x").await.map(|_| ()),
            s.update_lease("x", LONG).await.map(|_| ()),
        ] {
            match r {
                Err(Error::Redis(e)) => assert_eq!(e.code(), Some("WRONGTYPE"), "{e}"),
                other => panic!("{name}: expected WRONGTYPE, got {other:?}"),
            }
        }
        assert_eq!(dump(conn.clone(), key.clone()).await, vec!["x".to_string()]);
        let other = if key_of == 0 { s.leases_key() } else { s.key() };
        assert!(
            !suite::exists(&mut conn, other).await,
            "{name}: nothing written"
        );
        let _: () = redis::cmd("DEL")
            .arg(&key)
            .query_async(&mut conn)
            .await
            .unwrap();
    }
    assert_tidy(&mut conn, c.namespace()).await;
}

/// The idle TTL: every write raises the count key's TTL to at least the handle's setting,
/// and never below the latest lease; a forgotten semaphore can be set again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_ttl_keeps_the_count_key_past_the_latest_lease() {
    let server = RedisServer::start();
    let c = &clients(&server, "lsem-idle", 1).await[0];
    let mut conn = server.conn().await;
    let sem = c
        .lease_semaphore("idle")
        .with_idle_ttl(Duration::from_millis(400));
    assert!(sem.try_set_permits(2).await.unwrap());
    let ttl = pttl(&mut conn, sem.key()).await;
    assert!(ttl > 0 && ttl <= 400, "{ttl}");
    let p = sem.acquire(Duration::from_secs(5)).await.unwrap();
    let ttl = pttl(&mut conn, sem.key()).await;
    assert!(ttl > 4_000, "not below the latest lease: {ttl}");
    p.release().await.unwrap();
    // Idle: forgotten after the latest lease and the idle TTL.
    let key = sem.key().to_string();
    assert!(
        suite::eventually(Duration::from_secs(8), || {
            let mut c = conn.clone();
            let key = key.clone();
            async move { !suite::exists(&mut c, &key).await }
        })
        .await,
        "an idle semaphore is forgotten"
    );
    assert!(
        sem.try_set_permits(1).await.unwrap(),
        "and can be set again"
    );
    assert_tidy(&mut conn, c.namespace()).await;
}

/// No unbounded sleep: a waiter whose wakeup never comes (a lease removed behind the
/// semaphore's back, with no message) looks again within the client's watchdog timeout
/// (1 s here), not at the remaining lease (60 s) or the idle TTL (24 h).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_that_misses_its_wakeup_is_served_within_the_watchdog_timeout() {
    let server = RedisServer::start();
    let ns = suite::unique_ns("lsem-nowake");
    let client = suite::client(&server, &ns, Duration::from_secs(1)).await;
    let sem = client.lease_semaphore("quiet");
    assert!(sem.try_set_permits(1).await.unwrap());
    let held = sem.acquire(LONG).await.unwrap().into_id();
    let waiter = tokio::spawn({
        let sem = sem.clone();
        async move {
            sem.acquire(LONG)
                .await
                .map(|p| (p.into_id(), Instant::now()))
        }
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    let mut conn = server.conn().await;
    let freed = Instant::now();
    let _: () = redis::pipe()
        .cmd("ZREM")
        .arg(sem.leases_key())
        .arg(&held)
        .ignore()
        .cmd("INCR")
        .arg(sem.key())
        .ignore()
        .query_async(&mut conn)
        .await
        .unwrap();
    let (id, served) = within(10, waiter).await.unwrap().unwrap();
    let after = served - freed;
    eprintln!("served {after:?} after a permit came back without a wakeup");
    assert!(after < Duration::from_secs(3), "{after:?}");
    assert!(sem.release(&id).await.unwrap());
}

/// A permit's `lost()` fires when its lease runs out, and an `update_lease` moves it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn permit_lost_fires_at_its_lease_end() {
    let server = RedisServer::start();
    let c = clients(&server, "lsem-lost", 1).await.remove(0);
    let sem = c.lease_semaphore("lost");
    assert!(sem.try_set_permits(2).await.unwrap());
    let lease = Duration::from_millis(600);
    let started = Instant::now();
    let p = sem.acquire(lease).await.unwrap();
    assert_eq!(p.lease(), lease);
    assert!(p.validity() > Duration::ZERO && !p.is_lost());
    within(3, p.lost().cancelled()).await;
    let fired = started.elapsed();
    assert!(p.is_lost() && p.validity().is_zero());
    assert!(fired >= Duration::from_millis(300) && fired <= lease + Duration::from_millis(500));
    eprintln!("lost() fired {fired:?} after a {lease:?} lease");

    // Extended halfway: it fires at the new end, not the old one.
    let started = Instant::now();
    let p = sem.acquire(lease).await.unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    p.update_lease(Duration::from_secs(1)).await.unwrap();
    assert_eq!(p.lease(), Duration::from_secs(1));
    within(3, p.lost().cancelled()).await;
    let fired = started.elapsed();
    assert!(fired >= Duration::from_millis(1000), "{fired:?}");
    eprintln!("after update_lease(1 s) at 300 ms, lost() fired {fired:?} after the acquire");
}

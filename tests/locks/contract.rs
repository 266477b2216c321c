//! The contract every lock kind offers ([`Lock`], [`LockGuard`], `run` / `try_run`), checked
//! through generic code on every kind against a real server, and the method table of the
//! docs kept true.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use lockwise::{Client, Error, Lock, LockGuard, RedLockSet};
use suite::kit::{in_task, within};
use suite::RedisServer;

/// Two clients (two identities) on one namespace, and a Redlock set of three clients on
/// three namespaces of the same server (three independent keyspaces as far as the
/// algorithm is concerned).
struct Fixture {
    a: Client,
    b: Client,
    set_a: RedLockSet,
    set_b: RedLockSet,
}

async fn fixture(server: &RedisServer, test: &str) -> Fixture {
    let ns = suite::unique_ns(test);
    let build = |ns: String| async move {
        Client::builder(server.url())
            .namespace(ns)
            .watchdog_timeout(Duration::from_secs(1))
            .build()
            .await
            .expect("client")
    };
    let (a, b) = (build(ns.clone()).await, build(ns.clone()).await);
    let mut nodes_a = Vec::new();
    let mut nodes_b = Vec::new();
    for i in 0..3 {
        nodes_a.push(build(format!("{ns}-n{i}")).await);
        nodes_b.push(build(format!("{ns}-n{i}")).await);
    }
    // A 1.5 s Redlock TTL: extensions every 500 ms, so a loss shows within a second.
    let options = || suite::redlock_options(Duration::from_millis(1500));
    Fixture {
        a,
        b,
        set_a: RedLockSet::with_options(&nodes_a, options()),
        set_b: RedLockSet::with_options(&nodes_b, options()),
    }
}

/// Runs `check` on every kind: a handle of client A and the same lock through client B.
macro_rules! every_kind {
    ($fx:expr, $name:expr, $check:ident) => {{
        let fx = &$fx;
        let n = $name;
        $check("RLock", fx.a.lock(n), fx.b.lock(n)).await;
        let sn = format!("{n}-s");
        $check("SpinLock", fx.a.spin_lock(&sn), fx.b.spin_lock(&sn)).await;
        $check("FairLock", fx.a.fair_lock(n), fx.b.fair_lock(n)).await;
        $check("FencedLock", fx.a.fenced_lock(n), fx.b.fenced_lock(n)).await;
        let wn = format!("{n}-w");
        $check(
            "WriteLock",
            fx.a.rw_lock(&wn).write(),
            fx.b.rw_lock(&wn).write(),
        )
        .await;
        let multi = [format!("{n}-m1"), format!("{n}-m2")];
        $check(
            "MultiLock",
            fx.a.multi_lock(&multi),
            fx.b.multi_lock(&multi),
        )
        .await;
        $check("RedLock", fx.set_a.lock(n), fx.set_b.lock(n)).await;
    }};
}

/// Every method of the contract, through generic code only: acquire, the inspection while
/// held, another owner's `try_lock` timing out with `Error::Timeout`, release, and
/// `force_unlock` of a hold whose guard then reports `NotHeld`.
async fn full_contract<L: Lock>(kind: &'static str, mine: L, theirs: L) {
    let report = in_task(async move {
        assert!(!mine.is_locked().await.unwrap(), "{kind}: free at first");
        assert_eq!(mine.remaining_ttl().await.unwrap(), None, "{kind}");
        let g = mine
            .try_lock(Duration::ZERO, None)
            .await
            .expect("free lock");
        assert_eq!(g.name(), mine.name(), "{kind}");
        assert!(
            !g.owner().is_empty() && g.lease().is_none() && !g.is_lost(),
            "{kind}"
        );
        assert!(g.validity() > Duration::ZERO, "{kind}");
        assert!(mine.is_locked().await.unwrap(), "{kind}: locked");
        assert_eq!(mine.hold_count().await.unwrap(), 1, "{kind}: one hold");
        let ttl = mine.remaining_ttl().await.unwrap().expect("a TTL");
        assert!(ttl <= Duration::from_millis(1500), "{kind}: {ttl:?}");
        // Another owner waits in vain: a typed timeout, not a failure.
        let other = tokio::spawn({
            let theirs = theirs.clone();
            async move { theirs.try_lock(Duration::from_millis(150), None).await }
        })
        .await
        .unwrap();
        let err = other.err().expect("held by another owner");
        assert!(err.is_timeout() && !err.is_retryable(), "{kind}: {err:?}");
        assert!(matches!(err, Error::Timeout { .. }), "{kind}: {err:?}");
        g.unlock().await.expect("unlock");
        assert!(!mine.is_locked().await.unwrap(), "{kind}: released");

        // force_unlock takes a hold away; its guard's unlock is then NotHeld.
        let g = mine.lock_with_lease(Duration::from_secs(30)).await.unwrap();
        assert_eq!(g.lease(), Some(Duration::from_secs(30)), "{kind}");
        assert!(theirs.force_unlock().await.unwrap(), "{kind}: was locked");
        assert!(
            !theirs.force_unlock().await.unwrap(),
            "{kind}: nothing left"
        );
        let err = g.unlock().await.expect_err("forced away");
        assert!(err.is_not_held(), "{kind}: {err:?}");
        assert!(!mine.is_locked().await.unwrap(), "{kind}");
        kind
    })
    .await;
    eprintln!("{report}: contract ok");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_kind_keeps_the_contract() {
    let server = RedisServer::start();
    let fx = fixture(&server, "contract").await;
    every_kind!(fx, "c", full_contract);
    // The read side of an RwLock: shared, so the other owner's wait times out only while a
    // writer holds it.
    let rw_a = fx.a.rw_lock("c-rw");
    let rw_b = fx.b.rw_lock("c-rw");
    let (read_a, read_b, write_b) = (rw_a.read(), rw_b.read(), rw_b.write());
    in_task(async move {
        let r = read_a.try_lock(Duration::ZERO, None).await.unwrap();
        assert!(read_a.is_locked().await.unwrap() && rw_a.is_locked().await.unwrap());
        assert_eq!(read_a.hold_count().await.unwrap(), 1);
        let shared = tokio::spawn(async move {
            let g = read_b.try_lock(Duration::ZERO, None).await.unwrap();
            g.unlock().await.unwrap();
        });
        shared.await.unwrap();
        let err = write_b
            .try_lock(Duration::from_millis(100), None)
            .await
            .expect_err("a reader holds it");
        assert!(err.is_timeout(), "{err:?}");
        assert!(write_b.force_unlock().await.unwrap());
        assert!(r.unlock().await.unwrap_err().is_not_held());
        assert!(!rw_a.is_locked().await.unwrap());
    })
    .await;
}

/// `run` on every kind: the body runs under the lock, gets the hold's name and owner (and
/// a fenced lock's token), its value comes back, and the lock is free afterwards.
async fn run_returns_the_body<L: Lock>(kind: &'static str, mine: L, theirs: L) {
    in_task(async move {
        // The body returns what it saw rather than asserting with `kind` inside it: a
        // borrowed `&'static str` captured in the body of generic code is more than Rust
        // 1.88 (the MSRV) can prove `Send` in a spawned task.
        let probe = theirs.clone();
        let (name, token, held_in_body) = mine
            .run(|held| async move {
                assert!(!held.lost.is_cancelled());
                (held.name, held.token, probe.is_locked().await.unwrap())
            })
            .await
            .expect("run");
        assert!(held_in_body, "{kind}: held in the body");
        assert_eq!(name, mine.name(), "{kind}");
        assert_eq!(token.is_some(), kind == "FencedLock", "{kind}");
        assert!(
            !mine.is_locked().await.unwrap(),
            "{kind}: released after the body"
        );
        // try_run gives up on a held lock without running the body.
        let g = theirs.lock().await.unwrap();
        let ran = Arc::new(AtomicBool::new(false));
        let flag = ran.clone();
        let err = mine
            .try_run(Duration::from_millis(100), None, |_| async move {
                flag.store(true, Ordering::SeqCst);
            })
            .await
            .expect_err("held");
        assert!(
            err.is_timeout() && !ran.load(Ordering::SeqCst),
            "{kind}: {err:?}"
        );
        g.unlock().await.unwrap();
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_on_every_kind() {
    let server = RedisServer::start();
    let fx = fixture(&server, "run").await;
    every_kind!(fx, "r", run_returns_the_body);
}

/// Sets a flag when dropped: shows that a body was dropped, not left running.
struct DropFlag(Arc<AtomicBool>);

impl Drop for DropFlag {
    fn drop(&mut self) {
        self.0.store(true, Ordering::SeqCst);
    }
}

/// A lock force-unlocked while `run`'s body works: the body is dropped at the loss signal
/// (the watchdog's next renewal, a third of its 1 s timeout; a Redlock's next extension), the
/// call fails with
/// `Error::Lost`, and nothing is left held.
async fn run_stops_at_loss<L: Lock>(kind: &'static str, mine: L, theirs: L) {
    in_task(async move {
        let dropped = Arc::new(AtomicBool::new(false));
        let flag = DropFlag(dropped.clone());
        // Forced away once the body runs (not while a multi-lock still takes its members:
        // that only makes it start over).
        let (running, mut body_runs) = tokio::sync::watch::channel(false);
        let forcer = {
            let theirs = theirs.clone();
            tokio::spawn(async move {
                body_runs.wait_for(|r| *r).await.unwrap();
                theirs.force_unlock().await.unwrap()
            })
        };
        let started = Instant::now();
        let err = within(
            10,
            mine.run(|_| async move {
                let _flag = flag;
                running.send_replace(true);
                tokio::time::sleep(Duration::from_secs(30)).await;
            }),
        )
        .await
        .expect_err("the lock was forced away");
        assert!(matches!(err, Error::Lost { .. }), "{kind}: {err:?}");
        assert!(
            dropped.load(Ordering::SeqCst),
            "{kind}: the body was dropped"
        );
        assert!(forcer.await.unwrap(), "{kind}");
        eprintln!(
            "{kind}: body stopped {:?} after it began",
            started.elapsed()
        );
        assert!(!theirs.is_locked().await.unwrap(), "{kind}: nothing left");
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_stops_the_body_when_the_lock_is_lost() {
    let server = RedisServer::start();
    let fx = fixture(&server, "runlost").await;
    every_kind!(fx, "l", run_stops_at_loss);
}

/// Dropping a `run` future in the middle of its body releases the lock in the background.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dropped_run_releases_the_lock() {
    let server = RedisServer::start();
    let fx = fixture(&server, "rundrop").await;
    let lock = fx.a.fenced_lock("d");
    let probe = fx.b.fenced_lock("d");
    let running = tokio::spawn({
        let lock = lock.clone();
        async move {
            lock.run(|_| async { tokio::time::sleep(Duration::from_secs(30)).await })
                .await
        }
    });
    while !probe.is_locked().await.unwrap() {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    running.abort();
    assert!(running.await.unwrap_err().is_cancelled());
    let freed = suite::eventually(Duration::from_secs(2), || {
        let probe = probe.clone();
        async move { !probe.is_locked().await.unwrap() }
    })
    .await;
    assert!(freed, "the dropped run's hold was released");
}

/// A lease ends: the guard's `lost()` fires at its loss deadline (the lease less the drift
/// margin, from the acquire's send time), on every kind, without any unlock, renewal or
/// inspection; `is_lost()` agrees, and the unlock afterwards is `NotHeld`.
async fn lease_end_fires_lost<L: Lock>(kind: &'static str, mine: L, _theirs: L) {
    in_task(async move {
        let lease = Duration::from_millis(600);
        let started = Instant::now();
        let g = mine.lock_with_lease(lease).await.unwrap();
        let lost = g.lost();
        within(3, lost.cancelled()).await;
        let fired = started.elapsed();
        assert!(g.is_lost(), "{kind}");
        assert!(
            fired <= lease + Duration::from_millis(500),
            "{kind}: {fired:?}"
        );
        assert!(
            fired >= Duration::from_millis(300),
            "{kind}: fired early ({fired:?})"
        );
        eprintln!("{kind}: lost() fired {fired:?} after a {lease:?} lease");
        // Expired on the server too by now, or about to be: the unlock finds nothing.
        tokio::time::sleep(lease.saturating_sub(started.elapsed()) + Duration::from_millis(50))
            .await;
        assert!(g.unlock().await.unwrap_err().is_not_held(), "{kind}");
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lost_fires_when_a_lease_ends() {
    let server = RedisServer::start();
    let fx = fixture(&server, "leaselost").await;
    every_kind!(fx, "e", lease_end_fires_lost);
    let read = fx.a.rw_lock("e-r").read();
    lease_end_fires_lost("ReadLock", read.clone(), read).await;
}

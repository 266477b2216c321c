//! The `metrics` feature against real redis-servers: a `DebuggingRecorder` installed once for
//! this binary sees every metric move when its event happens (acquisitions, timeouts,
//! cancelled waits, errors by class, releases, the holds gauge, hold durations, watchdog
//! renewals and renew calls, lost locks, subscription reconnects, fair-queue lengths), with
//! the lock name as a label only when the client opted in. The recorder's snapshots drain what they read, so the
//! tests run one at a time (a static async mutex) and compare what happened between two
//! snapshots.

use std::collections::HashMap;
use std::sync::OnceLock;
use std::time::Duration;
use suite::OrNone;

use lockwise::metric_names::*;
use lockwise::{Client, Error};
use metrics_util::debugging::{DebuggingRecorder, Snapshotter};
use suite::kit::{within, WATCHDOG};
use suite::seen::Seen;
use suite::{Conn, RedisServer};

/// One test at a time: a snapshot drains the recorder.
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// Installs the recorder (before any client records: clients cache their handles on first
/// use), then waits for this test's turn.
async fn serial() -> tokio::sync::MutexGuard<'static, ()> {
    snapshotter();
    SERIAL.lock().await
}

fn snapshotter() -> &'static Snapshotter {
    static SNAPSHOTTER: OnceLock<Snapshotter> = OnceLock::new();
    SNAPSHOTTER.get_or_init(|| {
        let recorder = DebuggingRecorder::new();
        let snapshotter = recorder.snapshotter();
        recorder
            .install()
            .expect("the only recorder of this binary");
        lockwise::describe_metrics();
        snapshotter
    })
}

/// What was recorded since the previous take (of this binary's recorder).
fn take() -> Seen {
    Seen::of(snapshotter())
}

/// A client with its own namespace and the lock name as a label (opted in).
async fn named_client(server: &RedisServer, test: &str, watchdog: Duration) -> Client {
    within(
        10,
        Client::builder(server.url())
            .namespace(suite::unique_ns(test))
            .watchdog_timeout(watchdog)
            .metrics_lock_names(true)
            .build(),
    )
    .await
    .expect("build client")
}

async fn conn(server: &RedisServer) -> Conn {
    server.conn().await
}

/// After each test: every key has a TTL, no channel is left subscribed.
async fn assert_clean(conn: &mut Conn, client: &Client) {
    suite::kit::assert_ns_clean(conn, client.namespace()).await;
    assert!(
        suite::no_channels_within(conn, Duration::from_secs(3)).await,
        "channels left subscribed"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acquire_release_and_timeout_move_their_metrics() {
    let _serial = serial().await;
    let server = RedisServer::start();
    let mut c = conn(&server).await;
    let client = named_client(&server, "m_acquire", WATCHDOG).await;
    let other = suite::kit::peer(&server, &client).await;
    let lock = client.lock("m-acquire");
    take();

    let guard = within(5, lock.lock()).await.unwrap();
    let seen = take();
    let kind = ("kind", "reentrant");
    assert_eq!(seen.counter(ACQUISITIONS_TOTAL, &[kind]), 1);
    assert_eq!(seen.gauge(HOLDS, &[kind]), 1.0, "one hold now");
    let waits = seen.histogram(
        ACQUIRE_WAIT_SECONDS,
        &[kind, ("outcome", "acquired"), ("name", "m-acquire")],
    );
    assert_eq!(waits.len(), 1, "one wait recorded, with the lock name");
    assert!(waits[0] >= 0.0 && waits[0] < 5.0, "{waits:?}");

    // Another client waits 300 ms in vain: a timeout, not an error.
    let other_lock = other.lock("m-acquire");
    let none = within(5, other_lock.try_lock(Duration::from_millis(300), None))
        .await
        .or_none()
        .unwrap();
    assert!(none.is_none());
    let seen = take();
    assert_eq!(seen.counter(TIMEOUTS_TOTAL, &[kind]), 1);
    assert_eq!(seen.counter(ERRORS_TOTAL, &[]), 0, "contention is no error");
    let waits = seen.histogram(ACQUIRE_WAIT_SECONDS, &[kind, ("outcome", "timeout")]);
    assert_eq!(waits.len(), 1);
    assert!(waits[0] >= 0.29, "waited the whole 300 ms: {waits:?}");
    // The peer did not opt in: no name label on its series.
    for labels in seen.label_sets(ACQUIRE_WAIT_SECONDS) {
        assert!(labels.iter().all(|(k, _)| k != "name"), "{labels:?}");
    }

    within(5, guard.unlock()).await.unwrap();
    let seen = take();
    assert_eq!(seen.counter(RELEASES_TOTAL, &[kind]), 1);
    assert_eq!(seen.gauge(HOLDS, &[kind]), -1.0, "the hold ended");

    // A dropped guard is released in the background and counted too.
    // The release is recorded when its reply comes back, in the background task.
    let guard = within(5, lock.lock()).await.unwrap();
    drop(guard);
    let (mut releases, mut holds) = (0, 0.0);
    for _ in 0..150 {
        let seen = take();
        releases += seen.counter(RELEASES_TOTAL, &[kind]);
        holds += seen.gauge(HOLDS, &[kind]);
        if releases >= 1 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(releases, 1);
    assert_eq!(holds, 0.0, "+1 and -1");
    assert!(!within(5, lock.is_locked()).await.unwrap());
    assert_clean(&mut c, &client).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancelled_wait_is_recorded_as_cancelled() {
    let _serial = serial().await;
    let server = RedisServer::start();
    let mut c = conn(&server).await;
    let client = named_client(&server, "m_cancel", WATCHDOG).await;
    let other = suite::kit::peer(&server, &client).await;
    let guard = within(5, other.lock("m-cancel").lock()).await.unwrap();
    take();

    let lock = client.lock("m-cancel");
    let waiting = tokio::time::timeout(Duration::from_millis(300), lock.lock()).await;
    assert!(waiting.is_err(), "still waiting when dropped");
    let seen = take();
    let waits = seen.histogram(
        ACQUIRE_WAIT_SECONDS,
        &[("kind", "reentrant"), ("outcome", "cancelled")],
    );
    assert_eq!(waits.len(), 1, "{:?}", seen.0);
    assert_eq!(seen.counter(ACQUISITIONS_TOTAL, &[]), 0);
    assert_eq!(seen.counter(TIMEOUTS_TOTAL, &[]), 0);
    within(5, guard.unlock()).await.unwrap();
    assert_clean(&mut c, &client).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn errors_are_counted_by_kind_operation_and_class() {
    let _serial = serial().await;
    let server = RedisServer::start();
    let mut c = conn(&server).await;
    let client = named_client(&server, "m_errors", WATCHDOG).await;
    take();

    // A string where the lock hash should be: the script fails with WRONGTYPE.
    let lock = client.lock("m-errors");
    let _: () = redis::cmd("SET")
        .arg(lock.key())
        .arg("x")
        .arg("PX")
        .arg(60_000)
        .query_async(&mut c)
        .await
        .unwrap();
    let err = within(5, lock.lock()).await.unwrap_err();
    assert!(matches!(err, Error::Redis(_)), "{err:?}");
    let seen = take();
    let labels = [("kind", "reentrant"), ("op", "acquire"), ("error", "redis")];
    assert_eq!(seen.counter(ERRORS_TOTAL, &labels), 1, "{:?}", seen.0);
    assert_eq!(
        seen.histogram(ACQUIRE_WAIT_SECONDS, &[("outcome", "error")])
            .len(),
        1
    );
    let _: () = redis::cmd("DEL")
        .arg(lock.key())
        .query_async(&mut c)
        .await
        .unwrap();

    // Bad input fails before any call and before the acquire is observed: no metric.
    let bad = client.lock("");
    assert!(matches!(
        within(5, bad.lock()).await,
        Err(Error::InvalidArgument { .. })
    ));
    // A release after the lock was deleted: not_held.
    let guard = within(5, lock.lock_with_lease(Duration::from_secs(30)))
        .await
        .unwrap();
    assert!(within(5, lock.force_unlock()).await.unwrap());
    let err = within(5, guard.unlock()).await.unwrap_err();
    assert!(err.is_not_held(), "{err:?}");
    let seen = take();
    assert_eq!(
        seen.counter(
            ERRORS_TOTAL,
            &[
                ("op", "release"),
                ("error", "not_held"),
                ("kind", "reentrant")
            ]
        ),
        1,
        "{:?}",
        seen.0
    );
    assert_eq!(
        seen.counter(ERRORS_TOTAL, &[("error", "invalid_argument")]),
        0
    );
    assert_clean(&mut c, &client).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn batches_and_batched_calls_are_counted() {
    let _serial = serial().await;
    let server = RedisServer::start();
    let mut c = conn(&server).await;
    let client = named_client(&server, "m_batch", Duration::from_secs(30)).await;
    take();
    let tasks: Vec<_> = (0..32)
        .map(|i| {
            let lock = client.lock(format!("m-batch-{i}"));
            tokio::spawn(async move {
                for _ in 0..20 {
                    lock.lock().await.unwrap().unlock().await.unwrap();
                }
            })
        })
        .collect();
    for task in tasks {
        within(30, task).await.unwrap();
    }
    let seen = take();
    let calls = seen.counter(BATCH_CALLS_TOTAL, &[("result", "ok")]);
    let batched = seen.counter(BATCHED_TOTAL, &[]);
    // 1,280 lock and unlock calls from 32 tasks on one connection: most queue.
    assert!(calls >= 1, "no batch call: {:?}", seen.0);
    assert!(
        batched >= 2 * calls && batched <= 1_280,
        "{batched} calls in {calls} batches"
    );
    assert_eq!(seen.counter(BATCH_CALLS_TOTAL, &[("result", "error")]), 0);
    assert_clean(&mut c, &client).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watchdog_renewals_and_renew_calls_are_counted() {
    let _serial = serial().await;
    let server = RedisServer::start();
    let mut c = conn(&server).await;
    // Renewals every 200 ms.
    let client = named_client(&server, "m_renew", Duration::from_millis(600)).await;
    let a = within(5, client.lock("m-renew-a").lock()).await.unwrap();
    let b = within(5, client.lock("m-renew-b").lock()).await.unwrap();
    take();
    tokio::time::sleep(Duration::from_millis(1_100)).await;
    let seen = take();
    let renewals = seen.counter(WATCHDOG_RENEWALS_TOTAL, &[]);
    let calls = seen.counter(WATCHDOG_RENEW_CALLS_TOTAL, &[("result", "ok")]);
    // ~5 periods; at least two renewals of each lock even on a loaded machine.
    assert!(renewals >= 4, "two locks, ~5 periods: {renewals}");
    assert!(
        calls >= 2 && calls <= renewals,
        "batched: {calls} calls for {renewals}"
    );
    assert!(!a.is_lost() && !b.is_lost());
    within(5, a.unlock()).await.unwrap();
    within(5, b.unlock()).await.unwrap();
    assert_clean(&mut c, &client).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_lock_is_counted() {
    let _serial = serial().await;
    let server = RedisServer::start();
    let mut c = conn(&server).await;
    let client = named_client(&server, "m_lost", Duration::from_millis(600)).await;
    let lock = client.lock("m-lost");
    let guard = within(5, lock.lock()).await.unwrap();
    take();
    // The key disappears behind the holder's back: the next renewal finds it gone.
    let _: () = redis::cmd("DEL")
        .arg(lock.key())
        .query_async(&mut c)
        .await
        .unwrap();
    within(5, guard.lost().cancelled()).await;
    let seen = take();
    assert_eq!(
        seen.counter(LOCKS_LOST_TOTAL, &[("kind", "reentrant")]),
        1,
        "{:?}",
        seen.0
    );
    let err = within(5, guard.unlock()).await.unwrap_err();
    assert!(err.is_not_held());
    let seen = take();
    assert_eq!(seen.gauge(HOLDS, &[("kind", "reentrant")]), -1.0);
    assert_clean(&mut c, &client).await;
}

/// How long each hold was held, by how it ended: a hold released after 200 ms is recorded
/// as `released` (with the lock name, opted in), a dropped guard's too once its background
/// release answered, and one whose key vanished as `lost` when its release found it gone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hold_durations_are_recorded_by_how_the_hold_ended() {
    let _serial = serial().await;
    let server = RedisServer::start();
    let mut c = conn(&server).await;
    let client = named_client(&server, "m_held", WATCHDOG).await;
    let lock = client.lock("m-held");
    let kind = ("kind", "reentrant");
    take();

    let guard = within(5, lock.lock()).await.unwrap();
    tokio::time::sleep(Duration::from_millis(200)).await;
    within(5, guard.unlock()).await.unwrap();
    let seen = take();
    let held = seen.histogram(
        HOLD_SECONDS,
        &[kind, ("outcome", "released"), ("name", "m-held")],
    );
    assert_eq!(held.len(), 1, "{:?}", seen.0);
    assert!(held[0] >= 0.2 && held[0] < 5.0, "{held:?}");

    // A dropped guard: recorded by its release in the background.
    drop(within(5, lock.lock()).await.unwrap());
    let mut held = Vec::new();
    for _ in 0..150 {
        held.extend(take().histogram(HOLD_SECONDS, &[kind, ("outcome", "released")]));
        if !held.is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(held.len(), 1, "the dropped guard's hold");

    // The key vanishes under a lease hold (no renewal to notice): the release finds it gone.
    let guard = within(5, lock.lock_with_lease(Duration::from_secs(30)))
        .await
        .unwrap();
    let _: () = redis::cmd("DEL")
        .arg(lock.key())
        .query_async(&mut c)
        .await
        .unwrap();
    assert!(within(5, guard.unlock()).await.unwrap_err().is_not_held());
    let seen = take();
    assert_eq!(
        seen.histogram(HOLD_SECONDS, &[kind, ("outcome", "lost")])
            .len(),
        1
    );
    assert!(seen
        .histogram(HOLD_SECONDS, &[kind, ("outcome", "released")])
        .is_empty());
    assert_clean(&mut c, &client).await;
}

/// An acquire call counts as a waiter from its start to its outcome: a second task waiting
/// 600 ms in vain on a held lock shows as one waiter (with the lock name, opted in) while it
/// waits, and as none again once it timed out.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiters_are_counted_while_they_wait() {
    let _serial = serial().await;
    let server = RedisServer::start();
    let mut c = conn(&server).await;
    let client = named_client(&server, "m_waiters", WATCHDOG).await;
    let lock = client.lock("m-waiters");
    let labels = [("kind", "reentrant"), ("name", "m-waiters")];
    let guard = within(5, lock.lock()).await.unwrap();
    assert_eq!(take().gauge(WAITERS, &labels), 0.0, "one call, ended");

    let other = lock.clone();
    let waiter = tokio::spawn(async move {
        other
            .try_lock(Duration::from_millis(600), None)
            .await
            .or_none()
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(take().gauge(WAITERS, &labels), 1.0, "one waiter now");
    assert!(within(5, waiter).await.unwrap().unwrap().is_none());
    assert_eq!(take().gauge(WAITERS, &labels), -1.0, "it timed out");
    within(5, guard.unlock()).await.unwrap();
    assert_clean(&mut c, &client).await;
}

/// The permits held by guards of this process, per semaphore (name opted in): up when a
/// guard takes them, down when it releases, drops or forgets them, or the client's close
/// gives them back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn permits_held_follow_the_guards() {
    let _serial = serial().await;
    let server = RedisServer::start();
    let mut c = conn(&server).await;
    let client = named_client(&server, "m_permits", WATCHDOG).await;
    let sem = client.semaphore("m-permits");
    let lsem = client.lease_semaphore("m-leases");
    assert!(within(5, sem.try_set_permits(5)).await.unwrap());
    assert!(within(5, lsem.try_set_permits(5)).await.unwrap());
    let sem_labels = [("kind", "semaphore"), ("name", "m-permits")];
    let lease_labels = [("kind", "lease_semaphore"), ("name", "m-leases")];
    take();

    let two = within(5, sem.acquire_many(2)).await.unwrap();
    let one = within(5, sem.acquire()).await.unwrap();
    let leased = within(5, lsem.acquire_many(3, Duration::from_secs(60)))
        .await
        .unwrap();
    let seen = take();
    assert_eq!(seen.gauge(PERMITS_HELD, &sem_labels), 3.0);
    assert_eq!(seen.gauge(PERMITS_HELD, &lease_labels), 3.0);

    within(5, two.release()).await.unwrap();
    let forgotten = one.forget();
    drop(leased);
    let seen = take();
    assert_eq!(
        seen.gauge(PERMITS_HELD, &sem_labels),
        -3.0,
        "released and forgotten"
    );
    assert_eq!(seen.gauge(PERMITS_HELD, &lease_labels), -3.0, "dropped");
    within(5, sem.release(forgotten)).await.unwrap();

    // Permits the client's close gives back.
    let held = within(5, sem.acquire_many(2)).await.unwrap();
    take();
    let report = within(10, client.shutdown(Duration::from_secs(5))).await;
    assert_eq!(report.permits_returned, 2, "{report:?}");
    assert_eq!(take().gauge(PERMITS_HELD, &sem_labels), -2.0);
    drop(held);
    assert_eq!(take().gauge(PERMITS_HELD, &sem_labels), 0.0, "not twice");
    suite::kit::assert_ns_clean(&mut c, client.namespace()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_subscription_connection_counts_a_reconnect() {
    let _serial = serial().await;
    let server = RedisServer::start();
    let mut c = conn(&server).await;
    let client = named_client(&server, "m_reconnect", WATCHDOG).await;
    let other = suite::kit::peer(&server, &client).await;
    let guard = within(5, other.lock("m-reconnect").lock()).await.unwrap();
    let lock = client.lock("m-reconnect");
    let waiter = tokio::spawn(async move { lock.lock().await.map(|g| g.unlock()) });
    let channel = format!("{}:channel:{{m-reconnect}}", client.namespace());
    assert!(
        suite::eventually(Duration::from_secs(5), || {
            let mut c = c.clone();
            let channel = channel.clone();
            async move { suite::numsub(&mut c, &channel).await >= 1 }
        })
        .await,
        "the waiter subscribed"
    );
    take();
    assert!(suite::kill_pubsub(&mut c).await >= 1);
    let counted = suite::eventually(Duration::from_secs(5), || async {
        take().counter(SUBSCRIPTION_RECONNECTS_TOTAL, &[]) >= 1
    })
    .await;
    assert!(counted, "the reconnect was counted");
    within(5, guard.unlock()).await.unwrap();
    within(10, within(10, waiter).await.unwrap().unwrap())
        .await
        .unwrap();
    assert_clean(&mut c, &client).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fair_queue_length_is_recorded_at_acquire() {
    let _serial = serial().await;
    let server = RedisServer::start();
    let mut c = conn(&server).await;
    let client = named_client(&server, "m_fair", WATCHDOG).await;
    let fair = client.fair_lock("m-fair");
    let first = within(5, fair.lock()).await.unwrap();
    let mut waiters = Vec::new();
    for n in 1..=3 {
        let each = fair.clone();
        waiters.push(tokio::spawn(async move {
            let guard = each.lock().await.unwrap();
            tokio::time::sleep(Duration::from_millis(20)).await;
            guard.unlock().await.unwrap();
        }));
        suite::queue_reaches(&fair, n).await;
    }
    take();
    within(5, first.unlock()).await.unwrap();
    for w in waiters {
        within(10, w).await.unwrap();
    }
    let seen = take();
    let mut lengths = seen.histogram(FAIR_QUEUE_LENGTH, &[("kind", "fair")]);
    lengths.sort_by(f64::total_cmp);
    assert_eq!(lengths, vec![0.0, 1.0, 2.0], "waiters left behind each");
    assert_eq!(seen.counter(ACQUISITIONS_TOTAL, &[("kind", "fair")]), 3);
    assert_clean(&mut c, &client).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn semaphores_and_latches_record_their_waits() {
    let _serial = serial().await;
    let server = RedisServer::start();
    let mut c = conn(&server).await;
    let client = named_client(&server, "m_sem", WATCHDOG).await;
    let sem = client.semaphore("m-sem");
    assert!(within(5, sem.try_set_permits(1)).await.unwrap());
    take();
    let permits = within(5, sem.acquire_many(1)).await.unwrap();
    let none = within(5, sem.try_acquire_many(1, Duration::from_millis(100)))
        .await
        .or_none()
        .unwrap();
    assert!(none.is_none());
    within(5, permits.release()).await.unwrap();
    let latch = client.count_down_latch("m-latch");
    assert!(within(5, latch.try_set_count(1, Duration::from_secs(60)))
        .await
        .unwrap());
    assert!(!within(5, latch.wait_timeout(Duration::from_millis(50)))
        .await
        .unwrap());
    let seen = take();
    let sem_kind = ("kind", "semaphore");
    assert_eq!(seen.counter(ACQUISITIONS_TOTAL, &[sem_kind]), 1);
    assert_eq!(seen.counter(TIMEOUTS_TOTAL, &[sem_kind]), 1);
    assert_eq!(
        seen.histogram(ACQUIRE_WAIT_SECONDS, &[sem_kind, ("name", "m-sem")])
            .len(),
        2
    );
    assert_eq!(seen.counter(TIMEOUTS_TOTAL, &[("kind", "latch")]), 1);
    within(5, latch.count_down()).await.unwrap();
    assert_clean(&mut c, &client).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redlock_acquires_and_timeouts_are_recorded() {
    let _serial = serial().await;
    let server = RedisServer::start();
    let mut c = conn(&server).await;
    let client = named_client(&server, "m_redlock", WATCHDOG).await;
    let other = suite::kit::peer(&server, &client).await;
    let mine = lockwise::RedLockSet::new(std::slice::from_ref(&client)).lock("m-redlock");
    let theirs = lockwise::RedLockSet::new(std::slice::from_ref(&other)).lock("m-redlock");
    take();
    let guard = within(5, mine.lock()).await.unwrap();
    // Held by the other set: its rounds run out after 200 ms, a timeout, not an error.
    let none = within(5, theirs.try_lock(Duration::from_millis(200), None))
        .await
        .or_none()
        .unwrap();
    assert!(none.is_none());
    within(5, guard.unlock()).await.unwrap();
    let seen = take();
    let kind = ("kind", "redlock");
    assert_eq!(seen.counter(ACQUISITIONS_TOTAL, &[kind]), 1);
    assert_eq!(seen.counter(TIMEOUTS_TOTAL, &[kind]), 1);
    assert_eq!(seen.counter(ERRORS_TOTAL, &[]), 0, "contention is no error");
    let waits = seen.histogram(
        ACQUIRE_WAIT_SECONDS,
        &[kind, ("outcome", "acquired"), ("name", "m-redlock")],
    );
    assert_eq!(waits.len(), 1, "one wait, with the lock name: {waits:?}");
    let timed_out = seen.histogram(ACQUIRE_WAIT_SECONDS, &[kind, ("outcome", "timeout")]);
    assert_eq!(timed_out.len(), 1);
    assert!(timed_out[0] >= 0.19, "waited its 200 ms: {timed_out:?}");
    assert_clean(&mut c, &client).await;
}

#[test]
fn every_metric_name_follows_prometheus_conventions() {
    let names = [
        (ACQUIRE_WAIT_SECONDS, "_seconds"),
        (HOLD_SECONDS, "_seconds"),
        (ACQUISITIONS_TOTAL, "_total"),
        (TIMEOUTS_TOTAL, "_total"),
        (ERRORS_TOTAL, "_total"),
        (RELEASES_TOTAL, "_total"),
        (WATCHDOG_RENEWALS_TOTAL, "_total"),
        (WATCHDOG_RENEW_CALLS_TOTAL, "_total"),
        (BATCH_CALLS_TOTAL, "_total"),
        (BATCHED_TOTAL, "_total"),
        (LOCKS_LOST_TOTAL, "_total"),
        (SUBSCRIPTION_RECONNECTS_TOTAL, "_total"),
        (HOLDS, ""),
        (WAITERS, ""),
        (PERMITS_HELD, ""),
        (FAIR_QUEUE_LENGTH, ""),
    ];
    let mut seen = HashMap::new();
    for (name, suffix) in names {
        assert!(
            name.starts_with("lockwise_") && name.ends_with(suffix),
            "{name}"
        );
        assert!(
            name.chars().all(|c| c.is_ascii_lowercase() || c == '_'),
            "{name}"
        );
        assert!(seen.insert(name, ()).is_none(), "{name} twice");
    }
}

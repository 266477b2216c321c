//! The waiter mark (`lua/unlock.lua`): an attempt that finds a lock taken sets the field
//! `waiting` of its hash, and only a marked hold's last release publishes and looks at the
//! fair queue. An uncontended release publishes nothing; a waited-for one publishes once;
//! and crowds of waiters of several kinds in several clients, whose holders release
//! unmarked holds whenever nobody found them taken, never sleep through a release (their
//! holders' leases are far longer than the test lets anyone wait).

use suite::in_task;
use suite::kit::owner_fields;
use suite::OrNone;
use suite::{client, exists, Conn, Interval, RedisServer};

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use lockwise::{Client, Lock, LockGuard};

/// Watchdog timeout of the clients: a waiter woken by a holder's TTL instead of the release
/// would wait about this long.
const WATCHDOG: Duration = Duration::from_secs(60);

/// PUBLISH calls the server counted so far (scripts' included).
async fn publishes(conn: &mut Conn) -> u64 {
    suite::command_calls(conn, "publish").await
}

async fn has_mark(conn: &mut Conn, key: &str) -> bool {
    suite::hget::<String>(conn, key, suite::WAITER_MARK)
        .await
        .is_some()
}

/// Uncontended pairs (alone and batched: 16 tasks on their own names) publish nothing and
/// leave no mark; a waiter in another client marks the hold (TTL kept), its release
/// publishes once and wakes it, and the waiter's own unmarked hold is released silently.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_a_waited_for_release_publishes() {
    let server = RedisServer::start();
    let ns = suite::unique_ns("mark-publish");
    let a = client(&server, &ns, WATCHDOG).await;
    let b = client(&server, &ns, WATCHDOG).await;
    let mut conn = server.conn().await;
    in_task(async move {
        let before = publishes(&mut conn).await;
        let lock = a.lock("quiet");
        for _ in 0..50 {
            let g = lock.lock().await.unwrap();
            assert!(!has_mark(&mut conn, lock.key()).await);
            g.unlock().await.unwrap();
        }
        let tasks: Vec<_> = (0..16)
            .map(|t| {
                let l = a.lock(format!("quiet-{t}"));
                tokio::spawn(async move {
                    for _ in 0..20 {
                        l.lock().await.unwrap().unlock().await.unwrap();
                    }
                })
            })
            .collect();
        for t in tasks {
            t.await.unwrap();
        }
        assert_eq!(
            publishes(&mut conn).await - before,
            0,
            "370 uncontended releases published"
        );

        let held = a.lock("waited").lock().await.unwrap();
        let key = a.lock("waited").key().to_string();
        let waiter = b.lock("waited");
        let task = tokio::spawn(async move {
            let g = waiter.lock().await.unwrap();
            let at = Instant::now();
            (g, at)
        });
        let marked = suite::eventually(Duration::from_secs(5), || {
            let (mut c, key) = (conn.clone(), key.clone());
            async move { has_mark(&mut c, &key).await }
        })
        .await;
        assert!(marked, "the waiter's attempt marks the hold");
        assert_eq!(
            owner_fields(&mut conn, &key).await,
            vec![held.owner().to_string()]
        );
        assert!(
            suite::kit::pttl(&mut conn, &key).await > 0,
            "the mark keeps the TTL"
        );
        let before = publishes(&mut conn).await;
        let t0 = Instant::now();
        held.unlock().await.unwrap();
        let (g, at) = tokio::time::timeout(Duration::from_secs(10), task)
            .await
            .expect("the waiter is woken by the release (holder's lease 60 s)")
            .unwrap();
        println!("woken {:?} after the release", at - t0);
        assert_eq!(publishes(&mut conn).await - before, 1, "one message");
        assert!(
            !has_mark(&mut conn, &key).await,
            "a new hold starts unmarked"
        );
        g.unlock().await.unwrap();
        assert_eq!(
            publishes(&mut conn).await - before,
            1,
            "no message for nobody"
        );
        assert!(!exists(&mut conn, &key).await);
        assert!(suite::keys_with_pttl(&mut conn).await.is_empty());
    })
    .await;
}

#[derive(Clone, Copy, Debug)]
enum Kind {
    Plain,
    Fenced,
    Fair,
}

/// Takes `lock` within `wait`, holds it `hold`, releases it; records the hold.
async fn one_hold<L: Lock>(
    lock: L,
    kind: Kind,
    wait: Duration,
    hold: Duration,
    who: usize,
    log: &Mutex<Vec<Interval>>,
) {
    let g = lock
        .try_lock(wait, Some(WATCHDOG))
        .await
        .or_none()
        .unwrap()
        .unwrap_or_else(|| {
            panic!("{kind:?} waiter {who}: not woken within {wait:?} (leases 60 s)")
        });
    let start = Instant::now();
    tokio::time::sleep(hold).await;
    let end = Instant::now();
    log.lock().unwrap().push(Interval { start, end, who });
    g.unlock().await.unwrap();
}

/// [`one_hold`] on `name` as `kind`.
async fn hold_as(
    c: &Client,
    kind: Kind,
    name: &str,
    wait: Duration,
    hold: Duration,
    who: usize,
    log: &Mutex<Vec<Interval>>,
) {
    match kind {
        Kind::Plain => one_hold(c.lock(name), kind, wait, hold, who, log).await,
        Kind::Fenced => one_hold(c.fenced_lock(name), kind, wait, hold, who, log).await,
        Kind::Fair => one_hold(c.fair_lock(name), kind, wait, hold, who, log).await,
    }
}

/// 3 clients x 6 tasks (plain, fenced and fair locks of one name) take it 8 times each,
/// with 60 s leases and at most 20 s of waiting per acquisition: a release that no attempt
/// saw taken publishes nothing, so a waiter the protocol forgot to count would sleep past
/// its 20 s. No two holds overlap, and nothing is left in Redis.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn crowds_of_mixed_waiters_never_sleep_through_a_release() {
    let server = RedisServer::start();
    let ns = suite::unique_ns("mark-crowd");
    let mut clients = Vec::new();
    for _ in 0..3 {
        clients.push(client(&server, &ns, WATCHDOG).await);
    }
    let mut conn = server.conn().await;
    in_task(async move {
        let log = Arc::new(Mutex::new(Vec::new()));
        let t0 = Instant::now();
        let mut tasks = Vec::new();
        for (ci, c) in clients.iter().enumerate() {
            for t in 0..6 {
                let kind = [Kind::Plain, Kind::Fenced, Kind::Fair][(ci + t) % 3];
                let (c, log) = (c.clone(), log.clone());
                let who = ci * 6 + t;
                tasks.push(tokio::spawn(async move {
                    for i in 0..8 {
                        // Some holds end before anyone waits on them, some after.
                        let hold = Duration::from_millis([0, 1, 3][(who + i) % 3]);
                        hold_as(&c, kind, "crowd", Duration::from_secs(20), hold, who, &log).await;
                        if i % 2 == 0 {
                            tokio::task::yield_now().await;
                        }
                    }
                }));
            }
        }
        for t in tasks {
            t.await.unwrap();
        }
        let mut iv = log.lock().unwrap().clone();
        println!("{} holds in {:?}", iv.len(), t0.elapsed());
        assert_eq!(iv.len(), 3 * 6 * 8);
        suite::assert_no_overlap(&mut iv);
        let gone = suite::eventually(Duration::from_secs(5), || {
            let mut c = conn.clone();
            async move { suite::active_channels(&mut c).await.is_empty() }
        })
        .await;
        assert!(gone, "a channel is left subscribed");
        let left: Vec<_> = suite::keys_with_pttl(&mut conn)
            .await
            .into_iter()
            .filter(|(k, _)| !k.contains(":fence:"))
            .collect();
        assert!(left.is_empty(), "left in Redis: {left:?}");
    })
    .await;
}

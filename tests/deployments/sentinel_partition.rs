//! A Sentinel client cut off from every sentinel while it still reaches the master: silence
//! is no confirmation (DESIGN invariant 15). Client A's links to the three sentinels go
//! through black-holing TCP proxies ([`suite::proxy::Proxy`]); its links to the master are
//! direct. Once the trust window passes with no sentinel confirming the master, A sends
//! nothing (a typed, retryable error), and its watchdog holds, no longer renewed, are told
//! lost; once the sentinels answer again, A works again.
//!
//! The second scenario is the one the issue reported: the master is deposed by a failover A
//! cannot see, and stays a writable master (the sentinels can no longer log in to it, so they
//! cannot demote it), while client B, which hears the sentinels, follows the new master.
//! Before the fix A kept renewing, and kept locking, on the deposed master: B took A's lock
//! on the new master while A still held it (two owners), and A took new locks on the old one.

use std::time::{Duration, Instant};

use lockwise::{Client, Error};
use suite::proxy::Proxy;

use super::topology::{self, RedisSentinel};

/// A's sentinel check interval.
const CHECK: Duration = Duration::from_millis(250);
/// A's response timeout (also how long it waits for a sentinel's answer).
const RESPONSE: Duration = Duration::from_millis(250);
/// A's connect timeout (also for a new connection to a sentinel).
const CONNECT: Duration = Duration::from_millis(250);

/// The trust window the guide documents: two check intervals and a response timeout, at
/// most a third of the watchdog timeout.
fn trust_window(watchdog: Duration) -> Duration {
    (CHECK * 2 + RESPONSE).min(watchdog / 3)
}

/// Slack for scheduling on a loaded 2-core machine.
const MARGIN: Duration = Duration::from_millis(700);

/// One black-holing proxy per sentinel of `sentinel`.
async fn sentinel_proxies(sentinel: &RedisSentinel) -> Vec<Proxy> {
    let mut proxies = Vec::new();
    for port in sentinel.sentinel_ports() {
        proxies.push(Proxy::start(port).await);
    }
    proxies
}

/// Black-holes (`true`) or restores every link through `proxies`.
fn cut(proxies: &[Proxy], on: bool) {
    for p in proxies {
        p.set_cut(on);
    }
}

/// Client A: the sentinels through `proxies`, the master direct.
async fn client_through(
    proxies: &[Proxy],
    sentinel: &RedisSentinel,
    ns: &str,
    watchdog: Duration,
) -> Client {
    Client::sentinel_builder(
        proxies.iter().map(Proxy::url).collect::<Vec<_>>(),
        sentinel.master_name(),
    )
    .namespace(ns)
    .watchdog_timeout(watchdog)
    .sentinel_check_interval(CHECK)
    .response_timeout(RESPONSE)
    .connect_timeout(CONNECT)
    .build()
    .await
    .expect("sentinel client behind the proxies")
}

/// Client B: everything direct.
async fn direct_client(sentinel: &RedisSentinel, ns: &str, watchdog: Duration) -> Client {
    Client::sentinel_builder(sentinel.sentinel_urls(), sentinel.master_name())
        .namespace(ns)
        .watchdog_timeout(watchdog)
        .build()
        .await
        .expect("direct sentinel client")
}

/// When `token` fires, on this host's clock.
fn fired_at(token: tokio_util::sync::CancellationToken) -> tokio::task::JoinHandle<Instant> {
    tokio::spawn(async move {
        token.cancelled().await;
        Instant::now()
    })
}

/// The fields of the hash `key` on the server at `port`, asked as `user` (`None`: default).
fn hash_on(port: u16, user: Option<&str>, key: &str) -> Vec<(String, String)> {
    let url = match user {
        Some(u) => format!("redis://{u}:probe-pw@127.0.0.1:{port}/"),
        None => format!("redis://127.0.0.1:{port}/"),
    };
    let mut c = redis::Client::open(url)
        .unwrap()
        .get_connection_with_timeout(Duration::from_secs(2))
        .expect("inspection connection");
    redis::cmd("HGETALL").arg(key).query(&mut c).unwrap()
}

/// A call refused for want of a confirmed master: a retryable `Error::Redis`, not a
/// contention timeout.
fn assert_unconfirmed<T: std::fmt::Debug>(what: &str, r: &lockwise::Result<T>) {
    match r {
        Err(e @ Error::Redis(_)) if e.is_retryable() && !e.is_timeout() => {}
        other => panic!("{what}: expected a retryable Error::Redis, got {other:?}"),
    }
}

/// Cut off from every sentinel (no failover): A's watchdog hold is told lost within the
/// trust window plus the watchdog timeout of the cut; a new `try_lock` and `lock` after the
/// window fail at once with a retryable error and take nothing; once the proxies forward
/// again, A locks again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sentinel_silence_stops_writes_and_loses_holds() {
    suite::init_tracing();
    let sentinel = tokio::task::block_in_place(RedisSentinel::start);
    let ns = suite::unique_ns("ssilent");
    let watchdog = Duration::from_secs(3);
    let window = trust_window(watchdog);
    let proxies = sentinel_proxies(&sentinel).await;
    let a = client_through(&proxies, &sentinel, &ns, watchdog).await;
    let master = sentinel.master_port();

    let held_lock = a.lock("held");
    let held = suite::in_task(async move { held_lock.lock().await.expect("A's hold") }).await;
    let lost = fired_at(held.lost());
    tokio::time::sleep(Duration::from_millis(500)).await;

    cut(&proxies, true);
    let cut_at = Instant::now();
    // (a) The hold is told lost: nothing renews it once the window passed.
    let bound = window + watchdog + MARGIN;
    let lost_at = match tokio::time::timeout(bound + Duration::from_secs(5), lost).await {
        Ok(at) => at.unwrap(),
        Err(_) => panic!(
            "A's hold was not told lost {:?} after the sentinels went silent (bound {bound:?}): \
             the watchdog kept renewing on an unconfirmed master",
            cut_at.elapsed()
        ),
    };
    eprintln!(
        "hold told lost {:?} after the cut (window {window:?}, watchdog {watchdog:?}, bound {bound:?})",
        lost_at - cut_at
    );
    assert!(held.is_lost());
    assert!(
        lost_at - cut_at <= bound,
        "told lost {:?} after the cut, bound {bound:?}",
        lost_at - cut_at
    );

    // (b) Past the window, a new lock is refused, retryably, and nothing is written.
    let fresh = a.lock("fresh");
    let started = Instant::now();
    let r = suite::in_task({
        let fresh = fresh.clone();
        async move { fresh.try_lock(Duration::ZERO, None).await }
    })
    .await;
    let took = started.elapsed();
    eprintln!("try_lock past the window: {took:?}: {r:?}");
    assert_unconfirmed("try_lock", &r);
    let r = suite::in_task({
        let fresh = fresh.clone();
        async move { fresh.lock().await }
    })
    .await;
    eprintln!("lock past the window: {r:?}");
    assert_unconfirmed("lock", &r);
    assert!(
        took < CONNECT + RESPONSE * 2 + MARGIN,
        "refused after {took:?}"
    );
    assert!(
        hash_on(master, None, fresh.key()).is_empty(),
        "nothing written on the master"
    );
    // The old guard's unlock does not report a release it could not make.
    let unlock = held.unlock().await;
    assert!(unlock.is_err(), "unlock of a lost hold: {unlock:?}");

    // (c) The sentinels answer again: A works again.
    cut(&proxies, false);
    let back = Instant::now();
    let g = loop {
        let fresh = fresh.clone();
        match suite::in_task(async move { fresh.try_lock(Duration::ZERO, None).await }).await {
            Ok(g) => break g,
            Err(e) if e.is_retryable() && back.elapsed() < Duration::from_secs(10) => {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            Err(e) => panic!(
                "A did not recover {:?} after the proxies healed: {e}",
                back.elapsed()
            ),
        }
    };
    eprintln!(
        "A locked again {:?} after the proxies healed",
        back.elapsed()
    );
    assert_eq!(hash_on(master, None, fresh.key()).len(), 1);
    g.unlock().await.expect("unlock after recovery");
}

/// The scenario. A holds a lock; its sentinel links are cut; the master is deposed
/// without being demoted: the sentinels' links to it are killed and its default user turned
/// off, so they see it down, promote the replica, and cannot log in to reconfigure it (A's
/// and the replica's connections, logged in before, keep working). B hears the sentinels
/// and follows the new master.
///
/// A must be told its hold is lost no later than B takes the same lock on the new master,
/// and must take nothing on the deposed master afterwards; once its sentinel links heal, it
/// follows the new master. (Before the fix: A was never told, it kept renewing on the
/// deposed master while B held the lock on the new one, and A's new lock succeeded there.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sentinel_cut_off_client_takes_nothing_on_a_deposed_master() {
    suite::init_tracing();
    let sentinel = tokio::task::block_in_place(RedisSentinel::start);
    let ns = suite::unique_ns("sdeposed");
    let watchdog = Duration::from_secs(2);
    let old = sentinel.master_port();
    // An inspection user on the old master, for after its default user is turned off.
    let _: () = redis::cmd("ACL")
        .arg(&["SETUSER", "probe", "on", ">probe-pw", "~*", "&*", "+@all"])
        .query(&mut topology::connect(old))
        .unwrap();
    let proxies = sentinel_proxies(&sentinel).await;
    let a = client_through(&proxies, &sentinel, &ns, watchdog).await;
    let b = direct_client(&sentinel, &ns, watchdog).await;

    let a_lock = a.lock("held");
    let held = suite::in_task(async move { a_lock.lock().await.expect("A's hold") }).await;
    let lost = fired_at(held.lost());
    tokio::time::sleep(Duration::from_millis(500)).await;

    cut(&proxies, true);
    let cut_at = Instant::now();
    // Depose the old master without letting the sentinels demote it.
    {
        let mut c = redis::Client::open(format!("redis://probe:probe-pw@127.0.0.1:{old}/"))
            .unwrap()
            .get_connection_with_timeout(Duration::from_secs(2))
            .unwrap();
        let _: () = redis::cmd("ACL")
            .arg(&["SETUSER", "default", "off"])
            .query(&mut c)
            .unwrap();
        let list: String = redis::cmd("CLIENT").arg("LIST").query(&mut c).unwrap();
        for line in list.lines().filter(|l| l.contains(" name=sentinel-")) {
            let id = line.split(' ').find_map(|f| f.strip_prefix("id=")).unwrap();
            let _: redis::RedisResult<i64> =
                redis::cmd("CLIENT").arg(&["KILL", "ID", id]).query(&mut c);
        }
    }
    let new = tokio::task::block_in_place(|| sentinel.wait_for_failover(Duration::from_secs(30)));
    eprintln!(
        "failover {old} -> {new} {:?} after the cut",
        cut_at.elapsed()
    );
    let role: Vec<redis::Value> = {
        let mut c = redis::Client::open(format!("redis://probe:probe-pw@127.0.0.1:{old}/"))
            .unwrap()
            .get_connection_with_timeout(Duration::from_secs(2))
            .unwrap();
        redis::cmd("ROLE").query(&mut c).unwrap()
    };
    assert_eq!(
        role.first(),
        Some(&redis::Value::BulkString(b"master".to_vec())),
        "the deposed master is still a master"
    );

    // B takes A's lock on the new master once its replicated TTL ran out.
    let b_lock = b.lock("held");
    let b_guard = suite::in_task(async move {
        tokio::time::timeout(Duration::from_secs(20), b_lock.lock())
            .await
            .expect("B waited too long")
            .expect("B's lock on the new master")
    })
    .await;
    let b_at = Instant::now();
    let b_owner = b_guard.owner().to_string();
    let key = b.lock("held").key().to_string();
    let on_new = hash_on(new, None, &key);
    assert!(
        on_new.iter().any(|(f, _)| *f == b_owner),
        "B's hold is on the new master: {on_new:?}"
    );
    let on_old = hash_on(old, Some("probe"), &key);
    eprintln!(
        "B took the lock {:?} after the cut; A told lost: {}; old master has {on_old:?}",
        b_at - cut_at,
        held.is_lost()
    );
    assert!(
        held.is_lost(),
        "two owners: B holds the lock on the new master {:?} after the cut while A still \
         holds it on the deposed master ({on_old:?})",
        b_at - cut_at
    );
    let lost_at = lost.await.unwrap();
    eprintln!(
        "A told lost {:?} after the cut, {:?} before B took the lock",
        lost_at - cut_at,
        b_at.saturating_duration_since(lost_at)
    );
    assert!(lost_at <= b_at, "A was told {:?} late", lost_at - b_at);

    // A takes nothing on the deposed master.
    let fresh = a.lock("fresh");
    let r = suite::in_task({
        let fresh = fresh.clone();
        async move { fresh.try_lock(Duration::ZERO, None).await }
    })
    .await;
    let on_old = hash_on(old, Some("probe"), fresh.key());
    eprintln!("A's try_lock after the failover: {r:?}; on the deposed master: {on_old:?}");
    assert!(
        on_old.is_empty(),
        "A locked on the deposed master after the failover: {on_old:?}"
    );
    assert_unconfirmed("try_lock after the failover", &r);
    let r = suite::in_task({
        let held = a.lock("held");
        async move { held.try_lock(Duration::ZERO, None).await }
    })
    .await;
    assert_unconfirmed("try_lock of B's lock", &r);

    // The sentinel links heal: A follows the new master, where B holds the lock.
    cut(&proxies, false);
    let back = Instant::now();
    loop {
        let held = a.lock("held");
        match suite::in_task(async move { held.try_lock(Duration::ZERO, None).await }).await {
            Err(e) if e.is_timeout() => break,
            Err(e) if e.is_retryable() && back.elapsed() < Duration::from_secs(10) => {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            other => panic!("A after healing: {other:?}"),
        }
    }
    eprintln!(
        "A on the new master {:?} after the proxies healed",
        back.elapsed()
    );
    b_guard.unlock().await.unwrap();
    let g = suite::in_task({
        let fresh = fresh.clone();
        async move { fresh.lock().await.expect("A locks on the new master") }
    })
    .await;
    assert_eq!(hash_on(new, None, fresh.key()).len(), 1);
    g.unlock().await.unwrap();
    // Let the sentinels in again, so they demote the old master.
    let mut c = redis::Client::open(format!("redis://probe:probe-pw@127.0.0.1:{old}/"))
        .unwrap()
        .get_connection_with_timeout(Duration::from_secs(2))
        .unwrap();
    let _: () = redis::cmd("ACL")
        .arg(&["SETUSER", "default", "on"])
        .query(&mut c)
        .unwrap();
}

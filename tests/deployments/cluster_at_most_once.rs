//! At most once on a Cluster (DESIGN invariant 13): a script whose reply is lost after the
//! server ran it is never run a second time by the transport.
//!
//! The fault, on the master serving the name's slot: `DEBUG SLEEP 0.3` from one raw
//! connection blocks the server; the library call is sent meanwhile and waits in the
//! server's socket buffer; `CLIENT KILL TYPE normal` from a second raw connection (opened
//! before the sleep) is queued behind it. When the server wakes it runs the call's script,
//! then the kill, which closes the library's connection before the reply is written: the
//! script ran and its reply is lost. A transport that resends on a dropped connection (redis-rs's
//! Cluster client with `retries(n > 0)`) runs it a second time.
//!
//! Checked for an RLock unlock (hold count 2 must become 1, and another client must not
//! acquire), a Semaphore release (one release of 1 permit adds exactly 1), a CountDownLatch
//! count down (2 must become exactly 1, the latch stays closed), and an RLock unlock in
//! [`KeyLayout::Redisson`]. The call itself may return `Ok` or an error (its outcome was
//! unknown); the server state must show the script's effect at most once. Each round first
//! runs the same script once unfaulted, so the faulted call runs it (not a NOSCRIPT refusal).
//!
//! The other half: redirects, which prove a command did not run, are still followed
//! (`cluster_ask_and_moved_redirects_are_followed`, a slot migrated by hand).

use std::future::Future;
use std::time::{Duration, Instant};

use lockwise::{Client, KeyLayout};

use super::topology::{self, RedisCluster};

/// Rounds per kind: the fault is timed, so one round could miss its window.
const ROUNDS: usize = 4;

/// What the rounds of one kind saw.
#[derive(Debug, Default)]
struct Tally {
    /// Rounds whose call returned an error (its reply was lost).
    lost_replies: usize,
    /// Rounds whose script took effect twice.
    double_runs: usize,
    /// Rounds whose call returned an error although its script ran once (its effect is
    /// there; for a lock, the master ran one script meanwhile): the reply was lost after the
    /// server ran it, and nothing ran it again.
    ran_then_lost: usize,
}

impl Tally {
    /// One round of a counter that starts at `before` and that one run of the script moves
    /// to `once`: the call's `result` and the value read after it.
    fn count<T, E>(&mut self, result: &Result<T, E>, value: i64, before: i64, once: i64) {
        match (result, value) {
            (Ok(_), v) if v == once => {}
            (Err(_), v) if v == once => self.ran_then_lost += 1,
            (Err(_), v) if v == before => {}
            _ => self.double_runs += 1,
        }
        if result.is_err() {
            self.lost_replies += 1;
        }
    }
}

/// A cluster client under `ns` in `layout`.
async fn client(cluster: &RedisCluster, ns: &str, layout: KeyLayout) -> Client {
    Client::cluster_builder(cluster.seed_urls())
        .namespace(ns)
        .key_layout(layout)
        .watchdog_timeout(Duration::from_secs(30))
        .build()
        .await
        .expect("cluster client")
}

/// Runs `call` so that its reply is lost after the master at `port` ran it (see the module
/// docs). Returns what the call returned and how many scripts `port` ran meanwhile.
async fn lose_reply<T, F>(port: u16, call: F) -> (lockwise::Result<T>, u64)
where
    F: Future<Output = lockwise::Result<T>> + Send + 'static,
    T: Send + 'static,
{
    let (mut sleeper, mut killer) = (topology::connect(port), topology::connect(port));
    let scripts_before = tokio::task::block_in_place(|| super::script_calls(&[port]));
    let sleeping = std::thread::spawn(move || {
        // Killed as well once it has slept: its reply may be lost.
        let _: redis::RedisResult<redis::Value> = redis::cmd("DEBUG")
            .arg("SLEEP")
            .arg("0.3")
            .query(&mut sleeper);
    });
    // The server sleeps now; the call waits in its socket buffer.
    tokio::time::sleep(Duration::from_millis(60)).await;
    let call = tokio::spawn(call);
    tokio::time::sleep(Duration::from_millis(60)).await;
    // Queued behind the call: run right after its script, before its reply is written.
    let killing = std::thread::spawn(move || {
        redis::cmd("CLIENT")
            .arg("KILL")
            .arg("TYPE")
            .arg("normal")
            .query::<i64>(&mut killer)
    });
    let result = suite::kit::within(30, call).await.expect("call task");
    let killed = tokio::task::block_in_place(|| killing.join().expect("killer thread"));
    tokio::task::block_in_place(|| sleeping.join().expect("sleeper thread"));
    assert!(
        killed.as_ref().is_ok_and(|n| *n > 0),
        "CLIENT KILL: {killed:?}"
    );
    let scripts = tokio::task::block_in_place(|| super::script_calls(&[port])) - scripts_before;
    (result, scripts)
}

/// The master serving `key`'s slot.
fn master_of(cluster: &RedisCluster, key: &str) -> u16 {
    cluster.master_for_slot(cluster.key_slot(key))
}

/// The hold count of `owner` in the lock hash `key` on the master at `port` (None: no hold).
fn holds_on(port: u16, key: &str, owner: &str) -> Option<i64> {
    redis::cmd("HGET")
        .arg(key)
        .arg(owner)
        .query(&mut topology::connect(port))
        .expect("HGET")
}

/// A read through `client`, tried again while its connection to the killed master comes
/// back (reads are safe to repeat).
async fn read<T, F, Fut>(what: &str, mut read: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = lockwise::Result<T>>,
{
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        match read().await {
            Ok(v) => return v,
            Err(e) if Instant::now() < deadline => {
                eprintln!("{what}: {e}; reading again");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            Err(e) => panic!("{what}: {e}"),
        }
    }
}

/// RLock unlock rounds on `a`'s layout: hold count 2, one unlock whose reply is lost; the
/// count must be 1 (never 0) and `b` must not acquire.
async fn unlock_rounds(cluster: &RedisCluster, a: &Client, b: &Client, kind: &str) -> Tally {
    let mut tally = Tally::default();
    for round in 0..ROUNDS {
        let name = format!("unlock:{round}");
        let lock = a.lock(&name);
        let outer = lock.lock().await.expect("outer hold");
        let inner = lock.lock().await.expect("inner hold");
        // A first unlock loads the script on the master: the faulted one runs it, not a
        // NOSCRIPT refusal.
        let warm = lock.lock().await.expect("third hold");
        warm.unlock().await.expect("warm-up unlock");
        let (key, owner) = (lock.key().to_string(), inner.owner().to_string());
        let port = master_of(cluster, &key);
        assert_eq!(holds_on(port, &key, &owner), Some(2), "{kind} {name}");

        let (result, scripts) = lose_reply(port, inner.unlock()).await;
        // A lost reply is settled by the engine in the background: wait until it is quiet.
        tokio::time::sleep(Duration::from_millis(500)).await;
        let count = holds_on(port, &key, &owner);
        let other = read(&format!("{kind} try_lock"), || async {
            match b.lock(&name).try_lock(Duration::ZERO, None).await {
                Err(e) if e.is_timeout() => Ok(None),
                other => other.map(Some),
            }
        })
        .await;
        eprintln!(
            "{kind} {name}: unlock -> {result:?}; {scripts} scripts run; hold count {count:?}"
        );
        if result.is_err() {
            tally.lost_replies += 1;
        }
        if count != Some(1) || other.is_some() {
            tally.double_runs += 1;
        } else if result.is_err() && scripts == 1 {
            tally.ran_then_lost += 1;
        }
        if let Some(g) = other {
            eprintln!("{kind} {name}: another client acquired a held lock");
            let _ = g.unlock().await;
        }
        let _ = outer.unlock().await;
    }
    tally
}

/// Semaphore release rounds: 5 permits, one release of 1 whose reply is lost; the permits
/// must be 6 (or 5 if the release errored without running), never 7.
async fn release_rounds(cluster: &RedisCluster, a: &Client) -> Tally {
    let mut tally = Tally::default();
    for round in 0..ROUNDS {
        let sem = a.semaphore(format!("sem:{round}"));
        assert!(sem.try_set_permits(4).await.expect("set permits"));
        // Loads the script on the master (see `unlock_rounds`).
        assert_eq!(sem.release(1).await.expect("warm-up release"), 5);
        let port = master_of(cluster, sem.key());
        let releasing = sem.clone();
        let (result, scripts) = lose_reply(port, async move { releasing.release(1).await }).await;
        let permits = read("available_permits", || sem.available_permits()).await;
        eprintln!(
            "semaphore {round}: release -> {result:?}; {scripts} scripts run; permits {permits}"
        );
        tally.count(&result, permits as i64, 5, 6);
    }
    tally
}

/// CountDownLatch rounds: count 2, one count down whose reply is lost; the count must be 1
/// (or 2 if it errored without running), never 0 (open).
async fn count_down_rounds(cluster: &RedisCluster, a: &Client) -> Tally {
    let mut tally = Tally::default();
    for round in 0..ROUNDS {
        let latch = a.count_down_latch(format!("latch:{round}"));
        assert!(latch
            .try_set_count(3, Duration::from_secs(60))
            .await
            .expect("set count"));
        // Loads the script on the master (see `unlock_rounds`).
        assert_eq!(latch.count_down().await.expect("warm-up count down"), 2);
        let port = master_of(cluster, latch.key());
        let counting = latch.clone();
        let (result, scripts) = lose_reply(port, async move { counting.count_down().await }).await;
        let count = read("latch count", || latch.count()).await;
        eprintln!("latch {round}: count_down -> {result:?}; {scripts} scripts run; count {count}");
        tally.count(&result, count as i64, 2, 1);
    }
    tally
}

/// Each kind, `ROUNDS` rounds with a reply lost after the server ran the script: no double
/// effect, ever; and the fault did hit its window (for each kind, at least one round whose
/// script ran once and whose reply was lost).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_lost_replies_run_each_script_at_most_once() {
    suite::init_tracing();
    let cluster = tokio::task::block_in_place(|| RedisCluster::start(3, 0));
    let ns = suite::unique_ns("amo");
    let a = client(&cluster, &ns, KeyLayout::Lockwise).await;
    let b = client(&cluster, &ns, KeyLayout::Lockwise).await;
    let rns = suite::unique_ns("amor");
    let ra = client(&cluster, &rns, KeyLayout::Redisson).await;
    let rb = client(&cluster, &rns, KeyLayout::Redisson).await;

    let tallies = [
        (
            "rlock unlock",
            unlock_rounds(&cluster, &a, &b, "rlock").await,
        ),
        ("semaphore release", release_rounds(&cluster, &a).await),
        ("latch count_down", count_down_rounds(&cluster, &a).await),
        (
            "redisson rlock unlock",
            unlock_rounds(&cluster, &ra, &rb, "redisson rlock").await,
        ),
    ];
    for (kind, t) in &tallies {
        eprintln!(
            "{kind}: {}/{ROUNDS} rounds double-run, {} replies lost, {} ran then lost",
            t.double_runs, t.lost_replies, t.ran_then_lost
        );
    }
    for (kind, t) in &tallies {
        assert_eq!(
            t.double_runs, 0,
            "{kind}: a script took effect twice: {t:?}"
        );
    }
    // Not vacuous: the fault hit its window for every kind at least once.
    for (kind, t) in &tallies {
        assert!(
            t.ran_then_lost > 0,
            "{kind}: no reply was lost after its script ran: {t:?}"
        );
    }
}

/// `CLUSTER MYID` of the node at `port`.
fn node_id(port: u16) -> String {
    redis::cmd("CLUSTER")
        .arg("MYID")
        .query(&mut topology::connect(port))
        .expect("CLUSTER MYID")
}

/// `CLUSTER SETSLOT slot <how...>` on the node at `port`.
fn set_slot(port: u16, slot: u16, how: &[&str]) {
    let _: () = redis::cmd("CLUSTER")
        .arg("SETSLOT")
        .arg(slot)
        .arg(how)
        .query(&mut topology::connect(port))
        .unwrap_or_else(|e| panic!("CLUSTER SETSLOT {slot} {how:?} on {port}: {e}"));
}

/// Redirects still reach their target now that redis-rs sends each command once: the
/// transport follows them itself (they prove the command did not run). A name's slot
/// migrates from master `from` to master `to` while its lock is held: once the lock hash has
/// moved, `from` answers a read of it with ASK, which the transport follows (behind
/// `ASKING`) to `to`. Once the migration ends, the unlock and a semaphore release, sent along
/// the client's stale slot map, are redirected with MOVED and run on `to`, once each.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_ask_and_moved_redirects_are_followed() {
    suite::init_tracing();
    let cluster = tokio::task::block_in_place(|| RedisCluster::start(3, 0));
    let ns = suite::unique_ns("amoredir");
    let a = client(&cluster, &ns, KeyLayout::Lockwise).await;
    let sem = a.semaphore("mig");
    let lock = a.lock("mig");
    let slot = cluster.key_slot(sem.key());
    assert_eq!(slot, cluster.key_slot(lock.key()), "one hash tag, one slot");
    let from = cluster.master_for_slot(slot);
    let to = *cluster
        .master_ports()
        .iter()
        .find(|&&p| p != from)
        .expect("another master");
    assert!(sem.try_set_permits(1).await.expect("set permits"));
    let guard = lock.lock().await.expect("lock");

    // The migration starts and the lock hash moves: `from` no longer has it.
    tokio::task::block_in_place(|| {
        set_slot(to, slot, &["IMPORTING", &node_id(from)]);
        set_slot(from, slot, &["MIGRATING", &node_id(to)]);
        let _: () = redis::cmd("MIGRATE")
            .arg("127.0.0.1")
            .arg(to)
            .arg("")
            .arg(0)
            .arg(5000)
            .arg("KEYS")
            .arg(lock.key())
            .arg(sem.key())
            .query(&mut topology::connect(from))
            .expect("MIGRATE");
    });
    let (moved,): (Option<i64>,) = redis::pipe()
        .cmd("ASKING")
        .ignore()
        .cmd("HGET")
        .arg(lock.key())
        .arg(guard.owner())
        .query(&mut topology::connect(to))
        .expect("ASKING + HGET");
    assert_eq!(moved, Some(1), "the hold moved to {to}");
    let locked = suite::kit::within(10, lock.is_locked())
        .await
        .expect("a read of a migrated key follows ASK");
    assert!(locked, "read on {to}");

    // The migration ends; the client's slot map still says `from`.
    tokio::task::block_in_place(|| {
        let to_id = node_id(to);
        for port in cluster.master_ports() {
            set_slot(port, slot, &["NODE", &to_id]);
        }
    });
    suite::kit::within(10, guard.unlock())
        .await
        .expect("unlock follows MOVED");
    assert_eq!(holds_on(to, lock.key(), "any"), None);
    let after = suite::kit::within(10, sem.release(1))
        .await
        .expect("release follows MOVED");
    assert_eq!(after, 2, "the release ran once");
    let on_to: Option<i64> = redis::cmd("HGET")
        .arg(sem.key())
        .arg("p")
        .query(&mut topology::connect(to))
        .expect("HGET");
    assert_eq!(on_to, Some(2), "the permits live on {to}");
}

//! The overtake limit (`ClientBuilder::overtake_limit`): a waiter in another client is not
//! overtaken for long by a client whose tasks release and re-take the lock in a tight loop
//! (each of its unlocks wakes its own waiters before the other client hears the message, and
//! a task that locks again right after unlocking sends its attempt before any remote waiter).
//! Also what the claim does in Redis: it refuses a free lock to everyone but the claimant,
//! never a re-entry, expires on its own, and is withdrawn by a claimant that stops waiting.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use suite::OrNone;

use lockwise::{Client, Lock, LockGuard};
use suite::kit::{fresh_client, peer, within, WATCHDOG};
use suite::scenarios::{taken_after_claimant_leaves, waits_against_busy};
use suite::{assert_no_overlap, eventually, exists, in_task, Conn, Interval, RedisServer};

/// The claim key of lock `name` under the client's namespace.
fn claim_key(client: &Client, name: &str) -> String {
    format!("{}:claim:{{{name}}}", client.namespace())
}

/// Whether the key `key` exists (`present`) or is gone, at some moment within `wait`.
async fn turns(conn: &Conn, key: &str, present: bool, wait: Duration) -> bool {
    eventually(wait, || {
        let (mut conn, key) = (conn.clone(), key.to_string());
        async move { exists(&mut conn, &key).await == present }
    })
    .await
}

/// The head of the claim queue `key` (the owner a free lock goes to), if any.
async fn get(conn: &mut Conn, key: &str) -> Option<String> {
    let head: Vec<String> = redis::cmd("ZRANGE")
        .arg(key)
        .arg(0)
        .arg(0)
        .query_async(conn)
        .await
        .unwrap();
    head.into_iter().next()
}

/// Puts `owner` at the head of the claim queue `key` (of `client`'s lock `name`) for `ms`
/// milliseconds, as a waiter that began long ago would: what a claim staked by a waiter of
/// another client looks like on the server.
async fn fake_claim(conn: &mut Conn, client: &Client, name: &str, owner: &str, ms: u64) {
    let (secs, micros): (u64, u64) = redis::cmd("TIME").query_async(conn).await.unwrap();
    let now = secs * 1000 + micros / 1000;
    let deadlines = format!("{}:claimdeadlines:{{{name}}}", client.namespace());
    let _: () = redis::pipe()
        .cmd("ZADD")
        .arg(claim_key(client, name))
        .arg(0)
        .arg(owner)
        .ignore()
        .cmd("PEXPIRE")
        .arg(claim_key(client, name))
        .arg(ms)
        .ignore()
        .cmd("ZADD")
        .arg(&deadlines)
        .arg(now + ms)
        .arg(owner)
        .ignore()
        .cmd("PEXPIRE")
        .arg(&deadlines)
        .arg(ms)
        .ignore()
        .query_async(conn)
        .await
        .unwrap();
}

/// A client in `of`'s namespace with the given overtake limit.
async fn with_limit(server: &RedisServer, of: &Client, limit: Option<Duration>) -> Client {
    within(
        10,
        Client::builder(server.url())
            .namespace(of.namespace().to_string())
            .watchdog_timeout(WATCHDOG)
            .overtake_limit(limit)
            .build(),
    )
    .await
    .expect("build client")
}

/// Without a limit, 8 tasks of one client holding a lock for 2 ms each kept another
/// client's waiter out for up to 9 s on this machine. With the default limit (200 ms) every
/// wait of the other client ends soon after the limit: the bound asserted is the limit plus
/// the claim's TTL plus 2 s of slack for a loaded machine. The holds never overlap.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_remote_waiter_is_not_overtaken_for_long() {
    let server = RedisServer::start();
    let busy = fresh_client(&server, "overtake_remote").await;
    let remote = peer(&server, &busy).await;
    let (waits, mut holds) = waits_against_busy(&busy, &remote, "hot", 10).await;
    println!("{} holds; remote waits {waits:?}", holds.len());
    let bound = lockwise::DEFAULT_OVERTAKE_LIMIT + Duration::from_secs(3);
    let worst = *waits.iter().max().unwrap();
    assert!(
        worst < bound,
        "a remote wait took {worst:?} (bound {bound:?})"
    );
    assert!(
        holds.len() > 10,
        "the busy client kept working: {}",
        holds.len()
    );
    assert_no_overlap(&mut holds);
    let mut conn = server.conn().await;
    assert!(
        turns(
            &conn,
            &claim_key(&busy, "hot"),
            false,
            Duration::from_secs(3)
        )
        .await,
        "no claim is left behind"
    );
    suite::kit::assert_ns_clean(&mut conn, busy.namespace()).await;
}

/// A claim in Redis (here one of an owner that no longer runs, as a crashed claimant leaves
/// it): a free lock is refused to every other owner, of `RLock` and `FencedLock` alike, until
/// the claim's TTL runs out; a re-entry is never refused; the claimant itself takes the lock
/// and its claim is deleted.
#[tokio::test]
async fn a_claim_refuses_a_free_lock_to_others_only() {
    let server = RedisServer::start();
    let client = fresh_client(&server, "overtake_claim").await;
    let mut conn = server.conn().await;
    let key = claim_key(&client, "c");
    let (lock, fenced) = (client.lock("c"), client.fenced_lock("c"));
    let mut task_conn = conn.clone();
    let claimer = client.clone();
    in_task(async move {
        let conn = &mut task_conn;
        // Re-entry under someone else's claim.
        let outer = lock.lock().await.unwrap();
        let other = "00000000-0000-0000-0000-000000000000:7";
        fake_claim(conn, &claimer, "c", other, 800).await;
        let inner = within(5, lock.lock()).await.unwrap();
        assert_eq!(lock.hold_count().await.unwrap(), 2);
        inner.unlock().await.unwrap();
        outer.unlock().await.unwrap();
        // Free but claimed: refused, to both kinds.
        assert!(lock
            .try_lock(Duration::ZERO, None)
            .await
            .or_none()
            .unwrap()
            .is_none());
        assert!(fenced
            .try_lock(Duration::ZERO, None)
            .await
            .or_none()
            .unwrap()
            .is_none());
        assert!(!lock.is_locked().await.unwrap(), "refused, not taken");
        // Until the claim expires: a waiter gets the lock then (without any unlock).
        let t0 = Instant::now();
        let guard = lock
            .try_lock(Duration::from_secs(5), None)
            .await
            .or_none()
            .unwrap()
            .expect("free once the claim expired");
        assert!(
            t0.elapsed() < Duration::from_secs(3),
            "the waiter slept past the claim's TTL: {:?}",
            t0.elapsed()
        );
        assert!(!exists(conn, &key).await);
        guard.unlock().await.unwrap();
    })
    .await;

    // The claimant itself: a named owner's claim lets that owner in and is deleted.
    let named = client.lock("c").with_owner("me");
    let me = format!("{}:owner:me", client.id());
    fake_claim(&mut conn, &client, "c", &me, 5_000).await;
    let fenced = client.fenced_lock("c");
    assert!(fenced
        .try_lock(Duration::ZERO, None)
        .await
        .or_none()
        .unwrap()
        .is_none());
    let guard = named
        .try_lock(Duration::ZERO, None)
        .await
        .or_none()
        .unwrap()
        .expect("the claimant takes the free lock");
    assert!(!exists(&mut conn, &claim_key(&client, "c")).await);
    guard.unlock().await.unwrap();
    suite::kit::assert_ns_clean(&mut conn, client.namespace()).await;
}

/// A claimant (limit zero: it claims at its first attempt) stakes its claim while the lock is
/// held, and withdraws it when its wait times out and when its future is dropped, well
/// before the claim's TTL would have removed it.
#[tokio::test]
async fn a_claimant_that_stops_waiting_withdraws_its_claim() {
    let server = RedisServer::start();
    let holder = fresh_client(&server, "overtake_withdraw").await;
    let eager = with_limit(&server, &holder, Some(Duration::ZERO)).await;
    let mut conn = server.conn().await;
    let key = claim_key(&holder, "w");
    let held = holder.lock("w").lock().await.unwrap();

    // Timed out.
    let lock = eager.lock("w");
    let waiter = tokio::spawn(async move {
        lock.try_lock(Duration::from_millis(250), None)
            .await
            .or_none()
    });
    assert!(
        turns(&conn, &key, true, Duration::from_secs(2)).await,
        "the waiter staked a claim"
    );
    let claimant = get(&mut conn, &key).await.unwrap();
    assert!(claimant.starts_with(&eager.id().to_string()), "{claimant}");
    assert!(within(5, waiter).await.unwrap().unwrap().is_none());
    let t0 = Instant::now();
    assert!(
        turns(&conn, &key, false, Duration::from_millis(500)).await,
        "claim withdrawn after the timeout (TTL 1 s)"
    );
    println!("withdrawn {:?} after the timeout", t0.elapsed());

    // Cancelled.
    let lock = eager.lock("w");
    let waiter = tokio::spawn(async move { lock.lock().await.map(|_| ()) });
    assert!(
        turns(&conn, &key, true, Duration::from_secs(2)).await,
        "the second waiter staked a claim"
    );
    waiter.abort();
    assert!(within(5, waiter).await.unwrap_err().is_cancelled());
    assert!(
        turns(&conn, &key, false, Duration::from_millis(500)).await,
        "claim withdrawn after the cancellation (TTL 1 s)"
    );
    held.unlock().await.unwrap();
    suite::kit::assert_ns_clean(&mut conn, holder.namespace()).await;
}

/// Claimant and refused waiters in one client: a release wakes the local claimant, wherever
/// it is in line, so it gets the lock at once, and nobody polls (script calls stay a small
/// multiple of the acquisitions).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_local_claimant_gets_the_wakeup() {
    let server = RedisServer::start();
    let base = fresh_client(&server, "overtake_local").await;
    let client = with_limit(&server, &base, Some(Duration::ZERO)).await;
    let mut conn = server.conn().await;
    let held = client.lock("l").non_reentrant().lock().await.unwrap();
    let log: Arc<Mutex<Vec<Interval>>> = Arc::default();
    let waiters: Vec<_> = (0..6)
        .map(|who| {
            let (lock, log) = (client.lock("l"), log.clone());
            tokio::spawn(async move {
                for _ in 0..5 {
                    let guard = lock.lock().await.unwrap();
                    let start = Instant::now();
                    tokio::time::sleep(Duration::from_millis(1)).await;
                    let end = Instant::now();
                    guard.unlock().await.unwrap();
                    log.lock().unwrap().push(Interval { start, end, who });
                }
            })
        })
        .collect();
    tokio::time::sleep(Duration::from_millis(100)).await;
    let calls_before = suite::script_calls(&mut conn).await;
    let t0 = Instant::now();
    held.unlock().await.unwrap();
    for w in waiters {
        within(20, w).await.unwrap();
    }
    let calls = suite::script_calls(&mut conn).await - calls_before;
    println!("30 holds in {:?}, {calls} script calls", t0.elapsed());
    let mut holds = std::mem::take(&mut *log.lock().unwrap());
    assert_eq!(holds.len(), 30);
    assert_no_overlap(&mut holds);
    // Each hold: its lock and unlock, the claimant's second look when it is marked, a few
    // refused attempts and claim renewals; waking every waiter at each release would be
    // about 6 more per hold, polling at round-trip rate thousands.
    assert!(calls < 30 * 6, "{calls} script calls for 30 holds");
    suite::kit::assert_ns_clean(&mut conn, client.namespace()).await;
}

/// However many waiters of one client are overdue, a release wakes one of them: the claimant
/// (the lock refuses the others while the claim lives), not the herd.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn overdue_waiters_are_not_woken_as_a_herd() {
    const WAITERS: usize = 40;
    let server = RedisServer::start();
    let holder = fresh_client(&server, "overtake_herd").await;
    let eager = with_limit(&server, &holder, Some(Duration::ZERO)).await;
    let mut conn = server.conn().await;
    let held = holder.lock("h").lock().await.unwrap();
    let (got, mut first) = tokio::sync::mpsc::unbounded_channel();
    let release = Arc::new(tokio::sync::Semaphore::new(0));
    let waiters: Vec<_> = (0..WAITERS)
        .map(|who| {
            let (lock, got, release) = (eager.lock("h"), got.clone(), release.clone());
            tokio::spawn(async move {
                let guard = lock.lock().await.unwrap();
                let _ = got.send(who);
                release.acquire().await.unwrap().forget();
                guard.unlock().await.unwrap();
            })
        })
        .collect();
    // Every waiter has attempted and one of them claimed the lock.
    let key = claim_key(&holder, "h");
    assert!(
        turns(&conn, &key, true, Duration::from_secs(5)).await,
        "a waiter claimed the lock"
    );
    tokio::time::sleep(Duration::from_millis(100)).await;
    let claimant = get(&mut conn, &key).await.unwrap();
    let calls_before = suite::script_calls(&mut conn).await;
    held.unlock().await.unwrap();
    within(5, first.recv()).await.unwrap();
    let calls = suite::script_calls(&mut conn).await - calls_before;
    println!("one handoff to one of {WAITERS} overdue waiters: {calls} script calls");
    let owners = suite::kit::owner_fields(&mut conn, eager.lock("h").key()).await;
    assert_eq!(owners, vec![claimant], "the claimant got the lock");
    // The unlock, the claimant's attempt, and perhaps a claim renewal or two of the ones
    // due meanwhile; a herd would be about WAITERS.
    assert!(calls <= 6, "{calls} script calls for one handoff");
    release.add_permits(WAITERS);
    for w in waiters {
        within(20, w).await.unwrap();
    }
    suite::kit::assert_ns_clean(&mut conn, holder.namespace()).await;
}

/// A claimant that leaves while the lock is free (its holder's key expired: no unlock, no
/// message) announces the lock as an unlock would, so a waiter of another client takes it
/// at once, not when its own bound (the old holder's 20 s lease) runs out.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_claim_withdrawn_from_a_free_lock_wakes_the_others() {
    let server = RedisServer::start();
    let holder = fresh_client(&server, "overtake_announce").await;
    let eager = with_limit(&server, &holder, Some(Duration::ZERO)).await;
    let patient = with_limit(&server, &holder, None).await;
    let mut conn = server.conn().await;
    let held = holder
        .lock("a")
        .lock_with_lease(Duration::from_secs(20))
        .await
        .unwrap();
    let key = claim_key(&holder, "a");
    let waited = taken_after_claimant_leaves(
        &eager,
        &patient,
        "a",
        async {
            assert!(
                turns(&conn, &key, true, Duration::from_secs(2)).await,
                "the waiter claimed the lock"
            )
        },
        async {
            let _: () = redis::cmd("DEL")
                .arg(holder.lock("a").key())
                .query_async(&mut conn.clone())
                .await
                .unwrap();
        },
    )
    .await;
    println!("the other client's waiter took the lock {waited:?} after the claimant left");
    assert!(
        waited < Duration::from_secs(1),
        "woken by the claim's TTL or the lease, not the withdrawal: {waited:?}"
    );
    drop(held);
    assert!(turns(&conn, &key, false, Duration::from_secs(2)).await);
    suite::kit::assert_ns_clean(&mut conn, holder.namespace()).await;
}

/// With claims off, nothing is ever written to the claim key.
#[tokio::test]
async fn no_limit_no_claim() {
    let server = RedisServer::start();
    let holder = fresh_client(&server, "overtake_off").await;
    let off = with_limit(&server, &holder, None).await;
    let mut conn = server.conn().await;
    let held = holder.lock("o").lock().await.unwrap();
    let waited = off
        .lock("o")
        .try_lock(Duration::from_millis(700), None)
        .await
        .or_none()
        .unwrap();
    assert!(waited.is_none());
    assert!(!exists(&mut conn, &claim_key(&holder, "o")).await);
    held.unlock().await.unwrap();
}

/// One acquisition of the overtake scenario: when it was asked for, granted and released.
#[derive(Clone, Copy, Debug)]
struct Turn {
    asked: Instant,
    granted: Instant,
    released: Instant,
    who: usize,
    /// A read hold of a read-write lock (shared with other readers).
    reader: bool,
}

/// What the turns of one run show: the longest wait, the largest lead of an overtaker (over
/// every pair where B was granted before A although B asked later, how much later B asked)
/// and the most overtakers of one wait. Two readers whose holds overlapped are not counted:
/// the later one did not keep the other out.
fn overtaking(turns: &[Turn]) -> (Duration, Duration, usize) {
    let longest = turns
        .iter()
        .map(|t| t.granted - t.asked)
        .max()
        .unwrap_or_default();
    let mut lead = Duration::ZERO;
    let mut overtakes_of_one = 0;
    for a in turns {
        let mut n = 0;
        for b in turns {
            let shared = a.reader && b.reader && a.granted < b.released;
            if b.asked > a.asked && b.granted < a.granted && !shared {
                lead = lead.max(b.asked - a.asked);
                n += 1;
            }
        }
        overtakes_of_one = overtakes_of_one.max(n);
    }
    (longest, lead, overtakes_of_one)
}

/// One task of the overtake scenario: takes `lock` (`lock()`, no wait limit) in turn until
/// `until`: holds of 5-40 ms, one in ten 200 ms, a short think time; records every turn.
async fn take_turns<L: Lock>(
    lock: L,
    who: usize,
    reader: bool,
    until: Instant,
    turns: Arc<Mutex<Vec<Turn>>>,
) {
    let mut n = 0u64;
    while Instant::now() < until {
        n += 1;
        let asked = Instant::now();
        let g = lock.lock().await.expect("lock");
        let granted = Instant::now();
        let hold = if (n + who as u64).is_multiple_of(10) {
            200
        } else {
            rand::random_range(5..=40)
        };
        tokio::time::sleep(Duration::from_millis(hold)).await;
        let released = Instant::now();
        g.unlock().await.expect("unlock");
        turns.lock().unwrap().push(Turn {
            asked,
            granted,
            released,
            who,
            reader,
        });
        tokio::time::sleep(Duration::from_millis(rand::random_range(1..=5))).await;
    }
}

/// Waits for the spawned tasks; returns their turns in the order they were granted.
async fn collect(
    handles: Vec<tokio::task::JoinHandle<()>>,
    turns: Arc<Mutex<Vec<Turn>>>,
) -> Vec<Turn> {
    for h in handles {
        h.await.unwrap();
    }
    let mut turns = std::mem::take(&mut *turns.lock().unwrap());
    turns.sort_by_key(|t| t.granted);
    turns
}

/// `tasks` tasks per lock in `locks` (one per client) take their lock in turn for `run`
/// ([`take_turns`]). Returns every turn.
async fn contend_turns<L: Lock>(locks: Vec<L>, tasks: usize, run: Duration) -> Vec<Turn> {
    let until = Instant::now() + run;
    let turns: Arc<Mutex<Vec<Turn>>> = Arc::default();
    let mut handles = Vec::new();
    for (c, lock) in locks.into_iter().enumerate() {
        for t in 0..tasks {
            let task = take_turns(lock.clone(), c * tasks + t, false, until, turns.clone());
            handles.push(tokio::spawn(task));
        }
    }
    collect(handles, turns).await
}

/// As [`contend_turns`] on a read-write lock: of each client's `tasks` tasks, the even
/// ones read and the odd ones write.
async fn contend_rw_turns(locks: Vec<lockwise::RwLock>, tasks: usize, run: Duration) -> Vec<Turn> {
    let until = Instant::now() + run;
    let turns: Arc<Mutex<Vec<Turn>>> = Arc::default();
    let mut handles = Vec::new();
    for (c, lock) in locks.into_iter().enumerate() {
        for t in 0..tasks {
            let (who, turns) = (c * tasks + t, turns.clone());
            handles.push(if t % 2 == 0 {
                tokio::spawn(take_turns(lock.read(), who, true, until, turns))
            } else {
                tokio::spawn(take_turns(lock.write(), who, false, until, turns))
            });
        }
    }
    collect(handles, turns).await
}

/// No two writes overlap, and no read overlaps a write.
fn assert_exclusive(turns: &[Turn]) {
    let mut writes: Vec<Interval> = turns
        .iter()
        .filter(|t| !t.reader)
        .map(|t| Interval {
            start: t.granted,
            end: t.released,
            who: t.who,
        })
        .collect();
    assert_no_overlap(&mut writes);
    for w in turns.iter().filter(|t| !t.reader) {
        for r in turns.iter().filter(|t| t.reader) {
            assert!(
                r.released <= w.granted || w.released <= r.granted,
                "read {r:?} overlaps write {w:?}"
            );
        }
    }
}

/// The bound, with several clients: no waiter is served after one that asked more than the
/// overtake limit (200 ms) later, plus a margin for the waiter's own attempt (the one that
/// queues it) on a loaded machine; for a plain, a fenced, a multi and a read-write lock
/// (half the tasks read, half write), 4 clients x 4 tasks on one lock for 6 s, holds of
/// 5-40 ms and some of 200 ms. The holds never overlap (reads only with reads). Without the
/// queue (one claim per lock, first come first served), in the same scenario later acquires
/// overtook waiters by seconds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_waiter_is_overtaken_by_one_that_asked_much_later() {
    let server = RedisServer::start();
    let base = fresh_client(&server, "overtake_bound").await;
    let mut clients = vec![base.clone()];
    for _ in 1..4 {
        clients.push(peer(&server, &base).await);
    }
    let limit = lockwise::DEFAULT_OVERTAKE_LIMIT;
    let margin = Duration::from_millis(150);
    let run = Duration::from_secs(6);
    let mut report = Vec::new();
    for kind in ["plain", "fenced", "multi", "rw"] {
        let turns = match kind {
            "plain" => contend_turns(clients.iter().map(|c| c.lock("b")).collect(), 4, run).await,
            "fenced" => {
                let locks = clients.iter().map(|c| c.fenced_lock("b")).collect();
                contend_turns(locks, 4, run).await
            }
            "multi" => {
                let locks = clients.iter().map(|c| c.multi_lock(["b1", "b2"])).collect();
                contend_turns(locks, 4, run).await
            }
            _ => {
                let locks = clients.iter().map(|c| c.rw_lock("b")).collect();
                contend_rw_turns(locks, 4, run).await
            }
        };
        assert_exclusive(&turns);
        let (longest, lead, most) = overtaking(&turns);
        report.push(format!(
            "{kind}: {} turns, longest wait {longest:?}, largest lead of an overtaker {lead:?}, \
             most overtakes of one wait {most}",
            turns.len()
        ));
        assert!(
            lead <= limit + margin,
            "{kind}: a waiter was overtaken by one that asked {lead:?} later (limit {limit:?})"
        );
    }
    for line in report {
        println!("{line}");
    }
}

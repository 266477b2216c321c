//! FairLock handoff: a release gives the lock to the head of the queue inside the unlock
//! script, and the head's `lock()` returns on the message, without a lock-script call of its
//! own. What happens when the message is lost, when a handed waiter leaves before it heard,
//! and for a waiter with a lease or near its deadline (it takes the lock through its script).
//! A dead head handed the lock is in `fair.rs` (`stale_head_delays_the_queue_at_most_its_
//! deadline`). Script calls are read from the server's SLOWLOG (every command logged, in
//! order).
//!
//! Issue item 7 (two owners after a paused waiter's handoff): a waiter whose runtime stands
//! still across its handoff, a waiter whose refreshes are refused unrun before its handoff,
//! and a handed hold that vanishes before its confirmation. Each records the critical
//! sections of both contenders and checks that none overlap.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use redis::Value;
use suite::{in_task, queue_reaches, Conn, Interval, RedisServer};

use super::fair::{
    assert_clean, client, holds_of, insert_dead_waiter, queue_entries, spawn_timed_waiter,
};

/// 3 s: a waiter lease of 3 s, renewals every second.
const WATCHDOG: Duration = Duration::from_secs(3);

/// Logs every command from now on, in order (SLOWLOG entry ids increase).
async fn log_everything(conn: &mut Conn) {
    let _: () = redis::cmd("CONFIG")
        .arg("SET")
        .arg("slowlog-log-slower-than")
        .arg(0)
        .query_async(conn)
        .await
        .unwrap();
    let _: () = redis::cmd("CONFIG")
        .arg("SET")
        .arg("slowlog-max-len")
        .arg(10_000)
        .query_async(conn)
        .await
        .unwrap();
    let _: () = redis::cmd("SLOWLOG")
        .arg("RESET")
        .query_async(conn)
        .await
        .unwrap();
}

/// The logged calls of `command`, oldest first, each as its arguments after the command.
async fn logged(conn: &mut Conn, command: &str) -> Vec<Vec<String>> {
    let entries: Vec<Value> = redis::cmd("SLOWLOG")
        .arg("GET")
        .arg(-1)
        .query_async(conn)
        .await
        .unwrap();
    let mut calls = Vec::new();
    // Newest first: walk backwards.
    for entry in entries.into_iter().rev() {
        let Value::Array(fields) = entry else {
            continue;
        };
        let Some(Value::Array(args)) = fields.get(3) else {
            continue;
        };
        let args: Vec<String> = args
            .iter()
            .map(|a| redis::from_redis_value::<String>(a.clone()).unwrap_or_default())
            .collect();
        if args
            .first()
            .is_some_and(|c| c.eq_ignore_ascii_case(command))
        {
            calls.push(args[1..].to_vec());
        }
    }
    calls
}

/// The `EVALSHA` calls logged so far, oldest first, each as its arguments after the SHA.
async fn script_calls(conn: &mut Conn) -> Vec<Vec<String>> {
    logged(conn, "EVALSHA")
        .await
        .into_iter()
        .map(|args| args[1..].to_vec())
        .collect()
}

/// Whether a logged script call names `waiter` among its arguments.
fn names(call: &[String], waiter: &str) -> bool {
    call.iter().any(|a| a == waiter)
}

/// Waits until one waiter queued on `lock` and made its look after subscribing; returns its
/// queue entry (`<owner>:g<n>` or `<owner>:<n>`).
async fn queued(conn: &mut Conn, lock: &lockwise::FairLock) -> String {
    queue_reaches(lock, 1).await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    let (list, _) = queue_entries(conn, lock).await;
    assert_eq!(list.len(), 1, "{list:?}");
    list[0].clone()
}

/// Holds `lock`, logs every command from then on, queues one watchdog waiter behind the hold
/// and releases it: the waiter's queue entry, its guard, and how long after the unlock began
/// its `lock()` returned.
async fn hand_over_to_one_waiter(
    conn: &mut Conn,
    lock: &lockwise::FairLock,
) -> (String, lockwise::FairLockGuard, Duration) {
    let holder = lock.lock().await.unwrap();
    log_everything(conn).await;
    let waiter = {
        let lock = lock.clone();
        tokio::spawn(async move {
            let g = lock.lock().await.unwrap();
            (g, Instant::now())
        })
    };
    let entry = queued(conn, lock).await;
    let released = Instant::now();
    holder.unlock().await.unwrap();
    let (guard, at) = waiter.await.unwrap();
    (entry, guard, at - released)
}

/// The logged script calls that name `arg` among their arguments.
fn naming<'a>(calls: &'a [Vec<String>], arg: &str) -> Vec<&'a Vec<String>> {
    calls.iter().filter(|c| names(c, arg)).collect()
}

/// The head's `lock()` returns on the release's message: the script calls naming the waiter
/// are its one lock attempt (which queued it; its look after subscribing is a `ZSCORE` of its
/// handoff record) and, once a third of the handed hold's validity passed, its background
/// confirmation (3 arguments: lease, owner, waiter id), never a second lock attempt. The hold
/// outlives the TTL the handoff set (what was left of the waiter's queue deadline): the
/// confirmation raised it, the watchdog renews it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_hands_the_lock_to_the_head_without_a_second_trip() {
    let server = RedisServer::start();
    let ns = suite::unique_ns("fair-handoff");
    let c = client(server.url(), &ns, WATCHDOG).await;
    let mut conn = server.conn().await;
    in_task(async move {
        let lock = c.fair_lock("h");
        let (entry, guard, after) = hand_over_to_one_waiter(&mut conn, &lock).await;
        assert!(
            entry.contains(":g"),
            "a watchdog waiter asks for a handoff: {entry}"
        );
        println!("handed over {after:?} after the unlock began");
        // The confirmation runs in the background: wait for the record to go.
        let confirmed = suite::eventually(Duration::from_secs(2), || {
            let (mut conn, lock) = (conn.clone(), lock.clone());
            async move { queue_entries(&mut conn, &lock).await.1.is_empty() }
        })
        .await;
        assert!(confirmed, "the handoff record stays");
        let calls = script_calls(&mut conn).await;
        let about_waiter = naming(&calls, &entry);
        println!("script calls naming the waiter: {about_waiter:?}");
        assert_eq!(about_waiter.len(), 2, "{calls:?}");
        // numkeys, 4 keys, then the lock attempt's six arguments.
        assert_eq!(about_waiter[0].len(), 11, "{:?}", about_waiter[0]);
        // numkeys, 4 keys, then lease, owner, waiter id: the confirmation.
        assert_eq!(about_waiter[1].len(), 8, "{:?}", about_waiter[1]);
        assert_eq!(about_waiter[1][5], WATCHDOG.as_millis().to_string());
        let record = format!("!{entry}");
        assert!(
            logged(&mut conn, "ZSCORE")
                .await
                .iter()
                .any(|a| a.contains(&record)),
            "the look after subscribing reads the handoff record"
        );
        // The hold lives on past the handoff's TTL (at most the 3 s waiter lease).
        tokio::time::sleep(WATCHDOG + Duration::from_secs(1)).await;
        assert!(!guard.is_lost());
        let holds = holds_of(&mut conn, &lock, guard.owner()).await;
        assert_eq!(holds, Some(1));
        guard.unlock().await.unwrap();
        assert_clean(&conn, "after the handoff").await;
    })
    .await;
}

/// A hold taken on a handoff's message and released before its confirmation is due (a third
/// of its validity) costs no confirmation: its release removes the handoff record (the one
/// script call naming the record), and the only call naming the waiter is its lock attempt.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_short_handed_hold_needs_no_confirmation() {
    let server = RedisServer::start();
    let ns = suite::unique_ns("fair-short");
    let c = client(server.url(), &ns, WATCHDOG).await;
    let mut conn = server.conn().await;
    in_task(async move {
        let lock = c.fair_lock("s");
        let (entry, guard, _) = hand_over_to_one_waiter(&mut conn, &lock).await;
        let record = format!("!{entry}");
        let (_, zset) = queue_entries(&mut conn, &lock).await;
        assert!(zset.contains(&record), "handed over: {zset:?}");
        guard.unlock().await.unwrap();
        let (list, zset) = queue_entries(&mut conn, &lock).await;
        assert!(list.is_empty() && zset.is_empty(), "{list:?} {zset:?}");
        // Past the time the confirmation would have gone out (a third of at most 3 s).
        tokio::time::sleep(WATCHDOG).await;
        let calls = script_calls(&mut conn).await;
        let about_waiter = naming(&calls, &entry);
        assert_eq!(about_waiter.len(), 1, "the lock attempt alone: {calls:?}");
        let with_record = naming(&calls, &record);
        assert_eq!(with_record.len(), 1, "the release alone: {calls:?}");
        assert_clean(&conn, "after the short hold").await;
    })
    .await;
}

/// Waiters that do not rely on a handoff's message take the lock with their own lock script
/// call after the release, which sets their full TTL, and no confirmation follows: a waiter
/// with a lease (never handed over: a handoff would set a TTL other than its lease; the release
/// wakes it), and a `try_lock` waiter whose wait leaves it less than half the waiter lease
/// (handed over with that little TTL: its script finds the handoff).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiters_that_cannot_rely_on_a_handoff_take_the_lock_with_their_script() {
    let server = RedisServer::start();
    let ns = suite::unique_ns("fair-script");
    let c = client(server.url(), &ns, WATCHDOG).await;
    let mut conn = server.conn().await;
    in_task(async move {
        // (lock name, leased?, the least PTTL right after)
        for (name, leased, least_ttl) in [("leased", true, 19_000), ("short", false, 2_000)] {
            let lock = c.fair_lock(name);
            let holder = lock.lock().await.unwrap();
            let waiter = {
                let lock = lock.clone();
                tokio::spawn(async move {
                    match leased {
                        true => lock.lock_with_lease(Duration::from_secs(20)).await,
                        // 1 s to wait: under half the 3 s waiter lease.
                        false => lock.try_lock(Duration::from_secs(1), None).await,
                    }
                    .unwrap()
                })
            };
            let entry = queued(&mut conn, &lock).await;
            assert_eq!(entry.contains(":g"), !leased, "{entry}");
            log_everything(&mut conn).await;
            holder.unlock().await.unwrap();
            let guard = waiter.await.unwrap();
            let calls = script_calls(&mut conn).await;
            let about_waiter = naming(&calls, &entry);
            assert_eq!(about_waiter.len(), 1, "{name}: {calls:?}");
            // numkeys, 4 keys, then the lock attempt's six arguments.
            assert_eq!(about_waiter[0].len(), 11, "{name}: {:?}", about_waiter[0]);
            let pttl: i64 = redis::cmd("PTTL")
                .arg(lock.key())
                .query_async(&mut conn)
                .await
                .unwrap();
            assert!(pttl > least_ttl, "{name}: {pttl}");
            guard.unlock().await.unwrap();
            assert_clean(&conn, name).await;
        }
    })
    .await;
}

/// The release's message never reaches the head (its subscription connection was killed just
/// before): the reconnect wakes it, and its next attempt finds the handoff record. The hold
/// is counted once (the lock script does not count it as a re-entry), and its single unlock
/// frees the lock.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_handoff_message_is_found_by_the_next_attempt() {
    let server = RedisServer::start();
    let ns = suite::unique_ns("fair-lost-msg");
    let c = client(server.url(), &ns, WATCHDOG).await;
    let holder_client = client(server.url(), &ns, WATCHDOG).await;
    let mut conn = server.conn().await;
    in_task(async move {
        let lock = c.fair_lock("m");
        let holder = holder_client.fair_lock("m").lock().await.unwrap();
        let waiter = {
            let lock = lock.clone();
            tokio::spawn(async move { lock.lock().await.unwrap() })
        };
        let entry = queued(&mut conn, &lock).await;
        assert!(suite::kill_pubsub(&mut conn).await >= 1);
        holder.unlock().await.unwrap();
        let guard = tokio::time::timeout(Duration::from_secs(5), waiter)
            .await
            .expect("the waiter finds its handoff")
            .unwrap();
        // The reconnect may beat the release, and the message then arrive: the record then goes
        // with the background confirmation instead of the attempt.
        let record = format!("!{entry}");
        let gone = suite::eventually(Duration::from_secs(2), || {
            let (mut conn, lock, record) = (conn.clone(), lock.clone(), record.clone());
            async move { !queue_entries(&mut conn, &lock).await.1.contains(&record) }
        })
        .await;
        assert!(gone, "the handoff record stays");
        let holds = holds_of(&mut conn, &lock, guard.owner()).await;
        assert_eq!(holds, Some(1), "counted once");
        guard.unlock().await.unwrap();
        let exists: bool = redis::cmd("EXISTS")
            .arg(lock.key())
            .query_async(&mut conn)
            .await
            .unwrap();
        assert!(!exists, "one unlock frees the handed lock");
        assert_clean(&conn, "after the lost message").await;
    })
    .await;
}

/// A handoff to the only waiter leaves its record in a deadline set that keeps its TTL (the
/// record must not recreate the set the waiter's removal emptied), and the record expires
/// with it when the waiter never confirms (it died).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_handoff_record_always_has_a_ttl() {
    let server = RedisServer::start();
    let ns = suite::unique_ns("fair-record-ttl");
    let c = client(server.url(), &ns, Duration::from_secs(30)).await;
    let mut conn = server.conn().await;
    in_task(async move {
        let lock = c.fair_lock("r");
        let holder = lock.lock().await.unwrap();
        insert_dead_waiter(&mut conn, &lock, "dead:g1", Duration::from_millis(800)).await;
        holder.unlock().await.unwrap();
        let (list, zset) = queue_entries(&mut conn, &lock).await;
        assert!(list.is_empty(), "{list:?}");
        assert_eq!(zset, vec!["!dead:g1".to_string()]);
        let pttl: i64 = redis::cmd("PTTL")
            .arg(lock.timeouts_key())
            .query_async(&mut conn)
            .await
            .unwrap();
        assert!(pttl > 0, "the record's set has no TTL: {pttl}");
        assert_clean(&conn, "after the dead waiter's handoff expired").await;
    })
    .await;
}

/// The leave script of a waiter that was handed the lock but leaves before it heard (timed
/// out, dropped) gives the hold back and hands the lock on to the next head at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_handed_waiter_that_leaves_gives_the_lock_back() {
    let server = RedisServer::start();
    let ns = suite::unique_ns("fair-leave-handed");
    let c = client(server.url(), &ns, Duration::from_secs(30)).await;
    let mut conn = server.conn().await;
    in_task(async move {
        let lock = c.fair_lock("v");
        let holder = lock.lock().await.unwrap();
        // A waiter of another process, which will leave (by the script it would run).
        insert_dead_waiter(&mut conn, &lock, "gone:g3", Duration::from_secs(20)).await;
        let waiter = spawn_timed_waiter(&lock);
        queue_reaches(&lock, 2).await;
        holder.unlock().await.unwrap();
        let (list, zset) = queue_entries(&mut conn, &lock).await;
        assert_eq!(list.len(), 1, "the handed head left the queue: {list:?}");
        assert!(zset.contains(&"!gone:g3".to_string()), "{zset:?}");
        let left_at = Instant::now();
        let script = [
            include_str!("../../lua/fair_queue.lua"),
            include_str!("../../lua/fair_leave.lua"),
        ]
        .join("\n");
        let channel_prefix = format!("{ns}:fairchannel:{{v}}");
        let left: i64 = redis::Script::new(&script)
            .key(lock.key())
            .key(format!("{ns}:channel:{{v}}"))
            .key(lock.queue_key())
            .key(lock.timeouts_key())
            .arg("gone:g3")
            .arg(channel_prefix)
            .arg("publish")
            .invoke_async(&mut conn)
            .await
            .unwrap();
        assert_eq!(left, 2, "left with the lock handed back");
        let acquired = waiter.await.unwrap();
        println!(
            "next waiter acquired {:?} after the handed waiter left",
            acquired - left_at
        );
        assert!(acquired - left_at < Duration::from_secs(1));
        assert_clean(&conn, "after the handed waiter left").await;
    })
    .await;
}

/// What the paused waiter's `lock()` gave it, as its own thread saw it.
#[derive(Debug)]
struct PausedWaiter {
    /// When `lock()` returned a guard.
    returned: Instant,
    /// `is_lost()` right when it returned.
    lost_at_once: bool,
    /// `validity()` right when it returned.
    validity: Duration,
    /// The hold count the server had for the guard's owner right after (`None`: no field).
    server_holds: Option<u32>,
    /// The end of its critical section: the first time `is_lost()` said so, or, if it never
    /// did, just before its unlock was sent.
    held_until: Instant,
    /// What its `unlock()` answered: `Ok`, `NotHeld`, or another error.
    unlock: Result<(), String>,
}

/// Runs a watchdog waiter of lock `name` on its own thread and `current_thread` runtime (its
/// client's connections and listener too, as in a process of its own). Each duration sent on
/// the returned channel blocks that thread for that long (the runtime stands still, like a
/// process under SIGSTOP); `paused` is true meanwhile. The waiter keeps its guard for
/// `section`, watching `is_lost()`, then unlocks; its report comes on `report`.
fn spawn_pausable_waiter(
    url: String,
    ns: String,
    name: &'static str,
    watchdog: Duration,
    section: Duration,
    paused: Arc<AtomicBool>,
    report: tokio::sync::oneshot::Sender<PausedWaiter>,
) -> (
    tokio::sync::mpsc::UnboundedSender<Duration>,
    std::thread::JoinHandle<()>,
) {
    let (pause, mut pauses) = tokio::sync::mpsc::unbounded_channel::<Duration>();
    let thread = std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async move {
            let c = client(&url, &ns, watchdog).await;
            let mut conn = redis::Client::open(url.as_str())
                .unwrap()
                .get_multiplexed_async_connection()
                .await
                .unwrap();
            tokio::spawn(async move {
                while let Some(d) = pauses.recv().await {
                    paused.store(true, Ordering::SeqCst);
                    std::thread::sleep(d);
                    paused.store(false, Ordering::SeqCst);
                }
            });
            let lock = c.fair_lock(name);
            let waiter = tokio::spawn(async move {
                let guard = lock.lock().await.unwrap();
                let returned = Instant::now();
                let lost_at_once = guard.is_lost();
                let validity = guard.validity();
                let server_holds = holds_of(&mut conn, &lock, guard.owner()).await;
                // The critical section: until the guard says it is lost, or `section` passed.
                let mut held_until = Instant::now();
                while !guard.is_lost() && returned.elapsed() < section {
                    tokio::time::sleep(Duration::from_millis(5)).await;
                    held_until = Instant::now();
                }
                let unlock = guard.unlock().await.map_err(|e| match e {
                    lockwise::Error::NotHeld { .. } => "NotHeld".to_string(),
                    e => e.to_string(),
                });
                PausedWaiter {
                    returned,
                    lost_at_once,
                    validity,
                    server_holds,
                    held_until,
                    unlock,
                }
            });
            let _ = report.send(waiter.await.unwrap());
        });
    });
    (pause, thread)
}

/// Issue item 7: a watchdog waiter whose process stands still (SIGSTOP, a blocked runtime)
/// across the release that hands it the lock. The handed hold's TTL is what was left of its
/// queue deadline, so it expires during the pause, and another client takes the lock. After
/// the pause the waiter must not count that handoff as a hold: its `lock()` returns no guard
/// while the other client holds the lock, or (were it to return one) a guard that is lost at
/// once and whose `unlock()` is `NotHeld`. Every critical section (from the guard until it
/// ended or the guard said it is lost) is recorded: no two overlap.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_paused_across_its_handoff_takes_no_expired_hold() {
    const WATCHDOG_1S: Duration = Duration::from_secs(1); // waiter lease 1 s
    const PAUSE: Duration = Duration::from_millis(2500);
    let server = RedisServer::start();
    let ns = suite::unique_ns("fair-paused-handoff");
    let holder_client = client(server.url(), &ns, WATCHDOG_1S).await;
    let other_client = client(server.url(), &ns, WATCHDOG_1S).await;
    let mut conn = server.conn().await;
    in_task(async move {
        let lock = holder_client.fair_lock("p");
        let holder = lock.lock().await.unwrap();
        let paused = Arc::new(AtomicBool::new(false));
        let (report, reported) = tokio::sync::oneshot::channel();
        let (pause, thread) = spawn_pausable_waiter(
            server.url().to_string(),
            ns.clone(),
            "p",
            WATCHDOG_1S,
            Duration::from_millis(400),
            paused.clone(),
            report,
        );
        let entry = queued(&mut conn, &lock).await;
        assert!(entry.contains(":g"), "{entry}");
        // Stop the waiter, then release: the lock is handed to it while it stands still.
        pause.send(PAUSE).unwrap();
        while !paused.load(Ordering::SeqCst) {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        let paused_at = Instant::now();
        holder.unlock().await.unwrap();
        let (_, zset) = queue_entries(&mut conn, &lock).await;
        assert!(zset.contains(&format!("!{entry}")), "handed over: {zset:?}");
        // Another client takes the lock once the handed hold expired (at the latest one
        // waiter lease after the waiter's last attempt), and holds it well past the pause.
        let other = {
            let lock = other_client.fair_lock("p");
            tokio::spawn(async move {
                let g = lock.lock().await.unwrap();
                let start = Instant::now();
                tokio::time::sleep(Duration::from_millis(2500)).await;
                let end = Instant::now();
                let lost = g.is_lost();
                let unlocked = g.unlock().await;
                (start, end, lost, unlocked)
            })
        };
        let w = tokio::time::timeout(Duration::from_secs(15), reported)
            .await
            .expect("the paused waiter acquires at the latest after the other client's unlock")
            .unwrap();
        let (o_start, o_end, o_lost, o_unlocked) = other.await.unwrap();
        thread.join().unwrap();
        println!(
            "other client held {:?}..{:?} after the pause began; the waiter's lock() returned \
             at {:?} (lost at once: {}, validity {:?}, server holds {:?}), its section ended at \
             {:?}, its unlock: {:?}",
            o_start - paused_at,
            o_end - paused_at,
            w.returned - paused_at,
            w.lost_at_once,
            w.validity,
            w.server_holds,
            w.held_until - paused_at,
            w.unlock,
        );
        assert!(!o_lost, "the other client's hold was not lost");
        o_unlocked.expect("the other client's unlock");
        assert!(
            o_start < paused_at + PAUSE,
            "the other client took the lock during the pause"
        );
        if w.returned < o_end {
            // Returned while the other client held the lock: only a guard lost at once, that
            // the server does not count, and whose unlock says so.
            assert!(w.lost_at_once, "a guard for an expired handoff: {w:?}");
            assert_eq!(w.server_holds, None, "{w:?}");
            assert_eq!(w.unlock, Err("NotHeld".to_string()), "{w:?}");
        } else {
            assert_eq!(w.server_holds, Some(1), "{w:?}");
            w.unlock.as_ref().expect("the waiter's unlock");
        }
        let mut sections = vec![Interval {
            start: o_start,
            end: o_end,
            who: 0,
        }];
        if !w.lost_at_once {
            sections.push(Interval {
                start: w.returned,
                end: w.held_until,
                who: 1,
            });
        }
        suite::assert_no_overlap(&mut sections);
        assert_clean(&conn, "after the paused waiter").await;
    })
    .await;
}

/// Makes the server a replica of a dead master (`on`: writes, and so every lock script, are
/// refused with `READONLY`: the command did not run), or a master again. Its data stays.
async fn refuse_writes(conn: &mut Conn, on: bool) {
    let mut cmd = redis::cmd("REPLICAOF");
    if on {
        cmd.arg("127.0.0.1").arg(suite::server::free_port());
    } else {
        cmd.arg("NO").arg("ONE");
    }
    let _: () = cmd.query_async(conn).await.unwrap();
}

/// The deadline (server ms) of queue entry `entry` of `lock`.
async fn deadline_of(conn: &mut Conn, lock: &lockwise::FairLock, entry: &str) -> Option<f64> {
    redis::cmd("ZSCORE")
        .arg(lock.timeouts_key())
        .arg(entry)
        .query_async(conn)
        .await
        .unwrap()
}

/// Issue item 7, the refresh that did not run: a watchdog waiter's refreshes of its queue
/// entry are refused before they run (`READONLY`, as `LOADING`, `TRYAGAIN` or `CLUSTERDOWN`
/// would be) for most of its waiter lease, and the lock is handed to it right after. The
/// handoff's TTL is what is left of the deadline its last attempt that *ran* set, so that is
/// what its hold's validity may count from, not the send time of a refused refresh. Counted
/// from a refused one, the waiter would take the handoff on the message and believe it held
/// the lock well past the hold's expiry, while another client took it. Every critical
/// section is recorded: no two overlap, and the waiter's unlock says whether its hold lasted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refreshes_refused_unrun_do_not_stretch_a_handoff() {
    const WATCHDOG_3S: Duration = Duration::from_secs(3); // waiter lease 3 s
    let server = RedisServer::start();
    let ns = suite::unique_ns("fair-refused-refresh");
    let holder_client = client(server.url(), &ns, WATCHDOG_3S).await;
    let waiter_client = client(server.url(), &ns, WATCHDOG_3S).await;
    let other_client = client(server.url(), &ns, WATCHDOG_3S).await;
    let mut conn = server.conn().await;
    in_task(async move {
        let lock = holder_client.fair_lock("r");
        // A lease: the holder needs no renewal while writes are refused.
        let holder = lock.lock_with_lease(Duration::from_secs(30)).await.unwrap();
        let waiter = {
            let lock = waiter_client.fair_lock("r");
            tokio::spawn(async move {
                let g = lock.lock().await.unwrap();
                let returned = Instant::now();
                let lost_at_once = g.is_lost();
                let mut held_until = Instant::now();
                while !g.is_lost() && returned.elapsed() < Duration::from_millis(1200) {
                    tokio::time::sleep(Duration::from_millis(5)).await;
                    held_until = Instant::now();
                }
                let lost = g.is_lost();
                let unlock = g.unlock().await;
                (returned, lost_at_once, held_until, lost, unlock)
            })
        };
        let entry = queued(&mut conn, &lock).await;
        // Right after one of its refreshes ran: refuse writes for most of the waiter lease.
        let before = deadline_of(&mut conn, &lock, &entry).await;
        while deadline_of(&mut conn, &lock, &entry).await == before {
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
        let ran = Instant::now();
        refuse_writes(&mut conn, true).await;
        tokio::time::sleep_until((ran + Duration::from_millis(2600)).into()).await;
        refuse_writes(&mut conn, false).await;
        // Handed over with what is left of the deadline of the refresh that ran (~0.4 s).
        let (secs, micros): (u64, u64) = redis::cmd("TIME").query_async(&mut conn).await.unwrap();
        let deadline = deadline_of(&mut conn, &lock, &entry).await.unwrap();
        let handed_ttl = deadline as i64 - (secs * 1000 + micros / 1000) as i64;
        holder.unlock().await.unwrap();
        // Another client queues now, and takes the lock as soon as it is free.
        let other = {
            let lock = other_client.fair_lock("r");
            tokio::spawn(async move {
                let g = lock.lock().await.unwrap();
                let start = Instant::now();
                tokio::time::sleep(Duration::from_millis(500)).await;
                let end = Instant::now();
                let lost = g.is_lost();
                (start, end, lost, g.unlock().await)
            })
        };
        let (w_returned, w_lost_at_once, w_until, w_lost, w_unlock) = waiter.await.unwrap();
        let (o_start, o_end, o_lost, o_unlock) = other.await.unwrap();
        println!(
            "handed TTL {handed_ttl} ms; after the refresh that ran: the waiter's guard \
             {:?}..{:?} (lost at once {w_lost_at_once}, lost {w_lost}, unlock {w_unlock:?}), \
             the other client's {:?}..{:?}",
            w_returned - ran,
            w_until - ran,
            o_start - ran,
            o_end - ran,
        );
        assert!(handed_ttl > 0 && handed_ttl < 1000, "{handed_ttl}");
        assert!(!o_lost);
        o_unlock.unwrap();
        // Its unlock is `Ok` only if its hold lasted.
        match w_unlock {
            Ok(()) => assert!(!w_lost, "unlock Ok after the guard was told it is lost"),
            Err(e) => assert!(e.is_not_held() && w_lost, "{e:?}"),
        }
        let mut sections = vec![Interval {
            start: o_start,
            end: o_end,
            who: 0,
        }];
        if !w_lost_at_once {
            sections.push(Interval {
                start: w_returned,
                end: w_until,
                who: 1,
            });
        }
        suite::assert_no_overlap(&mut sections);
        assert_clean(&conn, "after the refused refreshes").await;
    })
    .await;
}

/// Issue item 7, the confirmation: a hold taken on a handoff's message whose key vanished
/// before its confirmation (a restart without persistence, a flush, an expiry the waiter did
/// not see) is reported lost by that confirmation, which finds no hold of its owner:
/// `lost()` fires when the confirmation is due (a third of the hold's validity), not only
/// when the validity runs out or the watchdog's first renewal comes (a watchdog period
/// later), and the guard's unlock is `NotHeld`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_confirmation_that_finds_the_hold_gone_fires_lost() {
    // A waiter lease of 5 s, and a watchdog period of 5 s: the confirmation (at a third of
    // the handed hold's validity, under 1.7 s) comes well before either.
    const WATCHDOG_15S: Duration = Duration::from_secs(15);
    let server = RedisServer::start();
    let ns = suite::unique_ns("fair-confirm-gone");
    let c = client(server.url(), &ns, WATCHDOG_15S).await;
    let mut conn = server.conn().await;
    in_task(async move {
        let lock = c.fair_lock("g");
        let (entry, guard, _) = hand_over_to_one_waiter(&mut conn, &lock).await;
        let (_, zset) = queue_entries(&mut conn, &lock).await;
        assert!(
            zset.contains(&format!("!{entry}")),
            "taken on the message, not confirmed yet: {zset:?}"
        );
        let validity = guard.validity();
        // The hold vanishes on the server.
        let deleted: i64 = redis::cmd("DEL")
            .arg(lock.key())
            .query_async(&mut conn)
            .await
            .unwrap();
        assert_eq!(deleted, 1);
        let gone = Instant::now();
        let lost = guard.lost();
        let told = tokio::time::timeout(validity + Duration::from_secs(2), lost.cancelled())
            .await
            .is_ok();
        let after = gone.elapsed();
        println!("validity {validity:?} when the hold vanished; lost() fired after {after:?}");
        assert!(told, "lost() never fired");
        assert!(
            after <= validity / 3 + Duration::from_millis(500),
            "lost() fired {after:?} after the hold vanished, not at the confirmation \
             (due within {:?})",
            validity / 3
        );
        assert!(guard.is_lost());
        let unlocked = guard.unlock().await;
        assert!(
            matches!(unlocked, Err(ref e) if e.is_not_held()),
            "{unlocked:?}"
        );
        assert_clean(&conn, "after the vanished handoff").await;
    })
    .await;
}

//! FairLock handoff: a release gives the lock to the head of the queue inside the unlock
//! script, and the head's `lock()` returns on the message, without a lock-script call of its
//! own. What happens when the message is lost, when a handed waiter leaves before it heard,
//! and for a waiter with a lease or near its deadline (it takes the lock through its script).
//! A dead head handed the lock is in `fair.rs` (`stale_head_delays_the_queue_at_most_its_
//! deadline`). Script calls are read from the server's SLOWLOG (every command logged, in
//! order).

use std::time::{Duration, Instant};

use redis::Value;
use support::{in_task, queue_reaches, Conn, RedisServer};

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
    let ns = support::unique_ns("fair-handoff");
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
        let confirmed = support::eventually(Duration::from_secs(2), || {
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
    let ns = support::unique_ns("fair-short");
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
    let ns = support::unique_ns("fair-script");
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
    let ns = support::unique_ns("fair-lost-msg");
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
        assert!(support::kill_pubsub(&mut conn).await >= 1);
        holder.unlock().await.unwrap();
        let guard = tokio::time::timeout(Duration::from_secs(5), waiter)
            .await
            .expect("the waiter finds its handoff")
            .unwrap();
        // The reconnect may beat the release, and the message then arrive: the record then goes
        // with the background confirmation instead of the attempt.
        let record = format!("!{entry}");
        let gone = support::eventually(Duration::from_secs(2), || {
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
    let ns = support::unique_ns("fair-record-ttl");
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
    let ns = support::unique_ns("fair-leave-handed");
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

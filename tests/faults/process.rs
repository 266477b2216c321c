//! Fault injection with real processes: holders and waiters run in child processes
//! (the `test-child` binary of `suite/`, driven through
//! `suite::child`), the parent SIGSTOPs, SIGKILLs and restarts for real, and every
//! scenario is judged by the history checker (`lockwise_testkit::checker`), not by eye.

use suite::OrNone;

use suite::Conn;

use std::time::{Duration, Instant};

use crate::checker::{self, History, Op};
use lockwise::Client;
use redis::AsyncCommands;
use suite::child::ChildProc;
use suite::in_task;
use suite::{queue_reaches, RedisServer};

/// Watchdog timeout and lease of every scenario: short, so faults play out in seconds.
const WATCHDOG: Duration = Duration::from_secs(1);
const LEASE: Duration = Duration::from_secs(1);
/// Watchdog timeout of the parent's client in the fair-waiter scenario.
const FAIR_WATCHDOG: Duration = Duration::from_secs(30);

async fn client(url: &str, ns: &str) -> Client {
    suite::client_at(url, ns, WATCHDOG).await
}

/// The checker's server-side checks after quiescence (fencing counters excepted), within 5 s.
async fn quiescent(conn: &mut Conn, ns: &str) -> Vec<checker::Violation> {
    checker::check_quiescent(conn, ns, Duration::from_secs(5)).await
}

fn secs(ns: u64) -> f64 {
    ns as f64 / 1e9
}

/// Eventually (within 3 s) the database has no key and no channel is subscribed.
async fn assert_clean(conn: &Conn, context: &str) {
    let clean = suite::eventually(Duration::from_secs(3), || {
        let mut c = conn.clone();
        async move {
            suite::keys_with_pttl(&mut c).await.is_empty()
                && suite::active_channels(&mut c).await.is_empty()
        }
    })
    .await;
    if !clean {
        let mut c = conn.clone();
        panic!(
            "{context}: not clean: keys {:?}, channels {:?}",
            suite::keys_with_pttl(&mut c).await,
            suite::active_channels(&mut c).await
        );
    }
}

// ---------------------------------------------------------------------------------------------
// 1. Baseline: 8 processes x 2 tasks on one lock

/// Processes, tasks per process and acquisitions of the baseline.
const BASELINE_PROCS: usize = 8;
const BASELINE_TASKS: usize = 2;
const BASELINE_TARGET: u64 = 10_000;

/// Scenario 1: 8 child processes x 2 tasks take one lock (watchdog 1 s; in every other
/// process one task takes it as a `SpinLock`, which shares the `RLock`'s hash) until a
/// shared counter, incremented non-atomically (GET then SET) inside each hold, reaches 10,000.
/// The checker finds no overlap of the 10,000+ recorded holds, the counter is exact, no key
/// is ever without a TTL (sampled every 50 ms), nothing is left afterwards.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn baseline_8_processes_x_2_tasks() {
    let server = RedisServer::start();
    let ns = suite::unique_ns("fp-base");
    let counter = format!("counter-{ns}");
    let mut conn = server.conn().await;
    let watcher = client(server.url(), &ns).await;
    let key = watcher.lock("baseline").key().to_string();
    let started = Instant::now();
    let children: Vec<ChildProc> = (0..BASELINE_PROCS)
        .map(|p| {
            let mut env = vec![
                ("LOCKWISE_FP_COUNTER", counter.clone()),
                ("LOCKWISE_FP_TARGET", BASELINE_TARGET.to_string()),
            ];
            // Every other process has one task on a SpinLock of the same name.
            if p % 2 == 1 {
                env.push(("LOCKWISE_FP_SPIN", "1".to_string()));
            }
            ChildProc::spawn("baseline", server.url(), &ns, &format!("p{p}"), &env)
        })
        .collect();
    // While they run: every key of the namespace has a TTL, hold counts are positive.
    let h = History::new();
    let mut ttl_violations = Vec::new();
    let mut samples = 0;
    let finished = {
        let mut outputs = Vec::new();
        let mut pending: Vec<_> = children
            .into_iter()
            .map(|c| tokio::spawn(c.finish(Duration::from_secs(60))))
            .collect();
        while !pending.is_empty() {
            ttl_violations.extend(checker::check_ttls(&mut conn, &ns).await);
            checker::sample_lock(&h, &mut conn, "baseline", &key).await;
            samples += 1;
            tokio::time::sleep(Duration::from_millis(50)).await;
            let mut still = Vec::new();
            for p in pending {
                if p.is_finished() {
                    outputs.push(p.await.unwrap());
                } else {
                    still.push(p);
                }
            }
            pending = still;
        }
        outputs
    };
    let elapsed = started.elapsed();
    let mut increments = 0;
    for out in &finished {
        h.merge_text(out);
        let done = out
            .lines()
            .find(|l| l.contains("@done"))
            .expect("child summary");
        let incr: u64 = done
            .split_whitespace()
            .find_map(|kv| kv.strip_prefix("increments="))
            .unwrap()
            .parse()
            .unwrap();
        increments += incr;
        assert!(
            done.ends_with("anomalies="),
            "child reported anomalies: {done}"
        );
    }
    let final_count: u64 = conn.get(&counter).await.unwrap();
    let acquisitions = h.ok_count();
    let mut violations = h.check();
    violations.extend(ttl_violations);
    let _: () = conn.del(&counter).await.unwrap();
    drop(watcher);
    violations.extend(quiescent(&mut conn, &ns).await);
    println!(
        "baseline: {BASELINE_PROCS} processes x {BASELINE_TASKS} tasks, {acquisitions} acquisitions in {elapsed:.1?} \
         ({:.0}/s), counter {final_count}, {samples} TTL samples, {} violations",
        acquisitions as f64 / elapsed.as_secs_f64(),
        violations.len()
    );
    checker::assert_clean(&violations);
    assert_eq!(final_count, BASELINE_TARGET, "lost or extra increments");
    assert_eq!(increments, BASELINE_TARGET);
    // Every task's last acquisition saw the target reached and incremented nothing.
    let last_looks = (BASELINE_PROCS * BASELINE_TASKS) as u64;
    assert_eq!(acquisitions as u64, BASELINE_TARGET + last_looks);
}

// ---------------------------------------------------------------------------------------------
// 2. Holder stall: SIGSTOP for 2 x the lease

/// Scenario 2: a holder process is SIGSTOPped for 2 x its 1 s lease while holding a
/// fenced lock with a lease and one kept by the watchdog (1 s). Meanwhile another client takes
/// both locks (when their TTLs run out) and writes with its tokens. After SIGCONT the old
/// holder's late writes are rejected (StaleToken), its watchdog fires `lost()`, both unlocks
/// are `NotHeld`, and nothing it does touches the new owner's keys: hold count 1, the PTTL of
/// the new owner's lease only goes down. The checker finds no overlap within validity, no
/// stale write accepted, tokens increasing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn holder_stall_sigstop_2x_lease() {
    let server = RedisServer::start();
    let ns = suite::unique_ns("fp-stall");
    let mut conn = server.conn().await;
    let c = client(server.url(), &ns).await;
    let mut child = ChildProc::spawn("stalled-holder", server.url(), &ns, "child", &[]);
    child.wait_line("@ready", Duration::from_secs(15)).await;
    let stop_at = checker::now_ns();
    child.signal("STOP");
    let h = History::new();
    let new_lease = Duration::from_secs(20);
    // The new owner takes both locks (as soon as the stalled holder's TTLs run out).
    let (guards, took) = {
        let (c, h, ns) = (c.clone(), h.clone(), ns.clone());
        in_task(async move {
            let mut guards = Vec::new();
            let mut took = Vec::new();
            for (lock, res) in [("stall-lease", "res-lease"), ("stall-wd", "res-wd")] {
                let id = h.invoke("parent", lock);
                let g = c
                    .fenced_lock(lock)
                    .try_lock(Duration::from_secs(5), Some(new_lease))
                    .await
                    .or_none()
                    .unwrap()
                    .expect("the new owner gets the lock once the stalled holder's TTL ran out");
                h.ok(&id, g.owner(), Some(g.token()), Some(new_lease));
                took.push(checker::now_ns() - stop_at);
                let t = checker::now_ns();
                c.fenced_value(format!("{res}-{ns}"))
                    .write(g.token(), "second")
                    .await
                    .unwrap();
                h.write("parent", &format!("{res}-{ns}"), g.token(), t, Some(true));
                guards.push((id, g));
            }
            (guards, took)
        })
        .await
    };
    let keys: Vec<String> = ["stall-lease", "stall-wd"]
        .iter()
        .map(|l| c.fenced_lock(l).key().to_string())
        .collect();
    let mut before = Vec::new();
    for (lock, key) in ["stall-lease", "stall-wd"].iter().zip(&keys) {
        before.push(checker::sample_lock(&h, &mut conn, lock, key).await);
    }
    // Stalled for 2 x the lease in total.
    let stall = 2 * LEASE;
    let since = Duration::from_nanos(checker::now_ns() - stop_at);
    tokio::time::sleep(stall.saturating_sub(since)).await;
    let cont_at = checker::now_ns();
    child.signal("CONT");
    child.send("go");
    let out = child.finish(Duration::from_secs(15)).await;
    h.merge_text(&out);
    let result = out
        .lines()
        .find_map(|l| l.split_once("@result ").map(|(_, r)| r.to_string()))
        .expect("child result");
    println!(
        "stall: stopped {:.2} s; new owner took the locks {:.2} s / {:.2} s after the stop; child: {result}",
        secs(cont_at - stop_at),
        secs(took[0]),
        secs(took[1])
    );
    // The child's holds ended (as far as it could act) when it was stopped.
    for a in h.acquisitions().iter().filter(|a| a.client == "child") {
        h.release_at(&checker::AcqId(a.id.clone()), stop_at, "SIGSTOPped");
    }
    // The new owner's holds were not touched by the woken holder.
    for (i, (lock, key)) in ["stall-lease", "stall-wd"].iter().zip(&keys).enumerate() {
        let pttl = checker::sample_lock(&h, &mut conn, lock, key).await;
        assert!(
            pttl > 0 && pttl < before[i],
            "{lock}: the new owner's PTTL went from {} to {pttl} ms",
            before[i]
        );
        let (ref _id, ref g) = guards[i];
        let mut fields: Vec<(String, i64)> = conn.hgetall(key).await.unwrap();
        // A waiter that found the lock taken marked it: not a hold.
        fields.retain(|(f, _)| f != suite::WAITER_MARK);
        fields.sort();
        let want = vec![
            (g.owner().to_string(), 1),
            ("token".to_string(), g.token() as i64),
        ];
        assert_eq!(fields, want, "{lock}: the new owner's hold changed");
        let res = c.fenced_value(format!("{}-{ns}", ["res-lease", "res-wd"][i]));
        assert_eq!(
            res.read::<String>().await.unwrap().as_deref(),
            Some("second")
        );
        assert_eq!(res.highest_token().await.unwrap(), Some(g.token()));
    }
    for kv in [
        "write_lease=StaleToken",
        "write_wd=StaleToken",
        "unlock_lease=NotHeld",
        "unlock_wd=NotHeld",
    ] {
        assert!(
            result.split_whitespace().any(|r| r == kv),
            "want {kv}: {result}"
        );
    }
    let lost_ms: u64 = result
        .split_whitespace()
        .find_map(|r| r.strip_prefix("lost_wd_after_ms="))
        .unwrap()
        .parse()
        .unwrap_or_else(|_| panic!("the watchdog never reported the lock lost: {result}"));
    assert!(lost_ms < 2000, "{lost_ms}");
    in_task({
        let h = h.clone();
        async move {
            for (id, g) in guards {
                h.release(&id);
                g.unlock().await.unwrap();
            }
        }
    })
    .await;
    let mut violations = h.check();
    assert_eq!(h.writes().len(), 6);
    assert_eq!(h.ok_count(), 4);
    for res in ["res-lease", "res-wd"] {
        let _: () = conn.del(format!("{res}-{ns}")).await.unwrap();
    }
    violations.extend(quiescent(&mut conn, &ns).await);
    checker::assert_clean(&violations);
}

// ---------------------------------------------------------------------------------------------
// 7. Holder crash: SIGKILL

/// Scenario 7: a child process holding a watchdog lock (timeout 1 s) is SIGKILLed
/// while the parent waits in `lock()`: the parent acquires within the TTL + a little
/// (< 1 s + 1 s slack after the kill), no overlap, nothing left.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn holder_crash_sigkill() {
    let server = RedisServer::start();
    let ns = suite::unique_ns("fp-crash");
    let mut conn = server.conn().await;
    let c = client(server.url(), &ns).await;
    let mut child = ChildProc::spawn(
        "holder",
        server.url(),
        &ns,
        "child",
        &[
            ("LOCKWISE_FP_KIND", "rlock".into()),
            ("LOCKWISE_FP_LOCK", "crash".into()),
            ("LOCKWISE_FP_HOLD_MS", "60000".into()),
        ],
    );
    child.wait_line("@acquired", Duration::from_secs(15)).await;
    let h = History::new();
    let waiter = {
        let (c, h) = (c.clone(), h.clone());
        tokio::spawn(async move {
            let id = h.invoke("parent", "crash");
            let g = c.lock("crash").lock().await.unwrap();
            h.ok(&id, g.owner(), None, None);
            let at = checker::now_ns();
            h.release(&id);
            g.unlock().await.unwrap();
            at
        })
    };
    // Let the waiter subscribe and the child's watchdog renew a few times (period 333 ms).
    tokio::time::sleep(Duration::from_millis(700)).await;
    assert!(
        !waiter.is_finished(),
        "the waiter got a lock the child holds"
    );
    let killed = checker::now_ns();
    child.sigkill();
    let acquired = waiter.await.unwrap();
    let delay = Duration::from_nanos(acquired - killed);
    h.merge_text(&child.output());
    for a in h.acquisitions().iter().filter(|a| a.client == "child") {
        assert_eq!(a.op, Op::Ok, "{a:?}");
        h.release_at(&checker::AcqId(a.id.clone()), killed, "SIGKILLed");
    }
    println!("crash: the waiter acquired {delay:?} after the holder process was SIGKILLed (watchdog 1 s)");
    assert!(delay < WATCHDOG + Duration::from_secs(1), "{delay:?}");
    let mut violations = h.check();
    assert_eq!(h.ok_count(), 2);
    violations.extend(quiescent(&mut conn, &ns).await);
    checker::assert_clean(&violations);
}

// ---------------------------------------------------------------------------------------------
// 9. Fair-lock waiter crash: SIGKILL queued waiter processes

/// Scenario 9: six child processes queue on a FairLock the parent holds, one after
/// another; two of them are SIGKILLed while queued. After the parent unlocks, the four live
/// waiters acquire in their arrival order (each dead waiter costs at most its 1 s waiter
/// lease), the checker finds no overlap, and no queue entry, key or channel is left.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fair_waiter_crash_sigkill() {
    const WAITERS: usize = 6;
    const KILLED: [usize; 2] = [1, 3];
    let server = RedisServer::start();
    let ns = suite::unique_ns("fp-fair");
    let mut conn = server.conn().await;
    let c = client(server.url(), &ns).await;
    let h = History::new();
    let (holder, holder_id) = {
        let (c, h) = (c.clone(), h.clone());
        in_task(async move {
            let id = h.invoke("parent", "fifo");
            let g = c.fair_lock("fifo").lock().await.unwrap();
            h.ok(&id, g.owner(), None, None);
            (g, id)
        })
        .await
    };
    let lock = c.fair_lock("fifo");
    let mut children = Vec::new();
    for i in 0..WAITERS {
        children.push(ChildProc::spawn(
            "holder",
            server.url(),
            &ns,
            &format!("w{i}"),
            &[
                ("LOCKWISE_FP_KIND", "fair".into()),
                ("LOCKWISE_FP_LOCK", "fifo".into()),
                ("LOCKWISE_FP_HOLD_MS", "20".into()),
            ],
        ));
        let queued = suite::eventually(Duration::from_secs(15), || async {
            lock.queue_len().await.unwrap() == i + 1
        })
        .await;
        assert!(queued, "waiter {i} never queued");
    }
    for &k in &KILLED {
        children[k].sigkill();
    }
    let released = checker::now_ns();
    h.release(&holder_id);
    in_task(async move { holder.unlock().await.unwrap() }).await;
    let mut outputs = Vec::new();
    for (i, child) in children.into_iter().enumerate() {
        if KILLED.contains(&i) {
            let mut child = child;
            outputs.push(child.output());
        } else {
            outputs.push(child.finish(Duration::from_secs(20)).await);
        }
    }
    let all_done = checker::now_ns();
    for out in &outputs {
        h.merge_text(out);
    }
    let mut order: Vec<(u64, String)> = h
        .acquisitions()
        .into_iter()
        .filter(|a| a.op == Op::Ok && a.client != "parent")
        .map(|a| (a.acquired.unwrap(), a.client))
        .collect();
    order.sort();
    let order: Vec<String> = order.into_iter().map(|(_, c)| c).collect();
    let want: Vec<String> = (0..WAITERS)
        .filter(|i| !KILLED.contains(i))
        .map(|i| format!("w{i}"))
        .collect();
    println!(
        "fair crash: {WAITERS} waiter processes, {} SIGKILLed while queued; live waiters acquired in order {order:?} \
         within {:.2} s of the unlock (waiter lease {:?})",
        KILLED.len(),
        secs(all_done - released),
        lock.waiter_lease()
    );
    assert_eq!(order, want, "FIFO order of the live waiters");
    // The killed ones never got the lock: their attempts stay invoked (unknown outcome).
    for a in h.acquisitions().iter().filter(|a| a.client != "parent") {
        let killed = KILLED.iter().any(|k| a.client == format!("w{k}"));
        assert_eq!(a.op == Op::Invoke, killed, "{a:?}");
    }
    assert_eq!(lock.queue_len().await.unwrap(), 0);
    let mut violations = h.check();
    violations.extend(quiescent(&mut conn, &ns).await);
    checker::assert_clean(&violations);
}

/// A waiter in another process that is SIGKILLed while queued (no cleanup can run) delays the
/// waiter behind it by at most its waiter lease (1 s here: watchdog timeout 1 s).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fair_killed_waiter_process_is_skipped() {
    let server = RedisServer::start();
    let ns = suite::unique_ns("fair-kill");
    let c = suite::client(&server, &ns, FAIR_WATCHDOG).await;
    let conn = server.conn().await;
    // A fair waiter in the child: queues on "crash" behind our holder, never gets it.
    let mut child = ChildProc::spawn(
        "holder",
        server.url(),
        &ns,
        "child",
        &[
            ("LOCKWISE_FP_KIND", "fair".into()),
            ("LOCKWISE_FP_LOCK", "crash".into()),
            ("LOCKWISE_FP_HOLD_MS", "60000".into()),
        ],
    );
    let url = server.url().to_string();
    let result = tokio::spawn(async move {
        let lock = c.fair_lock("crash");
        let holder = lock.lock().await.unwrap();
        // Wait until the child queued (it needs to start and connect first).
        let queued = suite::eventually(Duration::from_secs(30), || async {
            lock.queue_len().await.unwrap() == 1
        })
        .await;
        assert!(queued, "the child never queued");
        let waiter = {
            let lock = lock.clone();
            tokio::spawn(async move {
                let g = lock.lock().await.unwrap();
                let at = Instant::now();
                g.unlock().await.unwrap();
                at
            })
        };
        queue_reaches(&lock, 2).await;
        // The Client goes back out too: its waiter must outlive this task.
        (lock, holder, waiter, url, c)
    })
    .await;
    let (lock, holder, waiter, _url, _client) = match result {
        Ok(v) => v,
        // Dropping the child kills it.
        Err(e) => std::panic::resume_unwind(e.into_panic()),
    };
    child.sigkill(); // SIGKILL: the child's leave-queue clean-up never runs
    let killed = Instant::now();
    suite::in_task(async move {
        holder.unlock().await.unwrap();
        let acquired = waiter.await.unwrap();
        let delay = acquired - killed;
        println!("waiter behind a killed waiter process acquired {delay:?} after the kill (waiter lease 1 s)");
        assert!(delay <= Duration::from_millis(1000 + 700), "{delay:?}");
        assert_eq!(lock.queue_len().await.unwrap(), 0);
        assert_clean(&conn, "after the killed waiter").await;
    })
    .await;
}

// ---------------------------------------------------------------------------------------------
// Graceful shutdown: SIGTERM, Client::shutdown, exit

/// A child process holds every kind (a reentrant lock twice, a leased, fair, fenced, read,
/// write, multi and Redlock lock, semaphore and lease-semaphore permits) and waits in a fair
/// queue behind the parent; on SIGTERM it calls `Client::shutdown` and exits. Afterwards Redis
/// holds nothing of it: no lock key, no hold of its id, no queue entry, every permit back,
/// no presence key.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_shutdown_leaves_nothing() {
    let server = RedisServer::start();
    let ns = suite::unique_ns("fp-term");
    let mut conn = server.conn().await;
    let parent = client(server.url(), &ns).await;
    assert!(parent.semaphore("pool").try_set_permits(5).await.unwrap());
    assert!(parent
        .lease_semaphore("leases")
        .try_set_permits(4)
        .await
        .unwrap());
    let queue = parent.fair_lock("queue");
    let held = in_task(async move { queue.lock().await.unwrap() }).await;
    let mut child = ChildProc::spawn("shutdown-holder", server.url(), &ns, "child", &[]);
    let ready = child.wait_line("@ready", Duration::from_secs(20)).await;
    let id = ready
        .split("id=")
        .nth(1)
        .expect("child id")
        .trim()
        .to_string();
    let before: Vec<String> = conn.keys(format!("{ns}:*")).await.unwrap();
    assert!(before.iter().any(|k| k.contains(&id)), "its presence key");
    assert_eq!(parent.fair_lock("queue").queue_len().await.unwrap(), 1);
    let term = Instant::now();
    child.signal("TERM");
    let out = child.finish(Duration::from_secs(15)).await;
    let report = out
        .lines()
        .find_map(|l| l.strip_prefix("@report "))
        .expect("the child reported")
        .to_string();
    println!("SIGTERM to exit {:?}: {report}", term.elapsed());
    assert_eq!(report, "holds=10 permits=5 failed=0");
    assert_eq!(
        parent.semaphore("pool").available_permits().await.unwrap(),
        5
    );
    assert_eq!(
        parent
            .lease_semaphore("leases")
            .available_permits()
            .await
            .unwrap(),
        4
    );
    assert_eq!(parent.fair_lock("queue").queue_len().await.unwrap(), 0);
    let keys: Vec<String> = conn.keys(format!("{ns}:*")).await.unwrap();
    let mut of_child = Vec::new();
    for k in &keys {
        if k.contains(&id) {
            of_child.push(k.clone());
            continue;
        }
        let kind: String = redis::cmd("TYPE")
            .arg(k)
            .query_async(&mut conn)
            .await
            .unwrap();
        if kind == "hash" {
            let fields: Vec<String> = conn.hkeys(k).await.unwrap();
            if fields.iter().any(|f| f.contains(&id)) {
                of_child.push(format!("{k} (a field)"));
            }
        }
    }
    assert!(of_child.is_empty(), "left of the child: {of_child:?}");
    let lock_keys: Vec<&String> = keys
        .iter()
        .filter(|k| k.contains(":lock:") && !k.contains("{queue}"))
        .collect();
    assert!(lock_keys.is_empty(), "lock keys left: {lock_keys:?}");
    held.unlock().await.unwrap();
}

/// Twenty rolling restarts of a service that holds a semaphore permit (and a leased one)
/// while it runs: each new instance starts and takes its permits before the old one gets
/// SIGTERM and shuts down. With 2 permits of each, a single permit lost on any restart
/// would leave the next instance waiting forever; none is lost, and at the end both pools
/// are full.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rolling_restarts_lose_no_permit() {
    let server = RedisServer::start();
    let ns = suite::unique_ns("fp-rolling");
    let parent = client(server.url(), &ns).await;
    assert!(parent.semaphore("pool").try_set_permits(2).await.unwrap());
    assert!(parent
        .lease_semaphore("leases")
        .try_set_permits(2)
        .await
        .unwrap());
    let start =
        |i: usize| ChildProc::spawn("permit-user", server.url(), &ns, &format!("v{i}"), &[]);
    let mut old = start(0);
    old.wait_line("@ready", Duration::from_secs(20)).await;
    for i in 1..=20 {
        let mut new = start(i);
        new.wait_line("@ready", Duration::from_secs(20)).await;
        old.signal("TERM");
        let out = old.finish(Duration::from_secs(15)).await;
        assert!(
            out.contains("@report holds=0 permits=2 failed=0"),
            "restart {i}: {out}"
        );
        old = new;
    }
    old.signal("TERM");
    old.finish(Duration::from_secs(15)).await;
    assert_eq!(
        parent.semaphore("pool").available_permits().await.unwrap(),
        2
    );
    assert_eq!(
        parent
            .lease_semaphore("leases")
            .available_permits()
            .await
            .unwrap(),
        2
    );
    println!("20 rolling restarts: every permit back");
}

//! The server loses state the clients rely on: subscription connections are killed (CLIENT KILL
//! TYPE pubsub), the script cache is flushed (SCRIPT FLUSH), and watchdog renewals race the
//! releases they must never outlive.

use super::*;
use suite::OrNone;

use futures::future::join_all;
use suite::{exists, in_task, numsub_until, Interval};

/// Watchdog timeout of the SCRIPT FLUSH / CLIENT KILL contention scenarios (long, so a lost
/// wakeup shows as a wait of up to 30 s).
const WATCHDOG: Duration = Duration::from_secs(30);

async fn kill_pubsub(conn: &mut Conn) -> i64 {
    redis::cmd("CLIENT")
        .arg("KILL")
        .arg("TYPE")
        .arg("pubsub")
        .query_async(conn)
        .await
        .unwrap()
}

/// Contending tasks: each loops lock -> record interval -> unlock until `until`; even tasks
/// use lock(), odd ones try_lock(10 s, watchdog). Returns Err(description) on the first
/// library error; Ok(number of critical sections) otherwise.
fn spawn_contenders(
    clients: &[Client],
    per_client: usize,
    name: &str,
    until: Instant,
    intervals: Arc<Mutex<Vec<Interval>>>,
) -> Vec<tokio::task::JoinHandle<Result<u64, String>>> {
    let mut tasks = Vec::new();
    for (ci, c) in clients.iter().enumerate() {
        for t in 0..per_client {
            let lock = c.lock(name);
            let intervals = intervals.clone();
            let who = ci * per_client + t;
            tasks.push(tokio::spawn(async move {
                let mut n = 0;
                while Instant::now() < until {
                    let g = if who.is_multiple_of(2) {
                        lock.lock().await.map_err(|e| format!("lock(): {e:?}"))?
                    } else {
                        match lock.try_lock(Duration::from_secs(10), None).await.or_none() {
                            Ok(Some(g)) => g,
                            Ok(None) => return Err("try_lock(10 s) timed out".into()),
                            Err(e) => return Err(format!("try_lock(): {e:?}")),
                        }
                    };
                    let start = Instant::now();
                    tokio::time::sleep(Duration::from_millis(1)).await;
                    let end = Instant::now();
                    intervals.lock().unwrap().push(Interval { start, end, who });
                    g.unlock().await.map_err(|e| format!("unlock(): {e:?}"))?;
                    n += 1;
                }
                Ok(n)
            }));
        }
    }
    tasks
}

async fn join_contenders(
    tasks: Vec<tokio::task::JoinHandle<Result<u64, String>>>,
    limit: Duration,
) -> u64 {
    let results = tokio::time::timeout(limit, join_all(tasks))
        .await
        .unwrap_or_else(|_| panic!("contending tasks still not done after {limit:?} (TTL 30 s)"));
    let mut total = 0;
    for r in results {
        match r.expect("task panicked") {
            Ok(n) => total += n,
            Err(e) => panic!("a lock call failed: {e}"),
        }
    }
    total
}

// ---------------------------------------------------------------------------------------------
// 5. Subscription loss

/// CLIENT KILL TYPE pubsub every 200 ms for 3 s while 3 clients x 12 tasks wait for 4
/// reentrant locks and a fair lock (watchdog 30 s, so a lost wakeup would show as a wait of
/// up to 30 s): every task finishes within 10 s of the end (0 stuck), no overlap, NUMSUB 0.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn subscription_loss_every_200ms() {
    let server = RedisServer::start();
    let ns = suite::unique_ns("subloss");
    let mut clients = Vec::new();
    for _ in 0..3 {
        clients.push(client(server.url(), &ns, Duration::from_secs(30)).await);
    }
    let mut conn = server.conn().await;
    let hist = Arc::new(History::default());
    let stop = Arc::new(AtomicBool::new(false));
    let sampler = spawn_ttl_sampler(server.conn().await, ns.clone(), hist.clone(), stop.clone());
    let until = Instant::now() + Duration::from_secs(3);
    let mut tasks = Vec::new();
    for (ci, c) in clients.iter().enumerate() {
        for t in 0..12 {
            let (kind, name) = if t < 10 {
                (Kind::Reentrant, format!("s{}", t % 4))
            } else {
                (Kind::Fair, "fair".to_string())
            };
            tasks.push(Task {
                client: c.clone(),
                who: format!("c{ci}t{t}"),
                kind,
                name,
                hold: (5, 15),
            });
        }
    }
    let killer = {
        let mut c = conn.clone();
        tokio::spawn(async move {
            let (mut kills, mut killed) = (0, 0);
            while Instant::now() < until {
                tokio::time::sleep(Duration::from_millis(200)).await;
                let n: i64 = redis::cmd("CLIENT")
                    .arg("KILL")
                    .arg("TYPE")
                    .arg("pubsub")
                    .query_async(&mut c)
                    .await
                    .unwrap();
                kills += 1;
                killed += n;
            }
            (kills, killed)
        })
    };
    // A waiter that lost its wakeup would wait out the 30 s TTL; none may.
    let handles = spawn_all(tasks, until, &hist, Errors::RetryableOk);
    let stuck = join_by(handles, until + Duration::from_secs(10)).await;
    let (kills, killed) = killer.await.unwrap();
    stop.store(true, Ordering::Relaxed);
    sampler.await.unwrap();
    println!(
        "{kills} CLIENT KILLs closed {killed} subscription connections; stuck waiters: {stuck}"
    );
    assert_eq!(stuck, 0, "{stuck} waiters stuck 10 s after the end");
    assert!(killed >= 5, "the kills hit only {killed} connections");
    assert_history(&hist, "subscription loss");
    let mut channels: Vec<String> = (0..4)
        .map(|i| clients[0].lock(format!("s{i}")).channel().to_string())
        .collect();
    channels.push(clients[0].lock("fair").channel().to_string());
    for ch in &channels {
        let zero = suite::eventually(Duration::from_secs(3), || {
            let mut c = conn.clone();
            let ch = ch.clone();
            async move { suite::numsub(&mut c, &ch).await == 0 }
        })
        .await;
        assert!(zero, "NUMSUB {ch} = {}", suite::numsub(&mut conn, ch).await);
    }
    assert_quiescent(&conn, &ns, Duration::from_secs(3)).await;
}

async fn kill_pubsub_while_waiting(pause_after_kill: Duration) {
    let server = RedisServer::start();
    let ns = suite::unique_ns("flt-kill");
    let a = suite::client(&server, &ns, WATCHDOG).await;
    let b = suite::client(&server, &ns, WATCHDOG).await;
    let mut conn = server.conn().await;
    in_task(async move {
        let hl = a.lock("killed");
        let channel = hl.channel().to_string();
        let guard = hl.lock().await.expect("holder lock");
        let intervals = Arc::new(Mutex::new(Vec::new()));
        let mut tasks = Vec::new();
        for t in 0..8 {
            let l = b.lock("killed");
            let intervals = intervals.clone();
            tasks.push(tokio::spawn(async move {
                let g = l.lock().await.map_err(|e| format!("lock(): {e:?}"))?;
                let start = Instant::now();
                tokio::time::sleep(Duration::from_millis(5)).await;
                let end = Instant::now();
                intervals
                    .lock()
                    .unwrap()
                    .push(Interval { start, end, who: t });
                g.unlock().await.map_err(|e| format!("unlock(): {e:?}"))?;
                Ok::<u64, String>(1)
            }));
        }
        assert!(
            numsub_until(&conn, &channel, Duration::from_secs(3), |n| n >= 1).await,
            "waiters never subscribed"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
        let killed = kill_pubsub(&mut conn).await;
        assert!(
            killed >= 1,
            "CLIENT KILL TYPE pubsub killed {killed} connections"
        );
        tokio::time::sleep(pause_after_kill).await;
        let t0 = Instant::now();
        guard.unlock().await.expect("holder unlock");
        let n = join_contenders(tasks, Duration::from_secs(5)).await;
        assert_eq!(n, 8);
        println!(
            "after CLIENT KILL ({killed} killed, unlock {pause_after_kill:?} later) all 8 waiters \
             acquired within {:?}",
            t0.elapsed()
        );
        let mut iv = intervals.lock().unwrap().clone();
        suite::assert_no_overlap(&mut iv);
        assert!(
            numsub_until(&conn, &channel, Duration::from_secs(2), |n| n == 0).await,
            "NUMSUB of {channel} did not drop to 0"
        );
        assert!(!exists(&mut conn, hl.key()).await);
    })
    .await;
}

/// CLIENT KILL TYPE pubsub while 8 tasks of client B wait; A unlocks right after the kill
/// (the publish may land while B resubscribes): every waiter still acquires within 5 s.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn client_kill_pubsub_then_unlock_at_once() {
    kill_pubsub_while_waiting(Duration::ZERO).await;
}

/// Same, A unlocks 500 ms after the kill (B has reconnected and resubscribed by then).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn client_kill_pubsub_then_unlock_after_reconnect() {
    kill_pubsub_while_waiting(Duration::from_millis(500)).await;
}

/// CLIENT KILL TYPE pubsub every 200 ms for 2 s while 2 clients x 6 tasks contend: every
/// call succeeds, all tasks finish within 10 s (TTL 30 s), no overlap, no subscription left.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn client_kill_pubsub_repeatedly_while_contending() {
    let server = RedisServer::start();
    let ns = suite::unique_ns("flt-kills");
    let clients = vec![
        suite::client(&server, &ns, WATCHDOG).await,
        suite::client(&server, &ns, WATCHDOG).await,
    ];
    let mut conn = server.conn().await;
    in_task(async move {
        let until = Instant::now() + Duration::from_secs(2);
        let killer = {
            let mut c = conn.clone();
            tokio::spawn(async move {
                let mut killed = 0;
                while Instant::now() < until {
                    tokio::time::sleep(Duration::from_millis(200)).await;
                    killed += kill_pubsub(&mut c).await;
                }
                killed
            })
        };
        let intervals = Arc::new(Mutex::new(Vec::new()));
        let tasks = spawn_contenders(&clients, 6, "hammered", until, intervals.clone());
        let t0 = Instant::now();
        let total = join_contenders(tasks, Duration::from_secs(10)).await;
        let killed = killer.await.unwrap();
        println!(
            "{total} critical sections in {:?} with {killed} subscription connections killed",
            t0.elapsed()
        );
        assert!(killed >= 1, "the kills never hit a subscription connection");
        let mut iv = intervals.lock().unwrap().clone();
        suite::assert_no_overlap(&mut iv);
        let channel = clients[0].lock("hammered").channel().to_string();
        assert!(
            numsub_until(&conn, &channel, Duration::from_secs(2), |n| n == 0).await,
            "NUMSUB of {channel} did not drop to 0"
        );
        assert!(suite::keys_with_pttl(&mut conn).await.is_empty());
    })
    .await;
}

// ---------------------------------------------------------------------------------------------
// 6. Script cache loss

/// SCRIPT FLUSH every second for 4 s while 2 clients x 13 tasks use every lock kind
/// (watchdog, lease, fair, fenced, multi, spin: on its own name and on the `RLock`'s,
/// whose hash it shares; a read-write lock's writer) and a watchdog hold is renewed throughout: every
/// call is Ok (no NOSCRIPT, no error at all reaches a caller), no overlap, tokens rise.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn script_cache_loss_every_second() {
    let server = RedisServer::start();
    let ns = suite::unique_ns("flush");
    let clients = [
        client(server.url(), &ns, TTL).await,
        client(server.url(), &ns, TTL).await,
    ];
    let mut conn = server.conn().await;
    let hist = Arc::new(History::default());
    let stop = Arc::new(AtomicBool::new(false));
    let sampler = spawn_ttl_sampler(server.conn().await, ns.clone(), hist.clone(), stop.clone());
    let until = Instant::now() + Duration::from_millis(4200);
    let kinds = [
        (Kind::Reentrant, "r"),
        (Kind::Reentrant, "r"),
        (Kind::Lease, "r"),
        (Kind::Fair, "q"),
        (Kind::Fair, "q"),
        (Kind::Fenced, "f"),
        (Kind::Fenced, "f"),
        (Kind::Multi, "m"),
        (Kind::Reentrant, "m-a"),
        (Kind::Reentrant, "m-b"),
        (Kind::Spin, "r"),
        (Kind::Spin, "s"),
        (Kind::Write, "w"),
    ];
    let mut tasks = Vec::new();
    for (ci, c) in clients.iter().enumerate() {
        for (t, (kind, name)) in kinds.iter().enumerate() {
            tasks.push(Task {
                client: c.clone(),
                who: format!("c{ci}t{t}"),
                kind: *kind,
                name: name.to_string(),
                hold: (1, 5),
            });
        }
    }
    let steady = clients[0].clone();
    let steady_task = tokio::spawn(async move {
        let g = steady.lock("steady").lock().await.expect("steady lock");
        tokio::time::sleep_until(until.into()).await;
        let lost = g.is_lost();
        (lost, g.unlock().await)
    });
    let flusher = {
        let mut c = conn.clone();
        tokio::spawn(async move {
            let mut n = 0;
            while Instant::now() + Duration::from_secs(1) < until {
                tokio::time::sleep(Duration::from_secs(1)).await;
                let _: String = redis::cmd("SCRIPT")
                    .arg("FLUSH")
                    .query_async(&mut c)
                    .await
                    .unwrap();
                n += 1;
            }
            n
        })
    };
    let evals_before = suite::command_calls(&mut conn, "eval").await;
    let handles = spawn_all(tasks, until, &hist, Errors::None);
    let stuck = join_by(handles, until + Duration::from_secs(10)).await;
    let flushes = flusher.await.unwrap();
    let (steady_lost, steady_unlock) = steady_task.await.unwrap();
    stop.store(true, Ordering::Relaxed);
    sampler.await.unwrap();
    let evals = suite::command_calls(&mut conn, "eval").await - evals_before;
    println!("{flushes} SCRIPT FLUSHes, {evals} EVAL fallbacks");
    assert_eq!(stuck, 0);
    assert!(flushes >= 3, "only {flushes} flushes");
    assert!(evals > 0, "the NOSCRIPT fallback never ran");
    assert_history(&hist, "script cache loss");
    assert!(
        !steady_lost,
        "the renewed watchdog lock was lost across SCRIPT FLUSH"
    );
    steady_unlock.expect("steady unlock");
    assert_quiescent(&conn, &ns, Duration::from_secs(3)).await;
}

/// SCRIPT FLUSH every 100 ms while 2 clients x 8 tasks lock/unlock one lock for 3 s and
/// a third client holds a 1 s watchdog lock: no call fails, no overlap, the watchdog
/// lock survives, and EVAL was used (the NOSCRIPT fallback ran).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn script_flush_mid_run() {
    let server = RedisServer::start();
    let ns = suite::unique_ns("flt-flush");
    let clients = vec![
        suite::client(&server, &ns, WATCHDOG).await,
        suite::client(&server, &ns, WATCHDOG).await,
    ];
    let steady = suite::client(&server, &ns, Duration::from_secs(1)).await;
    let mut conn = server.conn().await;
    in_task(async move {
        let steady_lock = steady.lock("steady");
        let steady_guard = steady_lock.lock().await.expect("steady lock");
        let until = Instant::now() + Duration::from_secs(3);
        let flushes = Arc::new(AtomicU64::new(0));
        let flusher = {
            let mut c = conn.clone();
            let flushes = flushes.clone();
            tokio::spawn(async move {
                while Instant::now() < until {
                    let _: String = redis::cmd("SCRIPT")
                        .arg("FLUSH")
                        .query_async(&mut c)
                        .await
                        .unwrap();
                    flushes.fetch_add(1, Ordering::Relaxed);
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            })
        };
        let intervals = Arc::new(Mutex::new(Vec::new()));
        let tasks = spawn_contenders(&clients, 8, "flushed", until, intervals.clone());
        let total = join_contenders(tasks, Duration::from_secs(10)).await;
        flusher.await.unwrap();
        let evals = suite::command_calls(&mut conn, "eval").await;
        let evalshas = suite::command_calls(&mut conn, "evalsha").await;
        println!(
            "{total} critical sections, {} SCRIPT FLUSHes, EVAL {evals}, EVALSHA {evalshas}",
            flushes.load(Ordering::Relaxed)
        );
        assert!(total > 0);
        let mut iv = intervals.lock().unwrap().clone();
        suite::assert_no_overlap(&mut iv);
        assert!(evals > 0, "NOSCRIPT fallback (EVAL) never ran");

        assert!(
            !steady_guard.is_lost(),
            "watchdog lock lost during SCRIPT FLUSHes"
        );
        let p: i64 = redis::cmd("PTTL")
            .arg(steady_lock.key())
            .query_async(&mut conn)
            .await
            .unwrap();
        assert!(p > 0 && p <= 1000, "watchdog lock PTTL {p}");
        steady_guard.unlock().await.expect("steady unlock");
        assert!(suite::keys_with_pttl(&mut conn).await.is_empty());
    })
    .await;
}

// ---------------------------------------------------------------------------------------------
// 8. Watchdog / unlock race

/// Per lock key, from keyspace notifications: an `expire` event (PEXPIRE by the lock or renew
/// script) on a key whose last event was `del` or `expired`, with no `hset` / `hincrby` in
/// between, is a renewal that revived (raised the TTL of) a released lock.
#[derive(Default)]
struct KeyspaceAudit {
    alive: HashMap<String, bool>,
    events: BTreeMap<String, u64>,
    violations: Vec<String>,
}

impl KeyspaceAudit {
    fn event(&mut self, key: &str, event: &str) {
        *self.events.entry(event.to_string()).or_default() += 1;
        match event {
            "hset" | "hincrby" => {
                self.alive.insert(key.to_string(), true);
            }
            "del" | "expired" | "evicted" => {
                self.alive.insert(key.to_string(), false);
            }
            "expire" if !self.alive.get(key).copied().unwrap_or(false) => {
                self.violations
                    .push(format!("TTL set on released key {key} (no write since)"));
            }
            _ => {}
        }
    }
}

/// Lock -> (unlock | drop | cancel mid-acquire | try_lock timeout) cycles with a 30 ms
/// watchdog (renewals every 10 ms, constantly racing the releases), audited through keyspace
/// notifications: no renewal ever raises the TTL of a released lock, nothing is left.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watchdog_unlock_race_no_ttl_rise() {
    const TARGET: u64 = 100_000;
    const TIME_LIMIT: Duration = Duration::from_secs(35);
    const TASKS: usize = 48;
    const WATCHDOG: Duration = Duration::from_millis(30);
    let server = RedisServer::start();
    let ns = suite::unique_ns("race");
    let mut conn = server.conn().await;
    let _: String = redis::cmd("CONFIG")
        .arg("SET")
        .arg("notify-keyspace-events")
        .arg("KEA")
        .query_async(&mut conn)
        .await
        .unwrap();
    let _: String = redis::cmd("CONFIG")
        .arg("SET")
        .arg("client-output-buffer-limit")
        .arg("pubsub 0 0 0")
        .query_async(&mut conn)
        .await
        .unwrap();
    let mut pubsub = redis::Client::open(server.url())
        .unwrap()
        .get_async_pubsub()
        .await
        .unwrap();
    let prefix = "__keyspace@0__:";
    pubsub.psubscribe(format!("{prefix}{ns}*")).await.unwrap();
    let sentinel = format!("{ns}:zz-sentinel");
    let audit = Arc::new(Mutex::new(KeyspaceAudit::default()));
    let auditor = {
        let audit = audit.clone();
        let sentinel = sentinel.clone();
        tokio::spawn(async move {
            let mut stream = pubsub.on_message();
            while let Some(msg) = stream.next().await {
                let channel = msg.get_channel_name().to_string();
                let event: String = msg.get_payload().unwrap_or_default();
                let key = channel.strip_prefix(prefix).unwrap_or(&channel);
                if key == sentinel {
                    return true;
                }
                // A client's presence key (`SET .. PX`, refreshed on its own) is not a lock.
                if suite::is_presence(key) {
                    continue;
                }
                audit.lock().unwrap().event(key, &event);
            }
            false
        })
    };

    let c = client(server.url(), &ns, WATCHDOG).await;
    let cycles = Arc::new(AtomicU64::new(0));
    let outcomes = Arc::new(History::default());
    let t0 = Instant::now();
    let deadline = t0 + TIME_LIMIT;
    let mut handles = Vec::new();
    for t in 0..TASKS {
        let c = c.clone();
        let cycles = cycles.clone();
        let out = outcomes.clone();
        handles.push(tokio::spawn(async move {
            let own = c.lock(format!("own-{t}"));
            let shared_name = format!("shared-{}", t % 4);
            let shared = c.lock(&shared_name);
            let who = format!("t{t}");
            let mut i: u64 = t as u64;
            while cycles.load(Ordering::Relaxed) < TARGET && Instant::now() < deadline {
                i += 1;
                let hold = Duration::from_millis(rand::random_range(0..=12));
                match i % 4 {
                    0 => match own.lock().await {
                        Ok(g) => {
                            tokio::time::sleep(hold).await;
                            match g.unlock().await {
                                Ok(()) => out.count("unlock-ok"),
                                Err(e) if e.is_not_held() => out.count("unlock-notheld"),
                                Err(e) => out.fatal(format!("unlock: {e:?}")),
                            }
                        }
                        Err(e) => out.fatal(format!("lock: {e:?}")),
                    },
                    1 => match own.lock().await {
                        Ok(g) => {
                            tokio::time::sleep(hold).await;
                            drop(g);
                            out.count("dropped");
                        }
                        Err(e) => out.fatal(format!("lock: {e:?}")),
                    },
                    2 => {
                        // Cancel an acquire at a random point (before, during or after the
                        // script ran); a hold it took is released in the background.
                        let cut = Duration::from_micros(rand::random_range(0..3000));
                        match tokio::time::timeout(cut, own.lock()).await {
                            Ok(Ok(g)) => {
                                tokio::time::sleep(hold).await;
                                let _ = g.unlock().await;
                                out.count("cancel-too-late");
                            }
                            Ok(Err(e)) => out.fatal(format!("lock: {e:?}")),
                            Err(_) => out.count("cancelled"),
                        }
                    }
                    _ => {
                        let wait = Duration::from_millis(rand::random_range(0..5));
                        let id = out.acqs.invoke(&who, &shared_name);
                        match shared.try_lock(wait, None).await.or_none() {
                            Ok(Some(g)) => {
                                // Counted up to invoke + 30 ms only: the TTL the lock
                                // script set is the one certain validity. A 30 ms watchdog
                                // loses to a client that is late (2 loaded cores, debug
                                // build) by more than that, and such an expiry is the
                                // documented TTL caveat, not a mutual-exclusion bug.
                                out.acqs.ok(&id, g.owner(), None, Some(WATCHDOG));
                                tokio::time::sleep(hold).await;
                                out.acqs.release(&id);
                                match g.unlock().await {
                                    Ok(()) => out.count("unlock-ok"),
                                    Err(e) if e.is_not_held() => out.count("unlock-notheld"),
                                    Err(e) => out.fatal(format!("unlock: {e:?}")),
                                }
                            }
                            Ok(None) => {
                                out.acqs.fail(&id, "timeout");
                                out.count("try_lock-timeout")
                            }
                            Err(e) => out.fatal(format!("try_lock: {e:?}")),
                        }
                    }
                }
                cycles.fetch_add(1, Ordering::Relaxed);
            }
        }));
    }
    let stuck = join_by(handles, deadline + Duration::from_secs(10)).await;
    let elapsed = t0.elapsed();
    let n = cycles.load(Ordering::Relaxed);
    assert_eq!(stuck, 0);
    // Quiescence: background releases of dropped guards and cancelled acquires are done,
    // then the sentinel tells the auditor it has seen every event before it.
    assert_quiescent(&conn, &ns, Duration::from_secs(3)).await;
    let _: () = redis::cmd("SET")
        .arg(&sentinel)
        .arg(1)
        .arg("PX")
        .arg(1000)
        .query_async(&mut conn)
        .await
        .unwrap();
    let drained = tokio::time::timeout(Duration::from_secs(10), auditor)
        .await
        .expect("keyspace events not drained within 10 s")
        .unwrap();
    assert!(drained, "the keyspace notification stream ended early");
    let audit = audit.lock().unwrap();
    println!(
        "{n} cycles in {elapsed:?} ({:.0} cycles/s), {TASKS} tasks, watchdog 30 ms; outcomes {:?}; \
         keyspace events {:?}; violations {}",
        n as f64 / elapsed.as_secs_f64(),
        outcomes.counts.lock().unwrap(),
        audit.events,
        audit.violations.len()
    );
    let fatal = outcomes.fatal.lock().unwrap().clone();
    assert!(fatal.is_empty(), "errors: {fatal:?}");
    checker::assert_clean(&outcomes.acqs.check());
    assert!(
        audit.violations.is_empty(),
        "TTL raised after release: {:?}",
        &audit.violations[..audit.violations.len().min(10)]
    );
    assert!(
        audit.events.get("expire").copied().unwrap_or(0) > n / 2,
        "too few expire events seen: is the audit listening?"
    );
}

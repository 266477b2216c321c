//! Natural batching: calls that queue on the connection while others are in flight go out as
//! one call of `lua/batch.lua` (the engine's `batch` module). What must hold:
//!
//! | scenario | fault | what must hold |
//! |---|---|---|
//! | 64 tasks, a lock each | none | fewer than one script call per lock → unlock pair; every key gone |
//! | 1 and 2 tasks | none | never batched: exactly two script calls per pair |
//! | 2 clients × 16 tasks on 4 names | none | no two holds of a name overlap; every key gone |
//! | a batch that meets a held lock, a re-entry, a key of another type, a fair queue | `DEBUG SLEEP` queues the calls | each answers as it would unbatched (the last two sent alone); the fair waiter gets the lock |
//! | callers that give up while their calls wait in the queue | `DEBUG SLEEP`, client-side timeouts | nothing held by nobody: every key gone once the server answers |
//! | batches whose connection is killed | `CLIENT KILL TYPE normal` every 50 ms under load | no overlap on the shared name; after the storm every key is gone (settled) |

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use lockwise::{Client, Error};
use suite::{Conn, Interval, OrNone, RedisServer};

const WATCHDOG: Duration = Duration::from_secs(30);

async fn setup(test: &str) -> (RedisServer, String, Client, Conn) {
    let server = RedisServer::start();
    let ns = suite::unique_ns(test);
    let client = suite::client(&server, &ns, WATCHDOG).await;
    let conn = server.conn().await;
    (server, ns, client, conn)
}

/// The keys under `ns` other than the clients' presence keys.
async fn lock_keys(conn: &mut Conn, ns: &str) -> Vec<String> {
    suite::kit::keys_in(conn, ns)
        .await
        .into_iter()
        .map(|(k, _)| k)
        .filter(|k| !suite::is_presence(k))
        .collect()
}

/// Waits until no lock key is left under `ns` (settlements run in the background).
async fn all_released(conn: &Conn, ns: &str) -> bool {
    suite::eventually(Duration::from_secs(10), || {
        let (mut conn, ns) = (conn.clone(), ns.to_string());
        async move { lock_keys(&mut conn, &ns).await.is_empty() }
    })
    .await
}

/// Blocks the server for `secs` from another OS thread, so calls queue behind it.
fn debug_sleep(server: &RedisServer, secs: f64) -> std::thread::JoinHandle<()> {
    let mut c = server.sync_conn();
    std::thread::spawn(move || {
        let _: redis::RedisResult<String> =
            redis::cmd("DEBUG").arg("SLEEP").arg(secs).query(&mut c);
    })
}

/// `tasks` tasks, each on its own lock `<prefix>-<task>`, take and release it `rounds` times;
/// returns the script calls the server ran meanwhile.
async fn run_pairs(
    client: &Client,
    conn: &mut Conn,
    prefix: &str,
    tasks: usize,
    rounds: usize,
) -> u64 {
    let before = suite::script_calls(conn).await;
    let running: Vec<_> = (0..tasks)
        .map(|t| {
            let lock = client.lock(format!("{prefix}-{t}"));
            tokio::spawn(async move {
                for _ in 0..rounds {
                    let guard = lock.lock().await.expect("lock");
                    guard.unlock().await.expect("unlock");
                }
            })
        })
        .collect();
    for task in running {
        suite::kit::within(60, task).await.expect("task");
    }
    suite::script_calls(conn).await - before
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_pairs_share_script_calls() {
    let (_server, ns, client, mut conn) = setup("batch-calls").await;
    const TASKS: usize = 64;
    const ROUNDS: usize = 40;
    let calls = run_pairs(&client, &mut conn, "job", TASKS, ROUNDS).await;
    let pairs = (TASKS * ROUNDS) as u64;
    assert!(
        calls < pairs,
        "{calls} script calls for {pairs} pairs: not batched"
    );
    assert!(lock_keys(&mut conn, &ns).await.is_empty());
}

/// A lone caller, and two callers sharing a connection, never queue: every lock and unlock
/// goes out at once as its own script call, exactly two per pair (the guide's "a lone caller
/// still sends its calls at once").
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn up_to_two_callers_are_never_batched() {
    let (_server, ns, client, mut conn) = setup("batch-lone").await;
    // Load the scripts first: a first EVALSHA answers NOSCRIPT and is sent again.
    run_pairs(&client, &mut conn, "warm-up", 1, 1).await;
    for tasks in [1usize, 2] {
        const ROUNDS: usize = 100;
        let calls = run_pairs(&client, &mut conn, &format!("lone-{tasks}"), tasks, ROUNDS).await;
        assert_eq!(calls, (2 * tasks * ROUNDS) as u64, "{tasks} task(s)");
    }
    assert!(all_released(&conn, &ns).await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn batched_holds_of_a_name_never_overlap() {
    let (server, ns, first, mut conn) = setup("batch-excl").await;
    let second = suite::client(&server, &ns, WATCHDOG).await;
    let intervals: Arc<Mutex<Vec<Vec<Interval>>>> = Arc::new(Mutex::new(vec![Vec::new(); 4]));
    let mut tasks = Vec::new();
    for (c, client) in [&first, &second].into_iter().enumerate() {
        for t in 0..16 {
            let who = c * 16 + t;
            let (client, intervals) = (client.clone(), intervals.clone());
            tasks.push(tokio::spawn(async move {
                for round in 0..25 {
                    let name = (who + round) % 4;
                    let guard = client.lock(format!("shared-{name}")).lock().await.unwrap();
                    let start = Instant::now();
                    tokio::task::yield_now().await;
                    let end = Instant::now();
                    intervals.lock().unwrap()[name].push(Interval { start, end, who });
                    guard.unlock().await.unwrap();
                }
            }));
        }
    }
    for task in tasks {
        suite::kit::within(60, task).await.unwrap();
    }
    for mut per_name in intervals.lock().unwrap().drain(..) {
        assert_eq!(per_name.len(), 200);
        suite::assert_no_overlap(&mut per_name);
    }
    assert!(lock_keys(&mut conn, &ns).await.is_empty());
}

/// While the server sleeps, two calls are in flight and the rest queue: they go out as one
/// batch. Each item answers exactly as it would have unbatched: a free lock taken, a held one
/// reported, a re-entry counted; a key of another type and a release of a name with a fair
/// queue are sent alone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_answers_each_call_as_its_script_would() {
    let (server, ns, client, mut conn) = setup("batch-slow").await;
    let other = suite::client(&server, &ns, WATCHDOG).await;
    // Held by another client; held by the re-entering task; a string where the hash goes;
    // a fair waiter queued behind an RLock holder of the same name.
    let held = other.lock("held").lock().await.unwrap();
    let wrong = client.lock("wrong-type");
    let _: () = redis::cmd("SET")
        .arg(wrong.key())
        .arg("x")
        .arg("PX")
        .arg(60_000)
        .query_async(&mut conn)
        .await
        .unwrap();
    let fair_name = "fair";
    let rlock_holder = client.lock(fair_name);
    let (entered_tx, entered_rx) = tokio::sync::oneshot::channel();
    let (release_tx, release_rx) = tokio::sync::oneshot::channel::<()>();
    let holder = tokio::spawn(async move {
        let g = rlock_holder.lock().await.unwrap();
        entered_tx.send(()).unwrap();
        release_rx.await.unwrap();
        // Queued behind the sleep, then batched: the name has a fair queue.
        g.unlock().await.unwrap();
    });
    entered_rx.await.unwrap();
    let fair = other.fair_lock(fair_name);
    let waiter = {
        let fair = fair.clone();
        tokio::spawn(async move { fair.lock().await.unwrap() })
    };
    suite::queue_reaches(&fair, 1).await;

    let reentrant = client.lock("reentrant");
    let (outer_tx, outer_rx) = tokio::sync::oneshot::channel();
    let (go_tx, go_rx) = tokio::sync::oneshot::channel::<()>();
    let reenter = tokio::spawn(async move {
        let outer = reentrant.lock().await.unwrap();
        outer_tx.send(()).unwrap();
        go_rx.await.unwrap();
        let inner = reentrant.lock().await.unwrap();
        let holds = reentrant.hold_count().await.unwrap();
        inner.unlock().await.unwrap();
        outer.unlock().await.unwrap();
        holds
    });
    outer_rx.await.unwrap();

    let sleeper = debug_sleep(&server, 0.3);
    tokio::time::sleep(Duration::from_millis(50)).await;
    let calls_before_wake = Instant::now();
    // Two calls fill the lane; the rest queue behind them.
    let free: Vec<_> = (0..6)
        .map(|i| {
            let lock = client.lock(format!("free-{i}"));
            tokio::spawn(async move {
                let g = lock.try_lock(Duration::ZERO, None).await.or_none();
                g.map(|g| g.is_some())
            })
        })
        .collect();
    let busy = {
        let lock = client.lock("held");
        tokio::spawn(async move {
            let g = lock.try_lock(Duration::ZERO, None).await.or_none();
            g.map(|g| g.is_some())
        })
    };
    let wrong_type = tokio::spawn(async move { wrong.try_lock(Duration::ZERO, None).await });
    go_tx.send(()).unwrap();
    release_tx.send(()).unwrap();
    sleeper.join().unwrap();
    assert!(calls_before_wake.elapsed() >= Duration::from_millis(200));

    for task in free {
        let taken = task.await.unwrap();
        assert!(matches!(taken, Ok(true)), "a free lock: {taken:?}");
    }
    assert!(matches!(busy.await.unwrap(), Ok(false)));
    match wrong_type.await.unwrap() {
        Err(Error::Redis(e)) => assert_eq!(e.code(), Some("WRONGTYPE"), "{e}"),
        other => panic!(
            "a key of another type: {:?}",
            other.map(|g| g.name().to_string())
        ),
    }
    assert_eq!(reenter.await.unwrap(), 2);
    holder.await.unwrap();
    let fair_guard = suite::kit::within(5, waiter).await.unwrap();
    fair_guard.unlock().await.unwrap();
    held.unlock().await.unwrap();
    let key: String = redis::cmd("GET")
        .arg(client.lock("wrong-type").key())
        .query_async(&mut conn)
        .await
        .unwrap();
    assert_eq!(key, "x", "the key of another type is untouched");
    let _: () = redis::cmd("DEL")
        .arg(client.lock("wrong-type").key())
        .query_async(&mut conn)
        .await
        .unwrap();
    assert!(
        all_released(&conn, &ns).await,
        "{:?}",
        lock_keys(&mut conn, &ns).await
    );
    suite::kit::assert_ns_clean(&mut conn, &ns).await;
}

/// Callers that give up while their calls wait in the queue (or sit in a batch in flight)
/// leave nothing held by nobody.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn callers_that_give_up_in_the_queue_leave_nothing() {
    let (server, ns, client, mut conn) = setup("batch-cancel").await;
    let guards: Vec<_> = {
        let mut guards = Vec::new();
        for i in 0..4 {
            guards.push(client.lock(format!("held-{i}")).lock().await.unwrap());
        }
        guards
    };
    let sleeper = debug_sleep(&server, 0.3);
    tokio::time::sleep(Duration::from_millis(50)).await;
    let mut gave_up = Vec::new();
    for i in 0..8 {
        let lock = client.lock(format!("abandoned-{i}"));
        gave_up.push(tokio::spawn(async move {
            tokio::time::timeout(Duration::from_millis(20 + 10 * i), lock.lock())
                .await
                .is_err()
        }));
    }
    // Unlocks that give up too (the engine finishes them in the background).
    for guard in guards {
        tokio::spawn(async move {
            let _ = tokio::time::timeout(Duration::from_millis(30), guard.unlock()).await;
        });
    }
    for task in gave_up {
        assert!(
            task.await.unwrap(),
            "the lock() should have timed out in the queue"
        );
    }
    sleeper.join().unwrap();
    assert!(
        all_released(&conn, &ns).await,
        "held by nobody: {:?}",
        lock_keys(&mut conn, &ns).await
    );
    // The lane works on afterwards.
    let g = client.lock("after").lock().await.unwrap();
    g.unlock().await.unwrap();
}

/// Batches lost with their connection: every member is in doubt and settled; no two holds
/// of the shared name overlap, and nothing is left once the storm ends.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn batches_lost_with_their_connection_are_settled() {
    let (_server, ns, client, mut conn) = setup("batch-kill").await;
    let intervals = Arc::new(Mutex::new(Vec::new()));
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let errors = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let mut tasks = Vec::new();
    for who in 0..32 {
        let (client, intervals, stop, errors) = (
            client.clone(),
            intervals.clone(),
            stop.clone(),
            errors.clone(),
        );
        tasks.push(tokio::spawn(async move {
            let own = client.lock(format!("own-{who}"));
            let shared = client.lock("shared");
            let mut round = 0u64;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                round += 1;
                let lock = if round.is_multiple_of(4) {
                    &shared
                } else {
                    &own
                };
                let guard = match lock.try_lock(Duration::from_secs(2), None).await.or_none() {
                    Ok(Some(g)) => g,
                    Ok(None) => continue,
                    Err(_) => {
                        errors.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                        continue;
                    }
                };
                if lock.name() == "shared" {
                    let start = Instant::now();
                    tokio::task::yield_now().await;
                    intervals.lock().unwrap().push(Interval {
                        start,
                        end: Instant::now(),
                        who,
                    });
                }
                if guard.unlock().await.is_err() {
                    errors.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                }
            }
        }));
    }
    let until = Instant::now() + Duration::from_secs(3);
    let mut kills = 0;
    while Instant::now() < until {
        tokio::time::sleep(Duration::from_millis(50)).await;
        let killed: i64 = redis::cmd("CLIENT")
            .arg("KILL")
            .arg("TYPE")
            .arg("normal")
            .query_async(&mut conn)
            .await
            .unwrap();
        kills += killed;
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    for task in tasks {
        suite::kit::within(30, task).await.unwrap();
    }
    assert!(kills > 10, "only {kills} connections killed");
    let mut shared = intervals.lock().unwrap().clone();
    assert!(
        shared.len() > 10,
        "only {} holds of the shared name",
        shared.len()
    );
    suite::assert_no_overlap(&mut shared);
    assert!(
        all_released(&conn, &ns).await,
        "left after the storm ({} errors): {:?}",
        errors.load(std::sync::atomic::Ordering::Relaxed),
        lock_keys(&mut conn, &ns).await
    );
}

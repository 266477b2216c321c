//! The server stops (SIGSTOP), slows down (CLIENT PAUSE, DEBUG SLEEP) or fills up (maxmemory)
//! while clients contend; a reply that comes after the response timeout.

use super::*;
use suite::OrNone;

use suite::{exists, in_task};

/// Watchdog timeout of the late-reply scenario (long: only the undo may free the lock).
const WATCHDOG: Duration = Duration::from_secs(30);

// ---------------------------------------------------------------------------------------------
// 3. Server stall

async fn server_stall(factor_tenths: u32, label: &str) -> Arc<History> {
    let server = RedisServer::start();
    let pid = server.pid().expect("server pid");
    let stall = TTL * factor_tenths / 10;
    let hist = contend_through(
        &server,
        label,
        Duration::from_millis(1500),
        Duration::from_millis(3000),
        |_conn| async move {
            signal(pid, "STOP");
            tokio::time::sleep(stall).await;
            signal(pid, "CONT");
        },
    )
    .await;
    drop(server);
    hist
}

/// SIGSTOP the server for half the TTL: renewals are merely late, nothing overlaps, all
/// tasks go on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn server_stall_sigstop_half_ttl() {
    server_stall(5, "stall-half").await;
}

/// SIGSTOP the server for twice the TTL: held locks expire during the stall; their holders
/// learn it (lost() or NotHeld), nobody overlaps, all tasks go on afterwards.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn server_stall_sigstop_twice_ttl() {
    let hist = server_stall(20, "stall-twice").await;
    assert!(
        hist.get("lost-seen") + hist.get("unlock-notheld") + hist.get("unlock-redis-retryable") > 0,
        "a 2 x TTL stall under a 1-1.5 s hold went unnoticed by every holder"
    );
}

// ---------------------------------------------------------------------------------------------
// 4. Slow server

/// CLIENT PAUSE 1500 ALL: every call is late (some beyond the 1 s response timeout: typed,
/// retryable Error::Redis), no overlap, nothing leaked after quiescence.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slow_server_client_pause() {
    let server = RedisServer::start();
    let hist = contend_through(
        &server,
        "pause",
        Duration::from_millis(1500),
        Duration::from_millis(3000),
        |mut conn| async move {
            let _: String = redis::cmd("CLIENT")
                .arg("PAUSE")
                .arg(1500)
                .arg("ALL")
                .query_async(&mut conn)
                .await
                .unwrap();
            tokio::time::sleep(Duration::from_millis(1500)).await;
        },
    )
    .await;
    println!(
        "pause: {} typed retryable errors",
        hist.get("lock-redis-retryable") + hist.get("unlock-redis-retryable")
    );
}

/// DEBUG SLEEP 1.5: the server does nothing for 1.5 x TTL (its clock runs on, so held locks
/// expire); same checks.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slow_server_debug_sleep() {
    let server = RedisServer::start();
    let url = server.url().to_string();
    contend_through(
        &server,
        "debug-sleep",
        Duration::from_millis(1500),
        Duration::from_millis(3000),
        |_conn| async move {
            // Our own connection may give up on the reply (response timeout); the server
            // sleeps the 1.5 s regardless.
            let t0 = Instant::now();
            let c = redis::Client::open(url.as_str()).unwrap();
            let mut c = c.get_multiplexed_async_connection().await.unwrap();
            let r: redis::RedisResult<String> = redis::cmd("DEBUG")
                .arg("SLEEP")
                .arg("1.5")
                .query_async(&mut c)
                .await;
            let _ = r;
            tokio::time::sleep_until((t0 + Duration::from_millis(1500)).into()).await;
        },
    )
    .await;
}

/// DEBUG SLEEP 0.8 s stalls the server while lock() runs with a 200 ms response timeout:
/// the call fails with a retryable error (or succeeds late), but the script still runs
/// after the sleep and takes the lock for nobody; that unknown-outcome hold must be
/// released in the background, so the key is gone within 2 s and another client can lock.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn late_reply_after_response_timeout_leaves_no_hold() {
    let server = RedisServer::start();
    let ns = suite::unique_ns("flt-late");
    let c = Client::builder(server.url())
        .namespace(ns.clone())
        .watchdog_timeout(WATCHDOG)
        .response_timeout(Duration::from_millis(200))
        .build()
        .await
        .expect("build client");
    let other = suite::client(&server, &ns, WATCHDOG).await;
    let sleeper = server.conn().await;
    let conn = server.conn().await;
    in_task(async move {
        let lock = c.lock("late");
        let key = lock.key().to_string();
        let calls_before = suite::script_calls(&mut conn.clone()).await;
        let sleep = {
            let mut s = sleeper.clone();
            tokio::spawn(async move {
                // Our own connection may time out on this; the server sleeps regardless.
                let _: redis::RedisResult<String> = redis::cmd("DEBUG")
                    .arg("SLEEP")
                    .arg("0.8")
                    .query_async(&mut s)
                    .await;
            })
        };
        tokio::time::sleep(Duration::from_millis(50)).await;
        let t0 = Instant::now();
        let outcome = match lock.lock().await {
            Ok(g) => {
                g.unlock().await.expect("unlock");
                "succeeded late".to_string()
            }
            Err(e) => {
                assert!(
                    e.is_retryable(),
                    "a response timeout should be retryable: {e:?}"
                );
                format!("failed after {:?}: {e}", t0.elapsed())
            }
        };
        println!("lock() during DEBUG SLEEP {outcome}");
        sleep.await.unwrap();
        let gone = suite::eventually(Duration::from_secs(2), || {
            let mut c = conn.clone();
            let key = key.clone();
            async move { !exists(&mut c, &key).await }
        })
        .await;
        let mut cc = conn.clone();
        let fields: std::collections::HashMap<String, String> = redis::cmd("HGETALL")
            .arg(&key)
            .query_async(&mut cc)
            .await
            .unwrap();
        assert!(
            gone,
            "a hold taken by the timed-out lock() is still there: {fields:?}"
        );
        let calls = suite::script_calls(&mut cc).await - calls_before;
        println!("script calls during the stall and clean-up: {calls}");
        assert!(
            calls >= 2,
            "expected the late lock script and its undo to run ({calls} script calls)"
        );
        let g = other
            .lock("late")
            .try_lock(Duration::ZERO, None)
            .await
            .or_none()
            .expect("try_lock")
            .expect("lock free after the stall");
        g.unlock().await.expect("unlock");
        // The timed-out client works again once the server answers.
        let deadline = Instant::now() + Duration::from_secs(3);
        let g = loop {
            match lock.lock().await {
                Ok(g) => break g,
                Err(e) if e.is_retryable() && Instant::now() < deadline => {
                    tokio::time::sleep(Duration::from_millis(50)).await
                }
                Err(e) => panic!("lock() after the stall: {e:?}"),
            }
        };
        g.unlock().await.expect("unlock");
        let mut cc = conn.clone();
        assert!(suite::keys_with_pttl(&mut cc).await.is_empty());
    })
    .await;
}

/// A re-entry sent while the server sleeps (DEBUG SLEEP 0.8 s, response timeout 200 ms)
/// times out, but its script still runs after the sleep: the server would count two holds
/// where the task has one. The settlement of the unknown outcome trims the count back to
/// the task's one hold; the first hold is not lost, and its unlock frees the lock.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn re_entry_during_a_stall_is_not_counted_twice() {
    let server = RedisServer::start();
    let ns = suite::unique_ns("flt-reenter");
    let c = Client::builder(server.url())
        .namespace(ns.clone())
        .watchdog_timeout(WATCHDOG)
        .response_timeout(Duration::from_millis(200))
        .build()
        .await
        .expect("build client");
    let sleeper = server.conn().await;
    let conn = server.conn().await;
    in_task(async move {
        let lock = c.lock("reenter");
        let key = lock.key().to_string();
        let first = lock.lock().await.expect("first hold");
        let sleep = {
            let mut s = sleeper.clone();
            tokio::spawn(async move {
                let _: redis::RedisResult<String> = redis::cmd("DEBUG")
                    .arg("SLEEP")
                    .arg("0.8")
                    .query_async(&mut s)
                    .await;
            })
        };
        tokio::time::sleep(Duration::from_millis(50)).await;
        let second = lock.try_lock(Duration::from_millis(100), None).await;
        let believed: u32 = if second.is_ok() { 2 } else { 1 };
        println!("re-entry during DEBUG SLEEP: {:?}", second.as_ref().err());
        sleep.await.unwrap();
        // Once the settlement ran, the server counts what the task holds.
        let counts = |conn: &redis::aio::MultiplexedConnection| {
            let mut c = conn.clone();
            let key = key.clone();
            async move {
                let fields: std::collections::HashMap<String, u32> = redis::cmd("HGETALL")
                    .arg(&key)
                    .query_async(&mut c)
                    .await
                    .unwrap();
                fields
                    .into_iter()
                    .filter(|(f, _)| suite::is_owner_field(f))
                    .map(|(_, n)| n)
                    .collect::<Vec<_>>()
            }
        };
        println!(
            "right after the sleep the server counts {:?}",
            counts(&conn).await
        );
        let settled = suite::eventually(Duration::from_secs(3), || {
            let f = counts(&conn);
            async move { f.await == vec![believed] }
        })
        .await;
        let seen = counts(&conn).await;
        assert!(
            settled,
            "the task holds {believed}, the server counts {seen:?}"
        );
        assert!(!first.is_lost(), "the first hold survives the settlement");
        if let Ok(second) = second {
            second.unlock().await.expect("unlock the re-entry");
        }
        first.unlock().await.expect("unlock the first hold");
        let mut cc = conn.clone();
        assert!(
            !exists(&mut cc, &key).await,
            "nothing left after the unlock"
        );
        assert!(suite::keys_with_pttl(&mut cc).await.is_empty());
    })
    .await;
}

// ---------------------------------------------------------------------------------------------
// 11. Eviction

/// A `tracing` writer that keeps what is written, to see lockwise's warning.
#[derive(Clone, Default)]
struct Captured(Arc<Mutex<Vec<u8>>>);

impl std::io::Write for Captured {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Under an evicting policy, connecting works and lockwise warns once; under noeviction a full
/// server makes every lock kind fail closed with a typed OOM error (retryable), nothing is
/// written, and locking works again once memory is freed.
#[tokio::test(flavor = "current_thread")]
async fn eviction_policy_warns_and_oom_fails_closed() {
    // (a) allkeys-lru: a warning at connect, locks still work.
    let lru = RedisServer::start_with(&["--maxmemory", "2mb", "--maxmemory-policy", "allkeys-lru"]);
    let captured = Captured::default();
    let writer = captured.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_writer(move || writer.clone())
        .with_ansi(false)
        .with_max_level(tracing::Level::WARN)
        .finish();
    let c = {
        let _guard = tracing::subscriber::set_default(subscriber);
        client(lru.url(), &suite::unique_ns("evict"), TTL).await
    };
    let log = String::from_utf8(captured.0.lock().unwrap().clone()).unwrap();
    let warnings = log.lines().filter(|l| l.contains("may evict")).count();
    println!("warning at connect: {}", log.trim());
    assert_eq!(
        warnings, 1,
        "expected one eviction warning at connect, got: {log}"
    );
    let g = c.lock("x").lock().await.expect("lock under allkeys-lru");
    g.unlock().await.expect("unlock");
    drop(c);

    // (b) noeviction, filled with junk until OOM.
    let full = RedisServer::start_with(&["--maxmemory", "2mb", "--maxmemory-policy", "noeviction"]);
    let ns = suite::unique_ns("oom");
    let c = client(full.url(), &ns, TTL).await;
    let mut conn = full.conn().await;
    let junk = "j".repeat(16 * 1024);
    let mut filled = 0;
    loop {
        let r: redis::RedisResult<()> = redis::cmd("SET")
            .arg(format!("junk:{filled}"))
            .arg(&junk)
            .query_async(&mut conn)
            .await;
        match r {
            Ok(()) => filled += 1,
            Err(e) if e.code() == Some("OOM") => break,
            Err(e) => panic!("filling: {e:?}"),
        }
        assert!(filled < 10_000, "never reached OOM");
    }
    // Used memory moves a little (buffers): pin it above the limit so every write is refused.
    let info: String = redis::cmd("INFO")
        .arg("memory")
        .query_async(&mut conn)
        .await
        .unwrap();
    let used: u64 = info
        .lines()
        .find_map(|l| l.strip_prefix("used_memory:"))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    let _: () = redis::cmd("CONFIG")
        .arg("SET")
        .arg("maxmemory")
        .arg(used - 256 * 1024)
        .query_async(&mut conn)
        .await
        .unwrap();
    println!("OOM after {filled} x 16 KiB of junk (used_memory {used})");
    let check = |what: &str, r: lockwise::Result<()>| match r {
        Err(ref e @ Error::Redis(ref re)) => {
            assert!(e.is_oom(), "{what}: not is_oom(): {e:?}");
            assert_eq!(re.code(), Some("OOM"), "{what}: {e:?}");
            assert!(e.is_retryable(), "{what}: OOM should be retryable");
            println!("{what}: {e}");
        }
        other => panic!("{what}: expected Err(Error::Redis OOM), got {other:?}"),
    };
    let s = Duration::from_millis(300);
    check("lock()", c.lock("a").lock().await.map(drop));
    check(
        "try_lock(lease)",
        c.lock("a").try_lock(s, Some(s)).await.or_none().map(drop),
    );
    check("fair lock()", c.fair_lock("b").lock().await.map(drop));
    check("fenced lock()", c.fenced_lock("c").lock().await.map(drop));
    check("spin lock()", c.spin_lock("f").lock().await.map(drop));
    check(
        "multi lock()",
        c.multi_lock(["d", "e"])
            .try_lock(s, None)
            .await
            .or_none()
            .map(drop),
    );
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(
        keys_in(&mut conn, &ns).await.is_empty(),
        "something was written under OOM: {:?}",
        keys_in(&mut conn, &ns).await
    );
    assert!(suite::active_channels(&mut conn).await.is_empty());
    // Memory freed: it works again. SYNC frees before the reply: Valkey 8 defaults to
    // lazyfree-lazy-user-flush yes, where a plain FLUSHALL frees in the background and the
    // next write may still be over maxmemory.
    let _: () = redis::cmd("FLUSHALL")
        .arg("SYNC")
        .query_async(&mut conn)
        .await
        .unwrap();
    let g = c
        .lock("a")
        .lock()
        .await
        .expect("lock after memory was freed");
    g.unlock().await.expect("unlock");
    assert!(keys_in(&mut conn, &ns).await.is_empty());
}

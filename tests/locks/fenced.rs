//! `FencedLock` and `FencedValue` against a real redis-server: tokens grow with every new
//! owner (under contention, across a restart that wipes the counter, and across a loss of
//! writes that brings an older counter back: an RDB snapshot, an AOF `everysec` tail, a
//! failover to a lagging replica), re-entry keeps the token, stale writes are rejected with a
//! typed error, and only the fence counter is left without a TTL.

use suite::in_task;
use suite::OrNone;

use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use lockwise::{Client, Error, FencedLock};
use redis::AsyncCommands;
use suite::{Interval, RedisServer};

const WATCHDOG: Duration = Duration::from_secs(2);

async fn within<F: Future>(secs: u64, fut: F) -> F::Output {
    tokio::time::timeout(Duration::from_secs(secs), fut)
        .await
        .expect("did not finish in time")
}

async fn client(server: &RedisServer, ns: &str) -> Client {
    within(
        10,
        Client::builder(server.url())
            .namespace(ns)
            .watchdog_timeout(WATCHDOG)
            .build(),
    )
    .await
    .expect("build client")
}

/// The server clock in microseconds since the epoch (what a fresh counter starts from).
async fn server_micros(conn: &mut redis::aio::MultiplexedConnection) -> u64 {
    let (s, us): (u64, u64) = redis::cmd("TIME").query_async(conn).await.unwrap();
    s * 1_000_000 + us
}

/// 2 Clients x 8 tasks x 5 acquisitions of one fenced lock: sorted by start time, the
/// critical sections never overlap and their tokens strictly increase.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tokens_strictly_increase_in_acquisition_order_under_contention() {
    let server = RedisServer::start();
    let ns = suite::unique_ns("fenced-contention");
    let clients = [client(&server, &ns).await, client(&server, &ns).await];
    let records: Arc<Mutex<Vec<(Interval, u64)>>> = Arc::default();
    let started = Instant::now();
    let mut tasks = Vec::new();
    for (c, client) in clients.iter().enumerate() {
        for t in 0..8 {
            let lock = client.fenced_lock("contended");
            let records = records.clone();
            tasks.push(tokio::spawn(async move {
                for i in 0..5 {
                    let guard = if (t + i) % 2 == 0 {
                        lock.lock().await.expect("lock")
                    } else {
                        lock.lock_with_lease(Duration::from_secs(10))
                            .await
                            .expect("lock_with_lease")
                    };
                    let start = Instant::now();
                    let token = guard.token();
                    tokio::time::sleep(Duration::from_millis(1)).await;
                    let end = Instant::now();
                    guard.unlock().await.expect("unlock");
                    let who = c * 8 + t;
                    records
                        .lock()
                        .unwrap()
                        .push((Interval { start, end, who }, token));
                }
            }));
        }
    }
    within(20, async {
        for t in tasks {
            t.await.unwrap();
        }
    })
    .await;
    let mut records = records.lock().unwrap().clone();
    assert_eq!(records.len(), 80);
    records.sort_by_key(|(i, _)| i.start);
    for w in records.windows(2) {
        assert!(
            w[0].1 < w[1].1,
            "tokens not increasing in acquisition order: {:?} then {:?}",
            w[0],
            w[1]
        );
    }
    let mut intervals: Vec<Interval> = records.iter().map(|(i, _)| *i).collect();
    suite::assert_no_overlap(&mut intervals);
    println!(
        "80 fenced acquisitions by 16 tasks in {:?}; tokens {}..={}",
        started.elapsed(),
        records[0].1,
        records[79].1
    );
}

/// A restart without persistence wipes the counter; the next tokens are still larger than
/// every token issued before (the counter restarts from the server clock).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tokens_after_a_restart_without_persistence_are_larger() {
    let mut server = RedisServer::start();
    let ns = suite::unique_ns("fenced-restart");
    let c = client(&server, &ns).await;
    let lock = c.fenced_lock("restarted");
    let mut conn = server.conn().await;
    let before_clock = server_micros(&mut conn).await;
    let mut before = Vec::new();
    for _ in 0..20 {
        let g = lock.lock().await.expect("lock");
        before.push(g.token());
        g.unlock().await.expect("unlock");
    }
    assert!(before.windows(2).all(|w| w[0] < w[1]), "{before:?}");
    assert!(
        before[0] > before_clock,
        "a fresh counter starts from the server clock: {} <= {before_clock}",
        before[0]
    );
    let highest_before = *before.last().unwrap();

    tokio::task::block_in_place(|| server.restart());
    let mut conn = server.conn().await;
    let fence_exists: bool = redis::cmd("EXISTS")
        .arg(lock.fence_key())
        .query_async(&mut conn)
        .await
        .unwrap();
    assert!(!fence_exists, "the restart must have wiped the counter");

    // The client reconnects in the background: tolerate transient errors meanwhile.
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut after = Vec::new();
    while after.len() < 5 {
        match lock.try_lock(Duration::from_secs(1), None).await.or_none() {
            Ok(Some(g)) => {
                after.push(g.token());
                g.unlock().await.expect("unlock");
            }
            Ok(None) => panic!("nobody holds the lock after the restart"),
            Err(e) if e.is_retryable() && Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            Err(e) => panic!("lock after restart: {e:?}"),
        }
    }
    assert!(
        after[0] > highest_before,
        "token after restart {} <= {highest_before} before",
        after[0]
    );
    assert!(after.windows(2).all(|w| w[0] < w[1]), "{after:?}");
    println!(
        "before restart: {}..={highest_before}; after: {}..={}",
        before[0],
        after[0],
        after.last().unwrap()
    );
}

/// Kleppmann's scenario in a test: holder 1 overruns its lease, holder 2 takes the lock and
/// writes; holder 1's late write is a typed StaleToken error and leaves the value unchanged.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stale_write_is_rejected_and_leaves_the_value_unchanged() {
    let server = RedisServer::start();
    let ns = suite::unique_ns("fenced-stale");
    let (c1, c2) = (client(&server, &ns).await, client(&server, &ns).await);
    let value = c1.fenced_value(format!("{ns}:resource"));
    let g1 = c1
        .fenced_lock("file")
        .lock_with_lease(Duration::from_millis(200))
        .await
        .expect("lock 1");
    let t1 = g1.token();
    value
        .write(t1, "from 1 (early)")
        .await
        .expect("first write");
    value
        .write(t1, "from 1 (again)")
        .await
        .expect("equal token");
    tokio::time::sleep(Duration::from_millis(400)).await; // "GC pause" past the lease

    let g2 = within(5, c2.fenced_lock("file").lock())
        .await
        .expect("lock 2");
    let t2 = g2.token();
    assert!(t2 > t1, "{t2} <= {t1}");
    value.write(t2, "from 2").await.expect("write 2");

    let err = value.write(t1, "from 1 (late)").await.unwrap_err();
    match err {
        Error::StaleToken { presented, highest } => {
            assert_eq!((presented, highest), (t1, t2));
        }
        other => panic!("expected StaleToken, got {other:?}"),
    }
    assert!(err_is_stale(&value, t1).await);
    assert_eq!(
        value.read::<String>().await.unwrap().as_deref(),
        Some("from 2")
    );
    assert_eq!(value.highest_token().await.unwrap(), Some(t2));
    // The late holder also learns it lost the lock when it unlocks.
    assert!(g1.unlock().await.unwrap_err().is_not_held());
    g2.unlock().await.unwrap();

    // Bad tokens are refused before anything is sent.
    assert!(matches!(
        value.write(0, "x").await,
        Err(Error::InvalidArgument { .. })
    ));
    assert!(matches!(
        value.write(1 << 53, "x").await,
        Err(Error::InvalidArgument { .. })
    ));
    assert!(matches!(
        c1.fenced_value("").read::<String>().await,
        Err(Error::InvalidArgument { .. })
    ));
}

async fn err_is_stale(value: &lockwise::FencedValue, token: u64) -> bool {
    let e = value.write(token, "x").await.unwrap_err();
    e.is_stale_token() && !e.is_retryable() && e.to_string().contains("stale fencing token")
}

/// Re-entry by the holder returns the same token and raises the hold count; the next owner
/// (even the same task, after the last release) gets a larger one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reentry_keeps_the_token() {
    let server = RedisServer::start();
    let c = client(&server, &suite::unique_ns("fenced-reentry")).await;
    in_task(async move {
        let lock = c.fenced_lock("reentrant");
        let outer = lock.lock().await.expect("outer");
        let inner = lock
            .try_lock(Duration::ZERO, Some(Duration::from_secs(5)))
            .await
            .or_none()
            .expect("inner")
            .expect("re-entry never waits");
        assert_eq!(inner.token(), outer.token());
        assert_eq!(lock.hold_count().await.unwrap(), 2);
        // Another task of the same client is another owner: it must wait.
        let other = lock.clone();
        let waited = tokio::spawn(async move {
            other
                .try_lock(Duration::from_millis(100), None)
                .await
                .or_none()
                .unwrap()
                .is_none()
        });
        assert!(waited.await.unwrap(), "another task re-entered");
        // An RLock of the same name is the same lock.
        let plain = c.lock("reentrant");
        let t = tokio::spawn(async move {
            plain
                .try_lock(Duration::ZERO, None)
                .await
                .or_none()
                .unwrap()
                .is_none()
        });
        assert!(t.await.unwrap(), "the RLock of the same name was free");
        let token = outer.token();
        inner.unlock().await.unwrap();
        assert!(lock.is_locked().await.unwrap());
        outer.unlock().await.unwrap();
        assert!(!lock.is_locked().await.unwrap());
        let next = lock.lock().await.unwrap();
        assert!(next.token() > token);
        assert!(lock.force_unlock().await.unwrap());
        let after_force = lock.lock().await.unwrap();
        assert!(after_force.token() > next.token());
        assert!(next.unlock().await.unwrap_err().is_not_held());
        after_force.unlock().await.unwrap();
    })
    .await;
}

/// While held (watchdog and lease) every key has a TTL except the counter; after the
/// release only the counter is left.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_the_fence_counter_has_no_ttl() {
    let server = RedisServer::start();
    let c = client(&server, &suite::unique_ns("fenced-ttl")).await;
    let mut conn = server.conn().await;
    in_task(async move {
        let (a, b) = (c.fenced_lock("a"), c.fenced_lock("b"));
        let ga = a.lock().await.unwrap();
        let gb = b.lock_with_lease(Duration::from_secs(5)).await.unwrap();
        let fences = [a.fence_key().to_string(), b.fence_key().to_string()];
        let keys = suite::keys_with_pttl(&mut conn).await;
        assert_eq!(keys.len(), 4, "{keys:?}");
        for (key, pttl) in &keys {
            if fences.contains(key) {
                assert_eq!(*pttl, -1, "{key}");
            } else {
                assert!(*pttl > 0, "{key} has no TTL");
            }
        }
        let ttl = a.remaining_ttl().await.unwrap().unwrap();
        assert!(ttl <= WATCHDOG, "{ttl:?}");
        ga.unlock().await.unwrap();
        gb.unlock().await.unwrap();
        let mut left: Vec<String> = suite::keys_with_pttl(&mut conn)
            .await
            .into_iter()
            .map(|(k, _)| k)
            .collect();
        left.sort();
        assert_eq!(left, fences.to_vec());
    })
    .await;
}

/// A watchdog holder keeps its token while the watchdog renews the hash (with the extra
/// token field) past several TTLs; invalid names are typed errors.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watchdog_renews_a_fenced_hold_and_bad_names_are_rejected() {
    let server = RedisServer::start();
    let c = client(&server, &suite::unique_ns("fenced-watchdog")).await;
    in_task(async move {
        let lock = c.fenced_lock("long");
        let g = lock.lock().await.unwrap();
        tokio::time::sleep(WATCHDOG * 2).await;
        assert!(!g.is_lost());
        let again = lock.lock().await.unwrap();
        assert_eq!(again.token(), g.token());
        again.unlock().await.unwrap();
        g.unlock().await.unwrap();
        assert!(matches!(
            c.fenced_lock("").lock().await,
            Err(Error::InvalidArgument { .. })
        ));
        assert!(matches!(
            lock.try_lock(Duration::ZERO, Some(Duration::ZERO))
                .await
                .or_none(),
            Err(Error::InvalidArgument { .. })
        ));
    })
    .await;
}

/// Tokens of `n` fenced acquisitions in a row (lock, note the token, unlock).
async fn issue(lock: &FencedLock, n: usize) -> Vec<u64> {
    let mut tokens = Vec::new();
    for _ in 0..n {
        let g = within(10, lock.lock()).await.expect("lock");
        tokens.push(g.token());
        g.unlock().await.expect("unlock");
    }
    assert!(tokens.windows(2).all(|w| w[0] < w[1]), "{tokens:?}");
    tokens
}

/// The fencing counter as the server has it (`None`: no counter).
async fn counter(conn: &mut redis::aio::MultiplexedConnection, lock: &FencedLock) -> Option<u64> {
    redis::cmd("GET")
        .arg(lock.fence_key())
        .query_async(conn)
        .await
        .unwrap()
}

/// Tokens of `n` acquisitions once the server answers again: the client reconnects in the
/// background and the server may still be loading, so retryable errors are waited out.
async fn issue_when_back(lock: &FencedLock, n: usize) -> Vec<u64> {
    let deadline = Instant::now() + Duration::from_secs(15);
    let mut tokens = Vec::new();
    while tokens.len() < n {
        match lock.try_lock(Duration::from_secs(1), None).await.or_none() {
            Ok(Some(g)) => {
                tokens.push(g.token());
                g.unlock().await.expect("unlock");
            }
            Ok(None) => panic!("nobody holds the lock after the loss of writes"),
            Err(e) if e.is_retryable() && Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            Err(e) => panic!("lock after the loss of writes: {e:?}"),
        }
    }
    assert!(tokens.windows(2).all(|w| w[0] < w[1]), "{tokens:?}");
    tokens
}

/// Asserts the scenario really happened (the counter came back as `kept`, the last token the
/// loss kept, which is below the highest token issued) and that new tokens are still larger
/// than every token issued before.
fn assert_overtaken(kept: &[u64], lost: &[u64], restored: Option<u64>, after: &[u64]) {
    let highest = *lost.last().unwrap();
    assert!(kept.last() < lost.first(), "{kept:?} then {lost:?}");
    assert_eq!(
        restored,
        kept.last().copied(),
        "the counter must come back from before the lost tokens {lost:?}"
    );
    assert!(
        after[0] > highest,
        "token {} after the loss of writes <= {highest} issued before (restored counter \
         {restored:?})",
        after[0]
    );
}

/// `save` on, tokens, `SAVE`, more tokens (not in the snapshot), SIGKILL, restart on the same
/// port and dir: the server loads the snapshot, so the counter comes back behind the last
/// tokens. The next tokens are still larger than all of them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tokens_after_a_restart_from_an_older_rdb_snapshot_are_larger() {
    const RDB: &[&str] = &["--save", "3600", "1"];
    let mut server = RedisServer::start_with(RDB);
    let mut conn = server.conn().await;
    let save: Vec<String> = redis::cmd("CONFIG")
        .arg("GET")
        .arg("save")
        .query_async(&mut conn)
        .await
        .unwrap();
    assert_eq!(save, ["save", "3600 1"]);
    let c = client(&server, &suite::unique_ns("fenced-rdb")).await;
    let lock = c.fenced_lock("snapshotted");

    let kept = issue(&lock, 5).await;
    let () = redis::cmd("SAVE").query_async(&mut conn).await.unwrap();
    let lost = issue(&lock, 5).await;

    tokio::task::block_in_place(|| server.restart_keeping_data(RDB));
    let mut conn = server.conn().await;
    let restored = counter(&mut conn, &lock).await;
    let after = issue_when_back(&lock, 3).await;
    assert_overtaken(&kept, &lost, restored, &after);
    println!("kept {kept:?}, lost {lost:?}, restored {restored:?}, after {after:?}");
}

/// The incremental file of a multi-part AOF (Redis 7), named by the manifest's `type i` line.
fn incr_aof(server: &RedisServer) -> std::path::PathBuf {
    let dir = server.dir().join("appendonlydir");
    let manifest = std::fs::read_to_string(dir.join("appendonly.aof.manifest")).unwrap();
    let name = manifest
        .lines()
        .find(|l| l.ends_with(" type i"))
        .and_then(|l| l.split(' ').nth(1))
        .unwrap_or_else(|| panic!("no incremental AOF in the manifest:\n{manifest}"));
    dir.join(name)
}

/// `appendfsync everysec` may lose about the last second of writes when the machine dies
/// (power loss, kernel crash): they were in the page cache, not on disk. A SIGKILL of the
/// server alone loses nothing (the writes were already handed to the kernel), so after the
/// SIGKILL the test cuts the AOF back to the length it had on disk before the last tokens, as
/// such a crash leaves it, and restarts from it. The counter comes back behind the last
/// tokens; the next tokens are still larger than all of them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tokens_after_a_restart_from_an_aof_missing_its_last_writes_are_larger() {
    const AOF: &[&str] = &["--appendonly", "yes", "--appendfsync", "everysec"];
    let mut server = RedisServer::start_with(AOF);
    let c = client(&server, &suite::unique_ns("fenced-aof")).await;
    let lock = c.fenced_lock("appended");

    let kept = issue(&lock, 5).await;
    tokio::time::sleep(Duration::from_millis(1100)).await; // everysec: on disk by now
    let aof = incr_aof(&server);
    let on_disk = std::fs::metadata(&aof).unwrap().len();
    let lost = issue(&lock, 5).await;
    tokio::task::block_in_place(|| server.kill());
    let written = std::fs::metadata(&aof).unwrap().len();
    assert!(
        written > on_disk,
        "the lost tokens must have reached the AOF file: {written} <= {on_disk} bytes"
    );
    std::fs::OpenOptions::new()
        .write(true)
        .open(&aof)
        .unwrap()
        .set_len(on_disk)
        .unwrap();
    tokio::task::block_in_place(|| server.start_again_with(AOF));

    let mut conn = server.conn().await;
    let restored = counter(&mut conn, &lock).await;
    let after = issue_when_back(&lock, 3).await;
    assert_overtaken(&kept, &lost, restored, &after);
    println!("kept {kept:?}, lost {lost:?}, restored {restored:?}, after {after:?}");
}

async fn info(conn: &mut redis::aio::MultiplexedConnection, section: &str) -> String {
    redis::cmd("INFO")
        .arg(section)
        .query_async(conn)
        .await
        .unwrap()
}

/// A failover to a replica that missed the last writes. The master issues tokens and the
/// replica acknowledges them (WAIT); then the replica stalls (SIGSTOP) and its link is cut
/// (CLIENT KILL TYPE replica on the master), the master issues more tokens and dies (SIGKILL)
/// before the replica is back, and the replica is promoted (REPLICAOF NO ONE, as Sentinel
/// does). Its counter is behind the last tokens; the next tokens, through a client of the new
/// master, are still larger than all of them, and a resource that saw the old holder's token
/// accepts the new holder's and rejects the old one's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tokens_after_a_failover_to_a_lagging_replica_are_larger() {
    let mut master = RedisServer::start();
    let master_port = master.port().to_string();
    let replica = RedisServer::start_with(&["--replicaof", "127.0.0.1", &master_port]);
    let mut replica_conn = replica.conn().await;
    let synced = suite::eventually(Duration::from_secs(10), || {
        let mut conn = replica_conn.clone();
        async move {
            info(&mut conn, "replication")
                .await
                .contains("master_link_status:up")
        }
    })
    .await;
    assert!(synced, "the replica never synced");
    let ns = suite::unique_ns("fenced-failover");
    let c = client(&master, &ns).await;
    let lock = c.fenced_lock("replicated");
    let resource_server = RedisServer::start(); // the protected resource, elsewhere
    let resource = client(&resource_server, &ns)
        .await
        .fenced_value(format!("{ns}:resource"));

    let kept = issue(&lock, 5).await;
    let mut master_conn = master.conn().await;
    let acked: i64 = redis::cmd("WAIT")
        .arg(1)
        .arg(5000)
        .query_async(&mut master_conn)
        .await
        .unwrap();
    assert_eq!(acked, 1, "the replica did not acknowledge the first tokens");
    assert_eq!(
        counter(&mut replica_conn, &lock).await,
        kept.last().copied()
    );

    replica.signal("-STOP");
    let cut: i64 = redis::cmd("CLIENT")
        .arg("KILL")
        .arg("TYPE")
        .arg("replica")
        .query_async(&mut master_conn)
        .await
        .unwrap();
    assert_eq!(cut, 1, "no replica link to cut");
    let lost = issue(&lock, 5).await;
    let last = *lost.last().unwrap();
    resource.write(last, "old holder").await.expect("write");
    tokio::task::block_in_place(|| master.kill());
    replica.signal("-CONT");
    let () = redis::cmd("REPLICAOF")
        .arg("NO")
        .arg("ONE")
        .query_async(&mut replica_conn)
        .await
        .unwrap();
    let role = info(&mut replica_conn, "replication").await;
    assert!(role.contains("role:master"), "{role}");

    let restored = counter(&mut replica_conn, &lock).await;
    // The handle's Client must stay alive: a closed client takes no locks.
    let promoted_client = client(&replica, &ns).await;
    let promoted = promoted_client.fenced_lock("replicated");
    let after = issue_when_back(&promoted, 3).await;
    assert_overtaken(&kept, &lost, restored, &after);

    let g = within(10, promoted.lock()).await.expect("lock");
    resource
        .write(g.token(), "new holder")
        .await
        .expect("the resource must accept the new holder's token");
    let late = resource.write(last, "old holder, late").await.unwrap_err();
    assert!(late.is_stale_token(), "{late:?}");
    g.unlock().await.unwrap();
    println!("kept {kept:?}, lost {lost:?}, restored {restored:?}, after {after:?}");
}

/// The counter's edge cases, set by hand: a counter ahead of the clock counts on by one; a
/// counter at 2^53 - 1 is exhausted and a non-integer one is refused, both as Redis errors
/// that leave the counter and the lock untouched.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn counter_ahead_of_the_clock_counts_on_and_bad_counters_are_errors() {
    let server = RedisServer::start();
    let c = client(&server, &suite::unique_ns("fenced-counter")).await;
    let lock = c.fenced_lock("edge");
    let mut conn = server.conn().await;

    let ahead = server_micros(&mut conn).await + 3_600_000_000; // an hour ahead
    let () = conn.set(lock.fence_key(), ahead).await.unwrap();
    assert_eq!(issue(&lock, 2).await, [ahead + 1, ahead + 2]);

    let max_token = ((1u64 << 53) - 1).to_string();
    for (value, message) in [
        (max_token.as_str(), "fencing counter exhausted"),
        ("12.5", "fencing counter is not an integer"),
        ("abc", "fencing counter is not an integer"),
    ] {
        let () = conn.set(lock.fence_key(), value).await.unwrap();
        let err = lock
            .try_lock(Duration::ZERO, None)
            .await
            .or_none()
            .unwrap_err();
        assert!(
            matches!(&err, Error::Redis(_)) && err.to_string().contains(message),
            "{value}: {err:?}"
        );
        let left: String = conn.get(lock.fence_key()).await.unwrap();
        assert_eq!(left, value);
        assert!(!lock.is_locked().await.unwrap());
    }
}

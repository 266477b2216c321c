//! `RwLock` against real redis-servers: a history of reads and writes from many tasks over
//! several clients (no write overlaps any hold, reads do overlap), reentrancy, downgrade,
//! refused upgrade, a crashed reader, writer starvation, pub/sub wakeups, cancellation,
//! a killed subscription connection and SCRIPT FLUSH while waiting, and bad input.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use suite::OrNone;

use lockwise::{Client, Error};
use suite::kit::{self, within};
use suite::{Conn, RedisServer};

/// Nothing under `ns` without a TTL, no channel subscribed.
async fn assert_clean(conn: &mut Conn, ns: &str) {
    kit::assert_ns_clean(conn, ns).await;
    assert!(
        suite::no_channels_within(conn, Duration::from_secs(3)).await,
        "channels left subscribed: {:?}",
        suite::active_channels(conn).await
    );
}

/// Nothing held: no writer, no reader.
async fn assert_free(c: &Client, name: &str) {
    let rw = c.rw_lock(name);
    assert!(!rw.is_write_locked().await.unwrap());
    assert_eq!(rw.reader_count().await.unwrap(), 0);
}

#[derive(Clone, Copy, Debug)]
struct Span {
    write: bool,
    from: Instant,
    to: Instant,
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn history_no_write_overlaps_any_hold_and_reads_overlap() {
    let server = RedisServer::start();
    let c0 = kit::fresh_client(&server, "rw-history").await;
    let ns = c0.namespace().to_string();
    let mut clients = vec![c0.clone()];
    for _ in 0..2 {
        clients.push(kit::peer(&server, &c0).await);
    }
    let spans = Arc::new(Mutex::new(Vec::<Span>::new()));
    let mut tasks = Vec::new();
    for t in 0..12usize {
        let c = clients[t % clients.len()].clone();
        let spans = spans.clone();
        tasks.push(tokio::spawn(async move {
            let rw = c.rw_lock("h");
            for i in 0..12usize {
                let write = (t + i) % 4 == 0;
                let lease = (i % 3 == 0).then(|| Duration::from_secs(5));
                let hold = Duration::from_millis(3 + (i as u64 * 7 + t as u64) % 9);
                if write {
                    let g = rw
                        .write()
                        .try_lock(Duration::from_secs(30), lease)
                        .await
                        .or_none();
                    let g = g.unwrap().expect("write within 30 s");
                    let from = Instant::now();
                    tokio::time::sleep(hold).await;
                    let to = Instant::now();
                    assert!(!g.is_lost());
                    g.unlock().await.unwrap();
                    spans.lock().unwrap().push(Span { write, from, to });
                } else {
                    let g = rw
                        .read()
                        .try_lock(Duration::from_secs(30), lease)
                        .await
                        .or_none();
                    let g = g.unwrap().expect("read within 30 s");
                    let from = Instant::now();
                    tokio::time::sleep(hold * 2).await;
                    let to = Instant::now();
                    assert!(!g.is_lost());
                    g.unlock().await.unwrap();
                    spans.lock().unwrap().push(Span { write, from, to });
                }
            }
        }));
    }
    for t in tasks {
        within(60, t).await.unwrap();
    }
    let spans = spans.lock().unwrap().clone();
    assert_eq!(spans.len(), 12 * 12);
    let mut read_overlaps = 0;
    for (i, a) in spans.iter().enumerate() {
        for b in &spans[i + 1..] {
            let overlap = a.from < b.to && b.from < a.to;
            if overlap && (a.write || b.write) {
                panic!("a write overlaps another hold: {a:?} {b:?}");
            }
            if overlap {
                read_overlaps += 1;
            }
        }
    }
    assert!(read_overlaps > 0, "reads never overlapped");
    println!("read/read overlaps: {read_overlaps}");
    let mut conn = server.conn().await;
    assert_free(&c0, "h").await;
    assert_clean(&mut conn, &ns).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reentrancy_downgrade_and_refused_upgrade() {
    let server = RedisServer::start();
    let c = kit::fresh_client(&server, "rw-reentry").await;
    let ns = c.namespace().to_string();
    let mut conn = server.conn().await;
    let c2 = c.clone();
    kit::in_task(async move {
        let rw = c2.rw_lock("r");
        // Re-entrant reads and writes.
        let r1 = rw.read().lock().await.unwrap();
        let r2 = rw.read().lock().await.unwrap();
        assert_eq!(rw.read().hold_count().await.unwrap(), 2);
        // Upgrade: refused at once, nothing changed.
        let before: Vec<(String, String)> = redis::cmd("HGETALL")
            .arg(rw.read().key())
            .query_async(&mut conn)
            .await
            .unwrap();
        let started = Instant::now();
        match rw.write().lock().await {
            Err(Error::UpgradeRefused { name }) => assert_eq!(name, "r"),
            other => panic!("expected UpgradeRefused, got {other:?}"),
        }
        assert!(started.elapsed() < Duration::from_secs(1));
        let after: Vec<(String, String)> = redis::cmd("HGETALL")
            .arg(rw.read().key())
            .query_async(&mut conn)
            .await
            .unwrap();
        assert_eq!(before, after, "a refused upgrade changes nothing");
        assert!(!rw.is_write_locked().await.unwrap());
        assert!(!suite::exists(&mut conn, &rw.write().key().replace("rwwrite", "rwwriters")).await);
        r2.unlock().await.unwrap();
        r1.unlock().await.unwrap();
        // Downgrade: write, then read under it, keep the read.
        let w1 = rw.write().lock().await.unwrap();
        let w2 = rw.write().lock().await.unwrap();
        assert_eq!(rw.write().hold_count().await.unwrap(), 2);
        let r = rw.read().lock().await.unwrap();
        w2.unlock().await.unwrap();
        w1.unlock().await.unwrap();
        assert!(!rw.is_write_locked().await.unwrap());
        assert_eq!(rw.reader_count().await.unwrap(), 1);
        assert_eq!(rw.hold_count().await.unwrap(), 1);
        r.unlock().await.unwrap();
        assert_eq!(rw.hold_count().await.unwrap(), 0);
        // Per-hold owners: two reads are two owners; a write waits for them.
        let nr = rw.non_reentrant();
        let a = nr.read().lock().await.unwrap();
        let b = nr.read().lock().await.unwrap();
        assert_ne!(a.owner(), b.owner());
        assert_eq!(rw.reader_count().await.unwrap(), 2);
        assert!(nr
            .write()
            .try_lock(Duration::from_millis(100), None)
            .await
            .or_none()
            .unwrap()
            .is_none());
        a.unlock().await.unwrap();
        b.unlock().await.unwrap();
        // Named owners re-enter across tasks.
        let named = rw.with_owner("job");
        let w = named.write().lock().await.unwrap();
        let named2 = named.clone();
        let inner = tokio::spawn(async move { named2.write().lock().await.unwrap() })
            .await
            .unwrap();
        assert_eq!(inner.owner(), w.owner());
        inner.unlock().await.unwrap();
        w.unlock().await.unwrap();
        assert_free(&c2, "r").await;
    })
    .await;
    let mut conn = server.conn().await;
    assert_clean(&mut conn, &ns).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crashed_reader_expires_while_another_reader_renews() {
    let server = RedisServer::start();
    // The child's watchdog timeout is 1 s, as ours.
    let c = kit::fresh_client(&server, "rw-crash").await;
    let ns = c.namespace().to_string();
    let mut child = suite::child::ChildProc::spawn(
        "holder",
        server.url(),
        &ns,
        "child",
        &[
            ("LOCKWISE_FP_KIND", "rwread".to_string()),
            ("LOCKWISE_FP_LOCK", "c".to_string()),
            ("LOCKWISE_FP_HOLD_MS", "600000".to_string()),
        ],
    );
    child.wait_line("@acquired", Duration::from_secs(30)).await;
    let rw = c.rw_lock("c");
    let ours = kit::in_task({
        let rw = rw.clone();
        async move { rw.read().lock().await.unwrap() }
    })
    .await;
    assert_eq!(rw.reader_count().await.unwrap(), 2);
    child.sigkill();
    let killed = Instant::now();
    // Our reader keeps renewing R's TTL; the dead reader's deadline still runs out.
    let peer = kit::peer(&server, &c).await;
    let w = peer.rw_lock("c").write();
    let ((), took) = tokio::join!(
        async move {
            tokio::time::sleep(Duration::from_millis(2500)).await;
            assert!(!ours.is_lost());
            ours.unlock().await.unwrap();
        },
        async { within(10, w.lock()).await.unwrap() }
    );
    let waited = killed.elapsed();
    println!("writer in {waited:?} after the reader's crash");
    assert!(
        waited >= Duration::from_millis(2400),
        "our read was still held"
    );
    assert!(waited < Duration::from_secs(4));
    took.unlock().await.unwrap();
    let mut conn = server.conn().await;
    assert_clean(&mut conn, &ns).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crashed_reader_alone_lets_a_writer_in_after_its_deadline() {
    let server = RedisServer::start();
    let c = kit::fresh_client(&server, "rw-crash2").await;
    let ns = c.namespace().to_string();
    let mut child = suite::child::ChildProc::spawn(
        "holder",
        server.url(),
        &ns,
        "child",
        &[
            ("LOCKWISE_FP_KIND", "rwread".to_string()),
            ("LOCKWISE_FP_LOCK", "c".to_string()),
            ("LOCKWISE_FP_HOLD_MS", "600000".to_string()),
        ],
    );
    child.wait_line("@acquired", Duration::from_secs(30)).await;
    // Another reader of ours, which keeps R alive with its renewals the whole time.
    let other = kit::peer(&server, &c).await;
    let keep = kit::in_task({
        let rw = other.rw_lock("c");
        async move { rw.non_reentrant().read().lock().await.unwrap() }
    })
    .await;
    child.sigkill();
    let killed = Instant::now();
    // A writer waits for both; the dead one's hold ends within the watchdog timeout.
    let rw = c.rw_lock("c");
    let waiter = tokio::spawn(async move { rw.write().lock().await });
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert_eq!(
        c.rw_lock("c").reader_count().await.unwrap(),
        1,
        "only the live reader counts"
    );
    keep.unlock().await.unwrap();
    let g = within(5, waiter).await.unwrap().unwrap();
    println!("writer in {:?} after the crash", killed.elapsed());
    g.unlock().await.unwrap();
    let mut conn = server.conn().await;
    assert_clean(&mut conn, &ns).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_writer_is_not_starved_by_a_stream_of_readers() {
    let server = RedisServer::start();
    let c0 = kit::fresh_client(&server, "rw-starve").await;
    let ns = c0.namespace().to_string();
    let mut readers = Vec::new();
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let hold = Duration::from_millis(100);
    for r in 0..6usize {
        let c = if r % 2 == 0 {
            c0.clone()
        } else {
            kit::peer(&server, &c0).await
        };
        let stop = stop.clone();
        readers.push(tokio::spawn(async move {
            let rw = c.rw_lock("s");
            tokio::time::sleep(Duration::from_millis(r as u64 * 17)).await;
            while !stop.load(std::sync::atomic::Ordering::SeqCst) {
                let g = rw.read().lock().await.unwrap();
                tokio::time::sleep(hold).await;
                g.unlock().await.unwrap();
            }
        }));
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    let writer = kit::peer(&server, &c0).await;
    assert!(c0.rw_lock("s").reader_count().await.unwrap() > 0);
    let started = Instant::now();
    let g = within(10, writer.rw_lock("s").write().lock())
        .await
        .unwrap();
    let waited = started.elapsed();
    println!(
        "writer waited {waited:?} under 6 overlapping readers holding {hold:?} each ({:.1} read holds)",
        waited.as_secs_f64() / hold.as_secs_f64()
    );
    assert!(waited < hold * 5, "writer waited {waited:?}");
    g.unlock().await.unwrap();
    stop.store(true, std::sync::atomic::Ordering::SeqCst);
    for r in readers {
        within(10, r).await.unwrap();
    }
    let mut conn = server.conn().await;
    assert_free(&c0, "s").await;
    assert_clean(&mut conn, &ns).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wakeups_write_unlock_wakes_readers_last_read_wakes_writer_cancelled_writer_lets_readers_in(
) {
    let server = RedisServer::start();
    // Long watchdog: a waiter woken early was woken by pub/sub, not by a TTL.
    let c0 = kit::client_with(&server, "rw-wake", Duration::from_secs(30)).await;
    let ns = c0.namespace().to_string();
    let peer = kit::peer(&server, &c0).await;
    let rw = c0.rw_lock("w");
    let w = rw.write().lock().await.unwrap();
    let mut readers = Vec::new();
    for i in 0..6 {
        let c = if i % 2 == 0 { c0.clone() } else { peer.clone() };
        readers.push(tokio::spawn(async move {
            c.rw_lock("w").read().lock().await.unwrap()
        }));
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    let t = Instant::now();
    w.unlock().await.unwrap();
    let mut guards = Vec::new();
    for r in readers {
        guards.push(within(5, r).await.unwrap());
    }
    let all_in = t.elapsed();
    println!("write unlock -> 6 readers in: {all_in:?}");
    assert!(all_in < Duration::from_secs(2));
    // The last read unlock wakes a writer of another client.
    let waiter = tokio::spawn({
        let p = peer.clone();
        async move { p.rw_lock("w").write().lock().await.unwrap() }
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    let t = Instant::now();
    for g in guards {
        g.unlock().await.unwrap();
    }
    let g = within(5, waiter).await.unwrap();
    println!("last read unlock -> writer in: {:?}", t.elapsed());
    assert!(t.elapsed() < Duration::from_secs(2));
    // A waiting writer holds new readers back; cancelling it lets them in at once.
    let blocked_writer = tokio::spawn({
        let c = c0.clone();
        async move { c.rw_lock("w").write().lock().await }
    });
    tokio::time::sleep(Duration::from_millis(200)).await;
    g.unlock().await.unwrap(); // the blocked writer takes it now
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(rw.is_write_locked().await.unwrap());
    let held = within(5, blocked_writer).await.unwrap().unwrap();
    // A reader holds; a writer waits for it (registers its intent); a new reader waits.
    drop(held);
    let r = peer.rw_lock("w").read().lock().await.unwrap();
    let writer = tokio::spawn({
        let c = c0.clone();
        async move { c.rw_lock("w").write().lock().await }
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    let late = tokio::spawn({
        let c = c0.clone();
        async move { c.rw_lock("w").non_reentrant().read().lock().await.unwrap() }
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(
        !late.is_finished(),
        "a new reader waits behind a waiting writer"
    );
    let t = Instant::now();
    writer.abort();
    let g = within(5, late).await.unwrap();
    println!("cancelled writer -> held-back reader in: {:?}", t.elapsed());
    assert!(t.elapsed() < Duration::from_secs(2));
    g.unlock().await.unwrap();
    r.unlock().await.unwrap();
    let mut conn = server.conn().await;
    assert_free(&c0, "w").await;
    assert_clean(&mut conn, &ns).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancellation_at_every_phase_leaves_nothing() {
    let server = RedisServer::start();
    let c = kit::fresh_client(&server, "rw-cancel").await;
    let ns = c.namespace().to_string();
    let peer = kit::peer(&server, &c).await;
    let rw = c.rw_lock("x");
    // Dropped before it was polled.
    drop(rw.read().lock());
    drop(rw.write().lock());
    // Dropped right after the script ran (an early abort of a fast path), many times.
    for i in 0..20u64 {
        let (rw, dur) = (rw.clone(), Duration::from_micros(50 * i));
        let h = tokio::spawn(async move {
            let _ = tokio::time::timeout(dur, rw.write().lock()).await;
        });
        let _ = h.await;
        let (rw2, dur) = (c.rw_lock("x"), Duration::from_micros(50 * i));
        let h = tokio::spawn(async move {
            let _ = tokio::time::timeout(dur, rw2.read().lock()).await;
        });
        let _ = h.await;
    }
    // While waiting: readers behind a writer, a writer behind a reader.
    let w = peer.rw_lock("x").write().lock().await.unwrap();
    let r = tokio::time::timeout(Duration::from_millis(300), rw.read().lock()).await;
    assert!(r.is_err());
    w.unlock().await.unwrap();
    let rd = peer.rw_lock("x").read().lock().await.unwrap();
    let r = tokio::time::timeout(Duration::from_millis(300), rw.write().lock()).await;
    assert!(r.is_err());
    // try_lock timing out withdraws the intent before it returns.
    assert!(rw
        .write()
        .try_lock(Duration::from_millis(200), None)
        .await
        .or_none()
        .unwrap()
        .is_none());
    let mut conn = server.conn().await;
    let writers = rw.write().key().replace(":rwwrite:", ":rwwriters:");
    assert!(
        suite::eventually(Duration::from_secs(2), || {
            let mut c = conn.clone();
            let k = writers.clone();
            async move { !suite::exists(&mut c, &k).await }
        })
        .await,
        "the intent was withdrawn"
    );
    rd.unlock().await.unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_free(&c, "x").await;
    assert_clean(&mut conn, &ns).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_pubsub_and_script_flush_while_waiting() {
    let server = RedisServer::start();
    let c = kit::client_with(&server, "rw-faults", Duration::from_secs(30)).await;
    let ns = c.namespace().to_string();
    let peer = kit::peer(&server, &c).await;
    let mut conn = server.conn().await;
    for fault in ["kill", "flush"] {
        let w = peer.rw_lock("f").write().lock().await.unwrap();
        let readers: Vec<_> = (0..3)
            .map(|_| {
                let c = c.clone();
                tokio::spawn(async move { c.rw_lock("f").read().lock().await.unwrap() })
            })
            .collect();
        let writer = tokio::spawn({
            let c = c.clone();
            async move { c.rw_lock("f").non_reentrant().write().lock().await.unwrap() }
        });
        tokio::time::sleep(Duration::from_millis(300)).await;
        if fault == "kill" {
            assert!(suite::kill_pubsub(&mut conn).await >= 1);
        } else {
            let _: () = redis::cmd("SCRIPT")
                .arg("FLUSH")
                .query_async(&mut conn)
                .await
                .unwrap();
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
        let t = Instant::now();
        w.unlock().await.unwrap();
        // The waiting writer has priority, then the readers.
        let g = within(10, writer).await.unwrap();
        g.unlock().await.unwrap();
        for r in readers {
            within(10, r).await.unwrap().unlock().await.unwrap();
        }
        println!("{fault}: all in after {:?}", t.elapsed());
        assert!(t.elapsed() < Duration::from_secs(10));
    }
    assert_free(&c, "f").await;
    assert_clean(&mut conn, &ns).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_input_is_a_typed_error_and_changes_nothing() {
    let server = RedisServer::start();
    let c = kit::fresh_client(&server, "rw-bad").await;
    let ns = c.namespace().to_string();
    let mut conn = server.conn().await;
    let bad = c.rw_lock("");
    assert!(matches!(
        bad.read().lock().await,
        Err(Error::InvalidArgument { .. })
    ));
    assert!(matches!(
        bad.write().try_lock(Duration::ZERO, None).await.or_none(),
        Err(Error::InvalidArgument { .. })
    ));
    assert!(matches!(
        bad.reader_count().await,
        Err(Error::InvalidArgument { .. })
    ));
    let rw = c.rw_lock("b");
    for lease in [Duration::ZERO, Duration::from_micros(10), Duration::MAX] {
        assert!(matches!(
            rw.read().lock_with_lease(lease).await,
            Err(Error::InvalidArgument { .. })
        ));
        assert!(matches!(
            rw.write().lock_with_lease(lease).await,
            Err(Error::InvalidArgument { .. })
        ));
    }
    assert!(matches!(
        rw.with_owner("").read().lock().await,
        Err(Error::InvalidArgument { .. })
    ));
    assert!(kit::keys_in(&mut conn, &ns).await.is_empty());
    // A key of the wrong type at W, then at R: WRONGTYPE, nothing changed.
    for key in [rw.write().key().to_string(), rw.read().key().to_string()] {
        let _: () = redis::cmd("SET")
            .arg(&key)
            .arg("x")
            .arg("PX")
            .arg(60_000)
            .query_async(&mut conn)
            .await
            .unwrap();
        let before = kit::keys_in(&mut conn, &ns).await.len();
        for res in [
            rw.read()
                .try_lock(Duration::ZERO, None)
                .await
                .or_none()
                .map(|g| g.is_some()),
            rw.write()
                .try_lock(Duration::ZERO, None)
                .await
                .or_none()
                .map(|g| g.is_some()),
        ] {
            match res {
                Err(Error::Redis(e)) => assert_eq!(e.code(), Some("WRONGTYPE"), "{e}"),
                other => panic!("expected WRONGTYPE, got {other:?}"),
            }
        }
        let v: String = redis::cmd("GET")
            .arg(&key)
            .query_async(&mut conn)
            .await
            .unwrap();
        assert_eq!(v, "x");
        assert_eq!(kit::keys_in(&mut conn, &ns).await.len(), before);
        let _: () = redis::cmd("DEL")
            .arg(&key)
            .query_async(&mut conn)
            .await
            .unwrap();
    }
    // force_unlock frees both sides.
    let g = rw.read().lock().await.unwrap();
    assert!(rw.force_unlock().await.unwrap());
    kit::assert_not_held(g.unlock().await, "b");
    assert!(!rw.force_unlock().await.unwrap());
    assert_clean(&mut conn, &ns).await;
}

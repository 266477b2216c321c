//! The `lockwise` CLI end to end (the built binary against real servers, standalone and
//! Cluster) and the `Admin` API it is built on. The binary is the `lockwise-cli` crate's,
//! built on first use.
//!
//! Each test holds real locks with real clients, runs the binary (`--json` where it checks
//! fields, the text output where it checks what people read), and asserts what it reports
//! against what the guards know (owners, tokens, counts). After each test: no key of the
//! namespace without a TTL (except what the test made on purpose and removed), no channel
//! left subscribed.

use suite::topology;

use std::process::{Command, Output, Stdio};
use std::time::Duration;

use lockwise::{Client, LeakReason, LockKind, OwnerCheck};
use redis::AsyncCommands;
use serde_json::Value;
use suite::child::ChildProc;
use suite::kit::{assert_ns_clean, fresh_client, peer, within};
use suite::{no_channels_within, Conn, RedisServer};
use topology::{RedisCluster, RedisSentinel};

/// The `lockwise` binary of the `lockwise-cli` crate, built on first use.
fn exe() -> std::path::PathBuf {
    suite::child::cli_exe()
}

/// Runs `lockwise --url <url> --namespace <ns> <args>` with stdin closed (not a terminal).
fn run(url: &str, ns: &str, args: &[&str]) -> Output {
    run_with(&["--url", url, "--namespace", ns], args)
}

fn run_with(target: &[&str], args: &[&str]) -> Output {
    Command::new(exe())
        .args(target)
        .args(args)
        .env_remove("REDIS_URL")
        .stdin(Stdio::null())
        .output()
        .expect("run the lockwise binary")
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn code(o: &Output) -> i32 {
    o.status.code().expect("exited by a signal")
}

/// The binary's `--json` output, parsed; asserts exit code `expected`.
fn json(o: &Output, expected: i32) -> Value {
    assert_eq!(
        code(o),
        expected,
        "stdout: {}\nstderr: {}",
        stdout(o),
        String::from_utf8_lossy(&o.stderr)
    );
    serde_json::from_str(stdout(o).trim()).expect("one JSON document")
}

/// Runs the binary off the test's runtime (it blocks until the process exits).
async fn run_async(url: String, ns: String, args: Vec<&'static str>) -> Output {
    tokio::task::spawn_blocking(move || run(&url, &ns, &args))
        .await
        .unwrap()
}

fn lock_named<'a>(doc: &'a Value, name: &str, kind: &str) -> &'a Value {
    doc["locks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|l| l["name"] == name && l["kind"] == kind)
        .unwrap_or_else(|| panic!("no {kind} lock {name:?} in {doc}"))
}

fn owners(lock: &Value) -> Vec<String> {
    let mut o: Vec<String> = lock["holders"]
        .as_array()
        .unwrap()
        .iter()
        .map(|h| h["owner"].as_str().unwrap().to_string())
        .collect();
    o.sort();
    o
}

async fn clean_after(conn: &Conn, ns: &str) {
    assert_ns_clean(&mut conn.clone(), ns).await;
    assert!(
        no_channels_within(conn, Duration::from_secs(5)).await,
        "a channel is still subscribed"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn list_shows_every_kind_with_holders_queue_and_waiters() {
    let server = RedisServer::start();
    let conn = server.conn().await;
    let a = fresh_client(&server, "cli_list").await;
    let b = peer(&server, &a).await;
    let ns = a.namespace().to_string();

    let plain = a.lock("plain").lock().await.unwrap();
    let reentered = a.lock("plain").lock().await.unwrap();
    let fenced = a.fenced_lock("fenced").lock().await.unwrap();
    let fair = a.fair_lock("fair").lock().await.unwrap();
    let fair_b = b.fair_lock("fair");
    let waiter = tokio::spawn(async move { fair_b.lock().await.unwrap().unlock().await });
    suite::queue_reaches(&a.fair_lock("fair"), 1).await;
    let r1 = a.rw_lock("rw").read().lock().await.unwrap();
    let r2 = b.rw_lock("rw").read().lock().await.unwrap();
    let sem = a.semaphore("sem");
    assert!(sem.try_set_permits(3).await.unwrap());
    let permits = sem.acquire_many(1).await.unwrap();
    let lsem = a.lease_semaphore("lsem");
    assert!(lsem.try_set_permits(2).await.unwrap());
    let lease = lsem.acquire(Duration::from_secs(30)).await.unwrap();
    let latch = a.count_down_latch("latch");
    assert!(latch
        .try_set_count(2, Duration::from_secs(30))
        .await
        .unwrap());

    let out = run_async(server.url().to_string(), ns.clone(), vec!["--json", "list"]).await;
    let doc = json(&out, 0);
    assert_eq!(doc["complete"], true);
    // The contended fair lock comes first: a queued waiter, subscribed to its channel.
    let first = &doc["locks"][0];
    assert_eq!(first["name"], "fair", "{doc}");
    assert_eq!(first["kind"], "fair");
    assert_eq!(first["queue_len"], 1);
    assert!(first["waiters"].as_u64().unwrap() >= 1, "{first}");
    assert_eq!(owners(first), vec![fair.owner().to_string()]);

    let p = lock_named(&doc, "plain", "lock");
    assert_eq!(owners(p), vec![plain.owner().to_string()]);
    assert_eq!(p["holders"][0]["count"], 2);
    assert!(p["ttl_ms"].as_u64().unwrap() > 0);
    let f = lock_named(&doc, "fenced", "fenced");
    assert_eq!(f["token"], fenced.token());
    let rw = lock_named(&doc, "rw", "rwlock");
    let mut readers = vec![r1.owner().to_string(), r2.owner().to_string()];
    readers.sort();
    assert_eq!(owners(rw), readers);
    assert!(rw["holders"]
        .as_array()
        .unwrap()
        .iter()
        .all(|h| h["mode"] == "read"));
    assert_eq!(lock_named(&doc, "sem", "semaphore")["permits"], 2);
    let ls = lock_named(&doc, "lsem", "leasesem");
    assert_eq!(ls["permits"], 1);
    assert_eq!(owners(ls), vec![lease.id().to_string()]);
    assert_eq!(lock_named(&doc, "latch", "latch")["permits"], 2);
    assert_eq!(doc["locks"].as_array().unwrap().len(), 7, "{doc}");

    // The text table names every lock, one row each, under a header.
    let text = stdout(&run(server.url(), &ns, &["list"]));
    assert!(text.starts_with("NAME"), "{text}");
    for name in ["plain", "fenced", "fair", "rw", "sem", "lsem", "latch"] {
        assert!(
            text.lines().any(|l| l.starts_with(&format!("{name} "))),
            "{name} missing:\n{text}"
        );
    }
    assert!(text.contains("7 locks"), "{text}");

    // A limit below the key count stops the scan and says so.
    let partial = json(
        &run(server.url(), &ns, &["--json", "list", "--limit", "2"]),
        0,
    );
    assert_eq!(partial["complete"], false);
    assert_eq!(partial["scanned"], 2);

    drop((permits, r1, r2, plain, reentered));
    fair.unlock().await.unwrap();
    within(10, waiter).await.unwrap().unwrap();
    fenced.unlock().await.unwrap();
    lease.release().await.unwrap();
    latch.count_down().await.unwrap();
    latch.count_down().await.unwrap();
    // The fencing counter is TTL-less by design.
    let _: () = conn
        .clone()
        .del(a.fenced_lock("fenced").fence_key())
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(200)).await;
    clean_after(&conn, &ns).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn inspect_reports_each_kind_and_its_keys() {
    let server = RedisServer::start();
    let conn = server.conn().await;
    let a = fresh_client(&server, "cli_inspect").await;
    let ns = a.namespace().to_string();
    let fenced = a
        .fenced_lock("job")
        .lock_with_lease(Duration::from_secs(30))
        .await
        .unwrap();
    let writer = a.rw_lock("job").write().lock().await.unwrap();

    let doc = json(&run(server.url(), &ns, &["--json", "inspect", "job"]), 0);
    assert_eq!(doc["name"], "job");
    let locks = doc["locks"].as_array().unwrap();
    assert_eq!(locks.len(), 2, "{doc}");
    let f = lock_named(&doc, "job", "fenced");
    assert_eq!(f["token"], fenced.token());
    assert_eq!(owners(f), vec![fenced.owner().to_string()]);
    let ttl = f["ttl_ms"].as_u64().unwrap();
    assert!(ttl > 25_000 && ttl <= 30_000, "{ttl}");
    let roles: Vec<&str> = f["keys"]
        .as_array()
        .unwrap()
        .iter()
        .map(|k| k["role"].as_str().unwrap())
        .collect();
    assert_eq!(roles, ["lock", "fence"]);
    let fence_key = &f["keys"][1];
    assert_eq!(fence_key["key"], format!("{ns}:fence:{{job}}"));
    assert_eq!(fence_key["ttl_ms"], Value::Null);
    let w = lock_named(&doc, "job", "rwlock");
    assert_eq!(owners(w), vec![writer.owner().to_string()]);
    assert_eq!(w["holders"][0]["mode"], "write");

    // The text form names the owner, the token and every key.
    let text = stdout(&run(server.url(), &ns, &["inspect", "job"]));
    assert!(text.contains(fenced.owner()), "{text}");
    assert!(
        text.contains(&format!("token:    {}", fenced.token())),
        "{text}"
    );
    assert!(text.contains(&format!("{ns}:rwwrite:{{job}}")), "{text}");

    // A name with no keys: nothing to show, exit 0.
    let none = json(
        &run(server.url(), &ns, &["--json", "inspect", "nothing"]),
        0,
    );
    assert_eq!(none["locks"].as_array().unwrap().len(), 0);

    // The library call gives the same.
    let infos = a.admin().inspect("job").await.unwrap();
    assert_eq!(infos.len(), 2);
    assert_eq!(infos[0].kind, LockKind::FencedLock);
    assert_eq!(infos[0].token, Some(fenced.token()));
    assert_eq!(infos[1].kind, LockKind::RwLock);

    fenced.unlock().await.unwrap();
    writer.unlock().await.unwrap();
    let _: () = conn
        .clone()
        .del(format!("{ns}:fence:{{job}}"))
        .await
        .unwrap();
    clean_after(&conn, &ns).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leaks_finds_ttl_less_keys_stale_queue_entries_and_gone_owners() {
    let server = RedisServer::start();
    let mut conn = server.conn().await;
    let a = fresh_client(&server, "cli_leaks").await;
    let ns = a.namespace().to_string();

    // Healthy: a live hold and a fencing counter (TTL-less by design) are no leaks.
    let live = a.lock("live").lock().await.unwrap();
    a.fenced_lock("f")
        .lock()
        .await
        .unwrap()
        .unlock()
        .await
        .unwrap();
    let clean = run(server.url(), &ns, &["leaks"]);
    assert_eq!(code(&clean), 0, "{}", stdout(&clean));
    assert!(stdout(&clean).starts_with("no leaks"), "{}", stdout(&clean));

    // A lock hash written by hand without a TTL.
    let stuck = format!("{ns}:lock:{{stuck}}");
    let _: () = conn.hset(&stuck, "someone:1", 1).await.unwrap();
    // A fair queue with a waiter whose deadline passed and one with no deadline (the keys
    // themselves have TTLs, so only the entries are stale).
    let queue = format!("{ns}:fairqueue:{{q}}");
    let deadlines = format!("{ns}:fairtimeouts:{{q}}");
    let (now, _): (u64, u64) = redis::cmd("TIME").query_async(&mut conn).await.unwrap();
    let _: () = conn
        .rpush(&queue, &["gone:1:1", "nodeadline:1:1"])
        .await
        .unwrap();
    let _: () = conn
        .zadd(&deadlines, "gone:1:1", (now * 1000 - 10_000) as f64)
        .await
        .unwrap();
    let _: () = conn.pexpire(&queue, 60_000).await.unwrap();
    let _: () = conn.pexpire(&deadlines, 60_000).await.unwrap();
    // A holder in a process that is SIGKILLed, with a 60 s lease: its hold outlives it.
    let mut holder = ChildProc::spawn(
        "holder",
        server.url(),
        &ns,
        "dead",
        &[
            ("LOCKWISE_FP_KIND", "rlock-lease".to_string()),
            ("LOCKWISE_FP_LOCK", "orphan".to_string()),
            ("LOCKWISE_FP_HOLD_MS", "120000".to_string()),
        ],
    );
    holder.wait_line("@acquired", Duration::from_secs(20)).await;
    let orphan = format!("{ns}:lock:{{orphan}}");
    let dead_owner: Vec<String> = conn.hkeys(&orphan).await.unwrap();
    let dead_id = dead_owner[0].split(':').next().unwrap().to_string();
    let presence = format!("{ns}:client:{{{dead_id}}}");
    assert!(
        conn.exists::<_, bool>(&presence).await.unwrap(),
        "the child's presence key"
    );
    holder.sigkill();
    // Its presence key expires with its watchdog timeout (1 s); its 60 s lease hold stays.
    assert!(
        suite::eventually(Duration::from_secs(5), || {
            let (mut conn, presence) = (conn.clone(), presence.clone());
            async move { !conn.exists::<_, bool>(&presence).await.unwrap() }
        })
        .await,
        "the killed child's presence key outlived its TTL"
    );

    let out = run(server.url(), &ns, &["--json", "leaks"]);
    let doc = json(&out, 1);
    let leaks = doc["leaks"].as_array().unwrap();
    let found = |key: &str, reason: &str| {
        leaks
            .iter()
            .any(|l| l["key"] == key && l["reason"].as_str().unwrap().contains(reason))
    };
    assert!(found(&stuck, "no TTL"), "{doc}");
    assert!(found(&queue, "stale fair-queue entry gone:1:1"), "{doc}");
    assert!(found(&queue, "nodeadline:1:1 has no deadline"), "{doc}");
    assert!(
        !leaks
            .iter()
            .any(|l| l["key"] == format!("{ns}:fence:{{f}}")),
        "{doc}"
    );
    assert!(!leaks.iter().any(|l| l["name"] == "live"), "{doc}");
    assert!(
        found(
            &orphan,
            &format!("held by {}, whose client is gone", dead_owner[0])
        ),
        "{doc}"
    );
    assert_eq!(leaks.len(), 4, "{doc}");

    // The same through the library.
    let report = a.admin().scan_limit(1000).leaks().await.unwrap();
    assert!(report.complete);
    assert!(report
        .leaks
        .iter()
        .any(|l| l.key == stuck && l.reason == LeakReason::NoTtl));
    match report.owner_check {
        // `a` holds `live`: one live owner; the killed child's id has no presence key.
        OwnerCheck::Done { live_clients } => {
            assert_eq!(live_clients, 1);
            assert!(report.leaks.iter().any(|l| matches!(
                &l.reason,
                LeakReason::GoneOwner { owner } if *owner == dead_owner[0]
            )));
        }
        other => panic!("{other:?}"),
    }

    // A RedLock's owner is its set's id, announced by the set's clients while it lives: its
    // hold is not taken for a dead client's.
    let set = lockwise::RedLockSet::new(std::slice::from_ref(&a));
    let rl = set.lock("rl").lock().await.unwrap();
    let report = a.admin().leaks().await.unwrap();
    assert!(
        !report.leaks.iter().any(|l| l.name.as_deref() == Some("rl")),
        "{report:?}"
    );
    rl.unlock().await.unwrap();

    // Without the owner check, the orphaned hold is not reported and the summary says so.
    let unchecked = json(
        &run(server.url(), &ns, &["--json", "leaks", "--no-owner-check"]),
        1,
    );
    assert_eq!(
        unchecked["leaks"].as_array().unwrap().len(),
        3,
        "{unchecked}"
    );
    assert_eq!(
        unchecked["owner_check"],
        serde_json::json!({"check": "skipped", "reason": "not asked for"})
    );

    // The text form: one row per leak, then the summary; exit code 1 for cron.
    let text = run(server.url(), &ns, &["leaks"]);
    assert_eq!(code(&text), 1);
    assert!(stdout(&text).starts_with("KEY"), "{}", stdout(&text));

    let _: () = conn
        .del(&[stuck, queue, deadlines, orphan, format!("{ns}:fence:{{f}}")])
        .await
        .unwrap();
    live.unlock().await.unwrap();
    assert_eq!(code(&run(server.url(), &ns, &["leaks"])), 0);
    clean_after(&conn, &ns).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn force_unlock_wakes_a_waiter_in_another_client() {
    let server = RedisServer::start();
    let conn = server.conn().await;
    let a = fresh_client(&server, "cli_force").await;
    let b = peer(&server, &a).await;
    let ns = a.namespace().to_string();
    let held = a
        .lock("job")
        .lock_with_lease(Duration::from_secs(60))
        .await
        .unwrap();
    let b_lock = b.lock("job");
    let waiter = tokio::spawn(async move {
        let g = b_lock.lock().await.unwrap();
        let owner = g.owner().to_string();
        g.unlock().await.unwrap();
        owner
    });
    assert!(
        suite::numsub_until(
            &conn,
            &format!("{ns}:channel:{{job}}"),
            Duration::from_secs(5),
            |n| n >= 1
        )
        .await
    );

    // stdin is not a terminal and there is no --yes: refused, nothing changed.
    let refused = run(server.url(), &ns, &["force-unlock", "job"]);
    assert_eq!(code(&refused), 3);
    assert!(a.lock("job").is_locked().await.unwrap());

    let out = run_async(
        server.url().to_string(),
        ns.clone(),
        vec!["--json", "force-unlock", "job", "--yes"],
    )
    .await;
    let doc = json(&out, 0);
    assert_eq!(doc["released"], serde_json::json!(["lock"]));
    // The waiter in the other client is woken by the release, long before the 60 s lease.
    let owner = within(5, waiter).await.unwrap();
    assert!(owner.starts_with(&b.id().to_string()));
    assert!(held.unlock().await.unwrap_err().is_not_held());

    // A fair lock with a queued waiter and a RwLock of the same name, through the library.
    let fair = a.fair_lock("q").lock().await.unwrap();
    let fb = b.fair_lock("q");
    let fair_waiter = tokio::spawn(async move { fb.lock().await.unwrap().unlock().await });
    suite::queue_reaches(&a.fair_lock("q"), 1).await;
    let reader = a.rw_lock("q").read().lock().await.unwrap();
    let released = a.admin().force_unlock("q").await.unwrap();
    assert_eq!(released, vec![LockKind::FairLock, LockKind::RwLock]);
    within(5, fair_waiter).await.unwrap().unwrap();
    assert!(fair.unlock().await.unwrap_err().is_not_held());
    assert!(reader.unlock().await.unwrap_err().is_not_held());

    // Nothing held: nothing released, exit 0.
    let none = json(
        &run(server.url(), &ns, &["--json", "force-unlock", "q", "-y"]),
        0,
    );
    assert_eq!(none["released"], serde_json::json!([]));
    clean_after(&conn, &ns).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watch_redraws_a_bounded_number_of_times() {
    let server = RedisServer::start();
    let conn = server.conn().await;
    let a = fresh_client(&server, "cli_watch").await;
    let ns = a.namespace().to_string();
    let g = a.lock("busy").lock().await.unwrap();
    let out = run_async(
        server.url().to_string(),
        ns.clone(),
        vec!["watch", "--iterations", "3", "--interval", "0.1"],
    )
    .await;
    assert_eq!(code(&out), 0);
    // Into a pipe: three tables one after another, no control codes.
    let text = stdout(&out);
    assert!(!text.contains('\x1b'), "{text:?}");
    assert_eq!(text.matches("\nbusy ").count(), 3, "{text:?}");
    // On a terminal: the screen is cleared before each of the three.
    let url = server.url().to_string();
    let ns2 = ns.clone();
    let tty = tokio::task::spawn_blocking(move || {
        run_on_tty(&url, &ns2, "watch --iterations 3 --interval 0.1", "")
    })
    .await
    .unwrap();
    let text = stdout(&tty);
    assert_eq!(text.matches("\x1b[2J\x1b[H").count(), 3, "{text:?}");
    let lines = run(
        server.url(),
        &ns,
        &["--json", "watch", "--iterations", "2", "--interval", "0.1"],
    );
    let docs: Vec<Value> = stdout(&lines)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(docs.len(), 2);
    assert_eq!(docs[1]["locks"][0]["name"], "busy");
    g.unlock().await.unwrap();
    clean_after(&conn, &ns).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_input_is_a_typed_error_with_exit_code_2_and_changes_nothing() {
    // Built before the clock of the key's TTL starts (the first build takes a while).
    let _ = exe();
    let server = RedisServer::start();
    let mut conn = server.conn().await;
    let a = fresh_client(&server, "cli_bad").await;
    let ns = a.namespace().to_string();
    let _: () = conn
        .set_ex(format!("{ns}:lock:{{wrong}}"), "a string", 60)
        .await
        .unwrap();
    let before = suite::keys_with_pttl(&mut conn).await;
    for args in [
        vec!["inspect", ""],
        vec!["force-unlock", "", "--yes"],
        vec!["list", "--limit", "0"],
        vec!["leaks", "--limit", "0"],
        vec!["inspect", "wrong"],
        vec!["force-unlock", "wrong", "--yes"],
        vec!["watch", "--interval", "0"],
        vec!["no-such-command"],
    ] {
        let out = run(server.url(), &ns, &args);
        assert_eq!(code(&out), 2, "{args:?}: {}", stdout(&out));
        assert!(!out.stderr.is_empty(), "{args:?}");
    }
    let wrong = run(server.url(), &ns, &["inspect", "wrong"]);
    assert!(
        String::from_utf8_lossy(&wrong.stderr).contains("WRONGTYPE"),
        "{wrong:?}"
    );
    let bad_ns = run(server.url(), "a{b", &["list"]);
    assert_eq!(code(&bad_ns), 2);
    // Nothing listens there.
    let port = suite::server::free_port();
    let down = run(&format!("redis://127.0.0.1:{port}"), &ns, &["list"]);
    assert_eq!(code(&down), 2);
    let after = suite::keys_with_pttl(&mut conn).await;
    assert_eq!(after.len(), 1);
    assert_eq!(after[0].0, before[0].0);
    assert!(after[0].1 > 50_000, "{after:?}");
    let value: String = conn.get(&after[0].0).await.unwrap();
    assert_eq!(value, "a string");
    assert!(matches!(
        a.admin().scan_limit(0).list().await,
        Err(lockwise::Error::InvalidArgument { .. })
    ));
    assert!(matches!(
        a.admin().inspect("wrong").await,
        Err(lockwise::Error::UnexpectedReply(_))
    ));
    // `list` does not fail on the wrong key: it lists the other locks and names this one.
    let g = a.lock("fine").lock().await.unwrap();
    let listing = a.admin().list().await.unwrap();
    assert_eq!(listing.locks.len(), 1, "{listing:?}");
    assert_eq!(listing.locks[0].name, "fine");
    assert_eq!(listing.unreadable.len(), 1, "{listing:?}");
    assert_eq!(listing.unreadable[0].0, "wrong");
    assert!(listing.unreadable[0].1.contains("WRONGTYPE"), "{listing:?}");
    let out = run(server.url(), &ns, &["list"]);
    assert_eq!(code(&out), 0, "{}", stdout(&out));
    assert!(
        stdout(&out).contains("unreadable: wrong"),
        "{}",
        stdout(&out)
    );
    g.unlock().await.unwrap();
    clean_after(&conn, &ns).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_list_leaks_and_force_unlock_cover_every_master() {
    let cluster = tokio::task::spawn_blocking(|| RedisCluster::start(3, 0))
        .await
        .unwrap();
    let seeds = cluster.seed_urls();
    let ns = suite::unique_ns("cli_cluster");
    let client = Client::cluster_builder(seeds.clone())
        .namespace(ns.clone())
        .build()
        .await
        .unwrap();
    let other = Client::cluster_builder(seeds.clone())
        .namespace(ns.clone())
        .build()
        .await
        .unwrap();
    // Twelve locks: their slots fall on every master.
    let names: Vec<String> = (0..12).map(|i| format!("c{i}")).collect();
    let masters: std::collections::HashSet<u16> = names
        .iter()
        .map(|n| cluster.master_for_slot(cluster.key_slot(&format!("{ns}:lock:{{{n}}}"))))
        .collect();
    assert_eq!(masters.len(), 3);
    let mut guards = Vec::new();
    for n in &names {
        guards.push(client.lock(n).lock().await.unwrap());
    }
    let waited = other.lock("c0");
    let waiter = tokio::spawn(async move { waited.lock().await.unwrap().unlock().await });

    let target: Vec<&str> = seeds
        .iter()
        .flat_map(|s| ["--cluster", s.as_str()])
        .collect();
    let args = |extra: &[&'static str]| {
        let mut v = target.clone();
        v.extend(["--namespace", ns.as_str()]);
        v.extend(extra);
        v.into_iter().map(String::from).collect::<Vec<_>>()
    };
    let run_c = |extra: &[&'static str]| {
        let a = args(extra);
        Command::new(exe())
            .args(&a)
            .stdin(Stdio::null())
            .output()
            .unwrap()
    };
    // The waiter subscribed (sharded pub/sub on Redis 7: SHARDNUMSUB on the slot's master).
    let mut waiting = false;
    for _ in 0..100 {
        let doc = json(&run_c(&["--json", "inspect", "c0"]), 0);
        if doc["locks"][0]["waiters"].as_u64() == Some(1) {
            waiting = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(waiting, "the waiter never showed as subscribed");
    let doc = json(&run_c(&["--json", "list"]), 0);
    assert_eq!(doc["locks"].as_array().unwrap().len(), 12, "{doc}");
    assert_eq!(doc["locks"][0]["name"], "c0", "the contended lock first");
    for (n, g) in names.iter().zip(&guards) {
        assert_eq!(
            owners(lock_named(&doc, n, "lock")),
            vec![g.owner().to_string()]
        );
    }

    // A TTL-less key on some master is found; the holders are alive (their presence keys
    // sit on the masters of their ids' slots), so no hold is reported.
    let mut conn = cluster.client().get_connection().unwrap();
    let stuck = format!("{ns}:lock:{{stuck}}");
    let _: () = redis::cmd("HSET")
        .arg(&stuck)
        .arg("x:1")
        .arg(1)
        .query(&mut conn)
        .unwrap();
    let leaks = json(&run_c(&["--json", "leaks"]), 1);
    assert_eq!(leaks["leaks"].as_array().unwrap().len(), 1, "{leaks}");
    assert_eq!(leaks["leaks"][0]["key"], stuck.as_str());
    assert_eq!(leaks["owner_check"]["check"], "done", "{leaks}");
    let _: () = redis::cmd("DEL").arg(&stuck).query(&mut conn).unwrap();

    let out = json(&run_c(&["--json", "force-unlock", "c0", "--yes"]), 0);
    assert_eq!(out["released"], serde_json::json!(["lock"]));
    within(5, waiter).await.unwrap().unwrap();
    let mut guards = guards.into_iter();
    assert!(guards
        .next()
        .unwrap()
        .unlock()
        .await
        .unwrap_err()
        .is_not_held());
    for g in guards {
        g.unlock().await.unwrap();
    }
    let after = json(&run_c(&["--json", "list"]), 0);
    assert_eq!(after["locks"].as_array().unwrap().len(), 0, "{after}");
    assert_eq!(code(&run_c(&["leaks"])), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sentinel_scans_the_current_master_before_and_after_a_failover() {
    let mut sentinel = tokio::task::block_in_place(RedisSentinel::start);
    let ns = suite::unique_ns("cli_sentinel");
    let client = Client::sentinel_builder(sentinel.sentinel_urls(), sentinel.master_name())
        .namespace(ns.clone())
        .build()
        .await
        .unwrap();
    let held = client.lock("s1").lock().await.unwrap();
    let sentinel_ports = sentinel.sentinel_ports();
    let master_name = sentinel.master_name();
    let run_s = |extra: &[&str]| {
        let mut args: Vec<String> = Vec::new();
        for port in &sentinel_ports {
            args.extend(["--sentinel".to_string(), format!("127.0.0.1:{port}")]);
        }
        args.extend(["--master", master_name, "--namespace", &ns].map(String::from));
        args.extend(extra.iter().map(|s| s.to_string()));
        Command::new(exe())
            .args(&args)
            .stdin(Stdio::null())
            .output()
            .unwrap()
    };
    let doc = json(&run_s(&["--json", "list"]), 0);
    assert_eq!(doc["locks"].as_array().unwrap().len(), 1, "{doc}");
    assert_eq!(owners(&doc["locks"][0]), vec![held.owner().to_string()]);
    let leaks = json(&run_s(&["--json", "leaks"]), 0);
    assert_eq!(leaks["leaks"].as_array().unwrap().len(), 0, "{leaks}");

    // After a failover the CLI scans the new master: a TTL-less key written there is found.
    let old = tokio::task::block_in_place(|| sentinel.kill_master());
    let new = tokio::task::block_in_place(|| sentinel.wait_for_failover(Duration::from_secs(30)));
    assert_ne!(old, new);
    let mut conn = redis::Client::open(format!("redis://127.0.0.1:{new}/"))
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    let stuck = format!("{ns}:lock:{{after}}");
    let _: () = conn.hset(&stuck, "x:1", 1).await.unwrap();
    let leaks = json(&run_s(&["--json", "leaks"]), 1);
    assert!(
        leaks["leaks"]
            .as_array()
            .unwrap()
            .iter()
            .any(|l| l["key"] == stuck.as_str() && l["reason"] == "no TTL"),
        "{leaks}"
    );
    let _: () = conn.del(&stuck).await.unwrap();
    drop(held);
}

/// Runs `lockwise <args>` on a pseudo-terminal (util-linux `script`), typing `answer`.
fn run_on_tty(url: &str, ns: &str, args: &str, answer: &str) -> Output {
    use std::io::Write as _;
    let cmd = format!("{} --url {url} --namespace {ns} {args}", exe().display());
    let mut child = Command::new("script")
        .args(["-qec", &cmd, "/dev/null"])
        .env_remove("REDIS_URL")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("util-linux `script` runs the CLI on a pseudo-terminal (apt-get install bsdutils)");
    child
        .stdin
        .take()
        .unwrap()
        .write_all(answer.as_bytes())
        .unwrap();
    child.wait_with_output().unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn force_unlock_asks_on_a_terminal() {
    let server = RedisServer::start();
    let conn = server.conn().await;
    let a = fresh_client(&server, "cli_tty").await;
    let ns = a.namespace().to_string();
    let held = a
        .lock("job")
        .lock_with_lease(Duration::from_secs(60))
        .await
        .unwrap();
    let (url, ns2) = (server.url().to_string(), ns.clone());
    let no = tokio::task::spawn_blocking(move || run_on_tty(&url, &ns2, "force-unlock job", "n\n"))
        .await
        .unwrap();
    assert_eq!(code(&no), 3, "{}", stdout(&no));
    assert!(
        stdout(&no).contains("Force-unlock \"job\"? "),
        "{}",
        stdout(&no)
    );
    assert!(a.lock("job").is_locked().await.unwrap());
    let (url, ns2) = (server.url().to_string(), ns.clone());
    let yes =
        tokio::task::spawn_blocking(move || run_on_tty(&url, &ns2, "force-unlock job", "y\n"))
            .await
            .unwrap();
    assert_eq!(code(&yes), 0, "{}", stdout(&yes));
    assert!(
        stdout(&yes).contains("job: released (lock)"),
        "{}",
        stdout(&yes)
    );
    assert!(!a.lock("job").is_locked().await.unwrap());
    assert!(held.unlock().await.unwrap_err().is_not_held());
    clean_after(&conn, &ns).await;
}

/// An operator with a read-only Redis user (the README's `ACL SETUSER reader` rule): `list`,
/// `inspect`, `leaks` and `watch` work and report the held lock, `MONITOR` sees nothing but
/// reads from them (no script, no presence key), and `force-unlock` fails with exit code 2,
/// changing nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn read_only_user_reads_everything_and_writes_nothing() {
    let server = RedisServer::start();
    let mut conn = server.conn().await;
    // A long watchdog timeout: its presence refresh (a SET every third of it) stays out of
    // the monitored window, which five CLI runs on a loaded machine stretched past 20 s.
    let a = suite::kit::client_with(&server, "cli_reader", Duration::from_secs(600)).await;
    let ns = a.namespace().to_string();
    let rule = suite::kit::readme_acl_rule("reader", &ns);
    let mut setuser = redis::cmd("ACL");
    setuser.arg("SETUSER").arg("reader").arg(&rule);
    let () = setuser.query_async(&mut conn).await.unwrap();
    let held = a
        .lock("orders")
        .lock_with_lease(Duration::from_secs(60))
        .await
        .unwrap();
    let url = format!("redis://reader:pw@127.0.0.1:{}/", server.port());
    let keys_before = suite::kit::keys_in(&mut conn, &ns).await.len();

    let stop = suite::kit::monitor(&server).await;
    let list = json(
        &run_async(url.clone(), ns.clone(), vec!["--json", "list"]).await,
        0,
    );
    assert_eq!(
        owners(lock_named(&list, "orders", "lock")),
        vec![held.owner().to_string()]
    );
    let inspect = json(
        &run_async(url.clone(), ns.clone(), vec!["--json", "inspect", "orders"]).await,
        0,
    );
    assert_eq!(inspect["name"], "orders");
    let leaks = run_async(url.clone(), ns.clone(), vec!["leaks"]).await;
    assert_eq!(
        code(&leaks),
        0,
        "{}",
        String::from_utf8_lossy(&leaks.stderr)
    );
    let watch = run_async(
        url.clone(),
        ns.clone(),
        vec!["watch", "--iterations", "1", "--interval", "0.1"],
    )
    .await;
    assert!(stdout(&watch).contains("orders"), "{}", stdout(&watch));
    let forced = run_async(url, ns.clone(), vec!["force-unlock", "orders", "--yes"]).await;
    assert_eq!(code(&forced), 2, "force-unlock under a read-only user");
    tokio::time::sleep(Duration::from_millis(200)).await;
    let seen = stop();
    let writes: Vec<&String> = seen
        .iter()
        .filter(|c| !suite::kit::READ_COMMANDS.contains(&c.as_str()))
        .collect();
    // force-unlock's own client asks for its permissions with a probe script, which the
    // server refuses before running it; refused commands do not reach MONITOR.
    assert!(
        writes.is_empty(),
        "not reads: {writes:?} (of {})",
        seen.len()
    );
    assert!(
        seen.iter().any(|c| c == "scan"),
        "MONITOR saw the reads: {seen:?}"
    );
    assert_eq!(suite::kit::keys_in(&mut conn, &ns).await.len(), keys_before);
    assert!(a.lock("orders").is_locked().await.unwrap());
    held.unlock().await.unwrap();
    assert_ns_clean(&mut conn, &ns).await;
}

/// Lock names in CJK and emoji keep the table's columns aligned (by display width), and a
/// reader that goes away (`lockwise list | head -n 1`) ends the CLI quietly with success.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wide_names_align_and_a_closed_pipe_ends_quietly() {
    let server = RedisServer::start();
    let conn = server.conn().await;
    let a = fresh_client(&server, "cli_wide").await;
    let ns = a.namespace().to_string();
    let mut guards = Vec::new();
    for name in ["訂單-1", "🔒stock", "plain"] {
        guards.push(a.lock(name).lock().await.unwrap());
    }
    let out = run_async(server.url().to_string(), ns.clone(), vec!["list"]).await;
    assert_eq!(code(&out), 0);
    let text = stdout(&out);
    // The KIND column starts at the same display column on every row.
    let kind_at = |line: &str| {
        let at = line.find("lock ").or_else(|| line.find("KIND")).unwrap();
        unicode_width::UnicodeWidthStr::width(&line[..at])
    };
    let rows: Vec<&str> = text.lines().take(4).collect();
    let columns: Vec<usize> = rows.iter().map(|l| kind_at(l)).collect();
    assert!(
        columns.windows(2).all(|w| w[0] == w[1]),
        "{columns:?} in\n{text}"
    );

    // `| head -n 1`: the pipe closes after the first line; many locks make the rest large.
    for i in 0..2000 {
        guards.push(
            a.lock(format!("bulk-{i:04}"))
                .lock_with_lease(Duration::from_secs(60))
                .await
                .unwrap(),
        );
    }
    let cmd = format!(
        "{} --url {} --namespace {ns} list | head -n 1; exit ${{PIPESTATUS[0]}}",
        exe().display(),
        server.url()
    );
    let piped = tokio::task::spawn_blocking(move || {
        Command::new("bash")
            .args(["-c", &cmd])
            .env_remove("REDIS_URL")
            .output()
            .unwrap()
    })
    .await
    .unwrap();
    assert_eq!(
        code(&piped),
        0,
        "{}",
        String::from_utf8_lossy(&piped.stderr)
    );
    assert!(
        piped.stderr.is_empty(),
        "{}",
        String::from_utf8_lossy(&piped.stderr)
    );
    for g in guards {
        g.unlock().await.unwrap();
    }
    clean_after(&conn, &ns).await;
}

//! Redis ACL users on a real server: the README's minimal rule works for every lock kind, a
//! missing permission fails the connect with `Error::Permission` naming it, an unlock whose
//! publish is refused still reports the release it did, and a refused `SCRIPT LOAD` costs
//! nothing but the preload.

use std::time::{Duration, Instant};
use suite::OrNone;

use lockwise::{Client, Error, RedLockSet};
use suite::{in_task, Conn, RedisServer};

/// Runs `ACL SETUSER <user> <rules>` as the default user.
async fn set_user(admin: &mut Conn, user: &str, rules: &[&str]) {
    let mut cmd = redis::cmd("ACL");
    cmd.arg("SETUSER").arg(user);
    for r in rules {
        cmd.arg(*r);
    }
    let _: () = cmd.query_async(admin).await.expect("ACL SETUSER");
}

/// A client of `server` logged in as `user` (password `pw`) with namespace `ns`.
async fn connect_as(server: &RedisServer, user: &str, ns: &str) -> lockwise::Result<Client> {
    Client::builder(format!("redis://{user}:pw@127.0.0.1:{}/", server.port()))
        .namespace(ns)
        .watchdog_timeout(Duration::from_secs(5))
        .build()
        .await
}

fn permission_what(e: Error) -> String {
    match e {
        Error::Permission { what, .. } => what,
        other => panic!("expected Error::Permission, got {other:?}"),
    }
}

/// (1) The documented minimal user: every kind locks, waits (woken by pub/sub, well before
/// the holder's lease), unlocks and force-unlocks.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readme_minimal_user_runs_every_kind() {
    suite::init_tracing();
    let server = RedisServer::start();
    let ns = suite::unique_ns("acl-min");
    let mut admin = server.conn().await;
    let rule = suite::kit::readme_acl_rule("locker", &ns);
    let rule: Vec<&str> = rule.iter().map(String::as_str).collect();
    set_user(&mut admin, "locker", &rule).await;
    let a = connect_as(&server, "locker", &ns).await.expect("client a");
    let b = connect_as(&server, "locker", &ns).await.expect("client b");
    // The script cache is empty: every first call goes EVALSHA -> NOSCRIPT -> EVAL.
    let _: () = redis::cmd("SCRIPT")
        .arg("FLUSH")
        .query_async(&mut admin)
        .await
        .unwrap();

    let admin_conn = admin.clone();
    in_task(async move {
        let lease = Duration::from_secs(20);
        // RLock, contended: the waiter is woken by the unlock message, not the lease.
        let held = a.lock("r").lock().await.expect("rlock");
        let waiter = {
            let lock = b.lock("r");
            tokio::spawn(async move {
                let g = lock
                    .try_lock(lease, None)
                    .await
                    .or_none()
                    .expect("rlock wait");
                let at = Instant::now();
                g.expect("acquired").unlock().await.expect("rlock unlock b");
                at
            })
        };
        tokio::time::sleep(Duration::from_millis(200)).await;
        let released = Instant::now();
        held.unlock().await.expect("rlock unlock a");
        let got = waiter.await.unwrap();
        assert!(
            got - released < Duration::from_secs(3),
            "woken by the unlock"
        );

        // SpinLock, contended: the waiter polls (no channel), and gets the lock.
        let held = a.spin_lock("s").lock().await.expect("spin");
        let waiter = {
            let lock = b.spin_lock("s");
            tokio::spawn(async move {
                let g = lock
                    .try_lock(lease, None)
                    .await
                    .or_none()
                    .expect("spin wait");
                g.expect("acquired").unlock().await.expect("spin unlock b");
            })
        };
        tokio::time::sleep(Duration::from_millis(200)).await;
        held.unlock().await.expect("spin unlock a");
        tokio::time::timeout(Duration::from_secs(3), waiter)
            .await
            .expect("spin waiter got the lock")
            .unwrap();

        // FairLock, contended.
        let held = a.fair_lock("f").lock().await.expect("fair");
        let waiter = {
            let lock = b.fair_lock("f");
            tokio::spawn(async move {
                let g = lock
                    .try_lock(lease, None)
                    .await
                    .or_none()
                    .expect("fair wait");
                g.expect("acquired").unlock().await.expect("fair unlock b");
            })
        };
        tokio::time::sleep(Duration::from_millis(200)).await;
        held.unlock().await.expect("fair unlock a");
        tokio::time::timeout(Duration::from_secs(3), waiter)
            .await
            .expect("fair waiter woken")
            .unwrap();

        // FencedLock and a fenced value under the namespace.
        let g = a.fenced_lock("x").lock().await.expect("fenced");
        let value = a.fenced_value(format!("{}:value", a.namespace()));
        value.write(g.token(), "v").await.expect("fenced write");
        g.unlock().await.expect("fenced unlock");

        // MultiLock, lease mode.
        let g = a
            .multi_lock(["m1", "m2"])
            .lock_with_lease(lease)
            .await
            .expect("multi");
        g.unlock().await.expect("multi unlock");

        // RedLock on one node.
        let g = RedLockSet::new(std::slice::from_ref(&a))
            .lock("rl")
            .lock()
            .await
            .expect("redlock");
        g.unlock().await.expect("redlock unlock");

        // A guard detached from its task (lua/rekey.lua).
        let mut g = a.lock("detached").lock().await.expect("lock to detach");
        g.detach().await.expect("detach");
        g.unlock().await.expect("detached unlock");

        // A watchdog hold lives through renewals (lua/renew.lua; watchdog timeout 5 s, so
        // a renewal every 1.7 s): its TTL is raised again, and it is not lost.
        let g = a.lock("renewed").lock().await.expect("watchdog lock");
        tokio::time::sleep(Duration::from_millis(2500)).await;
        let mut conn = admin_conn.clone();
        let pttl = suite::kit::pttl(&mut conn, a.lock("renewed").key()).await;
        assert!(
            pttl > 3000,
            "renewed: PTTL {pttl} ms 2.5 s into a 5 s watchdog hold"
        );
        assert!(!g.is_lost());
        g.unlock().await.expect("renewed unlock");

        // A countdown latch: a waiter in the other client is woken by the broadcast.
        let latch = a.count_down_latch("latch");
        assert!(latch
            .try_set_count(2, Duration::from_secs(30))
            .await
            .expect("set"));
        let waiting = {
            let latch = b.count_down_latch("latch");
            tokio::spawn(async move { latch.wait().await })
        };
        assert_eq!(latch.count_down().await.expect("count down"), 1);
        assert_eq!(latch.count_down().await.expect("count down"), 0);
        tokio::time::timeout(Duration::from_secs(5), waiting)
            .await
            .expect("woken by pub/sub")
            .unwrap()
            .expect("wait");

        // A semaphore: a waiter in the other client is woken by the release's message.
        let sem = a.semaphore("sem");
        assert!(sem.try_set_permits(1).await.expect("set permits"));
        let held = sem.acquire_many(1).await.expect("acquire");
        let waiting = {
            let sem = b.semaphore("sem");
            tokio::spawn(async move { sem.acquire_many(1).await.map(|p| p.forget()) })
        };
        held.release().await.expect("release");
        tokio::time::timeout(Duration::from_secs(5), waiting)
            .await
            .expect("woken by pub/sub")
            .unwrap()
            .expect("acquire in b");
        assert_eq!(sem.add_permits(-1).await.expect("add"), -1);
        assert_eq!(sem.drain_permits().await.expect("drain"), 0);

        // A read-write lock: readers of two clients share it; a writer waiting in `b` is
        // woken by the last read unlock's message, long before the readers' 30 s deadline.
        let r1 = a.rw_lock("rw").read().lock().await.expect("read in a");
        let r2 = b.rw_lock("rw").read().lock().await.expect("read in b");
        let writing = {
            let rw = b.rw_lock("rw");
            tokio::spawn(async move {
                let w = rw.write().lock().await?;
                let r = rw.read().lock().await?; // downgrade: read under the write hold
                w.unlock().await?;
                r.unlock().await
            })
        };
        tokio::time::sleep(Duration::from_millis(200)).await;
        r1.unlock().await.expect("read unlock");
        r2.unlock().await.expect("read unlock in b");
        tokio::time::timeout(Duration::from_secs(5), writing)
            .await
            .expect("woken by pub/sub")
            .unwrap()
            .expect("write, downgrade, unlock");
        assert!(a.rw_lock("rw").force_unlock().await.is_ok());

        // A permit-expirable semaphore: lease update, and a waiter in `b` woken by the
        // release's message.
        let ls = a.lease_semaphore("lsem");
        assert!(ls.try_set_permits(1).await.expect("set permits"));
        let p = ls.acquire(Duration::from_secs(30)).await.expect("lease");
        p.update_lease(Duration::from_secs(30))
            .await
            .expect("update lease");
        let waiting = {
            let ls = b.lease_semaphore("lsem");
            tokio::spawn(async move {
                ls.acquire(Duration::from_secs(30))
                    .await
                    .map(|p| p.into_id())
            })
        };
        tokio::time::sleep(Duration::from_millis(200)).await;
        p.release().await.expect("lease release");
        let id = tokio::time::timeout(Duration::from_secs(5), waiting)
            .await
            .expect("woken by pub/sub")
            .unwrap()
            .expect("lease in b");
        assert_eq!(ls.leased_permits().await.expect("leased"), 1);
        assert!(ls.release(&id).await.expect("release by id"));
        assert_eq!(ls.add_permits(1).await.expect("add"), 2);
        assert_eq!(ls.available_permits().await.expect("available"), 2);

        // force_unlock publishes too.
        let _g = b.lock("gone").lock().await.expect("lock to force");
        assert!(a.lock("gone").force_unlock().await.expect("force_unlock"));
    })
    .await;
}

/// (2) Redis 7 users start without channel rights (`resetchannels`): the connect says so.
#[tokio::test]
async fn user_without_channel_permission_fails_at_connect() {
    let server = RedisServer::start();
    let ns = suite::unique_ns("acl-chan");
    let mut admin = server.conn().await;
    // No ACL commands: the probe PUBLISH finds it.
    set_user(
        &mut admin,
        "nochan",
        &["on", ">pw", "~*", "resetchannels", "+@all", "-acl"],
    )
    .await;
    let e = connect_as(&server, "nochan", &ns).await.unwrap_err();
    assert!(e.is_permission(), "{e}");
    let what = permission_what(e);
    assert!(what.contains(&format!("channels `{ns}:*`")), "{what}");

    // A user that may run ACL DRYRUN is told the same by the dry run.
    set_user(
        &mut admin,
        "nochan2",
        &["on", ">pw", "~*", "&other:*", "+@all"],
    )
    .await;
    let what = permission_what(connect_as(&server, "nochan2", &ns).await.unwrap_err());
    assert!(what.contains(&format!("channels `{ns}:*`")), "{what}");

    // Keys outside the pattern: the key pattern is named.
    for (user, acl) in [("nokeys", "+acl"), ("nokeys2", "-acl")] {
        set_user(
            &mut admin,
            user,
            &["on", ">pw", "~other:*", "&*", "+@all", acl],
        )
        .await;
        let what = permission_what(connect_as(&server, user, &ns).await.unwrap_err());
        assert!(what.contains(&format!("keys `{ns}:*`")), "{user}: {what}");
    }
}

/// (3) A command lockwise needs is missing: the connect names it, whether the user may run
/// ACL DRYRUN (any script command is found) or not (the probe calls find EVALSHA); which
/// commands are needed depends on the key layout.
#[tokio::test]
async fn user_without_a_needed_command_fails_at_connect() {
    let server = RedisServer::start();
    let ns = suite::unique_ns("acl-cmd");
    let mut admin = server.conn().await;
    set_user(
        &mut admin,
        "noevalsha",
        &["on", ">pw", "~*", "&*", "+@all", "-evalsha", "-acl"],
    )
    .await;
    let e = connect_as(&server, "noevalsha", &ns).await.unwrap_err();
    assert_eq!(permission_what(e), "command `evalsha`");

    set_user(
        &mut admin,
        "nohincrby",
        &["on", ">pw", "~*", "&*", "+@all", "-hincrby"],
    )
    .await;
    let e = connect_as(&server, "nohincrby", &ns).await.unwrap_err();
    assert!(e.to_string().contains("hincrby"), "{e}");
    assert_eq!(permission_what(e), "command `hincrby`");

    // A command only Redisson's scripts run: a client of that layout is refused at
    // connect, one of lockwise's own layout (whose scripts never run it) is not.
    set_user(
        &mut admin,
        "nohlen",
        &["on", ">pw", "~*", "&*", "+@all", "-hlen"],
    )
    .await;
    let redisson = Client::builder(format!("redis://nohlen:pw@127.0.0.1:{}/", server.port()))
        .namespace(&ns)
        .key_layout(lockwise::KeyLayout::Redisson)
        .build()
        .await;
    assert_eq!(permission_what(redisson.unwrap_err()), "command `hlen`");
    connect_as(&server, "nohlen", &ns)
        .await
        .expect("lockwise's layout runs no hlen");

    // Without any way to check (no ACL commands) and nothing missing: connects.
    set_user(
        &mut admin,
        "fine",
        &["on", ">pw", "~*", "&*", "+@all", "-acl"],
    )
    .await;
    connect_as(&server, "fine", &ns).await.expect("connects");
}

/// (4) The channel right is revoked while the client holds locks: the unlock script's
/// PUBLISH is refused after its DEL ran, and the unlock still reports the release.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unlock_after_channel_permission_revoked_still_reports_ok() {
    suite::init_tracing();
    let server = RedisServer::start();
    let ns = suite::unique_ns("acl-revoke");
    let mut admin = server.conn().await;
    set_user(&mut admin, "locker", &["on", ">pw", "~*", "&*", "+@all"]).await;
    let client = connect_as(&server, "locker", &ns).await.expect("client");
    in_task(async move {
        let rlock = client.lock("r");
        let fair = client.fair_lock("f");
        let forced = client.lock("forced");
        let g = rlock.lock().await.expect("rlock");
        let gf = fair.lock().await.expect("fair");
        let _held = forced.lock().await.expect("forced");
        set_user(&mut admin, "locker", &["resetchannels"]).await;

        g.unlock().await.expect("unlock reports the release");
        assert!(!suite::exists(&mut admin, rlock.key()).await);
        gf.unlock().await.expect("fair unlock reports the release");
        assert!(!suite::exists(&mut admin, fair.key()).await);
        assert!(forced.force_unlock().await.expect("force_unlock"));
        assert!(!suite::exists(&mut admin, forced.key()).await);
    })
    .await;
}

/// (b) SCRIPT LOAD refused by the ACL: preloading is skipped, scripts run through EVAL.
#[tokio::test]
async fn script_load_refused_by_acl_is_not_fatal() {
    let server = RedisServer::start();
    let ns = suite::unique_ns("acl-load");
    let mut admin = server.conn().await;
    set_user(
        &mut admin,
        "noload",
        &["on", ">pw", "~*", "&*", "+@all", "-script|load"],
    )
    .await;
    let client = connect_as(&server, "noload", &ns).await.expect("connects");
    in_task(async move {
        let g = client.lock("s").lock().await.expect("lock");
        g.unlock().await.expect("unlock");
    })
    .await;
}

/// (b) SCRIPT renamed away: the same.
#[tokio::test]
async fn script_command_renamed_away_is_not_fatal() {
    let server = RedisServer::start_with(&["--rename-command", "SCRIPT", ""]);
    let ns = suite::unique_ns("acl-rename");
    let client = suite::client(&server, &ns, Duration::from_secs(5)).await;
    in_task(async move {
        let g = client.fair_lock("s").lock().await.expect("lock");
        g.unlock().await.expect("unlock");
        let g = client.lock("s").lock().await.expect("lock");
        g.unlock().await.expect("unlock");
    })
    .await;
}

/// (5) A read-only client under the README's read-only user: it connects, `Admin` lists,
/// inspects and checks for leaks of every kind a writer holds, every write is refused with
/// `Error::ReadOnlyClient`, and `MONITOR` sees nothing but reads from it: no script, no
/// presence key, the writer's keys and TTLs as they were.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn read_only_client_under_a_read_only_user_writes_nothing() {
    suite::init_tracing();
    let server = RedisServer::start();
    let ns = suite::unique_ns("acl-ro");
    let mut admin = server.conn().await;
    let rule = suite::kit::readme_acl_rule("reader", &ns);
    let rule: Vec<&str> = rule.iter().map(String::as_str).collect();
    set_user(&mut admin, "reader", &rule).await;

    // A writer (full rights) holds a lock, a fair lock and a semaphore permit on leases, so
    // nothing of its own runs while the reader looks.
    let writer = Client::builder(server.url())
        .namespace(&ns)
        .watchdog_timeout(Duration::from_secs(60))
        .build()
        .await
        .unwrap();
    let lease = Some(Duration::from_secs(60));
    let held = writer
        .lock("a")
        .try_lock(Duration::ZERO, lease)
        .await
        .unwrap();
    let fair = writer
        .fair_lock("f")
        .try_lock(Duration::ZERO, lease)
        .await
        .unwrap();
    let sem = writer.semaphore("s");
    assert!(sem.try_set_permits(2).await.unwrap());
    let permit = sem.acquire().await.unwrap();
    let key_names = |keys: Vec<(String, i64)>| {
        let mut names: Vec<String> = keys.into_iter().map(|(k, _)| k).collect();
        names.sort();
        names
    };
    let keys_before = key_names(suite::kit::keys_in(&mut admin, &ns).await);

    let stop = suite::kit::monitor(&server).await;
    let reader = Client::builder(format!("redis://reader:pw@127.0.0.1:{}/", server.port()))
        .namespace(&ns)
        .read_only(true)
        .build()
        .await
        .expect("a read-only client connects under the read-only user");
    let listing = reader.admin().list().await.unwrap();
    let names: Vec<&str> = listing.locks.iter().map(|l| l.name.as_str()).collect();
    for name in ["a", "f", "s"] {
        assert!(names.contains(&name), "{name} not listed: {names:?}");
    }
    let a = reader.admin().inspect("a").await.unwrap();
    assert_eq!(a[0].holders[0].owner, held.owner());
    reader.admin().leaks().await.unwrap();
    assert_eq!(reader.semaphore("s").available_permits().await.unwrap(), 1);
    assert!(reader.lock("a").is_locked().await.unwrap());

    let refusals: Vec<lockwise::Result<()>> = vec![
        reader
            .lock("a")
            .try_lock(Duration::ZERO, None)
            .await
            .map(drop),
        reader
            .lock("b")
            .lock_with_lease(Duration::from_secs(1))
            .await
            .map(drop),
        reader
            .fenced_lock("c")
            .try_lock(Duration::ZERO, None)
            .await
            .map(drop),
        reader
            .fair_lock("f")
            .try_lock(Duration::ZERO, None)
            .await
            .map(drop),
        reader
            .semaphore("s")
            .try_acquire(Duration::ZERO)
            .await
            .map(drop),
        reader.admin().force_unlock("a").await.map(drop),
        reader.count_down_latch("l").count_down().await.map(drop),
    ];
    for r in refusals {
        let e = r.expect_err("a write through a read-only client");
        assert!(e.is_read_only_client(), "{e:?}");
        assert!(!e.is_retryable());
    }
    let closed = reader.shutdown(Duration::from_secs(5)).await;
    assert_eq!(closed.holds_released, 0);
    tokio::time::sleep(Duration::from_millis(200)).await;
    let seen = stop();
    let writes: Vec<&String> = seen
        .iter()
        .filter(|c| !suite::kit::READ_COMMANDS.contains(&c.as_str()))
        .collect();
    assert!(
        writes.is_empty(),
        "not reads: {writes:?} (of {} commands)",
        seen.len()
    );
    assert!(
        seen.iter().any(|c| c == "hgetall"),
        "MONITOR saw the reads: {seen:?}"
    );
    assert_eq!(
        key_names(suite::kit::keys_in(&mut admin, &ns).await),
        keys_before
    );
    assert!(writer.lock("a").is_locked().await.unwrap());
    held.unlock().await.unwrap();
    fair.unlock().await.unwrap();
    permit.release().await.unwrap();
}

//! Invalid input yields typed errors, never a panic and never a key written; odd but valid
//! input (long names, braces, spaces, non-ASCII, up to 64 KiB) works; connection failures and
//! a wrong password are typed too; a foreign key in the lock's place is a typed error.
//!
//! Stale guards are in tests/locks/stale_guard.rs; Redis going down while a caller waits is in the
//! fault matrix (tests/faults/).

use suite::kit::*;
use suite::OrNone;

use suite::hget;

use suite::{exists, Conn};

use std::time::{Duration, Instant};

use lockwise::{Client, Error};
use suite::RedisServer;

/// 2^53 ms: the largest lease / timeout the contract accepts.
const MAX_MS: u64 = 1 << 53;

fn assert_invalid<T>(result: lockwise::Result<T>, what: &str) {
    match result {
        Err(e @ Error::InvalidArgument { .. }) => {
            let Error::InvalidArgument { argument, reason } = &e else {
                unreachable!()
            };
            assert!(!argument.is_empty(), "{what}: argument is named");
            assert!(!reason.is_empty(), "{what}: reason is given");
            assert!(!e.is_retryable(), "{what}: bad input is not retryable");
            assert!(!e.to_string().is_empty());
        }
        Err(e) => panic!("{what}: expected Error::InvalidArgument, got {e:?}"),
        Ok(_) => panic!("{what}: expected Error::InvalidArgument, got Ok"),
    }
}

async fn assert_nothing_written(conn: &mut Conn) {
    let keys = suite::keys_with_pttl(conn).await;
    assert!(keys.is_empty(), "invalid input wrote keys: {keys:?}");
}

/// The part of a key Redis Cluster hashes for its slot: the first non-empty `{...}` tag
/// (first '{' up to the first '}' after it), else the whole key.
fn hashed_part(key: &str) -> &str {
    if let Some(open) = key.find('{') {
        if let Some(len) = key[open + 1..].find('}') {
            if len > 0 {
                return &key[open + 1..open + 1 + len];
            }
        }
    }
    key
}

/// Valid names that are awkward for key building: ~1 KiB of braces, spaces, tabs, newlines,
/// multi-byte text and emoji, lone braces, NUL, glob characters.
fn odd_names() -> Vec<String> {
    let unit = "{tag} spaced out ключ 🔒 }{ \t\n ü ";
    let mut big = String::new();
    while big.len() < 1024 {
        big.push_str(unit);
    }
    let mut names = vec![big];
    for n in [
        "{",
        "}",
        "}{",
        "}x",
        "{}",
        "{{}}",
        " ",
        "a b c",
        "nul\0byte",
        "ключ",
        "🔒",
        "{user:1}:cart",
        "lock:{a}:{b}",
        ":",
        "*?[]",
    ] {
        names.push(n.to_string());
    }
    names
}

/// A free TCP port with nothing listening on it.
fn unused_port() -> u16 {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    l.local_addr().unwrap().port()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn empty_name_is_invalid_everywhere() {
    let server = RedisServer::start();
    let client = fresh_client(&server, "empty").await;
    let mut conn = server.conn().await;
    let scripts_before = suite::script_calls(&mut conn).await;

    // Creating the handle never fails; every use does.
    let lock = client.lock("");
    let l = lock.clone();
    in_task(async move {
        let s = Duration::from_secs(1);
        assert_invalid(within(5, l.lock()).await, "lock()");
        assert_invalid(within(5, l.lock_with_lease(s)).await, "lock_with_lease()");
        assert_invalid(
            within(5, l.try_lock(Duration::ZERO, None)).await.or_none(),
            "try_lock(0)",
        );
        assert_invalid(
            within(5, l.try_lock(s, Some(s))).await.or_none(),
            "try_lock(1s)",
        );
        assert_invalid(within(5, l.force_unlock()).await, "force_unlock()");
        assert_invalid(within(5, l.is_locked()).await, "is_locked()");
        assert_invalid(
            within(5, l.is_held_by_current_task()).await,
            "is_held_by_current_task()",
        );
        assert_invalid(within(5, l.hold_count()).await, "hold_count()");
        assert_invalid(within(5, l.remaining_ttl()).await, "remaining_ttl()");
    })
    .await;

    // Rejected before reaching the server.
    assert_eq!(suite::script_calls(&mut conn).await, scripts_before);
    assert_nothing_written(&mut conn).await;
    assert_eq!(suite::active_channels(&mut conn).await.len(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn name_longer_than_64_kib_is_invalid() {
    let server = RedisServer::start();
    let client = fresh_client(&server, "long").await;
    let mut conn = server.conn().await;
    let scripts_before = suite::script_calls(&mut conn).await;

    let lock = client.lock("n".repeat(64 * 1024 + 1));
    let l = lock.clone();
    in_task(async move {
        assert_invalid(within(5, l.lock()).await, "lock()");
        assert_invalid(
            within(5, l.lock_with_lease(Duration::from_secs(1))).await,
            "lock_with_lease()",
        );
        assert_invalid(
            within(5, l.try_lock(Duration::ZERO, None)).await.or_none(),
            "try_lock()",
        );
        assert_invalid(within(5, l.force_unlock()).await, "force_unlock()");
        assert_invalid(within(5, l.is_locked()).await, "is_locked()");
    })
    .await;

    // Multi-byte characters count in bytes: 16,385 x 4-byte chars = 65,540 bytes.
    let lock = client.lock("🔒".repeat(16 * 1024 + 1));
    assert_invalid(within(5, lock.lock()).await, "lock() with 64 KiB+ of emoji");

    assert_eq!(suite::script_calls(&mut conn).await, scripts_before);
    assert_nothing_written(&mut conn).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn name_of_exactly_64_kib_is_accepted() {
    let server = RedisServer::start();
    let client = fresh_client(&server, "64k").await;
    let mut conn = server.conn().await;
    let name = "m".repeat(64 * 1024);
    let lock = client.lock(&name);
    assert!(lock.key().contains(&name));
    let (l, c) = (lock.clone(), conn.clone());
    in_task(async move {
        let (l, mut c) = (l, c);
        let g = within(5, l.lock())
            .await
            .expect("64 KiB is the limit, inclusive");
        assert!(exists(&mut c, l.key()).await);
        assert!(l.is_locked().await.unwrap());
        g.unlock().await.unwrap();
        assert!(!exists(&mut c, l.key()).await);
    })
    .await;
    assert_ns_clean(&mut conn, client.namespace()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn odd_but_valid_names_work() {
    let server = RedisServer::start();
    let client = fresh_client(&server, "odd").await;
    let other = peer(&server, &client).await;
    let mut conn = server.conn().await;

    for name in odd_names() {
        let lock = client.lock(&name);
        let other_lock = other.lock(&name);
        assert_eq!(lock.name(), name);
        assert!(
            lock.key().contains(&name),
            "key {:?} does not contain the name {name:?}",
            lock.key()
        );
        assert!(lock.key().starts_with(client.namespace()));
        assert_eq!(other_lock.key(), lock.key(), "same name, same key");

        let (l, ol, c, n) = (lock.clone(), other_lock.clone(), conn.clone(), name.clone());
        in_task(async move {
            let (lock, other_lock, mut conn, name) = (l, ol, c, n);
            let g = within(5, lock.lock())
                .await
                .unwrap_or_else(|e| panic!("{name:?}: {e:?}"));
            assert_eq!(g.name(), name);
            assert_eq!(
                hget::<String>(&mut conn, lock.key(), g.owner())
                    .await
                    .as_deref(),
                Some("1")
            );
            let g2 = lock.lock().await.unwrap();
            assert_eq!(lock.hold_count().await.unwrap(), 2, "{name:?}");
            assert!(lock.remaining_ttl().await.unwrap().is_some());
            assert!(other_lock.is_locked().await.unwrap());
            assert!(
                other_lock
                    .try_lock(Duration::ZERO, None)
                    .await
                    .or_none()
                    .unwrap()
                    .is_none(),
                "{name:?}: another client must be excluded"
            );
            g2.unlock().await.unwrap();
            g.unlock().await.unwrap();
            assert!(
                !exists(&mut conn, lock.key()).await,
                "{name:?}: key left behind"
            );
            assert!(lock.force_unlock().await.is_ok());
        })
        .await;
    }
    assert_ns_clean(&mut conn, client.namespace()).await;
    assert!(suite::keys_with_pttl(&mut conn).await.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn key_and_channel_of_odd_names_share_a_cluster_slot() {
    // DESIGN: "All keys of one lock share one Redis Cluster hash tag". Pure computation on
    // the names the handle reports (no server needed beyond building the client).
    let server = RedisServer::start();
    let client = fresh_client(&server, "slots").await;
    let mut split = Vec::new();
    for name in odd_names() {
        let lock = client.lock(&name);
        if hashed_part(lock.key()) != hashed_part(lock.channel()) {
            split.push((
                name.clone(),
                lock.key().to_string(),
                lock.channel().to_string(),
            ));
        }
    }
    assert!(
        split.is_empty(),
        "names whose key and channel hash to different slots (name, key, channel): {split:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn distinct_names_never_share_a_key() {
    // "names with their own {tag} keep it" must not make two different names collide.
    let server = RedisServer::start();
    let a = fresh_client(&server, "distinct").await;
    let b = peer(&server, &a).await;
    let mut conn = server.conn().await;
    let pairs = [
        ("a", "{a}"),
        ("{a}x", "{a}y"),
        ("x{a}", "{a}x"),
        ("{a}", "{{a}}"),
    ];
    for (n1, n2) in pairs {
        let (l1, l2) = (a.lock(n1), b.lock(n2));
        assert_ne!(l1.key(), l2.key(), "{n1:?} and {n2:?} map to the same key");
        assert_ne!(
            l1.channel(),
            l2.channel(),
            "{n1:?} and {n2:?} share a channel"
        );
        let g = in_task({
            let l1 = l1.clone();
            async move { l1.lock_with_lease(Duration::from_secs(5)).await.unwrap() }
        })
        .await;
        let h = in_task({
            let l2 = l2.clone();
            async move {
                l2.try_lock(Duration::ZERO, Some(Duration::from_secs(5)))
                    .await
                    .or_none()
                    .unwrap()
            }
        })
        .await
        .unwrap_or_else(|| panic!("holding {n1:?} blocked {n2:?}"));
        h.unlock().await.unwrap();
        g.unlock().await.unwrap();
    }
    assert!(suite::keys_with_pttl(&mut conn).await.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn invalid_leases_are_rejected() {
    let server = RedisServer::start();
    let client = fresh_client(&server, "lease").await;
    let mut conn = server.conn().await;
    let scripts_before = suite::script_calls(&mut conn).await;
    let lock = client.lock("lease");

    let bad = [
        ("zero", Duration::ZERO),
        ("500us", Duration::from_micros(500)),
        ("999us", Duration::from_micros(999)),
        ("2^53+1 ms", Duration::from_millis(MAX_MS + 1)),
        ("u64::MAX s", Duration::from_secs(u64::MAX)),
        ("Duration::MAX", Duration::MAX),
    ];
    let l = lock.clone();
    in_task(async move {
        for (what, lease) in bad {
            assert_invalid(
                within(5, l.lock_with_lease(lease)).await,
                &format!("lock_with_lease({what})"),
            );
            assert_invalid(
                within(5, l.try_lock(Duration::ZERO, Some(lease)))
                    .await
                    .or_none(),
                &format!("try_lock(0, Some({what}))"),
            );
            assert_invalid(
                within(5, l.try_lock(Duration::from_secs(1), Some(lease)))
                    .await
                    .or_none(),
                &format!("try_lock(1s, Some({what}))"),
            );
        }
    })
    .await;
    assert_eq!(suite::script_calls(&mut conn).await, scripts_before);
    assert_nothing_written(&mut conn).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn boundary_leases_are_accepted() {
    let server = RedisServer::start();
    let client = fresh_client(&server, "lease-edge").await;
    let mut conn = server.conn().await;
    let lock = client.lock("edge");

    let (l, c) = (lock.clone(), conn.clone());
    in_task(async move {
        let (l, mut c) = (l, c);
        // 2^53 ms: accepted, key gets a (huge) TTL.
        let g = within(5, l.lock_with_lease(Duration::from_millis(MAX_MS)))
            .await
            .expect("2^53 ms lease is within the limit");
        let pttl: i64 = lockwise::redis::cmd("PTTL")
            .arg(l.key())
            .query_async(&mut c)
            .await
            .unwrap();
        assert!(pttl > 1_000_000_000_000, "PTTL {pttl} for a 2^53 ms lease");
        g.unlock().await.unwrap();
        assert!(!exists(&mut c, l.key()).await);

        // 1 ms: accepted; by the time we unlock it may already have expired.
        let g = within(5, l.lock_with_lease(Duration::from_millis(1)))
            .await
            .expect("1 ms lease is within the limit");
        tokio::time::sleep(Duration::from_millis(20)).await;
        assert!(!exists(&mut c, l.key()).await, "1 ms lease expired");
        assert_not_held(g.unlock().await, "edge");
    })
    .await;
    assert!(suite::keys_with_pttl(&mut conn).await.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn huge_wait_does_not_panic() {
    // try_lock's wait is not documented as validated: a huge wait on a free lock must either
    // acquire at once or be rejected as InvalidArgument -- never overflow an Instant and panic.
    let server = RedisServer::start();
    let client = fresh_client(&server, "wait").await;
    let mut conn = server.conn().await;
    let lock = client.lock("wait");
    let l = lock.clone();
    in_task(async move {
        for wait in [Duration::MAX, Duration::from_secs(u64::MAX / 2)] {
            match within(5, l.try_lock(wait, None)).await.or_none() {
                Ok(Some(g)) => g.unlock().await.unwrap(),
                Ok(None) => panic!("free lock not acquired with wait {wait:?}"),
                Err(e @ Error::InvalidArgument { .. }) => drop(e),
                Err(e) => panic!("wait {wait:?}: unexpected {e:?}"),
            }
        }
    })
    .await;
    assert!(suite::keys_with_pttl(&mut conn).await.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn invalid_watchdog_timeout_fails_build() {
    let server = RedisServer::start();
    for (what, d) in [
        ("zero", Duration::ZERO),
        ("500us", Duration::from_micros(500)),
        ("2^53+1 ms", Duration::from_millis(MAX_MS + 1)),
        ("u64::MAX s", Duration::from_secs(u64::MAX)),
    ] {
        let r = within(
            10,
            Client::builder(server.url())
                .namespace(suite::unique_ns("wd"))
                .watchdog_timeout(d)
                .build(),
        )
        .await;
        assert_invalid(r, &format!("watchdog_timeout({what})"));
    }
    let mut conn = server.conn().await;
    assert_nothing_written(&mut conn).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn invalid_response_and_connect_timeouts_fail_build() {
    // The contract rejects any "timeout < 1 ms or > 2^53 ms".
    let server = RedisServer::start();
    for (what, d) in [
        ("zero", Duration::ZERO),
        ("u64::MAX s", Duration::from_secs(u64::MAX)),
    ] {
        let r = within(
            10,
            Client::builder(server.url())
                .namespace(suite::unique_ns("rt"))
                .response_timeout(d)
                .build(),
        )
        .await;
        assert_invalid(r, &format!("response_timeout({what})"));
        let r = within(
            10,
            Client::builder(server.url())
                .namespace(suite::unique_ns("ct"))
                .connect_timeout(d)
                .build(),
        )
        .await;
        assert_invalid(r, &format!("connect_timeout({what})"));
    }
    let mut conn = server.conn().await;
    assert_nothing_written(&mut conn).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn invalid_namespace_fails_build() {
    let server = RedisServer::start();
    for ns in ["", "a{b", "a}b", "{}", "{ns}"] {
        let r = within(10, Client::builder(server.url()).namespace(ns).build()).await;
        assert_invalid(r, &format!("namespace({ns:?})"));
    }
    let mut conn = server.conn().await;
    assert_nothing_written(&mut conn).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn garbage_urls_are_rejected_without_panic() {
    // The contract lists "bad URL" under Error::InvalidArgument: an unparsable URL is bad
    // input, not a Redis failure, so it must not be reported as retryable. The library does
    // return InvalidArgument (not Error::Redis) for all of these, from both entry points.
    for url in [
        "not a url",
        "",
        "http://127.0.0.1:6379/",
        "redis://127.0.0.1:notaport/",
        "redis://",
    ] {
        let r = within(10, Client::builder(url).build()).await;
        assert_invalid(r, &format!("builder({url:?})"));
        let r = within(10, Client::connect(url)).await;
        assert_invalid(r, &format!("connect({url:?})"));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_server_is_a_redis_error_within_the_connect_timeout() {
    let port = unused_port();
    let url = format!("redis://127.0.0.1:{port}/");
    let connect_timeout = Duration::from_secs(1);
    let t = Instant::now();
    let r = within(
        15,
        Client::builder(url.as_str())
            .namespace(suite::unique_ns("down"))
            .connect_timeout(connect_timeout)
            .build(),
    )
    .await;
    let took = t.elapsed();
    match r {
        Err(ref e @ Error::Redis(_)) => {
            assert!(e.is_retryable(), "connection refused is retryable: {e:?}");
            assert!(
                std::error::Error::source(e).is_some(),
                "Error::Redis exposes the RedisError as source()"
            );
            assert!(!e.to_string().is_empty());
        }
        Err(e) => panic!("expected Error::Redis, got {e:?}"),
        Ok(_) => panic!("connected to a port with no server"),
    }
    assert!(
        took < connect_timeout + Duration::from_secs(2),
        "gave up after {took:?} with a {connect_timeout:?} connect timeout"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_foreign_key_of_the_wrong_type_is_a_typed_error() {
    // Someone else's string sits where the lock hash would be: every call fails with a typed
    // error (WRONGTYPE from Redis), promptly, without touching that key.
    let server = RedisServer::start();
    let client = fresh_client(&server, "wrongtype").await;
    let mut conn = server.conn().await;
    let lock = client.lock("taken");
    let () = lockwise::redis::cmd("SET")
        .arg(lock.key())
        .arg("not a hash")
        .arg("PX")
        .arg(60_000)
        .query_async(&mut conn)
        .await
        .unwrap();

    let l = lock.clone();
    in_task(async move {
        for (what, r) in [
            (
                "try_lock(0)",
                within(5, l.try_lock(Duration::ZERO, None))
                    .await
                    .or_none()
                    .map(|g| g.is_some()),
            ),
            (
                "try_lock(300ms)",
                within(5, l.try_lock(Duration::from_millis(300), None))
                    .await
                    .or_none()
                    .map(|g| g.is_some()),
            ),
            ("lock()", within(5, l.lock()).await.map(|_| true)),
            (
                "lock_with_lease()",
                within(5, l.lock_with_lease(Duration::from_secs(1)))
                    .await
                    .map(|_| true),
            ),
        ] {
            match r {
                Err(ref e @ Error::Redis(_)) => {
                    assert!(
                        !e.is_retryable(),
                        "{what}: WRONGTYPE is not retryable: {e:?}"
                    )
                }
                Err(e) => panic!("{what}: expected Error::Redis (WRONGTYPE), got {e:?}"),
                Ok(got) => panic!("{what}: expected an error, got Ok({got})"),
            }
        }
    })
    .await;
    let v: Option<String> = lockwise::redis::cmd("GET")
        .arg(lock.key())
        .query_async(&mut conn)
        .await
        .unwrap();
    assert_eq!(
        v.as_deref(),
        Some("not a hash"),
        "the foreign key is untouched"
    );
    assert_ns_clean(&mut conn, client.namespace()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_foreign_hold_without_ttl_does_not_hang_try_lock() {
    // A lock hash written by someone else without a TTL (pttl -1): a bounded wait still
    // returns Ok(None) on time instead of sleeping "until the TTL runs out".
    let server = RedisServer::start();
    let client = fresh_client(&server, "no-ttl").await;
    let mut conn = server.conn().await;
    let lock = client.lock("stuck");
    let () = lockwise::redis::cmd("HSET")
        .arg(lock.key())
        .arg("someone-else:1")
        .arg(1)
        .query_async(&mut conn)
        .await
        .unwrap();
    let l = lock.clone();
    let (got, took) = in_task(async move {
        let t = Instant::now();
        let got = l
            .try_lock(Duration::from_millis(300), None)
            .await
            .or_none()
            .unwrap();
        (got.is_some(), t.elapsed())
    })
    .await;
    assert!(!got);
    assert!(
        took >= Duration::from_millis(250) && took < Duration::from_secs(2),
        "try_lock(300ms) on a TTL-less foreign hold took {took:?}"
    );
    assert_eq!(
        hlen(&mut conn, lock.key()).await,
        1,
        "foreign hold untouched"
    );
    assert!(lock.force_unlock().await.unwrap());
    assert_ns_clean(&mut conn, client.namespace()).await;
}

// ---------------------------------------------------------------------------------------------
// Rows of the README's "Bad input" table

/// A wrong password (and none at all) is `Error::Redis` carrying the server's AUTH error,
/// not retryable, returned promptly; nothing is written.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wrong_password_is_a_typed_auth_error() {
    let server = RedisServer::start();
    let port = server.port();
    // (The fixture's readiness check pings without a password: set it afterwards.)
    let mut admin = server.conn().await;
    let _: () = redis::cmd("CONFIG")
        .arg("SET")
        .arg("requirepass")
        .arg("s3cret")
        .query_async(&mut admin)
        .await
        .unwrap();
    for (what, url) in [
        ("wrong password", format!("redis://:nope@127.0.0.1:{port}/")),
        ("no password", format!("redis://127.0.0.1:{port}/")),
    ] {
        let t = Instant::now();
        match within(10, Client::connect(&url)).await {
            Err(ref e @ Error::Redis(ref re)) => {
                println!("{what}: {e} (code {:?}) after {:?}", re.code(), t.elapsed());
                assert!(
                    matches!(re.code(), Some("WRONGPASS" | "NOAUTH")),
                    "{what}: expected the AUTH error, got {re:?}"
                );
                assert!(
                    !e.is_retryable(),
                    "{what}: a wrong password is not retryable"
                );
            }
            Err(e) => panic!("{what}: expected Error::Redis, got {e:?}"),
            Ok(_) => panic!("{what}: connected"),
        }
    }
    // The right password works, and nothing was written before.
    let c = within(
        10,
        Client::connect(&format!("redis://:s3cret@127.0.0.1:{port}/")),
    )
    .await
    .expect("right password");
    let mut conn = redis::Client::open(format!("redis://:s3cret@127.0.0.1:{port}/"))
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    assert!(suite::keys_with_pttl(&mut conn).await.is_empty());
    let g = c.lock("pw").lock().await.expect("lock");
    g.unlock().await.expect("unlock");
}

/// A 1 MiB name is rejected before anything is sent (names are limited to 64 KiB).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_mib_name_is_invalid() {
    let server = RedisServer::start();
    let c = Client::builder(server.url())
        .namespace(suite::unique_ns("mib"))
        .build()
        .await
        .unwrap();
    let mut conn = server.conn().await;
    let before = suite::script_calls(&mut conn).await;
    let name = "x".repeat(1 << 20);
    let l = c.lock(&name);
    let r = tokio::spawn(async move { l.try_lock(Duration::ZERO, None).await.or_none().map(drop) })
        .await
        .unwrap();
    match r {
        Err(ref e @ Error::InvalidArgument { argument, .. }) => {
            assert_eq!(argument, "name");
            assert!(e.to_string().len() < 1000, "message repeats the 1 MiB name");
        }
        other => panic!("expected InvalidArgument, got {other:?}"),
    }
    assert!(matches!(
        c.fair_lock(&name).lock().await,
        Err(Error::InvalidArgument { .. })
    ));
    assert_eq!(suite::script_calls(&mut conn).await, before);
    assert!(suite::keys_with_pttl(&mut conn).await.is_empty());
}

/// force_unlock of a lock nobody holds is Ok(false), writes nothing, publishes nothing a
/// waiter would act on wrongly.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn force_unlock_of_a_missing_lock_is_false() {
    let server = RedisServer::start();
    let c = Client::builder(server.url())
        .namespace(suite::unique_ns("force"))
        .build()
        .await
        .unwrap();
    let mut conn = server.conn().await;
    assert!(!c.lock("nobody").force_unlock().await.unwrap());
    assert!(!c.fair_lock("nobody").force_unlock().await.unwrap());
    assert!(!c.fenced_lock("nobody").force_unlock().await.unwrap());
    assert!(suite::keys_with_pttl(&mut conn).await.is_empty());
}

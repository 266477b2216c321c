//! Rows of the README's "Bad input" table not covered by tests/bad_input.rs: a wrong password,
//! Redis going down while a caller waits, a 1 MiB name, force-unlocking a lock nobody holds.
mod support;

use std::time::{Duration, Instant};

use lockwise::{Client, Error};
use support::RedisServer;

async fn within<F: std::future::Future>(secs: u64, fut: F) -> F::Output {
    tokio::time::timeout(Duration::from_secs(secs), fut)
        .await
        .unwrap_or_else(|_| panic!("call did not return within {secs} s"))
}

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
    assert!(support::keys_with_pttl(&mut conn).await.is_empty());
    let g = c.lock("pw").lock().await.expect("lock");
    g.unlock().await.expect("unlock");
}

/// Redis killed (not restarted) while a lock() waits behind a holder: the waiter does not
/// hang until the holder's 30 s TTL; it returns a typed, retryable `Error::Redis` once the
/// connection manager gives up reconnecting (6 retries, about 15 s). The holder's unlock is a typed error too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_down_while_waiting_is_a_retryable_error() {
    let mut server = RedisServer::start();
    let ns = support::unique_ns("down-wait");
    let build = || {
        Client::builder(server.url())
            .namespace(ns.as_str())
            .connect_timeout(Duration::from_secs(1))
            .build()
    };
    let (a, b) = (build().await.unwrap(), build().await.unwrap());
    let conn = server.conn().await;
    let holder = tokio::spawn({
        let a = a.clone();
        async move { a.lock("down").lock().await.expect("holder") }
    })
    .await
    .unwrap();
    let channel = b.lock("down").channel().to_string();
    let waiter = tokio::spawn(async move {
        let t = Instant::now();
        (b.lock("down").lock().await, t)
    });
    assert!(
        support::eventually(Duration::from_secs(3), || {
            let mut c = conn.clone();
            let ch = channel.clone();
            async move { support::numsub(&mut c, &ch).await >= 1 }
        })
        .await,
        "waiter never subscribed"
    );
    let t0 = Instant::now();
    server.kill();
    let (r, _) = tokio::time::timeout(Duration::from_secs(25), waiter)
        .await
        .expect("waiter still blocked 25 s after Redis went down (TTL 30 s)")
        .unwrap();
    let took = t0.elapsed();
    match r {
        Err(ref e @ Error::Redis(_)) => {
            assert!(e.is_retryable(), "{e:?}");
            println!("waiter failed {took:?} after Redis went down: {e}");
        }
        other => panic!("expected Err(Error::Redis), got {other:?}"),
    }
    match within(20, holder.unlock()).await {
        Err(Error::Redis(_)) => {}
        other => panic!("holder unlock with Redis down: {other:?}"),
    }
}

/// A 1 MiB name is rejected before anything is sent (names are limited to 64 KiB).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_mib_name_is_invalid() {
    let server = RedisServer::start();
    let c = Client::builder(server.url())
        .namespace(support::unique_ns("mib"))
        .build()
        .await
        .unwrap();
    let mut conn = server.conn().await;
    let before = support::script_calls(&mut conn).await;
    let name = "x".repeat(1 << 20);
    let l = c.lock(&name);
    let r = tokio::spawn(async move { l.try_lock(Duration::ZERO, None).await.map(drop) })
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
    assert_eq!(support::script_calls(&mut conn).await, before);
    assert!(support::keys_with_pttl(&mut conn).await.is_empty());
}

/// force_unlock of a lock nobody holds is Ok(false), writes nothing, publishes nothing a
/// waiter would act on wrongly.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn force_unlock_of_a_missing_lock_is_false() {
    let server = RedisServer::start();
    let c = Client::builder(server.url())
        .namespace(support::unique_ns("force"))
        .build()
        .await
        .unwrap();
    let mut conn = server.conn().await;
    assert!(!c.lock("nobody").force_unlock().await.unwrap());
    assert!(!c.fair_lock("nobody").force_unlock().await.unwrap());
    assert!(!c.fenced_lock("nobody").force_unlock().await.unwrap());
    assert!(support::keys_with_pttl(&mut conn).await.is_empty());
}

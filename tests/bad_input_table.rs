//! Rows of the README's "Bad input" table not covered by tests/bad_input.rs: a wrong password,
//! a 1 MiB name, force-unlocking a lock nobody holds. Redis going down while a caller waits is
//! in the fault matrix (tests/faults.rs).
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

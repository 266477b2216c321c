//! Clients built from a redis-rs `ConnectionInfo` or `redis::Client` instead of a URL: the
//! password and database set in code are the ones used.

use std::time::Duration;
use suite::OrNone;

use lockwise::redis::{self, IntoConnectionInfo, RedisConnectionInfo};
use lockwise::{Client, Error};
use suite::RedisServer;

const PASSWORD: &str = "s3cret pass/with:url@chars";

fn info(server: &RedisServer, password: &str, db: i64) -> redis::ConnectionInfo {
    format!("redis://127.0.0.1:{}", server.port())
        .into_connection_info()
        .unwrap()
        .set_redis_settings(
            RedisConnectionInfo::default()
                .set_password(password)
                .set_db(db),
        )
}

/// A server that requires `PASSWORD`. (Set after the start: the fixture's readiness PING
/// has no password.)
async fn server_with_password() -> RedisServer {
    let server = RedisServer::start();
    let _: () = redis::cmd("CONFIG")
        .arg("SET")
        .arg("requirepass")
        .arg(PASSWORD)
        .query_async(&mut server.conn().await)
        .await
        .unwrap();
    server
}

/// A connection of the test's own to `db`, with the password.
async fn admin(server: &RedisServer, db: i64) -> redis::aio::MultiplexedConnection {
    redis::Client::open(info(server, PASSWORD, db))
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap()
}

#[tokio::test]
async fn builder_from_info_uses_its_password_and_db() {
    let server = server_with_password().await;
    let ns = suite::unique_ns("from-info");
    let client = Client::builder_from_info(info(&server, PASSWORD, 3))
        .namespace(&ns)
        .build()
        .await
        .expect("connect with the password set in code");
    let lock = client.lock("job");
    let guard = lock.lock().await.unwrap();
    let key = format!("{ns}:lock:{{job}}");
    assert!(suite::exists(&mut admin(&server, 3).await, &key).await);
    assert!(!suite::exists(&mut admin(&server, 0).await, &key).await);

    // Waiters still wake by pub/sub (channels are not per database).
    let waiter = {
        let lock = client.lock("job").non_reentrant();
        tokio::spawn(async move { lock.try_lock(Duration::from_secs(10), None).await.or_none() })
    };
    tokio::time::sleep(Duration::from_millis(100)).await;
    let released = std::time::Instant::now();
    guard.unlock().await.unwrap();
    let got = waiter.await.unwrap().unwrap().expect("waiter acquired");
    assert!(released.elapsed() < Duration::from_secs(3));
    got.unlock().await.unwrap();
}

#[tokio::test]
async fn builder_from_a_redis_client() {
    let server = server_with_password().await;
    let ns = suite::unique_ns("from-client");
    let redis_client = redis::Client::open(info(&server, PASSWORD, 5)).unwrap();
    let client = Client::builder_from(&redis_client)
        .namespace(&ns)
        .build()
        .await
        .unwrap();
    let guard = client.lock("job").lock().await.unwrap();
    assert!(suite::exists(&mut admin(&server, 5).await, &format!("{ns}:lock:{{job}}")).await);
    guard.unlock().await.unwrap();
}

#[tokio::test]
async fn builder_from_info_with_a_wrong_password_fails_cleanly() {
    let server = server_with_password().await;
    let err = Client::builder_from_info(info(&server, "wrong", 0))
        .build()
        .await
        .unwrap_err();
    assert!(matches!(err, Error::Redis(_)), "{err:?}");
}

/// Without a TLS feature, `rediss://` is a typed error at build, before any connection.
#[cfg(not(any(feature = "tls-rustls", feature = "tls-native-tls")))]
#[tokio::test]
async fn rediss_without_a_tls_feature_is_invalid_argument() {
    let err = Client::builder("rediss://127.0.0.1:1/")
        .build()
        .await
        .unwrap_err();
    assert!(
        matches!(
            err,
            Error::InvalidArgument {
                argument: "url",
                ..
            }
        ),
        "{err:?}"
    );
}

//! What Redisson's format has no place for is refused with [`lockwise::Error::Unsupported`]
//! (or a name it would split across slots with `InvalidArgument`), before anything is sent:
//! nothing is ever written in lockwise's own format instead.

use std::time::Duration;

use lockwise::{Client, Error, KeyLayout};
use suite::RedisServer;

use super::client;

/// The keys Redis holds, lockwise's presence keys aside.
async fn lock_keys(conn: &mut suite::Conn) -> Vec<String> {
    suite::keys_with_pttl(conn)
        .await
        .into_iter()
        .map(|(k, _)| k)
        .collect()
}

fn unsupported<T>(what: &str, r: lockwise::Result<T>) {
    match r {
        Err(Error::Unsupported {
            what: w,
            layout: KeyLayout::Redisson,
        }) => assert_eq!(w, what),
        Err(e) => panic!("{what}: expected Unsupported, got {e}"),
        Ok(_) => panic!("{what}: expected Unsupported, got Ok"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kinds_without_a_counterpart_are_refused_and_write_nothing() {
    let server = RedisServer::start();
    let mut conn = server.conn().await;
    let _c = client(&server, Duration::from_secs(30)).await;
    // Every kind has a counterpart today: the error as the next one without would get it.
    let e = Error::Unsupported {
        what: "overtake_limit",
        layout: KeyLayout::Redisson,
    };
    assert!(e.is_unsupported() && !e.is_retryable());
    assert!(e.to_string().contains("overtake_limit"), "{e}");
    assert!(lock_keys(&mut conn).await.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_overtake_limit_is_refused_at_build() {
    let server = RedisServer::start();
    let built = Client::builder(server.url())
        .key_layout(KeyLayout::Redisson)
        .overtake_limit(Some(Duration::from_millis(200)))
        .build()
        .await;
    unsupported("overtake_limit", built);
    // Turning it off is what the layout does anyway.
    Client::builder(server.url())
        .key_layout(KeyLayout::Redisson)
        .overtake_limit(None)
        .build()
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn names_redisson_would_split_across_slots_are_refused() {
    let server = RedisServer::start();
    let mut conn = server.conn().await;
    let c = client(&server, Duration::from_secs(30)).await;
    for name in ["a{b", "x}y", "{}z"] {
        match c.lock(name).try_lock(Duration::ZERO, None).await {
            Err(Error::InvalidArgument { argument, reason }) => {
                assert_eq!(argument, "name");
                assert!(reason.contains("Cluster slots"), "{reason}");
            }
            other => panic!("{name}: expected InvalidArgument, got {other:?}"),
        }
        assert!(c.fenced_lock(name).lock().await.is_err());
    }
    assert!(lock_keys(&mut conn).await.is_empty());
}

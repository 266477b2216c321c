//! Review tests for RedLock against three real, independent redis-servers.
mod support;

use std::future::Future;
use std::time::Duration;

use relock::{Client, RedLockOptions, RedLockSet};
use support::RedisServer;

type Conn = redis::aio::MultiplexedConnection;

const NODE_TIMEOUT: Duration = Duration::from_millis(400);

async fn in_task<F>(body: F)
where
    F: Future<Output = ()> + Send + 'static,
{
    if let Err(e) = tokio::spawn(body).await {
        if e.is_panic() {
            std::panic::resume_unwind(e.into_panic());
        }
        panic!("test task failed: {e}");
    }
}

fn servers(n: usize) -> Vec<RedisServer> {
    (0..n).map(|_| RedisServer::start()).collect()
}

async fn clients(servers: &[RedisServer], ns: &str) -> Vec<Client> {
    let mut out = Vec::new();
    for s in servers {
        out.push(
            Client::builder(s.url())
                .namespace(ns)
                .connect_timeout(Duration::from_secs(1))
                .build()
                .await
                .expect("build client"),
        );
    }
    out
}

fn options(ttl: Duration) -> RedLockOptions {
    RedLockOptions::default()
        .ttl(ttl)
        .node_timeout(NODE_TIMEOUT)
        .retry_delay(Duration::from_millis(60))
}

async fn conns(servers: &[RedisServer]) -> Vec<Conn> {
    let mut out = Vec::new();
    for s in servers {
        out.push(s.conn().await);
    }
    out
}

/// Unlocks racing the extension task (TTL 150 ms: an extension every 50 ms): an extension in
/// flight when the guard is released must never revive or keep the released lock; every
/// node is free right after each unlock and stays free.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unlock_racing_extensions_never_leaves_a_hold() {
    let servers = servers(3);
    let ns = support::unique_ns("review-redlock-extend-race");
    let set = RedLockSet::with_options(
        &clients(&servers, &ns).await,
        options(Duration::from_millis(150)),
    );
    let mut conns = conns(&servers).await;
    in_task(async move {
        let lock = set.lock("race");
        let key = lock.key(0).unwrap().to_string();
        for i in 0..25u64 {
            let g = lock.lock().await.unwrap();
            // Land the unlock at varying points of the 50 ms extension period.
            tokio::time::sleep(Duration::from_millis(40 + (i * 7) % 30)).await;
            assert!(!g.is_lost(), "round {i}: extended hold reported lost");
            g.unlock().await.unwrap();
            tokio::time::sleep(Duration::from_millis(60)).await;
            for (n, c) in conns.iter_mut().enumerate() {
                let exists: i64 = redis::cmd("EXISTS").arg(&key).query_async(c).await.unwrap();
                assert_eq!(exists, 0, "round {i}: node {n} still holds after unlock");
            }
        }
    })
    .await;
}

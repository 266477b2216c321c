//! Fencing with a real database: the resource is a PostgreSQL table (a throwaway server,
//! `lockwise_testkit::PostgresServer`) whose writes carry the `FencedLock` token and are
//! refused when a larger token wrote first (`suite::stock`). A holder paused past its lease
//! loses its late write, its successor's write lands; purchases from two processes under
//! the lock lose no update.

use std::time::Duration;

use lockwise::Client;
use suite::child::ChildProc;
use suite::kit::client_with;
use suite::{stock, PostgresServer, RedisServer};

/// A holder whose lease runs out while it is paused (here: it sleeps past the lease, as a
/// GC pause or a stopped process would) reads the stock, and meanwhile another client takes
/// the lock and writes with its larger token. The paused holder's write with its old token
/// is refused by the table; the stock is what the successor wrote; the late holder's
/// unlock reports `NotHeld`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_holders_late_write_is_rejected_by_the_database() {
    let pg = tokio::task::spawn_blocking(PostgresServer::start)
        .await
        .unwrap();
    let server = RedisServer::start();
    let db = stock::connect(&pg.url()).await;
    stock::create(&db, "sku-2", 10).await;
    let a = client_with(&server, "pg_fence", Duration::from_secs(5)).await;
    let b = Client::builder(server.url())
        .namespace(a.namespace())
        .build()
        .await
        .unwrap();

    let lease = Duration::from_millis(500);
    let late = a
        .fenced_lock("stock:sku-2")
        .lock_with_lease(lease)
        .await
        .unwrap();
    let (seen, _) = stock::read(&db, "sku-2").await;
    assert_eq!(seen, 10);
    // Paused past the lease: B gets the lock once A's key expired.
    let next = b
        .fenced_lock("stock:sku-2")
        .try_lock(Duration::from_secs(5), None)
        .await
        .expect("the successor gets the lock after the lease");
    assert!(next.token() > late.token());
    assert!(
        stock::write(&db, "sku-2", 7, next.token()).await,
        "successor's write"
    );
    tokio::time::sleep(lease).await;
    // A resumes and writes what it computed before the pause, with its old token.
    assert!(
        !stock::write(&db, "sku-2", seen - 1, late.token()).await,
        "the table must refuse the late write"
    );
    assert_eq!(stock::read(&db, "sku-2").await, (7, next.token() as i64));
    assert!(late.unlock().await.unwrap_err().is_not_held());
    next.unlock().await.unwrap();
}

/// 100 purchases from two processes (50 concurrent tasks each, `pg-buyer` children), each a
/// read-modify-write of one stock row under the fenced lock, written with its token: every
/// write lands, the stock falls by exactly 100 (no lost update), the tokens are distinct,
/// and the row's token is the largest of them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn purchases_from_two_processes_lose_no_update() {
    let pg = tokio::task::spawn_blocking(PostgresServer::start)
        .await
        .unwrap();
    let server = RedisServer::start();
    let db = stock::connect(&pg.url()).await;
    stock::create(&db, "sku-1", 1000).await;
    let ns = suite::unique_ns("pg_buyers");
    let buyers: Vec<ChildProc> = ["p0", "p1"]
        .iter()
        .map(|label| {
            ChildProc::spawn(
                "pg-buyer",
                server.url(),
                &ns,
                label,
                &[
                    ("LOCKWISE_FP_PG", pg.url()),
                    ("LOCKWISE_FP_PURCHASES", "50".to_string()),
                ],
            )
        })
        .collect();
    let mut sold = Vec::new();
    for b in buyers {
        let out = b.finish(Duration::from_secs(120)).await;
        assert!(out.contains("@done"), "{out}");
        for line in out.lines().filter(|l| l.starts_with("@sold ")) {
            let f: Vec<&str> = line.split(' ').collect();
            let token: u64 = f[2].parse().unwrap();
            assert_eq!(f[3], "true", "a write under the lock was refused: {line}");
            sold.push(token);
        }
    }
    assert_eq!(sold.len(), 100);
    let (qty, fence) = stock::read(&db, "sku-1").await;
    assert_eq!(
        qty,
        900,
        "lost updates: {} items sold, stock fell by {}",
        sold.len(),
        1000 - qty
    );
    let highest = *sold.iter().max().unwrap();
    sold.sort_unstable();
    sold.dedup();
    assert_eq!(sold.len(), 100, "two purchases shared a token");
    assert_eq!(fence, highest as i64);
    let probe = Client::builder(server.url())
        .namespace(&ns)
        .build()
        .await
        .unwrap();
    assert!(!probe.fenced_lock("stock:sku-1").is_locked().await.unwrap());
}

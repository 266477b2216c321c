//! Fencing with a real database: the lock's token goes into the row, and PostgreSQL refuses
//! a write whose token is older than the row's. The standard shape for money and stock.
//!
//! Client 1 takes the fenced lock of `stock:sku-1` with a short lease, reads the stock and
//! stalls (think GC pause) past the lease. Client 2 takes the lock with a larger token, sells
//! an item and writes. Client 1 wakes, still believes it holds the lock and writes what it
//! computed before the pause: the `UPDATE ... WHERE fence <= $token` matches no row.
//!
//! ```text
//! cargo run --example fencing_postgres                # throwaway redis-server and PostgreSQL
//! REDIS_URL=redis://127.0.0.1:6379/ PG_URL='host=127.0.0.1 user=postgres' \
//!     cargo run --example fencing_postgres            # existing servers
//! ```
//!
//! A throwaway PostgreSQL needs Debian's `postgresql` package (`apt-get install postgresql`).
//! Exits non-zero if the late write landed.

use std::process::ExitCode;
use std::time::Duration;

use lockwise::Client;
use lockwise_testkit::{url_or_start, PostgresServer};
use tokio_postgres::NoTls;

type BoxError = Box<dyn std::error::Error + Send + Sync>;

const LEASE: Duration = Duration::from_millis(300);
const PAUSE: Duration = Duration::from_millis(800);

#[tokio::main]
async fn main() -> ExitCode {
    match run().await {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::FAILURE,
        Err(e) => {
            eprintln!("fencing_postgres: error: {e}");
            ExitCode::FAILURE
        }
    }
}

/// Writes `qty` with fencing `token`: lands only if no larger token wrote the row before.
async fn write(db: &tokio_postgres::Client, qty: i32, token: u64) -> Result<bool, BoxError> {
    let rows = db
        .execute(
            "UPDATE stock SET qty = $1, fence = $2 WHERE sku = 'sku-1' AND fence <= $2",
            &[&qty, &i64::try_from(token)?],
        )
        .await?;
    Ok(rows == 1)
}

async fn run() -> Result<bool, BoxError> {
    let (redis_url, _redis) = url_or_start(&[])?;
    let (pg_url, _pg) = match std::env::var("PG_URL") {
        Ok(url) if !url.is_empty() => (url, None),
        _ => {
            let pg = tokio::task::spawn_blocking(PostgresServer::try_start).await??;
            (pg.url(), Some(pg))
        }
    };
    let (db, connection) = tokio_postgres::connect(&pg_url, NoTls).await?;
    tokio::spawn(connection);
    db.batch_execute(
        "CREATE TABLE IF NOT EXISTS stock (sku text PRIMARY KEY, qty integer NOT NULL,
                                           fence bigint NOT NULL DEFAULT 0);
         INSERT INTO stock VALUES ('sku-1', 10, 0)
             ON CONFLICT (sku) DO UPDATE SET qty = 10, fence = 0;",
    )
    .await?;

    let client1 = Client::connect(&redis_url).await?;
    let client2 = Client::connect(&redis_url).await?;
    let lock1 = client1.fenced_lock("stock:sku-1");
    let lock2 = client2.fenced_lock("stock:sku-1");

    let g1 = lock1.lock_with_lease(LEASE).await?;
    let qty: i32 = db
        .query_one("SELECT qty FROM stock WHERE sku = 'sku-1'", &[])
        .await?
        .get(0);
    println!(
        "client 1: holds the lock with token {}, reads stock {qty}",
        g1.token()
    );
    println!("client 1: pauses for {PAUSE:?} (its lease is {LEASE:?})");
    let pause = tokio::time::sleep(PAUSE);

    let g2 = lock2.try_lock(Duration::from_secs(5), None).await?;
    let now: i32 = db
        .query_one("SELECT qty FROM stock WHERE sku = 'sku-1'", &[])
        .await?
        .get(0);
    let landed2 = write(&db, now - 1, g2.token()).await?;
    println!(
        "client 2: took the lock with token {}, sold one: stock {} (write landed: {landed2})",
        g2.token(),
        now - 1
    );
    g2.unlock().await?;

    pause.await;
    let landed1 = write(&db, qty - 1, g1.token()).await?;
    println!(
        "client 1: wakes, writes stock {} with token {}: {}",
        qty - 1,
        g1.token(),
        if landed1 {
            "ACCEPTED (lost update!)"
        } else {
            "refused by the database"
        }
    );
    let unlocked = g1.unlock().await;
    println!("client 1: unlock says {unlocked:?}");
    let (final_qty, fence): (i32, i64) = {
        let row = db
            .query_one("SELECT qty, fence FROM stock WHERE sku = 'sku-1'", &[])
            .await?;
        (row.get(0), row.get(1))
    };
    println!("stock: {final_qty} (written with token {fence})");
    Ok(landed2 && !landed1 && final_qty == 9)
}

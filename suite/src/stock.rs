//! The stock table of the PostgreSQL fencing tests: one row per SKU with its quantity and
//! the largest fencing token that wrote it. A write carries the writer's token and lands only
//! if no larger token wrote before it: the check a database makes so that a lock holder that
//! was paused past its lease cannot overwrite its successor's work.

use tokio_postgres::{Client, NoTls};

/// Connects to `url` (a libpq connection string) and drives the connection in a task.
pub async fn connect(url: &str) -> Client {
    let (client, connection) = tokio_postgres::connect(url, NoTls)
        .await
        .expect("connect to PostgreSQL");
    tokio::spawn(async move {
        if let Err(e) = connection.await {
            eprintln!("postgres connection: {e}");
        }
    });
    client
}

/// Creates the table (if missing) and the row of `sku` with `qty` items, no token yet.
pub async fn create(db: &Client, sku: &str, qty: i32) {
    db.batch_execute(
        "CREATE TABLE IF NOT EXISTS stock (
             sku text PRIMARY KEY,
             qty integer NOT NULL,
             fence bigint NOT NULL DEFAULT 0)",
    )
    .await
    .expect("create the stock table");
    db.execute(
        "INSERT INTO stock (sku, qty) VALUES ($1, $2)
         ON CONFLICT (sku) DO UPDATE SET qty = EXCLUDED.qty, fence = 0",
        &[&sku, &qty],
    )
    .await
    .expect("stock row");
}

/// The quantity of `sku` and the largest token that wrote it.
pub async fn read(db: &Client, sku: &str) -> (i32, i64) {
    let row = db
        .query_one("SELECT qty, fence FROM stock WHERE sku = $1", &[&sku])
        .await
        .expect("read the stock");
    (row.get(0), row.get(1))
}

/// Writes `qty` for `sku` with fencing `token`: `true` if the write landed, `false` if the
/// table refused it because a write with a larger token came first.
pub async fn write(db: &Client, sku: &str, qty: i32, token: u64) -> bool {
    let token = i64::try_from(token).expect("tokens fit a bigint");
    let rows = db
        .execute(
            "UPDATE stock SET qty = $1, fence = $2 WHERE sku = $3 AND fence <= $2",
            &[&qty, &token, &sku],
        )
        .await
        .expect("write the stock");
    rows == 1
}

//! The `pg-buyer` role: `LOCKWISE_FP_PURCHASES` concurrent purchases of one item each from
//! the PostgreSQL stock table (`LOCKWISE_FP_PG`), each under the fenced lock `stock:sku-1`:
//! read the quantity, work 1-3 ms, write it back minus one with the lock's token. Prints
//! `@sold <label>/<i> <token> <landed>` per purchase, then `@done`.

use std::time::Duration;

use suite::stock;

use super::{client, emit, env};

/// The SKU every buyer buys.
const SKU: &str = "sku-1";

pub(super) async fn buyer(url: String, ns: String, label: String) {
    let db = std::sync::Arc::new(stock::connect(&env("LOCKWISE_FP_PG")).await);
    let purchases: usize = env("LOCKWISE_FP_PURCHASES").parse().unwrap();
    let c = client(&url, &ns).await;
    let tasks: Vec<_> = (0..purchases)
        .map(|i| {
            let (lock, db, label) = (c.fenced_lock("stock:sku-1"), db.clone(), label.clone());
            tokio::spawn(async move {
                let guard = lock.lock().await.expect("lock");
                let (qty, _) = stock::read(&db, SKU).await;
                tokio::time::sleep(Duration::from_millis(rand::random_range(1..=3))).await;
                let landed = stock::write(&db, SKU, qty - 1, guard.token()).await;
                emit(&format!("@sold {label}/{i} {} {landed}", guard.token()));
                guard.unlock().await.expect("unlock");
            })
        })
        .collect();
    for t in tasks {
        t.await.unwrap();
    }
    c.shutdown(Duration::from_secs(5)).await;
    emit("@done");
}

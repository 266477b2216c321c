//! LeaseSemaphore demo: five workers on two clients share two permits of a partner API. One
//! worker "crashes" while holding its permit (it keeps the id and never releases): the permit
//! comes back by itself when its lease runs out, and the others carry on. A long job extends
//! its lease while it works.
//!
//! ```text
//! REDIS_URL=redis://127.0.0.1:6379/ cargo run --example lease_semaphore
//! ```
use std::time::{Duration, Instant};

#[tokio::main]
async fn main() -> lockwise::Result<()> {
    let url = std::env::var("REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379/".into());
    let clients = [
        lockwise::Client::connect(&url).await?,
        lockwise::Client::connect(&url).await?,
    ];
    let api = clients[0].lease_semaphore("demo:partner-api");
    // Set once; a semaphore untouched for its idle TTL (24 h by default) is forgotten.
    if !api.try_set_permits(2).await? {
        println!(
            "already set: {} permits free",
            api.available_permits().await?
        );
    }
    let start = Instant::now();

    // A worker that dies with its permit: it is back after its 1 s lease.
    let lost = api.acquire(Duration::from_secs(1)).await?;
    println!("crashing worker took permit {}", lost.id());
    let _kept_forever = lost.into_id();

    let mut workers = Vec::new();
    for i in 0..5 {
        let sem = clients[i % 2].lease_semaphore("demo:partner-api");
        workers.push(tokio::spawn(async move {
            let permit = sem.acquire(Duration::from_millis(500)).await?;
            println!(
                "{:>5} ms  worker {i} (client {}) has a permit",
                start.elapsed().as_millis(),
                i % 2
            );
            if i == 0 {
                // A longer job: extend the lease before it runs out.
                tokio::time::sleep(Duration::from_millis(300)).await;
                permit.update_lease(Duration::from_millis(500)).await?;
            }
            tokio::time::sleep(Duration::from_millis(300)).await;
            permit.release().await
        }));
    }
    for w in workers {
        w.await.expect("worker panicked")?;
    }
    println!(
        "{:>5} ms  done; {} permits free",
        start.elapsed().as_millis(),
        api.available_permits().await?
    );
    Ok(())
}

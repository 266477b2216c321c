//! FairLock demo: six workers on two clients ask for the lock one after another while it is
//! held; they get it in exactly that order, whichever client they use.
//!
//! ```text
//! REDIS_URL=redis://127.0.0.1:6379/ cargo run --example fair
//! ```
use std::time::Duration;

#[tokio::main]
async fn main() -> lockwise::Result<()> {
    let url = std::env::var("REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379/".into());
    let clients = [
        lockwise::Client::connect(&url).await?,
        lockwise::Client::connect(&url).await?,
    ];
    let lock = clients[0].fair_lock("demo:fair");
    let held = lock.lock().await?;
    let mut workers = Vec::new();
    for i in 0..6 {
        let mine = clients[i % 2].fair_lock("demo:fair");
        workers.push(tokio::spawn(async move {
            let guard = mine.lock().await?;
            println!("worker {i} (client {}) has the lock", i % 2);
            tokio::time::sleep(Duration::from_millis(50)).await;
            guard.unlock().await
        }));
        // Wait until this worker is queued, so the arrival order is well defined.
        while lock.queue_len().await? < i + 1 {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }
    println!("6 workers queued; releasing");
    held.unlock().await?;
    for w in workers {
        w.await.expect("worker panicked")?;
    }
    Ok(())
}

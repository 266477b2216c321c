//! RwLock demo: four readers on two clients hold the read lock at the same time; a writer
//! waits for them, and a reader that comes after the writer started waiting waits behind
//! it (writer preference).
//!
//! ```text
//! REDIS_URL=redis://127.0.0.1:6379/ cargo run --example rwlock
//! ```
use std::time::{Duration, Instant};

#[tokio::main]
async fn main() -> lockwise::Result<()> {
    let url = std::env::var("REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379/".into());
    let clients = [
        lockwise::Client::connect(&url).await?,
        lockwise::Client::connect(&url).await?,
    ];
    let t0 = Instant::now();
    let mut tasks = Vec::new();
    for i in 0..4 {
        let rw = clients[i % 2].rw_lock("demo:rw");
        tasks.push(tokio::spawn(async move {
            let guard = rw.read().lock().await?;
            println!("{:>5} ms reader {i} in", t0.elapsed().as_millis());
            tokio::time::sleep(Duration::from_millis(200)).await;
            guard.unlock().await
        }));
    }
    tokio::time::sleep(Duration::from_millis(50)).await;
    let writer = clients[1].rw_lock("demo:rw");
    tasks.push(tokio::spawn(async move {
        let guard = writer.write().lock().await?;
        println!(
            "{:>5} ms writer in (readers done)",
            t0.elapsed().as_millis()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
        // Downgrade: read under the write hold, keep it after the write is released.
        let read = writer.read().lock().await?;
        guard.unlock().await?;
        println!(
            "{:>5} ms writer downgraded to a reader",
            t0.elapsed().as_millis()
        );
        read.unlock().await
    }));
    tokio::time::sleep(Duration::from_millis(50)).await;
    let late = clients[0].rw_lock("demo:rw");
    tasks.push(tokio::spawn(async move {
        let guard = late.read().lock().await?;
        println!(
            "{:>5} ms late reader in (after the writer)",
            t0.elapsed().as_millis()
        );
        guard.unlock().await
    }));
    for t in tasks {
        t.await.expect("task panicked")?;
    }
    Ok(())
}

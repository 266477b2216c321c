//! Semaphore demo: ten jobs on two clients share a pool of three permits; one job needs two
//! at once. At no point do the running jobs hold more than three.
//!
//! ```text
//! REDIS_URL=redis://127.0.0.1:6379/ cargo run --example semaphore
//! ```
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

#[tokio::main]
async fn main() -> lockwise::Result<()> {
    let url = std::env::var("REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379/".into());
    let clients = [
        lockwise::Client::connect(&url).await?,
        lockwise::Client::connect(&url).await?,
    ];
    // Idle for an hour: forgotten, and created again by the next run.
    let pool = clients[0]
        .semaphore("demo:pool")
        .with_idle_ttl(Duration::from_secs(3600));
    pool.try_set_permits(3).await?;
    let in_use = Arc::new(AtomicU64::new(0));
    let mut jobs = Vec::new();
    for i in 0..10u64 {
        let sem = clients[(i % 2) as usize].semaphore("demo:pool");
        let in_use = in_use.clone();
        let k = if i == 5 { 2 } else { 1 };
        jobs.push(tokio::spawn(async move {
            let permits = sem.acquire_many(k).await?;
            let now = in_use.fetch_add(k, Ordering::SeqCst) + k;
            println!("job {i} runs with {k} permit(s); {now} of 3 in use");
            tokio::time::sleep(Duration::from_millis(100)).await;
            in_use.fetch_sub(k, Ordering::SeqCst);
            permits.release().await
        }));
    }
    for j in jobs {
        j.await.expect("job panicked")?;
    }
    println!(
        "done; {} permits available",
        pool.available_permits().await?
    );
    Ok(())
}

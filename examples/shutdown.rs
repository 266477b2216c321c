//! Graceful shutdown: a small service whose workers hold a lock and a semaphore permit each
//! while they work, stopped by Ctrl-C or SIGTERM (or after `--seconds N`, default 3). Before
//! `main` returns it calls `Client::shutdown`, which releases what the workers still hold
//! (a runtime that just ends would leave the locks until their TTL and the permits taken for
//! good), and prints what it released.
//!
//! ```text
//! REDIS_URL=redis://127.0.0.1:6379/ cargo run --example shutdown -- --seconds 5
//! ```
use std::time::Duration;

use lockwise::Lock;

#[tokio::main]
async fn main() -> lockwise::Result<()> {
    let url = std::env::var("REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379/".into());
    let seconds: u64 = std::env::args()
        .skip_while(|a| a != "--seconds")
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(3);
    let client = lockwise::Client::builder(url)
        .ownership(lockwise::Ownership::PerHold)
        .build()
        .await?;
    let pool = client.semaphore("demo:shutdown:pool");
    pool.try_set_permits(4).await?;

    for worker in 0..4 {
        let (client, pool) = (client.clone(), pool.clone());
        tokio::spawn(async move {
            loop {
                let Ok(permit) = pool.acquire().await else {
                    return;
                };
                let lock = client.lock(format!("demo:shutdown:job:{}", worker % 2));
                // The job stops where it is if the lock is lost (or the client closed).
                let done = lock
                    .run(|held| async move {
                        tokio::time::sleep(Duration::from_millis(300)).await;
                        held.owner
                    })
                    .await;
                match done {
                    Ok(owner) => println!("worker {worker}: a job done as {owner}"),
                    Err(e) if e.is_client_closed() => return,
                    Err(e) => eprintln!("worker {worker}: {e}"),
                }
                if permit.release().await.is_err() {
                    return; // the client was closed, which gave the permit back
                }
            }
        });
    }

    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .expect("a SIGTERM handler");
    tokio::select! {
        _ = tokio::signal::ctrl_c() => println!("Ctrl-C"),
        _ = term.recv() => println!("SIGTERM"),
        () = tokio::time::sleep(Duration::from_secs(seconds)) => println!("{seconds} s are up"),
    }
    let report = client.shutdown(Duration::from_secs(5)).await;
    println!(
        "shut down: {} holds released, {} permits given back, complete: {}",
        report.holds_released,
        report.permits_returned,
        report.is_complete()
    );
    let probe = lockwise::Client::connect(
        &std::env::var("REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379/".into()),
    )
    .await?;
    let left = probe
        .semaphore("demo:shutdown:pool")
        .available_permits()
        .await?;
    println!("permits available afterwards: {left} of 4");
    assert_eq!(left, 4, "every permit is back");
    Ok(())
}

//! Admin demo: two clients hold a few locks of different kinds (one of them contended, one
//! left behind by a crashed holder), then `client.admin()` lists them and looks for leaks,
//! the same calls the `lockwise` CLI makes (`cargo run -p lockwise-cli -- list`).
//!
//! ```text
//! REDIS_URL=redis://127.0.0.1:6379/ cargo run --example admin
//! ```
//! Set `HOLD_SECS=60` to keep the locks held that long, to look at them with the CLI.
use std::time::Duration;

use lockwise::{Client, OwnerCheck};

#[tokio::main]
async fn main() -> lockwise::Result<()> {
    let url = std::env::var("REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379/".into());
    if std::env::var_os("ADMIN_DEMO_CRASH").is_some() {
        // A short watchdog timeout: its presence key (see `Admin::leaks`) expires 1 s after
        // the crash, so the leak check below sees the client gone without waiting 30 s.
        let doomed = Client::builder(&url)
            .watchdog_timeout(Duration::from_secs(1))
            .build()
            .await?;
        let _held = doomed
            .lock("nightly-export")
            .lock_with_lease(Duration::from_secs(600))
            .await?;
        std::process::exit(0); // no destructor runs: nothing is unlocked
    }
    let (a, b) = (Client::connect(&url).await?, Client::connect(&url).await?);

    let order = a.lock("order:1001").lock().await?;
    let invoice = a.fenced_lock("invoice:7").lock().await?;
    let queue = a.fair_lock("payments").lock().await?;
    let b_fair = b.fair_lock("payments");
    let waiter = tokio::spawn(async move { b_fair.lock().await?.unlock().await });
    while a.fair_lock("payments").queue_len().await? < 1 {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let report = a.rw_lock("report").read().lock().await?;
    let report_b = b.rw_lock("report").read().lock().await?;
    let pool = a.semaphore("db-pool");
    pool.try_set_permits(10).await?;
    let conns = pool.acquire_many(3).await?;
    // A holder that crashes: this program again, as a process that takes a lock with a
    // 10-minute lease and exits without unlocking. The lease outlives it.
    let exe = std::env::current_exe().expect("own path");
    let status = std::process::Command::new(exe)
        .env("ADMIN_DEMO_CRASH", "1")
        .status()
        .expect("start the crashing holder");
    assert!(status.success());
    // Its presence key expires one watchdog timeout (1 s) after the crash.
    tokio::time::sleep(Duration::from_millis(1500)).await;

    let admin = a.admin();
    for lock in admin.list().await?.locks {
        let holders: Vec<String> = lock
            .holders
            .iter()
            .map(|h| format!("{} x{}", h.owner, h.count))
            .collect();
        println!(
            "{:<16} {:<9} queue {} waiters {} holders [{}]",
            lock.name,
            lock.kind.as_str(),
            lock.queue_len,
            lock.waiters,
            holders.join(", ")
        );
    }
    let leaks = admin.leaks().await?;
    for leak in &leaks.leaks {
        println!("leak: {} {}", leak.key, leak.reason.describe());
    }
    if let OwnerCheck::Skipped { reason } = &leaks.owner_check {
        println!("owner check skipped: {reason}");
    }

    if let Some(secs) = std::env::var("HOLD_SECS").ok().and_then(|s| s.parse().ok()) {
        println!("holding for {secs} s");
        tokio::time::sleep(Duration::from_secs(secs)).await;
    }
    admin.force_unlock("nightly-export").await?;
    order.unlock().await?;
    invoice.unlock().await?;
    queue.unlock().await?;
    waiter.await.expect("waiter panicked")?;
    report.unlock().await?;
    report_b.unlock().await?;
    conns.release().await?;
    Ok(())
}

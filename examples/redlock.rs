//! Redlock over five throwaway redis-servers, printed as a story: a lock taken on all five,
//! a minority of nodes dies and the lock is still taken (on three), one more dies and no
//! majority is possible any more.
//!
//! ```text
//! cargo run --example redlock        # starts five redis-servers (REDIS_SERVER_BIN to choose)
//! ```
//!
//! Exits non-zero if a step does not behave as described.

use std::process::ExitCode;
use std::time::{Duration, Instant};

use lockwise::{Client, RedLockOptions, RedLockSet};

use lockwise_testkit::server;

type BoxError = Box<dyn std::error::Error + Send + Sync>;

#[tokio::main]
async fn main() -> ExitCode {
    match run().await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}

async fn run() -> Result<(), BoxError> {
    let mut servers = Vec::new();
    for _ in 0..5 {
        servers.push(server::RedisServer::try_start_with(&[], false)?);
    }
    let mut clients = Vec::new();
    for s in &servers {
        clients.push(Client::connect(s.url()).await?);
    }
    let set = RedLockSet::with_options(
        &clients,
        RedLockOptions::default()
            .ttl(Duration::from_secs(10))
            .node_timeout(Duration::from_millis(100)),
    );
    let lock = set.lock("report:daily");
    println!("five independent masters, quorum {}", set.quorum());

    let guard = lock.lock().await?;
    println!(
        "1. locked on {} nodes; validity {:?} of a 10 s TTL",
        guard.acquired_nodes(),
        guard.validity()
    );
    guard.unlock().await?;

    servers[0].kill();
    servers[1].kill();
    let started = Instant::now();
    let guard = lock.try_lock(Duration::from_secs(2), None).await?;
    println!(
        "2. two nodes down: locked on {} nodes in {:?}",
        guard.acquired_nodes(),
        started.elapsed()
    );
    guard.unlock().await?;

    servers[2].kill();
    match lock.try_lock(Duration::from_secs(1), None).await {
        Err(e) if e.is_timeout() => return Err("expected an error, got a timeout".into()),
        Err(e) => println!("3. three nodes down: no majority possible: {e}"),
        Ok(_) => return Err("acquired without a majority".into()),
    }
    Ok(())
}

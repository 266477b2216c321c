//! Why fencing tokens: Kleppmann's "process pause" scenario, printed as a story.
//!
//! Client 1 takes a lock with a short lease and stalls (think GC pause) past the lease.
//! Client 2 then takes the lock, with a larger fencing token, and writes. Client 1 wakes up,
//! still believes it holds the lock and writes with its old token: the storage (a
//! [`lockwise::FencedValue`]) rejects the write with `Error::StaleToken`.
//!
//! ```text
//! cargo run --example fencing                                      # throwaway redis-server
//! REDIS_URL=redis://127.0.0.1:6379/ cargo run --example fencing    # an existing server
//! ```
//!
//! Exits non-zero if the stale write was accepted.

use std::process::ExitCode;
use std::time::{Duration, Instant};

use lockwise::{Client, Error};

use lockwise_testkit::server;

type BoxError = Box<dyn std::error::Error + Send + Sync>;

const LEASE: Duration = Duration::from_millis(300);
const PAUSE: Duration = Duration::from_millis(800);

#[tokio::main]
async fn main() -> ExitCode {
    match run().await {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::FAILURE,
        Err(e) => {
            eprintln!("fencing: error: {e}");
            ExitCode::FAILURE
        }
    }
}

async fn run() -> Result<bool, BoxError> {
    let (_server, url) = match std::env::var("REDIS_URL") {
        Ok(url) if !url.is_empty() => (None, url),
        _ => {
            let server = server::RedisServer::try_start_with(&[], false)?;
            let url = server.url().to_string();
            (Some(server), url)
        }
    };
    let ns = format!("fencing-example-{}", uuid::Uuid::new_v4().simple());
    let connect = |url: &str| Client::builder(url).namespace(ns.clone()).build();
    let (client1, client2) = (connect(&url).await?, connect(&url).await?);
    let storage = client1.fenced_value(format!("{ns}:report.txt"));
    println!("fencing example: Kleppmann's process-pause scenario (redis: {url})\n");

    let t0 = Instant::now();
    let say = move |who: &str, what: String| {
        println!("{:>5} ms  {who:<9} {what}", t0.elapsed().as_millis())
    };

    // Client 1: lock with a short lease, write, stall past the lease, write again.
    let (lock1, storage1) = (client1.fenced_lock("report"), storage.clone());
    let one = tokio::spawn(async move {
        let guard = lock1.lock_with_lease(LEASE).await?;
        let token = guard.token();
        say(
            "client 1",
            format!("takes the lock (lease {LEASE:?}), token {token}"),
        );
        storage1.write(token, "draft by client 1").await?;
        say("client 1", "writes \"draft by client 1\"".into());
        say(
            "client 1",
            format!("stalls for {PAUSE:?} (a GC pause); its lease runs out"),
        );
        tokio::time::sleep(PAUSE).await;
        say(
            "client 1",
            format!("wakes up, still believes it holds the lock, writes with token {token}"),
        );
        let late = storage1.write(token, "late edit by client 1").await;
        // Its guard knows better, too late: the unlock reports the lock as not held.
        let unlocked = guard.unlock().await;
        Ok::<_, Error>((late, unlocked))
    });

    // Client 2: asks a moment later, gets the lock when client 1's lease expires.
    tokio::time::sleep(Duration::from_millis(50)).await;
    let guard = client2.fenced_lock("report").lock().await?;
    let token2 = guard.token();
    say(
        "client 2",
        format!("takes the lock, token {token2} (larger)"),
    );
    storage.write(token2, "final by client 2").await?;
    say(
        "client 2",
        "writes \"final by client 2\" and unlocks".into(),
    );
    guard.unlock().await?;

    let (late, unlocked) = one.await??;
    let rejected = match late {
        Err(e @ Error::StaleToken { .. }) => {
            say("storage", format!("REJECTS the write: {e}"));
            true
        }
        Err(e) => return Err(e.into()),
        Ok(()) => {
            say(
                "storage",
                "ACCEPTED the stale write: the fence did not work".into(),
            );
            false
        }
    };
    if let Err(e) = unlocked {
        say("client 1", format!("unlock: {e}"));
    }
    let value: Option<String> = storage.read().await?;
    println!(
        "\nstored value: {value:?} (highest token {:?})",
        storage.highest_token().await?
    );
    if rejected && value.as_deref() == Some("final by client 2") {
        println!("OK: the stale write was rejected");
        Ok(true)
    } else {
        println!("FAILED: the stale write got through");
        Ok(false)
    }
}

//! Repro (library bug): a partitioned holder is told its lock is lost only after another
//! client already holds it. Copy to tests/ and run: cargo test --test fault_partition -- --nocapture
mod support;

use std::time::{Duration, Instant};

use relock::{Client, Error};
use support::RedisServer;

const TTL: Duration = Duration::from_secs(1);

// ---------------------------------------------------------------------------------------
// 13. Partition (a black-holing TCP proxy between one client and the server)
// ---------------------------------------------------------------------------------------

/// A TCP proxy that can black-hole traffic: while cut, bytes are read but not forwarded
/// (no RST, no FIN), like a link that went down.
struct Proxy {
    port: u16,
    cut: tokio::sync::watch::Sender<bool>,
}

impl Proxy {
    async fn start(upstream: u16) -> Proxy {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let (cut, rx) = tokio::sync::watch::channel(false);
        tokio::spawn(async move {
            while let Ok((down, _)) = listener.accept().await {
                let Ok(up) = tokio::net::TcpStream::connect(("127.0.0.1", upstream)).await else {
                    continue;
                };
                let (dr, dw) = down.into_split();
                let (ur, uw) = up.into_split();
                tokio::spawn(pipe(dr, uw, rx.clone()));
                tokio::spawn(pipe(ur, dw, rx.clone()));
            }
        });
        Proxy { port, cut }
    }
    fn set_cut(&self, cut: bool) {
        self.cut.send_replace(cut);
    }
}

async fn pipe(
    mut from: tokio::net::tcp::OwnedReadHalf,
    mut to: tokio::net::tcp::OwnedWriteHalf,
    mut cut: tokio::sync::watch::Receiver<bool>,
) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        let n = match from.read(&mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(n) => n,
        };
        // While cut, hold the bytes back until the link is up again.
        if cut.wait_for(|c| !*c).await.is_err() {
            return;
        }
        if to.write_all(&buf[..n]).await.is_err() {
            return;
        }
    }
}

/// Client A (through the proxy) holds a watchdog lock (TTL 1 s); the link is cut while
/// client B (direct) waits for the same lock. Expected: A's lost() fires no later than B
/// acquires. Set PARTITION_RT_MS to change A's response timeout.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn partition_holder_told_within_lease() {
    let server = RedisServer::start();
    let proxy = Proxy::start(server.port()).await;
    let ns = support::unique_ns("partition");
    let rt = std::env::var("PARTITION_RT_MS")
        .map(|v| v.parse().unwrap())
        .unwrap_or(1000);
    let a = Client::builder(format!("redis://127.0.0.1:{}/", proxy.port))
        .namespace(&ns)
        .watchdog_timeout(TTL)
        .response_timeout(Duration::from_millis(rt))
        .build()
        .await
        .unwrap();
    let b = Client::builder(server.url())
        .namespace(&ns)
        .watchdog_timeout(TTL)
        .build()
        .await
        .unwrap();
    let a_lock = a.lock("p");
    let held = tokio::spawn(async move { a_lock.lock().await.expect("A lock") })
        .await
        .unwrap();
    let lost = held.lost();
    let lost_at = tokio::spawn(async move {
        lost.cancelled().await;
        Instant::now()
    });
    let b_lock = b.lock("p");
    let b_task = tokio::spawn(async move {
        let g = b_lock.lock().await.expect("B lock");
        (g, Instant::now())
    });
    tokio::time::sleep(Duration::from_millis(700)).await;
    let cut_at = Instant::now();
    proxy.set_cut(true);
    let (b_guard, b_at) = tokio::time::timeout(Duration::from_secs(5), b_task)
        .await
        .unwrap()
        .unwrap();
    let lost_at = tokio::time::timeout(Duration::from_secs(5), lost_at)
        .await
        .unwrap()
        .unwrap();
    println!(
        "response timeout {rt} ms: A told lost at cut+{:?}; B acquired at cut+{:?}",
        lost_at - cut_at,
        b_at - cut_at
    );
    tokio::time::sleep(Duration::from_secs(2)).await;
    proxy.set_cut(false);
    assert!(
        lost_at <= b_at,
        "A learned of the loss {:?} after B acquired",
        lost_at - b_at
    );
    let r = held.unlock().await;
    assert!(
        matches!(r, Err(Error::NotHeld { .. }) | Err(Error::Redis(_))),
        "{r:?}"
    );
    b_guard.unlock().await.unwrap();
}

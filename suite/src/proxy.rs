//! A TCP fault proxy between one client and one server: it forwards both ways until told to
//! black-hole the link ([`Proxy::set_cut`]: bytes are read but held back, no RST, no FIN, like
//! a link that went down) or to hold back only the server's replies
//! ([`Proxy::set_hold_replies`]). Held bytes go through, in order, once the link is up again.
//!
//! Used by the partition scenarios of `tests/faults/partition.rs` (a client cut off from its
//! server) and `tests/deployments/sentinel_partition.rs` (a Sentinel client cut off from its
//! sentinels while it still reaches the master).

use tokio::sync::watch;

/// A black-holing TCP proxy to `127.0.0.1:<upstream>`; see the module docs. Dropping it stops
/// accepting connections and ends the forwarded ones at their next bytes.
pub struct Proxy {
    port: u16,
    cut: watch::Sender<bool>,
    /// Holds back only the server's replies (requests still go through).
    hold_replies: watch::Sender<bool>,
    accept: tokio::task::JoinHandle<()>,
}

impl Proxy {
    /// Listens on a free local port and forwards every connection to `127.0.0.1:<upstream>`.
    pub async fn start(upstream: u16) -> Proxy {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let (cut, rx) = watch::channel(false);
        let (hold_replies, replies) = watch::channel(false);
        let accept = tokio::spawn(async move {
            while let Ok((down, _)) = listener.accept().await {
                let Ok(up) = tokio::net::TcpStream::connect(("127.0.0.1", upstream)).await else {
                    continue;
                };
                let (dr, dw) = down.into_split();
                let (ur, uw) = up.into_split();
                tokio::spawn(pipe(dr, uw, rx.clone(), None));
                tokio::spawn(pipe(ur, dw, rx.clone(), Some(replies.clone())));
            }
        });
        Proxy {
            port,
            cut,
            hold_replies,
            accept,
        }
    }

    /// The port clients connect to.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// `redis://127.0.0.1:<port>/`: the upstream server as seen through the proxy.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/", self.port)
    }

    /// Black-holes the link (`true`) or lets it, and whatever it held back, through again.
    pub fn set_cut(&self, cut: bool) {
        self.cut.send_replace(cut);
    }

    /// Holds back the server's replies only (`true`), or lets them through again.
    pub fn set_hold_replies(&self, hold: bool) {
        self.hold_replies.send_replace(hold);
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.accept.abort();
    }
}

/// Copies `from` to `to`, holding the bytes back while the link is cut (or, for replies,
/// held); ends when either side closes or the proxy is dropped.
async fn pipe(
    mut from: tokio::net::tcp::OwnedReadHalf,
    mut to: tokio::net::tcp::OwnedWriteHalf,
    mut cut: watch::Receiver<bool>,
    mut hold: Option<watch::Receiver<bool>>,
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
        if let Some(hold) = hold.as_mut() {
            if hold.wait_for(|h| !*h).await.is_err() {
                return;
            }
        }
        if to.write_all(&buf[..n]).await.is_err() {
            return;
        }
    }
}

//! A TCP fault proxy between one client and one server: it forwards both ways until told to
//! black-hole the link ([`Proxy::set_cut`]: bytes are read but held back, no RST, no FIN, like
//! a link that went down) or to hold back only the server's replies
//! ([`Proxy::set_hold_replies`]). Held bytes go through, in order, once the link is up again.
//! What the clients sent while the link was cut can be counted ([`Proxy::held_requests`]), so a
//! test can act at a known point of a client's retry cycle.
//!
//! Used by the partition scenarios of `tests/faults/partition.rs` (a client cut off from its
//! server) and `tests/deployments/sentinel_partition.rs` (a Sentinel client cut off from its
//! sentinels while it still reaches the master).

use std::sync::{Arc, Mutex};

use tokio::sync::watch;

/// A black-holing TCP proxy to `127.0.0.1:<upstream>`; see the module docs. Dropping it stops
/// accepting connections and ends the forwarded ones at their next bytes.
pub struct Proxy {
    port: u16,
    cut: watch::Sender<bool>,
    /// Holds back only the server's replies (requests still go through).
    hold_replies: watch::Sender<bool>,
    /// Request bytes read while the link was cut, since it was last cut.
    held: Arc<Mutex<Vec<u8>>>,
    accept: tokio::task::JoinHandle<()>,
}

impl Proxy {
    /// Listens on a free local port and forwards every connection to `127.0.0.1:<upstream>`.
    pub async fn start(upstream: u16) -> Proxy {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let (cut, rx) = watch::channel(false);
        let (hold_replies, replies) = watch::channel(false);
        let held = Arc::new(Mutex::new(Vec::new()));
        let log = held.clone();
        let accept = tokio::spawn(async move {
            while let Ok((down, _)) = listener.accept().await {
                let Ok(up) = tokio::net::TcpStream::connect(("127.0.0.1", upstream)).await else {
                    continue;
                };
                let (dr, dw) = down.into_split();
                let (ur, uw) = up.into_split();
                tokio::spawn(pipe(dr, uw, rx.clone(), None, Some(log.clone())));
                tokio::spawn(pipe(ur, dw, rx.clone(), Some(replies.clone()), None));
            }
        });
        Proxy {
            port,
            cut,
            hold_replies,
            held,
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
        if cut {
            self.held.lock().unwrap().clear();
        }
        self.cut.send_replace(cut);
    }

    /// How many times `command` (a command name such as `b"HGET"`, matched as a RESP bulk
    /// string) occurs in what the clients sent since the link was last cut and while it was.
    pub fn held_requests(&self, command: &[u8]) -> usize {
        let needle = [
            format!("${}\r\n", command.len()).as_bytes(),
            command,
            b"\r\n",
        ]
        .concat();
        let held = self.held.lock().unwrap();
        held.windows(needle.len())
            .filter(|w| *w == needle.as_slice())
            .count()
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
/// held), and appending to `log` what it reads while cut; ends when either side closes or
/// the proxy is dropped.
async fn pipe(
    mut from: tokio::net::tcp::OwnedReadHalf,
    mut to: tokio::net::tcp::OwnedWriteHalf,
    mut cut: watch::Receiver<bool>,
    mut hold: Option<watch::Receiver<bool>>,
    log: Option<Arc<Mutex<Vec<u8>>>>,
) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut buf = vec![0u8; 64 * 1024];
    // Read but not yet forwarded; `ended`: the sender closed (forwarded once unblocked, as
    // a link that was down would deliver it).
    let mut pending = Vec::new();
    let mut ended = false;
    loop {
        let blocked = *cut.borrow() || hold.as_ref().is_some_and(|h| *h.borrow());
        if !blocked {
            if !pending.is_empty() && to.write_all(&pending).await.is_err() {
                return;
            }
            pending.clear();
            if ended {
                return;
            }
        }
        // Keep reading while blocked, so every request sent meanwhile can be logged.
        tokio::select! {
            read = from.read(&mut buf), if !ended => match read {
                Ok(0) | Err(_) => ended = true,
                Ok(n) => {
                    if let Some(log) = log.as_ref().filter(|_| *cut.borrow()) {
                        log.lock().unwrap().extend_from_slice(&buf[..n]);
                    }
                    pending.extend_from_slice(&buf[..n]);
                }
            },
            up = cut.changed(), if blocked => {
                if up.is_err() {
                    return;
                }
            }
            up = changed(&mut hold), if blocked => {
                if !up {
                    return;
                }
            }
        }
    }
}

/// Waits for `rx` to change (never, without one); false once its sender is gone.
async fn changed(rx: &mut Option<watch::Receiver<bool>>) -> bool {
    match rx {
        Some(rx) => rx.changed().await.is_ok(),
        None => std::future::pending().await,
    }
}

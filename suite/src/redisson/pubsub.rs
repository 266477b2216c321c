//! The peer's pub/sub side: a small RESP2 subscriber connection (SUBSCRIBE or SSUBSCRIBE,
//! refcounted per channel like Redisson's `PublishSubscribe`), the per-channel wake-up state
//! that mimics Redisson's listeners (its `LockPubSub`, `SemaphorePubSub` and `CountDownLatchPubSub`), and the log of every message.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::future::BoxFuture;
use redis::IntoConnectionInfo;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::TcpStream;
use tokio::sync::{mpsc, watch, Semaphore};
use tokio::task::JoinHandle;

/// Redisson's `subscriptionTimeout` default: how long a (un)subscribe waits for its reply.
const SUBSCRIPTION_TIMEOUT: Duration = Duration::from_millis(7500);

/// Which Redisson listener a channel feeds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Kind {
    /// Lock / rwlock / fair channels: `0` wakes one waiter, `1` wakes all.
    Lock,
    /// `redisson_sc:{name}`: the payload wakes up to that many waiters.
    Semaphore,
    /// Count-down latch: `0` opens the local latch, `1` closes it.
    Latch,
}

/// The local state of one subscribed channel: a semaphore of wake-ups (as
/// `RedissonLockEntry`) with a count of the tasks blocked on it, and the latch's open flag.
pub(crate) struct Wake {
    kind: Kind,
    permits: Semaphore,
    waiters: AtomicUsize,
    open: watch::Sender<bool>,
}

impl Wake {
    fn new(kind: Kind) -> Self {
        Wake {
            kind,
            permits: Semaphore::new(0),
            waiters: AtomicUsize::new(0),
            open: watch::Sender::new(false),
        }
    }

    /// What Redisson's listener does with a decoded payload.
    fn on_value(&self, value: i64) {
        let waiters = self.waiters.load(Ordering::SeqCst);
        match (self.kind, value) {
            (Kind::Lock, 0) => self.permits.add_permits(1),
            (Kind::Lock, 1) => self.permits.add_permits(waiters),
            (Kind::Lock, _) => {}
            (Kind::Semaphore, v) if v > 0 => {
                self.permits
                    .add_permits(waiters.min(usize::try_from(v).unwrap_or(usize::MAX)));
            }
            (Kind::Semaphore, _) => {}
            (Kind::Latch, 0) => {
                self.open.send_replace(true);
            }
            (Kind::Latch, 1) => {
                self.open.send_replace(false);
            }
            (Kind::Latch, _) => {}
        }
    }

    /// Blocks for at most `d` on the wake-up semaphore; true if a permit was taken.
    pub(crate) async fn wait(&self, d: Duration) -> bool {
        self.waiters.fetch_add(1, Ordering::SeqCst);
        let got = tokio::time::timeout(d, self.permits.acquire()).await;
        self.waiters.fetch_sub(1, Ordering::SeqCst);
        match got {
            Ok(Ok(permit)) => {
                permit.forget();
                true
            }
            _ => false,
        }
    }

    /// Waits at most `d` for the latch to be open; true if it is.
    pub(crate) async fn wait_open(&self, d: Duration) -> bool {
        let mut rx = self.open.subscribe();
        let opened = tokio::time::timeout(d, rx.wait_for(|open| *open))
            .await
            .is_ok_and(|r| r.is_ok());
        opened
    }
}

/// Every message the peer received, decoded as Java would.
#[derive(Default)]
pub(crate) struct Log {
    /// (channel, payload) in arrival order.
    pub(crate) all: Vec<(String, Vec<u8>)>,
    /// Payloads `Long.valueOf` would reject.
    pub(crate) bad: Vec<(String, Vec<u8>)>,
    /// Messages per channel.
    pub(crate) counts: HashMap<String, u64>,
}

/// Java's `Long.valueOf(String)` on a payload: an optional sign and decimal digits in range.
pub fn java_long(payload: &[u8]) -> Option<i64> {
    let s = std::str::from_utf8(payload).ok()?;
    let digits = s.strip_prefix(['+', '-']).unwrap_or(s);
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    s.parse().ok()
}

/// State shared by a subscriber connection and its reader task.
struct Shared {
    /// channel -> (refcount, wake state).
    wakes: Mutex<HashMap<String, (usize, Arc<Wake>)>>,
    log: Arc<Mutex<Log>>,
}

impl Shared {
    fn on_message(&self, channel: Vec<u8>, payload: Vec<u8>) {
        let channel = String::from_utf8_lossy(&channel).into_owned();
        let value = java_long(&payload);
        {
            let mut log = self.log.lock().unwrap();
            *log.counts.entry(channel.clone()).or_default() += 1;
            if value.is_none() {
                log.bad.push((channel.clone(), payload.clone()));
            }
            log.all.push((channel.clone(), payload));
        }
        let Some(value) = value else { return };
        let wake = self
            .wakes
            .lock()
            .unwrap()
            .get(&channel)
            .map(|e| e.1.clone());
        if let Some(wake) = wake {
            wake.on_value(value);
        }
    }
}

/// The writer side of a subscriber connection and the replies to its (un)subscribes.
struct Ops {
    write: OwnedWriteHalf,
    confirms: mpsc::UnboundedReceiver<Result<(), String>>,
}

/// One RESP2 connection in subscribe mode (to the one server, or to the master owning a
/// slot in sharded mode).
pub(crate) struct SubConn {
    sharded: bool,
    ops: tokio::sync::Mutex<Ops>,
    shared: Arc<Shared>,
    reader: JoinHandle<()>,
}

impl Drop for SubConn {
    fn drop(&mut self) {
        self.reader.abort();
    }
}

/// One RESP2 frame.
enum Frame {
    Simple(Vec<u8>),
    Error(String),
    Int,
    Bulk(Option<Vec<u8>>),
    Array(Option<Vec<Frame>>),
}

impl Frame {
    fn bytes(&self) -> Option<&[u8]> {
        match self {
            Frame::Simple(b) | Frame::Bulk(Some(b)) => Some(b),
            _ => None,
        }
    }
}

fn invalid(what: &str) -> std::io::Error {
    std::io::Error::new(std::io::ErrorKind::InvalidData, what.to_string())
}

fn read_frame(r: &mut BufReader<OwnedReadHalf>) -> BoxFuture<'_, std::io::Result<Frame>> {
    Box::pin(async move {
        let mut line = Vec::new();
        if r.read_until(b'\n', &mut line).await? == 0 {
            return Err(std::io::ErrorKind::UnexpectedEof.into());
        }
        if !line.ends_with(b"\r\n") {
            return Err(invalid("RESP line without CRLF"));
        }
        line.truncate(line.len() - 2);
        let (&tag, rest) = line
            .split_first()
            .ok_or_else(|| invalid("empty RESP line"))?;
        let number = || -> std::io::Result<i64> {
            std::str::from_utf8(rest)
                .ok()
                .and_then(|s| s.parse().ok())
                .ok_or_else(|| invalid("bad RESP number"))
        };
        Ok(match tag {
            b'+' => Frame::Simple(rest.to_vec()),
            b'-' => Frame::Error(String::from_utf8_lossy(rest).into_owned()),
            b':' => {
                number()?;
                Frame::Int
            }
            b'$' => match usize::try_from(number()?) {
                Err(_) => Frame::Bulk(None),
                Ok(n) => {
                    let mut buf = vec![0; n + 2];
                    r.read_exact(&mut buf).await?;
                    buf.truncate(n);
                    Frame::Bulk(Some(buf))
                }
            },
            b'*' => match usize::try_from(number()?) {
                Err(_) => Frame::Array(None),
                Ok(n) => {
                    let mut items = Vec::with_capacity(n);
                    for _ in 0..n {
                        items.push(read_frame(r).await?);
                    }
                    Frame::Array(Some(items))
                }
            },
            _ => return Err(invalid("unknown RESP type")),
        })
    })
}

async fn reader_loop(
    mut r: BufReader<OwnedReadHalf>,
    shared: Arc<Shared>,
    confirms: mpsc::UnboundedSender<Result<(), String>>,
) {
    while let Ok(frame) = read_frame(&mut r).await {
        match frame {
            Frame::Array(Some(mut items)) => {
                let kind = items
                    .first()
                    .and_then(Frame::bytes)
                    .map(|k| k.to_ascii_lowercase())
                    .unwrap_or_default();
                match kind.as_slice() {
                    b"message" | b"smessage" if items.len() == 3 => {
                        let payload = items.pop().and_then(|f| f.bytes().map(<[u8]>::to_vec));
                        let channel = items.pop().and_then(|f| f.bytes().map(<[u8]>::to_vec));
                        if let (Some(c), Some(p)) = (channel, payload) {
                            shared.on_message(c, p);
                        }
                    }
                    b"subscribe" | b"ssubscribe" | b"unsubscribe" | b"sunsubscribe" => {
                        let _ = confirms.send(Ok(()));
                    }
                    _ => {}
                }
            }
            Frame::Error(e) => {
                let _ = confirms.send(Err(e));
            }
            Frame::Simple(_) | Frame::Int | Frame::Bulk(_) | Frame::Array(None) => {}
        }
    }
}

impl SubConn {
    /// Opens a subscriber connection to the server at `url` (AUTH if the URL has a password).
    pub(crate) async fn connect(url: &str, sharded: bool, log: Arc<Mutex<Log>>) -> SubConn {
        let info = url
            .into_connection_info()
            .unwrap_or_else(|e| panic!("bad redis url {url}: {e}"));
        let (host, port) = match info.addr() {
            redis::ConnectionAddr::Tcp(host, port) => (host.clone(), *port),
            other => panic!("the Redisson peer speaks plain TCP only, not {other:?}"),
        };
        let stream = TcpStream::connect((host.as_str(), port))
            .await
            .unwrap_or_else(|e| panic!("connect pub/sub to {url}: {e}"));
        stream.set_nodelay(true).ok();
        let (read, mut write) = stream.into_split();
        let mut read = BufReader::new(read);
        let settings = info.redis_settings();
        if let Some(password) = settings.password() {
            let mut auth = redis::cmd("AUTH");
            if let Some(user) = settings.username() {
                auth.arg(user);
            }
            auth.arg(password);
            write.write_all(&auth.get_packed_command()).await.unwrap();
            if let Frame::Error(e) = read_frame(&mut read).await.unwrap() {
                panic!("AUTH on the pub/sub connection to {url}: {e}");
            }
        }
        let shared = Arc::new(Shared {
            wakes: Mutex::new(HashMap::new()),
            log,
        });
        let (tx, rx) = mpsc::unbounded_channel();
        let reader = tokio::spawn(reader_loop(read, shared.clone(), tx));
        SubConn {
            sharded,
            ops: tokio::sync::Mutex::new(Ops {
                write,
                confirms: rx,
            }),
            shared,
            reader,
        }
    }

    /// Sends `command channel` and waits for its confirmation.
    async fn command(ops: &mut Ops, command: &str, channel: &str) -> Result<(), String> {
        while ops.confirms.try_recv().is_ok() {}
        let packed = redis::cmd(command).arg(channel).get_packed_command();
        ops.write
            .write_all(&packed)
            .await
            .map_err(|e| e.to_string())?;
        match tokio::time::timeout(SUBSCRIPTION_TIMEOUT, ops.confirms.recv()).await {
            Ok(Some(r)) => r,
            Ok(None) => Err("pub/sub connection closed".into()),
            Err(_) => Err(format!("no reply to {command} {channel}")),
        }
    }

    /// Adds a reference to `channel`, subscribing (SUBSCRIBE or SSUBSCRIBE) on the first one;
    /// returns its wake-up state.
    pub(crate) async fn subscribe(&self, channel: &str, kind: Kind) -> Arc<Wake> {
        let mut ops = self.ops.lock().await;
        let wake = {
            let mut wakes = self.shared.wakes.lock().unwrap();
            if let Some(entry) = wakes.get_mut(channel) {
                entry.0 += 1;
                return entry.1.clone();
            }
            let wake = Arc::new(Wake::new(kind));
            wakes.insert(channel.to_string(), (1, wake.clone()));
            wake
        };
        let command = if self.sharded {
            "SSUBSCRIBE"
        } else {
            "SUBSCRIBE"
        };
        if let Err(e) = Self::command(&mut ops, command, channel).await {
            self.shared.wakes.lock().unwrap().remove(channel);
            panic!("{command} {channel}: {e}");
        }
        wake
    }

    /// Drops a reference to `channel`, unsubscribing after the last one.
    pub(crate) async fn unsubscribe(&self, channel: &str) {
        let mut ops = self.ops.lock().await;
        {
            let mut wakes = self.shared.wakes.lock().unwrap();
            let Some(entry) = wakes.get_mut(channel) else {
                return;
            };
            entry.0 -= 1;
            if entry.0 > 0 {
                return;
            }
            wakes.remove(channel);
        }
        let command = if self.sharded {
            "SUNSUBSCRIBE"
        } else {
            "UNSUBSCRIBE"
        };
        if let Err(e) = Self::command(&mut ops, command, channel).await {
            panic!("{command} {channel}: {e}");
        }
    }
}

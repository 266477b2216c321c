//! The RESP2 subscription connection, for servers and proxies without `HELLO`.
//!
//! In RESP2 a connection in subscribe mode runs nothing but (P)(UN)SUBSCRIBE and PING, and
//! its messages come as replies, not pushes: the listener gets a dedicated redis-rs
//! [`PubSub`](redis::aio::PubSub) connection instead of a connection manager with a push
//! sender. A task of its own reads the messages and hands each to the listener ([`OnPush`]) as
//! the RESP3 path would, so the listener behaves the same on both protocols.
//!
//! redis-rs does not reconnect a `PubSub`; the task does. When the connection ends it
//! reports a disconnection (the listener wakes one waiter per channel and starts its
//! resync), then connects again with backoff. A new connection has no subscriptions: the
//! resync subscribes every channel in use again, exactly as after a refused replay. While
//! there is no connection, subscribe / unsubscribe / ping wait for the next one (within the
//! caller's bound).

use std::sync::{Arc, Weak};
use std::time::Duration;

use futures::StreamExt;
use redis::aio::{PubSubSink, PubSubStream};
use redis::{PushInfo, PushKind, RedisResult, Value};
use tokio::sync::watch;

use crate::backoff::{Backoff, Retries};
use crate::error::io_timeout;

/// Longest pause between two reconnect attempts.
const MAX_BACKOFF: Duration = Duration::from_secs(1);

/// A RESP2 subscription connection that reconnects itself; see the module docs. Dropping
/// it closes the connection and stops its task.
pub(super) struct Resp2Conn {
    /// The sink of the current connection; `None` while reconnecting, closed when the task
    /// stopped.
    sink: watch::Receiver<Option<PubSubSink>>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Resp2Conn {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Where a [`Resp2Conn`] hands what it reads: the listener (held weakly: once it is gone,
/// the connection's task ends).
pub(super) trait OnPush: Send + Sync {
    /// A message, or the connection's loss (`PushKind::Disconnection`).
    fn on_push(self: Arc<Self>, push: PushInfo);
}

impl Resp2Conn {
    /// Connects to the server of `client` (which must ask for RESP2) within
    /// `connect_timeout` and starts the task that reads its messages into `shared`.
    pub(super) async fn connect(
        client: redis::Client,
        connect_timeout: Duration,
        handle: &tokio::runtime::Handle,
        shared: Weak<dyn OnPush>,
    ) -> RedisResult<Resp2Conn> {
        let (sink, stream) = open(&client, connect_timeout).await?;
        let (tx, rx) = watch::channel(Some(sink));
        let task = handle.spawn(run(client, connect_timeout, shared, stream, tx));
        Ok(Resp2Conn { sink: rx, task })
    }

    /// The sink of the current connection, waiting for a reconnect if there is none.
    async fn live_sink(&self) -> RedisResult<PubSubSink> {
        let mut rx = self.sink.clone();
        let sink = match rx.wait_for(Option::is_some).await {
            Ok(sink) => sink.clone(),
            Err(_) => None,
        };
        sink.ok_or_else(closed)
    }

    pub(super) async fn subscribe(&self, channel: &str) -> RedisResult<()> {
        self.live_sink().await?.subscribe(channel).await
    }

    pub(super) async fn unsubscribe(&self, channel: &str) -> RedisResult<()> {
        self.live_sink().await?.unsubscribe(channel).await
    }

    pub(super) async fn ping(&self) -> RedisResult<()> {
        let _: Value = self.live_sink().await?.ping().await?;
        Ok(())
    }
}

async fn open(
    client: &redis::Client,
    connect_timeout: Duration,
) -> RedisResult<(PubSubSink, PubSubStream)> {
    match tokio::time::timeout(connect_timeout, client.get_async_pubsub()).await {
        Ok(pubsub) => Ok(pubsub?.split()),
        Err(_) => Err(io_timeout(
            "connecting the subscription connection timed out",
        )),
    }
}

fn closed() -> redis::RedisError {
    redis::RedisError::from(std::io::Error::new(
        std::io::ErrorKind::BrokenPipe,
        "the subscription connection is closed",
    ))
}

/// Reads messages until the connection ends, reports the loss, reconnects; stops when the
/// listener is gone.
async fn run(
    client: redis::Client,
    connect_timeout: Duration,
    shared: Weak<dyn OnPush>,
    mut stream: PubSubStream,
    sink: watch::Sender<Option<PubSubSink>>,
) {
    loop {
        while let Some(msg) = stream.next().await {
            let Some(shared) = shared.upgrade() else {
                return;
            };
            shared.on_push(PushInfo {
                kind: PushKind::Message,
                data: vec![
                    Value::BulkString(msg.get_channel_name().as_bytes().to_vec()),
                    Value::BulkString(msg.get_payload_bytes().to_vec()),
                ],
            });
        }
        // The connection ended: commands now wait for the next one, and messages published
        // meanwhile are lost, which the listener's disconnection handling covers.
        sink.send_replace(None);
        match shared.upgrade() {
            Some(shared) => shared.on_push(PushInfo {
                kind: PushKind::Disconnection,
                data: Vec::new(),
            }),
            None => return,
        }
        let mut pauses = Retries::new(Backoff::new(Duration::from_millis(10), MAX_BACKOFF));
        loop {
            if shared.strong_count() == 0 {
                return;
            }
            match open(&client, connect_timeout).await {
                Ok((new_sink, new_stream)) => {
                    stream = new_stream;
                    sink.send_replace(Some(new_sink));
                    break;
                }
                Err(e) => {
                    tracing::debug!(error = %e, "reconnecting the subscription connection");
                    tokio::time::sleep(pauses.next()).await;
                }
            }
        }
    }
}

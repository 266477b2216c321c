//! The subscription connection: [`SubConn`] for each deployment, the push handler that feeds
//! [`Shared::on_push`], and the bound on every command sent on it.

use std::sync::Arc;

use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::cluster_async::ClusterConnection;
use redis::{PushInfo, RedisResult, Value};

use super::resp2::Resp2Conn;
use super::Shared;
use crate::error::io_timeout;

impl Shared {
    /// `config` with this listener's push handler and automatic resubscription.
    pub(super) fn manager_config(
        self: &Arc<Self>,
        config: ConnectionManagerConfig,
    ) -> ConnectionManagerConfig {
        config
            .set_push_sender(self.push_handler())
            .set_automatic_resubscription()
    }

    /// The push sender of a subscription connection: hands every push to [`Shared::on_push`]
    /// while the listener lives.
    pub(super) fn push_handler(
        self: &Arc<Self>,
    ) -> impl Fn(PushInfo) -> Result<(), ()> + Send + Sync + 'static {
        let weak = Arc::downgrade(self);
        move |push: PushInfo| {
            if let Some(shared) = weak.upgrade() {
                shared.on_push(push);
            }
            Ok(())
        }
    }

    /// `op` within the response timeout. A connection that waits out its reconnect backoff
    /// (server down, or a Sentinel master that moved away) would otherwise keep the
    /// channel's lock, and every waiter of the channel, for seconds.
    pub(super) async fn bounded(
        &self,
        op: impl std::future::Future<Output = RedisResult<()>>,
    ) -> RedisResult<()> {
        // Created before the call, so a switch while it runs is not missed.
        let switched = self.switched.notified();
        tokio::select! {
            r = tokio::time::timeout(self.op_timeout, op) => match r {
                Ok(r) => r,
                Err(_) => Err(io_timeout("subscription command timed out")),
            },
            // The connection was replaced (a Sentinel master moved): this call went to the
            // old one. The caller retries, or the switch resubscribes the channel.
            _ = switched => Err(redis::RedisError::from(std::io::Error::new(
                std::io::ErrorKind::ConnectionAborted,
                "subscription connection replaced while the command waited",
            ))),
        }
    }

    pub(super) fn set_conn(&self, conn: SubConn) {
        *self.conn.write().unwrap_or_else(|e| e.into_inner()) = Some(conn);
    }

    pub(super) fn conn(&self) -> SubConn {
        self.conn
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
            .expect("listener connection is set before use")
    }
}

/// The subscription connection of one deployment. Cheap to clone.
#[derive(Clone)]
pub(super) enum SubConn {
    /// A standalone server or the current Sentinel master.
    Single(ConnectionManager),
    /// A Redis Cluster; `true`: sharded channels (SSUBSCRIBE).
    Cluster(ClusterConnection, bool),
    /// A standalone server or Sentinel master spoken to in RESP2 (no `HELLO`): a dedicated
    /// pub/sub connection.
    Resp2(Arc<Resp2Conn>),
}

impl SubConn {
    pub(super) async fn subscribe(&mut self, channel: &str) -> RedisResult<()> {
        match self {
            SubConn::Single(c) => c.subscribe(channel).await,
            SubConn::Resp2(c) => c.subscribe(channel).await,
            SubConn::Cluster(c, true) => c.ssubscribe(channel).await,
            SubConn::Cluster(c, false) => c.subscribe(channel).await,
        }
    }

    pub(super) async fn unsubscribe(&mut self, channel: &str) -> RedisResult<()> {
        match self {
            SubConn::Single(c) => c.unsubscribe(channel).await,
            SubConn::Resp2(c) => c.unsubscribe(channel).await,
            SubConn::Cluster(c, true) => c.sunsubscribe(channel).await,
            SubConn::Cluster(c, false) => c.unsubscribe(channel).await,
        }
    }

    /// Completes once the connection answers again (for a cluster: every node).
    pub(super) async fn ping(&mut self) -> RedisResult<()> {
        let _: Value = match self {
            SubConn::Single(c) => redis::cmd("PING").query_async(c).await?,
            SubConn::Cluster(c, _) => redis::cmd("PING").query_async(c).await?,
            SubConn::Resp2(c) => return c.ping().await,
        };
        Ok(())
    }
}

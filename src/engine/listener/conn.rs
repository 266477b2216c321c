//! The subscription connection: [`SubConn`] for each deployment.

use std::sync::Arc;

use redis::aio::ConnectionManager;
use redis::cluster_async::ClusterConnection;
use redis::{RedisResult, Value};

use super::resp2::Resp2Conn;

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

//! Connecting the listener's subscription connection: a [`SubConn`] for one server in the
//! protocol its client asks for, wired to [`Shared::on_push`], and the bound on every
//! command sent on it.

use std::sync::{Arc, Weak};

use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::{PushInfo, RedisResult};

use super::conn::SubConn;
use super::resp2::{OnPush, Resp2Conn};
use super::Shared;
use crate::error::{io_timeout, Result};

impl OnPush for Shared {
    fn on_push(self: Arc<Self>, push: PushInfo) {
        Shared::on_push(&self, push);
    }
}

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

    /// The subscription connection to one server, in the protocol `client` asks for.
    pub(super) async fn connect_single(
        self: &Arc<Self>,
        client: redis::Client,
        config: ConnectionManagerConfig,
    ) -> Result<SubConn> {
        let resp2 = client.get_connection_info().redis_settings().protocol()
            == redis::ProtocolVersion::RESP2;
        Ok(if resp2 {
            let conn = Resp2Conn::connect(
                client,
                self.connect_timeout,
                &self.handle,
                Arc::downgrade(self) as Weak<dyn OnPush>,
            )
            .await?;
            SubConn::Resp2(Arc::new(conn))
        } else {
            let conn =
                ConnectionManager::new_with_config(client, self.manager_config(config)).await?;
            SubConn::Single(conn)
        })
    }
}

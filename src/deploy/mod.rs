//! Deployments: where the command and subscription connections point, and how they follow
//! failovers.
//!
//! * **Standalone**: one redis-rs [`ConnectionManager`] for commands (reconnects by itself).
//! * **Cluster**: a redis-rs [`ClusterConnection`], which routes each script call to the
//!   master owning its keys' slot (every key of one lock shares a hash tag, so one slot) and
//!   follows MOVED / ASK redirections and slot-map refreshes.
//! * **Sentinel**: a [`SentinelMaster`]: the master is resolved through the sentinels
//!   (`SENTINEL get-master-addr-by-name`, then `ROLE` on the answer), and re-resolved when a
//!   sentinel announces `+switch-master`, when the server answers `READONLY` (a demoted
//!   master) and after connection errors. A new master gets a new connection manager;
//!   callers holding the old one finish their call on it and the next call uses the new one.
//!   The subscription listener follows through a [`watch`](tokio::sync::watch) channel.
//!
//! [`Commands`] is the one command-connection type the rest of the crate uses: it implements
//! redis-rs's [`ConnectionLike`], so scripts and plain commands run on any deployment alike.

mod cluster;
pub(crate) mod probe;
mod sentinel;

use std::sync::Arc;

use futures::FutureExt;
use redis::aio::{ConnectionLike, ConnectionManager};
use redis::cluster_async::ClusterConnection;
use redis::{Cmd, Pipeline, RedisFuture, Value};

pub(crate) use cluster::cluster_client;
use sentinel::Retry;
pub(crate) use sentinel::{SentinelMaster, SentinelSettings};

/// The command connection of a client, for any deployment. Cheap to clone.
#[derive(Clone)]
pub(crate) enum Commands {
    /// A standalone server.
    Single(ConnectionManager),
    /// A Redis Cluster.
    Cluster(ClusterConnection),
    /// The current master of a Sentinel-monitored set.
    Sentinel(Arc<SentinelMaster>),
}

impl Commands {
    /// Whether commands go to a Redis Cluster (scripts must then keep each call's keys in
    /// one slot).
    pub(crate) fn is_cluster(&self) -> bool {
        matches!(self, Commands::Cluster(_))
    }
}

impl ConnectionLike for Commands {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        match self {
            Commands::Single(c) => c.req_packed_command(cmd),
            Commands::Cluster(c) => c.req_packed_command(cmd),
            Commands::Sentinel(m) => {
                let m = m.clone();
                async move {
                    let reply = m
                        .on_current(|mut c| async move { c.req_packed_command(cmd).await })
                        .await;
                    match m.after_error(reply.as_ref().err()).await {
                        // READONLY: the command did not run; the master moved and the
                        // refresh found the new one, so one more try is safe.
                        Retry::Yes => m.conn().req_packed_command(cmd).await,
                        Retry::No => reply,
                    }
                }
                .boxed()
            }
        }
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        match self {
            Commands::Single(c) => c.req_packed_commands(pipeline, offset, count),
            Commands::Cluster(c) => c.req_packed_commands(pipeline, offset, count),
            Commands::Sentinel(m) => {
                let m = m.clone();
                async move {
                    let reply = m
                        .on_current(|mut c| async move {
                            c.req_packed_commands(pipeline, offset, count).await
                        })
                        .await;
                    // A READONLY inside a pipeline shows up per command, not here; only
                    // connection errors trigger a refresh (never a retry: a pipeline may
                    // have partly run).
                    let _ = m.after_error(reply.as_ref().err()).await;
                    reply
                }
                .boxed()
            }
        }
    }

    fn get_db(&self) -> i64 {
        match self {
            Commands::Single(c) => c.get_db(),
            Commands::Cluster(c) => c.get_db(),
            Commands::Sentinel(m) => m.conn().get_db(),
        }
    }
}

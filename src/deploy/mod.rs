//! Deployments: how a client connects to Redis, where its command and subscription
//! connections point, and how they follow the servers afterwards.
//!
//! At connect, each deployment probes a server with one plain connection ([`probe`]: fails
//! fast on a wrong address or password, warns about eviction, preloads the scripts except on
//! a cluster node), opens the command connection, and connects the subscription listener
//! last. After that:
//!
//! * **Standalone** ([`standalone`]): one redis-rs [`ConnectionManager`] for commands; it
//!   reconnects by itself. Unlock messages use `PUBLISH`.
//! * **Cluster** ([`cluster`]): the first seed that answers the probe tells the cluster's
//!   version; commands go through a redis-rs [`ClusterConnection`], which routes each script
//!   call to the master owning its keys' slot (every key of one lock shares a hash tag, so
//!   one slot). redis-rs sends each command once (`retries(0)`: it would resend one whose
//!   reply was lost, running a script twice); [`cluster`] follows MOVED / ASK redirections
//!   and failover states, which prove the command did not run, and redis-rs refreshes its
//!   slot map. Unlock messages use `SPUBLISH` (sharded pub/sub) on Redis 7, else `PUBLISH`.
//!   The scripts are then loaded on every node, best effort.
//! * **Sentinel** ([`sentinel`]): a [`SentinelMaster`]: the master is resolved through the
//!   sentinels (every sentinel asked, the newest configuration epoch wins, then `ROLE` on
//!   the answer) and connected before it is probed. A follower task asks again every check
//!   interval and at once on `+switch-master`, `READONLY`, a timeout or a lost connection,
//!   and a command waits for a check whenever the master has not been confirmed lately.
//!   Silence is no confirmation: when no sentinel answers, nothing is sent past the trust
//!   window (a retryable error instead), so watchdog holds are no longer renewed and are
//!   told lost.
//!   A new master gets a new connection manager; callers holding the old one finish their
//!   call on it and the next call uses the new one. The subscription listener follows
//!   through a [`watch`] channel. Unlock messages use `PUBLISH`.
//!
//! Then [`connect`](fn@connect) checks that the user's ACL allows what lockwise runs
//! ([`acl`]: fails with `Error::Permission` naming what is missing). With replica sync
//! configured, it finally checks that the server supports `WAIT`
//! (if not: a warning, and the client runs without it).
//!
//! [`CommandConn`] is the one command-connection type the rest of the crate uses: it implements
//! redis-rs's [`ConnectionLike`], so scripts and plain commands run on any deployment alike.
//!
//! This module knows nothing of lock kinds or the `Client`: the builder hands
//! [`connect`](fn@connect) its validated [`Settings`], and the engine's subscription listener
//! comes in through the [`Subscriber`] trait.
//!
//! # Layout
//! - this file: what the other files share: [`CommandConn`] (which sends through the
//!   read-only gate, the cluster's resends or the Sentinel master's gate), where the servers
//!   are ([`Deployment`]), the [`Subscriber`] trait and the connect options.
//! - [`connect`](mod@connect): [`connect`](fn@connect), with its [`Settings`] and what it
//!   returns ([`Connected`]).
//! - [`standalone`], [`cluster`] (with its resends, `cluster/send.rs`), [`sentinel`] (with
//!   the master and its follower): each deployment's own connect.
//! - [`probe`], [`protocol`], [`acl`]: the checks at connect; RESP3 or RESP2.
//! - [`read_only`]: the gate of a read-only client.

mod acl;
mod cluster;
mod connect;
mod probe;
mod protocol;
mod read_only;
mod sentinel;
mod standalone;

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use futures::FutureExt;
use redis::aio::{ConnectionLike, ConnectionManager, ConnectionManagerConfig};
use redis::cluster_async::ClusterConnection;
use redis::{
    AsyncConnectionConfig, Cmd, ConnectionInfo, Pipeline, ProtocolVersion, RedisFuture, Value,
};
use tokio::sync::watch;

use crate::error::Result;

pub(crate) use cluster::cluster_client;
pub(crate) use connect::{connect, Connected, Settings};
pub(crate) use sentinel::{MasterAuth, SentinelMaster};
use sentinel::{Retry, Verdict};

/// The command connection of a client, for any deployment. Cheap to clone.
#[derive(Clone)]
pub(crate) struct CommandConn {
    pub(crate) route: Route,
    /// A read-only client's: only reads are sent ([`read_only`]).
    read_only: bool,
    /// Cluster only: how long after its first send a command the Cluster refused unrun (a
    /// redirect, a failover state) may still be sent again ([`cluster::send`](fn@cluster::send)).
    resend_within: Duration,
}

/// Where a [`CommandConn`]'s commands go.
#[derive(Clone)]
pub(crate) enum Route {
    /// A standalone server.
    Single(ConnectionManager),
    /// A Redis Cluster.
    Cluster(ClusterConnection),
    /// The current master of a Sentinel-monitored set.
    Sentinel(Arc<SentinelMaster>),
}

impl CommandConn {
    fn new(route: Route) -> CommandConn {
        CommandConn {
            route,
            read_only: false,
            resend_within: Duration::ZERO,
        }
    }

    /// Whether commands go to a Redis Cluster (scripts must then keep each call's keys in
    /// one slot).
    pub(crate) fn is_cluster(&self) -> bool {
        matches!(self.route, Route::Cluster(_))
    }
}

impl ConnectionLike for CommandConn {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        if self.read_only {
            if let Err(e) = read_only::gate(cmd) {
                return async move { Err(e) }.boxed();
            }
        }
        match &mut self.route {
            Route::Single(c) => c.req_packed_command(cmd),
            // Never resent after it may have run; redirects are followed here (`cluster`).
            Route::Cluster(c) => cluster::send(c, cmd, self.resend_within).boxed(),
            Route::Sentinel(m) => {
                let m = m.clone();
                async move {
                    let (sent_to, reply) = m
                        .on_current(|mut c| async move { c.req_packed_command(cmd).await })
                        .await;
                    match m.after(&sent_to, Verdict::of(&reply)).await {
                        // READONLY: the command did not run; the master moved and the
                        // check found the new one, so one more try is safe.
                        Retry::Yes => {
                            m.on_current(|mut c| async move { c.req_packed_command(cmd).await })
                                .await
                                .1
                        }
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
        if self.read_only {
            if let Err(e) = pipeline.cmd_iter().try_for_each(read_only::gate) {
                return async move { Err(e) }.boxed();
            }
        }
        match &mut self.route {
            Route::Single(c) => c.req_packed_commands(pipeline, offset, count),
            Route::Cluster(c) => {
                cluster::send_pipeline(c, pipeline, offset, count, self.resend_within).boxed()
            }
            Route::Sentinel(m) => {
                let m = m.clone();
                async move {
                    let run = |mut c: ConnectionManager| async move {
                        c.req_packed_commands(pipeline, offset, count).await
                    };
                    let (sent_to, reply) = m.on_current(run).await;
                    // Sent again only if nothing in it ran (every reply an error, the
                    // first READONLY): a pipeline may have partly run.
                    let (verdict, nothing_ran) = Verdict::of_pipeline(&reply);
                    match m.after(&sent_to, verdict).await {
                        Retry::Yes if nothing_ran => m.on_current(run).await.1,
                        _ => reply,
                    }
                }
                .boxed()
            }
        }
    }

    fn get_db(&self) -> i64 {
        match &self.route {
            Route::Single(c) => c.get_db(),
            Route::Cluster(c) => c.get_db(),
            Route::Sentinel(m) => m.conn().get_db(),
        }
    }
}

/// Where the servers are.
#[derive(Clone, Debug)]
pub(crate) enum Deployment {
    Standalone {
        target: Target,
    },
    Cluster {
        seeds: Vec<String>,
    },
    Sentinel {
        sentinels: Vec<String>,
        master_name: String,
    },
}

/// Where a standalone server is: a URL, parsed at connect, or ready connection info (from
/// a `redis::Client` or built by the application).
#[derive(Clone, Debug)]
pub(crate) enum Target {
    Url(String),
    Info(Box<ConnectionInfo>),
}

/// The subscription listener as the deployments connect it: they say where and when, the
/// engine's listener does the rest. Implemented next to the `Client`, which knows both.
pub(crate) trait Subscriber: Sized {
    /// Connects to a standalone server or a Sentinel master, in the protocol `client` asks
    /// for.
    fn connect(
        client: redis::Client,
        config: ConnectionManagerConfig,
        connect_timeout: Duration,
        response_timeout: Duration,
        self_id: String,
    ) -> impl Future<Output = Result<Self>> + Send;

    /// Connects to a Redis Cluster; `sharded` selects SSUBSCRIBE over SUBSCRIBE.
    fn connect_cluster(
        seeds: &[ConnectionInfo],
        connect_timeout: Duration,
        response_timeout: Duration,
        sharded: bool,
        self_id: String,
    ) -> impl Future<Output = Result<Self>> + Send;

    /// Moves to each master sent on `masters` (Sentinel failover following).
    fn follow(&self, masters: watch::Receiver<redis::Client>, config: ConnectionManagerConfig);
}

/// The protocol the builder asks for.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) enum Protocol {
    /// RESP3, or RESP2 if the server refuses `HELLO`.
    #[default]
    Auto,
    /// RESP2 only.
    Resp2,
}

impl Protocol {
    /// The protocol to try first.
    pub(super) fn first(self) -> ProtocolVersion {
        match self {
            Protocol::Auto => ProtocolVersion::RESP3,
            Protocol::Resp2 => ProtocolVersion::RESP2,
        }
    }
}

/// Connection settings every deployment's connect uses besides its addresses.
struct Options {
    connect_timeout: Duration,
    response_timeout: Duration,
    /// For the probe: one plain connection, no reconnect.
    probe: AsyncConnectionConfig,
    /// For the connection managers (commands, subscriptions): reconnect with backoff.
    manager: ConnectionManagerConfig,
    self_id: String,
    protocol: Protocol,
    sentinel_check_interval: Duration,
    /// Bounds a Sentinel client's trust window.
    watchdog_timeout: Duration,
    read_only: bool,
}

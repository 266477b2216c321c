//! Connecting a client: [`connect`] runs the deployment's own connect (probe, command
//! connection, subscription listener), then the checks every deployment shares: the
//! permission check ([`acl`]) and replica sync's `WAIT`.

use std::time::Duration;

use redis::aio::ConnectionManagerConfig;
use redis::AsyncConnectionConfig;

use super::{acl, cluster, probe, sentinel, standalone};
use super::{CommandConn, Deployment, MasterAuth, Options, Protocol, Subscriber};
use crate::error::Result;
use crate::wire::scripts::ReplicaSync;

/// The builder's settings, checked: everything [`connect`] needs.
pub(crate) struct Settings {
    pub(crate) deployment: Deployment,
    /// Credentials and database of a Sentinel master; empty for the other deployments.
    pub(crate) master: MasterAuth,
    pub(crate) connect_timeout: Duration,
    pub(crate) response_timeout: Duration,
    /// Replica sync as configured; [`connect`] drops it if the server has no `WAIT`.
    pub(crate) replica_sync: Option<ReplicaSync>,
    /// The client's id, for the subscription listener.
    pub(crate) self_id: String,
    /// The key and channel prefix, for the permission check.
    pub(crate) namespace: String,
    /// Whose key names the client writes: the permission check asks for the commands of
    /// that layout's scripts.
    pub(crate) key_layout: crate::KeyLayout,
    /// RESP3 with a RESP2 fallback, or RESP2 only.
    pub(crate) protocol: Protocol,
    /// How often a Sentinel client asks the sentinels for the master unprompted.
    pub(crate) sentinel_check_interval: Duration,
    /// The client's watchdog timeout: a Sentinel client trusts a confirmation of its master
    /// for at most a third of it ([`sentinel`], "The gate").
    pub(crate) watchdog_timeout: Duration,
    /// A read-only client: reads only ([`read_only`](super::read_only)), no script preload, and the
    /// permission check asks for the reads alone.
    pub(crate) read_only: bool,
}

/// What a connected client is made of.
pub(crate) struct Connected<L> {
    /// The command connection.
    pub(crate) commands: CommandConn,
    /// The command scripts publish unlock messages with (`"spublish"` or `"publish"`).
    pub(crate) publish: &'static str,
    /// The subscription listener, connected (and following the master, on Sentinel).
    pub(crate) listener: L,
    /// Replica sync, if configured and supported by the server.
    pub(crate) replica_sync: Option<ReplicaSync>,
}

/// Connects the command connection and the subscription listener `L` of the deployment in
/// `settings`, probing the server first, and checks replica sync.
///
/// # Errors
/// [`Error::InvalidArgument`](crate::Error::InvalidArgument) for a bad URL or an empty seed
/// or sentinel list; [`Error::Redis`](crate::Error::Redis) when no server is reachable
/// within the connect timeout or one refuses the connection;
/// [`Error::UnexpectedReply`](crate::Error::UnexpectedReply) when the sentinels do not know
/// the master name or name a server that is not a master;
/// [`Error::Permission`](crate::Error::Permission) when the user's ACL refuses a command,
/// key or channel lockwise needs.
///
/// # Cancel safety
/// Dropping the future abandons the attempt; connections made so far are closed.
pub(crate) async fn connect<L: Subscriber>(settings: Settings) -> Result<Connected<L>> {
    let options = Options {
        connect_timeout: settings.connect_timeout,
        response_timeout: settings.response_timeout,
        probe: AsyncConnectionConfig::new()
            .set_connection_timeout(Some(settings.connect_timeout))
            .set_response_timeout(Some(settings.response_timeout)),
        manager: ConnectionManagerConfig::new()
            .set_connection_timeout(Some(settings.connect_timeout))
            .set_response_timeout(Some(settings.response_timeout))
            .set_number_of_retries(6)
            .set_max_delay(Duration::from_secs(2)),
        self_id: settings.self_id,
        protocol: settings.protocol,
        sentinel_check_interval: settings.sentinel_check_interval,
        watchdog_timeout: settings.watchdog_timeout,
        read_only: settings.read_only,
    };
    let (mut commands, listener, publish) = match &settings.deployment {
        Deployment::Standalone { target } => standalone::connect(target, &options).await?,
        Deployment::Cluster { seeds } => cluster::connect(seeds, &options).await?,
        Deployment::Sentinel {
            sentinels,
            master_name,
        } => sentinel::connect(sentinels, master_name, &settings.master, &options).await?,
    };
    commands.read_only = settings.read_only;
    if commands.is_cluster() && !settings.read_only {
        // Standalone and Sentinel preload on the probe connection; a cluster loads the
        // scripts on every node (best effort: calls fall back to EVAL anyway).
        if let Err(e) = crate::wire::scripts::preload(&mut commands).await {
            tracing::debug!(error = %e, "script preload on the cluster failed");
        }
    }
    // Refuse now what the ACL would refuse at the first contended wait or unlock.
    acl::check(
        &mut commands,
        &settings.namespace,
        publish,
        settings.read_only,
        settings.key_layout,
    )
    .await?;
    let replica_sync = match settings.replica_sync {
        Some(sync) => probe::check_wait_support(&mut commands, sync).await,
        None => None,
    };
    Ok(Connected {
        commands,
        publish,
        listener,
        replica_sync,
    })
}

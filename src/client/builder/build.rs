//! [`ClientBuilder::build`]: the settings' checks, and the assembly of a [`Client`] from
//! the connections `deploy` makes (the watchdog, presence, the engine's shared state).

use std::sync::Arc;
use std::time::Duration;

use redis::aio::ConnectionManagerConfig;
use redis::ConnectionInfo;
use uuid::Uuid;

use super::ClientBuilder;
use crate::client::{Client, Ownership, DEFAULT_SENTINEL_CHECK_INTERVAL};
use crate::deploy::{self, Connected, Deployment, Settings, Subscriber};
use crate::engine::listener::Listener;
use crate::engine::registry::HoldRegistry;
use crate::engine::{Core, Owner};
use crate::error::{Error, Result};
use crate::wire::keys::{check_millis, check_namespace};
use crate::wire::scripts::ReplicaSync;

impl ClientBuilder {
    /// Checks the settings, connects (command and subscription connections, RESP3 or RESP2,
    /// see [`force_resp2`](Self::force_resp2)) and starts
    /// the watchdog task. A Cluster client discovers the topology from the seeds; a Sentinel
    /// client asks the sentinels for the master, checks its `ROLE`, and starts watching for
    /// `+switch-master`.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`](crate::Error::InvalidArgument) for a bad setting, URL, empty seed or sentinel list, empty
    /// master name, master credentials on a non-Sentinel builder, a bad `replica_sync`, a
    /// `rediss://` URL without a TLS feature, or RESP2 on a Cluster;
    /// [`Error::Redis`](crate::Error::Redis) when no server (seed, sentinel, master) is reachable within the
    /// connect timeout or one refuses the connection; [`Error::UnexpectedReply`](crate::Error::UnexpectedReply) when the
    /// sentinels do not know the master name or name a server that is not a master;
    /// [`Error::Permission`](crate::Error::Permission) when the Redis user's ACL refuses a command lockwise runs, or
    /// the keys or channels `<namespace>:*` ([`guide::deployments`](crate::guide::deployments), "ACL").
    ///
    /// # Cancel safety
    /// Dropping the future abandons the attempt; connections made so far are closed.
    ///
    /// # Example
    ///
    /// ```rust,no_run
    /// # async fn demo() -> lockwise::Result<()> {
    /// match lockwise::Client::builder("redis://127.0.0.1/").build().await {
    ///     Ok(client) => println!("connected as {}", client.id()),
    ///     Err(e) if e.is_permission() => eprintln!("the ACL refuses what lockwise needs: {e}"),
    ///     Err(e) => return Err(e),
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn build(self) -> Result<Client> {
        check_namespace(&self.namespace)?;
        let watchdog_ms = check_millis("watchdog_timeout", self.watchdog_timeout)?;
        check_millis("response_timeout", self.response_timeout)?;
        check_millis("connect_timeout", self.connect_timeout)?;
        let sentinel_check_interval = self
            .sentinel_check_interval
            .unwrap_or(DEFAULT_SENTINEL_CHECK_INTERVAL);
        check_millis("sentinel_check_interval", sentinel_check_interval)?;
        let replica_sync = self.check_replica_sync()?;
        self.check_deployment()?;
        let chosen = self.overtake_chosen && self.overtake_limit.is_some();
        crate::layout::check_overtake_limit(self.key_layout, chosen)?;
        let overtake_limit = self
            .overtake_limit
            .filter(|_| crate::layout::has_claims(self.key_layout));

        let id = Uuid::new_v4();
        let id_str = id.to_string();
        let Connected {
            commands: conn,
            publish,
            listener,
            replica_sync,
        } = deploy::connect::<Listener>(Settings {
            deployment: self.deployment,
            master: self.master,
            connect_timeout: self.connect_timeout,
            response_timeout: self.response_timeout,
            replica_sync,
            self_id: id_str.clone(),
            namespace: self.namespace.clone(),
            key_layout: self.key_layout,
            protocol: self.protocol,
            sentinel_check_interval,
            watchdog_timeout: self.watchdog_timeout,
            read_only: self.read_only,
        })
        .await?;

        let holds = HoldRegistry::start(conn.clone(), self.watchdog_timeout);
        let presence = crate::engine::presence::Presence::start(
            conn.clone(),
            &self.namespace,
            // A read-only client holds nothing, so it has nothing to announce.
            (!self.read_only).then_some(id_str.as_str()),
            self.watchdog_timeout,
            holds.shutdown_token(),
        );
        presence.write_now(&conn).await;
        tracing::debug!(client = %id, namespace = %self.namespace, "lockwise client connected");
        let batcher = crate::engine::batch::Batcher::start(
            conn.clone(),
            publish,
            id_str.clone(),
            tokio::runtime::Handle::current(),
        );
        let core = Arc::new(Core {
            id,
            id_str,
            namespace: self.namespace,
            conn,
            batcher,
            publish,
            replica_sync,
            listener,
            holds,
            presence,
            watchdog_timeout: self.watchdog_timeout,
            watchdog_ms,
            overtake_limit,
            layout: self.key_layout,
            failover_retry: self.failover_retry,
            response_timeout: self.response_timeout,
            default_owner: match self.ownership {
                Ownership::Task => Owner::Task,
                Ownership::PerHold => Owner::PerHold,
            },
            handle: tokio::runtime::Handle::current(),
            cleanups: crate::engine::tracked::Cleanups::new(tokio::runtime::Handle::current()),
            closed: tokio_util::sync::CancellationToken::new(),
            permits: Default::default(),
            metrics: crate::engine::observe::Metrics::new(self.metrics_lock_names),
        });
        Ok(Client::from_core(core))
    }

    /// Settings that apply to one kind of deployment only.
    fn check_deployment(&self) -> Result<()> {
        match &self.deployment {
            Deployment::Sentinel { master_name, .. } => {
                if master_name.is_empty() {
                    return Err(Error::invalid("master_name", "must not be empty"));
                }
            }
            Deployment::Standalone { .. } | Deployment::Cluster { .. } => {
                if self.sentinel_check_interval.is_some() {
                    return Err(Error::invalid(
                        "sentinel_check_interval",
                        "applies to Sentinel deployments only",
                    ));
                }
                let m = &self.master;
                if m.username.is_some() || m.password.is_some() || m.db.is_some() {
                    return Err(Error::invalid(
                        "master_password",
                        "master credentials and database apply to Sentinel deployments only \
                         (put them in the URL otherwise)",
                    ));
                }
            }
        }
        Ok(())
    }

    fn check_replica_sync(&self) -> Result<Option<ReplicaSync>> {
        let Some((replicas, timeout)) = self.replica_sync else {
            return Ok(None);
        };
        if replicas == 0 {
            return Err(Error::invalid(
                "replica_sync",
                "at least one replica must acknowledge (0 would not wait for anything)",
            ));
        }
        let timeout_ms = check_millis("replica_sync timeout", timeout)?;
        if timeout >= self.response_timeout {
            return Err(Error::invalid(
                "replica_sync",
                format!(
                    "the sync timeout ({timeout:?}) must be below the response timeout ({:?}), \
                     or every lagging sync would look like a lost reply",
                    self.response_timeout
                ),
            ));
        }
        Ok(Some(ReplicaSync {
            replicas,
            timeout_ms,
        }))
    }
}

/// The engine's listener is the subscription side the deployments connect.
impl Subscriber for Listener {
    async fn connect(
        client: redis::Client,
        config: ConnectionManagerConfig,
        connect_timeout: Duration,
        response_timeout: Duration,
        self_id: String,
    ) -> Result<Listener> {
        Listener::connect(client, config, connect_timeout, response_timeout, self_id).await
    }

    async fn connect_cluster(
        seeds: &[ConnectionInfo],
        connect_timeout: Duration,
        response_timeout: Duration,
        sharded: bool,
        self_id: String,
    ) -> Result<Listener> {
        Listener::connect_cluster(seeds, connect_timeout, response_timeout, sharded, self_id).await
    }

    fn follow(
        &self,
        masters: tokio::sync::watch::Receiver<redis::Client>,
        config: ConnectionManagerConfig,
    ) {
        Listener::follow(self, masters, config);
    }
}

//! [`Core`]: the per-client state every lock kind works through.

use std::time::Duration;

use uuid::Uuid;

use super::listener::Listener;
use super::registry::HoldRegistry;
use crate::deploy::CommandConn;
use crate::wire::scripts::ReplicaSync;

/// State shared by the client, its lock handles and guards.
pub(crate) struct Core {
    pub(crate) id: Uuid,
    /// `id` as text: the owner prefix and the unlock message payload.
    pub(crate) id_str: String,
    pub(crate) namespace: String,
    /// The command connection (standalone, cluster or the current Sentinel master).
    pub(crate) conn: CommandConn,
    /// The command scripts publish unlock messages with: `"spublish"` on a cluster with
    /// sharded pub/sub (Redis 7), else `"publish"`.
    pub(crate) publish: &'static str,
    /// `WAIT` after each lock write, if configured and supported by the server.
    pub(crate) replica_sync: Option<ReplicaSync>,
    /// Batches the uncontended lock and unlock calls that queue on `conn` ([`batch`](super::batch)).
    pub(crate) batcher: std::sync::Arc<super::batch::Batcher>,
    pub(crate) listener: Listener,
    pub(crate) holds: HoldRegistry,
    /// This client's presence keys (its own id, its `RedLockSet`s' ids).
    pub(crate) presence: super::presence::Presence,
    pub(crate) watchdog_timeout: Duration,
    pub(crate) watchdog_ms: u64,
    /// How long a waiter may be overtaken before it claims the lock (`None`: never); see
    /// [`claim`](super::claim).
    pub(crate) overtake_limit: Option<std::time::Duration>,
    /// Whose key names the client writes ([`ClientBuilder::key_layout`](crate::ClientBuilder::key_layout)).
    pub(crate) layout: crate::KeyLayout,
    /// Whose holds a new handle's acquires take ([`ClientBuilder::ownership`](crate::ClientBuilder::ownership)).
    pub(crate) default_owner: super::Owner,
    /// How long a waiting acquire or an unlock retries through a failover before it returns
    /// the error (`ClientBuilder::failover_retry`).
    pub(crate) failover_retry: Duration,
    /// How long one command may wait for its reply (`ClientBuilder::response_timeout`): a
    /// call with a wait budget returns within that budget plus this.
    pub(crate) response_timeout: Duration,
    pub(crate) handle: tokio::runtime::Handle,
    /// Background clean-ups (releases of dropped guards, undos, leaves), which a close
    /// waits for.
    pub(crate) cleanups: super::tracked::Cleanups,
    /// Cancelled when the client is closed (`Client::shutdown`): its holds and permits were
    /// released, so guards alive then send nothing.
    pub(crate) closed: tokio_util::sync::CancellationToken,
    /// The live permit guards of the semaphores, to give back on close.
    pub(crate) permits: super::tracked::Permits,
    /// Metric handles of the hot path, registered on first use, and whether lock names
    /// label them (`metrics_lock_names`).
    pub(crate) metrics: super::observe::Metrics,
}

//! [`ClientBuilder`]: a [`Client`](crate::Client)'s settings, one method each. Their checks,
//! and the assembly of its parts (connections from `deploy`, the watchdog, presence) once
//! they are connected, are in [`build`].

mod build;
mod start;

use std::time::Duration;

use super::{
    Ownership, DEFAULT_CONNECT_TIMEOUT, DEFAULT_FAILOVER_RETRY, DEFAULT_NAMESPACE,
    DEFAULT_OVERTAKE_LIMIT, DEFAULT_RESPONSE_TIMEOUT, DEFAULT_WATCHDOG_TIMEOUT,
};
use crate::deploy::{Deployment, MasterAuth, Protocol};
use crate::KeyLayout;

/// Settings for a [`Client`](crate::Client); from [`Client::builder`](crate::Client::builder),
/// [`Client::cluster_builder`](crate::Client::cluster_builder) or
/// [`Client::sentinel_builder`](crate::Client::sentinel_builder).
///
/// # Example
///
/// ```rust,no_run
/// use std::time::Duration;
///
/// # async fn demo() -> lockwise::Result<()> {
/// let client = lockwise::Client::builder("redis://127.0.0.1:6379/0")
///     .namespace("billing")
///     .watchdog_timeout(Duration::from_secs(10))
///     .response_timeout(Duration::from_millis(500))
///     .build()
///     .await?;
/// // ... use the client ...
/// client.shutdown(Duration::from_secs(5)).await;
/// # Ok(()) }
/// ```
#[derive(Clone)]
#[must_use = "a builder does nothing until .build().await"]
pub struct ClientBuilder {
    deployment: Deployment,
    watchdog_timeout: Duration,
    response_timeout: Duration,
    connect_timeout: Duration,
    namespace: String,
    master: MasterAuth,
    replica_sync: Option<(u32, Duration)>,
    protocol: Protocol,
    metrics_lock_names: bool,
    overtake_limit: Option<Duration>,
    /// Whether `overtake_limit` was called (a Redisson-layout client refuses a limit then).
    overtake_chosen: bool,
    key_layout: KeyLayout,
    sentinel_check_interval: Option<Duration>,
    failover_retry: Duration,
    ownership: Ownership,
    read_only: bool,
}

impl std::fmt::Debug for ClientBuilder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // URLs may carry passwords: show the deployment kind and sizes only.
        let deployment = match &self.deployment {
            Deployment::Standalone { .. } => "standalone".to_string(),
            Deployment::Cluster { seeds } => format!("cluster ({} seeds)", seeds.len()),
            Deployment::Sentinel {
                sentinels,
                master_name,
            } => format!("sentinel `{master_name}` ({} sentinels)", sentinels.len()),
        };
        f.debug_struct("ClientBuilder")
            .field("deployment", &deployment)
            .field("watchdog_timeout", &self.watchdog_timeout)
            .field("response_timeout", &self.response_timeout)
            .field("connect_timeout", &self.connect_timeout)
            .field("namespace", &self.namespace)
            .field("replica_sync", &self.replica_sync)
            .field("force_resp2", &(self.protocol == Protocol::Resp2))
            .field("metrics_lock_names", &self.metrics_lock_names)
            .field("overtake_limit", &self.overtake_limit)
            .field("key_layout", &self.key_layout)
            .field("sentinel_check_interval", &self.sentinel_check_interval)
            .field("failover_retry", &self.failover_retry)
            .field("ownership", &self.ownership)
            .field("read_only", &self.read_only)
            .finish_non_exhaustive()
    }
}

impl ClientBuilder {
    pub(super) fn new(deployment: Deployment) -> ClientBuilder {
        ClientBuilder {
            deployment,
            watchdog_timeout: DEFAULT_WATCHDOG_TIMEOUT,
            response_timeout: DEFAULT_RESPONSE_TIMEOUT,
            connect_timeout: DEFAULT_CONNECT_TIMEOUT,
            namespace: DEFAULT_NAMESPACE.to_string(),
            master: MasterAuth::default(),
            replica_sync: None,
            protocol: Protocol::Auto,
            metrics_lock_names: false,
            overtake_limit: Some(DEFAULT_OVERTAKE_LIMIT),
            overtake_chosen: false,
            key_layout: KeyLayout::Lockwise,
            sentinel_check_interval: None,
            failover_retry: DEFAULT_FAILOVER_RETRY,
            ownership: Ownership::Task,
            read_only: false,
        }
    }

    /// Whose holds the acquires of this client's new lock handles take: the calling task's
    /// ([`Ownership::Task`], the default: a task re-enters what it holds) or each
    /// acquire's own ([`Ownership::PerHold`]: never reentrant). Every handle can still
    /// change it for itself (`non_reentrant()`, `reentrant()`, `with_owner(id)`).
    ///
    /// A web service should choose `PerHold`: hyper and axum serve every request of one
    /// HTTP/1.1 keep-alive connection in one task, so with task ownership a guard handed to
    /// a spawned job lets the *next request on that connection* re-enter the lock instead
    /// of waiting, and tokio may reuse an ended task's id.
    ///
    /// ```no_run
    /// # async fn demo() -> lockwise::Result<()> {
    /// let client = lockwise::Client::builder("redis://127.0.0.1/")
    ///     .ownership(lockwise::Ownership::PerHold)
    ///     .build()
    ///     .await?;
    /// assert!(!client.lock("order:1").is_reentrant());
    /// # Ok(()) }
    /// ```
    pub fn ownership(mut self, ownership: Ownership) -> Self {
        self.ownership = ownership;
        self
    }

    /// How long an acquire that waits, and an unlock, keep trying through a failover before
    /// they return the error. Default [`DEFAULT_FAILOVER_RETRY`] (15 s); zero returns
    /// every error at once.
    ///
    /// What they retry: a command the server refused without running it because the
    /// deployment is changing (`MOVED` or `ASK` left after redis-rs's own redirects,
    /// `TRYAGAIN`, `CLUSTERDOWN`, `MASTERDOWN`, `READONLY`, `LOADING`), and, for an acquire
    /// that is already waiting, a lost connection or a timeout (whatever that attempt may
    /// have taken is settled before the next one is sent). Retries pause 50 ms, doubling
    /// up to 1 s, and never outlast the caller's own wait (`try_lock(wait, ..)`). A first
    /// attempt that finds the server unreachable still fails at once, so a call made while
    /// Redis is down is not held up. Set it above the time your deployment takes to fail
    /// over (Sentinel: `down-after-milliseconds` plus a few seconds; Cluster:
    /// `cluster-node-timeout` plus a few seconds) for callers never to see one.
    ///
    /// # Example
    ///
    /// ```rust,no_run
    /// use std::time::Duration;
    ///
    /// # async fn demo() -> lockwise::Result<()> {
    /// let client = lockwise::Client::builder("redis://127.0.0.1/")
    ///     .failover_retry(Duration::from_secs(30))
    ///     .build()
    ///     .await?;
    /// # Ok(()) }
    /// ```
    pub fn failover_retry(mut self, limit: Duration) -> Self {
        self.failover_retry = limit;
        self
    }

    /// How often a Sentinel client asks the sentinels which server is the master, besides
    /// asking at once on `+switch-master`, `READONLY`, a connection error or a timeout.
    /// Default [`DEFAULT_SENTINEL_CHECK_INTERVAL`](crate::DEFAULT_SENTINEL_CHECK_INTERVAL)
    /// (1 s); at least 1 ms. Sentinel builders only.
    ///
    /// It also bounds how long the client trusts the master it has without a check (the
    /// *trust window*): a command waits for a new check (one round trip to the sentinels)
    /// when the last one that confirmed the master started more than two intervals and a
    /// response timeout ago (at most a third of the
    /// [`watchdog_timeout`](Self::watchdog_timeout) ago; the client then checks twice in
    /// that time), for instance after the process was paused. So after a failover, every
    /// client is on the new master within about one interval of the sentinels' switch, even
    /// one that missed the announcement.
    ///
    /// A check that no sentinel answers confirms nothing: past the trust window, a client
    /// cut off from every sentinel sends nothing (each call fails with a retryable
    /// [`Error::Redis`](crate::Error::Redis)), so its watchdog holds are no longer renewed
    /// and are told lost at most the window plus the watchdog timeout after the last
    /// confirmation ([`guide::deployments`](crate::guide::deployments), "A client cut off
    /// from the sentinels").
    ///
    /// # Example
    ///
    /// ```rust,no_run
    /// use std::time::Duration;
    ///
    /// # async fn demo() -> lockwise::Result<()> {
    /// let client = lockwise::Client::sentinel_builder(["redis://10.0.0.1:26379"], "mymaster")
    ///     .sentinel_check_interval(Duration::from_millis(500))
    ///     .build()
    ///     .await?;
    /// # Ok(()) }
    /// ```
    pub fn sentinel_check_interval(mut self, interval: Duration) -> Self {
        self.sentinel_check_interval = Some(interval);
        self
    }

    /// How long a waiter of an [`RLock`](crate::RLock) or [`FencedLock`](crate::FencedLock) may be
    /// overtaken before it *claims* the lock, so the next release goes to it even when the
    /// releasing client's own tasks would get there first; `None` turns claims off. Default
    /// [`DEFAULT_OVERTAKE_LIMIT`] (200 ms). A claim is a key `<namespace>:claim:{name}` with a
    /// 1 s TTL that the claimant renews while it waits and withdraws when it stops waiting;
    /// it only ever refuses a free lock to others, never a re-entry ([`guide::guarantees`](crate::guide::guarantees)).
    ///
    /// # Example
    ///
    /// ```rust,no_run
    /// use std::time::Duration;
    ///
    /// # async fn demo() -> lockwise::Result<()> {
    /// let client = lockwise::Client::builder("redis://127.0.0.1/")
    ///     .overtake_limit(Some(Duration::from_millis(500)))
    ///     .build()
    ///     .await?;
    /// # Ok(()) }
    /// ```
    pub fn overtake_limit(mut self, limit: Option<Duration>) -> Self {
        self.overtake_limit = limit;
        self.overtake_chosen = true;
        self
    }

    /// Whose key layout the client's locks and synchronizers use: lockwise's own (the
    /// default), or [`KeyLayout::Redisson`], to share locks by name with Java services that
    /// use Redisson 3.45 – 4.7. In Redisson's layout the overtake limit is off (Redisson's
    /// format has no claim queue: `build` refuses an explicit limit with
    /// [`Error::Unsupported`](crate::Error::Unsupported)), and kinds without a Redisson
    /// counterpart return that error from every call; see the "Mixed fleets with Redisson"
    /// guide.
    ///
    /// # Example
    ///
    /// ```rust,no_run
    /// # async fn demo() -> lockwise::Result<()> {
    /// use lockwise::KeyLayout;
    /// let client = lockwise::Client::builder("redis://127.0.0.1/")
    ///     .key_layout(KeyLayout::Redisson)
    ///     .build()
    ///     .await?;
    /// // The hash `orders` and channel `redisson_lock__channel:{orders}`, as RLock uses them:
    /// assert_eq!(client.lock("orders").key(), "orders");
    /// # Ok(()) }
    /// ```
    pub fn key_layout(mut self, layout: KeyLayout) -> Self {
        self.key_layout = layout;
        self
    }

    /// Label the acquire wait histogram (`lockwise_acquire_wait_seconds`) with the lock name
    /// too, not only the kind and outcome. Off by default: every distinct name becomes a
    /// time series of the metrics backend, so turn it on only when the names are few and
    /// fixed (not `order:<id>`). Takes effect with the `metrics` feature; see "Metrics and
    /// tracing" in the crate docs.
    ///
    /// # Example
    ///
    /// ```rust,no_run
    /// # async fn demo() -> lockwise::Result<()> {
    /// let client = lockwise::Client::builder("redis://127.0.0.1/")
    ///     .metrics_lock_names(true)
    ///     .build()
    ///     .await?;
    /// # Ok(()) }
    /// ```
    pub fn metrics_lock_names(mut self, on: bool) -> Self {
        self.metrics_lock_names = on;
        self
    }

    /// Build a client that only reads: for dashboards, audits and an operator's look at a
    /// production server (`Admin`'s `list`, `inspect`, `leaks`; the handles' plain reads),
    /// under a Redis user that may only read (`+@read` on `<namespace>:*`).
    ///
    /// Its command connection sends nothing but reads; any call that would write (an
    /// acquire, a release, a force unlock, a permit, a count down) fails with
    /// [`Error::ReadOnlyClient`](crate::Error::ReadOnlyClient) before a command leaves the
    /// process. It loads no scripts, announces no presence key, and the connect-time
    /// permission check asks only for its reads.
    ///
    /// ```no_run
    /// # async fn f() -> lockwise::Result<()> {
    /// let client = lockwise::Client::builder("redis://reader:secret@127.0.0.1/")
    ///     .read_only(true)
    ///     .build()
    ///     .await?;
    /// for lock in client.admin().list().await?.locks {
    ///     println!("{} {:?}", lock.name, lock.holders);
    /// }
    /// let refused = client.lock("orders").try_lock(std::time::Duration::ZERO, None).await;
    /// assert!(refused.unwrap_err().is_read_only_client());
    /// # Ok(()) }
    /// ```
    pub fn read_only(mut self, on: bool) -> Self {
        self.read_only = on;
        self
    }

    /// Speak RESP2 to the servers instead of RESP3. Without it, the client asks for RESP3
    /// and falls back to RESP2 by itself when a server or proxy refuses `HELLO`; force it to
    /// skip that first attempt (one connection per connect) or for a proxy that accepts
    /// `HELLO 3` but does not relay pushes.
    ///
    /// In RESP2 a subscribed connection runs no other command, so the client opens a
    /// dedicated pub/sub connection for its wakeups; it is reconnected and resubscribed as
    /// in RESP3, and waiters are woken when it is lost. Standalone and Sentinel only: a
    /// Redis Cluster needs RESP3 (redis-rs has no RESP2 subscriptions on cluster
    /// connections), and [`build`](Self::build) refuses `force_resp2(true)` on a cluster
    /// builder, and a cluster that refuses `HELLO`, with [`Error::InvalidArgument`](crate::Error::InvalidArgument).
    ///
    /// # Example
    ///
    /// ```rust,no_run
    /// # async fn demo() -> lockwise::Result<()> {
    /// let client = lockwise::Client::builder("redis://127.0.0.1/")
    ///     .force_resp2(true)
    ///     .build()
    ///     .await?;
    /// # Ok(()) }
    /// ```
    pub fn force_resp2(mut self, force: bool) -> Self {
        self.protocol = if force {
            Protocol::Resp2
        } else {
            Protocol::Auto
        };
        self
    }

    /// Replica sync: after every lock write (a new hold or a re-entry), wait until at least
    /// `replicas` replicas acknowledged it, at most `timeout` (Redis `WAIT`, pipelined with
    /// the lock script on the same connection: no extra round trip). If fewer acknowledge,
    /// the hold is released again and the call fails with [`Error::ReplicaSync`](crate::Error::ReplicaSync): the lock
    /// fails closed instead of living only on a master whose failover would lose it.
    ///
    /// This narrows, but does not close, the failover race of asynchronous replication
    /// ([`guide::deployments`](crate::guide::deployments)). WAIT blocks the client's shared command connection for up
    /// to `timeout` when replicas lag, so keep it short; it must be below the response
    /// timeout. If the server does not support WAIT, the client says so once at connect
    /// (a warning) and runs without replica sync. Off by default.
    ///
    /// # Example
    ///
    /// ```rust,no_run
    /// use std::time::Duration;
    ///
    /// # async fn demo() -> lockwise::Result<()> {
    /// let client = lockwise::Client::builder("redis://127.0.0.1/")
    ///     .replica_sync(1, Duration::from_millis(100))
    ///     .build()
    ///     .await?;
    /// # Ok(()) }
    /// ```
    pub fn replica_sync(mut self, replicas: u32, timeout: Duration) -> Self {
        self.replica_sync = Some((replicas, timeout));
        self
    }

    /// Password of the Sentinel master (and its replicas). Sentinel deployments only.
    ///
    /// # Example
    ///
    /// ```rust,no_run
    /// # async fn demo() -> lockwise::Result<()> {
    /// let client = lockwise::Client::sentinel_builder(["redis://10.0.0.1:26379"], "mymaster")
    ///     .master_password("secret")
    ///     .build()
    ///     .await?;
    /// # Ok(()) }
    /// ```
    pub fn master_password(mut self, password: impl Into<String>) -> Self {
        self.master.password = Some(password.into());
        self
    }

    /// ACL user name for the Sentinel master. Sentinel deployments only.
    ///
    /// # Example
    ///
    /// ```rust,no_run
    /// # async fn demo() -> lockwise::Result<()> {
    /// let client = lockwise::Client::sentinel_builder(["redis://10.0.0.1:26379"], "mymaster")
    ///     .master_username("locks")
    ///     .master_password("secret")
    ///     .build()
    ///     .await?;
    /// # Ok(()) }
    /// ```
    pub fn master_username(mut self, username: impl Into<String>) -> Self {
        self.master.username = Some(username.into());
        self
    }

    /// Database number on the Sentinel master (default 0). Sentinel deployments only.
    ///
    /// # Example
    ///
    /// ```rust,no_run
    /// # async fn demo() -> lockwise::Result<()> {
    /// let client = lockwise::Client::sentinel_builder(["redis://10.0.0.1:26379"], "mymaster")
    ///     .master_db(2)
    ///     .build()
    ///     .await?;
    /// # Ok(()) }
    /// ```
    pub fn master_db(mut self, db: i64) -> Self {
        self.master.db = Some(db);
        self
    }

    /// TTL of locks taken without a lease; the watchdog renews them every `timeout / 3`.
    /// A crashed process's locks are free again at most this long after the crash.
    /// Default 30 s; at least 1 ms.
    ///
    /// # Example
    ///
    /// ```rust,no_run
    /// use std::time::Duration;
    ///
    /// # async fn demo() -> lockwise::Result<()> {
    /// let client = lockwise::Client::builder("redis://127.0.0.1/")
    ///     .watchdog_timeout(Duration::from_secs(10))
    ///     .build()
    ///     .await?;
    /// # Ok(()) }
    /// ```
    pub fn watchdog_timeout(mut self, timeout: Duration) -> Self {
        self.watchdog_timeout = timeout;
        self
    }

    /// How long to wait for any one reply. A lock attempt whose reply is late has an unknown
    /// outcome: lockwise reports [`Error::Redis`](crate::Error::Redis) and releases whatever the attempt may have
    /// taken. Default 1 s.
    ///
    /// # Example
    ///
    /// ```rust,no_run
    /// use std::time::Duration;
    ///
    /// # async fn demo() -> lockwise::Result<()> {
    /// let client = lockwise::Client::builder("redis://127.0.0.1/")
    ///     .response_timeout(Duration::from_millis(500))
    ///     .build()
    ///     .await?;
    /// # Ok(()) }
    /// ```
    pub fn response_timeout(mut self, timeout: Duration) -> Self {
        self.response_timeout = timeout;
        self
    }

    /// How long to wait for a connection (initial and reconnects). Default 5 s.
    ///
    /// # Example
    ///
    /// ```rust,no_run
    /// use std::time::Duration;
    ///
    /// # async fn demo() -> lockwise::Result<()> {
    /// let client = lockwise::Client::builder("redis://127.0.0.1/")
    ///     .connect_timeout(Duration::from_secs(2))
    ///     .build()
    ///     .await?;
    /// # Ok(()) }
    /// ```
    pub fn connect_timeout(mut self, timeout: Duration) -> Self {
        self.connect_timeout = timeout;
        self
    }

    /// Prefix of every key and channel (default `"lockwise"`); must not be empty or contain
    /// `{` or `}`. Clients that must see the same locks need the same namespace.
    ///
    /// # Example
    ///
    /// ```rust,no_run
    /// # async fn demo() -> lockwise::Result<()> {
    /// let client = lockwise::Client::builder("redis://127.0.0.1/")
    ///     .namespace("billing")
    ///     .build()
    ///     .await?;
    /// # Ok(()) }
    /// ```
    pub fn namespace(mut self, namespace: impl Into<String>) -> Self {
        self.namespace = namespace.into();
        self
    }
}

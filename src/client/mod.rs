//! [`Client`]: connections, the subscription listener and the watchdog, shared by all locks.
//! Its settings and their checks, and the assembly of its parts, are in [`builder`]; the
//! handles it gives out (`lock`, `semaphore`, ...) in [`handles`].
//! Connecting to each kind of deployment (probing, Cluster, Sentinel) is in `deploy`;
//! `build` hands it the checked settings.

mod builder;
mod handles;

use std::sync::Arc;
use std::time::Duration;

use redis::ConnectionInfo;
use uuid::Uuid;

pub use builder::ClientBuilder;

use crate::deploy::{Deployment, Target};
use crate::engine::Core;
use crate::error::Result;

/// Default watchdog timeout: a watchdog lock's TTL, renewed every third of it.
pub const DEFAULT_WATCHDOG_TIMEOUT: Duration = Duration::from_secs(30);
/// Default per-command response timeout.
pub const DEFAULT_RESPONSE_TIMEOUT: Duration = Duration::from_secs(1);
/// Default timeout for establishing a connection.
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// Default overtake limit: see [`ClientBuilder::overtake_limit`].
pub const DEFAULT_OVERTAKE_LIMIT: Duration = Duration::from_millis(200);
/// Default interval of a Sentinel client's checks of the master: see
/// [`ClientBuilder::sentinel_check_interval`].
pub const DEFAULT_SENTINEL_CHECK_INTERVAL: Duration = Duration::from_secs(1);
/// Default failover retry: see [`ClientBuilder::failover_retry`].
pub const DEFAULT_FAILOVER_RETRY: Duration = Duration::from_secs(15);
/// What [`Client::shutdown`] released, and what it could not.
///
/// # Example
///
/// ```rust,no_run
/// use std::time::Duration;
///
/// # async fn demo(client: lockwise::Client) -> lockwise::Result<()> {
/// let report = client.shutdown(Duration::from_secs(5)).await;
/// if report.closed_now {
///     println!("released {} holds, {} permits", report.holds_released, report.permits_returned);
/// }
/// for (name, why) in &report.failed {
///     eprintln!("{name} left to expire: {why}");
/// }
/// # Ok(()) }
/// ```
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct ShutdownReport {
    /// Whether this call closed the client (`false`: it was closed already, nothing was
    /// done).
    pub closed_now: bool,
    /// Lock holds released, of every kind (each hold of a re-entered lock counts).
    pub holds_released: u64,
    /// Permits given back: [`Semaphore`](crate::Semaphore) permits and
    /// [`LeaseSemaphore`](crate::LeaseSemaphore) permits held by live guards.
    pub permits_returned: u64,
    /// What could not be done within the timeout, as (lock or semaphore name, why); each
    /// expires with its TTL. Empty when everything was released.
    pub failed: Vec<(String, String)>,
}

impl ShutdownReport {
    /// Whether everything was released (nothing [`failed`](Self::failed)).
    ///
    /// # Example
    ///
    /// ```rust,no_run
    /// use std::time::Duration;
    ///
    /// # async fn demo(client: lockwise::Client) -> lockwise::Result<()> {
    /// let report = client.shutdown(Duration::from_secs(5)).await;
    /// if !report.is_complete() {
    ///     eprintln!("{} left to expire with their TTL", report.failed.len());
    /// }
    /// # Ok(()) }
    /// ```
    pub fn is_complete(&self) -> bool {
        self.failed.is_empty()
    }
}

/// Whose holds the acquires of a client's new lock handles take, by default: see
/// [`ClientBuilder::ownership`]. A handle can still change it
/// (`non_reentrant()`, `reentrant()`, `with_owner(id)`).
///
/// # Example
///
/// ```rust,no_run
/// use lockwise::{Client, Ownership};
///
/// # async fn demo() -> lockwise::Result<()> {
/// // A web service: every acquire is its own owner, never re-entered by another request.
/// let client = Client::builder("redis://127.0.0.1/")
///     .ownership(Ownership::PerHold)
///     .build()
///     .await?;
/// let guard = client.lock("cart:7").lock().await?;
/// // The guard may move to another task.
/// tokio::spawn(async move { guard.unlock().await });
/// # Ok(()) }
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum Ownership {
    /// The calling tokio task owns its holds: the task that holds a lock re-enters it,
    /// other tasks wait (Redisson's per-thread ownership). The default.
    #[default]
    Task,
    /// Every acquire takes a hold of its own, owned by its guard: nothing is ever
    /// re-entered, so a guard may move to another task (`tokio::spawn`) or outlive its own
    /// without letting its old task in. The safe choice for web services, whose framework
    /// serves many requests in one task.
    PerHold,
}

/// Default key namespace (prefix of every key and channel).
pub const DEFAULT_NAMESPACE: &str = "lockwise";

/// A connection to Redis and the background machinery every lock of it shares: one command
/// connection, one subscription connection and one watchdog task.
///
/// Cheap to clone (an `Arc` inside); create one per process and clone it where needed. Each
/// `Client` has its own id, part of every lock owner it creates, so two `Client`s in one
/// process are two different owners.
///
/// Dropping the last clone stops the watchdog: locks held with the watchdog then expire within
/// the watchdog timeout and their guards report [`lost`](crate::RLockGuard::lost). Lock handles
/// and guards do not keep the watchdog alive; they keep only the connections. A handle's
/// acquire methods then fail with [`Error::ClientClosed`](crate::Error::ClientClosed) (a waiting call too), instead of
/// handing out a guard that would be lost at once.
///
/// # Example
///
/// ```rust,no_run
/// use std::time::Duration;
///
/// # async fn demo() -> lockwise::Result<()> {
/// let client = lockwise::Client::connect("redis://127.0.0.1/").await?;
/// let guard = client.lock("orders:42").lock().await?;
/// // ... work under the lock ...
/// guard.unlock().await?;
///
/// // When the service stops: release whatever is still held.
/// let report = client.shutdown(Duration::from_secs(5)).await;
/// if !report.is_complete() {
///     eprintln!("{} left to expire", report.failed.len());
/// }
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct Client {
    inner: Arc<ClientHandle>,
}

/// Stops the watchdog when the last `Client` clone goes away.
struct ClientHandle {
    core: Arc<Core>,
}

impl Drop for ClientHandle {
    fn drop(&mut self) {
        self.core.holds.shutdown();
    }
}

impl Client {
    /// Connects with the default settings.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`](crate::Error::InvalidArgument) for a malformed URL, [`Error::Redis`](crate::Error::Redis) when the server cannot
    /// be reached or rejects the connection (e.g. wrong password), [`Error::Permission`](crate::Error::Permission) when
    /// the Redis user's ACL refuses something lockwise needs.
    ///
    /// # Cancel safety
    /// Dropping the future abandons the connection attempt; nothing is left behind.
    ///
    /// # Example
    ///
    /// ```rust,no_run
    /// # async fn demo() -> lockwise::Result<()> {
    /// let client = lockwise::Client::connect("redis://127.0.0.1/").await?;
    /// let guard = client.lock("orders:42").lock().await?;
    /// guard.unlock().await?;
    /// # Ok(()) }
    /// ```
    pub async fn connect(url: &str) -> Result<Client> {
        Client::builder(url).build().await
    }

    /// Starts a [`ClientBuilder`] for the standalone Redis server at `url`
    /// (`redis://[user:password@]host[:port][/db]`; `rediss://` for TLS, which needs the
    /// `tls-rustls` or `tls-native-tls` feature, see [`guide::deployments`](crate::guide::deployments), "TLS").
    ///
    /// # Example
    ///
    /// ```rust,no_run
    /// use std::time::Duration;
    ///
    /// # async fn demo() -> lockwise::Result<()> {
    /// let client = lockwise::Client::builder("redis://:secret@127.0.0.1:6379/2")
    ///     .response_timeout(Duration::from_millis(500))
    ///     .build()
    ///     .await?;
    /// # Ok(()) }
    /// ```
    pub fn builder(url: impl Into<String>) -> ClientBuilder {
        ClientBuilder::new(Deployment::Standalone {
            target: Target::Url(url.into()),
        })
    }

    /// Starts a [`ClientBuilder`] for the standalone server of an existing redis-rs client:
    /// its address, credentials, database and TLS settings (e.g. a custom root CA from
    /// `redis::Client::build_with_tls`, with a TLS feature) are used as they are. Only the
    /// protocol is lockwise's choice (RESP3, or RESP2 if the server has no `HELLO`; see
    /// [`ClientBuilder::force_resp2`]). `client` is not used for connections itself.
    ///
    /// # Example
    ///
    /// ```rust,no_run
    /// # async fn demo() -> lockwise::Result<()> {
    /// let existing = lockwise::redis::Client::open("redis://127.0.0.1/")?;
    /// let client = lockwise::Client::builder_from(&existing).build().await?;
    /// # Ok(()) }
    /// ```
    pub fn builder_from(client: &redis::Client) -> ClientBuilder {
        Client::builder_from_info(client.get_connection_info().clone())
    }

    /// Starts a [`ClientBuilder`] for the standalone server described by `info`, e.g. built
    /// in code with a password and database instead of written into a URL. As with
    /// [`Client::builder_from`], the protocol in `info` is ignored.
    ///
    /// # Example
    ///
    /// ```rust,no_run
    /// use lockwise::redis::IntoConnectionInfo;
    ///
    /// # async fn demo() -> lockwise::Result<()> {
    /// let info = "redis://127.0.0.1:6379".into_connection_info()?;
    /// let settings = info.redis_settings().clone().set_password("secret").set_db(2);
    /// let info = info.set_redis_settings(settings);
    /// let client = lockwise::Client::builder_from_info(info).build().await?;
    /// # Ok(()) }
    /// ```
    pub fn builder_from_info(info: ConnectionInfo) -> ClientBuilder {
        ClientBuilder::new(Deployment::Standalone {
            target: Target::Info(Box::new(info)),
        })
    }

    /// Starts a [`ClientBuilder`] for a Redis Cluster reached through any of the `seeds`
    /// (`redis://[user:password@]host:port` URLs of some of its nodes; the rest of the
    /// topology is discovered). See [`guide::deployments`](crate::guide::deployments) for what a failover does to
    /// held locks.
    ///
    /// # Example
    ///
    /// ```rust,no_run
    /// # async fn demo() -> lockwise::Result<()> {
    /// let seeds = ["redis://10.0.0.1:7000", "redis://10.0.0.2:7000"];
    /// let client = lockwise::Client::cluster_builder(seeds).build().await?;
    /// let guard = client.lock("orders:42").lock().await?;
    /// guard.unlock().await?;
    /// # Ok(()) }
    /// ```
    pub fn cluster_builder<I, S>(seeds: I) -> ClientBuilder
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        ClientBuilder::new(Deployment::Cluster {
            seeds: seeds.into_iter().map(Into::into).collect(),
        })
    }

    /// Starts a [`ClientBuilder`] for the master named `master_name` of a Sentinel set, found
    /// through any of the `sentinels` (`redis://host:port` URLs of sentinels; credentials in
    /// a URL are the sentinel's). The client follows failovers: commands and subscriptions
    /// move to the new master. Credentials and database of the master itself:
    /// [`ClientBuilder::master_password`], [`ClientBuilder::master_username`],
    /// [`ClientBuilder::master_db`].
    ///
    /// # Example
    ///
    /// ```rust,no_run
    /// # async fn demo() -> lockwise::Result<()> {
    /// let sentinels = ["redis://10.0.0.1:26379", "redis://10.0.0.2:26379"];
    /// let client = lockwise::Client::sentinel_builder(sentinels, "mymaster")
    ///     .master_password("secret")
    ///     .build()
    ///     .await?;
    /// # Ok(()) }
    /// ```
    pub fn sentinel_builder<I, S>(sentinels: I, master_name: impl Into<String>) -> ClientBuilder
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        ClientBuilder::new(Deployment::Sentinel {
            sentinels: sentinels.into_iter().map(Into::into).collect(),
            master_name: master_name.into(),
        })
    }

    /// This client's id, the first part of every owner field it writes.
    ///
    /// # Example
    ///
    /// ```rust,no_run
    /// # async fn demo(client: lockwise::Client) -> lockwise::Result<()> {
    /// println!("client {} (owner fields start with it)", client.id());
    /// # Ok(()) }
    /// ```
    pub fn id(&self) -> Uuid {
        self.inner.core.id
    }

    /// The TTL of watchdog locks; they are renewed every third of it.
    ///
    /// # Example
    ///
    /// ```rust,no_run
    /// # async fn demo(client: lockwise::Client) -> lockwise::Result<()> {
    /// let ttl = client.watchdog_timeout();
    /// println!("watchdog locks live {ttl:?}, renewed every {:?}", ttl / 3);
    /// # Ok(()) }
    /// ```
    pub fn watchdog_timeout(&self) -> Duration {
        self.inner.core.watchdog_timeout
    }

    /// The prefix of every key and channel this client uses.
    ///
    /// # Example
    ///
    /// ```rust,no_run
    /// # async fn demo() -> lockwise::Result<()> {
    /// let client = lockwise::Client::builder("redis://127.0.0.1/")
    ///     .namespace("billing")
    ///     .build()
    ///     .await?;
    /// assert_eq!(client.namespace(), "billing");
    /// # Ok(()) }
    /// ```
    pub fn namespace(&self) -> &str {
        &self.inner.core.namespace
    }

    /// Closes this client: what it still holds is released, every waiter is woken, and
    /// nothing new can be taken through it. Call it when the service stops (on `SIGTERM`,
    /// Ctrl-C, before `main` returns): a runtime that ends drops the background releases,
    /// and the client's holds then stay until their TTL (a semaphore's permits for good).
    ///
    /// In order: new acquires (of every clone and handle of this client) fail with
    /// [`Error::ClientClosed`](crate::Error::ClientClosed), and so do acquires that were
    /// waiting; the watchdog stops; every lock hold this client has is released (every
    /// kind, re-entries included, holds whose replies were lost too), as are its
    /// [`Semaphore`](crate::Semaphore) and [`LeaseSemaphore`](crate::LeaseSemaphore) permits
    /// held by live guards (forgotten permits and ids handed out with `into_id` are the
    /// caller's); background releases and fair-queue leaves are finished; its presence keys
    /// are deleted. All within `timeout`: what could not be done by then is in the report
    /// and expires with its TTL (a lease, the watchdog timeout).
    ///
    /// Guards still alive afterwards report [lost](crate::RLockGuard::is_lost), and their
    /// `unlock` (or `release`) returns `Error::ClientClosed` and sends nothing. Locks of a
    /// [`RedLockSet`](crate::RedLockSet) are held through each node's client: close each
    /// (or call [`RedLockSet::shutdown`](crate::RedLockSet::shutdown)).
    ///
    /// Idempotent: a second call (from any clone) does nothing and reports
    /// `closed_now: false`.
    ///
    /// # Cancel safety
    /// Dropping the future leaves the client closed; the releases not yet done are not
    /// retried (they expire with their TTL).
    ///
    /// # Example
    /// ```no_run
    /// use std::time::Duration;
    ///
    /// # async fn serve(_: lockwise::Client) {}
    /// # async fn demo() -> lockwise::Result<()> {
    /// let client = lockwise::Client::connect("redis://127.0.0.1/").await?;
    /// tokio::select! {
    ///     () = serve(client.clone()) => {}
    ///     _ = tokio::signal::ctrl_c() => {}
    /// }
    /// let report = client.shutdown(Duration::from_secs(5)).await;
    /// eprintln!(
    ///     "released {} holds and {} permits; {} left to expire",
    ///     report.holds_released,
    ///     report.permits_returned,
    ///     report.failed.len()
    /// );
    /// # Ok(()) }
    /// ```
    pub async fn shutdown(&self, timeout: Duration) -> ShutdownReport {
        match crate::engine::close::close(&self.inner.core, timeout).await {
            None => ShutdownReport::default(),
            Some(closed) => ShutdownReport {
                closed_now: true,
                holds_released: closed.holds,
                permits_returned: closed.permits,
                failed: closed.failed,
            },
        }
    }

    /// Whether [`shutdown`](Self::shutdown) closed this client.
    ///
    /// # Example
    ///
    /// ```rust,no_run
    /// use std::time::Duration;
    ///
    /// # async fn demo(client: lockwise::Client) -> lockwise::Result<()> {
    /// client.shutdown(Duration::from_secs(5)).await;
    /// assert!(client.is_closed());
    /// # Ok(()) }
    /// ```
    pub fn is_closed(&self) -> bool {
        self.inner.core.closed.is_cancelled()
    }

    /// The shared state behind this client, for lock kinds built outside this module.
    pub(crate) fn core(&self) -> &Arc<Core> {
        &self.inner.core
    }

    /// The client around a freshly assembled `core` (see [`ClientBuilder::build`]).
    fn from_core(core: Arc<Core>) -> Client {
        Client {
            inner: Arc::new(ClientHandle { core }),
        }
    }
}

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Client")
            .field("id", &self.inner.core.id)
            .field("namespace", &self.inner.core.namespace)
            .field("watchdog_timeout", &self.inner.core.watchdog_timeout)
            .finish_non_exhaustive()
    }
}

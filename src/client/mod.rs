//! [`Client`]: connections, the subscription listener and the watchdog, shared by all locks.
//! Its settings and their checks, and the assembly of its parts, are in [`builder`]; the
//! handles it gives out (`lock`, `semaphore`, ...) in [`handles`].
//! Connecting to each kind of deployment (probing, Cluster, Sentinel) is in `deploy`;
//! `build` hands it the checked settings.

mod builder;
mod handles;

use std::sync::Arc;
use std::time::Duration;

use uuid::Uuid;

pub use builder::ClientBuilder;

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
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
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

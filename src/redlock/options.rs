//! [`RedLockOptions`] with their defaults, and the [`RedLockSet`]: the nodes a Redlock runs
//! on and the owner id its locks share.

use std::sync::Arc;
use std::time::Duration;

use uuid::Uuid;

use super::round::quorum;
use super::RedLock;
use crate::client::Client;

/// Default TTL of a Redlock taken without a lease; extended every third of it.
pub const DEFAULT_REDLOCK_TTL: Duration = Duration::from_secs(30);
/// Default per-node timeout of one lock or extension call.
pub const DEFAULT_NODE_TIMEOUT: Duration = Duration::from_millis(50);
/// Default base delay between two acquire rounds (randomized to 0.5x..1.5x).
pub const DEFAULT_RETRY_DELAY: Duration = Duration::from_millis(200);

/// Settings of a [`RedLockSet`]. Start from [`RedLockOptions::default`].
///
/// # Example
///
/// ```rust,no_run
/// use std::time::Duration;
/// use lockwise::{RedLockOptions, RedLockSet};
///
/// # async fn demo(clients: Vec<lockwise::Client>) -> lockwise::Result<()> {
/// let options = RedLockOptions::default()
///     .ttl(Duration::from_secs(10))
///     .node_timeout(Duration::from_millis(20))
///     .retry_count(Some(3));
/// let set = RedLockSet::with_options(&clients, options);
/// let guard = set.lock("nightly-report").try_lock(Duration::from_secs(2), None).await?;
/// guard.unlock().await?;
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
#[must_use = "options do nothing until passed to RedLockSet::with_options"]
pub struct RedLockOptions {
    pub(super) ttl: Duration,
    pub(super) node_timeout: Duration,
    pub(super) retry_delay: Duration,
    pub(super) retry_count: Option<u32>,
}

impl Default for RedLockOptions {
    fn default() -> Self {
        RedLockOptions {
            ttl: DEFAULT_REDLOCK_TTL,
            node_timeout: DEFAULT_NODE_TIMEOUT,
            retry_delay: DEFAULT_RETRY_DELAY,
            retry_count: None,
        }
    }
}

impl RedLockOptions {
    /// TTL of locks taken without a lease; the extension task renews them every `ttl / 3`.
    /// A crashed owner's lock is free again at most this long after the crash. Default
    /// [`DEFAULT_REDLOCK_TTL`] (30 s).
    ///
    /// # Example
    ///
    /// ```rust,no_run
    /// use std::time::Duration;
    /// use lockwise::{RedLockOptions, RedLockSet};
    ///
    /// # async fn demo(clients: Vec<lockwise::Client>) -> lockwise::Result<()> {
    /// let options = RedLockOptions::default().ttl(Duration::from_secs(10));
    /// let set = RedLockSet::with_options(&clients, options);
    /// let guard = set.lock("nightly-report").lock().await?;
    /// guard.unlock().await?;
    /// # Ok(()) }
    /// ```
    pub fn ttl(mut self, ttl: Duration) -> Self {
        self.ttl = ttl;
        self
    }

    /// How long one node may take to answer a lock or extension call before it counts as
    /// failed. Keep it small next to the TTL (the Redis documentation suggests 5-50 ms for a
    /// 10 s TTL): a slow node then costs the round little validity. Default
    /// [`DEFAULT_NODE_TIMEOUT`] (50 ms); raise it for far-away nodes.
    ///
    /// # Example
    ///
    /// ```rust,no_run
    /// use std::time::Duration;
    /// use lockwise::{RedLockOptions, RedLockSet};
    ///
    /// # async fn demo(clients: Vec<lockwise::Client>) -> lockwise::Result<()> {
    /// let options = RedLockOptions::default().node_timeout(Duration::from_millis(20));
    /// let set = RedLockSet::with_options(&clients, options);
    /// let guard = set.lock("nightly-report").lock().await?;
    /// guard.unlock().await?;
    /// # Ok(()) }
    /// ```
    pub fn node_timeout(mut self, timeout: Duration) -> Self {
        self.node_timeout = timeout;
        self
    }

    /// Base delay before retrying a failed round; each delay is drawn at random from
    /// `0.5 × delay .. 1.5 × delay`. Default [`DEFAULT_RETRY_DELAY`] (200 ms).
    ///
    /// # Example
    ///
    /// ```rust,no_run
    /// use std::time::Duration;
    /// use lockwise::{RedLockOptions, RedLockSet};
    ///
    /// # async fn demo(clients: Vec<lockwise::Client>) -> lockwise::Result<()> {
    /// let options = RedLockOptions::default().retry_delay(Duration::from_millis(100));
    /// let set = RedLockSet::with_options(&clients, options);
    /// let guard = set.lock("nightly-report").lock().await?;
    /// guard.unlock().await?;
    /// # Ok(()) }
    /// ```
    pub fn retry_delay(mut self, delay: Duration) -> Self {
        self.retry_delay = delay;
        self
    }

    /// At most this many retries after the first round of a
    /// [`try_lock`](RedLock::try_lock), on top of its `wait` bound. `None` (the default):
    /// only `wait` bounds it. [`lock`](RedLock::lock) waits as long as it takes.
    ///
    /// # Example
    ///
    /// ```rust,no_run
    /// use std::time::Duration;
    /// use lockwise::{RedLockOptions, RedLockSet};
    ///
    /// # async fn demo(clients: Vec<lockwise::Client>) -> lockwise::Result<()> {
    /// let options = RedLockOptions::default().retry_count(Some(3));
    /// let set = RedLockSet::with_options(&clients, options);
    /// // At most four rounds, and at most two seconds.
    /// let guard = set.lock("nightly-report").try_lock(Duration::from_secs(2), None).await?;
    /// guard.unlock().await?;
    /// # Ok(()) }
    /// ```
    pub fn retry_count(mut self, retries: Option<u32>) -> Self {
        self.retry_count = retries;
        self
    }
}

/// A set of independent Redis masters to run [Redlock] on, and the owner id its locks share.
///
/// Build it from one [`Client`] per master (each connected to a different, independent
/// server: not replicas of each other, not nodes of one cluster), then take lock handles
/// with [`lock`](RedLockSet::lock). Cheap to clone.
///
/// Owners are `<set id>:<task id>`: every [`RedLock`] of one set is the same owner within one
/// task (re-entry works across handles of one set), two sets are always different owners.
///
/// [Redlock]: https://redis.io/docs/latest/develop/use/patterns/distributed-locks/
///
/// # Example
///
/// ```rust,no_run
/// use std::time::Duration;
///
/// # async fn demo() -> lockwise::Result<()> {
/// // One client per independent master.
/// let mut clients = Vec::new();
/// for url in ["redis://10.0.0.1/", "redis://10.0.0.2/", "redis://10.0.0.3/"] {
///     clients.push(lockwise::Client::connect(url).await?);
/// }
/// let set = lockwise::RedLockSet::new(&clients);
/// println!("{} nodes, quorum {}", set.nodes(), set.quorum());
/// let guard = set.lock("invoice:9").lock().await?;
/// guard.unlock().await?;
/// set.shutdown(Duration::from_secs(5)).await;
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct RedLockSet {
    inner: Arc<SetInner>,
}

pub(super) struct SetInner {
    /// Kept so the clients (and their connections) live as long as the set.
    pub(super) clients: Vec<Client>,
    pub(super) id: Uuid,
    pub(super) id_str: Arc<str>,
    pub(super) options: RedLockOptions,
}

impl Drop for SetInner {
    fn drop(&mut self) {
        for client in &self.clients {
            client.core().presence.remove(&self.id_str);
        }
    }
}

impl RedLockSet {
    /// A set over `clients` with the default [`RedLockOptions`]. An empty slice is reported
    /// by the lock methods as [`Error::InvalidArgument`](crate::Error::InvalidArgument).
    ///
    /// # Example
    ///
    /// ```rust,no_run
    /// # async fn demo(clients: Vec<lockwise::Client>) -> lockwise::Result<()> {
    /// let set = lockwise::RedLockSet::new(&clients);
    /// let guard = set.lock("invoice:9").lock().await?;
    /// guard.unlock().await?;
    /// # Ok(()) }
    /// ```
    pub fn new(clients: &[Client]) -> RedLockSet {
        RedLockSet::with_options(clients, RedLockOptions::default())
    }

    /// A set over `clients` with `options`. Invalid options are reported by the lock methods
    /// as [`Error::InvalidArgument`](crate::Error::InvalidArgument).
    ///
    /// # Example
    ///
    /// ```rust,no_run
    /// use std::time::Duration;
    /// use lockwise::{RedLockOptions, RedLockSet};
    ///
    /// # async fn demo(clients: Vec<lockwise::Client>) -> lockwise::Result<()> {
    /// let options = RedLockOptions::default().ttl(Duration::from_secs(10));
    /// let set = RedLockSet::with_options(&clients, options);
    /// let guard = set.lock("invoice:9").lock().await?;
    /// guard.unlock().await?;
    /// # Ok(()) }
    /// ```
    pub fn with_options(clients: &[Client], options: RedLockOptions) -> RedLockSet {
        let id = Uuid::new_v4();
        // Each node announces the set's id as present while the set lives, so an operator's
        // leak check tells its holds from a dead client's.
        for client in clients {
            client.core().presence.add(&id.to_string());
        }
        RedLockSet {
            inner: Arc::new(SetInner {
                clients: clients.to_vec(),
                id,
                id_str: id.to_string().into(),
                options,
            }),
        }
    }

    /// A handle to the Redlock `name` on every node of this set. Cheap; nothing is sent.
    ///
    /// # Example
    ///
    /// ```rust,no_run
    /// # async fn demo(clients: Vec<lockwise::Client>) -> lockwise::Result<()> {
    /// let set = lockwise::RedLockSet::new(&clients);
    /// let invoice = set.lock("invoice:9");
    /// let guard = invoice.lock().await?;
    /// guard.unlock().await?;
    /// # Ok(()) }
    /// ```
    pub fn lock(&self, name: impl AsRef<str>) -> RedLock {
        RedLock::in_set(self.inner.clone(), name.as_ref())
    }

    /// This set's id, the first part of every owner field it writes.
    ///
    /// # Example
    ///
    /// ```rust,no_run
    /// # async fn demo(clients: Vec<lockwise::Client>) -> lockwise::Result<()> {
    /// let set = lockwise::RedLockSet::new(&clients);
    /// println!("set {} (owner fields start with it)", set.id());
    /// # Ok(()) }
    /// ```
    pub fn id(&self) -> Uuid {
        self.inner.id
    }

    /// Number of nodes (clients).
    ///
    /// # Example
    ///
    /// ```rust,no_run
    /// # async fn demo(clients: Vec<lockwise::Client>) -> lockwise::Result<()> {
    /// let set = lockwise::RedLockSet::new(&clients);
    /// assert_eq!(set.nodes(), clients.len());
    /// # Ok(()) }
    /// ```
    pub fn nodes(&self) -> usize {
        self.inner.clients.len()
    }

    /// Closes the client of every node ([`Client::shutdown`]), at once: the set's locks are
    /// released on every node, and so is everything else those clients hold. One report
    /// per node, in the order of the clients.
    ///
    /// # Cancel safety
    /// As for [`Client::shutdown`].
    ///
    /// # Example
    ///
    /// ```rust,no_run
    /// use std::time::Duration;
    ///
    /// # async fn demo(clients: Vec<lockwise::Client>) -> lockwise::Result<()> {
    /// let set = lockwise::RedLockSet::new(&clients);
    /// // ... when the service stops:
    /// for report in set.shutdown(Duration::from_secs(5)).await {
    ///     if !report.is_complete() {
    ///         eprintln!("{} left to expire", report.failed.len());
    ///     }
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn shutdown(&self, timeout: std::time::Duration) -> Vec<crate::ShutdownReport> {
        futures::future::join_all(self.inner.clients.iter().map(|c| c.shutdown(timeout))).await
    }

    /// How many nodes must grant a lock: `nodes() / 2 + 1`.
    ///
    /// # Example
    ///
    /// ```rust,no_run
    /// # async fn demo(clients: Vec<lockwise::Client>) -> lockwise::Result<()> {
    /// let set = lockwise::RedLockSet::new(&clients);
    /// println!("{} of {} nodes must grant a lock", set.quorum(), set.nodes());
    /// # Ok(()) }
    /// ```
    pub fn quorum(&self) -> usize {
        quorum(self.inner.clients.len())
    }

    /// The set's options.
    ///
    /// # Example
    ///
    /// ```rust,no_run
    /// # async fn demo(clients: Vec<lockwise::Client>) -> lockwise::Result<()> {
    /// let set = lockwise::RedLockSet::new(&clients);
    /// println!("{:?}", set.options());
    /// # Ok(()) }
    /// ```
    pub fn options(&self) -> &RedLockOptions {
        &self.inner.options
    }
}

impl std::fmt::Debug for RedLockSet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedLockSet")
            .field("id", &self.inner.id)
            .field("nodes", &self.inner.clients.len())
            .field("options", &self.inner.options)
            .finish()
    }
}

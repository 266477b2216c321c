//! [`RedLockOptions`]: the settings of a [`RedLockSet`](super::RedLockSet), with their
//! defaults.

use std::time::Duration;

/// Default TTL of a Redlock taken without a lease; extended every third of it.
pub const DEFAULT_REDLOCK_TTL: Duration = Duration::from_secs(30);
/// Default per-node timeout of one lock or extension call.
pub const DEFAULT_NODE_TIMEOUT: Duration = Duration::from_millis(50);
/// Default base delay between two acquire rounds (randomized to 0.5x..1.5x).
pub const DEFAULT_RETRY_DELAY: Duration = Duration::from_millis(200);

/// Settings of a [`RedLockSet`](super::RedLockSet). Start from [`RedLockOptions::default`].
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
    /// [`try_lock`](super::RedLock::try_lock), on top of its `wait` bound. `None` (the default):
    /// only `wait` bounds it. [`lock`](super::RedLock::lock) waits as long as it takes.
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

//! The contract every lock kind offers: [`Lock`] for the handles, [`LockGuard`] for their
//! guards, and the scoped helpers [`Lock::run`] and [`Lock::try_run`] built on them.
//!
//! Each kind also has the same methods as inherent methods, so callers need not import the
//! traits; the traits are for generic code (`async fn with<L: Lock>(lock: &L)`) and for
//! test doubles. Every future they return is `Send`.

use std::future::Future;
use std::time::Duration;

use crate::error::Result;

mod guard;
mod impls;
mod scoped;

pub use guard::LockGuard;
pub(crate) use impls::impl_lock;
use scoped::scoped;
pub use scoped::Held;

/// A distributed lock handle: [`RLock`](crate::RLock), [`FairLock`](crate::FairLock),
/// [`FencedLock`](crate::FencedLock), the two sides of an [`RwLock`](crate::RwLock)
/// ([`ReadLock`](crate::ReadLock) and [`WriteLock`](crate::WriteLock)),
/// [`MultiLock`](crate::MultiLock) and [`RedLock`](crate::RedLock). Each method means what
/// the kind's inherent method of the same name documents. The crate docs'
/// [method tables](crate#one-contract-for-every-kind) list every method of every kind.
///
/// # Example
/// ```no_run
/// use std::time::Duration;
/// use lockwise::{Lock, LockGuard};
///
/// /// Runs `job` under any kind of lock, giving up after a second.
/// async fn exclusively<L: Lock>(lock: &L, job: &str) -> lockwise::Result<()> {
///     let guard = lock.try_lock(Duration::from_secs(1), None).await?;
///     println!("{job} under {} as {}", guard.name(), guard.owner());
///     guard.unlock().await
/// }
///
/// # async fn demo() -> lockwise::Result<()> {
/// let client = lockwise::Client::connect("redis://127.0.0.1/").await?;
/// exclusively(&client.lock("report"), "plain").await?;
/// exclusively(&client.fenced_lock("report"), "fenced").await?;
/// exclusively(&client.multi_lock(["a", "b"]), "both").await?;
/// # Ok(()) }
/// ```
pub trait Lock: Clone + Send + Sync + 'static {
    /// What a successful acquire returns.
    type Guard: LockGuard;

    /// The lock's name (a multi-lock's: its member names joined by `,`).
    ///
    /// # Example
    ///
    /// ```rust,no_run
    /// use lockwise::LockGuard;
    ///
    /// # async fn demo<L: lockwise::Lock>(lock: L) -> lockwise::Result<()> {
    /// let guard = lock.lock().await?;
    /// println!("holding {}", lock.name());
    /// guard.unlock().await?;
    /// # Ok(()) }
    /// ```
    fn name(&self) -> &str;

    /// Acquires the lock, waiting as long as it takes; the watchdog keeps it alive.
    ///
    /// # Example
    ///
    /// ```rust,no_run
    /// use lockwise::LockGuard;
    ///
    /// # async fn demo<L: lockwise::Lock>(lock: L) -> lockwise::Result<()> {
    /// let guard = lock.lock().await?; // waits as long as it takes
    /// // ... the critical section; the watchdog keeps the lock alive ...
    /// guard.unlock().await?;
    /// # Ok(()) }
    /// ```
    fn lock(&self) -> impl Future<Output = Result<Self::Guard>> + Send;

    /// Acquires the lock, waiting as long as it takes; it expires `lease` after it was taken.
    ///
    /// # Example
    ///
    /// ```rust,no_run
    /// use std::time::Duration;
    /// use lockwise::LockGuard;
    ///
    /// # async fn demo<L: lockwise::Lock>(lock: L) -> lockwise::Result<()> {
    /// let guard = lock.lock_with_lease(Duration::from_secs(10)).await?;
    /// // ... done within 10 s, or the lock expires by itself ...
    /// guard.unlock().await?;
    /// # Ok(()) }
    /// ```
    fn lock_with_lease(&self, lease: Duration) -> impl Future<Output = Result<Self::Guard>> + Send;

    /// Acquires the lock within `wait`, or fails with [`Error::Timeout`](crate::Error::Timeout).
    ///
    /// # Example
    ///
    /// ```rust,no_run
    /// use std::time::Duration;
    /// use lockwise::LockGuard;
    ///
    /// # async fn demo<L: lockwise::Lock>(lock: L) -> lockwise::Result<()> {
    /// match lock.try_lock(Duration::from_millis(500), None).await {
    ///     Ok(guard) => guard.unlock().await?,
    ///     Err(e) if e.is_timeout() => println!("{} is busy, try later", lock.name()),
    ///     Err(e) => return Err(e),
    /// }
    /// # Ok(()) }
    /// ```
    fn try_lock(
        &self,
        wait: Duration,
        lease: Option<Duration>,
    ) -> impl Future<Output = Result<Self::Guard>> + Send;

    /// Whether any owner holds the lock.
    ///
    /// # Example
    ///
    /// ```rust,no_run
    /// # async fn demo<L: lockwise::Lock>(lock: L) -> lockwise::Result<()> {
    /// if lock.is_locked().await? {
    ///     println!("{} is taken: skip this run", lock.name());
    /// }
    /// # Ok(()) }
    /// ```
    fn is_locked(&self) -> impl Future<Output = Result<bool>> + Send;

    /// How many holds the calling task (or the handle's owner) has.
    ///
    /// # Example
    ///
    /// ```rust,no_run
    /// use lockwise::LockGuard;
    ///
    /// # async fn demo<L: lockwise::Lock>(lock: L) -> lockwise::Result<()> {
    /// let lock = lock.reentrant(); // holds belong to the calling task
    /// let guard = lock.lock().await?;
    /// assert_eq!(lock.hold_count().await?, 1);
    /// guard.unlock().await?;
    /// assert_eq!(lock.hold_count().await?, 0);
    /// # Ok(()) }
    /// ```
    fn hold_count(&self) -> impl Future<Output = Result<u32>> + Send;

    /// Time until the lock expires; `None` when it is not locked.
    ///
    /// # Example
    ///
    /// ```rust,no_run
    /// # async fn demo<L: lockwise::Lock>(lock: L) -> lockwise::Result<()> {
    /// match lock.remaining_ttl().await? {
    ///     Some(ttl) => println!("taken; expires in {ttl:?} unless renewed"),
    ///     None => println!("{} is free", lock.name()),
    /// }
    /// # Ok(()) }
    /// ```
    fn remaining_ttl(&self) -> impl Future<Output = Result<Option<Duration>>> + Send;

    /// Deletes the lock whoever holds it and wakes its waiters; returns whether it was held.
    ///
    /// # Example
    ///
    /// ```rust,no_run
    /// # async fn demo<L: lockwise::Lock>(lock: L) -> lockwise::Result<()> {
    /// // An operator's escape hatch for a stuck holder:
    /// if lock.force_unlock().await? {
    ///     println!("{} was held; its holders' guards no longer hold it", lock.name());
    /// }
    /// # Ok(()) }
    /// ```
    fn force_unlock(&self) -> impl Future<Output = Result<bool>> + Send;

    /// The same lock, not reentrant: every acquire takes a hold of its own.
    ///
    /// # Example
    ///
    /// ```rust,no_run
    /// use lockwise::LockGuard;
    ///
    /// # async fn demo<L: lockwise::Lock>(lock: L) -> lockwise::Result<()> {
    /// let lock = lock.non_reentrant();
    /// let guard = lock.lock().await?; // a hold of its own
    /// tokio::spawn(async move {
    ///     // ... work that may outlive this task ...
    ///     guard.unlock().await
    /// });
    /// # Ok(()) }
    /// ```
    fn non_reentrant(&self) -> Self;

    /// The same lock, owned by the calling task: a task re-enters what it holds.
    ///
    /// # Example
    ///
    /// ```rust,no_run
    /// use lockwise::LockGuard;
    ///
    /// # async fn demo<L: lockwise::Lock>(lock: L) -> lockwise::Result<()> {
    /// let lock = lock.reentrant(); // whatever the client's default
    /// let outer = lock.lock().await?;
    /// let inner = lock.lock().await?; // the same task re-enters
    /// inner.unlock().await?;
    /// outer.unlock().await?;
    /// # Ok(()) }
    /// ```
    fn reentrant(&self) -> Self;

    /// The same lock, owned by `owner`: every task acquiring through it re-enters.
    ///
    /// # Example
    ///
    /// ```rust,no_run
    /// use lockwise::LockGuard;
    ///
    /// # async fn demo<L: lockwise::Lock>(lock: L) -> lockwise::Result<()> {
    /// let job = lock.with_owner("import-7");
    /// let guard = job.lock().await?;
    /// // Another task acquiring as "import-7" re-enters the hold instead of waiting:
    /// let other = tokio::spawn(async move { job.lock().await });
    /// other.await.expect("task panicked")?.unlock().await?;
    /// guard.unlock().await?;
    /// # Ok(()) }
    /// ```
    fn with_owner(&self, owner: &str) -> Self;

    /// Whether acquires through this handle may re-enter an earlier hold.
    ///
    /// # Example
    ///
    /// ```rust,no_run
    /// # async fn demo<L: lockwise::Lock>(lock: L) -> lockwise::Result<()> {
    /// assert!(!lock.non_reentrant().is_reentrant());
    /// assert!(lock.reentrant().is_reentrant());
    /// assert!(lock.with_owner("import-7").is_reentrant());
    /// # Ok(()) }
    /// ```
    fn is_reentrant(&self) -> bool;

    /// Acquires the lock ([`lock`](Self::lock)), runs `body` while it is held, and releases
    /// it. `body` gets a [`Held`] (name, owner, fencing token, loss signal). If the lock is
    /// lost while `body` runs (its lease ran out, the watchdog found it gone, it was
    /// force-unlocked, the client shut down), `body` is dropped at its next `.await` and the
    /// call fails with [`Error::Lost`](crate::Error::Lost). Otherwise the body's value is returned once the
    /// release succeeded; a failed release is the call's error ([`Error::NotHeld`](crate::Error::NotHeld): the
    /// hold did not last until the end, so the body did not run entirely under the lock).
    ///
    /// # Errors
    /// What [`lock`](Self::lock) returns, [`Error::Lost`](crate::Error::Lost), or what the release returns.
    ///
    /// # Cancel safety
    /// Dropping the future drops `body` where it is and the guard, which releases the lock
    /// in the background.
    ///
    /// # Example
    /// ```no_run
    /// use lockwise::Lock;
    ///
    /// # async fn demo(client: lockwise::Client) -> lockwise::Result<()> {
    /// let lock = client.fenced_lock("ledger");
    /// let written = lock
    ///     .run(|held| async move {
    ///         // ... write to the store with held.token ...
    ///         held.token
    ///     })
    ///     .await?;
    /// # Ok(()) }
    /// ```
    fn run<T, F, Fut>(&self, body: F) -> impl Future<Output = Result<T>> + Send
    where
        T: Send,
        F: FnOnce(Held) -> Fut + Send,
        Fut: Future<Output = T> + Send,
    {
        let lock = self.clone();
        async move { scoped(lock.lock().await?, body).await }
    }

    /// [`run`](Self::run) with [`try_lock`](Self::try_lock)`(wait, lease)` as the acquire:
    /// [`Error::Timeout`](crate::Error::Timeout) when the lock did not come within `wait` (the body did not run).
    ///
    /// # Errors
    /// As for [`run`](Self::run), and [`Error::Timeout`](crate::Error::Timeout).
    ///
    /// # Cancel safety
    /// As for [`run`](Self::run).
    ///
    /// # Example
    ///
    /// ```rust,no_run
    /// # async fn demo<L: lockwise::Lock>(lock: L) -> lockwise::Result<()> {
    /// use std::time::Duration;
    /// let ran = lock.try_run(Duration::ZERO, None, |held| async move {
    ///     println!("running under {}", held.name);
    /// });
    /// match ran.await {
    ///     Err(e) if e.is_timeout() => println!("busy: this run is skipped"),
    ///     other => other?,
    /// }
    /// # Ok(()) }
    /// ```
    fn try_run<T, F, Fut>(
        &self,
        wait: Duration,
        lease: Option<Duration>,
        body: F,
    ) -> impl Future<Output = Result<T>> + Send
    where
        T: Send,
        F: FnOnce(Held) -> Fut + Send,
        Fut: Future<Output = T> + Send,
    {
        let lock = self.clone();
        async move { scoped(lock.try_lock(wait, lease).await?, body).await }
    }
}

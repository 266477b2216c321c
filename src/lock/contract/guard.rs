//! [`LockGuard`]: one granted hold of a [`Lock`](super::Lock), as every guard offers it.

use std::future::Future;
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use crate::error::Result;

/// One granted hold of a [`Lock`](super::Lock), as every guard offers it. Each method means what the
/// guard's inherent method of the same name documents.
///
/// # Example
///
/// ```rust,no_run
/// use lockwise::LockGuard;
///
/// /// Works under any kind's guard.
/// async fn finish(guard: impl LockGuard) -> lockwise::Result<()> {
///     if guard.is_lost() {
///         eprintln!("{} was lost", guard.name());
///     }
///     guard.unlock().await
/// }
/// # async fn demo2(client: lockwise::Client) -> lockwise::Result<()> {
/// finish(client.lock("a").lock().await?).await?;
/// finish(client.fenced_lock("b").lock().await?).await?;
/// # Ok(()) }
/// ```
pub trait LockGuard: Send + 'static {
    /// The lock's name.
    ///
    /// # Example
    ///
    /// ```rust,no_run
    /// # async fn demo(guard: impl lockwise::LockGuard) -> lockwise::Result<()> {
    /// println!("holding {}", guard.name());
    /// // ... the critical section ...
    /// guard.unlock().await?;
    /// # Ok(()) }
    /// ```
    fn name(&self) -> &str;

    /// The owner field of the hold.
    ///
    /// # Example
    ///
    /// ```rust,no_run
    /// # async fn demo(guard: impl lockwise::LockGuard) -> lockwise::Result<()> {
    /// let (name, owner) = (guard.name().to_string(), guard.owner().to_string());
    /// guard.unlock().await?;
    /// println!("released {name}, held as {owner}"); // the owner field in Redis
    /// # Ok(()) }
    /// ```
    fn owner(&self) -> &str;

    /// The lease the hold was taken with; `None` when the watchdog renews it.
    ///
    /// # Example
    ///
    /// ```rust,no_run
    /// # async fn demo(guard: impl lockwise::LockGuard) -> lockwise::Result<()> {
    /// match guard.lease() {
    ///     Some(lease) => println!("expires {lease:?} after it was taken, unless released"),
    ///     None => println!("the watchdog keeps it alive until released"),
    /// }
    /// guard.unlock().await?;
    /// # Ok(()) }
    /// ```
    fn lease(&self) -> Option<Duration>;

    /// Whether the lock must be treated as lost.
    ///
    /// # Example
    ///
    /// ```rust,no_run
    /// # async fn step(_: u32) {}
    /// # async fn demo(guard: impl lockwise::LockGuard) -> lockwise::Result<()> {
    /// for batch in 0..10 {
    ///     if guard.is_lost() {
    ///         break; // stop working without the lock
    ///     }
    ///     step(batch).await;
    /// }
    /// guard.unlock().await?; // `Error::NotHeld` once lost
    /// # Ok(()) }
    /// ```
    fn is_lost(&self) -> bool;

    /// How long the lock is still known to be held; zero once lost.
    ///
    /// # Example
    ///
    /// ```rust,no_run
    /// # async fn demo(guard: impl lockwise::LockGuard) -> lockwise::Result<()> {
    /// use std::time::Duration;
    /// // ... a long computation ...
    /// if guard.validity() > Duration::from_secs(2) {
    ///     // ... the step that must not happen without the lock ...
    /// }
    /// guard.unlock().await?;
    /// # Ok(()) }
    /// ```
    fn validity(&self) -> Duration;

    /// A token cancelled when the lock is known to be lost.
    ///
    /// # Example
    ///
    /// ```rust,no_run
    /// # async fn work() {}
    /// # async fn demo(guard: impl lockwise::LockGuard) -> lockwise::Result<()> {
    /// let lost = guard.lost();
    /// tokio::select! {
    ///     () = work() => guard.unlock().await?,
    ///     () = lost.cancelled() => eprintln!("lost {}: work stopped", guard.name()),
    /// }
    /// # Ok(()) }
    /// ```
    fn lost(&self) -> CancellationToken;

    /// The fencing token of a [`FencedLock`](crate::FencedLock) hold; `None` for the other
    /// kinds.
    ///
    /// # Example
    ///
    /// ```rust,no_run
    /// # async fn demo(guard: impl lockwise::LockGuard) -> lockwise::Result<()> {
    /// match guard.fencing_token() {
    ///     Some(token) => println!("write to the store with token {token}"),
    ///     None => println!("{} is not a fenced lock: no token", guard.name()),
    /// }
    /// guard.unlock().await?;
    /// # Ok(()) }
    /// ```
    fn fencing_token(&self) -> Option<u64> {
        None
    }

    /// Moves the hold to an owner of its own, so the task that took it no longer re-enters.
    ///
    /// # Example
    ///
    /// ```rust,no_run
    /// # async fn demo(mut guard: impl lockwise::LockGuard) -> lockwise::Result<()> {
    /// guard.detach().await?; // this task no longer re-enters it
    /// tokio::spawn(async move {
    ///     // ... work that may outlive this task ...
    ///     guard.unlock().await
    /// });
    /// # Ok(()) }
    /// ```
    fn detach(&mut self) -> impl Future<Output = Result<()>> + Send;

    /// Releases the hold.
    ///
    /// # Example
    ///
    /// ```rust,no_run
    /// # async fn demo(guard: impl lockwise::LockGuard) -> lockwise::Result<()> {
    /// // ... the critical section ...
    /// match guard.unlock().await {
    ///     Err(e) if e.is_not_held() => eprintln!("the lock expired before the release"),
    ///     other => other?,
    /// }
    /// # Ok(()) }
    /// ```
    fn unlock(self) -> impl Future<Output = Result<()>> + Send;
}

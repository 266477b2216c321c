//! [`MultiLockGuard`]: the guard over every member of a [`MultiLock`](super::MultiLock).

use std::sync::Arc;
use std::time::Duration;

use futures::future::{join_all, select_all};
use tokio_util::sync::{CancellationToken, DropGuard};

use crate::engine::Core;
use crate::error::Result;
use crate::lock::reentrant::RLockGuard;

/// Holds every member of a [`MultiLock`](super::MultiLock). Release with [`unlock`](MultiLockGuard::unlock);
/// dropping it drops each member guard, which releases them in the background.
///
/// # Example
///
/// ```rust,no_run
/// # async fn demo(client: lockwise::Client) -> lockwise::Result<()> {
/// let guard = client.multi_lock(["a", "b"]).lock().await?;
/// println!("held {} for {:?} more", guard.name(), guard.validity());
/// guard.unlock().await?; // releases every member
/// # Ok(()) }
/// ```
#[must_use = "the locks are released when the guard is dropped; call .unlock().await"]
pub struct MultiLockGuard {
    /// The member names joined by `,`.
    name: String,
    guards: Vec<RLockGuard>,
    lost: CancellationToken,
    acquired_in: Duration,
    /// Stops the task that watches the members' lost tokens.
    _watch: Option<DropGuard>,
}

impl MultiLockGuard {
    pub(super) fn new(
        core: &Arc<Core>,
        name: String,
        guards: Vec<RLockGuard>,
        acquired_in: Duration,
    ) -> MultiLockGuard {
        let lost = CancellationToken::new();
        let done = CancellationToken::new();
        let members: Vec<CancellationToken> = guards.iter().map(RLockGuard::lost).collect();
        let (combined, stop) = (lost.clone(), done.clone());
        core.handle.spawn(async move {
            let any_lost = select_all(members.iter().map(|t| Box::pin(t.cancelled())));
            tokio::select! {
                _ = any_lost => combined.cancel(),
                _ = stop.cancelled() => {}
            }
        });
        MultiLockGuard {
            name,
            guards,
            lost,
            acquired_in,
            _watch: Some(done.drop_guard()),
        }
    }

    /// Releases every member (all at once) and reports the first error; every member is
    /// released either way.
    ///
    /// # Errors
    /// The first member's error: [`Error::NotHeld`](crate::Error::NotHeld) when a member was already gone (expired,
    /// force-unlocked), [`Error::Redis`](crate::Error::Redis) when Redis failed.
    ///
    /// # Cancel safety
    /// Once called, the releases happen: dropping the future drops the member unlocks, which
    /// finish in the background.
    ///
    /// # Example
    ///
    /// ```rust,no_run
    /// # async fn demo(client: lockwise::Client) -> lockwise::Result<()> {
    /// let guard = client.multi_lock(["account:3", "account:7"]).lock().await?;
    /// // ... move money between the accounts ...
    /// guard.unlock().await?; // releases every member
    /// # Ok(()) }
    /// ```
    pub async fn unlock(mut self) -> Result<()> {
        let guards = std::mem::take(&mut self.guards);
        let mut first = Ok(());
        for result in join_all(guards.into_iter().map(RLockGuard::unlock)).await {
            if let (Err(e), Ok(())) = (result, &first) {
                first = Err(e);
            }
        }
        first
    }

    /// Moves every member hold to an owner of its own (see
    /// [`RLockGuard::detach`](crate::RLockGuard::detach)), so the task that took the set no
    /// longer re-enters its members: call it before the guard leaves its task (moved into
    /// `tokio::spawn`, kept in shared state). The locks stay held throughout.
    ///
    /// # Errors
    /// The first member's error, as [`RLockGuard::detach`](crate::RLockGuard::detach)
    /// reports it; the other members are detached either way, and the guard still holds
    /// every member (each under the owner it has now).
    ///
    /// # Cancel safety
    /// As for [`RLockGuard::detach`](crate::RLockGuard::detach), per member.
    ///
    /// # Example
    ///
    /// ```rust,no_run
    /// # async fn demo(client: lockwise::Client) -> lockwise::Result<()> {
    /// let mut guard = client.multi_lock(["account:3", "account:7"]).lock().await?;
    /// guard.detach().await?; // this task no longer re-enters the members
    /// tokio::spawn(async move { guard.unlock().await });
    /// # Ok(()) }
    /// ```
    pub async fn detach(&mut self) -> Result<()> {
        let mut first = Ok(());
        for guard in &mut self.guards {
            if let (Err(e), Ok(())) = (guard.detach().await, &first) {
                first = Err(e);
            }
        }
        first
    }

    /// The multi-lock's name: its member names, sorted, joined by `,`.
    ///
    /// # Example
    ///
    /// ```rust,no_run
    /// # async fn demo(client: lockwise::Client) -> lockwise::Result<()> {
    /// let guard = client.multi_lock(["b", "a"]).lock().await?;
    /// assert_eq!(guard.name(), "a,b");
    /// guard.unlock().await?;
    /// # Ok(()) }
    /// ```
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The member names, in the order they were taken (sorted).
    ///
    /// # Example
    ///
    /// ```rust,no_run
    /// # async fn demo(client: lockwise::Client) -> lockwise::Result<()> {
    /// let guard = client.multi_lock(["b", "a"]).lock().await?;
    /// assert_eq!(guard.names(), ["a", "b"]);
    /// guard.unlock().await?;
    /// # Ok(()) }
    /// ```
    pub fn names(&self) -> Vec<&str> {
        self.guards.iter().map(|g| g.name()).collect()
    }

    /// The owner field of the first member's hold: `<client id>:<task id>` for a task-owned
    /// handle (the same for every member), `<client id>:h<n>` for a non-reentrant or
    /// detached one (each member has its own).
    ///
    /// # Example
    ///
    /// ```rust,no_run
    /// # async fn demo(client: lockwise::Client) -> lockwise::Result<()> {
    /// let guard = client.multi_lock(["a", "b"]).lock().await?;
    /// println!("held by {}", guard.owner());
    /// guard.unlock().await?;
    /// # Ok(()) }
    /// ```
    pub fn owner(&self) -> &str {
        self.guards.first().map_or("", |g| g.owner())
    }

    /// The lease the members were taken with; `None` when the watchdog renews them.
    ///
    /// # Example
    ///
    /// ```rust,no_run
    /// # async fn demo(client: lockwise::Client) -> lockwise::Result<()> {
    /// use std::time::Duration;
    /// let guard = client.multi_lock(["a", "b"]).lock_with_lease(Duration::from_secs(10)).await?;
    /// assert_eq!(guard.lease(), Some(Duration::from_secs(10)));
    /// guard.unlock().await?;
    /// # Ok(()) }
    /// ```
    pub fn lease(&self) -> Option<Duration> {
        self.guards.first().and_then(|g| g.lease())
    }

    /// Time from taking the first member to taking the last. With a lease, the whole set is
    /// held for at least `lease - acquired_in` after the guard was handed out.
    ///
    /// # Example
    ///
    /// ```rust,no_run
    /// # async fn demo(client: lockwise::Client) -> lockwise::Result<()> {
    /// use std::time::Duration;
    /// let lease = Duration::from_secs(10);
    /// let guard = client.multi_lock(["a", "b"]).lock_with_lease(lease).await?;
    /// println!("every member held for {:?} more", lease.saturating_sub(guard.acquired_in()));
    /// guard.unlock().await?;
    /// # Ok(()) }
    /// ```
    pub fn acquired_in(&self) -> Duration {
        self.acquired_in
    }

    /// Whether any member is known to be lost (see
    /// [`RLockGuard::is_lost`](crate::RLockGuard::is_lost)).
    ///
    /// # Example
    ///
    /// ```rust,no_run
    /// # async fn demo(client: lockwise::Client) -> lockwise::Result<()> {
    /// let guard = client.multi_lock(["a", "b"]).lock().await?;
    /// // ... one step of the work ...
    /// if guard.is_lost() {
    ///     return Ok(()); // a member is gone: stop before the next step
    /// }
    /// guard.unlock().await?;
    /// # Ok(()) }
    /// ```
    pub fn is_lost(&self) -> bool {
        self.lost.is_cancelled() || self.guards.iter().any(|g| g.is_lost())
    }

    /// A token cancelled as soon as any member is known to be lost.
    ///
    /// # Example
    ///
    /// ```rust,no_run
    /// # async fn demo(client: lockwise::Client) -> lockwise::Result<()> {
    /// let guard = client.multi_lock(["a", "b"]).lock().await?;
    /// let lost = guard.lost();
    /// tokio::select! {
    ///     _ = tokio::time::sleep(std::time::Duration::from_secs(1)) => {} // the work
    ///     _ = lost.cancelled() => eprintln!("a member was lost: stop"),
    /// }
    /// guard.unlock().await?;
    /// # Ok(()) }
    /// ```
    pub fn lost(&self) -> CancellationToken {
        self.lost.clone()
    }

    /// How long every member is still known to be held: the smallest
    /// [`RLockGuard::validity`](crate::RLockGuard::validity) of the members; zero once any is lost.
    ///
    /// # Example
    ///
    /// ```rust,no_run
    /// # async fn demo(client: lockwise::Client) -> lockwise::Result<()> {
    /// use std::time::Duration;
    /// let guard = client.multi_lock(["a", "b"]).lock().await?;
    /// if guard.validity() > Duration::from_secs(1) {
    ///     // ... a short step that must not run without every member ...
    /// }
    /// guard.unlock().await?;
    /// # Ok(()) }
    /// ```
    pub fn validity(&self) -> Duration {
        if self.lost.is_cancelled() {
            return Duration::ZERO;
        }
        self.guards
            .iter()
            .map(RLockGuard::validity)
            .min()
            .unwrap_or(Duration::ZERO)
    }
}

impl std::fmt::Debug for MultiLockGuard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MultiLockGuard")
            .field("names", &self.names())
            .field("owner", &self.owner())
            .field("lease", &self.lease())
            .field("lost", &self.is_lost())
            .finish()
    }
}

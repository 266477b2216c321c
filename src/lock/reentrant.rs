//! [`RLock`]: the reentrant lock, and its guard.

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use crate::engine::acquire::{AttemptArgs, ScriptCall};
use crate::engine::{self, Base, Core, Hold, Owner};
use crate::error::Result;
use crate::layout;
use crate::lock::api::{guard_accessors, inspect_methods, owner_methods};
use crate::wire::keys::Role;

/// A reentrant distributed lock, like Redisson's `RLock`: a Redis hash whose one field
/// `<client id>:<task id>` counts the holder's holds.
///
/// Get one from [`Client::lock`](crate::Client::lock); it is a cheap handle (`Clone`,
/// `Send`, `Sync`) and sends nothing until used.
///
/// * The owner is the calling tokio task of this `Client`: the same task may lock again
///   (re-entry raises the hold count), any other task, or the same task through another
///   `Client`, waits. Each [`RLockGuard`] is one hold; the lock is free when every hold is
///   released.
/// * Without a lease the lock lives as long as its holder: the client's watchdog renews it
///   every `watchdog_timeout / 3`, and it expires within `watchdog_timeout` after a crash.
///   With a lease it expires after the lease, whatever the holder is doing.
///
/// # What it guarantees
/// At most one owner holds the lock while its key lives in Redis. It cannot stop a holder
/// that was paused (GC, SIGSTOP, a long syscall) past its TTL from acting as if it still
/// held the lock: when the protected resource must reject such late writers, use fencing
/// tokens (see [`guide::locks`](crate::guide::locks)).
///
/// # Example
///
/// ```rust,no_run
/// # async fn demo(client: lockwise::Client) -> lockwise::Result<()> {
/// use std::time::Duration;
/// let lock = client.lock("invoice:42");
/// let guard = lock.lock().await?; // waits; the watchdog keeps it alive
/// // ... the critical section ...
/// guard.unlock().await?;
/// // Wait at most 100 ms; if taken, the lock expires after 5 s unless released first.
/// match lock.try_lock(Duration::from_millis(100), Some(Duration::from_secs(5))).await {
///     Ok(guard) => guard.unlock().await?,
///     Err(e) if e.is_timeout() => println!("someone else has it"),
///     Err(e) => return Err(e),
/// }
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct RLock {
    pub(super) base: Arc<Base>,
}

impl RLock {
    pub(crate) fn new(core: Arc<Core>, name: &str) -> RLock {
        RLock {
            base: Arc::new(Base::new(core, name, Role::Lock)),
        }
    }

    pub(crate) fn with_owner_mode(&self, owner: Owner) -> RLock {
        RLock {
            base: Arc::new(self.base.with_owner(owner)),
        }
    }

    pub(crate) fn owner_mode(&self) -> &Owner {
        &self.base.owner
    }

    /// The lock's name.
    ///
    /// # Example
    ///
    /// ```rust,no_run
    /// # async fn demo(client: lockwise::Client) -> lockwise::Result<()> {
    /// let lock = client.lock("invoice:42");
    /// let guard = lock.lock().await?;
    /// println!("holding {}", lock.name());
    /// guard.unlock().await?;
    /// # Ok(()) }
    /// ```
    pub fn name(&self) -> &str {
        &self.base.name
    }

    /// The Redis key of the lock hash (`<namespace>:lock:{<name>}`).
    ///
    /// # Example
    ///
    /// ```rust,no_run
    /// # async fn demo(client: lockwise::Client) -> lockwise::Result<()> {
    /// let lock = client.lock("invoice:42");
    /// // One hash, whichever kind of lock of this name took it:
    /// assert_eq!(lock.key(), client.fenced_lock("invoice:42").key());
    /// println!("lock hash at {}", lock.key());
    /// # Ok(()) }
    /// ```
    pub fn key(&self) -> &str {
        &self.base.key
    }

    /// The pub/sub channel unlocks publish to (`<namespace>:channel:{<name>}`).
    ///
    /// # Example
    ///
    /// ```rust,no_run
    /// # async fn demo(client: lockwise::Client) -> lockwise::Result<()> {
    /// let lock = client.lock("invoice:42");
    /// // Unlocks publish here; waiters are woken through the client's one subscription.
    /// println!("unlocks of {} publish on {}", lock.name(), lock.channel());
    /// # Ok(()) }
    /// ```
    pub fn channel(&self) -> &str {
        &self.base.keys.channel
    }

    /// Acquires the lock, waiting as long as it takes; the watchdog keeps it alive until the
    /// guard is released.
    ///
    /// Waiting costs no polling: the client's subscription connection wakes the waiter when
    /// the lock is released, and each wait is bounded by the holder's TTL, so a crashed
    /// holder's lock is taken when it expires.
    ///
    /// # Errors
    /// [`Error::ClientClosed`](crate::Error::ClientClosed) once the last `Client` clone is dropped
    /// (a waiting call returns it then too).
    /// [`Error::InvalidArgument`](crate::Error::InvalidArgument) for an invalid name; [`Error::Redis`](crate::Error::Redis) when Redis fails.
    ///
    /// # Cancel safety
    /// Cancel safe. Dropping the future at any point leaves no hold behind: a hold granted by
    /// a reply nobody awaited any more is released in the background within a moment, and
    /// the waiter's channel subscription is dropped (unsubscribed if it was the last).
    ///
    /// # Example
    ///
    /// ```rust,no_run
    /// # async fn demo(client: lockwise::Client) -> lockwise::Result<()> {
    /// let lock = client.lock("invoice:42");
    /// let guard = lock.lock().await?; // waits as long as it takes
    /// // ... the critical section; the watchdog keeps the lock alive ...
    /// guard.unlock().await?;
    /// # Ok(()) }
    /// ```
    pub async fn lock(&self) -> Result<RLockGuard> {
        engine::never_timed_out(self.acquire(None, None).await?)
    }

    /// Acquires the lock, waiting as long as it takes; the lock expires `lease` after it was
    /// taken unless released before (no watchdog).
    ///
    /// # Errors
    /// [`Error::ClientClosed`](crate::Error::ClientClosed) once the last `Client` clone is dropped
    /// (a waiting call returns it then too).
    /// [`Error::InvalidArgument`](crate::Error::InvalidArgument) for an invalid name or a lease below 1 ms or above
    /// 2<sup>53</sup> ms; [`Error::Redis`](crate::Error::Redis) when Redis fails.
    ///
    /// # Cancel safety
    /// As for [`RLock::lock`].
    ///
    /// # Example
    ///
    /// ```rust,no_run
    /// # async fn demo(client: lockwise::Client) -> lockwise::Result<()> {
    /// use std::time::Duration;
    /// let lock = client.lock("invoice:42");
    /// let guard = lock.lock_with_lease(Duration::from_secs(10)).await?;
    /// // ... done within 10 s, or the lock expires by itself ...
    /// guard.unlock().await?;
    /// # Ok(()) }
    /// ```
    pub async fn lock_with_lease(&self, lease: Duration) -> Result<RLockGuard> {
        engine::never_timed_out(self.acquire(None, Some(lease)).await?)
    }

    /// Tries to acquire the lock, waiting at most `wait`; `Duration::ZERO` makes a single
    /// attempt. [`Error::Timeout`](crate::Error::Timeout) means another owner held it for the
    /// whole wait. With `lease: None` the
    /// watchdog keeps the lock alive; with `Some(lease)` it expires after the lease.
    ///
    /// # Errors
    /// [`Error::ClientClosed`](crate::Error::ClientClosed) once the last `Client` clone is dropped
    /// (a waiting call returns it then too).
    /// [`Error::InvalidArgument`](crate::Error::InvalidArgument) for an invalid name or lease; [`Error::Redis`](crate::Error::Redis) when Redis
    /// fails. [`Error::Timeout`](crate::Error::Timeout) when the wait ran out.
    ///
    /// # Cancel safety
    /// As for [`RLock::lock`].
    ///
    /// # Example
    ///
    /// ```rust,no_run
    /// # async fn demo(client: lockwise::Client) -> lockwise::Result<()> {
    /// use std::time::Duration;
    /// let lock = client.lock("invoice:42");
    /// match lock.try_lock(Duration::from_millis(500), None).await {
    ///     Ok(guard) => guard.unlock().await?,
    ///     Err(e) if e.is_timeout() => println!("{} is busy, try later", lock.name()),
    ///     Err(e) => return Err(e),
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn try_lock(&self, wait: Duration, lease: Option<Duration>) -> Result<RLockGuard> {
        engine::or_timeout(
            self.acquire(Some(engine::deadline_after(wait)), lease)
                .await?,
            self.name(),
        )
    }

    async fn acquire(
        &self,
        deadline: Option<Instant>,
        lease: Option<Duration>,
    ) -> Result<Option<RLockGuard>> {
        let wake = engine::Wake::Channel(self.channel());
        let hold = self
            .acquire_hold(wake, engine::KindId::Reentrant, deadline, lease)
            .await?;
        Ok(hold.map(|hold| RLockGuard { hold }))
    }

    /// The acquire of the lock hash (`lua/lock.lua`), waking as `wake` says: on the
    /// channel for an `RLock`, by backoff for a [`SpinLock`](super::spin::SpinLock) of the
    /// same name; `label` names the kind in metrics and spans.
    pub(super) async fn acquire_hold(
        &self,
        wake: engine::Wake<'_>,
        label: engine::KindId,
        deadline: Option<Instant>,
        lease: Option<Duration>,
    ) -> Result<Option<Hold>> {
        let owner = self.base.owner_field();
        let granted =
            engine::acquire::run(&self.base, self, owner, wake, deadline, lease, label).await?;
        Ok(granted.map(|(hold, ())| hold))
    }

    /// Deletes the lock whoever holds it and wakes its waiters. Returns whether it was
    /// locked. The former holders' guards then fail to unlock with [`Error::NotHeld`](crate::Error::NotHeld); watchdog
    /// holders also see [`RLockGuard::lost`] fire at their next renewal.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`](crate::Error::InvalidArgument) for an invalid name; [`Error::Redis`](crate::Error::Redis) when Redis fails.
    ///
    /// # Cancel safety
    /// Dropping the future may or may not have deleted the lock.
    ///
    /// # Example
    ///
    /// ```rust,no_run
    /// # async fn demo(client: lockwise::Client) -> lockwise::Result<()> {
    /// let lock = client.lock("invoice:42");
    /// if lock.force_unlock().await? {
    ///     println!("{} was held; its holders' guards no longer hold it", lock.name());
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn force_unlock(&self) -> Result<bool> {
        self.base.force_unlock().await
    }
}

inspect_methods!(RLock: base, lock: "client.lock(\"invoice:42\")");
owner_methods!(RLock, lock: "client.lock(\"invoice:42\")");

/// One attempt of `lua/lock.lua` on the lock hash and its claim queue. Redisson's layout has
/// no claim queue: the script without one is Redisson's RLock acquire, byte for byte in its
/// effects.
impl engine::acquire::AcquireScript for RLock {
    type Extra = ();

    fn what(&self) -> &'static str {
        "lock"
    }

    fn call<'a>(&'a self, a: &'a AttemptArgs) -> ScriptCall<'a> {
        let base = &self.base;
        layout::lock(base.core.layout, &base.key, &base.claims, a)
    }

    fn parse(&self, reply: &[i64]) -> Option<engine::Reply<()>> {
        engine::plain_reply(reply)
    }

    fn batched(&self) -> Option<&Arc<Base>> {
        // `lua/batch.lua` runs `lua/lock.lua` with its claim keys.
        layout::has_claims(self.base.core.layout).then_some(&self.base)
    }
}

impl std::fmt::Debug for RLock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RLock")
            .field("name", &self.base.name)
            .field("key", &self.base.key)
            .finish()
    }
}

/// One hold of an [`RLock`]. Release it with [`unlock`](RLockGuard::unlock), which reports
/// errors; dropping it releases in the background instead.
///
/// The guard may be moved to, and unlocked from, any task: it remembers its owner.
///
/// # Dropping without `unlock`
/// `Drop` cannot wait, so it stops the watchdog for this hold and hands the unlock script to
/// the runtime without waiting (never `block_on`). If that unlock cannot reach Redis, the lock
/// expires with its TTL (the lease, or the watchdog timeout).
///
/// # Example
///
/// ```rust,no_run
/// # async fn demo(client: lockwise::Client) -> lockwise::Result<()> {
/// let guard = client.lock("report").lock().await?;
/// let lost = guard.lost(); // cancelled if the watchdog finds the lock gone
/// tokio::select! {
///     _ = tokio::time::sleep(std::time::Duration::from_secs(1)) => {} // the work
///     _ = lost.cancelled() => eprintln!("lost {}: stop writing", guard.name()),
/// }
/// match guard.unlock().await {
///     Ok(()) => {}
///     Err(e) if e.is_not_held() => eprintln!("the hold had already ended"),
///     Err(e) => return Err(e),
/// }
/// # Ok(()) }
/// ```
#[must_use = "the lock is released when the guard is dropped; call .unlock().await"]
pub struct RLockGuard {
    hold: Hold,
}

impl RLockGuard {
    /// Releases this hold; the last hold frees the lock and wakes one waiter per client.
    ///
    /// Not retried on failure: a retried unlock could release a hold that is no longer this
    /// guard's. On an error the hold is left to expire with its TTL (the watchdog no longer
    /// renews it).
    ///
    /// # Errors
    /// [`Error::NotHeld`](crate::Error::NotHeld) when the hold was already gone (expired, force-unlocked, taken over):
    /// nothing was released. [`Error::Redis`](crate::Error::Redis) when Redis failed.
    ///
    /// # Cancel safety
    /// Once called, the release happens: dropping the future lets it finish in the background.
    ///
    /// # Example
    ///
    /// ```rust,no_run
    /// # async fn demo(client: lockwise::Client) -> lockwise::Result<()> {
    /// let guard = client.lock("invoice:42").lock().await?;
    /// match guard.unlock().await {
    ///     Ok(()) => {}
    ///     Err(e) if e.is_not_held() => eprintln!("the hold had already ended"),
    ///     Err(e) => return Err(e),
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn unlock(mut self) -> Result<()> {
        self.hold.unlock().await
    }
}

guard_accessors!(RLockGuard, lock: "client.lock(\"invoice:42\")");

impl std::fmt::Debug for RLockGuard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RLockGuard")
            .field("name", &self.name())
            .field("owner", &self.owner())
            .field("lease", &self.lease())
            .field("lost", &self.is_lost())
            .finish()
    }
}

crate::lock::contract::impl_lock!(crate::RLock, crate::RLockGuard);

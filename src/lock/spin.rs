//! [`SpinLock`]: a reentrant lock whose waiters never subscribe, and its guard.

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use super::reentrant::RLock;
use crate::backoff::Backoff;
use crate::engine::{self, Core, Hold, Owner, Wake};
use crate::error::{Error, Result};
use crate::lock::api::{guard_accessors, inspect_methods, owner_methods};
use crate::lock::contract::impl_lock;

/// The first pause of a waiting [`SpinLock`].
pub const DEFAULT_SPIN_INITIAL: Duration = Duration::from_millis(4);
/// The longest pause of a waiting [`SpinLock`].
pub const DEFAULT_SPIN_MAX: Duration = Duration::from_millis(128);

/// A reentrant lock whose waiters never subscribe, like Redisson's `RSpinLock`: a waiter
/// tries again after a pause that doubles from 4 ms up to 128 ms (with jitter; see
/// [`with_backoff`](Self::with_backoff)), never longer than the holder's TTL.
///
/// It is the same lock as an [`RLock`](crate::RLock) of the same name (one hash, the same
/// owners and holds: the two exclude each other, and one can re-enter a hold the other
/// took), so only the waiting differs:
///
/// * **For** deployments where subscriptions are unavailable or costly: proxies and
///   managed services without pub/sub, and very hot locks on large clusters, where every
///   waiter's subscription and every wake-up cost more than a few polls.
/// * **Against** it elsewhere: a waiter learns of a release only at its next try, so a
///   handoff takes up to the current pause (an `RLock` waiter is woken at once), and each
///   try is a script call, which a busy lock with many waiters pays for on the server.
///
/// Its releases still publish on the lock's channel, so waiters of the other kinds of the
/// name are woken as usual; it honours their overtake claims (a free lock goes to the head
/// of their queue) but does not queue claims of its own: a spin waiter has no overtake
/// bound. Get one from [`Client::spin_lock`](crate::Client::spin_lock).
///
/// ```no_run
/// # async fn f(client: lockwise::Client) -> lockwise::Result<()> {
/// use std::time::Duration;
///
/// let lock = client
///     .spin_lock("cache:rebuild")
///     .with_backoff(Duration::from_millis(2), Duration::from_millis(50));
/// let guard = lock.lock().await?;
/// // ... rebuild the cache ...
/// guard.unlock().await?;
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct SpinLock {
    /// The `RLock` of the name: the spin lock is that lock, waited for differently.
    rlock: RLock,
    backoff: Backoff,
}

impl SpinLock {
    pub(crate) fn new(core: Arc<Core>, name: &str) -> SpinLock {
        SpinLock {
            rlock: RLock::new(core, name),
            backoff: Backoff {
                initial: DEFAULT_SPIN_INITIAL,
                max: DEFAULT_SPIN_MAX,
            },
        }
    }

    pub(crate) fn with_owner_mode(&self, owner: Owner) -> SpinLock {
        SpinLock {
            rlock: self.rlock.with_owner_mode(owner),
            backoff: self.backoff,
        }
    }

    pub(crate) fn owner_mode(&self) -> &Owner {
        self.rlock.owner_mode()
    }

    /// The same lock, waiting with pauses from `initial` doubling up to `max` (each with
    /// equal jitter: between half of it and all of it). A pause below 1 ms, or a `max` below
    /// `initial`, is reported by the acquire methods as
    /// [`Error::InvalidArgument`](crate::Error::InvalidArgument).
    ///
    /// # Example
    ///
    /// ```rust,no_run
    /// # async fn demo(client: lockwise::Client) -> lockwise::Result<()> {
    /// use std::time::Duration;
    /// let lock = client
    ///     .spin_lock("cache:rebuild")
    ///     .with_backoff(Duration::from_millis(2), Duration::from_millis(50));
    /// let guard = lock.lock().await?; // tries again after ~2, 4, 8, ... 50 ms
    /// guard.unlock().await?;
    /// # Ok(()) }
    /// ```
    pub fn with_backoff(&self, initial: Duration, max: Duration) -> SpinLock {
        SpinLock {
            rlock: self.rlock.clone(),
            backoff: Backoff { initial, max },
        }
    }

    /// The pauses of this handle's waiters: (first, longest).
    ///
    /// # Example
    ///
    /// ```rust,no_run
    /// # async fn demo(client: lockwise::Client) -> lockwise::Result<()> {
    /// use lockwise::{DEFAULT_SPIN_INITIAL, DEFAULT_SPIN_MAX};
    /// let lock = client.spin_lock("cache:rebuild");
    /// assert_eq!(lock.backoff(), (DEFAULT_SPIN_INITIAL, DEFAULT_SPIN_MAX));
    /// # Ok(()) }
    /// ```
    pub fn backoff(&self) -> (Duration, Duration) {
        (self.backoff.initial, self.backoff.max)
    }

    /// The lock's name.
    ///
    /// # Example
    ///
    /// ```rust,no_run
    /// # async fn demo(client: lockwise::Client) -> lockwise::Result<()> {
    /// let lock = client.spin_lock("cache:rebuild");
    /// let guard = lock.lock().await?;
    /// println!("holding {}", lock.name());
    /// guard.unlock().await?;
    /// # Ok(()) }
    /// ```
    pub fn name(&self) -> &str {
        self.rlock.name()
    }

    /// The Redis key of the lock hash (`<namespace>:lock:{<name>}`), the one an
    /// [`RLock`](crate::RLock) of the same name uses.
    ///
    /// # Example
    ///
    /// ```rust,no_run
    /// # async fn demo(client: lockwise::Client) -> lockwise::Result<()> {
    /// let lock = client.spin_lock("cache:rebuild");
    /// // The `RLock` of the same name: one hash, one lock.
    /// assert_eq!(lock.key(), client.lock("cache:rebuild").key());
    /// # Ok(()) }
    /// ```
    pub fn key(&self) -> &str {
        self.rlock.key()
    }

    /// Acquires the lock, waiting as long as it takes; the watchdog keeps it alive until the
    /// guard is released. The waiter tries again after each pause (see [`SpinLock`]).
    ///
    /// # Errors
    /// [`Error::ClientClosed`](crate::Error::ClientClosed) once the last `Client` clone is
    /// dropped (a waiting call returns it then too).
    /// [`Error::InvalidArgument`](crate::Error::InvalidArgument) for an invalid name or
    /// backoff; [`Error::Redis`](crate::Error::Redis) when Redis fails.
    ///
    /// # Cancel safety
    /// Cancel safe. Dropping the future at any point leaves no hold behind: a hold granted by
    /// a reply nobody awaited any more is released in the background within a moment.
    ///
    /// # Example
    ///
    /// ```rust,no_run
    /// # async fn demo(client: lockwise::Client) -> lockwise::Result<()> {
    /// let lock = client.spin_lock("cache:rebuild");
    /// let guard = lock.lock().await?; // polls with backoff, never subscribes
    /// // ... rebuild the cache ...
    /// guard.unlock().await?;
    /// # Ok(()) }
    /// ```
    pub async fn lock(&self) -> Result<SpinLockGuard> {
        engine::never_timed_out(self.acquire(None, None).await?)
    }

    /// Acquires the lock, waiting as long as it takes; the lock expires `lease` after it was
    /// taken unless released before (no watchdog).
    ///
    /// # Errors
    /// As for [`SpinLock::lock`], and [`Error::InvalidArgument`](crate::Error::InvalidArgument)
    /// for a lease below 1 ms or above 2<sup>53</sup> ms.
    ///
    /// # Cancel safety
    /// As for [`SpinLock::lock`].
    ///
    /// # Example
    ///
    /// ```rust,no_run
    /// # async fn demo(client: lockwise::Client) -> lockwise::Result<()> {
    /// use std::time::Duration;
    /// let lock = client.spin_lock("cache:rebuild");
    /// let guard = lock.lock_with_lease(Duration::from_secs(30)).await?;
    /// // ... done within 30 s, or the lock expires by itself ...
    /// guard.unlock().await?;
    /// # Ok(()) }
    /// ```
    pub async fn lock_with_lease(&self, lease: Duration) -> Result<SpinLockGuard> {
        engine::never_timed_out(self.acquire(None, Some(lease)).await?)
    }

    /// Tries to acquire the lock, waiting at most `wait`; `Duration::ZERO` makes a single
    /// attempt. With `lease: None` the watchdog keeps the lock alive; with `Some(lease)` it
    /// expires after the lease.
    ///
    /// # Errors
    /// As for [`SpinLock::lock_with_lease`], and [`Error::Timeout`](crate::Error::Timeout)
    /// when another owner held it for the whole wait.
    ///
    /// # Cancel safety
    /// As for [`SpinLock::lock`].
    ///
    /// # Example
    ///
    /// ```rust,no_run
    /// # async fn demo(client: lockwise::Client) -> lockwise::Result<()> {
    /// use std::time::Duration;
    /// let lock = client.spin_lock("cache:rebuild");
    /// match lock.try_lock(Duration::from_millis(200), None).await {
    ///     Ok(guard) => guard.unlock().await?,
    ///     Err(e) if e.is_timeout() => println!("someone else is rebuilding"),
    ///     Err(e) => return Err(e),
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn try_lock(&self, wait: Duration, lease: Option<Duration>) -> Result<SpinLockGuard> {
        engine::or_timeout(
            self.acquire(Some(engine::deadline_after(wait)), lease)
                .await?,
            self.name(),
        )
    }

    /// [`Error::InvalidArgument`] unless the backoff's pauses are usable.
    fn check_backoff(&self) -> Result<()> {
        let Backoff { initial, max } = self.backoff;
        if initial < Duration::from_millis(1) {
            return Err(Error::invalid(
                "backoff",
                format!("the first pause must be at least 1 ms, got {initial:?}"),
            ));
        }
        if max < initial {
            return Err(Error::invalid(
                "backoff",
                format!("the longest pause ({max:?}) is below the first ({initial:?})"),
            ));
        }
        Ok(())
    }

    async fn acquire(
        &self,
        deadline: Option<Instant>,
        lease: Option<Duration>,
    ) -> Result<Option<SpinLockGuard>> {
        self.check_backoff()?;
        let wake = Wake::Backoff(self.backoff);
        let hold = self
            .rlock
            .acquire_hold(wake, crate::engine::KindId::Spin, deadline, lease)
            .await?;
        Ok(hold.map(|hold| SpinLockGuard { hold }))
    }

    /// Deletes the lock whoever holds it (any kind of this name) and wakes its waiters.
    /// Returns whether it was locked. The former holders' guards then fail to unlock with
    /// [`Error::NotHeld`](crate::Error::NotHeld).
    ///
    /// # Errors
    /// [`Error::InvalidArgument`](crate::Error::InvalidArgument) for an invalid name;
    /// [`Error::Redis`](crate::Error::Redis) when Redis fails.
    ///
    /// # Cancel safety
    /// Dropping the future may or may not have deleted the lock.
    ///
    /// # Example
    ///
    /// ```rust,no_run
    /// # async fn demo(client: lockwise::Client) -> lockwise::Result<()> {
    /// let lock = client.spin_lock("cache:rebuild");
    /// if lock.force_unlock().await? {
    ///     println!("{} was held; deleted", lock.name());
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn force_unlock(&self) -> Result<bool> {
        self.rlock.force_unlock().await
    }
}

inspect_methods!(SpinLock: rlock.base, lock: "client.spin_lock(\"cache:rebuild\")");
owner_methods!(SpinLock, lock: "client.spin_lock(\"cache:rebuild\")");

impl std::fmt::Debug for SpinLock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SpinLock")
            .field("name", &self.name())
            .field("key", &self.key())
            .field("backoff", &self.backoff)
            .finish()
    }
}

/// One hold of a [`SpinLock`]. Release it with [`unlock`](SpinLockGuard::unlock), which
/// reports errors; dropping it releases in the background instead.
///
/// The guard may be moved to, and unlocked from, any task: it remembers its owner.
///
/// # Example
///
/// ```rust,no_run
/// # async fn demo(client: lockwise::Client) -> lockwise::Result<()> {
/// let guard = client.spin_lock("hot-counter").lock().await?;
/// println!("held by {}", guard.owner());
/// guard.unlock().await?;
/// # Ok(()) }
/// ```
#[must_use = "the lock is released when the guard is dropped; call .unlock().await"]
pub struct SpinLockGuard {
    hold: Hold,
}

impl SpinLockGuard {
    /// Releases this hold; the last hold frees the lock (and wakes the waiters of the other
    /// kinds of the name; spin waiters find it free at their next try).
    ///
    /// Not retried on failure: a retried unlock could release a hold that is no longer this
    /// guard's. On an error the hold is left to expire with its TTL.
    ///
    /// # Errors
    /// [`Error::NotHeld`](crate::Error::NotHeld) when the hold was already gone (expired,
    /// force-unlocked, taken over): nothing was released. [`Error::Redis`](crate::Error::Redis)
    /// when Redis failed.
    ///
    /// # Cancel safety
    /// Once called, the release happens: dropping the future lets it finish in the background.
    ///
    /// # Example
    ///
    /// ```rust,no_run
    /// # async fn demo(client: lockwise::Client) -> lockwise::Result<()> {
    /// let guard = client.spin_lock("cache:rebuild").lock().await?;
    /// // ... the critical section ...
    /// guard.unlock().await?; // spin waiters find it free at their next try
    /// # Ok(()) }
    /// ```
    pub async fn unlock(mut self) -> Result<()> {
        self.hold.unlock().await
    }
}

guard_accessors!(SpinLockGuard, lock: "client.spin_lock(\"cache:rebuild\")");

impl std::fmt::Debug for SpinLockGuard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SpinLockGuard")
            .field("name", &self.name())
            .field("owner", &self.owner())
            .field("lease", &self.lease())
            .field("lost", &self.is_lost())
            .finish()
    }
}

impl_lock!(SpinLock, SpinLockGuard);

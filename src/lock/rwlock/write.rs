//! [`WriteLock`]: the write side of a [`RwLock`](super::RwLock), and its guard.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;
use futures::FutureExt;
use tokio::time::Instant;

use super::redisson::{self, Inspect};
use super::shared::{Shared, Side};
use crate::engine::acquire::{Arg, AttemptArgs, ScriptCall};
use crate::engine::{self, Base, Hold};
use crate::error::{Error, Result};
use crate::lock::api::{guard_accessors, inspect_methods};
use crate::wire::scripts::{RW_LEAVE, RW_WRITE};

/// The write side of a [`RwLock`](super::RwLock): one owner at a time, while nobody reads.
/// Get it from [`RwLock::write`](super::RwLock::write).
///
/// A writer that has to wait registers its intent on the server, and new readers wait
/// behind it (writer preference). It withdraws the intent when it stops waiting (timeout,
/// error, dropped future); a crashed writer's intent lapses within one watchdog timeout.
///
/// # Example
///
/// ```rust,no_run
/// # async fn demo(client: lockwise::Client) -> lockwise::Result<()> {
/// use std::time::Duration;
/// let write = client.rw_lock("catalog").write();
/// let guard = write.try_lock(Duration::from_secs(1), None).await?;
/// guard.unlock().await?;
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct WriteLock {
    shared: Arc<Shared>,
    base: Arc<Base>,
    inspect: Inspect,
}

impl WriteLock {
    pub(super) fn new(shared: Arc<Shared>, base: Base) -> WriteLock {
        let base = Arc::new(base.with_release(redisson::release(&shared, Side::Write)));
        WriteLock {
            inspect: Inspect {
                base: base.clone(),
                shared: shared.clone(),
                side: Side::Write,
            },
            base,
            shared,
        }
    }

    /// The lock's name.
    ///
    /// # Example
    ///
    /// ```rust,no_run
    /// # async fn demo(client: lockwise::Client) -> lockwise::Result<()> {
    /// let write = client.rw_lock("catalog").write();
    /// let guard = write.lock().await?;
    /// println!("writing {}", write.name());
    /// guard.unlock().await?;
    /// # Ok(()) }
    /// ```
    pub fn name(&self) -> &str {
        &self.base.name
    }

    /// The Redis key of the writer hash (`<namespace>:rwwrite:{<name>}`); in Redisson's
    /// layout the lock's one hash, the name itself.
    ///
    /// # Example
    ///
    /// ```rust,no_run
    /// # async fn demo(client: lockwise::Client) -> lockwise::Result<()> {
    /// let write = client.rw_lock("catalog").write();
    /// // The writer hash, not the key of `client.lock("catalog")`.
    /// assert_ne!(write.key(), client.lock("catalog").key());
    /// # Ok(()) }
    /// ```
    pub fn key(&self) -> &str {
        &self.base.key
    }

    /// Takes the write hold, waiting as long as it takes (until no other owner writes and
    /// nobody reads); the watchdog keeps it alive until the guard is released.
    ///
    /// # Errors
    /// [`Error::UpgradeRefused`](crate::Error::UpgradeRefused) at once when this owner holds
    /// the read lock and not the write lock (nothing is changed).
    /// [`Error::ClientClosed`](crate::Error::ClientClosed) once the last `Client` clone is
    /// dropped; [`Error::InvalidArgument`](crate::Error::InvalidArgument) for an invalid name
    /// or owner; [`Error::Redis`](crate::Error::Redis) when Redis fails (`WRONGTYPE` when a
    /// key of the lock holds something else: nothing is changed).
    ///
    /// # Cancel safety
    /// Cancel safe. Dropping the future at any point leaves no hold, no subscription and no
    /// intent behind: the intent is withdrawn in the background at once.
    ///
    /// # Example
    ///
    /// ```rust,no_run
    /// # async fn demo(client: lockwise::Client) -> lockwise::Result<()> {
    /// let write = client.rw_lock("catalog").write();
    /// let guard = write.lock().await?; // waits for readers and other writers to leave
    /// // ... update the catalog ...
    /// guard.unlock().await?;
    /// # Ok(()) }
    /// ```
    pub async fn lock(&self) -> Result<WriteLockGuard> {
        engine::never_timed_out(self.acquire(None, None).await?)
    }

    /// Takes the write hold, waiting as long as it takes; it ends `lease` after it was
    /// taken unless released before (no watchdog).
    ///
    /// # Errors
    /// As for [`WriteLock::lock`], and
    /// [`Error::InvalidArgument`](crate::Error::InvalidArgument) for a lease below 1 ms or
    /// above 2<sup>53</sup> ms.
    ///
    /// # Cancel safety
    /// As for [`WriteLock::lock`].
    ///
    /// # Example
    ///
    /// ```rust,no_run
    /// # async fn demo(client: lockwise::Client) -> lockwise::Result<()> {
    /// use std::time::Duration;
    /// let write = client.rw_lock("catalog").write();
    /// let guard = write.lock_with_lease(Duration::from_secs(10)).await?;
    /// // ... done within 10 s, or the write hold ends by itself ...
    /// guard.unlock().await?;
    /// # Ok(()) }
    /// ```
    pub async fn lock_with_lease(&self, lease: Duration) -> Result<WriteLockGuard> {
        engine::never_timed_out(self.acquire(None, Some(lease)).await?)
    }

    /// Tries to take the write hold, waiting at most `wait`; [`Error::Timeout`](crate::Error::Timeout) when it could not
    /// (the intent is withdrawn before it returns). `Duration::ZERO` makes one attempt that
    /// registers no intent. With `lease: None` the watchdog keeps the hold alive.
    ///
    /// # Errors
    /// As for [`WriteLock::lock_with_lease`]. [`Error::Timeout`](crate::Error::Timeout) when the wait ran out.
    ///
    /// # Cancel safety
    /// As for [`WriteLock::lock`].
    ///
    /// # Example
    ///
    /// ```rust,no_run
    /// # async fn demo(client: lockwise::Client) -> lockwise::Result<()> {
    /// use std::time::Duration;
    /// let write = client.rw_lock("catalog").write();
    /// match write.try_lock(Duration::from_secs(1), None).await {
    ///     Ok(guard) => guard.unlock().await?,
    ///     Err(e) if e.is_timeout() => println!("the catalog stayed in use"),
    ///     Err(e) => return Err(e),
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn try_lock(
        &self,
        wait: Duration,
        lease: Option<Duration>,
    ) -> Result<WriteLockGuard> {
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
    ) -> Result<Option<WriteLockGuard>> {
        if self.shared.redisson() {
            let hold =
                redisson::acquire(&self.base, &self.shared, Side::Write, deadline, lease).await?;
            return Ok(hold.map(|hold| WriteLockGuard { hold }));
        }
        self.base.check()?;
        let owner = self.base.owner_field();
        let single = deadline.is_some_and(|d| d <= Instant::now());
        let window: u64 = if single {
            0
        } else {
            self.base.core.watchdog_ms
        };
        let mut intent = Intent {
            lock: self.clone(),
            owner: owner.clone(),
            abandoned: Arc::new(AtomicBool::new(false)),
            armed: !single,
            _busy: self.base.core.cleanups.token(),
        };
        let attempt = Attempt {
            lock: self.clone(),
            window,
            abandoned: intent.abandoned.clone(),
        };
        let granted = engine::acquire::run(
            &self.base,
            &attempt,
            owner,
            engine::Wake::Channel(&self.shared.write_channel),
            deadline,
            lease,
            engine::KindId::RwWrite,
        )
        .await;
        match granted {
            // The script withdrew the intent when it granted the lock.
            Ok(Some((hold, ()))) => {
                intent.armed = false;
                Ok(Some(WriteLockGuard { hold }))
            }
            Ok(None) => {
                intent.leave_now().await;
                Ok(None)
            }
            Err(Error::Redis(e)) if e.code() == Some("LOCKWISE_UPGRADE") => {
                intent.armed = false;
                Err(Error::UpgradeRefused {
                    name: self.base.name.clone(),
                })
            }
            Err(e) => Err(e), // `intent` is withdrawn in the background
        }
    }

    /// Runs the leave script for `owner`'s intent.
    async fn leave(&self, owner: &str) -> Result<bool> {
        let s = &self.shared;
        let left: i64 = RW_LEAVE
            .run(
                &mut s.core.conn.clone(),
                &[&s.writers, &s.read_channel],
                &[&owner, &s.core.publish],
            )
            .await?;
        if left == 1 {
            s.core.listener.notify_all(&s.read_channel);
        }
        Ok(left == 1)
    }
}

/// One writer's attempts: `lua/rw_write.lua` on both sides' hashes, the writers' intents
/// and the claim queue, with the intent's `window` (0: a single attempt that leaves none).
#[derive(Clone)]
struct Attempt {
    lock: WriteLock,
    window: u64,
    /// Set when the waiter is gone: a late attempt's intent is withdrawn after it.
    abandoned: Arc<AtomicBool>,
}

impl engine::acquire::AcquireScript for Attempt {
    type Extra = ();

    fn what(&self) -> &'static str {
        "write lock"
    }

    fn call<'a>(&'a self, a: &'a AttemptArgs) -> ScriptCall<'a> {
        let (s, c) = (&self.lock.shared, &self.lock.base.claims);
        ScriptCall {
            script: &RW_WRITE,
            keys: vec![&s.write, &s.read, &s.writers, &c.queue, &c.deadlines],
            args: vec![
                Arg::Int(a.lease_ms),
                Arg::Str(&a.owner),
                Arg::Int(self.window),
                Arg::Int(a.claim_ms),
                // A writer queues as if it had waited the overtake limit longer: among
                // waiters that began within the limit of each other writers go first, and a
                // reader that began more than the limit before a writer goes before it.
                Arg::Int(a.waited_ms + a.limit_ms),
            ],
        }
    }

    fn parse(&self, reply: &[i64]) -> Option<engine::Reply<()>> {
        engine::plain_reply(reply)
    }

    /// The waiter is gone and may have withdrawn before this late attempt registered it
    /// again.
    fn after_call(&self, owner: &Arc<str>) -> Option<BoxFuture<'static, ()>> {
        if self.window == 0 || !self.abandoned.load(Ordering::SeqCst) {
            return None;
        }
        let (lock, owner) = (self.lock.clone(), owner.clone());
        Some(
            async move {
                let _ = lock.leave(&owner).await;
            }
            .boxed(),
        )
    }
}

/// A waiting writer's intent: withdrawn (in the background) unless disarmed, so a writer
/// that fails or whose future is dropped does not hold back the readers until it lapses.
struct Intent {
    lock: WriteLock,
    owner: Arc<str>,
    /// Set once the waiter is gone; an attempt still in flight then leaves after it ran.
    abandoned: Arc<AtomicBool>,
    armed: bool,
    /// A client's close waits until the intent has been withdrawn (dropped after `drop`).
    _busy: tokio_util::task::task_tracker::TaskTrackerToken,
}

impl Intent {
    async fn leave_now(&mut self) {
        if !self.armed {
            return;
        }
        self.armed = false;
        if let Err(e) = self.lock.leave(&self.owner).await {
            tracing::warn!(lock = %self.lock.base.name, error = %e, "could not withdraw the writer's intent; it lapses by itself");
        }
    }
}

impl Drop for Intent {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        self.abandoned.store(true, Ordering::SeqCst);
        let (lock, owner) = (self.lock.clone(), self.owner.clone());
        self.lock.base.core.cleanups.spawn(async move {
            if let Err(e) = lock.leave(&owner).await {
                tracing::warn!(lock = %lock.base.name, error = %e, "could not withdraw the writer's intent; it lapses by itself");
            }
        });
    }
}

inspect_methods!(WriteLock: inspect, lock: "client.rw_lock(\"catalog\").write()");
crate::lock::api::owner_methods!(WriteLock, lock: "client.rw_lock(\"catalog\").write()");

impl WriteLock {
    fn owner_mode(&self) -> &engine::Owner {
        &self.base.owner
    }

    fn with_owner_mode(&self, owner: engine::Owner) -> WriteLock {
        WriteLock::new(self.shared.clone(), self.base.with_owner(owner))
    }

    /// Deletes the whole read-write lock whoever holds it (the writer, every reader, the
    /// waiting writers' intents) and wakes every waiter, as
    /// [`RwLock::force_unlock`](super::RwLock::force_unlock). Returns whether it was held.
    /// In Redisson's layout this is `RWriteLock.forceUnlock`: only a write-locked lock is
    /// deleted (`false` while only readers hold it).
    ///
    /// # Errors
    /// [`Error::InvalidArgument`](crate::Error::InvalidArgument) for an invalid name or
    /// owner; [`Error::Redis`](crate::Error::Redis) when Redis fails.
    ///
    /// # Cancel safety
    /// Dropping the future may or may not have deleted the lock.
    ///
    /// # Example
    ///
    /// ```rust,no_run
    /// # async fn demo(client: lockwise::Client) -> lockwise::Result<()> {
    /// let write = client.rw_lock("catalog").write();
    /// if write.force_unlock().await? {
    ///     println!("removed the writer and every reader of {}", write.name());
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn force_unlock(&self) -> Result<bool> {
        self.base.check()?;
        redisson::force_unlock(&self.shared, Some(Side::Write)).await
    }
}

impl std::fmt::Debug for WriteLock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WriteLock")
            .field("name", &self.base.name)
            .field("key", &self.base.key)
            .finish()
    }
}

/// The write hold of a [`RwLock`](super::RwLock). Release it with
/// [`unlock`](WriteLockGuard::unlock), which reports errors; dropping it releases in the
/// background instead (the TTL is the backstop).
///
/// # Example
///
/// ```rust,no_run
/// # async fn demo(client: lockwise::Client) -> lockwise::Result<()> {
/// let guard = client.rw_lock("catalog").write().lock().await?;
/// // A read hold taken by the writer is a downgrade: it keeps readers out until released.
/// let read = client.rw_lock("catalog").read().lock().await?;
/// read.unlock().await?;
/// guard.unlock().await?;
/// # Ok(()) }
/// ```
#[must_use = "the write lock is released when the guard is dropped; call .unlock().await"]
pub struct WriteLockGuard {
    hold: Hold,
}

impl WriteLockGuard {
    /// Releases this write hold; the last one frees the lock, wakes every waiting reader
    /// and, when nobody reads (a downgraded owner may), one waiting writer per client.
    ///
    /// # Errors
    /// [`Error::NotHeld`](crate::Error::NotHeld) when the hold was already gone (expired,
    /// force-unlocked): nothing was released. [`Error::Redis`](crate::Error::Redis) when
    /// Redis failed.
    ///
    /// # Cancel safety
    /// Once called, the release happens: dropping the future lets it finish in the
    /// background.
    ///
    /// # Example
    ///
    /// ```rust,no_run
    /// # async fn demo(client: lockwise::Client) -> lockwise::Result<()> {
    /// let guard = client.rw_lock("catalog").write().lock().await?;
    /// // ... update the catalog ...
    /// guard.unlock().await?; // wakes the waiting readers
    /// # Ok(()) }
    /// ```
    pub async fn unlock(mut self) -> Result<()> {
        self.hold.unlock().await
    }
}

guard_accessors!(WriteLockGuard, lock: "client.rw_lock(\"catalog\").write()");

impl std::fmt::Debug for WriteLockGuard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WriteLockGuard")
            .field("name", &self.name())
            .field("owner", &self.owner())
            .field("lease", &self.lease())
            .field("lost", &self.is_lost())
            .finish()
    }
}

crate::lock::contract::impl_lock!(crate::WriteLock, crate::WriteLockGuard);

//! [`ReadLock`]: the read side of a [`RwLock`](super::RwLock), and its guard.

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use super::redisson::{self, Inspect};
use super::shared::{Shared, Side};
use crate::engine::acquire::{Arg, AttemptArgs, ScriptCall};
use crate::engine::{self, Base, Hold};
use crate::error::Result;
use crate::lock::api::{guard_accessors, inspect_methods};
use crate::wire::scripts::RW_READ;

/// The read side of a [`RwLock`](super::RwLock): many owners may hold it at once, while no
/// writer does. Get it from [`RwLock::read`](super::RwLock::read).
///
/// Each reader has its own deadline on the server (its lease, or the watchdog timeout
/// renewed by its own client's watchdog), so a crashed reader's hold ends by itself.
///
/// # Example
///
/// ```rust,no_run
/// # async fn demo(client: lockwise::Client) -> lockwise::Result<()> {
/// let read = client.rw_lock("catalog").read();
/// let guard = read.lock().await?;
/// guard.unlock().await?;
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct ReadLock {
    shared: Arc<Shared>,
    base: Arc<Base>,
    inspect: Inspect,
}

impl ReadLock {
    pub(super) fn new(shared: Arc<Shared>, base: Base) -> ReadLock {
        let base = Arc::new(base.with_release(redisson::release(&shared, Side::Read)));
        ReadLock {
            inspect: Inspect {
                base: base.clone(),
                shared: shared.clone(),
                side: Side::Read,
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
    /// let read = client.rw_lock("catalog").read();
    /// let guard = read.lock().await?;
    /// println!("reading {}", read.name());
    /// guard.unlock().await?;
    /// # Ok(()) }
    /// ```
    pub fn name(&self) -> &str {
        &self.base.name
    }

    /// The Redis key of the readers hash (`<namespace>:rwread:{<name>}`); in Redisson's
    /// layout the lock's one hash, the name itself.
    ///
    /// # Example
    ///
    /// ```rust,no_run
    /// # async fn demo(client: lockwise::Client) -> lockwise::Result<()> {
    /// let read = client.rw_lock("catalog").read();
    /// // The readers hash; the writer has a key of its own.
    /// assert_ne!(read.key(), client.rw_lock("catalog").write().key());
    /// # Ok(()) }
    /// ```
    pub fn key(&self) -> &str {
        &self.base.key
    }

    /// Takes a read hold, waiting as long as it takes (while a writer holds the lock or
    /// waits for it); the watchdog keeps it alive until the guard is released.
    ///
    /// # Errors
    /// [`Error::ClientClosed`](crate::Error::ClientClosed) once the last `Client` clone is
    /// dropped; [`Error::InvalidArgument`](crate::Error::InvalidArgument) for an invalid name
    /// or owner; [`Error::Redis`](crate::Error::Redis) when Redis fails (`WRONGTYPE` when a
    /// key of the lock holds something else: nothing is changed).
    ///
    /// # Cancel safety
    /// Cancel safe. Dropping the future at any point leaves no hold behind (a hold granted
    /// to a reply nobody awaited is released in the background) and no subscription.
    ///
    /// # Example
    ///
    /// ```rust,no_run
    /// # async fn demo(client: lockwise::Client) -> lockwise::Result<()> {
    /// let read = client.rw_lock("catalog").read();
    /// let guard = read.lock().await?; // waits while a writer holds or wants the lock
    /// // ... read the catalog ...
    /// guard.unlock().await?;
    /// # Ok(()) }
    /// ```
    pub async fn lock(&self) -> Result<ReadLockGuard> {
        engine::never_timed_out(self.acquire(None, None).await?)
    }

    /// Takes a read hold, waiting as long as it takes; the hold ends `lease` after it was
    /// taken unless released before (no watchdog).
    ///
    /// # Errors
    /// As for [`ReadLock::lock`], and
    /// [`Error::InvalidArgument`](crate::Error::InvalidArgument) for a lease below 1 ms or
    /// above 2<sup>53</sup> ms.
    ///
    /// # Cancel safety
    /// As for [`ReadLock::lock`].
    ///
    /// # Example
    ///
    /// ```rust,no_run
    /// # async fn demo(client: lockwise::Client) -> lockwise::Result<()> {
    /// use std::time::Duration;
    /// let read = client.rw_lock("catalog").read();
    /// let guard = read.lock_with_lease(Duration::from_secs(10)).await?;
    /// // ... done within 10 s, or the read hold ends by itself ...
    /// guard.unlock().await?;
    /// # Ok(()) }
    /// ```
    pub async fn lock_with_lease(&self, lease: Duration) -> Result<ReadLockGuard> {
        engine::never_timed_out(self.acquire(None, Some(lease)).await?)
    }

    /// Tries to take a read hold, waiting at most `wait` (`Duration::ZERO`: one attempt).
    /// [`Error::Timeout`](crate::Error::Timeout) when a writer held or awaited the lock for the whole wait. With `lease:
    /// None` the watchdog keeps the hold alive.
    ///
    /// # Errors
    /// As for [`ReadLock::lock_with_lease`]. [`Error::Timeout`](crate::Error::Timeout) when the wait ran out.
    ///
    /// # Cancel safety
    /// As for [`ReadLock::lock`].
    ///
    /// # Example
    ///
    /// ```rust,no_run
    /// # async fn demo(client: lockwise::Client) -> lockwise::Result<()> {
    /// use std::time::Duration;
    /// let read = client.rw_lock("catalog").read();
    /// match read.try_lock(Duration::from_millis(200), None).await {
    ///     Ok(guard) => guard.unlock().await?,
    ///     Err(e) if e.is_timeout() => println!("a writer has the catalog"),
    ///     Err(e) => return Err(e),
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn try_lock(&self, wait: Duration, lease: Option<Duration>) -> Result<ReadLockGuard> {
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
    ) -> Result<Option<ReadLockGuard>> {
        if self.shared.redisson() {
            let hold =
                redisson::acquire(&self.base, &self.shared, Side::Read, deadline, lease).await?;
            return Ok(hold.map(|hold| ReadLockGuard { hold }));
        }
        let granted = engine::acquire::run(
            &self.base,
            self,
            self.base.owner_field(),
            engine::Wake::Channel(&self.shared.read_channel),
            deadline,
            lease,
            engine::KindId::RwRead,
        )
        .await?;
        Ok(granted.map(|(hold, ())| ReadLockGuard { hold }))
    }
}

/// One attempt of `lua/rw_read.lua` on both sides' hashes, the writers' intents and the
/// claim queue (lockwise's layout; Redisson's goes through [`redisson::acquire`]).
impl engine::acquire::AcquireScript for ReadLock {
    type Extra = ();

    fn what(&self) -> &'static str {
        "read lock"
    }

    fn call<'a>(&'a self, a: &'a AttemptArgs) -> ScriptCall<'a> {
        let (s, c) = (&self.shared, &self.base.claims);
        ScriptCall {
            script: &RW_READ,
            keys: vec![&s.read, &s.write, &s.writers, &c.queue, &c.deadlines],
            args: vec![
                Arg::Int(a.lease_ms),
                Arg::Str(&a.owner),
                Arg::Int(a.claim_ms),
                Arg::Int(a.waited_ms),
            ],
        }
    }

    fn parse(&self, reply: &[i64]) -> Option<engine::Reply<()>> {
        engine::plain_reply(reply)
    }
}

inspect_methods!(ReadLock: inspect, lock: "client.rw_lock(\"catalog\").read()");
crate::lock::api::owner_methods!(ReadLock, lock: "client.rw_lock(\"catalog\").read()");

impl ReadLock {
    fn owner_mode(&self) -> &engine::Owner {
        &self.base.owner
    }

    fn with_owner_mode(&self, owner: engine::Owner) -> ReadLock {
        ReadLock::new(self.shared.clone(), self.base.with_owner(owner))
    }

    /// Deletes the whole read-write lock whoever holds it (the writer, every reader, the
    /// waiting writers' intents) and wakes every waiter, as
    /// [`RwLock::force_unlock`](super::RwLock::force_unlock). Returns whether it was held.
    /// In Redisson's layout this is `RReadLock.forceUnlock`: only a read-locked lock is
    /// deleted (`false` while a writer holds it).
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
    /// let read = client.rw_lock("catalog").read();
    /// if read.force_unlock().await? {
    ///     println!("removed the writer and every reader of {}", read.name());
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn force_unlock(&self) -> Result<bool> {
        self.base.check()?;
        redisson::force_unlock(&self.shared, Some(Side::Read)).await
    }
}

impl std::fmt::Debug for ReadLock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ReadLock")
            .field("name", &self.base.name)
            .field("key", &self.base.key)
            .finish()
    }
}

/// One read hold of a [`RwLock`](super::RwLock). Release it with
/// [`unlock`](ReadLockGuard::unlock), which reports errors; dropping it releases in the
/// background instead (the hold's deadline is the backstop).
///
/// # Example
///
/// ```rust,no_run
/// # async fn demo(client: lockwise::Client) -> lockwise::Result<()> {
/// let guard = client.rw_lock("catalog").read().lock().await?;
/// println!("reading as {}", guard.owner());
/// guard.unlock().await?;
/// # Ok(()) }
/// ```
#[must_use = "the read lock is released when the guard is dropped; call .unlock().await"]
pub struct ReadLockGuard {
    hold: Hold,
}

impl ReadLockGuard {
    /// Releases this read hold; the last reader to leave wakes a waiting writer.
    ///
    /// # Errors
    /// [`Error::NotHeld`](crate::Error::NotHeld) when the hold was already gone (its
    /// deadline passed, or force-unlocked): nothing was released.
    /// [`Error::Redis`](crate::Error::Redis) when Redis failed.
    ///
    /// # Cancel safety
    /// Once called, the release happens: dropping the future lets it finish in the
    /// background.
    ///
    /// # Example
    ///
    /// ```rust,no_run
    /// # async fn demo(client: lockwise::Client) -> lockwise::Result<()> {
    /// let guard = client.rw_lock("catalog").read().lock().await?;
    /// // ... read the catalog ...
    /// guard.unlock().await?; // the last reader out wakes a waiting writer
    /// # Ok(()) }
    /// ```
    pub async fn unlock(mut self) -> Result<()> {
        self.hold.unlock().await
    }
}

guard_accessors!(ReadLockGuard, lock: "client.rw_lock(\"catalog\").read()");

impl std::fmt::Debug for ReadLockGuard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ReadLockGuard")
            .field("name", &self.name())
            .field("owner", &self.owner())
            .field("lease", &self.lease())
            .field("lost", &self.is_lost())
            .finish()
    }
}

crate::lock::contract::impl_lock!(crate::ReadLock, crate::ReadLockGuard);

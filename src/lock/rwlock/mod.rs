//! [`RwLock`]: the read-write lock (many readers or one writer), like Redisson's
//! `RReadWriteLock`, built on the engine as two kinds: [`ReadLock`] and [`WriteLock`].
//!
//! # How it works
//!
//! Five names per lock, all under the name's Cluster hash tag:
//!
//! * `W = <ns>:rwwrite:{n}`: the writer hash, owner -> write holds (the `RLock` layout). Its
//!   TTL is the writer's lease, or the watchdog timeout, renewed by the watchdog.
//! * `R = <ns>:rwread:{n}`: the readers hash, owner -> read holds, and `~<owner>` -> that
//!   reader's deadline (server clock, ms). Owner fields start with a client id, so a `~`
//!   field never collides with one. R's TTL is at least the latest deadline. Every script
//!   that looks at R first drops the readers whose deadline passed and deletes R when none
//!   is left: a crashed reader's hold expires on its own, whatever the other readers do, and
//!   the watchdog raises only its own client's deadlines (`lua/renew.lua`).
//! * `WW = <ns>:rwwriters:{n}`: writers waiting for the lock, a sorted set owner -> intent
//!   deadline. While it has a live entry, *new* readers wait (writer preference, so a
//!   stream of readers cannot starve a writer). A waiting writer refreshes its intent every
//!   half intent window (the watchdog timeout) and withdraws it when it stops waiting.
//! * `RC = <ns>:rwreadchannel:{n}`, `WC = <ns>:rwwritechannel:{n}`: readers wait on RC,
//!   writers on WC. A write unlock broadcasts on RC (every reader waiter wakes) and, if no
//!   reader holds the lock, wakes one writer per client on WC; the last read unlock wakes a
//!   writer; a writer that stops waiting and leaves WW empty broadcasts on RC.
//!
//! Reads and writes are holds of the engine (hold registry, watchdog, settlements,
//! cancellation), on `(R, owner)` and `(W, owner)` respectively.
//!
//! In Redisson's key layout the lock is RReadWriteLock's one hash instead, with its own
//! scripts ([`redisson`]): reads are holds on `(<name>, owner)`, writes on
//! `(<name>, owner:write)`.

mod read;
mod redisson;
mod shared;
mod write;

use std::sync::Arc;

use crate::engine::{Base, Core, Owner};
use crate::error::Result;
use crate::layout::redisson::rw_key_prefix;
use crate::lock::api::owner_methods;
use crate::wire::keys::Role;
use shared::Shared;

pub use read::{ReadLock, ReadLockGuard};
pub use write::{WriteLock, WriteLockGuard};

/// A distributed read-write lock: many readers or one writer, like Redisson's
/// `RReadWriteLock`. Get one from [`Client::rw_lock`](crate::Client::rw_lock); a cheap
/// handle (`Clone`, `Send`, `Sync`) that sends nothing until used.
///
/// [`read`](Self::read) and [`write`](Self::write) give the two sides' handles, each with
/// `lock`, `lock_with_lease` and `try_lock`:
///
/// * Reentrant per owner (the calling task by default; see the ownership methods below,
///   which apply to both sides). A writer may also take the read lock and keep it after
///   releasing the write lock (downgrade). A reader asking for the write lock gets
///   [`Error::UpgradeRefused`](crate::Error::UpgradeRefused) at once, never a deadlock.
/// * Every read hold has its own deadline: a crashed reader's hold expires by itself
///   (within the watchdog timeout, or its lease) even while other readers keep theirs.
/// * Writer preference: while a writer waits, new readers wait too (readers that already
///   hold may re-enter). A waiting writer that crashed holds new readers back for at most
///   one watchdog timeout (its intent window).
///
/// The read-write lock's keys are its own: an [`RLock`](crate::RLock) of the same name is a
/// different lock.
///
/// In Redisson's key layout ([`KeyLayout::Redisson`](crate::KeyLayout::Redisson)) it is
/// Redisson's `RReadWriteLock` of the name, shared with Java services: one hash with
/// Redisson's fields and per-read-hold timeout keys, Redisson's channel and payloads. There a
/// crashed reader's hold ends with its timeout key (the hash lives as long as the longest
/// one, from the next unlock on), and there is no writer preference: new readers may keep
/// a waiting writer out, as in Redisson. Upgrades are refused as above; the side handles'
/// `force_unlock` are Redisson's (each deletes the lock only while its side holds it).
///
/// # Example
///
/// ```rust,no_run
/// # async fn demo(client: lockwise::Client) -> lockwise::Result<()> {
/// let prices = client.rw_lock("prices");
/// let read = prices.read().lock().await?; // shared with other readers
/// println!("{} readers", prices.reader_count().await?);
/// read.unlock().await?;
/// let write = prices.write().lock().await?; // alone
/// write.unlock().await?;
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct RwLock {
    shared: Arc<Shared>,
    owner: Owner,
}

impl RwLock {
    pub(crate) fn new(core: Arc<Core>, name: &str) -> RwLock {
        // Base::new checks the name; an invalid one is kept as "" here too.
        let probe = Base::new(core.clone(), name, Role::RwRead);
        // In Redisson's layout both hashes are the name's one, both channels its one.
        let keys = crate::layout::keys(core.layout, &core.namespace, &probe.name);
        let owner = core.default_owner.clone();
        RwLock {
            shared: Arc::new(Shared {
                write: keys.key(Role::RwWrite),
                read: keys.key(Role::RwRead),
                writers: keys.key(Role::RwWriters),
                read_channel: keys.key(Role::RwReadChannel),
                write_channel: keys.key(Role::RwWriteChannel),
                prefix: rw_key_prefix(&probe.name),
                name: name.to_string(),
                core,
            }),
            owner,
        }
    }

    fn owner_mode(&self) -> &Owner {
        &self.owner
    }

    fn with_owner_mode(&self, owner: Owner) -> RwLock {
        RwLock {
            shared: self.shared.clone(),
            owner,
        }
    }

    fn side(&self, role: Role) -> Base {
        let base = Base::new(self.shared.core.clone(), &self.shared.name, role);
        base.with_owner(self.owner.clone())
    }

    /// The read side's base (for the ownership methods).
    fn base(&self) -> Base {
        self.side(Role::RwRead)
    }

    /// The lock's name.
    ///
    /// # Example
    ///
    /// ```rust,no_run
    /// # async fn demo(client: lockwise::Client) -> lockwise::Result<()> {
    /// let prices = client.rw_lock("prices");
    /// let guard = prices.write().lock().await?;
    /// println!("writing {}", prices.name());
    /// guard.unlock().await?;
    /// # Ok(()) }
    /// ```
    pub fn name(&self) -> &str {
        &self.shared.name
    }

    /// The read side: `lock`, `lock_with_lease`, `try_lock` take read holds.
    ///
    /// # Example
    ///
    /// ```rust,no_run
    /// # async fn demo(client: lockwise::Client) -> lockwise::Result<()> {
    /// let prices = client.rw_lock("prices");
    /// let guard = prices.read().lock().await?; // shared with other readers
    /// // ... read the prices ...
    /// guard.unlock().await?;
    /// # Ok(()) }
    /// ```
    pub fn read(&self) -> ReadLock {
        ReadLock::new(self.shared.clone(), self.side(Role::RwRead))
    }

    /// The write side: `lock`, `lock_with_lease`, `try_lock` take the write hold.
    ///
    /// # Example
    ///
    /// ```rust,no_run
    /// # async fn demo(client: lockwise::Client) -> lockwise::Result<()> {
    /// let prices = client.rw_lock("prices");
    /// let guard = prices.write().lock().await?; // no other writer, no reader
    /// // ... update the prices ...
    /// guard.unlock().await?;
    /// # Ok(()) }
    /// ```
    pub fn write(&self) -> WriteLock {
        WriteLock::new(self.shared.clone(), self.side(Role::RwWrite))
    }

    /// How many holds the calling task (or this handle's named owner) has on the lock:
    /// its read holds plus its write holds; 0 on a
    /// [`non_reentrant`](Self::non_reentrant) handle.
    ///
    /// # Errors
    /// As for [`is_write_locked`](Self::is_write_locked).
    ///
    /// # Cancel safety
    /// Cancel safe (read only).
    ///
    /// # Example
    ///
    /// ```rust,no_run
    /// # async fn demo(client: lockwise::Client) -> lockwise::Result<()> {
    /// let prices = client.rw_lock("prices");
    /// let read = prices.read().lock().await?;
    /// println!("{} hold(s) of this task", prices.hold_count().await?);
    /// read.unlock().await?;
    /// # Ok(()) }
    /// ```
    pub async fn hold_count(&self) -> Result<u32> {
        let reads = self.side(Role::RwRead).hold_count().await?;
        let writes = match self.shared.redisson() {
            true => redisson::write_holds(&self.side(Role::RwWrite)).await?,
            false => self.side(Role::RwWrite).hold_count().await?,
        };
        Ok(reads + writes)
    }

    /// Whether the calling task (or this handle's named owner) holds the lock, reading or
    /// writing.
    ///
    /// # Errors
    /// As for [`is_write_locked`](Self::is_write_locked).
    ///
    /// # Cancel safety
    /// Cancel safe (read only).
    ///
    /// # Example
    ///
    /// ```rust,no_run
    /// # async fn demo(client: lockwise::Client) -> lockwise::Result<()> {
    /// let prices = client.rw_lock("prices");
    /// if !prices.is_held_by_current_task().await? {
    ///     let guard = prices.write().lock().await?; // no upgrade of our own read hold
    ///     guard.unlock().await?;
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn is_held_by_current_task(&self) -> Result<bool> {
        Ok(self.hold_count().await? > 0)
    }

    /// Whether a writer holds the lock.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`](crate::Error::InvalidArgument) for an invalid name;
    /// [`Error::Redis`](crate::Error::Redis) when Redis fails.
    ///
    /// # Cancel safety
    /// Cancel safe (read only).
    ///
    /// # Example
    ///
    /// ```rust,no_run
    /// # async fn demo(client: lockwise::Client) -> lockwise::Result<()> {
    /// let prices = client.rw_lock("prices");
    /// if prices.is_write_locked().await? {
    ///     println!("a writer is updating the prices");
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn is_write_locked(&self) -> Result<bool> {
        if self.shared.redisson() {
            self.base().check()?;
            return Ok(self.shared.redisson_mode().await?.as_deref() == Some("write"));
        }
        self.side(Role::RwWrite).is_locked().await
    }

    /// How many owners hold read locks, counting only those whose deadline has not passed
    /// (a crashed reader stops counting at its deadline, before any script purged it). In
    /// Redisson's layout: the owners with a read hold whose timeout key still lives.
    ///
    /// # Errors
    /// As for [`is_write_locked`](Self::is_write_locked).
    ///
    /// # Cancel safety
    /// Cancel safe (read only).
    ///
    /// # Example
    ///
    /// ```rust,no_run
    /// # async fn demo(client: lockwise::Client) -> lockwise::Result<()> {
    /// let prices = client.rw_lock("prices");
    /// let readers = prices.reader_count().await?;
    /// println!("{readers} owner(s) reading {}", prices.name());
    /// # Ok(()) }
    /// ```
    pub async fn reader_count(&self) -> Result<usize> {
        self.base().check()?;
        if self.shared.redisson() {
            return self.shared.redisson_reader_count().await;
        }
        let mut conn = self.shared.core.conn.clone();
        let (fields, time): (Vec<(String, i64)>, (u64, u64)) = redis::pipe()
            .cmd("HGETALL")
            .arg(&self.shared.read)
            .cmd("TIME")
            .query_async(&mut conn)
            .await?;
        let now = (time.0 * 1000 + time.1 / 1000) as i64;
        Ok(fields
            .iter()
            .filter(|(f, deadline)| f.starts_with('~') && *deadline > now)
            .count())
    }

    /// Deletes the lock whoever holds it (the writer, every reader, the waiting writers'
    /// intents) and wakes every waiter. Returns whether it was held. The former holders'
    /// guards then fail to unlock with [`Error::NotHeld`](crate::Error::NotHeld).
    ///
    /// # Errors
    /// As for [`is_write_locked`](Self::is_write_locked).
    ///
    /// # Cancel safety
    /// Dropping the future may or may not have deleted the lock.
    ///
    /// # Example
    ///
    /// ```rust,no_run
    /// # async fn demo(client: lockwise::Client) -> lockwise::Result<()> {
    /// let prices = client.rw_lock("prices");
    /// if prices.force_unlock().await? {
    ///     println!("removed the writer and every reader");
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn force_unlock(&self) -> Result<bool> {
        self.base().check()?;
        redisson::force_unlock(&self.shared, None).await
    }

    /// Whether anyone holds the lock, reading or writing.
    ///
    /// # Errors
    /// As for [`is_write_locked`](Self::is_write_locked).
    ///
    /// # Cancel safety
    /// Cancel safe (read only).
    ///
    /// # Example
    ///
    /// ```rust,no_run
    /// # async fn demo(client: lockwise::Client) -> lockwise::Result<()> {
    /// let prices = client.rw_lock("prices");
    /// if !prices.is_locked().await? {
    ///     println!("nobody reads or writes {}", prices.name());
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn is_locked(&self) -> Result<bool> {
        if self.shared.redisson() {
            self.base().check()?;
            return Ok(self.shared.redisson_mode().await?.is_some());
        }
        Ok(self.is_write_locked().await? || self.reader_count().await? > 0)
    }
}

owner_methods!(RwLock, lock: "client.rw_lock(\"prices\")", acquire: "write().lock()");

impl std::fmt::Debug for RwLock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RwLock")
            .field("name", &self.shared.name)
            .field("write_key", &self.shared.write)
            .field("read_key", &self.shared.read)
            .finish()
    }
}

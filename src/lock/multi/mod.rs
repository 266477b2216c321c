//! [`MultiLock`]: all-or-nothing over several reentrant locks, and its guard.
//!
//! # Why one global order
//!
//! Two tasks that take overlapping sets in different orders (`{a, b}` and `{b, a}`) deadlock
//! if each waits for the other's first lock. A multi-lock therefore sorts and deduplicates
//! its names and takes them one after another in that order, waiting for each in turn
//! (pub/sub wakeups, as [`RLock`]) within what is left of the caller's wait. Every multi-lock
//! agrees on the order, so a cycle of waits cannot form: the task holding the largest name
//! of any waiting chain never waits for a smaller one.
//!
//! The alternative, try all at once and back off on a conflict, needs no order but polls and
//! can livelock under contention (everyone keeps backing off); waiting in order wakes each
//! task exactly when its next lock is freed. The price:
//! a waiter holds its smaller names while it waits for a larger one, which slows down tasks
//! that only need those; use several smaller multi-locks or shorter waits if that matters.
//!
//! # Why check before returning
//!
//! While the call waits for a later member, one taken earlier can go away: force-unlocked,
//! expired while this process was paused, wiped by a server restart without persistence.
//! Another owner may even hold it by then. Its guard learns of that only at the next watchdog
//! renewal (a lease hold never), so the local `is_lost()` flags are not enough: once the last
//! member is taken, `lua/multi_check.lua` asks the server whether this owner still holds every
//! earlier one (one read-only call, one per slot on a Cluster). If one is gone, the members
//! still held are released and the acquisition starts over, so a guard is only handed out
//! after the server confirmed the whole set.
//!
//! # Layout
//!
//! - this file: the handle, its queries and `force_unlock`.
//! - [`acquire`]: the acquire methods: the members in order, the final check, starting over.
//! - [`guard`]: the [`MultiLockGuard`].

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

mod acquire;
mod guard;

use futures::future::try_join_all;

pub use guard::MultiLockGuard;

use crate::engine::{Core, Owner};
use crate::error::{Error, Result};
use crate::lock::api::owner_methods;
use crate::lock::reentrant::RLock;

/// All-or-nothing over several [`RLock`]s: the guard holds every one of them, or the
/// acquisition fails (or times out) and holds none.
///
/// Get one from [`Client::multi_lock`](crate::Client::multi_lock). Names are sorted and
/// deduplicated (`["b", "a", "b"]` is the multi-lock `{a, b}`); an empty list is
/// [`Error::InvalidArgument`] on use. Each member is the plain [`RLock`] of that name, with
/// its owner rules: by default the calling task is the owner of every member, and a member
/// it already holds is re-entered; [`non_reentrant`](Self::non_reentrant) and
/// [`with_owner`](Self::with_owner) choose as for an [`RLock`], and
/// [`MultiLockGuard::detach`] moves a guard's members to owners of their own.
///
/// # Deadlock freedom
/// Members are taken in one global (sorted) order, waiting for each in turn, so multi-locks
/// over overlapping sets never deadlock, whatever order their names were given in. Mixing
/// them with plain locks held across a multi-lock acquisition (hold `c`, then multi-lock
/// `{a, b}` while another task holds `a` and waits for `c`) can still deadlock, as any
/// nested locking can.
///
/// # Leases
/// With a lease, each member's lease starts when that member is taken, so the earliest
/// member expires first. If taking the rest took so long that the first member's lease ran
/// out, everything is released and the acquisition starts over (within the wait); the guard
/// then holds the whole set for at least `lease` minus the time the acquisition took after
/// the first member, which [`MultiLockGuard::acquired_in`] reports.
///
/// # All or nothing
/// A guard is handed out only after the server confirmed that this owner still holds every
/// member. A member taken early and lost while the call waited for a later one (force-unlocked,
/// expired while the process was paused, wiped by a restart without persistence, perhaps taken
/// by another owner meanwhile) makes the acquisition release what it still holds and start
/// over, within the caller's wait. A member lost *after* the guard was handed out shows in
/// [`MultiLockGuard::lost`] and [`MultiLockGuard::is_lost`] (at the next renewal for watchdog
/// members; lease members are not watched, their TTL tells).
///
/// # Example
///
/// ```rust,no_run
/// # async fn demo(client: lockwise::Client) -> lockwise::Result<()> {
/// // Both accounts or neither; any order of names, never a deadlock.
/// let accounts = client.multi_lock(["account:7", "account:3"]);
/// let guard = accounts.lock().await?;
/// assert_eq!(guard.names(), ["account:3", "account:7"]);
/// guard.unlock().await?;
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct MultiLock {
    inner: Arc<Inner>,
}

struct Inner {
    core: Arc<Core>,
    /// Sorted by name, no duplicates.
    locks: Vec<RLock>,
    /// The member names joined by `,`.
    name: String,
    /// Whose holds the members' acquires take.
    owner: Owner,
    /// Why the multi-lock cannot be used (empty list, an invalid member name).
    invalid: Option<String>,
}

impl MultiLock {
    pub(crate) fn new<I, S>(core: Arc<Core>, names: I) -> MultiLock
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        let names: BTreeSet<String> = names.into_iter().map(|n| n.as_ref().to_string()).collect();
        let invalid = if names.is_empty() {
            Some("a multi-lock needs at least one name".to_string())
        } else {
            names
                .iter()
                .find_map(|n| crate::wire::keys::check_name(n).err())
                .map(|e| match e {
                    Error::InvalidArgument { reason, .. } => reason,
                    other => other.to_string(),
                })
        };
        let locks = names.iter().map(|n| RLock::new(core.clone(), n)).collect();
        let name = names
            .iter()
            .map(String::as_str)
            .collect::<Vec<_>>()
            .join(",");
        MultiLock {
            inner: Arc::new(Inner {
                owner: core.default_owner.clone(),
                core,
                locks,
                name,
                invalid,
            }),
        }
    }

    fn owner_mode(&self) -> &Owner {
        &self.inner.owner
    }

    fn with_owner_mode(&self, owner: Owner) -> MultiLock {
        let i = &self.inner;
        MultiLock {
            inner: Arc::new(Inner {
                core: i.core.clone(),
                locks: i
                    .locks
                    .iter()
                    .map(|l| l.with_owner_mode(owner.clone()))
                    .collect(),
                name: i.name.clone(),
                invalid: i.invalid.clone(),
                owner,
            }),
        }
    }

    /// The multi-lock's name: its member names, sorted and deduplicated, joined by `,`.
    ///
    /// # Example
    ///
    /// ```rust,no_run
    /// # async fn demo(client: lockwise::Client) -> lockwise::Result<()> {
    /// // Sorted and deduplicated:
    /// let accounts = client.multi_lock(["account:7", "account:3", "account:7"]);
    /// assert_eq!(accounts.name(), "account:3,account:7");
    /// # Ok(()) }
    /// ```
    pub fn name(&self) -> &str {
        &self.inner.name
    }

    /// The member names, sorted and deduplicated (the order they are taken in).
    ///
    /// # Example
    ///
    /// ```rust,no_run
    /// # async fn demo(client: lockwise::Client) -> lockwise::Result<()> {
    /// let accounts = client.multi_lock(["account:7", "account:3"]);
    /// // The order the members are taken in:
    /// assert_eq!(accounts.names(), ["account:3", "account:7"]);
    /// # Ok(()) }
    /// ```
    pub fn names(&self) -> Vec<&str> {
        self.inner.locks.iter().map(|l| l.name()).collect()
    }

    /// Whether any member is held by anyone.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for an empty list or an invalid name; [`Error::Redis`]
    /// when Redis fails.
    ///
    /// # Cancel safety
    /// Cancel safe (read only).
    ///
    /// # Example
    ///
    /// ```rust,no_run
    /// # async fn demo(client: lockwise::Client) -> lockwise::Result<()> {
    /// let accounts = client.multi_lock(["account:3", "account:7"]);
    /// if accounts.is_any_locked().await? {
    ///     println!("a transfer touching these accounts is in progress");
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn is_any_locked(&self) -> Result<bool> {
        self.check()?;
        for lock in &self.inner.locks {
            if lock.is_locked().await? {
                return Ok(true);
            }
        }
        Ok(false)
    }

    /// Whether the set is locked: any member held by anyone, so an acquire would wait (the
    /// same as [`is_any_locked`](Self::is_any_locked)).
    ///
    /// # Errors
    /// As for [`is_any_locked`](Self::is_any_locked).
    ///
    /// # Cancel safety
    /// Cancel safe (read only).
    ///
    /// # Example
    ///
    /// ```rust,no_run
    /// # async fn demo(client: lockwise::Client) -> lockwise::Result<()> {
    /// let accounts = client.multi_lock(["account:3", "account:7"]);
    /// if !accounts.is_locked().await? {
    ///     println!("an acquire would not wait now");
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn is_locked(&self) -> Result<bool> {
        self.is_any_locked().await
    }

    /// How many holds the calling task (or this handle's owner) has on the whole set: the
    /// fewest it has on any member (0 when it lacks one).
    ///
    /// # Errors
    /// As for [`is_any_locked`](Self::is_any_locked).
    ///
    /// # Cancel safety
    /// Cancel safe (read only).
    ///
    /// # Example
    ///
    /// ```rust,no_run
    /// # async fn demo(client: lockwise::Client) -> lockwise::Result<()> {
    /// let accounts = client.multi_lock(["account:3", "account:7"]);
    /// let guard = accounts.lock().await?;
    /// println!("this task holds the set {} time(s)", accounts.hold_count().await?);
    /// guard.unlock().await?;
    /// # Ok(()) }
    /// ```
    pub async fn hold_count(&self) -> Result<u32> {
        self.check()?;
        let counts = try_join_all(self.inner.locks.iter().map(RLock::hold_count)).await?;
        Ok(counts.into_iter().min().unwrap_or(0))
    }

    /// Whether the calling task (or this handle's owner) holds the whole set.
    ///
    /// # Errors
    /// As for [`is_any_locked`](Self::is_any_locked).
    ///
    /// # Cancel safety
    /// Cancel safe (read only).
    ///
    /// # Example
    ///
    /// ```rust,no_run
    /// # async fn demo(client: lockwise::Client) -> lockwise::Result<()> {
    /// let accounts = client.multi_lock(["account:3", "account:7"]);
    /// if !accounts.is_held_by_current_task().await? {
    ///     let guard = accounts.lock().await?;
    ///     guard.unlock().await?;
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn is_held_by_current_task(&self) -> Result<bool> {
        Ok(self.hold_count().await? > 0)
    }

    /// Time until the first locked member expires; `None` when no member is locked.
    ///
    /// # Errors
    /// As for [`is_any_locked`](Self::is_any_locked).
    ///
    /// # Cancel safety
    /// Cancel safe (read only).
    ///
    /// # Example
    ///
    /// ```rust,no_run
    /// # async fn demo(client: lockwise::Client) -> lockwise::Result<()> {
    /// let accounts = client.multi_lock(["account:3", "account:7"]);
    /// if let Some(ttl) = accounts.remaining_ttl().await? {
    ///     println!("the first member expires in {ttl:?}");
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn remaining_ttl(&self) -> Result<Option<Duration>> {
        self.check()?;
        let ttls = try_join_all(self.inner.locks.iter().map(RLock::remaining_ttl)).await?;
        Ok(ttls.into_iter().flatten().min())
    }

    /// Force-unlocks every member, whoever holds it, and wakes its waiters. Returns whether
    /// any member was locked.
    ///
    /// # Errors
    /// As for [`is_any_locked`](Self::is_any_locked).
    ///
    /// # Cancel safety
    /// Dropping the future may or may not have deleted each member.
    ///
    /// # Example
    ///
    /// ```rust,no_run
    /// # async fn demo(client: lockwise::Client) -> lockwise::Result<()> {
    /// let accounts = client.multi_lock(["account:3", "account:7"]);
    /// if accounts.force_unlock().await? {
    ///     println!("released a stuck transfer's locks");
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn force_unlock(&self) -> Result<bool> {
        self.check()?;
        let deleted = try_join_all(self.inner.locks.iter().map(RLock::force_unlock)).await?;
        Ok(deleted.into_iter().any(|d| d))
    }

    /// [`Error::InvalidArgument`] for an empty list or an invalid name.
    fn check(&self) -> Result<()> {
        match &self.inner.invalid {
            Some(reason) => Err(Error::invalid("names", reason.clone())),
            None => Ok(()),
        }
    }
}

owner_methods!(MultiLock, lock: "client.multi_lock([\"account:7\", \"account:3\"])");

impl std::fmt::Debug for MultiLock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MultiLock")
            .field("names", &self.names())
            .finish()
    }
}

crate::lock::contract::impl_lock!(crate::MultiLock, crate::MultiLockGuard);

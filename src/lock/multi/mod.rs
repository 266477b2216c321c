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

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;
use std::time::Duration;

mod guard;

use futures::future::{join_all, try_join_all};
use redis::cluster_routing::Slot;
use tokio::time::Instant;

pub use guard::MultiLockGuard;

use crate::engine;
use crate::engine::{Core, Owner};
use crate::error::{Error, Result};
use crate::lock::api::owner_methods;
use crate::lock::reentrant::{RLock, RLockGuard};
use crate::wire::scripts::{ToRedisArgsDyn, MULTI_CHECK as CHECK};

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

    /// Acquires every member, waiting as long as it takes; the watchdog keeps them alive
    /// until the guard is released.
    ///
    /// A member lost while the call waited for a later one is not an error: the members still
    /// held are released and the acquisition starts over (see "All or nothing" above).
    ///
    /// # Errors
    /// [`Error::ClientClosed`](crate::Error::ClientClosed) once the last `Client` clone is dropped
    /// (a waiting call returns it then too).
    /// [`Error::InvalidArgument`] for an empty list or an invalid name; [`Error::Redis`]
    /// when Redis fails, including the final check that every member is still held. On an
    /// error the members taken so far are released first.
    ///
    /// # Cancel safety
    /// Cancel safe: dropping the future drops the member guards taken so far, which releases
    /// them in the background (promptly, at the latest by their TTL), also during the final
    /// check or while the acquisition starts over, and the member being waited for is
    /// cancelled as [`RLock::lock`] is (no hold left behind).
    ///
    /// # Example
    ///
    /// ```rust,no_run
    /// # async fn demo(client: lockwise::Client) -> lockwise::Result<()> {
    /// let accounts = client.multi_lock(["account:7", "account:3"]);
    /// let guard = accounts.lock().await?; // both, or it keeps waiting
    /// // ... move money between the accounts ...
    /// guard.unlock().await?;
    /// # Ok(()) }
    /// ```
    pub async fn lock(&self) -> Result<MultiLockGuard> {
        engine::never_timed_out(self.acquire(None, None).await?)
    }

    /// Acquires every member, waiting as long as it takes; each member expires `lease` after
    /// it was taken unless released before (no watchdog). See "Leases" above.
    ///
    /// # Errors
    /// [`Error::ClientClosed`](crate::Error::ClientClosed) once the last `Client` clone is dropped
    /// (a waiting call returns it then too).
    /// As [`MultiLock::lock`], and [`Error::InvalidArgument`] for a lease below 1 ms or above
    /// 2<sup>53</sup> ms.
    ///
    /// # Cancel safety
    /// As for [`MultiLock::lock`].
    ///
    /// # Example
    ///
    /// ```rust,no_run
    /// # async fn demo(client: lockwise::Client) -> lockwise::Result<()> {
    /// use std::time::Duration;
    /// let accounts = client.multi_lock(["account:7", "account:3"]);
    /// // Each member expires 10 s after it was taken, unless released before.
    /// let guard = accounts.lock_with_lease(Duration::from_secs(10)).await?;
    /// guard.unlock().await?;
    /// # Ok(()) }
    /// ```
    pub async fn lock_with_lease(&self, lease: Duration) -> Result<MultiLockGuard> {
        engine::never_timed_out(self.acquire(None, Some(lease)).await?)
    }

    /// Tries to acquire every member within `wait` in total (`Duration::ZERO`: one attempt
    /// each, in order). [`Error::Timeout`](crate::Error::Timeout) when some member stayed held by another owner until the
    /// deadline, or a member taken earlier was lost and the deadline passed before the set
    /// could be taken again; the members taken before are released before it returns. Never
    /// a guard over part of the set.
    ///
    /// # Errors
    /// [`Error::ClientClosed`](crate::Error::ClientClosed) once the last `Client` clone is dropped
    /// (a waiting call returns it then too).
    /// As [`MultiLock::lock_with_lease`]. [`Error::Timeout`](crate::Error::Timeout) when the wait ran out.
    ///
    /// # Cancel safety
    /// As for [`MultiLock::lock`].
    ///
    /// # Example
    ///
    /// ```rust,no_run
    /// # async fn demo(client: lockwise::Client) -> lockwise::Result<()> {
    /// use std::time::Duration;
    /// let accounts = client.multi_lock(["account:7", "account:3"]);
    /// match accounts.try_lock(Duration::from_secs(1), None).await {
    ///     Ok(guard) => guard.unlock().await?,
    ///     Err(e) if e.is_timeout() => println!("a member stayed busy; none is held"),
    ///     Err(e) => return Err(e),
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn try_lock(
        &self,
        wait: Duration,
        lease: Option<Duration>,
    ) -> Result<MultiLockGuard> {
        engine::or_timeout(
            self.acquire(Some(engine::deadline_after(wait)), lease)
                .await?,
            &self.names().join(","),
        )
    }

    async fn acquire(
        &self,
        deadline: Option<Instant>,
        lease: Option<Duration>,
    ) -> Result<Option<MultiLockGuard>> {
        self.check()?;
        if let Some(lease) = lease {
            crate::wire::keys::check_millis("lease", lease)?;
        }
        let started = Instant::now();
        loop {
            let mut guards: Vec<RLockGuard> = Vec::with_capacity(self.inner.locks.len());
            let mut first_taken = None;
            for lock in &self.inner.locks {
                let taken = match deadline {
                    None => match lease {
                        None => lock.lock().await,
                        Some(lease) => lock.lock_with_lease(lease).await,
                    },
                    Some(d) => {
                        let left = d.saturating_duration_since(Instant::now());
                        lock.try_lock(left, lease).await
                    }
                };
                match taken {
                    Ok(guard) => {
                        first_taken.get_or_insert_with(Instant::now);
                        guards.push(guard);
                    }
                    Err(e) if e.is_timeout() => {
                        tracing::debug!(lock = %lock.name(), kind = "multi", "try_lock timed out");
                        release_all(guards).await;
                        return Ok(None);
                    }
                    Err(e) => {
                        release_all(guards).await;
                        return Err(e);
                    }
                }
            }
            let acquired_in = first_taken.map_or(Duration::ZERO, |t| t.elapsed());
            // All or nothing: a member taken early may have gone while we waited for a later
            // one. Its lease ran out, or it was lost (force-unlocked, expired while its
            // holder was paused, wiped by a restart without persistence) and maybe taken by
            // another owner; its guard need not know that yet, so the server is asked.
            let whole = if lease.is_some_and(|lease| acquired_in >= lease) {
                tracing::debug!(
                    kind = "multi",
                    ?acquired_in,
                    "lease ran out while acquiring; retrying"
                );
                false
            } else {
                match self.first_lost(&guards).await {
                    Ok(None) => true,
                    Ok(Some(name)) => {
                        tracing::warn!(
                            lock = %name,
                            kind = "multi",
                            ?acquired_in,
                            "member lost while acquiring the rest; retrying"
                        );
                        false
                    }
                    Err(e) => {
                        release_all(guards).await;
                        return Err(e);
                    }
                }
            };
            if !whole {
                // Start over: give back what is still held, then wait for every member again.
                release_all(guards).await;
                if deadline.is_some_and(|d| Instant::now() >= d) {
                    return Ok(None);
                }
                continue;
            }
            tracing::debug!(
                kind = "multi",
                members = guards.len(),
                waited_ms = started.elapsed().as_millis() as u64,
                "multi-lock acquired"
            );
            return Ok(Some(MultiLockGuard::new(
                &self.inner.core,
                self.inner.name.clone(),
                guards,
                acquired_in,
            )));
        }
    }

    /// The name of the first member, of those taken before the last one, that this owner no
    /// longer holds: known lost locally, or missing from its hash on the server (a restart
    /// without persistence is only noticed by the next renewal). One script call per Cluster
    /// slot, all at once; one call in all on a standalone or Sentinel server.
    async fn first_lost(&self, guards: &[RLockGuard]) -> Result<Option<String>> {
        // The last member was granted just now; the earlier ones may have gone while we
        // waited for it.
        let earlier: Vec<(&RLock, &RLockGuard)> = self
            .inner
            .locks
            .iter()
            .zip(guards)
            .take(guards.len().saturating_sub(1))
            .collect();
        if let Some((_, guard)) = earlier.iter().find(|(_, guard)| guard.is_lost()) {
            return Ok(Some(guard.name().to_string()));
        }
        if earlier.is_empty() {
            return Ok(None);
        }
        let core = &self.inner.core;
        let groups: Vec<Vec<(&RLock, &RLockGuard)>> = if core.conn.is_cluster() {
            let mut by_slot: HashMap<Slot, Vec<(&RLock, &RLockGuard)>> = HashMap::new();
            for member in earlier {
                by_slot
                    .entry(Slot::for_key(member.0.key().as_bytes()))
                    .or_default()
                    .push(member);
            }
            by_slot.into_values().collect()
        } else {
            vec![earlier]
        };
        let checks = groups.into_iter().map(|group| {
            let mut conn = core.conn.clone();
            async move {
                let keys: Vec<&str> = group.iter().map(|(lock, _)| lock.key()).collect();
                let owners: Vec<&str> = group.iter().map(|(_, guard)| guard.owner()).collect();
                let args: Vec<&dyn ToRedisArgsDyn> =
                    owners.iter().map(|o| o as &dyn ToRedisArgsDyn).collect();
                let held: Vec<i64> = CHECK.run(&mut conn, &keys, &args).await?;
                if held.len() != keys.len() {
                    return Err(Error::UnexpectedReply(format!(
                        "multi_check script answered {held:?} for {} keys",
                        keys.len()
                    )));
                }
                Ok(group
                    .iter()
                    .zip(held)
                    .find(|(_, held)| *held != 1)
                    .map(|((lock, _), _)| lock.name().to_string()))
            }
        });
        Ok(try_join_all(checks).await?.into_iter().flatten().next())
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

/// Releases the members taken so far, all at once; errors only logged (the TTL is the
/// backstop).
async fn release_all(guards: Vec<RLockGuard>) {
    for result in join_all(guards.into_iter().map(RLockGuard::unlock)).await {
        if let Err(e) = result {
            tracing::debug!(error = %e, kind = "multi", "releasing a member failed");
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

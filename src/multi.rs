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

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use futures::future::{join_all, select_all};
use tokio::time::Instant;
use tokio_util::sync::{CancellationToken, DropGuard};

use crate::client::Core;
use crate::error::{Error, Result};
use crate::raw;
use crate::reentrant::{RLock, RLockGuard};

/// All-or-nothing over several [`RLock`]s: the guard holds every one of them, or the
/// acquisition fails (or times out) and holds none.
///
/// Get one from [`Client::multi_lock`](crate::Client::multi_lock). Names are sorted and
/// deduplicated (`["b", "a", "b"]` is the multi-lock `{a, b}`); an empty list is
/// [`Error::InvalidArgument`] on use. Each member is the plain [`RLock`] of that name, with
/// its owner rules: the calling task is the owner of every member, and a member it already
/// holds is re-entered.
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
#[derive(Clone)]
pub struct MultiLock {
    inner: Arc<Inner>,
}

struct Inner {
    core: Arc<Core>,
    /// Sorted by name, no duplicates.
    locks: Vec<RLock>,
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
                .find_map(|n| crate::keys::check_name(n).err())
                .map(|e| match e {
                    Error::InvalidArgument { reason, .. } => reason,
                    other => other.to_string(),
                })
        };
        let locks = names.iter().map(|n| RLock::new(core.clone(), n)).collect();
        MultiLock {
            inner: Arc::new(Inner {
                core,
                locks,
                invalid,
            }),
        }
    }

    /// The member names, sorted and deduplicated (the order they are taken in).
    pub fn names(&self) -> Vec<&str> {
        self.inner.locks.iter().map(|l| l.name()).collect()
    }

    /// Acquires every member, waiting as long as it takes; the watchdog keeps them alive
    /// until the guard is released.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for an empty list or an invalid name; [`Error::Redis`]
    /// when Redis fails. On an error the members taken so far are released first.
    ///
    /// # Cancel safety
    /// Cancel safe: dropping the future drops the member guards taken so far, which releases
    /// them in the background (promptly, at the latest by their TTL), and the member being
    /// waited for is cancelled as [`RLock::lock`] is (no hold left behind).
    pub async fn lock(&self) -> Result<MultiLockGuard> {
        raw::never_timed_out(self.acquire(None, None).await?)
    }

    /// Acquires every member, waiting as long as it takes; each member expires `lease` after
    /// it was taken unless released before (no watchdog). See "Leases" above.
    ///
    /// # Errors
    /// As [`MultiLock::lock`], and [`Error::InvalidArgument`] for a lease below 1 ms or above
    /// 2<sup>53</sup> ms.
    ///
    /// # Cancel safety
    /// As for [`MultiLock::lock`].
    pub async fn lock_with_lease(&self, lease: Duration) -> Result<MultiLockGuard> {
        raw::never_timed_out(self.acquire(None, Some(lease)).await?)
    }

    /// Tries to acquire every member within `wait` in total (`Duration::ZERO`: one attempt
    /// each, in order). `Ok(None)` when some member stayed held by another owner until the
    /// deadline; the members taken before are released before it returns.
    ///
    /// # Errors
    /// As [`MultiLock::lock_with_lease`]. Contention is never an error.
    ///
    /// # Cancel safety
    /// As for [`MultiLock::lock`].
    pub async fn try_lock(
        &self,
        wait: Duration,
        lease: Option<Duration>,
    ) -> Result<Option<MultiLockGuard>> {
        self.acquire(Some(raw::deadline_after(wait)), lease).await
    }

    async fn acquire(
        &self,
        deadline: Option<Instant>,
        lease: Option<Duration>,
    ) -> Result<Option<MultiLockGuard>> {
        if let Some(reason) = &self.inner.invalid {
            return Err(Error::invalid("names", reason.clone()));
        }
        if let Some(lease) = lease {
            crate::keys::check_millis("lease", lease)?;
        }
        let started = Instant::now();
        loop {
            let mut guards: Vec<RLockGuard> = Vec::with_capacity(self.inner.locks.len());
            let mut first_taken = None;
            for lock in &self.inner.locks {
                let taken = match deadline {
                    None => match lease {
                        None => lock.lock().await.map(Some),
                        Some(lease) => lock.lock_with_lease(lease).await.map(Some),
                    },
                    Some(d) => {
                        let left = d.saturating_duration_since(Instant::now());
                        lock.try_lock(left, lease).await
                    }
                };
                match taken {
                    Ok(Some(guard)) => {
                        first_taken.get_or_insert_with(Instant::now);
                        guards.push(guard);
                    }
                    Ok(None) => {
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
            if lease.is_some_and(|lease| acquired_in >= lease) {
                // The first member may have expired already: not all-or-nothing any more.
                tracing::debug!(
                    kind = "multi",
                    ?acquired_in,
                    "lease ran out while acquiring; retrying"
                );
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
                guards,
                acquired_in,
            )));
        }
    }

    /// Whether any member is held by anyone.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for an empty list or an invalid name; [`Error::Redis`]
    /// when Redis fails.
    ///
    /// # Cancel safety
    /// Cancel safe (read only).
    pub async fn is_any_locked(&self) -> Result<bool> {
        if let Some(reason) = &self.inner.invalid {
            return Err(Error::invalid("names", reason.clone()));
        }
        for lock in &self.inner.locks {
            if lock.is_locked().await? {
                return Ok(true);
            }
        }
        Ok(false)
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

impl std::fmt::Debug for MultiLock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MultiLock")
            .field("names", &self.names())
            .finish()
    }
}

/// Holds every member of a [`MultiLock`]. Release with [`unlock`](MultiLockGuard::unlock);
/// dropping it drops each member guard, which releases them in the background.
#[must_use = "the locks are released when the guard is dropped; call .unlock().await"]
pub struct MultiLockGuard {
    guards: Vec<RLockGuard>,
    lost: CancellationToken,
    acquired_in: Duration,
    /// Stops the task that watches the members' lost tokens.
    _watch: Option<DropGuard>,
}

impl MultiLockGuard {
    fn new(core: &Arc<Core>, guards: Vec<RLockGuard>, acquired_in: Duration) -> MultiLockGuard {
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
    /// The first member's error: [`Error::NotHeld`] when a member was already gone (expired,
    /// force-unlocked), [`Error::Redis`] when Redis failed.
    ///
    /// # Cancel safety
    /// Once called, the releases happen: dropping the future drops the member unlocks, which
    /// finish in the background.
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

    /// The member names, in the order they were taken (sorted).
    pub fn names(&self) -> Vec<&str> {
        self.guards.iter().map(|g| g.name()).collect()
    }

    /// The owner field of every member hold: `<client id>:<task id>`.
    pub fn owner(&self) -> &str {
        self.guards.first().map_or("", |g| g.owner())
    }

    /// The lease the members were taken with; `None` when the watchdog renews them.
    pub fn lease(&self) -> Option<Duration> {
        self.guards.first().and_then(|g| g.lease())
    }

    /// Time from taking the first member to taking the last. With a lease, the whole set is
    /// held for at least `lease - acquired_in` after the guard was handed out.
    pub fn acquired_in(&self) -> Duration {
        self.acquired_in
    }

    /// Whether any member is known to be lost (see
    /// [`RLockGuard::is_lost`](crate::RLockGuard::is_lost)).
    pub fn is_lost(&self) -> bool {
        self.lost.is_cancelled() || self.guards.iter().any(|g| g.is_lost())
    }

    /// A token cancelled as soon as any member is known to be lost.
    pub fn lost(&self) -> CancellationToken {
        self.lost.clone()
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

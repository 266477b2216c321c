//! [`MultiLock`]'s acquire methods: take the members one after another in their sorted
//! order, ask the server whether the earlier ones are still held, and start over when one
//! was lost (see "Why one global order" and "Why check before returning" in
//! [`multi`](super)).

use std::collections::HashMap;
use std::time::Duration;

use futures::future::{join_all, try_join_all};
use redis::cluster_routing::Slot;
use tokio::time::Instant;

use super::{MultiLock, MultiLockGuard};
use crate::engine;
use crate::error::{Error, Result};
use crate::lock::reentrant::{RLock, RLockGuard};
use crate::wire::scripts::{ToRedisArgsDyn, MULTI_CHECK as CHECK};

impl MultiLock {
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

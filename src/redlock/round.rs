//! The acquire: [`RedLock::lock`], [`lock_with_lease`](RedLock::lock_with_lease) and
//! [`try_lock`](RedLock::try_lock), the rounds across the nodes with their validity check,
//! and the randomized retry between rounds.

use std::time::Duration;

use futures::future::join_all;
use tokio::time::Instant;
use tracing::Instrument;

use super::node::NodeReply;
use super::{drift, quorum, RedLock, RedLockGuard};
use crate::backoff;
use crate::engine::{self, observe, Hold};
use crate::error::{Error, Result};
use crate::wire::keys::check_millis;

/// A random delay in `base / 2 .. base * 3 / 2`.
fn jitter(base: Duration) -> Duration {
    let r = backoff::below(base.as_nanos().max(1));
    base / 2 + Duration::from_nanos(u64::try_from(r).unwrap_or(u64::MAX))
}

impl RedLock {
    /// Acquires the lock on a majority of the nodes, retrying as long as it takes; the
    /// guard's task extends it by quorum until the guard is released.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for an invalid name, option or empty set.
    /// [`Error::Redis`] (the first node's error) when, in one round, so many nodes failed
    /// (error or per-node timeout) that no majority was possible: the deployment is down
    /// rather than contended. Contention alone never ends the wait.
    ///
    /// # Cancel safety
    /// Cancel safe. Dropping the future at any point leaves no hold behind: each node call
    /// abandoned mid-flight finishes in the background and releases what it took.
    ///
    /// # Example
    ///
    /// ```rust,no_run
    /// # async fn demo(clients: Vec<lockwise::Client>) -> lockwise::Result<()> {
    /// let lock = lockwise::RedLockSet::new(&clients).lock("invoice:9");
    /// let guard = lock.lock().await?;
    /// // ... work while guard.validity() lasts ...
    /// guard.unlock().await?;
    /// # Ok(()) }
    /// ```
    pub async fn lock(&self) -> Result<RedLockGuard> {
        engine::never_timed_out(self.acquire(None, None).await?)
    }

    /// Like [`lock`](Self::lock), with a fixed lease and no extensions: the holds expire
    /// `lease` after they were taken unless released before.
    ///
    /// # Errors
    /// As for [`lock`](Self::lock); also [`Error::InvalidArgument`] for a lease below 1 ms,
    /// above 2<sup>53</sup> ms, or not longer than its drift allowance.
    ///
    /// # Cancel safety
    /// As for [`lock`](Self::lock).
    ///
    /// # Example
    ///
    /// ```rust,no_run
    /// use std::time::Duration;
    ///
    /// # async fn demo(clients: Vec<lockwise::Client>) -> lockwise::Result<()> {
    /// let lock = lockwise::RedLockSet::new(&clients).lock("invoice:9");
    /// // Expires 10 s after it was taken, unless unlocked before.
    /// let guard = lock.lock_with_lease(Duration::from_secs(10)).await?;
    /// guard.unlock().await?;
    /// # Ok(()) }
    /// ```
    pub async fn lock_with_lease(&self, lease: Duration) -> Result<RedLockGuard> {
        engine::never_timed_out(self.acquire(None, Some(lease)).await?)
    }

    /// Tries to acquire the lock on a majority of the nodes for at most `wait` (and at most
    /// [`retry_count`](super::RedLockOptions::retry_count) retries). [`Error::Timeout`](crate::Error::Timeout): not acquired
    /// in time. `Duration::ZERO` makes a single round. With `lease: None` the guard's task
    /// extends the lock; with `Some(lease)` it expires after the lease.
    ///
    /// # Errors
    /// As for [`lock_with_lease`](Self::lock_with_lease). [`Error::Timeout`](crate::Error::Timeout) when the wait ran out.
    ///
    /// # Cancel safety
    /// As for [`lock`](Self::lock).
    ///
    /// # Example
    ///
    /// ```rust,no_run
    /// use std::time::Duration;
    ///
    /// # async fn demo(clients: Vec<lockwise::Client>) -> lockwise::Result<()> {
    /// let lock = lockwise::RedLockSet::new(&clients).lock("invoice:9");
    /// match lock.try_lock(Duration::from_secs(1), None).await {
    ///     Ok(guard) => guard.unlock().await?,
    ///     Err(e) if e.is_timeout() => println!("someone else holds it"),
    ///     Err(e) => return Err(e),
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn try_lock(&self, wait: Duration, lease: Option<Duration>) -> Result<RedLockGuard> {
        engine::or_timeout(
            self.acquire(Some(engine::deadline_after(wait)), lease)
                .await?,
            self.name(),
        )
    }

    /// Runs acquire rounds until one is granted by a quorum with validity left (the guard),
    /// the caller's wait or retry count runs out (`None`), or a round's failures leave no
    /// majority possible (the first error).
    pub(super) async fn acquire(
        &self,
        deadline: Option<Instant>,
        lease: Option<Duration>,
    ) -> Result<Option<RedLockGuard>> {
        self.check()?;
        let set = &self.inner.set;
        let ttl = lease.unwrap_or(set.options.ttl);
        let ttl_ms = check_millis("lease", ttl)?;
        if ttl <= drift(ttl) {
            return Err(Error::invalid(
                "lease",
                format!("must be longer than its drift allowance (1% + 2 ms), got {ttl:?}"),
            ));
        }
        let owner = self.owner_field();
        // Observed like the engine's kinds (wait histogram, outcome counters, the
        // `lockwise.acquire` span), through the first node's client.
        let observed = observe::Acquire::start(
            &self.inner.nodes[0].core.metrics,
            crate::engine::KindId::RedLock,
            &self.inner.name,
            &owner,
        );
        let result = self
            .rounds(owner, ttl, ttl_ms, lease, deadline)
            .instrument(observed.span().clone())
            .await;
        observed.finish(&result);
        result
    }

    /// The acquire rounds of [`acquire`](Self::acquire), for `owner`, with the checked TTL.
    async fn rounds(
        &self,
        owner: std::sync::Arc<str>,
        ttl: Duration,
        ttl_ms: u64,
        lease: Option<Duration>,
        deadline: Option<Instant>,
    ) -> Result<Option<RedLockGuard>> {
        let set = &self.inner.set;
        let n = self.inner.nodes.len();
        let timeout = set.options.node_timeout;
        let started = Instant::now();
        let mut rounds = 0u32;
        loop {
            rounds += 1;
            let round_start = Instant::now();
            let replies = join_all(
                self.inner
                    .nodes
                    .iter()
                    .map(|node| node.acquire(&owner, ttl_ms, timeout)),
            )
            .await;
            let elapsed = round_start.elapsed();
            let acquired = replies
                .iter()
                .filter(|r| matches!(r, NodeReply::Granted(..)))
                .count();
            let validity = ttl.checked_sub(elapsed + drift(ttl)).unwrap_or_default();
            // No .await from here until the holds are registered: each granted node's hold
            // gets its place in that node's registry (a failed round's are dropped at once,
            // which releases them), and a node held by another owner has none of ours.
            let mut holds = Vec::with_capacity(n);
            let mut errors = Vec::new();
            for (node, reply) in self.inner.nodes.iter().zip(replies) {
                holds.push(match reply {
                    NodeReply::Granted(ticket, count) => {
                        Some(Hold::register(ticket, count, Some(ttl)))
                    }
                    NodeReply::Held => {
                        node.core.holds.forgotten(
                            &node.hold_key(&owner),
                            None,
                            "another owner holds it on this node",
                        );
                        None
                    }
                    NodeReply::Failed(e) => {
                        errors.push(e);
                        None
                    }
                });
            }
            if acquired >= quorum(n) && !validity.is_zero() {
                tracing::debug!(
                    lock = %self.inner.name,
                    kind = "redlock",
                    nodes = acquired,
                    of = n,
                    rounds,
                    validity_ms = validity.as_millis() as u64,
                    waited_ms = started.elapsed().as_millis() as u64,
                    "redlock granted by a quorum"
                );
                return Ok(Some(RedLockGuard::new(
                    self.clone(),
                    owner,
                    lease,
                    ttl,
                    holds,
                    round_start,
                )));
            }
            // Failed round: give back what it took (dropping a hold releases it; late or
            // lost replies are settled by their node).
            drop(holds);
            let failed = errors.len();
            tracing::debug!(
                lock = %self.inner.name,
                granted = acquired,
                failed,
                of = n,
                elapsed_ms = elapsed.as_millis() as u64,
                "redlock round failed"
            );
            if failed > n - quorum(n) {
                // No majority was possible: a failure of the deployment, not contention.
                return Err(errors.swap_remove(0));
            }
            // Randomized retry, bounded by the caller's wait and the retry count.
            let mut delay = jitter(set.options.retry_delay);
            if let Some(d) = deadline {
                if set.options.retry_count.is_some_and(|c| rounds > c) {
                    return Ok(None);
                }
                let left = d.saturating_duration_since(Instant::now());
                if left.is_zero() {
                    tracing::debug!(lock = %self.inner.name, rounds, "redlock rounds ran out");
                    return Ok(None);
                }
                delay = delay.min(left);
            }
            tokio::time::sleep(delay).await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn jitter_stays_within_half_to_one_and_a_half() {
        let base = Duration::from_millis(200);
        for _ in 0..1000 {
            let d = jitter(base);
            assert!(d >= base / 2 && d < base * 3 / 2, "{d:?}");
        }
        assert!(jitter(Duration::ZERO) <= Duration::from_nanos(1));
    }
}

//! One acquire round across the nodes, its quorum / validity / drift arithmetic, and the
//! randomized retry between rounds.

use std::time::Duration;

use futures::future::join_all;
use tokio::time::Instant;
use tracing::Instrument;
use uuid::Uuid;

use super::node::NodeReply;
use super::{RedLock, RedLockGuard};
use crate::engine::{observe, Hold};
use crate::error::{Error, Result};
use crate::wire::keys::check_millis;

/// The drift allowance of the Redlock algorithm: 1% of the TTL plus 2 ms.
pub(super) fn drift(ttl: Duration) -> Duration {
    ttl / 100 + Duration::from_millis(2)
}

/// A random delay in `base / 2 .. base * 3 / 2`.
fn jitter(base: Duration) -> Duration {
    let span = base.as_nanos().max(1);
    let r = Uuid::new_v4().as_u128() % span;
    base / 2 + Duration::from_nanos(r as u64)
}

/// N/2 + 1.
pub(super) fn quorum(n: usize) -> usize {
    n / 2 + 1
}

impl RedLock {
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
    fn drift_is_one_percent_plus_two_ms() {
        assert_eq!(drift(Duration::from_secs(10)), Duration::from_millis(102));
        assert_eq!(drift(Duration::from_millis(1)), Duration::from_micros(2010));
    }

    #[test]
    fn quorum_is_a_strict_majority() {
        assert_eq!(quorum(1), 1);
        assert_eq!(quorum(2), 2);
        assert_eq!(quorum(3), 2);
        assert_eq!(quorum(4), 3);
        assert_eq!(quorum(5), 3);
    }

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

//! One acquire round across the nodes, its quorum / validity / drift arithmetic, and the
//! randomized retry between rounds.

use std::time::Duration;

use futures::future::join_all;
use tokio::time::Instant;
use uuid::Uuid;

use super::node::NodeReply;
use super::{RedLock, RedLockGuard};
use crate::error::{Error, Result};
use crate::keys::check_millis;
use crate::raw::current_owner;

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
        let owner = current_owner(&set.id_str);
        let hold_id = self.inner.hold_id(&owner);
        let n = self.inner.nodes.len();
        let started = Instant::now();
        let mut rounds = 0u32;
        loop {
            rounds += 1;
            // Per node, the hold count a hold of this round would make there.
            let expected: Vec<u32> = match set.holds.get(&hold_id) {
                Some(run) => run.nodes.iter().map(|node| node.count + 1).collect(),
                None => vec![1; n],
            };
            let round_start = Instant::now();
            let replies = join_all(
                self.inner
                    .nodes
                    .iter()
                    .zip(expected)
                    .map(|(node, expected)| self.node_acquire(node, &owner, ttl_ms, expected)),
            )
            .await;
            let elapsed = round_start.elapsed();
            let granted: Vec<bool> = replies
                .iter()
                .map(|r| matches!(r, NodeReply::Granted(_)))
                .collect();
            let acquired = granted.iter().filter(|g| **g).count();
            let validity = ttl.checked_sub(elapsed + drift(ttl)).unwrap_or_default();
            if acquired >= quorum(n) && !validity.is_zero() {
                // No .await from here until the guard owns the holds.
                let member = self.register(hold_id, &replies);
                tracing::debug!(
                    lock = %self.inner.name,
                    kind = "redlock",
                    nodes = acquired,
                    of = n,
                    rounds,
                    validity_ms = validity.as_millis() as u64,
                    waited_ms = started.elapsed().as_millis() as u64,
                    "lock acquired"
                );
                return Ok(Some(RedLockGuard::new(
                    self.clone(),
                    owner,
                    lease,
                    ttl,
                    granted,
                    round_start,
                    member,
                )));
            }
            // What the round saw of the nodes may tell the owner's earlier guards that their
            // holds are gone.
            if let Some(mut run) = set.holds.get_mut(&hold_id) {
                run.observe(&replies);
                run.check(&self.inner.name);
            }
            // Failed round: give back what it took (late or lost replies undo themselves).
            for (node, _) in self.inner.nodes.iter().zip(&granted).filter(|(_, g)| **g) {
                let (name, release) = (
                    self.inner.name.clone(),
                    node.release(owner.clone(), set.id_str.clone(), 0, 1),
                );
                node.core.handle.spawn(async move {
                    if let Err(e) = release.await {
                        tracing::debug!(lock = %name, error = %e, "release after a failed round failed; the hold expires with its TTL");
                    }
                });
            }
            let mut errors = replies.into_iter().filter_map(|r| match r {
                NodeReply::Failed(e) => Some(e),
                _ => None,
            });
            let first_error = errors.next();
            let failed = first_error.is_some() as usize + errors.count();
            tracing::debug!(
                lock = %self.inner.name,
                granted = acquired,
                failed,
                of = n,
                elapsed_ms = elapsed.as_millis() as u64,
                "redlock round failed"
            );
            match first_error {
                // No majority was possible: a failure of the deployment, not contention.
                Some(e) if failed > n - quorum(n) => return Err(e),
                _ => {}
            }
            // Randomized retry, bounded by the caller's wait and the retry count.
            let mut delay = jitter(set.options.retry_delay);
            if let Some(d) = deadline {
                if set.options.retry_count.is_some_and(|c| rounds > c) {
                    return Ok(None);
                }
                let left = d.saturating_duration_since(Instant::now());
                if left.is_zero() {
                    tracing::debug!(lock = %self.inner.name, rounds, "try_lock timed out");
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

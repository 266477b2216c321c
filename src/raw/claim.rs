//! The overtake limit: a waiter that has waited longer than its client's limit claims the
//! lock (`lua/claim.lua`), so that the next release goes to it even when the releasing
//! client's own waiters, which it wakes before anyone else hears the unlock message, or the
//! releasing task locking again at once, would get there first.
//!
//! A kind that honours claims (one reentrant hash lock: `RLock`, `FencedLock`) passes
//! [`Claim::ms`] and the claim key to its lock script at each attempt; the wait loop of
//! [`take`](super::handle::take) then wakes a claimant at least every [`CLAIM_REFRESH`] so its
//! claim stays alive while the lock is held, and withdraws the claim when the waiter leaves
//! without the lock (timed out, cancelled, failed). A claim only ever makes a lock script
//! refuse a free lock to others, so it cannot break mutual exclusion; a claimant that dies
//! holds a free lock back for at most [`CLAIM_TTL`].

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use super::Core;
use crate::scripts::CLAIM_DROP;

/// TTL of a claim: how long a free lock is held back for a claimant that stopped attempting
/// (crashed, paused, cut off).
pub(crate) const CLAIM_TTL: Duration = Duration::from_secs(1);

/// How often a claimant attempts at least, renewing its claim, while the lock is held.
pub(crate) const CLAIM_REFRESH: Duration = Duration::from_millis(CLAIM_TTL.as_millis() as u64 / 3);

/// One acquire's claim: whether it is due, and whether an attempt has staked it.
pub(crate) struct Claim {
    /// The client's overtake limit; `None`: never claim.
    limit: Option<Duration>,
    since: Instant,
    staked: AtomicBool,
}

impl Claim {
    /// The claim of an acquire starting now, under `core`'s overtake limit.
    pub(crate) fn new(core: &Core) -> Claim {
        Claim {
            limit: core.overtake_limit,
            since: Instant::now(),
            staked: AtomicBool::new(false),
        }
    }

    /// The claim TTL in ms to pass to the lock script now: [`CLAIM_TTL`] once the acquire
    /// has waited longer than the limit (the attempt may then stake a claim), else 0.
    pub(crate) fn ms(&self) -> u64 {
        match self.limit {
            Some(limit) if self.since.elapsed() >= limit => {
                self.staked.store(true, Ordering::Relaxed);
                CLAIM_TTL.as_millis() as u64
            }
            _ => 0,
        }
    }

    /// Whether an attempt may have staked a claim (it was passed a non-zero [`ms`](Self::ms)).
    pub(crate) fn staked(&self) -> bool {
        self.staked.load(Ordering::Relaxed)
    }
}

/// Withdraws a staked claim when the acquire ends without the lock or is dropped; disarmed
/// when the lock was granted (the lock script deleted the claim then).
pub(crate) struct Withdraw<'a> {
    pub(crate) claim: &'a Claim,
    pub(crate) core: &'a Arc<Core>,
    pub(crate) key: &'a str,
    pub(crate) owner: &'a Arc<str>,
    pub(crate) granted: bool,
}

impl Drop for Withdraw<'_> {
    fn drop(&mut self) {
        if self.granted || !self.claim.staked() {
            return;
        }
        let mut conn = self.core.conn.clone();
        let (key, owner) = (self.key.to_string(), self.owner.clone());
        // In the background: the waiter is gone (or going). A failure leaves the claim to
        // its TTL, which bounds it anyway.
        self.core.handle.spawn(async move {
            let dropped: redis::RedisResult<i64> =
                CLAIM_DROP.run(&mut conn, &[&key], &[&&*owner]).await;
            if let Err(e) = dropped {
                tracing::debug!(error = %e, claim = %key, "could not withdraw an overtake claim; it expires");
            }
        });
    }
}

//! The overtake limit: a waiter that has waited longer than its client's limit joins the
//! lock's claim queue (`lua/claim.lua`), ordered by when each waiter began waiting, and a
//! free lock goes only to the queue's head. So the next release goes to the oldest overdue
//! waiter even when the releasing client's own waiters, which it wakes before anyone else
//! hears the unlock message, or the releasing task locking again at once, would get there
//! first; and no waiter is served before one that began more than the limit earlier.
//!
//! A kind that honours claims (one reentrant hash lock: `RLock`, `FencedLock`, and so a
//! `MultiLock`'s members; both sides of a `RwLock`, which share a queue of their own, where
//! readers are queued as `~<owner>`, a reader at the head holds back writers only, and
//! writers queue as if they had waited the limit longer, [`Claim::limit_ms`])
//! passes [`Claim::ms`], [`Claim::waited_ms`] and the claim keys to
//! its lock script at each attempt (the engine does, [`acquire::run`](super::acquire::run)).
//! The wait loop of [`acquire_hold`](super::handle::acquire_hold) wakes a
//! waiter when it becomes overdue ([`Claim::until_due`]), whatever else wakes it, so it
//! joins the queue on time; it then wakes a member at least every [`CLAIM_REFRESH`] so its
//! entry stays alive while the lock is held, and withdraws it when the waiter leaves without
//! the lock (timed out, cancelled, failed). A claim only ever makes a lock script refuse a
//! free lock to others, so it cannot break mutual exclusion; a member that dies holds a free
//! lock back for at most [`CLAIM_TTL`].
//!
//! The script tells a waiter when it is in the queue, and its score (`[0, pttl, score]`).
//! The waiter then marks itself on its channel with that place ([`Claim::hold`]; an overdue
//! waiter is marked, unranked, just before the attempt that queues it): every release this
//! client hears wakes its member first in the queue by (score, member), the server's own
//! order (the only one of this client that can be the head), through its own [`Notify`],
//! instead of the first waiter in line, whom the lock would refuse. So a release still wakes
//! one waiter per client, however many are overdue. (Ranking by the local start time
//! instead disagreed with the server's order for waiters that began within a few ms of
//! each other, and each such handoff then waited for the head's refresh.)

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::Notify;
use tokio::time::Instant;

use super::listener::{Claimant, Listener, Rank};
use super::Core;
use crate::wire::keys::ClaimKeys;
use crate::wire::scripts::CLAIM_DROP;

/// TTL of a claim: how long a free lock is held back for a claimant that stopped attempting
/// (crashed, paused, cut off).
pub(crate) const CLAIM_TTL: Duration = Duration::from_secs(1);

/// How often a claimant attempts at least, renewing its claim, while the lock is held.
pub(crate) const CLAIM_REFRESH: Duration = Duration::from_millis(CLAIM_TTL.as_millis() as u64 / 3);

/// One acquire's claim: whether it is due, whether an attempt has staked it, and the
/// waiter's own wakeup while it holds it.
pub(crate) struct Claim {
    /// The client's overtake limit; `None`: never claim.
    limit: Option<Duration>,
    /// Its name in the queue (the owner field, `~`-prefixed for a reader).
    member: Arc<str>,
    since: Instant,
    staked: AtomicBool,
    /// Notified (with a permit) at every release this client hears while `mark` is set.
    pub(crate) wake: Arc<Notify>,
    /// The mark on the channel while this waiter is in the queue, with the score it was
    /// last ranked at.
    mark: Mutex<Option<(Claimant, Option<i64>)>>,
}

impl Claim {
    /// The claim of an acquire starting now, under the overtake `limit` (`None`: it never
    /// claims); `member` is its name in the queue.
    pub(crate) fn new(limit: Option<Duration>, member: Arc<str>) -> Claim {
        Claim {
            limit,
            member,
            since: Instant::now(),
            staked: AtomicBool::new(false),
            wake: Arc::new(Notify::new()),
            mark: Mutex::new(None),
        }
    }

    /// Marks this waiter on `channel` as in the queue, at `score` once an attempt reported
    /// it (`None`: about to be queued). Returns whether its known place changed (newly
    /// marked, or newly ranked): a release may have come between the script and the mark,
    /// whose wakeup went to another waiter, so the caller should attempt again at once.
    pub(crate) fn hold(&self, listener: &Listener, channel: &str, score: Option<i64>) -> bool {
        let rank = |score: Option<i64>| -> Rank { score.map(|s| (s, self.member.clone())) };
        let mut mark = self.mark.lock().unwrap_or_else(|e| e.into_inner());
        match &mut *mark {
            Some((claimant, known)) => {
                if score.is_none() || *known == score {
                    return false;
                }
                claimant.rank(rank(score));
                *known = score;
                true
            }
            None => {
                *mark = listener
                    .claimant(channel, &self.wake, rank(score))
                    .map(|c| (c, score));
                mark.is_some()
            }
        }
    }

    /// Whether this waiter is the first of its client's in the queue (see
    /// [`Claimant::is_first`]); false when not marked.
    pub(crate) fn is_first(&self) -> bool {
        let mark = self.mark.lock().unwrap_or_else(|e| e.into_inner());
        mark.as_ref().is_some_and(|(c, _)| c.is_first())
    }

    /// Records that the last attempt did not find this waiter the claimant.
    pub(crate) fn let_go(&self) {
        self.mark.lock().unwrap_or_else(|e| e.into_inner()).take();
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

    /// How long this acquire has waited, in ms: its place in the claim queue.
    pub(crate) fn waited_ms(&self) -> u64 {
        self.since.elapsed().as_millis() as u64
    }

    /// The overtake limit in ms; 0 when there is none.
    pub(crate) fn limit_ms(&self) -> u64 {
        self.limit.map_or(0, |l| l.as_millis() as u64)
    }

    /// Whether the acquire is overdue: its next attempt queues it.
    pub(crate) fn due(&self) -> bool {
        self.limit
            .is_some_and(|limit| self.since.elapsed() >= limit)
    }

    /// How long until the acquire is overdue and may claim: zero once it is, `None` when it
    /// never will (no limit). The wait loop wakes the waiter then, so it joins the queue on
    /// time whatever else wakes it. Zero is not "never": an attempt sent just before the
    /// limit whose reply comes back just after it did not queue the waiter, which must
    /// attempt again at once rather than sleep until a wakeup that may go to another waiter.
    pub(crate) fn until_due(&self) -> Option<Duration> {
        let limit = self.limit?;
        Some(limit.saturating_sub(self.since.elapsed()))
    }

    /// Whether an attempt may have staked a claim (it was passed a non-zero [`ms`](Self::ms)).
    pub(crate) fn staked(&self) -> bool {
        self.staked.load(Ordering::Relaxed)
    }
}

/// Withdraws a staked claim when the acquire ends without the lock or is dropped; disarmed
/// when the lock was granted (the lock script deleted the claim then). A lock found free
/// then is announced as by an unlock: the waiters it refused meanwhile look again.
pub(crate) struct Withdraw<'a> {
    pub(crate) claim: &'a Claim,
    pub(crate) core: &'a Arc<Core>,
    pub(crate) keys: &'a ClaimKeys,
    pub(crate) granted: bool,
}

impl Drop for Withdraw<'_> {
    fn drop(&mut self) {
        if self.granted || !self.claim.staked() {
            return;
        }
        let core = self.core.clone();
        let member = self.claim.member.clone();
        let keys = self.keys.clone();
        // In the background: the waiter is gone (or going). A failure leaves the claim to
        // its TTL, which bounds it anyway.
        self.core.cleanups.spawn(async move {
            let mut script_keys: Vec<&str> =
                vec![&keys.queue, &keys.lock, &keys.channel, &keys.deadlines];
            script_keys.extend(keys.also.as_deref());
            let dropped: redis::RedisResult<i64> = CLAIM_DROP
                .run(
                    &mut core.conn.clone(),
                    &script_keys,
                    &[&&*member, &core.id_str.as_str(), &core.publish],
                )
                .await;
            match dropped {
                // This client hears no echo of its own message.
                Ok(1) => {
                    for channel in std::iter::once(&keys.channel).chain(&keys.also) {
                        core.listener.notify_local(channel);
                    }
                }
                Ok(_) => {}
                Err(e) => {
                    tracing::debug!(error = %e, claim = %keys.queue, "could not withdraw an overtake claim; it expires");
                }
            }
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_overdue_claim_is_due_now_not_never() {
        let member: Arc<str> = "c:1".into();
        let never = Claim::new(None, member.clone());
        assert_eq!(never.until_due(), None);
        assert!(!never.due());
        let later = Claim::new(Some(Duration::from_secs(60)), member.clone());
        assert!(later.until_due().unwrap() > Duration::from_secs(59));
        // The limit passed while an attempt was on its way: the waiter must attempt again
        // at once (zero), not sleep as one that never claims (`None`).
        let overdue = Claim::new(Some(Duration::ZERO), member);
        assert_eq!(overdue.until_due(), Some(Duration::ZERO));
        assert!(overdue.due());
    }
}

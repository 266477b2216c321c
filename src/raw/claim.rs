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
//!
//! The script tells a waiter when it holds the claim (`[0, pttl, 1]`). Only then does the
//! waiter mark itself on its channel ([`Claim::hold`]): every release this client hears then
//! wakes the claimant through its own [`Notify`] instead of the first waiter in line, whom
//! the lock would refuse. So a claimant is never left to sleep behind such waiters, and
//! however many waiters are overdue, a release still wakes one waiter per client.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::Notify;
use tokio::time::Instant;

use super::listener::{Claimant, Listener};
use super::Core;
use crate::keys::Keys;
use crate::scripts::CLAIM_DROP;

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
    since: Instant,
    staked: AtomicBool,
    /// Notified (with a permit) at every release this client hears while `mark` is set.
    pub(crate) wake: Arc<Notify>,
    /// The mark on the channel while the last attempt found this waiter the claimant.
    mark: Mutex<Option<Claimant>>,
}

impl Claim {
    /// The claim of an acquire starting now, under `core`'s overtake limit.
    pub(crate) fn new(core: &Core) -> Claim {
        Claim {
            limit: core.overtake_limit,
            since: Instant::now(),
            staked: AtomicBool::new(false),
            wake: Arc::new(Notify::new()),
            mark: Mutex::new(None),
        }
    }

    /// Records that the last attempt found this waiter the claimant, marking it on
    /// `channel`. Returns whether it was not marked yet: a release may have come between
    /// the script's claim and the mark, so the caller should attempt again at once.
    pub(crate) fn hold(&self, listener: &Listener, channel: &str) -> bool {
        let mut mark = self.mark.lock().unwrap_or_else(|e| e.into_inner());
        if mark.is_some() {
            return false;
        }
        *mark = listener.claimant(channel, &self.wake);
        mark.is_some()
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
    pub(crate) keys: &'a Keys,
    pub(crate) owner: &'a Arc<str>,
    pub(crate) granted: bool,
}

impl Drop for Withdraw<'_> {
    fn drop(&mut self) {
        if self.granted || !self.claim.staked() {
            return;
        }
        let core = self.core.clone();
        let owner = self.owner.clone();
        let (claim, lock, channel) = (
            self.keys.claim.clone(),
            self.keys.lock.clone(),
            self.keys.channel.clone(),
        );
        // In the background: the waiter is gone (or going). A failure leaves the claim to
        // its TTL, which bounds it anyway.
        self.core.handle.spawn(async move {
            let dropped: redis::RedisResult<i64> = CLAIM_DROP
                .run(
                    &mut core.conn.clone(),
                    &[&claim, &lock, &channel],
                    &[&&*owner, &core.id_str.as_str(), &core.publish],
                )
                .await;
            match dropped {
                // This client hears no echo of its own message.
                Ok(1) => core.listener.notify_local(&channel),
                Ok(_) => {}
                Err(e) => {
                    tracing::debug!(error = %e, claim = %claim, "could not withdraw an overtake claim; it expires");
                }
            }
        });
    }
}

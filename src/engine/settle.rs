//! Settlements: bring an owner's hold count on the server back to its live guards (see
//! "Settling" in [`engine`](super)).

use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;
use futures::FutureExt;
use tokio::time::Instant;

use super::lock_ref::LockRef;
use super::registry::{HoldKey, Outcome, SettleTarget};
use super::wait::Trouble;
use super::Core;
use crate::backoff::{Backoff, Retries};
use crate::error::{Error, Result};

/// Ends a counted call; starts the settlement it may call for.
pub(super) fn finish(kind: &LockRef, key: &HoldKey, outcome: Outcome) {
    if kind.core().holds.finish(key, outcome) {
        spawn_settle(kind, key);
    }
}

/// Whether a failed call may still have run on the server: no error reply came from it.
pub(super) fn outcome_unknown(e: &redis::RedisError) -> bool {
    // A read-only client's refusal has no code either, but nothing was sent.
    e.code().is_none() && crate::error::refused_read_only(e).is_none()
}

pub(super) fn spawn_settle(kind: &LockRef, key: &HoldKey) {
    let (kind, key) = (kind.clone(), key.clone());
    kind.core().cleanups.clone().spawn(settle(kind, key));
}

/// Brings the server's hold count of `key`'s owner back to the number of live guards (see
/// "Settling" above). Runs while the registry marks the entry as settling, so no other call
/// of this owner is in flight: each step's `expected` count is exact.
async fn settle(kind: LockRef, key: HoldKey) {
    let core = kind.core().clone();
    let started = Instant::now();
    let mut pauses = Retries::new(SETTLE_PAUSES);
    loop {
        let SettleTarget {
            target,
            expected,
            ttl,
            hint,
            handed_over,
            unverified,
        } = core.holds.settle_target(&key);
        let step: Result<Option<bool>> = async {
            let count = match hint {
                Some(count) => count,
                None => {
                    let count = owner_holds(&core, &key.0, &key.1).await?;
                    // Read after these hand-overs, and after the unverified re-entry (one
                    // connection, in order): it has run by now, or never will.
                    if unverified && count == 1 && expected >= 1 {
                        // Whether the run's holds lasted is what the count cannot tell.
                        core.holds.counted(&key, handed_over, false);
                        core.holds.give_up_run(&key);
                        return Ok(None);
                    }
                    core.holds.counted(&key, handed_over, count >= expected);
                    count
                }
            };
            if count == target {
                return Ok(Some(false));
            }
            if count < target {
                return Ok(Some(true));
            }
            // Release one hold, but only while the count is still what we read. Found gone or
            // changed: whether the holds handed over were released before is unknowable.
            if kind.release(key.1.clone(), count, None).await? < 0 {
                core.holds.vanished(&key);
            }
            Ok(None)
        }
        .await;
        match step {
            Ok(Some(lost)) => {
                // Every guard that handed its release over was counted by a read after its
                // hand-over, or handed it over after this step's target and the settlement
                // goes on (`settle_done` sees the target moved).
                if core.holds.settle_done(&key, target, lost, false, false) {
                    tracing::debug!(lock = %kind.name(), holds = target, lost, "hold count settled");
                    return;
                }
            }
            Ok(None) => pauses.reset(),
            Err(e) => {
                // With no guard left, the key is gone once its longest TTL ran out after the
                // last call (every call ended before the settlement began).
                let expired = target == 0 && started.elapsed() > ttl + SETTLE_PAUSES.initial;
                if expired || core.holds.is_shut_down() {
                    tracing::warn!(
                        lock = %kind.name(),
                        error = %e,
                        "could not settle the hold count; the hold expires with its TTL"
                    );
                    core.holds.settle_done(&key, target, false, true, true);
                    return;
                }
                tracing::debug!(lock = %kind.name(), error = %e, "settling the hold count failed; retrying");
                // A call that waits for this settlement ends the backoff: the server may be
                // back, and the call has a budget.
                let hurry = core.holds.hurry(&key);
                tokio::select! {
                    () = tokio::time::sleep(pauses.next()) => {}
                    () = hurry.notified() => pauses.reset(),
                }
            }
        }
    }
}

/// A settlement's pauses between failed steps: 20 ms doubling to 1 s, jittered, unless a call
/// that waits for it comes.
const SETTLE_PAUSES: Backoff = Backoff::new(Duration::from_millis(20), Duration::from_secs(1));

/// The hold count of `owner` in a lock hash (0 if none).
pub(crate) async fn owner_holds(core: &Core, key: &str, owner: &str) -> Result<u32> {
    let n: Option<u32> = redis::cmd("HGET")
        .arg(key)
        .arg(owner)
        .query_async(&mut core.conn.clone())
        .await?;
    Ok(n.unwrap_or(0))
}

/// Sends the unlock script for one hold counted by [`ReleaseStep::Send`] (the owner's count is
/// `expected` before it), and ends the count. A release refused unrun is sent again within
/// the client's failover retry, and no later than `deadline` (an unlock's).
///
/// [`ReleaseStep::Send`]: super::registry::ReleaseStep::Send
pub(super) fn send_release(
    kind: &LockRef,
    key: &HoldKey,
    expected: u32,
    note: Option<Arc<str>>,
    deadline: Option<Instant>,
) -> BoxFuture<'static, Result<i64>> {
    let (kind, key) = (kind.clone(), key.clone());
    async move {
        // A release refused unrun while a failover is under way is sent again (the client's
        // failover retry); if it still cannot run, a settlement takes over.
        let mut trouble = Trouble::new(kind.core().failover_retry);
        let reply = loop {
            let sent = Instant::now();
            match kind.release(key.1.clone(), expected, note.clone()).await {
                Err(e) if e.did_not_run() => match trouble.retry(e, sent, deadline) {
                    Ok(pause) => tokio::time::sleep(pause).await,
                    Err(e) => break Err(e),
                },
                other => break other,
            }
        };
        let outcome = match &reply {
            Ok(-1) => Outcome::Forgotten,
            // The server's count is not the one this run explains: compare once all is quiet.
            Ok(-2) => Outcome::Unknown,
            Ok(_) => Outcome::Known,
            Err(Error::Redis(e)) if outcome_unknown(e) => Outcome::Unknown,
            // Not run: the server still counts the hold, which the settlement releases.
            Err(e) if e.did_not_run() => Outcome::Unknown,
            Err(_) => Outcome::Known,
        };
        finish(&kind, &key, outcome);
        reply
    }
    .boxed()
}

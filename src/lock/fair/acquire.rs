//! [`FairLock`]'s acquire methods and its queue: a waiter's entry, each run of the lock
//! script that refreshes it, and leaving the queue on a timeout or a dropped future (see
//! "Waiter deadlines" in [`fair`](super)).

use std::future::Future;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::FutureExt;
use tokio::time::Instant;

use super::handoff::{Handoff, Seen};
use super::{FairLock, FairLockGuard};
use crate::backoff::{Backoff, Retries};
use crate::engine::{self, Attempt, Hold, HoldKey, Reply, Ticket};
use crate::error::Result;
use crate::wire::scripts::{FAIR_CONFIRM, FAIR_LEAVE, FAIR_LOCK};

/// The handoff record of waiter `waiter` in the deadline set (`lua/fair_queue.lua`'s
/// `hand_over`): `!<waiter id>`.
fn handoff_record(waiter: &str) -> String {
    format!("!{waiter}")
}

/// Numbers the lock calls of this process, so each has its own queue entry and channel.
static NEXT_WAITER: AtomicU64 = AtomicU64::new(1);

impl FairLock {
    /// Acquires the lock after every waiter queued before this call, waiting as long as it
    /// takes; the watchdog keeps it alive until the guard is released.
    ///
    /// While waiting, the task listens on its own channel, which only the unlock that makes it
    /// the head of the queue publishes to, and refreshes its queue entry every third of the
    /// [waiter lease](Self::waiter_lease).
    ///
    /// # Errors
    /// [`Error::ClientClosed`](crate::Error::ClientClosed) once the last `Client` clone is dropped
    /// (a waiting call returns it then too).
    /// [`Error::InvalidArgument`](crate::Error::InvalidArgument) for an invalid name; [`Error::Redis`](crate::Error::Redis) when Redis fails (the
    /// waiter then leaves the queue in the background).
    ///
    /// # Cancel safety
    /// Cancel safe. Dropping the future at any point leaves no hold and no queue entry behind:
    /// the waiter leaves the queue in the background at once (waking the next waiter if it was
    /// the head of a free lock), a hold granted by a reply nobody awaited any more is released
    /// within a moment, and the waiter's channel subscription is dropped. The place in the
    /// queue is lost.
    ///
    /// # Example
    ///
    /// ```rust,no_run
    /// # async fn demo(client: lockwise::Client) -> lockwise::Result<()> {
    /// let lock = client.fair_lock("payouts");
    /// let guard = lock.lock().await?; // after every waiter that asked before
    /// // ... pay out ...
    /// guard.unlock().await?; // hands the lock to the head of the queue
    /// # Ok(()) }
    /// ```
    pub async fn lock(&self) -> Result<FairLockGuard> {
        engine::never_timed_out(self.acquire(None, None).await?)
    }

    /// Like [`lock`](Self::lock), but the lock expires `lease` after it was taken unless
    /// released before (no watchdog).
    ///
    /// # Errors
    /// [`Error::ClientClosed`](crate::Error::ClientClosed) once the last `Client` clone is dropped
    /// (a waiting call returns it then too).
    /// [`Error::InvalidArgument`](crate::Error::InvalidArgument) for an invalid name or a lease below 1 ms or above
    /// 2<sup>53</sup> ms; [`Error::Redis`](crate::Error::Redis) when Redis fails.
    ///
    /// # Cancel safety
    /// As for [`FairLock::lock`].
    ///
    /// # Example
    ///
    /// ```rust,no_run
    /// # async fn demo(client: lockwise::Client) -> lockwise::Result<()> {
    /// use std::time::Duration;
    /// let lock = client.fair_lock("payouts");
    /// let guard = lock.lock_with_lease(Duration::from_secs(10)).await?;
    /// // ... done within 10 s, or the lock expires by itself ...
    /// guard.unlock().await?;
    /// # Ok(()) }
    /// ```
    pub async fn lock_with_lease(&self, lease: Duration) -> Result<FairLockGuard> {
        engine::never_timed_out(self.acquire(None, Some(lease)).await?)
    }

    /// Tries to acquire the lock in turn, waiting at most `wait`. [`Error::Timeout`](crate::Error::Timeout)
    /// means the lock did not come to this waiter within the wait; the waiter has then left the queue.
    /// `Duration::ZERO` makes a single attempt that never queues and succeeds only if the lock
    /// is free and nobody is queued. With `lease: None` the watchdog keeps the lock alive; with
    /// `Some(lease)` it expires after the lease.
    ///
    /// # Errors
    /// [`Error::ClientClosed`](crate::Error::ClientClosed) once the last `Client` clone is dropped
    /// (a waiting call returns it then too).
    /// [`Error::InvalidArgument`](crate::Error::InvalidArgument) for an invalid name or lease; [`Error::Redis`](crate::Error::Redis) when Redis
    /// fails. [`Error::Timeout`](crate::Error::Timeout) when the wait ran out.
    ///
    /// # Cancel safety
    /// As for [`FairLock::lock`].
    ///
    /// # Example
    ///
    /// ```rust,no_run
    /// # async fn demo(client: lockwise::Client) -> lockwise::Result<()> {
    /// use std::time::Duration;
    /// let lock = client.fair_lock("payouts");
    /// match lock.try_lock(Duration::from_secs(2), None).await {
    ///     Ok(guard) => guard.unlock().await?,
    ///     Err(e) if e.is_timeout() => println!("not our turn within 2 s; left the queue"),
    ///     Err(e) => return Err(e),
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn try_lock(&self, wait: Duration, lease: Option<Duration>) -> Result<FairLockGuard> {
        engine::or_timeout(
            self.acquire(Some(engine::deadline_after(wait)), lease)
                .await?,
            self.name(),
        )
    }

    async fn acquire(
        &self,
        deadline: Option<Instant>,
        lease: Option<Duration>,
    ) -> Result<Option<FairLockGuard>> {
        if !crate::layout::fair_handoff(self.inner.base.core.layout) {
            return self.acquire_redisson(deadline, lease).await;
        }
        self.inner.base.check()?;
        let owner = self.inner.base.owner_field();
        // The queue entry is per call, not per owner: a late leave of an abandoned call of
        // this task must not remove the entry of its next call. A watchdog hold asks for a
        // handoff ("g"): a release gives it the lock while it waits (see "Handoff" in
        // [`fair`](super)). A lease is kept to the letter: that waiter takes the lock itself.
        let n = NEXT_WAITER.fetch_add(1, Ordering::Relaxed);
        let waiter: Arc<str> = match lease {
            None => format!("{owner}:g{n}").into(),
            Some(_) => format!("{owner}:{n}").into(),
        };
        let channel = format!("{}:{waiter}", self.inner.base.keys.fair_channel);
        // A deadline already reached: one attempt that does not join the queue.
        let single = deadline.is_some_and(|d| d <= Instant::now());
        let mut queued = Queued {
            lock: self.clone(),
            waiter,
            abandoned: Arc::new(AtomicBool::new(false)),
            armed: !single,
            _busy: self.inner.base.core.cleanups.token(),
        };
        let handoff = Arc::new(Handoff {
            channel: channel.clone(),
            seen: Mutex::new(Seen::default()),
            taken: AtomicBool::new(false),
            attempts: AtomicU32::new(0),
            queued: Mutex::new(None),
        });
        let granted = engine::acquire_hold(
            &self.inner.base,
            owner,
            // Its script serves waiters in queue order: no overtake claims.
            engine::Wake::Queued(&channel),
            deadline,
            lease,
            engine::KindId::Fair,
            |hold_key, lease_ms, _claim| {
                self.attempt(
                    hold_key,
                    &queued.waiter,
                    lease_ms,
                    deadline,
                    single,
                    &queued.abandoned,
                    lease.is_none().then_some(&handoff),
                )
            },
        )
        .await;
        match granted {
            // The lock script removed us from the queue when it granted the lock.
            Ok(Some((mut hold, behind))) => {
                queued.armed = false;
                if handoff.taken.load(Ordering::SeqCst) {
                    // A release before the confirmation removes the handoff record itself.
                    hold.note_for_release(handoff_record(&queued.waiter).into());
                    self.confirm(&hold, queued.waiter.clone());
                }
                if let Some(span) = hold.span() {
                    engine::observe::fair_queue(
                        &self.inner.base.core.metrics,
                        engine::KindId::Fair,
                        span,
                        behind,
                    );
                }
                Ok(Some(FairLockGuard { hold }))
            }
            Ok(None) => {
                queued.leave_now().await;
                Ok(None)
            }
            Err(e) => Err(e), // `queued` leaves in the background
        }
    }

    /// One run of the lock script, cleaning up after itself when abandoned (see
    /// [`engine`](crate::engine) "Cancellation"): an abandoned attempt that queued the waiter again
    /// after it left also runs the leave script.
    ///
    /// `handoff`: for a waiter that asked for a handoff. When one was heard on its channel,
    /// the attempt takes it without a call if the registry can count it, the message surely
    /// belongs to the waiter's current queue entry and enough of its hold is surely left
    /// (see [`FairLock::handed_over`]); otherwise the script call finds it
    /// (`lua/fair_lock.lua`). The attempt's reply (or error) is recorded in the handoff's
    /// [`Seen`] once it came: never before, since a refused or lost call set no deadline.
    #[allow(clippy::too_many_arguments)]
    fn attempt(
        &self,
        hold_key: &HoldKey,
        waiter: &Arc<str>,
        lease_ms: u64,
        deadline: Option<Instant>,
        single: bool,
        abandoned: &Arc<AtomicBool>,
        handoff: Option<&Arc<Handoff>>,
    ) -> impl Future<Output = Result<Attempt<(Ticket, u32, u64)>>> + Send + 'static {
        let handed = handoff.and_then(|h| self.handed_over(hold_key, h));
        // The look right after subscribing: a release in between handed the lock over or
        // not; its record tells, so a plain ZSCORE does instead of a lock script call.
        let recheck = handoff.and_then(|h| {
            let n = h.attempts.fetch_add(1, Ordering::SeqCst);
            let queued = *h.queued.lock().unwrap_or_else(|e| e.into_inner());
            queued.filter(|_| n == 1 && !single)
        });
        let lease = self.inner.waiter_lease;
        let budget = match deadline {
            _ if single => Duration::ZERO,
            None => lease,
            Some(d) => d.saturating_duration_since(Instant::now()).min(lease),
        };
        // At least 1 ms: 0 would mean "do not queue".
        let budget_ms = if single {
            0
        } else {
            (budget.as_millis() as u64).max(1)
        };
        let (lock, owner) = (self.clone(), hold_key.1.clone());
        let waiter = waiter.clone();
        let abandoned = abandoned.clone();
        let handoff = handoff.cloned();
        let record = recheck.map(|_| (self.timeouts_key().to_string(), handoff_record(&waiter)));
        let core = self.inner.base.core.clone();
        let after = handoff.clone();
        let call = async move {
            let sent = Instant::now();
            let reply = engine::run_acquire(
                &lock.inner.base.kind,
                &owner,
                &FAIR_LOCK,
                &lock.keys(),
                &[
                    &lease_ms,
                    &&*owner,
                    &&*waiter,
                    &budget_ms,
                    &lock.inner.base.keys.fair_channel.as_str(),
                    &lock.inner.base.core.publish,
                ],
            )
            .await;
            if let Some(h) = handoff.filter(|_| budget_ms > 0) {
                let budget = Duration::from_millis(budget_ms);
                h.saw(sent, budget, reply.as_ref().map(|r| r.reply.as_slice()));
            }
            // The waiter is gone and may have left before this late attempt queued it again.
            if abandoned.load(Ordering::SeqCst) && budget_ms > 0 {
                let _ = lock.leave(&waiter).await;
            }
            reply
        }
        .boxed();
        // `[0, wait]`: the wait bound; wake at least every third of the waiter lease to
        // refresh the queue entry.
        let refresh = lease / 3;
        let attempt = engine::attempt(
            &self.inner.base.kind,
            hold_key,
            call,
            fair_reply,
            "fair lock",
        );
        async move {
            if let Some(handed) = handed {
                return Ok(Attempt::Acquired(handed));
            }
            if let (Some(bound), Some((key, member))) = (recheck, record) {
                let found: redis::RedisResult<Option<f64>> = redis::cmd("ZSCORE")
                    .arg(key)
                    .arg(member)
                    .query_async(&mut core.conn.clone())
                    .await;
                // Not handed over: wait as the first attempt said. Handed over, or no
                // answer: the lock script decides.
                if let Ok(None) = found {
                    return Ok(Attempt::Held(Some(bound)));
                }
            }
            Ok(match attempt.await? {
                Attempt::Held(wait) => {
                    let bound = wait.map_or(refresh, |w| w.min(refresh));
                    if let Some(h) = after.filter(|_| budget_ms > 0) {
                        *h.queued.lock().unwrap_or_else(|e| e.into_inner()) = Some(bound);
                    }
                    Attempt::Held(Some(bound))
                }
                acquired => acquired,
            })
        }
    }

    /// The hold a release handed to this waiter (heard on its `channel`), as if granted by its
    /// latest attempt that ran: the handoff set the key's TTL to what was left of the queue
    /// deadline that attempt set, so the key surely lives until that attempt's send time + its
    /// budget. That holds only while the waiter's queue entry is the one its first attempt
    /// added: once an attempt added it again (the entry lapsed, or a hold handed over on it
    /// ended, while the waiter stood still), a message heard now may be the old entry's, whose
    /// hold is gone and may be another owner's lock by now (see [`Seen`]).
    ///
    /// `None` (the message is consumed) when no handoff was heard, when a message may be an
    /// old entry's, when the budget was under half the waiter lease or less than half of it
    /// is surely left, when the client waits for replicas to acknowledge each lock write, or
    /// when the registry cannot count it alone (see [`Ticket::handed_over`]): the attempt
    /// then asks the server, whose lock script finds a live handoff by its record.
    fn handed_over(&self, hold_key: &HoldKey, handoff: &Handoff) -> Option<(Ticket, u32, u64)> {
        let core = &self.inner.base.core;
        let behind = core.listener.take_handoff(&handoff.channel)?;
        if core.replica_sync.is_some() {
            // The hold counts only once replicas acknowledged it: the lock script's call
            // (which finds the handoff) waits for them.
            return None;
        }
        let (sent, budget) = {
            let seen = handoff.seen.lock().unwrap_or_else(|e| e.into_inner());
            if seen.doubtful {
                tracing::debug!(lock = %self.inner.base.name, "handoff message may be of an earlier queue entry; asking the server");
                return None;
            }
            seen.last?
        };
        // A budget cut short by the caller's own deadline gives a handoff too short to rely on
        // until the confirmation lands: the script call sets the full TTL instead.
        if budget < self.inner.waiter_lease / 2 || sent + budget / 2 <= Instant::now() {
            return None;
        }
        let ticket = Ticket::handed_over(&self.inner.base.kind, hold_key, sent, budget)?;
        handoff.taken.store(true, Ordering::SeqCst);
        Some((ticket, 1, behind))
    }

    /// Confirms a hold taken on a handoff's message, in the background (`lua/fair_confirm.lua`):
    /// its record goes and the TTL, which the handoff set to what was left of the queue
    /// deadline, is raised to the watchdog timeout. This is the hold's first renewal, sent
    /// once a third of the hold's validity has passed: a hold released before then needs no
    /// confirmation (its release removed the record), so a short critical section costs the
    /// server one call fewer, and the call never lands on the next handoff's path. Calls that
    /// fail are sent again until the hold is lost (its validity ran out: the watchdog tells
    /// the guard) or released. A confirmation that finds no hold of the owner (expired,
    /// force-unlocked, wiped by a restart) marks the guard lost at once, as a renewal that
    /// finds its lock gone does; a released guard is not affected. The watchdog renews the
    /// hold from then on as any hold.
    fn confirm(&self, hold: &Hold, waiter: Arc<str>) {
        let Some(follow) = hold.follow() else {
            return;
        };
        let lock = self.clone();
        let core = self.inner.base.core.clone();
        self.inner.base.core.cleanups.spawn(async move {
            let ttl = Duration::from_millis(core.watchdog_ms);
            let mut pauses = Retries::new(Backoff::new(
                Duration::from_millis(50),
                Duration::from_secs(1),
            ));
            // At least half the waiter lease is left when a handoff is taken (`handed_over`):
            // two thirds of it remain for the call and its retries.
            tokio::select! {
                () = tokio::time::sleep(follow.validity() / 3) => {}
                () = follow.lost().cancelled() => return,
                () = core.holds.closed() => return,
            }
            if follow.validity().is_zero() {
                return; // released (the release took the record along) or lost
            }
            loop {
                let sent = Instant::now();
                let reply: redis::RedisResult<i64> = FAIR_CONFIRM
                    .run(
                        &mut core.conn.clone(),
                        &lock.keys(),
                        &[&core.watchdog_ms, &&**follow.owner(), &&*waiter],
                    )
                    .await;
                match reply {
                    Ok(1) => return follow.extended(sent, ttl),
                    // No hold of this owner: gone (the guard is lost, at once, not at the end
                    // of its validity), or released already (its run ended: nothing to tell).
                    Ok(_) => {
                        return follow.gone("the handed-over hold was gone at its confirmation")
                    }
                    Err(e) => {
                        tracing::debug!(lock = %lock.inner.base.name, error = %e, "handoff confirmation failed; retrying");
                    }
                }
                tokio::select! {
                    () = tokio::time::sleep(pauses.next()) => {}
                    () = follow.lost().cancelled() => return,
                    () = core.holds.closed() => return,
                }
            }
        });
    }

    /// Runs the leave script for the queue entry `waiter`.
    async fn leave(&self, waiter: &str) -> Result<bool> {
        let mut conn = self.inner.base.core.conn.clone();
        let left: i64 = FAIR_LEAVE
            .run(
                &mut conn,
                &self.keys(),
                &[
                    &waiter,
                    &self.inner.base.keys.fair_channel.as_str(),
                    &self.inner.base.core.publish,
                ],
            )
            .await?;
        Ok(left >= 1)
    }
}

/// Reads the fair lock script's reply: `[1, holds, queued]` granted (`queued` waiters left
/// behind, for metrics), `[0, pttl, joined]` held (`[0, pttl]` in Redisson's layout).
pub(super) fn fair_reply(reply: &[i64]) -> Option<Reply<u64>> {
    match reply {
        [1, holds, queued] if *holds >= 1 => {
            Some(Reply::Granted(*holds as u32, (*queued).max(0) as u64))
        }
        [0, pttl] | [0, pttl, 0 | 1] => Some(Reply::Held(engine::pttl_from(*pttl))),
        _ => None,
    }
}

/// A waiter's place in the queue: leaves it (in the background) unless disarmed, so a waiter
/// that fails or whose future is dropped does not hold up the others until its deadline.
struct Queued {
    lock: FairLock,
    /// The queue entry (`<owner>:g<n>` or `<owner>:<n>`).
    waiter: Arc<str>,
    /// Set once the waiter is gone; an attempt still in flight then leaves after it ran.
    abandoned: Arc<AtomicBool>,
    armed: bool,
    /// A client's close waits until the entry has been left (dropped after `drop`).
    _busy: tokio_util::task::task_tracker::TaskTrackerToken,
}

impl Queued {
    /// Leaves now (after a timeout: the last attempt has completed).
    async fn leave_now(&mut self) {
        if !self.armed {
            return;
        }
        if let Err(e) = self.lock.leave(&self.waiter).await {
            tracing::warn!(lock = %self.lock.inner.base.name, error = %e, "could not leave the fair queue; the entry expires at its deadline");
        }
        self.armed = false;
    }
}

impl Drop for Queued {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        self.abandoned.store(true, Ordering::SeqCst);
        let lock = self.lock.clone();
        let waiter = self.waiter.clone();
        self.lock.inner.base.core.cleanups.spawn(async move {
            if let Err(e) = lock.leave(&waiter).await {
                tracing::warn!(lock = %lock.inner.base.name, error = %e, "could not leave the fair queue; the entry expires at its deadline");
            }
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fair_reply_reads_the_joined_flag_and_redissons_shape() {
        assert!(matches!(
            fair_reply(&[0, 900, 1]),
            Some(Reply::Held(Some(_)))
        ));
        assert!(matches!(
            fair_reply(&[0, 900, 0]),
            Some(Reply::Held(Some(_)))
        ));
        assert!(matches!(fair_reply(&[0, 900]), Some(Reply::Held(Some(_)))));
        assert!(matches!(fair_reply(&[1, 1, 0]), Some(Reply::Granted(1, 0))));
        assert!(fair_reply(&[0, 900, 7]).is_none());
    }
}

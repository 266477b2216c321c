//! The wait loop: try, subscribe, re-check, sleep until woken or the holder's TTL (see the
//! module docs of [`engine`](super)), and the small helpers around deadlines and owners.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::Notify;
use tokio::time::Instant;
use tracing::Instrument;

use super::listener::Subscription;
use super::Core;
use crate::backoff::{Backoff, Retries};
use crate::error::{io_timeout, Error, Result};

/// Used when the holder's TTL is unknown (-1, or an odd reply): re-check at least this often.
const FALLBACK_WAIT: Duration = Duration::from_millis(500);

/// What one acquire attempt found.
pub(crate) enum Attempt<T> {
    /// The lock is ours; `T` carries what the kind needs to build its guard.
    Acquired(T),
    /// Held by another owner for about this long (None: unknown).
    Held(Option<Duration>),
    /// Held as [`Held`](Self::Held), and this waiter is in the lock's overtake claim queue
    /// at this score (see [`claim`](super::claim)); the wait loop treats it as `Held`.
    Claimant(Option<Duration>, i64),
}

/// How a waiter learns that it may try again.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Wake<'a> {
    /// A message on this channel of the client's subscription connection (every kind but
    /// the spin lock and the fair lock); the waiter honours the overtake limit.
    Channel(&'a str),
    /// A message on this channel, for a kind that keeps its own queue of waiters (the fair
    /// lock, whose script serves them in order): the waiter never stakes an overtake claim.
    Queued(&'a str),
    /// Nothing: it tries again after a pause that grows ([`Backoff`], jittered so that
    /// spinning waiters spread out, and never past the holder's TTL or the caller's
    /// deadline), and never subscribes (the spin lock).
    Backoff(Backoff),
}

/// Runs the waiting protocol described in the module docs: `attempt` until it acquires or
/// `deadline` passes (`None` = no limit). Returns `Ok(None)` on timeout. `lock` is the lock's
/// name, which the logs of its channel (resubscriptions) carry. A wakeup on `also` (an
/// overtake claimant's own, see [`claim`](super::claim)) counts as one on the channel. Not
/// observed: kinds call [`observed_wait_loop`], or observe it themselves as [`acquire_hold`](super::acquire_hold)
/// does.
pub(crate) async fn wait_loop<T, F, Fut>(
    core: &Arc<Core>,
    wake: Wake<'_>,
    lock: &str,
    deadline: Option<Instant>,
    also: Option<&Notify>,
    mut attempt: F,
) -> Result<Option<T>>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<Attempt<T>>>,
{
    let mut trouble = Trouble::new(core.failover_retry).with_grace(core.response_timeout);
    // 1. The fast path: no subscription at all when the lock is free. A command that did
    //    not run because a failover is under way, or whose reply was lost (a dropped
    //    connection, a response timeout), is sent again while the caller's budget lasts:
    //    what the lost attempt may have taken is settled before the next attempt goes out.
    let first = loop {
        let sent = Instant::now();
        match trouble.bounded(deadline, attempt()).await? {
            Err(e) if e.is_transient() => {
                tokio::time::sleep(trouble.retry(e, sent, deadline)?).await;
            }
            other => break other?,
        }
    };
    if let Attempt::Acquired(t) = first {
        return Ok(Some(t));
    }
    trouble.clear();
    if deadline.is_some_and(|d| Instant::now() >= d) {
        return Ok(None);
    }
    let channel = match wake {
        Wake::Channel(channel) | Wake::Queued(channel) => channel,
        Wake::Backoff(backoff) => {
            let (Attempt::Held(pttl) | Attempt::Claimant(pttl, _)) = first else {
                unreachable!("acquired above")
            };
            return spin(core, backoff, deadline, trouble, wait_bound(pttl), attempt).await;
        }
    };
    // 2. Subscribe before the next attempt; the share is released on every exit (drop).
    let subscription = loop {
        let sent = Instant::now();
        let subscribed = core.listener.subscribe(channel, lock);
        match trouble.bounded(deadline, subscribed).await? {
            Err(e) if e.is_transient() => {
                tokio::time::sleep(trouble.retry(e, sent, deadline)?).await;
            }
            other => break other?,
        }
    };
    // A wakeup we consumed but did not act on yet; passed on if we are cancelled meanwhile.
    let mut woken = PassOn {
        subscription: &subscription,
        armed: false,
    };
    loop {
        // 3. Register for the wakeup first, then look again.
        let notified = woken.subscription.notified();
        tokio::pin!(notified);
        notified.as_mut().enable();
        let sent = Instant::now();
        let outcome = trouble.bounded(deadline, attempt()).await?;
        // The attempt saw the state after the wakeup: from now on the next unlock wakes us
        // (or someone else) again, so the consumed wakeup needs no passing on. A failed
        // attempt returns below, and the drop passes the wakeup on.
        if outcome.is_ok() {
            woken.armed = false;
        }
        let held_for = match outcome {
            Ok(Attempt::Acquired(t)) => return Ok(Some(t)),
            Ok(Attempt::Held(pttl) | Attempt::Claimant(pttl, _)) => {
                trouble.clear();
                wait_bound(pttl)
            }
            // Waiting through a failover or a reconnect: look again after a pause (or at
            // the next wakeup), within the caller's wait and the client's failover retry.
            Err(e) if e.is_transient() => Some(trouble.retry(e, sent, deadline)?),
            Err(e) => return Err(e),
        };
        // 4. Wait for the unlock, the holder's TTL or our deadline.
        let mut bound = held_for.unwrap_or(FALLBACK_WAIT);
        if let Some(d) = deadline {
            let left = d.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Ok(None);
            }
            bound = bound.min(left);
        }
        tokio::select! {
            woke = tokio::time::timeout(bound, notified) => {
                if woke.is_ok() {
                    woken.armed = true;
                }
            }
            // The claimant's own wakeup holds a permit, so it cannot be missed meanwhile.
            () = async {
                match also {
                    Some(also) => also.notified().await,
                    None => std::future::pending().await,
                }
            } => {}
            // The last `Client` was dropped while we waited: no guard could be kept alive.
            () = core.holds.closed() => return Err(Error::ClientClosed),
        }
    }
}

/// The wait of a waiter that does not subscribe ([`Wake::Backoff`]): sleep a backoff pause
/// (at most `held_for`, the holder's TTL, and the deadline), attempt, and again.
async fn spin<T, F, Fut>(
    core: &Arc<Core>,
    backoff: Backoff,
    deadline: Option<Instant>,
    mut trouble: Trouble,
    mut held_for: Option<Duration>,
    mut attempt: F,
) -> Result<Option<T>>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<Attempt<T>>>,
{
    let mut refusals = 0u32;
    let mut retry_in = None;
    loop {
        let mut bound = retry_in.take().unwrap_or_else(|| {
            let pause = backoff.pause(refusals);
            refusals = refusals.saturating_add(1);
            held_for.map_or(pause, |h| pause.min(h))
        });
        if let Some(d) = deadline {
            let left = d.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Ok(None);
            }
            bound = bound.min(left);
        }
        tokio::select! {
            () = tokio::time::sleep(bound) => {}
            // The last `Client` was dropped while we waited: no guard could be kept alive.
            () = core.holds.closed() => return Err(Error::ClientClosed),
        }
        let sent = Instant::now();
        match trouble.bounded(deadline, attempt()).await? {
            Ok(Attempt::Acquired(t)) => return Ok(Some(t)),
            Ok(Attempt::Held(pttl) | Attempt::Claimant(pttl, _)) => {
                trouble.clear();
                held_for = wait_bound(pttl);
            }
            Err(e) if e.is_transient() => retry_in = Some(trouble.retry(e, sent, deadline)?),
            Err(e) => return Err(e),
        }
    }
}

/// [`wait_loop`], observed as one acquire of `kind` on the lock `name` by `owner` (its span,
/// the wait histogram and the counters of [`observe`](super::observe)), for kinds whose
/// acquisitions hold no [`Hold`](super::Hold) (semaphores, latches).
pub(crate) async fn observed_wait_loop<T, F, Fut>(
    core: &Arc<Core>,
    channel: &str,
    deadline: Option<Instant>,
    kind: super::KindId,
    name: &str,
    attempt: F,
) -> Result<Option<T>>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<Attempt<T>>>,
{
    let observed = super::observe::Acquire::start(&core.metrics, kind, name, &core.id_str);
    let span = observed.span().clone();
    let result = wait_loop(core, Wake::Channel(channel), name, deadline, None, attempt)
        .instrument(span)
        .await;
    observed.finish(&result);
    result
}

/// A streak of errors an acquire waits through: since when (the send time of its first
/// failed call, so a call that took long to fail counts in full), its latest error, and the
/// next pause (50 ms, doubling up to 1 s, jittered).
pub(crate) struct Trouble {
    since: Option<Instant>,
    last: Option<Error>,
    pauses: Retries,
    limit: Duration,
    /// How far past the caller's deadline a call may run outside a streak (one response
    /// timeout: the budget is a promise, see [`Trouble::bounded`]).
    grace: Duration,
}

impl Trouble {
    const PAUSES: Backoff = Backoff::new(Duration::from_millis(50), Duration::from_secs(1));

    /// A streak that may last up to `limit` (the client's failover retry).
    pub(crate) fn new(limit: Duration) -> Trouble {
        Trouble {
            since: None,
            last: None,
            pauses: Retries::new(Self::PAUSES),
            limit,
            grace: Duration::ZERO,
        }
    }

    /// Lets a call outside a streak run until the caller's deadline plus `grace` (the
    /// client's response timeout) before [`Trouble::bounded`] gives up on it.
    pub(crate) fn with_grace(mut self, grace: Duration) -> Trouble {
        self.grace = grace;
        self
    }

    /// One more error `e`, of a call sent at `sent`: the pause before trying again, or `e`
    /// back when the streak has lasted the limit or the caller's `deadline` passed.
    pub(crate) fn retry(
        &mut self,
        e: Error,
        sent: Instant,
        deadline: Option<Instant>,
    ) -> Result<Duration> {
        let Some(left) = self.left(sent, deadline) else {
            return Err(e);
        };
        self.last = Some(e);
        let pause = self.pauses.next().min(left);
        Ok(pause)
    }

    /// How long the streak (begun at `sent` if none is on) may go on; `None` if it is over.
    fn left(&mut self, sent: Instant, deadline: Option<Instant>) -> Option<Duration> {
        let now = Instant::now();
        let since = *self.since.get_or_insert(sent);
        let mut left = self.limit.checked_sub(now.duration_since(since))?;
        if let Some(d) = deadline {
            left = left.min(d.saturating_duration_since(now));
        }
        (!left.is_zero()).then_some(left)
    }

    /// Runs `call`, which during a streak may take only what is left of it: past that, the
    /// streak's latest error is returned instead (a call can block long while Redis is
    /// unreachable, e.g. waiting for the settlement of an attempt whose reply was lost).
    /// Outside a streak it may run until the caller's deadline plus the grace (a call stuck
    /// behind this owner's settlement during a stall): past that, a timeout error, which is
    /// retryable. The call dropped then leaves nothing behind (see [`Inflight`]).
    ///
    /// [`Inflight`]: super::call::Inflight
    pub(crate) async fn bounded<T>(
        &mut self,
        deadline: Option<Instant>,
        call: impl Future<Output = T>,
    ) -> Result<T> {
        if self.since.is_none() {
            let Some(until) = deadline.and_then(|d| d.checked_add(self.grace)) else {
                return Ok(call.await);
            };
            return match tokio::time::timeout_at(until, call).await {
                Ok(out) => Ok(out),
                Err(_) => Err(Error::Redis(io_timeout(
                    "no reply within the wait budget and one response timeout",
                ))),
            };
        }
        let left = self.left(Instant::now(), deadline).unwrap_or_default();
        match tokio::time::timeout(left, call).await {
            Ok(out) => Ok(out),
            Err(_) => Err(self
                .last
                .take()
                .unwrap_or_else(|| Error::Redis(io_timeout("the failover retry ran out")))),
        }
    }

    /// The streak ended.
    pub(crate) fn clear(&mut self) {
        self.since = None;
        self.last = None;
        self.pauses.reset();
    }
}

/// Hands a consumed wakeup to the next local waiter if the waiting future is dropped before
/// it retried: otherwise the other waiters would sleep until the holder's TTL bound although
/// the lock is free.
struct PassOn<'a> {
    subscription: &'a Subscription,
    armed: bool,
}

impl Drop for PassOn<'_> {
    fn drop(&mut self) {
        if self.armed {
            self.subscription.notify_one();
        }
    }
}

/// The deadline of a `try_lock(wait, ..)`: `wait` from now, or about 30 years (far enough to
/// mean "no limit", near enough not to overflow) when `wait` is too large for an `Instant`.
pub(crate) fn deadline_after(wait: Duration) -> Instant {
    let now = Instant::now();
    now.checked_add(wait)
        .unwrap_or_else(|| now + Duration::from_secs(86_400 * 365 * 30))
}

/// The result of a wait with a deadline: what it acquired, or [`Error::Timeout`] naming
/// `name` when the deadline passed first.
pub(crate) fn or_timeout<T>(acquired: Option<T>, name: &str) -> Result<T> {
    acquired.ok_or_else(|| Error::timeout(name))
}

/// The result of a wait without deadline, which never times out: `Some` by construction.
pub(crate) fn never_timed_out<T>(acquired: Option<T>) -> Result<T> {
    acquired.ok_or_else(|| Error::UnexpectedReply("wait without deadline ended".into()))
}

/// How long to sleep at most for a holder with this pttl: until just after it expires.
fn wait_bound(pttl: Option<Duration>) -> Option<Duration> {
    pttl.map(|p| p + Duration::from_millis(1))
}

/// Parses the lock script's pttl: negative (no TTL / no key) means unknown.
pub(crate) fn pttl_from(ms: i64) -> Option<Duration> {
    u64::try_from(ms).ok().map(Duration::from_millis)
}

//! The acquire / wait / release protocol shared by every lock kind.
//!
//! # How it works
//!
//! A lock attempt is one Lua script call that either takes the lock (or re-enters it) or
//! reports the holder's remaining TTL. Waiting is built on the client's single subscription
//! connection:
//!
//! 1. Try the script. Acquired: the caller registers the hold (and the watchdog) and only then
//!    hands out the guard.
//! 2. Held by another owner: take a share of the lock's channel subscription and wait for the
//!    server to confirm it.
//! 3. Create the channel's `Notified` future and `enable()` it, *then* try the script again.
//!    An unlock that lands after this point wakes us, even if it lands before we start
//!    waiting: no lost wakeup.
//! 4. Still held: wait for the notification or `min(holder's pttl, remaining wait)`, whichever
//!    comes first (a crashed holder's lock is taken when its TTL runs out, and a missing TTL
//!    never means "sleep forever"). Loop to 3.
//! 5. On every exit the subscription share is dropped; the last share unsubscribes.
//!
//! # Cancellation
//!
//! A script call whose future is dropped may still run on the server. Each acquire attempt is
//! therefore wrapped in [`Inflight`]: if it is dropped before its reply arrived, the rest of
//! the call is finished in the background and, if it took a hold, that hold is released at
//! once. When the reply is lost for another reason (response timeout, connection drop), the
//! outcome is unknown; the attempt then sends a conditional release that only undoes the hold
//! the attempt would have added (expected hold count = holds known locally + 1), so a hold
//! the caller did not take is never released. Both go out on the same multiplexed
//! connection, after the attempt, so Redis runs them after it.
//!
//! # Settling: the server's count always comes back to the guards'
//!
//! Each call that may change an owner's hold count (acquire, release) is counted in the
//! client's hold registry while in flight ([`Ticket`]). A call whose outcome is unknown (reply
//! lost: connection dropped, response timeout), an abandoned acquire that took a hold, a
//! granted reply whose count the local guards do not explain, or the release of a guard from
//! an earlier run, all leave the entry *in doubt*. As soon as no call of that owner is in
//! flight, a settlement runs ([`settle`]): it reads the owner's count on the server and
//! releases, one conditional step at a time (`expected` = the count it read), until the
//! server's count equals the number of live guards. New acquires of that owner wait for it;
//! releases during it are left to it. A count found *below* the guards' means the server
//! forgot holds (expiry, force-unlock, restart): those guards are told they are lost.
//!
//! So a release whose reply was lost never leaves a phantom hold that the same task would
//! later re-enter, and a server count above what the owner knows is never adopted.
//! When Redis cannot be reached, a settlement retries with backoff; with no guard left it
//! stops once the key's longest TTL has certainly run out.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use futures::future::BoxFuture;
use futures::FutureExt;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::client::Core;
use crate::error::{Error, Result};
use crate::listener::Subscription;
use crate::scripts::{Script, ToRedisArgsDyn};
use crate::watchdog::{Begin, HoldKey, Outcome, Release, Sent};

/// Used when the holder's TTL is unknown (-1, or an odd reply): re-check at least this often.
const FALLBACK_WAIT: Duration = Duration::from_millis(500);

/// What one acquire attempt found.
pub(crate) enum Attempt<T> {
    /// The lock is ours; `T` carries what the kind needs to build its guard.
    Acquired(T),
    /// Held by another owner for about this long (None: unknown).
    Held(Option<Duration>),
}

/// Runs the waiting protocol described in the module docs: `attempt` until it acquires or
/// `deadline` passes (`None` = no limit). Returns `Ok(None)` on timeout.
pub(crate) async fn acquire<T, F, Fut>(
    core: &Arc<Core>,
    channel: &str,
    deadline: Option<Instant>,
    mut attempt: F,
) -> Result<Option<T>>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<Attempt<T>>>,
{
    // 1. The fast path: no subscription at all when the lock is free.
    if let Attempt::Acquired(t) = attempt().await? {
        return Ok(Some(t));
    }
    if deadline.is_some_and(|d| Instant::now() >= d) {
        return Ok(None);
    }
    // 2. Subscribe before the next attempt; the share is released on every exit (drop).
    let subscription = core.listener.subscribe(channel).await?;
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
        let outcome = attempt().await;
        // The attempt saw the state after the wakeup: from now on the next unlock wakes us
        // (or someone else) again, so the consumed wakeup needs no passing on. A failed
        // attempt returns below, and the drop passes the wakeup on.
        if outcome.is_ok() {
            woken.armed = false;
        }
        let held_for = match outcome? {
            Attempt::Acquired(t) => return Ok(Some(t)),
            Attempt::Held(pttl) => pttl,
        };
        // 4. Wait for the unlock, the holder's TTL or our deadline.
        let mut bound = wait_bound(held_for).unwrap_or(FALLBACK_WAIT);
        if let Some(d) = deadline {
            let left = d.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Ok(None);
            }
            bound = bound.min(left);
        }
        if tokio::time::timeout(bound, notified).await.is_ok() {
            woken.armed = true;
        }
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

/// The owner field for the calling task: `<client id>:<tokio task id>`, or a per-thread id
/// outside a task (e.g. under `block_on`).
pub(crate) fn current_owner(client_id: &str) -> Arc<str> {
    match tokio::task::try_id() {
        Some(id) => format!("{client_id}:{id}").into(),
        None => THREAD_TAG.with(|t| format!("{client_id}:{t}").into()),
    }
}

thread_local! {
    static THREAD_TAG: String = {
        use std::sync::atomic::{AtomicU64, Ordering};
        static NEXT: AtomicU64 = AtomicU64::new(1);
        format!("thread-{}", NEXT.fetch_add(1, Ordering::Relaxed))
    };
}

/// An acquire script call that cleans up after itself if abandoned.
///
/// If dropped before its reply arrived, the remaining call is spawned and `undo` runs with
/// its result, so a hold granted to nobody is released within a moment.
pub(crate) struct Inflight<R: Send + 'static> {
    call: Option<BoxFuture<'static, R>>,
    undo: Option<Box<dyn FnOnce(R) -> BoxFuture<'static, ()> + Send>>,
    handle: tokio::runtime::Handle,
}

impl<R: Send + 'static> Inflight<R> {
    pub(crate) fn new(
        handle: tokio::runtime::Handle,
        call: BoxFuture<'static, R>,
        undo: impl FnOnce(R) -> BoxFuture<'static, ()> + Send + 'static,
    ) -> Self {
        Inflight {
            call: Some(call),
            undo: Some(Box::new(undo)),
            handle,
        }
    }
}

impl<R: Send + 'static> Future for Inflight<R> {
    type Output = R;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<R> {
        let call = self
            .call
            .as_mut()
            .expect("Inflight polled after completion");
        match call.as_mut().poll(cx) {
            Poll::Ready(r) => {
                self.call = None;
                self.undo = None;
                Poll::Ready(r)
            }
            Poll::Pending => Poll::Pending,
        }
    }
}

impl<R: Send + 'static> Drop for Inflight<R> {
    fn drop(&mut self) {
        if let (Some(call), Some(undo)) = (self.call.take(), self.undo.take()) {
            self.handle.spawn(async move { undo(call.await).await });
        }
    }
}

/// What a lock kind provides so the shared guard and clean-up logic can release its holds.
pub(crate) trait Kind: Clone + Send + Sync + 'static {
    /// The client the lock belongs to.
    fn core(&self) -> &Arc<Core>;
    /// The lock's name, for errors and logs.
    fn name(&self) -> &str;
    /// Runs the kind's unlock script for one hold of `owner`. `expected` is the hold count
    /// the owner must have for the release to happen (0: any). Replies as `lua/unlock.lua`:
    /// -1 not held, -2 count differs, 0 released the last hold, n > 0 holds left.
    fn release(&self, owner: Arc<str>, expected: u32) -> BoxFuture<'static, Result<i64>>;
}

/// Whether an acquire reply took a hold.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Taken {
    Yes,
    No,
    /// Granted, then given back because replica sync failed, but that release failed: the
    /// server may still count the hold.
    Maybe,
}

/// One acquire call of one owner on one lock, counted in the hold registry while in flight
/// (see "Settling" above). Dropped without an outcome, it counts as unknown.
pub(crate) struct Ticket<K: Kind> {
    kind: K,
    key: HoldKey,
    sent: Sent,
    open: bool,
}

impl<K: Kind> Ticket<K> {
    /// Waits until no settlement runs for this owner, then counts the call as in flight.
    ///
    /// Cancel safe: dropped while waiting, nothing was counted.
    pub(crate) async fn begin(kind: &K, key: &HoldKey) -> Ticket<K> {
        let watchdog = &kind.core().watchdog;
        loop {
            let settled = match watchdog.begin(key) {
                Begin::Go(sent) => {
                    return Ticket {
                        kind: kind.clone(),
                        key: key.clone(),
                        sent,
                        open: true,
                    }
                }
                Begin::Wait(settled) => settled,
            };
            let notified = settled.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            if watchdog.is_settling(key) {
                notified.await;
            }
        }
    }

    /// Ends the call without a guard.
    fn finish(mut self, outcome: Outcome) {
        self.open = false;
        finish(&self.kind, &self.key, outcome);
    }
}

impl<K: Kind> Drop for Ticket<K> {
    fn drop(&mut self) {
        if self.open {
            finish(&self.kind, &self.key, Outcome::Unknown);
        }
    }
}

/// Ends a counted call; starts the settlement it may call for.
fn finish<K: Kind>(kind: &K, key: &HoldKey, outcome: Outcome) {
    if kind.core().watchdog.finish(key, outcome) {
        spawn_settle(kind, key);
    }
}

/// Whether a failed call may still have run on the server: no error reply came from it.
fn outcome_unknown(e: &redis::RedisError) -> bool {
    e.code().is_none()
}

/// Runs an acquire call under its ticket so it never leaks a hold: an abandoned call
/// finishes in the background, and a hold it took, or may have taken, is settled away.
/// Returns the reply, and the ticket when the reply took a hold (for [`Hold::register`]).
pub(crate) async fn ticketed_call<K: Kind, R: Send + 'static>(
    ticket: Ticket<K>,
    call: BoxFuture<'static, redis::RedisResult<R>>,
    taken: fn(&R) -> Taken,
) -> Result<(R, Option<Ticket<K>>)> {
    let handle = ticket.kind.core().handle.clone();
    let call = async move { (call.await, ticket) }.boxed();
    let abandoned = move |(reply, ticket): (redis::RedisResult<R>, Ticket<K>)| {
        let outcome = match &reply {
            // Taken by nobody: a hold no guard owns.
            Ok(r) if taken(r) != Taken::No => Outcome::Unknown,
            Ok(_) => Outcome::Known,
            Err(e) if outcome_unknown(e) => Outcome::Unknown,
            Err(_) => Outcome::Known,
        };
        ticket.finish(outcome);
        async {}.boxed()
    };
    let (reply, ticket) = Inflight::new(handle, call, abandoned).await;
    match reply {
        Ok(r) => match taken(&r) {
            Taken::Yes => Ok((r, Some(ticket))),
            Taken::No => {
                ticket.finish(Outcome::Known);
                Ok((r, None))
            }
            Taken::Maybe => {
                ticket.finish(Outcome::Unknown);
                Ok((r, None))
            }
        },
        Err(e) => {
            // No error reply: the script may have run. The settlement that follows undoes
            // its hold if so; the caller's next attempt waits for it.
            let outcome = if outcome_unknown(&e) {
                Outcome::Unknown
            } else {
                Outcome::Known
            };
            ticket.finish(outcome);
            Err(e.into())
        }
    }
}

fn spawn_settle<K: Kind>(kind: &K, key: &HoldKey) {
    let (kind, key) = (kind.clone(), key.clone());
    kind.core().handle.clone().spawn(settle(kind, key));
}

/// Brings the server's hold count of `key`'s owner back to the number of live guards (see
/// "Settling" above). Runs while the registry marks the entry as settling, so no other call
/// of this owner is in flight: each step's `expected` count is exact.
async fn settle<K: Kind>(kind: K, key: HoldKey) {
    let core = kind.core().clone();
    let started = Instant::now();
    let mut backoff = SETTLE_BACKOFF;
    loop {
        let (target, ttl) = core.watchdog.settle_target(&key);
        let step: Result<Option<bool>> = async {
            let count = owner_holds(&core, &key.0, &key.1).await?;
            if count == target {
                return Ok(Some(false));
            }
            if count < target {
                return Ok(Some(true));
            }
            // Release one hold, but only while the count is still what we read.
            kind.release(key.1.clone(), count).await?;
            Ok(None)
        }
        .await;
        match step {
            Ok(Some(lost)) => {
                if core.watchdog.settle_done(&key, target, lost, false) {
                    tracing::debug!(lock = %kind.name(), holds = target, lost, "hold count settled");
                    return;
                }
            }
            Ok(None) => backoff = SETTLE_BACKOFF,
            Err(e) => {
                // With no guard left, the key is gone once its longest TTL ran out after the
                // last call (every call ended before the settlement began).
                let expired = target == 0 && started.elapsed() > ttl + SETTLE_BACKOFF;
                if expired || core.watchdog.is_shut_down() {
                    tracing::warn!(
                        lock = %kind.name(),
                        error = %e,
                        "could not settle the hold count; the hold expires with its TTL"
                    );
                    core.watchdog.settle_done(&key, target, false, true);
                    return;
                }
                tracing::debug!(lock = %kind.name(), error = %e, "settling the hold count failed; retrying");
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(Duration::from_secs(1));
            }
        }
    }
}

/// First retry delay of a settlement.
const SETTLE_BACKOFF: Duration = Duration::from_millis(20);

/// The hold count of `owner` in a lock hash (0 if none).
async fn owner_holds(core: &Core, key: &str, owner: &str) -> Result<u32> {
    let n: Option<u32> = redis::cmd("HGET")
        .arg(key)
        .arg(owner)
        .query_async(&mut core.conn.clone())
        .await?;
    Ok(n.unwrap_or(0))
}

/// Sends the unlock script for one hold counted by [`Release::Send`], and ends the count.
fn send_release<K: Kind>(kind: &K, key: &HoldKey) -> BoxFuture<'static, Result<i64>> {
    let (kind, key) = (kind.clone(), key.clone());
    async move {
        let reply = kind.release(key.1.clone(), 0).await;
        let outcome = match &reply {
            Ok(-1) => Outcome::Forgotten,
            Ok(_) => Outcome::Known,
            Err(Error::Redis(e)) if outcome_unknown(e) => Outcome::Unknown,
            Err(_) => Outcome::Known,
        };
        finish(&kind, &key, outcome);
        reply
    }
    .boxed()
}

/// Wraps an acquire script call so it never leaks a hold (see "Cancellation" above).
///
/// `granted` tells from a reply whether the call took a hold. `expected` is the owner's hold
/// count if it did (holds known locally + 1), used when the outcome is unknown.
pub(crate) fn guarded_call<K: Kind, R: Send + 'static>(
    kind: &K,
    owner: Arc<str>,
    expected: u32,
    call: BoxFuture<'static, redis::RedisResult<R>>,
    granted: fn(&R) -> bool,
) -> impl Future<Output = redis::RedisResult<R>> + Send + 'static {
    let handle = kind.core().handle.clone();
    let (undo_kind, undo_owner) = (kind.clone(), owner.clone());
    let inflight = Inflight::new(handle.clone(), call, move |reply| {
        async move {
            let expected = match &reply {
                // The abandoned call took a hold: release one. Holds of one owner are
                // interchangeable and the owner may have re-entered meanwhile, so the count
                // is not checked.
                Ok(r) if granted(r) => 0,
                Ok(_) => return, // not acquired: nothing to undo
                // Unknown outcome: release only if the count shows the call's hold.
                Err(_) => expected,
            };
            undo(&undo_kind, undo_owner, expected).await;
        }
        .boxed()
    });
    let kind = kind.clone();
    async move {
        let reply = inflight.await;
        if let Err(e) = &reply {
            if e.code().is_none() {
                // No error reply from the server: the script may have run. Undo its hold if so,
                // before returning: the caller's next attempt must reach Redis after the undo,
                // or a re-entry would change the count the undo expects. If the caller stops
                // waiting, the undo finishes in the background.
                let cleanup = async move { undo(&kind, owner, expected).await }.boxed();
                Inflight::new(handle, cleanup, |_| async {}.boxed()).await;
            }
        }
        reply
    }
}

/// An acquire script's reply (`[1, holds, ..]` granted, `[0, ..]` not), after replica sync.
pub(crate) struct Synced {
    pub(crate) reply: Vec<i64>,
    /// Replica sync failed: only this many replicas acknowledged a granted hold, which was
    /// released again (so the reply no longer counts as granted).
    pub(crate) unsynced: Option<u32>,
    /// That release failed: the server may still count the hold.
    pub(crate) unreleased: bool,
}

impl Synced {
    /// Whether the call holds what it was granted (for [`ticketed_call`]).
    pub(crate) fn taken(&self) -> Taken {
        match (self.reply.first(), self.unsynced) {
            (Some(1), None) => Taken::Yes,
            (Some(1), Some(_)) if self.unreleased => Taken::Maybe,
            _ => Taken::No,
        }
    }

    /// [`Error::ReplicaSync`] if the hold was released for want of replicas.
    pub(crate) fn check(&self, core: &Core) -> Result<()> {
        match (self.unsynced, core.replica_sync) {
            (Some(acked), Some(sync)) => Err(Error::ReplicaSync {
                acked,
                required: sync.replicas,
            }),
            _ => Ok(()),
        }
    }
}

/// Runs an acquire `script` for `owner`. With the client's replica sync on, `WAIT` rides
/// behind it on the same connection; a hold granted (`reply[1]` = hold count) but
/// acknowledged by too few replicas is released again right here, inside the call, so the
/// cancellation guard of [`guarded_call`] also covers the release. If that release fails,
/// the hold expires with its TTL (it is not watched).
pub(crate) async fn run_acquire<K: Kind>(
    kind: &K,
    owner: &Arc<str>,
    script: &Script,
    keys: &[&str],
    args: &[&dyn ToRedisArgsDyn],
) -> redis::RedisResult<Synced> {
    let core = kind.core();
    let mut conn = core.conn.clone();
    let Some(sync) = core.replica_sync else {
        let reply = script.run(&mut conn, keys, args).await?;
        return Ok(Synced {
            reply,
            unsynced: None,
            unreleased: false,
        });
    };
    let (reply, acks): (Vec<i64>, _) = script.run_synced(&mut conn, keys, args, sync).await?;
    let acked = match acks {
        Ok(n) => u32::try_from(n).unwrap_or(0),
        Err(e) => {
            tracing::warn!(error = %e, "WAIT failed; treating the lock write as unreplicated");
            0
        }
    };
    let holds = match reply.as_slice() {
        [1, holds, ..] if acked < sync.replicas => u32::try_from(*holds).unwrap_or(0),
        _ => {
            return Ok(Synced {
                reply,
                unsynced: None,
                unreleased: false,
            })
        }
    };
    tracing::warn!(
        lock = %kind.name(),
        acked,
        required = sync.replicas,
        "lock write not replicated in time; releasing it (fail closed)"
    );
    let unreleased = match kind.release(owner.clone(), holds).await {
        Ok(_) => false,
        Err(e) => {
            tracing::warn!(lock = %kind.name(), error = %e, "release after failed replica sync failed; settling it");
            true
        }
    };
    Ok(Synced {
        reply,
        unsynced: Some(acked),
        unreleased,
    })
}

/// Releases the hold an abandoned acquire took, if `expected` matches.
async fn undo<K: Kind>(kind: &K, owner: Arc<str>, expected: u32) {
    match kind.release(owner, expected).await {
        Ok(n) if n >= 0 => {
            tracing::debug!(lock = %kind.name(), "released the hold of an abandoned acquire")
        }
        Ok(_) => {}
        // Not a lost lock, and frequent while a node is down (Redlock): debug, not warn.
        Err(e) => tracing::debug!(
            lock = %kind.name(),
            error = %e,
            "could not release the hold of an abandoned acquire; it expires with its TTL"
        ),
    }
}

/// One hold of a lock of kind `K`: the state and release logic every guard type shares.
pub(crate) struct Hold<K: Kind> {
    state: Option<HoldState<K>>,
}

struct HoldState<K: Kind> {
    kind: K,
    hold_key: HoldKey,
    lease: Option<Duration>,
    lost: CancellationToken,
    /// The local hold epoch this hold belongs to (see the watchdog registry).
    epoch: u64,
}

impl<K: Kind> Hold<K> {
    /// Registers the hold a granted call took (and its watchdog when `lease` is `None`),
    /// ending the call's ticket. Call it right after the acquire reply, with no `.await` in
    /// between, so no cancellation separates the hold from its guard.
    pub(crate) fn register(
        mut ticket: Ticket<K>,
        server_holds: u32,
        lease: Option<Duration>,
    ) -> Hold<K> {
        ticket.open = false;
        let (kind, hold_key) = (ticket.kind.clone(), ticket.key.clone());
        let core = kind.core();
        let ttl = lease.unwrap_or(Duration::from_millis(core.watchdog_ms));
        let (lost, epoch, settle) =
            core.watchdog
                .acquired(&hold_key, ticket.sent, server_holds, lease.is_none(), ttl);
        if settle {
            spawn_settle(&kind, &hold_key);
        }
        Hold {
            state: Some(HoldState {
                kind,
                hold_key,
                lease,
                lost,
                epoch,
            }),
        }
    }

    /// Releases this hold: stops its renewals first, then runs the unlock script once. An
    /// unknown outcome (reply lost) is settled in the background (see "Settling"): the
    /// error is returned, and the hold is released or expires, never left behind. Finishes
    /// in the background if the future is dropped.
    pub(crate) async fn unlock(&mut self) -> Result<()> {
        let Some(state) = self.state.take() else {
            return Ok(());
        };
        let core = state.kind.core().clone();
        let not_held = || Error::NotHeld {
            name: state.kind.name().to_string(),
        };
        let watch = state.lease.is_none();
        match core.watchdog.released(&state.hold_key, watch, state.epoch) {
            Release::Stale { settle } => {
                // The hold expired and this owner took the lock again: that hold is not ours.
                if settle {
                    spawn_settle(&state.kind, &state.hold_key);
                }
                Err(not_held())
            }
            Release::Settling(settled) => {
                // The settlement running now releases this hold with the others it trims.
                let notified = settled.notified();
                tokio::pin!(notified);
                notified.as_mut().enable();
                if core.watchdog.is_settling(&state.hold_key) {
                    notified.await;
                }
                if state.lost.is_cancelled() {
                    Err(not_held())
                } else {
                    Ok(())
                }
            }
            Release::Send => {
                let call = send_release(&state.kind, &state.hold_key);
                match Inflight::new(core.handle.clone(), call, |_| async {}.boxed()).await? {
                    -1 => Err(not_held()),
                    n if n >= 0 => {
                        tracing::debug!(lock = %state.kind.name(), remaining = n, "lock released");
                        Ok(())
                    }
                    other => Err(Error::UnexpectedReply(format!(
                        "unlock script answered {other}"
                    ))),
                }
            }
        }
    }

    pub(crate) fn name(&self) -> &str {
        self.state.as_ref().map_or("", |s| s.kind.name())
    }

    pub(crate) fn owner(&self) -> &str {
        self.state.as_ref().map_or("", |s| &s.hold_key.1)
    }

    pub(crate) fn lease(&self) -> Option<Duration> {
        self.state.as_ref().and_then(|s| s.lease)
    }

    /// How long the lock is still known to be held: from the send time of the last call
    /// that set its TTL (acquire or renewal), minus a safety margin; zero once lost.
    pub(crate) fn validity(&self) -> Duration {
        self.state.as_ref().map_or(Duration::ZERO, |s| {
            if s.lost.is_cancelled() {
                return Duration::ZERO;
            }
            s.kind.core().watchdog.validity(&s.hold_key, s.epoch)
        })
    }

    /// Lost when the watchdog found it gone, or its validity ran out: computed here, so a
    /// holder resumed after a pause sees it at once, before the watchdog task ran.
    pub(crate) fn is_lost(&self) -> bool {
        self.validity().is_zero()
    }

    pub(crate) fn lost(&self) -> CancellationToken {
        self.state
            .as_ref()
            .map_or_else(CancellationToken::new, |s| s.lost.clone())
    }
}

impl<K: Kind> Drop for Hold<K> {
    fn drop(&mut self) {
        let Some(state) = self.state.take() else {
            return;
        };
        let core = state.kind.core().clone();
        let watch = state.lease.is_none();
        match core.watchdog.released(&state.hold_key, watch, state.epoch) {
            Release::Stale { settle } => {
                if settle {
                    spawn_settle(&state.kind, &state.hold_key);
                }
            }
            // The running settlement releases it.
            Release::Settling(_) => {}
            Release::Send => {
                tracing::debug!(lock = %state.kind.name(), "guard dropped; releasing in the background");
                let release = send_release(&state.kind, &state.hold_key);
                core.handle.spawn(async move {
                    if let Err(e) = release.await {
                        tracing::warn!(
                            lock = %state.kind.name(),
                            error = %e,
                            "background release failed; settling it, or the lock expires with its TTL"
                        );
                    }
                });
            }
        }
    }
}

/// Whether a lock hash exists (any owner holds it). Shared by every hash-based kind.
pub(crate) async fn is_locked(core: &Core, key: &str) -> Result<bool> {
    let n: i64 = redis::cmd("EXISTS")
        .arg(key)
        .query_async(&mut core.conn.clone())
        .await?;
    Ok(n == 1)
}

/// The calling task's hold count in a lock hash (0 if none).
pub(crate) async fn hold_count(core: &Core, key: &str) -> Result<u32> {
    owner_holds(core, key, &current_owner(&core.id_str)).await
}

/// Time until a lock hash expires: `None` when it does not exist, `Duration::MAX` when it
/// has no TTL (never written by lockwise).
pub(crate) async fn remaining_ttl(core: &Core, key: &str) -> Result<Option<Duration>> {
    let ms: i64 = redis::cmd("PTTL")
        .arg(key)
        .query_async(&mut core.conn.clone())
        .await?;
    Ok(match ms {
        -2 => None,
        -1 => Some(Duration::MAX),
        ms => Some(Duration::from_millis(ms.max(0) as u64)),
    })
}

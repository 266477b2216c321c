//! [`Hold`]: one granted hold, the state and release logic every guard type shares.

use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;
use futures::FutureExt;
use tokio_util::sync::CancellationToken;
use tracing::{Instrument, Span};

use super::call::{Inflight, Ticket};
use super::kinds::KindId;
use super::lock_ref::LockRef;
use super::observe::{self, Meta};
use super::owner::Owner;
use super::registry::Outcome;
use super::registry::{wait_turn, HoldKey, ReleaseStep};
use super::settle::{finish, outcome_unknown, send_release, spawn_settle};
use crate::error::{io_timeout, Error, Result};
use crate::layout;

/// One hold of a lock of kind `K`: the state and release logic every guard type shares.
pub(crate) struct Hold {
    state: Option<HoldState>,
}

struct HoldState {
    kind: LockRef,
    hold_key: HoldKey,
    lease: Option<Duration>,
    lost: CancellationToken,
    /// The local hold epoch this hold belongs to (see the watchdog registry).
    epoch: u64,
    /// Its kind, name and acquire span, for metrics and the spans of its background work.
    meta: Arc<Meta>,
    /// One more argument for this hold's release script (see [`Hold::note_for_release`]).
    note: Option<Arc<str>>,
    /// When the hold was granted (for `lockwise_hold_seconds`).
    granted: std::time::Instant,
}

impl HoldState {
    /// Records how long this hold lasted, ended as `end`.
    fn ended(&self, end: observe::HoldEnd) {
        let metrics = &self.kind.core().metrics;
        observe::hold_ended(metrics, &self.meta, self.granted.elapsed(), end);
    }
}

impl Hold {
    /// Registers the hold a granted call took (and its watchdog when `lease` is `None`),
    /// ending the call's ticket. Call it right after the acquire reply, with no `.await` in
    /// between, so no cancellation separates the hold from its guard.
    pub(crate) fn register(ticket: Ticket, server_holds: u32, lease: Option<Duration>) -> Hold {
        Hold::register_observed(ticket, server_holds, lease, KindId::RedLock, Span::none())
    }

    /// [`Hold::register`] for a hold of the kind labelled `label` (metrics, spans) whose
    /// acquire ran in `span`: background work of the hold is linked to that span.
    pub(crate) fn register_observed(
        mut ticket: Ticket,
        server_holds: u32,
        lease: Option<Duration>,
        label: KindId,
        span: Span,
    ) -> Hold {
        ticket.open = false;
        let (kind, hold_key) = (ticket.kind.clone(), ticket.key.clone());
        let core = kind.core();
        let meta = Arc::new(Meta {
            kind: label,
            name: kind.name().into(),
            span,
        });
        observe::held(&core.metrics, label, 1.0);
        let (lost, epoch, settle) = core.holds.acquired(
            &hold_key,
            ticket.sent,
            server_holds,
            lease,
            &meta,
            kind.run_kind(),
        );
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
                meta,
                note: None,
                granted: std::time::Instant::now(),
            }),
        }
    }

    /// Gives this hold's release script one more argument, after the kind's own: a fair
    /// lock's handoff record, which the release removes (`lua/unlock.lua`'s `ARGV[6]`). A
    /// settlement's release does without it.
    pub(crate) fn note_for_release(&mut self, note: Arc<str>) {
        if let Some(state) = self.state.as_mut() {
            state.note = Some(note);
        }
    }

    /// The span of the acquire that created this hold; `None` once released.
    pub(crate) fn span(&self) -> Option<&Span> {
        self.state.as_ref().map(|s| &s.meta.span)
    }

    /// Moves this hold to an owner of its own (`<client id>:h<n>`), so the task that took it
    /// no longer re-enters it (`detach` on the guards). The move is one script call
    /// (`lua/rekey.lua`), retried twice when its reply is lost (it is idempotent). An outcome
    /// that stays unknown, or a dropped future, leaves both owners' counts to a settlement:
    /// if the hold moved, this guard is then lost and the moved hold released.
    pub(crate) async fn detach(&mut self) -> Result<()> {
        let Some(state) = self.state.as_ref() else {
            return Ok(());
        };
        let core = state.kind.core();
        let fresh = Owner::PerHold.field(&core.id_str).to_string();
        // A Redisson read-write lock's writer field keeps its suffix (lua/rekey.lua).
        let to = layout::moved_field(core.layout, &state.hold_key.1, fresh);
        self.detach_to(to.into()).await
    }

    /// [`detach`](Self::detach) to the owner field `to` (a fresh one, never in use): a
    /// Redlock moves each node's share of a guard to one owner this way.
    pub(crate) async fn detach_to(&mut self, to: Arc<str>) -> Result<()> {
        let Some(state) = self.state.as_mut() else {
            return Ok(());
        };
        let core = state.kind.core().clone();
        let from = state.hold_key.clone();
        let to: HoldKey = (from.0.clone(), to);
        core.holds
            .begin_transfer(&from, state.epoch, &to)
            .map_err(|reason| Error::invalid("guard", reason))?;
        let mut pending = Moving {
            kind: state.kind.clone(),
            from: from.clone(),
            to: to.clone(),
            armed: true,
        };
        let mut retries = 0;
        let reply = loop {
            let keys: [&str; 1] = [&from.0];
            let script = layout::rekey(core.layout);
            let reply: redis::RedisResult<i64> = script
                .run(&mut core.conn.clone(), &keys, &[&&*from.1, &&*to.1])
                .await;
            match reply {
                Err(e) if outcome_unknown(&e) && retries < 2 => retries += 1,
                other => break other,
            }
        };
        pending.armed = false;
        let kind = state.kind.clone();
        let end = |from_outcome, to_outcome| {
            finish(&kind, &from, from_outcome);
            finish(&kind, &to, to_outcome);
        };
        match reply {
            Ok(1 | 2) => {
                let watch = state.lease.is_none();
                let (lost, epoch) = core.holds.transfer(&from, &to, watch, &state.meta);
                tracing::debug!(lock = %kind.name(), from = %from.1, to = %to.1, "hold detached");
                state.hold_key = to;
                state.lost = lost;
                state.epoch = epoch;
                Ok(())
            }
            Ok(-1) => {
                end(Outcome::Forgotten, Outcome::Known);
                Err(Error::NotHeld {
                    name: kind.name().to_string(),
                })
            }
            Ok(-2) => {
                // The server counts more holds of this owner than its guards: settle it.
                end(Outcome::Unknown, Outcome::Known);
                Err(Error::invalid(
                    "guard",
                    "its owner holds the lock more than once on the server",
                ))
            }
            Ok(other) => {
                end(Outcome::Unknown, Outcome::Unknown);
                Err(Error::UnexpectedReply(format!(
                    "rekey script answered {other}"
                )))
            }
            Err(e) => {
                let outcome = if outcome_unknown(&e) {
                    Outcome::Unknown
                } else {
                    Outcome::Known
                };
                end(outcome, outcome);
                Err(e.into())
            }
        }
    }

    /// A handle that follows this hold from another task; `None` once released.
    pub(crate) fn follow(&self) -> Option<HoldRef> {
        self.state.as_ref().map(|s| HoldRef {
            kind: s.kind.clone(),
            hold_key: s.hold_key.clone(),
            epoch: s.epoch,
            lost: s.lost.clone(),
        })
    }

    /// Releases this hold: stops its renewals first, then runs the unlock script once,
    /// conditioned on the run's exact hold count, after any other call of the same owner in
    /// flight has ended (so it can never take a hold of a later run). An unknown outcome
    /// (reply lost) is settled in the background (see "Settling"): the error is returned,
    /// and the hold is released or expires, never left behind. Finishes in the background
    /// if the future is dropped.
    pub(crate) async fn unlock(&mut self) -> Result<()> {
        let Some(state) = self.state.take() else {
            return Ok(());
        };
        let core = state.kind.core().clone();
        observe::held(&core.metrics, state.meta.kind, -1.0);
        // Waits and resends stop one response timeout from now, and the call sent by then
        // takes at most one more: past that (a stalled server, a settlement that waits for
        // Redis to come back) the release goes on in the background and the caller hears
        // that its outcome is not known yet. No timer on the common path (sent at once).
        let deadline = tokio::time::Instant::now() + core.response_timeout;
        let release = release(state, false, Some(deadline));
        Inflight::new(core.cleanups.clone(), release, |_| async {}.boxed()).await
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
            s.kind.core().holds.validity(&s.hold_key, s.epoch)
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

/// A move of [`Hold::detach`] in flight: dropped before its reply, both owners' counts are
/// settled (the move may or may not have happened).
struct Moving {
    kind: LockRef,
    from: HoldKey,
    to: HoldKey,
    armed: bool,
}

impl Drop for Moving {
    fn drop(&mut self) {
        if self.armed {
            finish(&self.kind, &self.from, Outcome::Unknown);
            finish(&self.kind, &self.to, Outcome::Unknown);
        }
    }
}

/// What a task other than the guard needs to follow one hold: whether it is lost, and a way
/// to report it gone (Redlock's extension task, which renews the holds of its guard by
/// quorum rather than through the watchdog).
#[derive(Clone)]
pub(crate) struct HoldRef {
    kind: LockRef,
    hold_key: HoldKey,
    epoch: u64,
    lost: CancellationToken,
}

impl HoldRef {
    /// The owner field of the hold.
    pub(crate) fn owner(&self) -> &std::sync::Arc<str> {
        &self.hold_key.1
    }

    /// How long the hold is still known to be valid; zero once it was released (its run
    /// ended) or lost.
    pub(crate) fn validity(&self) -> Duration {
        self.kind.core().holds.validity(&self.hold_key, self.epoch)
    }

    /// Cancelled when the hold is known to be lost.
    pub(crate) fn lost(&self) -> &CancellationToken {
        &self.lost
    }

    /// A call sent at `sent` set the key's TTL to `ttl` again (an extension outside the
    /// watchdog): the hold's loss deadline moves accordingly.
    pub(crate) fn extended(&self, sent: tokio::time::Instant, ttl: Duration) {
        let until = crate::engine::safe_until(sent, ttl);
        self.kind
            .core()
            .holds
            .extended(&self.hold_key, self.epoch, until);
    }

    /// Reports that the server no longer has this hold (a renewal found it gone): it and
    /// every guard of its run are lost.
    pub(crate) fn gone(&self, why: &str) {
        self.kind
            .core()
            .holds
            .forgotten(&self.hold_key, Some(self.epoch), why);
    }
}

impl Drop for Hold {
    fn drop(&mut self) {
        let Some(state) = self.state.take() else {
            return;
        };
        observe::held(&state.kind.core().metrics, state.meta.kind, -1.0);
        release_in_background(state);
    }
}

/// Hands the release of `state` to the client's background tasks (a dropped guard, or an
/// unlock that ran out of time waiting for its turn).
fn release_in_background(state: HoldState) {
    let cleanups = state.kind.core().cleanups.clone();
    let name = state.kind.name().to_string();
    let task = release(state, true, None).map(move |reply| {
        if let Err(e) = reply {
            if !matches!(e, Error::NotHeld { .. } | Error::ClientClosed) {
                tracing::warn!(
                    lock = %name,
                    error = %e,
                    "background release failed; settling it, or the lock expires with its TTL"
                );
            }
        }
    });
    cleanups.spawn(task);
}

/// Awaits `wait`, but not past `deadline`: false if the deadline came first.
async fn until(
    deadline: Option<tokio::time::Instant>,
    wait: impl std::future::Future<Output = ()>,
) -> bool {
    match deadline {
        Some(d) => tokio::time::timeout_at(d, wait).await.is_ok(),
        None => {
            wait.await;
            true
        }
    }
}

/// The error of an unlock whose release goes on in the background (see [`Hold::unlock`]).
fn unlock_timed_out() -> Error {
    Error::Redis(io_timeout(
        "the release did not finish within two response timeouts; it goes on in the background",
    ))
}

/// Releases one hold (an unlock, or a dropped guard's release in the background): waits for
/// its turn while another call of the owner is in flight, then does what the registry says
/// (see [`ReleaseStep`]). `Ok` only if the hold lasted until its release.
///
/// `deadline` (an unlock's): a wait for another call of the owner or for the running
/// settlement, and the resends of a release refused unrun, go no further; the release is
/// then left to the background (or to the settlement) and a retryable timeout returned.
/// `None` (a dropped guard's): as long as it takes.
fn release(
    state: HoldState,
    dropped: bool,
    deadline: Option<tokio::time::Instant>,
) -> BoxFuture<'static, Result<()>> {
    async move {
        let core = state.kind.core().clone();
        let not_held = |state: &HoldState| Error::NotHeld {
            name: state.kind.name().to_string(),
        };
        let watch = state.lease.is_none();
        loop {
            match core.holds.released(&state.hold_key, watch, state.epoch) {
                ReleaseStep::Busy(turn) => {
                    if !until(deadline, wait_turn(&turn, || core.holds.is_busy(&state.hold_key))).await {
                        release_in_background(state);
                        return Err(unlock_timed_out());
                    }
                }
                ReleaseStep::Stale { settle } => {
                    // The run of this hold ended (expired, force-unlocked, lost) and this
                    // owner took the lock again: that hold is not ours.
                    if settle {
                        spawn_settle(&state.kind, &state.hold_key);
                    }
                    state.ended(observe::HoldEnd::Lost);
                    return Err(not_held(&state));
                }
                // The client was closed, which released the hold: nothing left to send.
                ReleaseStep::Closed => return Err(Error::ClientClosed),
                ReleaseStep::Settling(settled, lasted) => {
                    // The settlement running now releases this hold with the others it
                    // trims, and says whether the hold was still there: Ok only if it lasted.
                    let settling = || core.holds.is_settling(&state.hold_key);
                    if !until(deadline, wait_turn(&settled, settling)).await {
                        return Err(unlock_timed_out());
                    }
                    return if lasted.get() == Some(&true) && !state.lost.is_cancelled() {
                        state.ended(observe::HoldEnd::Released);
                        Ok(())
                    } else {
                        state.ended(observe::HoldEnd::Lost);
                        Err(not_held(&state))
                    };
                }
                ReleaseStep::Send { expected } => {
                    let span = observe::release_span(&state.meta, &state.hold_key.1, dropped);
                    if dropped {
                        tracing::debug!(parent: &span, "guard dropped; releasing in the background");
                    }
                    let note = state.note.clone();
                    let reply = send_release(&state.kind, &state.hold_key, expected, note, deadline)
                        .instrument(span.clone())
                        .await;
                    observe::released(&core.metrics, state.meta.kind, &span, &reply);
                    return match reply? {
                        -1 => {
                            state.ended(observe::HoldEnd::Lost);
                            Err(not_held(&state))
                        }
                        // Released (n holds left), or the count was not the run's (-2: a
                        // settlement brings it back to the guards; the hold was there).
                        n if n >= -2 => {
                            state.ended(observe::HoldEnd::Released);
                            Ok(())
                        }
                        other => Err(Error::UnexpectedReply(format!(
                            "unlock script answered {other}"
                        ))),
                    };
                }
            }
        }
    }
    .boxed()
}

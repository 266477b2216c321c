//! Acquire script calls that never leak a hold: [`Inflight`] finishes an abandoned call in
//! the background, [`Ticket`] counts a call in the hold registry while it is in flight, and
//! [`run_acquire`] adds replica sync (see "Cancellation" and "Settling" in [`engine`](super)).

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use futures::future::BoxFuture;
use futures::FutureExt;

use super::lock_ref::LockRef;
use super::registry::{wait_turn, Begin, HoldKey, Outcome, Sent};
use super::settle::{finish, outcome_unknown};
use super::tracked::Cleanups;
use super::Core;
use crate::error::{Error, Result};
use crate::wire::scripts::{Script, ToRedisArgsDyn};

/// An acquire script call that cleans up after itself if abandoned.
///
/// If dropped before its reply arrived, the remaining call is spawned and `undo` runs with
/// its result, so a hold granted to nobody is released within a moment.
pub(crate) struct Inflight<R: Send + 'static> {
    call: Option<BoxFuture<'static, R>>,
    undo: Option<Box<dyn FnOnce(R) -> BoxFuture<'static, ()> + Send>>,
    handle: Cleanups,
}

impl<R: Send + 'static> Inflight<R> {
    pub(crate) fn new(
        handle: Cleanups,
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
pub(crate) struct Ticket {
    pub(super) kind: LockRef,
    pub(super) key: HoldKey,
    pub(super) sent: Sent,
    pub(super) open: bool,
}

impl Ticket {
    /// Waits until no other call of this owner is in flight and no settlement runs, then
    /// counts the call as in flight.
    ///
    /// Cancel safe: dropped while waiting, nothing was counted.
    pub(crate) async fn begin(kind: &LockRef, key: &HoldKey) -> Ticket {
        let holds = &kind.core().holds;
        loop {
            let settled = match holds.begin(key) {
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
            wait_turn(&settled, || holds.is_busy(key)).await;
        }
    }

    /// The ticket of a hold the server gave `key`'s owner without a call of its own (a fair
    /// lock's release hands the lock to the head of its queue), as if granted by a call sent
    /// at `sent` that set the TTL `ttl`. `None` when the registry cannot count it so: the
    /// owner holds this lock already, has another call in flight, or is settling; the
    /// caller then asks the server (its lock script recognises the handoff).
    pub(crate) fn handed_over(
        kind: &LockRef,
        key: &HoldKey,
        sent: tokio::time::Instant,
        ttl: Duration,
    ) -> Option<Ticket> {
        let Begin::Go(mut begun) = kind.core().holds.begin(key) else {
            return None;
        };
        let mut ticket = Ticket {
            kind: kind.clone(),
            key: key.clone(),
            sent: begun,
            open: true,
        };
        if !begun.held_nothing() {
            ticket.finish(Outcome::Known);
            return None;
        }
        begun.at = sent;
        begun.set_ttl = Some(ttl);
        ticket.sent = begun;
        Some(ticket)
    }

    /// The ticket of a granted call, unless its reply came after the TTL the call set
    /// (`ttl`) ran out: the process was paused, or the reply sat in a buffer, so the lock
    /// may have expired and been taken by another owner meanwhile. Such a call gets no
    /// guard: the hold it took (the server counted `holds` of this owner right after) is
    /// settled away, and `None` tells the caller to go on waiting.
    pub(crate) fn unless_late(self, holds: u32, ttl: Duration, lock: &str) -> Option<Self> {
        let ttl = self.sent.set_ttl.map_or(ttl, |t| t.min(ttl));
        if self.sent.at + ttl > tokio::time::Instant::now() {
            return Some(self);
        }
        tracing::debug!(
            lock,
            waited = ?self.sent.at.elapsed(),
            "lock reply came after the lock's TTL ran out; not taken"
        );
        let sent = self.sent;
        self.finish(Outcome::Abandoned(sent, holds));
        None
    }

    /// The ticket of a granted call, unless the kind's holds live by TTL keys of their own
    /// and the grant sits above holds this owner's run does not explain (see
    /// [`HoldRegistry::stacks_on_unexplained`]): settling those away would delete the new
    /// hold's key. Such a call gets no guard; the settlement releases every hold the run
    /// does not own (the new one too, so its key goes with it) and `None` tells the caller
    /// to try again once it is done.
    ///
    /// [`HoldRegistry::stacks_on_unexplained`]: super::registry::HoldRegistry::stacks_on_unexplained
    pub(crate) fn unless_stacked(self, holds: u32, lock: &str) -> Option<Self> {
        let core = self.kind.core().clone();
        if !self.kind.per_hold_ttl()
            || !core
                .holds
                .stacks_on_unexplained(&self.key, &self.sent, holds)
        {
            return Some(self);
        }
        tracing::debug!(
            lock,
            holds,
            "grant above holds the run does not own; settling them away and trying again"
        );
        let sent = self.sent;
        self.finish(Outcome::Abandoned(sent, holds));
        None
    }

    /// Ends the call without a guard. An unknown outcome is an acquire's: the registry
    /// learns what the owner held when it was sent ([`Outcome::AcquireUnknown`]).
    fn finish(mut self, outcome: Outcome) {
        self.open = false;
        let outcome = match outcome {
            Outcome::Unknown => Outcome::AcquireUnknown(self.sent),
            other => other,
        };
        finish(&self.kind, &self.key, outcome);
    }
}

impl Drop for Ticket {
    fn drop(&mut self) {
        if self.open {
            finish(&self.kind, &self.key, Outcome::AcquireUnknown(self.sent));
        }
    }
}

/// Runs an acquire call under its ticket so it never leaks a hold: an abandoned call
/// finishes in the background, and a hold it took, or may have taken, is settled away.
/// Returns the reply, and the ticket when the reply took a hold (for [`Hold::register`]).
pub(crate) async fn ticketed_call(
    ticket: Ticket,
    call: BoxFuture<'static, redis::RedisResult<Synced>>,
) -> Result<(Synced, Option<Ticket>)> {
    let taken = Synced::taken;
    let handle = ticket.kind.core().cleanups.clone();
    let call = async move { (call.await, ticket) }.boxed();
    let abandoned = move |(reply, ticket): (redis::RedisResult<Synced>, Ticket)| {
        let outcome = match &reply {
            // Taken by nobody: a hold no guard owns. The reply says what the server counted
            // right after, so the settlement can release it without reading first.
            Ok(r) if taken(r) == Taken::Yes => {
                Outcome::Abandoned(ticket.sent, r.reply[1].max(0) as u32)
            }
            Ok(r) if taken(r) == Taken::Maybe => Outcome::Unknown,
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
    /// The reply of a call without replica sync.
    pub(crate) fn plain(reply: Vec<i64>) -> Synced {
        Synced {
            reply,
            unsynced: None,
            unreleased: false,
        }
    }

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
/// cancellation guard of [`ticketed_call`] also covers the release. If that release fails,
/// the hold expires with its TTL (it is not watched).
pub(crate) async fn run_acquire(
    kind: &LockRef,
    owner: &Arc<str>,
    script: &Script,
    keys: &[&str],
    args: &[&dyn ToRedisArgsDyn],
) -> redis::RedisResult<Synced> {
    let core = kind.core();
    let mut conn = core.conn.clone();
    let Some(sync) = core.replica_sync else {
        return Ok(Synced::plain(script.run(&mut conn, keys, args).await?));
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
    let unreleased = match kind.release(owner.clone(), holds, None).await {
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

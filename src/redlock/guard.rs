//! [`RedLockGuard`]: one hold on a majority of the nodes, the task that extends it by
//! quorum (or watches its lease run out), and its release.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use dashmap::mapref::entry::Entry;
use futures::future::join_all;
use futures::FutureExt;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::node::node_timeout_error;
use super::round::{drift, quorum};
use super::run::{lose, Registered};
use super::RedLock;
use crate::error::{Error, Result};
use crate::raw::Inflight;

/// State shared by a guard and its extension task.
struct Shared {
    /// Start of the last round (acquire or extension) confirmed by a majority, + ttl - drift.
    valid_until: Mutex<Instant>,
    lost: CancellationToken,
    /// Cancelled when the guard is released: the task stops.
    stop: CancellationToken,
}

impl Shared {
    fn valid_until(&self) -> Instant {
        *self.valid_until.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// One hold of a [`RedLock`] on a majority of its nodes. Release it with
/// [`unlock`](RedLockGuard::unlock), which reports errors; dropping it releases in the
/// background instead.
///
/// The guard may be moved to, and unlocked from, any task: it remembers its owner.
///
/// Check [`validity`](Self::validity) before acting on the lock (for example before each
/// write of a long job), and select on [`lost`](Self::lost) to stop when extensions fail.
///
/// # Dropping without `unlock`
/// `Drop` cannot wait: it stops the extension task and hands the releases to the runtime
/// without waiting (never `block_on`). Nodes that cannot be reached let the hold expire with
/// its TTL.
#[must_use = "the lock is released when the guard is dropped; call .unlock().await"]
pub struct RedLockGuard {
    state: Option<GuardState>,
}

struct GuardState {
    lock: RedLock,
    owner: Arc<str>,
    lease: Option<Duration>,
    /// Nodes that granted this hold.
    granted: Vec<bool>,
    shared: Arc<Shared>,
    /// The local hold run this guard belongs to (see [`HoldRun`](super::run::HoldRun)), and
    /// its id there.
    epoch: u64,
    id: u64,
}

impl RedLockGuard {
    pub(super) fn new(
        lock: RedLock,
        owner: Arc<str>,
        lease: Option<Duration>,
        ttl: Duration,
        granted: Vec<bool>,
        round_start: Instant,
        member: Registered,
    ) -> RedLockGuard {
        let shared = Arc::new(Shared {
            valid_until: Mutex::new(round_start + ttl - drift(ttl)),
            lost: member.lost,
            stop: CancellationToken::new(),
        });
        let state = GuardState {
            lock,
            owner,
            lease,
            granted,
            shared,
            epoch: member.epoch,
            id: member.id,
        };
        let task = keep(state.keeper(), ttl, lease.is_none(), round_start);
        state.lock.inner.nodes[0].core.handle.spawn(task);
        RedLockGuard { state: Some(state) }
    }

    /// Releases this hold on every node where it is known to exist (granted, and not found
    /// gone since); the last hold frees the lock.
    ///
    /// Not retried on failure (a retried unlock could release a hold that is no longer this
    /// guard's); unreachable nodes let the hold expire with its TTL.
    ///
    /// # Errors
    /// [`Error::NotHeld`] when fewer than a majority of the nodes still held it (expired,
    /// restarted nodes, taken over), or when the guard was already [lost](Self::is_lost) and
    /// no majority confirmed the release: the holds still found were released, but the lock
    /// was not safely held any more. Also [`Error::NotHeld`], with nothing sent, when the
    /// same owner has taken the lock afresh since this guard's holds expired on a majority:
    /// the holds left on the nodes are the new guard's. [`Error::Redis`] (the first failure)
    /// when node errors leave it unknown whether a majority held it.
    ///
    /// # Cancel safety
    /// Once called, the releases happen: dropping the future lets them finish in the
    /// background.
    pub async fn unlock(mut self) -> Result<()> {
        let Some(state) = self.state.take() else {
            return Ok(());
        };
        let name = state.lock.inner.name.clone();
        let was_lost = state.shared.lost.is_cancelled();
        let Some(calls) = state.release() else {
            // Our holds expired and this owner took the lock afresh: what the nodes hold now
            // is the new guard's.
            return Err(Error::NotHeld {
                name: name.to_string(),
            });
        };
        // Each node gets the node timeout; a release still running then finishes in the
        // background (a hung or reconnecting node must not stall the unlock).
        let timeout = state.lock.inner.set.options.node_timeout;
        let replies = join_all(calls.into_iter().map(|(node, call)| async move {
            match tokio::time::timeout(timeout, call).await {
                Ok(reply) => (node, reply.map_err(Error::from)),
                Err(_) => (node, Err(node_timeout_error(timeout))),
            }
        }))
        .await;
        let n = state.lock.inner.nodes.len();
        let (mut released, mut errors, mut gone) = (0, Vec::new(), Vec::new());
        for (node, reply) in replies {
            match reply {
                Ok(r) if r >= 0 => released += 1,
                Ok(-1) => gone.push(node),
                Ok(other) => errors.push(Error::UnexpectedReply(format!(
                    "unlock script answered {other}"
                ))),
                Err(e) => errors.push(e),
            }
        }
        // The other guards of the run held nothing there either.
        state.lock.inner.gone(&state.owner, state.epoch, &gone);
        tracing::debug!(lock = %name, released, failed = errors.len(), of = n, "redlock released");
        if released >= quorum(n) {
            Ok(())
        } else if !was_lost && released + errors.len() >= quorum(n) {
            Err(errors.remove(0))
        } else {
            Err(Error::NotHeld {
                name: name.to_string(),
            })
        }
    }

    /// The lock's name.
    pub fn name(&self) -> &str {
        self.state.as_ref().map_or("", |s| &s.lock.inner.name)
    }

    /// The owner field of this hold on every node: `<set id>:<task id>`.
    pub fn owner(&self) -> &str {
        self.state.as_ref().map_or("", |s| &s.owner)
    }

    /// The lease this hold was taken with; `None` when its task extends it.
    pub fn lease(&self) -> Option<Duration> {
        self.state.as_ref().and_then(|s| s.lease)
    }

    /// How many nodes granted this hold when it was acquired (at least the quorum).
    pub fn acquired_nodes(&self) -> usize {
        self.state
            .as_ref()
            .map_or(0, |s| s.granted.iter().filter(|g| **g).count())
    }

    /// How long the lock is still safely held: from the start of the last round a majority
    /// confirmed (the acquire or an extension), the TTL minus the drift allowance, minus the
    /// time since; zero once it ran out or the guard is [lost](Self::is_lost). Never more
    /// than the TTL.
    pub fn validity(&self) -> Duration {
        match &self.state {
            Some(s) if !s.shared.lost.is_cancelled() => s
                .shared
                .valid_until()
                .saturating_duration_since(Instant::now()),
            _ => Duration::ZERO,
        }
    }

    /// Whether the lock is known to be lost: no extension reached a majority within the
    /// validity; or this hold is known to exist on fewer than a majority of the nodes (an
    /// extension, a re-entry of the same owner or an unlock of another of its guards found
    /// it gone elsewhere); or the same owner took the lock afresh after this hold expired on
    /// a majority; or (lease holds too) the validity ran out.
    pub fn is_lost(&self) -> bool {
        self.state
            .as_ref()
            .is_none_or(|s| s.shared.lost.is_cancelled())
            || self.validity().is_zero()
    }

    /// A token cancelled when the lock is known to be lost (see [`is_lost`](Self::is_lost));
    /// also for lease holds, when their validity runs out. Select on `lost().cancelled()` to
    /// stop work that must not continue without the lock.
    pub fn lost(&self) -> CancellationToken {
        self.state
            .as_ref()
            .map_or_else(CancellationToken::new, |s| s.shared.lost.clone())
    }
}

/// A release call on one node, with the node (index, generation) it releases on.
type NodeRelease = ((usize, u32), Inflight<redis::RedisResult<i64>>);

impl GuardState {
    /// Stops the extension task, leaves the hold run and starts the releases on the nodes
    /// where the run knows this guard's hold (each finishes in the background if its future
    /// is dropped). `None` for a stale guard (its run ended, see
    /// [`HoldRun`](super::run::HoldRun)): nothing may be released in its name.
    fn release(&self) -> Option<Vec<NodeRelease>> {
        self.shared.stop.cancel();
        let inner = &self.lock.inner;
        let releases = match inner.set.holds.entry(inner.hold_id(&self.owner)) {
            Entry::Occupied(mut e) if e.get().epoch == self.epoch => {
                let releases = e.get_mut().leave(self.id);
                if e.get().guards.is_empty() {
                    e.remove();
                }
                releases?
            }
            _ => return None,
        };
        let calls = releases
            .into_iter()
            .map(|(i, generation, holds)| {
                let node = &inner.nodes[i];
                let call = node.release(self.owner.clone(), inner.set.id_str.clone(), 0, holds);
                let call = Inflight::new(node.core.handle.clone(), call, |_| async {}.boxed());
                ((i, generation), call)
            })
            .collect();
        Some(calls)
    }

    /// What the extension task needs of this guard.
    fn keeper(&self) -> Keeper {
        Keeper {
            lock: self.lock.clone(),
            owner: self.owner.clone(),
            shared: self.shared.clone(),
            epoch: self.epoch,
            id: self.id,
        }
    }
}

/// The extension task's view of its guard.
struct Keeper {
    lock: RedLock,
    owner: Arc<str>,
    shared: Arc<Shared>,
    epoch: u64,
    id: u64,
}

impl Drop for RedLockGuard {
    fn drop(&mut self) {
        let Some(state) = self.state.take() else {
            return;
        };
        tracing::debug!(lock = %state.lock.inner.name, "redlock guard dropped; releasing in the background");
        // Dropping the unawaited calls hands them to the runtime.
        drop(state.release());
    }
}

impl std::fmt::Debug for RedLockGuard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedLockGuard")
            .field("name", &self.name())
            .field("owner", &self.owner())
            .field("lease", &self.lease())
            .field("nodes", &self.acquired_nodes())
            .field("validity", &self.validity())
            .field("lost", &self.is_lost())
            .finish()
    }
}

/// The guard's task: extends the lock by quorum every `ttl / 3` (watchdog holds), and marks
/// it lost when its validity runs out unconfirmed. Ends when the guard is released or lost.
///
/// Each extension goes to the nodes where the guard's hold run knows its hold, and counts
/// only confirmations from nodes it still holds afterwards; a node answering "gone" is gone
/// for the whole run, whose guards are lost once fewer than a quorum of nodes are left.
async fn keep(keeper: Keeper, ttl: Duration, extend: bool, acquired_at: Instant) {
    let Keeper {
        lock,
        owner,
        shared,
        epoch,
        id,
    } = keeper;
    let inner = &lock.inner;
    let n = inner.nodes.len();
    let ttl_ms = ttl.as_millis() as u64;
    let period = (ttl / 3).max(Duration::from_millis(1));
    let retry = (period / 4).clamp(Duration::from_millis(1), Duration::from_millis(500));
    let timeout = inner.set.options.node_timeout;
    let mut next = acquired_at + period;
    loop {
        let valid_until = shared.valid_until();
        let wake = if extend {
            next.min(valid_until)
        } else {
            valid_until
        };
        tokio::select! {
            _ = shared.stop.cancelled() => return,
            _ = shared.lost.cancelled() => return,
            _ = tokio::time::sleep_until(wake) => {}
        }
        if Instant::now() >= valid_until {
            if extend {
                lose(
                    &shared.lost,
                    &inner.name,
                    "no extension reached a majority within the validity",
                );
            } else {
                tracing::debug!(lock = %inner.name, "redlock lease ran out");
                shared.lost.cancel();
            }
            return;
        }
        // One extension round on every node this guard still holds, at once.
        let Some(targets) = inner.held(&owner, epoch, id) else {
            return; // released, or the run ended (which marked this guard lost)
        };
        let round_start = Instant::now();
        let answers = join_all(targets.iter().map(|&(i, _)| {
            tokio::time::timeout(timeout, inner.nodes[i].renew(owner.clone(), ttl_ms))
        }))
        .await;
        if shared.stop.is_cancelled() {
            return; // released meanwhile: whatever the answers say is moot
        }
        let gone: Vec<(usize, u32)> = targets
            .iter()
            .zip(&answers)
            .filter(|(_, a)| matches!(a, Ok(Ok(false))))
            .map(|(t, _)| *t)
            .collect();
        inner.gone(&owner, epoch, &gone);
        if shared.lost.is_cancelled() {
            return; // fewer than a quorum of the nodes hold it
        }
        // A node may have changed generation meanwhile (a re-entry found it reset): its
        // confirmation is not this guard's.
        let still = inner.held(&owner, epoch, id).unwrap_or_default();
        let confirmed = targets
            .iter()
            .zip(&answers)
            .filter(|(t, a)| matches!(a, Ok(Ok(true))) && still.contains(t))
            .count();
        let new_valid = round_start + ttl - drift(ttl);
        if confirmed >= quorum(n) && Instant::now() < new_valid {
            let mut v = shared.valid_until.lock().unwrap_or_else(|e| e.into_inner());
            *v = (*v).max(new_valid);
            next = round_start + period;
            tracing::trace!(lock = %inner.name, confirmed, of = n, "redlock extended");
        } else {
            tracing::debug!(lock = %inner.name, confirmed, gone = gone.len(), of = n, "redlock extension without quorum; retrying");
            next = Instant::now() + retry;
        }
    }
}

//! [`RedLockGuard`]: one hold on a majority of the nodes, the task that extends it by
//! quorum (or watches its lease run out), and its release.
//!
//! Each node's share of the hold is an engine [`Hold`] in that node client's hold registry:
//! the registry decides, per node, whether a grant re-entered the owner's earlier holds
//! there or started afresh (the earlier guards are then lost on that node), counts every call
//! in flight and settles unknown outcomes. This file adds only the quorum on top: a guard is
//! held while at least a quorum of its node holds are, within its validity.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::future::join_all;
use futures::stream::{FuturesUnordered, StreamExt};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::node::node_timeout_error;
use super::{drift, quorum, RedLock};
use crate::engine::{Hold, HoldRef, Owner};
use crate::error::{Error, Result};

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

    fn lose(&self, name: &str, why: &str) {
        if !self.lost.is_cancelled() {
            tracing::warn!(lock = %name, kind = "redlock", reason = why, "lock lost");
            self.lost.cancel();
        }
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
///
/// # Example
///
/// ```rust,no_run
/// # async fn step(_: u32) {}
/// # async fn demo(clients: Vec<lockwise::Client>) -> lockwise::Result<()> {
/// let set = lockwise::RedLockSet::new(&clients);
/// let guard = set.lock("rebuild-index").lock().await?;
/// println!("granted by {} of {} nodes", guard.acquired_nodes(), set.nodes());
/// for batch in 0..10 {
///     // Extensions failed on a majority: stop working without the lock.
///     if guard.is_lost() {
///         break;
///     }
///     step(batch).await;
/// }
/// guard.unlock().await?; // `Error::NotHeld` once lost
/// # Ok(()) }
/// ```
#[must_use = "the lock is released when the guard is dropped; call .unlock().await"]
pub struct RedLockGuard {
    hold: QuorumHold,
}

/// A guard's hold on a quorum of the nodes: what the shared guard accessors read.
struct QuorumHold {
    lock: RedLock,
    owner: Arc<str>,
    lease: Option<Duration>,
    /// Per node, this guard's hold there (`None`: not granted).
    holds: Vec<Option<Hold>>,
    shared: Arc<Shared>,
    /// Stops the current extension task only (a child of `shared.stop`): `detach` starts
    /// a new one that follows the moved holds.
    keeper_stop: CancellationToken,
    ttl: Duration,
}

crate::lock::api::guard_accessors!(
    RedLockGuard,
    demo: "clients: Vec<lockwise::Client>",
    lock: "lockwise::RedLock::new(&clients, \"rebuild-index\")",
    owner: "The owner field of this hold on every node: `<set id>:<task id>` for a \
        task-owned handle, `<set id>:h<n>` for a non-reentrant one or once detached.",
    lease: "The lease this hold was taken with; `None` when its task extends it.",
    is_lost: "Whether the lock is known to be lost: no extension reached a majority within \
        the validity; or this hold is known to exist on fewer than a majority of the nodes \
        (an extension, a re-entry of the same owner or a round that found another owner \
        there showed it gone elsewhere); or (lease holds too) the validity ran out.",
    validity: "How long the lock is still safely held: from the start of the last round a \
        majority confirmed (the acquire or an extension), the TTL minus the drift \
        allowance, minus the time since; zero once it ran out or the guard is \
        [lost](Self::is_lost). Never more than the TTL."
);

impl RedLockGuard {
    pub(super) fn new(
        lock: RedLock,
        owner: Arc<str>,
        lease: Option<Duration>,
        ttl: Duration,
        holds: Vec<Option<Hold>>,
        round_start: Instant,
    ) -> RedLockGuard {
        let shared = Arc::new(Shared {
            valid_until: Mutex::new(round_start + ttl - drift(ttl)),
            lost: CancellationToken::new(),
            stop: CancellationToken::new(),
        });
        let mut hold = QuorumHold {
            keeper_stop: shared.stop.child_token(),
            lock,
            owner,
            lease,
            holds,
            shared,
            ttl,
        };
        hold.start_keeper(round_start);
        RedLockGuard { hold }
    }

    /// Moves this hold, on every node that holds it, to one owner of its own
    /// (`<set id>:h<n>`), so the task that took it no longer re-enters it: call it before
    /// the guard leaves its task (moved into `tokio::spawn`, kept in shared state). The lock
    /// stays held throughout, extensions follow the moved holds. One script call per node,
    /// at once.
    ///
    /// # Errors
    /// The first node's error, as [`RLockGuard::detach`](crate::RLockGuard::detach)
    /// reports it for one lock (`InvalidArgument` when the task re-entered the lock: detach
    /// the outermost guard once the inner ones are released; `NotHeld` where the hold is
    /// gone; `Redis` when a node failed, settled in the background). The nodes that moved
    /// did; the guard keeps the others under the old owner, and stays held while a majority
    /// of its node holds do.
    ///
    /// # Cancel safety
    /// Dropping the future leaves each node's move to a settlement, as for
    /// [`RLockGuard::detach`](crate::RLockGuard::detach); the extension task stays stopped
    /// until the guard is released, so the lock then expires with its TTL unless released.
    ///
    /// # Example
    ///
    /// ```rust,no_run
    /// # async fn demo(clients: Vec<lockwise::Client>) -> lockwise::Result<()> {
    /// let set = lockwise::RedLockSet::new(&clients);
    /// let mut guard = set.lock("rebuild-index").lock().await?;
    /// guard.detach().await?; // this task no longer re-enters it
    /// tokio::spawn(async move { guard.unlock().await });
    /// # Ok(()) }
    /// ```
    pub async fn detach(&mut self) -> Result<()> {
        let to = Owner::PerHold.field(&self.hold.lock.inner.set.id_str);
        // The extension task follows the node holds it was given: stop it, move, restart.
        self.hold.keeper_stop.cancel();
        let moves = self
            .hold
            .holds
            .iter_mut()
            .flatten()
            .map(|h| h.detach_to(to.clone()));
        let mut moved = 0;
        let mut first_error = None;
        for result in join_all(moves).await {
            match result {
                Ok(()) => moved += 1,
                Err(e) => {
                    first_error.get_or_insert(e);
                }
            }
        }
        if moved > 0 {
            self.hold.owner = to;
        }
        self.hold.keeper_stop = self.hold.shared.stop.child_token();
        self.hold.start_keeper(Instant::now());
        match first_error {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }

    /// How many nodes granted this hold when it was acquired (at least the quorum).
    ///
    /// # Example
    ///
    /// ```rust,no_run
    /// # async fn demo(clients: Vec<lockwise::Client>) -> lockwise::Result<()> {
    /// let set = lockwise::RedLockSet::new(&clients);
    /// let guard = set.lock("rebuild-index").lock().await?;
    /// println!("granted by {} of {} nodes", guard.acquired_nodes(), set.nodes());
    /// guard.unlock().await?;
    /// # Ok(()) }
    /// ```
    pub fn acquired_nodes(&self) -> usize {
        self.hold.holds.iter().flatten().count()
    }

    /// Releases this hold on every node that granted it; the last hold of the lock frees it.
    ///
    /// Not retried on failure (a retried unlock could release a hold that is no longer this
    /// guard's); a release whose reply was lost is settled in the background, and
    /// unreachable nodes let the hold expire with its TTL.
    ///
    /// # Errors
    /// [`Error::NotHeld`] when fewer than a majority of the nodes still held it (expired,
    /// restarted nodes, taken over), or when the guard was already [lost](Self::is_lost) and
    /// no majority confirmed the release: the holds still found were released, but the lock
    /// was not safely held any more. Nothing is sent to a node where the same owner took the
    /// lock afresh since this guard's hold there expired: the hold there is the new guard's.
    /// [`Error::ClientClosed`] when the nodes' clients were closed
    /// ([`RedLockSet::shutdown`](crate::RedLockSet::shutdown)), which released the hold.
    /// [`Error::Redis`] (the first failure) when node errors leave it unknown whether a
    /// majority held it.
    ///
    /// # Cancel safety
    /// Once called, the releases happen: dropping the future lets them finish in the
    /// background.
    ///
    /// # Example
    ///
    /// ```rust,no_run
    /// # async fn demo(clients: Vec<lockwise::Client>) -> lockwise::Result<()> {
    /// let guard = lockwise::RedLockSet::new(&clients).lock("rebuild-index").lock().await?;
    /// match guard.unlock().await {
    ///     Err(e) if e.is_not_held() => eprintln!("lost before the unlock"),
    ///     other => other?,
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn unlock(mut self) -> Result<()> {
        self.hold.shared.stop.cancel();
        let was_lost = self.hold.is_lost();
        let n = self.hold.lock.inner.nodes.len();
        // Each node gets the node timeout; a release still running then finishes in the
        // background (a hung or reconnecting node must not stall the unlock).
        let timeout = self.hold.lock.inner.set.options.node_timeout;
        let releases = std::mem::take(&mut self.hold.holds)
            .into_iter()
            .flatten()
            .map(|mut hold| async move {
                match tokio::time::timeout(timeout, hold.unlock()).await {
                    Ok(reply) => reply,
                    Err(_) => Err(node_timeout_error(timeout)),
                }
            });
        let (mut released, mut errors) = (0, Vec::new());
        for reply in join_all(releases).await {
            match reply {
                Ok(()) => released += 1,
                Err(e) if e.is_not_held() => {}
                Err(e) => errors.push(e),
            }
        }
        let name = &self.hold.lock.inner.name;
        tracing::debug!(lock = %name, released, failed = errors.len(), of = n, "redlock released");
        let closed = errors.iter().filter(|e| e.is_client_closed()).count();
        if released >= quorum(n) {
            Ok(())
        } else if closed > 0 && released + closed >= quorum(n) {
            // The node clients were closed, which released the holds: nothing was sent.
            Err(Error::ClientClosed)
        } else if !was_lost && released + errors.len() >= quorum(n) {
            Err(errors.swap_remove(0))
        } else {
            Err(Error::NotHeld {
                name: name.to_string(),
            })
        }
    }
}

impl QuorumHold {
    /// Starts the extension task (or, with a lease, the watch of its end) over the node
    /// holds as they are now, from `from`.
    fn start_keeper(&mut self, from: Instant) {
        let keeper = Keeper {
            lock: self.lock.clone(),
            nodes: self
                .holds
                .iter()
                .enumerate()
                .filter_map(|(i, h)| Some((i, h.as_ref()?.follow()?)))
                .collect(),
            shared: self.shared.clone(),
            stop: self.keeper_stop.clone(),
        };
        let task = keep(keeper, self.ttl, self.lease.is_none(), from);
        self.lock.inner.nodes[0].core.handle.spawn(task);
    }

    /// How many of this guard's node holds are not known to be lost.
    fn live_nodes(&self) -> usize {
        self.holds
            .iter()
            .flatten()
            .filter(|h| !h.lost().is_cancelled())
            .count()
    }

    pub(super) fn name(&self) -> &str {
        &self.lock.inner.name
    }

    pub(super) fn owner(&self) -> &str {
        &self.owner
    }

    pub(super) fn lease(&self) -> Option<Duration> {
        self.lease
    }

    /// See [`RedLockGuard::validity`].
    pub(super) fn validity(&self) -> Duration {
        let n = self.lock.inner.nodes.len();
        if self.shared.lost.is_cancelled() || self.live_nodes() < quorum(n) {
            return Duration::ZERO;
        }
        self.shared
            .valid_until()
            .saturating_duration_since(Instant::now())
    }

    /// See [`RedLockGuard::is_lost`].
    pub(super) fn is_lost(&self) -> bool {
        self.validity().is_zero()
    }

    /// See [`RedLockGuard::lost`]; cancels the token first if the lock is lost by now.
    pub(super) fn lost(&self) -> CancellationToken {
        if self.is_lost() {
            self.shared.lose(
                &self.lock.inner.name,
                "its validity ran out or fewer than a majority of the nodes hold it",
            );
        }
        self.shared.lost.clone()
    }
}

impl Drop for QuorumHold {
    fn drop(&mut self) {
        self.shared.stop.cancel();
        if !self.holds.is_empty() {
            tracing::debug!(lock = %self.lock.inner.name, "redlock guard dropped; releasing in the background");
        }
        // Dropping each node's hold hands its release to the runtime.
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

/// The extension task's view of its guard: the node holds it follows (index, hold).
struct Keeper {
    lock: RedLock,
    nodes: Vec<(usize, HoldRef)>,
    shared: Arc<Shared>,
    /// Cancelled when the guard is released or starts a new keeper.
    stop: CancellationToken,
}

/// Resolves once fewer than `needed` of `holds` are left that are not lost.
async fn fewer_than(holds: Vec<CancellationToken>, needed: usize) {
    let mut live = holds.len();
    let mut lost: FuturesUnordered<_> = holds.into_iter().map(|t| t.cancelled_owned()).collect();
    while live >= needed {
        if lost.next().await.is_none() {
            return;
        }
        live -= 1;
    }
}

/// The guard's task: extends the lock by quorum every `ttl / 3` (watchdog holds), and marks
/// it lost when its validity runs out unconfirmed or fewer than a quorum of its node holds
/// are left. Ends when the guard is released or lost.
///
/// Each extension goes to the nodes where the guard's hold is not known lost, and counts only
/// confirmations from nodes it still holds afterwards; a node answering "gone" is reported to
/// that node's registry, which marks lost every guard of the owner there.
async fn keep(keeper: Keeper, ttl: Duration, extend: bool, acquired_at: Instant) {
    let Keeper {
        lock,
        nodes,
        shared,
        stop,
    } = keeper;
    let inner = &lock.inner;
    let needed = quorum(inner.nodes.len());
    let ttl_ms = ttl.as_millis() as u64;
    let period = (ttl / 3).max(Duration::from_millis(1));
    let retry = (period / 4).clamp(Duration::from_millis(1), Duration::from_millis(500));
    let timeout = inner.set.options.node_timeout;
    let quorum_gone = fewer_than(
        nodes.iter().map(|(_, h)| h.lost().clone()).collect(),
        needed,
    );
    tokio::pin!(quorum_gone);
    let mut next = acquired_at + period;
    loop {
        let valid_until = shared.valid_until();
        let wake = if extend {
            next.min(valid_until)
        } else {
            valid_until
        };
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = shared.lost.cancelled() => return,
            _ = &mut quorum_gone => {
                shared.lose(&inner.name, "its hold is known on fewer than a majority of the nodes");
                return;
            }
            _ = tokio::time::sleep_until(wake) => {}
        }
        if Instant::now() >= valid_until {
            if extend {
                shared.lose(
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
        let targets: Vec<_> = nodes
            .iter()
            .filter(|(_, h)| !h.lost().is_cancelled())
            .collect();
        let round_start = Instant::now();
        let answers = join_all(targets.iter().map(|(i, h)| {
            tokio::time::timeout(timeout, inner.nodes[*i].renew(h.owner().clone(), ttl_ms))
        }))
        .await;
        if stop.is_cancelled() {
            return; // released (or detached) meanwhile: whatever the answers say is moot
        }
        let mut confirmed = 0;
        for ((_, hold), answer) in targets.iter().zip(&answers) {
            match answer {
                Ok(Ok(false)) => hold.gone("an extension found it gone on this node"),
                // A node hold found lost meanwhile (a re-entry found it reset): its
                // confirmation is not this guard's.
                Ok(Ok(true)) if !hold.lost().is_cancelled() => {
                    hold.extended(round_start, ttl);
                    confirmed += 1;
                }
                _ => {}
            }
        }
        let new_valid = round_start + ttl - drift(ttl);
        if confirmed >= needed && Instant::now() < new_valid {
            let mut v = shared.valid_until.lock().unwrap_or_else(|e| e.into_inner());
            *v = (*v).max(new_valid);
            next = round_start + period;
            tracing::trace!(lock = %inner.name, confirmed, of = inner.nodes.len(), "redlock extended");
        } else {
            tracing::debug!(lock = %inner.name, confirmed, of = inner.nodes.len(), "redlock extension without quorum; retrying");
            next = Instant::now() + retry;
        }
    }
}

crate::lock::contract::impl_lock!(crate::RedLock, crate::RedLockGuard);

//! [`RedLock`]: the Redlock algorithm over several independent Redis masters.
//!
//! # How it works
//!
//! A [`RedLockSet`] holds N [`Client`]s, each connected to its own independent master, and a
//! set id (a uuid). A lock's owner is `<set id>:<task id>`, the same on every node, and each
//! node keeps the lock as the reentrant hash of [`RLock`](crate::RLock) (the same
//! `lua/lock.lua`, `lua/unlock.lua` and `lua/renew.lua`), under `<namespace>:redlock:{<name>}`.
//!
//! One *round* of an acquire:
//!
//! 1. Note the start time; send the lock script to every node at once, each bounded by the
//!    short per-node timeout ([`RedLockOptions::node_timeout`]), so a dead node costs at most
//!    that long.
//! 2. The round succeeds iff a majority (N/2 + 1) granted a hold AND the validity
//!    `ttl - elapsed - drift` (drift = 1% of the ttl + 2 ms) is still positive.
//! 3. Otherwise release every hold the round may have taken: the granted ones at once, and
//!    the ones whose reply was lost or late (timeout, connection drop) as soon as their
//!    outcome is known, with a conditional release that only undoes a hold the round added.
//!    Then sleep a random delay (to break symmetric split votes) and try again.
//!
//! Waiting is a bounded, randomized retry, as the Redlock algorithm prescribes: this is the
//! one lock kind of the crate that does not wait on pub/sub (a wakeup from one node says
//! nothing about a majority).
//!
//! While a watchdog guard lives, one task per guard extends the lock every `ttl / 3` on every
//! node where its hold is known to exist (the renew script only extends a hash that still
//! holds the owner's field). An extension counts iff a majority confirmed it within the
//! validity it restores. When no extension reached a majority before the validity ran out,
//! or the hold is known to exist on fewer than a majority, the guard is *lost*: its validity
//! is zero from then on.
//!
//! # Re-entry and hold runs
//!
//! A node keeps one hold count per owner, so there the holds of two guards of one task look
//! alike: after a hold expired on some nodes, a count of 1 may be a new hold and a count of 2
//! an old one plus a re-entry. The set keeps, per (lock, owner), the *hold run*: its live
//! guards, the count each node should show, and per node a generation (see [`HoldRun`]). A
//! re-entry joins the run only if a quorum of the nodes show that it re-entered the run's
//! holds; otherwise it is a fresh hold, and the old run's guards are lost and send nothing
//! any more. A guard counts, extends and releases only the nodes where its run's hold is
//! known to exist, and is lost once fewer than a quorum are left.

use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use dashmap::mapref::entry::Entry;
use dashmap::DashMap;
use futures::future::{join_all, BoxFuture};
use futures::FutureExt;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

use crate::client::Client;
use crate::error::{Error, Result};
use crate::keys::{check_millis, check_name, Keys, Role};
use crate::raw::Core;
use crate::raw::{self, current_owner, Inflight};
use crate::scripts::{LOCK, REDLOCK_RELEASE, RENEW};

/// Default TTL of a Redlock taken without a lease; extended every third of it.
pub const DEFAULT_REDLOCK_TTL: Duration = Duration::from_secs(30);
/// Default per-node timeout of one lock or extension call.
pub const DEFAULT_NODE_TIMEOUT: Duration = Duration::from_millis(50);
/// Default base delay between two acquire rounds (randomized to 0.5x..1.5x).
pub const DEFAULT_RETRY_DELAY: Duration = Duration::from_millis(200);

/// Settings of a [`RedLockSet`]. Start from [`RedLockOptions::default`].
#[derive(Debug, Clone)]
#[must_use = "options do nothing until passed to RedLockSet::with_options"]
pub struct RedLockOptions {
    ttl: Duration,
    node_timeout: Duration,
    retry_delay: Duration,
    retry_count: Option<u32>,
}

impl Default for RedLockOptions {
    fn default() -> Self {
        RedLockOptions {
            ttl: DEFAULT_REDLOCK_TTL,
            node_timeout: DEFAULT_NODE_TIMEOUT,
            retry_delay: DEFAULT_RETRY_DELAY,
            retry_count: None,
        }
    }
}

impl RedLockOptions {
    /// TTL of locks taken without a lease; the extension task renews them every `ttl / 3`.
    /// A crashed owner's lock is free again at most this long after the crash. Default
    /// [`DEFAULT_REDLOCK_TTL`] (30 s).
    pub fn ttl(mut self, ttl: Duration) -> Self {
        self.ttl = ttl;
        self
    }

    /// How long one node may take to answer a lock or extension call before it counts as
    /// failed. Keep it small next to the TTL (the Redis documentation suggests 5-50 ms for a
    /// 10 s TTL): a slow node then costs the round little validity. Default
    /// [`DEFAULT_NODE_TIMEOUT`] (50 ms); raise it for far-away nodes.
    pub fn node_timeout(mut self, timeout: Duration) -> Self {
        self.node_timeout = timeout;
        self
    }

    /// Base delay before retrying a failed round; each delay is drawn at random from
    /// `0.5 × delay .. 1.5 × delay`. Default [`DEFAULT_RETRY_DELAY`] (200 ms).
    pub fn retry_delay(mut self, delay: Duration) -> Self {
        self.retry_delay = delay;
        self
    }

    /// At most this many retries after the first round of a
    /// [`try_lock`](RedLock::try_lock), on top of its `wait` bound. `None` (the default):
    /// only `wait` bounds it. [`lock`](RedLock::lock) waits as long as it takes.
    pub fn retry_count(mut self, retries: Option<u32>) -> Self {
        self.retry_count = retries;
        self
    }
}

/// The drift allowance of the Redlock algorithm: 1% of the TTL plus 2 ms.
fn drift(ttl: Duration) -> Duration {
    ttl / 100 + Duration::from_millis(2)
}

/// A random delay in `base / 2 .. base * 3 / 2`.
fn jitter(base: Duration) -> Duration {
    let span = base.as_nanos().max(1);
    let r = Uuid::new_v4().as_u128() % span;
    base / 2 + Duration::from_nanos(r as u64)
}

/// The error of a node that did not answer within the node timeout (retryable).
fn node_timeout_error(timeout: Duration) -> Error {
    Error::Redis(
        std::io::Error::new(
            std::io::ErrorKind::TimedOut,
            format!("no reply within the node timeout ({timeout:?})"),
        )
        .into(),
    )
}

/// N/2 + 1.
fn quorum(n: usize) -> usize {
    n / 2 + 1
}

/// A set of independent Redis masters to run [Redlock] on, and the owner id its locks share.
///
/// Build it from one [`Client`] per master (each connected to a different, independent
/// server: not replicas of each other, not nodes of one cluster), then take lock handles
/// with [`lock`](RedLockSet::lock). Cheap to clone.
///
/// Owners are `<set id>:<task id>`: every [`RedLock`] of one set is the same owner within one
/// task (re-entry works across handles of one set), two sets are always different owners.
///
/// [Redlock]: https://redis.io/docs/latest/develop/use/patterns/distributed-locks/
#[derive(Clone)]
pub struct RedLockSet {
    inner: Arc<SetInner>,
}

struct SetInner {
    /// Kept so the clients (and their connections) live as long as the set.
    clients: Vec<Client>,
    id: Uuid,
    id_str: Arc<str>,
    options: RedLockOptions,
    /// (lock name, owner) -> the guards alive in this process and what the nodes hold for
    /// them.
    holds: DashMap<(Arc<str>, Arc<str>), HoldRun>,
    next_epoch: AtomicU64,
    next_guard: AtomicU64,
}

/// The local guards of one (lock, owner) since it was last granted afresh: a *hold run*.
///
/// A node keeps one count per owner, so there the holds of two guards of one task look alike.
/// The run tells them apart: it knows the count each node should show, and each guard knows
/// the *generation* of every node it was granted on. When a node's count stops adding up (its
/// holds expired, were released behind the guards' back, or another owner holds it), the node
/// starts a new generation: the older guards no longer count that node, nor release anything
/// there. A guard left with fewer than a quorum of nodes is lost.
///
/// A re-entry joins the run only if a quorum of the nodes show that it re-entered the run's
/// holds (a count above 1, one more than the run's). Otherwise it is a fresh hold: a new run
/// with its own epoch, and every guard of the old run is lost and releases nothing (its holds
/// may be gone, and the counts left on the nodes now count the new run's).
struct HoldRun {
    epoch: u64,
    nodes: Vec<RunNode>,
    guards: Vec<Member>,
}

/// One node as a hold run knows it.
#[derive(Clone, Copy, Default)]
struct RunNode {
    /// The owner's hold count there as the run left it: its guards' holds, plus the holds of
    /// lost guards of the same owner that it took over (released with its last guard there).
    count: u32,
    generation: u32,
}

impl RunNode {
    /// The run's holds here are gone: the guards granted so far no longer hold this node.
    fn gone(&mut self) {
        self.count = 0;
        self.generation = self.generation.wrapping_add(1);
    }
}

/// One guard of a hold run.
struct Member {
    id: u64,
    /// Per node, the generation this guard was granted at (`None`: not granted there).
    granted: Vec<Option<u32>>,
    lost: CancellationToken,
}

impl HoldRun {
    fn new(epoch: u64, nodes: usize) -> HoldRun {
        HoldRun {
            epoch,
            nodes: vec![RunNode::default(); nodes],
            guards: Vec::new(),
        }
    }

    fn holds(&self, member: &Member, node: usize) -> bool {
        member.granted[node] == Some(self.nodes[node].generation)
    }

    /// The nodes (index, generation) where `member` still holds the lock.
    fn held_by(&self, member: &Member) -> Vec<(usize, u32)> {
        (0..self.nodes.len())
            .filter(|&i| self.holds(member, i))
            .map(|i| (i, self.nodes[i].generation))
            .collect()
    }

    /// On how many nodes `replies` re-entered this run's holds.
    fn reentered(&self, replies: &[NodeReply]) -> usize {
        replies
            .iter()
            .zip(&self.nodes)
            .filter(
                |(r, node)| matches!(r, NodeReply::Granted(h) if *h > 1 && *h == node.count + 1),
            )
            .count()
    }

    /// Takes in what a round saw: a node that another owner holds, or that granted a new hold
    /// (count 1), no longer has the run's holds.
    fn observe(&mut self, replies: &[NodeReply]) {
        for (node, reply) in self.nodes.iter_mut().zip(replies) {
            if node.count > 0 && matches!(reply, NodeReply::Held | NodeReply::Granted(1)) {
                node.gone();
            }
        }
    }

    /// Adds the guard of a granted round. A node whose count does not add up (other than the
    /// run's count plus one) starts a new generation that only this guard holds, with every
    /// hold the node shows: they are this owner's, and no older guard can tell whether one of
    /// them is its own.
    fn join(&mut self, id: u64, replies: &[NodeReply], lost: CancellationToken) {
        let granted = replies
            .iter()
            .zip(&mut self.nodes)
            .map(|(reply, node)| match reply {
                NodeReply::Granted(h) => {
                    if *h != node.count + 1 {
                        node.gone();
                    }
                    node.count = *h;
                    Some(node.generation)
                }
                _ => None,
            })
            .collect();
        self.guards.push(Member { id, granted, lost });
    }

    /// Marks lost every guard that holds fewer than a quorum of the nodes.
    fn check(&self, name: &str) {
        let needed = quorum(self.nodes.len());
        for member in &self.guards {
            if self.held_by(member).len() < needed {
                lose(
                    &member.lost,
                    name,
                    "its hold is known on fewer than a majority of the nodes",
                );
            }
        }
    }

    /// Removes guard `id`. Returns, per node it still holds, (node, generation, holds to
    /// release): its own hold, and where it was the run's last guard, every hold the run has
    /// there. `None` if it is not a guard of this run.
    fn leave(&mut self, id: u64) -> Option<Vec<(usize, u32, u32)>> {
        let at = self.guards.iter().position(|m| m.id == id)?;
        let member = self.guards.swap_remove(at);
        let mut releases = Vec::new();
        for i in 0..self.nodes.len() {
            if !self.holds(&member, i) {
                continue;
            }
            let shared = self.guards.iter().any(|other| self.holds(other, i));
            let node = &mut self.nodes[i];
            let holds = if shared { 1 } else { node.count.max(1) };
            node.count = node.count.saturating_sub(holds);
            releases.push((i, node.generation, holds));
        }
        Some(releases)
    }
}

impl RedLockSet {
    /// A set over `clients` with the default [`RedLockOptions`]. An empty slice is reported
    /// by the lock methods as [`Error::InvalidArgument`].
    pub fn new(clients: &[Client]) -> RedLockSet {
        RedLockSet::with_options(clients, RedLockOptions::default())
    }

    /// A set over `clients` with `options`. Invalid options are reported by the lock methods
    /// as [`Error::InvalidArgument`].
    pub fn with_options(clients: &[Client], options: RedLockOptions) -> RedLockSet {
        let id = Uuid::new_v4();
        RedLockSet {
            inner: Arc::new(SetInner {
                clients: clients.to_vec(),
                id,
                id_str: id.to_string().into(),
                options,
                holds: DashMap::new(),
                next_epoch: AtomicU64::new(1),
                next_guard: AtomicU64::new(1),
            }),
        }
    }

    /// A handle to the Redlock `name` on every node of this set. Cheap; nothing is sent.
    pub fn lock(&self, name: impl AsRef<str>) -> RedLock {
        RedLock::in_set(self.inner.clone(), name.as_ref())
    }

    /// This set's id, the first part of every owner field it writes.
    pub fn id(&self) -> Uuid {
        self.inner.id
    }

    /// Number of nodes (clients).
    pub fn nodes(&self) -> usize {
        self.inner.clients.len()
    }

    /// How many nodes must grant a lock: `nodes() / 2 + 1`.
    pub fn quorum(&self) -> usize {
        quorum(self.inner.clients.len())
    }

    /// The set's options.
    pub fn options(&self) -> &RedLockOptions {
        &self.inner.options
    }
}

impl std::fmt::Debug for RedLockSet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedLockSet")
            .field("id", &self.inner.id)
            .field("nodes", &self.inner.clients.len())
            .field("options", &self.inner.options)
            .finish()
    }
}

/// One node of a lock: its client and keys there.
#[derive(Clone)]
struct Node {
    core: Arc<Core>,
    key: Arc<str>,
    channel: Arc<str>,
}

impl Node {
    /// `lua/redlock_release.lua`: releases `holds` holds of `owner` (`expected` 0: whatever
    /// its hold count).
    fn release(
        &self,
        owner: Arc<str>,
        set_id: Arc<str>,
        expected: u32,
        holds: u32,
    ) -> BoxFuture<'static, redis::RedisResult<i64>> {
        let (mut conn, key, channel, publish) = (
            self.core.conn.clone(),
            self.key.clone(),
            self.channel.clone(),
            self.core.publish,
        );
        async move {
            REDLOCK_RELEASE
                .run(
                    &mut conn,
                    &[&key, &channel],
                    &[&&*owner, &&*set_id, &expected, &publish, &holds],
                )
                .await
        }
        .boxed()
    }

    /// `lua/renew.lua` for this node's key: `true` renewed, `false` gone.
    fn renew(&self, owner: Arc<str>, ttl_ms: u64) -> impl Future<Output = Result<bool>> {
        let (mut conn, key) = (self.core.conn.clone(), self.key.clone());
        async move {
            let reply: Vec<i64> = RENEW.run(&mut conn, &[&key], &[&ttl_ms, &&*owner]).await?;
            match reply.as_slice() {
                [1] => Ok(true),
                [0] => Ok(false),
                other => Err(Error::UnexpectedReply(format!(
                    "renew script answered {other:?}"
                ))),
            }
        }
    }
}

/// What one node answered in one acquire round.
enum NodeReply {
    /// A hold was granted; the owner's hold count on that node.
    Granted(u32),
    /// Held by another owner.
    Held,
    /// No usable answer: an error or the per-node timeout. Whatever the call may have taken
    /// is released in the background.
    Failed(Error),
}

/// A lock over the nodes of a [`RedLockSet`], acquired with the [Redlock] algorithm:
/// held while a majority of the nodes hold it, for a validity that accounts for the time the
/// acquire took and for clock drift.
///
/// Get one from [`RedLockSet::lock`] or [`RedLock::new`]. Cheap handle (`Clone`, `Send`,
/// `Sync`); nothing is sent until used. Reentrant: the same task may lock it again through
/// any handle of the same set; each [`RedLockGuard`] is one hold. A re-entry joins the task's
/// earlier holds only if a majority of the nodes show them still held; otherwise (they
/// expired on a majority) it is a fresh hold, and the earlier guards are
/// [lost](RedLockGuard::is_lost): their `unlock` releases nothing.
///
/// # When to use it
/// When the lock must survive the loss of a minority of independent Redis masters, and a
/// lock is an *efficiency* measure (avoid doing work twice), or when you add fencing on the
/// resource yourself. With one Redis (plus replicas or Sentinel), an [`RLock`](crate::RLock)
/// costs one round trip instead of N and is as safe during normal operation.
///
/// # What it guarantees, and what it does not
/// * While every node keeps its data and clocks advance at about the same rate, at most one
///   owner holds a majority for a given time: mutual exclusion holds for
///   [`RedLockGuard::validity`].
/// * It relies on timing: bounded clock drift between nodes (1% of the TTL + 2 ms is
///   allowed for), no clock jumps (ops adjusting wall clocks can expire keys early), and
///   holders that do not pause (GC, SIGSTOP, swapping, a long `.await` elsewhere) past their
///   validity. Martin Kleppmann's critique ("How to do distributed locking", 2016) shows
///   how a paused holder and a second owner then both act as holders.
/// * It issues **no fencing tokens**: the protected resource cannot reject a late write from
///   a holder that lost the lock without noticing. When correctness (not just efficiency)
///   depends on the lock, use a fenced lock on a single, well-replicated Redis, or a
///   consensus system, and check the token at the resource.
/// * A node restarted without persistence forgets the holds it had: a majority may then be
///   formed by another owner. Run nodes with `appendfsync always`, or keep a restarted node
///   out of service for longer than the TTL (the "delayed restart" of the Redis docs).
///   Extensions do not re-create a hold on a node that lost it.
///
/// # Waiting
/// Unlike the other kinds, waiting is a randomized retry (see [`RedLockOptions::retry_delay`]):
/// a failed round releases what it took and tries again after a random delay, as the
/// algorithm prescribes. There is no pub/sub wakeup.
///
/// [Redlock]: https://redis.io/docs/latest/develop/use/patterns/distributed-locks/
#[derive(Clone)]
pub struct RedLock {
    inner: Arc<LockInner>,
}

struct LockInner {
    set: Arc<SetInner>,
    name: Arc<str>,
    nodes: Vec<Node>,
    /// The argument a lock method must reject, if any.
    invalid: Option<(&'static str, String)>,
}

impl RedLock {
    /// A Redlock named `name` over `clients` (one per independent master), with a set of its
    /// own: shorthand for `RedLockSet::new(clients).lock(name)`. Take several locks from one
    /// [`RedLockSet`] instead when one task should re-enter through different handles.
    pub fn new(clients: &[Client], name: impl AsRef<str>) -> RedLock {
        RedLockSet::new(clients).lock(name)
    }

    fn in_set(set: Arc<SetInner>, name: &str) -> RedLock {
        let o = &set.options;
        let invalid = if set.clients.is_empty() {
            Some((
                "clients",
                "a RedLockSet needs at least one client".to_string(),
            ))
        } else {
            [
                check_name(name).err(),
                check_millis("ttl", o.ttl).err(),
                check_millis("node_timeout", o.node_timeout).err(),
                check_millis("retry_delay", o.retry_delay).err(),
            ]
            .into_iter()
            .flatten()
            .next()
            .map(|e| match e {
                Error::InvalidArgument { argument, reason } => (argument, reason),
                other => ("name", other.to_string()),
            })
        };
        let nodes = if invalid.is_some() {
            Vec::new()
        } else {
            set.clients
                .iter()
                .map(|c| {
                    let core = c.core().clone();
                    let keys = Keys::new(&core.namespace, name);
                    Node {
                        key: keys.key(Role::Redlock).into(),
                        channel: keys.key(Role::RedlockChannel).into(),
                        core,
                    }
                })
                .collect()
        };
        RedLock {
            inner: Arc::new(LockInner {
                name: if invalid.is_some() { "" } else { name }.into(),
                set,
                nodes,
                invalid,
            }),
        }
    }

    /// The lock's name.
    pub fn name(&self) -> &str {
        &self.inner.name
    }

    /// The Redis key of the lock hash on node `i` (`<namespace>:redlock:{<name>}`); `None`
    /// for an index out of range or an invalid lock.
    pub fn key(&self, i: usize) -> Option<&str> {
        self.inner.nodes.get(i).map(|n| &*n.key)
    }

    fn check(&self) -> Result<()> {
        match &self.inner.invalid {
            Some((argument, reason)) => Err(Error::invalid(argument, reason.clone())),
            None => Ok(()),
        }
    }

    /// Acquires the lock on a majority of the nodes, retrying as long as it takes; the
    /// guard's task extends it by quorum until the guard is released.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for an invalid name, option or empty set.
    /// [`Error::Redis`] (the first node's error) when, in one round, so many nodes failed
    /// (error or per-node timeout) that no majority was possible: the deployment is down
    /// rather than contended. Contention alone never ends the wait.
    ///
    /// # Cancel safety
    /// Cancel safe. Dropping the future at any point leaves no hold behind: each node call
    /// abandoned mid-flight finishes in the background and releases what it took.
    pub async fn lock(&self) -> Result<RedLockGuard> {
        raw::never_timed_out(self.acquire(None, None).await?)
    }

    /// Like [`lock`](Self::lock), with a fixed lease and no extensions: the holds expire
    /// `lease` after they were taken unless released before.
    ///
    /// # Errors
    /// As for [`lock`](Self::lock); also [`Error::InvalidArgument`] for a lease below 1 ms,
    /// above 2<sup>53</sup> ms, or not longer than its drift allowance.
    ///
    /// # Cancel safety
    /// As for [`lock`](Self::lock).
    pub async fn lock_with_lease(&self, lease: Duration) -> Result<RedLockGuard> {
        raw::never_timed_out(self.acquire(None, Some(lease)).await?)
    }

    /// Tries to acquire the lock on a majority of the nodes for at most `wait` (and at most
    /// [`retry_count`](RedLockOptions::retry_count) retries). `Ok(None)`: not acquired in
    /// time. `Duration::ZERO` makes a single round. With `lease: None` the guard's task
    /// extends the lock; with `Some(lease)` it expires after the lease.
    ///
    /// # Errors
    /// As for [`lock_with_lease`](Self::lock_with_lease). Contention is never an error.
    ///
    /// # Cancel safety
    /// As for [`lock`](Self::lock).
    pub async fn try_lock(
        &self,
        wait: Duration,
        lease: Option<Duration>,
    ) -> Result<Option<RedLockGuard>> {
        self.acquire(Some(raw::deadline_after(wait)), lease).await
    }

    async fn acquire(
        &self,
        deadline: Option<Instant>,
        lease: Option<Duration>,
    ) -> Result<Option<RedLockGuard>> {
        self.check()?;
        let set = &self.inner.set;
        let ttl = lease.unwrap_or(set.options.ttl);
        let ttl_ms = check_millis("lease", ttl)?;
        if ttl <= drift(ttl) {
            return Err(Error::invalid(
                "lease",
                format!("must be longer than its drift allowance (1% + 2 ms), got {ttl:?}"),
            ));
        }
        let owner = current_owner(&set.id_str);
        let hold_id = self.inner.hold_id(&owner);
        let n = self.inner.nodes.len();
        let started = Instant::now();
        let mut rounds = 0u32;
        loop {
            rounds += 1;
            // Per node, the hold count a hold of this round would make there.
            let expected: Vec<u32> = match set.holds.get(&hold_id) {
                Some(run) => run.nodes.iter().map(|node| node.count + 1).collect(),
                None => vec![1; n],
            };
            let round_start = Instant::now();
            let replies = join_all(
                self.inner
                    .nodes
                    .iter()
                    .zip(expected)
                    .map(|(node, expected)| self.node_acquire(node, &owner, ttl_ms, expected)),
            )
            .await;
            let elapsed = round_start.elapsed();
            let granted: Vec<bool> = replies
                .iter()
                .map(|r| matches!(r, NodeReply::Granted(_)))
                .collect();
            let acquired = granted.iter().filter(|g| **g).count();
            let validity = ttl.checked_sub(elapsed + drift(ttl)).unwrap_or_default();
            if acquired >= quorum(n) && !validity.is_zero() {
                // No .await from here until the guard owns the holds.
                let member = self.register(hold_id, &replies);
                tracing::debug!(
                    lock = %self.inner.name,
                    kind = "redlock",
                    nodes = acquired,
                    of = n,
                    rounds,
                    validity_ms = validity.as_millis() as u64,
                    waited_ms = started.elapsed().as_millis() as u64,
                    "lock acquired"
                );
                return Ok(Some(RedLockGuard::new(
                    self.clone(),
                    owner,
                    lease,
                    ttl,
                    granted,
                    round_start,
                    member,
                )));
            }
            // What the round saw of the nodes may tell the owner's earlier guards that their
            // holds are gone.
            if let Some(mut run) = set.holds.get_mut(&hold_id) {
                run.observe(&replies);
                run.check(&self.inner.name);
            }
            // Failed round: give back what it took (late or lost replies undo themselves).
            for (node, _) in self.inner.nodes.iter().zip(&granted).filter(|(_, g)| **g) {
                let (name, release) = (
                    self.inner.name.clone(),
                    node.release(owner.clone(), set.id_str.clone(), 0, 1),
                );
                node.core.handle.spawn(async move {
                    if let Err(e) = release.await {
                        tracing::debug!(lock = %name, error = %e, "release after a failed round failed; the hold expires with its TTL");
                    }
                });
            }
            let mut errors = replies.into_iter().filter_map(|r| match r {
                NodeReply::Failed(e) => Some(e),
                _ => None,
            });
            let first_error = errors.next();
            let failed = first_error.is_some() as usize + errors.count();
            tracing::debug!(
                lock = %self.inner.name,
                granted = acquired,
                failed,
                of = n,
                elapsed_ms = elapsed.as_millis() as u64,
                "redlock round failed"
            );
            match first_error {
                // No majority was possible: a failure of the deployment, not contention.
                Some(e) if failed > n - quorum(n) => return Err(e),
                _ => {}
            }
            // Randomized retry, bounded by the caller's wait and the retry count.
            let mut delay = jitter(set.options.retry_delay);
            if let Some(d) = deadline {
                if set.options.retry_count.is_some_and(|c| rounds > c) {
                    return Ok(None);
                }
                let left = d.saturating_duration_since(Instant::now());
                if left.is_zero() {
                    tracing::debug!(lock = %self.inner.name, rounds, "try_lock timed out");
                    return Ok(None);
                }
                delay = delay.min(left);
            }
            tokio::time::sleep(delay).await;
        }
    }

    /// Records a granted round in the set's registry: the guard joins the owner's hold run if
    /// a quorum of the nodes show it re-entered that run's holds; otherwise it starts a new
    /// run, and every guard of the old one is lost (see [`HoldRun`]).
    fn register(&self, hold_id: (Arc<str>, Arc<str>), replies: &[NodeReply]) -> Registered {
        let (set, name) = (&self.inner.set, &self.inner.name);
        let n = self.inner.nodes.len();
        let id = set.next_guard.fetch_add(1, Ordering::Relaxed);
        let lost = CancellationToken::new();
        let new_run = || HoldRun::new(set.next_epoch.fetch_add(1, Ordering::Relaxed), n);
        let mut run = set.holds.entry(hold_id).or_insert_with(new_run);
        if !run.guards.is_empty() && run.reentered(replies) >= quorum(n) {
            run.observe(replies);
            run.join(id, replies, lost.clone());
            // Older guards that lost nodes to this round may be left without a quorum.
            run.check(name);
        } else {
            let old = std::mem::replace(&mut *run, new_run());
            for member in &old.guards {
                lose(
                    &member.lost,
                    name,
                    "its owner locked it again and found its holds on fewer than a majority of the nodes",
                );
            }
            run.join(id, replies, lost.clone());
        }
        Registered {
            epoch: run.epoch,
            id,
            lost,
        }
    }

    /// One node's share of a round: the lock script, bounded by the node timeout, cleaning
    /// up after itself when its reply is late, lost or never awaited.
    fn node_acquire(
        &self,
        node: &Node,
        owner: &Arc<str>,
        ttl_ms: u64,
        expected: u32,
    ) -> impl Future<Output = NodeReply> + Send + 'static {
        let set_id = self.inner.set.id_str.clone();
        let timeout = self.inner.set.options.node_timeout;
        let call = {
            let (mut conn, key, owner) = (node.core.conn.clone(), node.key.clone(), owner.clone());
            async move {
                LOCK.run::<Vec<i64>, _>(&mut conn, &[&key], &[&ttl_ms, &&*owner])
                    .await
            }
            .boxed()
        };
        // A node is a kind of its own for the shared clean-up: an abandoned or timed-out call
        // gives back what it took (unconditionally if the reply says it was granted, by
        // hold count when the outcome is unknown), before this round returns.
        let on_node = NodeLock {
            node: node.clone(),
            set_id,
            name: self.inner.name.clone(),
        };
        let reply = raw::guarded_call(&on_node, owner.clone(), expected, call, |r: &Vec<i64>| {
            r.first() == Some(&1)
        });
        async move {
            match tokio::time::timeout(timeout, reply).await {
                // Dropping the call made it finish (and undo) in the background.
                Err(_) => NodeReply::Failed(node_timeout_error(timeout)),
                Ok(Ok(reply)) => match reply.as_slice() {
                    [1, holds] if *holds >= 1 => NodeReply::Granted(*holds as u32),
                    [0, _] => NodeReply::Held,
                    other => NodeReply::Failed(Error::UnexpectedReply(format!(
                        "lock script answered {other:?}"
                    ))),
                },
                Ok(Err(e)) => NodeReply::Failed(e.into()),
            }
        }
    }
}

impl LockInner {
    fn hold_id(&self, owner: &Arc<str>) -> (Arc<str>, Arc<str>) {
        (self.name.clone(), owner.clone())
    }

    /// The nodes (index, generation) where guard `id` of run `epoch` still holds the lock;
    /// `None` once the guard left its run or the run ended.
    fn held(&self, owner: &Arc<str>, epoch: u64, id: u64) -> Option<Vec<(usize, u32)>> {
        let run = self.set.holds.get(&self.hold_id(owner))?;
        let member = run.guards.iter().find(|m| m.id == id);
        match member {
            Some(member) if run.epoch == epoch => Some(run.held_by(member)),
            _ => None,
        }
    }

    /// Notes that run `epoch`'s holds on `nodes` (index, generation when asked) are gone;
    /// its guards left with fewer than a quorum of the nodes are lost.
    fn gone(&self, owner: &Arc<str>, epoch: u64, nodes: &[(usize, u32)]) {
        if nodes.is_empty() {
            return;
        }
        let Some(mut run) = self.set.holds.get_mut(&self.hold_id(owner)) else {
            return;
        };
        if run.epoch != epoch {
            return;
        }
        for &(i, generation) in nodes {
            if run.nodes[i].generation == generation {
                run.nodes[i].gone();
            }
        }
        run.check(&self.name);
    }
}

/// A guard's entry in its hold run.
struct Registered {
    epoch: u64,
    id: u64,
    lost: CancellationToken,
}

/// One node's hold of a Redlock, as a [`raw::Kind`] for [`raw::guarded_call`].
#[derive(Clone)]
struct NodeLock {
    node: Node,
    set_id: Arc<str>,
    name: Arc<str>,
}

impl raw::Kind for NodeLock {
    fn core(&self) -> &Arc<Core> {
        &self.node.core
    }

    fn name(&self) -> &str {
        &self.name
    }

    fn release(&self, owner: Arc<str>, expected: u32) -> BoxFuture<'static, Result<i64>> {
        let release = self.node.release(owner, self.set_id.clone(), expected, 1);
        async move { Ok(release.await?) }.boxed()
    }
}

impl std::fmt::Debug for RedLock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedLock")
            .field("name", &self.inner.name)
            .field("set", &self.inner.set.id)
            .field("nodes", &self.inner.nodes.len())
            .finish()
    }
}

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
    /// The local hold run this guard belongs to (see [`HoldRun`]), and its id there.
    epoch: u64,
    id: u64,
}

impl RedLockGuard {
    fn new(
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
    /// is dropped). `None` for a stale guard (its run ended, see [`HoldRun`]): nothing may be
    /// released in its name.
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

fn lose(lost: &CancellationToken, name: &str, why: &str) {
    if !lost.is_cancelled() {
        tracing::warn!(lock = %name, kind = "redlock", reason = why, "lock lost");
        lost.cancel();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn drift_is_one_percent_plus_two_ms() {
        assert_eq!(drift(Duration::from_secs(10)), Duration::from_millis(102));
        assert_eq!(drift(Duration::from_millis(1)), Duration::from_micros(2010));
    }

    #[test]
    fn quorum_is_a_strict_majority() {
        assert_eq!(quorum(1), 1);
        assert_eq!(quorum(2), 2);
        assert_eq!(quorum(3), 2);
        assert_eq!(quorum(4), 3);
        assert_eq!(quorum(5), 3);
    }

    /// Replies of a round: a hold count per node, 0 for "held by another owner".
    fn round(counts: &[u32]) -> Vec<NodeReply> {
        counts
            .iter()
            .map(|&h| match h {
                0 => NodeReply::Held,
                h => NodeReply::Granted(h),
            })
            .collect()
    }

    fn amounts(releases: Option<Vec<(usize, u32, u32)>>) -> Vec<(usize, u32)> {
        releases
            .expect("a guard of the run")
            .into_iter()
            .map(|(node, _, holds)| (node, holds))
            .collect()
    }

    #[test]
    fn reentry_joins_only_where_the_counts_add_up() {
        let mut run = HoldRun::new(1, 3);
        let (first, second) = (CancellationToken::new(), CancellationToken::new());
        run.join(1, &round(&[1, 1, 1]), first.clone());
        // Node 0 lost the first hold (a new hold counts 1 there); nodes 1 and 2 re-entered.
        let replies = round(&[1, 2, 2]);
        assert_eq!(run.reentered(&replies), 2);
        assert_eq!(run.reentered(&round(&[1, 1, 2])), 1);
        assert_eq!(run.reentered(&round(&[3, 3, 2])), 1, "3 is not 1 + 1");
        run.observe(&replies);
        run.join(2, &replies, second.clone());
        run.check("x");
        assert_eq!(run.held_by(&run.guards[0]).len(), 2);
        assert_eq!(run.held_by(&run.guards[1]).len(), 3);
        assert!(!first.is_cancelled() && !second.is_cancelled());
        // Node 1 is found gone: the first guard is left with one node.
        run.nodes[1].gone();
        run.check("x");
        assert!(first.is_cancelled() && !second.is_cancelled());
        // Each guard releases only where its hold is known; the last one there releases all.
        assert_eq!(amounts(run.leave(1)), vec![(2, 1)]);
        assert_eq!(amounts(run.leave(2)), vec![(0, 1), (2, 1)]);
        assert!(run.leave(2).is_none());
        assert!(run.nodes.iter().all(|n| n.count == 0));
    }

    #[test]
    fn another_owner_on_a_node_ends_the_runs_holds_there() {
        let mut run = HoldRun::new(1, 3);
        let first = CancellationToken::new();
        run.join(1, &round(&[1, 1, 1]), first.clone());
        run.observe(&round(&[0, 2, 2]));
        run.check("x");
        assert!(!first.is_cancelled());
        run.observe(&round(&[0, 0, 2]));
        run.check("x");
        assert!(first.is_cancelled());
    }

    #[test]
    fn the_last_guard_on_a_node_releases_the_holds_the_run_took_over() {
        let mut run = HoldRun::new(1, 3);
        let token = CancellationToken::new;
        // Node 0 also shows two holds nobody claims (of lost guards of the same owner).
        run.join(1, &round(&[3, 1, 1]), token());
        run.join(2, &round(&[4, 2, 2]), token());
        assert_eq!(amounts(run.leave(2)), vec![(0, 1), (1, 1), (2, 1)]);
        assert_eq!(amounts(run.leave(1)), vec![(0, 3), (1, 1), (2, 1)]);
    }

    #[test]
    fn jitter_stays_within_half_to_one_and_a_half() {
        let base = Duration::from_millis(200);
        for _ in 0..1000 {
            let d = jitter(base);
            assert!(d >= base / 2 && d < base * 3 / 2, "{d:?}");
        }
        assert!(jitter(Duration::ZERO) <= Duration::from_nanos(1));
    }
}

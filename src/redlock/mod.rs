//! [`RedLock`]: the Redlock algorithm over several independent Redis masters.
//!
//! # How it works
//!
//! A [`RedLockSet`] holds N [`Client`]s, each connected to its own independent master, and a
//! set id (a uuid). A lock's owner is `<set id>:<task id>`, the same on every node, and each
//! node keeps the lock as the reentrant hash of [`RLock`](crate::RLock) (the same
//! `lua/lock.lua`, `lua/unlock.lua` and `lua/renew.lua`), under `<namespace>:lock:{<name>}`:
//! the key every kind of the name uses on that server, so a Redlock and the other kinds of
//! one name exclude each other on a node.
//!
//! One *round* of an acquire:
//!
//! 1. Note the start time; send the lock script to every node at once, each bounded by the
//!    short per-node timeout ([`RedLockOptions::node_timeout`]), so a dead node costs at most
//!    that long.
//! 2. The round succeeds iff a majority (the *quorum*, N/2 + 1) granted a hold AND the
//!    *validity* `ttl - elapsed - drift` is still positive. The drift allowance (1% of the
//!    ttl + 2 ms) covers clocks of the nodes that run at slightly different rates.
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
//! # Re-entry
//!
//! A node keeps one hold count per owner, so there the holds of two guards of one task look
//! alike: after a hold expired on some nodes, a count of 1 may be a new hold and a count of 2
//! an old one plus a re-entry. Each node's share of a guard is therefore an engine hold in
//! that node client's hold registry, as for every other kind (see [`engine`](crate::engine)): per
//! node, a grant whose count shows that the owner's earlier holds there are gone starts a new
//! run on that node, and the earlier guards are lost *on that node*; calls in flight are
//! counted, and a count that the guards do not explain (a lost reply, a release behind their
//! back) is settled away rather than adopted. A guard is held while a quorum of its node
//! holds are not lost, within its validity: a re-entry that found the earlier holds gone on
//! a majority leaves the earlier guards lost, and their unlock sends nothing to the nodes
//! where the new run's holds are.
//!
//! # Layout
//!
//! - this file: what the other files share: the [`RedLock`] handle and the [`RedLockSet`]
//!   its locks come from (each makes the other), and the quorum and drift arithmetic.
//! - [`options`]: [`RedLockOptions`] with their defaults.
//! - [`node`]: one node's calls (acquire, renew, release) and what a node answered; a node
//!   is a kind of the engine, so its holds live in the node client's hold registry.
//! - [`round`]: the acquire methods ([`RedLock::lock`], `lock_with_lease`, `try_lock`) and
//!   their rounds across the nodes, with the validity check and the randomized retry.
//! - [`guard`]: [`RedLockGuard`], its extension task and its unlock.
//! - [`inspect`]: the read-only queries and `force_unlock`, answered by quorum.

use std::sync::Arc;
use std::time::Duration;

use uuid::Uuid;

use crate::client::Client;
use crate::engine::{self, Owner};
use crate::error::{Error, Result};
use crate::lock::api::owner_methods;
use crate::wire::keys::check_millis;

mod guard;
mod inspect;
mod node;
mod options;
mod round;

pub use guard::RedLockGuard;
pub use options::{RedLockOptions, DEFAULT_NODE_TIMEOUT, DEFAULT_REDLOCK_TTL, DEFAULT_RETRY_DELAY};

use node::NodeLock;

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
///
/// # Example
///
/// ```rust,no_run
/// use std::time::Duration;
///
/// # async fn demo(clients: Vec<lockwise::Client>) -> lockwise::Result<()> {
/// let lock = lockwise::RedLockSet::new(&clients).lock("invoice:9");
/// let lease = Some(Duration::from_secs(10));
/// let guard = lock.try_lock(Duration::from_secs(1), lease).await?;
/// // Mutual exclusion holds only within the validity: check it before acting.
/// if guard.validity() > Duration::from_secs(2) {
///     // ... write ...
/// }
/// guard.unlock().await?;
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct RedLock {
    inner: Arc<LockInner>,
}

struct LockInner {
    set: Arc<SetInner>,
    name: Arc<str>,
    nodes: Vec<NodeLock>,
    /// Whose holds the acquires take (owner fields start with the set's id).
    owner: Owner,
    /// The argument a lock method must reject, if any.
    invalid: Option<(&'static str, String)>,
}

impl RedLock {
    /// A Redlock named `name` over `clients` (one per independent master), with a set of its
    /// own: shorthand for `RedLockSet::new(clients).lock(name)`. Take several locks from one
    /// [`RedLockSet`] instead when one task should re-enter through different handles.
    ///
    /// # Example
    ///
    /// ```rust,no_run
    /// # async fn demo(clients: Vec<lockwise::Client>) -> lockwise::Result<()> {
    /// let lock = lockwise::RedLock::new(&clients, "invoice:9");
    /// let guard = lock.lock().await?;
    /// guard.unlock().await?;
    /// # Ok(()) }
    /// ```
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
                // A client in Redisson's layout takes Redisson's RLock on its node (what
                // Redisson's RedissonRedLock does on each master).
                set.clients
                    .iter()
                    .find_map(|c| crate::layout::check_name(c.core().layout, name, false).err()),
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
                    let keys = crate::layout::keys(core.layout, &core.namespace, name);
                    // The last release on a node publishes the set's id, which the
                    // set's own clients skip as their echo; Redisson's `0` in its layout.
                    // Never batched: a batch publishes the client's id.
                    let release =
                        crate::layout::release(core.layout, &keys, &set.id_str).unbatched();
                    NodeLock {
                        key: keys.lock.as_str().into(),
                        kind: engine::LockRef::new(core.clone(), name, release),
                        keys: Arc::new(keys),
                        core,
                    }
                })
                .collect()
        };
        let owner = set
            .clients
            .first()
            .map_or(Owner::Task, |c| c.core().default_owner.clone());
        RedLock {
            inner: Arc::new(LockInner {
                name: if invalid.is_some() { "" } else { name }.into(),
                set,
                nodes,
                owner,
                invalid,
            }),
        }
    }

    fn owner_mode(&self) -> &Owner {
        &self.inner.owner
    }

    fn with_owner_mode(&self, owner: Owner) -> RedLock {
        let i = &self.inner;
        let invalid = i.invalid.clone().or_else(|| match &owner {
            Owner::Named(id) => engine::check_owner_id(id).err(),
            _ => None,
        });
        RedLock {
            inner: Arc::new(LockInner {
                set: i.set.clone(),
                name: i.name.clone(),
                nodes: i.nodes.clone(),
                owner,
                invalid,
            }),
        }
    }

    /// The owner field of the next acquire: `<set id>:<task id>` for a task-owned handle,
    /// a fresh `<set id>:h<n>` for a non-reentrant one, `<set id>:owner:<id>` for a named
    /// owner.
    pub(super) fn owner_field(&self) -> Arc<str> {
        self.inner.owner.field(&self.inner.set.id_str)
    }

    /// The lock's name.
    ///
    /// # Example
    ///
    /// ```rust,no_run
    /// # async fn demo(clients: Vec<lockwise::Client>) -> lockwise::Result<()> {
    /// let lock = lockwise::RedLockSet::new(&clients).lock("invoice:9");
    /// assert_eq!(lock.name(), "invoice:9");
    /// # Ok(()) }
    /// ```
    pub fn name(&self) -> &str {
        &self.inner.name
    }

    /// The Redis key of the lock hash on node `i` (`<namespace>:lock:{<name>}`); `None`
    /// for an index out of range or an invalid lock.
    ///
    /// # Example
    ///
    /// ```rust,no_run
    /// # async fn demo(clients: Vec<lockwise::Client>) -> lockwise::Result<()> {
    /// let set = lockwise::RedLockSet::new(&clients);
    /// let lock = set.lock("invoice:9");
    /// for i in 0..set.nodes() {
    ///     println!("node {i}: {:?}", lock.key(i));
    /// }
    /// # Ok(()) }
    /// ```
    pub fn key(&self, i: usize) -> Option<&str> {
        self.inner.nodes.get(i).map(|n| &*n.key)
    }

    fn check(&self) -> Result<()> {
        match &self.inner.invalid {
            Some((argument, reason)) => Err(Error::invalid(argument, reason.clone())),
            None => Ok(()),
        }
    }
}

owner_methods!(
    RedLock,
    demo: "clients: Vec<lockwise::Client>",
    lock: "lockwise::RedLock::new(&clients, \"invoice:9\")",
    acquire: "lock()"
);

impl std::fmt::Debug for RedLock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedLock")
            .field("name", &self.inner.name)
            .field("set", &self.inner.set.id)
            .field("nodes", &self.inner.nodes.len())
            .finish()
    }
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
///
/// # Example
///
/// ```rust,no_run
/// use std::time::Duration;
///
/// # async fn demo() -> lockwise::Result<()> {
/// // One client per independent master.
/// let mut clients = Vec::new();
/// for url in ["redis://10.0.0.1/", "redis://10.0.0.2/", "redis://10.0.0.3/"] {
///     clients.push(lockwise::Client::connect(url).await?);
/// }
/// let set = lockwise::RedLockSet::new(&clients);
/// println!("{} nodes, quorum {}", set.nodes(), set.quorum());
/// let guard = set.lock("invoice:9").lock().await?;
/// guard.unlock().await?;
/// set.shutdown(Duration::from_secs(5)).await;
/// # Ok(()) }
/// ```
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
}

impl Drop for SetInner {
    fn drop(&mut self) {
        for client in &self.clients {
            client.core().presence.remove(&self.id_str);
        }
    }
}

impl RedLockSet {
    /// A set over `clients` with the default [`RedLockOptions`]. An empty slice is reported
    /// by the lock methods as [`Error::InvalidArgument`].
    ///
    /// # Example
    ///
    /// ```rust,no_run
    /// # async fn demo(clients: Vec<lockwise::Client>) -> lockwise::Result<()> {
    /// let set = lockwise::RedLockSet::new(&clients);
    /// let guard = set.lock("invoice:9").lock().await?;
    /// guard.unlock().await?;
    /// # Ok(()) }
    /// ```
    pub fn new(clients: &[Client]) -> RedLockSet {
        RedLockSet::with_options(clients, RedLockOptions::default())
    }

    /// A set over `clients` with `options`. Invalid options are reported by the lock methods
    /// as [`Error::InvalidArgument`].
    ///
    /// # Example
    ///
    /// ```rust,no_run
    /// use std::time::Duration;
    /// use lockwise::{RedLockOptions, RedLockSet};
    ///
    /// # async fn demo(clients: Vec<lockwise::Client>) -> lockwise::Result<()> {
    /// let options = RedLockOptions::default().ttl(Duration::from_secs(10));
    /// let set = RedLockSet::with_options(&clients, options);
    /// let guard = set.lock("invoice:9").lock().await?;
    /// guard.unlock().await?;
    /// # Ok(()) }
    /// ```
    pub fn with_options(clients: &[Client], options: RedLockOptions) -> RedLockSet {
        let id = Uuid::new_v4();
        // Each node announces the set's id as present while the set lives, so an operator's
        // leak check tells its holds from a dead client's.
        for client in clients {
            client.core().presence.add(&id.to_string());
        }
        RedLockSet {
            inner: Arc::new(SetInner {
                clients: clients.to_vec(),
                id,
                id_str: id.to_string().into(),
                options,
            }),
        }
    }

    /// A handle to the Redlock `name` on every node of this set. Cheap; nothing is sent.
    ///
    /// # Example
    ///
    /// ```rust,no_run
    /// # async fn demo(clients: Vec<lockwise::Client>) -> lockwise::Result<()> {
    /// let set = lockwise::RedLockSet::new(&clients);
    /// let invoice = set.lock("invoice:9");
    /// let guard = invoice.lock().await?;
    /// guard.unlock().await?;
    /// # Ok(()) }
    /// ```
    pub fn lock(&self, name: impl AsRef<str>) -> RedLock {
        RedLock::in_set(self.inner.clone(), name.as_ref())
    }

    /// This set's id, the first part of every owner field it writes.
    ///
    /// # Example
    ///
    /// ```rust,no_run
    /// # async fn demo(clients: Vec<lockwise::Client>) -> lockwise::Result<()> {
    /// let set = lockwise::RedLockSet::new(&clients);
    /// println!("set {} (owner fields start with it)", set.id());
    /// # Ok(()) }
    /// ```
    pub fn id(&self) -> Uuid {
        self.inner.id
    }

    /// Number of nodes (clients).
    ///
    /// # Example
    ///
    /// ```rust,no_run
    /// # async fn demo(clients: Vec<lockwise::Client>) -> lockwise::Result<()> {
    /// let set = lockwise::RedLockSet::new(&clients);
    /// assert_eq!(set.nodes(), clients.len());
    /// # Ok(()) }
    /// ```
    pub fn nodes(&self) -> usize {
        self.inner.clients.len()
    }

    /// Closes the client of every node ([`Client::shutdown`]), at once: the set's locks are
    /// released on every node, and so is everything else those clients hold. One report
    /// per node, in the order of the clients.
    ///
    /// # Cancel safety
    /// As for [`Client::shutdown`].
    ///
    /// # Example
    ///
    /// ```rust,no_run
    /// use std::time::Duration;
    ///
    /// # async fn demo(clients: Vec<lockwise::Client>) -> lockwise::Result<()> {
    /// let set = lockwise::RedLockSet::new(&clients);
    /// // ... when the service stops:
    /// for report in set.shutdown(Duration::from_secs(5)).await {
    ///     if !report.is_complete() {
    ///         eprintln!("{} left to expire", report.failed.len());
    ///     }
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn shutdown(&self, timeout: std::time::Duration) -> Vec<crate::ShutdownReport> {
        futures::future::join_all(self.inner.clients.iter().map(|c| c.shutdown(timeout))).await
    }

    /// How many nodes must grant a lock: `nodes() / 2 + 1`.
    ///
    /// # Example
    ///
    /// ```rust,no_run
    /// # async fn demo(clients: Vec<lockwise::Client>) -> lockwise::Result<()> {
    /// let set = lockwise::RedLockSet::new(&clients);
    /// println!("{} of {} nodes must grant a lock", set.quorum(), set.nodes());
    /// # Ok(()) }
    /// ```
    pub fn quorum(&self) -> usize {
        quorum(self.inner.clients.len())
    }

    /// The set's options.
    ///
    /// # Example
    ///
    /// ```rust,no_run
    /// # async fn demo(clients: Vec<lockwise::Client>) -> lockwise::Result<()> {
    /// let set = lockwise::RedLockSet::new(&clients);
    /// println!("{:?}", set.options());
    /// # Ok(()) }
    /// ```
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

/// The drift allowance of the Redlock algorithm: 1% of the TTL plus 2 ms.
fn drift(ttl: Duration) -> Duration {
    ttl / 100 + Duration::from_millis(2)
}

/// N/2 + 1.
fn quorum(n: usize) -> usize {
    n / 2 + 1
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
}

//! [`Admin`]: read-only views of every lock of a namespace, leak checks and forced unlocks,
//! for operators and for tests (the `lockwise` CLI is a thin layer over it).
//!
//! It reads the key layout back from `keys.rs` ([`Role`](crate::wire::keys::Role)): a SCAN with
//! `MATCH <ns>:*` on every master (bounded by a key limit), then a few reads per lock name.
//! Nothing here writes to Redis except [`Admin::force_unlock`], which calls the kinds' own
//! `force_unlock` methods.
//!
//!   mod.rs    the public types and `Admin`
//!   nodes.rs  the masters of the deployment: SCAN, PUBSUB NUMSUB per node
//!   read.rs   one lock name: its keys, holders, queue, waiters ([`LockInfo`])
//!   leaks.rs  keys without a TTL, stale fair-queue entries, holds of gone clients

mod leaks;
mod nodes;
mod read;
#[cfg(feature = "serde")]
mod ser;

use std::collections::BTreeSet;
use std::time::Duration;

use crate::error::{Error, Result};
use crate::wire::keys::{check_name, parse};
use crate::Client;

pub use leaks::{Leak, LeakReason, LeakReport, OwnerCheck};

/// Default number of keys one [`Admin::list`] or [`Admin::leaks`] call looks at, at most.
pub const DEFAULT_SCAN_LIMIT: usize = 10_000;

/// Operator views of the locks of one [`Client`]'s namespace; from [`Client::admin`].
///
/// Every call is bounded: the scans stop after [`scan_limit`](Self::scan_limit) keys (and
/// say so), and each lock name costs a few commands. Cheap to clone. With the `serde`
/// feature its results ([`Listing`], [`LockInfo`], [`LeakReport`], ...) implement
/// `serde::Serialize`, in the shape `lockwise --json` prints (durations as `*_ms`).
///
/// # Example
///
/// ```rust,no_run
/// # async fn demo(client: lockwise::Client) -> lockwise::Result<()> {
/// let admin = client.admin().scan_limit(1_000);
/// for lock in admin.list().await?.locks {
///     println!("{} ({}): contention {}", lock.name, lock.kind.as_str(), lock.contention());
/// }
/// for info in admin.inspect("orders:42").await? {
///     println!("{}: {} holders", info.kind.as_str(), info.holders.len());
/// }
/// for leak in admin.leaks().await?.leaks {
///     println!("{}: {}", leak.key, leak.reason.describe());
/// }
/// # Ok(()) }
/// ```
#[derive(Clone, Debug)]
pub struct Admin {
    client: Client,
    limit: usize,
    check_owners: bool,
}

/// Which lock kind a [`LockInfo`] describes, as far as the keys tell it.
///
/// # Example
///
/// ```rust,no_run
/// use lockwise::LockKind;
///
/// # async fn demo(client: lockwise::Client) -> lockwise::Result<()> {
/// for info in client.admin().inspect("jobs").await? {
///     match info.kind {
///         LockKind::Semaphore | LockKind::LeaseSemaphore => {
///             println!("{}: {:?} permits free", info.kind.as_str(), info.permits)
///         }
///         kind => println!("{}: {} holders", kind.as_str(), info.holders.len()),
///     }
/// }
/// # Ok(()) }
/// ```
#[non_exhaustive]
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum LockKind {
    /// A lock hash with no fair queue and no fencing counter: an `RLock`, a `MultiLock`
    /// member or a `RedLock` on this node (they share the hash and cannot be told apart).
    Lock,
    /// A lock hash with a fair queue (or a queue alone): a `FairLock`.
    FairLock,
    /// A lock hash with a fencing counter, or the counter alone: a `FencedLock`.
    FencedLock,
    /// A `CountDownLatch` that is not open yet.
    CountDownLatch,
    /// A `RwLock` (writer, readers or waiting writers).
    RwLock,
    /// A `Semaphore`.
    Semaphore,
    /// A `LeaseSemaphore`.
    LeaseSemaphore,
}

impl LockKind {
    /// The kind as the CLI prints it: `lock`, `fair`, `fenced`, `latch`, `rwlock`,
    /// `semaphore`, `leasesem`.
    ///
    /// # Example
    ///
    /// ```rust,no_run
    /// # async fn demo(client: lockwise::Client) -> lockwise::Result<()> {
    /// for lock in client.admin().list().await?.locks {
    ///     println!("{} [{}]", lock.name, lock.kind.as_str());
    /// }
    /// # Ok(()) }
    /// ```
    pub fn as_str(self) -> &'static str {
        match self {
            LockKind::Lock => "lock",
            LockKind::FairLock => "fair",
            LockKind::FencedLock => "fenced",
            LockKind::CountDownLatch => "latch",
            LockKind::RwLock => "rwlock",
            LockKind::Semaphore => "semaphore",
            LockKind::LeaseSemaphore => "leasesem",
        }
    }
}

/// How a [`Holder`] holds.
///
/// # Example
///
/// ```rust,no_run
/// use lockwise::HoldMode;
///
/// # async fn demo(client: lockwise::Client) -> lockwise::Result<()> {
/// for info in client.admin().inspect("catalog").await? {
///     let readers = info.holders.iter().filter(|h| h.mode == HoldMode::Read).count();
///     let writer = info.holders.iter().any(|h| h.mode == HoldMode::Write);
///     println!("{}: {readers} readers, writer: {writer}", info.kind.as_str());
/// }
/// # Ok(()) }
/// ```
#[non_exhaustive]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "serde", serde(rename_all = "lowercase"))]
pub enum HoldMode {
    /// A mutex hold (`RLock`, `FairLock`, `FencedLock`, `MultiLock`, `RedLock`).
    Exclusive,
    /// A `RwLock` write hold.
    Write,
    /// A `RwLock` read hold.
    Read,
    /// A `LeaseSemaphore` permit (the owner is the permit id).
    Lease,
}

impl HoldMode {
    /// `exclusive`, `write`, `read` or `lease`.
    ///
    /// # Example
    ///
    /// ```rust,no_run
    /// # async fn demo(client: lockwise::Client) -> lockwise::Result<()> {
    /// for info in client.admin().inspect("catalog").await? {
    ///     for holder in &info.holders {
    ///         println!("{} holds it ({})", holder.owner, holder.mode.as_str());
    ///     }
    /// }
    /// # Ok(()) }
    /// ```
    pub fn as_str(self) -> &'static str {
        match self {
            HoldMode::Exclusive => "exclusive",
            HoldMode::Write => "write",
            HoldMode::Read => "read",
            HoldMode::Lease => "lease",
        }
    }
}

/// One owner of a lock.
///
/// # Example
///
/// ```rust,no_run
/// # async fn demo(client: lockwise::Client) -> lockwise::Result<()> {
/// for info in client.admin().inspect("orders:42").await? {
///     for holder in &info.holders {
///         // No deadline of its own: the hold lives as long as the key.
///         let ends_in = holder.expires_in.or(info.ttl);
///         let mode = holder.mode.as_str();
///         println!("{} holds it {}x ({mode}), ends in {ends_in:?}", holder.owner, holder.count);
///     }
/// }
/// # Ok(()) }
/// ```
#[non_exhaustive]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Holder {
    /// The owner field, `<client uuid>:<task id>` (a permit id for a lease).
    pub owner: String,
    /// Hold count (re-entries).
    pub count: i64,
    /// How it holds.
    pub mode: HoldMode,
    /// Time until the hold ends by itself, where the hold has its own deadline (a reader, a
    /// leased permit); `None` when it lives as long as the key ([`LockInfo::ttl`]).
    #[cfg_attr(
        feature = "serde",
        serde(rename = "expires_in_ms", serialize_with = "ser::ms")
    )]
    pub expires_in: Option<Duration>,
}

/// A queued waiter: a `FairLock` queue entry or a `RwLock` waiting writer.
///
/// # Example
///
/// ```rust,no_run
/// # async fn demo(client: lockwise::Client) -> lockwise::Result<()> {
/// for info in client.admin().inspect("payments").await? {
///     println!("{}: {} queued", info.kind.as_str(), info.queue_len);
///     for entry in &info.queue {
///         match entry.deadline_in_ms {
///             Some(ms) if ms < 0 => println!("{} is stale ({} ms overdue)", entry.id, -ms),
///             Some(ms) => println!("{} waits, deadline in {ms} ms", entry.id),
///             None => println!("{} has no deadline", entry.id),
///         }
///     }
/// }
/// # Ok(()) }
/// ```
#[non_exhaustive]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QueueEntry {
    /// The waiter id (`<owner>:<n>` for a fair waiter, the owner for a writer).
    pub id: String,
    /// Milliseconds until the entry's deadline (negative: passed, the entry is stale);
    /// `None` when it has no deadline.
    pub deadline_in_ms: Option<i64>,
}

/// One Redis key of a lock.
///
/// # Example
///
/// ```rust,no_run
/// # async fn demo(client: lockwise::Client) -> lockwise::Result<()> {
/// for info in client.admin().inspect("orders:42").await? {
///     for key in &info.keys {
///         match key.ttl {
///             Some(ttl) => println!("{} ({}) expires in {ttl:?}", key.key, key.role),
///             None => println!("{} ({}) has no TTL", key.key, key.role),
///         }
///     }
/// }
/// # Ok(()) }
/// ```
#[non_exhaustive]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyInfo {
    /// The key.
    pub key: String,
    /// Its role in the layout (`lock`, `fence`, `fairqueue`, ...: see [`guide::internals`](crate::guide::internals)).
    pub role: &'static str,
    /// Its time to live; `None` when it has none.
    #[cfg_attr(
        feature = "serde",
        serde(rename = "ttl_ms", serialize_with = "ser::ms")
    )]
    pub ttl: Option<Duration>,
}

/// Everything the keys say about one lock of one kind.
///
/// # Example
///
/// ```rust,no_run
/// # async fn demo(client: lockwise::Client) -> lockwise::Result<()> {
/// for info in client.admin().inspect("orders:42").await? {
///     let (kind, holders) = (info.kind.as_str(), info.holders.len());
///     println!("{} [{kind}]: {holders} holders, ttl {:?}", info.name, info.ttl);
///     println!("{} waiters, {} queued", info.waiters, info.queue_len);
///     if let Some(token) = info.token {
///         println!("fencing token {token}");
///     }
/// }
/// # Ok(()) }
/// ```
#[non_exhaustive]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LockInfo {
    /// The lock name.
    pub name: String,
    /// The kind.
    pub kind: LockKind,
    /// Who holds it, with hold counts.
    pub holders: Vec<Holder>,
    /// The time to live of the kind's main key (lock hash, writer or readers hash, latch,
    /// permits); `None` when that key is absent or has no TTL.
    #[cfg_attr(
        feature = "serde",
        serde(rename = "ttl_ms", serialize_with = "ser::ms")
    )]
    pub ttl: Option<Duration>,
    /// Length of the fair queue, or number of waiting writers of a `RwLock`.
    pub queue_len: u64,
    /// The first entries of that queue (at most 100), oldest first for a fair queue.
    pub queue: Vec<QueueEntry>,
    /// Connections subscribed to the kind's wakeup channels (`PUBSUB NUMSUB`, or
    /// `PUBSUB SHARDNUMSUB` on a Cluster with sharded pub/sub): the waiters now blocked.
    pub waiters: u64,
    /// `FencedLock`: the holder's fencing token while it is held, else the last token
    /// handed out (the fencing counter).
    pub token: Option<u64>,
    /// Available permits (`Semaphore`, `LeaseSemaphore`) or the remaining count
    /// (`CountDownLatch`).
    pub permits: Option<i64>,
    /// Every key of this lock that exists.
    pub keys: Vec<KeyInfo>,
}

impl LockInfo {
    /// How contended the lock is: waiters subscribed plus queued entries. [`Admin::list`]
    /// sorts by it, largest first.
    ///
    /// # Example
    ///
    /// ```rust,no_run
    /// # async fn demo(client: lockwise::Client) -> lockwise::Result<()> {
    /// let locks = client.admin().list().await?.locks;
    /// if let Some(busiest) = locks.iter().max_by_key(|l| l.contention()) {
    ///     println!("{}: {} waiting", busiest.name, busiest.contention());
    /// }
    /// # Ok(()) }
    /// ```
    pub fn contention(&self) -> u64 {
        self.waiters + self.queue_len
    }
}

/// What [`Admin::list`] found.
///
/// # Example
///
/// ```rust,no_run
/// # async fn demo(client: lockwise::Client) -> lockwise::Result<()> {
/// let listing = client.admin().list().await?;
/// if !listing.complete {
///     eprintln!("partial listing: stopped after {} keys", listing.scanned);
/// }
/// // Most contended first.
/// for lock in listing.locks.iter().take(10) {
///     println!("{} ({}): contention {}", lock.name, lock.kind.as_str(), lock.contention());
/// }
/// for (name, why) in &listing.unreadable {
///     eprintln!("cannot read {name}: {why}");
/// }
/// # Ok(()) }
/// ```
#[non_exhaustive]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
#[derive(Debug, Clone)]
pub struct Listing {
    /// The locks, most contended first (then most holders, then by name).
    pub locks: Vec<LockInfo>,
    /// How many keys the scan looked at.
    pub scanned: usize,
    /// Whether the scan went through the whole keyspace (false: it stopped at the limit).
    pub complete: bool,
    /// Names that could not be read as a lockwise kind (a key of another type, or another
    /// program's value, under a lockwise key name), with the reason; they are left out of
    /// [`locks`](Self::locks) instead of failing the whole listing.
    #[cfg_attr(feature = "serde", serde(serialize_with = "ser::unreadable"))]
    pub unreadable: Vec<(String, String)>,
}

impl Client {
    /// Operator views of this client's namespace: list, inspect, leaks, force unlock (see
    /// [`Admin`]). Cheap; nothing is sent to Redis.
    ///
    /// # Example
    ///
    /// ```rust,no_run
    /// # async fn demo(client: lockwise::Client) -> lockwise::Result<()> {
    /// let admin = client.admin();
    /// for lock in admin.list().await?.locks {
    ///     println!("{}: {} holders", lock.name, lock.holders.len());
    /// }
    /// # Ok(()) }
    /// ```
    pub fn admin(&self) -> Admin {
        Admin {
            client: self.clone(),
            limit: DEFAULT_SCAN_LIMIT,
            check_owners: true,
        }
    }
}

impl Admin {
    /// How many keys [`list`](Self::list) and [`leaks`](Self::leaks) look at, at most
    /// (default [`DEFAULT_SCAN_LIMIT`]); past it they stop and report the scan as partial.
    /// 0 is refused by those calls with [`Error::InvalidArgument`].
    ///
    /// # Example
    ///
    /// ```rust,no_run
    /// # async fn demo(client: lockwise::Client) -> lockwise::Result<()> {
    /// let listing = client.admin().scan_limit(1_000).list().await?;
    /// if !listing.complete {
    ///     eprintln!("partial: stopped after {} keys", listing.scanned);
    /// }
    /// # Ok(()) }
    /// ```
    pub fn scan_limit(mut self, keys: usize) -> Admin {
        self.limit = keys;
        self
    }

    /// Whether [`leaks`](Self::leaks) matches holds to live clients (default on; see
    /// there). Turn it off where `RedLock` is used.
    ///
    /// # Example
    ///
    /// ```rust,no_run
    /// # async fn demo(client: lockwise::Client) -> lockwise::Result<()> {
    /// // Where RedLock is used, do not match holds to live clients.
    /// let report = client.admin().owner_check(false).leaks().await?;
    /// println!("{} leaks", report.leaks.len());
    /// # Ok(()) }
    /// ```
    pub fn owner_check(mut self, on: bool) -> Admin {
        self.check_owners = on;
        self
    }

    /// Every lock of the namespace found within the scan limit (SCAN `MATCH <ns>:*`
    /// on every master, never KEYS), most contended first. Costs the scan plus about 20
    /// commands per lock name.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] when the scan limit is 0; [`Error::Redis`] when Redis
    /// fails or refuses a command (SCAN, PUBSUB). A name whose keys cannot be read (a key of a
    /// wrong type under a lockwise name) does not fail the listing: it is reported in
    /// [`Listing::unreadable`].
    ///
    /// # Cancel safety
    /// Read-only: dropping the future changes nothing.
    ///
    /// # Example
    ///
    /// ```rust,no_run
    /// # async fn demo(client: lockwise::Client) -> lockwise::Result<()> {
    /// let listing = client.admin().list().await?;
    /// for lock in listing.locks.iter().take(5) {
    ///     println!("{}: contention {}", lock.name, lock.contention());
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn list(&self) -> Result<Listing> {
        let scan = nodes::scan(self.client.core(), self.limit).await?;
        let names: BTreeSet<String> = scan
            .keys
            .iter()
            .filter_map(|k| parse(self.client.namespace(), k))
            // Presence keys name clients, not locks.
            .filter(|(role, _)| *role != crate::wire::keys::Role::Client)
            .map(|(_, name)| name)
            .collect();
        let (mut locks, mut unreadable) = (Vec::new(), Vec::new());
        for name in names {
            match read::lock_infos(self.client.core(), &name).await {
                Ok(infos) => locks.extend(infos),
                Err(Error::UnexpectedReply(why)) => unreadable.push((name, why)),
                Err(e) => return Err(e),
            }
        }
        locks.sort_by(|a, b| {
            b.contention()
                .cmp(&a.contention())
                .then(b.holders.len().cmp(&a.holders.len()))
                .then_with(|| a.name.cmp(&b.name))
                .then(a.kind.cmp(&b.kind))
        });
        Ok(Listing {
            locks,
            scanned: scan.keys.len(),
            complete: scan.complete,
            unreadable,
        })
    }

    /// Everything about the locks named `name`: one [`LockInfo`] per kind whose keys exist
    /// (empty when none do). Reads the name's keys directly, no scan.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for an invalid name; [`Error::Redis`] when Redis fails;
    /// [`Error::UnexpectedReply`] for a key of a wrong type under the name.
    ///
    /// # Cancel safety
    /// Read-only: dropping the future changes nothing.
    ///
    /// # Example
    ///
    /// ```rust,no_run
    /// # async fn demo(client: lockwise::Client) -> lockwise::Result<()> {
    /// for info in client.admin().inspect("orders:42").await? {
    ///     println!("{}: {} holders, ttl {:?}", info.kind.as_str(), info.holders.len(), info.ttl);
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn inspect(&self, name: &str) -> Result<Vec<LockInfo>> {
        check_name(name)?;
        read::lock_infos(self.client.core(), name).await
    }

    /// Looks for leaks within the scan limit: keys of the namespace without a TTL (except
    /// fencing counters, TTL-less by design), fair-queue entries whose deadline passed or
    /// that have none, and, unless [`owner_check`](Self::owner_check) is off, holds whose
    /// owner client is gone.
    ///
    /// The owner check looks up, for each owner id holding a lock (the `<uuid>` of an owner
    /// field `<uuid>:<task>`), its presence key `<ns>:client:{<uuid>}`: every live `Client`
    /// keeps one for its own id and one for each `RedLockSet` over it, with its watchdog
    /// timeout as TTL, refreshed every third of it and deleted when the client shuts down.
    /// One `EXISTS` per owner id; it works on every server version and deployment and needs
    /// no rights beyond the library's own. A client cut off from Redis for longer than its
    /// watchdog timeout looks gone (its watchdog holds are then expiring too).
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] when the scan limit is 0; [`Error::Redis`] when Redis
    /// fails or refuses SCAN; [`Error::UnexpectedReply`] for a key of a wrong type.
    ///
    /// # Cancel safety
    /// Read-only: dropping the future changes nothing.
    ///
    /// # Example
    ///
    /// ```rust,no_run
    /// # async fn demo(client: lockwise::Client) -> lockwise::Result<()> {
    /// let report = client.admin().leaks().await?;
    /// for leak in &report.leaks {
    ///     eprintln!("{}: {}", leak.key, leak.reason.describe());
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn leaks(&self) -> Result<LeakReport> {
        leaks::find(&self.client, self.limit, self.check_owners).await
    }

    /// Releases the locks named `name` whoever holds them, and wakes their waiters: the
    /// mutex (through [`FairLock::force_unlock`](crate::FairLock::force_unlock) when it has
    /// a fair queue, else [`RLock::force_unlock`](crate::RLock::force_unlock)) and the
    /// [`RwLock`](crate::RwLock::force_unlock). Returns the kinds that were held. Semaphores
    /// and latches have no owner to unlock and are left alone.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for an invalid name; [`Error::Redis`] when Redis fails;
    /// [`Error::UnexpectedReply`] for a key of a wrong type under the name.
    ///
    /// # Cancel safety
    /// Dropping the future may or may not have released the locks.
    ///
    /// # Example
    ///
    /// ```rust,no_run
    /// # async fn demo(client: lockwise::Client) -> lockwise::Result<()> {
    /// let released = client.admin().force_unlock("orders:42").await?;
    /// for kind in released {
    ///     println!("released the {} lock", kind.as_str());
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn force_unlock(&self, name: &str) -> Result<Vec<LockKind>> {
        check_name(name)?;
        let mut released = Vec::new();
        let infos = read::lock_infos(self.client.core(), name).await?;
        let fair = infos.iter().any(|i| i.kind == LockKind::FairLock);
        if fair {
            if self.client.fair_lock(name).force_unlock().await? {
                released.push(LockKind::FairLock);
            }
        } else if self.client.lock(name).force_unlock().await? {
            let fenced = infos.iter().any(|i| i.kind == LockKind::FencedLock);
            released.push(if fenced {
                LockKind::FencedLock
            } else {
                LockKind::Lock
            });
        }
        if self.client.rw_lock(name).force_unlock().await? {
            released.push(LockKind::RwLock);
        }
        Ok(released)
    }
}

/// A reply that did not have the expected shape.
fn unexpected(what: &str, e: impl std::fmt::Display) -> Error {
    Error::UnexpectedReply(format!("{what}: {e}"))
}

//! What the views report: a lock's [`LockInfo`] with its [`LockKind`], [`Holder`]s
//! ([`HoldMode`]), [`QueueEntry`]s and [`KeyInfo`]s, and the [`Listing`] of a namespace;
//! with the `serde` feature, the two helpers their derived `Serialize` writes durations
//! (whole milliseconds) and unreadable names with.

use std::time::Duration;

#[cfg(feature = "serde")]
use serde::{ser::SerializeMap, Serialize, Serializer};

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
        serde(rename = "expires_in_ms", serialize_with = "ms")
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
    /// The waiter id (`<owner>:g<n>` or `<owner>:<n>` for a fair waiter, the owner for a
    /// writer).
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
    #[cfg_attr(feature = "serde", serde(rename = "ttl_ms", serialize_with = "ms"))]
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
    #[cfg_attr(feature = "serde", serde(rename = "ttl_ms", serialize_with = "ms"))]
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
    /// How contended the lock is: waiters subscribed plus queued entries.
    /// [`Admin::list`](super::Admin::list) sorts by it, largest first.
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

/// What [`Admin::list`](super::Admin::list) found.
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
    #[cfg_attr(feature = "serde", serde(serialize_with = "unreadable"))]
    pub unreadable: Vec<(String, String)>,
}

/// An optional duration as whole milliseconds (`null` when absent).
#[cfg(feature = "serde")]
fn ms<S: Serializer>(d: &Option<Duration>, s: S) -> Result<S::Ok, S::Error> {
    match d {
        Some(d) => s.serialize_some(&(d.as_millis() as u64)),
        None => s.serialize_none(),
    }
}

/// `(name, error)` pairs as `[{"name": .., "error": ..}]`.
#[cfg(feature = "serde")]
fn unreadable<S: Serializer>(pairs: &[(String, String)], s: S) -> Result<S::Ok, S::Error> {
    struct Entry<'a>(&'a str, &'a str);
    impl Serialize for Entry<'_> {
        fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
            let mut m = s.serialize_map(Some(2))?;
            m.serialize_entry("name", self.0)?;
            m.serialize_entry("error", self.1)?;
            m.end()
        }
    }
    s.collect_seq(pairs.iter().map(|(n, e)| Entry(n, e)))
}

//! [`Admin`] and its calls: [`list`](Admin::list), [`inspect`](Admin::inspect),
//! [`leaks`](Admin::leaks) and [`force_unlock`](Admin::force_unlock), each a few steps over
//! the files beside it (`nodes.rs` to scan, `read.rs` per lock name, `leaks.rs`).

use std::collections::BTreeSet;

use super::{leaks, nodes, read, Holder, LeakReport, Listing, LockInfo, LockKind};
use crate::error::{Error, Result};
use crate::wire::keys::{check_name, parse};
use crate::Client;

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
    /// there). Every live `Client`, and each `RedLockSet` over it, keeps a presence key, so
    /// RedLock holds are matched too; turn it off to report only keys without a TTL and
    /// stale fair-queue entries (one `EXISTS` per owner less).
    ///
    /// # Example
    ///
    /// ```rust,no_run
    /// # async fn demo(client: lockwise::Client) -> lockwise::Result<()> {
    /// // Keys without a TTL and stale queue entries only.
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
        let bare = crate::layout::admin(self.client.core().layout).bare_names;
        let names: BTreeSet<String> = match bare {
            // Every hash: the names are the keys themselves.
            true => scan.keys.iter().cloned().collect(),
            false => names,
        };
        let (mut locks, mut unreadable) = (Vec::new(), Vec::new());
        for name in names {
            match read::lock_infos(self.client.core(), &name).await {
                // Among bare names a hash is a lock when each field is an owner
                // (`<client uuid>:<thread>`): other hashes are the application's.
                Ok(infos) if bare => locks.extend(
                    infos
                        .into_iter()
                        .filter(|i| !i.holders.is_empty() && i.holders.iter().all(is_owner)),
                ),
                Err(Error::UnexpectedReply(_)) if bare => {}
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
        let rw = infos.iter().any(|i| i.kind == LockKind::RwLock);
        let rw_in_lock_hash = crate::layout::rw_in_lock_hash(self.client.core().layout);
        if rw && rw_in_lock_hash {
            // The read-write lock is the name's hash itself.
            if self.client.rw_lock(name).force_unlock().await? {
                released.push(LockKind::RwLock);
            }
        } else if fair {
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
        if !rw_in_lock_hash && self.client.rw_lock(name).force_unlock().await? {
            released.push(LockKind::RwLock);
        }
        Ok(released)
    }
}

/// Whether a hash field names an owner as both lockwise and Redisson write them:
/// `<client uuid>:<thread or task>`.
fn is_owner(holder: &Holder) -> bool {
    holder
        .owner
        .split_once(':')
        .is_some_and(|(id, rest)| !rest.is_empty() && uuid::Uuid::try_parse(id).is_ok())
}

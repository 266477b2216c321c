//! Leak checks: keys without a TTL, stale fair-queue entries, holds of gone clients.

use std::collections::{BTreeSet, HashSet};

use futures::{StreamExt, TryStreamExt};

use super::{nodes, read, HoldMode, LockKind};
use crate::engine::presence::Presence;
use crate::error::Result;
use crate::wire::keys::{parse, Role};
use crate::Client;

/// PTTL calls in flight at once during a leak scan.
const IN_FLIGHT: usize = 32;

/// What [`Admin::leaks`](super::Admin::leaks) found.
///
/// # Example
///
/// ```rust,no_run
/// # async fn demo(client: lockwise::Client) -> lockwise::Result<()> {
/// let report = client.admin().leaks().await?;
/// println!("{} leaks in {} keys scanned", report.leaks.len(), report.scanned);
/// if !report.complete {
///     eprintln!("the scan stopped at its limit: there may be more");
/// }
/// for leak in &report.leaks {
///     println!("{}: {}", leak.key, leak.reason.describe());
/// }
/// # Ok(()) }
/// ```
#[non_exhaustive]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
#[derive(Debug, Clone)]
pub struct LeakReport {
    /// The leaks, in key order.
    pub leaks: Vec<Leak>,
    /// How many keys the scan looked at.
    pub scanned: usize,
    /// Whether the scan went through the whole keyspace (false: it stopped at the limit,
    /// and leaks past it were not looked for).
    pub complete: bool,
    /// Whether holds were matched to live clients.
    pub owner_check: OwnerCheck,
}

/// Whether the gone-owner check ran.
///
/// # Example
///
/// ```rust,no_run
/// use lockwise::OwnerCheck;
///
/// # async fn demo(client: lockwise::Client) -> lockwise::Result<()> {
/// // The owner check is on by default; `owner_check(false)` skips it.
/// let report = client.admin().owner_check(true).leaks().await?;
/// match &report.owner_check {
///     OwnerCheck::Done { live_clients } => println!("{live_clients} owners are alive"),
///     OwnerCheck::Skipped { reason } => println!("owner check skipped: {reason}"),
///     _ => {}
/// }
/// # Ok(()) }
/// ```
#[non_exhaustive]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
#[derive(Debug, Clone, PartialEq, Eq)]
#[cfg_attr(feature = "serde", serde(tag = "check", rename_all = "snake_case"))]
pub enum OwnerCheck {
    /// It ran: of the owner ids holding locks, `live_clients` have a live client.
    Done {
        /// Distinct owner ids (clients, `RedLockSet`s) of the holds checked whose presence
        /// key exists.
        live_clients: usize,
    },
    /// It did not run, for this reason (not asked for).
    Skipped {
        /// Why.
        reason: String,
    },
}

/// One leak.
///
/// # Example
///
/// ```rust,no_run
/// # async fn demo(client: lockwise::Client) -> lockwise::Result<()> {
/// for leak in client.admin().leaks().await?.leaks {
///     // `name` is `None` for a key outside lockwise's layout.
///     match &leak.name {
///         Some(name) => println!("lock {name}, key {}: {}", leak.key, leak.reason.describe()),
///         None => println!("key {}: {}", leak.key, leak.reason.describe()),
///     }
/// }
/// # Ok(()) }
/// ```
#[non_exhaustive]
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Leak {
    /// The key concerned.
    pub key: String,
    /// The lock name, when the key is one of lockwise's layout.
    pub name: Option<String>,
    /// What is wrong.
    pub reason: LeakReason,
}

/// What is wrong with a [`Leak`]'s key.
///
/// # Example
///
/// ```rust,no_run
/// use lockwise::LeakReason;
///
/// # async fn demo(client: lockwise::Client) -> lockwise::Result<()> {
/// for leak in client.admin().leaks().await?.leaks {
///     match &leak.reason {
///         LeakReason::NoTtl => eprintln!("{} never expires", leak.key),
///         LeakReason::GoneOwner { owner } => eprintln!("{} held by dead {owner}", leak.key),
///         other => eprintln!("{}: {}", leak.key, other.describe()),
///     }
/// }
/// # Ok(()) }
/// ```
#[non_exhaustive]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
#[derive(Debug, Clone, PartialEq, Eq)]
#[cfg_attr(feature = "serde", serde(tag = "kind", rename_all = "snake_case"))]
pub enum LeakReason {
    /// The key has no TTL and is not a fencing counter: nothing will ever remove it (a lock
    /// hash without a TTL is a deadlock waiting to happen).
    NoTtl,
    /// A fair-queue entry whose deadline passed `overdue_ms` ago; the next fair call on the
    /// lock purges it, but until then it stands in front of live waiters.
    StaleQueueEntry {
        /// The waiter id.
        waiter: String,
        /// How long ago its deadline passed.
        overdue_ms: i64,
    },
    /// A fair-queue entry with no deadline at all: no script will ever purge it.
    QueueEntryWithoutDeadline {
        /// The waiter id.
        waiter: String,
    },
    /// A hold whose owner's client is gone: its presence key (refreshed by a live client
    /// every third of its watchdog timeout) expired or was deleted at shutdown, so a crashed,
    /// killed or cut-off process, or a dropped `Client`. A lease hold lasts until its lease
    /// runs out; a watchdog hold, at most the watchdog timeout.
    GoneOwner {
        /// The owner field, `<client uuid>:<task id>`.
        owner: String,
    },
}

impl LeakReason {
    /// A one-line description, as the CLI prints it.
    ///
    /// # Example
    ///
    /// ```rust,no_run
    /// # async fn demo(client: lockwise::Client) -> lockwise::Result<()> {
    /// for leak in client.admin().leaks().await?.leaks {
    ///     eprintln!("{}: {}", leak.key, leak.reason.describe());
    /// }
    /// # Ok(()) }
    /// ```
    pub fn describe(&self) -> String {
        match self {
            LeakReason::NoTtl => "no TTL".to_string(),
            LeakReason::StaleQueueEntry { waiter, overdue_ms } => {
                format!("stale fair-queue entry {waiter} (deadline passed {overdue_ms} ms ago)")
            }
            LeakReason::QueueEntryWithoutDeadline { waiter } => {
                format!("fair-queue entry {waiter} has no deadline")
            }
            LeakReason::GoneOwner { owner } => {
                format!("held by {owner}, whose client is gone")
            }
        }
    }
}

pub(super) async fn find(client: &Client, limit: usize, check_owners: bool) -> Result<LeakReport> {
    let core = client.core();
    let ns = client.namespace();
    let scan = nodes::scan(core, limit).await?;
    let ttls: Vec<(String, i64)> = futures::stream::iter(scan.keys.iter().cloned())
        .map(|key| async move {
            let pttl: i64 = redis::cmd("PTTL")
                .arg(&key)
                .query_async(&mut core.conn.clone())
                .await?;
            Ok::<_, crate::Error>((key, pttl))
        })
        .buffered(IN_FLIGHT)
        .try_collect()
        .await?;
    let mut leaks = Vec::new();
    let mut queued = BTreeSet::new();
    let mut held = BTreeSet::new();
    for (key, pttl) in ttls {
        let parsed = parse(ns, &key);
        if let Some((role, name)) = &parsed {
            match role {
                Role::FairQueue => {
                    queued.insert(name.clone());
                }
                Role::Lock | Role::RwWrite | Role::RwRead => {
                    held.insert(name.clone());
                }
                _ => {}
            }
        }
        // -1: no TTL; -2: gone since the scan.
        if pttl == -1 && !matches!(parsed, Some((Role::Fence, _))) {
            leaks.push(Leak {
                key,
                name: parsed.map(|(_, n)| n),
                reason: LeakReason::NoTtl,
            });
        }
    }
    for name in &queued {
        for info in read::lock_infos(core, name).await? {
            if info.kind != LockKind::FairLock {
                continue;
            }
            let key = crate::wire::keys::Keys::new(ns, name).queue;
            for entry in info.queue {
                let reason = match entry.deadline_in_ms {
                    None => LeakReason::QueueEntryWithoutDeadline { waiter: entry.id },
                    Some(ms) if ms < 0 => LeakReason::StaleQueueEntry {
                        waiter: entry.id,
                        overdue_ms: -ms,
                    },
                    Some(_) => continue,
                };
                leaks.push(Leak {
                    key: key.clone(),
                    name: Some(name.clone()),
                    reason,
                });
            }
        }
    }
    let owner_check = if !check_owners {
        OwnerCheck::Skipped {
            reason: "not asked for".to_string(),
        }
    } else {
        // Every holder of a hold kind, by owner id (the part before the first `:`).
        let mut holders = Vec::new();
        for name in &held {
            for info in read::lock_infos(core, name).await? {
                let key = info
                    .keys
                    .iter()
                    .find(|k| matches!(k.role, "lock" | "rwwrite" | "rwread"))
                    .map(|k| k.key.clone())
                    .unwrap_or_default();
                for holder in info.holders {
                    if holder.mode == HoldMode::Lease {
                        continue;
                    }
                    let id = holder.owner.split(':').next().unwrap_or_default();
                    if uuid::Uuid::parse_str(id).is_ok() {
                        holders.push((id.to_string(), name.clone(), key.clone(), holder.owner));
                    }
                }
            }
        }
        let ids: BTreeSet<&str> = holders.iter().map(|h| h.0.as_str()).collect();
        let live = present(client, ids).await?;
        for (id, name, key, owner) in holders {
            if !live.contains(&id) {
                leaks.push(Leak {
                    key,
                    name: Some(name),
                    reason: LeakReason::GoneOwner { owner },
                });
            }
        }
        OwnerCheck::Done {
            live_clients: live.len(),
        }
    };
    leaks.sort_by(|a, b| a.key.cmp(&b.key));
    Ok(LeakReport {
        leaks,
        scanned: scan.keys.len(),
        complete: scan.complete,
        owner_check,
    })
}

/// The owner ids among `ids` whose presence key (`<ns>:client:{<id>}`, kept by a live
/// client for its own id and its `RedLockSet`s' ids) exists.
async fn present(client: &Client, ids: BTreeSet<&str>) -> Result<HashSet<String>> {
    let core = client.core();
    let found: Vec<(String, bool)> = futures::stream::iter(ids)
        .map(|id| async move {
            let key = Presence::key(client.namespace(), id);
            let exists: bool = redis::cmd("EXISTS")
                .arg(&key)
                .query_async(&mut core.conn.clone())
                .await?;
            Ok::<_, crate::Error>((id.to_string(), exists))
        })
        .buffered(IN_FLIGHT)
        .try_collect()
        .await?;
    Ok(found
        .into_iter()
        .filter_map(|(id, exists)| exists.then_some(id))
        .collect())
}

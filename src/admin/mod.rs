//! [`Admin`]: read-only views of every lock of a namespace, leak checks and forced unlocks,
//! for operators and for tests (the `lockwise` CLI is a thin layer over it).
//!
//! It reads the key layout back from `keys.rs` ([`Role`](crate::wire::keys::Role)): a SCAN with
//! `MATCH <ns>:*` on every master (bounded by a key limit), then a few reads per lock name.
//! Nothing here writes to Redis except [`Admin::force_unlock`], which calls the kinds' own
//! `force_unlock` methods.
//!
//!   mod.rs    the public names, and what the files share (a reply of the wrong shape)
//!   calls.rs  `Admin` and its calls
//!   info.rs   what they report: `LockInfo` and its parts, `Listing`
//!   nodes.rs  the masters of the deployment: SCAN, PUBSUB NUMSUB per node
//!   read.rs   one lock name: its keys, holders, queue, waiters ([`LockInfo`])
//!   leaks.rs  keys without a TTL, stale fair-queue entries, holds of gone clients
//!   ser.rs    (`serde` feature) the hand-written `Serialize` of `LockKind` and `Leak`

mod calls;
mod info;
mod leaks;
mod nodes;
mod read;
#[cfg(feature = "serde")]
mod ser;

use crate::error::Error;

pub use calls::{Admin, DEFAULT_SCAN_LIMIT};
pub use info::{HoldMode, Holder, KeyInfo, Listing, LockInfo, LockKind, QueueEntry};
pub use leaks::{Leak, LeakReason, LeakReport, OwnerCheck};

/// A reply that did not have the expected shape.
fn unexpected(what: &str, e: impl std::fmt::Display) -> Error {
    Error::UnexpectedReply(format!("{what}: {e}"))
}

//! Every decision that depends on the client's [`KeyLayout`], asked here and answered by
//! one file per layout ([`lockwise`], [`redisson`]): the names of a lock's keys and channels
//! and the rule for a name, the lock acquires, how a hold is released ([`ReleaseSpec`]),
//! force unlocked and moved to another owner, what a message heard asks of local waiters,
//! the synchronizers' scripts, what the admin views scan, which scripts the ACL check asks
//! about, and which options a layout refuses. The engine, the kinds, the admin views and the
//! builder name no layout: they ask these functions with the client's.
//!
//! Below the engine and the deployments, above the wire (whose names and scripts the
//! answers are made of). The [`KeyLayout`] type itself lies lower still, in
//! `key_layout.rs`: the error type names it.
//!
//! A kind's Redisson twin is a function here (the lock and fenced lock acquires: [`lock`],
//! [`fenced_lock`]) or a table (the synchronizers: [`semaphore`], [`lease_semaphore`],
//! [`latch`]; the admin views: [`admin`]). Two locks speak a different protocol in
//! Redisson's layout, not only other names and scripts: the read-write lock is the name's
//! hash ([`rw_in_lock_hash`]) and the fair lock has no handoff ([`fair_handoff`]); their
//! twins are `lock/rwlock/redisson.rs` and `lock/fair/redisson.rs`, chosen by those answers.
//! `tests/project/layout.rs` fails when a file outside this room names a layout.

mod lockwise;
pub(crate) mod redisson;
mod spec;

pub(crate) use spec::{
    AdminLayout, Arg, AttemptArgs, Call, LatchLayout, LeaseSemaphoreLayout, MessageWake,
    ReleaseSpec, ScriptCall, SemaphoreLayout,
};

use crate::error::Result;
use crate::key_layout::KeyLayout;
use crate::wire::keys::{check_name as check_any_name, ClaimKeys, Keys};
use crate::wire::scripts::{Script, LOCK};

/// The keys of the lock named `name` (`namespace` is lockwise's only).
pub(crate) fn keys(layout: KeyLayout, namespace: &str, name: &str) -> Keys {
    match layout {
        KeyLayout::Redisson => Keys::with_names(Some(redisson::key), namespace, name),
        _ => Keys::new(namespace, name),
    }
}

/// Whether `name` may name an object (`latch`: a count-down latch's): every layout's bounds,
/// and Redisson's own rule in its layout ([`redisson::check_name`]).
pub(crate) fn check_name(layout: KeyLayout, name: &str, latch: bool) -> Result<()> {
    check_any_name(name)?;
    match layout {
        KeyLayout::Redisson => redisson::check_name(name, latch),
        _ => Ok(()),
    }
}

/// Whether the layout keeps overtake claim queues (lockwise's does; Redisson's format has
/// no place for them, and its clients would not honour them).
pub(crate) fn has_claims(layout: KeyLayout) -> bool {
    layout != KeyLayout::Redisson
}

/// One attempt of `lua/lock.lua` on the lock hash `key`, with the claim queue in a layout
/// that keeps one: without it the script is Redisson's RLock acquire, byte for byte in its
/// effects.
pub(crate) fn lock<'a>(
    layout: KeyLayout,
    key: &'a str,
    claims: &'a ClaimKeys,
    a: &'a AttemptArgs,
) -> ScriptCall<'a> {
    let mut keys = vec![key];
    if has_claims(layout) {
        keys.extend([claims.queue.as_str(), claims.deadlines.as_str()]);
    }
    ScriptCall {
        script: &LOCK,
        keys,
        args: vec![
            Arg::Int(a.lease_ms),
            Arg::Str(&a.owner),
            Arg::Int(a.claim_ms),
            Arg::Int(a.waited_ms),
        ],
    }
}

/// One attempt of a fenced lock on the lock hash `key` and its counter `fence`: it answers
/// `[1, holds, token]` when granted.
pub(crate) fn fenced_lock<'a>(
    layout: KeyLayout,
    key: &'a str,
    fence: &'a str,
    claims: &'a ClaimKeys,
    a: &'a AttemptArgs,
) -> ScriptCall<'a> {
    match layout {
        KeyLayout::Redisson => redisson::fenced_lock(key, fence, a),
        _ => lockwise::fenced_lock(key, fence, claims, a),
    }
}

/// The release of a hold counted in the name's lock hash (`keys.lock`); `message` is the
/// releasing client's id (lockwise's layout publishes it so the client skips its echo).
pub(crate) fn release(layout: KeyLayout, keys: &Keys, message: &str) -> ReleaseSpec {
    match layout {
        KeyLayout::Redisson => ReleaseSpec::redisson_unlock(keys),
        _ => ReleaseSpec::unlock(keys, message),
    }
}

/// The release of a fair lock's hold: it hands the lock to the head of the queue.
pub(crate) fn fair_release(layout: KeyLayout, keys: &Keys, message: &str) -> ReleaseSpec {
    match layout {
        KeyLayout::Redisson => ReleaseSpec::redisson_fair_unlock(keys),
        _ => ReleaseSpec::unlock(keys, message).unbatched(),
    }
}

/// The call that deletes the lock hash of `keys` whoever holds it and wakes its waiters;
/// it answers 1 when the lock was held. `message` is the client's id, `publish` the
/// publish command.
pub(crate) fn force_unlock(
    layout: KeyLayout,
    keys: &Keys,
    message: &str,
    publish: &'static str,
) -> Call {
    match layout {
        KeyLayout::Redisson => redisson::force_unlock(keys, publish),
        _ => lockwise::force_unlock(keys, message, publish),
    }
}

/// The script that moves a hold from one owner field to another (`lua/rekey.lua` and its
/// layout's tail).
pub(crate) fn rekey(layout: KeyLayout) -> &'static Script {
    match layout {
        KeyLayout::Redisson => redisson::rekey(),
        _ => lockwise::rekey(),
    }
}

/// The field a hold of the owner field `from` takes when it moves to the owner field `to`.
pub(crate) fn moved_field(layout: KeyLayout, from: &str, to: String) -> String {
    match layout {
        KeyLayout::Redisson => redisson::moved_field(from, to),
        _ => to,
    }
}

/// How the layout keeps a counting semaphore.
pub(crate) fn semaphore(layout: KeyLayout) -> &'static SemaphoreLayout {
    match layout {
        KeyLayout::Redisson => &redisson::SEMAPHORE,
        _ => &lockwise::SEMAPHORE,
    }
}

/// How the layout keeps a permit-expirable semaphore.
pub(crate) fn lease_semaphore(layout: KeyLayout) -> &'static LeaseSemaphoreLayout {
    match layout {
        KeyLayout::Redisson => &redisson::LEASE_SEMAPHORE,
        _ => &lockwise::LEASE_SEMAPHORE,
    }
}

/// How the layout keeps a count-down latch.
pub(crate) fn latch(layout: KeyLayout) -> &'static LatchLayout {
    match layout {
        KeyLayout::Redisson => &redisson::LATCH,
        _ => &lockwise::LATCH,
    }
}

/// Every Redis command the scripts a client of the layout runs may run (read from their
/// source, [`crate::wire::scripts::commands_run`]): what the permission check at connect
/// asks for.
pub(crate) fn commands_run(layout: KeyLayout) -> std::collections::BTreeSet<String> {
    match layout {
        KeyLayout::Redisson => crate::wire::scripts::commands_run(redisson::runs),
        _ => crate::wire::scripts::commands_run(lockwise::runs),
    }
}

/// Whether a read-write lock is the name's lock hash itself, with a `mode` field
/// (Redisson's `RReadWriteLock`, served by `lock/rwlock/redisson.rs`), rather than keys of
/// its own (lockwise's).
pub(crate) fn rw_in_lock_hash(layout: KeyLayout) -> bool {
    layout == KeyLayout::Redisson
}

/// Whether a fair lock's release hands the lock to the head of its queue (lockwise's
/// handoff), rather than waking the head to take it itself (Redisson's `RFairLock`, served
/// by `lock/fair/redisson.rs`).
pub(crate) fn fair_handoff(layout: KeyLayout) -> bool {
    layout != KeyLayout::Redisson
}

/// How the admin views find and read the layout's locks.
pub(crate) fn admin(layout: KeyLayout) -> &'static AdminLayout {
    match layout {
        KeyLayout::Redisson => &redisson::ADMIN,
        _ => &lockwise::ADMIN,
    }
}

/// An option the layout cannot honour, chosen explicitly: `overtake_limit` where the layout
/// keeps no claim queues ([`has_claims`]). A default that does not apply is dropped instead.
pub(crate) fn check_overtake_limit(layout: KeyLayout, chosen: bool) -> Result<()> {
    match chosen && !has_claims(layout) {
        true => Err(crate::error::Error::Unsupported {
            what: "overtake_limit",
            layout,
        }),
        false => Ok(()),
    }
}

/// What `payload`, heard on `channel`, asks of the channel's local waiters. Redisson's
/// payloads are decimal integers, which lockwise's never are, so a client in either layout
/// reads both (a mixed fleet's Java clients publish on the names they share).
pub(crate) fn message_wake(channel: &str, payload: &[u8]) -> MessageWake {
    redisson::message_wake(channel, payload).unwrap_or_else(|| lockwise::message_wake(payload))
}

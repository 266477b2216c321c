//! lockwise's own layout ([`KeyLayout::Lockwise`](crate::KeyLayout::Lockwise)): its
//! release, force unlock and hold move, and what its messages ask of local waiters. Its
//! names are the wire's own ([`crate::wire::keys`]).

use super::spec::{
    AdminLayout, Arg, AttemptArgs, Call, LatchLayout, LeaseSemaphoreLayout, MessageWake,
    ReleaseSpec, ScriptCall, SemaphoreLayout,
};
use crate::wire::keys::{ClaimKeys, Keys};
use crate::wire::role::Role;
use crate::wire::scripts::{
    Script, FENCED_LOCK, FORCE_UNLOCK, LATCH_COUNT_DOWN, LATCH_SET, LEASE_SEM_ACQUIRE,
    LEASE_SEM_ADD, LEASE_SEM_RELEASE, LEASE_SEM_STATE, LEASE_SEM_UPDATE, REKEY, SEMAPHORE_ACQUIRE,
    SEMAPHORE_ADD, SEMAPHORE_DRAIN, SEMAPHORE_SET, UNLOCK,
};

/// Whether a client of lockwise's layout runs the script declared as `name`: all but
/// Redisson's twins (`REDISSON_*`).
pub(super) fn runs(name: &str) -> bool {
    !name.starts_with("REDISSON_")
}

/// lockwise's admin views: every key under the namespace; each kind has keys of its own.
pub(super) static ADMIN: AdminLayout = AdminLayout {
    bare_names: false,
    roles: &[
        Role::Lock,
        Role::Fence,
        Role::FairQueue,
        Role::FairTimeouts,
        Role::Latch,
        Role::RwWrite,
        Role::RwRead,
        Role::RwWriters,
        Role::Semaphore,
        Role::LeaseSem,
        Role::LeaseSemLeases,
    ],
};

/// lockwise's semaphore (`lua/semaphore_*.lua`): a hash whose field `p` holds the count;
/// its messages carry the client's id.
pub(super) static SEMAPHORE: SemaphoreLayout = SemaphoreLayout {
    acquire: &SEMAPHORE_ACQUIRE,
    set: &SEMAPHORE_SET,
    add: &SEMAPHORE_ADD,
    drain: &SEMAPHORE_DRAIN,
    count_field: Some("p"),
    id_payload: true,
    recheck: None,
};

/// lockwise's permit-expirable semaphore (`lua/lease_sem_*.lua`): permit ids are UUIDs as
/// text, expiries are on the server's clock.
pub(super) static LEASE_SEMAPHORE: LeaseSemaphoreLayout = LeaseSemaphoreLayout {
    acquire: &LEASE_SEM_ACQUIRE,
    add: &LEASE_SEM_ADD,
    state: &LEASE_SEM_STATE,
    release: &LEASE_SEM_RELEASE,
    update: &LEASE_SEM_UPDATE,
    clock: false,
    new_id: || uuid::Uuid::new_v4().to_string(),
    wire_id: |id| Some(id.as_bytes().to_vec()),
    recheck: None,
};

/// lockwise's count-down latch (`lua/latch_*.lua`): setting it publishes nothing (no one
/// waits for a latch that was not set).
pub(super) static LATCH: LatchLayout = LatchLayout {
    set: &LATCH_SET,
    count_down: &LATCH_COUNT_DOWN,
};

impl ReleaseSpec {
    /// `lua/unlock.lua`, the release of every kind that counts its holds in the name's lock
    /// hash (`keys.lock`): the last release publishes `message` on the lock's channel and
    /// wakes the head of its fair queue; locally, one waiter on the channel wakes.
    pub(crate) fn unlock(keys: &Keys, message: &str) -> ReleaseSpec {
        ReleaseSpec {
            extra: vec![keys.fair_channel.clone()],
            wake_one: vec![keys.channel.clone()],
            batch: true,
            ..ReleaseSpec::new(
                &UNLOCK,
                keys.script_keys().map(str::to_string).to_vec(),
                message.to_string(),
            )
        }
    }
}

/// `lua/force_unlock.lua`: deletes the lock hash, wakes its channel (publishing the client's
/// id `message`) and the head of its fair queue.
pub(super) fn force_unlock(keys: &Keys, message: &str, publish: &'static str) -> Call {
    Call {
        script: &FORCE_UNLOCK,
        keys: keys.script_keys().map(str::to_string).to_vec(),
        args: vec![
            message.to_string(),
            publish.to_string(),
            keys.fair_channel.clone(),
        ],
    }
}

/// `lua/rekey.lua`: a hold moves to another owner field.
pub(super) fn rekey() -> &'static Script {
    &REKEY
}

/// What a lockwise message asks: `*` wakes every waiter (a latch opened, a read-write
/// lock's writer left), `grant:<n>` hands a fair lock to the channel's waiter (`n` ms of
/// its hold surely left), anything else (a releasing client's id) wakes one.
pub(super) fn message_wake(payload: &[u8]) -> MessageWake {
    if payload.starts_with(b"*") {
        MessageWake::All { next: false }
    } else if let Some(left) = payload.strip_prefix(b"grant:") {
        let left = std::str::from_utf8(left).ok().and_then(|n| n.parse().ok());
        MessageWake::Grant(left.unwrap_or(0))
    } else {
        MessageWake::One
    }
}

/// `lua/fenced_lock.lua` on the lock hash, the counter and the claim queue.
pub(super) fn fenced_lock<'a>(
    key: &'a str,
    fence: &'a str,
    claims: &'a ClaimKeys,
    a: &'a AttemptArgs,
) -> ScriptCall<'a> {
    ScriptCall {
        script: &FENCED_LOCK,
        keys: vec![key, fence, &claims.queue, &claims.deadlines],
        args: vec![
            Arg::Int(a.lease_ms),
            Arg::Str(&a.owner),
            Arg::Int(a.claim_ms),
            Arg::Int(a.waited_ms),
        ],
    }
}

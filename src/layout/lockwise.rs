//! lockwise's own layout ([`KeyLayout::Lockwise`](crate::KeyLayout::Lockwise)): its
//! release, force unlock and hold move, and what its messages ask of local waiters. Its
//! names are the wire's own ([`crate::wire::keys`]).

use super::spec::{Arg, AttemptArgs, Call, MessageWake, ReleaseSpec, ScriptCall};
use crate::wire::keys::{ClaimKeys, Keys};
use crate::wire::scripts::{Script, FENCED_LOCK, FORCE_UNLOCK, REKEY, UNLOCK};

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

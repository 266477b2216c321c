//! Redisson's key layout ([`KeyLayout::Redisson`](crate::KeyLayout::Redisson)): the names
//! and payloads Redisson 3.45 – 4.7 uses for its locks and synchronizers, so that lockwise
//! and Java services share locks by name. The contract is Redisson's source; each function
//! says which of its rules it follows.
//!
//! Names. The object's own key is its name, unchanged. Every other key and channel is
//! `prefix_name(p, name)` = `p:{name}`, or `p:name` when the name already contains `{`
//! (Redisson tests `contains("{")`, not a valid hash tag). A name whose derived keys would
//! land in a Cluster slot other than the name's own is refused ([`check_name`]): Redisson
//! would split such an object across slots, which no script can serve on a Cluster.

use std::time::Duration;

use uuid::Uuid;

use super::spec::{
    AdminLayout, Arg, AttemptArgs, Call, LatchLayout, LeaseSemaphoreLayout, MessageWake,
    ReleaseSpec, ScriptCall, SemaphoreLayout,
};
use crate::error::{Error, Result};
use crate::wire::keys::Keys;
use crate::wire::scripts::{
    Script, REDISSON_FAIR_UNLOCK, REDISSON_FENCED_LOCK, REDISSON_FORCE_UNLOCK,
    REDISSON_LATCH_COUNT_DOWN, REDISSON_LATCH_SET, REDISSON_LEASE_SEM_ACQUIRE,
    REDISSON_LEASE_SEM_ADD, REDISSON_LEASE_SEM_RELEASE, REDISSON_LEASE_SEM_STATE,
    REDISSON_LEASE_SEM_UPDATE, REDISSON_REKEY, REDISSON_SEMAPHORE_ACQUIRE, REDISSON_SEMAPHORE_ADD,
    REDISSON_SEMAPHORE_DRAIN, REDISSON_SEMAPHORE_SET, REDISSON_UNLOCK,
};

use crate::wire::role::Role;
use crate::wire::slot::slot_part;

/// Redisson's `prefixName(prefix, name)`.
pub(crate) fn prefix_name(prefix: &str, name: &str) -> String {
    if name.contains('{') {
        format!("{prefix}:{name}")
    } else {
        format!("{prefix}:{{{name}}}")
    }
}

/// Redisson's `suffixName(name, suffix)`.
pub(crate) fn suffix_name(name: &str, suffix: &str) -> String {
    if name.contains('{') {
        format!("{name}:{suffix}")
    } else {
        format!("{{{name}}}:{suffix}")
    }
}

/// The key or channel of `role` for the object `name`, or `None` where Redisson's format has
/// no such key (the overtake claim queues, a read-write lock's writer intents, the presence
/// keys).
pub(crate) fn key(role: Role, name: &str) -> Option<String> {
    Some(match role {
        // The object's own key: the lock hash, the semaphore's permits, the latch's count.
        // RReadWriteLock's one hash serves both its sides (field `mode`, reader fields
        // `<owner>`, writer field `<owner>:write`).
        Role::Lock
        | Role::Latch
        | Role::Semaphore
        | Role::LeaseSem
        | Role::RwRead
        | Role::RwWrite => name.to_string(),
        Role::Channel => prefix_name("redisson_lock__channel", name),
        // Readers and writers wait on one channel: `0` after a read unlock, `1` after a
        // write unlock.
        Role::RwReadChannel | Role::RwWriteChannel => prefix_name("redisson_rwlock", name),
        Role::Fence => prefix_name("redisson_lock_token", name),
        Role::FairQueue => prefix_name("redisson_lock_queue", name),
        Role::FairTimeouts => prefix_name("redisson_lock_timeout", name),
        // A fair waiter `w` listens on `<this>:w`.
        Role::FairChannel => prefix_name("redisson_lock__channel", name),
        // No brace check here: Redisson builds it by hand.
        Role::LatchChannel => format!("redisson_countdownlatch__channel__{{{name}}}"),
        Role::SemaphoreChannel | Role::LeaseSemChannel => prefix_name("redisson_sc", name),
        Role::LeaseSemLeases => suffix_name(name, "timeout"),
        Role::Claim
        | Role::ClaimDeadlines
        | Role::RwClaim
        | Role::RwClaimDeadlines
        | Role::RwWriters
        | Role::Client => return None,
    })
}

/// What RReadWriteLock appends to a reader's owner field for its writer field.
pub(crate) const WRITE_SUFFIX: &str = ":write";

/// RReadWriteLock's writer field of the owner `owner`: `<owner>:write`.
pub(crate) fn write_field(owner: &str) -> String {
    format!("{owner}{WRITE_SUFFIX}")
}

/// The prefix of RReadWriteLock's per-hold timeout keys of `name`: `{name}`, or `name` when
/// it contains `{` (Redisson's `suffixName` without its suffix). Read hold `n` of owner `o`
/// is the string `<prefix>:<o>:rwlock_timeout:<n>` ([`rw_timeout_key`]); the scripts build
/// those names from this prefix.
pub(crate) fn rw_key_prefix(name: &str) -> String {
    if name.contains('{') {
        name.to_string()
    } else {
        format!("{{{name}}}")
    }
}

/// The timeout key of read hold `n` (1-based) of `owner` on the read-write lock `name`:
/// `suffixName(name, "<owner>:rwlock_timeout:<n>")`, `"1"` with the hold's lease as TTL.
pub(crate) fn rw_timeout_key(name: &str, owner: &str, n: u32) -> String {
    suffix_name(name, &format!("{owner}:rwlock_timeout:{n}"))
}

/// Refuses a name whose Redisson keys would not share one Cluster slot (`a{b`, `x}y`,
/// `{}z`...), and, for a count-down latch (`latch`), any name with a brace: its channel
/// wraps the name in braces whatever it holds.
pub(crate) fn check_name(name: &str, latch: bool) -> Result<()> {
    let split = || {
        Error::invalid(
            "name",
            format!(
                "in Redisson's key layout the keys of `{name}` would fall in different Cluster \
                 slots (Redisson wraps the name in braces unless it contains `{{`); use a name \
                 without braces, or one whose `{{tag}}` is not empty"
            ),
        )
    };
    if slot_part(&prefix_name("p", name)) != slot_part(name)
        || slot_part(&suffix_name(name, "s")) != slot_part(name)
    {
        return Err(split());
    }
    if latch && (name.contains('{') || name.contains('}')) {
        return Err(split());
    }
    Ok(())
}

/// How a Redisson payload wakes the waiters of `channel`: Redisson publishes decimal
/// integers only, whose meaning depends on the channel. `None` if the payload is not one
/// (not Redisson's: lockwise's own).
pub(super) fn message_wake(channel: &str, payload: &[u8]) -> Option<MessageWake> {
    let text = std::str::from_utf8(payload).ok()?;
    let value: i64 = text.parse().ok()?;
    if channel.starts_with("redisson_countdownlatch__channel__") {
        return Some(if value == 0 {
            MessageWake::All { next: true }
        } else {
            MessageWake::One
        });
    }
    if channel.starts_with("redisson_sc:") {
        return Some(MessageWake::Up(value.max(1) as u64));
    }
    Some(if value == 1 {
        MessageWake::All { next: true }
    } else {
        MessageWake::One
    })
}

impl ReleaseSpec {
    /// `lua/redisson_unlock.lua`: the release of a lock hash in Redisson's layout; the last
    /// release publishes `0` (Redisson's unlock message) on the lock channel.
    ///
    /// No local waiter is woken before that message: this client hears it at the same time
    /// as every other client, Java or lockwise, so no side of a mixed fleet gets a head start
    /// by being local (the overtake limit, which bounds that head start in lockwise's layout,
    /// has no place in Redisson's).
    pub(crate) fn redisson_unlock(keys: &Keys) -> ReleaseSpec {
        ReleaseSpec::new(
            &REDISSON_UNLOCK,
            vec![keys.lock.clone(), keys.channel.clone()],
            "0".to_string(),
        )
    }

    /// `lua/redisson_fair_unlock.lua`: the release of a fair lock in Redisson's layout; the
    /// last release publishes `0` on the queue head's own channel.
    pub(crate) fn redisson_fair_unlock(keys: &Keys) -> ReleaseSpec {
        ReleaseSpec {
            extra: vec![keys.fair_channel.clone()],
            clock: true,
            ..ReleaseSpec::new(
                &REDISSON_FAIR_UNLOCK,
                keys.script_keys().map(str::to_string).to_vec(),
                "0".to_string(),
            )
        }
    }
}

/// `lua/redisson_force_unlock.lua`: deletes the lock hash and publishes `0` on its channel.
pub(super) fn force_unlock(keys: &Keys, publish: &'static str) -> Call {
    Call {
        script: &REDISSON_FORCE_UNLOCK,
        keys: vec![keys.lock.clone(), keys.channel.clone()],
        args: vec![publish.to_string()],
    }
}

/// `lua/redisson_rekey.lua`: a hold moves to another owner field, a reader's timeout key
/// with it.
pub(super) fn rekey() -> &'static Script {
    &REDISSON_REKEY
}

/// The field a hold of `from` takes when it moves to the owner field `to`: a read-write
/// lock's writer field keeps its suffix (`lua/redisson_rekey.lua`).
pub(super) fn moved_field(from: &str, to: String) -> String {
    if from.ends_with(WRITE_SUFFIX) {
        write_field(&to)
    } else {
        to
    }
}

/// `lua/redisson_fenced_lock.lua`: RFencedLock's hash (owner fields only) and counter, a
/// new token on every acquire.
pub(super) fn fenced_lock<'a>(key: &'a str, fence: &'a str, a: &'a AttemptArgs) -> ScriptCall<'a> {
    ScriptCall {
        script: &REDISSON_FENCED_LOCK,
        keys: vec![key, fence],
        args: vec![Arg::Int(a.lease_ms), Arg::Str(&a.owner)],
    }
}

/// Whether a client of Redisson's layout runs the script declared as `name`: every one,
/// since it also runs lockwise's own (renewal, batch, ...).
pub(super) fn runs(_name: &str) -> bool {
    true
}

/// Redisson's admin views: a lock's key is its bare name, shared by its latch and
/// semaphores (and its read-write lock, [`super::rw_in_lock_hash`]).
pub(super) static ADMIN: AdminLayout = AdminLayout {
    bare_names: true,
    roles: &[Role::Lock, Role::Fence, Role::FairQueue, Role::FairTimeouts],
};

/// The longest sleep of a semaphore waiter that found some permits free but too few for it
/// (Redisson's messages carry a count, not who sent them, and Java's waiters take what they
/// are woken for without passing anything on).
const RECHECK: Duration = Duration::from_millis(500);

/// Redisson's `RSemaphore` (`lua/redisson_semaphore_*.lua`): the name is a string holding
/// the count, `redisson_sc:{name}` the channel, whose messages are the new count as a decimal
/// integer (they wake up to that many waiters of each client, Java's and lockwise's alike).
pub(super) static SEMAPHORE: SemaphoreLayout = SemaphoreLayout {
    acquire: &REDISSON_SEMAPHORE_ACQUIRE,
    set: &REDISSON_SEMAPHORE_SET,
    add: &REDISSON_SEMAPHORE_ADD,
    drain: &REDISSON_SEMAPHORE_DRAIN,
    count_field: None,
    id_payload: false,
    recheck: Some(RECHECK),
};

/// Redisson's `RPermitExpirableSemaphore`, byte for byte (`lua/redisson_lease_sem_*.lua`,
/// after `lua/redisson_lease_sem_prelude.lua`).
///
/// Data: the name itself is a string, the available permits as a decimal;
/// `{name}:timeout` (Redisson's `suffixName`) a sorted set whose members are the permit ids
/// as **16 raw bytes** and whose scores are their expiry in ms on the **clients'** clocks
/// (`engine::client_clock_ms`), or 922337203685477 for a permit without lease (Java's;
/// lockwise's permits always have one, capped at that value); `redisson_sc:{name}` the
/// channel, shared with `RSemaphore`: releases and reclaims publish the new available count.
/// The scripts take the client's clock where lockwise's take the wakeup payload, and answer
/// in the shapes of lockwise's own. Every script reclaims expired permits first (the acquire
/// up to the `k` it wants, as Redisson's does; the others all of them, as Redisson's
/// `availablePermits` does).
///
/// Ids: 16 random bytes on the wire; the public API shows them as their 32 lower-case hex
/// digits, the form Redisson's Java API hands out, so an id acquired on either side can be
/// released on the other. A string that is not 32 hex digits names no permit.
///
/// TTLs: Redisson writes both keys without a TTL. lockwise keeps its idle-TTL rule on what it
/// writes: every write raises (never lowers) both keys' TTL to at least the handle's idle TTL
/// and the latest lease expiry (a permit without lease aside). Java ignores the TTLs; its
/// `trySetPermits` / `addPermits` may clear the name's until lockwise's next write, and its
/// acquire copies the name's PTTL onto the set.
///
/// Waiting: as in lockwise's layout, plus: a waiter that finds some permits free but too few
/// for it looks again within [`RECHECK`], and one that finds none free sleeps until a message
/// or the earliest lease expiry (Java's permits expire without a message), at most the
/// watchdog timeout.
pub(super) static LEASE_SEMAPHORE: LeaseSemaphoreLayout = LeaseSemaphoreLayout {
    acquire: &REDISSON_LEASE_SEM_ACQUIRE,
    add: &REDISSON_LEASE_SEM_ADD,
    state: &REDISSON_LEASE_SEM_STATE,
    release: &REDISSON_LEASE_SEM_RELEASE,
    update: &REDISSON_LEASE_SEM_UPDATE,
    clock: true,
    new_id: || Uuid::from_bytes(random_bytes()).simple().to_string(),
    wire_id: |id| hex_id(id).map(|bytes| bytes.to_vec()),
    recheck: Some(RECHECK),
};

/// Redisson's `RCountDownLatch` (`lua/redisson_latch_*.lua`): the name is a string holding the
/// count, `redisson_countdownlatch__channel__{name}` its channel. Setting the count publishes
/// `1` and the last count-down `0`, for Java's waiters.
pub(super) static LATCH: LatchLayout = LatchLayout {
    set: &REDISSON_LATCH_SET,
    count_down: &REDISSON_LATCH_COUNT_DOWN,
};

/// 16 random bytes, as Java's `ThreadLocalRandom.nextBytes` gives Redisson (from the
/// library's one random source, see `engine::backoff`).
fn random_bytes() -> [u8; 16] {
    fastrand::u128(..).to_le_bytes()
}

/// The 16 bytes of a 32-hex-digit id (either case), as Java's `decodeHexDump` reads them.
fn hex_id(id: &str) -> Option<[u8; 16]> {
    if id.len() != 32 || !id.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    Uuid::try_parse(id).ok().map(Uuid::into_bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_follow_prefix_and_suffix_rules() {
        assert_eq!(key(Role::Lock, "inv"), Some("inv".into()));
        assert_eq!(
            key(Role::Channel, "inv"),
            Some("redisson_lock__channel:{inv}".into())
        );
        assert_eq!(
            key(Role::Channel, "{inv}:1"),
            Some("redisson_lock__channel:{inv}:1".into())
        );
        assert_eq!(
            key(Role::Fence, "inv"),
            Some("redisson_lock_token:{inv}".into())
        );
        assert_eq!(
            key(Role::LatchChannel, "l"),
            Some("redisson_countdownlatch__channel__{l}".into())
        );
        assert_eq!(key(Role::LeaseSemLeases, "s"), Some("{s}:timeout".into()));
        assert_eq!(
            key(Role::LeaseSemLeases, "{s}1"),
            Some("{s}1:timeout".into())
        );
        assert_eq!(
            key(Role::SemaphoreChannel, "s"),
            Some("redisson_sc:{s}".into())
        );
        assert_eq!(key(Role::Claim, "s"), None);
        assert_eq!(key(Role::RwRead, "rw"), Some("rw".into()));
        assert_eq!(key(Role::RwWrite, "rw"), Some("rw".into()));
        assert_eq!(
            key(Role::RwReadChannel, "rw"),
            key(Role::RwWriteChannel, "rw")
        );
        assert_eq!(
            key(Role::RwWriteChannel, "rw"),
            Some("redisson_rwlock:{rw}".into())
        );
        assert_eq!(key(Role::RwWriters, "rw"), None);
    }

    #[test]
    fn rwlock_timeout_keys_follow_suffix_name() {
        assert_eq!(write_field("u:7"), "u:7:write");
        assert_eq!(rw_key_prefix("rw"), "{rw}");
        assert_eq!(rw_key_prefix("{rw}:1"), "{rw}:1");
        assert_eq!(rw_timeout_key("rw", "u:7", 2), "{rw}:u:7:rwlock_timeout:2");
        assert_eq!(
            rw_timeout_key("{rw}:1", "u:7", 1),
            "{rw}:1:u:7:rwlock_timeout:1"
        );
        for name in ["rw", "{rw}:1", "a:b"] {
            assert_eq!(
                rw_timeout_key(name, "o", 3),
                format!("{}:o:rwlock_timeout:3", rw_key_prefix(name))
            );
        }
    }

    #[test]
    fn names_that_split_across_slots_are_refused() {
        for good in ["inv", "{inv}", "{inv}:1", "a:b", "x{y}z"] {
            assert!(check_name(good, false).is_ok(), "{good}");
        }
        for bad in ["a{b", "x}y", "{}z", "}"] {
            assert!(check_name(bad, false).is_err(), "{bad}");
        }
        assert!(check_name("l", true).is_ok());
        assert!(check_name("{l}", true).is_err());
    }

    #[test]
    fn payloads_wake_as_redisson_reads_them() {
        let lock = "redisson_lock__channel:{a}";
        assert_eq!(message_wake(lock, b"0"), Some(MessageWake::One));
        assert_eq!(
            message_wake(lock, b"1"),
            Some(MessageWake::All { next: true })
        );
        assert_eq!(
            message_wake("redisson_sc:{s}", b"3"),
            Some(MessageWake::Up(3))
        );
        assert_eq!(
            message_wake("redisson_countdownlatch__channel__{l}", b"0"),
            Some(MessageWake::All { next: true })
        );
        assert_eq!(message_wake(lock, b"grant:1"), None);
    }

    #[test]
    fn lease_permit_ids_are_32_hex_digits_of_16_bytes() {
        let bytes = random_bytes();
        let text = Uuid::from_bytes(bytes).simple().to_string();
        assert_eq!(text.len(), 32);
        assert!(text.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')));
        assert_eq!(hex_id(&text), Some(bytes));
        assert_eq!(hex_id(&text.to_uppercase()), Some(bytes));
        let hyphenated = Uuid::from_bytes(bytes).hyphenated().to_string();
        for bad in ["", "xyz", &hyphenated, &text[..31], &format!("{text}0")] {
            assert_eq!(hex_id(bad), None, "{bad}");
        }
        // The fixed bits of a UUID v4 vary: all 128 bits are random.
        let versions: std::collections::HashSet<u8> =
            (0..64).map(|_| random_bytes()[6] >> 4).collect();
        assert!(versions.len() > 1);
        let new = (LEASE_SEMAPHORE.new_id)();
        assert_eq!((LEASE_SEMAPHORE.wire_id)(&new).map(|b| b.len()), Some(16));
    }
}

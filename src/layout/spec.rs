//! What the layout room's answers are made of, as data the engine runs: [`ReleaseSpec`] (how
//! one hold of a kind is released; each layout's file builds its own, and kinds with a
//! release of their own, a read-write lock's sides, build theirs), [`Call`],
//! [`MessageWake`], the parts of an acquire attempt ([`AttemptArgs`] in, [`ScriptCall`]
//! out: what a kind's acquire description sends, `engine::acquire`), and the tables of the
//! synchronizers ([`SemaphoreLayout`], [`LeaseSemaphoreLayout`], [`LatchLayout`]) and of the
//! admin views ([`AdminLayout`]): each layout's file has one static of each.

use std::sync::{Arc, LazyLock};
use std::time::Duration;

use redis::{RedisWrite, ToRedisArgs};

use crate::wire::role::Role;
use crate::wire::scripts::Script;

/// How one hold of a kind is released: `script` runs with `keys` and the arguments
/// `owner, message, expected, publish` followed by `extra`, and replies as `lua/unlock.lua`
/// does: -1 not held, -2 the count differs from `expected`, 0 released the last hold,
/// n > 0 holds left (`expected` 0 releases any one hold).
pub(crate) struct ReleaseSpec {
    pub(crate) script: &'static Script,
    pub(crate) keys: Vec<String>,
    /// What the last release publishes: the releasing client's id (so that client skips
    /// its own echo), or a Redlock set's.
    pub(crate) message: String,
    /// The script's arguments after the four above.
    pub(crate) extra: Vec<String>,
    /// Channels on which all local waiters are woken when the lock may have been freed
    /// (the reply said 0, or was lost): the client hears no echo of its own message.
    pub(crate) wake_all: Vec<String>,
    /// Channels on which one local waiter is woken in that case.
    pub(crate) wake_one: Vec<String>,
    /// Whether the script also takes the client's clock (ms since the epoch) as its last
    /// argument: Redisson's fair queue keeps deadlines on the clients' clocks.
    pub(crate) clock: bool,
    /// Whether a release may go out in a batch of `lua/batch.lua` (see
    /// [`batch`](super::batch)), which publishes the client's id: `lua/unlock.lua` of a
    /// client's own lock hash, unless [`ReleaseSpec::unbatched`].
    pub(crate) batch: bool,
    /// Whether each hold lives by a TTL key of its own, numbered by the owner's count and
    /// deleted by the release from that count (Redisson's read holds: `rwlock_timeout:<n>`),
    /// rather than by the hash's TTL, which no release lowers: a run is then valid only as
    /// long as the keys of its remaining holds (see the registry's `deadlines`).
    pub(crate) per_hold_ttl: bool,
}

impl ReleaseSpec {
    /// `script` with `keys`, publishing `message`: no extra arguments, no local wakeups, no
    /// clock, never batched, the hold living by the hash's TTL. Kinds set what differs with
    /// struct update syntax.
    pub(crate) fn new(script: &'static Script, keys: Vec<String>, message: String) -> ReleaseSpec {
        ReleaseSpec {
            script,
            keys,
            message,
            extra: Vec::new(),
            wake_all: Vec::new(),
            wake_one: Vec::new(),
            clock: false,
            batch: false,
            per_hold_ttl: false,
        }
    }

    /// The same release, never batched: a fair lock's, whose release hands the lock to the
    /// head of its queue when there is one (the batch would leave it to a second call), and
    /// a Redlock set's, whose message is the set's id (a batch publishes the client's).
    pub(crate) fn unbatched(mut self) -> ReleaseSpec {
        self.batch = false;
        self
    }
}

/// A script call the engine sends as it is: the script, its keys and its arguments.
pub(crate) struct Call {
    pub(crate) script: &'static Script,
    pub(crate) keys: Vec<String>,
    pub(crate) args: Vec<String>,
}

/// What a message on a channel asks of the local waiters of that channel.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum MessageWake {
    /// One waiter (a release).
    One,
    /// Every waiter waiting now (a latch opened, a read-write lock's writer left); with
    /// `next`, also the next one to wait (a Redisson publisher woke nobody locally: a
    /// waiter between its check and its wait must not miss this).
    All { next: bool },
    /// Up to this many (a Redisson semaphore channel's new permit count).
    Up(u64),
    /// A fair lock handed to the channel's waiter, with this many ms of its hold surely
    /// left (lockwise's `grant:<n>`).
    Grant(u64),
}

/// What the engine knows when it sends an attempt, for a kind to build its arguments from.
#[derive(Clone)]
pub(crate) struct AttemptArgs {
    /// The owner field the attempt writes (`<client uuid>:<owner id>`, or a kind's variant).
    pub(crate) owner: Arc<str>,
    /// The hold's TTL in milliseconds (the lease, or the watchdog timeout).
    pub(crate) lease_ms: u64,
    /// Overtake claim TTL in ms: > 0 queues this owner's claim (see `engine::claim`).
    pub(crate) claim_ms: u64,
    /// How long this owner has waited, in ms: its place in the claim queue.
    pub(crate) waited_ms: u64,
    /// The client's overtake limit in ms (0: none). A read-write lock's writer queues as if
    /// it had waited this much longer.
    pub(crate) limit_ms: u64,
}

/// One argument of a script call.
pub(crate) enum Arg<'a> {
    /// An integer (a lease, a TTL, a flag).
    Int(u64),
    /// A string (an owner field, a key prefix).
    Str(&'a str),
}

impl ToRedisArgs for Arg<'_> {
    fn write_redis_args<W: ?Sized + RedisWrite>(&self, out: &mut W) {
        match self {
            Arg::Int(n) => n.write_redis_args(out),
            Arg::Str(s) => s.write_redis_args(out),
        }
    }
}

/// One script call: what a kind's acquire description sends (`engine::acquire`).
pub(crate) struct ScriptCall<'a> {
    pub(crate) script: &'static Script,
    pub(crate) keys: Vec<&'a str>,
    pub(crate) args: Vec<Arg<'a>>,
}

/// A script of a layout's table (declared in `wire::scripts`).
pub(crate) type ScriptRef = &'static LazyLock<Script>;

/// How a layout keeps a counting semaphore (`Semaphore`): its scripts, where its count is,
/// and what its waiters do. Every script that publishes takes the keys `[name, channel]`
/// and the arguments `[n, idle_ttl_ms, publish]`, then the client's id if `id_payload`.
pub(crate) struct SemaphoreLayout {
    /// Takes `permits`: keys `[name]`, arguments `[permits, idle_ttl_ms]`.
    pub(crate) acquire: ScriptRef,
    /// Sets the count if the semaphore does not exist yet.
    pub(crate) set: ScriptRef,
    /// Adds (or gives back) `n` permits.
    pub(crate) add: ScriptRef,
    /// Takes every free permit: keys `[name]`, arguments `[idle_ttl_ms]`.
    pub(crate) drain: ScriptRef,
    /// The hash field the count is kept in; `None`: the key is a string holding it.
    pub(crate) count_field: Option<&'static str>,
    /// Whether the scripts publish the client's id (its listener skips that echo, so the
    /// client wakes its own waiters); Redisson's publish the new count instead.
    pub(crate) id_payload: bool,
    /// How soon a waiter that found permits free but too few for it looks again: Redisson's
    /// messages carry a count, not who sent them, and Java's waiters pass nothing on.
    pub(crate) recheck: Option<Duration>,
}

/// How a layout keeps a permit-expirable semaphore (`LeaseSemaphore`): its scripts, the
/// permit ids, and what its waiters do.
pub(crate) struct LeaseSemaphoreLayout {
    /// Takes permits with new ids.
    pub(crate) acquire: ScriptRef,
    /// Adds (or removes) permits.
    pub(crate) add: ScriptRef,
    /// Reads the free permits and the earliest lease expiry.
    pub(crate) state: ScriptRef,
    /// Gives permits back by id.
    pub(crate) release: ScriptRef,
    /// Moves a permit's lease expiry.
    pub(crate) update: ScriptRef,
    /// The scripts' stamp argument: the client's id (the wakeup payload its listener
    /// skips), or with `clock` the client's clock in ms (Redisson keeps expiries on it).
    pub(crate) clock: bool,
    /// A new permit id, as the public API shows it.
    pub(crate) new_id: fn() -> String,
    /// A permit id as the scripts take it (`None`: no permit has that id).
    pub(crate) wire_id: fn(&str) -> Option<Vec<u8>>,
    /// As [`SemaphoreLayout::recheck`].
    pub(crate) recheck: Option<Duration>,
}

/// How a layout keeps a count-down latch (`CountDownLatch`); both layouts' counts are a
/// string key that `lua/latch_state.lua` reads.
pub(crate) struct LatchLayout {
    /// Sets the count if the latch is not set: keys `[latch, channel]`, arguments
    /// `[count, ttl_ms, publish]` (lockwise's publishes nothing; Redisson's publishes `1` for
    /// Java's waiters).
    pub(crate) set: ScriptRef,
    /// Counts down one: keys `[latch, channel]`, arguments `[publish]`; answers the count left.
    pub(crate) count_down: ScriptRef,
}

/// How the admin views (`Admin::list`, `inspect`, `force_unlock`) find and read a layout's
/// locks.
pub(crate) struct AdminLayout {
    /// Lock keys are bare names among the application's own keys (Redisson's), not under
    /// the client's namespace: a listing scans every hash, takes each key as a name, keeps
    /// the locks whose every field is an owner and skips what it cannot read.
    pub(crate) bare_names: bool,
    /// The roles of a name's keys that are read, in order (in Redisson's layout the lock,
    /// latch and semaphores of a name share one key, read as the lock hash it is for the
    /// kinds the layout serves, with its token counter and fair queue).
    pub(crate) roles: &'static [Role],
}

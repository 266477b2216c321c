//! A history checker for fault-injection tests: record what every client saw, then check
//! the invariants on the whole history instead of by eye.
//!
//! # What is recorded
//! Per acquisition attempt (an [`Acquisition`]): the client (process / task label), the lock,
//! the owner string the library reports, the outcome ([`Op`]: invoke, ok, fail, unknown), and
//! on this host's monotonic clock (nanoseconds of `CLOCK_MONOTONIC`, the same clock in every
//! process, see [`now_ns`]): when the call was invoked, when it returned the guard, when the
//! holder stopped relying on it (sent its unlock, was killed, was stopped, saw `lost()`), the
//! lease (validity) if any, and the fencing token if any. Besides: fenced writes
//! ([`FencedWrite`]), hold-count samples and TTL samples taken by the test.
//!
//! Recorded hold intervals are *inner* bounds of the real holds: the lock script ran after
//! `invoke` and before `acquired`, the unlock script after `released`. So an overlap of two
//! recorded intervals is a real overlap, never an artefact of the recording. A lease is
//! counted from `invoke` (it started after that), so an interval counts until
//! `min(released, invoke + validity)`.
//!
//! # Several processes
//! A child process records into its own [`History`] and prints it ([`History::to_text`], or
//! [`History::line_of`] right after each step when it may be SIGKILLed); the parent feeds the
//! child's stdout to [`History::merge_text`]. Every line starts with [`LINE_PREFIX`]; other
//! lines (libtest's chatter) are ignored. A line is a full snapshot of one record keyed by a
//! host-unique id (`<pid>-<n>`), so a later line for the same id replaces the earlier one.
//!
//! # Checks
//! Each check returns a list of [`Violation`]s; [`assert_clean`] panics listing them all.

mod checks;
mod text;

// Each binary that includes this module uses a different part of it.
#[allow(unused_imports)]
pub use checks::{
    check_quiescent, check_ttls, sample_all_hold_counts, sample_lock, subscribed_channels,
};

use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use redis::AsyncCommands;

/// Every history line starts with this.
pub const LINE_PREFIX: &str = "@lockwise-hist";

// ---------------------------------------------------------------------------------------------
// Clock

/// Parses `Instant`'s Debug form, which on Linux is the raw `CLOCK_MONOTONIC` reading
/// (`Instant { tv_sec: 4560, tv_nsec: 449067141 }`): one clock for all processes of the host.
fn parse_instant(i: Instant) -> Option<u64> {
    let s = format!("{i:?}");
    let num = |field: &str| -> Option<u64> {
        let at = s.find(field)? + field.len();
        let digits: String = s[at..]
            .chars()
            .skip_while(|c| !c.is_ascii_digit())
            .take_while(|c| c.is_ascii_digit())
            .collect();
        digits.parse().ok()
    };
    Some(num("tv_sec")? * 1_000_000_000 + num("tv_nsec")?)
}

/// Whether [`now_ns`] reads `CLOCK_MONOTONIC` (true on Linux) or falls back to the wall clock
/// (`SystemTime`, fine on one host as long as nothing steps the clock during a test). Every
/// process runs the same binary, so all of them make the same choice.
pub fn clock_is_monotonic() -> bool {
    static MONO: OnceLock<bool> = OnceLock::new();
    *MONO.get_or_init(|| {
        let a = Instant::now();
        match (
            parse_instant(a),
            parse_instant(a + Duration::from_millis(1)),
        ) {
            (Some(x), Some(y)) => y - x == 1_000_000,
            _ => false,
        }
    })
}

/// Nanoseconds on the host-wide clock of the histories (see [`clock_is_monotonic`]).
pub fn now_ns() -> u64 {
    ns_of(Instant::now())
}

/// An `Instant` on the host-wide clock of the histories.
pub fn ns_of(i: Instant) -> u64 {
    if clock_is_monotonic() {
        parse_instant(i).expect("Instant debug form")
    } else {
        let age = i.elapsed();
        let wall = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap();
        (wall - age).as_nanos() as u64
    }
}

fn ms(ns: u64) -> f64 {
    ns as f64 / 1e6
}

// ---------------------------------------------------------------------------------------------
// Records

/// Outcome of an acquisition attempt.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Op {
    /// Invoked, no answer yet (a process killed mid-call stays here: unknown outcome).
    Invoke,
    /// Acquired.
    Ok,
    /// Definitely not acquired (contention, or a typed error that guarantees nothing held).
    Fail,
    /// The outcome is unknown (a Redis error or timeout in the middle of the call).
    Unknown,
}

impl Op {
    fn as_str(self) -> &'static str {
        match self {
            Op::Invoke => "invoke",
            Op::Ok => "ok",
            Op::Fail => "fail",
            Op::Unknown => "unknown",
        }
    }
    fn parse(s: &str) -> Option<Op> {
        Some(match s {
            "invoke" => Op::Invoke,
            "ok" => Op::Ok,
            "fail" => Op::Fail,
            "unknown" => Op::Unknown,
            _ => return None,
        })
    }
}

/// One acquisition attempt and, if it succeeded, its hold.
#[derive(Clone, Debug, PartialEq)]
pub struct Acquisition {
    /// Host-unique id (`<pid>-<n>`).
    pub id: String,
    /// Who: e.g. `p3/t1` (process 3, task 1).
    pub client: String,
    /// Lock name (or key).
    pub lock: String,
    /// Owner string of the guard (`<client uuid>:<task id>`), empty if unknown.
    pub owner: String,
    /// Outcome of the attempt so far.
    pub op: Op,
    /// When the call was made (ns, [`now_ns`]).
    pub invoke: u64,
    /// When the guard was returned (ns, [`now_ns`]); `None` if it never was.
    pub acquired: Option<u64>,
    /// When the holder stopped relying on the lock (unlock sent, killed, stopped, lost seen).
    /// `None`: never observed; the hold then counts only up to its validity, if any.
    pub released: Option<u64>,
    /// Lease (ns) when the lock was taken with one; `None` in watchdog mode.
    pub validity: Option<u64>,
    /// Fencing token, for fenced locks.
    pub token: Option<u64>,
    /// Free text (no newline), e.g. an error message.
    pub note: String,
}

impl Acquisition {
    /// End of the hold interval that counts for mutual exclusion:
    /// `min(released, invoke + validity)`; `None` if the hold never counts.
    pub fn effective_end(&self) -> Option<u64> {
        if self.op != Op::Ok {
            return None;
        }
        let by_lease = self.validity.map(|v| self.invoke + v);
        match (self.released, by_lease) {
            (Some(r), Some(l)) => Some(r.min(l)),
            (Some(r), None) => Some(r),
            (None, Some(l)) => Some(l),
            (None, None) => None,
        }
    }
}

/// A write to a fenced resource.
#[derive(Clone, Debug, PartialEq)]
pub struct FencedWrite {
    /// Host-unique id (`<pid>-<n>`).
    pub id: String,
    /// Who wrote: e.g. `p3/t1` (process 3, task 1).
    pub client: String,
    /// Name of the fenced resource written to.
    pub resource: String,
    /// Fencing token the write carried.
    pub token: u64,
    /// When the write was sent (ns, [`now_ns`]).
    pub invoke: u64,
    /// When the write's answer arrived (ns, [`now_ns`]).
    pub complete: u64,
    /// `Some(true)` accepted, `Some(false)` rejected (StaleToken), `None` unknown.
    pub accepted: Option<bool>,
}

/// A hold count read from Redis (a field of the lock hash).
#[derive(Clone, Debug, PartialEq)]
pub struct HoldSample {
    /// Lock name (or key) the sample was taken of.
    pub lock: String,
    /// Owner field of the lock hash (`<client uuid>:<task id>`).
    pub owner: String,
    /// When the sample was read (ns, [`now_ns`]).
    pub at: u64,
    /// Hold count stored in the owner's field.
    pub count: i64,
}

/// A PTTL read of a lock's key, with the owners holding it at that moment (sorted, `,`-joined;
/// empty when the key is gone). Sample with [`sample_lock`].
#[derive(Clone, Debug, PartialEq)]
pub struct TtlSample {
    /// Lock name (or key) the sample was taken of.
    pub lock: String,
    /// When the sample was read (ns, [`now_ns`]).
    pub at: u64,
    /// PTTL of the key in milliseconds (-1: no TTL, -2: no key).
    pub pttl: i64,
    /// Owners holding the lock at `at`, sorted and `,`-joined; empty when the key is gone.
    pub holders: String,
}

/// A broken invariant.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Violation {
    /// Which check (`overlap`, `token`, `stale-write`, `no-ttl`, `leftover-key`, `channel`,
    /// `hold-count`, `ttl-rise`, `history`).
    pub check: &'static str,
    /// What broke, in words (times in milliseconds).
    pub message: String,
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "[{}] {}", self.check, self.message)
    }
}

fn violation(check: &'static str, message: String) -> Violation {
    Violation { check, message }
}

/// Panics listing every violation (at most 50 in full) if there is any.
#[track_caller]
pub fn assert_clean(violations: &[Violation]) {
    if violations.is_empty() {
        return;
    }
    let mut msg = format!("{} invariant violation(s):\n", violations.len());
    for v in violations.iter().take(50) {
        msg.push_str(&format!("  {v}\n"));
    }
    if violations.len() > 50 {
        msg.push_str(&format!("  ... and {} more\n", violations.len() - 50));
    }
    panic!("{msg}");
}

// ---------------------------------------------------------------------------------------------
// History

#[derive(Default)]
struct Inner {
    acqs: Vec<Acquisition>,
    index: HashMap<String, usize>,
    writes: Vec<FencedWrite>,
    holds: Vec<HoldSample>,
    ttls: Vec<TtlSample>,
}

/// The history of one scenario; clones share it (cheap to hand to tasks).
#[derive(Clone, Default)]
pub struct History {
    inner: Arc<Mutex<Inner>>,
}

/// Handle to one recorded acquisition, returned by [`History::invoke`].
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct AcqId(pub String);

static NEXT_ID: AtomicU64 = AtomicU64::new(0);

fn next_id() -> String {
    format!(
        "{}-{}",
        std::process::id(),
        NEXT_ID.fetch_add(1, Ordering::Relaxed)
    )
}

fn no_space(s: &str) -> String {
    s.chars()
        .map(|c| if c.is_whitespace() { '_' } else { c })
        .collect()
}

impl History {
    /// An empty history.
    pub fn new() -> History {
        History::default()
    }

    fn with<R>(&self, f: impl FnOnce(&mut Inner) -> R) -> R {
        f(&mut self.inner.lock().unwrap())
    }

    /// Records an attempt to acquire `lock` by `client`, invoked now.
    pub fn invoke(&self, client: &str, lock: &str) -> AcqId {
        self.invoke_at(client, lock, now_ns())
    }

    /// Records an attempt invoked at `at` ([`now_ns`] clock).
    pub fn invoke_at(&self, client: &str, lock: &str, at: u64) -> AcqId {
        let id = next_id();
        self.record(Acquisition {
            id: id.clone(),
            client: client.to_string(),
            lock: lock.to_string(),
            owner: String::new(),
            op: Op::Invoke,
            invoke: at,
            acquired: None,
            released: None,
            validity: None,
            token: None,
            note: String::new(),
        });
        AcqId(id)
    }

    fn update(&self, id: &AcqId, f: impl FnOnce(&mut Acquisition)) {
        self.with(|h| {
            let i = *h
                .index
                .get(&id.0)
                .unwrap_or_else(|| panic!("unknown acquisition {}", id.0));
            f(&mut h.acqs[i]);
        })
    }

    /// The attempt acquired, now: `validity` is its lease (`None`: watchdog mode).
    pub fn ok(&self, id: &AcqId, owner: &str, token: Option<u64>, validity: Option<Duration>) {
        let at = now_ns();
        self.update(id, |a| {
            a.op = Op::Ok;
            a.owner = owner.to_string();
            a.acquired = Some(at);
            a.token = token;
            a.validity = validity.map(|v| v.as_nanos() as u64);
        })
    }

    /// The holder stops relying on the lock now (call right before sending the unlock).
    pub fn release(&self, id: &AcqId) {
        self.release_at(id, now_ns(), "")
    }

    /// The holder stopped relying on the lock at `at` (killed, stopped, saw it lost...).
    pub fn release_at(&self, id: &AcqId, at: u64, note: &str) {
        self.update(id, |a| {
            a.released = Some(at);
            if !note.is_empty() {
                a.note = note.to_string();
            }
        })
    }

    /// Definitely not acquired.
    pub fn fail(&self, id: &AcqId, note: &str) {
        self.update(id, |a| {
            a.op = Op::Fail;
            a.note = note.to_string();
        })
    }

    /// Unknown outcome (the call errored mid-flight).
    pub fn unknown(&self, id: &AcqId, note: &str) {
        self.update(id, |a| {
            a.op = Op::Unknown;
            a.note = note.to_string();
        })
    }

    /// Appends a note to the record (e.g. `lost-seen`, `unlock=NotHeld`).
    pub fn note(&self, id: &AcqId, note: &str) {
        self.update(id, |a| {
            if !a.note.is_empty() {
                a.note.push(';');
            }
            a.note.push_str(note);
        })
    }

    /// Adds or replaces (same id) a whole record.
    pub fn record(&self, a: Acquisition) {
        self.with(|h| match h.index.get(&a.id) {
            Some(&i) => h.acqs[i] = a,
            None => {
                h.index.insert(a.id.clone(), h.acqs.len());
                h.acqs.push(a);
            }
        })
    }

    /// Records a fenced write of `token` that ran from `invoke` to now.
    pub fn write(
        &self,
        client: &str,
        resource: &str,
        token: u64,
        invoke: u64,
        accepted: Option<bool>,
    ) {
        let w = FencedWrite {
            id: next_id(),
            client: client.to_string(),
            resource: resource.to_string(),
            token,
            invoke,
            complete: now_ns(),
            accepted,
        };
        self.with(|h| h.writes.push(w));
    }

    /// Records a hold-count sample (checked by [`History::check_hold_counts`]).
    pub fn hold_sample(&self, s: HoldSample) {
        self.with(|h| h.holds.push(s));
    }

    /// Records a TTL sample (checked by [`History::check_ttl_after_release`]).
    pub fn ttl_sample(&self, s: TtlSample) {
        self.with(|h| h.ttls.push(s));
    }

    /// A copy of every acquisition record, in the order they were first recorded.
    pub fn acquisitions(&self) -> Vec<Acquisition> {
        self.with(|h| h.acqs.clone())
    }

    /// A copy of the acquisition record `id`; panics if this history has no such record.
    pub fn get(&self, id: &AcqId) -> Acquisition {
        self.with(|h| h.acqs[h.index[&id.0]].clone())
    }

    /// A copy of every fenced write, in the order they were recorded.
    pub fn writes(&self) -> Vec<FencedWrite> {
        self.with(|h| h.writes.clone())
    }

    /// Number of successful acquisitions.
    pub fn ok_count(&self) -> usize {
        self.with(|h| h.acqs.iter().filter(|a| a.op == Op::Ok).count())
    }
}

//! lockwise's hold accounting as a model, checked exhaustively with [stateright].
//!
//! The engine's promise (the crate's `engine` module docs, "One call at a time, and runs of
//! holds" and "Settling") is that what a guard believes it holds is what Redis holds, and
//! that when this stops being true the guard is told (`lost()`) before another owner can
//! take the lock. Scenario tests sample that promise; this crate checks every interleaving
//! of a bounded world:
//!
//! - the server's lock hash (owner field -> count, and whether every TTL set so far ran out),
//!   changed only by the scripts' effects in [`scripts`] (checked against the real scripts
//!   by `tests/conformance.rs`);
//! - the client's hold registry per owner, in [`registry`], whose functions mirror
//!   `src/engine/registry` one for one;
//! - the calls: acquire (`Ticket::begin` + the lock script), re-entry, unlock and a dropped
//!   guard (`release` in `engine/hold.rs`), cancelling an acquire after it was sent
//!   (`Inflight`'s abandoned path), a reply that comes after the lock's TTL
//!   (`Ticket::unless_late`), settlements (`engine/settle.rs`), the watchdog's renewal;
//! - the faults: a reply lost, a request that times out and runs later (before the next
//!   request on its connection, or never), a request run twice (only when the client resends,
//!   i.e. with [`Fixes::no_resend`] off), time passing every TTL (the lease and the watchdog
//!   mark the run lost first, then the key may expire), `force_unlock`, and another client's
//!   acquire and release.
//!
//! Each action is named after the function it mirrors ([`Action`]). The properties:
//!
//! | property | what it says |
//! |---|---|
//! | `no two owners` | another owner's acquire succeeds only when no guard of this owner believes it holds (its `lost()` has not fired), except after a `force_unlock` |
//! | `a believing guard is backed` | a guard that believes it holds is backed by the server's count of its own run (after a `force_unlock`: the key is gone, so the next renewal tells it) |
//! | `unlock Ok only if the hold lasted` | `unlock()` returns `Ok` only if the hold was there when the release ran |
//! | `a release takes only its own run's hold` | no release removes a hold taken after its own hold ended |
//! | `a new guard is not lost` | a granted guard never inherits an earlier run's loss |
//! | `nothing is left` | once nothing is in flight or settling, the server counts exactly the live guards |
//!
//! `lost()` firing for every hold that ended other than by its own release is the second
//! property: a hold can end only by a release, a `force_unlock` (then the key is gone and
//! the watchdog's next renewal fires `lost()`), or time passing its TTL (the loss deadline
//! fires first); a hold that ends any other way leaves a believing guard unbacked.
//!
//! The files: the world's [`State`] and the transitions the actions share (the callers'
//! handling of replies, settlement steps, the server running a request) in `src/state.rs`;
//! [`Action`] and `impl Model for Accounting` (which actions each state allows, their
//! effects, the properties) in `src/model.rs`; a counterexample as text ([`explain`]) in
//! `src/explain.rs`; the scripts and the registry in [`scripts`] and [`registry`].
//!
//! Run the check with `cargo run --release -p lockwise-model` (see `src/main.rs`; it checks
//! [`Bounds::CI`] and [`Bounds::DEEP`], as CI does); `tests/check.rs` runs it at
//! [`Bounds::QUICK`] and shows, for each fix, the counterexample found with it reverted.

mod explain;
mod model;
pub mod registry;
pub mod scripts;
mod state;

pub use explain::explain;
pub use model::Action;
pub use state::{Acquire, Guard, Late, Op, Phase, Reply, Req, Settlement, State, Who};

use registry::{Fixes, LOCAL_OWNERS};

/// Guard slots per local owner.
pub const GUARDS_PER_OWNER: usize = 2;
const SLOTS: usize = LOCAL_OWNERS * GUARDS_PER_OWNER;
/// The other client's owner in the hash.
const B: usize = 2;

/// How far the checker explores: each counter bounds how often its action may happen.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Bounds {
    /// Local owners that take part (1 or 2).
    pub owners: u8,
    /// Acquire calls per local owner (each owner may hold two guards at once).
    pub acquires: u8,
    /// Faults in all: replies lost, requests timed out, requests run twice.
    pub faults: u8,
    /// The other client's acquires.
    pub other_acquires: u8,
    /// `force_unlock` calls.
    pub force_unlocks: u8,
    /// Times every TTL set so far runs out.
    pub deadlines: u8,
    /// Acquires cancelled after they were sent.
    pub cancels: u8,
}

impl Bounds {
    /// Two owners of the client with two guards each, one lock, every fault (one of them per
    /// run): what CI checks to the end (`cargo run --release -p lockwise-model`).
    pub const CI: Bounds = Bounds {
        owners: 2,
        acquires: 2,
        faults: 1,
        other_acquires: 1,
        force_unlocks: 1,
        deadlines: 1,
        cancels: 1,
    };
    /// One owner, deeper: three acquires, three faults, two expiries, two cancellations,
    /// two acquires of the other client (also in CI).
    pub const DEEP: Bounds = Bounds {
        owners: 1,
        acquires: 3,
        faults: 3,
        other_acquires: 2,
        force_unlocks: 1,
        deadlines: 2,
        cancels: 2,
    };
    /// Small enough for the test suite's debug build: one owner, two acquires, two faults.
    /// Every reverted fix shows a counterexample here.
    pub const QUICK: Bounds = Bounds {
        owners: 1,
        acquires: 2,
        faults: 2,
        other_acquires: 1,
        force_unlocks: 1,
        deadlines: 1,
        cancels: 1,
    };
}

/// The model: its bounds and the fixes in force.
#[derive(Clone, Copy, Debug)]
pub struct Accounting {
    pub bounds: Bounds,
    pub fixes: Fixes,
}

impl Accounting {
    /// The model with today's code at `bounds`.
    pub fn new(bounds: Bounds) -> Accounting {
        Accounting {
            bounds,
            fixes: Fixes::ALL,
        }
    }

    fn owners(&self) -> std::ops::Range<usize> {
        0..self.bounds.owners as usize
    }
}

fn slots_of(owner: usize) -> std::ops::Range<usize> {
    owner * GUARDS_PER_OWNER..(owner + 1) * GUARDS_PER_OWNER
}

fn owner_of(slot: usize) -> usize {
    slot / GUARDS_PER_OWNER
}

/// The owner a request or reply is for.
fn owner(who: Who) -> usize {
    match who {
        Who::Acquire(o) | Who::Settle(o) => o as usize,
        Who::Release(slot) => owner_of(slot as usize),
    }
}

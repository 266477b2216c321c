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
//! Run the check with `cargo run --release -p lockwise-model` (see `src/main.rs`);
//! `tests/check.rs` runs it at the CI bounds and shows, for each fix, the counterexample
//! found with it reverted.

pub mod registry;
pub mod scripts;

use registry::{Fixes, HoldRegistry, Outcome, Release, Sent, LOCAL_OWNERS};
use scripts::{Hash, LockReply};
use stateright::{Model, Property};

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

/// Who a request or reply belongs to: an owner's acquire, a guard's release, an owner's
/// settlement.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Who {
    Acquire(u8),
    Release(u8),
    Settle(u8),
}

/// An acquire in flight (`Ticket` + `ticketed_call`): its ticket, whether its caller dropped
/// it (`Inflight`), and whether its reply comes after the TTL it set (`Ticket::unless_late`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Acquire {
    pub sent: Sent,
    pub abandoned: bool,
    pub late: Late,
}

/// Whether an acquire's reply is read after the TTL it set ran out.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Late {
    No,
    /// Time passed every TTL while the request was queued: its own TTL may or may not have
    /// run out by the time the reply is read.
    Maybe,
    /// Time passed every TTL after it ran: the reply is late.
    Must,
}

/// A settlement's state (`settle`'s loop): about to step, or waiting for its count or its
/// release. `first`: the first count it read.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Settlement {
    Step {
        first: Option<u8>,
    },
    Read {
        target: u8,
        expected: u8,
        handed_over: u8,
        unverified: bool,
        first: Option<u8>,
    },
    Release {
        first: Option<u8>,
    },
}

/// A request on the client's connection, in order.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Req {
    pub who: Who,
    pub op: Op,
    /// The caller still waits for its reply (else it timed out: it may still run).
    pub awaited: bool,
}

/// What a request runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Op {
    /// `lua/lock.lua`.
    Lock,
    /// `lua/unlock.lua` with `expected`; `run` (ghost): the server run of the released
    /// guard's hold (0 for a settlement's release).
    Unlock { expected: u8, run: u8 },
    /// `HGET` (`settle::owner_holds`).
    Hget,
}

/// A reply that reached the client.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Reply {
    /// The lock script's reply, and (ghost) the server run of the owner's field after it.
    Lock(LockReply, u8),
    Unlock(i8),
    Count(u8),
}

/// A guard of a local owner.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Guard {
    pub epoch: u8,
    /// The server run its hold belongs to (ghost: see [`scripts::Field`]).
    pub run: u8,
    pub phase: Phase,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Phase {
    /// Held, as far as the guard knows (unless its `lost()` fired).
    Held,
    /// Its release was sent; `lasted` (ghost): the hold was there when the release ran.
    Releasing { lasted: Option<bool> },
    /// Its release was left to the running settlement; `lasted` (ghost): the hold was there
    /// when it was handed over and at the settlement's first count.
    AwaitSettle { lasted: bool, counted: bool },
}

/// The world: server, client, network, the other client, and what is left of the bounds.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct State {
    pub hash: Hash,
    pub next_run: u8,
    /// Every TTL set so far has run out: the key may expire.
    pub expirable: bool,
    /// Server runs deleted by `force_unlock` (bit per run).
    pub forced: u32,
    pub registry: HoldRegistry,
    pub guards: [Option<Guard>; SLOTS],
    pub acquires: [Option<Acquire>; LOCAL_OWNERS],
    pub settlements: [Option<Settlement>; LOCAL_OWNERS],
    pub pipe: Vec<Req>,
    /// Acquire calls each local owner may still make.
    pub acquires_left: [u8; LOCAL_OWNERS],
    /// Replies read off the connection, not yet handled by their caller.
    pub replies: Vec<(Who, Reply)>,
    pub left: Bounds,
    /// A check that can only be made during a step failed: which.
    pub violation: Option<&'static str>,
}

/// Every step of the model, named after the code it mirrors.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Action {
    /// `Ticket::begin` and the lock script's send (`acquire_hold`; a re-entry when the
    /// owner holds already).
    Begin(u8),
    /// The caller drops an acquire after it was sent (`Inflight`'s drop).
    DropAcquire(u8),
    /// The server runs the request at the head of the connection.
    ServerRuns,
    /// The server runs it, its reply is lost, and the client sends it again (redis-rs's
    /// Cluster retry; only with `Fixes::no_resend` off).
    ServerRunsResent,
    /// The caller reads its reply (`ticketed_call`, `send_release`, `settle`).
    Reply(Who),
    /// An acquire's reply, read after the TTL it set ran out (`Ticket::unless_late`).
    ReplyLate(u8),
    /// The reply is lost (the connection dropped after the command ran): the caller's
    /// outcome is unknown.
    ReplyLost(Who),
    /// The caller's response timeout passes while its request is still queued: it may run
    /// later, or never.
    TimedOut(Who),
    /// A timed-out request is dropped with its connection, never run.
    RequestDropped,
    /// `release` (an unlock, or a dropped guard) of the guard in a slot.
    Released(u8),
    /// A settlement step (`settle`'s loop: `settle_target`, then the hint or a count read).
    Settle(u8),
    /// The watchdog renews an owner's hold (`renew.lua`; gone: the run is lost).
    Renew(u8),
    /// Time passes every TTL set so far: the lease timer and the watchdog mark each run with
    /// guards lost (`lease_deadline`), then the key may expire.
    DeadlinePasses,
    /// The key expires.
    KeyExpires,
    /// `force_unlock` by an operator.
    ForceUnlock,
    /// Another client's acquire (`lua/lock.lua` for owner B).
    OtherAcquires,
    /// Another client's release.
    OtherReleases,
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

impl State {
    /// Whether the guard in `slot` believes it holds: held, and its `lost()` has not fired.
    pub fn believes(&self, slot: usize) -> bool {
        self.guards[slot].is_some_and(|g| g.phase == Phase::Held && !self.registry.is_lost(g.epoch))
    }

    fn forced(&self, run: u8) -> bool {
        self.forced & (1 << run) != 0
    }

    /// Whether the server still has the hold of the guard in `slot` (its run's field).
    fn backed(&self, slot: usize) -> bool {
        let g = self.guards[slot].unwrap();
        self.hash.fields[owner_of(slot)].is_some_and(|f| f.run == g.run)
    }

    /// Nothing in flight, queued, read or settling.
    pub fn quiescent(&self) -> bool {
        self.pipe.is_empty()
            && self.replies.is_empty()
            && self.acquires.iter().all(Option::is_none)
            && self.settlements.iter().all(Option::is_none)
            && self
                .registry
                .entries
                .iter()
                .flatten()
                .all(|h| !h.settling && !h.doubt)
            && self.guards.iter().flatten().all(|g| g.phase == Phase::Held)
    }

    fn fail(&mut self, why: &'static str) {
        self.violation.get_or_insert(why);
    }

    fn send(&mut self, who: Who, op: Op) {
        self.pipe.push(Req {
            who,
            op,
            awaited: true,
        });
    }

    /// Starts the settlement `finish`, `acquired` or `released` asked for (`spawn_settle`).
    fn spawn_settle(&mut self, owner: usize) {
        assert!(self.settlements[owner].is_none(), "a second settlement");
        self.settlements[owner] = Some(Settlement::Step { first: None });
    }

    /// `settle::finish`: ends a counted call that left no guard.
    fn finish(&mut self, m: &Accounting, owner: usize, outcome: Outcome) {
        if self.registry.finish(owner, outcome, m.fixes) {
            self.spawn_settle(owner);
        }
    }

    /// The caller `who` handles its reply (`None`: an error with no reply, the outcome
    /// unknown). `late`: an acquire's reply read after the TTL it set.
    fn handle(&mut self, m: &Accounting, who: Who, reply: Option<Reply>, late: bool) {
        let o = owner(who);
        match who {
            Who::Acquire(_) => {
                let a = self.acquires[o].take().expect("an acquire in flight");
                match reply {
                    // `ticketed_call`'s abandoned path, and `Ticket::unless_late`.
                    Some(Reply::Lock(LockReply::Granted(n), _)) if a.abandoned || late => {
                        self.finish(m, o, Outcome::Abandoned(a.sent, n));
                    }
                    Some(Reply::Lock(LockReply::Granted(n), run)) => {
                        let (epoch, settle) = self.registry.acquired(o, a.sent, n, m.fixes);
                        if self.registry.is_lost(epoch) {
                            self.fail("a new guard is not lost");
                        }
                        let slot = slots_of(o)
                            .find(|slot| self.guards[*slot].is_none())
                            .expect("the bounds leave a slot for every guard");
                        self.guards[slot] = Some(Guard {
                            epoch,
                            run,
                            phase: Phase::Held,
                        });
                        if settle {
                            self.spawn_settle(o);
                        }
                    }
                    Some(_) => self.finish(m, o, Outcome::Known),
                    // `Ticket::finish`: an acquire's unknown outcome.
                    None => self.finish(m, o, Outcome::AcquireUnknown(a.sent)),
                }
            }
            Who::Release(slot) => {
                let outcome = match reply {
                    Some(Reply::Unlock(-1)) => Outcome::Forgotten,
                    Some(Reply::Unlock(-2)) | None => Outcome::Unknown,
                    Some(_) => Outcome::Known,
                };
                // `release`: Ok for n >= -2 except -1 (NotHeld); an error otherwise.
                let ok = matches!(reply, Some(Reply::Unlock(n)) if n != -1);
                let g = self.guards[slot as usize]
                    .take()
                    .expect("a releasing guard");
                if ok && g.phase != (Phase::Releasing { lasted: Some(true) }) {
                    self.fail("unlock Ok only if the hold lasted");
                }
                self.finish(m, o, outcome);
            }
            Who::Settle(_) => {
                let task = self.settlements[o].expect("a settlement");
                match (task, reply) {
                    // `settle`: a failed step is retried after a pause.
                    (Settlement::Read { first, .. } | Settlement::Release { first }, None) => {
                        self.settlements[o] = Some(Settlement::Step { first });
                    }
                    (
                        Settlement::Read {
                            target,
                            expected,
                            handed_over,
                            unverified,
                            first,
                        },
                        Some(Reply::Count(count)),
                    ) => {
                        let read = Some((handed_over, unverified));
                        self.settle_step(m, o, target, expected, first, count, read)
                    }
                    (Settlement::Release { first }, Some(_)) => {
                        self.settlements[o] = Some(Settlement::Step { first });
                    }
                    (task, reply) => unreachable!("{task:?} got {reply:?}"),
                }
            }
        }
    }

    /// One settlement step with the server's `count`: read (`read`: the guards that had
    /// handed their release over, and whether the run was unverified, when it was sent),
    /// or the hint.
    #[allow(clippy::too_many_arguments)]
    fn settle_step(
        &mut self,
        m: &Accounting,
        owner: usize,
        target: u8,
        expected: u8,
        first: Option<u8>,
        count: u8,
        read: Option<(u8, bool)>,
    ) {
        let first = first.or(Some(count));
        if let Some((handed_over, unverified)) = read {
            if unverified && count == 1 && expected >= 1 {
                self.registry.counted(owner, handed_over, false);
                self.registry.give_up_run(owner);
                self.settlements[owner] = Some(Settlement::Step { first });
                return;
            }
            let (handed_over, lasted) = if m.fixes.verdict_after_handover {
                (handed_over, count >= expected)
            } else {
                (0, false)
            };
            self.registry.counted(owner, handed_over, lasted);
        }
        if count > target {
            // Release one hold, but only while the count is still what was read.
            self.send(
                Who::Settle(owner as u8),
                Op::Unlock {
                    expected: count,
                    run: 0,
                },
            );
            self.settlements[owner] = Some(Settlement::Release { first });
            return;
        }
        // Before the fix, every guard was told by the settlement's first count.
        let lasted = !m.fixes.verdict_after_handover && first.is_some_and(|f| f >= expected);
        let lost = count < target;
        match self.registry.settle_done(owner, target, lost, lasted) {
            None => self.settlements[owner] = Some(Settlement::Step { first }),
            Some((releasing, verdicts)) => {
                self.settlements[owner] = None;
                for slot in slots_of(owner) {
                    if releasing & (1 << slot) == 0 {
                        continue;
                    }
                    let g = self.guards[slot]
                        .take()
                        .expect("a guard whose release the settlement took over");
                    let Phase::AwaitSettle { lasted: truly, .. } = g.phase else {
                        unreachable!("{g:?}")
                    };
                    // `release`'s `Release::Settling` arm.
                    let told_lasted = verdicts & (1 << slot) != 0;
                    let ok = told_lasted && !self.registry.is_lost(g.epoch);
                    if ok && !truly {
                        self.fail("unlock Ok only if the hold lasted");
                    }
                }
            }
        }
    }

    /// Runs the request at the head of the connection on the server.
    fn run_head(&mut self) -> (Req, Reply) {
        let req = self.pipe.remove(0);
        let o = owner(req.who);
        let reply = match req.op {
            Op::Lock => {
                let r = scripts::lock(&mut self.hash, o, &mut self.next_run);
                if matches!(r, LockReply::Granted(_)) {
                    self.expirable = false;
                }
                Reply::Lock(r, self.hash.fields[o].map_or(0, |f| f.run))
            }
            Op::Unlock { expected, run } => {
                let before = self.hash.fields[o];
                let r = scripts::unlock(&mut self.hash, o, expected);
                if let Who::Release(slot) = req.who {
                    let own_run = before.is_some_and(|f| f.run == run);
                    if r >= 0 && !own_run {
                        self.fail("a release takes only its own run's hold");
                    }
                    // The guard is still waiting for this reply (not timed out).
                    if let Some(Guard {
                        phase: Phase::Releasing { lasted },
                        ..
                    }) = &mut self.guards[slot as usize]
                    {
                        if req.awaited {
                            lasted.get_or_insert(own_run);
                        }
                    }
                }
                Reply::Unlock(r)
            }
            Op::Hget => {
                // The settlement's first count decides whether the holds it took over
                // lasted (ghost: were they still there?).
                for slot in slots_of(o) {
                    let backed = self.guards[slot].is_some() && self.backed(slot);
                    if let Some(Guard {
                        phase: Phase::AwaitSettle { lasted, counted },
                        ..
                    }) = &mut self.guards[slot]
                    {
                        if !*counted {
                            *lasted &= backed;
                            *counted = true;
                        }
                    }
                }
                Reply::Count(self.hash.hget(o))
            }
        };
        (req, reply)
    }
}

impl Model for Accounting {
    type State = State;
    type Action = Action;

    fn init_states(&self) -> Vec<State> {
        vec![State {
            hash: Hash::default(),
            next_run: 0,
            expirable: false,
            forced: 0,
            registry: HoldRegistry::default(),
            guards: [None; SLOTS],
            acquires: [None; LOCAL_OWNERS],
            settlements: [None; LOCAL_OWNERS],
            pipe: Vec::new(),
            acquires_left: [self.bounds.acquires; LOCAL_OWNERS],
            replies: Vec::new(),
            left: self.bounds,
            violation: None,
        }]
    }

    fn actions(&self, s: &State, actions: &mut Vec<Action>) {
        for o in self.owners() {
            let ou = o as u8;
            let entry = s.registry.entries[o];
            let guards = slots_of(o).filter(|slot| s.guards[*slot].is_some()).count();
            match s.acquires[o] {
                None => {
                    let may_begin = entry.is_none_or(|h| !self.fixes.one_call || !h.busy());
                    if s.acquires_left[o] > 0 && guards < GUARDS_PER_OWNER && may_begin {
                        actions.push(Action::Begin(ou));
                    }
                }
                Some(a) if !a.abandoned && s.left.cancels > 0 => {
                    actions.push(Action::DropAcquire(ou))
                }
                Some(_) => {}
            }
            if let Some(Settlement::Step { .. }) = s.settlements[o] {
                actions.push(Action::Settle(ou));
            }
            if entry.is_some_and(|h| h.holds > 0 && !h.is_lost) {
                actions.push(Action::Renew(ou));
            }
            for slot in slots_of(o) {
                let Some(g) = s.guards[slot] else { continue };
                if g.phase != Phase::Held {
                    continue;
                }
                let busy = entry.is_some_and(|h| {
                    self.fixes.one_call && h.epoch == g.epoch && h.inflight > 0 && !h.settling
                });
                if !busy {
                    actions.push(Action::Released(slot as u8));
                }
            }
        }
        for &(who, r) in &s.replies {
            actions.push(Action::Reply(who));
            if let (Who::Acquire(o), Reply::Lock(LockReply::Granted(_), _)) = (who, r) {
                if s.acquires[o as usize].is_some_and(|a| a.late != Late::No) {
                    actions.push(Action::ReplyLate(o));
                }
            }
            if s.left.faults > 0 {
                actions.push(Action::ReplyLost(who));
            }
        }
        if s.left.faults > 0 {
            for r in &s.pipe {
                if r.awaited {
                    actions.push(Action::TimedOut(r.who));
                }
            }
        }
        if let Some(head) = s.pipe.first() {
            actions.push(Action::ServerRuns);
            if !self.fixes.no_resend && head.awaited && s.left.faults > 0 {
                actions.push(Action::ServerRunsResent);
            }
        }
        if s.pipe.iter().any(|r| !r.awaited) {
            actions.push(Action::RequestDropped);
        }
        if s.left.deadlines > 0 && s.hash.exists() && !s.expirable {
            actions.push(Action::DeadlinePasses);
        }
        if s.expirable && s.hash.exists() {
            actions.push(Action::KeyExpires);
        }
        if s.left.force_unlocks > 0 && s.hash.exists() {
            actions.push(Action::ForceUnlock);
        }
        if s.left.other_acquires > 0 && !s.hash.exists() {
            actions.push(Action::OtherAcquires);
        }
        if s.hash.fields[B].is_some() {
            actions.push(Action::OtherReleases);
        }
    }

    fn next_state(&self, last: &State, action: Action) -> Option<State> {
        let mut s = last.clone();
        match action {
            Action::Begin(o) => {
                let o = o as usize;
                let sent = s.registry.begin(o, self.fixes)?;
                s.acquires_left[o] -= 1;
                s.acquires[o] = Some(Acquire {
                    sent,
                    abandoned: false,
                    late: Late::No,
                });
                s.send(Who::Acquire(o as u8), Op::Lock);
            }
            Action::DropAcquire(o) => {
                s.left.cancels -= 1;
                s.acquires[o as usize].as_mut()?.abandoned = true;
            }
            Action::ServerRuns => {
                let (req, reply) = s.run_head();
                if req.awaited {
                    s.replies.push((req.who, reply));
                }
            }
            Action::ServerRunsResent => {
                s.left.faults -= 1;
                let (req, _) = s.run_head();
                s.pipe.insert(0, req);
            }
            Action::Reply(_) | Action::ReplyLate(..) => {
                let who = match action {
                    Action::ReplyLate(o) => Who::Acquire(o),
                    _ => who_of(action),
                };
                let at = s.replies.iter().position(|r| r.0 == who)?;
                let (_, reply) = s.replies.remove(at);
                let late = matches!(action, Action::ReplyLate(_));
                if !late
                    && s.acquires[owner(who)].is_some_and(|a| a.late == Late::Must)
                    && matches!(who, Who::Acquire(_))
                {
                    return None;
                }
                s.handle(self, who, Some(reply), late);
            }
            Action::ReplyLost(who) => {
                s.left.faults -= 1;
                let at = s.replies.iter().position(|r| r.0 == who)?;
                s.replies.remove(at);
                s.handle(self, who, None, false);
            }
            Action::TimedOut(who) => {
                s.left.faults -= 1;
                let req = s.pipe.iter_mut().find(|r| r.who == who && r.awaited)?;
                req.awaited = false;
                s.handle(self, who, None, false);
            }
            Action::RequestDropped => {
                let at = s.pipe.iter().position(|r| !r.awaited)?;
                s.pipe.remove(at);
            }
            Action::Released(slot) => {
                let slot = slot as usize;
                let o = owner_of(slot);
                let g = s.guards[slot]?;
                match s.registry.released(o, g.epoch, slot, self.fixes) {
                    Release::Busy => return None,
                    Release::Stale { settle } => {
                        s.guards[slot] = None;
                        if settle {
                            s.spawn_settle(o);
                        }
                    }
                    Release::Settling => {
                        let lasted = s.backed(slot);
                        s.guards[slot] = Some(Guard {
                            phase: Phase::AwaitSettle {
                                lasted,
                                counted: false,
                            },
                            ..g
                        });
                    }
                    Release::Send { expected } => {
                        s.guards[slot] = Some(Guard {
                            phase: Phase::Releasing { lasted: None },
                            ..g
                        });
                        s.send(
                            Who::Release(slot as u8),
                            Op::Unlock {
                                expected,
                                run: g.run,
                            },
                        );
                    }
                }
            }
            Action::Settle(o) => {
                let o = o as usize;
                let Some(Settlement::Step { first }) = s.settlements[o] else {
                    return None;
                };
                let t = s.registry.settle_target(o, self.fixes);
                match t.hint {
                    Some(count) => s.settle_step(self, o, t.target, t.expected, first, count, None),
                    None => {
                        s.settlements[o] = Some(Settlement::Read {
                            target: t.target,
                            expected: t.expected,
                            handed_over: t.handed_over,
                            unverified: t.unverified,
                            first,
                        });
                        s.send(Who::Settle(o as u8), Op::Hget);
                    }
                }
            }
            Action::Renew(o) => {
                let o = o as usize;
                if s.hash.fields[o].is_some() {
                    s.expirable = false;
                } else {
                    s.registry.mark_lost(o);
                }
            }
            Action::DeadlinePasses => {
                s.left.deadlines -= 1;
                for o in self.owners() {
                    if s.registry.entries[o].is_some_and(|h| h.holds > 0) {
                        s.registry.mark_lost(o);
                    }
                    let queued = s.pipe.iter().any(|r| r.who == Who::Acquire(o as u8));
                    if let Some(a) = &mut s.acquires[o] {
                        a.late = if queued { Late::Maybe } else { Late::Must };
                    }
                }
                s.expirable = true;
            }
            Action::KeyExpires => s.hash = Hash::default(),
            Action::ForceUnlock => {
                s.left.force_unlocks -= 1;
                for f in s.hash.fields.iter().flatten() {
                    s.forced |= 1 << f.run;
                }
                scripts::force_unlock(&mut s.hash);
            }
            Action::OtherAcquires => {
                s.left.other_acquires -= 1;
                scripts::lock(&mut s.hash, B, &mut s.next_run);
                s.expirable = false;
            }
            Action::OtherReleases => {
                scripts::unlock(&mut s.hash, B, 0);
            }
        }
        Some(s)
    }

    fn properties(&self) -> Vec<Property<Self>> {
        vec![
            Property::always("no two owners", |m: &Accounting, s: &State| {
                let mut owners = 0;
                for o in m.owners() {
                    let believes = slots_of(o)
                        .any(|slot| s.believes(slot) && !s.forced(s.guards[slot].unwrap().run));
                    owners += believes as u8;
                }
                owners += s.hash.fields[B].is_some() as u8;
                owners <= 1
            }),
            Property::always(
                "a believing guard is backed",
                |m: &Accounting, s: &State| {
                    m.owners().all(|o| {
                        let believing: Vec<usize> =
                            slots_of(o).filter(|slot| s.believes(*slot)).collect();
                        believing.iter().all(|slot| {
                            let g = s.guards[*slot].unwrap();
                            // After a `force_unlock`, the guard learns of the loss at the next
                            // renewal (the key is gone), or from the reply or the settlement under
                            // way when the owner's own call has put a hold back since.
                            let settling = s.registry.entries[o]
                                .is_some_and(|h| h.inflight > 0 || h.settling || h.doubt);
                            match s.hash.fields[o] {
                                Some(f) if f.run == g.run => f.count as usize >= believing.len(),
                                Some(_) => s.forced(g.run) && settling,
                                None => s.forced(g.run),
                            }
                        })
                    })
                },
            ),
            Property::always("unlock Ok only if the hold lasted", |_, s: &State| {
                s.violation != Some("unlock Ok only if the hold lasted")
            }),
            Property::always("a release takes only its own run's hold", |_, s: &State| {
                s.violation != Some("a release takes only its own run's hold")
            }),
            Property::always("a new guard is not lost", |_, s: &State| {
                s.violation != Some("a new guard is not lost")
            }),
            Property::always("nothing is left", |m: &Accounting, s: &State| {
                if !s.quiescent() || s.expirable {
                    return true;
                }
                m.owners().all(|o| {
                    let guards: Vec<Guard> =
                        slots_of(o).filter_map(|slot| s.guards[slot]).collect();
                    if guards
                        .iter()
                        .any(|g| s.registry.is_lost(g.epoch) || s.forced(g.run))
                    {
                        return true;
                    }
                    s.hash.hget(o) as usize == guards.len()
                })
            }),
        ]
    }
}

/// The caller of a `Reply` action.
fn who_of(action: Action) -> Who {
    match action {
        Action::Reply(who) => who,
        _ => unreachable!(),
    }
}

/// A counterexample of `property`, one line per step up to the first state that breaks it:
/// the action, then what the server, the registry and the guards hold after it. Returns the
/// text and the number of steps.
pub fn explain(
    model: &Accounting,
    property: &Property<Accounting>,
    path: &stateright::Path<State, Action>,
) -> (String, usize) {
    let mut out = String::new();
    let steps = path.clone().into_vec();
    let mut n = 0;
    for (i, (state, action)) in steps.iter().enumerate() {
        let Some(action) = action else { continue };
        let next = steps.get(i + 1).map_or(state, |s| &s.0);
        n += 1;
        out.push_str(&format!("{n:>3}. {action:?}\n     {}\n", next.summary()));
        if !(property.condition)(model, next) {
            break;
        }
    }
    (out, n)
}

impl State {
    /// One line: the hash's fields (`owner=count@run`), the registry's entries, the guards.
    pub fn summary(&self) -> String {
        let names = ["A0", "A1", "B"];
        let fields: Vec<String> = self
            .hash
            .fields
            .iter()
            .enumerate()
            .filter_map(|(o, f)| f.map(|f| format!("{}={}@{}", names[o], f.count, f.run)))
            .collect();
        let entries: Vec<String> = self
            .registry
            .entries
            .iter()
            .enumerate()
            .filter_map(|(o, h)| {
                h.map(|h| {
                    format!(
                        "{}:e{} holds {} inflight {}{}{}{}",
                        names[o],
                        h.epoch,
                        h.holds,
                        h.inflight,
                        if h.is_lost { " lost" } else { "" },
                        if h.doubt { " doubt" } else { "" },
                        if h.settling { " settling" } else { "" },
                    )
                })
            })
            .collect();
        let guards: Vec<String> = self
            .guards
            .iter()
            .enumerate()
            .filter_map(|(slot, g)| {
                g.map(|g| {
                    format!(
                        "g{slot}(e{} run {} {:?}{})",
                        g.epoch,
                        g.run,
                        g.phase,
                        if self.registry.is_lost(g.epoch) {
                            " lost"
                        } else {
                            ""
                        }
                    )
                })
            })
            .collect();
        format!(
            "server [{}]{} | registry [{}] | guards [{}]{}",
            fields.join(" "),
            if self.expirable { " expirable" } else { "" },
            entries.join("; "),
            guards.join(" "),
            self.violation
                .map_or(String::new(), |v| format!(" | VIOLATED: {v}"))
        )
    }
}

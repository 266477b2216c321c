//! The world the model checks ([`State`]: the server's hash, the client's registry and
//! guards, the connection, what is left of the bounds) and the types it is made of, with the
//! transitions the actions share: a caller handling its reply or its error
//! (`State::handle`), a settlement step (`State::settle_step`), the server running the
//! request at the head of the connection (`State::run_head`).

use crate::registry::{HoldRegistry, Outcome, Sent, LOCAL_OWNERS};
use crate::scripts::{self, Hash, LockReply};
use crate::{owner, owner_of, slots_of, Accounting, Bounds, SLOTS};

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

impl State {
    /// Whether the guard in `slot` believes it holds: held, and its `lost()` has not fired.
    pub fn believes(&self, slot: usize) -> bool {
        self.guards[slot].is_some_and(|g| g.phase == Phase::Held && !self.registry.is_lost(g.epoch))
    }

    pub(crate) fn forced(&self, run: u8) -> bool {
        self.forced & (1 << run) != 0
    }

    /// Whether the server still has the hold of the guard in `slot` (its run's field).
    pub(crate) fn backed(&self, slot: usize) -> bool {
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

    pub(crate) fn send(&mut self, who: Who, op: Op) {
        self.pipe.push(Req {
            who,
            op,
            awaited: true,
        });
    }

    /// Starts the settlement `finish`, `acquired` or `released` asked for (`spawn_settle`).
    pub(crate) fn spawn_settle(&mut self, owner: usize) {
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
    pub(crate) fn handle(&mut self, m: &Accounting, who: Who, reply: Option<Reply>, late: bool) {
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
    pub(crate) fn settle_step(
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
    pub(crate) fn run_head(&mut self) -> (Req, Reply) {
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

//! The model's steps and properties: [`Action`], and `impl Model for Accounting` (the
//! initial state, which actions each state allows, what each one does, the properties the
//! checker verifies).

use stateright::{Model, Property};

use crate::registry::{HoldRegistry, Release, LOCAL_OWNERS};
use crate::scripts::{self, Hash, LockReply};
use crate::state::{Acquire, Guard, Late, Op, Phase, Reply, Settlement, State, Who};
use crate::{owner, owner_of, slots_of, Accounting, B, GUARDS_PER_OWNER, SLOTS};

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

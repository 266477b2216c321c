//! The client's hold registry for one lock, as `src/engine/registry` keeps it: per owner, the
//! guards of its current run, the call in flight, the doubt and the settlement. Every
//! function here is named after the registry function it mirrors and follows its branches in
//! the same order; [`Fixes`] turns off the fixes of the accounting issue one at a time, so
//! the checker can show what each one prevents.

/// Owners of the client under test (`A0`, `A1`); the model's third owner `B` is another client.
pub const LOCAL_OWNERS: usize = 2;

/// The fixes that make the hold accounting sound, each of which the model can revert to the
/// code's behaviour before it (all `true`: today's code).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Fixes {
    /// `Release::Send { expected }` carries the run's exact count (before: 0, "any hold").
    pub exact_count: bool,
    /// A grant that joins a run already known lost starts a new run (`start_new_run` in
    /// `acquired`, as one that finds the earlier holds gone always did); before: it joined
    /// the lost run, and its guard came back with its `lost()` already fired.
    pub new_run: bool,
    /// One acquire or release per owner in flight (`Begin::Wait`, `Release::Busy`); before:
    /// calls overlapped, and a grant's count was trusted only when nothing else was in
    /// flight or in doubt when it was sent (`Sent::quiescent`).
    pub one_call: bool,
    /// An abandoned acquire's grant goes through the same run check (`finish` with
    /// `Outcome::Abandoned`); before: it was settled against the old guards' count.
    pub abandoned_run_check: bool,
    /// No transparent resend of a script whose reply was lost (the Cluster client's
    /// `retries(0)`); before: redis-rs sent it again after reconnecting.
    pub no_resend: bool,
    /// A guard that handed its release over to a settlement learns whether its hold lasted
    /// from a count read after the hand-over (`HoldRegistry::counted`); before: from the
    /// settlement's first count, which may predate the hand-over.
    pub verdict_after_handover: bool,
    /// A re-entry whose outcome is unknown leaves the run unverified, and a count that
    /// cannot tell the run from a new one gives it up (`HoldRegistry::give_up_run`);
    /// before: a count equal to the guards' was taken as the run's.
    pub unverified_reentry: bool,
}

impl Fixes {
    /// Today's code.
    pub const ALL: Fixes = Fixes {
        exact_count: true,
        new_run: true,
        one_call: true,
        abandoned_run_check: true,
        no_resend: true,
        verdict_after_handover: true,
        unverified_reentry: true,
    };
}

/// `OwnerHolds`: one owner's entry (the fields the accounting reads; timers and metadata
/// are left out).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct OwnerHolds {
    pub epoch: u8,
    /// Guards alive for this run.
    pub holds: u8,
    pub is_lost: bool,
    pub inflight: u8,
    pub doubt: bool,
    pub settling: bool,
    pub hint: Option<u8>,
    /// Guards (slots) whose release the running settlement took over (`releasing`), those
    /// of them told whether their hold lasted, and what they were told.
    pub releasing: u8,
    pub told: u8,
    pub lasted: u8,
    pub unverified: bool,
}

impl OwnerHolds {
    fn new(epoch: u8) -> OwnerHolds {
        OwnerHolds {
            epoch,
            holds: 0,
            is_lost: false,
            inflight: 0,
            doubt: false,
            settling: false,
            hint: None,
            releasing: 0,
            told: 0,
            lasted: 0,
            unverified: false,
        }
    }

    /// `is_idle`.
    pub fn is_idle(&self) -> bool {
        self.holds == 0 && self.inflight == 0 && !self.doubt && !self.settling
    }

    /// `busy`.
    pub fn busy(&self) -> bool {
        self.inflight > 0 || self.settling
    }

    /// `start_settling`.
    fn start_settling(&mut self) -> bool {
        if self.doubt && self.inflight == 0 && !self.settling {
            self.settling = true;
            return true;
        }
        false
    }

    /// `start_new_run`: what is in flight carries over.
    fn start_new_run(&mut self, epoch: u8) {
        let inflight = self.inflight;
        *self = OwnerHolds::new(epoch);
        self.inflight = inflight;
    }
}

/// `Sent`: what the registry knew when an acquire was sent.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Sent {
    pub base: u8,
    /// Before `one_call`: nothing else of the owner was in flight or in doubt at the send.
    pub quiescent: bool,
}

/// `Outcome`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Outcome {
    Known,
    Unknown,
    AcquireUnknown(Sent),
    Forgotten,
    Abandoned(Sent, u8),
}

/// `Release`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Release {
    Send { expected: u8 },
    Busy,
    Settling,
    Stale { settle: bool },
}

/// `SettleTarget`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct SettleTarget {
    pub target: u8,
    pub expected: u8,
    pub hint: Option<u8>,
    /// The slots that had handed their release over (`handed_over`).
    pub handed_over: u8,
    pub unverified: bool,
}

/// `HoldRegistry` for one lock: the entries of the local owners, the epoch counter, and the
/// runs' `lost` tokens (bit `e` set: the token of epoch `e` was cancelled).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct HoldRegistry {
    pub entries: [Option<OwnerHolds>; LOCAL_OWNERS],
    pub next_epoch: u8,
    pub lost: u32,
}

impl HoldRegistry {
    fn new_epoch(&mut self) -> u8 {
        self.next_epoch += 1;
        self.next_epoch
    }

    fn entry(&mut self, owner: usize) -> &mut OwnerHolds {
        if self.entries[owner].is_none() {
            let epoch = self.new_epoch();
            self.entries[owner] = Some(OwnerHolds::new(epoch));
        }
        self.entries[owner].as_mut().unwrap()
    }

    /// `mark_lost`: cancels the run's token.
    pub fn mark_lost(&mut self, owner: usize) {
        let h = self.entries[owner].as_mut().expect("an entry");
        h.is_lost = true;
        self.lost |= 1 << h.epoch;
    }

    /// Whether the token of `epoch` was cancelled (a guard's `lost()` fired).
    pub fn is_lost(&self, epoch: u8) -> bool {
        self.lost & (1 << epoch) != 0
    }

    fn remove_if_idle(&mut self, owner: usize) {
        if self.entries[owner].is_some_and(|h| h.is_idle()) {
            self.entries[owner] = None;
        }
    }

    /// `begin`: `None` is `Begin::Wait`.
    pub fn begin(&mut self, owner: usize, fixes: Fixes) -> Option<Sent> {
        let h = self.entry(owner);
        if h.settling || (fixes.one_call && h.busy()) {
            return None;
        }
        let quiescent = h.inflight == 0 && !h.doubt;
        h.inflight += 1;
        Some(Sent {
            base: h.holds,
            quiescent,
        })
    }

    /// `finish`: returns whether the caller must start a settlement.
    pub fn finish(&mut self, owner: usize, outcome: Outcome, fixes: Fixes) -> bool {
        if self.entries[owner].is_none() {
            return false;
        }
        let new_epoch = self.next_epoch + 1;
        let mut new_run = false;
        let mut lose = false;
        {
            let h = self.entries[owner].as_mut().unwrap();
            h.inflight = h.inflight.saturating_sub(1);
            match outcome {
                Outcome::Known => {}
                Outcome::Unknown => {
                    h.doubt = true;
                    h.hint = None;
                }
                Outcome::AcquireUnknown(sent) => {
                    h.doubt = true;
                    h.hint = None;
                    h.unverified |= fixes.unverified_reentry && sent.base > 0;
                }
                Outcome::Abandoned(sent, n) => {
                    let alone = fixes.one_call || (sent.quiescent && h.inflight == 0);
                    let hint = (alone && !h.doubt).then_some(n);
                    if fixes.abandoned_run_check && (h.is_lost || n <= sent.base) {
                        lose = true;
                        new_run = true;
                    }
                    h.hint = hint;
                    h.doubt = true;
                }
                Outcome::Forgotten => {
                    if h.holds > 0 {
                        lose = true;
                    }
                }
            }
        }
        if lose {
            self.mark_lost(owner);
        }
        let h = self.entries[owner].as_mut().unwrap();
        if new_run {
            let (hint, doubt) = (h.hint, h.doubt);
            h.start_new_run(new_epoch);
            h.hint = hint;
            h.doubt = doubt;
            self.next_epoch = new_epoch;
        }
        let h = self.entries[owner].as_mut().unwrap();
        let settle = h.start_settling();
        self.remove_if_idle(owner);
        settle
    }

    /// `acquired`: records a granted hold before its guard exists. Returns the guard's epoch
    /// and whether the caller must start a settlement.
    pub fn acquired(
        &mut self,
        owner: usize,
        sent: Sent,
        server_holds: u8,
        fixes: Fixes,
    ) -> (u8, bool) {
        let new_epoch = self.next_epoch + 1;
        self.entry(owner);
        let h = self.entries[owner].unwrap();
        let expected = sent.base + 1;
        let mut h = h;
        h.inflight = h.inflight.saturating_sub(1);
        // Before `one_call`, a count was trusted only from a call sent alone.
        let alone = fixes.one_call || sent.quiescent;
        if (fixes.new_run && h.is_lost) || (alone && server_holds < expected) {
            self.entries[owner] = Some(h);
            self.mark_lost(owner);
            let mut h2 = self.entries[owner].unwrap();
            let doubt = h2.doubt;
            h2.start_new_run(new_epoch);
            self.next_epoch = new_epoch;
            h2.doubt = doubt || server_holds != 1;
            h = h2;
        } else if !alone || server_holds > expected {
            h.doubt = true;
            h.hint = None;
        }
        h.holds += 1;
        let settle = h.start_settling();
        self.entries[owner] = Some(h);
        (h.epoch, settle)
    }

    /// `released`, for the guard in `slot`.
    pub fn released(&mut self, owner: usize, epoch: u8, slot: usize, fixes: Fixes) -> Release {
        let Some(h) = self.entries[owner].as_mut() else {
            return Release::Stale { settle: false };
        };
        if h.epoch != epoch {
            h.doubt = true;
            h.hint = None;
            return Release::Stale {
                settle: h.start_settling(),
            };
        }
        if fixes.one_call && h.inflight > 0 && !h.settling {
            return Release::Busy;
        }
        let expected = h.holds;
        h.holds = h.holds.saturating_sub(1);
        if h.settling {
            h.releasing |= 1 << slot;
            return Release::Settling;
        }
        h.inflight += 1;
        Release::Send {
            expected: if fixes.exact_count { expected } else { 0 },
        }
    }

    /// `settle_target`.
    pub fn settle_target(&mut self, owner: usize, fixes: Fixes) -> SettleTarget {
        match self.entries[owner].as_mut() {
            None => SettleTarget {
                target: 0,
                expected: 0,
                hint: None,
                handed_over: 0,
                unverified: false,
            },
            Some(h) => {
                let waiting = fixes.verdict_after_handover && h.releasing & !h.told != 0;
                let hint = h.hint.take().filter(|_| !waiting && !h.unverified);
                SettleTarget {
                    target: h.holds,
                    expected: h.holds + h.releasing.count_ones() as u8,
                    hint,
                    handed_over: h.releasing,
                    unverified: h.unverified,
                }
            }
        }
    }

    /// `counted`.
    pub fn counted(&mut self, owner: usize, handed_over: u8, lasted: bool) {
        if let Some(h) = self.entries[owner].as_mut() {
            h.unverified = false;
            let new = handed_over & h.releasing & !h.told;
            h.told |= new;
            if lasted {
                h.lasted |= new;
            }
        }
    }

    /// `give_up_run`.
    pub fn give_up_run(&mut self, owner: usize) {
        if self.entries[owner].is_none() {
            return;
        }
        let epoch = self.new_epoch();
        self.mark_lost(owner);
        let h = self.entries[owner].as_mut().unwrap();
        let (releasing, told, lasted, hint) = (h.releasing, h.told, h.lasted, h.hint);
        h.start_new_run(epoch);
        h.settling = true;
        h.doubt = true;
        h.hint = hint;
        h.releasing = releasing;
        h.told = told;
        h.lasted = lasted;
    }

    /// `settle_done`: `Some((releasing, lasted))` (the slots whose release it took over,
    /// and those told their hold lasted; `lasted` tells the others) when the settlement
    /// ended, `None` when a guard was released meanwhile and it goes on.
    pub fn settle_done(
        &mut self,
        owner: usize,
        target: u8,
        lost: bool,
        lasted: bool,
    ) -> Option<(u8, u8)> {
        let h = self.entries[owner].as_mut()?;
        if h.holds != target {
            return None;
        }
        let untold = h.releasing & !h.told;
        let verdicts = h.lasted | if lasted { untold } else { 0 };
        let (holds, releasing) = (h.holds, h.releasing);
        if lost && holds > 0 {
            self.mark_lost(owner);
        }
        let h = self.entries[owner].as_mut().unwrap();
        h.releasing = 0;
        h.told = 0;
        h.lasted = 0;
        h.settling = false;
        h.doubt = false;
        self.remove_if_idle(owner);
        Some((releasing, verdicts))
    }
}

//! The hold registry: per (lock key, owner), the guards alive in this client, the calls in
//! flight that may change the server's hold count, doubts to settle, and the loss deadline.
//!
//! Every operation is an O(1) map operation; a new watch joins a list the watchdog task picks
//! up once per grid step, and only a watch the task had armed sends it a message when it
//! ends. The registry is the one place that decides whether a granted reply joins the owner's
//! current run of holds or starts a new one, and when a settlement must run (see "Settling" in [`engine`](super)).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use dashmap::mapref::entry::Entry;
use dashmap::DashMap;
use tokio::sync::{mpsc, Notify};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::deadline::safe_until;

mod loss;
mod settling;
mod transfer;

use super::observe::{self, Meta};
pub(crate) use settling::SettleTarget;

/// What the registry keeps of the kind of a run's holds, to release them when the client
/// closes ([`HoldRegistry::close_out`]): the engine's `LockRef`. A trait, not that type: a
/// `LockRef` holds its client, whose state includes this registry.
pub(crate) trait RunKind: Send + Sync {
    /// The lock's name, for the close report.
    fn name(&self) -> &str;
    /// Whether each hold lives by a TTL key of its own (the release's `per_hold_ttl`).
    fn per_hold_ttl(&self) -> bool;
    /// Releases one hold of `owner` if its count is `expected` (the kind's release).
    fn release(
        self: Arc<Self>,
        owner: Arc<str>,
        expected: u32,
    ) -> futures::future::BoxFuture<'static, crate::error::Result<i64>>;
}

/// (lock key, owner field): one local hold entry.
pub(crate) type HoldKey = (Arc<str>, Arc<str>);

/// The local view of one owner's holds on one lock, and of the calls in flight that may
/// change them on the server.
pub(super) struct OwnerHolds {
    /// Identifies this run of holds: a guard from an earlier run (its lock expired and the
    /// same owner took it again) must not release the new run's hold.
    pub(super) epoch: u64,
    /// Guards alive for this (lock, owner), watchdog or lease: the hold count the server
    /// should have once every call in flight has settled.
    pub(super) holds: u32,
    /// Guards among them that want renewals.
    pub(super) watch_refs: u32,
    /// Generation of the current watch; bumped whenever the watch ends.
    pub(super) gen: u64,
    /// The lock key surely lives until then: the latest `sent + ttl - drift(ttl)` over the
    /// calls that set its TTL to a known value (an acquire sets at least its lease or the
    /// watchdog timeout, a renewal the timeout). Measured from the moment the call was
    /// *sent*, since the server may have run it at any point after.
    pub(super) valid_until: Instant,
    /// The longest TTL this owner gave the key: after its last call, the key is gone at
    /// the latest this long after that call ran.
    pub(super) ttl_ceiling: Duration,
    /// For a kind whose holds live by TTL keys of their own ([`LockRef::per_hold_ttl`]): the
    /// deadline of each count's key, lowest count first. A release deletes the key of the
    /// top count, so the run is valid only until the latest deadline left (`valid_until`
    /// is lowered to it), not until the longest lease it ever had.
    pub(super) deadlines: Vec<Instant>,
    pub(super) lost: CancellationToken,
    /// Mirrors `lost.is_cancelled()` without the token's lock (checked per renewal).
    pub(super) is_lost: bool,
    /// Acquire and release calls sent for this owner whose outcome is not settled yet.
    pub(super) inflight: u32,
    /// The server's hold count may differ from `holds`: a call's outcome is unknown (its
    /// reply was lost), an abandoned call took a hold, or a reply showed a count that the
    /// local holds do not explain. Settled as soon as no call is in flight.
    pub(super) doubt: bool,
    /// A settlement is running: it owns the server's count for this owner until done, so
    /// acquires wait and releases are left to it.
    pub(super) settling: bool,
    /// The server's count of this owner's holds, when the only doubt is an abandoned acquire
    /// whose reply said so: the settlement then releases without reading the count first.
    pub(super) hint: Option<u32>,
    /// Notified when a settlement ends (created by the first waiter).
    pub(super) settled: Option<Arc<Notify>>,
    /// Ends the running settlement's backoff after a failed step (created by the settlement
    /// when it first backs off): a call that waits for it, within a budget, has come.
    pub(super) hurry: Option<Arc<Notify>>,
    /// The watchdog task has a timer for the current watch (it must be told when it ends).
    pub(super) armed: bool,
    /// Guards whose release was left to the running settlement: each learns whether its
    /// hold lasted when the settlement ends (see [`ReleaseStep::Settling`]).
    pub(super) releasing: Vec<Releasing>,
    /// A re-entry's outcome is unknown and no count was read since: it may still run, or
    /// have run, after this owner's holds were lost, and then started a new run with the
    /// same count (see [`HoldRegistry::give_up_run`]).
    pub(super) unverified: bool,
    /// A task waits for the loss deadline of this run's leased holds ([`HoldRegistry::lease_deadline`]).
    pub(super) lease_timer: bool,
    /// The kind whose holds these are (from the first guard), to release them on close.
    pub(super) kind: Option<Arc<dyn RunKind>>,
    /// Guards counted when the client closed: their holds were released by the close, so
    /// their own releases send nothing ([`ReleaseStep::Closed`]).
    pub(super) closed_out: u32,
    /// KindId, name and acquire span of the run's first guard, for logs of background work.
    pub(super) meta: Option<Arc<Meta>>,
}

impl OwnerHolds {
    pub(super) fn new(epoch: u64) -> OwnerHolds {
        let now = Instant::now();
        OwnerHolds {
            epoch,
            holds: 0,
            watch_refs: 0,
            gen: 0,
            valid_until: now,
            ttl_ceiling: Duration::ZERO,
            deadlines: Vec::new(),
            lost: CancellationToken::new(),
            is_lost: false,
            inflight: 0,
            doubt: false,
            hint: None,
            settling: false,
            settled: None,
            hurry: None,
            armed: false,
            releasing: Vec::new(),
            unverified: false,
            lease_timer: false,
            kind: None,
            closed_out: 0,
            meta: None,
        }
    }

    /// Nothing left to remember: no guard, no call in flight, nothing to settle.
    fn is_idle(&self) -> bool {
        self.holds == 0 && self.inflight == 0 && !self.doubt && !self.settling
    }

    /// The settlement ended: tells each guard whose release it took over whether its hold
    /// lasted (its count's verdict; nothing when the settlement gave up, which says nothing
    /// good).
    fn tell_releasing(&mut self, gave_up: bool) {
        for r in self.releasing.drain(..) {
            if !gave_up {
                let _ = r.lasted.set(r.counted == Some(true));
            }
        }
    }

    /// Counts one more guard, whose key lives at least `until` with a TTL of `ttl`. Returns
    /// the generation of a watch to start (the first guard that wants renewals).
    fn add_guard(
        &mut self,
        until: Instant,
        ttl: Duration,
        watch: bool,
        next_gen: impl FnOnce() -> u64,
    ) -> Option<u64> {
        self.holds += 1;
        self.valid_until = self.valid_until.max(until);
        self.ttl_ceiling = self.ttl_ceiling.max(ttl);
        if watch {
            self.watch_refs += 1;
            if self.watch_refs == 1 {
                self.gen = next_gen();
                return Some(self.gen);
            }
        }
        None
    }

    /// Counts one guard less. Returns the generation of an armed watch that ended (the last
    /// guard that wanted renewals), whose timer the watchdog task should drop.
    fn remove_guard(&mut self, watch: bool, next_gen: impl FnOnce() -> u64) -> Option<u64> {
        self.holds = self.holds.saturating_sub(1);
        if watch && self.watch_refs > 0 {
            self.watch_refs -= 1;
            if self.watch_refs == 0 {
                let ended = self.gen;
                self.gen = next_gen();
                return std::mem::take(&mut self.armed).then_some(ended);
            }
        }
        None
    }

    /// Whether a call of this owner is in flight or a settlement runs: the next call waits
    /// for its turn (see "One call at a time" in [`engine`](crate::engine)).
    fn busy(&self) -> bool {
        self.inflight > 0 || self.settling
    }

    /// Wakes the calls that wait for their turn, once nothing is in flight or settling.
    fn pass_turn(&mut self) {
        if !self.busy() {
            if let Some(n) = self.settled.take() {
                n.notify_waiters();
            }
        }
    }

    /// The owner's earlier holds ended on the server (or their run is lost): later grants
    /// start a new run, with a token and epoch of its own, so no guard of the old run can
    /// release, renew or inherit the loss of a hold of the new one. What is in flight, and
    /// the calls waiting for their turn, carry over.
    fn start_new_run(&mut self, epoch: u64) {
        let (inflight, settled, kind) = (self.inflight, self.settled.take(), self.kind.take());
        let hurry = self.hurry.take();
        *self = OwnerHolds::new(epoch);
        self.inflight = inflight;
        self.settled = settled;
        self.hurry = hurry;
        self.kind = kind;
    }

    /// Starts a settlement if one is needed and nothing is in flight; returns whether the
    /// caller must run it.
    fn start_settling(&mut self) -> bool {
        if self.doubt && self.inflight == 0 && !self.settling {
            self.settling = true;
            return true;
        }
        false
    }

    pub(super) fn mark_lost(&mut self, why: &str, key: &HoldKey) {
        if !self.is_lost {
            self.is_lost = true;
            if self.holds > 0 {
                observe::lost(self.meta.as_deref(), &key.0, &key.1, why);
            }
            self.lost.cancel();
        }
    }
}

/// Waits on `turn` (from [`Begin::Wait`], [`ReleaseStep::Busy`] or [`ReleaseStep::Settling`]) unless
/// `still_busy`, asked once the wakeup is registered, says the turn came already: no wakeup
/// is lost between the registry's answer and the wait.
pub(crate) async fn wait_turn(turn: &Notify, still_busy: impl FnOnce() -> bool) {
    let notified = turn.notified();
    tokio::pin!(notified);
    notified.as_mut().enable();
    if still_busy() {
        notified.await;
    }
}

/// What [`HoldRegistry::begin`] found: the call may be sent, or a settlement must end first.
pub(crate) enum Begin {
    /// Counted as in flight; send the call now.
    Go(Sent),
    /// A settlement runs; wait for this and try again.
    Wait(Arc<Notify>),
}

/// What the registry knew when an acquire call was sent.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Sent {
    /// Local holds when the call was sent: the server's count then, since the call went out
    /// alone (one call per owner at a time, nothing in doubt), so a granted reply that joins
    /// this run says `base + 1`.
    base: u32,
    /// When the call was sent (just before).
    pub(crate) at: Instant,
    /// The TTL a grant set when it is not the lease (a fair lock's handoff, see
    /// [`Ticket::handed_over`](crate::engine::Ticket::handed_over)); `None`: the lease, or the
    /// watchdog timeout.
    pub(crate) set_ttl: Option<Duration>,
}

impl Sent {
    /// Whether the owner held nothing here when the call was sent: a hold the server gave it
    /// meanwhile is then its only one.
    pub(crate) fn held_nothing(&self) -> bool {
        self.base == 0
    }
}

/// Whether a hold whose release a settlement took over lasted until that release: set by
/// the settlement (`true`: the server still counted it; `false`: it had vanished, expired or
/// force-unlocked, and another owner may have held the lock since); unset if it gave up.
pub(crate) type Lasted = std::sync::OnceLock<bool>;

/// A guard whose release a settlement took over, and what the settlement found so far.
pub(super) struct Releasing {
    pub(super) lasted: Arc<Lasted>,
    /// Set by the first count read after the hand-over: the hold was still there (`true`);
    /// turned `false` if the settlement later finds the owner's holds gone before it could
    /// release them all ([`HoldRegistry::vanished`]): whether this one was released first
    /// is then unknowable, and `Ok` would be a guess.
    pub(super) counted: Option<bool>,
}

/// How a release should proceed, from [`HoldRegistry::released`].
pub(crate) enum ReleaseStep {
    /// Counted as in flight: send the unlock script with this expected hold count (the
    /// server's count of this run, exact since no other call of the owner is in flight), then
    /// call [`HoldRegistry::finish`]. A release so conditioned can only take a hold of its own
    /// run: a count the run does not explain answers -2 and changes nothing.
    Send { expected: u32 },
    /// Another call of this owner is in flight: nothing was changed; wait for this and ask
    /// again (one call at a time, so the release knows the count it takes a hold from).
    Busy(Arc<Notify>),
    /// A settlement runs and will release this hold with the others it trims: wait for it,
    /// then read whether the hold lasted.
    Settling(Arc<Notify>, Arc<Lasted>),
    /// The guard belongs to an earlier run (the lock was lost and re-taken by this owner):
    /// send nothing. `settle` asks the caller to start a settlement, since the server may
    /// still count the stale hold.
    Stale { settle: bool },
    /// The client closed and released this hold already: send nothing.
    Closed,
}

/// How a call that may have changed the server's hold count ended.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Outcome {
    /// The reply came and the local holds already account for it.
    Known,
    /// The server may count a hold that no guard has: the reply was lost, or an abandoned
    /// acquire took a hold.
    Unknown,
    /// An acquire, sent as described, whose reply was lost: as [`Outcome::Unknown`]; sent
    /// while the owner held the lock (a re-entry), it leaves the run unverified until a
    /// settlement reads the count (see [`HoldRegistry::give_up_run`]).
    AcquireUnknown(Sent),
    /// A release found no hold of this owner although guards remain: the server forgot
    /// them (expired, force-unlocked, restarted), so they are lost.
    Forgotten,
    /// An abandoned acquire, sent as described, took a hold no guard owns; right after it
    /// the server counted this many holds of the owner.
    Abandoned(Sent, u32),
}

pub(super) enum Cmd {
    Unwatch(u64),
}

/// Watches started since the watchdog task last looked: (lock, generation, started at).
pub(super) type Recent = std::sync::Mutex<Vec<(HoldKey, u64, Instant)>>;

/// The client's hold registry, and the handle to its watchdog task (started by
/// [`HoldRegistry::start`] in [`watchdog`](super::watchdog)).
pub(crate) struct HoldRegistry {
    pub(super) registry: Arc<DashMap<HoldKey, OwnerHolds>>,
    pub(super) tx: mpsc::UnboundedSender<Cmd>,
    /// New watches, picked up by the task (see [`HoldRegistry::watch`]).
    pub(super) recent: Arc<Recent>,
    /// Wakes the task when `recent` stops being empty.
    pub(super) wake: Arc<Notify>,
    pub(super) shutdown: CancellationToken,
    pub(super) next_gen: AtomicU64,
    pub(super) timeout: Duration,
}

impl HoldRegistry {
    /// Cancelled when the client shuts down and its holds are no longer renewed.
    pub(crate) fn shutdown_token(&self) -> CancellationToken {
        self.shutdown.clone()
    }

    /// Stops renewing; every watched lock's token is cancelled (its lock will expire).
    pub(crate) fn shutdown(&self) {
        self.shutdown.cancel();
    }

    /// Whether the client is gone (nothing renews any more).
    pub(crate) fn is_shut_down(&self) -> bool {
        self.shutdown.is_cancelled()
    }

    /// Completes when the client is gone (at once if it already is).
    pub(crate) async fn closed(&self) {
        self.shutdown.cancelled().await
    }

    /// [`Error::ClientClosed`](crate::Error::ClientClosed) once the client is gone: a hold
    /// taken now would have no watchdog.
    pub(crate) fn check_open(&self) -> crate::error::Result<()> {
        match self.is_shut_down() {
            true => Err(crate::error::Error::ClientClosed),
            false => Ok(()),
        }
    }

    fn new_epoch(&self) -> u64 {
        self.next_gen.fetch_add(1, Ordering::Relaxed)
    }

    /// Starts the watch `gen` of `key`: it joins the `recent` list, and the task is woken
    /// only when the list was empty, not per lock. With no task left, the lock will expire,
    /// so its guards are told at once.
    fn watch(&self, key: &HoldKey, gen: u64, lost: &CancellationToken) {
        if self.shutdown.is_cancelled() || self.tx.is_closed() {
            lost.cancel();
            return;
        }
        let mut recent = self.recent.lock().unwrap_or_else(|p| p.into_inner());
        recent.push((key.clone(), gen, Instant::now()));
        if recent.len() == 1 {
            self.wake.notify_one();
        }
    }

    /// Counts an acquire call as in flight before it is sent, unless another call of this
    /// owner is in flight or a settlement runs: one call at a time, so every reply and every
    /// release's expected count is exact.
    pub(crate) fn begin(&self, key: &HoldKey) -> Begin {
        let mut h = self
            .registry
            .entry(key.clone())
            .or_insert_with(|| OwnerHolds::new(self.new_epoch()));
        if h.busy() {
            h.hurry_settlement();
            return Begin::Wait(h.settled.get_or_insert_with(Default::default).clone());
        }
        // Not busy, so nothing is in doubt either: a doubt starts a settlement as soon as no
        // call is in flight.
        h.inflight += 1;
        Begin::Go(Sent {
            base: h.holds,
            at: Instant::now(),
            set_ttl: None,
        })
    }

    /// Ends a call counted by [`HoldRegistry::begin`] or [`ReleaseStep::Send`] that left no guard
    /// behind. Returns whether the caller must start a settlement.
    pub(crate) fn finish(&self, key: &HoldKey, outcome: Outcome) -> bool {
        let Entry::Occupied(mut e) = self.registry.entry(key.clone()) else {
            return false;
        };
        let h = e.get_mut();
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
                h.unverified |= sent.base > 0;
            }
            // The reply's count is the server's now, unless a stale release put the count
            // in doubt meanwhile (the call went out alone).
            Outcome::Abandoned(sent, n) => {
                let hint = (!h.doubt).then_some(n);
                // A grant that did not find the run's holds (or joined a lost run) took a
                // hold of a new run: the old guards are lost and never own it.
                if h.is_lost || n <= sent.base {
                    h.mark_lost("the server no longer has this owner's holds", key);
                    h.start_new_run(self.new_epoch());
                }
                h.hint = hint;
                h.doubt = true;
            }
            Outcome::Forgotten => {
                if h.holds > 0 {
                    h.mark_lost("the server no longer has this owner's holds", key);
                }
            }
        }
        let settle = h.start_settling();
        h.pass_turn();
        if h.is_idle() {
            e.remove();
        }
        settle
    }

    /// Records a granted hold (before its guard exists) and ends its call. `server_holds` is
    /// the hold count the lock script returned; the script gave the key at least the
    /// `lease` as TTL, or the watchdog timeout when `lease` is `None` (the watchdog renews
    /// it), unless `sent.set_ttl` says it set a shorter one (a fair lock's handoff).
    /// Returns the token cancelled when the lock is found lost, the epoch the guard must
    /// present to [`HoldRegistry::released`], and whether the caller must start a settlement.
    ///
    /// A count the local holds do not explain is never adopted: a count above them means
    /// the server keeps holds no guard owns (a release whose reply was lost), and a
    /// settlement trims them; a count below means older guards' holds are gone, and those
    /// guards are told they are lost.
    pub(crate) fn acquired(
        &self,
        key: &HoldKey,
        sent: Sent,
        server_holds: u32,
        lease: Option<Duration>,
        meta: &Arc<Meta>,
        kind: Arc<dyn RunKind>,
    ) -> (CancellationToken, u64, bool) {
        let (watch, ttl) = (lease.is_none(), lease.unwrap_or(self.timeout));
        let schedule;
        let (token, epoch, settle, timer) = {
            let mut h = self
                .registry
                .entry(key.clone())
                .or_insert_with(|| OwnerHolds::new(self.new_epoch()));
            h.inflight = h.inflight.saturating_sub(1);
            let expected = sent.base + 1;
            if h.is_lost || server_holds < expected {
                // The call went out alone, so the server had forgotten the older holds
                // (expired, force-unlocked, restarted): their guards are lost and must not
                // touch the new hold. Or the run is known lost (its loss deadline passed):
                // a new hold never joins it, nor inherits its loss signal.
                h.mark_lost("the server no longer has this owner's holds", key);
                let doubt = h.doubt;
                h.start_new_run(self.new_epoch());
                // Releases of the old guards send nothing; the settlement trims what the
                // server still counts for them beyond this one hold.
                h.doubt = doubt || server_holds != 1;
            } else if server_holds > expected {
                // The server counts more holds than there are guards: trim them once all is
                // quiet, never adopt them.
                h.doubt = true;
                h.hint = None;
            }
            let until = safe_until(sent.at, sent.set_ttl.map_or(ttl, |t| t.min(ttl)));
            schedule = h.add_guard(until, ttl, watch, || self.new_epoch());
            if kind.per_hold_ttl() {
                h.deadlines.push(until);
            }
            h.meta.get_or_insert_with(|| meta.clone());
            h.kind.get_or_insert(kind);
            let settle = h.start_settling();
            h.pass_turn();
            let timer = !watch && !std::mem::replace(&mut h.lease_timer, true);
            (h.lost.clone(), h.epoch, settle, timer)
        };
        if let Some(gen) = schedule {
            self.watch(key, gen, &token);
        }
        if timer {
            self.lease_deadline(key.clone(), epoch);
        }
        (token, epoch, settle)
    }

    /// Closes out every entry for the client's close ([`close`](super::close::close)): its
    /// guards are marked lost and their releases will send nothing, since the close releases
    /// what the server counts. Returns the entries whose kind is known, to release.
    pub(crate) fn close_out(&self) -> Vec<(HoldKey, Arc<dyn RunKind>)> {
        let mut out = Vec::new();
        for mut e in self.registry.iter_mut() {
            let key = e.key().clone();
            let h = e.value_mut();
            h.closed_out = h.holds;
            if h.holds > 0 {
                h.mark_lost("the client was closed", &key);
            }
            if let Some(kind) = &h.kind {
                out.push((key, kind.clone()));
            }
        }
        out
    }

    /// Forgets one hold, before anything is sent for it, so no renewal is scheduled for a
    /// lock that is being released, unless another call of the owner is in flight
    /// ([`ReleaseStep::Busy`]: nothing changed). See [`ReleaseStep`] for what the caller does next.
    pub(crate) fn released(&self, key: &HoldKey, watch: bool, epoch: u64) -> ReleaseStep {
        let unwatch;
        let mut rearm = None;
        let Entry::Occupied(mut e) = self.registry.entry(key.clone()) else {
            // A live guard's entry exists until its epoch's last hold is released, so no
            // entry means this guard is stale (its run ended, the owner may be re-acquiring
            // right now): releasing would take the new hold.
            return ReleaseStep::Stale { settle: false };
        };
        let release = {
            let h = e.get_mut();
            if h.epoch != epoch {
                // The server may still count the stale hold beside the new run's.
                h.doubt = true;
                h.hint = None;
                return ReleaseStep::Stale {
                    settle: h.start_settling(),
                };
            }
            if h.inflight > 0 && !h.settling && h.closed_out == 0 {
                return ReleaseStep::Busy(h.settled.get_or_insert_with(Default::default).clone());
            }
            let expected = h.holds;
            unwatch = h.remove_guard(watch, || self.new_epoch());
            // The release deletes the top count's TTL key: the run lives by those left.
            if h.deadlines.pop().is_some() {
                if let Some(&latest) = h.deadlines.iter().max() {
                    if latest < h.valid_until {
                        h.valid_until = latest;
                        rearm = h.lease_timer.then_some(h.epoch);
                    }
                }
            }
            if h.closed_out > 0 {
                h.closed_out -= 1;
                ReleaseStep::Closed
            } else if h.settling {
                let lasted = Arc::new(Lasted::new());
                h.releasing.push(Releasing {
                    lasted: lasted.clone(),
                    counted: None,
                });
                h.hurry_settlement();
                let settled = h.settled.get_or_insert_with(Default::default).clone();
                ReleaseStep::Settling(settled, lasted)
            } else {
                h.inflight += 1;
                ReleaseStep::Send { expected }
            }
        };
        if let Some(gen) = unwatch {
            let _ = self.tx.send(Cmd::Unwatch(gen));
        }
        drop(e);
        // The loss deadline moved earlier: a timer for it (the one sleeping towards the
        // old deadline ends when it wakes and finds the run lost or ended).
        if let Some(epoch) = rearm {
            self.lease_deadline(key.clone(), epoch);
        }
        release
    }

    /// Whether a grant sent as `sent` that left the owner `holds` holds would sit above
    /// holds its run does not explain (left by an earlier hold that expired, or a lost
    /// run's): [`HoldRegistry::acquired`] would settle those away, and for a kind whose holds
    /// live by TTL keys of their own ([`LockRef::per_hold_ttl`]) the settlement's release from
    /// the top count deletes the new hold's key, not theirs.
    pub(crate) fn stacks_on_unexplained(&self, key: &HoldKey, sent: &Sent, holds: u32) -> bool {
        let (lost, base) = self
            .registry
            .get(key)
            .map_or((false, 0), |h| (h.is_lost, sent.base));
        let expected = if lost || holds < base + 1 {
            1
        } else {
            base + 1
        };
        holds > expected
    }

    /// Whether a call of `key`'s owner is in flight or a settlement runs (see
    /// [`ReleaseStep::Busy`], [`Begin::Wait`]).
    pub(crate) fn is_busy(&self, key: &HoldKey) -> bool {
        self.registry.get(key).is_some_and(|h| h.busy())
    }
}

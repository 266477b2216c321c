//! The watchdog: one task per client that keeps every held watchdog lock alive.
//!
//! Locally held locks live in a registry keyed by (lock key, owner): how many guards hold it,
//! how many of those want renewals, a generation number and the "lost" token the guards
//! expose. Registering and releasing are O(1) map operations plus, for the first and last
//! watchdog guard, one message to the task.
//!
//! The task owns a timer wheel ([`DelayQueue`], O(1) insert and remove) with one timer per
//! watched lock. Deadlines are rounded up to a grid of a quarter period, so locks taken at
//! about the same time expire at the same instant and are renewed together; renewed locks are
//! re-armed on the grid again and stay grouped. Each group goes out in calls of up to [`BATCH`] keys, so N locks
//! cost about N/100 script calls per period. A renewal that finds a lock gone cancels its
//! token; a renewal that fails (connection) is retried soon, and the lock is declared lost
//! once no renewal succeeded for a whole timeout.
//!
//! Generations make stale events harmless: releasing the last watchdog guard bumps the
//! generation before the unlock script is sent, so a renewal in flight at that moment neither
//! re-arms the timer nor marks a later acquisition lost. The renew script itself only touches
//! a key whose hash still holds the owner's field, so it never revives a released lock.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use dashmap::mapref::entry::Entry;
use dashmap::DashMap;
use futures::stream::FuturesUnordered;
use futures::{FutureExt, StreamExt};
use tokio::sync::{mpsc, Notify};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tokio_util::time::{delay_queue, DelayQueue};

use redis::cluster_routing::Slot;

use crate::deploy::Commands;
use crate::scripts::RENEW;

/// Most keys renewed by one script call.
pub(crate) const BATCH: usize = 100;

/// Most registration commands handled in one turn of the watchdog loop.
const COMMAND_BATCH: usize = 1024;

/// Most renew calls in flight at once. Redis runs scripts one at a time, so more would only
/// queue on the connection, where the last ones could exceed the response timeout (1,000
/// calls sent at once for 100k locks did); the rest wait in `pending`.
const MAX_INFLIGHT: usize = 8;
/// On a cluster, batches are per slot and so smaller and more numerous, spread over the
/// nodes; redis-rs pipelines concurrent calls to one node on its connection, so more of
/// them in flight cost no more round trips.
const MAX_INFLIGHT_CLUSTER: usize = 64;

/// (lock key, owner field): one local hold entry.
pub(crate) type HoldKey = (Arc<str>, Arc<str>);

/// The local view of one owner's holds on one lock, and of the calls in flight that may
/// change them on the server.
struct Hold {
    /// Identifies this run of holds: a guard from an earlier run (its lock expired and the
    /// same owner took it again) must not release the new run's hold.
    epoch: u64,
    /// Guards alive for this (lock, owner), watchdog or lease: the hold count the server
    /// should have once every call in flight has settled.
    holds: u32,
    /// Guards among them that want renewals.
    watch_refs: u32,
    /// Generation of the current watch; bumped whenever the watch ends.
    gen: u64,
    /// The lock key surely lives until then: the latest `sent + ttl - drift(ttl)` over the
    /// calls that set its TTL to a known value (an acquire sets at least its lease or the
    /// watchdog timeout, a renewal the timeout). Measured from the moment the call was
    /// *sent*, since the server may have run it at any point after.
    valid_until: Instant,
    /// The longest TTL this owner gave the key: after its last call, the key is gone at
    /// the latest this long after that call ran.
    ttl_ceiling: Duration,
    lost: CancellationToken,
    /// Mirrors `lost.is_cancelled()` without the token's lock (checked per renewal).
    is_lost: bool,
    /// Acquire and release calls sent for this owner whose outcome is not settled yet.
    inflight: u32,
    /// The server's hold count may differ from `holds`: a call's outcome is unknown (its
    /// reply was lost), an abandoned call took a hold, or a reply showed a count that the
    /// local holds do not explain. Settled as soon as no call is in flight.
    doubt: bool,
    /// A settlement is running: it owns the server's count for this owner until done, so
    /// acquires wait and releases are left to it.
    settling: bool,
    /// Notified when a settlement ends (created by the first waiter).
    settled: Option<Arc<Notify>>,
}

impl Hold {
    fn new(epoch: u64) -> Hold {
        let now = Instant::now();
        Hold {
            epoch,
            holds: 0,
            watch_refs: 0,
            gen: 0,
            valid_until: now,
            ttl_ceiling: Duration::ZERO,
            lost: CancellationToken::new(),
            is_lost: false,
            inflight: 0,
            doubt: false,
            settling: false,
            settled: None,
        }
    }

    /// Nothing left to remember: no guard, no call in flight, nothing to settle.
    fn is_idle(&self) -> bool {
        self.holds == 0 && self.inflight == 0 && !self.doubt && !self.settling
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

    fn mark_lost(&mut self, why: &str, key: &HoldKey) {
        if !self.is_lost {
            self.is_lost = true;
            if self.holds > 0 {
                tracing::warn!(lock = %key.0, owner = %key.1, reason = why, "lock lost");
            }
            self.lost.cancel();
        }
    }
}

/// What [`Watchdog::begin`] found: the call may be sent, or a settlement must end first.
pub(crate) enum Begin {
    /// Counted as in flight; send the call now.
    Go(Sent),
    /// A settlement runs; wait for this and try again.
    Wait(Arc<Notify>),
}

/// What the registry knew when an acquire call was sent.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Sent {
    /// No other call of this owner was in flight and nothing was in doubt: the server's
    /// count was exactly `base`, and a granted reply must say `base + 1`.
    quiescent: bool,
    /// Local holds when the call was sent.
    base: u32,
    /// When the call was sent (just before).
    pub(crate) at: Instant,
}

/// How a release should proceed, from [`Watchdog::released`].
pub(crate) enum Release {
    /// Counted as in flight: send the unlock script (any one hold), then call
    /// [`Watchdog::finish`].
    Send,
    /// A settlement runs and will release this hold with the others it trims: wait for it.
    Settling(Arc<Notify>),
    /// The guard belongs to an earlier run (the lock was lost and re-taken by this owner):
    /// send nothing. `settle` asks the caller to start a settlement, since the server may
    /// still count the stale hold.
    Stale { settle: bool },
}

/// How a call that may have changed the server's hold count ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Outcome {
    /// The reply came and the local holds already account for it.
    Known,
    /// The server may count a hold that no guard has: the reply was lost, or an abandoned
    /// acquire took a hold.
    Unknown,
    /// A release found no hold of this owner although guards remain: the server forgot
    /// them (expired, force-unlocked, restarted), so they are lost.
    Forgotten,
}

enum Cmd {
    Watch(HoldKey, u64),
    Unwatch(u64),
}

/// Handle to the client's watchdog task and its registry.
pub(crate) struct Watchdog {
    registry: Arc<DashMap<HoldKey, Hold>>,
    tx: mpsc::UnboundedSender<Cmd>,
    shutdown: CancellationToken,
    next_gen: AtomicU64,
    timeout: Duration,
}

impl Watchdog {
    /// Starts the task. It runs until [`Watchdog::shutdown`] (the last `Client` dropped).
    pub(crate) fn start(conn: Commands, timeout: Duration) -> Watchdog {
        let registry = Arc::new(DashMap::new());
        let (tx, rx) = mpsc::unbounded_channel();
        let shutdown = CancellationToken::new();
        let task = Task {
            registry: registry.clone(),
            by_slot: conn.is_cluster(),
            conn,
            timeout,
            period: (timeout / 3).max(Duration::from_millis(1)),
            grid: (timeout / 12).max(Duration::from_millis(1)),
            epoch: Instant::now(),
            wheel: DelayQueue::new(),
            timers: HashMap::new(),
            deadlines: DelayQueue::new(),
            deadline_keys: HashMap::new(),
        };
        tokio::spawn(task.run(rx, shutdown.clone()));
        Watchdog {
            registry,
            tx,
            shutdown,
            next_gen: AtomicU64::new(1),
            timeout,
        }
    }

    /// Stops renewing; every watched lock's token is cancelled (its lock will expire).
    pub(crate) fn shutdown(&self) {
        self.shutdown.cancel();
    }

    /// Whether the client is gone (nothing renews any more).
    pub(crate) fn is_shut_down(&self) -> bool {
        self.shutdown.is_cancelled()
    }

    fn new_epoch(&self) -> u64 {
        self.next_gen.fetch_add(1, Ordering::Relaxed)
    }

    /// Counts an acquire call as in flight before it is sent, unless a settlement runs.
    pub(crate) fn begin(&self, key: &HoldKey) -> Begin {
        let mut h = self
            .registry
            .entry(key.clone())
            .or_insert_with(|| Hold::new(self.new_epoch()));
        if h.settling {
            return Begin::Wait(h.settled.get_or_insert_with(Default::default).clone());
        }
        let quiescent = h.inflight == 0 && !h.doubt;
        h.inflight += 1;
        Begin::Go(Sent {
            quiescent,
            base: h.holds,
            at: Instant::now(),
        })
    }

    /// Ends a call counted by [`Watchdog::begin`] or [`Release::Send`] that left no guard
    /// behind. Returns whether the caller must start a settlement.
    pub(crate) fn finish(&self, key: &HoldKey, outcome: Outcome) -> bool {
        let Entry::Occupied(mut e) = self.registry.entry(key.clone()) else {
            return false;
        };
        let h = e.get_mut();
        h.inflight = h.inflight.saturating_sub(1);
        match outcome {
            Outcome::Known => {}
            Outcome::Unknown => h.doubt = true,
            Outcome::Forgotten => {
                if h.holds > 0 {
                    h.mark_lost("the server no longer has this owner's holds", key);
                }
            }
        }
        let settle = h.start_settling();
        if h.is_idle() {
            e.remove();
        }
        settle
    }

    /// Records a granted hold (before its guard exists) and ends its call. `server_holds` is
    /// the hold count the lock script returned, `ttl` the TTL it gave the key at least.
    /// Returns the token cancelled when the lock is found lost, the epoch the guard must
    /// present to [`Watchdog::released`], and whether the caller must start a settlement.
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
        watch: bool,
        ttl: Duration,
    ) -> (CancellationToken, u64, bool) {
        let mut schedule = None;
        let (token, epoch, settle) = {
            let mut h = self
                .registry
                .entry(key.clone())
                .or_insert_with(|| Hold::new(self.new_epoch()));
            h.inflight = h.inflight.saturating_sub(1);
            let expected = sent.base + 1;
            if sent.quiescent && server_holds < expected {
                // Nothing else was in flight, so the server had forgotten the older holds
                // (expired, force-unlocked, restarted): their guards are lost and must not
                // touch the new hold. Guards registered meanwhile are of the old run too.
                h.mark_lost("the server no longer has this owner's holds", key);
                let (inflight, doubt) = (h.inflight, h.doubt);
                *h = Hold::new(self.new_epoch());
                h.inflight = inflight;
                // Releases of the old guards send nothing; the settlement trims what the
                // server still counts for them beyond this one hold.
                h.doubt = doubt || server_holds != 1;
            } else if !sent.quiescent || server_holds > expected {
                // Another call of this owner was in flight (e.g. `join!` of two `lock()`s):
                // this count is a snapshot that cannot be checked alone. Or the server counts
                // more holds than there are guards. Either way, compare once all is quiet.
                h.doubt = true;
            }
            h.holds += 1;
            let until = safe_until(sent.at, ttl);
            if until > h.valid_until {
                h.valid_until = until;
            }
            h.ttl_ceiling = h.ttl_ceiling.max(ttl);
            if watch {
                h.watch_refs += 1;
                if h.watch_refs == 1 {
                    h.gen = self.new_epoch();
                    schedule = Some(h.gen);
                }
            }
            let settle = h.start_settling();
            (h.lost.clone(), h.epoch, settle)
        };
        if let Some(gen) = schedule {
            if self.shutdown.is_cancelled() || self.tx.send(Cmd::Watch(key.clone(), gen)).is_err() {
                token.cancel(); // no watchdog left: the lock will expire
            }
        }
        (token, epoch, settle)
    }

    /// Forgets one hold, before anything is sent for it, so no renewal is scheduled for a
    /// lock that is being released. See [`Release`] for what the caller does next.
    pub(crate) fn released(&self, key: &HoldKey, watch: bool, epoch: u64) -> Release {
        let mut unwatch = None;
        let Entry::Occupied(mut e) = self.registry.entry(key.clone()) else {
            // A live guard's entry exists until its epoch's last hold is released, so no
            // entry means this guard is stale (its run ended, the owner may be re-acquiring
            // right now): releasing would take the new hold.
            return Release::Stale { settle: false };
        };
        let release = {
            let h = e.get_mut();
            if h.epoch != epoch {
                // The server may still count the stale hold beside the new run's.
                h.doubt = true;
                return Release::Stale {
                    settle: h.start_settling(),
                };
            }
            h.holds = h.holds.saturating_sub(1);
            if watch && h.watch_refs > 0 {
                h.watch_refs -= 1;
                if h.watch_refs == 0 {
                    unwatch = Some(h.gen);
                    h.gen = self.new_epoch();
                }
            }
            if h.settling {
                Release::Settling(h.settled.get_or_insert_with(Default::default).clone())
            } else {
                h.inflight += 1;
                Release::Send
            }
        };
        if let Some(gen) = unwatch {
            let _ = self.tx.send(Cmd::Unwatch(gen));
        }
        release
    }

    /// For a settlement: the hold count the server should have now (the live guards), and
    /// the longest TTL this owner gave the key.
    pub(crate) fn settle_target(&self, key: &HoldKey) -> (u32, Duration) {
        self.registry.get(key).map_or((0, self.timeout), |h| {
            (h.holds, h.ttl_ceiling.max(self.timeout))
        })
    }

    /// Ends a settlement that found the server at `target` holds (`lost`: below it). Returns
    /// `false`, and keeps settling, if a guard was released meanwhile (the target moved).
    pub(crate) fn settle_done(&self, key: &HoldKey, target: u32, lost: bool, force: bool) -> bool {
        let Entry::Occupied(mut e) = self.registry.entry(key.clone()) else {
            return true;
        };
        let h = e.get_mut();
        if h.holds != target && !force {
            return false;
        }
        if lost && h.holds > 0 {
            h.mark_lost("the server no longer has all of this owner's holds", key);
        }
        h.settling = false;
        h.doubt = false;
        if let Some(n) = h.settled.take() {
            n.notify_waiters();
        }
        if h.is_idle() {
            e.remove();
        }
        true
    }

    /// Whether the guard of `epoch` is known to be lost, and how long its lock is still
    /// valid (zero when lost), from the send times of the calls that set the key's TTL.
    pub(crate) fn validity(&self, key: &HoldKey, epoch: u64) -> Duration {
        match self.registry.get(key) {
            Some(h) if h.epoch == epoch && !h.is_lost && !h.lost.is_cancelled() => {
                h.valid_until.saturating_duration_since(Instant::now())
            }
            _ => Duration::ZERO,
        }
    }

    /// Whether a settlement runs for `key`.
    pub(crate) fn is_settling(&self, key: &HoldKey) -> bool {
        self.registry.get(key).is_some_and(|h| h.settling)
    }

    /// Number of locks with a live watch (for tests and metrics).
    #[allow(dead_code)]
    pub(crate) fn watched(&self) -> usize {
        self.registry.iter().filter(|h| h.watch_refs > 0).count()
    }
}

struct Task {
    registry: Arc<DashMap<HoldKey, Hold>>,
    conn: Commands,
    /// On a cluster, one script call may only touch keys of one slot: batches are per slot.
    by_slot: bool,
    timeout: Duration,
    period: Duration,
    /// Deadlines are rounded up to multiples of `grid` after `epoch`, so timers due close
    /// together expire at the same instant and are renewed in the same batches.
    grid: Duration,
    epoch: Instant,
    wheel: DelayQueue<(HoldKey, u64)>,
    /// Timer of each live watch, by generation (unique per watch, and cheap to hash).
    timers: HashMap<u64, delay_queue::Key>,
    /// Loss deadline of each live watch: `valid_until`. If no renewal is
    /// confirmed by then, the lock may already have expired on the server, so the guard is
    /// told at once, not when a failed renewal's reply finally comes back (a holder cut off
    /// from Redis must learn it before another owner can take the lock).
    deadlines: DelayQueue<(HoldKey, u64)>,
    deadline_keys: HashMap<u64, delay_queue::Key>,
}

/// A finished renew call: its batch, when it was sent, and the reply.
type Renewal = (Vec<(HoldKey, u64)>, Instant, redis::RedisResult<Vec<i64>>);

/// Safety margin of the loss deadline: clock-rate differences between client and server (as
/// Redlock's drift: 1 % of the TTL + 2 ms), but at least 100 ms (capped at a tenth of the
/// TTL) for scheduling delays: on a loaded 2-core machine the watchdog task and the holder's
/// own task ran up to ~40 ms late, and a holder told 4 ms after the lock expired during a
/// cluster failover overlapped the next owner (tests/deployments.rs).
fn drift(timeout: Duration) -> Duration {
    let clock = timeout / 100 + Duration::from_millis(2);
    clock.max((timeout / 10).min(Duration::from_millis(100)))
}

impl Task {
    async fn run(mut self, mut rx: mpsc::UnboundedReceiver<Cmd>, shutdown: CancellationToken) {
        let mut inflight = FuturesUnordered::new();
        let mut pending: VecDeque<Vec<(HoldKey, u64)>> = VecDeque::new();
        let mut commands = Vec::with_capacity(COMMAND_BATCH);
        loop {
            let max_inflight = if self.by_slot {
                MAX_INFLIGHT_CLUSTER
            } else {
                MAX_INFLIGHT
            };
            while inflight.len() < max_inflight {
                let Some(mut batch) = pending.pop_front() else {
                    break;
                };
                // A batch may have waited: drop the locks released (or re-taken, with a new
                // generation) meanwhile, so a stale renewal never stretches a newer lease.
                batch.retain(|(key, gen)| self.is_current(key, *gen));
                if !batch.is_empty() {
                    inflight.push(renew(self.conn.clone(), self.timeout, batch));
                }
            }
            // Not `biased`: a steady stream of registrations must never starve the timers
            // or the renewals in flight (it once let 100k locks expire while they were taken).
            tokio::select! {
                _ = shutdown.cancelled() => break,
                n = rx.recv_many(&mut commands, COMMAND_BATCH) => {
                    if n == 0 {
                        break;
                    }
                    let now = Instant::now();
                    for cmd in commands.drain(..) {
                        self.command(cmd, now);
                    }
                }
                Some(done) = inflight.next(), if !inflight.is_empty() => self.settle(done),
                Some(expired) = self.deadlines.next(), if !self.deadlines.is_empty() => {
                    let mut due = vec![expired.into_inner()];
                    while let Some(Some(more)) =
                        tokio::task::unconstrained(self.deadlines.next()).now_or_never()
                    {
                        due.push(more.into_inner());
                    }
                    self.deadlines_passed(due);
                }
                Some(expired) = self.wheel.next(), if !self.wheel.is_empty() => {
                    // Everything else already expired comes out without waiting (outside
                    // tokio's coop budget, which would cut the drain into small pieces).
                    let mut due = vec![expired.into_inner()];
                    while let Some(Some(more)) =
                        tokio::task::unconstrained(self.wheel.next()).now_or_never()
                    {
                        due.push(more.into_inner());
                    }
                    self.enqueue(due, &mut pending);
                }
            }
        }
        // The client is gone: nothing renews these locks any more.
        for mut h in self.registry.iter_mut() {
            if h.watch_refs > 0 {
                h.is_lost = true;
                h.lost.cancel();
            }
        }
    }

    fn command(&mut self, cmd: Cmd, now: Instant) {
        match cmd {
            Cmd::Watch(key, gen) => {
                let until = self.registry.get(&key).map_or(now, |h| h.valid_until);
                self.set_deadline(&key, gen, until);
                self.arm(key, gen, now + self.period);
            }
            Cmd::Unwatch(gen) => {
                if let Some(timer) = self.timers.remove(&gen) {
                    self.wheel.try_remove(&timer);
                }
                if let Some(deadline) = self.deadline_keys.remove(&gen) {
                    self.deadlines.try_remove(&deadline);
                }
            }
        }
    }

    /// (Re)sets the loss deadline of a watch whose key surely lives until `when`.
    fn set_deadline(&mut self, key: &HoldKey, gen: u64, when: Instant) {
        match self.deadline_keys.get(&gen) {
            Some(k) => self.deadlines.reset_at(k, when),
            None => {
                let k = self.deadlines.insert_at((key.clone(), gen), when);
                self.deadline_keys.insert(gen, k);
            }
        }
    }

    /// Loss deadlines that passed: locks still watched and not renewed since are lost.
    fn deadlines_passed(&mut self, due: Vec<(HoldKey, u64)>) {
        let now = Instant::now();
        for (key, gen) in due {
            self.deadline_keys.remove(&gen);
            let overdue = self
                .registry
                .get(&key)
                .is_some_and(|h| h.gen == gen && now >= h.valid_until);
            if overdue {
                self.lose(
                    &key,
                    gen,
                    "no renewal confirmed within the watchdog timeout",
                );
            } else if self.is_current(&key, gen) {
                // Renewed meanwhile without a reset reaching here: watch the new deadline.
                let until = self.registry.get(&key).map_or(now, |h| h.valid_until);
                self.set_deadline(&key, gen, until);
            }
        }
    }

    fn arm(&mut self, key: HoldKey, gen: u64, when: Instant) {
        let timer = self.wheel.insert_at((key, gen), self.on_grid(when));
        if let Some(old) = self.timers.insert(gen, timer) {
            self.wheel.try_remove(&old);
        }
    }

    fn on_grid(&self, when: Instant) -> Instant {
        on_grid(self.epoch, self.grid, when)
    }

    /// Queues the expired timers still watched, in batches of at most [`BATCH`] keys; a
    /// batch not yet sent is topped up first. On a cluster, batches are per hash slot.
    fn enqueue(&mut self, due: Vec<(HoldKey, u64)>, pending: &mut VecDeque<Vec<(HoldKey, u64)>>) {
        let mut live = Vec::with_capacity(due.len());
        for (key, gen) in due {
            self.timers.remove(&gen);
            if self.is_current(&key, gen) {
                live.push((key, gen));
            }
        }
        if self.by_slot {
            let mut slots: HashMap<Slot, Vec<(HoldKey, u64)>> = HashMap::new();
            for (key, gen) in live {
                let slot = Slot::for_key(key.0.as_bytes());
                slots.entry(slot).or_default().push((key, gen));
            }
            for group in slots.into_values() {
                pending.extend(group.chunks(BATCH).map(<[_]>::to_vec));
            }
            return;
        }
        for watch in live {
            match pending.back_mut() {
                Some(b) if b.len() < BATCH => b.push(watch),
                _ => pending.push_back(vec![watch]),
            }
        }
    }

    /// Whether `gen` is still the live watch of `key`.
    fn is_current(&self, key: &HoldKey, gen: u64) -> bool {
        self.registry
            .get(key)
            .is_some_and(|h| h.watch_refs > 0 && h.gen == gen && !h.is_lost)
    }

    fn settle(&mut self, (batch, sent_at, result): Renewal) {
        let now = Instant::now();
        match result {
            Ok(answers) if answers.len() == batch.len() => {
                tracing::trace!(locks = batch.len(), "watchdog renewed a batch");
                for ((key, gen), answer) in batch.into_iter().zip(answers) {
                    if answer == 1 {
                        let until = safe_until(sent_at, self.timeout);
                        if let Some(until) = self.renewed(&key, gen, until) {
                            self.set_deadline(&key, gen, until);
                            self.arm(key, gen, now + self.period);
                        }
                    } else {
                        self.lose(&key, gen, "the watchdog found it gone");
                    }
                }
            }
            other => {
                let error = match other {
                    Err(e) => e.to_string(),
                    Ok(v) => format!(
                        "renew answered {} results for {} keys",
                        v.len(),
                        batch.len()
                    ),
                };
                tracing::debug!(%error, locks = batch.len(), "watchdog renewal failed; retrying");
                let retry = now + (self.period / 4).min(Duration::from_millis(500));
                for (key, gen) in batch {
                    let expired = self
                        .registry
                        .get(&key)
                        .is_some_and(|h| now >= h.valid_until);
                    if expired {
                        self.lose(
                            &key,
                            gen,
                            "no renewal succeeded within the watchdog timeout",
                        );
                    } else if self.is_current(&key, gen) {
                        self.arm(key, gen, retry);
                    }
                }
            }
        }
    }

    /// Records a confirmed renewal of a live watch: the key lives at least until `until`.
    /// Returns the new loss baseline, or `None` if the watch ended meanwhile.
    fn renewed(&self, key: &HoldKey, gen: u64, until: Instant) -> Option<Instant> {
        match self.registry.get_mut(key) {
            Some(mut h) if h.watch_refs > 0 && h.gen == gen && !h.is_lost => {
                if until > h.valid_until {
                    h.valid_until = until;
                }
                Some(h.valid_until)
            }
            _ => None,
        }
    }

    fn lose(&mut self, key: &HoldKey, gen: u64, why: &str) {
        if let Some(mut h) = self.registry.get_mut(key) {
            if h.gen == gen && h.watch_refs > 0 {
                h.mark_lost(why, key);
            }
        }
    }
}

/// The moment a key whose TTL was set to `ttl` by a call sent at `sent` surely still lives.
fn safe_until(sent: Instant, ttl: Duration) -> Instant {
    sent + ttl.saturating_sub(drift(ttl))
}

/// `when` rounded up to a multiple of `grid` after `epoch`: renewals happen at most one grid
/// step late, which the TTL (three periods) absorbs, and locks due in one step share their
/// script calls.
fn on_grid(epoch: Instant, grid: Duration, when: Instant) -> Instant {
    let grid = grid.as_nanos().max(1);
    let since = when.saturating_duration_since(epoch).as_nanos();
    let steps = since.div_ceil(grid);
    epoch + Duration::from_nanos(u64::try_from(steps * grid).unwrap_or(u64::MAX))
}

async fn renew(mut conn: Commands, ttl: Duration, batch: Vec<(HoldKey, u64)>) -> Renewal {
    let keys: Vec<&str> = batch.iter().map(|((k, _), _)| &**k).collect();
    let ttl_ms = ttl.as_millis() as u64;
    let mut args: Vec<&dyn crate::scripts::ToRedisArgsDyn> = Vec::with_capacity(batch.len() + 1);
    args.push(&ttl_ms);
    let owners: Vec<&str> = batch.iter().map(|((_, o), _)| &**o).collect();
    for o in &owners {
        args.push(o);
    }
    let sent_at = Instant::now();
    let result = RENEW.run(&mut conn, &keys, &args).await;
    drop(args);
    drop(owners);
    drop(keys);
    (batch, sent_at, result)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loss_margin_covers_clock_drift_and_scheduling() {
        let ms = Duration::from_millis;
        assert_eq!(drift(Duration::from_secs(30)), ms(302)); // 1 % + 2 ms
        assert_eq!(drift(Duration::from_secs(3)), ms(100)); // scheduling floor
        assert_eq!(drift(Duration::from_secs(1)), ms(100));
        assert_eq!(drift(ms(100)), ms(10)); // a tenth of a tiny TTL
    }

    #[test]
    fn deadlines_round_up_to_the_grid() {
        let epoch = Instant::now();
        let grid = Duration::from_millis(250);
        let at = |ms: u64| epoch + Duration::from_millis(ms);
        assert_eq!(on_grid(epoch, grid, at(0)), at(0));
        assert_eq!(on_grid(epoch, grid, at(1)), at(250));
        assert_eq!(on_grid(epoch, grid, at(250)), at(250));
        assert_eq!(on_grid(epoch, grid, at(251)), at(500));
        // Timers due within one step share a deadline, hence a renewal batch.
        assert_eq!(
            on_grid(epoch, grid, at(1010)),
            on_grid(epoch, grid, at(1240))
        );
        // Never earlier than asked, never more than one step later.
        for ms in [3, 777, 1999, 12_345] {
            let g = on_grid(epoch, grid, at(ms));
            assert!(g >= at(ms) && g < at(ms) + grid, "{ms}");
        }
    }
}

//! The watchdog: one task per client that keeps every held watchdog lock alive.
//!
//! Locally held locks live in a registry keyed by (lock key, owner): how many guards hold it,
//! how many of those want renewals, a generation number and the "lost" token the guards
//! expose. Registering and releasing are O(1) map operations. A new watch joins a shared list
//! (waking the task only when the list was empty); the task takes the list one grid step
//! later and arms the watches still current, so a lock held for less than that never costs
//! the task a wakeup, a timer or a message (a lone caller's lock -> unlock sent two
//! messages, two thread wakeups, per pair before). Only the end of an armed watch sends the
//! task a message, to drop its timer.
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
use std::sync::atomic::AtomicU64;
use std::sync::Arc;
use std::time::Duration;

use dashmap::DashMap;
use futures::stream::FuturesUnordered;
use futures::{FutureExt, StreamExt};
use tokio::sync::{mpsc, Notify};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tokio_util::time::{delay_queue, DelayQueue};

use redis::cluster_routing::Slot;

use super::deadline::safe_until;
use super::observe;
use super::registry::{Cmd, HoldKey, HoldRegistry, OwnerHolds, Recent};
use crate::deploy::CommandConn;
use crate::wire::scripts::RENEW;

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

impl HoldRegistry {
    /// Starts the task. It runs until [`HoldRegistry::shutdown`] (the last `Client` dropped).
    pub(crate) fn start(conn: CommandConn, timeout: Duration) -> HoldRegistry {
        let registry = Arc::new(DashMap::new());
        let (tx, rx) = mpsc::unbounded_channel();
        let shutdown = CancellationToken::new();
        let (recent, wake) = (Arc::new(Recent::default()), Arc::new(Notify::new()));
        let task = Task {
            registry: registry.clone(),
            recent: recent.clone(),
            wake: wake.clone(),
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
        HoldRegistry {
            registry,
            tx,
            recent,
            wake,
            shutdown,
            next_gen: AtomicU64::new(1),
            timeout,
        }
    }
}

struct Task {
    registry: Arc<DashMap<HoldKey, OwnerHolds>>,
    /// Watches started since the last look, and the signal that the list stopped being empty.
    recent: Arc<Recent>,
    wake: Arc<Notify>,
    conn: CommandConn,
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

/// Sleeps until `at` (never completes for `None`; the caller's `select!` guard skips it).
async fn sleep_until_some(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

/// A finished renew call: its batch, when it was sent, and the reply.
type Renewal = (Vec<(HoldKey, u64)>, Instant, redis::RedisResult<Vec<i64>>);

impl Task {
    async fn run(mut self, mut rx: mpsc::UnboundedReceiver<Cmd>, shutdown: CancellationToken) {
        let mut inflight = FuturesUnordered::new();
        let mut pending: VecDeque<Vec<(HoldKey, u64)>> = VecDeque::new();
        let mut commands = Vec::with_capacity(COMMAND_BATCH);
        // When to take the `recent` list: one grid step after it stopped being empty.
        let mut take_recent: Option<Instant> = None;
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
                    for cmd in commands.drain(..) {
                        self.command(cmd);
                    }
                }
                _ = self.wake.notified(), if take_recent.is_none() => {
                    take_recent = Some(Instant::now() + self.grid);
                }
                _ = sleep_until_some(take_recent), if take_recent.is_some() => {
                    take_recent = None;
                    self.arm_recent();
                }
                Some(done) = inflight.next(), if !inflight.is_empty() => self.apply_renewal(done),
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

    /// Arms the watches started since the last look that are still current: their loss
    /// deadline, and their first renewal one period after they started. Ended ones are
    /// skipped (their holds were released meanwhile; nothing to undo).
    fn arm_recent(&mut self) {
        let started = std::mem::take(&mut *self.recent.lock().unwrap_or_else(|p| p.into_inner()));
        for (key, gen, at) in started {
            let until = match self.registry.get_mut(&key) {
                Some(mut h) if h.watch_refs > 0 && h.gen == gen && !h.is_lost => {
                    h.armed = true;
                    h.valid_until
                }
                _ => continue,
            };
            self.set_deadline(&key, gen, until);
            self.arm(key, gen, at + self.period);
        }
    }

    fn command(&mut self, cmd: Cmd) {
        match cmd {
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

    fn apply_renewal(&mut self, (batch, sent_at, result): Renewal) {
        let now = Instant::now();
        match result {
            Ok(answers) if answers.len() == batch.len() => {
                let renewed = answers.iter().filter(|a| **a == 1).count();
                observe::renew_call(batch.len(), Some(renewed));
                let traced = observe::renewals_traced();
                for ((key, gen), answer) in batch.into_iter().zip(answers) {
                    if answer == 1 {
                        if traced {
                            self.trace_renewal(&key);
                        }
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
                observe::renew_call(batch.len(), None);
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

    /// A `trace` event for one renewed lock, under the span of the acquire that took it.
    fn trace_renewal(&self, key: &HoldKey) {
        let meta = self.registry.get(key).and_then(|h| h.meta.clone());
        if let Some(meta) = meta {
            observe::renewed(&meta, &key.1);
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
                // `lua/renew.lua` extends the TTL key of every count of a per-hold kind.
                for d in &mut h.deadlines {
                    *d = (*d).max(until);
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

/// `when` rounded up to a multiple of `grid` after `epoch`: renewals happen at most one grid
/// step late, which the TTL (three periods) absorbs, and locks due in one step share their
/// script calls.
fn on_grid(epoch: Instant, grid: Duration, when: Instant) -> Instant {
    let grid = grid.as_nanos().max(1);
    let since = when.saturating_duration_since(epoch).as_nanos();
    let steps = since.div_ceil(grid);
    epoch + Duration::from_nanos(u64::try_from(steps * grid).unwrap_or(u64::MAX))
}

async fn renew(mut conn: CommandConn, ttl: Duration, batch: Vec<(HoldKey, u64)>) -> Renewal {
    let keys: Vec<&str> = batch.iter().map(|((k, _), _)| &**k).collect();
    let ttl_ms = ttl.as_millis() as u64;
    let mut args: Vec<&dyn crate::wire::scripts::ToRedisArgsDyn> =
        Vec::with_capacity(batch.len() + 1);
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

//! When a run of holds is lost: its loss deadline (a lease's, or moved by an extension), the
//! validity a guard reads from it, and a server that showed the run's holds are gone.

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::{HoldKey, HoldRegistry};

impl HoldRegistry {
    /// A hold of the run `epoch` on `key` was extended by a call outside the watchdog (a
    /// Redlock's extension round): its key surely lives until `until`.
    pub(crate) fn extended(&self, key: &HoldKey, epoch: u64, until: Instant) {
        if let Some(mut h) = self.registry.get_mut(key) {
            if h.epoch == epoch && until > h.valid_until {
                h.valid_until = until;
            }
        }
    }

    /// Fires the loss signal of a run with leased holds at its loss deadline: a task sleeps
    /// until `valid_until` (again when a renewal or re-entry moved it) and marks the run lost
    /// once it passed, unless the run ended first (released, lost, or replaced by a new run).
    /// One task per (lock, owner) run with a leased hold; watched runs are also followed by
    /// the watchdog's deadlines.
    pub(super) fn lease_deadline(&self, key: HoldKey, epoch: u64) {
        let registry = Arc::downgrade(&self.registry);
        tokio::spawn(async move {
            // The run's token and latest deadline: a guard can outlive its client (every
            // `Client` clone dropped), and is still told when its lease runs out.
            let mut last: Option<(CancellationToken, Instant)> = None;
            loop {
                let until = {
                    let Some(registry) = registry.upgrade() else {
                        if let Some((lost, until)) = last {
                            tokio::time::sleep_until(until).await;
                            lost.cancel();
                        }
                        return;
                    };
                    let Some(mut h) = registry.get_mut(&key) else {
                        return;
                    };
                    if h.epoch != epoch {
                        return; // a new run has its own timer
                    }
                    if h.holds == 0 || h.is_lost {
                        h.lease_timer = false;
                        return;
                    }
                    if Instant::now() >= h.valid_until {
                        h.mark_lost("its lease ran out", &key);
                        h.lease_timer = false;
                        return;
                    }
                    last = Some((h.lost.clone(), h.valid_until));
                    h.valid_until
                };
                // Not ended by the client's shutdown: a guard can outlive every `Client`
                // clone, and its lease still runs out on the server.
                tokio::time::sleep_until(until).await;
            }
        });
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

    /// The server showed that this owner holds nothing on `key` right now (another owner
    /// holds it, or a renewal found it gone): the guards of `epoch` (of the current run when
    /// `None`) are lost. Their releases still go out and find nothing; a later grant starts
    /// a new run.
    pub(crate) fn forgotten(&self, key: &HoldKey, epoch: Option<u64>, why: &str) {
        if let Some(mut h) = self.registry.get_mut(key) {
            if h.holds > 0 && epoch.is_none_or(|e| e == h.epoch) {
                h.mark_lost(why, key);
            }
        }
    }
}

//! The registry's side of a settlement (see "Settling" in [`engine`](crate::engine)): what it aims
//! at, and how it ends.

use std::sync::Arc;
use std::time::Duration;

use dashmap::mapref::entry::Entry;
use tokio::sync::Notify;

use super::{HoldKey, HoldRegistry, OwnerHolds};

/// See [`HoldRegistry::settle_target`].
pub(crate) struct SettleTarget {
    pub(crate) target: u32,
    pub(crate) expected: u32,
    pub(crate) ttl: Duration,
    pub(crate) hint: Option<u32>,
    /// Guards whose release the settlement had taken over when the target was read: the
    /// next count read tells them whether their holds lasted ([`HoldRegistry::counted`]).
    pub(crate) handed_over: usize,
    /// A re-entry's outcome is unknown: see [`HoldRegistry::give_up_run`].
    pub(crate) unverified: bool,
}

impl OwnerHolds {
    /// A call now waits for the running settlement (if any): it retries at once rather than
    /// after its backoff, which grows to a second while the server cannot be reached and
    /// would outlast an unlock's or an acquire's budget once the server is back.
    pub(super) fn hurry_settlement(&self) {
        if let Some(n) = self.hurry.as_ref().filter(|_| self.settling) {
            n.notify_one();
        }
    }
}

impl HoldRegistry {
    /// What a settlement of `key` aims at: the guards alive (`target`), the holds the
    /// server should count if none vanished (`expected`: those guards and the ones whose
    /// release the settlement took over; constant while it runs, since acquires wait for it),
    /// the longest TTL, and a count hint. The hint is not used while a guard that handed its
    /// release over waits for a count read after the hand-over, nor while the run is
    /// unverified: those need the server's count as it is now.
    pub(crate) fn settle_target(&self, key: &HoldKey) -> SettleTarget {
        self.registry.get_mut(key).map_or(
            SettleTarget {
                target: 0,
                expected: 0,
                ttl: self.timeout,
                hint: None,
                handed_over: 0,
                unverified: false,
            },
            |mut h| {
                let waiting = h.releasing.iter().any(|r| r.counted.is_none());
                let unverified = h.unverified;
                let hint = h.hint.take().filter(|_| !waiting && !unverified);
                SettleTarget {
                    target: h.holds,
                    expected: h.holds + h.releasing.len() as u32,
                    ttl: h.ttl_ceiling.max(self.timeout),
                    hint,
                    handed_over: h.releasing.len(),
                    unverified,
                }
            },
        )
    }

    /// A settlement read the server's count after the first `handed_over` guards handed
    /// their releases over: those not counted yet learn whether their holds were still there
    /// (`lasted`: the count was all the settlement expected). A count read before a guard's
    /// hand-over says nothing about it: its hold may have vanished in between.
    pub(crate) fn counted(&self, key: &HoldKey, handed_over: usize, lasted: bool) {
        if let Some(mut h) = self.registry.get_mut(key) {
            h.unverified = false;
            for r in h.releasing.iter_mut().take(handed_over) {
                r.counted.get_or_insert(lasted);
            }
        }
    }

    /// The settlement found this owner's holds gone (or changed by someone else) before it
    /// released all it meant to: no guard whose release it took over is told its hold lasted.
    pub(crate) fn vanished(&self, key: &HoldKey) {
        if let Some(mut h) = self.registry.get_mut(key) {
            for r in h.releasing.iter_mut() {
                if r.counted == Some(true) {
                    r.counted = Some(false);
                }
            }
        }
    }

    /// The settlement of an unverified run read a count of 1 where it expected holds: the
    /// re-entry whose outcome was unknown may have run after the run's holds were lost
    /// (force-unlocked, or gone with a failover) and started a new run with that count, or
    /// it never ran and the one hold is the run's own. The count cannot tell which, and
    /// adopting a new run as the old one would hide the loss, so the run is given up: its
    /// guards are told they are lost (their releases send nothing) and the settlement
    /// releases what the server counts. Rare: it takes a re-entry whose reply was lost and
    /// that did not run on the run it was sent for.
    pub(crate) fn give_up_run(&self, key: &HoldKey) {
        let epoch = self.new_epoch();
        if let Some(mut h) = self.registry.get_mut(key) {
            h.mark_lost(
                "a re-entry's outcome is unknown and the server's count cannot tell whether \
                 this owner's holds lasted",
                key,
            );
            let (releasing, hint) = (std::mem::take(&mut h.releasing), h.hint);
            h.start_new_run(epoch);
            h.settling = true;
            h.doubt = true;
            h.hint = hint;
            h.releasing = releasing;
        }
    }

    /// Ends a settlement that found the server at `target` holds (`lost`: below it), and
    /// tells the guards whose release it took over whether their holds lasted: each was
    /// counted by a read after its hand-over, and nothing vanished since (nothing is told
    /// when it `gave_up`). Returns `false`, and keeps settling, if a guard was released
    /// meanwhile (the target moved).
    pub(crate) fn settle_done(
        &self,
        key: &HoldKey,
        target: u32,
        lost: bool,
        gave_up: bool,
        force: bool,
    ) -> bool {
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
        if lost {
            for r in h.releasing.iter_mut() {
                r.counted = Some(false);
            }
        }
        h.tell_releasing(gave_up);
        h.settling = false;
        h.doubt = false;
        h.hurry = None;
        if let Some(n) = h.settled.take() {
            n.notify_waiters();
        }
        if h.is_idle() {
            e.remove();
        }
        true
    }

    /// What ends the backoff of `key`'s settlement early: a call came that waits for it
    /// (see [`OwnerHolds::hurry`](super::OwnerHolds::hurry)).
    pub(crate) fn hurry(&self, key: &HoldKey) -> Arc<Notify> {
        self.registry
            .get_mut(key)
            .map_or_else(Default::default, |mut h| {
                h.hurry.get_or_insert_with(Default::default).clone()
            })
    }

    /// Whether a settlement runs for `key`.
    pub(crate) fn is_settling(&self, key: &HoldKey) -> bool {
        self.registry.get(key).is_some_and(|h| h.settling)
    }
}

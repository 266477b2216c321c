//! The registry's side of a settlement (see "Settling" in [`engine`](crate::engine)): what it aims
//! at, and how it ends.

use std::time::Duration;

use dashmap::mapref::entry::Entry;

use super::{HoldKey, HoldRegistry};

/// See [`HoldRegistry::settle_target`].
pub(crate) struct SettleTarget {
    pub(crate) target: u32,
    pub(crate) expected: u32,
    pub(crate) ttl: Duration,
    pub(crate) hint: Option<u32>,
}

impl HoldRegistry {
    /// What a settlement of `key` aims at: the guards alive (`target`), the holds the
    /// server should count if none vanished (`expected`: those guards and the ones whose
    /// release the settlement took over; constant while it runs, since acquires wait for it),
    /// the longest TTL, and a count hint.
    pub(crate) fn settle_target(&self, key: &HoldKey) -> SettleTarget {
        self.registry.get_mut(key).map_or(
            SettleTarget {
                target: 0,
                expected: 0,
                ttl: self.timeout,
                hint: None,
            },
            |mut h| SettleTarget {
                target: h.holds,
                expected: h.holds + h.releasing.len() as u32,
                ttl: h.ttl_ceiling.max(self.timeout),
                hint: h.hint.take(),
            },
        )
    }

    /// Ends a settlement that found the server at `target` holds (`lost`: below it), and
    /// tells the guards whose release it took over whether their holds lasted (`lasted`;
    /// `None` when it gave up). Returns `false`, and keeps settling, if a guard was released
    /// meanwhile (the target moved).
    pub(crate) fn settle_done(
        &self,
        key: &HoldKey,
        target: u32,
        lost: bool,
        lasted: Option<bool>,
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
        h.tell_releasing(lasted);
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

    /// Whether a settlement runs for `key`.
    pub(crate) fn is_settling(&self, key: &HoldKey) -> bool {
        self.registry.get(key).is_some_and(|h| h.settling)
    }
}

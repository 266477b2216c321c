//! Moving a hold to a fresh owner (`detach`): the registry's side.

use std::sync::Arc;
use std::time::Duration;

use dashmap::mapref::entry::Entry;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::{Cmd, HoldKey, HoldRegistry, OwnerHolds};
use crate::engine::observe::Meta;

impl HoldRegistry {
    /// Starts moving the hold of the guard of `epoch` on `from` to the fresh owner `to`
    /// (`detach`): only when it is its owner's one hold, nothing is in flight or in doubt,
    /// and it is not lost. Counts the call in flight on both entries; end it with
    /// [`HoldRegistry::transfer`] or [`HoldRegistry::finish`] on both.
    pub(crate) fn begin_transfer(
        &self,
        from: &HoldKey,
        epoch: u64,
        to: &HoldKey,
    ) -> std::result::Result<(), &'static str> {
        {
            let Some(mut h) = self.registry.get_mut(from) else {
                return Err("the hold is gone");
            };
            if h.epoch != epoch || h.is_lost {
                return Err("the hold is lost");
            }
            if h.holds != 1 {
                return Err(
                    "its owner holds the lock more than once (re-entered): detach \
                            the outer guard once the inner ones are released",
                );
            }
            if h.inflight > 0 || h.doubt || h.settling {
                return Err("a call of its owner on this lock is in flight");
            }
            h.inflight += 1;
        }
        let mut h = self
            .registry
            .entry(to.clone())
            .or_insert_with(|| OwnerHolds::new(self.new_epoch()));
        h.inflight += 1;
        Ok(())
    }

    /// Ends a move begun by [`HoldRegistry::begin_transfer`] that the server made: the hold
    /// leaves `from` (its renewals too) and joins `to`, with the same loss deadline. Returns
    /// the token and epoch of the hold under its new owner.
    pub(crate) fn transfer(
        &self,
        from: &HoldKey,
        to: &HoldKey,
        watch: bool,
        meta: &Arc<Meta>,
    ) -> (CancellationToken, u64) {
        let (mut valid_until, mut ttl_ceiling) = (Instant::now(), Duration::ZERO);
        let mut unwatch = None;
        if let Entry::Occupied(mut e) = self.registry.entry(from.clone()) {
            let h = e.get_mut();
            h.inflight = h.inflight.saturating_sub(1);
            valid_until = h.valid_until;
            ttl_ceiling = h.ttl_ceiling;
            unwatch = h.remove_guard(watch, || self.new_epoch());
            h.pass_turn();
            if h.is_idle() {
                e.remove();
            }
        }
        if let Some(gen) = unwatch {
            let _ = self.tx.send(Cmd::Unwatch(gen));
        }
        let (token, epoch, schedule) = {
            let mut h = self
                .registry
                .entry(to.clone())
                .or_insert_with(|| OwnerHolds::new(self.new_epoch()));
            h.inflight = h.inflight.saturating_sub(1);
            h.pass_turn();
            let schedule = h.add_guard(valid_until, ttl_ceiling, watch, || self.new_epoch());
            h.meta.get_or_insert_with(|| meta.clone());
            (h.lost.clone(), h.epoch, schedule)
        };
        if let Some(gen) = schedule {
            self.watch(to, gen, &token);
        }
        (token, epoch)
    }
}

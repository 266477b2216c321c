//! Metric handles cached per client, so the hot path (every acquire and release) records
//! through a handle instead of building a key and asking the recorder for it each time.
//!
//! Handles are registered on first use, per kind, metric and outcome, with the recorder
//! installed at that moment: install the recorder before the first lock call (the README
//! says so). Every kind ([`KindId::ALL`]) has its handles; the rare events (errors, losses,
//! renew calls, reconnects) and the opted-in lock-name label record without a cache.

use std::sync::OnceLock;

use metrics::{Counter, Gauge, Histogram};

use super::names::*;
use crate::engine::KindId;

/// The outcomes of `lockwise_acquire_wait_seconds`.
pub(super) const OUTCOMES: [&str; 4] = ["acquired", "timeout", "error", "cancelled"];

/// The outcomes of `lockwise_hold_seconds`.
pub(super) const HOLD_ENDS: [&str; 2] = ["released", "lost"];

/// The cached handles of one client.
#[derive(Default)]
pub(crate) struct Cache {
    kinds: [KindMetrics; KindId::ALL.len()],
}

/// The cached handles of one kind.
#[derive(Default)]
pub(super) struct KindMetrics {
    wait: [OnceLock<Histogram>; OUTCOMES.len()],
    held: [OnceLock<Histogram>; HOLD_ENDS.len()],
    acquisitions: OnceLock<Counter>,
    timeouts: OnceLock<Counter>,
    releases: OnceLock<Counter>,
    holds: OnceLock<Gauge>,
    waiters: OnceLock<Gauge>,
    permits: OnceLock<Gauge>,
    queue: OnceLock<Histogram>,
}

impl Cache {
    /// The handles of `kind`.
    pub(super) fn kind(&self, kind: KindId) -> Option<&KindMetrics> {
        self.kinds.get(kind.index())
    }
}

/// Runs `f` with `cell`'s handle, registered by `make` on first use; with `make`'s handle,
/// uncached, without a cell.
fn with<T>(cell: Option<&OnceLock<T>>, make: impl FnOnce() -> T, f: impl FnOnce(&T)) {
    match cell {
        Some(cell) => f(cell.get_or_init(make)),
        None => f(&make()),
    }
}

pub(super) fn wait(kind: Option<&KindMetrics>, label: &'static str, outcome: usize, secs: f64) {
    let make = || metrics::histogram!(ACQUIRE_WAIT_SECONDS, "kind" => label, "outcome" => OUTCOMES[outcome]);
    with(kind.map(|k| &k.wait[outcome]), make, |h| h.record(secs));
}

pub(super) fn hold(kind: Option<&KindMetrics>, label: &'static str, end: usize, secs: f64) {
    let make = || metrics::histogram!(HOLD_SECONDS, "kind" => label, "outcome" => HOLD_ENDS[end]);
    with(kind.map(|k| &k.held[end]), make, |h| h.record(secs));
}

pub(super) fn acquisition(kind: Option<&KindMetrics>, label: &'static str) {
    let make = || metrics::counter!(ACQUISITIONS_TOTAL, "kind" => label);
    with(kind.map(|k| &k.acquisitions), make, |c| c.increment(1));
}

pub(super) fn timeout(kind: Option<&KindMetrics>, label: &'static str) {
    let make = || metrics::counter!(TIMEOUTS_TOTAL, "kind" => label);
    with(kind.map(|k| &k.timeouts), make, |c| c.increment(1));
}

pub(super) fn release(kind: Option<&KindMetrics>, label: &'static str) {
    let make = || metrics::counter!(RELEASES_TOTAL, "kind" => label);
    with(kind.map(|k| &k.releases), make, |c| c.increment(1));
}

pub(super) fn holds(kind: Option<&KindMetrics>, label: &'static str, delta: f64) {
    let make = || metrics::gauge!(HOLDS, "kind" => label);
    with(kind.map(|k| &k.holds), make, |g| g.increment(delta));
}

pub(super) fn waiters(kind: Option<&KindMetrics>, label: &'static str, delta: f64) {
    let make = || metrics::gauge!(WAITERS, "kind" => label);
    with(kind.map(|k| &k.waiters), make, |g| g.increment(delta));
}

pub(super) fn permits(kind: Option<&KindMetrics>, label: &'static str, delta: f64) {
    let make = || metrics::gauge!(PERMITS_HELD, "kind" => label);
    with(kind.map(|k| &k.permits), make, |g| g.increment(delta));
}

pub(super) fn queue(kind: Option<&KindMetrics>, label: &'static str, len: f64) {
    let make = || metrics::histogram!(FAIR_QUEUE_LENGTH, "kind" => label);
    with(kind.map(|k| &k.queue), make, |h| h.record(len));
}

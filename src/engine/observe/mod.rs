//! What the engine tells operators: every metric (names, labels, descriptions) and every
//! tracing span and event of acquire, wait, renew and release, in one place.
//!
//! The engine calls one small function per event (an acquire ended, a hold was released, a
//! renewal batch answered, a lock was lost, the subscription connection came back...). Each
//! records its metric through the `metrics` facade, compiled in only with the `metrics`
//! feature (without it those parts are `cfg`'d out and nothing is left of them), and emits
//! its tracing span or event. Labels are `&'static str`s (the kind, the outcome, an error
//! class), so recording allocates no `String`; the lock name becomes a label only when the
//! client was built with `metrics_lock_names(true)`. The events of every acquire and
//! release record through handles the client caches (`cache`), not through a key built and
//! looked up per call.
//!
//! Spans: `lockwise.acquire` (debug) covers one acquire call, wait included, and lives on in
//! the hold it created, so the background work of that hold (watchdog renewals, a release
//! from `Drop`, the warning when it is lost) can point back to it: renewals and the loss
//! warning are events whose parent is that span, and `lockwise.release` spans (debug)
//! `follows_from` it. Fields known only at the end are declared `Empty` and recorded then.
//! A disabled span is `Span::none()`: no field is evaluated and nothing is allocated.

use std::sync::Arc;
use std::time::Instant;

use tracing::field::Empty;
use tracing::Span;

use super::KindId;
use crate::error::{Error, Result};

#[cfg(feature = "metrics")]
mod cache;

/// What every event of one client records through: its cached metric handles (with the
/// `metrics` feature) and whether the lock name is a label too.
#[derive(Default)]
pub(crate) struct Metrics {
    #[cfg(feature = "metrics")]
    cache: cache::Cache,
    /// Label the acquire wait histogram with the lock name too (`metrics_lock_names`).
    #[cfg_attr(not(feature = "metrics"), allow(dead_code))]
    lock_names: bool,
}

impl Metrics {
    /// A client's metrics; `lock_names`: the lock name labels the wait histogram too.
    pub(crate) fn new(lock_names: bool) -> Metrics {
        Metrics {
            #[cfg(feature = "metrics")]
            cache: cache::Cache::default(),
            lock_names,
        }
    }
}

pub mod names;

/// Registers the description and unit of every metric with the installed recorder (an
/// exporter shows them, e.g. as Prometheus `# HELP` lines). Call it once after installing
/// the recorder; recording works without it.
#[cfg(feature = "metrics")]
pub fn describe_metrics() {
    use metrics::{describe_counter, describe_gauge, describe_histogram, Unit};
    use names::*;
    describe_histogram!(
        ACQUIRE_WAIT_SECONDS,
        Unit::Seconds,
        "Time from the start of an acquire call to its outcome (acquired, timeout, error, cancelled)"
    );
    describe_histogram!(
        HOLD_SECONDS,
        Unit::Seconds,
        "Time from a hold's grant to its release (released) or to the release that found it gone (lost)"
    );
    describe_gauge!(
        WAITERS,
        "Acquire calls of this process in progress (waiting or attempting)"
    );
    describe_gauge!(
        PERMITS_HELD,
        "Semaphore permits held by guards of this process"
    );
    describe_counter!(ACQUISITIONS_TOTAL, "Acquire calls that acquired");
    describe_counter!(TIMEOUTS_TOTAL, "Acquire calls whose wait ran out");
    describe_counter!(
        ERRORS_TOTAL,
        "Acquire and release calls that failed, by error class"
    );
    describe_counter!(RELEASES_TOTAL, "Holds released");
    describe_gauge!(HOLDS, "Holds currently held by guards of this process");
    describe_counter!(WATCHDOG_RENEWALS_TOTAL, "Locks renewed by the watchdog");
    describe_counter!(
        WATCHDOG_RENEW_CALLS_TOTAL,
        "Renew script calls of the watchdog (one per batch)"
    );
    describe_counter!(LOCKS_LOST_TOTAL, "Holds found lost");
    describe_counter!(
        SUBSCRIPTION_RECONNECTS_TOTAL,
        "Reconnections of the subscription connection"
    );
    describe_counter!(
        BATCH_CALLS_TOTAL,
        "Batch script calls: lock and unlock calls that queued on a connection, sent together"
    );
    describe_counter!(BATCHED_TOTAL, "Lock and unlock calls sent in batches");
    describe_histogram!(
        FAIR_QUEUE_LENGTH,
        Unit::Count,
        "Waiters left in a fair lock's queue when a waiter acquired it"
    );
}

/// What background work of a hold needs to name it: its kind, lock name and the span of the
/// acquire that created it. Kept by the hold registry entry of its run.
pub(crate) struct Meta {
    pub(crate) kind: KindId,
    pub(crate) name: Arc<str>,
    pub(crate) span: Span,
}

/// One acquire call being observed: its span, and its outcome recorded exactly once
/// (`cancelled` when dropped before [`finish`](Acquire::finish)).
pub(crate) struct Acquire<'a> {
    kind: KindId,
    /// The client's cached handles of this kind.
    #[cfg(feature = "metrics")]
    handles: Option<&'a cache::KindMetrics>,
    #[cfg(not(feature = "metrics"))]
    handles: std::marker::PhantomData<&'a ()>,
    started: Instant,
    span: Span,
    done: bool,
    /// The lock name as a label, only when the client opted in.
    #[cfg(feature = "metrics")]
    name: Option<metrics::SharedString>,
}

impl<'a> Acquire<'a> {
    pub(crate) fn start(metrics: &'a Metrics, kind: KindId, name: &str, owner: &str) -> Self {
        let span = tracing::debug_span!(
            "lockwise.acquire",
            kind = kind.label(),
            lock = name,
            owner,
            outcome = Empty,
            waited_ms = Empty,
            holds = Empty,
            fencing_token = Empty,
        );
        #[cfg(not(feature = "metrics"))]
        let _ = metrics;
        #[cfg(feature = "metrics")]
        let name = metrics
            .lock_names
            .then(|| ::metrics::SharedString::from(name.to_owned()));
        #[cfg(feature = "metrics")]
        waiting(metrics.cache.kind(kind), kind.label(), name.as_ref(), 1.0);
        Acquire {
            kind,
            #[cfg(feature = "metrics")]
            handles: metrics.cache.kind(kind),
            #[cfg(not(feature = "metrics"))]
            handles: std::marker::PhantomData,
            started: Instant::now(),
            span,
            done: false,
            #[cfg(feature = "metrics")]
            name,
        }
    }

    /// The acquire span, to instrument the wait with.
    pub(crate) fn span(&self) -> &Span {
        &self.span
    }

    /// Records the outcome of the call; returns the span for the hold it created.
    pub(crate) fn finish<T>(mut self, result: &Result<Option<T>>) -> Span {
        let outcome = match result {
            Ok(Some(_)) => "acquired",
            Ok(None) => "timeout",
            Err(e) => {
                errored(self.kind.label(), "acquire", e);
                "error"
            }
        };
        self.end(outcome);
        std::mem::replace(&mut self.span, Span::none())
    }

    fn end(&mut self, outcome: &'static str) {
        self.done = true;
        let waited = self.started.elapsed();
        self.span.record("outcome", outcome);
        self.span.record("waited_ms", waited.as_millis() as u64);
        match outcome {
            "acquired" => {
                tracing::debug!(parent: &self.span, "lock acquired");
            }
            "timeout" => {
                tracing::debug!(parent: &self.span, "try_lock timed out");
            }
            // Errors are returned to the caller; the span says how the call ended.
            _ => {}
        }
        #[cfg(feature = "metrics")]
        {
            let (kind, secs) = (self.kind.label(), waited.as_secs_f64());
            let handles = self.handles;
            waiting(handles, kind, self.name.as_ref(), -1.0);
            match self.name.take() {
                Some(name) => metrics::histogram!(names::ACQUIRE_WAIT_SECONDS,
                    "kind" => kind, "outcome" => outcome, "name" => name)
                .record(secs),
                None => {
                    let index = cache::OUTCOMES.iter().position(|o| *o == outcome);
                    cache::wait(handles, kind, index.unwrap_or(0), secs);
                }
            }
            match outcome {
                "acquired" => cache::acquisition(handles, kind),
                "timeout" => cache::timeout(handles, kind),
                _ => {}
            }
        }
    }
}

/// One more (`delta` 1) or one fewer (-1) acquire call in progress.
#[cfg(feature = "metrics")]
fn waiting(
    handles: Option<&cache::KindMetrics>,
    kind: &'static str,
    name: Option<&metrics::SharedString>,
    delta: f64,
) {
    match name {
        Some(name) => {
            metrics::gauge!(names::WAITERS, "kind" => kind, "name" => name.clone()).increment(delta)
        }
        None => cache::waiters(handles, kind, delta),
    }
}

impl Drop for Acquire<'_> {
    fn drop(&mut self) {
        if !self.done {
            self.end("cancelled");
        }
    }
}

/// Records the hold count a granted acquire reported on its span.
pub(crate) fn granted(span: &Span, holds: u32) {
    span.record("holds", holds);
}

/// Records the fencing token of a fenced acquisition on its acquire span.
pub(crate) fn fencing_token(span: &Span, token: u64) {
    span.record("fencing_token", token);
}

/// A hold began (+1) or ended (-1) in this process.
pub(crate) fn held(metrics: &Metrics, kind: KindId, delta: f64) {
    #[cfg(feature = "metrics")]
    cache::holds(metrics.cache.kind(kind), kind.label(), delta);
    #[cfg(not(feature = "metrics"))]
    let _ = (metrics, kind, delta);
}

/// How a hold ended, as `lockwise_hold_seconds` labels it.
/// (`as usize` indexes the outcome labels of the metrics cache.)
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum HoldEnd {
    /// Its own release removed it.
    Released = 0,
    /// The release found it gone: it had ended before (expired, force-unlocked, lost).
    Lost = 1,
}

/// A hold of `meta`'s lock, granted `held` ago, ended as `end`.
pub(crate) fn hold_ended(metrics: &Metrics, meta: &Meta, held: std::time::Duration, end: HoldEnd) {
    #[cfg(feature = "metrics")]
    {
        let (kind, secs, index) = (meta.kind.label(), held.as_secs_f64(), end as usize);
        match metrics.lock_names {
            true => metrics::histogram!(names::HOLD_SECONDS, "kind" => kind,
                "outcome" => cache::HOLD_ENDS[index], "name" => meta.name.to_string())
            .record(secs),
            false => cache::hold(metrics.cache.kind(meta.kind), kind, index, secs),
        }
    }
    #[cfg(not(feature = "metrics"))]
    let _ = (metrics, meta, held, end);
}

/// A permit guard of the semaphore `name` took (`delta` > 0) or stopped holding (< 0)
/// permits.
pub(crate) fn permits_held(metrics: &Metrics, kind: KindId, name: &str, delta: f64) {
    #[cfg(feature = "metrics")]
    match metrics.lock_names {
        true => metrics::gauge!(names::PERMITS_HELD, "kind" => kind.label(),
            "name" => name.to_owned())
        .increment(delta),
        false => cache::permits(metrics.cache.kind(kind), kind.label(), delta),
    }
    #[cfg(not(feature = "metrics"))]
    let _ = (metrics, kind, name, delta);
}

/// The span of one release, linked to the acquire that created the hold. `background`: the
/// release of a dropped guard, run by a spawned task.
pub(crate) fn release_span(meta: &Meta, owner: &str, background: bool) -> Span {
    let span = tracing::debug_span!(
        "lockwise.release",
        kind = meta.kind.label(),
        lock = &*meta.name,
        owner,
        background,
        outcome = Empty,
        remaining = Empty,
    );
    span.follows_from(&meta.span);
    span
}

/// A release ended: `Ok(n)` is the unlock script's reply (n >= 0 released, -1 not held).
pub(crate) fn released(metrics: &Metrics, kind: KindId, span: &Span, reply: &Result<i64>) {
    let label = kind.label();
    match reply {
        Ok(n) if *n >= 0 => {
            span.record("outcome", "released");
            span.record("remaining", n);
            tracing::debug!(parent: span, remaining = n, "lock released");
            #[cfg(feature = "metrics")]
            cache::release(metrics.cache.kind(kind), label);
            #[cfg(not(feature = "metrics"))]
            let _ = metrics;
        }
        Ok(_) => {
            span.record("outcome", "not_held");
            errored(
                label,
                "release",
                &Error::NotHeld {
                    name: String::new(),
                },
            );
        }
        Err(e) => {
            span.record("outcome", "error");
            errored(label, "release", e);
        }
    }
}

/// An acquire or release failed.
fn errored(kind: &'static str, op: &'static str, e: &Error) {
    #[cfg(feature = "metrics")]
    metrics::counter!(names::ERRORS_TOTAL, "kind" => kind, "op" => op, "error" => error_class(e))
        .increment(1);
    #[cfg(not(feature = "metrics"))]
    let _ = (kind, op, e);
}

/// The small fixed set of error classes of `lockwise_errors_total{error}`.
#[cfg(feature = "metrics")]
fn error_class(e: &Error) -> &'static str {
    match e {
        Error::InvalidArgument { .. } => "invalid_argument",
        Error::NotHeld { .. } => "not_held",
        Error::Redis(r) if r.is_timeout() => "timeout",
        Error::Redis(r) if r.is_io_error() || r.is_connection_dropped() => "connection",
        Error::Redis(_) => "redis",
        Error::UnexpectedReply(_) => "unexpected_reply",
        Error::ReplicaSync { .. } => "replica_sync",
        Error::Permission { .. } => "permission",
        Error::ClientClosed => "client_closed",
        _ => "other",
    }
}

/// A renew call answered: `renewed` of its locks were renewed (`None`: the call failed).
pub(crate) fn renew_call(locks: usize, renewed: Option<usize>) {
    if let Some(n) = renewed {
        tracing::trace!(locks, renewed = n, "watchdog renewed a batch");
    }
    #[cfg(feature = "metrics")]
    {
        let result = if renewed.is_some() { "ok" } else { "error" };
        metrics::counter!(names::WATCHDOG_RENEW_CALLS_TOTAL, "result" => result).increment(1);
        if let Some(n) = renewed {
            metrics::counter!(names::WATCHDOG_RENEWALS_TOTAL).increment(n as u64);
        }
    }
}

/// A batch call of `calls` lock and unlock calls answered (`ok`: with a reply per call).
pub(crate) fn batch_call(calls: usize, ok: bool) {
    tracing::trace!(calls, ok, "sent a batch of lock calls");
    #[cfg(feature = "metrics")]
    {
        let result = if ok { "ok" } else { "error" };
        metrics::counter!(names::BATCH_CALLS_TOTAL, "result" => result).increment(1);
        metrics::counter!(names::BATCHED_TOTAL).increment(calls as u64);
    }
}

/// Whether per-lock renewal events would be seen (so the caller looks up their names only
/// then).
pub(crate) fn renewals_traced() -> bool {
    tracing::enabled!(tracing::Level::TRACE)
}

/// One lock renewed by the watchdog (emit only when [`renewals_traced`]).
pub(crate) fn renewed(meta: &Meta, owner: &str) {
    tracing::trace!(parent: &meta.span, kind = meta.kind.label(), lock = &*meta.name, owner, "lock renewed");
}

/// A hold was found lost. `meta` names it; without (a run that never had a guard) the key
/// does.
pub(crate) fn lost(meta: Option<&Meta>, key: &str, owner: &str, why: &str) {
    match meta {
        Some(m) => {
            tracing::warn!(
                parent: &m.span,
                kind = m.kind.label(),
                lock = &*m.name,
                key,
                owner,
                reason = why,
                "lock lost"
            );
        }
        None => {
            tracing::warn!(key, owner, reason = why, "lock lost");
        }
    }
    #[cfg(feature = "metrics")]
    metrics::counter!(names::LOCKS_LOST_TOTAL, "kind" => meta.map_or("unknown", |m| m.kind.label()))
        .increment(1);
}

/// The subscription connection came back and the client resubscribes its channels.
pub(crate) fn resubscribed() {
    tracing::warn!("subscription connection restored; resubscribing");
    #[cfg(feature = "metrics")]
    metrics::counter!(names::SUBSCRIPTION_RECONNECTS_TOTAL).increment(1);
}

/// A fair lock was acquired with `len` waiters still queued behind.
pub(crate) fn fair_queue(metrics: &Metrics, kind: KindId, span: &Span, len: u64) {
    tracing::debug!(parent: span, queued = len, "fair lock taken");
    #[cfg(feature = "metrics")]
    cache::queue(metrics.cache.kind(kind), kind.label(), len as f64);
    #[cfg(not(feature = "metrics"))]
    let _ = (metrics, kind);
}

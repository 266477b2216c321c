//! The metric names, as the engine records them (Prometheus conventions: `_seconds`,
//! `_total`). [`guide::operations`](crate::guide::operations) lists their types, labels and meaning.

/// Histogram, seconds: how long each acquire call took from its start until it acquired,
/// timed out, failed or was cancelled. Labels `kind`, `outcome` (and `name` when opted in).
pub const ACQUIRE_WAIT_SECONDS: &str = "lockwise_acquire_wait_seconds";
/// Histogram, seconds: how long each hold was held, from its grant to its release
/// (`outcome` = `released`), or to the release that found it gone (`lost`: it expired, was
/// force-unlocked or lost to a failover before). Label `kind`, `outcome` (and `name` when
/// opted in). A release that ends in an error records nothing (nor does `unlock()` when its
/// release goes on in the background: that release records it); holds released by
/// `Client::shutdown` are not recorded.
pub const HOLD_SECONDS: &str = "lockwise_hold_seconds";
/// Gauge: acquire calls of this process in progress (waiting, or making their attempt), by
/// kind (and lock name when opted in): how many wait on a lock now. Label `kind` (+ `name`).
pub const WAITERS: &str = "lockwise_waiters";
/// Gauge: semaphore permits held by guards of this process (taken and not yet given back,
/// released or forgotten). Label `kind` (`semaphore`, `lease_semaphore`; + `name`).
pub const PERMITS_HELD: &str = "lockwise_permits_held";
/// Counter: acquire calls that acquired. Label `kind`.
pub const ACQUISITIONS_TOTAL: &str = "lockwise_acquisitions_total";
/// Counter: acquire calls whose wait ran out (`try_lock` answered `None`). Label `kind`.
pub const TIMEOUTS_TOTAL: &str = "lockwise_timeouts_total";
/// Counter: acquire and release calls that failed. Labels `kind`, `op`, `error`.
pub const ERRORS_TOTAL: &str = "lockwise_errors_total";
/// Counter: holds released (explicitly or by a dropped guard). Label `kind`.
pub const RELEASES_TOTAL: &str = "lockwise_releases_total";
/// Gauge: holds currently held by guards of this process. Label `kind`.
pub const HOLDS: &str = "lockwise_holds";
/// Counter: locks renewed by the watchdog (one per lock and renewal).
pub const WATCHDOG_RENEWALS_TOTAL: &str = "lockwise_watchdog_renewals_total";
/// Counter: renew script calls of the watchdog (one per batch of up to 100 locks).
/// Label `result` (`ok` or `error`).
pub const WATCHDOG_RENEW_CALLS_TOTAL: &str = "lockwise_watchdog_renew_calls_total";
/// Counter: holds found lost (expired, deleted, no renewal confirmed in time). Label
/// `kind`.
pub const LOCKS_LOST_TOTAL: &str = "lockwise_locks_lost_total";
/// Counter: reconnections of the subscription connection after which the client
/// resubscribed its channels.
pub const SUBSCRIPTION_RECONNECTS_TOTAL: &str = "lockwise_subscription_reconnects_total";
/// Histogram: waiters left in a fair lock's queue when a waiter acquired it. Label `kind`.
pub const FAIR_QUEUE_LENGTH: &str = "lockwise_fair_queue_length";
/// Counter: batch script calls (lock and unlock calls that queued on a connection, sent
/// together). Label `result` (`ok` or `error`).
pub const BATCH_CALLS_TOTAL: &str = "lockwise_batch_calls_total";
/// Counter: lock and unlock calls sent in those batches (batched / batch calls is the
/// batching factor).
pub const BATCHED_TOTAL: &str = "lockwise_batched_total";

#![doc = include_str!("../README.md")]
#![forbid(unsafe_code)]
#![warn(missing_docs)]

// A map of the crate, for readers of the source (users start at the README above).
//
// Start at `raw/mod.rs`: its module doc is the "how it works" essay (the wait loop,
// cancellation, settling), and the engine under it is what every lock kind is built on.
// The engine imports no lock kind and not the `Client`.
//
//   admin/            Admin: list, inspect, leaks, force unlock (what the CLI shows)
//   contract.rs       Lock and LockGuard: what every lock kind offers; run / try_run
//   api.rs            the public methods every kind shares, as macros its file invokes
//   client/           Client (mod.rs) and ClientBuilder (builder.rs): what users build;
//                     the builder calls deploy/ to connect and assembles the parts
//   deploy/           standalone, Cluster and Sentinel: connect, probe, follow failovers;
//                     `CommandConn`, the one command connection type; protocol.rs: RESP3,
//                     or RESP2 for servers without HELLO
//   raw/              the engine
//     core.rs         per-client state: connection, listener, watchdog, settings
//     wait.rs         the wait loop: try, subscribe, re-check, sleep until woken or the TTL;
//                     owners (task, per hold, named)
//     claim.rs        the overtake limit: overdue waiters queue by age for a free lock
//     call.rs         acquire calls that never leak a hold; tickets; replica sync
//     kind.rs         what a lock kind gives the engine (client, name, release script)
//     deadline.rs     how long a key surely lives after a call (the loss deadline's margin)
//     registry/       local holds per (lock, owner), calls in flight, loss deadlines;
//                     the `HoldRegistry` handle that owns them (settling.rs, transfer.rs)
//     settle.rs       settlements: the server's hold count back to the live guards
//     hold.rs         one granted hold, as every guard wraps it
//     handle.rs       what hash kinds share: name and keys, the acquire prologue
//     close.rs        Client::shutdown: background clean-ups, permits to give back
//     watchdog.rs     the renewal task: timer wheel, batched renew calls
//     listener/       the one subscription connection; wakeups per channel (resp2.rs: the
//                     dedicated pub/sub connection of a RESP2 client)
//     inspect.rs      read-only queries
//   reentrant.rs      RLock                 fair.rs     FairLock (FIFO queue)
//   fenced.rs         FencedLock (tokens)   fenced_value.rs  FencedValue
//   multi/            MultiLock (all or nothing over several RLocks) and its guard
//   latch.rs          CountDownLatch
//   rwlock/           RwLock: read and write sides, each a kind on the engine
//   semaphore/        Semaphore (counted permits) and its permit guard
//   lease_semaphore/  LeaseSemaphore (permits with ids and leases), LeasedPermit(s)
//   redlock/          RedLock over independent masters: options, node, round, guard
//   keys.rs           every key and channel name (`Role`), argument checks
//   scripts.rs        every Lua script (lua/*.lua), the runner, the header test
//   error.rs          the one error enum
//
// Cargo features: `tls-rustls`, `tls-rustls-webpki-roots`, `tls-native-tls` only switch on
// redis-rs's TLS support (README, "TLS"); no lockwise code depends on them.

mod admin;
mod api;
mod client;
mod contract;
mod deploy;
mod error;
mod fair;
mod fenced;
mod fenced_value;
mod keys;
mod latch;
mod lease_semaphore;
mod multi;
mod raw;
mod redlock;
mod reentrant;
mod rwlock;
mod scripts;
mod semaphore;

pub use admin::{
    Admin, HoldMode, Holder, KeyInfo, Leak, LeakReason, LeakReport, Listing, LockInfo, LockKind,
    OwnerCheck, QueueEntry, DEFAULT_SCAN_LIMIT,
};
pub use client::{
    Client, ClientBuilder, Ownership, ShutdownReport, DEFAULT_CONNECT_TIMEOUT,
    DEFAULT_FAILOVER_RETRY, DEFAULT_NAMESPACE, DEFAULT_OVERTAKE_LIMIT, DEFAULT_RESPONSE_TIMEOUT,
    DEFAULT_SENTINEL_CHECK_INTERVAL, DEFAULT_WATCHDOG_TIMEOUT,
};
pub use contract::{Held, Lock, LockGuard};
pub use error::{Error, Result};
pub use fair::{FairLock, FairLockGuard};
pub use fenced::{FencedLock, FencedLockGuard};
pub use fenced_value::FencedValue;
pub use keys::MAX_NAME_LEN;
pub use latch::CountDownLatch;
pub use lease_semaphore::{LeaseSemaphore, LeasedPermit, LeasedPermits};
pub use multi::{MultiLock, MultiLockGuard};
#[cfg(feature = "metrics")]
pub use raw::observe::describe_metrics;
/// The names of the metrics lockwise records (with the `metrics` feature); see "Metrics and
/// tracing" in the crate docs.
pub use raw::observe::names as metric_names;
pub use redlock::{
    RedLock, RedLockGuard, RedLockOptions, RedLockSet, DEFAULT_NODE_TIMEOUT, DEFAULT_REDLOCK_TTL,
    DEFAULT_RETRY_DELAY,
};
pub use reentrant::{RLock, RLockGuard};
pub use rwlock::{ReadLock, ReadLockGuard, RwLock, WriteLock, WriteLockGuard};
pub use semaphore::{Semaphore, SemaphorePermits};

/// The redis-rs version lockwise is built on, so callers name the same types.
pub use redis;
/// The loss signal of every guard (`lost()`), from `tokio-util`.
pub use tokio_util::sync::CancellationToken;
/// A client's id ([`Client::id`]), from `uuid`.
pub use uuid::Uuid;

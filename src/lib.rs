#![doc = include_str!("../README.md")]
#![forbid(unsafe_code)]
// On docs.rs: a badge on every item that needs a feature.
#![cfg_attr(docsrs, feature(doc_cfg))]
#![warn(missing_docs)]

// A map of the crate, for readers of the source (users start at the README above and the guide). The
// folders are the layers, from the top down; a layer imports only those below it
// (tests/project/layout.rs checks it from the source):
//
//   redlock/          RedLock over independent masters (several Clients): RedLock and
//                     RedLockSet (mod.rs), options, node, round (the acquire), guard,
//                     inspect
//   client/           Client (mod.rs, handles.rs) and ClientBuilder (builder/): what users
//                     build; the builder calls deploy/ to connect and assembles the engine's parts
//   admin/            Admin: list, inspect, leaks, force unlock (what the CLI shows)
//   lock/             the lock kinds, a file or folder each, on the engine
//     contract/       Lock and LockGuard: what every lock kind offers; run / try_run
//     api.rs          the public methods every kind shares, as macros its file invokes
//     reentrant.rs    RLock                 fair/            FairLock (FIFO queue)
//     fenced.rs       FencedLock (tokens)   fenced_value.rs  FencedValue
//     multi/          MultiLock (all or nothing over several RLocks) and its guard
//     rwlock/         RwLock: read and write sides, each a kind on the engine
//     spin.rs         SpinLock: an RLock whose waiters poll with backoff, never subscribe
//   sync/             the synchronizers that are not locks
//     semaphore/      Semaphore (counted permits) and its permit guard
//     lease_semaphore/  LeaseSemaphore (permits with ids and leases), LeasedPermit(s)
//     latch.rs        CountDownLatch
//   engine/           the engine: start at its mod.rs, whose module doc is the "how it
//                     works" essay (the wait loop, cancellation, settling)
//     core.rs         per-client state: connection, listener, hold registry, settings
//     acquire.rs      an acquire as data: a kind describes its attempt, the engine runs it
//     handle.rs       what hash kinds share: name and keys, acquire_hold (the wait around
//                     an attempt)
//     wait.rs         the wait loop: try, subscribe, re-check, sleep until woken or the TTL
//     owner.rs        owners (task, per hold, named) and their owner fields
//     claim.rs        the overtake limit: overdue waiters queue by age for a free lock
//     call.rs         acquire calls that never leak a hold; tickets; replica sync
//     batch.rs        natural batching of the uncontended lock and unlock calls
//     lock_ref.rs     `LockRef`: one lock as the engine sees it: client, name, release
//     kinds.rs        `KindId`: every kind by one name, its metric label
//     hold.rs         one granted hold, as every guard wraps it
//     registry/       local holds per (lock, owner), calls in flight, loss deadlines:
//                     the `HoldRegistry` (settling.rs, transfer.rs)
//     settle.rs       settlements: the server's hold count back to the live guards
//     deadline.rs     how long a key surely lives after a call (the loss deadline's margin)
//     watchdog.rs     the renewal task: timer wheel, batched renew calls
//     listener/       the one subscription connection; wakeups per channel (resp2.rs: the
//                     dedicated pub/sub connection of a RESP2 client)
//     close.rs        Client::shutdown: what the client holds, released and reported
//     tracked.rs      what a close waits for: background clean-ups, live permits
//     presence.rs     the presence keys of a live client
//     observe/        metrics and tracing spans
//     inspect.rs      read-only queries
//   deploy/           standalone, Cluster and Sentinel: connect, probe, follow failovers;
//                     `CommandConn`, the one command connection type (mod.rs); connect.rs:
//                     `connect`, the steps every deployment shares; protocol.rs: RESP3,
//                     or RESP2 for servers without HELLO; cluster/ (send.rs: resending what
//                     the Cluster refused unrun); sentinel/ (the master, its follower)
//   layout/           every decision that depends on the key layout: names, the lock
//                     acquires, the release, force unlock and hold move, what a message
//                     asks, the synchronizers' scripts (mod.rs); answered per layout:
//                     lockwise.rs, redisson.rs (Redisson's names and payloads); spec.rs:
//                     `ReleaseSpec` (a release as data), `Call`, the synchronizers' tables
//   wire/             what lockwise writes to Redis
//     role.rs         `Role`: every role a key or channel plays
//     keys.rs         every key and channel name (lockwise's), argument checks
//     scripts.rs      every Lua script (lua/*.lua), the runner, the header test
//     slot.rs         the Cluster hash slot of a key
//   error/            the one error enum (tests.rs: its classification)
//   key_layout.rs     `KeyLayout`: lockwise's own key names, or Redisson's
//   backoff.rs        retry pauses with jitter, the library's one random source
//   guide.rs          the guide: docs/guide/*.md as documentation-only modules
//
// Cargo features: `tls-rustls`, `tls-rustls-webpki-roots`, `tls-native-tls` only switch on
// redis-rs's TLS support (guide, "Deployments": "TLS"); no lockwise code depends on them.

mod admin;
mod backoff;
mod client;
mod deploy;
mod engine;
mod error;
pub mod guide;
mod key_layout;
mod layout;
mod lock;
mod redlock;
mod sync;
mod wire;

pub use admin::{
    Admin, HoldMode, Holder, KeyInfo, Leak, LeakReason, LeakReport, Listing, LockInfo, LockKind,
    OwnerCheck, QueueEntry, DEFAULT_SCAN_LIMIT,
};
pub use client::{
    Client, ClientBuilder, Ownership, ShutdownReport, DEFAULT_CONNECT_TIMEOUT,
    DEFAULT_FAILOVER_RETRY, DEFAULT_NAMESPACE, DEFAULT_OVERTAKE_LIMIT, DEFAULT_RESPONSE_TIMEOUT,
    DEFAULT_SENTINEL_CHECK_INTERVAL, DEFAULT_WATCHDOG_TIMEOUT,
};
#[cfg(feature = "metrics")]
pub use engine::observe::describe_metrics;
/// The names of the metrics lockwise records (with the `metrics` feature); see "Metrics and
/// tracing" in the crate docs.
pub use engine::observe::names as metric_names;
pub use error::{Error, Result};
pub use key_layout::KeyLayout;
pub use lock::contract::{Held, Lock, LockGuard};
pub use lock::fair::{FairLock, FairLockGuard};
pub use lock::fenced::{FencedLock, FencedLockGuard};
pub use lock::fenced_value::FencedValue;
pub use lock::multi::{MultiLock, MultiLockGuard};
pub use lock::reentrant::{RLock, RLockGuard};
pub use lock::rwlock::{ReadLock, ReadLockGuard, RwLock, WriteLock, WriteLockGuard};
pub use lock::spin::{SpinLock, SpinLockGuard, DEFAULT_SPIN_INITIAL, DEFAULT_SPIN_MAX};
pub use redlock::{
    RedLock, RedLockGuard, RedLockOptions, RedLockSet, DEFAULT_NODE_TIMEOUT, DEFAULT_REDLOCK_TTL,
    DEFAULT_RETRY_DELAY,
};
pub use sync::latch::CountDownLatch;
pub use sync::lease_semaphore::{LeaseSemaphore, LeasedPermit, LeasedPermits};
pub use sync::semaphore::{Semaphore, SemaphorePermits};
pub use wire::keys::MAX_NAME_LEN;

/// The redis-rs version lockwise is built on, so callers name the same types.
pub use redis;
/// The loss signal of every guard (`lost()`), from `tokio-util`.
pub use tokio_util::sync::CancellationToken;
/// A client's id ([`Client::id`]), from `uuid`.
pub use uuid::Uuid;

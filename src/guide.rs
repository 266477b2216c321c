//! The guide: everything beyond the front page, one chapter per module. Each chapter is a
//! page of prose with examples (they compile as doctests); the API reference is the rest of
//! this documentation.
//!
//! | Chapter | What is in it |
//! |---|---|
//! | [`concepts`] | the API in short, one contract for every kind, ownership, shutdown |
//! | [`locks`] | the lock kinds beyond `RLock`: spin, fair, fenced, multi, Redlock |
//! | [`synchronizers`] | read-write lock, countdown latch, semaphores |
//! | [`guarantees`] | bad input, what holds and what does not, each fault |
//! | [`deployments`] | Sentinel, Cluster, failovers, configuration, RESP2, TLS, ACL |
//! | [`operations`] | the `lockwise` CLI and the `Admin` API, metrics and tracing |
//! | [`performance`] | measured figures and how to reproduce them |
//! | [`internals`] | keys, scripts, waiting and the watchdog |
//! | [`migration`] | from Redisson and from rslock |
//! | [`redisson`] | mixed fleets with Redisson: one lock, Java and Rust on each side |

#[doc = include_str!("../docs/guide/concepts.md")]
pub mod concepts {}
#[doc = include_str!("../docs/guide/locks.md")]
pub mod locks {}
#[doc = include_str!("../docs/guide/synchronizers.md")]
pub mod synchronizers {}
#[doc = include_str!("../docs/guide/guarantees.md")]
pub mod guarantees {}
#[doc = include_str!("../docs/guide/deployments.md")]
pub mod deployments {}
#[doc = include_str!("../docs/guide/operations.md")]
pub mod operations {}
#[doc = include_str!("../docs/guide/performance.md")]
pub mod performance {}
#[doc = include_str!("../docs/guide/internals.md")]
pub mod internals {}
#[doc = include_str!("../docs/guide/migration.md")]
pub mod migration {}
#[doc = include_str!("../docs/guide/redisson.md")]
pub mod redisson {}

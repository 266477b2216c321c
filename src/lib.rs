#![doc = include_str!("../README.md")]
#![forbid(unsafe_code)]
#![warn(missing_docs)]

mod client;
mod deploy;
mod error;
mod fair;
mod fenced;
mod fenced_value;
mod keys;
mod multi;
mod raw;
mod redlock;
mod reentrant;
mod scripts;

pub use client::{
    Client, ClientBuilder, DEFAULT_CONNECT_TIMEOUT, DEFAULT_NAMESPACE, DEFAULT_RESPONSE_TIMEOUT,
    DEFAULT_WATCHDOG_TIMEOUT,
};
pub use error::{Error, Result};
pub use fair::{FairLock, FairLockGuard};
pub use fenced::{FencedLock, FencedLockGuard};
pub use fenced_value::FencedValue;
pub use keys::MAX_NAME_LEN;
pub use multi::{MultiLock, MultiLockGuard};
pub use redlock::{
    RedLock, RedLockGuard, RedLockOptions, RedLockSet, DEFAULT_NODE_TIMEOUT, DEFAULT_REDLOCK_TTL,
    DEFAULT_RETRY_DELAY,
};
pub use reentrant::{RLock, RLockGuard};

/// The redis-rs version lockwise is built on, so callers name the same types.
pub use redis;

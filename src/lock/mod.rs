//! The lock kinds users hold: each a file (or a folder for the larger ones) over the engine
//! ([`crate::engine`]), with the contract they all offer ([`contract`]) and the public
//! methods they share, written once as macros ([`api`]).
//!
//! A kind describes its keys, scripts and replies; waiting, renewal, release and settlement
//! are the engine's. `RedLock` is not here: it runs over several clients, so it stands above
//! [`Client`](crate::Client) in `src/redlock/`.

pub(crate) mod api;
pub(crate) mod contract;
pub(crate) mod fair;
pub(crate) mod fenced;
pub(crate) mod fenced_value;
pub(crate) mod multi;
pub(crate) mod reentrant;
pub(crate) mod rwlock;
pub(crate) mod spin;

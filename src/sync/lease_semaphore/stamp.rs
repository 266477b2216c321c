//! What [`LeaseSemaphore`]'s scripts take besides counts, in the client's key layout
//! ([`LeaseSemaphoreLayout`]): the stamp argument and the permit ids.

use redis::{RedisWrite, ToRedisArgs};

use super::LeaseSemaphore;
use crate::engine::client_clock_ms;
use crate::layout::LeaseSemaphoreLayout;

/// The argument lockwise's scripts take as their wakeup payload (the client's id, which its
/// own listener skips), and Redisson's as the client's clock in ms.
pub(super) enum Stamp<'a> {
    Payload(&'a str),
    Now(u64),
}

impl ToRedisArgs for Stamp<'_> {
    fn write_redis_args<W: ?Sized + RedisWrite>(&self, out: &mut W) {
        match self {
            Stamp::Payload(id) => id.write_redis_args(out),
            Stamp::Now(ms) => ms.write_redis_args(out),
        }
    }
}

impl LeaseSemaphore {
    /// How the client's key layout keeps a permit-expirable semaphore: its scripts, ids and
    /// waiting rule.
    pub(super) fn layout(&self) -> &'static LeaseSemaphoreLayout {
        crate::layout::lease_semaphore(self.inner.core.layout)
    }

    /// The scripts' stamp argument: the wakeup payload, or the client's clock.
    pub(super) fn stamp(&self) -> Stamp<'_> {
        match self.layout().clock {
            true => Stamp::Now(client_clock_ms()),
            false => Stamp::Payload(&self.inner.core.id_str),
        }
    }

    /// A new permit id as the public API shows it.
    pub(super) fn new_id(&self) -> String {
        (self.layout().new_id)()
    }

    /// The permit `id` as the scripts take it (`None` for a string that names no permit in
    /// the client's layout).
    pub(super) fn wire_id(&self, id: &str) -> Option<Vec<u8>> {
        (self.layout().wire_id)(id)
    }
}

//! [`LeaseSemaphore`] in Redisson's key layout ([`KeyLayout::Redisson`]): Redisson's
//! `RPermitExpirableSemaphore`, byte for byte (`lua/redisson_lease_sem_*.lua`, after
//! `lua/redisson_lease_sem_prelude.lua`).
//!
//! # Data
//!
//! - the name itself: a string, the available permits as a decimal;
//! - `{name}:timeout` (Redisson's `suffixName`): a sorted set whose members are the permit
//!   ids as **16 raw bytes** and whose scores are their expiry in ms on the **clients'**
//!   clocks ([`client_clock_ms`]), or 922337203685477 for a permit without lease (Java's;
//!   lockwise's permits always have one, capped at that value);
//! - `redisson_sc:{name}`: the channel, shared with `RSemaphore`; releases and reclaims publish
//!   the new available count as a decimal integer, which wakes up to that many waiters of
//!   each client, Java's and lockwise's alike.
//!
//! The scripts take the client's clock (`now`) where lockwise's take the wakeup payload, and
//! answer in the shapes of lockwise's own, so the Rust side only switches script and
//! arguments ([`LeaseSemaphore::script`], [`LeaseSemaphore::stamp`]). Every script reclaims
//! expired permits first (the acquire up to the `k` it wants, as Redisson's does; the others
//! all of them, as Redisson's `availablePermits` does).
//!
//! # Ids
//!
//! A permit id is 16 random bytes on the wire. The public API shows it as its 32 lower-case
//! hex digits, the form Redisson's Java API hands out, so an id acquired on either side can
//! be released on the other. [`LeaseSemaphore::release`] and
//! [`LeaseSemaphore::update_lease`] answer `false` for a string that is not 32 hex digits.
//!
//! # TTLs
//!
//! Redisson writes both keys without a TTL. lockwise keeps its idle-TTL rule on what it
//! writes: every write raises (never lowers) both keys' TTL to at least the handle's idle TTL
//! and the latest lease expiry (a permit without lease aside). Java ignores the TTLs; its
//! `trySetPermits` / `addPermits` may clear the name's until lockwise's next write, and its
//! acquire copies the name's PTTL onto the set.
//!
//! # Waiting
//!
//! As in lockwise's layout ([`waiters`](super::waiters)), plus: a waiter that finds some
//! permits free but too few for it looks again within [`REDISSON_RECHECK`] (Redisson's
//! messages carry a count, not who sent them, and Java's waiters take what they are woken
//! for without passing anything on), and one that finds none free sleeps until a message or
//! the earliest lease expiry (Java's permits expire without a message), at most the watchdog
//! timeout.

use std::time::Duration;

use redis::{RedisWrite, ToRedisArgs};
use uuid::Uuid;

use super::LeaseSemaphore;
use crate::engine::client_clock_ms;
use crate::wire::scripts::Script;
use crate::KeyLayout;

/// In Redisson's key layout, the longest sleep of a waiter that found some permits free but
/// too few for it (as the `Semaphore`'s).
pub(super) const REDISSON_RECHECK: Duration = Duration::from_millis(500);

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
    /// Whether the client uses Redisson's key layout.
    pub(super) fn redisson(&self) -> bool {
        self.inner.core.layout == KeyLayout::Redisson
    }

    /// The script of the client's key layout: lockwise's own or Redisson's.
    pub(super) fn script(
        &self,
        own: &'static Script,
        redisson: &'static Script,
    ) -> &'static Script {
        match self.redisson() {
            true => redisson,
            false => own,
        }
    }

    /// The scripts' fifth-or-so argument: the wakeup payload, or in Redisson's layout the
    /// client's clock.
    pub(super) fn stamp(&self) -> Stamp<'_> {
        match self.redisson() {
            true => Stamp::Now(client_clock_ms()),
            false => Stamp::Payload(&self.inner.core.id_str),
        }
    }

    /// A new permit id as the public API shows it: a UUID v4 as text, or in Redisson's layout
    /// 16 random bytes as 32 lower-case hex digits.
    pub(super) fn new_id(&self) -> String {
        match self.redisson() {
            true => Uuid::from_bytes(random_bytes()).simple().to_string(),
            false => Uuid::new_v4().to_string(),
        }
    }

    /// The permit `id` as the scripts take it: its text, or in Redisson's layout the 16 bytes
    /// its 32 hex digits spell (`None` for any other string: no permit has that id).
    pub(super) fn wire_id(&self, id: &str) -> Option<Vec<u8>> {
        match self.redisson() {
            true => hex_id(id).map(|bytes| bytes.to_vec()),
            false => Some(id.as_bytes().to_vec()),
        }
    }
}

/// 16 random bytes: a UUID v4's 122 random bits, with its 6 fixed bits replaced by those of
/// a second one.
fn random_bytes() -> [u8; 16] {
    let mut bytes = Uuid::new_v4().into_bytes();
    let more = Uuid::new_v4().into_bytes();
    bytes[6] ^= more[0] & 0xf0; // the version nibble
    bytes[8] ^= more[1] & 0xc0; // the variant bits
    bytes
}

/// The 16 bytes of a 32-hex-digit id (either case), as Java's `decodeHexDump` reads them.
fn hex_id(id: &str) -> Option<[u8; 16]> {
    if id.len() != 32 || !id.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    Uuid::try_parse(id).ok().map(Uuid::into_bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_32_hex_digits_of_16_bytes() {
        let bytes = random_bytes();
        let text = Uuid::from_bytes(bytes).simple().to_string();
        assert_eq!(text.len(), 32);
        assert!(text.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')));
        assert_eq!(hex_id(&text), Some(bytes));
        assert_eq!(hex_id(&text.to_uppercase()), Some(bytes));
        let hyphenated = Uuid::from_bytes(bytes).hyphenated().to_string();
        for bad in ["", "xyz", &hyphenated, &text[..31], &format!("{text}0")] {
            assert_eq!(hex_id(bad), None, "{bad}");
        }
        // The fixed bits of a UUID v4 vary: all 128 bits are random.
        let versions: std::collections::HashSet<u8> =
            (0..64).map(|_| random_bytes()[6] >> 4).collect();
        assert!(versions.len() > 1);
    }
}

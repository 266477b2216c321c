//! A mixed fleet: lockwise in Redisson's key layout ([`lockwise::KeyLayout::Redisson`]) against real servers,
//! and against `support::redisson`: a client written from Redisson's wire contract that plays
//! the Java service (Redisson 3.45 – 4.7) without a JVM.
//!
//! | module | what |
//! |---|---|
//! | [`admin`] | the `Admin` API and the CLI (`--layout redisson`) read and force-unlock a mixed fleet's locks |
//! | [`layout`] | keys, fields, TTLs, channels and payloads, byte for byte against the contract |
//! | [`fair`] | `FairLock` and RFairLock: one queue, order, wakeups on the head's own channel, leaving |
//! | [`interop`] | both directions on one server: exclusion, wakeups, tokens, contention, faults |
//! | [`lease_semaphore`] | `LeaseSemaphore` as `RPermitExpirableSemaphore`: 16-byte ids, client-clock expiries, reclaims, wakeups both ways |
//! | [`redlock`] | `RedLockSet` over Redisson-layout clients: Redisson's RLock on each master |
//! | [`refused`] | kinds and options without a Redisson counterpart are refused, nothing written |
//! | [`rwlock`] | `RwLock` as `RReadWriteLock`: layout, shared reads, wakeups, Java unlocks beside lockwise readers, downgrade, renewal, contention |
//! | [`synchronizers`] | `Semaphore` and `CountDownLatch` as `RSemaphore` / `RCountDownLatch` |
//! | [`cluster`] | both directions on a real Cluster over sharded pub/sub |

mod admin;
mod cluster;
mod fair;
mod interop;
mod layout;
mod lease_semaphore;
mod redlock;
mod refused;
mod rwlock;
mod synchronizers;

use std::time::Duration;

use lockwise::{Client, KeyLayout};
use support::{Conn, RedisServer};

/// A client in Redisson's layout with the given watchdog timeout.
async fn client(server: &RedisServer, watchdog: Duration) -> Client {
    Client::builder(server.url())
        .namespace(support::unique_ns("redisson"))
        .key_layout(KeyLayout::Redisson)
        .watchdog_timeout(watchdog)
        .build()
        .await
        .expect("build a Redisson-layout client")
}

/// Keys that Redisson's format writes without a TTL on purpose: RFencedLock's token counter.
fn ttl_exempt(key: &str) -> bool {
    key.starts_with("redisson_lock_token:")
}

/// Every key Redis holds that has no TTL and should have one (lockwise's presence keys and
/// the token counters aside).
async fn keys_without_ttl(conn: &mut Conn) -> Vec<String> {
    support::keys_with_pttl(conn)
        .await
        .into_iter()
        .filter(|(k, pttl)| *pttl < 0 && !ttl_exempt(k))
        .map(|(k, _)| k)
        .collect()
}

/// The fields of the hash `key`, sorted.
async fn fields(conn: &mut Conn, key: &str) -> Vec<(String, String)> {
    let mut all: Vec<(String, String)> = redis::cmd("HGETALL")
        .arg(key)
        .query_async(conn)
        .await
        .unwrap();
    all.sort();
    all
}

/// `<uuid>:<decimal>`: an owner field as Redisson writes them (36-char lower-case UUID).
fn is_owner_field(field: &str, client_id: &str) -> bool {
    match field.split_once(':') {
        Some((id, thread)) => {
            id == client_id
                && id.len() == 36
                && !thread.is_empty()
                && thread.bytes().all(|b| b.is_ascii_digit())
        }
        None => false,
    }
}

//! A mixed fleet: lockwise in Redisson's key layout ([`lockwise::KeyLayout::Redisson`]) against real servers,
//! and against `suite::redisson`: a client written from Redisson's wire contract that plays
//! the Java service (Redisson 3.45 – 4.7) without a JVM.
//!
//! | module | what |
//! |---|---|
//! | [`admin`] | the `Admin` API and the CLI (`--layout redisson`) read and force-unlock a mixed fleet's locks |
//! | [`layout`] | keys, fields, TTLs, channels and payloads, byte for byte against the contract |
//! | [`fair`] | `FairLock` and RFairLock: one queue, order, wakeups on the head's own channel, leaving |
//! | [`interop`] | both directions on one server: exclusion, wakeups, tokens, contention, faults |
//! | [`mixed_fairness`] | no side gets a head start by being local: waits of both sides, same-client handovers |
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
mod mixed_fairness;
mod redlock;
mod refused;
mod rwlock;
mod synchronizers;

use std::future::Future;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::StreamExt;

use lockwise::{Client, KeyLayout};
use suite::{Conn, RedisServer};

/// A client in Redisson's layout with the given watchdog timeout.
async fn client(server: &RedisServer, watchdog: Duration) -> Client {
    Client::builder(server.url())
        .namespace(suite::unique_ns("redisson"))
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
    suite::keys_with_pttl(conn)
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

/// A holder's TTL in these tests: a waiter woken only by the TTL would wait about this long.
const TTL: Duration = Duration::from_secs(30);
const TTL_MS: u64 = 30_000;
/// A wakeup faster than this came by pub/sub.
const WOKEN: Duration = Duration::from_secs(3);

/// Every payload published on `channel` from now on, seen by a raw SUBSCRIBE, as text.
async fn record(server: &RedisServer, channel: &str) -> Arc<Mutex<Vec<String>>> {
    let mut pubsub = redis::Client::open(server.url())
        .unwrap()
        .get_async_pubsub()
        .await
        .unwrap();
    pubsub.subscribe(channel).await.unwrap();
    let seen = Arc::new(Mutex::new(Vec::new()));
    let out = seen.clone();
    tokio::spawn(async move {
        let mut stream = pubsub.on_message();
        while let Some(msg) = stream.next().await {
            let payload = String::from_utf8_lossy(msg.get_payload_bytes()).into_owned();
            out.lock().unwrap().push(payload);
        }
    });
    seen
}

/// The payloads `seen` holds once it holds `n` of them (or after 5 s), a little later so
/// that one that should not be there would have arrived too.
async fn payloads(seen: &Mutex<Vec<String>>, n: usize) -> Vec<String> {
    suite::eventually(Duration::from_secs(5), || async {
        seen.lock().unwrap().len() >= n
    })
    .await;
    tokio::time::sleep(Duration::from_millis(100)).await;
    seen.lock().unwrap().clone()
}

async fn get(conn: &mut Conn, key: &str) -> Option<String> {
    redis::cmd("GET").arg(key).query_async(conn).await.unwrap()
}

async fn type_of(conn: &mut Conn, key: &str) -> String {
    redis::cmd("TYPE").arg(key).query_async(conn).await.unwrap()
}

async fn pttl(conn: &mut Conn, key: &str) -> i64 {
    redis::cmd("PTTL").arg(key).query_async(conn).await.unwrap()
}

/// The permits held at once, and the most ever held at once.
#[derive(Default)]
struct Holders {
    now: AtomicI64,
    most: AtomicI64,
}

impl Holders {
    fn take(&self, k: i64) {
        let now = self.now.fetch_add(k, Ordering::SeqCst) + k;
        self.most.fetch_max(now, Ordering::SeqCst);
    }

    fn give(&self, k: i64) {
        self.now.fetch_sub(k, Ordering::SeqCst);
    }
}

/// Starts `waiter`, runs `release` once it waits, and returns the waiter's output, asserting
/// that it returned within [`WOKEN`] of the release (so by pub/sub, not at the TTL).
async fn wakes<T: Send + 'static>(
    what: &str,
    waiter: impl Future<Output = T> + Send + 'static,
    release: impl Future<Output = ()>,
) -> T {
    let waiter = tokio::spawn(async move {
        let out = waiter.await;
        (out, Instant::now())
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    let released = Instant::now();
    release.await;
    let (out, at) = suite::kit::within(25, waiter).await.unwrap();
    assert!(
        at - released < WOKEN,
        "{what}: woken {:?} after the release",
        at - released
    );
    out
}

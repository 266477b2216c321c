//! No side of a mixed fleet gets a head start by being local: lockwise clients in Redisson's
//! layout and Redisson-protocol peers contend on one plain lock, and the waits of each side,
//! and how often a release is followed by a hold of the releasing client itself, are
//! measured and bounded.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use suite::kit::within;
use suite::redisson::RedissonPeer;
use suite::RedisServer;

use super::{client, TTL, TTL_MS};

/// One hold: which client (0, 1 lockwise; 2, 3 the peers), when it was taken, how long its
/// taker waited.
type Hold = (usize, Instant, Duration);

const RUN: Duration = Duration::from_secs(6);
/// Tasks per lockwise client and threads per peer: the lockwise side outnumbers the Java one,
/// as in a fleet where a Rust service joins Java ones, so a local head start would show.
const TASKS: u64 = 8;
const THREADS: u64 = 2;
/// What a worker does between a release and its next request: a service that re-locks in a
/// tight loop takes the lock back before any woken waiter can (barging, on either side, in
/// Redisson's format as in Java), which says nothing about wakeups.
const THINK: Duration = Duration::from_millis(5);
/// A peer's `tryLock` wait: a waiter that waits this long counts as starved.
const PEER_WAIT: Duration = Duration::from_secs(10);

fn quantile(waits: &mut [Duration], q: f64) -> Duration {
    if waits.is_empty() {
        return Duration::ZERO;
    }
    waits.sort();
    waits[((waits.len() - 1) as f64 * q).round() as usize]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redisson_waiters_are_not_starved_by_local_lockwise_wakeups() {
    let server = RedisServer::start();
    // Redisson's layout puts no namespace in the key: both clients name one lock.
    let lockwise = [client(&server, TTL).await, client(&server, TTL).await];
    let peers = [
        Arc::new(RedissonPeer::connect(server.url()).await),
        Arc::new(RedissonPeer::connect(server.url()).await),
    ];
    let holds: Arc<Mutex<Vec<Hold>>> = Arc::default();
    let timeouts = Arc::new(Mutex::new(0u32));
    let end = Instant::now() + RUN;
    let mut tasks = Vec::new();
    for (i, c) in lockwise.iter().enumerate() {
        for _ in 0..TASKS {
            let (lock, holds) = (c.lock("mixed"), holds.clone());
            tasks.push(tokio::spawn(async move {
                while Instant::now() < end {
                    let asked = Instant::now();
                    let g = lock.lock().await.unwrap();
                    holds
                        .lock()
                        .unwrap()
                        .push((i, Instant::now(), asked.elapsed()));
                    tokio::time::sleep(Duration::from_millis(2)).await;
                    g.unlock().await.unwrap();
                    tokio::time::sleep(THINK).await;
                }
            }));
        }
    }
    for (p, peer) in peers.iter().enumerate() {
        for thread in 1..=THREADS {
            let (peer, holds, timeouts) = (peer.clone(), holds.clone(), timeouts.clone());
            tasks.push(tokio::spawn(async move {
                while Instant::now() < end {
                    let asked = Instant::now();
                    if !peer.lock("mixed", thread, TTL_MS, PEER_WAIT).await {
                        *timeouts.lock().unwrap() += 1;
                        continue;
                    }
                    holds
                        .lock()
                        .unwrap()
                        .push((2 + p, Instant::now(), asked.elapsed()));
                    tokio::time::sleep(Duration::from_millis(2)).await;
                    assert_eq!(peer.unlock("mixed", thread, TTL_MS).await, Some(1));
                    tokio::time::sleep(THINK).await;
                }
            }));
        }
    }
    for t in tasks {
        within(60, t).await.unwrap();
    }
    let mut holds = Arc::try_unwrap(holds).unwrap().into_inner().unwrap();
    holds.sort_by_key(|h| h.1);
    let timeouts = *timeouts.lock().unwrap();
    let side = |peer: bool| -> Vec<Duration> {
        holds
            .iter()
            .filter(|h| (h.0 >= 2) == peer)
            .map(|h| h.2)
            .collect()
    };
    let (mut ours, mut theirs) = (side(false), side(true));
    let per_client: Vec<usize> = (0..4)
        .map(|c| holds.iter().filter(|h| h.0 == c).count())
        .collect();
    // A hold followed by one of the same client: with four clients all waiting, about a
    // quarter of the handovers if being local gives no head start.
    let same = holds.windows(2).filter(|w| w[0].0 == w[1].0).count();
    let same_rate = same as f64 / (holds.len().max(2) - 1) as f64;
    let (l50, l95, lmax) = (
        quantile(&mut ours, 0.5),
        quantile(&mut ours, 0.95),
        quantile(&mut ours, 1.0),
    );
    let (r50, r95, rmax) = (
        quantile(&mut theirs, 0.5),
        quantile(&mut theirs, 0.95),
        quantile(&mut theirs, 1.0),
    );
    // Holds per Redisson client over holds per lockwise client (two of each). Each client
    // wakes one waiter per release, however many it has, so the clients, not the workers,
    // are the parties: a client with more waiting tasks gets no more turns.
    let per_client_ratio = theirs.len() as f64 / ours.len().max(1) as f64;
    eprintln!(
        "mixed fleet, {RUN:?}: holds per client {per_client:?} (per client, Redisson / \
         lockwise: {per_client_ratio:.2}); \
         same client next {:.0} %; \
         lockwise waits p50 {l50:?} p95 {l95:?} max {lmax:?}; Redisson waits p50 {r50:?} \
         p95 {r95:?} max {rmax:?}; {timeouts} Redisson tryLock({PEER_WAIT:?}) timeouts",
        same_rate * 100.0
    );
    assert_eq!(timeouts, 0, "Redisson waiters starved");
    // The Java side is not starved: per client it takes the lock at least half as often as
    // the lockwise side, and its waiters wait no much longer. (The other way round depends
    // on how fast each client turns a wakeup into an attempt, not on being local: on a
    // loaded machine this in-process peer, with fewer hops than a lockwise waiter, wins
    // more.) Between clients of one side the shares differ more: Redis delivers a message
    // to a channel's subscribers in the order they subscribed, so the client that never
    // unsubscribes (it always has a waiter) hears every release first, on either side.
    assert!(
        per_client_ratio >= 0.5,
        "a Redisson client took the lock {per_client_ratio:.2}x as often as a lockwise one: \
         {per_client:?}"
    );
    let slack = Duration::from_millis(200);
    assert!(
        r95 <= l95 * 3 + slack,
        "Redisson waiters wait longer: lockwise p95 {l95:?}, Redisson p95 {r95:?}"
    );
    assert!(
        same_rate <= 0.5,
        "a release went to its own client {:.0} % of the time",
        same_rate * 100.0
    );
}

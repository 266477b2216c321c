//! The overtake limit on a real 3-master Redis Cluster: the claim key shares its lock's slot
//! (no CROSSSLOT), a remote waiter is not overtaken for long by a busy `Client`, and a
//! claimant that leaves a free lock announces it on the lock's sharded channel. Afterwards
//! every key left has a TTL and no channel is subscribed.

use std::time::{Duration, Instant};

use lockwise::Client;

use crate::{channels_on, keys_on, topology::RedisCluster};
use suite::scenarios::{taken_after_claimant_leaves, waits_against_busy};

async fn client(cluster: &RedisCluster, ns: &str, limit: Option<Duration>) -> Client {
    Client::cluster_builder(cluster.seed_urls())
        .namespace(ns)
        .watchdog_timeout(Duration::from_secs(3))
        .overtake_limit(limit)
        .build()
        .await
        .expect("cluster client")
}

/// One cluster, two scenarios:
/// - 8 tasks of a busy `Client` lock, hold 2 ms, unlock and lock again at once; another
///   `Client`'s task takes the same lock 8 times, each wait ending soon after the default
///   limit (asserted: limit + the claim's TTL + 2 s of slack for a loaded machine);
/// - a claimant leaves while the lock is free (the holder's key deleted, as an expiry would:
///   no unlock, no message): the other `Client`'s waiter takes it within the claim's TTL,
///   long before the old holder's 20 s lease would have let it look again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_overtake_claims_in_the_locks_slot() {
    suite::init_tracing();
    let cluster = tokio::task::block_in_place(|| RedisCluster::start(3, 0));
    let ns = suite::unique_ns("clovertake");
    let busy = client(&cluster, &ns, Some(lockwise::DEFAULT_OVERTAKE_LIMIT)).await;
    let remote = client(&cluster, &ns, Some(lockwise::DEFAULT_OVERTAKE_LIMIT)).await;

    // 1. Not overtaken for long.
    let (waits, _) = waits_against_busy(&busy, &remote, "hot", 8).await;
    eprintln!("remote waits {waits:?}");
    let bound = lockwise::DEFAULT_OVERTAKE_LIMIT + Duration::from_secs(3);
    assert!(waits.iter().all(|w| *w < bound), "waits {waits:?}");

    // 2. A claim withdrawn from a free lock is announced.
    let eager = client(&cluster, &ns, Some(Duration::ZERO)).await;
    let patient = client(&cluster, &ns, None).await;
    let held = busy
        .lock("a")
        .lock_with_lease(Duration::from_secs(20))
        .await
        .expect("holder");
    let claim = format!("{ns}:claim:{{a}}");
    let mut conn = cluster
        .client()
        .get_connection()
        .expect("cluster connection");
    let waited = taken_after_claimant_leaves(
        &eager,
        &patient,
        "a",
        async {
            let deadline = Instant::now() + Duration::from_secs(5);
            while !redis::cmd("EXISTS")
                .arg(&claim)
                .query::<bool>(&mut conn)
                .unwrap()
            {
                assert!(
                    Instant::now() < deadline,
                    "the waiter never claimed the lock"
                );
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        },
        async {
            let mut conn = cluster
                .client()
                .get_connection()
                .expect("cluster connection");
            let _: () = redis::cmd("DEL")
                .arg(busy.lock("a").key())
                .query(&mut conn)
                .unwrap();
        },
    )
    .await;
    eprintln!("taken {waited:?} after the claimant left");
    assert!(waited < Duration::from_secs(1), "{waited:?}");
    drop(held);

    // Nothing left: no key without a TTL, no channel subscribed.
    let ports = cluster.master_ports();
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let keys = keys_on(&ports, &ns);
        let channels = channels_on(&ports, &ns);
        let no_ttl: Vec<_> = keys.iter().filter(|k| k.2 < 0).collect();
        if no_ttl.is_empty() && channels.is_empty() && keys.is_empty() {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "left behind: keys {keys:?}, channels {channels:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

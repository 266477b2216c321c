//! Batching on a Cluster: calls queue per hash slot, so a batch never crosses slots. Names that
//! share a `{tag}` share a slot and are batched together; names on other slots go out on
//! their own lanes. No two holds of a name overlap, and nothing is left.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use lockwise::Client;
use suite::Interval;

use super::topology::RedisCluster;

const TASKS: usize = 32;
const ROUNDS: usize = 20;

/// `TASKS` tasks, each taking and releasing the lock `name(task)` `ROUNDS` times.
async fn pairs(client: &Client, name: impl Fn(usize) -> String) {
    let tasks: Vec<_> = (0..TASKS)
        .map(|i| {
            let lock = client.lock(name(i));
            tokio::spawn(async move {
                for _ in 0..ROUNDS {
                    lock.lock().await.unwrap().unlock().await.unwrap();
                }
            })
        })
        .collect();
    for task in tasks {
        suite::kit::within(60, task).await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_batches_calls_of_one_slot_and_keeps_holds_apart() {
    let cluster = tokio::task::block_in_place(|| RedisCluster::start(3, 0));
    let masters = cluster.master_ports();
    let ns = suite::unique_ns("cl-batch");
    let client = super::cluster_client(&cluster, &ns, Duration::from_secs(30)).await;
    let slot = cluster.key_slot(client.lock("job:{grp}:0").key());
    assert_eq!(slot, cluster.key_slot(client.lock("job:{grp}:31").key()));

    // One slot: the calls queue on one lane and go out in batches.
    let before = tokio::task::block_in_place(|| super::script_calls(&masters));
    pairs(&client, |i| format!("job:{{grp}}:{i}")).await;
    let calls = tokio::task::block_in_place(|| super::script_calls(&masters)) - before;
    let total = (TASKS * ROUNDS) as u64;
    assert!(
        calls < total,
        "{calls} script calls for {total} pairs in one slot"
    );

    // The same slot under contention: no two holds of a name overlap.
    let intervals = Arc::new(Mutex::new(Vec::new()));
    let tasks: Vec<_> = (0..TASKS)
        .map(|who| {
            let own = client.lock(format!("job:{{grp}}:{who}"));
            let shared = client.lock("shared:{grp}");
            let intervals = intervals.clone();
            tokio::spawn(async move {
                for round in 0..ROUNDS {
                    let lock = if round % 4 == 0 { &shared } else { &own };
                    let g = lock.lock().await.unwrap();
                    let start = Instant::now();
                    tokio::task::yield_now().await;
                    let end = Instant::now();
                    if round % 4 == 0 {
                        intervals.lock().unwrap().push(Interval { start, end, who });
                    }
                    g.unlock().await.unwrap();
                }
            })
        })
        .collect();
    for task in tasks {
        suite::kit::within(60, task).await.unwrap();
    }
    let mut shared = intervals.lock().unwrap().clone();
    assert_eq!(shared.len(), TASKS * ROUNDS / 4);
    suite::assert_no_overlap(&mut shared);

    // Names on many slots: each lane batches only its own; every call succeeds.
    pairs(&client, |i| format!("solo:{i}")).await;
    let keys = tokio::task::block_in_place(|| super::keys_on(&masters, &ns));
    assert!(keys.is_empty(), "left behind: {keys:?}");
}

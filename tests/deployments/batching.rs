//! Batching on a Cluster: calls queue per hash slot, so a batch never crosses slots. Names that
//! share a `{tag}` share a slot and are batched together; names on other slots go out on
//! their own lanes. No two holds of a name overlap, and nothing is left.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::topology::{connect, RedisCluster};
use support::Interval;

/// Script calls so far, summed over the cluster's masters.
fn script_calls(cluster: &RedisCluster) -> u64 {
    cluster
        .master_ports()
        .into_iter()
        .map(|port| {
            let info: String = redis::cmd("INFO")
                .arg("commandstats")
                .query(&mut connect(port))
                .unwrap();
            info.lines()
                .filter(|l| l.starts_with("cmdstat_evalsha:") || l.starts_with("cmdstat_eval:"))
                .map(|l| {
                    let calls = l.split("calls=").nth(1).unwrap();
                    calls.split(',').next().unwrap().parse::<u64>().unwrap()
                })
                .sum::<u64>()
        })
        .sum()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_batches_calls_of_one_slot_and_keeps_holds_apart() {
    let cluster = tokio::task::block_in_place(|| RedisCluster::start(3, 0));
    let ns = support::unique_ns("cl-batch");
    let client = super::cluster_client(&cluster, &ns, Duration::from_secs(30)).await;
    const TASKS: usize = 32;
    const ROUNDS: usize = 20;
    let slot = cluster.key_slot(client.lock("job:{grp}:0").key());
    assert_eq!(slot, cluster.key_slot(client.lock("job:{grp}:31").key()));

    // One slot: the calls queue on one lane and go out in batches.
    let before = tokio::task::block_in_place(|| script_calls(&cluster));
    let tasks: Vec<_> = (0..TASKS)
        .map(|who| {
            let own = client.lock(format!("job:{{grp}}:{who}"));
            tokio::spawn(async move {
                for _ in 0..ROUNDS {
                    own.lock().await.unwrap().unlock().await.unwrap();
                }
            })
        })
        .collect();
    for task in tasks {
        support::kit::within(60, task).await.unwrap();
    }
    let calls = tokio::task::block_in_place(|| script_calls(&cluster)) - before;
    let pairs = (TASKS * ROUNDS) as u64;
    assert!(
        calls < pairs,
        "{calls} script calls for {pairs} pairs in one slot"
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
        support::kit::within(60, task).await.unwrap();
    }
    let mut shared = intervals.lock().unwrap().clone();
    assert_eq!(shared.len(), TASKS * ROUNDS / 4);
    support::assert_no_overlap(&mut shared);

    // Names on many slots: each lane batches only its own; every call succeeds.
    let tasks: Vec<_> = (0..TASKS)
        .map(|i| {
            let lock = client.lock(format!("solo:{i}"));
            tokio::spawn(async move {
                for _ in 0..ROUNDS {
                    lock.lock().await.unwrap().unlock().await.unwrap();
                }
            })
        })
        .collect();
    for task in tasks {
        support::kit::within(60, task).await.unwrap();
    }
    let keys: Vec<String> = cluster
        .master_ports()
        .into_iter()
        .flat_map(|port| {
            let keys: Vec<String> = redis::cmd("KEYS")
                .arg(format!("{ns}*"))
                .query(&mut connect(port))
                .unwrap();
            keys
        })
        .filter(|k| !support::is_presence(k))
        .collect();
    assert!(keys.is_empty(), "left behind: {keys:?}");
}

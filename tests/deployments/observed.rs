//! Metrics on a real 3-master Cluster (with the `metrics` feature, as `scripts/test.sh` runs
//! it): acquires, timeouts and watchdog renewals of locks spread over every master are
//! recorded like on a single server. The recorder is global to this test binary and other
//! tests record too, so the assertions use the lock-name label (opted in, unique names) or
//! lower bounds.
#![cfg(feature = "metrics")]

use std::collections::HashSet;
use std::time::Duration;
use suite::OrNone;

use lockwise::metric_names::{ACQUIRE_WAIT_SECONDS, WATCHDOG_RENEWALS_TOTAL};
use lockwise::Client;
use metrics_util::debugging::DebuggingRecorder;

use crate::topology::RedisCluster;
use suite::seen::Seen;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_acquires_timeouts_and_renewals_are_recorded() {
    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    recorder
        .install()
        .expect("the only recorder of this binary");
    let cluster = tokio::task::block_in_place(|| RedisCluster::start(3, 0));
    let ns = suite::unique_ns("clmetrics");
    let build = |names: bool| {
        Client::cluster_builder(cluster.seed_urls())
            .namespace(ns.clone())
            .watchdog_timeout(Duration::from_secs(1))
            .metrics_lock_names(names)
            .build()
    };
    let (a, b) = (build(true).await.unwrap(), build(false).await.unwrap());
    let names: Vec<String> = (0..9).map(|i| format!("clm:{i}")).collect();
    let masters: HashSet<u16> = names
        .iter()
        .map(|n| cluster.master_for_slot(cluster.key_slot(a.lock(n).key())))
        .collect();
    assert_eq!(masters.len(), 3, "names on {masters:?}");

    let mut guards = Vec::new();
    for n in &names {
        guards.push(a.lock(n).lock().await.unwrap());
    }
    // Held past two renewal periods (a third of the 1 s timeout each).
    tokio::time::sleep(Duration::from_millis(1200)).await;
    let none = b
        .lock(&names[0])
        .try_lock(Duration::from_millis(100), None)
        .await
        .or_none()
        .unwrap();
    assert!(none.is_none());
    for g in guards {
        g.unlock().await.unwrap();
    }

    let seen = Seen::of(&snapshotter);
    for n in &names {
        let waits = seen.histogram(
            ACQUIRE_WAIT_SECONDS,
            &[("kind", "reentrant"), ("outcome", "acquired"), ("name", n)],
        );
        assert_eq!(waits.len(), 1, "{n}: one acquire recorded");
    }
    // `b` did not opt in to names: its timeout is recorded without one.
    let timeouts = seen
        .histogram(
            ACQUIRE_WAIT_SECONDS,
            &[("kind", "reentrant"), ("outcome", "timeout")],
        )
        .len();
    assert!(timeouts >= 1, "the try_lock timeout");
    let renewals = seen.counter(WATCHDOG_RENEWALS_TOTAL, &[]);
    assert!(
        renewals >= names.len() as u64,
        "each of the {} locks renewed at least once on its master: {renewals}",
        names.len()
    );
}

//! FairLock on a real 3-master Redis Cluster: a release hands the lock to the head of the
//! queue over the head's sharded channel (SPUBLISH in the lock's slot), in queue order, with
//! waiters in two `Client`s; and across a failover of the lock's master while waiters are
//! queued, the holds never overlap and every waiter gets the lock. Afterwards every key left
//! has a TTL and no channel is subscribed.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use suite::checker::History;

use crate::{assert_quiescent, cluster_client, topology::RedisCluster};

/// Queues `n` waiters of `lock` (alternating between the clients' handles) one after another,
/// each recording its hold in `hist` and its place in `order`; returns their tasks.
async fn queue_waiters(
    handles: [&lockwise::FairLock; 2],
    n: usize,
    hist: &Arc<History>,
    order: &Arc<Mutex<Vec<usize>>>,
) -> Vec<tokio::task::JoinHandle<()>> {
    let mut tasks = Vec::new();
    for i in 0..n {
        let lock = handles[i % 2].clone();
        let (hist, order) = (hist.clone(), order.clone());
        tasks.push(tokio::spawn(async move {
            let who = format!("w{i}");
            let id = hist.invoke(&who, "q");
            let g = lock
                .try_lock(Duration::from_secs(60), None)
                .await
                .expect("waiter acquires");
            hist.ok(&id, g.owner(), None, None);
            order.lock().unwrap().push(i);
            tokio::time::sleep(Duration::from_millis(5)).await;
            hist.release(&id);
            let _ = g.unlock().await;
        }));
        let queued = suite::eventually(Duration::from_secs(10), || async {
            handles[0].queue_len().await.unwrap_or(0) == i + 1
        })
        .await;
        assert!(queued, "waiter {i} never queued");
    }
    tasks
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_fair_lock_hands_over_in_order_by_sharded_pubsub() {
    suite::init_tracing();
    let cluster = tokio::task::block_in_place(|| RedisCluster::start(3, 0));
    let ns = suite::unique_ns("clfair");
    let a = cluster_client(&cluster, &ns, Duration::from_secs(30)).await;
    let b = cluster_client(&cluster, &ns, Duration::from_secs(30)).await;
    let (la, lb) = (a.fair_lock("q"), b.fair_lock("q"));
    let hist = Arc::new(History::new());
    let order = Arc::new(Mutex::new(Vec::new()));
    let holder_id = hist.invoke("holder", "q");
    let holder = la.lock().await.unwrap();
    hist.ok(&holder_id, holder.owner(), None, None);
    const N: usize = 8;
    let tasks = queue_waiters([&la, &lb], N, &hist, &order).await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    let released = Instant::now();
    hist.release(&holder_id);
    holder.unlock().await.unwrap();
    for t in tasks {
        tokio::time::timeout(Duration::from_secs(20), t)
            .await
            .expect("every waiter acquires")
            .unwrap();
    }
    println!("{N} fair handoffs on a cluster in {:?}", released.elapsed());
    // Far below the waiter lease (5 s): only the handoff messages can have served them.
    assert!(
        released.elapsed() < Duration::from_secs(4),
        "{:?}",
        released.elapsed()
    );
    assert_eq!(*order.lock().unwrap(), (0..N).collect::<Vec<_>>());
    suite::checker::assert_clean(&hist.check());
    assert_quiescent(&cluster.master_ports(), &ns, Duration::from_secs(10)).await;
}

/// CLUSTER FAILOVER of the lock's master while the lock is held and waiters are queued: the
/// queue and the handoffs carry over to the new master; no holds overlap; every waiter
/// acquires.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_fair_lock_failover_with_queued_waiters_checked() {
    suite::init_tracing();
    let cluster = Arc::new(tokio::task::block_in_place(|| RedisCluster::start(3, 1)));
    let ns = suite::unique_ns("clfairfo");
    let a = cluster_client(&cluster, &ns, Duration::from_secs(3)).await;
    let b = cluster_client(&cluster, &ns, Duration::from_secs(3)).await;
    let (la, lb) = (a.fair_lock("q"), b.fair_lock("q"));
    let slot = cluster.key_slot(la.key());
    let master = cluster.master_for_slot(slot);
    let replica = cluster.replicas_of(master)[0];
    let hist = Arc::new(History::new());
    let order = Arc::new(Mutex::new(Vec::new()));
    let holder_id = hist.invoke("holder", "q");
    let holder = la.lock().await.unwrap();
    hist.ok(&holder_id, holder.owner(), None, None);
    const N: usize = 6;
    let tasks = queue_waiters([&la, &lb], N, &hist, &order).await;
    // Let the replica catch up with the queue before it takes over.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let c = cluster.clone();
    let old = tokio::task::spawn_blocking(move || c.failover(replica))
        .await
        .unwrap();
    assert_eq!(old, master);
    tokio::time::sleep(Duration::from_millis(200)).await;
    hist.release(&holder_id);
    // The release may have to ride out the move; a lost hold expires with its TTL anyway.
    let _ = holder.unlock().await;
    for t in tasks {
        tokio::time::timeout(Duration::from_secs(40), t)
            .await
            .expect("every waiter acquires after the failover")
            .unwrap();
    }
    println!("fair order after a failover: {:?}", order.lock().unwrap());
    suite::checker::assert_clean(&hist.check());
    assert_quiescent(&cluster.master_ports(), &ns, Duration::from_secs(15)).await;
}

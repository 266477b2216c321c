//! The peer on a real Cluster: sharded pub/sub between peers, per-slot renewal batches.

use super::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_peers_wake_each_other_over_sharded_pubsub() {
    let cluster = tokio::task::block_in_place(|| RedisCluster::start(3, 0));
    let a = Arc::new(RedissonPeer::connect_cluster(&cluster));
    let b = Arc::new(RedissonPeer::connect_cluster(&cluster));
    assert_eq!(a.mode(), Mode::Sharded);
    let names: Vec<String> = (0..6).map(|i| format!("order:{i}")).collect();
    let masters: std::collections::BTreeSet<u16> = names
        .iter()
        .map(|n| {
            let slot = key_slot(n.as_bytes());
            assert_eq!(slot, cluster.key_slot(n));
            cluster.master_for_slot(slot)
        })
        .collect();
    assert!(masters.len() >= 2, "names spread over masters");
    for name in &names {
        assert_eq!(a.try_lock(name, 1, 30_000).await, None);
        let waiter = {
            let (b, name) = (b.clone(), name.clone());
            tokio::spawn(async move {
                let ok = b.lock(&name, 1, 30_000, Duration::from_secs(20)).await;
                (ok, Instant::now())
            })
        };
        let channel = lock_channel(name);
        let mut master = b.conn_for(&channel).await;
        assert!(
            eventually(LONG, || {
                let mut c = master.clone();
                let ch = channel.clone();
                async move {
                    let v: Vec<(String, u64)> = redis::cmd("PUBSUB")
                        .arg("SHARDNUMSUB")
                        .arg(&ch)
                        .query_async(&mut c)
                        .await
                        .unwrap();
                    v.first().is_some_and(|(_, n)| *n == 1)
                }
            })
            .await
        );
        let released = Instant::now();
        assert_eq!(a.unlock(name, 1, 30_000).await, Some(1));
        let (ok, at) = waiter.await.unwrap();
        assert!(ok && at - released < Duration::from_secs(3));
        assert_eq!(b.unlock(name, 1, 30_000).await, Some(1));
        let left: i64 = redis::cmd("DBSIZE").query_async(&mut master).await.unwrap();
        assert_eq!(left, 0);
    }
    // Renewal batches per slot across masters.
    for name in &names {
        a.try_lock(name, 1, 1_000).await;
    }
    let owner = a.owner(1);
    let pairs: Vec<(&str, &str)> = names.iter().map(|n| (n.as_str(), owner.as_str())).collect();
    assert_eq!(a.renew(&pairs, 30_000).await, vec![1; names.len()]);
    // Latch and semaphore channels live in their object's slot.
    assert!(a.latch_try_set_count("gate", 1).await);
    let awaiting = {
        let b = b.clone();
        tokio::spawn(async move { b.latch_await("gate", Duration::from_secs(20)).await })
    };
    assert!(a.sem_try_set_permits("pool", 0).await);
    let acquiring = {
        let b = b.clone();
        tokio::spawn(async move { b.sem_acquire("pool", 1, Duration::from_secs(20)).await })
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(a.latch_count_down("gate").await, 0);
    assert_eq!(a.sem_release("pool", 1).await, 1);
    assert!(awaiting.await.unwrap());
    assert!(acquiring.await.unwrap());
    assert_clean(&[&a, &b]);
}

//! Both directions on a real Cluster (3 masters): the lockwise client publishes with
//! `SPUBLISH` and subscribes with `SSUBSCRIBE`, as a Redisson fleet in its default
//! `shardedSubscriptionMode = AUTO` does, so each side wakes the other on names spread over
//! every master.

use std::sync::Arc;
use std::time::{Duration, Instant};

use lockwise::{Client, KeyLayout};
use suite::checker::{assert_clean, History};
use suite::kit::within;
use suite::redisson::{Mode, RedissonPeer};
use suite::topology::RedisCluster;

use super::{wakes, TTL_MS, WOKEN};

async fn cluster_client(cluster: &RedisCluster) -> Client {
    Client::cluster_builder(cluster.seed_urls())
        .namespace(suite::unique_ns("rcl"))
        .key_layout(KeyLayout::Redisson)
        .watchdog_timeout(Duration::from_secs(30))
        .build()
        .await
        .expect("cluster client")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn both_sides_wake_each_other_over_sharded_pubsub() {
    let cluster = tokio::task::block_in_place(|| RedisCluster::start(3, 0));
    let c = cluster_client(&cluster).await;
    let peer = Arc::new(RedissonPeer::connect_cluster(&cluster));
    assert_eq!(peer.mode(), Mode::Sharded);
    // Names on every master.
    let names: Vec<String> = (0..6).map(|i| format!("order:{i}")).collect();
    let masters: std::collections::BTreeSet<u16> = names
        .iter()
        .map(|n| cluster.master_for_slot(cluster.key_slot(n)))
        .collect();
    assert!(masters.len() >= 2, "names spread over masters");
    for name in &names {
        // Redisson → lockwise.
        assert_eq!(peer.try_lock(name, 1, TTL_MS).await, None);
        let lock = c.lock(name);
        let guard = wakes(name, async move { lock.lock().await }, async {
            assert_eq!(peer.unlock(name, 1, TTL_MS).await, Some(1));
        })
        .await
        .unwrap();
        // lockwise → Redisson.
        let (p, n) = (peer.clone(), name.clone());
        let java = async move { p.lock(&n, 2, TTL_MS, Duration::from_secs(20)).await };
        assert!(wakes(name, java, async { guard.unlock().await.unwrap() }).await);
        assert_eq!(peer.unlock(name, 2, TTL_MS).await, Some(1));
    }
    assert!(peer.bad_payloads().is_empty(), "{:?}", peer.bad_payloads());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fenced_contention_on_a_cluster_keeps_order() {
    let cluster = tokio::task::block_in_place(|| RedisCluster::start(3, 0));
    let c = cluster_client(&cluster).await;
    let peer = Arc::new(RedissonPeer::connect_cluster(&cluster));
    let history = Arc::new(History::new());
    let mut tasks = Vec::new();
    for t in 0..2 {
        let (c, history) = (c.clone(), history.clone());
        tasks.push(tokio::spawn(async move {
            for _ in 0..10 {
                let id = history.invoke(&format!("lockwise-{t}"), "{acct}:1");
                let g = c.fenced_lock("{acct}:1").lock().await.unwrap();
                history.ok(&id, g.owner(), Some(g.token()), None);
                tokio::time::sleep(Duration::from_millis(2)).await;
                history.release(&id);
                g.unlock().await.unwrap();
            }
        }));
    }
    for thread in 1..=2u64 {
        let (peer, history) = (peer.clone(), history.clone());
        tasks.push(tokio::spawn(async move {
            for _ in 0..10 {
                let id = history.invoke(&format!("redisson-{thread}"), "{acct}:1");
                let wait = Duration::from_secs(20);
                let token = peer.lock_fenced("{acct}:1", thread, TTL_MS, wait).await;
                history.ok(&id, &peer.owner(thread), token.map(|t| t as u64), None);
                tokio::time::sleep(Duration::from_millis(2)).await;
                history.release(&id);
                assert_eq!(peer.unlock("{acct}:1", thread, TTL_MS).await, Some(1));
            }
        }));
    }
    for t in tasks {
        within(120, t).await.unwrap();
    }
    assert_clean(&history.check());
    assert_clean(&history.check_tokens());
    assert!(peer.bad_payloads().is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fair_heads_are_woken_on_their_own_sharded_channel() {
    let cluster = tokio::task::block_in_place(|| RedisCluster::start(3, 0));
    let c = cluster_client(&cluster).await;
    let peer = Arc::new(RedissonPeer::connect_cluster(&cluster));
    const FAIR_WAIT_MS: u64 = 300_000;
    for name in ["fq:1", "fq:2", "fq:3"] {
        // Java holds, lockwise queues, Java queues behind it: served in that order.
        let now = suite::redisson::now_ms();
        assert_eq!(
            peer.fair_try_lock(name, 1, TTL_MS, FAIR_WAIT_MS, now).await,
            None
        );
        let lock = c.fair_lock(name);
        let rust = tokio::spawn(async move {
            let g = lock.lock().await.unwrap();
            let at = Instant::now();
            tokio::time::sleep(Duration::from_millis(200)).await;
            g.unlock().await.unwrap();
            at
        });
        tokio::time::sleep(Duration::from_millis(300)).await;
        let java = {
            let peer = peer.clone();
            tokio::spawn(async move {
                let ok = peer
                    .fair_lock(name, 2, TTL_MS, Duration::from_secs(20), FAIR_WAIT_MS)
                    .await;
                (ok, Instant::now())
            })
        };
        tokio::time::sleep(Duration::from_millis(300)).await;
        let released = Instant::now();
        assert_eq!(peer.fair_unlock(name, 1, TTL_MS).await, Some(1));
        let rust_at = within(25, rust).await.unwrap();
        let (ok, java_at) = within(25, java).await.unwrap();
        assert!(ok && rust_at < java_at, "{name}: served in queue order");
        assert!(
            rust_at - released < WOKEN,
            "{name}: {:?}",
            rust_at - released
        );
        assert!(java_at - rust_at < WOKEN + Duration::from_millis(200));
        assert_eq!(peer.fair_unlock(name, 2, TTL_MS).await, Some(1));
    }
    assert!(peer.bad_payloads().is_empty(), "{:?}", peer.bad_payloads());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn semaphores_and_latches_wake_both_ways_on_a_cluster() {
    let cluster = tokio::task::block_in_place(|| RedisCluster::start(3, 0));
    let c = cluster_client(&cluster).await;
    let peer = Arc::new(RedissonPeer::connect_cluster(&cluster));
    for i in 0..3 {
        let (sem, latch) = (format!("sem:{i}"), format!("gate:{i}"));
        // Semaphore: Java sets one permit and takes it; a lockwise waiter is woken by the
        // Java release, and a Java waiter by the lockwise release.
        assert!(peer.sem_try_set_permits(&sem, 1).await);
        assert!(peer.sem_try_acquire(&sem, 1).await);
        let s = c.semaphore(&sem);
        let waiter = tokio::spawn(async move { s.acquire().await.map(|p| (p, Instant::now())) });
        tokio::time::sleep(Duration::from_millis(200)).await;
        let released = Instant::now();
        peer.sem_release(&sem, 1).await;
        let (permit, at) = within(25, waiter).await.unwrap().unwrap();
        assert!(at - released < WOKEN, "{sem}: {:?}", at - released);
        let java = {
            let (peer, sem) = (peer.clone(), sem.clone());
            tokio::spawn(async move {
                let ok = peer.sem_acquire(&sem, 1, Duration::from_secs(20)).await;
                (ok, Instant::now())
            })
        };
        tokio::time::sleep(Duration::from_millis(200)).await;
        let released = Instant::now();
        permit.release().await.unwrap();
        let (ok, at) = within(25, java).await.unwrap();
        assert!(ok && at - released < WOKEN, "{sem}: {:?}", at - released);
        // Latch: Java waits on a lockwise count-down, lockwise on a Java one.
        let l = c.count_down_latch(&latch);
        assert!(l.try_set_count(2, Duration::from_secs(60)).await.unwrap());
        let java = {
            let (peer, latch) = (peer.clone(), latch.clone());
            tokio::spawn(async move { peer.latch_await(&latch, Duration::from_secs(20)).await })
        };
        let rust = {
            let l = l.clone();
            tokio::spawn(async move { l.wait_timeout(Duration::from_secs(20)).await })
        };
        tokio::time::sleep(Duration::from_millis(200)).await;
        assert_eq!(l.count_down().await.unwrap(), 1);
        let opened = Instant::now();
        assert_eq!(peer.latch_count_down(&latch).await, 0);
        assert!(within(25, java).await.unwrap());
        assert!(within(25, rust).await.unwrap().unwrap());
        assert!(opened.elapsed() < WOKEN);
    }
    assert!(peer.bad_payloads().is_empty(), "{:?}", peer.bad_payloads());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn expirable_permits_wake_both_ways_on_a_cluster() {
    let cluster = tokio::task::block_in_place(|| RedisCluster::start(3, 0));
    let c = cluster_client(&cluster).await;
    let peer = Arc::new(RedissonPeer::connect_cluster(&cluster));
    let lease = Duration::from_secs(30);
    for i in 0..3 {
        let name = format!("pool:{i}");
        let sem = c.lease_semaphore(&name);
        assert!(sem.try_set_permits(1).await.unwrap());
        // Java takes the one permit; a lockwise waiter is woken by its release.
        let ids = peer.pes_try_acquire(&name, 1, Some(TTL_MS)).await.unwrap();
        let waiter = {
            let sem = sem.clone();
            tokio::spawn(async move { sem.acquire(lease).await.map(|p| (p, Instant::now())) })
        };
        tokio::time::sleep(Duration::from_millis(200)).await;
        let released = Instant::now();
        assert!(peer.pes_release(&name, &ids[0]).await);
        let (permit, at) = within(25, waiter).await.unwrap().unwrap();
        assert!(at - released < WOKEN, "{name}: {:?}", at - released);
        // And a Java waiter by lockwise's release.
        let java = {
            let (peer, name) = (peer.clone(), name.clone());
            tokio::spawn(async move {
                let got = peer
                    .pes_acquire(&name, 1, Some(TTL_MS), Duration::from_secs(20))
                    .await;
                (got, Instant::now())
            })
        };
        tokio::time::sleep(Duration::from_millis(200)).await;
        let released = Instant::now();
        permit.release().await.unwrap();
        let (got, at) = within(25, java).await.unwrap();
        let ids = got.expect("the Java waiter got the permit");
        assert!(at - released < WOKEN, "{name}: {:?}", at - released);
        assert!(peer.pes_release(&name, &ids[0]).await);
    }
    assert!(peer.bad_payloads().is_empty(), "{:?}", peer.bad_payloads());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn read_write_locks_wake_both_ways_on_a_cluster() {
    let cluster = tokio::task::block_in_place(|| RedisCluster::start(3, 0));
    let c = cluster_client(&cluster).await;
    let peer = Arc::new(RedissonPeer::connect_cluster(&cluster));
    for name in ["doc:1", "doc:2", "{doc}:3"] {
        // A Java reader and a lockwise reader share; a lockwise writer waits for both.
        assert_eq!(peer.try_read_lock(name, 1, TTL_MS).await, None);
        let rw = c.rw_lock(name);
        let reader = rw.read().lock().await.unwrap();
        let writer = {
            let rw = rw.clone();
            tokio::spawn(async move { rw.write().lock().await.map(|g| (g, Instant::now())) })
        };
        tokio::time::sleep(Duration::from_millis(200)).await;
        reader.unlock().await.unwrap();
        // The Java reader's unlock leaves nothing; its `0` wakes the lockwise writer.
        let released = Instant::now();
        assert!(peer.read_unlock(name, 1).await.is_some());
        let (guard, at) = within(25, writer).await.unwrap().unwrap();
        assert!(at - released < WOKEN, "{name}: {:?}", at - released);
        // A Java reader waits for the lockwise writer; its `1` wakes it.
        let java = {
            let peer = peer.clone();
            tokio::spawn(async move {
                let ok = peer
                    .read_lock(name, 2, TTL_MS, Duration::from_secs(20))
                    .await;
                (ok, Instant::now())
            })
        };
        tokio::time::sleep(Duration::from_millis(200)).await;
        let released = Instant::now();
        guard.unlock().await.unwrap();
        let (ok, at) = within(25, java).await.unwrap();
        assert!(ok && at - released < WOKEN, "{name}: {:?}", at - released);
        assert!(peer.read_unlock(name, 2).await.is_some());
    }
    assert!(peer.bad_payloads().is_empty(), "{:?}", peer.bad_payloads());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn non_reentrant_and_multi_locks_wake_both_ways_on_a_cluster() {
    let cluster = tokio::task::block_in_place(|| RedisCluster::start(3, 0));
    let c = cluster_client(&cluster).await;
    let peer = Arc::new(RedissonPeer::connect_cluster(&cluster));
    // Members on different masters: MultiLock takes each as Redisson's RLock.
    let names = ["m:1", "m:2", "m:3"];
    let masters: std::collections::BTreeSet<u16> = names
        .iter()
        .map(|n| cluster.master_for_slot(cluster.key_slot(n)))
        .collect();
    assert!(masters.len() >= 2, "members spread over masters");
    // Java holds one member: a lockwise MultiLock waits, and the Java unlock wakes it.
    assert_eq!(peer.try_lock("m:2", 1, TTL_MS).await, None);
    let multi = c.multi_lock(names);
    let guard = wakes("multi", async move { multi.lock().await }, async {
        assert_eq!(peer.unlock("m:2", 1, TTL_MS).await, Some(1));
    })
    .await
    .unwrap();
    // A Java waiter on a member is woken by the MultiLock's release.
    let p = peer.clone();
    let java = async move { p.lock("m:3", 2, TTL_MS, Duration::from_secs(20)).await };
    assert!(
        wakes("multi member", java, async {
            guard.unlock().await.unwrap()
        })
        .await
    );
    assert_eq!(peer.unlock("m:3", 2, TTL_MS).await, Some(1));
    // A non-reentrant handle: woken by a Java unlock, and its release wakes a Java waiter.
    assert_eq!(peer.try_lock("n:1", 1, TTL_MS).await, None);
    let lock = c.lock("n:1").non_reentrant();
    let guard = wakes("non-reentrant", async move { lock.lock().await }, async {
        assert_eq!(peer.unlock("n:1", 1, TTL_MS).await, Some(1));
    })
    .await
    .unwrap();
    let p = peer.clone();
    let java = async move { p.lock("n:1", 2, TTL_MS, Duration::from_secs(20)).await };
    assert!(
        wakes("non-reentrant", java, async {
            guard.unlock().await.unwrap()
        })
        .await
    );
    assert_eq!(peer.unlock("n:1", 2, TTL_MS).await, Some(1));
    assert!(peer.bad_payloads().is_empty(), "{:?}", peer.bad_payloads());
}

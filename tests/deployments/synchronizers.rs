//! The synchronizers (RwLock, Semaphore, LeaseSemaphore, CountDownLatch) on a real 3-master
//! Redis Cluster: each kind's keys share their name's slot (no CROSSSLOT), a waiter in one
//! `Client` is woken by another `Client`'s release through its sharded channel (long before
//! any lease or watchdog deadline could have let it in), and afterwards every key left has a
//! TTL and no channel is subscribed.

use std::collections::HashSet;
use std::time::{Duration, Instant};

use crate::{channels_of, channels_on, cluster_client, keys_on, topology::RedisCluster};

/// How long a woken waiter may take at most: far below the watchdog timeout and the leases,
/// so only the release's message can have woken it.
const WOKEN_WITHIN: Duration = Duration::from_secs(5);

/// Runs `wait` in a task, lets it subscribe, runs `release`, and returns how long after the
/// release the waiter finished.
async fn woken_by<W, T, R, U>(what: &str, wait: W, release: R) -> Duration
where
    W: std::future::Future<Output = lockwise::Result<T>> + Send + 'static,
    T: Send + 'static,
    R: std::future::Future<Output = lockwise::Result<U>>,
{
    let waiter = tokio::spawn(wait);
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(!waiter.is_finished(), "{what}: the waiter did not wait");
    let released = Instant::now();
    release
        .await
        .unwrap_or_else(|e| panic!("{what}: release: {e}"));
    tokio::time::timeout(WOKEN_WITHIN, waiter)
        .await
        .unwrap_or_else(|_| panic!("{what}: not woken by the release's message"))
        .unwrap()
        .unwrap_or_else(|e| panic!("{what}: waiter: {e}"));
    released.elapsed()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_synchronizers_across_slots_woken_by_sharded_pubsub() {
    suite::init_tracing();
    let cluster = tokio::task::block_in_place(|| RedisCluster::start(3, 0));
    let ns = suite::unique_ns("clsync");
    let watchdog = Duration::from_secs(30);
    let a = cluster_client(&cluster, &ns, watchdog).await;
    let b = cluster_client(&cluster, &ns, watchdog).await;
    let names: Vec<String> = (0..6).map(|i| format!("sync:{i}")).collect();
    let masters: HashSet<u16> = names
        .iter()
        .map(|n| cluster.master_for_slot(cluster.key_slot(a.semaphore(n).key())))
        .collect();
    assert!(masters.len() >= 2, "names on {masters:?}");
    let lease = Duration::from_secs(60);
    let mut slowest = Duration::ZERO;

    for name in &names {
        // RwLock: readers in both clients; a writer in `b` is woken by the last read unlock,
        // then downgrades.
        let r1 = a.rw_lock(name).read().lock().await.expect("read a");
        let r2 = b.rw_lock(name).read().lock().await.expect("read b");
        r2.unlock().await.expect("read unlock b");
        let rw = b.rw_lock(name);
        slowest = slowest.max(
            woken_by(
                "rwlock writer",
                async move {
                    let w = rw.write().lock().await?;
                    let r = rw.read().lock().await?;
                    w.unlock().await?;
                    r.unlock().await
                },
                r1.unlock(),
            )
            .await,
        );

        // Semaphore: one permit; a waiter in `b` gets it when `a` releases.
        let sem = a.semaphore(name);
        assert!(sem.try_set_permits(1).await.expect("set permits"));
        let held = sem.acquire_many(1).await.expect("acquire a");
        let sem_b = b.semaphore(name);
        slowest = slowest.max(
            woken_by(
                "semaphore",
                async move { sem_b.acquire_many(1).await?.release().await },
                held.release(),
            )
            .await,
        );
        assert_eq!(sem.available_permits().await.expect("available"), 1);

        // LeaseSemaphore: one permit leased for a minute; released early, it wakes `b`.
        let ls = a.lease_semaphore(name);
        assert!(ls.try_set_permits(1).await.expect("set lease permits"));
        let permit = ls.acquire(lease).await.expect("lease a");
        let ls_b = b.lease_semaphore(name);
        slowest = slowest.max(
            woken_by(
                "lease semaphore",
                async move { ls_b.acquire(lease).await?.release().await },
                permit.release(),
            )
            .await,
        );
        assert_eq!(ls.available_permits().await.expect("lease available"), 1);
        assert_eq!(ls.leased_permits().await.expect("leased"), 0);

        // CountDownLatch: a waiter in `b` is woken when `a` counts it down to zero.
        let latch = a.count_down_latch(name);
        assert!(latch.try_set_count(1, lease).await.expect("set count"));
        let latch_b = b.count_down_latch(name);
        slowest = slowest.max(
            woken_by("latch", async move { latch_b.wait().await }, async {
                latch.count_down().await.map(|left| assert_eq!(left, 0))
            })
            .await,
        );
    }
    eprintln!(
        "{} names x 4 kinds on {} masters: slowest wakeup {slowest:?} after the release",
        names.len(),
        masters.len()
    );

    // Every key left (the semaphores' counts, with their idle TTL) has a TTL; no channel
    // is left subscribed, and none was a plain (unsharded) channel.
    let ports = cluster.master_ports();
    let keys = keys_on(&ports, &ns);
    assert!(
        keys.iter().all(|(_, _, pttl)| *pttl > 0),
        "keys without a TTL: {keys:?}"
    );
    assert!(channels_of(&ports, &ns, &["CHANNELS"]).is_empty());
    let t0 = Instant::now();
    while !channels_on(&ports, &ns).is_empty() {
        assert!(
            t0.elapsed() < Duration::from_secs(10),
            "channels left subscribed: {:?}",
            channels_on(&ports, &ns)
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

//! Redlock on every subset of three real, independent redis-servers: re-entry after a partial
//! expiry is a fresh hold, an old guard's unlock never releases a newer run, re-entry after a
//! partial release counts only the nodes that still hold, and an extension that finds a
//! majority gone reports the lock lost with zero validity.
//!
//! Each node's holds are accounted for in that node client's hold registry, as for every
//! kind: a guard releases its own hold where it still has one, never a newer run's, and a
//! count that no guard can claim is settled away on that node.

use suite::OrNone;
use suite::{conns, node_clients, redlock_options};

use suite::in_task;
use suite::Conn;

use std::collections::BTreeMap;
use std::time::Duration;

use lockwise::RedLockSet;
use suite::RedisServer;

/// Three independent servers: every subset of them is tried.
const NODES: usize = 3;

/// The subsets of the nodes, as bit masks (bit i = node i).
fn subsets() -> impl Iterator<Item = u32> {
    0..(1u32 << NODES)
}

fn in_subset(mask: u32, node: usize) -> bool {
    mask & (1 << node) != 0
}

/// Whether a lock whose holds are gone on the nodes of `mask` is still held by a majority.
fn majority_left(mask: u32) -> bool {
    NODES - mask.count_ones() as usize > NODES / 2
}

/// Per node: `inside` for the nodes of `mask`, `outside` for the others.
fn per_node(mask: u32, inside: i64, outside: i64) -> Vec<i64> {
    (0..NODES)
        .map(|i| if in_subset(mask, i) { inside } else { outside })
        .collect()
}

/// `HGETALL key` on every node.
async fn read_nodes(conns: &mut [Conn], key: &str) -> Vec<BTreeMap<String, i64>> {
    let mut nodes = Vec::new();
    for c in conns.iter_mut() {
        nodes.push(redis::cmd("HGETALL").arg(key).query_async(c).await.unwrap());
    }
    nodes
}

/// Per node, exactly `{owner: counts[i]}`, or no key for 0.
fn expected_nodes(owner: &str, counts: &[i64]) -> Vec<BTreeMap<String, i64>> {
    counts
        .iter()
        .map(|&n| match n {
            0 => BTreeMap::new(),
            n => BTreeMap::from([(owner.to_string(), n)]),
        })
        .collect()
}

/// Checks `HGETALL key` on every node: exactly `{owner: counts[i]}`, or no key for 0.
async fn assert_nodes(conns: &mut [Conn], key: &str, owner: &str, counts: &[i64], ctx: &str) {
    let want = expected_nodes(owner, counts);
    for (i, (got, want)) in read_nodes(conns, key).await.iter().zip(&want).enumerate() {
        assert_eq!(got, want, "{ctx}: node {i}");
    }
}

/// Like [`assert_nodes`], once a settlement running in the background had time to finish.
async fn assert_nodes_settled(
    conns: &mut [Conn],
    key: &str,
    owner: &str,
    counts: &[i64],
    ctx: &str,
) {
    let want = expected_nodes(owner, counts);
    for _ in 0..200 {
        if read_nodes(conns, key).await == want {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_nodes(conns, key, owner, counts, ctx).await;
}

/// Makes the holds on the nodes of `mask` vanish, as if their TTL had run out there only.
async fn expire_on(conns: &mut [Conn], key: &str, mask: u32) {
    for (i, c) in conns.iter_mut().enumerate() {
        if in_subset(mask, i) {
            let _: i64 = redis::cmd("DEL").arg(key).query_async(c).await.unwrap();
        }
    }
}

/// Whether another owner can take the majority right now (its hold, if any, is given back).
async fn other_takes_majority(other: &RedLockSet, name: &str) -> bool {
    let got = other
        .lock(name)
        .try_lock(Duration::ZERO, Some(Duration::from_secs(1)))
        .await
        .or_none()
        .expect("contention is not an error");
    match got {
        Some(g) => {
            let _ = g.unlock().await;
            true
        }
        None => false,
    }
}

/// Asserts that another owner cannot take the majority while `claimed` (a guard's validity
/// read just before) says the lock is held.
async fn assert_exclusive(other: &RedLockSet, name: &str, claimed: Duration, ctx: &str) {
    assert!(claimed > Duration::ZERO, "{ctx}: the guard should be valid");
    assert!(
        !other_takes_majority(other, name).await,
        "{ctx}: another owner took the majority while a guard claimed {claimed:?} of validity"
    );
}

/// Three servers, a set (the owner under test) and another set (a second owner) over them.
async fn three_nodes(test: &str) -> (Vec<RedisServer>, RedLockSet, RedLockSet, Vec<Conn>) {
    let servers = suite::servers(NODES);
    let ns = suite::unique_ns(test);
    let opts = redlock_options(Duration::from_secs(20));
    let set = RedLockSet::with_options(&node_clients(&servers, &ns).await, opts.clone());
    let other = RedLockSet::with_options(&node_clients(&servers, &ns).await, opts);
    let conns = conns(&servers).await;
    (servers, set, other, conns)
}

/// Watchdog holds and lease holds (both long enough to outlast a case).
const HOLDS: [Option<Duration>; 2] = [None, Some(Duration::from_secs(20))];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reentry_after_partial_expiry_is_a_fresh_hold() {
    let (_servers, set, other, mut conns) = three_nodes("redlock-partial-expiry").await;
    in_task(async move {
        for lease in HOLDS {
            for mask in subsets() {
                let ctx = format!("lease {lease:?}, old hold expired on nodes {mask:03b}");
                let name = format!("expiry-{}-{mask}", lease.is_some());
                let lock = set.lock(&name);
                let key = lock.key(0).unwrap().to_string();
                let old = lock
                    .try_lock(Duration::ZERO, lease)
                    .await
                    .or_none()
                    .unwrap()
                    .unwrap();
                let owner = old.owner().to_string();
                expire_on(&mut conns, &key, mask).await;

                let new = lock
                    .try_lock(Duration::ZERO, lease)
                    .await
                    .or_none()
                    .unwrap()
                    .expect("every node grants the same owner");
                // Every node granted it: a new hold where the old one had expired, a re-entry
                // where it had not.
                assert_nodes(&mut conns, &key, &owner, &per_node(mask, 1, 2), &ctx).await;
                assert!(!new.is_lost(), "{ctx}");
                if majority_left(mask) {
                    // A re-entry of the old hold: both guards hold a majority.
                    assert!(!old.is_lost(), "{ctx}: the old hold remains on a majority");
                    assert!(old.validity() > Duration::ZERO, "{ctx}");
                } else {
                    // A fresh hold: the old guard's holds are gone on a majority.
                    assert!(old.is_lost(), "{ctx}: the old guard must be lost");
                    assert!(old.lost().is_cancelled(), "{ctx}: lost() must fire");
                    assert_eq!(old.validity(), Duration::ZERO, "{ctx}");
                }
                assert_exclusive(&other, &name, new.validity(), &ctx).await;

                new.unlock().await.expect("the new hold is released");
                if majority_left(mask) {
                    // The old guard still holds the nodes where its hold never expired.
                    assert_nodes(&mut conns, &key, &owner, &per_node(mask, 0, 1), &ctx).await;
                    assert_exclusive(&other, &name, old.validity(), &ctx).await;
                    old.unlock().await.expect("the old hold is released");
                } else {
                    // The old guard's own holds remain where they never expired, on too few
                    // nodes for a majority; its unlock releases them and reports the loss.
                    assert_nodes(&mut conns, &key, &owner, &per_node(mask, 0, 1), &ctx).await;
                    let err = old
                        .unlock()
                        .await
                        .expect_err("a lost guard holds no majority");
                    assert!(err.is_not_held(), "{ctx}: {err:?}");
                }
                assert_nodes(&mut conns, &key, &owner, &[0; NODES], &ctx).await;
            }
        }
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn old_guard_unlock_never_releases_new_run() {
    let (_servers, set, other, mut conns) = three_nodes("redlock-old-unlock").await;
    in_task(async move {
        for lease in HOLDS {
            for mask in subsets() {
                let ctx = format!("lease {lease:?}, old hold expired on nodes {mask:03b}");
                let name = format!("old-unlock-{}-{mask}", lease.is_some());
                let lock = set.lock(&name);
                let key = lock.key(0).unwrap().to_string();
                let old = lock
                    .try_lock(Duration::ZERO, lease)
                    .await
                    .or_none()
                    .unwrap()
                    .unwrap();
                let owner = old.owner().to_string();
                expire_on(&mut conns, &key, mask).await;
                let new = lock
                    .try_lock(Duration::ZERO, lease)
                    .await
                    .or_none()
                    .unwrap()
                    .unwrap();

                // The old guard unlocks first.
                let result = old.unlock().await;
                if majority_left(mask) {
                    // It released its own holds, only where they still were.
                    result.expect("the old hold was still held by a majority");
                    assert_nodes(&mut conns, &key, &owner, &[1; NODES], &ctx).await;
                } else {
                    // Its holds were gone on a majority: it released its own holds where
                    // they remained, and never touched the new guard's.
                    let err = result.expect_err("the old guard lost the lock");
                    assert!(err.is_not_held(), "{ctx}: {err:?}");
                    assert_nodes(&mut conns, &key, &owner, &[1; NODES], &ctx).await;
                }
                assert!(!new.is_lost(), "{ctx}");
                assert_exclusive(&other, &name, new.validity(), &ctx).await;

                new.unlock().await.expect("the new hold is released");
                assert_nodes(&mut conns, &key, &owner, &[0; NODES], &ctx).await;
                assert!(
                    other_takes_majority(&other, &name).await,
                    "{ctx}: free again"
                );
            }
        }
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reentry_after_partial_release_counts_only_nodes_that_still_hold_the_run() {
    let (_servers, set, other, mut conns) = three_nodes("redlock-partial-release").await;
    in_task(async move {
        for lease in HOLDS {
            for mask in subsets() {
                let ctx = format!("lease {lease:?}, one hold released on nodes {mask:03b} only");
                let name = format!("release-{}-{mask}", lease.is_some());
                let lock = set.lock(&name);
                let key = lock.key(0).unwrap().to_string();
                let outer = lock
                    .try_lock(Duration::ZERO, lease)
                    .await
                    .or_none()
                    .unwrap()
                    .unwrap();
                let inner = lock
                    .try_lock(Duration::ZERO, lease)
                    .await
                    .or_none()
                    .unwrap()
                    .unwrap();
                let owner = outer.owner().to_string();
                assert_nodes(&mut conns, &key, &owner, &[2; NODES], &ctx).await;
                // One release of one hold reached only the nodes of `mask` (behind the
                // guards' back, e.g. a duplicate of an unlock): their counts no longer add up.
                for (i, c) in conns.iter_mut().enumerate() {
                    if in_subset(mask, i) {
                        let _: i64 = redis::cmd("HINCRBY")
                            .arg(&key)
                            .arg(&owner)
                            .arg(-1)
                            .query_async(c)
                            .await
                            .unwrap();
                    }
                }

                let new = lock
                    .try_lock(Duration::ZERO, lease)
                    .await
                    .or_none()
                    .unwrap()
                    .unwrap();
                // Where the count did not add up, the new guard holds the node alone: the
                // hold no guard can claim is settled away.
                assert_nodes_settled(&mut conns, &key, &owner, &per_node(mask, 1, 3), &ctx).await;
                if majority_left(mask) {
                    assert!(!outer.is_lost() && !inner.is_lost(), "{ctx}");
                } else {
                    // A majority of the nodes no longer show the old guards' holds.
                    assert!(outer.is_lost() && inner.is_lost(), "{ctx}");
                    assert_eq!(outer.validity(), Duration::ZERO, "{ctx}");
                    assert_eq!(inner.validity(), Duration::ZERO, "{ctx}");
                }
                assert_exclusive(&other, &name, new.validity(), &ctx).await;

                // The new guard unlocks first: its own hold on every node. Where a settlement
                // still ran (the nodes of `mask`), the node's release waits for it and may
                // finish in the background once a majority answered: settled, not at once.
                new.unlock().await.expect("the new hold is released");
                if majority_left(mask) {
                    assert_nodes_settled(&mut conns, &key, &owner, &per_node(mask, 0, 2), &ctx)
                        .await;
                    assert_exclusive(&other, &name, inner.validity(), &ctx).await;
                    inner.unlock().await.expect("inner");
                    assert_nodes(&mut conns, &key, &owner, &per_node(mask, 0, 1), &ctx).await;
                    assert_exclusive(&other, &name, outer.validity(), &ctx).await;
                    outer.unlock().await.expect("outer");
                } else {
                    // The old guards' holds remain where they were never released, on too
                    // few nodes for a majority; their unlocks release them.
                    assert_nodes_settled(&mut conns, &key, &owner, &per_node(mask, 0, 2), &ctx)
                        .await;
                    for g in [inner, outer] {
                        let err = g.unlock().await.expect_err("lost");
                        assert!(err.is_not_held(), "{ctx}: {err:?}");
                    }
                }
                assert_nodes(&mut conns, &key, &owner, &[0; NODES], &ctx).await;
            }
        }
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn extension_that_finds_a_majority_gone_reports_lost_and_zero_validity() {
    let servers = suite::servers(NODES);
    let ns = suite::unique_ns("redlock-extension-gone");
    let ttl = Duration::from_millis(900);
    let set = RedLockSet::with_options(&node_clients(&servers, &ns).await, redlock_options(ttl));
    let other = RedLockSet::with_options(
        &node_clients(&servers, &ns).await,
        redlock_options(Duration::from_secs(20)),
    );
    let mut conns = conns(&servers).await;
    in_task(async move {
        for mask in subsets() {
            let ctx = format!("hold expired on nodes {mask:03b} between two extensions");
            let name = format!("extend-{mask}");
            let lock = set.lock(&name);
            let key = lock.key(0).unwrap().to_string();
            let guard = lock.lock().await.unwrap();
            let owner = guard.owner().to_string();
            expire_on(&mut conns, &key, mask).await;
            if majority_left(mask) {
                // Extensions go on with the nodes that still hold it; none is re-created.
                tokio::time::sleep(ttl).await;
                assert!(!guard.is_lost(), "{ctx}");
                assert_nodes(&mut conns, &key, &owner, &per_node(mask, 0, 1), &ctx).await;
                assert_exclusive(&other, &name, guard.validity(), &ctx).await;
                guard.unlock().await.expect("still held by a majority");
            } else {
                // The next extension (every ttl / 3) finds it gone on a majority.
                tokio::time::timeout(ttl, guard.lost().cancelled())
                    .await
                    .unwrap_or_else(|_| panic!("{ctx}: lost() must fire"));
                assert!(guard.is_lost(), "{ctx}");
                assert_eq!(
                    guard.validity(),
                    Duration::ZERO,
                    "{ctx}: lost means no validity"
                );
                // The lock is free for a second owner now, and the guard does not claim it.
                let claimed = guard.validity();
                let taken = other_takes_majority(&other, &name).await;
                assert!(taken, "{ctx}: a majority is free");
                assert_eq!(claimed, Duration::ZERO, "{ctx}");
                let err = guard.unlock().await.expect_err("lost");
                assert!(err.is_not_held(), "{ctx}: {err:?}");
            }
            assert_nodes(&mut conns, &key, &owner, &[0; NODES], &ctx).await;
        }
    })
    .await;
}

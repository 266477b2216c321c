//! `RwLock` as Redisson's `RReadWriteLock` (`RedissonReadLock`, `RedissonWriteLock`),
//! against the Redisson-protocol peer: the byte layout (one hash with `mode`, reader fields
//! and `<owner>:write`, a timeout key per read hold, `0` / `1` on `redisson_rwlock:{name}`),
//! readers of both sides sharing, writers excluded and woken by the messages (not the TTL),
//! a Java reader's unlock beside a lockwise reader (which must not delete the hash under
//! the lockwise reader), downgrade, upgrade refusal, the watchdog's renewal of the timeout
//! keys, force unlocks, detach, and contention in which no writer overlaps anyone
//! ([`contention`]).

mod contention;

use std::sync::Arc;
use std::time::{Duration, Instant};

use lockwise::Error;
use suite::kit::within;
use suite::redisson::{rw_timeout_prefix, RedissonPeer};
use suite::{Conn, RedisServer};

use super::{
    client, fields, get, is_owner_field, keys_without_ttl, payloads, pttl, record, TTL, TTL_MS,
    WOKEN,
};

/// The timeout key of read hold `n` of `owner` on `name`.
fn timeout_key(name: &str, owner: &str, n: u32) -> String {
    format!("{}:{n}", rw_timeout_prefix(name, owner))
}

/// `pairs` as [`fields`] returns them (sorted).
fn expect(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
    let mut v: Vec<(String, String)> = pairs
        .iter()
        .map(|(f, v)| (f.to_string(), v.to_string()))
        .collect();
    v.sort();
    v
}

async fn all_keys(conn: &mut Conn) -> Vec<String> {
    let mut keys: Vec<String> = suite::keys_with_pttl(conn)
        .await
        .into_iter()
        .map(|(k, _)| k)
        .collect();
    keys.sort();
    keys
}

/// Nothing left: no hash, no timeout key, no key without a TTL, no payload Java rejects.
async fn nothing_left(conn: &mut Conn, peers: &[&RedissonPeer]) {
    assert!(
        suite::eventually(Duration::from_secs(5), || {
            let mut conn = conn.clone();
            async move { all_keys(&mut conn).await.is_empty() }
        })
        .await,
        "keys left: {:?}",
        all_keys(conn).await
    );
    assert!(keys_without_ttl(conn).await.is_empty());
    for p in peers {
        assert!(p.bad_payloads().is_empty(), "{:?}", p.bad_payloads());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rwlock_is_redissons_hash_timeout_keys_and_payloads() {
    let server = RedisServer::start();
    let mut conn = server.conn().await;
    let c = client(&server, TTL).await;
    let seen = record(&server, "redisson_rwlock:{doc}").await;
    let rw = c.rw_lock("doc");
    assert_eq!((rw.read().key(), rw.write().key()), ("doc", "doc"));
    let (id, mut conn2) = (c.id().to_string(), conn.clone());
    within(
        20,
        tokio::spawn(async move {
            let conn = &mut conn2;
            let outer = rw.read().lock().await.unwrap();
            let owner = outer.owner().to_string();
            assert!(is_owner_field(&owner, &id), "{owner}");
            let inner = rw
                .read()
                .lock_with_lease(Duration::from_secs(10))
                .await
                .unwrap();
            assert_eq!(inner.owner(), owner, "one reader field per task");
            let (k1, k2) = (timeout_key("doc", &owner, 1), timeout_key("doc", &owner, 2));
            assert_eq!(
                fields(conn, "doc").await,
                expect(&[("mode", "read"), (&owner, "2")])
            );
            assert_eq!(get(conn, &k1).await.as_deref(), Some("1"));
            assert_eq!(get(conn, &k2).await.as_deref(), Some("1"));
            let (t1, t2, th) = (
                pttl(conn, &k1).await,
                pttl(conn, &k2).await,
                pttl(conn, "doc").await,
            );
            assert!((25_000..=30_000).contains(&t1), "watchdog hold: {t1}");
            assert!((5_000..=10_000).contains(&t2), "10 s lease: {t2}");
            assert!((25_000..=30_000).contains(&th), "hash: {th}");
            assert_eq!(all_keys(conn).await, {
                let mut v = vec!["doc".to_string(), k1.clone(), k2.clone()];
                v.sort();
                v
            });
            assert_eq!(rw.hold_count().await.unwrap(), 2);
            assert_eq!(rw.read().hold_count().await.unwrap(), 2);
            assert_eq!(rw.reader_count().await.unwrap(), 1);
            assert!(rw.is_locked().await.unwrap() && rw.read().is_locked().await.unwrap());
            assert!(!rw.is_write_locked().await.unwrap() && !rw.write().is_locked().await.unwrap());
            inner.unlock().await.unwrap();
            assert!(
                get(conn, &k2).await.is_none(),
                "the hold's timeout key goes with it"
            );
            assert_eq!(
                fields(conn, "doc").await,
                expect(&[("mode", "read"), (&owner, "1")])
            );
            outer.unlock().await.unwrap();
            assert!(all_keys(conn).await.is_empty());

            let write = rw.write().lock().await.unwrap();
            let writer = format!("{owner}:write");
            assert_eq!(write.owner(), writer);
            assert_eq!(
                fields(conn, "doc").await,
                expect(&[("mode", "write"), (&writer, "1")])
            );
            assert!((25_000..=30_000).contains(&pttl(conn, "doc").await));
            assert!(rw.is_write_locked().await.unwrap() && rw.write().is_locked().await.unwrap());
            assert!(!rw.read().is_locked().await.unwrap());
            assert_eq!(rw.write().hold_count().await.unwrap(), 1);
            assert_eq!(rw.read().hold_count().await.unwrap(), 0);
            write.unlock().await.unwrap();
            assert!(all_keys(conn).await.is_empty());

            // A name with a hash tag keeps it (Redisson's suffixName).
            let tagged = c.rw_lock("{doc}:1").read().lock().await.unwrap();
            let key = format!("{{doc}}:1:{owner}:rwlock_timeout:1");
            assert_eq!(get(conn, &key).await.as_deref(), Some("1"));
            tagged.unlock().await.unwrap();
        }),
    )
    .await
    .unwrap();
    // The read unlock that freed the lock published `0`, the write unlock `1`.
    assert_eq!(payloads(&seen, 2).await, ["0", "1"]);
    nothing_left(&mut conn, &[]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readers_of_both_sides_share_and_a_lockwise_writer_is_woken_when_both_leave() {
    let server = RedisServer::start();
    let (c1, c2) = (client(&server, TTL).await, client(&server, TTL).await);
    let peer = RedissonPeer::connect(server.url()).await;
    assert_eq!(peer.try_read_lock("doc", 1, TTL_MS).await, None);
    let read = c1.rw_lock("doc").read().lock().await.unwrap();
    assert_eq!(c1.rw_lock("doc").reader_count().await.unwrap(), 2);
    // The Java side's writer is excluded, and so is lockwise's.
    assert!(peer
        .try_write_lock("doc", 2, TTL_MS)
        .await
        .is_some_and(|p| p > 0));
    let writer = tokio::spawn(async move {
        let guard = c2.rw_lock("doc").write().lock().await.unwrap();
        (guard, Instant::now())
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    read.unlock().await.unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(!writer.is_finished(), "the Java reader still reads");
    let released = Instant::now();
    assert_eq!(peer.read_unlock("doc", 1).await, Some(1), "the last reader");
    let (guard, at) = within(25, writer).await.unwrap();
    assert!(at - released < WOKEN, "woken by `0`: {:?}", at - released);
    assert!(peer.try_read_lock("doc", 1, TTL_MS).await.is_some());
    guard.unlock().await.unwrap();
    nothing_left(&mut server.conn().await, &[&peer]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writers_of_each_side_hold_readers_of_the_other_until_one_message() {
    let server = RedisServer::start();
    let c = client(&server, TTL).await;
    let peer = Arc::new(RedissonPeer::connect(server.url()).await);
    let write = c.rw_lock("doc").write().lock().await.unwrap();
    assert!(peer
        .try_read_lock("doc", 1, TTL_MS)
        .await
        .is_some_and(|p| p > 0));
    // Two Java readers of one client wait: `1` must wake both (`0` would wake one).
    let readers: Vec<_> = (1..=2u64)
        .map(|thread| {
            let peer = peer.clone();
            tokio::spawn(async move {
                let ok = peer
                    .read_lock("doc", thread, TTL_MS, Duration::from_secs(20))
                    .await;
                (ok, Instant::now())
            })
        })
        .collect();
    tokio::time::sleep(Duration::from_millis(400)).await;
    let released = Instant::now();
    write.unlock().await.unwrap();
    for r in readers {
        let (ok, at) = within(25, r).await.unwrap();
        assert!(
            ok && at - released < WOKEN,
            "woken by `1`: {:?}",
            at - released
        );
    }
    let mut conn = server.conn().await;
    let (o1, o2) = (peer.owner(1), peer.owner(2));
    assert_eq!(
        fields(&mut conn, "doc").await,
        expect(&[("mode", "read"), (&o1, "1"), (&o2, "1")])
    );
    assert_eq!(peer.read_unlock("doc", 1).await, Some(0));
    assert_eq!(peer.read_unlock("doc", 2).await, Some(1));
    // And the other way round: a Java writer holds a lockwise reader, its unlock wakes it.
    assert_eq!(peer.try_write_lock("doc", 3, TTL_MS).await, None);
    let rw = c.rw_lock("doc");
    assert!(rw.is_write_locked().await.unwrap());
    assert!(rw
        .read()
        .try_lock(Duration::ZERO, None)
        .await
        .unwrap_err()
        .is_timeout());
    let reader = tokio::spawn(async move {
        let guard = rw.read().lock().await.unwrap();
        (guard, Instant::now())
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    let released = Instant::now();
    assert_eq!(peer.write_unlock("doc", 3, TTL_MS).await, Some(1));
    let (guard, at) = within(25, reader).await.unwrap();
    assert!(at - released < WOKEN, "woken by `1`: {:?}", at - released);
    guard.unlock().await.unwrap();
    nothing_left(&mut conn, &[&peer]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_java_readers_unlock_keeps_the_lock_a_lockwise_reader_holds() {
    let server = RedisServer::start();
    let mut conn = server.conn().await;
    let c = client(&server, TTL).await;
    let peer = RedissonPeer::connect(server.url()).await;
    let read = c.rw_lock("doc").read().lock().await.unwrap();
    let owner = read.owner().to_string();
    assert_eq!(peer.try_read_lock("doc", 1, TTL_MS).await, None);
    // Redisson's read unlock keeps the hash only while some timeout key lives: lockwise's.
    assert_eq!(peer.read_unlock("doc", 1).await, Some(0), "still held");
    assert_eq!(
        fields(&mut conn, "doc").await,
        expect(&[("mode", "read"), (&owner, "1")])
    );
    assert!(pttl(&mut conn, "doc").await > 25_000);
    assert!(!read.is_lost());
    assert!(
        peer.try_write_lock("doc", 2, TTL_MS).await.is_some(),
        "writers still excluded"
    );
    // With a lease, the hash lives as long as the lease.
    let leased = c
        .rw_lock("doc2")
        .read()
        .lock_with_lease(Duration::from_secs(5))
        .await
        .unwrap();
    assert_eq!(peer.try_read_lock("doc2", 1, TTL_MS).await, None);
    assert_eq!(peer.read_unlock("doc2", 1).await, Some(0));
    let left = pttl(&mut conn, "doc2").await;
    assert!((3_000..=5_000).contains(&left), "the lease's TTL: {left}");
    read.unlock().await.unwrap();
    leased.unlock().await.unwrap();
    nothing_left(&mut conn, &[&peer]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_writer_downgrades_and_a_reader_cannot_upgrade() {
    let server = RedisServer::start();
    let mut conn = server.conn().await;
    let c = client(&server, TTL).await;
    let peer = Arc::new(RedissonPeer::connect(server.url()).await);
    let seen = record(&server, "redisson_rwlock:{doc}").await;
    let (conn2, peer2) = (conn.clone(), peer.clone());
    within(
        30,
        tokio::spawn(async move {
            let (mut conn, peer) = (conn2, peer2);
            let rw = c.rw_lock("doc");
            let write = rw.write().lock().await.unwrap();
            let read = rw.read().lock().await.unwrap(); // the writer may read
            let owner = read.owner().to_string();
            let writer = write.owner().to_string();
            assert_eq!(
                fields(&mut conn, "doc").await,
                expect(&[("mode", "write"), (&writer, "1"), (&owner, "1")])
            );
            assert!(get(&mut conn, &timeout_key("doc", &owner, 1))
                .await
                .is_some());
            assert!(
                peer.try_read_lock("doc", 1, TTL_MS).await.is_some(),
                "writing"
            );
            let again = rw.write().lock().await.unwrap();
            assert_eq!(rw.hold_count().await.unwrap(), 3);
            again.unlock().await.unwrap();
            write.unlock().await.unwrap(); // downgraded: the read hold stays
            assert_eq!(
                fields(&mut conn, "doc").await,
                expect(&[("mode", "read"), (&owner, "1")])
            );
            assert_eq!(
                peer.try_read_lock("doc", 1, TTL_MS).await,
                None,
                "read-locked now"
            );
            assert!(peer.try_write_lock("doc", 2, TTL_MS).await.is_some());
            // An upgrade would wait for itself: refused at once, nothing changed.
            let started = Instant::now();
            match rw.write().try_lock(Duration::from_secs(5), None).await {
                Err(Error::UpgradeRefused { name }) => assert_eq!(name, "doc"),
                other => panic!("expected UpgradeRefused, got {:?}", other.map(|_| ())),
            }
            assert!(matches!(
                rw.write().lock().await,
                Err(Error::UpgradeRefused { .. })
            ));
            assert!(started.elapsed() < Duration::from_secs(2));
            let java = peer.owner(1);
            assert_eq!(
                fields(&mut conn, "doc").await,
                expect(&[("mode", "read"), (&owner, "1"), (&java, "1")])
            );
            read.unlock().await.unwrap();
            assert_eq!(peer.read_unlock("doc", 1).await, Some(1));
        }),
    )
    .await
    .unwrap();
    // The downgrade published `1` (readers may come in), the Java reader's last unlock `0`.
    assert_eq!(payloads(&seen, 2).await, ["1", "0"]);
    nothing_left(&mut conn, &[&peer]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_watchdog_renews_read_holds_and_their_timeout_keys() {
    let server = RedisServer::start();
    let mut conn = server.conn().await;
    // A short watchdog: without renewals everything would be gone after 1.5 s.
    let c = client(&server, Duration::from_millis(1500)).await;
    let peer = RedissonPeer::connect(server.url()).await;
    let read = c.rw_lock("doc").read().lock().await.unwrap();
    let key = timeout_key("doc", read.owner(), 1);
    tokio::time::sleep(Duration::from_millis(3500)).await;
    assert!(pttl(&mut conn, &key).await > 500, "timeout key renewed");
    assert!(pttl(&mut conn, "doc").await > 500, "hash renewed");
    assert!(!read.is_lost());
    // A Java reader's unlock after the renewals still sees lockwise's hold alive...
    assert_eq!(peer.try_read_lock("doc", 1, TTL_MS).await, None);
    assert_eq!(peer.read_unlock("doc", 1).await, Some(0));
    // ... which goes on living past the TTL that unlock set (the timeout key's).
    tokio::time::sleep(Duration::from_millis(2500)).await;
    assert!(pttl(&mut conn, &key).await > 500);
    assert!(suite::exists(&mut conn, "doc").await && !read.is_lost());
    read.unlock().await.unwrap();
    // A downgraded writer's two holds are both renewed: the hash, and the read hold's key.
    let c2 = c.clone();
    let (write, read) = within(
        10,
        tokio::spawn(async move {
            let rw = c2.rw_lock("doc");
            (
                rw.write().lock().await.unwrap(),
                rw.read().lock().await.unwrap(),
            )
        }),
    )
    .await
    .unwrap();
    let key = timeout_key("doc", read.owner(), 1);
    tokio::time::sleep(Duration::from_millis(3000)).await;
    assert!(pttl(&mut conn, &key).await > 500 && pttl(&mut conn, "doc").await > 500);
    assert!(!write.is_lost() && !read.is_lost());
    write.unlock().await.unwrap();
    read.unlock().await.unwrap();
    nothing_left(&mut conn, &[&peer]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn force_unlocks_follow_redissons_modes() {
    let server = RedisServer::start();
    let mut conn = server.conn().await;
    let c = client(&server, TTL).await;
    let peer = RedissonPeer::connect(server.url()).await;
    let seen = record(&server, "redisson_rwlock:{doc}").await;
    let rw = c.rw_lock("doc");
    let read = rw.read().lock().await.unwrap();
    assert_eq!(peer.try_read_lock("doc", 1, TTL_MS).await, None);
    assert!(
        !rw.write().force_unlock().await.unwrap(),
        "not write-locked"
    );
    assert!(rw.read().force_unlock().await.unwrap());
    assert!(all_keys(&mut conn).await.is_empty(), "timeout keys too");
    assert!(matches!(read.unlock().await, Err(Error::NotHeld { .. })));
    assert_eq!(peer.try_write_lock("doc", 2, TTL_MS).await, None);
    assert!(!rw.read().force_unlock().await.unwrap(), "not read-locked");
    assert!(rw.write().force_unlock().await.unwrap());
    // The whole lock's, in either mode.
    assert!(!rw.force_unlock().await.unwrap());
    assert_eq!(peer.try_write_lock("doc", 2, TTL_MS).await, None);
    assert!(rw.force_unlock().await.unwrap());
    // The read force unlock's `0`, the `0` of the release that found no `mode` (Redisson's
    // release does the same), the write force unlock's `1`, the whole lock's (write-locked).
    assert_eq!(payloads(&seen, 4).await, ["0", "0", "1", "1"]);
    // A named owner whose field would read as Redisson's writer field is refused.
    let named = rw.with_owner("x:write");
    match named.read().try_lock(Duration::ZERO, None).await {
        Err(Error::InvalidArgument { argument, .. }) => assert_eq!(argument, "owner"),
        other => panic!("expected InvalidArgument, got {:?}", other.map(|_| ())),
    }
    // And lockwise's holds of both sides give way to Java's forceUnlock.
    let write = rw.write().lock().await.unwrap();
    assert!(peer.write_force_unlock("doc").await);
    assert!(matches!(write.unlock().await, Err(Error::NotHeld { .. })));
    nothing_left(&mut conn, &[&peer]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn detached_holds_keep_redissons_fields_and_timeout_keys() {
    let server = RedisServer::start();
    let mut conn = server.conn().await;
    let c = client(&server, TTL).await;
    // The client outlives the task: the write guard leaves it.
    let (mut conn2, rw) = (conn.clone(), c.rw_lock("doc"));
    let (refused, mut write) = within(
        10,
        tokio::spawn(async move {
            let mut read = rw.read().lock().await.unwrap();
            let old = read.owner().to_string();
            read.detach().await.unwrap();
            let new = read.owner().to_string();
            assert_ne!(old, new);
            assert_eq!(
                fields(&mut conn2, "doc").await,
                expect(&[("mode", "read"), (&new, "1")])
            );
            assert!(get(&mut conn2, &timeout_key("doc", &old, 1))
                .await
                .is_none());
            let moved = timeout_key("doc", &new, 1);
            assert!(
                pttl(&mut conn2, &moved).await > 25_000,
                "moved with its TTL"
            );
            read.unlock().await.unwrap();
            let mut write = rw.write().lock().await.unwrap();
            write.detach().await.unwrap();
            assert!(write.owner().ends_with(":write"), "{}", write.owner());
            assert!(rw
                .write()
                .try_lock(Duration::ZERO, None)
                .await
                .unwrap_err()
                .is_timeout());
            let refused = rw.read().try_lock(Duration::ZERO, None).await.unwrap_err();
            (refused, write)
        }),
    )
    .await
    .unwrap();
    assert!(
        refused.is_timeout(),
        "the detached writer excludes its former task: {refused}"
    );
    // Detached again (from another task): still a writer field.
    write.detach().await.unwrap();
    let writer = write.owner().to_string();
    assert!(writer.ends_with(":write"), "{writer}");
    assert_eq!(
        fields(&mut conn, "doc").await,
        expect(&[("mode", "write"), (&writer, "1")])
    );
    write.unlock().await.unwrap();
    nothing_left(&mut conn, &[]).await;
}

/// A read hold lives by its own timeout key, and a release deletes the key of the owner's
/// top count: after a short-leased read, a long-leased re-entry and that re-entry's unlock,
/// what keeps the hash is the short lease's key. The short hold must be told lost when that
/// key runs out (not when the long lease would have), before another client's writer takes
/// the lock: the run's validity follows the keys that are left.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_read_run_is_valid_only_as_long_as_the_timeout_keys_it_has_left() {
    let server = RedisServer::start();
    let (c1, c2) = (client(&server, TTL).await, client(&server, TTL).await);
    let short = Duration::from_millis(400);
    suite::in_task(async move {
        let read = c1.rw_lock("keys-left").read();
        let g1 = read.lock_with_lease(short).await.unwrap();
        let taken = Instant::now();
        let lost = g1.lost();
        let g2 = read.lock_with_lease(Duration::from_secs(30)).await.unwrap();
        g2.unlock().await.unwrap();
        within(5, lost.cancelled()).await;
        let told = taken.elapsed();
        assert!(g1.is_lost());
        assert!(
            told < short + Duration::from_millis(500),
            "the short read hold was told lost {told:?} after it was taken (lease {short:?})"
        );
        // Its key is gone by now (or within a moment): a writer of another client gets in.
        let write = c2.rw_lock("keys-left").write();
        let w = within(10, write.lock()).await.unwrap();
        assert!(
            g1.is_lost(),
            "two owners: a writer holds while the reader believes"
        );
        w.unlock().await.unwrap();
        suite::kit::assert_not_held(g1.unlock().await, "keys-left");
    })
    .await;
}

/// An owner's read hold that ran out of lease leaves its count in the hash while another
/// client's reader keeps the hash alive. The owner's next read must get a hold that lives
/// by a key of its own: a grant stacked on the stale count would have its key (the top
/// count's) deleted when the stale count is settled away, and the hash then dies under a
/// reader that believes it holds. So such a grant is settled away with the stale count and
/// the read taken again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_read_after_an_expired_one_of_the_same_owner_lives_by_its_own_key() {
    let server = RedisServer::start();
    let (c1, c2, c3) = (
        client(&server, TTL).await,
        client(&server, TTL).await,
        client(&server, TTL).await,
    );
    let name = "stale-count";
    let keep = c2
        .rw_lock(name)
        .read()
        .lock_with_lease(Duration::from_secs(30))
        .await
        .unwrap();
    suite::in_task(async move {
        let read = c1.rw_lock(name).read();
        let old = read
            .lock_with_lease(Duration::from_millis(300))
            .await
            .unwrap();
        tokio::time::sleep(Duration::from_millis(700)).await;
        assert!(old.is_lost(), "the short read hold's lease ran out");
        let new = within(10, read.lock_with_lease(Duration::from_secs(30)))
            .await
            .unwrap();
        within(10, async {
            while read.hold_count().await.unwrap() != 1 {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        })
        .await;
        // The other reader leaves: the hash lives by the keys left, the new hold's.
        keep.unlock().await.unwrap();
        tokio::time::sleep(Duration::from_millis(500)).await;
        let write = c3.rw_lock(name).write();
        let taken = write.try_lock(Duration::ZERO, None).await;
        assert!(
            matches!(taken, Err(ref e) if e.is_timeout()),
            "a writer got in under a reader that believes it holds: {:?}",
            taken.map(|_| ())
        );
        assert!(!new.is_lost());
        new.unlock().await.unwrap();
        suite::kit::assert_not_held(old.unlock().await, name);
    })
    .await;
}

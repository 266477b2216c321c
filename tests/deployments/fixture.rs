//! Smoke tests of the local Redis Cluster and Sentinel fixtures (`lockwise_testkit::topology`):
//! the topologies come up, serve keys, fail over for real and tear down. lockwise itself is not
//! involved; these prove the ground the Cluster / Sentinel tests stand on.

use std::collections::HashSet;
use std::time::{Duration, Instant};

use crate::topology::{answers_ping, connect, ProcState, RedisCluster, RedisSentinel, Role};
use redis::Commands;

fn alive(pid: u32) -> bool {
    std::path::Path::new(&format!("/proc/{pid}")).exists()
        && !std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .unwrap_or_default()
            .contains(") Z ")
}

fn assert_full_coverage(cluster: &RedisCluster) {
    let map = cluster.slot_map();
    let mut next = 0u32;
    for &(a, b, port) in &map {
        assert_eq!(a as u32, next, "slot gap before {a}: {map:?}");
        assert!(b >= a, "bad range {a}-{b} on {port}");
        next = b as u32 + 1;
    }
    assert_eq!(next, 16384, "slots not all covered: {map:?}");
}

#[test]
fn cluster_comes_up_covers_all_slots_and_routes_keys() {
    let t0 = Instant::now();
    let cluster = RedisCluster::start(3, 1);
    eprintln!("cluster 3+3 up in {:?}", t0.elapsed());

    let nodes = cluster.nodes();
    assert_eq!(nodes.len(), 6);
    let masters: Vec<_> = nodes.iter().filter(|n| n.role == Role::Master).collect();
    let replicas: Vec<_> = nodes.iter().filter(|n| n.role == Role::Replica).collect();
    assert_eq!(masters.len(), 3, "{}", cluster.describe());
    assert_eq!(replicas.len(), 3, "{}", cluster.describe());
    for n in &nodes {
        assert_eq!(n.state, ProcState::Running);
        assert!(!n.failing, "{}", cluster.describe());
        assert!(alive(n.pid.unwrap()));
    }
    for m in &masters {
        assert!(!m.slots.is_empty());
        assert_eq!(
            cluster.replicas_of(m.port).len(),
            1,
            "{}",
            cluster.describe()
        );
    }
    assert_full_coverage(&cluster);
    for port in cluster.master_ports() {
        let info: String = redis::cmd("CLUSTER")
            .arg("INFO")
            .query(&mut connect(port))
            .unwrap();
        assert!(info.contains("cluster_state:ok"), "{info}");
        assert!(info.contains("cluster_slots_ok:16384"), "{info}");
    }

    // Keys written through a cluster-aware client land on the master that owns their slot.
    let mut cc = cluster.client().get_connection().unwrap();
    let mut slot_owners = HashSet::new();
    for i in 0..60 {
        let key = format!("smoke:{i}");
        let _: () = cc.set(&key, i).unwrap();
    }
    for i in 0..60 {
        let key = format!("smoke:{i}");
        let v: i64 = cc.get(&key).unwrap();
        assert_eq!(v, i);
        let slot = cluster.key_slot(&key);
        let owner = cluster.master_for_slot(slot);
        slot_owners.insert(owner);
        let direct: Option<i64> = connect(owner).get(&key).unwrap();
        assert_eq!(direct, Some(i), "{key} (slot {slot}) not on {owner}");
        // Any other master redirects.
        let other = *cluster
            .master_ports()
            .iter()
            .find(|&&p| p != owner)
            .unwrap();
        let err = connect(other).get::<_, Option<i64>>(&key).unwrap_err();
        assert_eq!(
            err.code(),
            Some("MOVED"),
            "{other} answered {err} for {key}"
        );
    }
    assert_eq!(slot_owners.len(), 3, "60 keys should hit every master");
    // A hash tag pins keys to one slot.
    assert_eq!(cluster.key_slot("{lock}:a"), cluster.key_slot("{lock}:b"));

    let pids: Vec<u32> = nodes.iter().map(|n| n.pid.unwrap()).collect();
    let t = Instant::now();
    drop(cc);
    drop(cluster);
    eprintln!("cluster teardown in {:?}", t.elapsed());
    for pid in pids {
        assert!(!alive(pid), "node pid {pid} survived drop");
    }
}

#[test]
fn cluster_failover_swaps_roles_and_keeps_data() {
    let t0 = Instant::now();
    let mut cluster = RedisCluster::start(3, 1);
    eprintln!("cluster 3+3 up in {:?}", t0.elapsed());

    let key = "{failover}:key";
    let slot = cluster.key_slot(key);
    let mut cc = cluster.client().get_connection().unwrap();
    let _: () = cc.set(key, "before").unwrap();
    let master = cluster.master_for_slot(slot);
    let replica = cluster.replicas_of(master)[0];

    // Manual failover: the replica catches up, then takes over the slots.
    let t = Instant::now();
    let old = cluster.failover(replica);
    eprintln!("CLUSTER FAILOVER done in {:?}", t.elapsed());
    assert_eq!(old, master);
    let nodes = cluster.nodes();
    let new_master = nodes.iter().find(|n| n.port == replica).unwrap();
    let demoted = nodes.iter().find(|n| n.port == master).unwrap();
    assert_eq!(new_master.role, Role::Master, "{}", cluster.describe());
    assert_eq!(demoted.role, Role::Replica, "{}", cluster.describe());
    assert_eq!(demoted.master_port, Some(replica), "{}", cluster.describe());
    assert_eq!(cluster.master_for_slot(slot), replica);
    assert_full_coverage(&cluster);

    let direct: Option<String> = connect(replica).get(key).unwrap();
    assert_eq!(direct.as_deref(), Some("before"));
    // The cluster client's slot map is stale; it follows MOVED.
    let via_client: String = cc.get(key).unwrap();
    assert_eq!(via_client, "before");
    let _: () = cc.set(key, "after").unwrap();
    let direct: Option<String> = connect(replica).get(key).unwrap();
    assert_eq!(direct.as_deref(), Some("after"));

    // SIGSTOP / SIGCONT: a paused node does not answer, a resumed one does.
    let other_master = *cluster
        .master_ports()
        .iter()
        .find(|&&p| p != replica)
        .unwrap();
    let other_replica = cluster.replicas_of(other_master)[0];
    assert!(answers_ping(other_replica, Duration::from_secs(1)));
    cluster.pause(other_replica);
    assert!(!answers_ping(other_replica, Duration::from_millis(300)));
    let paused = cluster.nodes();
    let paused = paused.iter().find(|n| n.port == other_replica).unwrap();
    assert_eq!(paused.state, ProcState::Paused);
    cluster.resume(other_replica);
    assert!(answers_ping(other_replica, Duration::from_secs(1)));

    // SIGKILL the new master: its replica (the demoted one) is promoted automatically.
    let t = Instant::now();
    cluster.kill(replica);
    cluster.wait_healthy(Duration::from_secs(20));
    eprintln!("automatic failover after SIGKILL in {:?}", t.elapsed());
    assert_eq!(
        cluster.master_for_slot(slot),
        master,
        "{}",
        cluster.describe()
    );
    let direct: Option<String> = connect(master).get(key).unwrap();
    assert_eq!(direct.as_deref(), Some("after"));
    let nodes = cluster.nodes();
    let killed = nodes.iter().find(|n| n.port == replica).unwrap();
    assert_eq!(killed.state, ProcState::Killed);
    assert!(killed.failing, "{}", cluster.describe());
}

#[test]
fn sentinel_fails_over_after_master_sigkill() {
    let t0 = Instant::now();
    let mut s = RedisSentinel::start();
    eprintln!("sentinel 1+1+3 up in {:?}", t0.elapsed());

    assert_eq!(s.sentinel_urls().len(), 3);
    assert_eq!(s.master_name(), "mymaster");
    let master = s.master_port();
    assert_eq!(master, s.server_ports()[0]);
    let replicas = s.replica_ports();
    assert_eq!(replicas.len(), 1);
    let replica = replicas[0];
    for url in s.sentinel_urls() {
        let mut c = redis::Client::open(url).unwrap().get_connection().unwrap();
        let addr: (String, u16) = redis::cmd("SENTINEL")
            .arg("get-master-addr-by-name")
            .arg("mymaster")
            .query(&mut c)
            .unwrap();
        assert_eq!(addr, ("127.0.0.1".to_string(), master));
    }

    let mut m = connect(master);
    let _: () = m.set("sentinel:key", "v1").unwrap();
    let acked: i64 = redis::cmd("WAIT").arg(1).arg(2000).query(&mut m).unwrap();
    assert_eq!(acked, 1, "replica did not acknowledge");

    // A paused replica acknowledges nothing (ground for replica-sync tests).
    let paused = s.pause_replica();
    assert_eq!(paused, replica);
    let _: () = m.set("sentinel:key", "v1").unwrap(); // WAIT counts acks of the latest write
    let acked: i64 = redis::cmd("WAIT").arg(1).arg(200).query(&mut m).unwrap();
    assert_eq!(acked, 0);
    s.resume(replica);
    s.wait_healthy(Duration::from_secs(20));
    let acked: i64 = redis::cmd("WAIT").arg(1).arg(2000).query(&mut m).unwrap();
    assert_eq!(acked, 1);

    let t = Instant::now();
    let old = s.kill_master();
    assert_eq!(old, master);
    let new_master = s.wait_for_failover(Duration::from_secs(25));
    let took = t.elapsed();
    eprintln!("sentinel failover after SIGKILL in {took:?}");
    assert_eq!(new_master, replica);
    assert_eq!(s.master_port(), replica);
    assert!(took < Duration::from_secs(20), "failover took {took:?}");

    let mut n = connect(new_master);
    let v: Option<String> = n.get("sentinel:key").unwrap();
    assert_eq!(v.as_deref(), Some("v1"));
    let _: () = n.set("sentinel:key", "v2").unwrap();
    let v: String = n.get("sentinel:key").unwrap();
    assert_eq!(v, "v2");
    assert!(s.replica_ports().is_empty());

    let pids: Vec<u32> = s
        .server_ports()
        .into_iter()
        .chain(s.sentinel_ports())
        .filter_map(|p| s.pid(p))
        .collect();
    assert_eq!(pids.len(), 4);
    drop(s);
    for pid in pids {
        assert!(!alive(pid), "pid {pid} survived drop");
    }
}

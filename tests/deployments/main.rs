//! lockwise on Redis Cluster and Sentinel, on real local topologies (`lockwise_testkit::topology`):
//! a 3-master + 3-replica cluster, and a master + replica + 3 sentinels. Faults are real:
//! CLUSTER FAILOVER, SIGKILL of the master, SIGSTOP of the replica.
//!
//! The failover scenarios record every hold in the checker's history (`lockwise_testkit::checker`)
//! and fail on overlapping holds or fencing tokens that do not rise.
//!
//! [`sentinel_partition`] cuts a Sentinel client off from every sentinel (a black-holing
//! proxy) while it still reaches the master, with and without a failover it cannot see.
//!
//! [`batching`] checks that calls batch per hash slot. [`cluster_at_most_once`] loses a script's
//! reply after the server ran it (DEBUG SLEEP + CLIENT KILL) and checks that nothing runs it
//! again (an unlock, a permit release, a count down), while MOVED and ASK redirects, which
//! prove a command did not run, are still followed. The fixtures themselves are
//! smoke-tested in [`fixture`]. [`redisson`] is the mixed fleet:
//! lockwise in Redisson's key layout beside a Redisson-protocol peer (standalone and Cluster).
//!
//! A missing `redis-server`, `redis-cli` or `redis-sentinel` fails these tests with an install
//! hint (`bash scripts/with-redis.sh cargo test` installs them).

use suite::checker;
use suite::topology;

mod batching;
mod cluster_at_most_once;
mod failover;
mod fair;
mod fixture;
mod observed;
mod overtake;
mod redisson;
mod sentinel_partition;
mod synchronizers;

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use suite::OrNone;

use checker::History;
use lockwise::{Client, Error};
use suite::RedisServer;
use topology::{connect, RedisCluster, RedisSentinel};

// ---------------------------------------------------------------------------------------------
// Helpers

async fn cluster_client(cluster: &RedisCluster, ns: &str, watchdog: Duration) -> Client {
    Client::cluster_builder(cluster.seed_urls())
        .namespace(ns)
        .watchdog_timeout(watchdog)
        .build()
        .await
        .expect("cluster client")
}

async fn sentinel_client(
    sentinel: &RedisSentinel,
    ns: &str,
    watchdog: Duration,
    sync: bool,
) -> Client {
    let mut b = Client::sentinel_builder(sentinel.sentinel_urls(), sentinel.master_name())
        .namespace(ns)
        .watchdog_timeout(watchdog);
    if sync {
        b = b.replica_sync(1, Duration::from_millis(200));
    }
    b.build().await.expect("sentinel client")
}

/// Keys under `ns` on the servers at `ports` (each with its PTTL).
fn keys_on(ports: &[u16], ns: &str) -> Vec<(u16, String, i64)> {
    let mut out = Vec::new();
    for &port in ports {
        let Ok(mut c) = topology::try_connect(port) else {
            continue;
        };
        let keys: Vec<String> = redis::cmd("KEYS")
            .arg(format!("{ns}:*"))
            .query(&mut c)
            .unwrap_or_default();
        for k in keys.into_iter().filter(|k| !suite::is_presence(k)) {
            let pttl: i64 = redis::cmd("PTTL").arg(&k).query(&mut c).unwrap_or(-2);
            if pttl != -2 {
                out.push((port, k, pttl));
            }
        }
    }
    out
}

/// Shard channels and plain channels under `ns` with subscribers, on the servers at `ports`.
fn channels_on(ports: &[u16], ns: &str) -> Vec<(u16, String)> {
    channels_of(ports, ns, &["SHARDCHANNELS", "CHANNELS"])
}

/// Channels under `ns` with subscribers on `ports`, by `PUBSUB <kind>` for each of `kinds`.
fn channels_of(ports: &[u16], ns: &str, kinds: &[&str]) -> Vec<(u16, String)> {
    let mut out = Vec::new();
    for &port in ports {
        let Ok(mut c) = topology::try_connect(port) else {
            continue;
        };
        for kind in kinds {
            let chans: Vec<String> = redis::cmd("PUBSUB")
                .arg(kind)
                .arg(format!("{ns}:*"))
                .query(&mut c)
                .unwrap_or_default();
            out.extend(chans.into_iter().map(|ch| (port, ch)));
        }
    }
    out
}

/// Waits (bounded) until no key but fencing counters and no channel under `ns` is left on
/// `ports`; panics with what is left.
async fn assert_quiescent(ports: &[u16], ns: &str, timeout: Duration) {
    let deadline = Instant::now() + timeout;
    loop {
        let keys: Vec<_> = keys_on(ports, ns)
            .into_iter()
            .filter(|(_, k, _)| !k.contains(":fence:"))
            .collect();
        let chans = channels_on(ports, ns);
        if keys.is_empty() && chans.is_empty() {
            return;
        }
        if Instant::now() >= deadline {
            panic!(
                "not quiescent: {} keys left (first {:?}), channels {:?}",
                keys.len(),
                keys.first(),
                chans.iter().take(5).collect::<Vec<_>>()
            );
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Script calls (EVAL + EVALSHA) served so far by the servers at `ports`.
fn script_calls(ports: &[u16]) -> u64 {
    ports
        .iter()
        .map(|&p| {
            let info: String = redis::cmd("INFO")
                .arg("commandstats")
                .query(&mut connect(p))
                .unwrap();
            info.lines()
                .filter(|l| l.starts_with("cmdstat_evalsha:") || l.starts_with("cmdstat_eval:"))
                .filter_map(|l| {
                    l.split("calls=")
                        .nth(1)?
                        .split(',')
                        .next()?
                        .parse::<u64>()
                        .ok()
                })
                .sum::<u64>()
        })
        .sum()
}

fn is_crossslot(e: &Error) -> bool {
    matches!(e, Error::Redis(r) if r.code() == Some("CROSSSLOT"))
        || e.to_string().contains("CROSSSLOT")
}

/// Counts of what contenders saw.
#[derive(Default)]
struct Seen {
    acquired: AtomicUsize,
    retryable: AtomicUsize,
    crossslot: AtomicUsize,
    fatal: std::sync::Mutex<Vec<String>>,
}

impl Seen {
    fn error(&self, what: &str, e: &Error) {
        if is_crossslot(e) {
            self.crossslot.fetch_add(1, Ordering::SeqCst);
        }
        if e.is_retryable() {
            self.retryable.fetch_add(1, Ordering::SeqCst);
        } else {
            self.fatal.lock().unwrap().push(format!("{what}: {e}"));
        }
    }
}

/// A contender: fenced try_lock (bounded wait), hold a few ms, unlock; until `until`. Every
/// acquisition goes into `hist`; returns the times (since `t0`) it acquired.
async fn contend(
    client: Client,
    who: String,
    name: String,
    until: Instant,
    hist: Arc<History>,
    seen: Arc<Seen>,
) -> Vec<Instant> {
    let lock = client.fenced_lock(&name);
    let mut acquired_at = Vec::new();
    while Instant::now() < until {
        let id = hist.invoke(&who, &name);
        let g = match lock.try_lock(Duration::from_secs(2), None).await.or_none() {
            Ok(Some(g)) => g,
            Ok(None) => {
                hist.fail(&id, "timeout");
                continue;
            }
            Err(e) => {
                hist.unknown(&id, &e.to_string().replace('\n', " "));
                seen.error("lock", &e);
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        hist.ok(&id, g.owner(), Some(g.token()), None);
        acquired_at.push(Instant::now());
        seen.acquired.fetch_add(1, Ordering::SeqCst);
        let lost = g.lost();
        tokio::select! {
            _ = tokio::time::sleep(Duration::from_millis(rand::random_range(2..=10))) => {}
            _ = lost.cancelled() => {}
        }
        hist.release_at(&id, checker::now_ns(), "unlock");
        if let Err(e) = g.unlock().await {
            if !e.is_not_held() {
                seen.error("unlock", &e);
            }
        }
        // Think time: an unfair lock lets a releasing task re-take it at once (barging),
        // which would measure starvation, not the failover.
        tokio::time::sleep(Duration::from_millis(rand::random_range(5..=20))).await;
    }
    acquired_at
}

/// Unlocks `g`, retrying while a failover makes the server unreachable.
async fn unlock_retrying(lock: &lockwise::FencedLock, g: lockwise::FencedLockGuard) {
    let lost = g.lost();
    match g.unlock().await {
        Ok(()) => {}
        Err(e) if e.is_not_held() => assert!(lost.is_cancelled(), "NotHeld without lost()"),
        Err(e) => {
            // The unlock's reply was lost in the failover: the lock may still be held by us.
            // force_unlock is not ours to use; the watchdog stopped, so it expires with its TTL.
            eprintln!(
                "unlock of {} failed during failover ({e}); it expires with its TTL",
                lock.name()
            );
        }
    }
}

/// When a guard's `lost()` fired ([`checker::now_ns`]), watched by a task from the moment
/// the hold starts. A holder that is told its lock is lost stops relying on it there, so its
/// recorded hold ends there (the signal fires a drift margin before the key can expire).
#[derive(Clone)]
struct LostAt(Arc<std::sync::Mutex<Option<u64>>>);

impl LostAt {
    fn watch(lost: tokio_util::sync::CancellationToken) -> LostAt {
        let at = LostAt(Arc::new(std::sync::Mutex::new(None)));
        let seen = at.clone();
        tokio::spawn(async move {
            lost.cancelled().await;
            *seen.0.lock().unwrap() = Some(checker::now_ns());
        });
        at
    }

    /// Records the end of the hold `id`: when `lost()` fired if it did, else now (the
    /// holder is about to send its unlock).
    fn record_release(&self, hist: &History, id: &checker::AcqId) {
        match *self.0.lock().unwrap() {
            Some(at) => hist.release_at(id, at, "lost-seen"),
            None => hist.release_at(id, checker::now_ns(), "unlock"),
        }
    }
}

/// A failover scenario: a holder (on the first client) takes `name` before the fault and
/// keeps it through; three contenders per client contend until `until`, recorded in the
/// checker's history.
struct Scenario {
    hist: Arc<History>,
    seen: Arc<Seen>,
    lock: lockwise::FencedLock,
    held: Option<(checker::AcqId, lockwise::FencedLockGuard)>,
    /// When the holder's `lost()` fired: its hold ends there.
    lost_at: LostAt,
    tasks: Vec<tokio::task::JoinHandle<Vec<Instant>>>,
}

impl Scenario {
    async fn start(clients: [&Client; 2], name: &str, run_for: Duration) -> Scenario {
        let hist = Arc::new(History::new());
        let seen = Arc::new(Seen::default());
        let lock = clients[0].fenced_lock(name);
        let hid = hist.invoke("holder", name);
        let held = lock.lock().await.unwrap();
        hist.ok(&hid, held.owner(), Some(held.token()), None);
        let lost_at = LostAt::watch(held.lost());
        let until = Instant::now() + run_for;
        let mut tasks = Vec::new();
        for (ci, client) in clients.into_iter().enumerate() {
            for t in 0..3 {
                tasks.push(tokio::spawn(contend(
                    client.clone(),
                    format!("c{ci}/t{t}"),
                    name.to_string(),
                    until,
                    hist.clone(),
                    seen.clone(),
                )));
            }
        }
        Scenario {
            hist,
            seen,
            lock,
            held: Some((hid, held)),
            lost_at,
            tasks,
        }
    }

    /// Waits (at most 10 s) until the holder's client reaches the lock again after the fault.
    async fn wait_until_holder_client_answers(&self) {
        let follow = Instant::now();
        while self.lock.is_locked().await.is_err() {
            assert!(
                follow.elapsed() < Duration::from_secs(10),
                "client did not follow"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// The holder lets go (after the fault); returns when. A holder told by `lost()` stopped
    /// relying on the lock when it was told.
    async fn release_holder(&mut self) -> Instant {
        let (hid, held) = self.held.take().expect("released once");
        let lost = held.is_lost();
        self.lost_at.record_release(&self.hist, &hid);
        let released_at = Instant::now();
        unlock_retrying(&self.lock, held).await;
        eprintln!("holder's lock lost across the fault: {lost}");
        released_at
    }

    /// Joins the contenders; each must have acquired within `bound` of the holder's release.
    /// No CROSSSLOT, no non-retryable error, a clean history.
    async fn finish(self, released_at: Instant, bound: Duration) {
        let mut first_after = Vec::new();
        for t in self.tasks {
            let times = t.await.unwrap();
            let first = times.into_iter().find(|t| *t >= released_at);
            first_after.push(first.map(|t| t - released_at));
        }
        eprintln!(
            "first acquisition after the release, per contender: {first_after:?}; acquired {}, \
             retryable errors {}",
            self.seen.acquired.load(Ordering::SeqCst),
            self.seen.retryable.load(Ordering::SeqCst)
        );
        assert_eq!(
            self.seen.crossslot.load(Ordering::SeqCst),
            0,
            "CROSSSLOT errors"
        );
        let fatal = self.seen.fatal.lock().unwrap().clone();
        assert!(fatal.is_empty(), "{fatal:?}");
        for (i, f) in first_after.iter().enumerate() {
            let f = f.unwrap_or_else(|| panic!("contender {i} never acquired after the fault"));
            assert!(
                f <= bound,
                "contender {i} first acquired {f:?} after the release"
            );
        }
        checker::assert_clean(&self.hist.check());
    }
}

// ---------------------------------------------------------------------------------------------
// Cluster

/// 1,000 locks spread over all slots and masters: a holder client takes them all, waiters in
/// another client wait on each, the holder keeps them past the watchdog timeout (renewed per
/// slot) and releases; every waiter is woken by sharded pub/sub (the TTL is far away), no
/// holds overlap, no CROSSSLOT, nothing is left behind.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_1000_locks_across_slots_woken_by_sharded_pubsub() {
    suite::init_tracing();
    let cluster = tokio::task::block_in_place(|| RedisCluster::start(3, 1));
    let ns = suite::unique_ns("cl1000");
    let watchdog = Duration::from_secs(3);
    let holder = cluster_client(&cluster, &ns, watchdog).await;
    let waiter = cluster_client(&cluster, &ns, watchdog).await;
    const N: usize = 1000;
    let names: Vec<String> = (0..N).map(|i| format!("job:{i}")).collect();

    // The locks' keys cover every master and most slots.
    let slot_of: Vec<u16> = names
        .iter()
        .map(|n| cluster.key_slot(holder.lock(n).key()))
        .collect();
    let masters: HashSet<u16> = slot_of
        .iter()
        .map(|s| cluster.master_for_slot(*s))
        .collect();
    let distinct: HashSet<u16> = slot_of.iter().copied().collect();
    assert_eq!(masters.len(), 3, "locks on {masters:?}");
    eprintln!(
        "{N} locks on {} slots, {} masters",
        distinct.len(),
        masters.len()
    );

    let hist = Arc::new(History::new());
    let guards: Vec<_> = futures::future::join_all(names.iter().map(|n| {
        let (lock, hist) = (holder.lock(n), hist.clone());
        let n = n.clone();
        tokio::spawn(async move {
            let id = hist.invoke("holder", &n);
            let g = lock.lock().await.expect("holder lock");
            hist.ok(&id, g.owner(), None, None);
            (id, g)
        })
    }))
    .await
    .into_iter()
    .map(|r| r.unwrap())
    .collect();

    let woken_at = Arc::new(std::sync::Mutex::new(HashMap::new()));
    let waiters: Vec<_> = names
        .iter()
        .map(|n| {
            let (lock, hist, n) = (waiter.lock(n), hist.clone(), n.clone());
            let woken_at = woken_at.clone();
            tokio::spawn(async move {
                let id = hist.invoke("waiter", &n);
                let g = lock
                    .try_lock(Duration::from_secs(60), None)
                    .await
                    .or_none()
                    .expect("waiter: no error")
                    .expect("waiter: acquired within 60 s");
                hist.ok(&id, g.owner(), None, None);
                woken_at.lock().unwrap().insert(n, Instant::now());
                hist.release(&id);
                g.unlock().await.expect("waiter unlock");
            })
        })
        .collect();
    // Every waiter is subscribed to its lock's shard channel.
    let ports = cluster.master_ports();
    let t0 = Instant::now();
    while channels_on(&ports, &ns).len() < N {
        assert!(
            t0.elapsed() < Duration::from_secs(30),
            "only {} of {N} shard channels subscribed",
            channels_on(&ports, &ns).len()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let plain = channels_of(&ports, &ns, &["CHANNELS"]);
    assert!(
        plain.is_empty(),
        "waiters use sharded channels, not plain ones: {plain:?}"
    );

    // Held past the watchdog timeout: renewals (batched per slot) keep all of them.
    let before = script_calls(&ports);
    let hold = watchdog * 2;
    tokio::time::sleep(hold).await;
    let periods = hold.as_secs_f64() / (watchdog.as_secs_f64() / 3.0);
    eprintln!(
        "{:.0} script calls per period (renewals, and waiters re-checking at the holder's TTL) \
         for {N} locks on {} slots",
        (script_calls(&ports) - before) as f64 / periods,
        distinct.len()
    );
    let lost = guards.iter().filter(|(_, g)| g.is_lost()).count();
    assert_eq!(lost, 0, "locks lost while the watchdog renews them");
    let ttls = keys_on(&ports, &ns);
    assert!(
        ttls.iter().all(|(_, _, pttl)| *pttl > 0),
        "every key has a TTL"
    );

    // Release all; each waiter is woken through its shard channel.
    let mut released_at = HashMap::new();
    for ((id, g), name) in guards.into_iter().zip(&names) {
        hist.release(&id);
        released_at.insert(name.clone(), Instant::now());
        g.unlock().await.expect("holder unlock");
    }
    for w in waiters {
        w.await.unwrap();
    }
    let woken = std::mem::take(&mut *woken_at.lock().unwrap());
    let mut lat: Vec<Duration> = woken
        .iter()
        .map(|(n, t)| t.saturating_duration_since(released_at[n]))
        .collect();
    lat.sort();
    eprintln!(
        "{N} waiters acquired after their lock's release: p50 {:?}, max {:?} (TTL {watchdog:?})",
        lat[lat.len() / 2],
        lat[lat.len() - 1]
    );
    assert_eq!(woken.len(), N);
    assert!(
        lat[lat.len() - 1] < watchdog,
        "a waiter waited for the TTL instead of the unlock message"
    );
    checker::assert_clean(&hist.check());
    assert_quiescent(&ports, &ns, Duration::from_secs(10)).await;
}

/// CLUSTER FAILOVER of the master that holds a lock's slot, while the lock is held and
/// contenders wait: every contender acquires within about 2 x TTL of the release, no holds
/// overlap, fencing tokens keep rising, no CROSSSLOT error.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_failover_with_waiters_checked() {
    suite::init_tracing();
    let cluster = Arc::new(tokio::task::block_in_place(|| RedisCluster::start(3, 1)));
    let ns = suite::unique_ns("clfo");
    let ttl = Duration::from_secs(2);
    let a = cluster_client(&cluster, &ns, ttl).await;
    let b = cluster_client(&cluster, &ns, ttl).await;
    let slot = cluster.key_slot(a.fenced_lock("hot").key());
    let master = cluster.master_for_slot(slot);
    let replica = cluster.replicas_of(master)[0];

    let mut scenario = Scenario::start([&a, &b], "hot", Duration::from_secs(14)).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let c = cluster.clone();
    let old = tokio::task::spawn_blocking(move || c.failover(replica))
        .await
        .unwrap();
    assert_eq!(old, master);
    assert_eq!(cluster.master_for_slot(slot), replica, "slot moved");
    tokio::time::sleep(Duration::from_millis(200)).await;
    let released_at = scenario.release_holder().await;
    scenario
        .finish(released_at, ttl * 2 + Duration::from_secs(1))
        .await;
    assert_quiescent(&cluster.master_ports(), &ns, Duration::from_secs(10)).await;
}

/// SIGKILL of the master that holds a lock's slot, while the lock is held and contenders
/// wait: the cluster promotes the replica on its own (node timeout 1 s), the clients follow
/// the slot, every contender acquires, the history is clean.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_master_sigkill_with_waiters_checked() {
    suite::init_tracing();
    let mut cluster = tokio::task::block_in_place(|| RedisCluster::start(3, 1));
    let ns = suite::unique_ns("clkill");
    let ttl = Duration::from_secs(3);
    let a = cluster_client(&cluster, &ns, ttl).await;
    let b = cluster_client(&cluster, &ns, ttl).await;
    let slot = cluster.key_slot(a.fenced_lock("hot").key());
    let master = cluster.master_for_slot(slot);
    let replica = cluster.replicas_of(master)[0];

    let mut scenario = Scenario::start([&a, &b], "hot", Duration::from_secs(20)).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let t_kill = Instant::now();
    tokio::task::block_in_place(|| {
        cluster.kill(master);
        cluster.wait_healthy(Duration::from_secs(30));
    });
    assert_eq!(cluster.master_for_slot(slot), replica, "replica promoted");
    eprintln!(
        "cluster failed {master} over to {replica} in {:?}",
        t_kill.elapsed()
    );
    scenario.wait_until_holder_client_answers().await;
    let released_at = scenario.release_holder().await;
    scenario.finish(released_at, ttl * 2).await;
    assert_quiescent(&cluster.master_ports(), &ns, Duration::from_secs(10)).await;
}

/// 1,000 watchdog locks in 10 hash tags (10 slots): renewed in per-slot batches (about 10
/// calls per period), then held across a CLUSTER FAILOVER: each is kept alive (renewed on
/// the new master) or reported lost; a kept one unlocks fine.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_renewals_survive_failover() {
    suite::init_tracing();
    let cluster = Arc::new(tokio::task::block_in_place(|| RedisCluster::start(3, 1)));
    let ns = suite::unique_ns("clren");
    let watchdog = Duration::from_secs(3);
    let client = cluster_client(&cluster, &ns, watchdog).await;
    let guards: Vec<_> = futures::future::join_all((0..1000).map(|i| {
        // Names with their own {tag} keep it: 10 tenants, 10 slots.
        let lock = client.lock(format!("{{tenant{}}}:r:{i}", i % 10));
        tokio::spawn(async move { lock.lock().await.expect("lock") })
    }))
    .await
    .into_iter()
    .map(|r| r.unwrap())
    .collect();
    let ports = cluster.master_ports();
    let before = script_calls(&ports);
    tokio::time::sleep(watchdog * 2).await; // 6 periods
    let per_period = (script_calls(&ports) - before) as f64 / 6.0;
    eprintln!("1000 locks in 10 slots: {per_period:.1} renew calls per period");
    assert!(
        per_period <= 20.0,
        "renewals are batched per slot: {per_period} calls per period for 10 slots"
    );
    let master = cluster.master_ports()[0];
    let replica = cluster.replicas_of(master)[0];
    let c = cluster.clone();
    tokio::task::spawn_blocking(move || c.failover(replica))
        .await
        .unwrap();
    // Two full watchdog timeouts after the failover.
    tokio::time::sleep(watchdog * 2).await;
    let lost = guards.iter().filter(|g| g.is_lost()).count();
    let mut unlocked = 0;
    for g in guards {
        let was_lost = g.is_lost();
        match g.unlock().await {
            Ok(()) => unlocked += 1,
            Err(e) if e.is_not_held() => assert!(was_lost, "NotHeld but not reported lost"),
            Err(e) => panic!("unlock: {e}"),
        }
    }
    eprintln!("across a failover: {unlocked} kept, {lost} reported lost");
    assert_eq!(unlocked + lost, 1000);
    assert_eq!(lost, 0, "a manual failover loses no acknowledged write");
    assert_quiescent(&cluster.master_ports(), &ns, Duration::from_secs(10)).await;
}

// ---------------------------------------------------------------------------------------------
// Sentinel

/// SIGKILL the master while a lock is held and contenders wait: the clients follow the new
/// master (commands and subscriptions), every contender acquires, no holds overlap and
/// fencing tokens keep rising. No replica sync here: with one replica, the failover leaves
/// none, and replica sync would (rightly) fail every lock closed; the holder's lock was
/// replicated long before the kill, and nobody can acquire while it is held, so the
/// asynchronous-replication race has no window in this scenario.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sentinel_master_sigkill_with_waiters_checked() {
    suite::init_tracing();
    let mut sentinel = tokio::task::block_in_place(RedisSentinel::start);
    let ns = suite::unique_ns("sfo");
    let ttl = Duration::from_secs(5);
    let a = sentinel_client(&sentinel, &ns, ttl, false).await;
    let b = sentinel_client(&sentinel, &ns, ttl, false).await;
    let mut scenario = Scenario::start([&a, &b], "hot", Duration::from_secs(20)).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let killed = tokio::task::block_in_place(|| sentinel.kill_master());
    let t_kill = Instant::now();
    let new_master =
        tokio::task::block_in_place(|| sentinel.wait_for_failover(Duration::from_secs(30)));
    eprintln!(
        "sentinels moved the master {killed} -> {new_master} in {:?}",
        t_kill.elapsed()
    );
    // The holder's client follows: the next unlock reaches the new master.
    scenario.wait_until_holder_client_answers().await;
    eprintln!(
        "client answered again {:?} after the kill",
        t_kill.elapsed()
    );
    let released_at = scenario.release_holder().await;
    scenario.finish(released_at, ttl * 2).await;
    let live: Vec<u16> = vec![new_master];
    assert_quiescent(&live, &ns, Duration::from_secs(10)).await;
}

/// The same SIGKILL failover with RESP2 clients (`force_resp2`): their dedicated pub/sub
/// connections move to the new master, the channels in use are subscribed there again, and
/// every contender acquires without overlapping holds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sentinel_resp2_master_sigkill_with_waiters_checked() {
    suite::init_tracing();
    let mut sentinel = tokio::task::block_in_place(RedisSentinel::start);
    let ns = suite::unique_ns("sfo2");
    let ttl = Duration::from_secs(5);
    let resp2 = || async {
        Client::sentinel_builder(sentinel.sentinel_urls(), sentinel.master_name())
            .namespace(&ns)
            .watchdog_timeout(ttl)
            .force_resp2(true)
            .build()
            .await
            .expect("RESP2 sentinel client")
    };
    let (a, b) = (resp2().await, resp2().await);
    let mut scenario = Scenario::start([&a, &b], "hot", Duration::from_secs(20)).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    tokio::task::block_in_place(|| sentinel.kill_master());
    let new_master =
        tokio::task::block_in_place(|| sentinel.wait_for_failover(Duration::from_secs(30)));
    scenario.wait_until_holder_client_answers().await;
    let released_at = scenario.release_holder().await;
    scenario.finish(released_at, ttl * 2).await;
    assert_quiescent(&[new_master], &ns, Duration::from_secs(10)).await;
}

/// A forced failover (`SENTINEL FAILOVER`) that the client cannot hear about: the sentinel it
/// watches for `+switch-master` is paused and its periodic check is an hour away (the
/// watchdog timeout is long enough not to bound the trust window below that). The old
/// master is demoted to a replica, so the client's next lock gets `READONLY`: that reply alone
/// makes it ask the sentinels, move to the new master and send the lock there once more. The
/// caller sees a plain success, the hold is on the new master, and the client's connections
/// follow.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sentinel_readonly_reply_moves_the_client() {
    suite::init_tracing();
    let mut sentinel = tokio::task::block_in_place(RedisSentinel::start);
    let ns = suite::unique_ns("sro");
    let client = Client::sentinel_builder(sentinel.sentinel_urls(), sentinel.master_name())
        .namespace(&ns)
        .sentinel_check_interval(Duration::from_secs(3600))
        .watchdog_timeout(Duration::from_secs(6 * 3600))
        .build()
        .await
        .expect("sentinel client");
    let lock = client.lock("ro");
    lock.lock().await.unwrap().unlock().await.unwrap();
    let old = sentinel.master_port();
    let watched = sentinel.sentinel_ports()[0];
    let new = tokio::task::block_in_place(|| {
        sentinel.pause(watched);
        let other = sentinel.sentinel_ports()[1];
        let _: String = redis::cmd("SENTINEL")
            .arg("FAILOVER")
            .arg(sentinel.master_name())
            .query(&mut topology::connect(other))
            .expect("SENTINEL FAILOVER");
        let new = sentinel.wait_for_failover(Duration::from_secs(30));
        sentinel.wait_replica_of(old, new, Duration::from_secs(30));
        new
    });
    // The client still talks to the demoted master: it answers READONLY to writes.
    let started = Instant::now();
    let g = lock
        .lock()
        .await
        .expect("the lock is taken on the new master");
    eprintln!(
        "lock after the unannounced failover {old} -> {new} took {:?}",
        started.elapsed()
    );
    let on_new: Option<String> = redis::cmd("HGET")
        .arg(lock.key())
        .arg(g.owner())
        .query(&mut topology::connect(new))
        .unwrap();
    assert_eq!(
        on_new.as_deref(),
        Some("1"),
        "the hold is on the new master"
    );
    g.unlock().await.expect("unlock on the new master");
    assert!(
        started.elapsed() < Duration::from_secs(60),
        "moved by the READONLY reply, not by a periodic check"
    );
    tokio::task::block_in_place(|| sentinel.resume(watched));
    assert_quiescent(&[new], &ns, Duration::from_secs(10)).await;
}

/// Replica sync on and the replica stopped: a lock fails closed with the typed error and
/// leaves nothing behind; once the replica is back, locking works again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sentinel_replica_sync_fails_closed_without_replica() {
    suite::init_tracing();
    let mut sentinel = tokio::task::block_in_place(RedisSentinel::start);
    let ns = suite::unique_ns("ssync");
    let client = sentinel_client(&sentinel, &ns, Duration::from_secs(5), true).await;
    let lock = client.lock("sync");
    let g = lock.lock().await.expect("replicated lock");
    g.unlock().await.unwrap();

    let replica = tokio::task::block_in_place(|| sentinel.pause_replica());
    let t = Instant::now();
    let err = lock.lock().await.expect_err("fails closed");
    eprintln!("failed closed in {:?}: {err}", t.elapsed());
    assert!(
        matches!(
            err,
            Error::ReplicaSync {
                acked: 0,
                required: 1
            }
        ),
        "{err:?}"
    );
    assert!(err.is_replica_sync() && err.is_retryable());
    assert!(!lock.is_locked().await.unwrap(), "the hold was released");
    // Re-entry is a lock write too: a held lock's re-entry fails closed as well, and leaves
    // the outer hold as it was.
    tokio::task::block_in_place(|| sentinel.resume(replica));
    let outer = lock.lock().await.expect("replica back");
    tokio::task::block_in_place(|| sentinel.pause(replica));
    let err = lock.lock().await.expect_err("re-entry fails closed");
    assert!(err.is_replica_sync(), "{err:?}");
    assert_eq!(lock.hold_count().await.unwrap(), 1, "outer hold kept");
    tokio::task::block_in_place(|| sentinel.resume(replica));
    outer.unlock().await.unwrap();
    let master = sentinel.master_port();
    assert_quiescent(&[master], &ns, Duration::from_secs(5)).await;
}

// ---------------------------------------------------------------------------------------------
// Standalone and bad settings

/// Replica sync on a server without replicas fails closed every time, leaving no key; a
/// server that refuses WAIT is reported at connect and the client runs without replica sync.
#[tokio::test]
async fn replica_sync_on_standalone() {
    let server = RedisServer::start();
    let ns = suite::unique_ns("sync1");
    let client = Client::builder(server.url())
        .namespace(&ns)
        .replica_sync(1, Duration::from_millis(20))
        .build()
        .await
        .unwrap();
    for lock in [client.lock("a"), client.lock("b")] {
        let err = lock.lock().await.expect_err("no replica");
        assert!(err.is_replica_sync(), "{err:?}");
        assert!(err.to_string().contains("0 of 1"), "{err}");
    }
    let err = client.fair_lock("f").lock().await.expect_err("no replica");
    assert!(err.is_replica_sync(), "{err:?}");
    // A release hands a fair lock to the head of its queue; a head whose client waits for
    // replicas does not take it on the message but through its lock script, which waits for
    // them: here none, so it fails closed and gives the lock back.
    let plain = Client::builder(server.url())
        .namespace(&ns)
        .build()
        .await
        .unwrap();
    let holder = plain.fair_lock("h").lock().await.unwrap();
    let waiter = {
        let lock = client.fair_lock("h");
        tokio::spawn(async move { lock.lock().await })
    };
    let queued = suite::eventually(Duration::from_secs(5), || async {
        plain.fair_lock("h").queue_len().await.unwrap() == 1
    })
    .await;
    assert!(queued, "the waiter never queued");
    tokio::time::sleep(Duration::from_millis(200)).await;
    holder.unlock().await.unwrap();
    let err = tokio::time::timeout(Duration::from_secs(10), waiter)
        .await
        .expect("the head answers")
        .unwrap()
        .expect_err("no replica");
    assert!(err.is_replica_sync(), "{err:?}");
    assert!(
        plain.fair_lock("h").lock().await.is_ok(),
        "the lock was given back"
    );
    let err = client
        .fenced_lock("t")
        .lock()
        .await
        .expect_err("no replica");
    assert!(err.is_replica_sync(), "{err:?}");
    let mut conn = server.conn().await;
    let left: Vec<(String, i64)> = suite::keys_with_pttl(&mut conn)
        .await
        .into_iter()
        .filter(|(k, _)| !k.contains(":fence:") && k.starts_with(&ns))
        .collect();
    assert!(left.is_empty(), "{left:?}");
    assert!(suite::keys_with_pttl(&mut conn)
        .await
        .iter()
        .all(|(k, pttl)| *pttl > 0 || k.contains(":fence:")));

    // WAIT renamed away: the client warns once and locks without replica sync.
    let no_wait = RedisServer::start_with(&["--rename-command", "WAIT", ""]);
    let client = Client::builder(no_wait.url())
        .namespace(&ns)
        .replica_sync(1, Duration::from_millis(20))
        .build()
        .await
        .unwrap();
    let g = client.lock("a").lock().await.expect("runs without WAIT");
    g.unlock().await.unwrap();
}

/// Deployment settings are checked before anything is sent.
#[tokio::test]
async fn bad_deployment_settings_are_typed_errors() {
    let invalid = |r: Result<Client, Error>, arg: &str| match r {
        Err(Error::InvalidArgument { argument, .. }) => assert_eq!(argument, arg),
        other => panic!("expected InvalidArgument({arg}), got {other:?}"),
    };
    invalid(
        Client::cluster_builder(Vec::<String>::new()).build().await,
        "cluster seeds",
    );
    invalid(Client::cluster_builder(["not a url"]).build().await, "url");
    invalid(
        Client::sentinel_builder(["redis://127.0.0.1:1/"], "")
            .build()
            .await,
        "master_name",
    );
    invalid(
        Client::sentinel_builder(Vec::<String>::new(), "m")
            .build()
            .await,
        "sentinels",
    );
    invalid(
        Client::builder("redis://127.0.0.1:1/")
            .master_password("x")
            .build()
            .await,
        "master_password",
    );
    invalid(
        Client::builder("redis://127.0.0.1:1/")
            .replica_sync(0, Duration::from_millis(10))
            .build()
            .await,
        "replica_sync",
    );
    invalid(
        Client::builder("redis://127.0.0.1:1/")
            .replica_sync(1, Duration::from_secs(5))
            .build()
            .await,
        "replica_sync",
    );
    // Unreachable sentinels: a Redis error within the connect timeout, not a hang.
    let t = Instant::now();
    let r = Client::sentinel_builder(["redis://127.0.0.1:1/"], "m")
        .connect_timeout(Duration::from_millis(300))
        .build()
        .await;
    assert!(matches!(r, Err(Error::Redis(_))), "{r:?}");
    assert!(t.elapsed() < Duration::from_secs(3));
    // The builder's Debug never shows a password.
    let b = Client::sentinel_builder(["redis://:secret@127.0.0.1:1/"], "m").master_password("pw");
    let shown = format!("{b:?}");
    assert!(
        !shown.contains("secret") && !shown.contains("pw\""),
        "{shown}"
    );
}

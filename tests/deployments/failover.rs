//! Failovers that every client follows, with clients in several processes: a Sentinel master
//! stalled past down-after (while some processes are paused and others cannot hear the
//! announcement) and then killed. Every process must end up on the new master within a
//! bound, the checker must find no overlapping holds and rising tokens, and callers must see
//! few errors (no READONLY storm).

use std::time::{Duration, Instant};
use suite::OrNone;

use super::topology::RedisSentinel;
use super::{assert_quiescent, checker};
use checker::History;
use suite::child::ChildProc;

/// Processes, tasks per process and locks.
const PROCESSES: usize = 5;
const TASKS: usize = 3;
const LOCKS: usize = 3;

/// Starts one failover worker per entry of `watch_first`: the index of the sentinel it
/// lists first (and so watches for `+switch-master`).
fn spawn_workers(sentinel: &RedisSentinel, ns: &str, watch_first: &[usize]) -> Vec<ChildProc> {
    let urls = sentinel.sentinel_urls();
    watch_first
        .iter()
        .enumerate()
        .map(|(i, &first)| {
            let mut order = urls.clone();
            order.rotate_left(first);
            ChildProc::spawn(
                "failover-worker",
                &order.join(","),
                ns,
                &format!("p{i}"),
                &[
                    ("LOCKWISE_FP_MASTER", sentinel.master_name().to_string()),
                    ("LOCKWISE_FP_TASKS", TASKS.to_string()),
                    ("LOCKWISE_FP_LOCKS", LOCKS.to_string()),
                ],
            )
        })
        .collect()
}

/// Whether a process talks to the master at `new`: a command and a subscription connection
/// at least. (A connection to a *stalled* old master may linger after the switch: redis-rs
/// closes a connection only once the replies in flight on it arrived, which is when that
/// server resumes; nothing new is sent on it.)
fn on_master(child: &ChildProc, new: u16) -> bool {
    child.peer_ports().iter().filter(|&&p| p == new).count() >= 2
}

/// Processes of `children` that still have a connection to the server at `port`.
fn still_on(children: &[ChildProc], port: u16) -> Vec<(usize, Vec<u16>)> {
    children
        .iter()
        .enumerate()
        .map(|(i, c)| (i, c.peer_ports()))
        .filter(|(_, peers)| peers.contains(&port))
        .collect()
}

/// For each of `which`, how long after `since` it was first seen on the master at `new`
/// (polled every 10 ms, at most 20 s).
async fn follow_times(
    children: &[ChildProc],
    which: &[usize],
    new: u16,
    since: Instant,
) -> Vec<Duration> {
    let mut seen: Vec<Option<Duration>> = vec![None; which.len()];
    while seen.iter().any(Option::is_none) {
        for (slot, &i) in seen.iter_mut().zip(which) {
            if slot.is_none() && on_master(&children[i], new) {
                *slot = Some(since.elapsed());
            }
        }
        assert!(
            since.elapsed() < Duration::from_secs(20),
            "processes not on the new master {new} after 20 s: {:?}",
            which
                .iter()
                .zip(&seen)
                .filter(|(_, s)| s.is_none())
                .map(|(i, _)| (i, children[*i].peer_ports()))
                .collect::<Vec<_>>()
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    seen.into_iter().map(Option::unwrap).collect()
}

fn ms(d: &[Duration]) -> String {
    let v: Vec<String> = d.iter().map(|d| format!("{}", d.as_millis())).collect();
    format!("[{}] ms", v.join(", "))
}

/// The largest of `d`.
fn worst(d: &[Duration]) -> Duration {
    d.iter().copied().max().unwrap_or_default()
}

/// Two failovers of a Sentinel set, with five client processes of three tasks each taking
/// three fenced locks (re-entering some holds) all along:
///
/// 1. **A stall.** The first sentinel is paused (processes 0-3 list it first, so they
///    cannot hear `+switch-master`), processes 0 and 1 are paused a second before the
///    master is stalled past down-after, the sentinels promote the replica, the old master
///    resumes (writable again until the sentinels demote it, seconds later), and only then
///    do processes 0 and 1 resume: they wake up next to a deposed master that still takes
///    writes. Process 4 hears the announcement.
/// 2. **A kill** of the new master, followed by another promotion.
///
/// After each failover every process is on the new master (a command and a subscription
/// connection, nothing left on the old one, seen from outside in `/proc`) within the bound
/// the README states: the check interval (1 s) and a response timeout after the sentinels'
/// switch, or after a paused process resumes. The checker finds no overlapping holds and
/// rising tokens over every hold of every process (a paused process's holds end at its
/// pause), callers saw no READONLY, and once the processes stop, the new master holds
/// nothing: no key, no hold count left over, no channel.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sentinel_failovers_followed_by_every_process() {
    suite::init_tracing();
    let mut sentinel = tokio::task::block_in_place(RedisSentinel::start);
    let ns = suite::unique_ns("sfollow");
    let sentinel_ports = sentinel.sentinel_ports();
    let mut workers = spawn_workers(&sentinel, &ns, &[0, 0, 0, 0, 1]);
    for w in &mut workers {
        w.wait_line("@running", Duration::from_secs(30)).await;
    }
    let bound = Duration::from_millis(1000 + 1000 + 500);
    tokio::time::sleep(Duration::from_secs(1)).await;

    // 1. The stall.
    tokio::task::block_in_place(|| sentinel.pause(sentinel_ports[0]));
    let paused = [0usize, 1];
    let mut paused_at = Vec::new();
    for &i in &paused {
        paused_at.push(checker::now_ns());
        workers[i].signal("STOP");
    }
    tokio::time::sleep(Duration::from_secs(1)).await;
    let old = tokio::task::block_in_place(|| sentinel.pause_master());
    let stalled = Instant::now();
    let new = tokio::task::block_in_place(|| sentinel.wait_for_failover(Duration::from_secs(30)));
    let switched = Instant::now();
    eprintln!(
        "stall: sentinels moved {old} -> {new} {:?} after the stall",
        switched - stalled
    );
    let running = [2usize, 3, 4];
    let ran = follow_times(&workers, &running, new, switched).await;
    eprintln!(
        "stall: processes 2-3 (announcement missed) and 4 on the new master after the switch: {}",
        ms(&ran)
    );
    tokio::task::block_in_place(|| sentinel.resume(old));
    tokio::time::sleep(Duration::from_millis(300)).await;
    let resumed = Instant::now();
    for &i in &paused {
        workers[i].signal("CONT");
    }
    let woke = follow_times(&workers, &paused, new, resumed).await;
    eprintln!(
        "stall: paused processes 0-1 on the new master after they resumed: {}",
        ms(&woke)
    );
    tokio::task::block_in_place(|| {
        sentinel.resume(sentinel_ports[0]);
        sentinel.wait_replica_of(old, new, Duration::from_secs(30));
        sentinel.wait_healthy(Duration::from_secs(30));
    });
    eprintln!(
        "stall: {old} demoted to a replica of {new} {:?} after it resumed",
        resumed.elapsed()
    );
    // Nothing talks to the deposed master any more (its replies in flight have arrived).
    let left = still_on(&workers, old);
    assert!(
        left.is_empty(),
        "connections to the deposed master {old}: {left:?}"
    );
    tokio::time::sleep(Duration::from_secs(1)).await;

    // 2. The kill.
    let killed = tokio::task::block_in_place(|| sentinel.kill_master());
    let t_kill = Instant::now();
    let newest =
        tokio::task::block_in_place(|| sentinel.wait_for_failover(Duration::from_secs(30)));
    let switched2 = Instant::now();
    eprintln!(
        "kill: sentinels moved {killed} -> {newest} {:?} after the kill",
        switched2 - t_kill
    );
    let all: Vec<usize> = (0..PROCESSES).collect();
    let killed_follow = follow_times(&workers, &all, newest, switched2).await;
    eprintln!(
        "kill: processes on the new master after the switch: {}",
        ms(&killed_follow)
    );
    tokio::time::sleep(Duration::from_secs(2)).await;

    // Stop; check the histories and what the master holds.
    let h = History::new();
    let mut errors = Vec::new();
    for w in &mut workers {
        w.send("stop");
    }
    for (i, w) in workers.into_iter().enumerate() {
        let out = w.finish(Duration::from_secs(30)).await;
        h.merge_text(&out);
        let line = out
            .lines()
            .find_map(|l| l.strip_prefix("@errors").map(str::trim).map(str::to_string))
            .unwrap_or_default();
        eprintln!("p{i}: errors callers saw: {line}");
        errors.push(line);
    }
    // A paused process stopped relying on its holds when it was paused.
    for (&i, &at) in paused.iter().zip(&paused_at) {
        let label = format!("p{i}/");
        for a in h.acquisitions() {
            let open = a.acquired.is_some_and(|t| t < at) && a.released.is_none_or(|r| r > at);
            if a.client.starts_with(&label) && open {
                h.release_at(&checker::AcqId(a.id.clone()), at, "SIGSTOPped");
            }
        }
    }
    eprintln!(
        "{} holds over both failovers; follow bound {bound:?}",
        h.ok_count()
    );
    checker::assert_clean(&h.check());
    let readonly: Vec<&String> = errors.iter().filter(|e| e.contains("READONLY")).collect();
    assert!(readonly.is_empty(), "callers saw READONLY: {readonly:?}");
    for (what, times) in [
        ("stall, running", &ran),
        ("stall, paused", &woke),
        ("kill", &killed_follow),
    ] {
        assert!(
            worst(times) <= bound,
            "{what}: a process took {:?} to follow (bound {bound:?}): {}",
            worst(times),
            ms(times)
        );
    }
    assert_quiescent(&[newest], &ns, Duration::from_secs(10)).await;
}

/// What the callers of the Cluster scenario saw go wrong, by call and error.
#[derive(Default)]
struct Errors(std::sync::Mutex<std::collections::BTreeMap<String, u64>>);

impl Errors {
    fn count(&self, call: &str, e: &lockwise::Error) {
        let kind = match e {
            lockwise::Error::Redis(r) => r
                .code()
                .map(str::to_string)
                .unwrap_or_else(|| if r.is_timeout() { "timeout" } else { "io" }.to_string()),
            other => format!("{other}"),
        };
        *self
            .0
            .lock()
            .unwrap()
            .entry(format!("{call}:{kind}"))
            .or_default() += 1;
    }

    fn summary(&self) -> String {
        format!("{:?}", self.0.lock().unwrap())
    }
}

/// SIGKILL of two Cluster masters in turn, each while a holder client holds the locks of
/// its slots and two other clients wait on them (two tasks each, on sharded channels of the
/// dying node). The cluster promotes the replica; the holder releases; every waiter is woken
/// by the release (within 3 s of it, well before the holder's 10 s watchdog TTL, which
/// outlasts the failover), the checker finds no overlapping holds or falling tokens, and
/// afterwards no channel under the namespace is subscribed on any node and no key is left.
/// Should a failover outlast the TTL after all, the holder's hold ends where its `lost()`
/// fired. Errors the callers saw are counted and printed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_master_kills_with_sharded_waiters() {
    suite::init_tracing();
    let mut cluster = tokio::task::block_in_place(|| super::RedisCluster::start(3, 1));
    let ns = suite::unique_ns("clkills");
    let ttl = Duration::from_secs(10);
    let woken_within = Duration::from_secs(3);
    let holder = super::cluster_client(&cluster, &ns, ttl).await;
    let waiters = [
        super::cluster_client(&cluster, &ns, ttl).await,
        super::cluster_client(&cluster, &ns, ttl).await,
    ];
    let h = History::new();
    let errors = std::sync::Arc::new(Errors::default());
    let masters = cluster.master_ports();
    for (round, &target) in masters.iter().take(2).enumerate() {
        // Locks whose slot the target master serves.
        let names: Vec<String> = (0..)
            .map(|i| format!("r{round}:k{i}"))
            .filter(|n| {
                cluster.master_for_slot(cluster.key_slot(holder.fenced_lock(n).key())) == target
            })
            .take(4)
            .collect();
        let mut held = Vec::new();
        for n in &names {
            let id = h.invoke("holder", n);
            let g = holder.fenced_lock(n).lock().await.expect("holder lock");
            h.ok(&id, g.owner(), Some(g.token()), None);
            let lost_at = super::LostAt::watch(g.lost());
            held.push((id, g, lost_at));
        }
        let mut tasks = Vec::new();
        for (w, client) in waiters.iter().enumerate() {
            for t in 0..2 {
                for n in &names {
                    let (lock, h, errors) = (client.fenced_lock(n), h.clone(), errors.clone());
                    let who = format!("c{w}/t{t}");
                    tasks.push(tokio::spawn(async move {
                        loop {
                            let id = h.invoke(&who, lock.name());
                            match lock.try_lock(Duration::from_secs(30), None).await.or_none() {
                                Ok(Some(g)) => {
                                    h.ok(&id, g.owner(), Some(g.token()), None);
                                    let at = Instant::now();
                                    tokio::time::sleep(Duration::from_millis(3)).await;
                                    h.release(&id);
                                    if let Err(e) = g.unlock().await {
                                        errors.count("unlock", &e);
                                    }
                                    return at;
                                }
                                Ok(None) => panic!("{who}: no lock within 30 s"),
                                Err(e) => {
                                    errors.count("lock", &e);
                                    h.unknown(&id, &e.to_string().replace('\n', " "));
                                    assert!(e.is_retryable(), "{who}: {e}");
                                    tokio::time::sleep(Duration::from_millis(50)).await;
                                }
                            }
                        }
                    }));
                }
            }
        }
        // Every waiting client is subscribed on the target's shard channels.
        let chans = |port| super::channels_on(&[port], &ns).len();
        let t0 = Instant::now();
        while chans(target) < names.len() {
            assert!(
                t0.elapsed() < Duration::from_secs(10),
                "waiters not subscribed"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let killed_at = Instant::now();
        tokio::task::block_in_place(|| {
            cluster.kill(target);
            cluster.wait_healthy(Duration::from_secs(30));
        });
        eprintln!(
            "round {round}: master {target} killed, replica promoted after {:?}",
            killed_at.elapsed()
        );
        let released = Instant::now();
        for (id, g, lost_at) in held {
            lost_at.record_release(&h, &id);
            match g.unlock().await {
                Ok(()) => {}
                Err(e) if e.is_not_held() => {}
                Err(e) => errors.count("holder-unlock", &e),
            }
        }
        let mut woken = Vec::new();
        for t in tasks {
            woken.push(t.await.unwrap().saturating_duration_since(released));
        }
        woken.sort();
        eprintln!(
            "round {round}: {} waiters acquired after the release: p50 {:?}, max {:?}",
            woken.len(),
            woken[woken.len() / 2],
            woken[woken.len() - 1]
        );
        assert!(
            woken[woken.len() - 1] < woken_within,
            "a waiter slept towards the TTL instead of being woken: {woken:?}"
        );
        let live: Vec<u16> = cluster.master_ports();
        super::assert_quiescent(&live, &ns, Duration::from_secs(10)).await;
        // Nor on the replicas (a replica may have been a master's subscriber once).
        let all: Vec<u16> = cluster
            .nodes()
            .iter()
            .filter(|n| n.pid.is_some())
            .map(|n| n.port)
            .collect();
        let left = super::channels_on(&all, &ns);
        assert!(left.is_empty(), "channels left subscribed: {left:?}");
    }
    eprintln!("errors callers saw: {}", errors.summary());
    checker::assert_clean(&h.check());
}

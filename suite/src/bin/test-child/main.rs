//! The child process of the multi-process tests (`tests/faults/process.rs` and others): the
//! `test-child` binary of the unpublished suite crate, never shipped with the library.
//!
//! `test-child <role>` runs one role on a 2-worker multi-thread runtime (as the parent's
//! tests do) with its settings in `LOCKWISE_FP_*` variables, prints its history
//! (`lockwise_testkit::checker`) and `@`-markers on stdout and reads commands on stdin. A
//! panic fails the child (exit status 101), which the parent asserts on. The parent side is
//! `suite::child`; the tests build and find this binary through it.
//!
//! | role | what it does | used by |
//! |---|---|---|
//! | `baseline` | 2 tasks lock, increment a Redis counter non-atomically, unlock, until the target | `baseline_8_processes_x_2_tasks` |
//! | `stalled-holder` | holds two fenced locks, waits for `go` (stopped meanwhile), writes late, unlocks | `holder_stall_sigstop_2x_lease` |
//! | `holder` | takes an RLock or FairLock (kind `rlock-lease`: an RLock with a 60 s lease), holds it for a while, unlocks | `holder_crash_sigkill`, `fair_waiter_crash_sigkill`, `fair_killed_waiter_process_is_skipped`, `cli::leaks_*` |
//! | `semaphore-holder` | takes permits of a Semaphore, holds them for a while, releases | `semaphore::a_killed_holders_permits_are_lost` |
//! | `lease-holder` | takes a `LeaseSemaphore` permit with a lease, holds it until killed | `killed_holder_permit_comes_back_after_its_lease` |
//! | `shutdown-holder` | holds every kind (and waits in a fair queue), then on `SIGTERM` calls `Client::shutdown` and exits | `process::sigterm_shutdown_leaves_nothing` |
//! | `permit-user` | holds one permit of a `Semaphore` and one of a `LeaseSemaphore` until `SIGTERM`, then shuts down and exits | `process::rolling_restarts_lose_no_permit` |
//! | `pg-buyer` | concurrent purchases from a PostgreSQL stock table, each under a fenced lock, written with its token | `fenced_postgres::purchases_from_two_processes_lose_no_update` |
//! | `failover-worker` | a Sentinel client (`LOCKWISE_FP_URL`: the sentinels, comma-separated) whose tasks take fenced locks (re-entering some) until `stop` | `deployments::failover::sentinel_failovers_followed_by_every_process` |

mod failover;
mod pg;

use std::io::Write;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use suite::checker;
use suite::OrNone;

use checker::History;
use lockwise::{Client, Error};
use redis::AsyncCommands;
use suite::in_task;

/// Watchdog timeout and lease of every scenario: short, so faults play out in seconds.
const WATCHDOG: Duration = Duration::from_secs(1);
const LEASE: Duration = Duration::from_secs(1);

/// Tasks per process of the baseline.
const BASELINE_TASKS: usize = 2;

fn main() {
    let role = std::env::args()
        .nth(1)
        .expect("usage: test-child <baseline | stalled-holder | holder | lease-holder>");
    let (url, ns, label) = (
        env("LOCKWISE_FP_URL"),
        env("LOCKWISE_FP_NS"),
        env("LOCKWISE_FP_LABEL"),
    );
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("tokio runtime");
    rt.block_on(async move {
        match role.as_str() {
            "baseline" => baseline(url, ns, label).await,
            "stalled-holder" => stalled_holder(url, ns, label).await,
            "holder" => holder(url, ns, label).await,
            "semaphore-holder" => semaphore_holder(url, ns).await,
            "lease-holder" => lease_holder(url, ns).await,
            "failover-worker" => failover::worker(url, ns, label).await,
            "shutdown-holder" => shutdown_holder(url, ns).await,
            "permit-user" => permit_user(url, ns).await,
            "pg-buyer" => pg::buyer(url, ns, label).await,
            other => panic!("unknown role {other}"),
        }
    });
}

async fn client(url: &str, ns: &str) -> Client {
    suite::client_at(url, ns, WATCHDOG).await
}

fn env(name: &str) -> String {
    std::env::var(name).unwrap_or_else(|_| panic!("child without {name}"))
}

/// Prints a line at once (children stream their history to the parent).
fn emit(line: &str) {
    let mut out = std::io::stdout().lock();
    writeln!(out, "{line}").unwrap();
    out.flush().unwrap();
}

/// The child half of `baseline_8_processes_x_2_tasks`.
async fn baseline(url: String, ns: String, label: String) {
    let counter = env("LOCKWISE_FP_COUNTER");
    let target: u64 = env("LOCKWISE_FP_TARGET").parse().unwrap();
    let c = client(&url, &ns).await;
    let conn = redis::Client::open(url.as_str())
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    let h = History::new();
    let anomalies = Arc::new(Mutex::new(Vec::<String>::new()));
    let increments = Arc::new(AtomicU64::new(0));
    let mut tasks = Vec::new();
    // With LOCKWISE_FP_SPIN set, task 0 takes the lock as a SpinLock of the same name (it
    // shares the RLock's hash, so the two kinds exclude each other across processes).
    let spin = std::env::var("LOCKWISE_FP_SPIN").is_ok();
    for t in 0..BASELINE_TASKS {
        let run = BaselineTask {
            conn: conn.clone(),
            h: h.clone(),
            counter: counter.clone(),
            target,
            anomalies: anomalies.clone(),
            increments: increments.clone(),
            who: format!("{label}/t{t}"),
            wait: (t != 0).then_some(Duration::from_secs(30)),
        };
        tasks.push(match (t, spin) {
            (0, true) => tokio::spawn(run.run(c.spin_lock("baseline"))),
            _ => tokio::spawn(run.run(c.lock("baseline"))),
        });
    }
    for t in tasks {
        t.await.unwrap();
    }
    print!("{}", h.to_text());
    emit(&format!(
        "@done increments={} anomalies={}",
        increments.load(Ordering::Relaxed),
        anomalies.lock().unwrap().join("|").replace(' ', "_")
    ));
}

/// One contending task of `baseline`, over any lock kind.
struct BaselineTask {
    conn: redis::aio::MultiplexedConnection,
    h: History,
    counter: String,
    target: u64,
    anomalies: Arc<Mutex<Vec<String>>>,
    increments: Arc<AtomicU64>,
    who: String,
    /// `None`: waits with `lock()`; else with `try_lock(wait, watchdog)`.
    wait: Option<Duration>,
}

impl BaselineTask {
    async fn run<L: lockwise::Lock>(mut self, lock: L) {
        use lockwise::LockGuard;
        loop {
            let id = self.h.invoke(&self.who, "baseline");
            let got = match self.wait {
                None => lock.lock().await,
                Some(wait) => match lock.try_lock(wait, None).await.or_none() {
                    Ok(Some(g)) => Ok(g),
                    Ok(None) => {
                        self.h.fail(&id, "try_lock timed out after 30 s");
                        self.anomaly("try_lock timed out".into());
                        continue;
                    }
                    Err(e) => Err(e),
                },
            };
            let g = match got {
                Ok(g) => g,
                Err(e) => {
                    self.h.unknown(&id, &e.to_string());
                    self.anomaly(format!("lock: {e}"));
                    continue;
                }
            };
            self.h.ok(&id, g.owner(), None, None);
            // The critical section: a non-atomic increment of a shared counter.
            let v: Option<u64> = self.conn.get(&self.counter).await.unwrap();
            let v = v.unwrap_or(0);
            let done = v >= self.target;
            if !done {
                let _: () = self.conn.set(&self.counter, v + 1).await.unwrap();
                self.increments.fetch_add(1, Ordering::Relaxed);
            }
            if g.is_lost() {
                self.anomaly("guard lost".into());
            }
            self.h.release(&id);
            if let Err(e) = g.unlock().await {
                self.h.note(&id, &format!("unlock: {e}"));
                self.anomaly(format!("unlock: {e}"));
            }
            if done {
                break;
            }
        }
    }

    fn anomaly(&self, what: String) {
        self.anomalies.lock().unwrap().push(what);
    }
}

/// The child half of `holder_stall_sigstop_2x_lease`: takes a fenced lock with a 1 s lease and
/// one with the 1 s watchdog, writes both resources, prints `@ready`, then waits for `go` on
/// stdin (the parent stops it in between) and acts as a paused holder would on waking up:
/// writes again with its old tokens, watches `lost()`, unlocks.
async fn stalled_holder(url: String, ns: String, label: String) {
    let c = client(&url, &ns).await;
    in_task(async move {
        let h = History::new();
        let res_lease = c.fenced_value(format!("res-lease-{ns}"));
        let res_wd = c.fenced_value(format!("res-wd-{ns}"));
        let id1 = h.invoke(&label, "stall-lease");
        let g1 = c
            .fenced_lock("stall-lease")
            .lock_with_lease(LEASE)
            .await
            .unwrap();
        h.ok(&id1, g1.owner(), Some(g1.token()), Some(LEASE));
        let id2 = h.invoke(&label, "stall-wd");
        let g2 = c.fenced_lock("stall-wd").lock().await.unwrap();
        h.ok(&id2, g2.owner(), Some(g2.token()), None);
        for (res, token) in [(&res_lease, g1.token()), (&res_wd, g2.token())] {
            let t = checker::now_ns();
            res.write(token, "first").await.unwrap();
            h.write(&label, res.key(), token, t, Some(true));
        }
        emit(&format!("@ready tokens={},{}", g1.token(), g2.token()));
        // Blocks here; the parent SIGSTOPs the whole process, then SIGCONTs and says go.
        let line = tokio::task::spawn_blocking(|| {
            let mut l = String::new();
            std::io::stdin().read_line(&mut l).unwrap();
            l
        })
        .await
        .unwrap();
        assert_eq!(line.trim(), "go");
        let woke = Instant::now();
        // Late writes first (the holder does not know yet): the resources must refuse them.
        let mut results = Vec::new();
        for (name, res, token) in [
            ("lease", &res_lease, g1.token()),
            ("wd", &res_wd, g2.token()),
        ] {
            let t = checker::now_ns();
            let r = res.write(token, "late").await;
            h.write(&label, res.key(), token, t, Some(r.is_ok()));
            let r = match r {
                Ok(()) => "accepted".to_string(),
                Err(Error::StaleToken { .. }) => "StaleToken".to_string(),
                Err(e) => format!("error:{e}"),
            };
            results.push(format!("write_{name}={r}"));
        }
        // The watchdog must tell the holder.
        let lost = tokio::time::timeout(Duration::from_secs(3), g2.lost().cancelled()).await;
        results.push(match lost {
            Ok(()) => format!("lost_wd_after_ms={}", woke.elapsed().as_millis()),
            Err(_) => "lost_wd_after_ms=never".to_string(),
        });
        for (name, r) in [("lease", g1.unlock().await), ("wd", g2.unlock().await)] {
            results.push(format!(
                "unlock_{name}={}",
                match r {
                    Ok(()) => "ok".to_string(),
                    Err(Error::NotHeld { .. }) => "NotHeld".to_string(),
                    Err(e) => format!("error:{e}").replace(' ', "_"),
                }
            ));
        }
        print!("{}", h.to_text());
        emit(&format!("@result {}", results.join(" ")));
    })
    .await;
}

/// The child half of `holder_crash_sigkill` and of `fair_waiter_crash_sigkill`: takes the lock
/// (`LOCKWISE_FP_KIND` = `rlock` or `fair`), streaming its history line by line (it may be
/// SIGKILLed at any moment); holds it for `LOCKWISE_FP_HOLD_MS`, then unlocks and exits.
async fn holder(url: String, ns: String, label: String) {
    let kind = env("LOCKWISE_FP_KIND");
    let name = env("LOCKWISE_FP_LOCK");
    let hold = Duration::from_millis(env("LOCKWISE_FP_HOLD_MS").parse().unwrap());
    let c = client(&url, &ns).await;
    in_task(async move {
        let h = History::new();
        let id = h.invoke(&label, &name);
        emit(&h.line_of(&id));
        let (owner, unlock): (String, futures_unlock::Unlock) = match kind.as_str() {
            "rlock" => {
                let g = c.lock(&name).lock().await.unwrap();
                (
                    g.owner().to_string(),
                    Box::pin(async move { g.unlock().await }),
                )
            }
            "rlock-lease" => {
                let g = c
                    .lock(&name)
                    .lock_with_lease(Duration::from_secs(60))
                    .await
                    .unwrap();
                (
                    g.owner().to_string(),
                    Box::pin(async move { g.unlock().await }),
                )
            }
            "fair" => {
                let g = c.fair_lock(&name).lock().await.unwrap();
                (
                    g.owner().to_string(),
                    Box::pin(async move { g.unlock().await }),
                )
            }
            "rwread" => {
                let g = c.rw_lock(&name).read().lock().await.unwrap();
                (
                    g.owner().to_string(),
                    Box::pin(async move { g.unlock().await }),
                )
            }
            other => panic!("unknown kind {other}"),
        };
        h.ok(&id, &owner, None, None);
        emit(&h.line_of(&id));
        emit("@acquired");
        tokio::time::sleep(hold).await;
        h.release(&id);
        emit(&h.line_of(&id));
        unlock.await.unwrap();
        emit("@released");
    })
    .await;
}

/// The child half of `semaphore::a_killed_holders_permits_are_lost`: takes
/// `LOCKWISE_FP_PERMITS` permits of the semaphore `LOCKWISE_FP_LOCK`, prints `@acquired`,
/// holds them for `LOCKWISE_FP_HOLD_MS` (it is SIGKILLed meanwhile), then releases them.
async fn semaphore_holder(url: String, ns: String) {
    let name = env("LOCKWISE_FP_LOCK");
    let permits: u64 = env("LOCKWISE_FP_PERMITS").parse().unwrap();
    let hold = Duration::from_millis(env("LOCKWISE_FP_HOLD_MS").parse().unwrap());
    let c = client(&url, &ns).await;
    in_task(async move {
        let p = c.semaphore(&name).acquire_many(permits).await.unwrap();
        emit("@acquired");
        tokio::time::sleep(hold).await;
        p.release().await.unwrap();
        emit("@released");
    })
    .await;
}

/// The child half of `killed_holder_permit_comes_back_after_its_lease`: takes a permit of the
/// semaphore `LOCKWISE_FP_LOCK` leased for `LOCKWISE_FP_LEASE_MS`, prints `@acquired <id>`,
/// and holds it until it is killed.
async fn lease_holder(url: String, ns: String) {
    let name = env("LOCKWISE_FP_LOCK");
    let lease = Duration::from_millis(env("LOCKWISE_FP_LEASE_MS").parse().unwrap());
    let c = client(&url, &ns).await;
    let permit = c.lease_semaphore(&name).acquire(lease).await.unwrap();
    emit(&format!("@acquired {}", permit.id()));
    std::future::pending::<()>().await;
}

/// Waits for `SIGTERM`, shuts `clients` down (5 s each, at once) and prints the reports as
/// `@report holds=<n> permits=<n> failed=<n>`.
async fn shut_down_on_sigterm(clients: &[Client]) {
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .expect("SIGTERM handler");
    term.recv().await;
    let reports =
        futures::future::join_all(clients.iter().map(|c| c.shutdown(Duration::from_secs(5)))).await;
    let holds: u64 = reports.iter().map(|r| r.holds_released).sum();
    let permits: u64 = reports.iter().map(|r| r.permits_returned).sum();
    let failed: usize = reports.iter().map(|r| r.failed.len()).sum();
    emit(&format!(
        "@report holds={holds} permits={permits} failed={failed}"
    ));
}

/// The child half of `sigterm_shutdown_leaves_nothing`: holds a reentrant lock twice, a
/// leased one, a fair, fenced, read, write, multi and Redlock (over itself) lock, 3 permits
/// of the semaphore `pool` and 2 of the lease semaphore `leases`, and waits in the queue of
/// the fair lock `queue` (held by the parent); prints `@ready id=<client id>`; shuts down
/// on `SIGTERM`.
async fn shutdown_holder(url: String, ns: String) {
    let c = client(&url, &ns).await;
    let id = c.id();
    let holder = c.clone();
    let held = in_task(async move {
        let c = holder;
        let set = lockwise::RedLockSet::new(std::slice::from_ref(&c));
        let lease = Duration::from_secs(60);
        let guards = (
            c.lock("plain").lock().await.unwrap(),
            c.lock("plain").lock().await.unwrap(),
            c.lock("leased").lock_with_lease(lease).await.unwrap(),
            c.fair_lock("fair").lock().await.unwrap(),
            c.fenced_lock("fenced").lock().await.unwrap(),
            c.rw_lock("rw-r").read().lock().await.unwrap(),
            c.rw_lock("rw-w").write().lock().await.unwrap(),
            c.multi_lock(["m1", "m2"]).lock().await.unwrap(),
            set.lock("red").lock().await.unwrap(),
            c.semaphore("pool").acquire_many(3).await.unwrap(),
            c.lease_semaphore("leases")
                .acquire_many(2, lease)
                .await
                .unwrap(),
        );
        let waiter = tokio::spawn({
            let c = c.clone();
            async move { c.fair_lock("queue").lock().await.map(|_| ()) }
        });
        (guards, waiter, set)
    })
    .await;
    tokio::time::sleep(Duration::from_millis(300)).await; // the waiter has queued
    emit(&format!("@ready id={id}"));
    shut_down_on_sigterm(std::slice::from_ref(&c)).await;
    let (guards, waiter, set) = held;
    let woke = waiter.await.unwrap();
    assert!(matches!(woke, Err(Error::ClientClosed)), "{woke:?}");
    drop((guards, set));
}

/// The child half of `rolling_restarts_lose_no_permit`: one permit of the semaphore `pool`
/// and one of the lease semaphore `leases` (a 60 s lease), `@ready`, and a shutdown on
/// `SIGTERM`.
async fn permit_user(url: String, ns: String) {
    let c = client(&url, &ns).await;
    let p = c.semaphore("pool").acquire().await.unwrap();
    let l = c
        .lease_semaphore("leases")
        .acquire(Duration::from_secs(60))
        .await
        .unwrap();
    emit("@ready");
    shut_down_on_sigterm(std::slice::from_ref(&c)).await;
    drop((p, l));
}

/// A boxed unlock future, so one child handles several guard types.
mod futures_unlock {
    pub type Unlock =
        std::pin::Pin<Box<dyn std::future::Future<Output = lockwise::Result<()>> + Send>>;
}

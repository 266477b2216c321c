//! The worker process of the chaos example (`chaos --worker ...`): one `Client`, N tasks that
//! take and release a few locks in every mode, and a line protocol to the coordinator.
//!
//! # Protocol
//! The worker writes one line per event to stdout, timestamps on the host-wide clock
//! (`clock::now_ns`), so the coordinator can merge the histories of all processes:
//!
//! * `READY <pid> <client id>` once connected.
//! * `A <id> <task> <lock> <mode> <owner> <token|-> <invoke> <acquired> <lease ms|->
//!   <lease end|->`: a hold began (`invoke`: the lock call was made; `acquired`: the guard
//!   was returned; `lease end`: an inner bound of a lease hold's expiry, from its PTTL).
//! * `E <id> <end> <done> <how> [detail]`: the hold ended. `end` is the last moment the task
//!   confirmed the hold valid (`!is_lost()`, and for a lease, before `invoke + lease`) right
//!   before it stopped relying on it; `done` is when `unlock()` returned (the lock was free by
//!   then). `how`: `unlocked`, `lost` (the guard said so, or the lease ran out), `notheld`
//!   (the task believed the hold valid but unlock found it gone), `error` (unlock failed).
//! * `U <id> <end>`: the task is about to send `unlock()`; `end` is its last check (as in
//!   `E`). A worker killed after this line may have freed the lock before its `E` line.
//! * `X <task> <lock> <invoke> <at> <retryable|other> <message>`: a lock call failed.
//! * `W <task> <lock> <invoke> <at>`: a wait abandoned at the barrier.
//! * `Q <kind> <details>`: something the coordinator counts as a violation (a refused
//!   re-entry of a valid hold; a task that did not park in time).
//! * After `STOP` on stdin (the barrier): tasks stop taking locks (a wait is abandoned: lock
//!   calls are cancel safe), tasks that hold park with their guards, and the worker writes
//!   `B <key> <owner> <count> <token|->` per believed hold, then `PARKED <tasks parked>`.
//! * After `RELEASE`: parked tasks unlock (writing their `E` lines), then `RELEASED`.
//! * After `EXIT` (or when stdin closes): `STATS ...`, and the process exits.
#![allow(dead_code)]

use std::io::{BufRead, Write};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use lockwise::{Client, FairLock, FairLockGuard, FencedLock, FencedLockGuard, RLock, RLockGuard};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use tokio::sync::watch;

use crate::clock::{now_ns, ns};
use crate::BoxError;

/// The two leases lease holds use: one shorter and one longer than the SIGSTOP of a worker.
pub const LEASES: [Duration; 2] = [Duration::from_millis(400), Duration::from_secs(3)];
/// A parked lease hold must outlive the coordinator's check by this much, or it is released
/// at the barrier instead of reported (its expiry would race the check).
const PARK_MIN_LEASE_LEFT: Duration = Duration::from_millis(2500);

/// What the worker is told on the command line.
pub struct WorkerArgs {
    pub url: String,
    pub ns: String,
    pub label: String,
    pub tasks: usize,
    pub locks: usize,
    pub watchdog: Duration,
    pub seed: u64,
}

/// Where the run is, as the coordinator says on stdin.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Debug)]
enum Phase {
    Run,
    Stop,
    Release,
    Exit,
}

/// The name of lock `ix` (all processes use the same names).
pub fn lock_name(ix: usize) -> String {
    format!("chaos-{ix}")
}

/// Writes one protocol line at once (tasks of all threads share stdout).
fn out(line: &str) {
    let mut o = std::io::stdout().lock();
    // A closed stdout means the coordinator is gone; the stdin watcher ends the process.
    let _ = writeln!(o, "{line}");
    let _ = o.flush();
}

#[derive(Default)]
struct Stats {
    acquisitions: AtomicU64,
    reentries: AtomicU64,
    lost: AtomicU64,
    notheld: AtomicU64,
    retryable: AtomicU64,
    other_errors: AtomicU64,
}

struct Ctx {
    client: Client,
    locks: Vec<(RLock, FencedLock, FairLock)>,
    phase: watch::Receiver<Phase>,
    next_id: AtomicU64,
    /// Tasks parked at the barrier (holding or not) or finished.
    settled: AtomicUsize,
    /// The holds parked tasks believe they have: `B` lines.
    beliefs: Mutex<Vec<String>>,
    stats: Stats,
}

/// How one acquisition is made.
#[derive(Clone, Copy, Debug)]
enum Mode {
    /// `lock()`: the watchdog renews it.
    Watchdog,
    /// `lock_with_lease(lease)`.
    Lease(Duration),
    /// `lock()`, then the same task re-enters with `try_lock(0, None)` (hold count 2).
    Nested,
    /// `FencedLock::lock()` or `lock_with_lease()`: a fencing token per new owner.
    Fenced(Option<Duration>),
    /// `FairLock::lock()` (a release hands it over) or `lock_with_lease()` (woken).
    Fair(Option<Duration>),
}

impl Mode {
    fn pick(rng: &mut StdRng) -> Mode {
        let lease = LEASES[rng.random_range(0..LEASES.len())];
        match rng.random_range(0..100) {
            0..28 => Mode::Watchdog,
            28..44 => Mode::Lease(lease),
            44..60 => Mode::Nested,
            60..72 => Mode::Fenced(None),
            72..80 => Mode::Fenced(Some(lease)),
            80..93 => Mode::Fair(None),
            _ => Mode::Fair(Some(lease)),
        }
    }

    fn name(self) -> &'static str {
        match self {
            Mode::Watchdog => "watchdog",
            Mode::Lease(_) => "lease",
            Mode::Nested => "nested",
            Mode::Fenced(None) => "fenced",
            Mode::Fenced(Some(_)) => "fenced-lease",
            Mode::Fair(None) => "fair",
            Mode::Fair(Some(_)) => "fair-lease",
        }
    }

    fn lease(self) -> Option<Duration> {
        match self {
            Mode::Lease(l) | Mode::Fenced(Some(l)) | Mode::Fair(Some(l)) => Some(l),
            _ => None,
        }
    }
}

/// The guards of one hold.
enum Held {
    Plain(RLockGuard),
    /// The outer guard and, once re-entered, the inner one.
    Nested(RLockGuard, Option<RLockGuard>),
    Fenced(FencedLockGuard),
    Fair(FairLockGuard),
}

impl Held {
    fn is_lost(&self) -> bool {
        match self {
            Held::Plain(g) => g.is_lost(),
            Held::Nested(g, inner) => g.is_lost() || inner.as_ref().is_some_and(|i| i.is_lost()),
            Held::Fenced(g) => g.is_lost(),
            Held::Fair(g) => g.is_lost(),
        }
    }

    fn owner(&self) -> &str {
        match self {
            Held::Plain(g) | Held::Nested(g, _) => g.owner(),
            Held::Fenced(g) => g.owner(),
            Held::Fair(g) => g.owner(),
        }
    }

    fn token(&self) -> Option<u64> {
        match self {
            Held::Fenced(g) => Some(g.token()),
            _ => None,
        }
    }

    /// The hold count the task believes Redis has for its owner.
    fn count(&self) -> u32 {
        match self {
            Held::Nested(_, Some(_)) => 2,
            _ => 1,
        }
    }

    /// Releases every guard, inner first; the first error wins.
    async fn unlock(self) -> lockwise::Result<()> {
        match self {
            Held::Plain(g) => g.unlock().await,
            Held::Nested(g, inner) => {
                let first = match inner {
                    Some(i) => i.unlock().await,
                    None => Ok(()),
                };
                let outer = g.unlock().await;
                first.and(outer)
            }
            Held::Fenced(g) => g.unlock().await,
            Held::Fair(g) => g.unlock().await,
        }
    }
}

/// The worker's main: connects, runs the tasks, follows the coordinator's phases.
pub fn run(args: WorkerArgs) -> Result<(), BoxError> {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    rt.block_on(worker(args))?;
    // Background work of the runtime (releases in flight) had its chance before EXIT.
    drop(rt);
    Ok(())
}

async fn connect(args: &WorkerArgs) -> Result<Client, BoxError> {
    // A replacement worker may start while the server is stopped or sleeping: retry a while.
    let deadline = now_ns() + ns(Duration::from_secs(20));
    loop {
        let built = Client::builder(args.url.as_str())
            .namespace(args.ns.as_str())
            .watchdog_timeout(args.watchdog)
            .build()
            .await;
        match built {
            Ok(c) => return Ok(c),
            Err(e) if now_ns() < deadline => {
                eprintln!("[{}] connect failed ({e}); retrying", args.label);
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            Err(e) => return Err(e.into()),
        }
    }
}

async fn worker(args: WorkerArgs) -> Result<(), BoxError> {
    let client = connect(&args).await?;
    out(&format!("READY {} {}", std::process::id(), client.id()));

    let (tx, rx) = watch::channel(Phase::Run);
    // Control lines arrive on stdin (blocking reads: a thread of its own). A closed stdin means
    // the coordinator is gone: wind down, and exit for sure a little later.
    std::thread::spawn(move || {
        for line in std::io::stdin().lock().lines() {
            let Ok(line) = line else { break };
            let phase = match line.trim() {
                "STOP" => Phase::Stop,
                "RELEASE" => Phase::Release,
                "EXIT" => Phase::Exit,
                _ => continue,
            };
            tx.send_modify(|p| *p = (*p).max(phase));
        }
        tx.send_modify(|p| *p = Phase::Exit);
        std::thread::sleep(Duration::from_secs(20));
        std::process::exit(3);
    });

    let locks = (0..args.locks)
        .map(|ix| {
            let name = lock_name(ix);
            (
                client.lock(&name),
                client.fenced_lock(&name),
                client.fair_lock(&name),
            )
        })
        .collect();
    let ctx = Arc::new(Ctx {
        client,
        locks,
        phase: rx.clone(),
        next_id: AtomicU64::new(0),
        settled: AtomicUsize::new(0),
        beliefs: Mutex::new(Vec::new()),
        stats: Stats::default(),
    });
    let tasks: Vec<_> = (0..args.tasks)
        .map(|t| {
            let seed = args.seed ^ ((t as u64 + 1) << 32);
            tokio::spawn(task(ctx.clone(), t, seed))
        })
        .collect();

    // The barrier: every task parks or finishes (each is at most one lock call or unlock away).
    let mut phase = rx.clone();
    let _ = phase.wait_for(|p| *p >= Phase::Stop).await;
    let deadline = now_ns() + ns(Duration::from_secs(15));
    while ctx.settled.load(Ordering::SeqCst) < args.tasks && now_ns() < deadline {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let settled = ctx.settled.load(Ordering::SeqCst);
    if settled < args.tasks {
        out(&format!(
            "Q unparked {} of {} tasks did not park within 15 s",
            args.tasks - settled,
            args.tasks
        ));
    }
    for b in ctx.beliefs.lock().unwrap().iter() {
        out(b);
    }
    out(&format!("PARKED {settled}"));

    let _ = phase.wait_for(|p| *p >= Phase::Release).await;
    let joined =
        tokio::time::timeout(Duration::from_secs(15), futures::future::join_all(tasks)).await;
    if joined.is_err() {
        out("Q unreleased tasks still running 15 s after RELEASE");
    }
    out("RELEASED");

    let _ = phase.wait_for(|p| *p >= Phase::Exit).await;
    let s = &ctx.stats;
    out(&format!(
        "STATS acquisitions={} reentries={} lost={} notheld={} retryable={} other_errors={}",
        s.acquisitions.load(Ordering::Relaxed),
        s.reentries.load(Ordering::Relaxed),
        s.lost.load(Ordering::Relaxed),
        s.notheld.load(Ordering::Relaxed),
        s.retryable.load(Ordering::Relaxed),
        s.other_errors.load(Ordering::Relaxed),
    ));
    Ok(())
}

/// Acquires lock `ix` in `mode` (nested: the outer hold only).
async fn acquire(ctx: &Ctx, ix: usize, mode: Mode) -> lockwise::Result<Held> {
    let (rlock, fenced, fair) = &ctx.locks[ix];
    Ok(match mode {
        Mode::Watchdog => Held::Plain(rlock.lock().await?),
        Mode::Lease(l) => Held::Plain(rlock.lock_with_lease(l).await?),
        Mode::Nested => Held::Nested(rlock.lock().await?, None),
        Mode::Fenced(None) => Held::Fenced(fenced.lock().await?),
        Mode::Fenced(Some(l)) => Held::Fenced(fenced.lock_with_lease(l).await?),
        Mode::Fair(None) => Held::Fair(fair.lock().await?),
        Mode::Fair(Some(l)) => Held::Fair(fair.lock_with_lease(l).await?),
    })
}

/// One task: lock, hold a few ms (checking the guard), unlock, again; parks at the barrier.
async fn task(ctx: Arc<Ctx>, t: usize, seed: u64) {
    let mut rng = StdRng::seed_from_u64(seed);
    let mut phase = ctx.phase.clone();
    loop {
        if *phase.borrow() != Phase::Run {
            break;
        }
        let ix = rng.random_range(0..ctx.locks.len());
        let mode = Mode::pick(&mut rng);
        let invoke = now_ns();
        let acquired = tokio::select! {
            r = acquire(&ctx, ix, mode) => r,
            // The barrier: abandon the wait. Lock calls are cancel safe; what a late reply
            // grants is released in the background (the check then sees whether it was).
            _ = phase.wait_for(|p| *p != Phase::Run) => {
                // Tell the coordinator this task was waiting (it never got an `A` line).
                out(&format!("W {t} {ix} {invoke} {}", now_ns()));
                break;
            }
        };
        let mut held = match acquired {
            Ok(h) => h,
            Err(e) => {
                let kind = if e.is_retryable() {
                    ctx.stats.retryable.fetch_add(1, Ordering::Relaxed);
                    "retryable"
                } else {
                    ctx.stats.other_errors.fetch_add(1, Ordering::Relaxed);
                    "other"
                };
                out(&format!(
                    "X {t} {ix} {invoke} {} {kind} {}",
                    now_ns(),
                    one_line(&e.to_string())
                ));
                tokio::time::sleep(Duration::from_millis(20)).await;
                continue;
            }
        };
        let acq = now_ns();
        ctx.stats.acquisitions.fetch_add(1, Ordering::Relaxed);
        let id = ctx.next_id.fetch_add(1, Ordering::Relaxed);
        let lease = mode.lease();
        // The lease runs from the script that granted it, somewhere between `invoke` and
        // `acq`: `invoke + lease` is an inner bound of its expiry, but far too early after a
        // long wait. The key's PTTL, read now, gives a tight one: it expires at or after
        // (the moment before asking) + PTTL.
        let lease_end = match lease {
            None => None,
            Some(l) => Some(lease_expiry(&ctx, ix, mode).await.unwrap_or(invoke + ns(l))),
        };
        out(&format!(
            "A {id} {t} {ix} {} {} {} {invoke} {acq} {} {}",
            mode.name(),
            held.owner(),
            held.token().map_or("-".into(), |x| x.to_string()),
            lease.map_or("-".into(), |l| l.as_millis().to_string()),
            lease_end.map_or("-".into(), |e| e.to_string()),
        ));
        // Valid at `now`: the guard does not know it lost, and a lease has not run out.
        let valid = |held: &Held, now: u64| !held.is_lost() && lease_end.is_none_or(|e| now < e);

        let mut last_ok = acq;
        let mut lost = false;
        let hold_ns = rng.random_range(0..=3_000_000u64);
        let check = |held: &Held, last_ok: &mut u64, lost: &mut bool| {
            // Read the clock first: a `false` from is_lost() vouches for this moment.
            let now = now_ns();
            if !*lost && valid(held, now) {
                *last_ok = now;
            } else {
                *lost = true;
            }
        };
        // Critical section: a few ms, re-checking the guard every ms (a SIGSTOP lands here).
        loop {
            check(&held, &mut last_ok, &mut lost);
            if lost || now_ns() >= acq + hold_ns || *phase.borrow() != Phase::Run {
                break;
            }
            tokio::time::sleep(Duration::from_millis(1)).await;
            // Nested: re-enter halfway through.
            if let Held::Nested(outer, inner @ None) = &mut held {
                if now_ns() >= acq + hold_ns / 2 {
                    match ctx.locks[ix].0.try_lock(Duration::ZERO, None).await {
                        Ok(g) => {
                            ctx.stats.reentries.fetch_add(1, Ordering::Relaxed);
                            *inner = Some(g);
                        }
                        Err(e) if e.is_timeout() && !outer.is_lost() => out(&format!(
                            "Q reentry-refused task {t} lock {ix} owner {} was refused re-entry of its valid hold",
                            outer.owner()
                        )),
                        Err(e) if e.is_timeout() => {}
                        Err(e) => out(&format!(
                            "X {t} {ix} {} {} {} re-entry of hold {id}: {}",
                            now_ns(),
                            now_ns(),
                            if e.is_retryable() { "retryable" } else { "other" },
                            one_line(&e.to_string())
                        )),
                    }
                }
            }
        }

        // The barrier: park with the guard(s), reporting what this task believes it holds.
        if *phase.borrow() != Phase::Run {
            check(&held, &mut last_ok, &mut lost);
            let lease_left = lease_end.map(|e| e.saturating_sub(now_ns()));
            if !lost && lease_left.is_none_or(|l| l > ns(PARK_MIN_LEASE_LEFT)) {
                ctx.beliefs.lock().unwrap().push(format!(
                    "B {} {} {} {}",
                    ctx.locks[ix].0.key(),
                    held.owner(),
                    held.count(),
                    held.token().map_or("-".into(), |x| x.to_string())
                ));
                ctx.settled.fetch_add(1, Ordering::SeqCst);
                let _ = phase.wait_for(|p| *p >= Phase::Release).await;
                end_hold(&ctx, id, held, &mut last_ok, &mut lost, &check).await;
                return;
            }
        }
        end_hold(&ctx, id, held, &mut last_ok, &mut lost, &check).await;
        // Think time, so the tasks of one process do not always come in the same order.
        tokio::time::sleep(Duration::from_micros(rng.random_range(0..2_000))).await;
    }
    ctx.settled.fetch_add(1, Ordering::SeqCst);
}

/// An inner bound of when a lease hold of lock `ix` expires: [`now_ns`] before asking plus
/// the key's PTTL; `None` when Redis could not say (the caller falls back to invoke + lease).
async fn lease_expiry(ctx: &Ctx, ix: usize, mode: Mode) -> Option<u64> {
    let asked = now_ns();
    let ttl = match mode {
        Mode::Fenced(_) => ctx.locks[ix].1.remaining_ttl().await,
        _ => ctx.locks[ix].0.remaining_ttl().await,
    };
    match ttl {
        Ok(Some(d)) if d < Duration::from_secs(3600) => Some(asked + ns(d)),
        // Gone already: the hold is over (its checks will say so at once).
        Ok(None) => Some(asked),
        _ => None,
    }
}

/// Confirms the hold one last time, unlocks and writes the `E` line.
async fn end_hold(
    ctx: &Ctx,
    id: u64,
    held: Held,
    last_ok: &mut u64,
    lost: &mut bool,
    check: &impl Fn(&Held, &mut u64, &mut bool),
) {
    check(&held, last_ok, lost);
    out(&format!("U {id} {last_ok}"));
    let result = held.unlock().await;
    let done = now_ns();
    let (how, detail) = match (&result, *lost) {
        (_, true) => {
            ctx.stats.lost.fetch_add(1, Ordering::Relaxed);
            ("lost", String::new())
        }
        (Ok(()), false) => ("unlocked", String::new()),
        (Err(e), false) if e.is_not_held() => {
            ctx.stats.notheld.fetch_add(1, Ordering::Relaxed);
            ("notheld", one_line(&e.to_string()))
        }
        (Err(e), false) => ("error", one_line(&e.to_string())),
    };
    out(&format!("E {id} {last_ok} {done} {how} {detail}"));
}

fn one_line(s: &str) -> String {
    s.replace(['\n', '\r'], " ")
}

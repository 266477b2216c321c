//! lockwise chaos soak: several worker processes contend for a few locks while a coordinator
//! injects faults, then everything is checked from the merged histories and from Redis.
//!
//! ```text
//! cargo run --release -p lockwise-stress --bin chaos -- [--seconds 40] [--workers 4] [--tasks 8] [--locks 5]
//!     [--watchdog-ms 1500] [--quiet-bound-ms 150] [--seed N] [--no-faults] [--history FILE]
//!     [--only pubsub,normal,flush,sleep,server-stop,worker-stop,worker-kill]
//! ```
//!
//! `--history FILE` keeps every worker line (labelled) for a closer look at a failure;
//! `--only` picks the faults (e.g. to look at one class of bug without the others).
//!
//! # Processes
//! The coordinator (this program) starts a throwaway `redis-server` (or uses `REDIS_URL`; the
//! faults then hit that server, so never point it at one others use), and re-executes itself
//! with `--worker` N times. Each worker has one `Client` (watchdog timeout 1.5 s, so a worker
//! stopped for longer loses its locks) and 8 tasks. A task picks one of 5 locks and a mode at
//! random: `lock()` (watchdog), `lock_with_lease` (0.4 s or 3 s), nested re-entry (`lock()`,
//! then `try_lock(0)` by the same task: hold count 2), a fenced lock (watchdog or lease), or
//! the name's fair lock (watchdog, which a release hands over, or lease, which it wakes).
//! It holds for 0–3 ms, re-checking its guard every millisecond, then unlocks. Workers stream
//! every hold to the coordinator as text lines (see `chaos_worker.rs`), stamped with
//! `CLOCK_MONOTONIC`, which is one clock for all processes of the host.
//!
//! A hold counts from the moment its guard was returned to the *last moment the task
//! confirmed it valid*: `is_lost()` read false (and a lease had not run out) right before it
//! stopped relying on the lock. So a worker resumed after a long SIGSTOP must see its guard
//! lost and cut its hold at the last check before the stop; a library that still says "valid"
//! there produces an overlap with whoever took the lock meanwhile. A SIGKILLed worker's open
//! holds end at its kill, or at their last check when the unlock had been sent (`U` line):
//! the unlock may have freed the lock before the kill. Recorded intervals are therefore inner
//! bounds of real holds, and an overlap of two of them is a real overlap.
//!
//! # Phases and faults
//! 1. Fault phase (`--seconds` minus the quiet phase and 4 s for the check), on a schedule
//!    drawn from `--seed`: `CLIENT KILL TYPE pubsub` (~every 0.6 s), `CLIENT KILL TYPE normal` (~1.5 s;
//!    it also hits calls in flight: acquires, renewals, unlocks), `SCRIPT FLUSH` (2 s),
//!    `DEBUG SLEEP 0.3` (5 s), SIGSTOP of the server for 300 ms (6 s); SIGSTOP of a worker for
//!    2 x the watchdog timeout + 0.5 s, twice; SIGKILL of a worker, twice, each replaced by a
//!    new one. Only the loopback server is touched.
//! 2. Quiet phase (a quarter of the run, at least 10 s): no faults. "Free while waited for"
//!    is measured from the end of the faults (a wakeup lost to the last kill must be made up
//!    within a few round trips too) to a second before the barrier: for every release that
//!    had a waiter (some process had called lock before the release and got the lock after
//!    it, or was still waiting at the barrier), the time from the release's return to the next
//!    acquisition of that lock by anyone. Its maximum must stay below `--quiet-bound-ms`
//!    (150 ms: a handoff is a publish, a wakeup and a script call, a few ms; a lost wakeup
//!    shows as the holder's TTL, 0.5 s and more). Every live worker must acquire after the
//!    settling time (the longest lease or 2 x the watchdog timeout, + 1 s), and no call may
//!    fail from 2 s after the faults (calls in flight at the last fault have timed out by
//!    then). This soak has few waiters; `stress/src/bin/soak.rs` checks the same at 10,000 tasks,
//!    where waking every waiter after each subscription loss used to clog the handoffs.
//! 3. Check phase: the coordinator says `STOP`; tasks stop taking locks (a wait in progress is
//!    abandoned), tasks that hold park with their guards and report what they believe they
//!    hold (lock key, owner field, hold count, fencing token). The coordinator reads every
//!    lock hash (HGETALL) and requires exact equality: no hold in Redis nobody believes in (a
//!    phantom, e.g. an unlock whose reply was lost while the hold stayed and kept being
//!    renewed), none missing, same counts, same tokens. Then everyone releases, and no key
//!    but the fencing counters and no subscribed channel (`PUBSUB CHANNELS` /
//!    `SHARDCHANNELS`) may be left while the workers are still connected.
//!
//! Throughout, keys are sampled every 500 ms: only fencing counters may lack a TTL.
//!
//! # Checks on the merged history
//! No two holds of one lock overlap; fenced holds' tokens increase in hold order (the same
//! token again for the same owner means its "new" hold re-entered one that its unlock left
//! in Redis); no unlock
//! finds a hold gone that its guard still called valid (a late loss signal; unless the worker
//! was SIGSTOPped between that check and the unlock's reply, or a lease hold's unlock replied
//! after its lease end, when the hold may have expired unseen, or a nested hold's re-entry
//! failed with its outcome unknown, when the settlement gives the run up, telling the guard
//! lost before it releases the hold: counted and printed, not failed); no re-entry of a
//! valid hold is refused; no call fails with a non-retryable error, and none at all after the
//! faults stopped; no worker dies unless killed. The program prints the figures and exits
//! non-zero naming every failed check.

//!
//! # Why this way
//! * Workers are this binary re-executed, so the soak is one `cargo run` and the workers always
//!   match the coordinator; they talk over stdin/stdout lines, which survive SIGSTOP and leave
//!   a readable history when a worker is SIGKILLed mid-run.
//! * `CLOCK_MONOTONIC` (read with `rustix`, no `unsafe`) instead of `Instant`: an `Instant`
//!   cannot leave its process, the monotonic clock is shared by all processes of the host.
//! * A killed worker is replaced, so the check phase always has `--workers` live processes; a
//!   stopped one is resumed after twice the watchdog timeout and must carry on.
//! * The "Redis holds exactly what tasks believe" check needs a moment where beliefs stand
//!   still: the barrier. A task stops relying on a lease with less than 2.5 s left instead of
//!   reporting it, so no expiry races the comparison.
//! * Bounded everywhere: every wait of the coordinator has a timeout, workers exit when
//!   their stdin closes, and the coordinator kills every worker it started before it exits.
//!
//! Files: `run.rs` (the phases), `faults.rs`, `workers.rs` (the processes), `state.rs` (what
//! the workers report), `inspect.rs` (what Redis holds), `check.rs`, and the worker side in
//! `chaos_worker.rs`; `clock.rs` is the shared clock and signals.

mod chaos_worker;
mod check;
mod clock;
mod faults;
mod inspect;
mod run;
mod state;
mod workers;
use lockwise_testkit::server;

use std::collections::{BTreeMap, BTreeSet};
use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use lockwise::redis::{self, aio::ConnectionManager, aio::ConnectionManagerConfig};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use tokio::sync::mpsc;

use chaos_worker::{WorkerArgs, LEASES};
use check::*;
use clock::{ms, now_ns, ns, signal, Sig};
use faults::*;
use inspect::*;
use run::*;
use state::*;
use workers::*;

/// The example's error type.
type BoxError = Box<dyn std::error::Error + Send + Sync>;

struct Args {
    seconds: f64,
    workers: usize,
    tasks: usize,
    locks: usize,
    watchdog: Duration,
    quiet_bound: Duration,
    seed: u64,
    faults: bool,
    /// Every worker line, labelled, for a closer look after a failure.
    history: Option<String>,
    /// The faults to inject (all by default).
    only: Vec<Fault>,
}

const USAGE: &str = "usage: chaos [--seconds N (40)] [--workers N (4)] [--tasks N (8)] \
     [--locks N (5)] [--watchdog-ms N (1500)] [--quiet-bound-ms N (150)] [--seed N] [--no-faults] [--history FILE]
     [--only pubsub,normal,flush,sleep,server-stop,worker-stop,worker-kill]";

fn parse_args(argv: &[String]) -> Result<Args, BoxError> {
    let mut args = Args {
        seconds: 40.0,
        workers: 4,
        tasks: 8,
        locks: 5,
        watchdog: Duration::from_millis(1500),
        quiet_bound: Duration::from_millis(150),
        seed: rand::rng().random(),
        faults: true,
        history: None,
        only: Fault::ALL.to_vec(),
    };
    let mut it = argv.iter();
    while let Some(a) = it.next() {
        let mut value = || it.next().ok_or_else(|| format!("{a} needs a value"));
        match a.as_str() {
            "--seconds" => args.seconds = value()?.parse()?,
            "--workers" => args.workers = value()?.parse()?,
            "--tasks" => args.tasks = value()?.parse()?,
            "--locks" => args.locks = value()?.parse()?,
            "--watchdog-ms" => args.watchdog = Duration::from_millis(value()?.parse()?),
            "--quiet-bound-ms" => args.quiet_bound = Duration::from_millis(value()?.parse()?),
            "--seed" => args.seed = value()?.parse()?,
            "--no-faults" => args.faults = false,
            "--history" => args.history = Some(value()?.clone()),
            "--only" => {
                args.only = value()?
                    .split(',')
                    .map(|n| Fault::parse(n).ok_or_else(|| format!("unknown fault {n:?}")))
                    .collect::<Result<_, _>>()?
            }
            "-h" | "--help" => {
                println!("{USAGE}");
                std::process::exit(0);
            }
            other => return Err(format!("unknown argument {other:?}\n{USAGE}").into()),
        }
    }
    if args.workers < 2 || args.tasks == 0 || args.locks == 0 {
        return Err("--workers must be at least 2, --tasks and --locks positive".into());
    }
    if args.watchdog < Duration::from_millis(300) {
        return Err("--watchdog-ms must be at least 300".into());
    }
    Ok(args)
}

fn parse_worker_args(argv: &[String]) -> Result<WorkerArgs, BoxError> {
    let mut w = WorkerArgs {
        url: String::new(),
        ns: String::new(),
        label: String::new(),
        tasks: 8,
        locks: 5,
        watchdog: Duration::from_millis(1500),
        seed: 0,
    };
    let mut it = argv.iter();
    while let Some(a) = it.next() {
        let v = it.next().ok_or_else(|| format!("{a} needs a value"))?;
        match a.as_str() {
            "--url" => w.url = v.clone(),
            "--ns" => w.ns = v.clone(),
            "--label" => w.label = v.clone(),
            "--tasks" => w.tasks = v.parse()?,
            "--locks" => w.locks = v.parse()?,
            "--watchdog-ms" => w.watchdog = Duration::from_millis(v.parse()?),
            "--seed" => w.seed = v.parse()?,
            other => return Err(format!("unknown worker argument {other:?}").into()),
        }
    }
    Ok(w)
}

fn main() -> Result<(), BoxError> {
    let argv: Vec<String> = std::env::args().skip(1).collect();
    if std::env::var_os("RUST_LOG").is_some() {
        tracing_subscriber::fmt()
            .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
            .with_writer(std::io::stderr)
            .init();
    }
    if argv.first().map(String::as_str) == Some("--worker") {
        return chaos_worker::run(parse_worker_args(&argv[1..])?);
    }
    let args = parse_args(&argv)?;
    // DEBUG is off by default since Redis 7; older servers reject the option but allow DEBUG.
    let (url, server) = server::url_or_start(&["--enable-debug-command", "local"])
        .or_else(|_| server::url_or_start(&[]))?;
    let server_pid = server.as_ref().and_then(|s| s.pid());
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    let failures = rt.block_on(coordinate(args, url, server_pid));
    drop(rt);
    let failures = match failures {
        Ok(f) => f,
        Err(e) => vec![format!("the run itself failed: {e}")],
    };
    if !failures.is_empty() {
        eprintln!("\nFAILED: {} check(s):", failures.len());
        for f in &failures {
            eprintln!("  - {f}");
        }
        drop(server); // `exit` skips destructors: stop the temp redis-server first
        std::process::exit(1);
    }
    println!("\nOK");
    Ok(())
}

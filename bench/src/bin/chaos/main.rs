//! lockwise chaos soak: several worker processes contend for a few locks while a coordinator
//! injects faults, then everything is checked from the merged histories and from Redis.
//!
//! ```text
//! cargo run --release -p lockwise-bench --bin chaos -- [--seconds 40] [--workers 4] [--tasks 8] [--locks 5]
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
//! then `try_lock(0)` by the same task: hold count 2), or a fenced lock (watchdog or lease).
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
//!    then). This soak has few waiters; `bench/src/bin/soak.rs` checks the same at 10,000 tasks,
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
//! after its lease end, when the hold may have expired unseen: counted and printed, not
//! failed); no re-entry of a
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

mod chaos_worker;
mod clock;
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
use clock::{ms, now_ns, ns, signal, Sig};

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

// ---------------------------------------------------------------------------------------------
// What the coordinator learns from the workers

/// One hold, from its `A` and `E` lines.
#[derive(Clone, Debug)]
struct Hold {
    worker: usize,
    task: u32,
    lock: usize,
    mode: String,
    owner: String,
    token: Option<u64>,
    invoke: u64,
    acq: u64,
    /// A lease hold's expiry (inner bound, from its PTTL right after acquiring).
    lease_end: Option<u64>,
    /// Last confirmed valid (from `E`).
    end: Option<u64>,
    /// Last confirmed valid before the unlock was sent (from `U`): where the hold of a worker
    /// killed between its unlock and its `E` line ends.
    unlocking: Option<u64>,
    /// When unlock returned.
    done: Option<u64>,
    how: String,
}

/// A failed lock call (`X` line).
#[derive(Clone, Debug)]
struct Failed {
    worker: usize,
    at: u64,
    retryable: bool,
    message: String,
}

#[derive(Default)]
struct WorkerInfo {
    label: String,
    pid: u32,
    client_id: String,
    ready: bool,
    killed_at: Option<u64>,
    /// SIGSTOP periods (start, end; end 0 while stopped).
    stops: Vec<(u64, u64)>,
    parked: bool,
    released: bool,
    beliefs: Vec<Belief>,
    stats: String,
    eof: bool,
}

#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
struct Belief {
    key: String,
    owner: String,
    count: i64,
    token: Option<u64>,
}

#[derive(Default)]
struct State {
    workers: Vec<WorkerInfo>,
    holds: BTreeMap<(usize, u64), Hold>,
    failed: Vec<Failed>,
    /// Waits abandoned at the barrier: (lock, invoke, at).
    abandoned: Vec<(usize, u64, u64)>,
    /// `Q` lines and protocol surprises.
    violations: Vec<String>,
    no_ttl: BTreeSet<String>,
    faults: BTreeMap<&'static str, u64>,
}

impl State {
    fn apply(&mut self, w: usize, line: &str) {
        let mut f = line.split(' ');
        let kind = f.next().unwrap_or("");
        let rest: Vec<&str> = f.collect();
        let num = |i: usize| rest.get(i).and_then(|s| s.parse::<u64>().ok());
        let opt = |i: usize| rest.get(i).and_then(|s| s.parse::<u64>().ok());
        match kind {
            "READY" => {
                let info = &mut self.workers[w];
                info.ready = true;
                info.client_id = rest.get(1).unwrap_or(&"").to_string();
            }
            "A" if rest.len() >= 10 => {
                let (Some(id), Some(task), Some(lock), Some(invoke), Some(acq)) =
                    (num(0), num(1), num(2), num(6), num(7))
                else {
                    return self.garbled(w, line);
                };
                self.holds.insert(
                    (w, id),
                    Hold {
                        worker: w,
                        task: task as u32,
                        lock: lock as usize,
                        mode: rest[3].to_string(),
                        owner: rest[4].to_string(),
                        token: opt(5),
                        invoke,
                        acq,
                        lease_end: opt(8).and(opt(9)),
                        end: None,
                        unlocking: None,
                        done: None,
                        how: "open".into(),
                    },
                );
            }
            "E" if rest.len() >= 4 => {
                let (Some(id), Some(end), Some(done)) = (num(0), num(1), num(2)) else {
                    return self.garbled(w, line);
                };
                match self.holds.get_mut(&(w, id)) {
                    Some(h) => {
                        h.end = Some(end);
                        h.done = Some(done);
                        h.how = rest[3].to_string();
                    }
                    None => self.garbled(w, line),
                }
            }
            "U" if rest.len() == 2 => {
                let (Some(id), Some(at)) = (num(0), num(1)) else {
                    return self.garbled(w, line);
                };
                match self.holds.get_mut(&(w, id)) {
                    Some(h) => h.unlocking = Some(at),
                    None => self.garbled(w, line),
                }
            }
            "W" if rest.len() == 4 => {
                if let (Some(lock), Some(invoke), Some(at)) = (num(1), num(2), num(3)) {
                    self.abandoned.push((lock as usize, invoke, at));
                }
            }
            "X" if rest.len() >= 5 => self.failed.push(Failed {
                worker: w,
                at: num(3).unwrap_or(0),
                retryable: rest[4] == "retryable",
                message: rest[5..].join(" "),
            }),
            "Q" => self
                .violations
                .push(format!("{}: {}", self.workers[w].label, rest.join(" "))),
            "B" if rest.len() == 4 => self.workers[w].beliefs.push(Belief {
                key: rest[0].to_string(),
                owner: rest[1].to_string(),
                count: rest[2].parse().unwrap_or(-1),
                token: opt(3),
            }),
            "PARKED" => self.workers[w].parked = true,
            "RELEASED" => self.workers[w].released = true,
            "STATS" => self.workers[w].stats = rest.join(" "),
            // A worker killed mid-line leaves a fragment: ignore it.
            _ if self.workers[w].killed_at.is_some() => {}
            _ => println!("  [{}] {line}", self.workers[w].label),
        }
    }

    fn garbled(&mut self, w: usize, line: &str) {
        if self.workers[w].killed_at.is_none() {
            self.violations.push(format!(
                "{}: unreadable line {line:?}",
                self.workers[w].label
            ));
        }
    }

    fn count_fault(&mut self, name: &'static str) {
        *self.faults.entry(name).or_default() += 1;
    }

    fn live(&self) -> Vec<usize> {
        (0..self.workers.len())
            .filter(|&w| self.workers[w].killed_at.is_none() && !self.workers[w].eof)
            .collect()
    }

    /// The label of the worker whose client id starts `owner`.
    fn owner_label(&self, owner: &str) -> String {
        self.workers
            .iter()
            .find(|w| !w.client_id.is_empty() && owner.starts_with(&w.client_id))
            .map(|w| {
                let status = if w.killed_at.is_some() {
                    "killed"
                } else {
                    "live"
                };
                format!("{} ({status})", w.label)
            })
            .unwrap_or_else(|| "unknown client".into())
    }
}

// ---------------------------------------------------------------------------------------------
// Worker processes

struct WorkerProc {
    child: Child,
    stdin: Option<ChildStdin>,
}

impl Drop for WorkerProc {
    fn drop(&mut self) {
        // Only a child not reaped yet: a reaped one's pid may belong to another process now.
        if matches!(self.child.try_wait(), Ok(None)) {
            // Resume a stopped worker first, so it can die and be reaped at once.
            let _ = signal(self.child.id(), Sig::Cont);
            let _ = self.child.kill();
        }
        let _ = self.child.wait();
    }
}

struct Coordinator {
    args: Args,
    url: String,
    ns: String,
    /// Start of the fault phase ([`now_ns`]).
    t0: AtomicU64,
    procs: Mutex<Vec<WorkerProc>>,
    state: Mutex<State>,
    lines: mpsc::UnboundedSender<(usize, String)>,
}

impl Coordinator {
    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap()
    }

    /// Seconds since the start of the fault phase, for printing.
    fn rel(&self, t: u64) -> f64 {
        (t as f64 - self.t0.load(Ordering::Relaxed) as f64) / 1e9
    }

    fn spawn_worker(&self, seed: u64) -> Result<usize, BoxError> {
        let mut procs = self.procs.lock().unwrap();
        let w = procs.len();
        let label = format!("w{w}");
        let mut child = Command::new(std::env::current_exe()?)
            .arg("--worker")
            .args(["--url", &self.url, "--ns", &self.ns, "--label", &label])
            .args(["--tasks", &self.args.tasks.to_string()])
            .args(["--locks", &self.args.locks.to_string()])
            .args(["--watchdog-ms", &self.args.watchdog.as_millis().to_string()])
            .args(["--seed", &seed.to_string()])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()?;
        let stdout = child.stdout.take().expect("piped stdout");
        let stdin = child.stdin.take();
        self.state().workers.push(WorkerInfo {
            label,
            pid: child.id(),
            ..WorkerInfo::default()
        });
        procs.push(WorkerProc { child, stdin });
        let tx = self.lines.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if tx.send((w, line)).is_err() {
                    return;
                }
            }
            let _ = tx.send((w, "EOF".into()));
        });
        Ok(w)
    }

    fn tell(&self, w: usize, line: &str) {
        let mut procs = self.procs.lock().unwrap();
        if let Some(stdin) = procs[w].stdin.as_mut() {
            let _ = writeln!(stdin, "{line}").and_then(|_| stdin.flush());
        }
    }

    fn pid(&self, w: usize) -> u32 {
        self.procs.lock().unwrap()[w].child.id()
    }

    /// Polls `done` every 20 ms, at most `timeout`.
    async fn wait_for(&self, timeout: Duration, done: impl Fn(&State) -> bool) -> bool {
        let deadline = now_ns() + ns(timeout);
        loop {
            if done(&self.state()) {
                return true;
            }
            if now_ns() >= deadline {
                return false;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Faults

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Fault {
    KillPubsub,
    KillNormal,
    ScriptFlush,
    DebugSleep,
    StopServer,
    StopWorker,
    KillWorker,
}

impl Fault {
    const ALL: [Fault; 7] = [
        Fault::KillPubsub,
        Fault::KillNormal,
        Fault::ScriptFlush,
        Fault::DebugSleep,
        Fault::StopServer,
        Fault::StopWorker,
        Fault::KillWorker,
    ];

    fn parse(name: &str) -> Option<Fault> {
        Some(match name {
            "pubsub" => Fault::KillPubsub,
            "normal" => Fault::KillNormal,
            "flush" => Fault::ScriptFlush,
            "sleep" => Fault::DebugSleep,
            "server-stop" => Fault::StopServer,
            "worker-stop" => Fault::StopWorker,
            "worker-kill" => Fault::KillWorker,
            _ => return None,
        })
    }
}

/// The fault schedule: (offset from the start, fault), sorted.
fn schedule(
    rng: &mut StdRng,
    span: Duration,
    stop_worker_for: Duration,
    only: &[Fault],
) -> Vec<(Duration, Fault)> {
    let mut events = Vec::new();
    let mut periodic = |every_ms: u64, fault: Fault, rng: &mut StdRng| {
        let mut at = rng.random_range(0..every_ms);
        while Duration::from_millis(at) < span {
            events.push((Duration::from_millis(at), fault));
            at += rng.random_range(every_ms / 2..every_ms * 3 / 2);
        }
    };
    periodic(600, Fault::KillPubsub, rng);
    periodic(1500, Fault::KillNormal, rng);
    periodic(2000, Fault::ScriptFlush, rng);
    periodic(5000, Fault::DebugSleep, rng);
    periodic(6000, Fault::StopServer, rng);
    // Worker faults at fixed fractions, each stop over before the phase ends.
    let last_stop = span.saturating_sub(stop_worker_for + Duration::from_millis(500));
    for frac in [0.2, 0.6] {
        events.push((span.mul_f64(frac).min(last_stop), Fault::StopWorker));
    }
    for frac in [0.4, 0.8] {
        events.push((span.mul_f64(frac), Fault::KillWorker));
    }
    events.retain(|e| only.contains(&e.1));
    events.sort_by_key(|e| e.0);
    events
}

async fn client_kill(conn: &mut ConnectionManager, kind: &str) -> redis::RedisResult<i64> {
    redis::cmd("CLIENT")
        .arg("KILL")
        .arg("TYPE")
        .arg(kind)
        .query_async(conn)
        .await
}

/// Runs one fault; returns a line for the log when something is worth saying.
async fn inject(
    c: &Arc<Coordinator>,
    conn: &mut ConnectionManager,
    fault: Fault,
    server_pid: Option<u32>,
    rng: &mut StdRng,
    stop_worker_for: Duration,
) -> Result<(), String> {
    let e = |e: redis::RedisError| e.to_string();
    match fault {
        Fault::KillPubsub => {
            client_kill(conn, "pubsub").await.map_err(e)?;
            c.state().count_fault("CLIENT KILL TYPE pubsub");
        }
        Fault::KillNormal => {
            client_kill(conn, "normal").await.map_err(e)?;
            c.state().count_fault("CLIENT KILL TYPE normal");
        }
        Fault::ScriptFlush => {
            redis::cmd("SCRIPT")
                .arg("FLUSH")
                .query_async::<()>(conn)
                .await
                .map_err(e)?;
            c.state().count_fault("SCRIPT FLUSH");
        }
        Fault::DebugSleep => {
            redis::cmd("DEBUG")
                .arg("SLEEP")
                .arg("0.3")
                .query_async::<()>(conn)
                .await
                .map_err(e)?;
            c.state().count_fault("DEBUG SLEEP 0.3");
        }
        Fault::StopServer => {
            let Some(pid) = server_pid else {
                return Err("no server pid (REDIS_URL): server SIGSTOP skipped".into());
            };
            signal(pid, Sig::Stop).map_err(|e| e.to_string())?;
            tokio::time::sleep(Duration::from_millis(300)).await;
            signal(pid, Sig::Cont).map_err(|e| e.to_string())?;
            c.state().count_fault("SIGSTOP server 300 ms");
        }
        Fault::StopWorker => {
            let w = pick_worker(c, rng).ok_or("no worker to stop")?;
            let pid = c.pid(w);
            signal(pid, Sig::Stop).map_err(|e| e.to_string())?;
            let at = now_ns();
            {
                let mut s = c.state();
                s.workers[w].stops.push((at, 0));
                s.count_fault("SIGSTOP worker");
            }
            println!(
                "  +{:>5.1} s  SIGSTOP {} for {:?}",
                c.rel(at),
                c.state().workers[w].label,
                stop_worker_for
            );
            let c = c.clone();
            tokio::spawn(async move {
                tokio::time::sleep(stop_worker_for).await;
                let _ = signal(pid, Sig::Cont);
                if let Some(s) = c.state().workers[w].stops.last_mut() {
                    s.1 = now_ns();
                }
            });
        }
        Fault::KillWorker => {
            let w = pick_worker(c, rng).ok_or("no worker to kill")?;
            // Before the signal: the worker's open holds were still held at this moment.
            let at = now_ns();
            {
                let mut procs = c.procs.lock().unwrap();
                let _ = procs[w].child.kill();
                let _ = procs[w].child.wait();
            }
            let label = {
                let mut s = c.state();
                s.workers[w].killed_at = Some(at);
                s.count_fault("SIGKILL worker");
                s.workers[w].label.clone()
            };
            let nw = c.spawn_worker(rng.random()).map_err(|e| e.to_string())?;
            println!(
                "  +{:>5.1} s  SIGKILL {label}; started {} in its place",
                c.rel(at),
                c.state().workers[nw].label
            );
        }
    }
    Ok(())
}

/// A live, ready, running worker, at random.
fn pick_worker(c: &Coordinator, rng: &mut StdRng) -> Option<usize> {
    let s = c.state();
    let candidates: Vec<usize> = s
        .live()
        .into_iter()
        .filter(|&w| s.workers[w].ready && s.workers[w].stops.iter().all(|st| st.1 != 0))
        .collect();
    (!candidates.is_empty()).then(|| candidates[rng.random_range(0..candidates.len())])
}

// ---------------------------------------------------------------------------------------------
// Redis inspection

async fn admin(url: &str) -> Result<ConnectionManager, BoxError> {
    let config = ConnectionManagerConfig::new()
        .set_response_timeout(Some(Duration::from_secs(3)))
        .set_connection_timeout(Some(Duration::from_secs(3)));
    Ok(ConnectionManager::new_with_config(redis::Client::open(url)?, config).await?)
}

/// Keys of the namespace with their PTTL.
async fn keys_of(
    conn: &mut ConnectionManager,
    pattern: &str,
) -> redis::RedisResult<Vec<(String, i64)>> {
    let keys: Vec<String> = redis::cmd("KEYS").arg(pattern).query_async(conn).await?;
    let mut out = Vec::new();
    // A live client's presence key (`<ns>:client:{<id>}`) is the client's, not a lock's.
    for k in keys.into_iter().filter(|k| !k.contains(":client:{")) {
        let pttl: i64 = redis::cmd("PTTL").arg(&k).query_async(conn).await?;
        if pttl != -2 {
            out.push((k, pttl));
        }
    }
    Ok(out)
}

fn is_fence(key: &str) -> bool {
    key.contains(":fence:")
}

/// Every hold in Redis: one belief per owner field of every lock hash.
async fn holds_in_redis(conn: &mut ConnectionManager, ns: &str) -> redis::RedisResult<Vec<Belief>> {
    let keys: Vec<String> = redis::cmd("KEYS")
        .arg(format!("{ns}:lock:*"))
        .query_async(conn)
        .await?;
    let mut out = Vec::new();
    for k in keys {
        let fields: Vec<(String, String)> = redis::cmd("HGETALL").arg(&k).query_async(conn).await?;
        let token = fields
            .iter()
            .find(|(f, _)| f == "token")
            .and_then(|(_, v)| v.parse().ok());
        for (owner, count) in fields.iter().filter(|(f, _)| f != "token") {
            out.push(Belief {
                key: k.clone(),
                owner: owner.clone(),
                count: count.parse().unwrap_or(-1),
                token,
            });
        }
    }
    out.sort();
    Ok(out)
}

/// Channels of the namespace with subscribers (plain and sharded).
async fn channels_of(conn: &mut ConnectionManager, ns: &str) -> redis::RedisResult<Vec<String>> {
    let mut out: Vec<String> = redis::cmd("PUBSUB")
        .arg("CHANNELS")
        .arg(format!("{ns}*"))
        .query_async(conn)
        .await?;
    // SHARDCHANNELS exists from Redis 7.0; an older server has no sharded channels anyway.
    if let Ok(sharded) = redis::cmd("PUBSUB")
        .arg("SHARDCHANNELS")
        .arg(format!("{ns}*"))
        .query_async::<Vec<String>>(conn)
        .await
    {
        out.extend(sharded);
    }
    Ok(out)
}

// ---------------------------------------------------------------------------------------------
// The run

async fn coordinate(
    args: Args,
    url: String,
    server_pid: Option<u32>,
) -> Result<Vec<String>, BoxError> {
    let ns = format!("chaos-{}", lockwise::Uuid::new_v4().simple());
    let total = Duration::from_secs_f64(args.seconds);
    let check_budget = Duration::from_secs(4);
    let quiet = total
        .mul_f64(0.25)
        .clamp(Duration::from_secs(10), Duration::from_secs(20));
    let settle = (LEASES[1].max(args.watchdog * 2)) + Duration::from_secs(1);
    let fault_span = total.saturating_sub(quiet + check_budget);
    let stop_worker_for = args.watchdog * 2 + Duration::from_millis(500);
    if args.faults && fault_span < stop_worker_for * 2 + Duration::from_secs(2) {
        return Err(format!(
            "--seconds {} leaves {fault_span:?} for faults; give at least 25",
            args.seconds
        )
        .into());
    }
    let fault_span = if args.faults {
        fault_span
    } else {
        Duration::ZERO
    };
    println!(
        "lockwise chaos: {} workers x {} tasks on {} locks, watchdog {:?}, seed {}\n\
         phases: faults {:.1} s, quiet {:.1} s (progress counted after {:.1} s), then the check\n\
         redis: {url}{}",
        args.workers,
        args.tasks,
        args.locks,
        args.watchdog,
        args.seed,
        fault_span.as_secs_f64(),
        quiet.as_secs_f64(),
        settle.as_secs_f64(),
        if server_pid.is_none() {
            " (REDIS_URL: no server SIGSTOP)"
        } else {
            ""
        }
    );
    let mut rng = StdRng::seed_from_u64(args.seed);
    let (tx, mut rx) = mpsc::unbounded_channel();
    let c = Arc::new(Coordinator {
        args,
        url: url.clone(),
        ns: ns.clone(),
        t0: AtomicU64::new(0),
        procs: Mutex::new(Vec::new()),
        state: Mutex::new(State::default()),
        lines: tx,
    });
    // Worker lines go into the state as they come.
    let mut history = match &c.args.history {
        Some(path) => Some(std::io::BufWriter::new(std::fs::File::create(path)?)),
        None => None,
    };
    let collector = {
        let c = c.clone();
        tokio::spawn(async move {
            while let Some((w, line)) = rx.recv().await {
                let mut s = c.state();
                if let Some(h) = history.as_mut() {
                    let _ = writeln!(h, "{} {line}", s.workers[w].label);
                    if line == "EOF" {
                        let _ = h.flush();
                    }
                }
                if line == "EOF" {
                    s.workers[w].eof = true;
                } else {
                    s.apply(w, &line);
                }
            }
        })
    };
    let result = run_phases(
        &c,
        &mut rng,
        server_pid,
        fault_span,
        quiet,
        settle,
        stop_worker_for,
    )
    .await;
    // Whatever happened: no worker outlives the coordinator.
    let procs = std::mem::take(&mut *c.procs.lock().unwrap());
    drop(procs);
    collector.abort();
    result
}

/// The phase boundaries, on the [`now_ns`] clock.
#[derive(Clone, Copy)]
struct Timeline {
    /// End of the faults: the quiet phase starts.
    fault_end: u64,
    /// The faults' after-effects are over: killed workers' locks expired, long leases ran out.
    settled: u64,
    quiet_end: u64,
}

impl Timeline {
    /// Releases measured for "free while waited for": from the end of the faults (a wakeup
    /// lost to the last kill must be made up within a few round trips too) to a second
    /// before the barrier (whose waits are abandoned).
    fn handoff_window(&self) -> (u64, u64) {
        (self.fault_end, self.quiet_end - ns(Duration::from_secs(1)))
    }

    /// From here on no call may fail: a call in flight at the last fault has had its
    /// response timeout.
    fn calm(&self) -> u64 {
        self.fault_end + ns(Duration::from_secs(2))
    }
}

#[allow(clippy::too_many_arguments)]
async fn run_phases(
    c: &Arc<Coordinator>,
    rng: &mut StdRng,
    server_pid: Option<u32>,
    fault_span: Duration,
    quiet: Duration,
    settle: Duration,
    stop_worker_for: Duration,
) -> Result<Vec<String>, BoxError> {
    let mut conn = admin(&c.url).await?;
    for _ in 0..c.args.workers {
        c.spawn_worker(rng.random())?;
    }
    let n = c.args.workers;
    if !c
        .wait_for(Duration::from_secs(30), |s| {
            s.workers.iter().all(|w| w.ready)
        })
        .await
    {
        return Err(format!("not all {n} workers connected within 30 s").into());
    }
    let t0 = now_ns();
    c.t0.store(t0, Ordering::Relaxed);
    let fault_end = t0 + ns(fault_span);
    let tl = Timeline {
        fault_end,
        settled: fault_end + ns(settle),
        quiet_end: fault_end + ns(quiet),
    };

    // Keys without TTL, sampled all along (a connection of its own: faults may hold up the
    // other one).
    let stop_sampling = Arc::new(tokio::sync::Notify::new());
    let sampler = {
        let (c, stop) = (c.clone(), stop_sampling.clone());
        let mut sconn = admin(&c.url).await?;
        tokio::spawn(async move {
            loop {
                // Errors (a CLIENT KILL, a stopped server) only skip a sample.
                if let Ok(keys) = keys_of(&mut sconn, &format!("{}:*", c.ns)).await {
                    let mut s = c.state();
                    for (k, pttl) in keys {
                        if pttl == -1 && !is_fence(&k) {
                            s.no_ttl.insert(k);
                        }
                    }
                }
                tokio::select! {
                    _ = tokio::time::sleep(Duration::from_millis(500)) => {}
                    _ = stop.notified() => return,
                }
            }
        })
    };
    let progress = {
        let c = c.clone();
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(Duration::from_secs(5)).await;
                let (holds, failed) = {
                    let s = c.state();
                    (s.holds.len(), s.failed.len())
                };
                println!(
                    "  +{:>5.1} s  {holds} holds, {failed} failed calls so far",
                    c.rel(now_ns())
                );
            }
        })
    };

    // 1. Faults.
    let events = if c.args.faults {
        schedule(rng, fault_span, stop_worker_for, &c.args.only)
    } else {
        Vec::new()
    };
    let mut injection_errors: BTreeMap<String, u64> = BTreeMap::new();
    for (at, fault) in events {
        sleep_until(t0 + ns(at)).await;
        if let Err(e) = inject(c, &mut conn, fault, server_pid, rng, stop_worker_for).await {
            *injection_errors
                .entry(format!("{fault:?}: {e}"))
                .or_default() += 1;
        }
    }
    sleep_until(fault_end).await;
    // A worker stopped near the end is resumed by its own timer; wait for it.
    c.wait_for(stop_worker_for, |s| {
        s.workers.iter().all(|w| w.stops.iter().all(|st| st.1 != 0))
    })
    .await;
    println!("  +{:>5.1} s  faults over: quiet phase", c.rel(now_ns()));

    // 2. Quiet.
    sleep_until(tl.quiet_end).await;
    progress.abort();

    // 3. Check.
    println!("  +{:>5.1} s  check: STOP", c.rel(now_ns()));
    let mut failures = check_phase(c, &mut conn).await?;
    stop_sampling.notify_one();
    let _ = sampler.await;

    println!();
    {
        let s = c.state();
        let faults: Vec<String> = s.faults.iter().map(|(k, v)| format!("{v} x {k}")).collect();
        println!("faults injected   {}", faults.join(", "));
    }
    for (e, n) in &injection_errors {
        println!("  injection failed x{n}: {e}");
    }
    failures.extend(analyse(c, tl));
    Ok(failures)
}

async fn sleep_until(t: u64) {
    let now = now_ns();
    if t > now {
        tokio::time::sleep(Duration::from_nanos(t - now)).await;
    }
}

/// The barrier, the belief check, the release and the quiescence check.
async fn check_phase(
    c: &Arc<Coordinator>,
    conn: &mut ConnectionManager,
) -> Result<Vec<String>, BoxError> {
    let mut failures = Vec::new();
    let live = {
        let s = c.state();
        for info in &s.workers {
            if info.eof && info.killed_at.is_none() {
                failures.push(format!(
                    "worker {} (pid {}) exited on its own before the check",
                    info.label, info.pid
                ));
            }
        }
        s.live()
    };
    for &w in &live {
        c.tell(w, "STOP");
    }
    let parked = c
        .wait_for(Duration::from_secs(20), |s| {
            live.iter()
                .all(|&w| s.workers[w].parked || s.workers[w].eof)
        })
        .await;
    if !parked {
        failures.push("not every worker parked within 20 s of STOP".into());
    }
    // Abandoned waits release what a late reply granted in the background: a moment for that.
    tokio::time::sleep(Duration::from_millis(300)).await;

    // Redis holds exactly what the parked tasks believe they hold.
    let expected = {
        let s = c.state();
        let mut e: Vec<Belief> = live
            .iter()
            .flat_map(|&w| s.workers[w].beliefs.clone())
            .collect();
        e.sort();
        e
    };
    let mut diff = Vec::new();
    let mut actual = Vec::new();
    // A few samples: a background release in flight may still be on its way; a phantom that a
    // watchdog keeps alive, or a missing hold, stays.
    for _ in 0..5 {
        actual = holds_in_redis(conn, &c.ns).await?;
        diff = compare_holds(&expected, &actual, &|owner| c.state().owner_label(owner));
        if diff.is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(150)).await;
    }
    println!(
        "  check: {} hold(s) believed by parked tasks, {} in Redis, {} difference(s)",
        expected.len(),
        actual.len(),
        diff.len()
    );
    for d in &diff {
        failures.push(format!("Redis vs believed holds: {d}"));
    }
    for (k, pttl) in keys_of(conn, &format!("{}:*", c.ns)).await? {
        if pttl == -1 && !is_fence(&k) {
            c.state().no_ttl.insert(k);
        }
    }

    // Release everything; then nothing may be left while the workers are still connected.
    for &w in &live {
        c.tell(w, "RELEASE");
    }
    if !c
        .wait_for(Duration::from_secs(20), |s| {
            live.iter()
                .all(|&w| s.workers[w].released || s.workers[w].eof)
        })
        .await
    {
        failures.push("not every worker released within 20 s of RELEASE".into());
    }
    let deadline = now_ns() + ns(Duration::from_secs(3));
    let (keys, channels) = loop {
        let keys: Vec<(String, i64)> = keys_of(conn, &format!("{}:*", c.ns))
            .await?
            .into_iter()
            .filter(|(k, _)| !is_fence(k))
            .collect();
        let channels = channels_of(conn, &c.ns).await?;
        if (keys.is_empty() && channels.is_empty()) || now_ns() >= deadline {
            break (keys, channels);
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    println!(
        "  check: after release {} key(s) besides fencing counters, {} channel(s) subscribed",
        keys.len(),
        channels.len()
    );
    for (k, pttl) in &keys {
        failures.push(format!(
            "leaked key {k} (pttl {pttl} ms) after every release"
        ));
    }
    for ch in &channels {
        failures.push(format!("channel {ch} still subscribed after every release"));
    }

    for &w in &live {
        c.tell(w, "EXIT");
    }
    if !c
        .wait_for(Duration::from_secs(15), |s| {
            live.iter().all(|&w| s.workers[w].eof)
        })
        .await
    {
        failures.push("not every worker exited within 15 s of EXIT".into());
    }
    let s = c.state();
    for &w in &live {
        if s.workers[w].stats.is_empty() {
            failures.push(format!(
                "worker {} ended without its STATS",
                s.workers[w].label
            ));
        }
    }
    Ok(failures)
}

/// The differences between believed and actual holds, one line each.
fn compare_holds(
    expected: &[Belief],
    actual: &[Belief],
    label: &dyn Fn(&str) -> String,
) -> Vec<String> {
    let index = |v: &[Belief]| -> BTreeMap<(String, String), Belief> {
        v.iter()
            .map(|b| ((b.key.clone(), b.owner.clone()), b.clone()))
            .collect()
    };
    let (e, a) = (index(expected), index(actual));
    let mut out = Vec::new();
    for (k, b) in &a {
        match e.get(k) {
            None => out.push(format!(
                "phantom hold: {} owner {} of {} with count {} is in Redis, no live task believes it holds it",
                b.key,
                b.owner,
                label(&b.owner),
                b.count
            )),
            Some(x) if x.count != b.count => out.push(format!(
                "count mismatch: {} owner {} of {}: Redis {}, believed {}",
                b.key,
                b.owner,
                label(&b.owner),
                b.count,
                x.count
            )),
            Some(x) if x.token.is_some() && x.token != b.token => out.push(format!(
                "token mismatch: {} owner {}: Redis {:?}, believed {:?}",
                b.key, b.owner, b.token, x.token
            )),
            Some(_) => {}
        }
    }
    for (k, b) in &e {
        if !a.contains_key(k) {
            out.push(format!(
                "missing hold: {} owner {} of {} believes it holds (count {}), Redis has no such hold",
                b.key,
                b.owner,
                label(&b.owner),
                b.count
            ));
        }
    }
    out
}

/// " (its worker was SIGSTOPped ...)" when the worker of `h` was stopped between the lock
/// call and `until`: the hold may have outlived its TTL unseen.
fn stopped_note(s: &State, h: &Hold, until: u64) -> &'static str {
    let stopped = s.workers[h.worker]
        .stops
        .iter()
        .any(|st| st.0 < until && (st.1 == 0 || st.1 > h.invoke));
    if stopped {
        " (its worker was SIGSTOPped during this call or hold)"
    } else {
        ""
    }
}

/// The checks on the merged history, and the figures.
fn analyse(c: &Coordinator, tl: Timeline) -> Vec<String> {
    let s = c.state();
    let mut failures = Vec::new();
    let rel = |t: u64| c.rel(t);
    let end_of_run = now_ns();
    let who = |h: &Hold| format!("{}/t{}", s.workers[h.worker].label, h.task);

    // Intervals that count for mutual exclusion: [acquired, last confirmed valid], a killed
    // worker's open hold ending at its kill, a lease hold at invoke + lease at the latest.
    let mut open = 0;
    let mut by_lock: Vec<Vec<(u64, u64, &Hold)>> = vec![Vec::new(); c.args.locks];
    for h in s.holds.values() {
        let end = match (h.end, s.workers[h.worker].killed_at) {
            (Some(e), _) => e,
            // Killed after sending its unlock but before its `E` line: the unlock may have
            // freed the lock before the kill, so the hold ends at its last check.
            (None, Some(k)) => h.unlocking.map_or(k, |u| u.min(k)),
            (None, None) => {
                open += 1;
                end_of_run
            }
        };
        let end = h.lease_end.map_or(end, |l| end.min(l));
        if end > h.acq && h.lock < by_lock.len() {
            by_lock[h.lock].push((h.acq, end, h));
        }
    }
    if open > 0 {
        failures.push(format!(
            "{open} hold(s) of live workers never ended (no E line)"
        ));
    }

    // 1. No overlap.
    let mut overlaps = Vec::new();
    for (lock, iv) in by_lock.iter_mut().enumerate() {
        iv.sort_by_key(|x| x.0);
        let mut furthest: Option<(u64, &Hold)> = None;
        for &(start, end, h) in iv.iter() {
            if let Some((fend, f)) = furthest {
                if start < fend {
                    overlaps.push(format!(
                        "lock {lock}: {} ({} {}, {}, token {:?}) held [{:.3}, {:.3}] s{} and {} ({} {}, {}, token {:?}) from {:.3} s{}: {:.1} ms overlap",
                        who(f),
                        f.owner,
                        f.mode,
                        f.how,
                        f.token,
                        rel(f.acq),
                        rel(fend),
                        stopped_note(&s, f, fend),
                        who(h),
                        h.owner,
                        h.mode,
                        h.how,
                        h.token,
                        rel(start),
                        stopped_note(&s, h, end),
                        ms(fend.min(end) - start)
                    ));
                }
            }
            if furthest.is_none_or(|(fend, _)| end > fend) {
                furthest = Some((end, h));
            }
        }
    }

    // 2. Fencing tokens increase in hold order.
    let mut token_errors = Vec::new();
    for (lock, iv) in by_lock.iter().enumerate() {
        let mut last: Option<&Hold> = None;
        for &(_, _, h) in iv.iter().filter(|x| x.2.token.is_some()) {
            if let Some(p) = last {
                if h.token <= p.token {
                    // The same owner with the same token: the "new" hold re-entered the earlier
                    // one, which its unlock had left in Redis.
                    let why = if h.token == p.token && h.owner == p.owner {
                        format!(
                            " (same owner: it re-entered its earlier hold, which that hold's unlock ({}) left behind)",
                            p.how
                        )
                    } else {
                        String::new()
                    };
                    token_errors.push(format!(
                        "lock {lock}: {} got token {:?} at {:.3} s after {} had token {:?} at {:.3} s{why}",
                        who(h),
                        h.token,
                        rel(h.acq),
                        who(p),
                        p.token,
                        rel(p.acq)
                    ));
                }
            }
            last = Some(h);
        }
    }

    // 3. Quiet phase: how long a released lock stayed free while somebody waited for it.
    let (w0, w1) = tl.handoff_window();
    let mut gaps: Vec<(u64, String)> = Vec::new();
    for lock in 0..c.args.locks {
        let mut hs: Vec<&Hold> = s.holds.values().filter(|h| h.lock == lock).collect();
        hs.sort_by_key(|h| h.acq);
        for h in &hs {
            let (Some(release), Some(done)) = (h.end, h.done) else {
                continue;
            };
            if h.how != "unlocked" || done < w0 || done > w1 {
                continue;
            }
            let from = hs.partition_point(|g| g.acq <= release);
            let Some(next) = hs.get(from) else { continue };
            // Somebody waited: called lock before this release and got the lock after it,
            // or was still waiting at the barrier.
            let waited = hs[from..]
                .iter()
                .take_while(|g| g.acq < release + ns(Duration::from_secs(30)))
                .any(|g| g.invoke < release)
                || s.abandoned
                    .iter()
                    .any(|&(l, invoke, _)| l == lock && invoke < release);
            if !waited {
                continue;
            }
            let gap = next.acq.saturating_sub(done);
            // A free-looking lock may not be free: an unlock that failed shortly before (its
            // reply lost to a killed connection) may have left its hold in Redis until its TTL.
            let failed_unlock = hs.iter().find(|g| {
                g.how == "error"
                    && g.lock == lock
                    && g.done
                        .is_some_and(|d| d <= release && d + ns(LEASES[1]) > release)
            });
            let note = failed_unlock.map_or(String::new(), |g| {
                format!(
                    " (the unlock of {} ({}) on this lock failed at {:.3} s: a hold it left in Redis may have kept the lock)",
                    who(g),
                    g.owner,
                    rel(g.done.unwrap_or(0))
                )
            });
            gaps.push((
                gap,
                format!(
                    "lock {lock}: {} ({} {}) released at {:.3} s, {} ({}) acquired at {:.3} s{note}",
                    who(h),
                    h.owner,
                    h.mode,
                    rel(done),
                    who(next),
                    next.mode,
                    rel(next.acq)
                ),
            ));
        }
    }
    gaps.sort_by_key(|g| g.0);
    let pct = |p: f64| -> f64 {
        if gaps.is_empty() {
            0.0
        } else {
            ms(gaps[((gaps.len() - 1) as f64 * p) as usize].0)
        }
    };
    let max_gap = gaps.last().map_or(0, |g| g.0);

    // 4. Calls and ends.
    let other: Vec<&Failed> = s.failed.iter().filter(|f| !f.retryable).collect();
    let after_faults: Vec<&Failed> = s.failed.iter().filter(|f| f.at >= tl.calm()).collect();
    // An unlock that found its hold gone is a late loss signal, unless the hold may have
    // expired after the guard last vouched for it and before the unlock ran:
    // - the worker was SIGSTOPped between that check and the unlock's reply (a paused holder,
    //   the documented TTL caveat; e.g. an unlock whose connection was killed, settled after
    //   the stop);
    // - a lease hold's unlock replied after its lease end (the server stalled, or the call
    //   was retried, past the lease the caller chose; the lease end is an inner bound of the
    //   expiry, so a reply before it proves the unlock ran while the hold lived).
    // Those are counted, not failed.
    let may_have_expired = |h: &Hold| match (h.end, h.done) {
        (Some(end), Some(done)) => {
            h.lease_end.is_some_and(|l| done >= l)
                || s.workers[h.worker]
                    .stops
                    .iter()
                    .any(|st| st.0 >= end && st.0 <= done)
        }
        _ => false,
    };
    let (notheld_expired, notheld): (Vec<&Hold>, Vec<&Hold>) = s
        .holds
        .values()
        .filter(|h| h.how == "notheld")
        .partition(|h| may_have_expired(h));
    let unlock_errors_quiet = s
        .holds
        .values()
        .filter(|h| h.how == "error" && h.done.is_some_and(|d| d >= tl.calm()))
        .count();

    // Figures.
    println!(
        "workers           {} started ({} killed), {} tasks each",
        s.workers.len(),
        s.workers.iter().filter(|w| w.killed_at.is_some()).count(),
        c.args.tasks
    );
    for w in &s.workers {
        let mine: Vec<&Hold> = s
            .holds
            .values()
            .filter(|h| s.workers[h.worker].label == w.label)
            .collect();
        let quiet = mine
            .iter()
            .filter(|h| h.acq >= tl.settled && h.acq <= tl.quiet_end)
            .count();
        let lost = mine.iter().filter(|h| h.how == "lost").count();
        let status = match w.killed_at {
            Some(k) => format!("SIGKILLed at +{:.1} s", rel(k)),
            None if w.stops.is_empty() => "live".to_string(),
            None => format!("live, SIGSTOPped {}x", w.stops.len()),
        };
        println!(
            "  {:<4} pid {:<7} {:>6} acquisitions ({:>5} in the quiet window), {:>3} lost; {status}",
            w.label,
            w.pid,
            mine.len(),
            quiet,
            lost
        );
        if w.killed_at.is_none() && quiet == 0 {
            failures.push(format!(
                "no progress: {} acquired nothing in the quiet window",
                w.label
            ));
        }
    }
    println!(
        "holds             {} recorded ({} fenced), {} lost, {} unlocks found the hold gone \
         (+{} that may have expired first: worker SIGSTOPped between its last check and the \
         unlock's reply, or a lease that ran out before the reply)",
        s.holds.len(),
        s.holds.values().filter(|h| h.token.is_some()).count(),
        s.holds.values().filter(|h| h.how == "lost").count(),
        notheld.len(),
        notheld_expired.len()
    );
    let killed_open: Vec<&Hold> = s
        .holds
        .values()
        .filter(|h| h.end.is_none() && s.workers[h.worker].killed_at.is_some())
        .collect();
    println!(
        "killed mid-hold   {} open hold(s) of killed workers, {} of them with the unlock sent \
         (they end at their last check, not at the kill)",
        killed_open.len(),
        killed_open.iter().filter(|h| h.unlocking.is_some()).count()
    );
    println!(
        "failed calls      {} retryable, {} other; {} after the faults stopped",
        s.failed.len() - other.len(),
        other.len(),
        after_faults.len()
    );
    println!(
        "quiet handoffs    {} waited-for releases: free for p50 {:.1} ms, p99 {:.1} ms, max {:.1} ms (bound {:?})",
        gaps.len(),
        pct(0.5),
        pct(0.99),
        ms(max_gap),
        c.args.quiet_bound
    );
    for (gap, what) in gaps.iter().rev().take(3) {
        println!("  {:.1} ms: {what}", ms(*gap));
    }
    println!("overlaps          {}", overlaps.len());
    println!("token regressions {}", token_errors.len());
    println!("keys without TTL  {}", s.no_ttl.len());

    // Failures, each naming its check.
    for o in overlaps.iter().take(10) {
        failures.push(format!("overlap: {o}"));
    }
    if overlaps.len() > 10 {
        failures.push(format!("overlap: ... and {} more", overlaps.len() - 10));
    }
    for t in token_errors.iter().take(10) {
        failures.push(format!("token order: {t}"));
    }
    if token_errors.len() > 10 {
        failures.push(format!(
            "token order: ... and {} more",
            token_errors.len() - 10
        ));
    }
    if gaps.is_empty() && c.args.faults {
        failures.push("quiet phase: no waited-for release measured".into());
    }
    if max_gap > ns(c.args.quiet_bound) {
        let slow = gaps.iter().filter(|g| g.0 > ns(c.args.quiet_bound)).count();
        failures.push(format!(
            "quiet phase: a free lock stayed untaken while waited for up to {:.1} ms ({slow} of {} handoffs above {:?}); worst: {}",
            ms(max_gap),
            gaps.len(),
            c.args.quiet_bound,
            gaps.last().map_or("", |g| g.1.as_str())
        ));
    }
    for h in notheld.iter().take(10) {
        failures.push(format!(
            "late loss signal: {} ({}) on lock {} confirmed its hold valid at {:.3} s, but unlock found it gone",
            who(h),
            h.mode,
            h.lock,
            rel(h.end.unwrap_or(0))
        ));
    }
    for f in other.iter().take(10) {
        failures.push(format!(
            "non-retryable error in {} at {:.3} s: {}",
            s.workers[f.worker].label,
            rel(f.at),
            f.message
        ));
    }
    if !after_faults.is_empty() {
        failures.push(format!(
            "{} lock call(s) failed after the faults stopped, first: {}",
            after_faults.len(),
            after_faults[0].message
        ));
    }
    if unlock_errors_quiet > 0 {
        failures.push(format!(
            "{unlock_errors_quiet} unlock(s) failed after the faults stopped"
        ));
    }
    for k in s.no_ttl.iter().take(10) {
        failures.push(format!("key without TTL: {k}"));
    }
    for v in s.violations.iter().take(10) {
        failures.push(v.clone());
    }
    failures
}

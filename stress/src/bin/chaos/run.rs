//! The run: its phases on a timeline.

use super::*;

// ---------------------------------------------------------------------------------------------
// The run

pub(super) async fn coordinate(
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
pub(super) struct Timeline {
    /// End of the faults: the quiet phase starts.
    pub(super) fault_end: u64,
    /// The faults' after-effects are over: killed workers' locks expired, long leases ran out.
    pub(super) settled: u64,
    pub(super) quiet_end: u64,
}

impl Timeline {
    /// Releases measured for "free while waited for": from the end of the faults (a wakeup
    /// lost to the last kill must be made up within a few round trips too) to a second
    /// before the barrier (whose waits are abandoned).
    pub(super) fn handoff_window(&self) -> (u64, u64) {
        (self.fault_end, self.quiet_end - ns(Duration::from_secs(1)))
    }

    /// From here on no call may fail: a call in flight at the last fault has had its
    /// response timeout.
    pub(super) fn calm(&self) -> u64 {
        self.fault_end + ns(Duration::from_secs(2))
    }
}

#[allow(clippy::too_many_arguments)]
pub(super) async fn run_phases(
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

pub(super) async fn sleep_until(t: u64) {
    let now = now_ns();
    if t > now {
        tokio::time::sleep(Duration::from_nanos(t - now)).await;
    }
}

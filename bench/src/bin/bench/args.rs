//! The bench's command line.

use super::BoxError;

/// What to run, from the command line.
pub(crate) struct Args {
    pub(crate) json: Option<String>,
    pub(crate) seconds: f64,
    pub(crate) watchdog_locks: usize,
    pub(crate) waiters: usize,
    pub(crate) metrics_only: bool,
    pub(crate) sweep_only: bool,
    pub(crate) overtake_only: bool,
    pub(crate) peers_only: bool,
    pub(crate) waiters_only: bool,
    pub(crate) handoff_only: bool,
    pub(crate) redisson_only: bool,
    pub(crate) fastpath_only: bool,
}

/// Reads the arguments; `--help` prints the usage and exits.
pub(crate) fn parse_args() -> Result<Args, BoxError> {
    let mut args = Args {
        json: None,
        seconds: 3.0,
        watchdog_locks: 100_000,
        waiters: 10_000,
        metrics_only: false,
        sweep_only: false,
        overtake_only: false,
        peers_only: false,
        waiters_only: false,
        handoff_only: false,
        redisson_only: false,
        fastpath_only: false,
    };
    let mut it = std::env::args().skip(1);
    while let Some(a) = it.next() {
        let mut value = || it.next().ok_or_else(|| format!("{a} needs a value"));
        match a.as_str() {
            "--json" => args.json = Some(value()?),
            "--seconds" => args.seconds = value()?.parse()?,
            "--watchdog-locks" => args.watchdog_locks = value()?.parse()?,
            "--waiters" => args.waiters = value()?.parse()?,
            "--metrics-only" => args.metrics_only = true,
            "--sweep-only" => args.sweep_only = true,
            "--overtake-only" => args.overtake_only = true,
            "--peers-only" => args.peers_only = true,
            "--waiters-only" => args.waiters_only = true,
            "--handoff-only" => args.handoff_only = true,
            "--redisson-only" => args.redisson_only = true,
            "--fastpath-only" => args.fastpath_only = true,
            "-h" | "--help" => {
                println!(
                    "usage: bench [--json PATH] [--seconds N (per timed round, default 3)] \
                     [--watchdog-locks N (100000)] [--waiters N (10000)] [--metrics-only] \
                     [--sweep-only (workload 10 alone)] [--overtake-only (workload 12 alone)] \
                     [--peers-only (workload 13 alone)] \
                     [--waiters-only (workload 5, overtake limit on and off)] \
                     [--handoff-only (workloads 3 and 6 with PING, three times)] \
                     [--redisson-only (workload 14: Redisson's key layout and a mixed fleet)] \
                     [--fastpath-only (workload 15: a native SET NX PX fast path, on raw calls)]"
                );
                std::process::exit(0);
            }
            other => return Err(format!("unknown argument {other:?} (try --help)").into()),
        }
    }
    Ok(args)
}

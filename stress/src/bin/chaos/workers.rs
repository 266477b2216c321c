//! The worker processes and the coordinator that starts, feeds and replaces them.

use super::*;

// ---------------------------------------------------------------------------------------------
// Worker processes

pub(super) struct WorkerProc {
    pub(super) child: Child,
    pub(super) stdin: Option<ChildStdin>,
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

pub(super) struct Coordinator {
    pub(super) args: Args,
    pub(super) url: String,
    pub(super) ns: String,
    /// Start of the fault phase ([`now_ns`]).
    pub(super) t0: AtomicU64,
    pub(super) procs: Mutex<Vec<WorkerProc>>,
    pub(super) state: Mutex<State>,
    pub(super) lines: mpsc::UnboundedSender<(usize, String)>,
}

impl Coordinator {
    pub(super) fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap()
    }

    /// Seconds since the start of the fault phase, for printing.
    pub(super) fn rel(&self, t: u64) -> f64 {
        (t as f64 - self.t0.load(Ordering::Relaxed) as f64) / 1e9
    }

    pub(super) fn spawn_worker(&self, seed: u64) -> Result<usize, BoxError> {
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

    pub(super) fn tell(&self, w: usize, line: &str) {
        let mut procs = self.procs.lock().unwrap();
        if let Some(stdin) = procs[w].stdin.as_mut() {
            let _ = writeln!(stdin, "{line}").and_then(|_| stdin.flush());
        }
    }

    pub(super) fn pid(&self, w: usize) -> u32 {
        self.procs.lock().unwrap()[w].child.id()
    }

    /// Polls `done` every 20 ms, at most `timeout`.
    pub(super) async fn wait_for(&self, timeout: Duration, done: impl Fn(&State) -> bool) -> bool {
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

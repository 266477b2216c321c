//! Child processes for the multi-process tests: the parent side.
//!
//! A child is the `test-child` binary of this crate (`src/bin/test-child/`), started with a
//! role as its argument and its settings in `LOCKWISE_FP_*` variables. It streams history
//! lines (`lockwise_testkit::checker`) and `@`-markers on stdout and reads commands on
//! stdin; the parent stops, continues and kills it for real.
//!
//! A binary of another package gets no `CARGO_BIN_EXE_*` in the library's tests, and `cargo
//! test --test faults` builds no other package's binaries. So [`test_child_exe`] runs `cargo
//! build -p lockwise-suite --bin test-child` once per test process, for the profile and
//! target dir of the running test binary: a no-op when the binary is fresh, a rebuild when
//! the library changed since.
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::{mpsc, Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

/// Name of the binary that runs the child roles.
const TEST_CHILD: &str = "test-child";

/// Path of the `test-child` binary, built first if needed (once per process).
///
/// The running test binary lives in `<target dir>/[<triple>/]<profile dir>/deps/`; the child
/// goes to `<same>/<profile dir>/`. The build uses that profile, triple and target dir.
pub fn test_child_exe() -> PathBuf {
    static EXE: OnceLock<PathBuf> = OnceLock::new();
    EXE.get_or_init(|| {
        built(
            &["-p", "lockwise-suite", "--bin", TEST_CHILD],
            TEST_CHILD.into(),
        )
    })
    .clone()
}

/// Path of the `lockwise` binary of the `lockwise-cli` workspace crate, built first if
/// needed (once per process), as [`test_child_exe`] builds the child: a binary of another
/// package gets no `CARGO_BIN_EXE_*` in this package's tests.
pub fn cli_exe() -> PathBuf {
    static EXE: OnceLock<PathBuf> = OnceLock::new();
    EXE.get_or_init(|| {
        built(
            &["-p", "lockwise-cli", "--bin", "lockwise"],
            "lockwise".into(),
        )
    })
    .clone()
}

/// Runs `cargo build <what>` for the profile, triple and target dir of the running test
/// binary and returns `<profile dir>/<exe>`.
fn built(what: &[&str], exe: PathBuf) -> PathBuf {
    let me = std::env::current_exe().expect("path of the test binary");
    let profile_dir = me
        .parent()
        .and_then(Path::parent)
        .expect("test binary outside <target>/<profile>/deps");
    let mut exe = profile_dir.join(exe);
    exe.set_extension(std::env::consts::EXE_EXTENSION);
    let above = profile_dir.parent().expect("profile dir without a parent");
    // The target dir root holds CACHEDIR.TAG; otherwise `above` is `<target dir>/<triple>`.
    let (target_dir, triple) = if above.join("CACHEDIR.TAG").exists() {
        (above.to_path_buf(), None)
    } else {
        let root = above.parent().expect("triple dir without a parent");
        (root.to_path_buf(), above.file_name())
    };
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let mut cmd = Command::new(cargo);
    // `cargo test` sets these for the test binary; passed on, they would be the nested
    // build's environment, and build scripts that watch them (ring's watches
    // CARGO_MANIFEST_DIR) would rerun and leave the outer build stale: the next `cargo test`
    // rebuilt TLS, redis and everything above them, twice the disk and time.
    for (name, _) in std::env::vars_os() {
        if name.to_str().is_some_and(set_by_cargo_test) {
            cmd.env_remove(name);
        }
    }
    cmd.args(["build", "--quiet"])
        .args(what)
        .arg("--manifest-path")
        .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("Cargo.toml"))
        .arg("--target-dir")
        .arg(&target_dir);
    match profile_dir.file_name().and_then(|n| n.to_str()) {
        Some("debug") => {}
        Some("release") => {
            cmd.arg("--release");
        }
        Some(profile) => {
            cmd.args(["--profile", profile]);
        }
        None => panic!("odd profile dir {}", profile_dir.display()),
    }
    if let Some(triple) = triple {
        cmd.arg("--target").arg(triple);
    }
    match cmd.status() {
        Ok(status) => assert!(status.success(), "{cmd:?} failed ({status})"),
        // No cargo here (a test binary run by hand): use what was built before.
        Err(e) => assert!(
            exe.exists(),
            "cannot run cargo ({e}) and {} does not exist: run `cargo build {}`",
            exe.display(),
            what.join(" ")
        ),
    }
    exe
}

/// Whether `cargo test` sets the variable `name` for the test binary it runs (as opposed to
/// the user's own configuration, such as `CARGO_HOME` or `CARGO_PROFILE_*`).
fn set_by_cargo_test(name: &str) -> bool {
    name.starts_with("CARGO_PKG_")
        || name.starts_with("CARGO_MANIFEST_")
        || matches!(
            name,
            "CARGO_CRATE_NAME"
                | "CARGO_BIN_NAME"
                | "CARGO_PRIMARY_PACKAGE"
                | "CARGO_TARGET_TMPDIR"
                | "CARGO_RUSTC_CURRENT_DIR"
                | "OUT_DIR"
        )
}

/// A child process: the `test-child` binary running one role.
pub struct ChildProc {
    child: Child,
    stdin: Option<ChildStdin>,
    lines: mpsc::Receiver<String>,
    seen: Vec<String>,
    text: Arc<Mutex<String>>,
    reader: Option<std::thread::JoinHandle<()>>,
}

impl ChildProc {
    /// Starts the `test-child` example as child `role` with the server `url`, key namespace
    /// `ns`, history label `label` and `extra` environment; stdin and stdout are piped.
    pub fn spawn(
        role: &str,
        url: &str,
        ns: &str,
        label: &str,
        extra: &[(&str, String)],
    ) -> ChildProc {
        let mut cmd = Command::new(test_child_exe());
        cmd.arg(role)
            .env("LOCKWISE_FP_URL", url)
            .env("LOCKWISE_FP_NS", ns)
            .env("LOCKWISE_FP_LABEL", label)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit());
        for (k, v) in extra {
            cmd.env(k, v);
        }
        let mut child = cmd.spawn().expect("spawn child process");
        let stdout = child.stdout.take().unwrap();
        let stdin = child.stdin.take();
        let (tx, lines) = mpsc::channel();
        let text = Arc::new(Mutex::new(String::new()));
        let sink = text.clone();
        let reader = std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                let mut t = sink.lock().unwrap();
                t.push_str(&line);
                t.push('\n');
                drop(t);
                let _ = tx.send(line);
            }
        });
        ChildProc {
            child,
            stdin,
            lines,
            seen: Vec::new(),
            text,
            reader: Some(reader),
        }
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Waits (polling, without blocking the runtime) for a line starting with `prefix`.
    pub async fn wait_line(&mut self, prefix: &str, timeout: Duration) -> String {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(l) = self.seen.iter().find(|l| l.contains(prefix)) {
                return l.clone();
            }
            match self.lines.try_recv() {
                Ok(l) => self.seen.push(l),
                Err(mpsc::TryRecvError::Empty) => {
                    assert!(
                        Instant::now() < deadline,
                        "child {} printed no `{prefix}` within {timeout:?}; output:\n{}",
                        self.pid(),
                        self.text.lock().unwrap()
                    );
                    tokio::time::sleep(Duration::from_millis(5)).await;
                }
                Err(mpsc::TryRecvError::Disconnected) => panic!(
                    "child {} exited without printing `{prefix}`; output:\n{}",
                    self.pid(),
                    self.text.lock().unwrap()
                ),
            }
        }
    }

    pub fn send(&mut self, line: &str) {
        let stdin = self.stdin.as_mut().unwrap();
        writeln!(stdin, "{line}").unwrap();
        stdin.flush().unwrap();
    }

    /// `kill -<sig> <pid>` (STOP, CONT).
    pub fn signal(&self, sig: &str) {
        let ok = Command::new("kill")
            .args([&format!("-{sig}"), &self.pid().to_string()])
            .status()
            .expect("run kill")
            .success();
        assert!(ok, "kill -{sig} {} failed", self.pid());
    }

    /// SIGKILL and reap.
    pub fn sigkill(&mut self) {
        self.child.kill().unwrap();
        self.child.wait().unwrap();
    }

    /// Waits (at most `timeout`) for the child to exit successfully; returns all its output.
    pub async fn finish(mut self, timeout: Duration) -> String {
        let deadline = Instant::now() + timeout;
        let status = loop {
            if let Some(st) = self.child.try_wait().unwrap() {
                break st;
            }
            if Instant::now() >= deadline {
                let _ = self.child.kill();
                let _ = self.child.wait();
                panic!(
                    "child {} did not exit within {timeout:?}; output:\n{}",
                    self.pid(),
                    self.text.lock().unwrap()
                );
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        };
        self.reader.take().unwrap().join().unwrap();
        let text = self.text.lock().unwrap().clone();
        assert!(status.success(), "child failed ({status}); output:\n{text}");
        text
    }

    /// Remote ports of the child's established TCP connections (Linux: its socket fds in
    /// `/proc/<pid>/fd`, matched by inode in `/proc/<pid>/net/tcp`): which servers it talks
    /// to right now, seen from outside.
    pub fn peer_ports(&self) -> Vec<u16> {
        peer_ports(self.pid())
    }

    /// All output so far (after the child was killed: everything it printed).
    pub fn output(&mut self) -> String {
        if let Some(r) = self.reader.take() {
            r.join().unwrap();
        }
        self.text.lock().unwrap().clone()
    }
}

impl Drop for ChildProc {
    fn drop(&mut self) {
        // Never leave a stopped or running child behind a failed test.
        if let Ok(None) = self.child.try_wait() {
            let _ = Command::new("kill")
                .args(["-CONT", &self.child.id().to_string()])
                .stderr(Stdio::null())
                .status();
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// See [`ChildProc::peer_ports`].
pub fn peer_ports(pid: u32) -> Vec<u16> {
    let Ok(fds) = std::fs::read_dir(format!("/proc/{pid}/fd")) else {
        return Vec::new();
    };
    let inodes: std::collections::HashSet<String> = fds
        .filter_map(|fd| std::fs::read_link(fd.ok()?.path()).ok())
        .filter_map(|link| {
            let link = link.to_string_lossy().into_owned();
            Some(
                link.strip_prefix("socket:[")?
                    .strip_suffix(']')?
                    .to_string(),
            )
        })
        .collect();
    let mut ports = Vec::new();
    for table in ["tcp", "tcp6"] {
        let text = std::fs::read_to_string(format!("/proc/{pid}/net/{table}")).unwrap_or_default();
        // sl local_address rem_address st tx:rx tr:when retrnsmt uid timeout inode ...
        for line in text.lines().skip(1) {
            let cols: Vec<&str> = line.split_whitespace().collect();
            let (Some(rem), Some(state), Some(inode)) = (cols.get(2), cols.get(3), cols.get(9))
            else {
                continue;
            };
            if *state != "01" || !inodes.contains(*inode) {
                continue; // not ESTABLISHED, or not this process's socket
            }
            if let Some(port) = rem
                .rsplit(':')
                .next()
                .and_then(|p| u16::from_str_radix(p, 16).ok())
            {
                ports.push(port);
            }
        }
    }
    ports
}

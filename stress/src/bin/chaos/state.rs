//! What the coordinator learns from the workers: holds, failures, beliefs.

use super::*;

// ---------------------------------------------------------------------------------------------
// What the coordinator learns from the workers

/// One hold, from its `A` and `E` lines.
#[derive(Clone, Debug)]
pub(super) struct Hold {
    pub(super) worker: usize,
    pub(super) task: u32,
    pub(super) lock: usize,
    pub(super) mode: String,
    pub(super) owner: String,
    pub(super) token: Option<u64>,
    pub(super) invoke: u64,
    pub(super) acq: u64,
    /// A lease hold's expiry (inner bound, from its PTTL right after acquiring).
    pub(super) lease_end: Option<u64>,
    /// Last confirmed valid (from `E`).
    pub(super) end: Option<u64>,
    /// Last confirmed valid before the unlock was sent (from `U`): where the hold of a worker
    /// killed between its unlock and its `E` line ends.
    pub(super) unlocking: Option<u64>,
    /// When unlock returned.
    pub(super) done: Option<u64>,
    pub(super) how: String,
    /// A re-entry of this hold failed with a retryable error: it may have run or not.
    pub(super) reentry_failed: bool,
}

/// A failed lock call (`X` line).
#[derive(Clone, Debug)]
pub(super) struct Failed {
    pub(super) worker: usize,
    pub(super) at: u64,
    pub(super) retryable: bool,
    pub(super) message: String,
}

#[derive(Default)]
pub(super) struct WorkerInfo {
    pub(super) label: String,
    pub(super) pid: u32,
    pub(super) client_id: String,
    pub(super) ready: bool,
    pub(super) killed_at: Option<u64>,
    /// SIGSTOP periods (start, end; end 0 while stopped).
    pub(super) stops: Vec<(u64, u64)>,
    pub(super) parked: bool,
    pub(super) released: bool,
    pub(super) beliefs: Vec<Belief>,
    pub(super) stats: String,
    pub(super) eof: bool,
}

#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(super) struct Belief {
    pub(super) key: String,
    pub(super) owner: String,
    pub(super) count: i64,
    pub(super) token: Option<u64>,
}

#[derive(Default)]
pub(super) struct State {
    pub(super) workers: Vec<WorkerInfo>,
    pub(super) holds: BTreeMap<(usize, u64), Hold>,
    pub(super) failed: Vec<Failed>,
    /// Waits abandoned at the barrier: (lock, invoke, at).
    pub(super) abandoned: Vec<(usize, u64, u64)>,
    /// `Q` lines and protocol surprises.
    pub(super) violations: Vec<String>,
    pub(super) no_ttl: BTreeSet<String>,
    pub(super) faults: BTreeMap<&'static str, u64>,
}

impl State {
    pub(super) fn apply(&mut self, w: usize, line: &str) {
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
                        reentry_failed: false,
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
            "X" if rest.len() >= 5 => {
                let message = rest[5..].join(" ");
                let reentry_of = message
                    .strip_prefix("re-entry of hold ")
                    .and_then(|m| m.split(':').next())
                    .and_then(|id| id.parse::<u64>().ok());
                if let Some(h) = reentry_of.and_then(|id| self.holds.get_mut(&(w, id))) {
                    h.reentry_failed = rest[4] == "retryable";
                }
                self.failed.push(Failed {
                    worker: w,
                    at: num(3).unwrap_or(0),
                    retryable: rest[4] == "retryable",
                    message,
                });
            }
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

    pub(super) fn garbled(&mut self, w: usize, line: &str) {
        if self.workers[w].killed_at.is_none() {
            self.violations.push(format!(
                "{}: unreadable line {line:?}",
                self.workers[w].label
            ));
        }
    }

    pub(super) fn count_fault(&mut self, name: &'static str) {
        *self.faults.entry(name).or_default() += 1;
    }

    pub(super) fn live(&self) -> Vec<usize> {
        (0..self.workers.len())
            .filter(|&w| self.workers[w].killed_at.is_none() && !self.workers[w].eof)
            .collect()
    }

    /// The label of the worker whose client id starts `owner`.
    pub(super) fn owner_label(&self, owner: &str) -> String {
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

/// " (its worker was SIGSTOPped ...)" when the worker of `h` was stopped between the lock
/// call and `until`: the hold may have outlived its TTL unseen.
pub(super) fn stopped_note(s: &State, h: &Hold, until: u64) -> &'static str {
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

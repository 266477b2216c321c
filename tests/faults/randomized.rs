//! Randomized fault runs: real `Client`s against a real redis-server (and a Cluster) through
//! the testkit's RESP-aware fault proxy (`lockwise_testkit::faults`), driven by seeded random
//! sequences of lock / re-entry / unlock / drop / `join!(acquire, unlock)` / `select!` that
//! cancels an acquire after it was sent / lease ends / `force_unlock` / another client's
//! acquires / faults (a reply dropped, held past the response timeout, a connection reset
//! after the command ran, a server pause), over every lock kind, the semaphores and the latch,
//! in both key layouts.
//!
//! After every step the guards' beliefs are compared with the server: a guard that is not lost
//! must be counted in its hash (`HGETALL`), and once settlements are done (a bounded poll) the
//! server counts no hold no live guard explains; every key has a TTL; permits never exceed n;
//! the latch never opens before n count-downs could have run. When an owner acquires, every
//! other owner's guard of that lock must already be lost (a loss signalled before another owner
//! could take it). At the end the history checker runs (no overlapping holds, tokens rise).
//!
//! * `LOCKWISE_RANDOM_SEED=<u64>` reruns one seed (printed at the start and on failure).
//! * `LOCKWISE_RANDOM_LAYOUT=lockwise|redisson` runs one key layout on one server.
//! * `LOCKWISE_RANDOM_STEPS=<n>` sets the budget (default [`DEFAULT_STEPS`] per layout on one
//!   server, [`DEFAULT_CLUSTER_STEPS`] on the Cluster).
//!
//! The RNG is `rand` 0.9's `StdRng` (already a dev-dependency; `seed_from_u64` gives the same
//! sequence for a seed with the locked `rand`). The server's timing is not seeded, so a seed
//! replays the same operations, not always the same interleaving.
//!
//! Long run: `LOCKWISE_RANDOM_STEPS=50000 bash scripts/with-redis.sh cargo test -p lockwise
//! --test faults randomized -- --nocapture`.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use lockwise::{
    Client, CountDownLatch, FairLock, FairLockGuard, FencedLock, FencedLockGuard, KeyLayout,
    LeaseSemaphore, LeasedPermit, RLock, RLockGuard, ReadLock, ReadLockGuard, Semaphore,
    SemaphorePermits, SpinLock, SpinLockGuard, WriteLock, WriteLockGuard,
};
use lockwise_testkit::faults::{Fault, FaultProxy, Match};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use suite::checker::{self, AcqId, History};
use suite::RedisServer;

/// Steps per key layout on one server in CI.
const DEFAULT_STEPS: usize = 500;
/// Steps on the Cluster in CI.
const DEFAULT_CLUSTER_STEPS: usize = 200;
/// Permits of the semaphores, count of the latch.
const PERMITS: u64 = 2;
const LATCH: u64 = 3;
const RESPONSE_TIMEOUT: Duration = Duration::from_millis(300);
/// The longest lease the test takes (a `join!` re-acquire's).
const MAX_LEASE: Duration = Duration::from_secs(30);
const WATCHDOG: Duration = Duration::from_millis(1500);

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Kind {
    R,
    Fenced,
    Fair,
    Spin,
    Read,
    Write,
    Sem,
    LeaseSem,
    Latch,
}

const KINDS: [Kind; 9] = [
    Kind::R,
    Kind::Fenced,
    Kind::Fair,
    Kind::Spin,
    Kind::Read,
    Kind::Write,
    Kind::Sem,
    Kind::LeaseSem,
    Kind::Latch,
];

impl Kind {
    fn is_lock(self) -> bool {
        !matches!(self, Kind::Sem | Kind::LeaseSem | Kind::Latch)
    }
}

#[derive(Clone)]
enum AnyLock {
    R(RLock),
    Fe(FencedLock),
    Fa(FairLock),
    Sp(SpinLock),
    Rd(ReadLock),
    Wr(WriteLock),
}

enum AnyGuard {
    R(RLockGuard),
    Fe(FencedLockGuard),
    Fa(FairLockGuard),
    Sp(SpinLockGuard),
    Rd(ReadLockGuard),
    Wr(WriteLockGuard),
}

macro_rules! each {
    ($v:expr, $t:ident, $x:ident => $e:expr) => {
        match $v {
            $t::R($x) => $e,
            $t::Fe($x) => $e,
            $t::Fa($x) => $e,
            $t::Sp($x) => $e,
            $t::Rd($x) => $e,
            $t::Wr($x) => $e,
        }
    };
}

impl AnyLock {
    fn of(client: &Client, kind: Kind, name: &str) -> AnyLock {
        match kind {
            Kind::R => AnyLock::R(client.lock(name)),
            Kind::Fenced => AnyLock::Fe(client.fenced_lock(name)),
            Kind::Fair => AnyLock::Fa(client.fair_lock(name)),
            Kind::Spin => AnyLock::Sp(client.spin_lock(name)),
            Kind::Read => AnyLock::Rd(client.rw_lock(name).read()),
            Kind::Write => AnyLock::Wr(client.rw_lock(name).write()),
            _ => unreachable!(),
        }
    }
    fn with_owner(&self, owner: &str) -> AnyLock {
        match self {
            AnyLock::R(l) => AnyLock::R(l.with_owner(owner)),
            AnyLock::Fe(l) => AnyLock::Fe(l.with_owner(owner)),
            AnyLock::Fa(l) => AnyLock::Fa(l.with_owner(owner)),
            AnyLock::Sp(l) => AnyLock::Sp(l.with_owner(owner)),
            AnyLock::Rd(l) => AnyLock::Rd(l.with_owner(owner)),
            AnyLock::Wr(l) => AnyLock::Wr(l.with_owner(owner)),
        }
    }
    fn key(&self) -> String {
        each!(self, AnyLock, l => l.key().to_string())
    }
    async fn try_lock(
        &self,
        wait: Duration,
        lease: Option<Duration>,
    ) -> lockwise::Result<AnyGuard> {
        match self {
            AnyLock::R(l) => l.try_lock(wait, lease).await.map(AnyGuard::R),
            AnyLock::Fe(l) => l.try_lock(wait, lease).await.map(AnyGuard::Fe),
            AnyLock::Fa(l) => l.try_lock(wait, lease).await.map(AnyGuard::Fa),
            AnyLock::Sp(l) => l.try_lock(wait, lease).await.map(AnyGuard::Sp),
            AnyLock::Rd(l) => l.try_lock(wait, lease).await.map(AnyGuard::Rd),
            AnyLock::Wr(l) => l.try_lock(wait, lease).await.map(AnyGuard::Wr),
        }
    }
    async fn force_unlock(&self) -> lockwise::Result<bool> {
        each!(self, AnyLock, l => l.force_unlock().await)
    }
}

impl AnyGuard {
    fn is_lost(&self) -> bool {
        each!(self, AnyGuard, g => g.is_lost())
    }
    fn owner(&self) -> String {
        each!(self, AnyGuard, g => g.owner().to_string())
    }
    fn lost(&self) -> lockwise::CancellationToken {
        each!(self, AnyGuard, g => g.lost())
    }
    fn token(&self) -> Option<u64> {
        match self {
            AnyGuard::Fe(g) => Some(g.token()),
            _ => None,
        }
    }
    async fn unlock(self) -> lockwise::Result<()> {
        each!(self, AnyGuard, g => g.unlock().await)
    }
}

/// One live guard of a lock kind, as the test tracks it.
struct Held {
    guard: AnyGuard,
    kind: Kind,
    owner: usize,
    /// The lock's name (one per kind and layout) and hash key.
    name: String,
    key: String,
    field: String,
    acq: AcqId,
    /// Force-unlocked by the test since it was taken: the server may forget it unannounced.
    doomed: bool,
    /// When it was force-unlocked: its `lost()` must fire by its next renewal, or by its
    /// lease's end (a hold the server forgot is never adopted by a later grant).
    doomed_at: Option<Instant>,
    /// Its lease (`None`: the watchdog's).
    lease: Option<Duration>,
    /// When its loss was signalled (the `lost()` token), on the history's clock.
    lost_at: Arc<Mutex<Option<u64>>>,
    /// Whether the history has its release already (a force-unlocked guard's comes first).
    recorded: bool,
    step: usize,
}

impl Held {
    /// `is_lost()`, noting the first time it is seen (the `lost()` token may come later).
    fn lost_now(&self) -> bool {
        let lost = self.guard.is_lost();
        if lost {
            self.lost_at
                .lock()
                .unwrap()
                .get_or_insert_with(checker::now_ns);
        }
        lost
    }
}

/// Everything of one run (one layout, one deployment).
struct World {
    label: String,
    rng: StdRng,
    history: History,
    /// Clients: 0 and 1 through the proxy, 2 ("the other client") too on a Cluster, direct on
    /// one server.
    clients: Vec<Client>,
    /// Owner index -> (client index, owner id).
    owners: Vec<(usize, String)>,
    proxies: Vec<FaultProxy>,
    server: Option<RedisServer>,
    conn: ConnKind,
    supported: BTreeMap<Kind, bool>,
    held: Vec<Held>,
    permits: Vec<(usize, SemaphorePermits)>,
    leased: Vec<(usize, LeasedPermit)>,
    latch_ok: u64,
    latch_unknown: u64,
    latch_round: u64,
    log: Vec<String>,
    ops: BTreeMap<&'static str, u64>,
    kinds: BTreeMap<Kind, u64>,
    violations: Vec<String>,
    step: usize,
    /// Settles this long at most (bounded quiescence poll).
    settle: Duration,
    pauses: bool,
}

enum ConnKind {
    Single(lockwise_testkit::Conn),
    Cluster(redis::cluster_async::ClusterConnection),
}

impl ConnKind {
    async fn query<T: redis::FromRedisValue>(&mut self, cmd: &redis::Cmd) -> redis::RedisResult<T> {
        match self {
            ConnKind::Single(c) => cmd.query_async(c).await,
            ConnKind::Cluster(c) => cmd.query_async(c).await,
        }
    }
}

fn name_of(kind: Kind) -> &'static str {
    match kind {
        Kind::Read | Kind::Write => "rw",
        Kind::R => "r",
        Kind::Fenced => "fenced",
        Kind::Fair => "fair",
        Kind::Spin => "spin",
        Kind::Sem => "sem",
        Kind::LeaseSem => "lsem",
        Kind::Latch => "latch",
    }
}

impl World {
    fn lock(&self, kind: Kind, owner: usize) -> AnyLock {
        let (c, id) = &self.owners[owner];
        AnyLock::of(&self.clients[*c], kind, name_of(kind)).with_owner(id)
    }
    fn sem(&self, client: usize) -> Semaphore {
        self.clients[client].semaphore("sem")
    }
    fn lsem(&self, client: usize) -> LeaseSemaphore {
        self.clients[client].lease_semaphore("lsem")
    }
    fn latch(&self, client: usize) -> CountDownLatch {
        self.clients[client].count_down_latch("latch")
    }

    fn note(&mut self, s: String) {
        self.log.push(format!("#{} {s}", self.step));
    }

    fn violation(&mut self, s: String) {
        let msg = format!("[{}] step {}: {s}", self.label, self.step);
        eprintln!("VIOLATION {msg}");
        self.violations.push(msg);
    }

    fn pick_kind(&mut self) -> Kind {
        loop {
            let k = KINDS[self.rng.random_range(0..KINDS.len())];
            if self.supported.get(&k).copied().unwrap_or(true) {
                return k;
            }
        }
    }

    /// The test's own record of an attempt that returned: history, exclusivity, tracking.
    fn took(&mut self, kind: Kind, owner: usize, acq: AcqId, lease: Option<Duration>, g: AnyGuard) {
        let name = name_of(kind).to_string();
        let key = self.lock(kind, owner).key();
        let owner_s = g.owner();
        // Exclusivity: every other owner's conflicting guard must be lost by now.
        let mut msgs = Vec::new();
        for h in &self.held {
            let conflicts =
                h.name == name && h.owner != owner && !(kind == Kind::Read && h.kind == Kind::Read);
            if conflicts && !h.doomed && !h.lost_now() {
                let msg = format!(
                    "{kind:?} granted to o{owner} while o{}'s {:?} guard (step {}) is not lost: two owners",
                    h.owner, h.kind, h.step
                );
                msgs.push(msg);
            }
        }
        for m in msgs {
            self.violation(m);
        }
        if kind != Kind::Read {
            self.history.ok(&acq, &owner_s, g.token(), lease);
        } else {
            self.history.note(&acq, "read");
        }
        let lost_at = Arc::new(Mutex::new(None));
        let slot = lost_at.clone();
        let token = g.lost();
        tokio::spawn(async move {
            token.cancelled().await;
            *slot.lock().unwrap() = Some(checker::now_ns());
        });
        self.held.push(Held {
            guard: g,
            kind,
            owner,
            name,
            key,
            field: owner_s,
            acq,
            doomed: false,
            doomed_at: None,
            lease,
            lost_at,
            recorded: false,
            step: self.step,
        });
    }

    /// The history's release of a guard leaving the test's hands at `at`: its loss, if earlier.
    fn released(&self, h: &Held, at: u64, why: &str) {
        if h.kind == Kind::Read || h.recorded {
            return;
        }
        let at = h.lost_at.lock().unwrap().map_or(at, |l| l.min(at));
        self.history.release_at(&h.acq, at, why);
    }

    async fn acquire(&mut self, kind: Kind, owner: usize, wait: Duration, lease: Option<Duration>) {
        let lock = self.lock(kind, owner);
        let acq = self.history.invoke(
            &format!("o{owner}"),
            &format!("{}/{}", self.label, name_of(kind)),
        );
        let r = lock.try_lock(wait, lease).await;
        self.finish(kind, owner, acq, lease, r);
    }

    fn finish(
        &mut self,
        kind: Kind,
        owner: usize,
        acq: AcqId,
        lease: Option<Duration>,
        r: lockwise::Result<AnyGuard>,
    ) {
        match r {
            Ok(g) => {
                self.note(format!("o{owner} {kind:?} lease {lease:?}: ok"));
                self.took(kind, owner, acq, lease, g);
            }
            Err(e) if e.is_unsupported() => {
                self.note(format!("{kind:?} unsupported in this layout: {e}"));
                self.supported.insert(kind, false);
                self.history.fail(&acq, "unsupported");
            }
            Err(e) => {
                self.note(format!("o{owner} {kind:?} lease {lease:?}: {e}"));
                if e.is_timeout() || e.is_not_held() {
                    self.history.fail(&acq, &e.to_string());
                } else {
                    self.history.unknown(&acq, &e.to_string());
                }
            }
        }
    }

    fn random_lease(&mut self) -> Option<Duration> {
        match self.rng.random_range(0..4) {
            0 => None,
            1 => Some(Duration::from_millis(self.rng.random_range(100..300))),
            2 => Some(Duration::from_secs(3)),
            _ => Some(Duration::from_millis(self.rng.random_range(300..900))),
        }
    }

    fn random_wait(&mut self) -> Duration {
        Duration::from_millis([0u64, 0, 30, 150][self.rng.random_range(0..4)])
    }

    /// One random step.
    async fn step(&mut self) {
        self.step += 1;
        let kind = self.pick_kind();
        *self.kinds.entry(kind).or_default() += 1;
        let owner = self.rng.random_range(0..3);
        let roll = self.rng.random_range(0..100);
        let op: &'static str = match roll {
            0..30 => "acquire",
            30..48 => "unlock",
            48..54 => "drop",
            54..62 => "join",
            62..70 => "select",
            70..75 => "sleep",
            75..78 => "force_unlock",
            78..86 => "other",
            86..98 => "fault",
            _ => "pause",
        };
        *self.ops.entry(op).or_default() += 1;
        match (op, kind.is_lock()) {
            ("acquire", true) => {
                let (wait, lease) = (self.random_wait(), self.random_lease());
                self.acquire(kind, owner, wait, lease).await;
            }
            ("acquire", false) | ("other", false) => self.sync_acquire(kind, owner).await,
            ("unlock", _) | ("drop", _) => {
                let drop = op == "drop";
                self.release_one(kind, drop).await;
            }
            ("join", true) => self.join(kind).await,
            ("select", _) => self.select(kind, owner).await,
            ("sleep", _) => {
                let ms = self.rng.random_range(100..500);
                self.note(format!("sleep {ms} ms"));
                tokio::time::sleep(Duration::from_millis(ms)).await;
            }
            ("force_unlock", true) => {
                let lock = self.lock(kind, 3);
                let now = checker::now_ns();
                let r = lock.force_unlock().await;
                self.note(format!("other force_unlock {kind:?}: {r:?}"));
                let name = name_of(kind).to_string();
                let rw = matches!(kind, Kind::Read | Kind::Write);
                // `Ok(false)`: nothing was deleted (in Redisson's layout a read-write lock's
                // side deletes only a hash in its own mode); an error: maybe.
                let deleted = r.as_ref().is_ok_and(|d| *d);
                for i in 0..self.held.len() {
                    let h = &self.held[i];
                    let same = h.name == name && (rw || h.kind == kind);
                    if same && !h.doomed && !matches!(r, Ok(false)) {
                        self.released(&self.held[i], now, "force_unlock");
                        self.held[i].doomed = true;
                        self.held[i].doomed_at = deleted.then(Instant::now);
                        self.held[i].recorded = true;
                    }
                }
                // Half the time a holder re-enters at once and cancels it after sending,
                // before its renewal can see the lock gone: a fresh hold of the same count
                // that must not be adopted by the force-unlocked guard.
                let doomed = |h: &&Held| h.doomed_at.is_some() && h.kind == kind;
                let holder = (self.held.iter().filter(doomed))
                    .find(|h| h.lease.is_none())
                    .or_else(|| self.held.iter().find(doomed))
                    .map(|h| h.owner);
                if let (Some(o), true) = (holder, self.rng.random_bool(0.5)) {
                    // Its reply held back so that the cancel lands after the send.
                    let key = self.lock(kind, 0).key();
                    for p in &self.proxies {
                        p.disarm();
                        p.arm(
                            Fault::HoldReply(Duration::from_millis(50)),
                            Match::scripts().arg_contains(&key),
                        );
                    }
                    self.note(format!("re-entry of o{o} held back and cancelled"));
                    self.select_after(kind, o, Duration::from_millis(5)).await;
                }
            }
            ("other", true) => {
                let lease = Some(Duration::from_millis(self.rng.random_range(200..800)));
                self.acquire(kind, 3, Duration::ZERO, lease).await;
            }
            ("fault", _) => self.arm_fault(kind),
            ("pause", _) if self.pauses => {
                let ms = self.rng.random_range(100..700);
                self.note(format!("server paused {ms} ms"));
                let server = self.server.as_ref().unwrap();
                server.pause();
                tokio::time::sleep(Duration::from_millis(ms)).await;
                server.resume();
            }
            _ => {
                let (wait, lease) = (self.random_wait(), self.random_lease());
                if kind.is_lock() {
                    self.acquire(kind, owner, wait, lease).await;
                } else {
                    self.sync_acquire(kind, owner).await;
                }
            }
        }
        self.check().await;
    }

    fn arm_fault(&mut self, kind: Kind) {
        let key = match kind {
            k if k.is_lock() => self.lock(k, 0).key(),
            _ => name_of(kind).to_string(),
        };
        let fault = match self.rng.random_range(0..3) {
            0 => Fault::DropReply,
            1 => Fault::HoldReply(Duration::from_millis(self.rng.random_range(100..700))),
            _ => Fault::ResetAfterSend,
        };
        let p = self.rng.random_range(0..self.proxies.len());
        let when = if self.rng.random_bool(0.8) {
            Match::scripts().arg_contains(&key)
        } else {
            Match::scripts()
        };
        self.note(format!("arm {fault:?} on proxy {p} for scripts on {key}"));
        self.proxies[p].disarm();
        self.proxies[p].arm(fault, when);
    }

    async fn release_one(&mut self, kind: Kind, drop: bool) {
        if !kind.is_lock() {
            return self.sync_release(kind, drop).await;
        }
        let idx: Vec<usize> = (0..self.held.len())
            .filter(|&i| self.held[i].kind == kind)
            .collect();
        if idx.is_empty() {
            return;
        }
        let i = idx[self.rng.random_range(0..idx.len())];
        let h = self.held.remove(i);
        self.released(&h, checker::now_ns(), if drop { "drop" } else { "unlock" });
        let desc = format!("o{} {:?} (step {})", h.owner, h.kind, h.step);
        if drop {
            self.note(format!("drop {desc}"));
            std::mem::drop(h.guard);
        } else {
            let r = h.guard.unlock().await;
            self.note(format!("unlock {desc}: {r:?}"));
        }
    }

    /// `join!(acquire, unlock)` by one owner: a guard (preferably a stale one) of the owner is
    /// unlocked while the same owner acquires again.
    async fn join(&mut self, kind: Kind) {
        let idx: Vec<usize> = (0..self.held.len())
            .filter(|&i| self.held[i].kind == kind && self.held[i].owner != 3)
            .collect();
        if idx.is_empty() {
            // Take one with a short lease, let it end: the next join finds it stale.
            let owner = self.rng.random_range(0..3);
            let lease = Some(Duration::from_millis(self.rng.random_range(100..250)));
            return self.acquire(kind, owner, Duration::ZERO, lease).await;
        }
        let stale: Vec<usize> = idx
            .iter()
            .copied()
            .filter(|&i| self.held[i].guard.is_lost())
            .collect();
        let i = if !stale.is_empty() && self.rng.random_bool(0.7) {
            stale[self.rng.random_range(0..stale.len())]
        } else {
            idx[self.rng.random_range(0..idx.len())]
        };
        let h = self.held.remove(i);
        let owner = h.owner;
        let lease = Some(if self.rng.random_bool(0.5) {
            MAX_LEASE
        } else {
            Duration::from_secs(2)
        });
        let lock = self.lock(kind, owner);
        let acq = self.history.invoke(
            &format!("o{owner}"),
            &format!("{}/{}", self.label, name_of(kind)),
        );
        self.released(&h, checker::now_ns(), "unlock in join");
        let desc = format!(
            "o{owner} {kind:?} (step {}, lost {})",
            h.step,
            h.guard.is_lost()
        );
        let unlock_first = self.rng.random_bool(0.5);
        let (a, u) = if unlock_first {
            let (u, a) = tokio::join!(
                h.guard.unlock(),
                lock.try_lock(Duration::from_millis(100), lease)
            );
            (a, u)
        } else {
            tokio::join!(
                lock.try_lock(Duration::from_millis(100), lease),
                h.guard.unlock()
            )
        };
        self.note(format!(
            "join!(acquire lease {lease:?}, unlock {desc}) unlock_first {unlock_first}: acquire {}, unlock {u:?}",
            a.as_ref().map(|_| "ok".to_string()).unwrap_or_else(|e| e.to_string())
        ));
        self.finish(kind, owner, acq, lease, a);
    }

    /// `select!` of an acquire (a re-entry when the owner holds) with a short timer that
    /// cancels it, often after it was sent.
    async fn select(&mut self, kind: Kind, owner: usize) {
        let after = Duration::from_millis(self.rng.random_range(0..12));
        self.select_after(kind, owner, after).await;
    }

    /// `select!` of an acquire and a timer of `after`: the acquire is cancelled if the timer
    /// fires first (after it was sent, when the reply takes longer).
    async fn select_after(&mut self, kind: Kind, owner: usize, after: Duration) {
        if !kind.is_lock() {
            let sem = self.sem(self.owners[owner].0);
            let lsem = self.lsem(self.owners[owner].0);
            let r = match kind {
                Kind::Sem => tokio::select! {
                    r = sem.try_acquire(Duration::from_millis(50)) => Some(r.map(|p| self.permits.push((owner, p))).is_ok()),
                    _ = tokio::time::sleep(after) => None,
                },
                Kind::LeaseSem => tokio::select! {
                    r = lsem.try_acquire(Duration::from_millis(50), Duration::from_secs(2)) => Some(r.map(|p| self.leased.push((owner, p))).is_ok()),
                    _ = tokio::time::sleep(after) => None,
                },
                _ => None,
            };
            self.note(format!("select!(o{owner} {kind:?}, {after:?}): {r:?}"));
            return;
        }
        let lease = self.random_lease();
        let lock = self.lock(kind, owner);
        let acq = self.history.invoke(
            &format!("o{owner}"),
            &format!("{}/{}", self.label, name_of(kind)),
        );
        let r = tokio::select! {
            r = lock.try_lock(Duration::from_millis(100), lease) => Some(r),
            _ = tokio::time::sleep(after) => None,
        };
        match r {
            Some(r) => self.finish(kind, owner, acq, lease, r),
            None => {
                self.note(format!(
                    "select!(o{owner} {kind:?} lease {lease:?}, {after:?}): cancelled"
                ));
                self.history.fail(&acq, "cancelled");
            }
        }
    }

    async fn sync_acquire(&mut self, kind: Kind, owner: usize) {
        let client = self.owners[owner].0;
        match kind {
            Kind::Sem => {
                let r = self.sem(client).try_acquire(self.random_wait()).await;
                self.note(format!(
                    "o{owner} sem acquire: {:?}",
                    r.as_ref().map(|p| p.permits())
                ));
                match r {
                    Ok(p) => self.permits.push((owner, p)),
                    Err(e) if e.is_unsupported() => {
                        self.supported.insert(kind, false);
                    }
                    Err(_) => {}
                }
            }
            Kind::LeaseSem => {
                let lease = Duration::from_millis(self.rng.random_range(200..3000));
                let r = self
                    .lsem(client)
                    .try_acquire(self.random_wait(), lease)
                    .await;
                self.note(format!(
                    "o{owner} lsem acquire lease {lease:?}: {:?}",
                    r.as_ref().map(|p| p.id().to_string())
                ));
                match r {
                    Ok(p) => self.leased.push((owner, p)),
                    Err(e) if e.is_unsupported() => {
                        self.supported.insert(kind, false);
                    }
                    Err(_) => {}
                }
            }
            _ => {
                // The latch: count down, or wait a little and check it did not open early.
                if self.rng.random_bool(0.6) {
                    let r = self.latch(client).count_down().await;
                    self.note(format!("o{owner} latch count_down: {r:?}"));
                    match r {
                        Ok(_) => self.latch_ok += 1,
                        Err(e) if e.is_unsupported() => {
                            self.supported.insert(kind, false);
                        }
                        Err(_) => self.latch_unknown += 1,
                    }
                } else {
                    let could = self.latch_ok + self.latch_unknown;
                    let r = self
                        .latch(client)
                        .wait_timeout(Duration::from_millis(50))
                        .await;
                    self.note(format!("o{owner} latch wait: {r:?}"));
                    if matches!(r, Ok(true)) && could < LATCH && self.latch_round > 0 {
                        self.violation(format!(
                            "latch open after {} confirmed and {} unknown count-downs of {LATCH}",
                            self.latch_ok, self.latch_unknown
                        ));
                    }
                }
            }
        }
    }

    async fn sync_release(&mut self, kind: Kind, drop: bool) {
        match kind {
            Kind::Sem if !self.permits.is_empty() => {
                let i = self.rng.random_range(0..self.permits.len());
                let (o, p) = self.permits.remove(i);
                if drop {
                    self.note(format!("o{o} sem drop"));
                    std::mem::drop(p);
                } else {
                    let r = p.release().await;
                    self.note(format!("o{o} sem release: {r:?}"));
                }
            }
            Kind::LeaseSem if !self.leased.is_empty() => {
                let i = self.rng.random_range(0..self.leased.len());
                let (o, p) = self.leased.remove(i);
                if drop {
                    self.note(format!("o{o} lsem drop"));
                    std::mem::drop(p);
                } else {
                    let r = p.release().await;
                    self.note(format!("o{o} lsem release: {r:?}"));
                }
            }
            Kind::Latch => {
                // A new round once the latch is open (or never set).
                let latch = self.latch(2);
                if let Ok(true) = latch.try_set_count(LATCH, Duration::from_secs(30)).await {
                    self.latch_round += 1;
                    self.latch_ok = 0;
                    self.latch_unknown = 0;
                    self.note(format!("latch round {} set to {LATCH}", self.latch_round));
                }
            }
            _ => {}
        }
    }

    /// Compares the guards' beliefs with the server, waiting (bounded) for settlements.
    async fn check(&mut self) {
        let deadline = Instant::now() + self.settle;
        loop {
            let problems = self.compare().await;
            if problems.is_empty() {
                return;
            }
            if Instant::now() >= deadline {
                for p in problems {
                    self.violation(p);
                }
                return;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    async fn compare(&mut self) -> Vec<String> {
        let mut out = Vec::new();
        // Lock kinds: per hash key, the server's count per owner field.
        let mut keys: Vec<String> = KINDS
            .iter()
            .filter(|k| k.is_lock())
            .map(|&k| self.lock(k, 0).key())
            .collect();
        keys.sort();
        keys.dedup();
        for key in keys {
            let server: BTreeMap<String, String> =
                match self.conn.query(redis::cmd("HGETALL").arg(&key)).await {
                    Ok(m) => m,
                    Err(e) if e.to_string().contains("WRONGTYPE") => continue,
                    Err(e) => {
                        out.push(format!("HGETALL {key}: {e}"));
                        continue;
                    }
                };
            let mut firm: BTreeMap<&str, u64> = BTreeMap::new();
            let mut live: BTreeMap<&str, u64> = BTreeMap::new();
            for h in self.held.iter().filter(|h| h.key == key) {
                // A force-unlocked hold is gone for good: no later count is its own (a count
                // only it could explain is a later hold adopted as it).
                if h.doomed_at.is_none() {
                    *live.entry(&h.field).or_default() += 1;
                }
                if !h.doomed && !h.lost_now() {
                    *firm.entry(&h.field).or_default() += 1;
                }
            }
            // A force-unlocked watchdog guard learns of it by its next renewal (a hold the
            // server forgot is never adopted by a later grant). A leased one learns at its
            // run's loss deadline: a re-entry never lowers the key's TTL, so a short lease in
            // a run that also had a long one is valid (and the key lives) as long as that.
            for h in self.held.iter().filter(|h| h.key == key) {
                let Some(at) = h.doomed_at else { continue };
                let by = match h.lease {
                    None => WATCHDOG * 2 + Duration::from_secs(1),
                    Some(_) => MAX_LEASE + WATCHDOG + Duration::from_secs(1),
                };
                if at.elapsed() > by && !h.lost_now() {
                    out.push(format!(
                        "{key}: o{}'s {:?} guard (step {}) was force-unlocked {:?} ago and is not lost",
                        h.owner, h.kind, h.step, at.elapsed()
                    ));
                }
            }
            for (field, want) in &firm {
                let have: u64 = server.get(*field).and_then(|v| v.parse().ok()).unwrap_or(0);
                if have < *want {
                    out.push(format!(
                        "{key}: {want} guard(s) of {field} not lost, server counts {have} ({server:?})"
                    ));
                }
            }
            for (field, v) in &server {
                let Ok(have) = v.parse::<u64>() else { continue };
                if !lockwise_testkit::is_owner_field(field)
                    || field.starts_with('~')
                    || field == "mode"
                {
                    continue;
                }
                let known = live.get(field.as_str()).copied().unwrap_or(0);
                if have > known {
                    out.push(format!(
                        "{key}: server counts {have} for {field}, live guards {known} ({server:?})"
                    ));
                }
            }
            if !server.is_empty() {
                let pttl: i64 = self
                    .conn
                    .query(redis::cmd("PTTL").arg(&key))
                    .await
                    .unwrap_or(-3);
                if pttl == -1 {
                    out.push(format!("{key} has no TTL"));
                }
            }
        }
        // Semaphores: permits never above n.
        if self.supported.get(&Kind::Sem) != Some(&false) {
            if let Ok(avail) = self.sem(2).available_permits().await {
                let held: u64 = self.permits.iter().map(|(_, p)| p.permits()).sum();
                if avail + held as i64 > PERMITS as i64 {
                    out.push(format!(
                        "semaphore: {avail} available + {held} held > {PERMITS}"
                    ));
                }
            }
        }
        if self.supported.get(&Kind::LeaseSem) != Some(&false) {
            let l = self.lsem(2);
            if let (Ok(avail), Ok(leased)) = (l.available_permits().await, l.leased_permits().await)
            {
                if avail + leased as i64 > PERMITS as i64 {
                    out.push(format!(
                        "lease semaphore: {avail} available + {leased} leased > {PERMITS}"
                    ));
                }
                let firm = self.leased.iter().filter(|(_, p)| !p.is_lost()).count() as u64;
                if leased < firm {
                    out.push(format!(
                        "lease semaphore: {firm} permits not lost, server leases {leased}"
                    ));
                }
            }
        }
        out
    }

    /// Releases everything, lets settlements finish, runs the history checker.
    async fn finish_run(&mut self) {
        self.proxies.iter().for_each(|p| {
            p.disarm();
        });
        for h in std::mem::take(&mut self.held) {
            self.released(&h, checker::now_ns(), "end");
            let _ = h.guard.unlock().await;
        }
        for (_, p) in std::mem::take(&mut self.permits) {
            let _ = p.release().await;
        }
        for (_, p) in std::mem::take(&mut self.leased) {
            let _ = p.release().await;
        }
        self.check().await;
        // A re-entry of a run that another guard of the same owner still holds carries the
        // run's token: equal tokens of one owner are not a regression.
        let v = self.history.check().into_iter().filter(|x| {
            let m = &x.message;
            !(x.check == "token"
                && m.split(' ').nth(2) == m.split("but ").nth(1).and_then(|r| r.split(' ').next()))
        });
        for x in v {
            self.violation(format!("history: {x:?}"));
        }
    }
}

fn seed_and_steps(default: usize) -> (u64, usize) {
    let seed = std::env::var("LOCKWISE_RANDOM_SEED")
        .ok()
        .map(|s| s.parse().expect("LOCKWISE_RANDOM_SEED: a u64"))
        .unwrap_or_else(|| rand::rng().random());
    let steps = std::env::var("LOCKWISE_RANDOM_STEPS")
        .ok()
        .map(|s| s.parse().expect("LOCKWISE_RANDOM_STEPS: a number"))
        .unwrap_or(default);
    (seed, steps)
}

async fn build(url: &str, ns: &str, layout: KeyLayout) -> Client {
    Client::builder(url)
        .namespace(ns)
        .key_layout(layout)
        .watchdog_timeout(WATCHDOG)
        .response_timeout(RESPONSE_TIMEOUT)
        .build()
        .await
        .expect("client")
}

async fn build_cluster(seeds: &[String], ns: &str, layout: KeyLayout) -> Client {
    Client::cluster_builder(seeds.to_vec())
        .namespace(ns)
        .key_layout(layout)
        .watchdog_timeout(WATCHDOG)
        .response_timeout(RESPONSE_TIMEOUT)
        .build()
        .await
        .expect("cluster client")
}

fn new_world(
    label: String,
    seed: u64,
    clients: Vec<Client>,
    proxies: Vec<FaultProxy>,
    conn: ConnKind,
) -> World {
    World {
        label,
        rng: StdRng::seed_from_u64(seed),
        history: History::new(),
        clients,
        owners: vec![
            (0, "o0".into()),
            (0, "o1".into()),
            (1, "o2".into()),
            (2, "other".into()),
        ],
        proxies,
        server: None,
        conn,
        supported: BTreeMap::new(),
        held: Vec::new(),
        permits: Vec::new(),
        leased: Vec::new(),
        latch_ok: 0,
        latch_unknown: 0,
        latch_round: 0,
        log: Vec::new(),
        ops: BTreeMap::new(),
        kinds: BTreeMap::new(),
        violations: Vec::new(),
        step: 0,
        settle: WATCHDOG * 2 + Duration::from_secs(1),
        pauses: false,
    }
}

async fn setup_sync(w: &World) {
    let _ = w.sem(2).try_set_permits(PERMITS).await;
    let _ = w.lsem(2).try_set_permits(PERMITS).await;
}

/// Runs `steps` steps, the end checks, and the summary; the violations, if any.
async fn drive(w: &mut World, steps: usize, seed: u64) -> Vec<String> {
    setup_sync(w).await;
    let started = Instant::now();
    for _ in 0..steps {
        w.step().await;
        if !w.violations.is_empty() {
            break;
        }
    }
    if w.violations.is_empty() {
        w.finish_run().await;
    }
    let fired: Vec<String> = w
        .proxies
        .iter()
        .flat_map(|p| p.fired())
        .map(|f| {
            format!("{:?}", f.fault)
                .split('(')
                .next()
                .unwrap()
                .to_string()
        })
        .collect();
    let mut faults: BTreeMap<String, u64> = BTreeMap::new();
    for f in fired {
        *faults.entry(f).or_default() += 1;
    }
    println!(
        "randomized [{}] seed {seed}: {} steps in {:.1} s; ops {:?}; kinds {:?}; faults injected {:?}; acquisitions recorded {}",
        w.label,
        w.step,
        started.elapsed().as_secs_f64(),
        w.ops,
        w.kinds,
        faults,
        w.history.ok_count(),
    );
    if !w.violations.is_empty() {
        eprintln!("--- last steps of [{}] seed {seed} ---", w.label);
        for l in w.log.iter().rev().take(400).rev() {
            eprintln!("{l}");
        }
    }
    std::mem::take(&mut w.violations)
}

/// One server; Clients 0 and 1 through the fault proxy, the other client direct; both layouts.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn randomized_single_server() {
    let (seed, steps) = seed_and_steps(DEFAULT_STEPS);
    println!("randomized_single_server: seed {seed} (LOCKWISE_RANDOM_SEED={seed} reruns it), {steps} steps per layout");
    let mut failures = Vec::new();
    // `LOCKWISE_RANDOM_LAYOUT=lockwise|redisson` runs one layout only.
    let only = std::env::var("LOCKWISE_RANDOM_LAYOUT").ok();
    for (i, layout) in [KeyLayout::Lockwise, KeyLayout::Redisson]
        .into_iter()
        .enumerate()
    {
        if only
            .as_deref()
            .is_some_and(|o| !format!("{layout:?}").eq_ignore_ascii_case(o))
        {
            continue;
        }
        let server = RedisServer::start();
        let proxy = FaultProxy::start(server.port()).await;
        proxy.seed(seed);
        let ns = suite::unique_ns("random");
        let a = build(&proxy.url(), &ns, layout).await;
        let b = build(&proxy.url(), &ns, layout).await;
        let other = build(server.url(), &ns, layout).await;
        let conn = ConnKind::Single(server.conn().await);
        let mut w = new_world(
            format!("{layout:?}"),
            seed ^ i as u64,
            vec![a, b, other],
            vec![proxy],
            conn,
        );
        w.server = Some(server);
        w.pauses = true;
        failures.extend(drive(&mut w, steps, seed).await);
    }
    assert!(
        failures.is_empty(),
        "randomized_single_server failed; rerun with LOCKWISE_RANDOM_SEED={seed}:\n{}",
        failures.join("\n")
    );
}

/// A Cluster of 3 masters, every node behind its own proxy; resets and dropped replies.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn randomized_cluster() {
    let (seed, steps) = seed_and_steps(DEFAULT_CLUSTER_STEPS);
    println!(
        "randomized_cluster: seed {seed} (LOCKWISE_RANDOM_SEED={seed} reruns it), {steps} steps"
    );
    let cluster = lockwise_testkit::topology::RedisCluster::start(3, 0);
    let proxies = lockwise_testkit::faults::proxy_cluster(&cluster).await;
    let seeds: Vec<String> = proxies.iter().map(|p| p.url()).collect();
    let ns = suite::unique_ns("random");
    let layout = KeyLayout::Lockwise;
    let a = build_cluster(&seeds, &ns, layout).await;
    let b = build_cluster(&seeds, &ns, layout).await;
    let other = build_cluster(&seeds, &ns, layout).await;
    let conn = redis::cluster::ClusterClient::new(seeds.clone())
        .unwrap()
        .get_async_connection()
        .await
        .unwrap();
    let mut w = new_world(
        "Cluster".into(),
        seed,
        vec![a, b, other],
        proxies,
        ConnKind::Cluster(conn),
    );
    let failures = drive(&mut w, steps, seed).await;
    drop(cluster);
    assert!(
        failures.is_empty(),
        "randomized_cluster failed; rerun with LOCKWISE_RANDOM_SEED={seed}:\n{}",
        failures.join("\n")
    );
}

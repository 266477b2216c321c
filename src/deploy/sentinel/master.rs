//! The current master of a Sentinel set ([`SentinelMaster`]): its gate, one check (asking
//! the sentinels and moving to the master they name), and how a reply is judged.

use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::{RedisResult, Value};
use tokio::sync::{watch, Notify};
use tokio::time::Instant;

use super::{ask, SentinelSettings};
use crate::error::{io_timeout, Error, Result};

/// Whether a call may be sent again after what the master answered.
pub(crate) enum Retry {
    Yes,
    No,
}

/// What a reply says about the master it came from.
pub(crate) enum Verdict {
    /// Nothing new.
    Fine,
    /// `READONLY`: the server was demoted; the command did not run.
    Demoted,
    /// No reply (connection error, timeout): the server may be gone or stalled.
    Doubtful,
}

impl Verdict {
    /// The verdict on one command's reply. redis-rs hands a server error back as
    /// `Ok(Value::ServerError)` at this level; it becomes an `Err` only later, in
    /// `Cmd::query_async`.
    pub(crate) fn of(reply: &RedisResult<Value>) -> Verdict {
        match reply {
            Ok(Value::ServerError(e)) if e.code() == "READONLY" => Verdict::Demoted,
            Ok(_) => Verdict::Fine,
            Err(e) if is_readonly(e) => Verdict::Demoted,
            Err(e) if is_connection_error(e) => Verdict::Doubtful,
            Err(_) => Verdict::Fine,
        }
    }

    /// The verdict on a pipeline's replies: `Demoted` only when nothing in it ran (every
    /// reply an error, the first `READONLY`), so that sending it again is safe; a `READONLY`
    /// among replies that did run only starts a check.
    pub(crate) fn of_pipeline(reply: &RedisResult<Vec<Value>>) -> (Verdict, bool) {
        match reply {
            Ok(values) => {
                let readonly =
                    |v: &Value| matches!(v, Value::ServerError(e) if e.code() == "READONLY");
                let all_failed = values.iter().all(|v| matches!(v, Value::ServerError(_)));
                match values.first() {
                    Some(first) if readonly(first) && all_failed => (Verdict::Demoted, true),
                    _ if values.iter().any(readonly) => (Verdict::Demoted, false),
                    _ => (Verdict::Fine, false),
                }
            }
            Err(e) => (Verdict::of(&Err(e.clone())), false),
        }
    }
}

/// Whether `e` says the server we talk to is not (or no longer) a writable master.
pub(crate) fn is_readonly(e: &redis::RedisError) -> bool {
    e.code() == Some("READONLY")
}

fn is_connection_error(e: &redis::RedisError) -> bool {
    e.is_io_error() || e.is_connection_dropped() || e.is_connection_refusal() || e.is_timeout()
}

/// The current master of a Sentinel set and its command connection (see the
/// [`sentinel`](super) module docs).
pub(crate) struct SentinelMaster {
    pub(super) settings: SentinelSettings,
    config: ConnectionManagerConfig,
    current: RwLock<Current>,
    /// The current master's client, for the subscription listener to follow.
    switches: watch::Sender<redis::Client>,
    /// Wakes the follower for a check now (shared with it: it holds no `Arc` of the master
    /// while it waits).
    pub(super) wanted: Arc<Notify>,
    /// What the newest finished checks found (when the newest confirming one started, and
    /// the newest silent one).
    checked: watch::Sender<Checks>,
    /// The master has been in doubt since then: commands wait for a check that started
    /// later.
    doubt: Mutex<Option<Instant>>,
    /// One cached connection per sentinel, for the checks.
    sentinels: ask::Sentinels,
}

/// What the checks found so far.
#[derive(Clone)]
struct Checks {
    /// When the newest check that confirmed the current master started.
    confirmed: Instant,
    /// When the newest check that no sentinel answered started, and the last error it saw.
    silent: Option<(Instant, Arc<str>)>,
}

/// How a check ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Outcome {
    /// A sentinel named the current master (or one the client moved to): recorded.
    Confirmed,
    /// Sentinels answered, but named a master that cannot be used yet, or lag behind the
    /// current master's epoch: not recorded; ask again soon.
    Unusable,
    /// No sentinel answered: recorded as silence, never as a confirmation.
    Silent,
}

struct Current {
    addr: (String, u16),
    /// The newest configuration epoch a sentinel named this master with: a check never
    /// moves to a master named with an older one (a sentinel lagging behind a failover).
    epoch: u64,
    conn: ConnectionManager,
}

impl SentinelMaster {
    /// Resolves the master and connects to it. The follower and the `+switch-master` watcher
    /// are not running yet: the caller starts them ([`follow::start`](super::follow::start))
    /// before it hands the master out, or commands would wait for checks that never come.
    pub(crate) async fn connect(
        settings: SentinelSettings,
        config: ConnectionManagerConfig,
    ) -> Result<Arc<SentinelMaster>> {
        if settings.sentinels.is_empty() {
            return Err(Error::invalid("sentinels", "no sentinel address given"));
        }
        let started = Instant::now();
        let sentinels = ask::Sentinels::new(&settings);
        let view = sentinels.newest_master(&settings).await?;
        let (conn, client) = ask::connect_master(&settings, &config, &view.addr).await?;
        let (switches, _) = watch::channel(client);
        let master = Arc::new(SentinelMaster {
            settings,
            config,
            current: RwLock::new(Current {
                addr: view.addr,
                epoch: view.epoch,
                conn,
            }),
            switches,
            wanted: Arc::new(Notify::new()),
            checked: watch::channel(Checks {
                confirmed: started,
                silent: None,
            })
            .0,
            doubt: Mutex::new(None),
            sentinels,
        });
        Ok(master)
    }

    /// The current master's command connection.
    pub(crate) fn conn(&self) -> ConnectionManager {
        self.current
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .conn
            .clone()
    }

    /// The current master's client; changes after each failover.
    pub(crate) fn switches(&self) -> watch::Receiver<redis::Client> {
        self.switches.subscribe()
    }

    /// The current master's address.
    pub(crate) fn addr(&self) -> (String, u16) {
        self.current
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .addr
            .clone()
    }

    /// Runs `call` on the current master's connection, once a check confirmed that master
    /// (see "The gate" in the [`sentinel`](super) module docs). Returns the address it went
    /// to with the reply. If the master moves while the call waits (typically on the old,
    /// dead master's reconnect backoff, which can take seconds), the call is abandoned with a
    /// connection error: its outcome is unknown, which the lock paths handle, and the
    /// caller's retry goes to the new master at once.
    pub(crate) async fn on_current<T, F, Fut>(&self, call: F) -> ((String, u16), RedisResult<T>)
    where
        F: FnOnce(ConnectionManager) -> Fut,
        Fut: std::future::Future<Output = RedisResult<T>>,
    {
        if let Err(e) = self.confirmed().await {
            return (self.addr(), Err(e));
        }
        let mut moved = self.switches.subscribe();
        let (addr, conn) = {
            let current = self.current.read().unwrap_or_else(|e| e.into_inner());
            (current.addr.clone(), current.conn.clone())
        };
        let reply = tokio::select! {
            reply = call(conn) => reply,
            _ = moved.changed() => Err(redis::RedisError::from(std::io::Error::new(
                std::io::ErrorKind::ConnectionAborted,
                "the sentinel master moved while the command waited; outcome unknown",
            ))),
        };
        (addr, reply)
    }

    /// Waits until a check confirmed the current master recently enough (see "The gate").
    /// Fails, without sending anything, with a retryable I/O timeout error if a check
    /// started after this call heard no sentinel (see "Silence confirms nothing"), or if no
    /// check confirmed the master within [`SentinelSettings::check_wait`] (the sentinels
    /// named another master that cannot be reached yet).
    async fn confirmed(&self) -> RedisResult<()> {
        let Some(needed) = self.check_needed() else {
            return Ok(());
        };
        let asked = Instant::now();
        self.wanted.notify_one();
        let mut checked = self.checked.subscribe();
        let wait = async move {
            checked
                .wait_for(|c| {
                    c.confirmed >= needed || c.silent.as_ref().is_some_and(|(at, _)| *at >= asked)
                })
                .await
                .map(|c| c.clone())
                .ok()
        };
        // (`wait` ends early only if the sender closed, which cannot happen while `self` lives.)
        let Ok(Some(found)) = tokio::time::timeout(self.settings.check_wait(), wait).await else {
            return Err(io_timeout(
                "no check confirmed the sentinel master in time (it may be moving); not sent",
            ));
        };
        match found.silent {
            Some((_, error)) if found.confirmed < needed => Err(io_timeout(format!(
                "no sentinel confirmed the master `{}` within the trust window ({:?}) and none \
                 answered now ({error}); not sent",
                self.settings.master_name,
                self.settings.trust_window()
            ))),
            _ => Ok(()),
        }
    }

    /// The instant a check must have started at or after for the current master to be used
    /// now; `None` while it is trusted.
    fn check_needed(&self) -> Option<Instant> {
        let now = Instant::now();
        let fresh = now.checked_sub(self.settings.trust_window());
        let doubt = *self.doubt.lock().unwrap_or_else(|e| e.into_inner());
        let needed = fresh.max(doubt)?;
        (self.checked.borrow().confirmed < needed).then_some(needed)
    }

    /// Puts the current master in doubt from now on and asks for a check.
    pub(super) fn doubt(&self) {
        *self.doubt.lock().unwrap_or_else(|e| e.into_inner()) = Some(Instant::now());
        self.wanted.notify_one();
    }

    /// Reacts to what the master at `sent_to` answered: `READONLY` puts it in doubt and
    /// waits for the check (allowing one more try if the master moved meanwhile); a
    /// connection error or timeout puts it in doubt.
    pub(crate) async fn after(&self, sent_to: &(String, u16), verdict: Verdict) -> Retry {
        match verdict {
            Verdict::Fine => Retry::No,
            Verdict::Doubtful => {
                self.doubt();
                Retry::No
            }
            Verdict::Demoted => {
                tracing::debug!(
                    master = %format!("{}:{}", sent_to.0, sent_to.1),
                    "sentinel: the master answered READONLY; asking the sentinels"
                );
                self.doubt();
                if self.confirmed().await.is_ok() && self.addr() != *sent_to {
                    Retry::Yes
                } else {
                    Retry::No
                }
            }
        }
    }

    /// Runs one check: asks the sentinels, moves to the master they name if it is new, and
    /// records when the check started. A master named but not reachable (or not answering
    /// `ROLE` as a master yet), or named only by sentinels that lag behind the current
    /// master's epoch, is no confirmation: the check is not recorded, so gated commands keep
    /// waiting for the next one. Nor is silence: when no sentinel answers, the check is
    /// recorded as silent, which fails the commands waiting for it.
    pub(super) async fn check(&self) -> Outcome {
        let started = Instant::now();
        let view = match self.sentinels.newest_master(&self.settings).await {
            Ok(view) => view,
            Err(e) => {
                // No sentinel answered: nothing says the master is still the master (a
                // failover this client cannot see may have deposed it).
                no_sentinel(&self.settings.master_name, &e);
                let error: Arc<str> = e.to_string().into();
                self.checked
                    .send_modify(|c| c.silent = Some((started, error)));
                return Outcome::Silent;
            }
        };
        {
            let mut current = self.current.write().unwrap_or_else(|e| e.into_inner());
            if view.addr == current.addr {
                current.epoch = current.epoch.max(view.epoch);
            } else if view.epoch < current.epoch {
                tracing::debug!(
                    named = %format!("{}:{}", view.addr.0, view.addr.1),
                    epoch = view.epoch,
                    current = current.epoch,
                    "sentinel: only lagging sentinels answered; asking again"
                );
                return Outcome::Unusable;
            }
        }
        if view.addr != self.addr() {
            if let Err(e) = self.switch_to(view).await {
                tracing::debug!(error = %e, "sentinel: the named master is not usable yet");
                return Outcome::Unusable;
            }
        }
        self.checked
            .send_modify(|c| c.confirmed = c.confirmed.max(started));
        Outcome::Confirmed
    }

    /// Connects to the master `view` names (checking its `ROLE`) and moves the commands and the
    /// subscription listener there.
    async fn switch_to(&self, view: ask::View) -> Result<()> {
        let addr = view.addr;
        let (conn, client) = ask::connect_master(&self.settings, &self.config, &addr).await?;
        let old = {
            let mut current = self.current.write().unwrap_or_else(|e| e.into_inner());
            std::mem::replace(
                &mut *current,
                Current {
                    addr: addr.clone(),
                    epoch: view.epoch,
                    conn,
                },
            )
            .addr
        };
        tracing::warn!(
            master = %self.settings.master_name,
            from = %format!("{}:{}", old.0, old.1),
            to = %format!("{}:{}", addr.0, addr.1),
            "sentinel: master moved; commands and subscriptions follow"
        );
        self.switches.send_replace(client);
        Ok(())
    }
}

/// Logs that no sentinel answered a check, at most every 10 s (a warning: the client keeps
/// using the master it has only while an earlier confirmation is within the trust window,
/// then sends nothing until a sentinel answers again).
fn no_sentinel(master: &str, e: &Error) {
    static LAST: Mutex<Option<Instant>> = Mutex::new(None);
    let mut last = LAST.lock().unwrap_or_else(|e| e.into_inner());
    if last.is_none_or(|at| at.elapsed() >= Duration::from_secs(10)) {
        *last = Some(Instant::now());
        tracing::warn!(
            master,
            error = %e,
            "sentinel: no sentinel answered; the master is not confirmed, and nothing is \
             sent to it once the trust window passes"
        );
    }
}

//! [`FairLock`] in Redisson's key layout: RFairLock's queue (owner fields in a list, their
//! deadlines on the clients' clocks in a sorted set), each waiter listening on its own
//! channel `redisson_lock__channel:{<name>}:<owner>`, which the release publishes `0` to when
//! that waiter heads the queue. No handoff: the woken head takes the lock with its script, as
//! a Java waiter does.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;
use futures::FutureExt;
use tokio::time::Instant;

use super::acquire::fair_reply;
use super::{FairLock, FairLockGuard};
use crate::engine::acquire::{Arg, AttemptArgs, ScriptCall};
use crate::engine::{self, client_clock_ms, Reply};
use crate::error::Result;
use crate::wire::scripts::{REDISSON_FAIR_FORCE_UNLOCK, REDISSON_FAIR_LEAVE, REDISSON_FAIR_LOCK};

/// The `wait` of a waiter without a wait of its own: Redisson's default
/// `fairLockWaitTimeout`, so deadlines move as a Java fleet's with default settings expect.
pub(crate) const FAIR_WAIT: Duration = Duration::from_secs(300);

/// The shortest pause between attempts while another waiter heads the queue of a free lock
/// (it is taking it; its release will wake this waiter if it is next).
const MIN_PAUSE: Duration = Duration::from_millis(25);

impl FairLock {
    /// [`FairLock::acquire`] in Redisson's layout.
    pub(super) async fn acquire_redisson(
        &self,
        deadline: Option<Instant>,
        lease: Option<Duration>,
    ) -> Result<Option<FairLockGuard>> {
        let base = &self.inner.base;
        base.check()?;
        let owner = base.owner_field();
        let channel = format!("{}:{owner}", base.keys.fair_channel);
        // RFairLock's `tryLock()`: one attempt that never queues.
        let single = deadline.is_some_and(|d| d <= Instant::now());
        // RFairLock queues with the caller's wait, else `fairLockWaitTimeout`.
        let wait = deadline
            .map(|d| d.saturating_duration_since(Instant::now()))
            .filter(|w| !w.is_zero())
            .unwrap_or(FAIR_WAIT);
        let wait_ms = (wait.as_millis() as u64).max(1);
        let mut queued = Queued {
            lock: self.clone(),
            owner: owner.clone(),
            wait_ms,
            abandoned: Arc::new(AtomicBool::new(false)),
            armed: !single,
        };
        let refresh = (base.core.watchdog_timeout / 3).max(MIN_PAUSE);
        let attempt = RedissonAttempt {
            lock: self.clone(),
            wait_ms,
            single,
            refresh,
            abandoned: queued.abandoned.clone(),
        };
        let granted = engine::acquire::run(
            base,
            &attempt,
            owner,
            engine::Wake::Queued(&channel),
            deadline,
            lease,
            engine::KindId::Fair,
        )
        .await;
        match granted {
            Ok(Some((hold, _behind))) => {
                queued.armed = false;
                Ok(Some(FairLockGuard { hold }))
            }
            Ok(None) => {
                queued.leave_now().await;
                Ok(None)
            }
            Err(e) => Err(e), // `queued` leaves in the background
        }
    }

    /// RFairLock's acquireFailed for `owner`, queued with `wait_ms`.
    async fn leave_redisson(&self, owner: &str, wait_ms: u64) -> Result<bool> {
        let base = &self.inner.base;
        let keys = [&*base.key, &base.keys.queue, &base.keys.deadlines];
        let left: i64 = REDISSON_FAIR_LEAVE
            .run(
                &mut base.core.conn.clone(),
                &keys,
                &[
                    &owner,
                    &wait_ms,
                    &base.keys.fair_channel.as_str(),
                    &base.core.publish,
                    &client_clock_ms(),
                ],
            )
            .await?;
        Ok(left == 1)
    }

    /// [`FairLock::force_unlock`] in Redisson's layout.
    pub(super) async fn force_unlock_redisson(&self) -> Result<bool> {
        let base = &self.inner.base;
        base.check()?;
        let keys = [&*base.key, &base.keys.queue, &base.keys.deadlines];
        let deleted: i64 = REDISSON_FAIR_FORCE_UNLOCK
            .run(
                &mut base.core.conn.clone(),
                &keys,
                &[
                    &base.keys.fair_channel.as_str(),
                    &base.core.publish,
                    &client_clock_ms(),
                ],
            )
            .await?;
        Ok(deleted == 1)
    }
}

/// A waiter's place in Redisson's queue: left (in the background) unless disarmed, so a
/// waiter that fails or whose future is dropped gives the waiters behind it their wait back.
struct Queued {
    lock: FairLock,
    owner: Arc<str>,
    wait_ms: u64,
    /// Set once the waiter is gone; an attempt still in flight then leaves after it ran.
    abandoned: Arc<AtomicBool>,
    armed: bool,
}

impl Queued {
    async fn leave_now(&mut self) {
        if std::mem::take(&mut self.armed) {
            if let Err(e) = self.lock.leave_redisson(&self.owner, self.wait_ms).await {
                tracing::warn!(lock = %self.lock.inner.base.name, error = %e, "could not leave the fair queue; the entry goes at its deadline");
            }
        }
    }
}

impl Drop for Queued {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        self.abandoned.store(true, Ordering::SeqCst);
        let (lock, owner, wait_ms) = (self.lock.clone(), self.owner.clone(), self.wait_ms);
        self.lock.inner.base.core.cleanups.spawn(async move {
            if let Err(e) = lock.leave_redisson(&owner, wait_ms).await {
                tracing::warn!(lock = %lock.inner.base.name, error = %e, "could not leave the fair queue; the entry goes at its deadline");
            }
        });
    }
}

/// One attempt of RFairLock's acquire (`lua/redisson_fair_lock.lua`) on the lock hash and
/// its queue, with the waiter's queue timeout `wait_ms`; `single`: `tryLock()`, one attempt
/// that never queues.
#[derive(Clone)]
struct RedissonAttempt {
    lock: FairLock,
    wait_ms: u64,
    single: bool,
    /// The longest pause between a waiter's looks at the queue.
    refresh: Duration,
    /// Set when the waiter is gone: a late attempt that queued it again leaves after it.
    abandoned: Arc<AtomicBool>,
}

impl engine::acquire::AcquireScript for RedissonAttempt {
    type Extra = u64;

    fn what(&self) -> &'static str {
        "fair lock"
    }

    fn call<'a>(&'a self, a: &'a AttemptArgs) -> ScriptCall<'a> {
        let base = &self.lock.inner.base;
        ScriptCall {
            script: &REDISSON_FAIR_LOCK,
            keys: vec![&base.key, &base.keys.queue, &base.keys.deadlines],
            args: vec![
                Arg::Int(a.lease_ms),
                Arg::Str(&a.owner),
                Arg::Int(self.wait_ms),
                Arg::Int(client_clock_ms()),
                Arg::Int(u64::from(self.single)),
            ],
        }
    }

    /// Woken by the message when this waiter heads the queue; otherwise it looks again
    /// within the bound (a head that died is dropped at its deadline by whichever script
    /// runs next).
    fn parse(&self, reply: &[i64]) -> Option<Reply<u64>> {
        Some(match fair_reply(reply)? {
            Reply::Held(pttl) => Reply::Held(Some(
                pttl.unwrap_or(self.refresh).clamp(MIN_PAUSE, self.refresh),
            )),
            other => other,
        })
    }

    /// Gone, and perhaps left before this late attempt queued it again.
    fn after_call(&self, owner: &Arc<str>) -> Option<BoxFuture<'static, ()>> {
        if self.single || !self.abandoned.load(Ordering::SeqCst) {
            return None;
        }
        let (lock, owner, wait_ms) = (self.lock.clone(), owner.clone(), self.wait_ms);
        Some(
            async move {
                let _ = lock.leave_redisson(&owner, wait_ms).await;
            }
            .boxed(),
        )
    }
}

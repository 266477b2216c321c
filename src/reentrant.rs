//! [`RLock`]: the reentrant lock, and its guard.

use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;
use futures::FutureExt;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::error::{Error, Result};
use crate::keys::{check_millis, check_name, Keys};
use crate::raw::Core;
use crate::raw::HoldKey;
use crate::raw::{self, current_owner, pttl_from, Attempt, Hold, Ticket};
use crate::scripts::{FORCE_UNLOCK, LOCK, UNLOCK};

/// A reentrant distributed lock, like Redisson's `RLock`: a Redis hash whose one field
/// `<client id>:<task id>` counts the holder's holds.
///
/// Get one from [`Client::lock`](crate::Client::lock); it is a cheap handle (`Clone`,
/// `Send`, `Sync`) and sends nothing until used.
///
/// * The owner is the calling tokio task of this `Client`: the same task may lock again
///   (re-entry raises the hold count), any other task, or the same task through another
///   `Client`, waits. Each [`RLockGuard`] is one hold; the lock is free when every hold is
///   released.
/// * Without a lease the lock lives as long as its holder: the client's watchdog renews it
///   every `watchdog_timeout / 3`, and it expires within `watchdog_timeout` after a crash.
///   With a lease it expires after the lease, whatever the holder is doing.
///
/// # What it guarantees
/// At most one owner holds the lock while its key lives in Redis. It cannot stop a holder
/// that was paused (GC, SIGSTOP, a long syscall) past its TTL from acting as if it still
/// held the lock: when the protected resource must reject such late writers, use fencing
/// tokens (see the README).
#[derive(Clone)]
pub struct RLock {
    inner: Arc<LockInner>,
}

struct LockInner {
    core: Arc<Core>,
    name: String,
    keys: Keys,
    /// The hash key, shared by the hold entries of this lock.
    key: Arc<str>,
    /// A rejected name is reported by every method.
    invalid: Option<String>,
}

impl RLock {
    pub(crate) fn new(core: Arc<Core>, name: &str) -> RLock {
        let invalid = check_name(name).err().map(|e| match e {
            Error::InvalidArgument { reason, .. } => reason,
            other => other.to_string(),
        });
        let keys = if invalid.is_some() {
            Keys::new(&core.namespace, "")
        } else {
            Keys::new(&core.namespace, name)
        };
        RLock {
            inner: Arc::new(LockInner {
                key: keys.lock.as_str().into(),
                core,
                name: if invalid.is_some() {
                    String::new()
                } else {
                    name.to_string()
                },
                keys,
                invalid,
            }),
        }
    }

    /// The lock's name.
    pub fn name(&self) -> &str {
        &self.inner.name
    }

    /// The Redis key of the lock hash (`<namespace>:lock:{<name>}`).
    pub fn key(&self) -> &str {
        &self.inner.keys.lock
    }

    /// The pub/sub channel unlocks publish to (`<namespace>:channel:{<name>}`).
    pub fn channel(&self) -> &str {
        &self.inner.keys.channel
    }

    fn check(&self) -> Result<()> {
        match &self.inner.invalid {
            Some(reason) => Err(Error::invalid("name", reason.clone())),
            None => Ok(()),
        }
    }

    /// Acquires the lock, waiting as long as it takes; the watchdog keeps it alive until the
    /// guard is released.
    ///
    /// Waiting costs no polling: the client's subscription connection wakes the waiter when
    /// the lock is released, and each wait is bounded by the holder's TTL, so a crashed
    /// holder's lock is taken when it expires.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for an invalid name; [`Error::Redis`] when Redis fails.
    ///
    /// # Cancel safety
    /// Cancel safe. Dropping the future at any point leaves no hold behind: a hold granted by
    /// a reply nobody awaited any more is released in the background within a moment, and
    /// the waiter's channel subscription is dropped (unsubscribed if it was the last).
    pub async fn lock(&self) -> Result<RLockGuard> {
        raw::never_timed_out(self.acquire(None, None).await?)
    }

    /// Acquires the lock, waiting as long as it takes; the lock expires `lease` after it was
    /// taken unless released before (no watchdog).
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for an invalid name or a lease below 1 ms or above
    /// 2<sup>53</sup> ms; [`Error::Redis`] when Redis fails.
    ///
    /// # Cancel safety
    /// As for [`RLock::lock`].
    pub async fn lock_with_lease(&self, lease: Duration) -> Result<RLockGuard> {
        raw::never_timed_out(self.acquire(None, Some(lease)).await?)
    }

    /// Tries to acquire the lock, waiting at most `wait`. `Ok(None)` means another owner held
    /// it for the whole wait; `Duration::ZERO` makes a single attempt. With `lease: None` the
    /// watchdog keeps the lock alive; with `Some(lease)` it expires after the lease.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for an invalid name or lease; [`Error::Redis`] when Redis
    /// fails. Contention is never an error.
    ///
    /// # Cancel safety
    /// As for [`RLock::lock`].
    pub async fn try_lock(
        &self,
        wait: Duration,
        lease: Option<Duration>,
    ) -> Result<Option<RLockGuard>> {
        self.acquire(Some(raw::deadline_after(wait)), lease).await
    }

    async fn acquire(
        &self,
        deadline: Option<Instant>,
        lease: Option<Duration>,
    ) -> Result<Option<RLockGuard>> {
        self.check()?;
        let core = &self.inner.core;
        let lease_ms = match lease {
            Some(lease) => check_millis("lease", lease)?,
            None => core.watchdog_ms,
        };
        let owner = current_owner(&core.id_str);
        let hold_key: HoldKey = (self.inner.key.clone(), owner);
        let started = Instant::now();
        let granted = raw::acquire(core, &self.inner.keys.channel, deadline, || {
            self.attempt(&hold_key, lease_ms)
        })
        .await?;
        let Some((ticket, holds)) = granted else {
            tracing::debug!(lock = %self.inner.name, waited_ms = started.elapsed().as_millis() as u64, "try_lock timed out");
            return Ok(None);
        };
        // No .await between the reply and the registration: the hold always gets its guard.
        let hold = Hold::register(ticket, holds, lease);
        tracing::debug!(
            lock = %self.inner.name,
            kind = "reentrant",
            holds,
            waited_ms = started.elapsed().as_millis() as u64,
            "lock acquired"
        );
        Ok(Some(RLockGuard { hold }))
    }

    /// One run of the lock script, counted in the hold registry and cleaning up after itself
    /// when abandoned (see [`raw`](crate::raw) "Cancellation" and "Settling").
    fn attempt(
        &self,
        hold_key: &HoldKey,
        lease_ms: u64,
    ) -> impl std::future::Future<Output = Result<Attempt<(Ticket<RLock>, u32)>>> + Send + 'static
    {
        let (lock, hold_key) = (self.clone(), hold_key.clone());
        async move {
            let ticket = Ticket::begin(&lock, &hold_key).await;
            let call_lock = lock.clone();
            let call = async move {
                let key: &str = &call_lock.inner.key;
                let owner = &hold_key.1;
                raw::run_acquire(&call_lock, owner, &LOCK, &[key], &[&lease_ms, &&**owner]).await
            }
            .boxed();
            let (reply, ticket) = raw::ticketed_call(ticket, call, raw::Synced::taken).await?;
            reply.check(&lock.inner.core)?;
            match (reply.reply.as_slice(), ticket) {
                ([1, holds], Some(ticket)) if *holds >= 1 => {
                    Ok(Attempt::Acquired((ticket, *holds as u32)))
                }
                ([0, pttl], None) => Ok(Attempt::Held(pttl_from(*pttl))),
                (other, _) => Err(Error::UnexpectedReply(format!(
                    "lock script answered {other:?}"
                ))),
            }
        }
    }

    /// Runs the unlock script: `expected` 0 releases any one hold of `owner`.
    async fn release_hold(&self, owner: &str, expected: u32) -> Result<i64> {
        let core = &self.inner.core;
        let mut conn = core.conn.clone();
        let keys = &self.inner.keys;
        let reply: redis::RedisResult<i64> = UNLOCK
            .run(
                &mut conn,
                &[&keys.lock, &keys.channel],
                &[&owner, &core.id_str.as_str(), &expected, &core.publish],
            )
            .await;
        // Our own unlock message is not delivered back to us (see the listener), so wake a
        // local waiter here; also when the reply was lost, as the unlock may have happened.
        if matches!(reply, Ok(0) | Err(_)) {
            core.listener.notify_local(&keys.channel);
        }
        Ok(reply?)
    }

    /// Deletes the lock whoever holds it and wakes its waiters. Returns whether it was
    /// locked. The former holders' guards then fail to unlock with [`Error::NotHeld`]; watchdog
    /// holders also see [`RLockGuard::lost`] fire at their next renewal.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for an invalid name; [`Error::Redis`] when Redis fails.
    ///
    /// # Cancel safety
    /// Dropping the future may or may not have deleted the lock.
    pub async fn force_unlock(&self) -> Result<bool> {
        self.check()?;
        let core = &self.inner.core;
        let keys = &self.inner.keys;
        let deleted: i64 = FORCE_UNLOCK
            .run(
                &mut core.conn.clone(),
                &[&keys.lock, &keys.channel],
                &[&core.id_str.as_str(), &core.publish],
            )
            .await?;
        if deleted == 1 {
            core.listener.notify_local(&keys.channel);
            tracing::debug!(lock = %self.inner.name, "lock force-unlocked");
        }
        Ok(deleted == 1)
    }

    /// Whether any owner holds the lock.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for an invalid name; [`Error::Redis`] when Redis fails.
    ///
    /// # Cancel safety
    /// Cancel safe (read only).
    pub async fn is_locked(&self) -> Result<bool> {
        self.check()?;
        raw::is_locked(&self.inner.core, self.key()).await
    }

    /// Whether the calling task (through this client) holds the lock.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for an invalid name; [`Error::Redis`] when Redis fails.
    ///
    /// # Cancel safety
    /// Cancel safe (read only).
    pub async fn is_held_by_current_task(&self) -> Result<bool> {
        Ok(self.hold_count().await? > 0)
    }

    /// How many holds the calling task (through this client) has on the lock; 0 if none.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for an invalid name; [`Error::Redis`] when Redis fails.
    ///
    /// # Cancel safety
    /// Cancel safe (read only).
    pub async fn hold_count(&self) -> Result<u32> {
        self.check()?;
        raw::hold_count(&self.inner.core, self.key()).await
    }

    /// Time until the lock expires; `None` when it is not locked. A lock without TTL (never
    /// written by lockwise) reports `Duration::MAX`.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for an invalid name; [`Error::Redis`] when Redis fails.
    ///
    /// # Cancel safety
    /// Cancel safe (read only).
    pub async fn remaining_ttl(&self) -> Result<Option<Duration>> {
        self.check()?;
        raw::remaining_ttl(&self.inner.core, self.key()).await
    }
}

impl std::fmt::Debug for RLock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RLock")
            .field("name", &self.inner.name)
            .field("key", &self.inner.keys.lock)
            .finish()
    }
}

impl raw::Kind for RLock {
    fn core(&self) -> &Arc<Core> {
        &self.inner.core
    }

    fn name(&self) -> &str {
        &self.inner.name
    }

    fn release(&self, owner: Arc<str>, expected: u32) -> BoxFuture<'static, Result<i64>> {
        let lock = self.clone();
        async move { lock.release_hold(&owner, expected).await }.boxed()
    }
}

/// One hold of an [`RLock`]. Release it with [`unlock`](RLockGuard::unlock), which reports
/// errors; dropping it releases in the background instead.
///
/// The guard may be moved to, and unlocked from, any task: it remembers its owner.
///
/// # Dropping without `unlock`
/// `Drop` cannot wait, so it stops the watchdog for this hold and hands the unlock script to
/// the runtime without waiting (never `block_on`). If that unlock cannot reach Redis, the lock
/// expires with its TTL (the lease, or the watchdog timeout).
#[must_use = "the lock is released when the guard is dropped; call .unlock().await"]
pub struct RLockGuard {
    hold: Hold<RLock>,
}

impl RLockGuard {
    /// Releases this hold; the last hold frees the lock and wakes one waiter per client.
    ///
    /// Not retried on failure: a retried unlock could release a hold that is no longer this
    /// guard's. On an error the hold is left to expire with its TTL (the watchdog no longer
    /// renews it).
    ///
    /// # Errors
    /// [`Error::NotHeld`] when the hold was already gone (expired, force-unlocked, taken over):
    /// nothing was released. [`Error::Redis`] when Redis failed.
    ///
    /// # Cancel safety
    /// Once called, the release happens: dropping the future lets it finish in the background.
    pub async fn unlock(mut self) -> Result<()> {
        self.hold.unlock().await
    }

    /// The lock's name.
    pub fn name(&self) -> &str {
        self.hold.name()
    }

    /// The owner field of this hold: `<client id>:<task id>`.
    pub fn owner(&self) -> &str {
        self.hold.owner()
    }

    /// The lease this hold was taken with; `None` when the watchdog renews it.
    pub fn lease(&self) -> Option<Duration> {
        self.hold.lease()
    }

    /// Whether the lock must be treated as lost: the watchdog found it gone (expired,
    /// force-unlocked, server restarted without persistence) or stopped (client dropped),
    /// or its [`validity`](Self::validity) ran out. Computed at the call, so a holder
    /// resumed from a long pause sees `true` at once, before any renewal could run.
    pub fn is_lost(&self) -> bool {
        self.hold.is_lost()
    }

    /// How long the lock is still known to be held: the TTL that the last acquire or
    /// renewal gave the key, measured from the moment that call was *sent* (the server ran
    /// it later, so the key lives at least that long), less a safety margin for clock drift
    /// and scheduling (1 % of that TTL + 2 ms, at least 100 ms or a tenth of a shorter
    /// TTL). Zero once lost. For a lease hold this counts down to the end of
    /// the lease; for a watchdog hold each renewal moves it forward.
    ///
    /// Check it before an action that must not happen without the lock, and use fencing
    /// tokens where the resource can check them: a pause after the check is not covered.
    pub fn validity(&self) -> Duration {
        self.hold.validity()
    }

    /// A token cancelled when the lock is known to be lost (see [`is_lost`](Self::is_lost)).
    /// Select on `lost().cancelled()` to stop work that must not continue without the lock.
    pub fn lost(&self) -> CancellationToken {
        self.hold.lost()
    }
}

impl std::fmt::Debug for RLockGuard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RLockGuard")
            .field("name", &self.name())
            .field("owner", &self.owner())
            .field("lease", &self.lease())
            .field("lost", &self.is_lost())
            .finish()
    }
}

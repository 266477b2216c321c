//! [`FencedLock`]: a reentrant lock whose every new owner gets a larger fencing token. Its
//! partner [`FencedValue`], a Redis-stored resource that rejects writes with a stale token,
//! lives in `fenced_value.rs`.
//!
//! # Why fencing tokens
//!
//! A lock on Redis cannot stop a holder that was paused (GC, SIGSTOP, a swapped-out VM, a
//! long syscall) past its TTL: when it wakes up it still believes it holds the lock, while
//! another owner took it meanwhile. Only the protected resource can tell the two apart, so
//! each acquisition that changes the owner carries a number larger than any before
//! (Kleppmann, "How to do distributed locking"). The resource remembers the largest token
//! that wrote to it and rejects smaller ones. Use a fenced lock whenever a late write by a
//! former holder would do damage and the resource can check a token (a database row with a
//! version column, an object store with conditional writes, a Redis value through
//! [`FencedValue`]); a plain [`RLock`] suffices when the work is idempotent or a late holder
//! can do no harm.
//!
//! # Layout
//!
//! The lock hash is an [`RLock`]'s (same key: an `RLock` and a `FencedLock` of one name are
//! one lock), with one extra field `token` holding the holder's token, so the core's unlock,
//! force-unlock and batched renew scripts work on it unchanged. The counter lives in
//! `<ns>:fence:{<name>}`, the one key lockwise writes without a TTL; see `lua/fenced_lock.lua`
//! for how tokens keep increasing when Redis loses writes (a restart, an older snapshot or
//! AOF, a failover to a lagging replica) and where that stops.

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use crate::engine::acquire::{AttemptArgs, ScriptCall};
use crate::engine::{self, pttl_from, Base, Core, Hold, Owner, Reply};
use crate::error::Result;
use crate::layout;
use crate::lock::api::{guard_accessors, inspect_methods, owner_methods};
use crate::lock::reentrant::RLock;
use crate::wire::keys::Role;

/// A reentrant distributed lock that hands out fencing tokens: every acquisition that makes a
/// new owner returns a token strictly greater than every token this lock issued before, also
/// after Redis lost writes (under the assumptions below). Re-entry returns the current token.
///
/// Get one from [`Client::fenced_lock`](crate::Client::fenced_lock). Otherwise it behaves like
/// [`RLock`] (same owner rules, watchdog or lease, pub/sub wakeups); it *is* the `RLock` of
/// the same name, plus a token.
///
/// # When to use it
/// When the protected resource can check a token and a former holder that was paused past
/// its TTL must not be able to write. Pass [`FencedLockGuard::token`] with every write and let
/// the resource reject tokens smaller than the largest it has seen ([`FencedValue`](crate::FencedValue) does that
/// for a value kept in Redis). Without that check the token protects nothing.
///
/// # Guarantees and assumptions
/// Each new token is the larger of the counter (`<ns>:fence:{<name>}`, a key with no TTL) + 1
/// and the Redis server clock in microseconds, and the counter is set to it. When Redis loses
/// writes, the counter comes back older or not at all: a restart without persistence, a
/// restart from an RDB snapshot or an AOF (`appendfsync everysec`) missing the last writes, a
/// failover to a replica that had not received them, eviction. The clock has moved past the
/// lost tokens meanwhile, so new tokens are still larger than all of them **as long as the
/// time from the last lost token to the first new one exceeds**
/// - the counter's lead over the clock: 0 while the lock issues at most one token per
///   microsecond on average; a burst of k tokens within d < k microseconds leaves up to
///   k − d microseconds, drained again k − d microseconds later;
/// - plus how far the new server's clock is behind the old one's: the skew between the
///   machines in a failover, or a step back of the clock (NTP) on the same machine.
///
/// Restarts take milliseconds and failovers seconds, so the margin is wide with synchronised
/// clocks; otherwise new tokens may repeat or fall below lost ones by up to that sum minus the
/// time that passed. `lua/fenced_lock.lua` gives the argument. Tokens are below
/// 2<sup>53</sup> (about the year 2255 at one per microsecond).
///
/// # Example
///
/// ```rust,no_run
/// # async fn demo(client: lockwise::Client) -> lockwise::Result<()> {
/// let lock = client.fenced_lock("stock:sku-1");
/// let guard = lock.lock().await?;
/// let token = guard.token(); // larger than every token handed out before
/// // Storage that checks tokens refuses a write from an older holder:
/// client.fenced_value("stock:sku-1:qty").write(token, 9).await?;
/// guard.unlock().await?;
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct FencedLock {
    inner: Arc<Inner>,
}

struct Inner {
    /// The lock hash's plain view: read-only queries, force-unlock and the release path.
    rlock: RLock,
    /// The lock hash key.
    key: Arc<str>,
    /// The fencing counter key.
    fence: String,
}

impl FencedLock {
    pub(crate) fn new(core: Arc<Core>, name: &str) -> FencedLock {
        let rlock = RLock::new(core, name);
        FencedLock {
            inner: Arc::new(Inner {
                key: rlock.key().into(),
                fence: rlock.base.keys.key(Role::Fence),
                rlock,
            }),
        }
    }

    fn owner_mode(&self) -> &Owner {
        self.inner.rlock.owner_mode()
    }

    fn with_owner_mode(&self, owner: Owner) -> FencedLock {
        FencedLock {
            inner: Arc::new(Inner {
                rlock: self.inner.rlock.with_owner_mode(owner),
                key: self.inner.key.clone(),
                fence: self.inner.fence.clone(),
            }),
        }
    }

    /// The lock hash's name and keys, shared with the [`RLock`] of the same name.
    fn base(&self) -> &Base {
        &self.inner.rlock.base
    }

    /// The lock's name.
    ///
    /// # Example
    ///
    /// ```rust,no_run
    /// # async fn demo(client: lockwise::Client) -> lockwise::Result<()> {
    /// let lock = client.fenced_lock("ledger");
    /// let guard = lock.lock().await?;
    /// println!("holding {} with token {}", lock.name(), guard.token());
    /// guard.unlock().await?;
    /// # Ok(()) }
    /// ```
    pub fn name(&self) -> &str {
        self.inner.rlock.name()
    }

    /// The Redis key of the lock hash (`<namespace>:lock:{<name>}`, shared with the
    /// [`RLock`] of the same name).
    ///
    /// # Example
    ///
    /// ```rust,no_run
    /// # async fn demo(client: lockwise::Client) -> lockwise::Result<()> {
    /// let lock = client.fenced_lock("ledger");
    /// // The same hash as `client.lock("ledger")`: they are one lock.
    /// assert_eq!(lock.key(), client.lock("ledger").key());
    /// # Ok(()) }
    /// ```
    pub fn key(&self) -> &str {
        &self.inner.key
    }

    /// The Redis key of the fencing counter (`<namespace>:fence:{<name>}`); it has no TTL.
    ///
    /// # Example
    ///
    /// ```rust,no_run
    /// # async fn demo(client: lockwise::Client) -> lockwise::Result<()> {
    /// let lock = client.fenced_lock("ledger");
    /// // No TTL: delete the counter only together with the data it protects.
    /// println!("fencing counter at {}", lock.fence_key());
    /// # Ok(()) }
    /// ```
    pub fn fence_key(&self) -> &str {
        &self.inner.fence
    }

    /// Acquires the lock, waiting as long as it takes; the watchdog keeps it alive until the
    /// guard is released. The guard carries the fencing token.
    ///
    /// # Errors
    /// [`Error::ClientClosed`](crate::Error::ClientClosed) once the last `Client` clone is dropped
    /// (a waiting call returns it then too).
    /// [`Error::InvalidArgument`](crate::Error::InvalidArgument) for an invalid name; [`Error::Redis`](crate::Error::Redis) when Redis fails
    /// (also when the counter holds something other than an integer, or is exhausted: the
    /// next token would be 2<sup>53</sup> or more; nothing is written then).
    ///
    /// # Cancel safety
    /// Cancel safe, as [`RLock::lock`]: dropping the future leaves no hold behind. A token
    /// drawn by an abandoned attempt is simply never used; tokens need not be consecutive.
    ///
    /// # Example
    ///
    /// ```rust,no_run
    /// # async fn demo(client: lockwise::Client) -> lockwise::Result<()> {
    /// let lock = client.fenced_lock("ledger");
    /// let guard = lock.lock().await?;
    /// client.fenced_value("ledger:balance").write(guard.token(), 100).await?;
    /// guard.unlock().await?;
    /// # Ok(()) }
    /// ```
    pub async fn lock(&self) -> Result<FencedLockGuard> {
        engine::never_timed_out(self.acquire(None, None).await?)
    }

    /// Acquires the lock, waiting as long as it takes; it expires `lease` after it was taken
    /// unless released before (no watchdog). A fenced lock is the natural partner of a lease:
    /// when the holder overruns it, its token is already stale.
    ///
    /// # Errors
    /// [`Error::ClientClosed`](crate::Error::ClientClosed) once the last `Client` clone is dropped
    /// (a waiting call returns it then too).
    /// As [`FencedLock::lock`], and [`Error::InvalidArgument`](crate::Error::InvalidArgument) for a lease below 1 ms or above
    /// 2<sup>53</sup> ms.
    ///
    /// # Cancel safety
    /// As for [`FencedLock::lock`].
    ///
    /// # Example
    ///
    /// ```rust,no_run
    /// # async fn demo(client: lockwise::Client) -> lockwise::Result<()> {
    /// use std::time::Duration;
    /// let lock = client.fenced_lock("ledger");
    /// let guard = lock.lock_with_lease(Duration::from_secs(10)).await?;
    /// // After the lease, a newer holder's token makes this write fail as stale.
    /// client.fenced_value("ledger:balance").write(guard.token(), 100).await?;
    /// guard.unlock().await?;
    /// # Ok(()) }
    /// ```
    pub async fn lock_with_lease(&self, lease: Duration) -> Result<FencedLockGuard> {
        engine::never_timed_out(self.acquire(None, Some(lease)).await?)
    }

    /// Tries to acquire the lock, waiting at most `wait` (`Duration::ZERO`: one attempt).
    /// [`Error::Timeout`](crate::Error::Timeout) means another owner held it for the whole wait. With `lease: None` the
    /// watchdog keeps the lock alive; with `Some(lease)` it expires after the lease.
    ///
    /// # Errors
    /// [`Error::ClientClosed`](crate::Error::ClientClosed) once the last `Client` clone is dropped
    /// (a waiting call returns it then too).
    /// As [`FencedLock::lock_with_lease`]. [`Error::Timeout`](crate::Error::Timeout) when the wait ran out.
    ///
    /// # Cancel safety
    /// As for [`FencedLock::lock`].
    ///
    /// # Example
    ///
    /// ```rust,no_run
    /// # async fn demo(client: lockwise::Client) -> lockwise::Result<()> {
    /// use std::time::Duration;
    /// let lock = client.fenced_lock("ledger");
    /// match lock.try_lock(Duration::from_secs(1), None).await {
    ///     Ok(guard) => guard.unlock().await?,
    ///     Err(e) if e.is_timeout() => println!("another owner holds {}", lock.name()),
    ///     Err(e) => return Err(e),
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn try_lock(
        &self,
        wait: Duration,
        lease: Option<Duration>,
    ) -> Result<FencedLockGuard> {
        engine::or_timeout(
            self.acquire(Some(engine::deadline_after(wait)), lease)
                .await?,
            self.name(),
        )
    }

    async fn acquire(
        &self,
        deadline: Option<Instant>,
        lease: Option<Duration>,
    ) -> Result<Option<FencedLockGuard>> {
        let rlock = &self.inner.rlock;
        let granted = engine::acquire::run(
            &rlock.base,
            self,
            self.base().owner_field(),
            engine::Wake::Channel(rlock.channel()),
            deadline,
            lease,
            engine::KindId::Fenced,
        )
        .await?;
        Ok(granted.map(|(hold, token)| {
            if let Some(span) = hold.span() {
                engine::observe::fencing_token(span, token);
            }
            FencedLockGuard { hold, token }
        }))
    }

    /// Deletes the lock whoever holds it and wakes its waiters; returns whether it was
    /// locked. The counter is kept, so the next owner still gets a larger token.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`](crate::Error::InvalidArgument) for an invalid name; [`Error::Redis`](crate::Error::Redis) when Redis fails.
    ///
    /// # Cancel safety
    /// Dropping the future may or may not have deleted the lock.
    ///
    /// # Example
    ///
    /// ```rust,no_run
    /// # async fn demo(client: lockwise::Client) -> lockwise::Result<()> {
    /// let lock = client.fenced_lock("ledger");
    /// if lock.force_unlock().await? {
    ///     // The counter is kept: the next holder still gets a larger token.
    ///     println!("{} was held", lock.name());
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn force_unlock(&self) -> Result<bool> {
        self.inner.rlock.force_unlock().await
    }
}

inspect_methods!(FencedLock: inner.rlock.base, lock: "client.fenced_lock(\"ledger\")");
owner_methods!(FencedLock, lock: "client.fenced_lock(\"ledger\")");

/// `[1, holds, token]` granted, `[0, pttl]` held (or free but claimed by another waiter),
/// `[0, pttl, score]` held and this owner queued at `score` (see `lua/claim.lua`).
/// One attempt of `lua/fenced_lock.lua` on the lock hash, the counter and the claim queue;
/// in Redisson's layout `lua/redisson_fenced_lock.lua`, RFencedLock's hash (owner fields
/// only) and counter, a new token on every acquire.
impl engine::acquire::AcquireScript for FencedLock {
    type Extra = u64;

    fn what(&self) -> &'static str {
        "fenced lock"
    }

    fn call<'a>(&'a self, a: &'a AttemptArgs) -> ScriptCall<'a> {
        let (inner, base) = (&self.inner, &self.inner.rlock.base);
        layout::fenced_lock(base.core.layout, &inner.key, &inner.fence, &base.claims, a)
    }

    /// `[1, holds, token]` granted; otherwise the common shapes ([`engine::plain_reply`]).
    fn parse(&self, reply: &[i64]) -> Option<Reply<u64>> {
        match reply {
            [1, holds, token] if *holds >= 1 && *token > 0 => {
                Some(Reply::Granted(*holds as u32, *token as u64))
            }
            [0, pttl] => Some(Reply::Held(pttl_from(*pttl))),
            [0, pttl, score] if *score > 0 => Some(Reply::Claimant(pttl_from(*pttl), *score)),
            _ => None,
        }
    }
}

impl std::fmt::Debug for FencedLock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FencedLock")
            .field("name", &self.name())
            .field("key", &self.key())
            .field("fence", &self.fence_key())
            .finish()
    }
}

/// One hold of a [`FencedLock`], with its fencing token. Release it with
/// [`unlock`](FencedLockGuard::unlock); dropping it releases in the background, as an
/// [`RLockGuard`](crate::RLockGuard) does.
///
/// # Example
///
/// ```rust,no_run
/// # async fn demo(client: lockwise::Client) -> lockwise::Result<()> {
/// let guard = client.fenced_lock("ledger").lock().await?;
/// println!("writing with token {}", guard.token());
/// guard.unlock().await?;
/// # Ok(()) }
/// ```
#[must_use = "the lock is released when the guard is dropped; call .unlock().await"]
pub struct FencedLockGuard {
    hold: Hold,
    token: u64,
}

impl FencedLockGuard {
    /// The fencing token of this hold: larger than every token the lock issued to earlier
    /// owners (under the assumptions in [`FencedLock`]'s docs). Present it with every write to
    /// the protected resource.
    ///
    /// # Example
    ///
    /// ```rust,no_run
    /// # async fn demo(client: lockwise::Client) -> lockwise::Result<()> {
    /// let guard = client.fenced_lock("ledger").lock().await?;
    /// let token = guard.token();
    /// client.fenced_value("ledger:balance").write(token, 100).await?;
    /// guard.unlock().await?;
    /// # Ok(()) }
    /// ```
    pub fn token(&self) -> u64 {
        self.token
    }

    /// Releases this hold; the last hold frees the lock (the token goes with it) and wakes
    /// one waiter per client.
    ///
    /// # Errors
    /// [`Error::NotHeld`](crate::Error::NotHeld) when the hold was already gone (expired, force-unlocked): its token
    /// may already be stale. [`Error::Redis`](crate::Error::Redis) when Redis failed.
    ///
    /// # Cancel safety
    /// Once called, the release happens: dropping the future lets it finish in the background.
    ///
    /// # Example
    ///
    /// ```rust,no_run
    /// # async fn demo(client: lockwise::Client) -> lockwise::Result<()> {
    /// let guard = client.fenced_lock("ledger").lock().await?;
    /// client.fenced_value("ledger:balance").write(guard.token(), 100).await?;
    /// guard.unlock().await?; // the next owner gets a larger token
    /// # Ok(()) }
    /// ```
    pub async fn unlock(mut self) -> Result<()> {
        self.hold.unlock().await
    }
}

guard_accessors!(FencedLockGuard, lock: "client.fenced_lock(\"ledger\")");

impl std::fmt::Debug for FencedLockGuard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FencedLockGuard")
            .field("name", &self.name())
            .field("token", &self.token)
            .field("owner", &self.owner())
            .field("lease", &self.lease())
            .field("lost", &self.is_lost())
            .finish()
    }
}

crate::lock::contract::impl_lock!(crate::FencedLock, crate::FencedLockGuard, token: |g| Some(g.token()));

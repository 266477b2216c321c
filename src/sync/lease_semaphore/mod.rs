//! [`LeaseSemaphore`]: a semaphore whose permits expire, like Redisson's
//! `RPermitExpirableSemaphore`.
//!
//! # How it works
//!
//! Three names share the semaphore's hash tag: `<ns>:leasesem:{name}` holds the available
//! count (a string), `<ns>:leasesemleases:{name}` is a sorted set of the leased permits (a
//! random id -> its lease deadline in the server's milliseconds, from `TIME`), and
//! `<ns>:leasesemchannel:{name}` is the channel. Redis 7.0 and Valkey 8.1 have no per-field
//! TTL, so expiry is done by the scripts themselves: every script (`lua/lease_sem_*.lua`,
//! after `lua/lease_sem_common.lua`) first removes the leases whose deadline passed and adds
//! their count back, so an expired permit is returned by whichever call comes next.
//!
//! A waiter uses the engine's wait loop on the channel. Each release or `add_permits`
//! publishes; a waiter that cannot use what is free, or leaves permits free after taking its
//! own, passes the wakeup to another local waiter that fits ([`waiters`]). Between wakeups a
//! waiter sleeps at most until the earliest lease deadline: an expiring permit frees it
//! without anybody publishing, and without polling.
//!
//! No key lives without a TTL: every write raises the count key's TTL to at least the
//! handle's idle TTL and the latest lease deadline, and gives the leases key the same TTL.
//! (The leases key must not expire at its latest deadline: expired leases are counted back
//! only when a script purges them, so a leases key gone by its own TTL would take the
//! permits of its unpurged leases with it.)
//!
//! In Redisson's key layout the semaphore is Redisson's `RPermitExpirableSemaphore`: see
//! [`redisson`].
//!
//! # Layout
//!
//! - this file: the handle, its arguments and its script calls but acquiring and by id.
//! - [`acquire`]: the acquire methods, their wait loop and their cancellation.
//! - [`permit`]: the [`LeasedPermit`] guard.
//! - [`permits`]: the [`LeasedPermits`] guard, several permits of one `acquire_many`.
//! - [`release`]: releasing permits and updating leases by id.
//! - [`waiters`]: the local waiters' permit counts, for passing wakeups on.
//! - [`stamp`]: the scripts' stamp argument and the permit ids, in the client's key layout.

mod acquire;
mod permit;
mod permits;
mod release;
mod stamp;
mod waiters;

use std::sync::Arc;
use std::time::Duration;

use redis::FromRedisValue;

pub use permit::LeasedPermit;
pub use permits::LeasedPermits;

use crate::engine::Core;
use crate::error::{Error, Result};
use crate::wire::keys::{check_millis, Role, MAX_MILLIS};
use crate::wire::scripts::{Script, ToRedisArgsDyn};

/// The largest permit count: Lua numbers are exact up to 2<sup>53</sup>.
const MAX_PERMITS: u64 = MAX_MILLIS as u64;

/// A semaphore whose permits are leased: each acquired permit has a random id and a
/// deadline, and a permit whose lease runs out returns to the pool by itself. Like
/// Redisson's `RPermitExpirableSemaphore`.
///
/// Get one from [`Client::lease_semaphore`](crate::Client::lease_semaphore); a cheap handle
/// (`Clone`, `Send`, `Sync`) that sends nothing until used.
///
/// # When to use it
///
/// To bound how many tasks, in any process, use a resource at once (connections to a
/// partner API, GPU slots, ...) when a holder may crash: its permit comes back when its lease
/// runs out, where a plain semaphore would lose it for good. Choose the lease longer than the
/// work, or extend it with [`update_lease`](Self::update_lease) while working (there is no
/// watchdog: a permit is never renewed behind your back).
///
/// # Guarantees
///
/// * At most the semaphore's permits are leased at any instant, counted on the server's
///   clock. A holder whose lease ran out no longer holds a permit, even if it still works
///   (a paused process): this is a lease, not a lock, and nothing fences a late holder.
/// * [`release`](Self::release) and [`update_lease`](Self::update_lease) by id answer
///   `false`, changing nothing, for an id that expired, was released, or was never one of
///   this semaphore's.
/// * Waiters are woken by pub/sub, or at the earliest lease deadline; a cancelled
///   `acquire` never keeps a permit (see its `# Cancel safety`).
/// * No key without a TTL: the count key lives at least the idle TTL
///   ([`with_idle_ttl`](Self::with_idle_ttl), default [`DEFAULT_IDLE_TTL`](Self::DEFAULT_IDLE_TTL)) after the last
///   write and never less than the latest lease; a semaphore untouched that long is
///   forgotten (unset), and `try_set_permits` creates it again.
///
/// # In Redisson's key layout
///
/// With [`KeyLayout::Redisson`](crate::KeyLayout::Redisson) this is Redisson's `RPermitExpirableSemaphore` of the same
/// name, byte for byte: the name itself holds the available permits, `{name}:timeout` the
/// leased ones (16-byte ids scored by their expiry on the *clients'* clocks, so hosts must
/// be NTP-synced), and releases publish the new count on `redisson_sc:{name}`. Java services
/// and lockwise share the permits, reclaim each other's expired ones and wake each other's
/// waiters. Permit ids are shown as 32 hex digits, as Redisson's Java API shows them. The
/// idle TTL still applies to lockwise's writes (Java ignores it). A name whose Redisson keys
/// would fall in different Cluster slots is refused with [`Error::InvalidArgument`].
///
/// # Example
///
/// ```rust,no_run
/// use std::time::Duration;
///
/// # async fn demo(client: lockwise::Client) -> lockwise::Result<()> {
/// let sem = client.lease_semaphore("gpu-slots");
/// sem.try_set_permits(8).await?; // `false`: it was set already
/// // If this process dies, the permit comes back when its 5-minute lease runs out.
/// let permit = sem.acquire(Duration::from_secs(300)).await?;
/// // Keep the permit past its guard, and release it later by id (from any process).
/// let id = permit.into_id();
/// sem.release(&id).await?;
/// println!("{} free, {} leased", sem.available_permits().await?, sem.leased_permits().await?);
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct LeaseSemaphore {
    inner: Arc<Inner>,
}

struct Inner {
    core: Arc<Core>,
    name: String,
    /// The available count.
    key: String,
    /// Permit id -> lease deadline.
    leases: String,
    channel: String,
    idle_ms: u64,
    /// The first rejected argument of the handle (name or idle TTL), reported by every call.
    invalid: Option<(&'static str, String)>,
}

impl LeaseSemaphore {
    /// The most permits one `acquire_many` takes (each is its own sorted-set member).
    pub const MAX_ACQUIRE_MANY: u64 = 1000;

    /// The idle TTL of a new handle: a semaphore nobody writes to for this long is
    /// forgotten.
    pub const DEFAULT_IDLE_TTL: Duration = Duration::from_secs(24 * 3600);

    pub(crate) fn new(core: Arc<Core>, name: &str) -> LeaseSemaphore {
        let layout = core.layout;
        let invalid = crate::layout::check_name(layout, name, false)
            .err()
            .map(|e| ("name", reason(e)));
        let name = if invalid.is_some() { "" } else { name };
        let keys = crate::layout::keys(layout, &core.namespace, name);
        LeaseSemaphore {
            inner: Arc::new(Inner {
                key: keys.key(Role::LeaseSem),
                leases: keys.key(Role::LeaseSemLeases),
                channel: keys.key(Role::LeaseSemChannel),
                name: name.to_string(),
                idle_ms: Self::DEFAULT_IDLE_TTL.as_millis() as u64,
                core,
                invalid,
            }),
        }
    }

    /// The same semaphore with another idle TTL (1 ms ..= 2<sup>53</sup> ms; default
    /// [`DEFAULT_IDLE_TTL`](Self::DEFAULT_IDLE_TTL)): each write of this handle raises the count key's TTL to at
    /// least `ttl` (never below the latest lease deadline). A rejected `ttl` is reported by
    /// every call of the returned handle as [`Error::InvalidArgument`].
    ///
    /// # Example
    ///
    /// ```rust,no_run
    /// use std::time::Duration;
    ///
    /// # async fn demo(client: lockwise::Client) -> lockwise::Result<()> {
    /// let hour = Duration::from_secs(3600);
    /// let sem = client.lease_semaphore("gpu-slots").with_idle_ttl(hour);
    /// sem.try_set_permits(8).await?;
    /// # Ok(()) }
    /// ```
    pub fn with_idle_ttl(self, ttl: Duration) -> LeaseSemaphore {
        let i = &self.inner;
        let (idle_ms, invalid) = match check_millis("idle_ttl", ttl) {
            Ok(ms) => (ms, i.invalid.clone()),
            Err(e) => (
                i.idle_ms,
                i.invalid.clone().or(Some(("idle_ttl", reason(e)))),
            ),
        };
        LeaseSemaphore {
            inner: Arc::new(Inner {
                core: i.core.clone(),
                name: i.name.clone(),
                key: i.key.clone(),
                leases: i.leases.clone(),
                channel: i.channel.clone(),
                idle_ms,
                invalid,
            }),
        }
    }

    /// The semaphore's name.
    ///
    /// # Example
    ///
    /// ```rust,no_run
    /// # async fn demo(client: lockwise::Client) -> lockwise::Result<()> {
    /// assert_eq!(client.lease_semaphore("gpu-slots").name(), "gpu-slots");
    /// # Ok(()) }
    /// ```
    pub fn name(&self) -> &str {
        &self.inner.name
    }

    /// The Redis key of the available count (`<namespace>:leasesem:{<name>}`; in Redisson's
    /// key layout the name itself).
    ///
    /// # Example
    ///
    /// ```rust,no_run
    /// # async fn demo(client: lockwise::Client) -> lockwise::Result<()> {
    /// println!("the count is in {}", client.lease_semaphore("gpu-slots").key());
    /// # Ok(()) }
    /// ```
    pub fn key(&self) -> &str {
        &self.inner.key
    }

    /// The Redis key of the leases, a sorted set of permit id -> deadline in server ms
    /// (`<namespace>:leasesemleases:{<name>}`; in Redisson's key layout `{<name>}:timeout`,
    /// 16-byte ids -> expiry in client ms).
    ///
    /// # Example
    ///
    /// ```rust,no_run
    /// # async fn demo(client: lockwise::Client) -> lockwise::Result<()> {
    /// println!("the leases are in {}", client.lease_semaphore("gpu-slots").leases_key());
    /// # Ok(()) }
    /// ```
    pub fn leases_key(&self) -> &str {
        &self.inner.leases
    }

    fn check(&self) -> Result<()> {
        match &self.inner.invalid {
            Some((argument, reason)) => Err(Error::invalid(argument, reason.clone())),
            None => Ok(()),
        }
    }

    /// Sets the available permits to `n` (0 ..= 2<sup>53</sup>) if the semaphore is unset
    /// (never set, or forgotten after its idle TTL). Returns `false`, changing nothing, when
    /// it is set already: use [`add_permits`](Self::add_permits) to change a set semaphore.
    ///
    /// In Redisson's key layout: Redisson's `trySetPermits` (the name holds `n`, and `n` is
    /// published); leases left in `{name}:timeout` are not touched.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for an invalid name or idle TTL, or `n` above
    /// 2<sup>53</sup>; [`Error::Redis`] when Redis fails (for example `WRONGTYPE` when one of
    /// the semaphore's keys holds something else: nothing is changed).
    ///
    /// # Cancel safety
    /// Dropping the future may or may not have set the permits.
    ///
    /// # Example
    ///
    /// ```rust,no_run
    /// # async fn demo(client: lockwise::Client) -> lockwise::Result<()> {
    /// let sem = client.lease_semaphore("gpu-slots");
    /// if !sem.try_set_permits(8).await? {
    ///     println!("set up already: {} permits free", sem.available_permits().await?);
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn try_set_permits(&self, n: u64) -> Result<bool> {
        self.check()?;
        if n > MAX_PERMITS {
            return Err(Error::invalid(
                "permits",
                format!("must be 0 ..= 2^53, got {n}"),
            ));
        }
        let (done, _) = self.add_call("set", n as i64).await?;
        Ok(done)
    }

    /// Adds `delta` to the available permits (negative: takes permits out of the pool,
    /// e.g. to shrink it; leased permits are not touched and still come back when released
    /// or expired). Creates the semaphore, with `delta` permits, when it is unset. Returns
    /// the available permits after the change.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for an invalid name or idle TTL, a `delta` beyond
    /// ±2<sup>53</sup>, or a change that would make the available count negative or above
    /// 2<sup>53</sup> (nothing is changed); [`Error::Redis`] when Redis fails (`WRONGTYPE`:
    /// nothing is changed).
    ///
    /// # Cancel safety
    /// Dropping the future may or may not have added the permits (do not retry blindly).
    ///
    /// # Example
    ///
    /// ```rust,no_run
    /// # async fn demo(client: lockwise::Client) -> lockwise::Result<()> {
    /// let sem = client.lease_semaphore("gpu-slots");
    /// let available = sem.add_permits(-2).await?; // two slots out for maintenance
    /// println!("{available} permits free");
    /// sem.add_permits(2).await?; // and back
    /// # Ok(()) }
    /// ```
    pub async fn add_permits(&self, delta: i64) -> Result<i64> {
        self.check()?;
        if delta.unsigned_abs() > MAX_PERMITS {
            return Err(Error::invalid(
                "delta",
                format!("must be -2^53 ..= 2^53, got {delta}"),
            ));
        }
        match self.add_call("add", delta).await? {
            (true, available) => Ok(available as i64),
            (false, available) => Err(Error::invalid(
                "delta",
                format!(
                    "adding {delta} to the {available} available permits would leave them \
                     outside 0 ..= 2^53"
                ),
            )),
        }
    }

    async fn add_call(&self, mode: &str, n: i64) -> Result<(bool, u64)> {
        let i = &self.inner;
        let stamp = self.stamp();
        let reply: Vec<i64> = self
            .run(
                self.layout().add,
                &[&mode, &n, &i.idle_ms, &i.core.publish, &stamp],
            )
            .await?;
        if reply.first() == Some(&1) {
            self.inner.core.listener.notify_local(&i.channel);
        }
        match reply.as_slice() {
            [done, available] => Ok((*done == 1, (*available).max(0) as u64)),
            other => Err(unexpected("add", other)),
        }
    }

    /// The permits free now, after returning those whose lease ran out (0 for an unset
    /// semaphore).
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for an invalid name or idle TTL; [`Error::Redis`] when
    /// Redis fails.
    ///
    /// # Cancel safety
    /// Cancel safe: it changes nothing but the return of expired permits, which any call
    /// does.
    ///
    /// # Example
    ///
    /// ```rust,no_run
    /// # async fn demo(client: lockwise::Client) -> lockwise::Result<()> {
    /// let free = client.lease_semaphore("gpu-slots").available_permits().await?;
    /// println!("{free} permits free");
    /// # Ok(()) }
    /// ```
    pub async fn available_permits(&self) -> Result<i64> {
        Ok(self.state().await?.0 as i64)
    }

    /// The permits leased now (whose lease has not run out). In Redisson's key layout Java's
    /// permits without lease count too.
    ///
    /// # Errors
    /// As for [`available_permits`](Self::available_permits).
    ///
    /// # Cancel safety
    /// As for [`available_permits`](Self::available_permits).
    ///
    /// # Example
    ///
    /// ```rust,no_run
    /// # async fn demo(client: lockwise::Client) -> lockwise::Result<()> {
    /// let leased = client.lease_semaphore("gpu-slots").leased_permits().await?;
    /// println!("{leased} permits leased");
    /// # Ok(()) }
    /// ```
    pub async fn leased_permits(&self) -> Result<u64> {
        Ok(self.state().await?.1)
    }

    async fn state(&self) -> Result<(u64, u64)> {
        self.check()?;
        let i = &self.inner;
        let stamp = self.stamp();
        let reply: Vec<i64> = self
            .run(self.layout().state, &[&i.idle_ms, &i.core.publish, &stamp])
            .await?;
        match reply.as_slice() {
            [available, leased] => Ok(((*available).max(0) as u64, (*leased).max(0) as u64)),
            other => Err(unexpected("state", other)),
        }
    }

    async fn run<T: FromRedisValue>(
        &self,
        script: &Script,
        args: &[&dyn ToRedisArgsDyn],
    ) -> Result<T> {
        let i = &self.inner;
        Ok(script
            .run(
                &mut i.core.conn.clone(),
                &[&i.key, &i.leases, &i.channel],
                args,
            )
            .await?)
    }
}

fn reason(e: Error) -> String {
    match e {
        Error::InvalidArgument { reason, .. } => reason,
        other => other.to_string(),
    }
}

fn unexpected(script: &str, reply: &[i64]) -> Error {
    Error::UnexpectedReply(format!(
        "lease semaphore {script} script answered {reply:?}"
    ))
}

impl std::fmt::Debug for LeaseSemaphore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LeaseSemaphore")
            .field("name", &self.inner.name)
            .field("key", &self.inner.key)
            .field("idle_ttl_ms", &self.inner.idle_ms)
            .finish()
    }
}

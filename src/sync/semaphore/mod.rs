//! [`Semaphore`]: a counting semaphore, like Redisson's `RSemaphore`.
//!
//! # How it works
//!
//! The semaphore is one hash `<ns>:semaphore:{name}` with the available permits (`p`) and a
//! version (`v`) that changes whenever permits are added (`lua/semaphore_prelude.lua`).
//! Permits are a count, not owned: whoever holds them is not recorded. Every write raises
//! the key's TTL to at least the handle's idle TTL, so an untouched semaphore is forgotten.
//!
//! Waiters use the engine's wait loop on `<ns>:semaphorechannel:{name}`. Adding permits
//! (release, add, set) publishes once; each client wakes one waiter, and the waiters of a
//! client pass the wakeup along among themselves:
//!
//! * a waiter that got its permits and sees permits left wakes the next local waiter;
//! * a waiter that could not get enough, while some permits are free, wakes the next local
//!   waiter too, unless it already failed at this version (then every waiter behind it has
//!   looked at this version: the chain went round), so a waiter for k > 1 never blocks
//!   permits that a waiter for fewer could take, and a waiter for k > 1 is not left asleep
//!   while its permits came back one at a time (each release is a new version).
//!
//! Within one version the available count only falls, so a waiter that failed at the
//! current version cannot succeed before the next addition, which wakes again: no waiter
//! sleeps while enough permits are free. A broadcast (`*`: wake every waiter of every client
//! on each release) was measured against this in `bench/src/bin/bench/` (64 tasks, 8 permits):
//! about 8 script calls per acquire + release pair and a third of the scripts' ceiling,
//! against about 4 calls and half the ceiling for the chain.
//!
//! # In Redisson's key layout
//!
//! With [`KeyLayout::Redisson`](crate::KeyLayout::Redisson) the semaphore is Redisson's `RSemaphore`: a string key, the
//! bare name, holding the available permits as a decimal, and the channel
//! `redisson_sc:{name}`, whose messages carry the new available count
//! (`lua/redisson_semaphore_*.lua`). Java services and lockwise clients then take and give
//! back the same permits and wake each other's waiters. The string has no version: the
//! scripts answer the available count in its place, and a waiter that finds some permits
//! free but too few for it re-checks within half a second and passes the
//! wakeup on again at that pace (see [`acquire`]). lockwise's writes keep the idle TTL on
//! the key (Redisson itself writes none; Java ignores it).
//!
//! # Layout
//!
//! - this file: the handle, its arguments and its script calls but acquiring.
//! - [`acquire`]: the acquire methods, their wait loop and their cancellation.
//! - [`permits`]: the [`SemaphorePermits`] guard.

use std::sync::Arc;
use std::time::Duration;

use crate::engine::Core;
use crate::error::{Error, Result};
use crate::layout::SemaphoreLayout;
use crate::wire::keys::{check_millis, Role, MAX_MILLIS};
use crate::wire::scripts::ToRedisArgsDyn;

mod acquire;
mod permits;

pub use permits::SemaphorePermits;

/// The largest permit count (and the largest `k`): Lua numbers are exact up to 2<sup>53</sup>.
const MAX_PERMITS: u64 = MAX_MILLIS as u64;

/// A counting semaphore shared by every process that uses the same name: `acquire(k)` waits
/// until `k` permits are free and takes them; releasing gives them back. Like Redisson's
/// `RSemaphore`.
///
/// Get one from [`Client::semaphore`](crate::Client::semaphore); a cheap handle (`Clone`,
/// `Send`, `Sync`) that sends nothing until used.
///
/// # Permits are not owned
///
/// The semaphore counts permits; it does not record who holds them. Permits taken by a task
/// whose process then crashes (or whose release fails) are **lost**: the count stays lower
/// until someone calls [`add_permits`](Self::add_permits) or [`release`](Self::release).
/// When holders may crash, use the permit-expirable semaphore,
/// `client.lease_semaphore(name)`, whose permits expire on their own.
///
/// # The idle TTL
///
/// The key always has a TTL: every write (set, acquire, release, add, drain) raises it to at
/// least the handle's idle TTL ([`DEFAULT_IDLE_TTL`](Self::DEFAULT_IDLE_TTL), 24 h, or
/// [`with_idle_ttl`](Self::with_idle_ttl)). A semaphore nobody touched for that long is
/// forgotten (it then has 0 permits; [`try_set_permits`](Self::try_set_permits) creates it
/// again). Choose the TTL longer than the longest time permits are held with no other
/// activity on the semaphore.
///
/// # In Redisson's key layout
///
/// With [`KeyLayout::Redisson`](crate::KeyLayout::Redisson) this is Redisson's `RSemaphore` of the same name, byte for
/// byte: the key is the name itself (a string holding the available permits), and
/// releases, additions and [`try_set_permits`](Self::try_set_permits) publish the new count
/// on `redisson_sc:{name}`, so Java services and lockwise share the permits and wake each
/// other's waiters. The idle TTL still applies to lockwise's writes
/// (Java ignores it, and its own writes may clear it until lockwise's next one). A name
/// whose Redisson keys would fall in different Cluster slots is refused with
/// [`Error::InvalidArgument`].
///
/// # Negative counts
///
/// [`add_permits`](Self::add_permits) with a negative delta may take the count below zero
/// (like Redisson and Java's `Semaphore::reducePermits`): shrinking a semaphore whose
/// permits are out takes effect as they come back. Acquires wait until the count is at
/// least `k` again.
///
/// # Example
///
/// ```rust,no_run
/// use std::time::Duration;
///
/// # async fn demo(client: lockwise::Client) -> lockwise::Result<()> {
/// let sem = client.semaphore("partner-api");
/// sem.try_set_permits(4).await?; // `false`: it existed already
/// let permit = sem.acquire().await?;
/// // ... call the partner API ...
/// permit.release().await?;
///
/// match sem.try_acquire_many(2, Duration::from_millis(500)).await {
///     Ok(permits) => println!("{} free after release", permits.release().await?),
///     Err(e) if e.is_timeout() => println!("all permits busy"),
///     Err(e) => return Err(e),
/// }
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct Semaphore {
    inner: Arc<Inner>,
}

struct Inner {
    core: Arc<Core>,
    name: String,
    key: String,
    channel: String,
    idle_ttl: Duration,
    idle_ttl_ms: u64,
    invalid: Option<(&'static str, String)>,
}

impl Semaphore {
    /// The idle TTL of a handle unless [`with_idle_ttl`](Self::with_idle_ttl) sets another.
    pub const DEFAULT_IDLE_TTL: Duration = Duration::from_secs(24 * 3600);

    pub(crate) fn new(core: Arc<Core>, name: &str) -> Semaphore {
        let layout = core.layout;
        let invalid = crate::layout::check_name(layout, name, false)
            .err()
            .map(|e| ("name", reason(e)));
        let name = if invalid.is_some() { "" } else { name };
        let keys = crate::layout::keys(layout, &core.namespace, name);
        Semaphore {
            inner: Arc::new(Inner {
                key: keys.key(Role::Semaphore),
                channel: keys.key(Role::SemaphoreChannel),
                name: name.to_string(),
                idle_ttl: Self::DEFAULT_IDLE_TTL,
                idle_ttl_ms: Self::DEFAULT_IDLE_TTL.as_millis() as u64,
                core,
                invalid,
            }),
        }
    }

    /// The same semaphore with another idle TTL (1 ms ..= 2<sup>53</sup> ms): every write
    /// through this handle raises the key's TTL to at least `ttl` (never lowers it). An
    /// invalid TTL is reported by every method as [`Error::InvalidArgument`].
    ///
    /// # Example
    ///
    /// ```rust,no_run
    /// use std::time::Duration;
    ///
    /// # async fn demo(client: lockwise::Client) -> lockwise::Result<()> {
    /// let week = Duration::from_secs(7 * 24 * 3600);
    /// let sem = client.semaphore("crawlers").with_idle_ttl(week);
    /// sem.try_set_permits(4).await?;
    /// # Ok(()) }
    /// ```
    pub fn with_idle_ttl(self, ttl: Duration) -> Semaphore {
        let i = &self.inner;
        let (ms, invalid) = match check_millis("idle_ttl", ttl) {
            Ok(ms) => (ms, i.invalid.clone()),
            Err(e) => (1, i.invalid.clone().or(Some(("idle_ttl", reason(e))))),
        };
        Semaphore {
            inner: Arc::new(Inner {
                core: i.core.clone(),
                name: i.name.clone(),
                key: i.key.clone(),
                channel: i.channel.clone(),
                idle_ttl: ttl,
                idle_ttl_ms: ms,
                invalid,
            }),
        }
    }

    fn check(&self) -> Result<()> {
        match &self.inner.invalid {
            Some((argument, reason)) => Err(Error::invalid(argument, reason.clone())),
            None => Ok(()),
        }
    }

    /// The semaphore's name.
    ///
    /// # Example
    ///
    /// ```rust,no_run
    /// # async fn demo(client: lockwise::Client) -> lockwise::Result<()> {
    /// assert_eq!(client.semaphore("crawlers").name(), "crawlers");
    /// # Ok(()) }
    /// ```
    pub fn name(&self) -> &str {
        &self.inner.name
    }

    /// The Redis key of the permits (`<namespace>:semaphore:{<name>}`; in Redisson's key
    /// layout the name itself).
    ///
    /// # Example
    ///
    /// ```rust,no_run
    /// # async fn demo(client: lockwise::Client) -> lockwise::Result<()> {
    /// println!("the permits are in {}", client.semaphore("crawlers").key());
    /// # Ok(()) }
    /// ```
    pub fn key(&self) -> &str {
        &self.inner.key
    }

    /// This handle's idle TTL.
    ///
    /// # Example
    ///
    /// ```rust,no_run
    /// # async fn demo(client: lockwise::Client) -> lockwise::Result<()> {
    /// let sem = client.semaphore("crawlers");
    /// assert_eq!(sem.idle_ttl(), lockwise::Semaphore::DEFAULT_IDLE_TTL);
    /// # Ok(()) }
    /// ```
    pub fn idle_ttl(&self) -> Duration {
        self.inner.idle_ttl
    }

    /// Creates the semaphore with `permits` (0 ..= 2<sup>53</sup>) if it does not exist;
    /// returns `false`, changing nothing, if it does.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for an invalid name or idle TTL or more than 2<sup>53</sup>
    /// permits; [`Error::Redis`] when Redis fails (`WRONGTYPE` when the key holds another
    /// type: nothing is changed).
    ///
    /// # Cancel safety
    /// Dropping the future may or may not have created the semaphore.
    ///
    /// # Example
    ///
    /// ```rust,no_run
    /// # async fn demo(client: lockwise::Client) -> lockwise::Result<()> {
    /// let sem = client.semaphore("crawlers");
    /// if !sem.try_set_permits(4).await? {
    ///     println!("set up already: {} permits free", sem.available_permits().await?);
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn try_set_permits(&self, permits: u64) -> Result<bool> {
        self.check()?;
        check_count("permits", permits, 0)?;
        let i = &self.inner;
        let set: i64 = i
            .layout()
            .set
            .run(
                &mut i.core.conn.clone(),
                &[&i.key, &i.channel],
                i.args(&[&permits, &i.idle_ttl_ms, &i.core.publish, &i.core.id_str]),
            )
            .await?;
        if set == 1 && permits > 0 {
            i.core.listener.notify_local(&i.channel);
        }
        Ok(set == 1)
    }

    /// Adds `delta` permits (negative: removes them; the count may go below zero, see
    /// [Negative counts](Self#negative-counts)), creating the semaphore if it does not exist.
    /// Returns the available permits after the change.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for an invalid name or idle TTL, a `delta` of 0, or a
    /// result outside -2<sup>53</sup> ..= 2<sup>53</sup> (nothing is changed);
    /// [`Error::Redis`] when Redis fails (`WRONGTYPE`: nothing is changed).
    ///
    /// # Cancel safety
    /// Dropping the future may or may not have added the permits (do not retry blindly).
    ///
    /// # Example
    ///
    /// ```rust,no_run
    /// # async fn demo(client: lockwise::Client) -> lockwise::Result<()> {
    /// let sem = client.semaphore("crawlers");
    /// let available = sem.add_permits(2).await?; // two more crawlers may run
    /// println!("{available} permits free");
    /// sem.add_permits(-2).await?; // and back
    /// # Ok(()) }
    /// ```
    pub async fn add_permits(&self, delta: i64) -> Result<i64> {
        self.check()?;
        if delta == 0 || delta.unsigned_abs() > MAX_PERMITS {
            return Err(Error::invalid(
                "delta",
                format!("must be -2^53 ..= 2^53 and not 0, got {delta}"),
            ));
        }
        self.inner.add(delta).await
    }

    /// Gives `permits` back (1 ..= 2<sup>53</sup>), for example permits a guard
    /// [forgot](SemaphorePermits::forget). Nothing checks that they were taken: releasing
    /// more than was acquired raises the count (as in Redisson). Returns the available
    /// permits after the release.
    ///
    /// # Errors
    /// As for [`add_permits`](Self::add_permits); `permits` of 0 is refused.
    ///
    /// # Cancel safety
    /// Dropping the future may or may not have released the permits (do not retry blindly:
    /// a release that ran twice adds permits).
    ///
    /// # Example
    ///
    /// ```rust,no_run
    /// # async fn demo(client: lockwise::Client) -> lockwise::Result<()> {
    /// let sem = client.semaphore("crawlers");
    /// let taken = sem.acquire().await?.forget(); // kept taken past the guard
    /// // ... later, possibly in another task or process ...
    /// let available = sem.release(taken).await?;
    /// # Ok(()) }
    /// ```
    pub async fn release(&self, permits: u64) -> Result<i64> {
        self.check()?;
        check_count("permits", permits, 1)?;
        self.inner.add(permits as i64).await
    }

    /// The permits available now (negative after a negative
    /// [`add_permits`](Self::add_permits)); 0 when the semaphore does not exist.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for an invalid name; [`Error::Redis`] when Redis fails.
    ///
    /// # Cancel safety
    /// Cancel safe (read only).
    ///
    /// # Example
    ///
    /// ```rust,no_run
    /// # async fn demo(client: lockwise::Client) -> lockwise::Result<()> {
    /// let free = client.semaphore("crawlers").available_permits().await?;
    /// println!("{free} permits free");
    /// # Ok(()) }
    /// ```
    pub async fn available_permits(&self) -> Result<i64> {
        self.check()?;
        let i = &self.inner;
        let mut read = match i.layout().count_field {
            None => redis::cmd("GET"),
            Some(_) => redis::cmd("HGET"),
        };
        read.arg(&i.key).arg(i.layout().count_field);
        let p: Option<i64> = read.query_async(&mut i.core.conn.clone()).await?;
        Ok(p.unwrap_or(0))
    }

    /// Takes every available permit at once and returns how many (0 when none are free; a
    /// negative count is left as it is). The permits are not held by a guard: give them
    /// back with [`release`](Self::release).
    ///
    /// # Errors
    /// As for [`available_permits`](Self::available_permits).
    ///
    /// # Cancel safety
    /// Dropping the future may or may not have drained the permits.
    ///
    /// # Example
    ///
    /// ```rust,no_run
    /// # async fn demo(client: lockwise::Client) -> lockwise::Result<()> {
    /// let sem = client.semaphore("crawlers");
    /// let taken = sem.drain_permits().await?; // no new crawler starts
    /// // ... maintenance ...
    /// if taken > 0 {
    ///     sem.release(taken).await?;
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn drain_permits(&self) -> Result<u64> {
        self.check()?;
        let i = &self.inner;
        let n: i64 = i
            .layout()
            .drain
            .run(&mut i.core.conn.clone(), &[&i.key], &[&i.idle_ttl_ms])
            .await?;
        Ok(n.max(0) as u64)
    }
}

impl Inner {
    /// How the client's key layout keeps a semaphore.
    fn layout(&self) -> &'static SemaphoreLayout {
        crate::layout::semaphore(self.core.layout)
    }

    /// A script's arguments in the client's key layout: the last, the client id payload,
    /// only where the messages carry it ([`SemaphoreLayout::id_payload`]).
    fn args<'a>(&self, all: &'a [&'a dyn ToRedisArgsDyn]) -> &'a [&'a dyn ToRedisArgsDyn] {
        match self.layout().id_payload {
            true => all,
            false => &all[..all.len() - 1],
        }
    }

    /// Adds `delta` permits and wakes this client's waiters at once (in lockwise's layout
    /// the message to this client is skipped by its listener; Redisson's count message
    /// wakes them again, which costs one more look).
    async fn add(&self, delta: i64) -> Result<i64> {
        let reply: Vec<i64> = self
            .layout()
            .add
            .run(
                &mut self.core.conn.clone(),
                &[&self.key, &self.channel],
                self.args(&[
                    &delta,
                    &self.idle_ttl_ms,
                    &self.core.publish,
                    &self.core.id_str,
                ]),
            )
            .await?;
        match reply.as_slice() {
            [1, after] => {
                if delta > 0 && *after > 0 {
                    self.core.listener.notify_local(&self.channel);
                }
                Ok(*after)
            }
            [0, available] => Err(Error::invalid(
                "permits",
                format!("{available} available: adding {delta} leaves -2^53 ..= 2^53"),
            )),
            other => Err(Error::UnexpectedReply(format!(
                "semaphore add script answered {other:?}"
            ))),
        }
    }

    /// Gives permits back from a drop or a cancelled acquire; failures are logged.
    async fn give_back(&self, permits: u64) {
        if let Err(e) = self.add(permits as i64).await {
            tracing::warn!(semaphore = %self.name, permits, error = %e, "giving permits back failed; they are lost");
        }
    }
}

fn check_count(argument: &'static str, n: u64, min: u64) -> Result<()> {
    if n < min || n > MAX_PERMITS {
        return Err(Error::invalid(
            argument,
            format!("must be {min} ..= 2^53, got {n}"),
        ));
    }
    Ok(())
}

fn reason(e: Error) -> String {
    match e {
        Error::InvalidArgument { reason, .. } => reason,
        other => other.to_string(),
    }
}

impl std::fmt::Debug for Semaphore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Semaphore")
            .field("name", &self.inner.name)
            .field("key", &self.inner.key)
            .field("idle_ttl", &self.inner.idle_ttl)
            .finish()
    }
}

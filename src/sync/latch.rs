//! [`CountDownLatch`]: a countdown latch, like Redisson's `RCountDownLatch`.
//!
//! # How it works
//!
//! The count is a string key `<ns>:latch:{name}` with a TTL. `try_set_count` sets it only
//! when it does not exist (`lua/latch_set.lua`); `count_down` decrements it and, at zero,
//! deletes it and publishes `*` on `<ns>:latchchannel:{name}` (`lua/latch_count_down.lua`).
//! A missing key is an open latch. Waiters use the engine's wait loop on that channel: a
//! message with the payload `*` wakes every waiter of the channel in each client, and a
//! waiter that finds the latch open wakes the others of its client too (a subscription loss
//! wakes only one waiter per channel). Between wakeups a waiter sleeps until the key's TTL
//! at most: a latch that expires is open.
//!
//! In Redisson's key layout the latch is Redisson's `RCountDownLatch`: the count is the
//! string key `name`, and the channel `redisson_countdownlatch__channel__{name}` carries `0`
//! when the count reaches zero (which wakes every waiter, as `*` does) and `1` when a count
//! is set (`lua/redisson_latch_*.lua`). The key still gets `try_set_count`'s TTL (Java
//! ignores it); a key Java wrote has none, and then a waiter looks again at the watchdog
//! timeout at the latest (Java's count-downs and deletes publish).

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use crate::engine::{self, pttl_from, Attempt, Core};
use crate::error::{Error, Result};
use crate::layout::LatchLayout;
use crate::wire::keys::{check_millis, Role, MAX_MILLIS};
use crate::wire::scripts::LATCH_STATE;

/// The largest count: Lua numbers are exact up to 2<sup>53</sup>.
const MAX_COUNT: u64 = MAX_MILLIS as u64;

/// A countdown latch: tasks wait until other tasks (in any process) have counted it down to
/// zero. Like Redisson's `RCountDownLatch`.
///
/// Get one from [`Client::count_down_latch`](crate::Client::count_down_latch); a cheap
/// handle (`Clone`, `Send`, `Sync`) that sends nothing until used.
///
/// * [`try_set_count`](Self::try_set_count) closes the latch with a count and a TTL, unless
///   it is closed already.
/// * [`count_down`](Self::count_down) lowers the count; at zero the latch opens (its key is
///   deleted) and every waiter, in every client, is woken by one pub/sub message.
/// * [`wait`](Self::wait) / [`wait_timeout`](Self::wait_timeout) return once it is open.
///
/// The key always has a TTL: a latch nobody counts down to zero (its counters crashed)
/// opens by itself when the TTL runs out, so waiters are never stuck for good. Choose the
/// TTL longer than the work it waits for.
///
/// # In Redisson's key layout
///
/// With [`KeyLayout::Redisson`](crate::KeyLayout::Redisson) this is Redisson's `RCountDownLatch` of the same name, byte
/// for byte: the key is the name itself (a string holding the count), and reaching zero
/// publishes `0` on `redisson_countdownlatch__channel__{name}`, so Java services and
/// lockwise count down and wait on the same latch. The TTL of
/// [`try_set_count`](Self::try_set_count) still applies (Java ignores it); a latch Java set
/// has no TTL, and a lockwise waiter then relies on Java's message, looking again at the
/// watchdog timeout at the latest. A name with a brace is refused with
/// [`Error::InvalidArgument`]: Redisson wraps the name in braces in the channel's name
/// whatever it holds.
///
/// # Example
///
/// ```rust,no_run
/// use std::time::Duration;
///
/// # async fn demo(client: lockwise::Client) -> lockwise::Result<()> {
/// let latch = client.count_down_latch("deploy:v42");
/// // Three workers; the latch opens by itself after an hour at most.
/// latch.try_set_count(3, Duration::from_secs(3600)).await?;
///
/// // In each worker, once its part is done:
/// let left = latch.count_down().await?;
/// println!("{left} workers still running");
///
/// // In the coordinator:
/// if latch.wait_timeout(Duration::from_secs(600)).await? {
///     println!("all workers done");
/// }
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct CountDownLatch {
    inner: Arc<Inner>,
}

struct Inner {
    core: Arc<Core>,
    name: String,
    key: String,
    channel: String,
    invalid: Option<String>,
}

impl CountDownLatch {
    pub(crate) fn new(core: Arc<Core>, name: &str) -> CountDownLatch {
        let layout = core.layout;
        let invalid = crate::layout::check_name(layout, name, true)
            .err()
            .map(|e| match e {
                Error::InvalidArgument { reason, .. } => reason,
                other => other.to_string(),
            });
        let name = if invalid.is_some() { "" } else { name };
        let keys = crate::layout::keys(layout, &core.namespace, name);
        CountDownLatch {
            inner: Arc::new(Inner {
                key: keys.key(Role::Latch),
                channel: keys.key(Role::LatchChannel),
                name: name.to_string(),
                core,
                invalid,
            }),
        }
    }

    fn check(&self) -> Result<()> {
        match &self.inner.invalid {
            Some(reason) => Err(Error::invalid("name", reason.clone())),
            None => Ok(()),
        }
    }

    /// The latch's name.
    ///
    /// # Example
    ///
    /// ```rust,no_run
    /// # async fn demo(client: lockwise::Client) -> lockwise::Result<()> {
    /// assert_eq!(client.count_down_latch("deploy:v42").name(), "deploy:v42");
    /// # Ok(()) }
    /// ```
    pub fn name(&self) -> &str {
        &self.inner.name
    }

    /// The Redis key of the count (`<namespace>:latch:{<name>}`; in Redisson's key layout
    /// the name itself).
    ///
    /// # Example
    ///
    /// ```rust,no_run
    /// # async fn demo(client: lockwise::Client) -> lockwise::Result<()> {
    /// println!("the count is in {}", client.count_down_latch("deploy:v42").key());
    /// # Ok(()) }
    /// ```
    pub fn key(&self) -> &str {
        &self.inner.key
    }

    /// Closes the latch with `count` (1 ..= 2<sup>53</sup>) if it is open; the key lives at
    /// most `ttl`. Returns `false`, changing nothing, when the latch is already closed.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for an invalid name, a count of 0 or above 2<sup>53</sup>,
    /// or a TTL below 1 ms or above 2<sup>53</sup> ms; [`Error::Redis`] when Redis fails
    /// (for example `WRONGTYPE` when the key holds something else: nothing is changed).
    ///
    /// # Cancel safety
    /// Dropping the future may or may not have set the count.
    ///
    /// # Example
    ///
    /// ```rust,no_run
    /// use std::time::Duration;
    ///
    /// # async fn demo(client: lockwise::Client) -> lockwise::Result<()> {
    /// let latch = client.count_down_latch("deploy:v42");
    /// if !latch.try_set_count(3, Duration::from_secs(3600)).await? {
    ///     println!("closed already, {} left", latch.count().await?);
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn try_set_count(&self, count: u64, ttl: Duration) -> Result<bool> {
        self.check()?;
        if count == 0 || count > MAX_COUNT {
            return Err(Error::invalid(
                "count",
                format!("must be 1 ..= 2^53, got {count}"),
            ));
        }
        let ttl_ms = check_millis("ttl", ttl)?;
        let (core, i) = (&self.inner.core, &self.inner);
        let set: i64 = self
            .layout()
            .set
            .run(
                &mut core.conn.clone(),
                &[&i.key, &i.channel],
                &[&count, &ttl_ms, &core.publish],
            )
            .await?;
        Ok(set == 1)
    }

    /// Counts the latch down by one; at zero it opens and every waiter is woken. Returns the
    /// count left (0: open). Counting down an open latch does nothing and returns 0.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for an invalid name; [`Error::Redis`] when Redis fails.
    ///
    /// # Cancel safety
    /// Dropping the future may or may not have counted down (do not retry blindly: a count
    /// down that ran twice opens the latch early).
    ///
    /// # Example
    ///
    /// ```rust,no_run
    /// # async fn demo(client: lockwise::Client) -> lockwise::Result<()> {
    /// let latch = client.count_down_latch("deploy:v42");
    /// // ... this worker's part is done:
    /// let left = latch.count_down().await?;
    /// println!("{left} workers still running");
    /// # Ok(()) }
    /// ```
    pub async fn count_down(&self) -> Result<u64> {
        self.check()?;
        let core = &self.inner.core;
        let left: i64 = self
            .layout()
            .count_down
            .run(
                &mut core.conn.clone(),
                &[&self.inner.key, &self.inner.channel],
                &[&core.publish],
            )
            .await?;
        Ok(left.max(0) as u64)
    }

    /// The count left; 0 when the latch is open.
    ///
    /// # Errors
    /// As for [`count_down`](Self::count_down).
    ///
    /// # Cancel safety
    /// Cancel safe (read only).
    ///
    /// # Example
    ///
    /// ```rust,no_run
    /// # async fn demo(client: lockwise::Client) -> lockwise::Result<()> {
    /// let left = client.count_down_latch("deploy:v42").count().await?;
    /// println!("{left} to go");
    /// # Ok(()) }
    /// ```
    pub async fn count(&self) -> Result<u64> {
        self.check()?;
        Ok(self.state().await?.0)
    }

    /// How the client's key layout keeps a latch.
    fn layout(&self) -> &'static LatchLayout {
        crate::layout::latch(self.inner.core.layout)
    }

    /// The count and the key's remaining TTL (`lua/latch_state.lua` reads either layout's
    /// string key).
    async fn state(&self) -> Result<(u64, Option<Duration>)> {
        let core = &self.inner.core;
        let reply: Vec<i64> = LATCH_STATE
            .run(&mut core.conn.clone(), &[&self.inner.key], &[])
            .await?;
        match reply.as_slice() {
            [count, pttl] => Ok(((*count).max(0) as u64, pttl_from(*pttl))),
            other => Err(Error::UnexpectedReply(format!(
                "latch state script answered {other:?}"
            ))),
        }
    }

    /// Waits until the latch is open (its count reached zero, or its TTL ran out).
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for an invalid name; [`Error::Redis`] when Redis fails;
    /// [`Error::ClientClosed`] once the last `Client` is dropped.
    ///
    /// # Cancel safety
    /// Cancel safe: waiting changes nothing in Redis, and a dropped wait leaves no
    /// subscription behind.
    ///
    /// # Example
    ///
    /// ```rust,no_run
    /// # async fn demo(client: lockwise::Client) -> lockwise::Result<()> {
    /// let latch = client.count_down_latch("deploy:v42");
    /// latch.wait().await?;
    /// println!("every worker is done (or the latch expired)");
    /// # Ok(()) }
    /// ```
    pub async fn wait(&self) -> Result<()> {
        engine::never_timed_out(self.wait_until(None).await?)
    }

    /// Like [`wait`](Self::wait), for at most `timeout`: `true` once the latch is open,
    /// `false` when the time ran out first. `Duration::ZERO` looks once.
    ///
    /// # Errors
    /// As for [`wait`](Self::wait).
    ///
    /// # Cancel safety
    /// As for [`wait`](Self::wait).
    ///
    /// # Example
    ///
    /// ```rust,no_run
    /// use std::time::Duration;
    ///
    /// # async fn demo(client: lockwise::Client) -> lockwise::Result<()> {
    /// let latch = client.count_down_latch("deploy:v42");
    /// if !latch.wait_timeout(Duration::from_secs(600)).await? {
    ///     eprintln!("still {} workers running after 10 minutes", latch.count().await?);
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn wait_timeout(&self, timeout: Duration) -> Result<bool> {
        Ok(self
            .wait_until(Some(engine::deadline_after(timeout)))
            .await?
            .is_some())
    }

    async fn wait_until(&self, deadline: Option<Instant>) -> Result<Option<()>> {
        self.check()?;
        let core = &self.inner.core;
        let attempt = || async {
            match self.state().await? {
                (0, _) => Ok(Attempt::Acquired(())),
                // A key without a TTL (Java's Redisson writes none): its count-downs and
                // deletes publish, so look again at the watchdog timeout only.
                (_, ttl) => Ok(Attempt::Held(Some(ttl.unwrap_or(core.watchdog_timeout)))),
            }
        };
        let (channel, name) = (&self.inner.channel, &self.inner.name);
        let open = engine::wait::observed_wait_loop(
            core,
            channel,
            deadline,
            engine::KindId::Latch,
            name,
            attempt,
        )
        .await?;
        if open.is_some() {
            // Pass it on: the others of this client may have missed the broadcast (a
            // subscription loss wakes one waiter per channel only).
            core.listener.notify_all(&self.inner.channel);
        }
        Ok(open)
    }
}

impl std::fmt::Debug for CountDownLatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CountDownLatch")
            .field("name", &self.inner.name)
            .field("key", &self.inner.key)
            .finish()
    }
}

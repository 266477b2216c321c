//! [`Semaphore`]'s acquire methods: the wait loop on the semaphore's channel, which passes
//! wakeups on among this client's waiters, and the acquire script call that gives back what
//! a cancelled call was granted.
//!
//! # Without a version (Redisson's key layout)
//!
//! Redisson's semaphore is a bare count, so its acquire script answers the available count
//! where lockwise's answers the version. A waiter still passes the wakeup on when it fails
//! at a count it has not failed at before, but a count can come back to a value (a take,
//! then a release) while the waiters behind have not looked at it: "failed at this version
//! already" no longer proves that the chain went round. So a waiter that fails while some
//! permits are free (too few for it) looks again within the layout's
//! [`recheck`](crate::layout::SemaphoreLayout::recheck) (500 ms), and passes the wakeup on
//! again once that long has passed since it last did. No waiter then sleeps
//! longer than about that past the moment its permits are free: each addition publishes
//! the new count and wakes up to that many waiters of each client (`layout::redisson`), and
//! a woken waiter that cannot use them keeps the chain going at least at that pace. A
//! waiter that finds no permit free sleeps until the next message (or its bound), as in
//! lockwise's layout: only an addition, which publishes, can help it.

use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::FutureExt;
use tokio::time::Instant;

use super::{check_count, Inner, Semaphore, SemaphorePermits};
use crate::engine::call::Inflight;
use crate::engine::{self, Attempt};
use crate::error::{Error, Result};

impl Semaphore {
    /// Waits until a permit is available and takes it.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for an invalid name or idle TTL; [`Error::Redis`] when
    /// Redis fails (if the reply of the script that took the permit is lost, it may be
    /// taken with no guard: lost, as a crashed holder's); [`Error::ClientClosed`] once the
    /// last `Client` is dropped.
    ///
    /// # Cancel safety
    /// Cancel safe: a dropped call takes nothing. If it is dropped after the server granted
    /// the permit but before the reply was read, it is given back in the background.
    ///
    /// # Example
    ///
    /// ```rust,no_run
    /// # async fn demo(client: lockwise::Client) -> lockwise::Result<()> {
    /// let permit = client.semaphore("crawlers").acquire().await?;
    /// // ... crawl ...
    /// permit.release().await?;
    /// # Ok(()) }
    /// ```
    pub async fn acquire(&self) -> Result<SemaphorePermits> {
        self.acquire_many(1).await
    }

    /// Waits until `permits` (1 ..= 2<sup>53</sup>) are available at once and takes them.
    ///
    /// # Errors
    /// As for [`acquire`](Self::acquire), and [`Error::InvalidArgument`] for `permits` out
    /// of range.
    ///
    /// # Cancel safety
    /// As for [`acquire`](Self::acquire).
    ///
    /// # Example
    ///
    /// ```rust,no_run
    /// # async fn demo(client: lockwise::Client) -> lockwise::Result<()> {
    /// let permits = client.semaphore("crawlers").acquire_many(3).await?;
    /// // ... a job worth three crawlers ...
    /// permits.release().await?;
    /// # Ok(()) }
    /// ```
    pub async fn acquire_many(&self, permits: u64) -> Result<SemaphorePermits> {
        engine::never_timed_out(self.acquire_until(permits, None).await?)
    }

    /// Like [`acquire`](Self::acquire), waiting at most `wait` (`Duration::ZERO`: one
    /// attempt): [`Error::Timeout`] when no permit came free in time.
    ///
    /// # Errors
    /// As for [`acquire`](Self::acquire), and [`Error::Timeout`].
    ///
    /// # Cancel safety
    /// As for [`acquire`](Self::acquire).
    ///
    /// # Example
    ///
    /// ```rust,no_run
    /// use std::time::Duration;
    ///
    /// # async fn demo(client: lockwise::Client) -> lockwise::Result<()> {
    /// match client.semaphore("crawlers").try_acquire(Duration::from_millis(200)).await {
    ///     Ok(permit) => println!("{} free again", permit.release().await?),
    ///     Err(e) if e.is_timeout() => println!("every crawler is busy"),
    ///     Err(e) => return Err(e),
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn try_acquire(&self, wait: Duration) -> Result<SemaphorePermits> {
        self.try_acquire_many(1, wait).await
    }

    /// Like [`acquire_many`](Self::acquire_many), waiting at most `wait`: [`Error::Timeout`]
    /// when `permits` did not come free at once in time.
    ///
    /// # Errors
    /// As for [`acquire_many`](Self::acquire_many), and [`Error::Timeout`].
    ///
    /// # Cancel safety
    /// As for [`acquire`](Self::acquire).
    ///
    /// # Example
    ///
    /// ```rust,no_run
    /// use std::time::Duration;
    ///
    /// # async fn demo(client: lockwise::Client) -> lockwise::Result<()> {
    /// let sem = client.semaphore("crawlers");
    /// let permits = sem.try_acquire_many(2, Duration::from_secs(1)).await?;
    /// permits.release().await?;
    /// # Ok(()) }
    /// ```
    pub async fn try_acquire_many(&self, permits: u64, wait: Duration) -> Result<SemaphorePermits> {
        let acquired = self
            .acquire_until(permits, Some(engine::deadline_after(wait)))
            .await?;
        engine::or_timeout(acquired, self.name())
    }

    async fn acquire_until(
        &self,
        permits: u64,
        deadline: Option<Instant>,
    ) -> Result<Option<SemaphorePermits>> {
        self.check()?;
        check_count("permits", permits, 1)?;
        let i = &self.inner;
        // The version of this call's last failed attempt (MIN: none yet).
        let failed_at = AtomicI64::new(i64::MIN);
        // A layout whose waiters re-check: when this call last passed a wakeup on (see the
        // module docs).
        let recheck = i.layout().recheck;
        let passed_at = Mutex::new(None::<Instant>);
        let attempt = || async {
            let reply = self.inner.clone().try_take(permits).await?;
            match reply.as_slice() {
                [1, left, ..] => {
                    if *left > 0 {
                        // Permits left: the next local waiter may take them.
                        i.core.listener.notify_local(&i.channel);
                    }
                    Ok(Attempt::Acquired(()))
                }
                [0, available, version, pttl] => {
                    let before = failed_at.swap(*version, Ordering::SeqCst);
                    let mut pass = *available > 0 && before != *version;
                    if let Some(recheck) = recheck.filter(|_| *available > 0) {
                        // The count stands for the version: pass on again at a steady pace.
                        let mut last = passed_at.lock().unwrap_or_else(|e| e.into_inner());
                        pass |= last.is_none_or(|at| at.elapsed() >= recheck);
                        if pass {
                            *last = Some(Instant::now());
                        }
                    }
                    if pass {
                        // Not enough for us, but maybe for a waiter behind us.
                        i.core.listener.notify_local(&i.channel);
                    }
                    // The count only changes by writes that publish; sleep until then, but
                    // at most until the key's TTL and at most the watchdog timeout, so a
                    // lost wakeup costs at most that (the idle TTL is 24 h by default).
                    let mut bound = engine::pttl_from(*pttl)
                        .unwrap_or(i.idle_ttl)
                        .min(i.core.watchdog_timeout);
                    if let Some(recheck) = recheck.filter(|_| *available > 0) {
                        bound = bound.min(recheck);
                    }
                    Ok(Attempt::Held(Some(bound)))
                }
                other => Err(Error::UnexpectedReply(format!(
                    "semaphore acquire script answered {other:?}"
                ))),
            }
        };
        let (channel, name) = (&i.channel, &i.name);
        let got = engine::wait::observed_wait_loop(
            &i.core,
            channel,
            deadline,
            engine::KindId::Semaphore,
            name,
            attempt,
        )
        .await?;
        let Some(()) = got else {
            return Ok(None);
        };
        let guard = SemaphorePermits::new(self.clone(), permits);
        // Tracked first, then checked: a close that took its snapshot before this guard
        // was tracked has closed the client by now, and the guard gives its permits back.
        i.core.holds.check_open()?;
        Ok(Some(guard))
    }
}

impl Inner {
    /// One acquire script call. If the caller drops it before the reply was read, the call
    /// finishes in the background and gives back what it was granted.
    async fn try_take(self: Arc<Self>, permits: u64) -> Result<Vec<i64>> {
        let handle = self.core.cleanups.clone();
        let this = self.clone();
        let call = async move {
            this.layout()
                .acquire
                .run::<Vec<i64>, _>(
                    &mut this.core.conn.clone(),
                    &[&this.key],
                    &[&permits, &this.idle_ttl_ms],
                )
                .await
        }
        .boxed();
        let undo = move |reply: redis::RedisResult<Vec<i64>>| {
            async move {
                if matches!(reply.as_deref(), Ok([1, ..])) {
                    self.give_back(permits).await;
                }
            }
            .boxed()
        };
        Ok(Inflight::new(handle, call, undo).await?)
    }
}

//! The acquire methods of [`LeaseSemaphore`]: the engine's wait loop around one acquire
//! script call per attempt, whose grant is given back if nobody awaits its reply.

use std::time::Duration;

use futures::FutureExt;
use tokio::time::Instant;

use super::waiters::Waiter;
use super::{unexpected, LeaseSemaphore, LeasedPermit, LeasedPermits};
use crate::engine::call::Inflight;
use crate::engine::{self, Attempt};
use crate::error::{Error, Result};
use crate::wire::keys::check_millis;
use crate::wire::scripts::ToRedisArgsDyn;

impl LeaseSemaphore {
    /// Acquires one permit leased for `lease` (1 ms ..= 2<sup>53</sup> ms), waiting as long
    /// as it takes.
    ///
    /// In Redisson's key layout the permit expires at now + `lease` on this client's clock
    /// (capped at 922337203685477, Redisson's "no lease"), its id is 32 hex digits, and
    /// the same holds for the other acquire methods.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for an invalid name, idle TTL or lease; [`Error::Redis`]
    /// when Redis fails; [`Error::ClientClosed`] once the last `Client` is dropped.
    ///
    /// # Cancel safety
    /// Cancel safe: dropped at any point, no permit is kept. A permit granted by a call
    /// whose reply nobody awaits any more (or whose reply was lost) is released in the
    /// background as soon as the call ends; a wakeup it took is passed on.
    ///
    /// # Example
    ///
    /// ```rust,no_run
    /// use std::time::Duration;
    ///
    /// # async fn demo(client: lockwise::Client) -> lockwise::Result<()> {
    /// let sem = client.lease_semaphore("gpu-slots");
    /// // Comes back by itself after 5 minutes if this process dies.
    /// let permit = sem.acquire(Duration::from_secs(300)).await?;
    /// permit.release().await?;
    /// # Ok(()) }
    /// ```
    pub async fn acquire(&self, lease: Duration) -> Result<LeasedPermit> {
        let mut permits = self.acquire_many(1, lease).await?;
        Ok(permits.permits.remove(0))
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
    /// let sem = client.lease_semaphore("gpu-slots");
    /// match sem.try_acquire(Duration::from_secs(1), Duration::from_secs(300)).await {
    ///     Ok(permit) => permit.release().await?,
    ///     Err(e) if e.is_timeout() => println!("every slot is busy"),
    ///     Err(e) => return Err(e),
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn try_acquire(&self, wait: Duration, lease: Duration) -> Result<LeasedPermit> {
        let mut permits = self.try_acquire_many(1, wait, lease).await?;
        Ok(permits.permits.remove(0))
    }

    /// Acquires `k` permits (1 ..= [`MAX_ACQUIRE_MANY`](Self::MAX_ACQUIRE_MANY)) at once, all or none, each with
    /// its own id and the same lease. A waiter for `k` permits waits until `k` are free at
    /// once; it does not take them one by one (which could deadlock two such waiters).
    ///
    /// # Errors
    /// As for [`acquire`](Self::acquire), and [`Error::InvalidArgument`] for `k` out of
    /// range.
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
    /// let sem = client.lease_semaphore("gpu-slots");
    /// let permits = sem.acquire_many(4, Duration::from_secs(300)).await?;
    /// println!("leased {:?}", permits.ids());
    /// permits.release().await?;
    /// # Ok(()) }
    /// ```
    pub async fn acquire_many(&self, k: u64, lease: Duration) -> Result<LeasedPermits> {
        engine::never_timed_out(self.acquire_until(k, None, lease).await?)
    }

    /// Like [`acquire_many`](Self::acquire_many), waiting at most `wait`:
    /// [`Error::Timeout`] when `k` permits did not come free at once in time.
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
    /// let sem = client.lease_semaphore("gpu-slots");
    /// let wait = Duration::from_secs(2);
    /// let permits = sem.try_acquire_many(4, wait, Duration::from_secs(300)).await?;
    /// permits.release().await?;
    /// # Ok(()) }
    /// ```
    pub async fn try_acquire_many(
        &self,
        k: u64,
        wait: Duration,
        lease: Duration,
    ) -> Result<LeasedPermits> {
        let deadline = engine::deadline_after(wait);
        engine::or_timeout(
            self.acquire_until(k, Some(deadline), lease).await?,
            self.name(),
        )
    }

    async fn acquire_until(
        &self,
        k: u64,
        deadline: Option<Instant>,
        lease: Duration,
    ) -> Result<Option<LeasedPermits>> {
        self.check()?;
        let lease_ms = check_millis("lease", lease)?;
        if k == 0 || k > Self::MAX_ACQUIRE_MANY {
            return Err(Error::invalid(
                "permits",
                format!("must be 1 ..= {}, got {k}", Self::MAX_ACQUIRE_MANY),
            ));
        }
        let core = &self.inner.core;
        let waiter = Waiter::new(&core.id_str, &self.inner.channel, k);
        let attempt = || self.attempt(k, lease_ms, &waiter);
        let (channel, name) = (&self.inner.channel, &self.inner.name);
        let ids = engine::wait::observed_wait_loop(
            core,
            channel,
            deadline,
            engine::KindId::LeaseSemaphore,
            name,
            attempt,
        )
        .await?;
        let Some((ids, sent_at)) = ids else {
            return Ok(None);
        };
        let permits = LeasedPermits {
            permits: ids
                .into_iter()
                .map(|id| LeasedPermit::new(self.clone(), id, lease, sent_at))
                .collect(),
        };
        // Tracked first, then checked: a close that took its snapshot before these were
        // tracked has closed the client by now, and dropping them gives them back.
        core.holds.check_open()?;
        Ok(Some(permits))
    }

    /// One acquire call. Its reply is awaited by an [`Inflight`]: dropped before the reply,
    /// the call finishes in the background and gives back what it was granted.
    async fn attempt(
        &self,
        k: u64,
        lease_ms: u64,
        waiter: &Waiter,
    ) -> Result<Attempt<(Vec<String>, Instant)>> {
        let ids: Vec<String> = (0..k).map(|_| self.new_id()).collect();
        let sent_at = Instant::now();
        let this = self.clone();
        let sent: Vec<Vec<u8>> = ids.iter().filter_map(|id| self.wire_id(id)).collect();
        let call = async move {
            let i = &this.inner;
            let stamp = this.stamp();
            let mut args: Vec<&dyn ToRedisArgsDyn> =
                vec![&k, &lease_ms, &i.idle_ms, &i.core.publish, &stamp];
            args.extend(sent.iter().map(|id| id as &dyn ToRedisArgsDyn));
            let script = this.layout().acquire;
            this.run::<Vec<i64>>(script, &args).await
        }
        .boxed();
        let this = self.clone();
        let undo_ids = ids.clone();
        let undo = move |reply: Result<Vec<i64>>| {
            async move {
                // Granted to nobody, or unknown: give the ids back (an id never granted is
                // simply not found).
                if reply.map_or(true, |r| r.first() == Some(&1)) {
                    this.give_back(&undo_ids).await;
                }
            }
            .boxed()
        };
        let reply = match Inflight::new(self.inner.core.cleanups.clone(), call, undo).await {
            Ok(reply) => reply,
            Err(e) => {
                if e.is_retryable() {
                    // The call may have run: its grant, if any, must not stay leased.
                    let this = self.clone();
                    self.inner
                        .core
                        .cleanups
                        .spawn(async move { this.give_back(&ids).await });
                }
                return Err(e);
            }
        };
        let channel = &self.inner.channel;
        match reply.as_slice() {
            [1, left] => {
                if waiter.another_fits((*left).max(0) as u64) {
                    self.inner.core.listener.notify_local(channel);
                }
                Ok(Attempt::Acquired((ids, sent_at)))
            }
            [0, free, wait] => {
                if waiter.another_fits((*free).max(0) as u64) {
                    self.inner.core.listener.notify_local(channel);
                }
                // Until the earliest lease ends (or, with none, a wakeup: `try_set_permits`
                // and `add_permits` publish), but never longer than the watchdog timeout,
                // so a lost wakeup costs at most that.
                let mut bound = u64::try_from(*wait)
                    .map_or(Duration::MAX, Duration::from_millis)
                    .min(self.inner.core.watchdog_timeout);
                if let Some(recheck) = self.layout().recheck.filter(|_| *free > 0) {
                    // Too few for us: look again soon (a layout whose messages carry a
                    // count, not who sent them).
                    bound = bound.min(recheck);
                }
                Ok(Attempt::Held(Some(bound)))
            }
            other => Err(unexpected("acquire", other)),
        }
    }
}

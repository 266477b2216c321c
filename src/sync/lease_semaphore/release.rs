//! The by-id methods of [`LeaseSemaphore`]: releasing permits and updating their leases,
//! for the permit guards and for callers that kept only an id.

use std::time::Duration;

use super::LeaseSemaphore;
use crate::error::Result;
use crate::wire::keys::check_millis;
use crate::wire::scripts::ToRedisArgsDyn;

impl LeaseSemaphore {
    /// Releases `ids` in the background path (a cancelled acquire, a dropped permit): errors
    /// are only logged, the leases are the backstop.
    pub(super) async fn give_back(&self, ids: &[String]) {
        if let Err(e) = self.release_ids(ids).await {
            tracing::debug!(semaphore = %self.inner.name, error = %e,
                "returning permits failed; their lease returns them");
        }
    }

    /// Releases the permit `id`, returning it to the pool. Returns `false`, changing
    /// nothing, when `id` is not leased: released already, expired (it came back by
    /// itself), or never one of this semaphore's (any string is accepted).
    ///
    /// In Redisson's key layout `id` is 32 hex digits (a permit of lockwise's or of Java's
    /// Redisson); any other string answers `false` without a call. A permit past its
    /// expiry that nobody reclaimed yet is counted back and answers `false`, as in Redisson.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`](crate::Error::InvalidArgument) for an invalid name or idle
    /// TTL; [`Error::Redis`](crate::Error::Redis) when Redis fails.
    ///
    /// # Cancel safety
    /// Dropping the future may or may not have released the permit; releasing again is
    /// harmless (it answers `false`).
    ///
    /// # Example
    ///
    /// ```rust,no_run
    /// use std::time::Duration;
    ///
    /// # async fn demo(client: lockwise::Client) -> lockwise::Result<()> {
    /// let sem = client.lease_semaphore("gpu-slots");
    /// let id = sem.acquire(Duration::from_secs(300)).await?.into_id();
    /// // ... later, from any process that knows the id:
    /// if !sem.release(&id).await? {
    ///     println!("the lease had run out already");
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn release(&self, id: &str) -> Result<bool> {
        self.check()?;
        Ok(self.release_ids(&[id]).await? == 1)
    }

    pub(super) async fn release_ids<S: AsRef<str>>(&self, ids: &[S]) -> Result<u64> {
        let i = &self.inner;
        let ids: Vec<Vec<u8>> = ids
            .iter()
            .filter_map(|id| self.wire_id(id.as_ref()))
            .collect();
        if ids.is_empty() {
            return Ok(0); // none is a permit's id
        }
        let stamp = self.stamp();
        let mut args: Vec<&dyn ToRedisArgsDyn> = vec![&i.idle_ms, &i.core.publish, &stamp];
        args.extend(ids.iter().map(|id| id as &dyn ToRedisArgsDyn));
        let script = self.layout().release;
        let released: i64 = self.run(script, &args).await?;
        if released > 0 {
            i.core.listener.notify_local(&i.channel);
        }
        Ok(released.max(0) as u64)
    }

    /// Gives the permit `id` a new lease of `lease` (1 ms ..= 2<sup>53</sup> ms) counted from
    /// now, longer or shorter than the old one. Returns `false`, changing nothing, when `id`
    /// is not leased (released, expired, or never one of this semaphore's): the permit may
    /// be someone else's by now, so do not go on as its holder.
    ///
    /// In Redisson's key layout: Redisson's `updateLeaseTime` (the permit's expiry becomes
    /// now + `lease` on this client's clock); `id` as for [`release`](Self::release).
    ///
    /// # Errors
    /// [`Error::InvalidArgument`](crate::Error::InvalidArgument) for an invalid name, idle
    /// TTL or lease; [`Error::Redis`](crate::Error::Redis) when Redis fails.
    ///
    /// # Cancel safety
    /// Dropping the future may or may not have updated the lease; updating again is
    /// harmless.
    ///
    /// # Example
    ///
    /// ```rust,no_run
    /// use std::time::Duration;
    ///
    /// # async fn demo(client: lockwise::Client) -> lockwise::Result<()> {
    /// let sem = client.lease_semaphore("gpu-slots");
    /// let id = sem.acquire(Duration::from_secs(60)).await?.into_id();
    /// // ... the job takes longer than planned:
    /// if !sem.update_lease(&id, Duration::from_secs(60)).await? {
    ///     eprintln!("the lease ran out: the slot may be someone else's");
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn update_lease(&self, id: &str, lease: Duration) -> Result<bool> {
        self.check()?;
        let lease_ms = check_millis("lease", lease)?;
        let Some(id) = self.wire_id(id) else {
            return Ok(false); // not a permit's id
        };
        let i = &self.inner;
        let stamp = self.stamp();
        let updated: i64 = self
            .run(
                self.layout().update,
                &[&i.idle_ms, &i.core.publish, &stamp, &lease_ms, &id],
            )
            .await?;
        Ok(updated == 1)
    }
}

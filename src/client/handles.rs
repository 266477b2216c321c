//! The handles a [`Client`] gives out, one method per lock and synchronizer kind; each is
//! cheap and sends nothing to Redis until used.

use super::Client;
use crate::lock::reentrant::RLock;

impl Client {
    /// A handle to the reentrant lock `name`. Cheap; nothing is sent to Redis. An invalid
    /// name (empty, longer than [`MAX_NAME_LEN`](crate::MAX_NAME_LEN)) is reported by the
    /// handle's methods as [`Error::InvalidArgument`](crate::Error::InvalidArgument).
    ///
    /// # Example
    ///
    /// ```rust,no_run
    /// # async fn demo(client: lockwise::Client) -> lockwise::Result<()> {
    /// let lock = client.lock("orders:42");
    /// let guard = lock.lock().await?;
    /// // ... work under the lock ...
    /// guard.unlock().await?;
    /// # Ok(()) }
    /// ```
    pub fn lock(&self, name: impl AsRef<str>) -> RLock {
        RLock::new(self.inner.core.clone(), name.as_ref())
    }

    /// A handle to the spin lock `name`: the [`RLock`](crate::RLock) of that name, whose
    /// waiters try again after a growing pause instead of subscribing (see
    /// [`SpinLock`](crate::SpinLock)). Cheap; nothing is sent to Redis. An invalid name is
    /// reported by the handle's methods as [`Error::InvalidArgument`](crate::Error::InvalidArgument).
    ///
    /// # Example
    ///
    /// ```rust,no_run
    /// # async fn demo(client: lockwise::Client) -> lockwise::Result<()> {
    /// let guard = client.spin_lock("cache-refresh").lock().await?;
    /// // ... a short critical section ...
    /// guard.unlock().await?;
    /// # Ok(()) }
    /// ```
    pub fn spin_lock(&self, name: impl AsRef<str>) -> crate::SpinLock {
        crate::SpinLock::new(self.inner.core.clone(), name.as_ref())
    }

    /// A handle to the fair (first-come, first-served) lock `name`: an [`RLock`](crate::RLock)-like lock
    /// whose waiters acquire in the order they asked, at the cost of a queue in Redis (see
    /// [`FairLock`](crate::FairLock)). Cheap; nothing is sent to Redis. An invalid name is
    /// reported by the handle's methods as [`Error::InvalidArgument`](crate::Error::InvalidArgument).
    ///
    /// # Example
    ///
    /// ```rust,no_run
    /// # async fn demo(client: lockwise::Client) -> lockwise::Result<()> {
    /// // Waiters get the lock in the order they asked for it.
    /// let guard = client.fair_lock("ticket-desk").lock().await?;
    /// guard.unlock().await?;
    /// # Ok(()) }
    /// ```
    pub fn fair_lock(&self, name: impl AsRef<str>) -> crate::FairLock {
        crate::lock::fair::FairLock::new(self.inner.core.clone(), name.as_ref())
    }

    /// A handle to the fenced lock `name`: an [`RLock`](crate::RLock) whose every new owner gets a larger
    /// fencing token (see [`FencedLock`](crate::FencedLock)). It is the same lock as
    /// `lock(name)`. Cheap; nothing is sent to Redis; an invalid name is reported by the
    /// handle's methods.
    ///
    /// # Example
    ///
    /// ```rust,no_run
    /// # async fn demo(client: lockwise::Client) -> lockwise::Result<()> {
    /// let guard = client.fenced_lock("ledger").lock().await?;
    /// println!("fencing token {}", guard.token());
    /// guard.unlock().await?;
    /// # Ok(()) }
    /// ```
    pub fn fenced_lock(&self, name: impl AsRef<str>) -> crate::FencedLock {
        crate::lock::fenced::FencedLock::new(self.inner.core.clone(), name.as_ref())
    }

    /// A value kept in Redis at `key` (used as given, no namespace) that rejects writes with
    /// a stale fencing token (see [`FencedValue`](crate::FencedValue)). Cheap; nothing is
    /// sent to Redis.
    ///
    /// # Example
    ///
    /// ```rust,no_run
    /// # async fn demo(client: lockwise::Client) -> lockwise::Result<()> {
    /// let balance = client.fenced_value("ledger:balance");
    /// let guard = client.fenced_lock("ledger").lock().await?;
    /// balance.write(guard.token(), 100).await?; // refused if a newer holder wrote
    /// guard.unlock().await?;
    /// # Ok(()) }
    /// ```
    pub fn fenced_value(&self, key: impl AsRef<str>) -> crate::FencedValue {
        crate::lock::fenced_value::FencedValue::new(self.inner.core.clone(), key.as_ref())
    }

    /// A handle to the countdown latch `name` (see
    /// [`CountDownLatch`](crate::CountDownLatch)). Cheap; nothing is sent to Redis.
    ///
    /// # Example
    ///
    /// ```rust,no_run
    /// use std::time::Duration;
    ///
    /// # async fn demo(client: lockwise::Client) -> lockwise::Result<()> {
    /// let latch = client.count_down_latch("batch:7");
    /// latch.try_set_count(3, Duration::from_secs(600)).await?;
    /// latch.wait().await?; // until three workers called `count_down`
    /// # Ok(()) }
    /// ```
    pub fn count_down_latch(&self, name: impl AsRef<str>) -> crate::CountDownLatch {
        crate::sync::latch::CountDownLatch::new(self.inner.core.clone(), name.as_ref())
    }

    /// A handle to the read-write lock `name` (see [`RwLock`](crate::RwLock)): many
    /// readers or one writer. Cheap; nothing is sent to Redis.
    ///
    /// # Example
    ///
    /// ```rust,no_run
    /// # async fn demo(client: lockwise::Client) -> lockwise::Result<()> {
    /// let catalog = client.rw_lock("catalog");
    /// let read = catalog.read().lock().await?;
    /// read.unlock().await?;
    /// let write = catalog.write().lock().await?;
    /// write.unlock().await?;
    /// # Ok(()) }
    /// ```
    pub fn rw_lock(&self, name: impl AsRef<str>) -> crate::RwLock {
        crate::lock::rwlock::RwLock::new(self.inner.core.clone(), name.as_ref())
    }

    /// A handle to the semaphore `name` (see [`Semaphore`](crate::Semaphore)). Cheap;
    /// nothing is sent to Redis.
    ///
    /// # Example
    ///
    /// ```rust,no_run
    /// # async fn demo(client: lockwise::Client) -> lockwise::Result<()> {
    /// let sem = client.semaphore("crawlers");
    /// sem.try_set_permits(4).await?;
    /// let permit = sem.acquire().await?;
    /// permit.release().await?;
    /// # Ok(()) }
    /// ```
    pub fn semaphore(&self, name: impl AsRef<str>) -> crate::Semaphore {
        crate::sync::semaphore::Semaphore::new(self.inner.core.clone(), name.as_ref())
    }

    /// A handle to the permit-expirable semaphore `name`: each permit has an id and a
    /// lease, and comes back by itself when the lease runs out (see
    /// [`LeaseSemaphore`](crate::LeaseSemaphore)). Cheap; nothing is sent to Redis.
    ///
    /// # Example
    ///
    /// ```rust,no_run
    /// use std::time::Duration;
    ///
    /// # async fn demo(client: lockwise::Client) -> lockwise::Result<()> {
    /// let sem = client.lease_semaphore("gpu-slots");
    /// sem.try_set_permits(8).await?;
    /// let permit = sem.acquire(Duration::from_secs(60)).await?;
    /// permit.release().await?;
    /// # Ok(()) }
    /// ```
    pub fn lease_semaphore(&self, name: impl AsRef<str>) -> crate::LeaseSemaphore {
        crate::sync::lease_semaphore::LeaseSemaphore::new(self.inner.core.clone(), name.as_ref())
    }

    /// A handle to the multi-lock over the reentrant locks `names`: all of them or none
    /// (see [`MultiLock`](crate::MultiLock)). Names are sorted and deduplicated; an empty
    /// list or an invalid name is reported by the handle's methods as
    /// [`Error::InvalidArgument`](crate::Error::InvalidArgument). Cheap; nothing is sent to Redis.
    ///
    /// # Example
    ///
    /// ```rust,no_run
    /// # async fn demo(client: lockwise::Client) -> lockwise::Result<()> {
    /// let guard = client.multi_lock(["account:1", "account:2"]).lock().await?;
    /// // ... move money between both accounts ...
    /// guard.unlock().await?;
    /// # Ok(()) }
    /// ```
    pub fn multi_lock<I, S>(&self, names: I) -> crate::MultiLock
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        crate::lock::multi::MultiLock::new(self.inner.core.clone(), names)
    }
}

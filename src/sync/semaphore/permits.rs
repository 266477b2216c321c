//! [`SemaphorePermits`]: the guard of permits taken from a [`Semaphore`], and its share in
//! the client's close.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use futures::future::BoxFuture;
use futures::FutureExt;

use super::{Inner, Semaphore};
use crate::engine::observe;
use crate::engine::tracked::GiveBack;
use crate::engine::KindId;
use crate::error::{Error, Result};

/// `k` permits taken from a [`Semaphore`]. Give them back with
/// [`release`](Self::release) (which reports errors); dropping the guard gives them back in
/// the background (best effort, never blocking); [`forget`](Self::forget) keeps them taken.
///
/// # Example
///
/// ```rust,no_run
/// # async fn demo(client: lockwise::Client) -> lockwise::Result<()> {
/// let permits = client.semaphore("gpu").acquire_many(2).await?;
/// println!("holding {} of `{}`", permits.permits(), permits.semaphore().name());
/// // ... use the GPUs ...
/// let available = permits.release().await?;
/// println!("{available} permits free again");
/// # Ok(()) }
/// ```
#[must_use = "dropping the permits gives them back at once"]
pub struct SemaphorePermits {
    semaphore: Semaphore,
    permits: u64,
    /// Its entry among the client's live permits (given back if the client is closed first).
    given: Arc<Given>,
    id: u64,
}

/// A permit guard's share, as the client's close sees it.
struct Given {
    inner: Arc<Inner>,
    permits: u64,
    /// Still taken by the guard: whoever clears it (the guard's release, drop or forget, or
    /// the client's close) decides what happens to the permits.
    taken: AtomicBool,
}

impl GiveBack for Given {
    fn name(&self) -> &str {
        &self.inner.name
    }

    fn give_back(self: Arc<Self>) -> BoxFuture<'static, Result<u64>> {
        async move {
            if !self.clear() {
                return Ok(0);
            }
            self.inner.add(self.permits as i64).await?;
            Ok(self.permits)
        }
        .boxed()
    }
}

impl Given {
    /// The guard's permits are no longer its own (given back, released or forgotten), unless
    /// someone else cleared them first: `true` for whoever did.
    fn clear(&self) -> bool {
        let cleared = self.taken.swap(false, Ordering::SeqCst);
        if cleared {
            let metrics = &self.inner.core.metrics;
            let delta = -(self.permits as f64);
            observe::permits_held(metrics, KindId::Semaphore, &self.inner.name, delta);
        }
        cleared
    }
}

impl SemaphorePermits {
    /// The guard of `permits` just taken from `semaphore`, tracked among the client's live
    /// permits.
    pub(super) fn new(semaphore: Semaphore, permits: u64) -> SemaphorePermits {
        let given = Arc::new(Given {
            inner: semaphore.inner.clone(),
            permits,
            taken: AtomicBool::new(true),
        });
        let id = semaphore.inner.core.permits.track(given.clone());
        let (metrics, name) = (&semaphore.inner.core.metrics, &semaphore.inner.name);
        observe::permits_held(metrics, KindId::Semaphore, name, permits as f64);
        SemaphorePermits {
            semaphore,
            permits,
            given,
            id,
        }
    }

    /// How many permits this guard holds.
    ///
    /// # Example
    ///
    /// ```rust,no_run
    /// # async fn demo(client: lockwise::Client) -> lockwise::Result<()> {
    /// let permits = client.semaphore("crawlers").acquire_many(2).await?;
    /// assert_eq!(permits.permits(), 2);
    /// permits.release().await?;
    /// # Ok(()) }
    /// ```
    pub fn permits(&self) -> u64 {
        self.permits
    }

    /// The semaphore they were taken from.
    ///
    /// # Example
    ///
    /// ```rust,no_run
    /// # async fn demo(client: lockwise::Client) -> lockwise::Result<()> {
    /// let permit = client.semaphore("crawlers").acquire().await?;
    /// println!("a permit of {}", permit.semaphore().name());
    /// permit.release().await?;
    /// # Ok(()) }
    /// ```
    pub fn semaphore(&self) -> &Semaphore {
        &self.semaphore
    }

    /// Gives the permits back. Returns the available permits after the release.
    ///
    /// # Errors
    /// [`Error::Redis`] when Redis fails: the permits may or may not be back (the release is
    /// not retried, since one that ran twice would add permits).
    ///
    /// # Cancel safety
    /// Dropping the future may or may not have released the permits; they are not given
    /// back a second time.
    ///
    /// # Example
    ///
    /// ```rust,no_run
    /// # async fn demo(client: lockwise::Client) -> lockwise::Result<()> {
    /// let permit = client.semaphore("crawlers").acquire().await?;
    /// // ... crawl ...
    /// let available = permit.release().await?;
    /// println!("{available} permits free");
    /// # Ok(()) }
    /// ```
    pub async fn release(self) -> Result<i64> {
        if !self.untrack() {
            return Err(Error::ClientClosed); // the client's close gave them back
        }
        self.semaphore.inner.add(self.permits as i64).await
    }

    /// Keeps the permits taken and returns how many: nothing gives them back unless someone
    /// calls [`Semaphore::release`] (as Redisson's permits, which are not tied to a guard).
    /// Forgotten permits are not given back when the client is closed either.
    ///
    /// # Example
    ///
    /// ```rust,no_run
    /// # async fn demo(client: lockwise::Client) -> lockwise::Result<()> {
    /// let sem = client.semaphore("crawlers");
    /// let taken = sem.acquire_many(2).await?.forget();
    /// // ... they stay taken until someone gives them back:
    /// sem.release(taken).await?;
    /// # Ok(()) }
    /// ```
    pub fn forget(self) -> u64 {
        self.untrack();
        self.permits
    }

    /// Takes the permits out of the client's live permits; `false` if the client's close
    /// gave them back already.
    fn untrack(&self) -> bool {
        self.semaphore.inner.core.permits.forget(self.id);
        self.given.clear()
    }
}

impl Drop for SemaphorePermits {
    /// Gives the permits back in the background (never blocks); a failure is logged and
    /// the permits are then lost.
    fn drop(&mut self) {
        if self.untrack() {
            let (inner, permits) = (self.semaphore.inner.clone(), self.permits);
            let cleanups = inner.core.cleanups.clone();
            cleanups.spawn(async move { inner.give_back(permits).await });
        }
    }
}

impl std::fmt::Debug for SemaphorePermits {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SemaphorePermits")
            .field("semaphore", &self.semaphore.inner.name)
            .field("permits", &self.permits)
            .finish()
    }
}

//! [`LeasedPermit`]: one acquired permit of a [`LeaseSemaphore`].

use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::time::Instant;
use tokio_util::sync::{CancellationToken, DropGuard};

use futures::future::BoxFuture;
use futures::FutureExt;

use super::LeaseSemaphore;
use crate::engine::observe;
use crate::engine::safe_until;
use crate::engine::tracked::GiveBack;
use crate::engine::KindId;
use crate::error::{Error, Result};

/// One leased permit of a [`LeaseSemaphore`], returned by its `acquire` methods.
///
/// Release it with [`release`](Self::release), which reports a lease that ran out.
/// Dropping it releases the permit in the background (best effort, never blocking; the lease
/// is the backstop). [`into_id`](Self::into_id) keeps the permit past the guard: it is then
/// released by id ([`LeaseSemaphore::release`]), possibly by another process, or comes back
/// when its lease runs out.
///
/// # Example
///
/// ```rust,no_run
/// use std::time::Duration;
///
/// # async fn demo(client: lockwise::Client) -> lockwise::Result<()> {
/// let sem = client.lease_semaphore("exports");
/// let permit = sem.acquire(Duration::from_secs(60)).await?;
/// println!("permit {} valid for {:?}", permit.id(), permit.validity());
/// // ... a long job: extend the lease before it runs out ...
/// permit.update_lease(Duration::from_secs(60)).await?;
/// match permit.release().await {
///     Err(lockwise::Error::NotHeld { .. }) => eprintln!("the lease had run out"),
///     other => other?,
/// }
/// # Ok(()) }
/// ```
#[must_use = "dropping a LeasedPermit releases it at once"]
pub struct LeasedPermit {
    pub(super) semaphore: LeaseSemaphore,
    /// `None` once released or handed out by `into_id`.
    pub(super) id: Option<String>,
    /// Its entry among the client's live permits (released if the client is closed first).
    given: Arc<Given>,
    tracked: u64,
    deadline: Arc<Deadline>,
    /// Stops the task that fires `lost` at the deadline.
    _timer: DropGuard,
}

/// A leased permit's share, as the client's close sees it.
struct Given {
    semaphore: LeaseSemaphore,
    id: String,
    /// Still held by the guard: whoever clears it (the guard, or the client's close) decides
    /// what happens to the permit.
    taken: std::sync::atomic::AtomicBool,
}

impl GiveBack for Given {
    fn name(&self) -> &str {
        self.semaphore.name()
    }

    fn give_back(self: Arc<Self>) -> BoxFuture<'static, Result<u64>> {
        async move {
            if !self.clear() {
                return Ok(0);
            }
            self.semaphore.release_ids(&[&self.id]).await
        }
        .boxed()
    }
}

impl Given {
    /// The permit is no longer the guard's (released, given back or forgotten), unless
    /// someone else cleared it first: `true` for whoever did.
    fn clear(&self) -> bool {
        let cleared = self.taken.swap(false, Ordering::SeqCst);
        if cleared {
            let (metrics, name) = (&self.semaphore.inner.core.metrics, self.semaphore.name());
            observe::permits_held(metrics, KindId::LeaseSemaphore, name, -1.0);
        }
        cleared
    }
}

/// A permit's lease as the client knows it: when it surely still runs, and the loss signal
/// fired when that passed.
struct Deadline {
    /// (the lease, the moment the permit surely is still leased until).
    lease: Mutex<(Duration, Instant)>,
    lost: CancellationToken,
}

impl Deadline {
    fn until(&self) -> Instant {
        self.lease.lock().unwrap_or_else(|e| e.into_inner()).1
    }
}

impl LeasedPermit {
    /// The permit `id`, granted by a call sent at `sent_at` with `lease`: surely leased until
    /// `sent_at + lease` less the drift margin, when `lost` fires (a task waits for it; an
    /// `update_lease` moves it).
    pub(super) fn new(
        semaphore: LeaseSemaphore,
        id: String,
        lease: Duration,
        sent_at: Instant,
    ) -> LeasedPermit {
        let deadline = Arc::new(Deadline {
            lease: Mutex::new((lease, safe_until(sent_at, lease))),
            lost: CancellationToken::new(),
        });
        let stop = CancellationToken::new();
        let (watched, stopped) = (deadline.clone(), stop.clone());
        semaphore.inner.core.handle.spawn(async move {
            loop {
                let until = watched.until();
                if Instant::now() >= until {
                    watched.lost.cancel();
                    return;
                }
                tokio::select! {
                    () = tokio::time::sleep_until(until) => {}
                    () = stopped.cancelled() => return,
                }
            }
        });
        let given = Arc::new(Given {
            semaphore: semaphore.clone(),
            id: id.clone(),
            taken: std::sync::atomic::AtomicBool::new(true),
        });
        let tracked = semaphore.inner.core.permits.track(given.clone());
        let metrics = &semaphore.inner.core.metrics;
        observe::permits_held(metrics, KindId::LeaseSemaphore, semaphore.name(), 1.0);
        LeasedPermit {
            semaphore,
            id: Some(id),
            given,
            tracked,
            deadline,
            _timer: stop.drop_guard(),
        }
    }

    /// Takes the permit out of the client's live permits; `false` if the client's close
    /// released it already.
    pub(super) fn untrack(&self) -> bool {
        self.semaphore.inner.core.permits.forget(self.tracked);
        self.given.clear()
    }

    /// The lease the permit has now: the one it was acquired with, or the last
    /// [`update_lease`](Self::update_lease).
    ///
    /// # Example
    ///
    /// ```rust,no_run
    /// use std::time::Duration;
    ///
    /// # async fn demo(client: lockwise::Client) -> lockwise::Result<()> {
    /// let permit = client.lease_semaphore("exports").acquire(Duration::from_secs(60)).await?;
    /// assert_eq!(permit.lease(), Duration::from_secs(60));
    /// permit.release().await?;
    /// # Ok(()) }
    /// ```
    pub fn lease(&self) -> Duration {
        self.deadline
            .lease
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .0
    }

    /// How long the permit is still known to be leased: from the moment the call that set
    /// its lease was *sent* (the acquire, or the last `update_lease`), less a safety margin
    /// for clock drift and scheduling (as for the lock guards' `validity`); zero once it
    /// ran out.
    ///
    /// # Example
    ///
    /// ```rust,no_run
    /// use std::time::Duration;
    ///
    /// # async fn demo(client: lockwise::Client) -> lockwise::Result<()> {
    /// let permit = client.lease_semaphore("exports").acquire(Duration::from_secs(60)).await?;
    /// if permit.validity() < Duration::from_secs(10) {
    ///     permit.update_lease(Duration::from_secs(60)).await?;
    /// }
    /// permit.release().await?;
    /// # Ok(()) }
    /// ```
    pub fn validity(&self) -> Duration {
        if self.deadline.lost.is_cancelled() {
            return Duration::ZERO;
        }
        self.deadline
            .until()
            .saturating_duration_since(Instant::now())
    }

    /// Whether the lease must be treated as run out ([`validity`](Self::validity) is zero).
    ///
    /// # Example
    ///
    /// ```rust,no_run
    /// use std::time::Duration;
    ///
    /// # async fn demo(client: lockwise::Client) -> lockwise::Result<()> {
    /// let permit = client.lease_semaphore("exports").acquire(Duration::from_secs(60)).await?;
    /// // ... a long step ...
    /// if permit.is_lost() {
    ///     eprintln!("the lease ran out: stop using the slot");
    /// }
    /// # Ok(()) }
    /// ```
    pub fn is_lost(&self) -> bool {
        self.validity().is_zero()
    }

    /// A token cancelled when the lease runs out (at the deadline
    /// [`validity`](Self::validity) counts down to, unless
    /// [`update_lease`](Self::update_lease) moved it). Select on `lost().cancelled()` to
    /// stop work that must not outlive the permit.
    ///
    /// # Example
    ///
    /// ```rust,no_run
    /// use std::time::Duration;
    ///
    /// # async fn export() {}
    /// # async fn demo(client: lockwise::Client) -> lockwise::Result<()> {
    /// let permit = client.lease_semaphore("exports").acquire(Duration::from_secs(60)).await?;
    /// let lost = permit.lost();
    /// tokio::select! {
    ///     () = export() => permit.release().await?,
    ///     () = lost.cancelled() => eprintln!("the lease ran out: export stopped"),
    /// }
    /// # Ok(()) }
    /// ```
    pub fn lost(&self) -> CancellationToken {
        self.deadline.lost.clone()
    }

    /// The permit's id: random and unguessable (a UUID v4 as text; in Redisson's key layout
    /// the 32 lower-case hex digits of its 16 random bytes, as Redisson's Java API shows
    /// permit ids).
    ///
    /// # Example
    ///
    /// ```rust,no_run
    /// use std::time::Duration;
    ///
    /// # async fn demo(client: lockwise::Client) -> lockwise::Result<()> {
    /// let permit = client.lease_semaphore("exports").acquire(Duration::from_secs(60)).await?;
    /// println!("leased permit {}", permit.id());
    /// permit.release().await?;
    /// # Ok(()) }
    /// ```
    pub fn id(&self) -> &str {
        self.id.as_deref().unwrap_or_default()
    }

    /// The semaphore this permit belongs to.
    ///
    /// # Example
    ///
    /// ```rust,no_run
    /// use std::time::Duration;
    ///
    /// # async fn demo(client: lockwise::Client) -> lockwise::Result<()> {
    /// let permit = client.lease_semaphore("exports").acquire(Duration::from_secs(60)).await?;
    /// println!("a permit of {}", permit.semaphore().name());
    /// permit.release().await?;
    /// # Ok(()) }
    /// ```
    pub fn semaphore(&self) -> &LeaseSemaphore {
        &self.semaphore
    }

    /// Releases the permit.
    ///
    /// # Errors
    /// [`Error::NotHeld`] when the lease had run out (the permit came back to the pool by
    /// itself and may be someone else's now); [`Error::Redis`] when Redis fails (the
    /// permit is then released in the background, or by its lease).
    ///
    /// # Cancel safety
    /// Dropping the future drops the permit, which releases it in the background.
    ///
    /// # Example
    ///
    /// ```rust,no_run
    /// use std::time::Duration;
    ///
    /// # async fn demo(client: lockwise::Client) -> lockwise::Result<()> {
    /// let permit = client.lease_semaphore("exports").acquire(Duration::from_secs(60)).await?;
    /// match permit.release().await {
    ///     Err(e) if e.is_not_held() => eprintln!("the lease had run out"),
    ///     other => other?,
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn release(mut self) -> Result<()> {
        let id = self.id().to_string();
        self.id = None;
        if !self.untrack() {
            return Err(Error::ClientClosed); // the client's close released it
        }
        let released = self.semaphore.release_ids(&[&id]).await?;
        if released == 1 {
            Ok(())
        } else {
            Err(self.not_held())
        }
    }

    /// Gives the permit a new lease of `lease` (1 ms ..= 2<sup>53</sup> ms) counted from
    /// now.
    ///
    /// # Errors
    /// [`Error::NotHeld`] when the lease had run out already (the permit is not extended);
    /// [`Error::InvalidArgument`] for a lease out of range; [`Error::Redis`] when Redis
    /// fails.
    ///
    /// # Cancel safety
    /// Dropping the future may or may not have updated the lease; the permit stays held.
    ///
    /// # Example
    ///
    /// ```rust,no_run
    /// use std::time::Duration;
    ///
    /// # async fn demo(client: lockwise::Client) -> lockwise::Result<()> {
    /// let permit = client.lease_semaphore("exports").acquire(Duration::from_secs(60)).await?;
    /// // ... halfway through a long export: another minute from now.
    /// permit.update_lease(Duration::from_secs(60)).await?;
    /// permit.release().await?;
    /// # Ok(()) }
    /// ```
    pub async fn update_lease(&self, lease: Duration) -> Result<()> {
        let sent_at = Instant::now();
        match self.semaphore.update_lease(self.id(), lease).await? {
            true if !self.deadline.lost.is_cancelled() => {
                *self
                    .deadline
                    .lease
                    .lock()
                    .unwrap_or_else(|e| e.into_inner()) = (lease, safe_until(sent_at, lease));
                Ok(())
            }
            true => Ok(()), // renewed on the server, but already reported lost here
            false => Err(self.not_held()),
        }
    }

    /// Keeps the permit leased and returns its id (nothing is released when the guard goes,
    /// nor when the client is closed).
    ///
    /// # Example
    ///
    /// ```rust,no_run
    /// use std::time::Duration;
    ///
    /// # async fn demo(client: lockwise::Client) -> lockwise::Result<()> {
    /// let sem = client.lease_semaphore("exports");
    /// let id = sem.acquire(Duration::from_secs(600)).await?.into_id();
    /// // ... hand `id` to the job; it releases the permit when done, from any process:
    /// sem.release(&id).await?;
    /// # Ok(()) }
    /// ```
    pub fn into_id(mut self) -> String {
        self.untrack();
        self.id.take().unwrap_or_default()
    }

    fn not_held(&self) -> Error {
        Error::NotHeld {
            name: self.semaphore.name().to_string(),
        }
    }
}

impl Drop for LeasedPermit {
    fn drop(&mut self) {
        if let Some(id) = self.id.take() {
            if self.untrack() {
                let semaphore = self.semaphore.clone();
                let cleanups = semaphore.inner.core.cleanups.clone();
                cleanups.spawn(async move { semaphore.give_back(&[id]).await });
            }
        }
    }
}

impl std::fmt::Debug for LeasedPermit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LeasedPermit")
            .field("semaphore", &self.semaphore.name())
            .field("id", &self.id())
            .field("lease", &self.lease())
            .field("lost", &self.is_lost())
            .finish()
    }
}

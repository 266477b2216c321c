//! [`LeasedPermits`]: several permits of a [`LeaseSemaphore`](super::LeaseSemaphore) taken
//! together by one `acquire_many`, released together in one script call.

use super::LeasedPermit;
use crate::error::{Error, Result};

/// Permits of one [`LeaseSemaphore`](super::LeaseSemaphore) taken together by
/// [`acquire_many`](super::LeaseSemaphore::acquire_many): each has its own id and the same
/// lease. Release them together with [`release`](Self::release) (one script call), or take
/// them apart with [`into_vec`](Self::into_vec) or by iterating. Dropping it releases every
/// permit in it in the background, as dropping each [`LeasedPermit`] would.
///
/// # Example
///
/// ```rust,no_run
/// use std::time::Duration;
///
/// # async fn demo(client: lockwise::Client) -> lockwise::Result<()> {
/// let sem = client.lease_semaphore("gpu-slots");
/// let permits = sem.acquire_many(3, Duration::from_secs(120)).await?;
/// println!("got {} permits: {:?}", permits.len(), permits.ids());
/// // ... use them ...
/// permits.release().await?; // one script call for all of them
/// # Ok(()) }
/// ```
#[must_use = "dropping LeasedPermits releases them at once"]
pub struct LeasedPermits {
    pub(super) permits: Vec<LeasedPermit>,
}

impl LeasedPermits {
    /// How many permits.
    ///
    /// # Example
    ///
    /// ```rust,no_run
    /// use std::time::Duration;
    ///
    /// # async fn demo(client: lockwise::Client) -> lockwise::Result<()> {
    /// let sem = client.lease_semaphore("gpu-slots");
    /// let permits = sem.acquire_many(3, Duration::from_secs(120)).await?;
    /// assert_eq!(permits.len(), 3);
    /// permits.release().await?;
    /// # Ok(()) }
    /// ```
    pub fn len(&self) -> usize {
        self.permits.len()
    }

    /// Whether there are none (never, for permits returned by an acquire).
    ///
    /// # Example
    ///
    /// ```rust,no_run
    /// use std::time::Duration;
    ///
    /// # async fn demo(client: lockwise::Client) -> lockwise::Result<()> {
    /// let sem = client.lease_semaphore("gpu-slots");
    /// let permits = sem.acquire_many(3, Duration::from_secs(120)).await?;
    /// assert!(!permits.is_empty());
    /// permits.release().await?;
    /// # Ok(()) }
    /// ```
    pub fn is_empty(&self) -> bool {
        self.permits.is_empty()
    }

    /// The permits, in the order of their ids in the acquire's reply.
    ///
    /// # Example
    ///
    /// ```rust,no_run
    /// use std::time::Duration;
    ///
    /// # async fn demo(client: lockwise::Client) -> lockwise::Result<()> {
    /// let sem = client.lease_semaphore("gpu-slots");
    /// let permits = sem.acquire_many(3, Duration::from_secs(120)).await?;
    /// for permit in permits.iter() {
    ///     println!("{} valid for {:?}", permit.id(), permit.validity());
    /// }
    /// # Ok(()) }
    /// ```
    pub fn iter(&self) -> std::slice::Iter<'_, LeasedPermit> {
        self.permits.iter()
    }

    /// The permits' ids.
    ///
    /// # Example
    ///
    /// ```rust,no_run
    /// use std::time::Duration;
    ///
    /// # async fn demo(client: lockwise::Client) -> lockwise::Result<()> {
    /// let sem = client.lease_semaphore("gpu-slots");
    /// let permits = sem.acquire_many(3, Duration::from_secs(120)).await?;
    /// println!("leased {}", permits.ids().join(", "));
    /// permits.release().await?;
    /// # Ok(()) }
    /// ```
    pub fn ids(&self) -> Vec<&str> {
        self.permits.iter().map(LeasedPermit::id).collect()
    }

    /// The permits, each to be released on its own.
    ///
    /// # Example
    ///
    /// ```rust,no_run
    /// use std::time::Duration;
    ///
    /// # async fn demo(client: lockwise::Client) -> lockwise::Result<()> {
    /// let sem = client.lease_semaphore("gpu-slots");
    /// let permits = sem.acquire_many(3, Duration::from_secs(120)).await?;
    /// for permit in permits.into_vec() {
    ///     // Each job releases its own permit when done.
    ///     tokio::spawn(async move { permit.release().await });
    /// }
    /// # Ok(()) }
    /// ```
    pub fn into_vec(self) -> Vec<LeasedPermit> {
        self.permits
    }

    /// Releases every permit in one script call.
    ///
    /// # Errors
    /// [`Error::NotHeld`] when the lease of some of them had run out (those came back by
    /// themselves; the others are released); [`Error::Redis`] when Redis fails (they are
    /// then released in the background, or by their lease).
    ///
    /// # Cancel safety
    /// Dropping the future drops the permits, which releases them in the background.
    ///
    /// # Example
    ///
    /// ```rust,no_run
    /// use std::time::Duration;
    ///
    /// # async fn demo(client: lockwise::Client) -> lockwise::Result<()> {
    /// let sem = client.lease_semaphore("gpu-slots");
    /// let permits = sem.acquire_many(3, Duration::from_secs(120)).await?;
    /// // ... use them ...
    /// permits.release().await?; // one script call for all three
    /// # Ok(()) }
    /// ```
    pub async fn release(self) -> Result<()> {
        let mut permits = self.into_vec();
        let Some(first) = permits.first() else {
            return Ok(());
        };
        let semaphore = first.semaphore.clone();
        // Each permit still held by its guard (not released by the client's close).
        let mut ids = Vec::new();
        for p in &mut permits {
            if let Some(id) = p.id.take() {
                if p.untrack() {
                    ids.push(id);
                }
            }
        }
        if ids.is_empty() {
            return Err(Error::ClientClosed);
        }
        let refs: Vec<&str> = ids.iter().map(String::as_str).collect();
        let released = semaphore.release_ids(&refs).await?;
        if released == ids.len() as u64 {
            Ok(())
        } else {
            Err(Error::NotHeld {
                name: semaphore.name().to_string(),
            })
        }
    }
}

impl std::ops::Index<usize> for LeasedPermits {
    type Output = LeasedPermit;

    fn index(&self, i: usize) -> &LeasedPermit {
        &self.permits[i]
    }
}

impl IntoIterator for LeasedPermits {
    type Item = LeasedPermit;
    type IntoIter = std::vec::IntoIter<LeasedPermit>;

    fn into_iter(self) -> Self::IntoIter {
        self.into_vec().into_iter()
    }
}

impl<'a> IntoIterator for &'a LeasedPermits {
    type Item = &'a LeasedPermit;
    type IntoIter = std::slice::Iter<'a, LeasedPermit>;

    fn into_iter(self) -> Self::IntoIter {
        self.permits.iter()
    }
}

impl std::fmt::Debug for LeasedPermits {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(&self.permits).finish()
    }
}

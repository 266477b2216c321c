//! [`LeasedPermit`]: one acquired permit of a [`LeaseSemaphore`].

use std::time::Duration;

use super::LeaseSemaphore;
use crate::error::{Error, Result};

/// One leased permit of a [`LeaseSemaphore`], returned by its `acquire` methods.
///
/// Release it with [`release`](Self::release), which reports a lease that ran out.
/// Dropping it releases the permit in the background (best effort, never blocking; the lease
/// is the backstop). [`into_id`](Self::into_id) keeps the permit past the guard: it is then
/// released by id ([`LeaseSemaphore::release`]), possibly by another process, or comes back
/// when its lease runs out.
#[must_use = "dropping a LeasedPermit releases it at once"]
pub struct LeasedPermit {
    semaphore: LeaseSemaphore,
    /// `None` once released or handed out by `into_id`.
    id: Option<String>,
}

impl LeasedPermit {
    pub(super) fn new(semaphore: LeaseSemaphore, id: String) -> LeasedPermit {
        LeasedPermit {
            semaphore,
            id: Some(id),
        }
    }

    /// The permit's id: random and unguessable (a UUID v4 as text).
    pub fn id(&self) -> &str {
        self.id.as_deref().unwrap_or_default()
    }

    /// The semaphore this permit belongs to.
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
    pub async fn release(mut self) -> Result<()> {
        let id = self.id().to_string();
        let released = self.semaphore.release_ids(&[&id]).await?;
        self.id = None;
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
    pub async fn update_lease(&self, lease: Duration) -> Result<()> {
        match self.semaphore.update_lease(self.id(), lease).await? {
            true => Ok(()),
            false => Err(self.not_held()),
        }
    }

    /// Keeps the permit leased and returns its id (nothing is released when the guard goes).
    pub fn into_id(mut self) -> String {
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
            let semaphore = self.semaphore.clone();
            let handle = semaphore.inner.core.handle.clone();
            handle.spawn(async move { semaphore.give_back(&[id]).await });
        }
    }
}

impl std::fmt::Debug for LeasedPermit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LeasedPermit")
            .field("semaphore", &self.semaphore.name())
            .field("id", &self.id())
            .finish()
    }
}

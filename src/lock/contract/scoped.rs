//! The scoped helpers' machinery: [`Held`], what the body of [`Lock::run`](super::Lock::run)
//! knows about its hold, and the run of a body under a guard, then its release.

use std::future::Future;

use tokio_util::sync::CancellationToken;

use super::LockGuard;
use crate::error::{Error, Result};

/// What the body of [`Lock::run`](super::Lock::run) knows about the hold it runs under.
///
/// # Example
///
/// ```rust,no_run
/// # async fn demo(client: lockwise::Client) -> lockwise::Result<()> {
/// use lockwise::Lock;
/// let total = client
///     .fenced_lock("nightly")
///     .run(|held| async move {
///         println!("running as {} with token {:?}", held.owner, held.token);
///         42
///     })
///     .await?; // released after the body, also when it panics or the lock is lost
/// assert_eq!(total, 42);
/// # Ok(()) }
/// ```
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct Held {
    /// The lock's name.
    pub name: String,
    /// The owner field of the hold.
    pub owner: String,
    /// The fencing token, for a [`FencedLock`](crate::FencedLock); `None` otherwise.
    pub token: Option<u64>,
    /// Cancelled when the lock is known to be lost (the body is then dropped anyway; this is
    /// for work the body hands to other tasks).
    pub lost: CancellationToken,
}

/// The body of [`Lock::run`] under `guard`, then its release.
pub(super) async fn scoped<G, T, F, Fut>(guard: G, body: F) -> Result<T>
where
    G: LockGuard,
    F: FnOnce(Held) -> Fut,
    Fut: Future<Output = T>,
{
    let lost = guard.lost();
    let held = Held {
        name: guard.name().to_string(),
        owner: guard.owner().to_string(),
        token: guard.fencing_token(),
        lost: lost.clone(),
    };
    let name = held.name.clone();
    let value = tokio::select! {
        biased;
        () = lost.cancelled() => None,
        value = body(held) => Some(value),
    };
    match value {
        Some(value) if !guard.is_lost() => {
            guard.unlock().await?;
            Ok(value)
        }
        // Lost while the body ran (or right as it finished): the release is best effort. A
        // client closed meanwhile says so instead.
        _ => match guard.unlock().await {
            Err(e) if e.is_client_closed() => Err(e),
            Err(e) => {
                tracing::debug!(lock = %name, error = %e, "release after a lost hold failed");
                Err(Error::Lost { name })
            }
            Ok(()) => Err(Error::Lost { name }),
        },
    }
}

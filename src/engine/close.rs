//! Closing a client: what it still holds is released, within a bound, and reported.
//!
//! [`close`] refuses new acquires and wakes every waiter (the watchdog's shutdown, which
//! the wait loop and every acquire check), stops renewals and the presence refresh (which
//! deletes the client's presence keys), then gives back:
//!
//! * **Holds** of every kind, from the hold registry: each (lock, owner) entry is closed out
//!   (its guards are marked lost, and their `unlock` sends nothing) and the owner's count
//!   *on the server* is released, one conditional step at a time, so holds whose replies
//!   were lost are released too. A grant that lands after the snapshot belongs to a guard
//!   that `acquire_hold` drops at once (the client is closed), whose release goes out as usual:
//!   only the guards counted at the snapshot are closed out.
//! * **Permits** of the semaphores, which no registry counts: each live permit guard is
//!   in [`Permits`](super::tracked::Permits) until it is released, dropped or forgotten,
//!   and is given back from there; a guard created after the snapshot sees the client
//!   closed and gives its permits back itself.
//!
//! Background clean-ups (dropped guards' releases, abandoned calls' undos, fair-queue
//! leaves) run on [`Cleanups`](super::tracked::Cleanups), which `close` waits for. What
//! could not be done within the bound is reported; it expires with its TTL.

use std::sync::Arc;
use std::time::Duration;

use futures::future::join_all;
use tokio::time::Instant;

use super::registry::{HoldKey, RunKind};
use super::settle::owner_holds;
use super::Core;
use crate::error::Result;

/// What closing released, and what it could not.
#[derive(Debug, Default)]
pub(crate) struct Closed {
    pub(crate) holds: u64,
    pub(crate) permits: u64,
    /// (lock or semaphore name, why).
    pub(crate) failed: Vec<(String, String)>,
}

/// Closes the client of `core` (see the module docs). `None` if it was closed already.
pub(crate) async fn close(core: &Arc<Core>, timeout: Duration) -> Option<Closed> {
    if core.closed.is_cancelled() {
        return None;
    }
    core.closed.cancel();
    core.holds.shutdown();
    let deadline = Instant::now() + timeout;
    let mut report = Closed::default();

    let holds = core.holds.close_out();
    let releases = holds.into_iter().map(|(key, kind)| {
        let core = core.clone();
        async move {
            let result = tokio::time::timeout_at(deadline, release_all(&core, &key, &kind)).await;
            (kind.name().to_string(), result)
        }
    });
    let permits = core.permits.take_all().into_iter().map(|item| {
        let name = item.name().to_string();
        async move {
            (
                name,
                tokio::time::timeout_at(deadline, item.give_back()).await,
            )
        }
    });
    let (holds, permits) = futures::join!(join_all(releases), join_all(permits));
    for (name, result) in holds {
        match result {
            Ok(Ok(n)) => report.holds += n,
            Ok(Err(e)) => report.failed.push((name, e.to_string())),
            Err(_) => report
                .failed
                .push((name, "not released within the timeout".into())),
        }
    }
    for (name, result) in permits {
        match result {
            Ok(Ok(n)) => report.permits += n,
            Ok(Err(e)) => report.failed.push((name, e.to_string())),
            Err(_) => report
                .failed
                .push((name, "not given back within the timeout".into())),
        }
    }
    core.cleanups.tracker.close();
    if tokio::time::timeout_at(deadline, core.cleanups.tracker.wait())
        .await
        .is_err()
    {
        report.failed.push((
            String::new(),
            "background releases still running at the timeout".into(),
        ));
    }
    if tokio::time::timeout_at(deadline, core.presence.gone())
        .await
        .is_err()
    {
        report.failed.push((
            String::new(),
            "presence keys not deleted within the timeout".into(),
        ));
    }
    Some(report)
}

/// Releases every hold the server counts for `key`'s owner, one conditional step at a time
/// (each only while the count is what was read); returns how many.
async fn release_all(core: &Core, key: &HoldKey, kind: &Arc<dyn RunKind>) -> Result<u64> {
    let mut released = 0;
    loop {
        let count = owner_holds(core, &key.0, &key.1).await?;
        if count == 0 {
            return Ok(released);
        }
        match kind.clone().release(key.1.clone(), count).await? {
            n if n >= 0 => released += 1,
            // -2: the count changed meanwhile (a late grant's own release); read again.
            -2 => {}
            _ => return Ok(released),
        }
    }
}

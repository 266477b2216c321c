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
//!   in [`Permits`] until it is released, dropped or forgotten, and is given back from
//!   there; a guard created after the snapshot sees the client closed and gives its
//!   permits back itself.
//!
//! Background clean-ups (dropped guards' releases, abandoned calls' undos, fair-queue
//! leaves) run on [`Cleanups`], which `close` waits for. What could not be done within the
//! bound is reported; it expires with its TTL.

use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use dashmap::DashMap;
use futures::future::{join_all, BoxFuture};
use tokio::runtime::Handle;
use tokio::time::Instant;
use tokio_util::task::TaskTracker;

use super::registry::HoldKey;
use super::settle::owner_holds;
use super::Core;
use crate::error::Result;

/// Runs background clean-ups on the client's runtime, and lets [`close`] wait for them.
#[derive(Clone)]
pub(crate) struct Cleanups {
    handle: Handle,
    tracker: TaskTracker,
}

impl Cleanups {
    pub(crate) fn new(handle: Handle) -> Cleanups {
        Cleanups {
            handle,
            tracker: TaskTracker::new(),
        }
    }

    /// Counts as a clean-up while it lives: a waiter whose exit leaves something to undo
    /// (a fair-queue entry, a writer's intent) holds one, so a close waits for it.
    pub(crate) fn token(&self) -> tokio_util::task::task_tracker::TaskTrackerToken {
        self.tracker.token()
    }

    /// Spawns `task` on the client's runtime, counted until it ends.
    pub(crate) fn spawn<F>(&self, task: F)
    where
        F: Future<Output = ()> + Send + 'static,
    {
        self.tracker.spawn_on(task, &self.handle);
    }
}

/// Something a live guard holds that no registry counts (a semaphore's permits): closing
/// the client gives it back.
pub(crate) trait GiveBack: Send + Sync {
    /// The semaphore's name, for the report.
    fn name(&self) -> &str;
    /// Gives it back, unless its guard did first; returns how many permits went back.
    fn give_back(self: Arc<Self>) -> BoxFuture<'static, Result<u64>>;
}

/// The live permit guards of a client.
#[derive(Default)]
pub(crate) struct Permits {
    next: AtomicU64,
    live: DashMap<u64, Arc<dyn GiveBack>>,
}

impl Permits {
    /// Counts a live guard's permits; `forget` it with the returned id when the guard ends.
    pub(crate) fn track(&self, item: Arc<dyn GiveBack>) -> u64 {
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        self.live.insert(id, item);
        id
    }

    /// The guard `id` ended (released, dropped or forgotten).
    pub(crate) fn forget(&self, id: u64) {
        self.live.remove(&id);
    }

    fn take_all(&self) -> Vec<Arc<dyn GiveBack>> {
        let ids: Vec<u64> = self.live.iter().map(|e| *e.key()).collect();
        ids.into_iter()
            .filter_map(|id| self.live.remove(&id).map(|(_, v)| v))
            .collect()
    }
}

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
async fn release_all(core: &Core, key: &HoldKey, kind: &super::Kind) -> Result<u64> {
    let mut released = 0;
    loop {
        let count = owner_holds(core, &key.0, &key.1).await?;
        if count == 0 {
            return Ok(released);
        }
        match kind.release(key.1.clone(), count, None).await? {
            n if n >= 0 => released += 1,
            // -2: the count changed meanwhile (a late grant's own release); read again.
            -2 => {}
            _ => return Ok(released),
        }
    }
}

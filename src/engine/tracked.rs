//! What a close waits for or gives back, kept by the client from the start: background
//! clean-ups ([`Cleanups`]) and the live permit guards of the semaphores ([`Permits`]).
//! [`close`](super::close) reads them; they know nothing of it.

use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use dashmap::DashMap;
use futures::future::BoxFuture;
use tokio::runtime::Handle;
use tokio_util::task::TaskTracker;

use crate::error::Result;

/// Runs background clean-ups on the client's runtime, and lets [`close`] wait for them.
#[derive(Clone)]
pub(crate) struct Cleanups {
    handle: Handle,
    pub(super) tracker: TaskTracker,
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

    pub(super) fn take_all(&self) -> Vec<Arc<dyn GiveBack>> {
        let ids: Vec<u64> = self.live.iter().map(|e| *e.key()).collect();
        ids.into_iter()
            .filter_map(|id| self.live.remove(&id).map(|(_, v)| v))
            .collect()
    }
}

//! [`Owner`]: whose holds an acquire takes, and the owner field each acquire writes
//! (`<client id>:<task id>`, a fresh one per hold, or a named one).

use std::sync::Arc;

/// Whose holds a handle's acquires take (see "Ownership" in the crate docs).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Owner {
    /// The calling task: `<client id>:<task id>`. Reentrant per task.
    Task,
    /// A fresh owner for every acquire, `<client id>:h<n>`: never reentrant; a guard may
    /// outlive or leave its task without letting that task (or a later task with a reused
    /// id) into the critical section.
    PerHold,
    /// An owner the caller names, `<client id>:owner:<id>`: every task that uses it
    /// re-enters the same holds.
    Named(Arc<str>),
}

impl Owner {
    /// The owner field for the next acquire.
    pub(crate) fn field(&self, client_id: &str) -> Arc<str> {
        match self {
            Owner::Task => current_owner(client_id),
            Owner::PerHold => {
                use std::sync::atomic::{AtomicU64, Ordering};
                static NEXT: AtomicU64 = AtomicU64::new(1);
                format!("{client_id}:h{}", NEXT.fetch_add(1, Ordering::Relaxed)).into()
            }
            Owner::Named(id) => format!("{client_id}:owner:{id}").into(),
        }
    }
}

/// The owner field for the calling task: `<client id>:<tokio task id>`, or a per-thread id
/// outside a task (e.g. under `block_on`).
pub(crate) fn current_owner(client_id: &str) -> Arc<str> {
    match tokio::task::try_id() {
        Some(id) => format!("{client_id}:{id}").into(),
        None => THREAD_TAG.with(|t| format!("{client_id}:{t}").into()),
    }
}

thread_local! {
    static THREAD_TAG: String = {
        use std::sync::atomic::{AtomicU64, Ordering};
        static NEXT: AtomicU64 = AtomicU64::new(1);
        format!("thread-{}", NEXT.fetch_add(1, Ordering::Relaxed))
    };
}

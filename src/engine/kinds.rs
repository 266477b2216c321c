//! [`KindId`]: every kind of lock and synchronizer the engine serves, by one name. Its
//! label (metrics, spans) and the list of all of them come from here, so no list of kinds
//! is kept by hand elsewhere in the engine.

/// One kind of lock or synchronizer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum KindId {
    /// `RLock` (and the members of a `MultiLock`, which are `RLock`s).
    Reentrant,
    /// `SpinLock`.
    Spin,
    /// `FairLock`.
    Fair,
    /// `FencedLock`.
    Fenced,
    /// The read side of a `RwLock`.
    RwRead,
    /// The write side of a `RwLock`.
    RwWrite,
    /// `Semaphore`.
    Semaphore,
    /// `LeaseSemaphore`.
    LeaseSemaphore,
    /// `CountDownLatch`.
    Latch,
    /// `RedLock` (a hold on each node).
    RedLock,
}

impl KindId {
    /// Every kind.
    #[cfg_attr(not(feature = "metrics"), allow(dead_code))]
    pub(crate) const ALL: [KindId; 10] = [
        KindId::Reentrant,
        KindId::Spin,
        KindId::Fair,
        KindId::Fenced,
        KindId::RwRead,
        KindId::RwWrite,
        KindId::Semaphore,
        KindId::LeaseSemaphore,
        KindId::Latch,
        KindId::RedLock,
    ];

    /// The `kind` label of its metrics and spans (the guide's "Operations" lists them).
    pub(crate) fn label(self) -> &'static str {
        match self {
            KindId::Reentrant => "reentrant",
            KindId::Spin => "spin",
            KindId::Fair => "fair",
            KindId::Fenced => "fenced",
            KindId::RwRead => "rw_read",
            KindId::RwWrite => "rw_write",
            KindId::Semaphore => "semaphore",
            KindId::LeaseSemaphore => "lease_semaphore",
            KindId::Latch => "latch",
            KindId::RedLock => "redlock",
        }
    }

    /// Its index in [`KindId::ALL`].
    #[cfg_attr(not(feature = "metrics"), allow(dead_code))]
    pub(crate) fn index(self) -> usize {
        self as usize
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn all_lists_each_kind_once_in_index_order() {
        for (i, kind) in KindId::ALL.iter().enumerate() {
            assert_eq!(kind.index(), i, "{kind:?}");
        }
        let labels: std::collections::BTreeSet<_> = KindId::ALL.iter().map(|k| k.label()).collect();
        assert_eq!(labels.len(), KindId::ALL.len());
    }
}

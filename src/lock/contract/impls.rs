//! [`impl_lock!`]: [`Lock`](super::Lock) and [`LockGuard`](super::LockGuard) for a kind,
//! by calling its inherent methods of the same names. Each kind's file invokes it, so the
//! contract imports no kind.

/// Implements [`Lock`] for a handle and [`LockGuard`] for its guard by calling the inherent
/// methods of the same names.
macro_rules! impl_lock {
    ($handle:ty, $guard:ty $(, token: |$g:ident| $token:expr)?) => {
        impl $crate::lock::contract::Lock for $handle {
            type Guard = $guard;

            fn name(&self) -> &str {
                <$handle>::name(self)
            }

            fn lock(&self) -> impl std::future::Future<Output = $crate::Result<$guard>> + Send {
                <$handle>::lock(self)
            }

            fn lock_with_lease(
                &self,
                lease: std::time::Duration,
            ) -> impl std::future::Future<Output = $crate::Result<$guard>> + Send {
                <$handle>::lock_with_lease(self, lease)
            }

            fn try_lock(
                &self,
                wait: std::time::Duration,
                lease: Option<std::time::Duration>,
            ) -> impl std::future::Future<Output = $crate::Result<$guard>> + Send {
                <$handle>::try_lock(self, wait, lease)
            }

            fn is_locked(&self) -> impl std::future::Future<Output = $crate::Result<bool>> + Send {
                <$handle>::is_locked(self)
            }

            fn hold_count(&self) -> impl std::future::Future<Output = $crate::Result<u32>> + Send {
                <$handle>::hold_count(self)
            }

            fn remaining_ttl(
                &self,
            ) -> impl std::future::Future<Output = $crate::Result<Option<std::time::Duration>>> + Send
            {
                <$handle>::remaining_ttl(self)
            }

            fn force_unlock(
                &self,
            ) -> impl std::future::Future<Output = $crate::Result<bool>> + Send {
                <$handle>::force_unlock(self)
            }

            fn non_reentrant(&self) -> Self {
                <$handle>::non_reentrant(self)
            }

            fn reentrant(&self) -> Self {
                <$handle>::reentrant(self)
            }

            fn with_owner(&self, owner: &str) -> Self {
                <$handle>::with_owner(self, owner)
            }

            fn is_reentrant(&self) -> bool {
                <$handle>::is_reentrant(self)
            }
        }

        impl $crate::lock::contract::LockGuard for $guard {
            fn name(&self) -> &str {
                <$guard>::name(self)
            }

            fn owner(&self) -> &str {
                <$guard>::owner(self)
            }

            fn lease(&self) -> Option<std::time::Duration> {
                <$guard>::lease(self)
            }

            fn is_lost(&self) -> bool {
                <$guard>::is_lost(self)
            }

            fn validity(&self) -> std::time::Duration {
                <$guard>::validity(self)
            }

            fn lost(&self) -> tokio_util::sync::CancellationToken {
                <$guard>::lost(self)
            }

            $(
            fn fencing_token(&self) -> Option<u64> {
                let $g = self;
                $token
            }
            )?

            fn detach(&mut self) -> impl std::future::Future<Output = $crate::Result<()>> + Send {
                <$guard>::detach(self)
            }

            fn unlock(self) -> impl std::future::Future<Output = $crate::Result<()>> + Send {
                <$guard>::unlock(self)
            }
        }
    };
}

pub(crate) use impl_lock;

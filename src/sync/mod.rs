//! The synchronizers that are not mutual-exclusion locks: the counting [`Semaphore`]
//! (`semaphore/`), the [`LeaseSemaphore`] whose permits have ids and leases
//! (`lease_semaphore/`) and the [`CountDownLatch`] (`latch.rs`). They share the engine's
//! wait loop and subscription, not its hold registry.
//!
//! [`Semaphore`]: crate::Semaphore
//! [`LeaseSemaphore`]: crate::LeaseSemaphore
//! [`CountDownLatch`]: crate::CountDownLatch

pub(crate) mod latch;
pub(crate) mod lease_semaphore;
pub(crate) mod semaphore;

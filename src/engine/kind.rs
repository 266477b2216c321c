//! [`Kind`]: what a lock kind gives the engine so it can release and settle its holds.

use std::sync::Arc;

use futures::future::BoxFuture;

use super::Core;
use crate::error::Result;

/// What a lock kind provides so the shared guard and clean-up logic can release its holds.
pub(crate) trait Kind: Clone + Send + Sync + 'static {
    /// The client the lock belongs to.
    fn core(&self) -> &Arc<Core>;
    /// The lock's name, for errors and logs.
    fn name(&self) -> &str;
    /// Runs the kind's unlock script for one hold of `owner`. `expected` is the hold count
    /// the owner must have for the release to happen (0: any). Replies as `lua/unlock.lua`:
    /// -1 not held, -2 count differs, 0 released the last hold, n > 0 holds left.
    fn release(&self, owner: Arc<str>, expected: u32) -> BoxFuture<'static, Result<i64>>;
}

/// A [`Kind`] as the hold registry keeps it, to release its holds when the client closes
/// (object safe: the registry holds every kind alike).
pub(crate) trait Releaser: Send + Sync {
    /// The lock's name.
    fn name(&self) -> &str;
    /// [`Kind::release`].
    fn release_one(&self, owner: Arc<str>, expected: u32) -> BoxFuture<'static, Result<i64>>;
}

impl<K: Kind> Releaser for K {
    fn name(&self) -> &str {
        Kind::name(self)
    }

    fn release_one(&self, owner: Arc<str>, expected: u32) -> BoxFuture<'static, Result<i64>> {
        self.release(owner, expected)
    }
}

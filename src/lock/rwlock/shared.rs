//! [`Shared`]: what both sides of one read-write lock use (the client, the names of its
//! keys and channels), and how lockwise's own layout releases and force-unlocks them.
//! Redisson's layout ([`super::redisson`]) builds on it; this file knows nothing of it.

use std::sync::Arc;

use crate::engine::Core;
use crate::error::Result;
use crate::layout::ReleaseSpec;
use crate::wire::scripts::{RW_FORCE_UNLOCK, RW_UNLOCK_READ, RW_UNLOCK_WRITE};

/// The side of the lock a handle takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Side {
    Read,
    Write,
}

/// What both sides of one lock use.
pub(crate) struct Shared {
    pub(crate) core: Arc<Core>,
    pub(crate) name: String,
    pub(crate) write: String,
    pub(crate) read: String,
    pub(crate) writers: String,
    pub(crate) read_channel: String,
    pub(crate) write_channel: String,
    /// Redisson's layout: the prefix of the readers' timeout keys (`{<name>}`).
    pub(crate) prefix: String,
}

impl Shared {
    /// Whether the lock is the name's lock hash itself, served by [`super::redisson`]
    /// ([`crate::layout::rw_in_lock_hash`]: Redisson's layout).
    pub(super) fn redisson(&self) -> bool {
        crate::layout::rw_in_lock_hash(self.core.layout)
    }
}

impl Shared {
    /// How a read hold is released in lockwise's layout (`lua/rw_unlock_read.lua`): the last reader wakes one
    /// local writer, as this client hears no echo of its own message.
    pub(super) fn read_release(&self) -> ReleaseSpec {
        ReleaseSpec {
            wake_one: vec![self.write_channel.clone()],
            ..ReleaseSpec::new(
                &RW_UNLOCK_READ,
                vec![self.read.clone(), self.write_channel.clone()],
                self.core.id_str.clone(),
            )
        }
    }

    /// How a write hold is released in lockwise's layout (`lua/rw_unlock_write.lua`): the local readers all
    /// wake, and one local writer.
    pub(super) fn write_release(&self) -> ReleaseSpec {
        ReleaseSpec {
            wake_all: vec![self.read_channel.clone()],
            wake_one: vec![self.write_channel.clone()],
            ..ReleaseSpec::new(
                &RW_UNLOCK_WRITE,
                vec![
                    self.write.clone(),
                    self.read.clone(),
                    self.read_channel.clone(),
                    self.write_channel.clone(),
                ],
                self.core.id_str.clone(),
            )
        }
    }

    /// `lua/rw_force_unlock.lua` on this lock, and the local waiters of both sides woken.
    pub(super) async fn force_unlock(&self) -> Result<bool> {
        let held: i64 = RW_FORCE_UNLOCK
            .run(
                &mut self.core.conn.clone(),
                &[
                    &self.write,
                    &self.read,
                    &self.writers,
                    &self.read_channel,
                    &self.write_channel,
                ],
                &[&self.core.publish],
            )
            .await?;
        self.core.listener.notify_all(&self.read_channel);
        self.core.listener.notify_all(&self.write_channel);
        Ok(held == 1)
    }
}

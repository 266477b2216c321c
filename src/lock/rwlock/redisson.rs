//! [`RwLock`](super::RwLock) in Redisson's key layout: RReadWriteLock's format, byte for
//! byte, so Java readers and writers and lockwise's share one lock by name.
//!
//! One hash `<name>` serves both sides: field `mode` = `read` / `write`, reader fields
//! `<owner>` -> read holds, writer field `<owner>:write` -> write holds (so the write side's
//! owner field is the owner's plus `:write`). Every read hold `n` of an owner also has the
//! string `{<name>}:<owner>:rwlock_timeout:<n>` = `1` with the hold's lease as TTL: a Java
//! reader's unlock keeps the hash alive for as long as any of them lives, and would delete
//! it under a lockwise reader without them. The watchdog renews them with the hash
//! (`lua/renew.lua`). Readers and writers wait on the one channel `redisson_rwlock:{<name>}`:
//! a read unlock that frees the lock publishes `0` (one waiter per client wakes), a write
//! unlock `1` (all wake).
//!
//! Nothing of lockwise's own read-write lock is used here: no writer intents (so no writer
//! preference: readers keep coming in while a writer waits, as with Redisson), no overtake
//! claims. A reader asking for the write lock is refused
//! ([`Error::UpgradeRefused`]), found by its reader field in the hash.

use std::sync::Arc;
use std::time::Duration;

use super::shared::{Shared, Side};
use crate::engine::acquire::{Arg, AttemptArgs, ScriptCall};
use crate::engine::{self, inspect, Base, Hold, Owner};
use crate::error::{Error, Result};
use crate::layout::redisson::{self, WRITE_SUFFIX};
use crate::layout::ReleaseSpec;
use crate::wire::scripts::{
    Script, REDISSON_RW_FORCE_UNLOCK, REDISSON_RW_READ, REDISSON_RW_UNLOCK_READ,
    REDISSON_RW_UNLOCK_WRITE, REDISSON_RW_WRITE,
};

impl Side {
    /// The `mode` Redisson writes while this side holds the lock.
    fn mode(self) -> &'static str {
        match self {
            Side::Read => "read",
            Side::Write => "write",
        }
    }
}

/// How a read (`Side::Read`) or write hold is released in the client's layout.
pub(super) fn release(shared: &Shared, side: Side) -> ReleaseSpec {
    match (shared.redisson(), side) {
        (true, Side::Read) => shared.redisson_read_release(),
        (true, Side::Write) => shared.redisson_write_release(),
        (false, Side::Read) => shared.read_release(),
        (false, Side::Write) => shared.write_release(),
    }
}

/// Force-unlocks the lock in the client's layout: lockwise's frees both sides; Redisson's
/// forceUnlock frees `side` (`None`: either side's).
pub(super) async fn force_unlock(shared: &Shared, side: Option<Side>) -> Result<bool> {
    match shared.redisson() {
        true => shared.redisson_force_unlock(side).await,
        false => shared.force_unlock().await,
    }
}

impl Shared {
    /// RReadWriteLock's read release (`lua/redisson_rw_unlock_read.lua`): freeing the lock
    /// publishes `0`, which wakes one waiter in every client, this one included (no local
    /// head start in a mixed fleet: see [`ReleaseSpec::redisson_unlock`]). Each read hold lives
    /// by its own timeout key, which the release from its count deletes (`per_hold_ttl`).
    pub(super) fn redisson_read_release(&self) -> ReleaseSpec {
        ReleaseSpec {
            extra: vec![self.prefix.clone()],
            per_hold_ttl: true,
            ..ReleaseSpec::new(
                &REDISSON_RW_UNLOCK_READ,
                vec![self.read.clone(), self.read_channel.clone()],
                "0".to_string(),
            )
        }
    }

    /// RReadWriteLock's write release (`lua/redisson_rw_unlock_write.lua`): the last write
    /// hold publishes `1`, which wakes every waiter in every client, this one included.
    pub(super) fn redisson_write_release(&self) -> ReleaseSpec {
        ReleaseSpec::new(
            &REDISSON_RW_UNLOCK_WRITE,
            vec![self.write.clone(), self.write_channel.clone()],
            "1".to_string(),
        )
    }

    /// RReadWriteLock's forceUnlock (`lua/redisson_rw_force_unlock.lua`): the read side's
    /// deletes a read-locked hash only, the write side's a write-locked one, `None` either.
    pub(super) async fn redisson_force_unlock(&self, side: Option<Side>) -> Result<bool> {
        let mode = side.map_or("", Side::mode);
        let deleted: i64 = REDISSON_RW_FORCE_UNLOCK
            .run(
                &mut self.core.conn.clone(),
                &[&self.read, &self.read_channel],
                &[&mode, &self.core.publish, &self.prefix.as_str()],
            )
            .await?;
        if deleted == 1 {
            self.core.listener.notify_all(&self.read_channel);
        }
        Ok(deleted == 1)
    }

    /// The hash's `mode`: `None` when nobody holds the lock.
    pub(super) async fn redisson_mode(&self) -> Result<Option<String>> {
        Ok(redis::cmd("HGET")
            .arg(&self.read)
            .arg("mode")
            .query_async(&mut self.core.conn.clone())
            .await?)
    }

    /// The reader fields (owner, read holds) of the hash.
    async fn redisson_readers(&self) -> Result<Vec<(String, u32)>> {
        let all: Vec<(String, String)> = redis::cmd("HGETALL")
            .arg(&self.read)
            .query_async(&mut self.core.conn.clone())
            .await?;
        Ok(all
            .into_iter()
            .filter(|(field, _)| field != "mode" && !field.ends_with(WRITE_SUFFIX))
            .filter_map(|(field, holds)| Some((field, holds.parse().ok()?)))
            .collect())
    }

    /// How many owners hold read locks whose timeout keys still live (a crashed reader's
    /// field stays in the hash until someone's unlock or the hash's TTL removes it).
    pub(super) async fn redisson_reader_count(&self) -> Result<usize> {
        let readers = self.redisson_readers().await?;
        if readers.is_empty() {
            return Ok(0);
        }
        let mut pipe = redis::pipe();
        for (owner, holds) in &readers {
            let mut exists = redis::cmd("EXISTS");
            for n in 1..=*holds {
                exists.arg(redisson::rw_timeout_key(&self.name, owner, n));
            }
            pipe.add_command(exists);
        }
        let alive: Vec<i64> = pipe.query_async(&mut self.core.conn.clone()).await?;
        Ok(alive.into_iter().filter(|&n| n > 0).count())
    }

    /// Whether some owner holds a read lock (in either mode: a writer may read too).
    pub(super) async fn redisson_read_locked(&self) -> Result<bool> {
        Ok(!self.redisson_readers().await?.is_empty())
    }
}

/// The write holds of `base`'s owner (its writer field); 0 on a non-reentrant handle.
pub(super) async fn write_holds(base: &Base) -> Result<u32> {
    base.check()?;
    if base.owner == Owner::PerHold {
        return Ok(0);
    }
    let field = redisson::write_field(&base.owner_field());
    inspect::owner_holds(&base.core, &base.key, &field).await
}

/// One side's acquire in Redisson's layout: RReadWriteLock's scripts through the engine's
/// wait loop, woken on the lock's one channel.
pub(super) async fn acquire(
    base: &Arc<Base>,
    shared: &Arc<Shared>,
    side: Side,
    deadline: Option<tokio::time::Instant>,
    lease: Option<Duration>,
) -> Result<Option<Hold>> {
    base.check()?;
    let reader = base.owner_field();
    if reader.ends_with(WRITE_SUFFIX) {
        return Err(Error::invalid(
            "owner",
            "in Redisson's key layout a read-write lock's owner id must not end in `:write` \
             (Redisson's writer fields do)",
        ));
    }
    let (owner, script, label, what): (Arc<str>, &'static Script, _, _) = match side {
        Side::Read => (
            reader.clone(),
            &REDISSON_RW_READ,
            engine::KindId::RwRead,
            "read lock",
        ),
        Side::Write => (
            redisson::write_field(&reader).into(),
            &REDISSON_RW_WRITE,
            engine::KindId::RwWrite,
            "write lock",
        ),
    };
    let attempt = Attempt {
        shared: shared.clone(),
        side,
        reader,
        script,
        what,
    };
    let granted = engine::acquire::run(
        base,
        &attempt,
        owner,
        engine::Wake::Channel(&shared.read_channel),
        deadline,
        lease,
        label,
    )
    .await;
    match granted {
        Ok(granted) => Ok(granted.map(|(hold, ())| hold)),
        Err(Error::Redis(e)) if e.code() == Some("LOCKWISE_UPGRADE") => {
            Err(Error::UpgradeRefused {
                name: base.name.clone(),
            })
        }
        Err(e) => Err(e),
    }
}

/// One side's attempt: RReadWriteLock's read or write script on the lock's one hash.
#[derive(Clone)]
struct Attempt {
    shared: Arc<Shared>,
    side: Side,
    /// The owner's reader field (the writer's field is this plus `:write`).
    reader: Arc<str>,
    script: &'static Script,
    what: &'static str,
}

impl engine::acquire::AcquireScript for Attempt {
    type Extra = ();

    fn what(&self) -> &'static str {
        self.what
    }

    fn call<'a>(&'a self, a: &'a AttemptArgs) -> ScriptCall<'a> {
        // The read script builds the hold's timeout key; the write script looks for the
        // owner's reader field (an upgrade).
        let third: &str = match self.side {
            Side::Read => &self.shared.prefix,
            Side::Write => &self.reader,
        };
        ScriptCall {
            script: self.script,
            keys: vec![&self.shared.read],
            args: vec![Arg::Int(a.lease_ms), Arg::Str(&a.owner), Arg::Str(third)],
        }
    }

    fn parse(&self, reply: &[i64]) -> Option<engine::Reply<()>> {
        engine::plain_reply(reply)
    }
}

/// What `inspect_methods!` reads of one side, in either layout: lockwise's sides each have
/// a hash of their own; Redisson's share one, told apart by `mode` and the fields.
#[derive(Clone)]
pub(super) struct Inspect {
    pub(super) base: Arc<Base>,
    pub(super) shared: Arc<Shared>,
    pub(super) side: Side,
}

impl Inspect {
    /// Whether this side is held: by a writer, or by some reader.
    pub(crate) async fn is_locked(&self) -> Result<bool> {
        if !self.shared.redisson() {
            return self.base.is_locked().await;
        }
        self.base.check()?;
        match self.side {
            Side::Write => Ok(self.shared.redisson_mode().await?.as_deref() == Some("write")),
            Side::Read => self.shared.redisson_read_locked().await,
        }
    }

    /// This side's holds of the handle's owner.
    pub(crate) async fn hold_count(&self) -> Result<u32> {
        match (self.shared.redisson(), self.side) {
            (true, Side::Write) => write_holds(&self.base).await,
            _ => self.base.hold_count().await,
        }
    }

    /// Time until the side's hash expires (in Redisson's layout the lock's one hash).
    pub(crate) async fn remaining_ttl(&self) -> Result<Option<Duration>> {
        self.base.remaining_ttl().await
    }
}

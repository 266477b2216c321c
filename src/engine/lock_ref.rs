//! [`LockRef`]: what a lock kind gives the engine, as data: the client, the lock's name and how
//! one hold is released ([`ReleaseSpec`]: a script, its keys and arguments, the channels to
//! wake). The engine runs the release itself, for an unlock, a dropped guard, a settlement
//! and the client's shutdown alike; no kind is called back.

use std::sync::Arc;

use futures::future::BoxFuture;
use futures::FutureExt;

use super::batch::{Op, ReleaseKeys, Turn, NOT_TRIED};
use super::registry::RunKind;
use super::Core;
use crate::error::Result;
use crate::wire::keys::Keys;
use crate::wire::scripts::{Script, ToRedisArgsDyn, REDISSON_FAIR_UNLOCK, REDISSON_UNLOCK, UNLOCK};

/// How one hold of a kind is released: `script` runs with `keys` and the arguments
/// `owner, message, expected, publish` followed by `extra`, and replies as `lua/unlock.lua`
/// does: -1 not held, -2 the count differs from `expected`, 0 released the last hold,
/// n > 0 holds left (`expected` 0 releases any one hold).
pub(crate) struct ReleaseSpec {
    pub(crate) script: &'static Script,
    pub(crate) keys: Vec<String>,
    /// What the last release publishes: the releasing client's id (so that client skips
    /// its own echo), or a Redlock set's.
    pub(crate) message: String,
    /// The script's arguments after the four above.
    pub(crate) extra: Vec<String>,
    /// Channels on which all local waiters are woken when the lock may have been freed
    /// (the reply said 0, or was lost): the client hears no echo of its own message.
    pub(crate) wake_all: Vec<String>,
    /// Channels on which one local waiter is woken in that case.
    pub(crate) wake_one: Vec<String>,
    /// Whether the script also takes the client's clock (ms since the epoch) as its last
    /// argument: Redisson's fair queue keeps deadlines on the clients' clocks.
    pub(crate) clock: bool,
    /// Whether a release may go out in a batch of `lua/batch.lua` (see
    /// [`batch`](super::batch)), which publishes the client's id: `lua/unlock.lua` of a
    /// client's own lock hash, unless [`ReleaseSpec::unbatched`].
    pub(crate) batch: bool,
    /// Whether each hold lives by a TTL key of its own, numbered by the owner's count and
    /// deleted by the release from that count (Redisson's read holds: `rwlock_timeout:<n>`),
    /// rather than by the hash's TTL, which no release lowers: a run is then valid only as
    /// long as the keys of its remaining holds (see the registry's `deadlines`).
    pub(crate) per_hold_ttl: bool,
}

impl ReleaseSpec {
    /// `lua/unlock.lua`, the release of every kind that counts its holds in the name's lock
    /// hash (`keys.lock`): the last release publishes `message` on the lock's channel and
    /// wakes the head of its fair queue; locally, one waiter on the channel wakes.
    pub(crate) fn unlock(keys: &Keys, message: &str) -> ReleaseSpec {
        ReleaseSpec {
            script: &UNLOCK,
            keys: keys.script_keys().map(str::to_string).to_vec(),
            message: message.to_string(),
            extra: vec![keys.fair_channel.clone()],
            wake_all: Vec::new(),
            wake_one: vec![keys.channel.clone()],
            clock: false,
            batch: true,
            per_hold_ttl: false,
        }
    }

    /// The same release, never batched: a fair lock's, whose release hands the lock to the
    /// head of its queue when there is one (the batch would leave it to a second call), and
    /// a Redlock set's, whose message is the set's id (a batch publishes the client's).
    pub(crate) fn unbatched(mut self) -> ReleaseSpec {
        self.batch = false;
        self
    }
}

impl ReleaseSpec {
    /// `lua/redisson_unlock.lua`: the release of a lock hash in Redisson's layout; the last
    /// release publishes `0` (Redisson's unlock message) on the lock channel.
    ///
    /// No local waiter is woken before that message: this client hears it at the same time
    /// as every other client, Java or lockwise, so no side of a mixed fleet gets a head start
    /// by being local (the overtake limit, which bounds that head start in lockwise's layout,
    /// has no place in Redisson's).
    pub(crate) fn redisson_unlock(keys: &Keys) -> ReleaseSpec {
        ReleaseSpec {
            script: &REDISSON_UNLOCK,
            keys: vec![keys.lock.clone(), keys.channel.clone()],
            message: "0".to_string(),
            extra: Vec::new(),
            wake_all: Vec::new(),
            wake_one: Vec::new(),
            clock: false,
            batch: false,
            per_hold_ttl: false,
        }
    }

    /// `lua/redisson_fair_unlock.lua`: the release of a fair lock in Redisson's layout; the
    /// last release publishes `0` on the queue head's own channel.
    pub(crate) fn redisson_fair_unlock(keys: &Keys) -> ReleaseSpec {
        ReleaseSpec {
            script: &REDISSON_FAIR_UNLOCK,
            keys: keys.script_keys().map(str::to_string).to_vec(),
            message: "0".to_string(),
            extra: vec![keys.fair_channel.clone()],
            wake_all: Vec::new(),
            wake_one: Vec::new(),
            clock: true,
            batch: false,
            per_hold_ttl: false,
        }
    }
}

/// The client's clock in ms since the epoch, as Redisson's scripts take it.
pub(crate) fn client_clock_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

struct Inner {
    core: Arc<Core>,
    name: String,
    release: ReleaseSpec,
}

impl RunKind for Inner {
    fn name(&self) -> &str {
        &self.name
    }

    fn per_hold_ttl(&self) -> bool {
        self.release.per_hold_ttl
    }

    fn release(self: Arc<Self>, owner: Arc<str>, expected: u32) -> BoxFuture<'static, Result<i64>> {
        LockRef(self).release(owner, expected, None)
    }
}

impl ReleaseKeys for Inner {
    fn release_keys(&self) -> &[String] {
        &self.release.keys
    }
}

/// A lock handle as the engine sees it (cheap to clone; holds, tickets and the hold
/// registry keep one to release what they hold).
#[derive(Clone)]
pub(crate) struct LockRef(Arc<Inner>);

impl LockRef {
    pub(crate) fn new(core: Arc<Core>, name: &str, release: ReleaseSpec) -> LockRef {
        LockRef(Arc::new(Inner {
            core,
            name: name.to_string(),
            release,
        }))
    }

    /// The kind as the hold registry keeps it (the same handle, not a copy).
    pub(crate) fn run_kind(&self) -> Arc<dyn RunKind> {
        self.0.clone()
    }

    /// The client the lock belongs to.
    pub(crate) fn core(&self) -> &Arc<Core> {
        &self.0.core
    }

    /// Whether each hold lives by a TTL key of its own (see [`ReleaseSpec::per_hold_ttl`]).
    pub(crate) fn per_hold_ttl(&self) -> bool {
        self.0.release.per_hold_ttl
    }

    /// The lock's name, for errors and logs.
    pub(crate) fn name(&self) -> &str {
        &self.0.name
    }

    /// Runs the kind's [`ReleaseSpec`] for one hold of `owner`; `expected` is the hold count
    /// the owner must have for the release to happen (0: any). `note`: one more argument
    /// after the release's own, for this hold only (see [`Hold::note_for_release`]); such a
    /// release is never batched.
    ///
    /// [`Hold::note_for_release`]: super::hold::Hold::note_for_release
    pub(crate) fn release(
        &self,
        owner: Arc<str>,
        expected: u32,
        note: Option<Arc<str>>,
    ) -> BoxFuture<'static, Result<i64>> {
        let kind = self.clone();
        async move {
            let (core, spec) = (&kind.0.core, &kind.0.release);
            let mut permit = None;
            let mut reply = Ok(NOT_TRIED);
            if spec.batch && note.is_none() {
                let op = Op::Unlock {
                    keys: kind.0.clone(),
                    owner: owner.clone(),
                    expected,
                };
                match core.batcher.turn(op).await {
                    Turn::Alone(alone) => permit = Some(alone),
                    Turn::Batched(batched) => reply = batched,
                }
            }
            // Alone, or not tried in its batch: the script itself.
            if matches!(reply, Ok(NOT_TRIED)) {
                let keys: Vec<&str> = spec.keys.iter().map(String::as_str).collect();
                let (owner, message) = (&*owner, spec.message.as_str());
                let mut args: Vec<&dyn ToRedisArgsDyn> =
                    vec![&owner, &message, &expected, &core.publish];
                args.extend(spec.extra.iter().map(|a| a as &dyn ToRedisArgsDyn));
                let note = note.as_deref();
                if let Some(note) = &note {
                    args.push(note);
                }
                let now = client_clock_ms();
                if spec.clock {
                    args.push(&now);
                }
                reply = spec.script.run(&mut core.conn.clone(), &keys, &args).await;
            }
            drop(permit);
            if matches!(reply, Ok(0) | Err(_)) {
                for channel in &spec.wake_all {
                    core.listener.notify_all(channel);
                }
                for channel in &spec.wake_one {
                    core.listener.notify_local(channel);
                }
            }
            Ok(reply?)
        }
        .boxed()
    }
}

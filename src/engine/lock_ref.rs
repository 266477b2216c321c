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
use crate::layout::ReleaseSpec;
use crate::wire::scripts::ToRedisArgsDyn;

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

//! One node of a Redlock: its client and keys there, and the calls a lock makes on it
//! (acquire, renew, release). A node's holds live in that node client's hold registry, as
//! the holds of every other kind do: [`NodeLock`] is the engine's view of one node.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use crate::engine::acquire::{Arg, AttemptArgs, ScriptCall};
use crate::engine::{self, Attempt, Core, HoldKey, Ticket};
use crate::error::{io_timeout, Error, Result};
use crate::wire::keys::Keys;
use crate::wire::scripts::{LOCK, RENEW};

/// The error of a node that did not answer within the node timeout (retryable).
pub(super) fn node_timeout_error(timeout: Duration) -> Error {
    Error::Redis(io_timeout(format!(
        "no reply within the node timeout ({timeout:?})"
    )))
}

/// One node of a lock: its client and keys there, and the node as the engine sees it
/// (`kind`: `lua/unlock.lua` publishing the set's id), so acquires, releases and
/// settlements on the node go through the engine.
#[derive(Clone)]
pub(super) struct NodeLock {
    pub(super) core: Arc<Core>,
    /// The lock hash (`keys.lock`), as the registry keys it.
    pub(super) key: Arc<str>,
    pub(super) keys: Arc<Keys>,
    pub(super) kind: engine::LockRef,
}

/// What one node answered in one acquire round.
pub(super) enum NodeReply {
    /// A hold was granted: the call's ticket (the hold is registered from it) and the
    /// owner's hold count on that node.
    Granted(Ticket, u32),
    /// Held by another owner.
    Held,
    /// No usable answer: an error or the per-node timeout. Whatever the call may have taken
    /// is settled away in the background.
    Failed(Error),
}

impl NodeLock {
    /// The registry key of `owner`'s holds on this node.
    pub(super) fn hold_key(&self, owner: &Arc<str>) -> HoldKey {
        (self.key.clone(), owner.clone())
    }

    /// One node's share of a round: the lock script, counted in the node client's hold
    /// registry and bounded by the node timeout. A late, lost or never awaited reply is
    /// settled by the engine (nothing leaks).
    pub(super) fn acquire(
        &self,
        owner: &Arc<str>,
        ttl_ms: u64,
        timeout: Duration,
    ) -> impl Future<Output = NodeReply> + Send + 'static {
        let attempt = engine::acquire::once(&self.kind, &self.hold_key(owner), self, ttl_ms);
        async move {
            match tokio::time::timeout(timeout, attempt).await {
                // Dropping the attempt let it finish (and settle) in the background.
                Err(_) => NodeReply::Failed(node_timeout_error(timeout)),
                Ok(Ok(Attempt::Acquired((ticket, holds, ())))) => NodeReply::Granted(ticket, holds),
                Ok(Ok(Attempt::Held(_) | Attempt::Claimant(..))) => NodeReply::Held,
                Ok(Err(e)) => NodeReply::Failed(e),
            }
        }
    }

    /// `lua/renew.lua` for this node's key: `true` renewed, `false` gone.
    pub(super) fn renew(&self, owner: Arc<str>, ttl_ms: u64) -> impl Future<Output = Result<bool>> {
        let (mut conn, key) = (self.core.conn.clone(), self.key.clone());
        async move {
            let reply: Vec<i64> = RENEW.run(&mut conn, &[&key], &[&ttl_ms, &&*owner]).await?;
            match reply.as_slice() {
                [1] => Ok(true),
                [0] => Ok(false),
                other => Err(Error::UnexpectedReply(format!(
                    "renew script answered {other:?}"
                ))),
            }
        }
    }
}

/// `lua/lock.lua` on the node's key alone: a RedLock node neither stakes nor honours claims.
impl engine::acquire::AcquireScript for NodeLock {
    type Extra = ();

    fn what(&self) -> &'static str {
        "lock"
    }

    fn call<'a>(&'a self, a: &'a AttemptArgs) -> ScriptCall<'a> {
        ScriptCall {
            script: &LOCK,
            keys: vec![&self.key],
            args: vec![Arg::Int(a.lease_ms), Arg::Str(&a.owner)],
        }
    }

    fn parse(&self, reply: &[i64]) -> Option<engine::Reply<()>> {
        engine::plain_reply(reply)
    }
}

//! One node of a Redlock: its client and keys there, and the calls a lock makes on it
//! (acquire, renew, release), each on its own.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;
use futures::FutureExt;

use super::RedLock;
use crate::error::{Error, Result};
use crate::raw::{self, Core};
use crate::scripts::{LOCK, REDLOCK_RELEASE, RENEW};

/// The error of a node that did not answer within the node timeout (retryable).
pub(super) fn node_timeout_error(timeout: Duration) -> Error {
    Error::Redis(
        std::io::Error::new(
            std::io::ErrorKind::TimedOut,
            format!("no reply within the node timeout ({timeout:?})"),
        )
        .into(),
    )
}

/// One node of a lock: its client and keys there.
#[derive(Clone)]
pub(super) struct Node {
    pub(super) core: Arc<Core>,
    pub(super) key: Arc<str>,
    pub(super) channel: Arc<str>,
}

impl Node {
    /// `lua/redlock_release.lua`: releases `holds` holds of `owner` (`expected` 0: whatever
    /// its hold count).
    pub(super) fn release(
        &self,
        owner: Arc<str>,
        set_id: Arc<str>,
        expected: u32,
        holds: u32,
    ) -> BoxFuture<'static, redis::RedisResult<i64>> {
        let (mut conn, key, channel, publish) = (
            self.core.conn.clone(),
            self.key.clone(),
            self.channel.clone(),
            self.core.publish,
        );
        async move {
            REDLOCK_RELEASE
                .run(
                    &mut conn,
                    &[&key, &channel],
                    &[&&*owner, &&*set_id, &expected, &publish, &holds],
                )
                .await
        }
        .boxed()
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

/// What one node answered in one acquire round.
pub(super) enum NodeReply {
    /// A hold was granted; the owner's hold count on that node.
    Granted(u32),
    /// Held by another owner.
    Held,
    /// No usable answer: an error or the per-node timeout. Whatever the call may have taken
    /// is released in the background.
    Failed(Error),
}

impl RedLock {
    /// One node's share of a round: the lock script, bounded by the node timeout, cleaning
    /// up after itself when its reply is late, lost or never awaited.
    pub(super) fn node_acquire(
        &self,
        node: &Node,
        owner: &Arc<str>,
        ttl_ms: u64,
        expected: u32,
    ) -> impl Future<Output = NodeReply> + Send + 'static {
        let set_id = self.inner.set.id_str.clone();
        let timeout = self.inner.set.options.node_timeout;
        let call = {
            let (mut conn, key, owner) = (node.core.conn.clone(), node.key.clone(), owner.clone());
            async move {
                LOCK.run::<Vec<i64>, _>(&mut conn, &[&key], &[&ttl_ms, &&*owner])
                    .await
            }
            .boxed()
        };
        // A node is a kind of its own for the shared clean-up: an abandoned or timed-out call
        // gives back what it took (unconditionally if the reply says it was granted, by
        // hold count when the outcome is unknown), before this round returns.
        let on_node = NodeLock {
            node: node.clone(),
            set_id,
            name: self.inner.name.clone(),
        };
        let reply = raw::guarded_call(&on_node, owner.clone(), expected, call, |r: &Vec<i64>| {
            r.first() == Some(&1)
        });
        async move {
            match tokio::time::timeout(timeout, reply).await {
                // Dropping the call made it finish (and undo) in the background.
                Err(_) => NodeReply::Failed(node_timeout_error(timeout)),
                Ok(Ok(reply)) => match reply.as_slice() {
                    [1, holds] if *holds >= 1 => NodeReply::Granted(*holds as u32),
                    [0, _] => NodeReply::Held,
                    other => NodeReply::Failed(Error::UnexpectedReply(format!(
                        "lock script answered {other:?}"
                    ))),
                },
                Ok(Err(e)) => NodeReply::Failed(e.into()),
            }
        }
    }
}

/// One node's hold of a Redlock, as a [`raw::Kind`] for [`raw::guarded_call`].
#[derive(Clone)]
struct NodeLock {
    node: Node,
    set_id: Arc<str>,
    name: Arc<str>,
}

impl raw::Kind for NodeLock {
    fn core(&self) -> &Arc<Core> {
        &self.node.core
    }

    fn name(&self) -> &str {
        &self.name
    }

    fn release(&self, owner: Arc<str>, expected: u32) -> BoxFuture<'static, Result<i64>> {
        let release = self.node.release(owner, self.set_id.clone(), expected, 1);
        async move { Ok(release.await?) }.boxed()
    }
}

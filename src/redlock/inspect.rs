//! What a [`RedLock`] looks like across its nodes: the read-only queries and
//! `force_unlock`, each answered by quorum.

use std::future::Future;
use std::time::Duration;

use futures::future::join_all;

use super::node::NodeLock;
use super::{quorum, RedLock};
use crate::engine::{self, inspect, Owner};
use crate::error::{Error, Result};

impl RedLock {
    /// Whether any owner holds the lock on a majority of the nodes.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for an invalid name, option or empty set;
    /// [`Error::Redis`] (the first node's error) when so many nodes failed that no majority
    /// could be read.
    ///
    /// # Cancel safety
    /// Cancel safe (read only).
    ///
    /// # Example
    ///
    /// ```rust,no_run
    /// # async fn demo(clients: Vec<lockwise::Client>) -> lockwise::Result<()> {
    /// let lock = lockwise::RedLockSet::new(&clients).lock("invoice:9");
    /// if lock.is_locked().await? {
    ///     println!("held on a majority of the nodes");
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn is_locked(&self) -> Result<bool> {
        let locked = self
            .by_quorum(|n| async move { inspect::is_locked(&n.core, &n.key).await })
            .await?;
        Ok(locked)
    }

    /// How many holds the calling task has on the lock, as a majority of the nodes shows
    /// them: the largest count that a majority has at least (0 if none).
    ///
    /// # Errors
    /// As for [`is_locked`](Self::is_locked).
    ///
    /// # Cancel safety
    /// Cancel safe (read only).
    ///
    /// # Example
    ///
    /// ```rust,no_run
    /// # async fn demo(clients: Vec<lockwise::Client>) -> lockwise::Result<()> {
    /// let lock = lockwise::RedLockSet::new(&clients).lock("invoice:9");
    /// let guard = lock.lock().await?;
    /// assert_eq!(lock.hold_count().await?, 1);
    /// guard.unlock().await?;
    /// # Ok(()) }
    /// ```
    pub async fn hold_count(&self) -> Result<u32> {
        if *self.owner_mode() == Owner::PerHold {
            self.check()?;
            return Ok(0); // a non-reentrant handle's holds belong to their guards
        }
        let owner = self.owner_field();
        self.by_quorum(|n| {
            let owner = owner.clone();
            async move { inspect::owner_holds(&n.core, &n.key, &owner).await }
        })
        .await
    }

    /// Whether the calling task (or this handle's owner) holds the lock on a majority of the
    /// nodes.
    ///
    /// # Errors
    /// As for [`is_locked`](Self::is_locked).
    ///
    /// # Cancel safety
    /// Cancel safe (read only).
    ///
    /// # Example
    ///
    /// ```rust,no_run
    /// # async fn demo(clients: Vec<lockwise::Client>) -> lockwise::Result<()> {
    /// let lock = lockwise::RedLockSet::new(&clients).lock("invoice:9");
    /// let guard = lock.lock().await?;
    /// assert!(lock.is_held_by_current_task().await?);
    /// guard.unlock().await?;
    /// # Ok(()) }
    /// ```
    pub async fn is_held_by_current_task(&self) -> Result<bool> {
        Ok(self.hold_count().await? > 0)
    }

    /// Time until the lock expires on all but a minority of the nodes, i.e. until fewer
    /// than a majority still has it; `None` when it is not locked on a majority.
    ///
    /// # Errors
    /// As for [`is_locked`](Self::is_locked).
    ///
    /// # Cancel safety
    /// Cancel safe (read only).
    ///
    /// # Example
    ///
    /// ```rust,no_run
    /// # async fn demo(clients: Vec<lockwise::Client>) -> lockwise::Result<()> {
    /// let lock = lockwise::RedLockSet::new(&clients).lock("invoice:9");
    /// if let Some(ttl) = lock.remaining_ttl().await? {
    ///     println!("held on a majority for {ttl:?} more");
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn remaining_ttl(&self) -> Result<Option<Duration>> {
        self.by_quorum(|n| async move { inspect::remaining_ttl(&n.core, &n.key).await })
            .await
    }

    /// Deletes the lock on every node, whoever holds it, and wakes its waiters there.
    /// Returns whether it was locked on any node. The holder's guard then finds its holds
    /// gone (lost, and its `unlock` is [`Error::NotHeld`]).
    ///
    /// # Errors
    /// As for [`is_locked`](Self::is_locked); a node that failed keeps its hold until its
    /// TTL.
    ///
    /// # Cancel safety
    /// Dropping the future may or may not have deleted the lock on each node.
    ///
    /// # Example
    ///
    /// ```rust,no_run
    /// # async fn demo(clients: Vec<lockwise::Client>) -> lockwise::Result<()> {
    /// let lock = lockwise::RedLockSet::new(&clients).lock("invoice:9");
    /// if lock.force_unlock().await? {
    ///     println!("deleted: its holder's guard is lost");
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn force_unlock(&self) -> Result<bool> {
        self.check()?;
        let calls = self
            .inner
            .nodes
            .iter()
            .map(|n| engine::force_unlock(&n.core, &n.keys));
        let mut any = false;
        let mut first_error = None;
        for answer in join_all(calls).await {
            match answer {
                Ok(deleted) => any |= deleted,
                Err(e) => {
                    first_error.get_or_insert(e);
                }
            }
        }
        match first_error {
            Some(e) if !any => Err(e),
            _ => Ok(any),
        }
    }

    /// Asks every node with `ask` and returns what a majority shows at least: the
    /// quorum-th largest answer (`false`, 0 or `None` when fewer than a majority show
    /// anything). Fails with the first node's error when too few nodes answered for a
    /// majority.
    async fn by_quorum<T, F, Fut>(&self, ask: F) -> Result<T>
    where
        T: Ord + Default,
        F: Fn(NodeLock) -> Fut,
        Fut: Future<Output = Result<T>>,
    {
        self.check()?;
        let nodes = &self.inner.nodes;
        let needed = quorum(nodes.len());
        let mut answers = Vec::new();
        let mut first_error = None;
        for answer in join_all(nodes.iter().cloned().map(ask)).await {
            match answer {
                Ok(v) => answers.push(v),
                Err(e) => {
                    first_error.get_or_insert(e);
                }
            }
        }
        if answers.len() < needed {
            return Err(first_error.unwrap_or_else(|| Error::invalid("clients", "no node")));
        }
        answers.sort_by(|a, b| b.cmp(a));
        Ok(answers.into_iter().nth(needed - 1).unwrap_or_default())
    }
}

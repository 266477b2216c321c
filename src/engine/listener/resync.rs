//! After messages may have been lost: one wakeup per channel, and the resubscription check
//! that does not take redis-rs's replay of the subscriptions on trust.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;

use super::{Channel, Shared, SubState};
use crate::backoff::{Backoff, Retries};

/// Longest pause between two attempts to subscribe a channel again that waiters use; also
/// how often those waiters look at their lock themselves while it cannot be subscribed.
const REPAIR_MAX_DELAY: Duration = Duration::from_secs(1);

impl Shared {
    /// After messages may have been lost: wakes one waiter of every channel, to look at its
    /// lock again. One is what a lost unlock message would have woken (`notify_one`): if the
    /// lock is free it takes it, and its own unlock wakes the next waiter; if not, the
    /// holder's unlock will publish. Waking every waiter instead sent one lock script call
    /// per waiter, twice per reconnect: with thousands of waiters and repeated connection
    /// kills, that burst queued ahead of every real handoff (on the client's command
    /// connection and in Redis), and locks stayed free for 0.5-2 s while waited for, also
    /// after the faults stopped. (A lock kind whose unlock wakes all waiters, e.g. readers,
    /// must pass the wakeup on among them.)
    pub(super) fn wake_one_each(&self) {
        for c in self.channels.iter() {
            c.notify.notify_one();
        }
    }

    /// After a reconnect: wait until the manager has replayed the subscriptions (any command
    /// completes only after that), then wake one waiter per channel again, repair what the
    /// replay missed, and drop idle channels.
    pub(super) async fn resync(self: Arc<Self>) {
        let mut seen;
        loop {
            seen = self.disconnects.load(Ordering::SeqCst);
            let mut pauses = Retries::new(Backoff::new(
                Duration::from_millis(10),
                Duration::from_secs(1),
            ));
            loop {
                // Bounded: a connection waiting out its reconnect backoff (or replaced by a
                // Sentinel switch meanwhile) must not hold up the resync.
                let ping = tokio::time::timeout(Duration::from_secs(1), self.conn().ping()).await;
                if matches!(ping, Ok(Ok(()))) {
                    break;
                }
                tokio::time::sleep(pauses.next()).await;
                if Arc::strong_count(&self) == 1 {
                    self.resyncing.store(false, Ordering::SeqCst);
                    return; // the client is gone
                }
            }
            self.resyncing.store(false, Ordering::SeqCst);
            if self.disconnects.load(Ordering::SeqCst) == seen {
                break;
            }
            // Another disconnect came while we checked: its messages may be lost too. Go
            // again, unless that disconnect's handler already started a resync.
            if self.resyncing.swap(true, Ordering::SeqCst) {
                return;
            }
        }
        super::super::observe::resubscribed();
        self.wake_one_each();
        // redis-rs replayed the subscriptions it had on record, but ignores the replies: the
        // server may have refused them (NOPERM after an ACL change; one refused channel fails
        // the whole replayed SUBSCRIBE), and a subscription made on a connection that was
        // replaced right after is not on record in time. The waiters of such a channel would
        // hear no unlock and sleep until their holders' TTL. So every channel in use that
        // was not confirmed since this disconnect is subscribed again (one command per
        // channel in use; SUBSCRIBE is idempotent), and one of its waiters is woken.
        let stale: Vec<(String, Arc<Channel>)> = self
            .channels
            .iter()
            .filter(|c| c.refs.load(Ordering::SeqCst) > 0 && !c.subscribed_since(seen))
            .map(|c| (c.key().clone(), c.value().clone()))
            .collect();
        // One attempt each before going on; a failed channel is retried in the background.
        let this = &self;
        futures::stream::iter(stale)
            .for_each_concurrent(32, |(name, channel)| async move {
                this.resubscribe(&name, &channel, Some(seen)).await
            })
            .await;
        // Channels released lately may have been replayed by the reconnect: give each an
        // entry (so a new waiter serializes behind us) and unsubscribe it if still idle.
        let recent: Vec<String> = {
            let recent = self.recent.lock().unwrap_or_else(|e| e.into_inner());
            recent.iter().map(|(_, name)| name.clone()).collect()
        };
        for name in recent {
            self.channels
                .entry(name)
                .or_insert_with(|| Channel::new(SubState::Unknown, ""));
        }
        let idle: Vec<(String, Arc<Channel>)> = self
            .channels
            .iter()
            .filter(|c| c.refs.load(Ordering::SeqCst) == 0)
            .map(|c| (c.key().clone(), c.value().clone()))
            .collect();
        // Retried (a later disconnect may cut some of these off), a few at a time.
        futures::stream::iter(idle)
            .for_each_concurrent(16, |(name, channel)| async move {
                this.release_channel(&name, &channel, true).await
            })
            .await;
    }

    /// Makes sure the server has `channel` subscribed on the current connection while
    /// waiters use it: after the server dropped it (`epoch: None`), or after disconnect number
    /// `epoch` (a reconnect whose replay the server may have refused, a connection switch),
    /// where a SUBSCRIBE confirmed since counts as done. An idle channel is only marked
    /// unknown, so its next waiter subscribes instead of trusting a subscription the server
    /// may not have.
    ///
    /// The first attempt is made before this returns; if it fails, the channel is tried again
    /// in the background, with a growing pause (at most [`REPAIR_MAX_DELAY`]), for as long
    /// as waiters use it, until a later disconnect's own repair takes over. Meanwhile its
    /// waiters cannot hear an unlock, so each attempt wakes one of them to look at the lock
    /// (and pass the turn on), instead of all sleeping until the holder's TTL: a channel the
    /// server refuses for good, e.g. by ACL, is polled this way.
    pub(super) async fn resubscribe(
        self: &Arc<Self>,
        name: &str,
        channel: &Arc<Channel>,
        epoch: Option<usize>,
    ) {
        if self.resubscribe_once(name, channel, epoch, 1).await {
            return;
        }
        let (this, name, channel) = (self.clone(), name.to_owned(), channel.clone());
        self.handle.spawn(async move {
            let mut pauses =
                Retries::new(Backoff::new(Duration::from_millis(50), REPAIR_MAX_DELAY));
            for attempt in 2.. {
                tokio::time::sleep(pauses.next()).await;
                if epoch.is_some_and(|e| this.disconnects.load(Ordering::SeqCst) > e) {
                    return; // a later disconnect: its resync repairs the channel
                }
                if this.resubscribe_once(&name, &channel, epoch, attempt).await {
                    return;
                }
            }
        });
    }

    /// One attempt of [`Shared::resubscribe`]; `true` when nothing is left to do.
    async fn resubscribe_once(
        &self,
        name: &str,
        channel: &Arc<Channel>,
        epoch: Option<usize>,
        attempt: u32,
    ) -> bool {
        let mut state = channel.state.lock().await;
        if channel.refs.load(Ordering::SeqCst) == 0 {
            if *state == SubState::Subscribed {
                *state = SubState::Unknown;
            }
            return true; // its release unsubscribes, or the next waiter subscribes
        }
        if *state == SubState::Subscribed && epoch.is_some_and(|e| channel.subscribed_since(e)) {
            return true; // a new waiter or another repair subscribed it since
        }
        let result = self.subscribe_locked(channel, &mut state, name).await;
        drop(state);
        // Either way a waiter looks at the lock now: an unlock published while the channel
        // was missing on the server reached nobody (see `Shared::wake_one_each`).
        channel.notify.notify_one();
        match result {
            Ok(()) => {
                let lock = &*channel.lock;
                if attempt > 1 {
                    tracing::warn!(channel = name, lock, attempt, "channel subscribed again");
                } else {
                    tracing::debug!(channel = name, lock, "channel subscribed again");
                }
                true
            }
            Err(e) => {
                if attempt == 1 {
                    tracing::warn!(
                        channel = name,
                        lock = &*channel.lock,
                        error = %e,
                        "subscribing the channel again failed; retrying, its waiters poll meanwhile"
                    );
                } else {
                    tracing::debug!(channel = name, attempt, error = %e, "resubscribe failed");
                }
                false
            }
        }
    }
}

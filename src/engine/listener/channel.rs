//! Subscribing and releasing one channel on the server: the SUBSCRIBE of a channel's first
//! waiter, and the UNSUBSCRIBE once its last share is dropped (retried, and remembered for a
//! while in case a reconnect replays it).

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use redis::RedisResult;

use super::{Channel, Shared, SubState};
use crate::backoff::jitter;

/// How long a released channel stays in [`Shared::recent`], and at most how many.
const RECENT_WINDOW: Duration = Duration::from_secs(5);
const RECENT_MAX: usize = 50_000;

impl Shared {
    /// SUBSCRIBE `name` on the current connection; `state` is the channel's, locked by the
    /// caller: unknown while the command is out, subscribed once confirmed.
    pub(super) async fn subscribe_locked(
        &self,
        channel: &Channel,
        state: &mut SubState,
        name: &str,
    ) -> RedisResult<()> {
        // Read before sending: see `Channel::subscribed_since`.
        let epoch = self.disconnects.load(Ordering::SeqCst);
        *state = SubState::Unknown;
        let result = self.bounded(self.conn().subscribe(name)).await;
        tracing::trace!(channel = name, ok = result.is_ok(), "subscribe");
        result?;
        channel.confirmed.store(epoch + 1, Ordering::SeqCst);
        *state = SubState::Subscribed;
        Ok(())
    }

    /// Unsubscribes `channel` if no waiter uses it; returns `false` when UNSUBSCRIBE failed.
    /// `force`: even if it is believed unsubscribed.
    async fn unsubscribe_if_idle(&self, name: &str, channel: &Arc<Channel>, force: bool) -> bool {
        let mut state = channel.state.lock().await;
        if channel.refs.load(Ordering::SeqCst) != 0 {
            return true; // a new waiter arrived and keeps the subscription
        }
        if force || *state != SubState::Unsubscribed {
            *state = SubState::Unknown;
            let result = self.bounded(self.conn().unsubscribe(name)).await;
            tracing::trace!(channel = name, ok = result.is_ok(), "unsubscribe");
            match result {
                Ok(()) => *state = SubState::Unsubscribed,
                Err(e) => {
                    tracing::warn!(channel = name, error = %e, "unsubscribe failed; retrying");
                    return false;
                }
            }
        }
        // Removal checks the count under the shard lock, where shares are taken: a waiter that
        // took a share meanwhile keeps the entry (and finds it unsubscribed, so it subscribes).
        self.channels.remove_if(name, |_, c| {
            Arc::ptr_eq(c, channel) && c.refs.load(Ordering::SeqCst) == 0
        });
        self.remember(name);
        true
    }

    fn remember(&self, name: &str) {
        let now = Instant::now();
        let mut recent = self.recent.lock().unwrap_or_else(|e| e.into_inner());
        while recent
            .front()
            .is_some_and(|(at, _)| now.duration_since(*at) > RECENT_WINDOW)
            || recent.len() >= RECENT_MAX
        {
            recent.pop_front();
        }
        recent.push_back((now, name.to_owned()));
    }

    /// [`Shared::unsubscribe_if_idle`], retried with backoff while it fails (a few times; a
    /// reconnect's resync retries idle channels again).
    ///
    /// `force`: send UNSUBSCRIBE even if the channel is believed unsubscribed, because the
    /// server may have it anyway (a reconnect's replay, a subscribe confirmation for it).
    pub(super) async fn release_channel(&self, name: &str, channel: &Arc<Channel>, force: bool) {
        let mut delay = Duration::from_millis(100);
        for _ in 0..5 {
            if self.unsubscribe_if_idle(name, channel, force).await {
                return;
            }
            tokio::time::sleep(jitter(delay)).await;
            delay *= 4;
        }
        tracing::debug!(channel = name, "release gave up; the next resync retries");
    }
}

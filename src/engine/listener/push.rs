//! What each push from the server does: a message wakes a waiter, an unwanted subscription
//! is dropped, a subscription the server dropped is made again, and a disconnection wakes
//! every channel and starts a resync.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use redis::{PushInfo, PushKind, Value};

use super::{Channel, Shared, SubState};
use crate::layout::{self, MessageWake};

/// At most this many local waiters are woken by one message (a Redisson semaphore's count).
const MAX_WAKE: u64 = 1024;

impl Shared {
    pub(super) fn on_push(self: &Arc<Self>, push: PushInfo) {
        if !matches!(push.kind, PushKind::Message | PushKind::SMessage) {
            tracing::trace!(kind = ?push.kind, data = ?push.data.first(), "push");
        }
        match push.kind {
            PushKind::Message | PushKind::SMessage => {
                let mut data = push.data.into_iter();
                let (Some(channel), Some(payload)) = (data.next(), data.next()) else {
                    return;
                };
                let (Some(channel), Some(payload)) = (as_bytes(&channel), as_bytes(&payload))
                else {
                    return;
                };
                if payload == self.self_id.as_bytes() {
                    return; // released by this client: its waiters were woken locally
                }
                let Ok(channel) = std::str::from_utf8(channel) else {
                    return;
                };
                if let Some(c) = self.channels.get(channel) {
                    // What the payload asks depends on the layout that wrote it
                    // (`crate::layout`).
                    match layout::message_wake(channel, payload) {
                        MessageWake::One => c.wake_for_release(),
                        MessageWake::All { next } => {
                            c.notify.notify_waiters();
                            if next {
                                c.notify.notify_one();
                            }
                        }
                        MessageWake::Up(n) => {
                            (0..n.min(MAX_WAKE)).for_each(|_| c.notify.notify_one())
                        }
                        MessageWake::Grant(left) => {
                            // A fair lock handed to this channel's waiter: it returns
                            // without a call (`Listener::take_handoff`).
                            c.handoff.store(left.saturating_add(1), Ordering::SeqCst);
                            c.wake_for_release();
                        }
                    }
                }
            }
            PushKind::Subscribe | PushKind::SSubscribe => {
                // A subscription nobody here uses: redis-rs replayed its record of
                // subscriptions after a reconnect (or a late SUBSCRIBE ran) for a channel
                // already released. Unsubscribe it, or it stays subscribed for good.
                let Some(name) = channel_of(&push) else {
                    return;
                };
                // The usual case, our own SUBSCRIBE's answer while its waiter waits, costs
                // one read of the map.
                let existing = self.channels.get(name).map(|c| c.value().clone());
                let channel = match existing {
                    Some(c) if c.refs.load(Ordering::SeqCst) > 0 => return,
                    Some(c) => c,
                    None => self
                        .channels
                        .entry(name.to_owned())
                        .or_insert_with(|| Channel::new(SubState::Unknown, ""))
                        .clone(),
                };
                if channel.refs.load(Ordering::SeqCst) == 0 {
                    tracing::debug!(channel = name, "unwanted subscription; unsubscribing");
                    let (this, name) = (self.clone(), name.to_owned());
                    self.handle
                        .spawn(async move { this.release_channel(&name, &channel, true).await });
                }
            }
            PushKind::SUnsubscribe | PushKind::Unsubscribe => {
                // Normally the answer to our own UNSUBSCRIBE, sent when nobody used the
                // channel. If waiters use it, the server dropped it (a cluster node lost the
                // slot): wake one and subscribe again, which reaches the slot's new owner.
                let Some(name) = channel_of(&push) else {
                    return;
                };
                let Some(channel) = self.channels.get(name).map(|c| c.value().clone()) else {
                    return;
                };
                if channel.refs.load(Ordering::SeqCst) > 0 {
                    tracing::debug!(channel = name, "subscription dropped by the server");
                    channel.notify.notify_one();
                    let (this, name) = (self.clone(), name.to_owned());
                    self.handle
                        .spawn(async move { this.resubscribe(&name, &channel, None).await });
                } else if let Ok(mut state) = channel.state.try_lock() {
                    // Idle and nobody changing it: the next waiter must subscribe anew. (If
                    // its lock is held, that is our own UNSUBSCRIBE or a subscribe under way,
                    // which sets the state itself.)
                    if *state == SubState::Subscribed {
                        *state = SubState::Unknown;
                    }
                }
            }
            PushKind::Disconnection => {
                tracing::warn!("subscription connection lost; waking waiters and resubscribing");
                self.disconnects.fetch_add(1, Ordering::SeqCst);
                self.wake_one_each();
                if !self.resyncing.swap(true, Ordering::SeqCst) {
                    let this = self.clone();
                    self.handle.spawn(async move { this.resync().await });
                }
            }
            _ => {}
        }
    }
}

/// The channel a (un)subscribe confirmation is about.
fn channel_of(push: &PushInfo) -> Option<&str> {
    std::str::from_utf8(push.data.first().and_then(as_bytes)?).ok()
}

fn as_bytes(v: &Value) -> Option<&[u8]> {
    match v {
        Value::BulkString(b) => Some(b),
        Value::SimpleString(s) => Some(s.as_bytes()),
        _ => None,
    }
}

//! One subscription connection per client, shared by every waiter.
//!
//! Waiters do not poll. A waiter subscribes its lock's channel (reference-counted: the first
//! waiter of a channel sends SUBSCRIBE, the last one to leave sends UNSUBSCRIBE), then waits on
//! the channel's [`Notify`]. Messages arrive as RESP3 pushes on a dedicated
//! [`ConnectionManager`]; the push handler runs on the connection's reader and only calls
//! `notify_one`, which costs nanoseconds: on the channel's `Notify`, or on the own `Notify`
//! of a local waiter that holds the lock's overtake claim ([`Claimant`], see
//! [`claim`](super::claim)). A message whose payload starts with `*` is a broadcast (a
//! countdown latch opened): it wakes every waiter of the channel.
//!
//! Subscribe and unsubscribe of one channel are serialized by a per-channel async mutex that
//! outlives the last waiter until the UNSUBSCRIBE has been answered, so a new waiter never
//! rides on a subscription that is being dropped.
//!
//! When the connection drops, messages published meanwhile are lost. The handler then wakes
//! one waiter of every channel (as the lost message would have: it retries its lock, and
//! passes the turn on with its own unlock) and, once the connection manager has reconnected
//! and replayed the subscriptions, does so again. The replay is not taken
//! on trust: redis-rs ignores its replies, and the server may have refused it (an ACL change
//! makes Redis drop the connection and refuse the whole replayed SUBSCRIBE). So every channel
//! in use without a SUBSCRIBE confirmed since the disconnect is subscribed again, and a
//! channel the server keeps refusing is retried in the background while a waiter looks at
//! the lock about once a second instead of sleeping until the holder's TTL.
//!
//! On a Redis Cluster the connection is a redis-rs cluster connection and the channels are
//! sharded (SSUBSCRIBE, Redis 7), so a message travels only within its slot's shard. redis-rs
//! replays sharded subscriptions on the owning node after reconnects and slot-map changes.
//! A node that loses a slot (failover, resharding) tells its subscribers with an unrequested
//! SUNSUBSCRIBE: a waiter is woken (it retries its lock) and the channel is subscribed
//! again, now on the new owner. Under Sentinel the listener moves to each new master with
//! [`Listener::follow`].
//!
//! # Layout
//!
//! - this file: the [`Listener`] and its per-client state, the channel table, and a waiter's
//!   [`Subscription`] share.
//! - [`conn`]: the subscription connection ([`SubConn`]), its push handler and command bounds.
//! - [`channel`]: subscribing and releasing one channel on the server.
//! - [`push`]: what each push from the server does.
//! - [`resync`]: the wakeups and the resubscription check after a reconnect.
//! - [`follow`]: moving to a new Sentinel master's connection.
//! - [`resp2`]: the subscription connection for servers without RESP3 (no `HELLO`): a
//!   dedicated pub/sub connection that reconnects itself and reports its losses as the
//!   RESP3 path does.

mod channel;
mod conn;
mod connect;
mod follow;
mod push;
mod resp2;
mod resync;

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

use dashmap::DashMap;
use redis::aio::ConnectionManagerConfig;
use tokio::runtime::Handle;
use tokio::sync::futures::Notified;
use tokio::sync::{Mutex, Notify};

use self::conn::SubConn;
use crate::error::Result;

/// The per-client subscription connection and its channel table.
pub(crate) struct Listener {
    shared: Arc<Shared>,
}

struct Shared {
    channels: DashMap<String, Arc<Channel>>,
    /// This client's id: unlock messages carrying it were already delivered locally.
    self_id: String,
    /// Longest wait for one SUBSCRIBE / UNSUBSCRIBE (the client's response timeout).
    op_timeout: Duration,
    /// Longest wait for a RESP2 subscription connection (the client's connect timeout).
    connect_timeout: Duration,
    /// Notified when the connection is replaced (Sentinel switch).
    switched: Notify,
    /// The subscription connection; replaced when a Sentinel master moves.
    conn: RwLock<Option<SubConn>>,
    handle: Handle,
    resyncing: AtomicBool,
    /// Disconnections seen so far; lets a resync notice one that happened meanwhile.
    disconnects: AtomicUsize,
    /// Channels released lately. A reconnect replays redis-rs's record of subscriptions,
    /// which can still hold a channel whose UNSUBSCRIBE raced the disconnect: after each
    /// resync these are unsubscribed again unless a waiter uses them.
    recent: std::sync::Mutex<VecDeque<(Instant, String)>>,
}

/// What the server knows about one channel, as far as this client can tell.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum SubState {
    Unsubscribed,
    Subscribed,
    /// A SUBSCRIBE or UNSUBSCRIBE failed or was cancelled midway: send it again.
    Unknown,
}

struct Channel {
    notify: Notify,
    /// Waiters holding a [`Subscription`]; changed only inside the DashMap shard lock.
    refs: AtomicUsize,
    state: Mutex<SubState>,
    /// 1 + the disconnect count ([`Shared::disconnects`]) read before the last SUBSCRIBE of
    /// this channel that the server confirmed; 0 if none. A confirmation from before the
    /// latest disconnect says nothing about the current connection: the reconnect's replay
    /// of it may have been refused (see [`Shared::resync`]).
    confirmed: AtomicUsize,
    /// The name of the lock whose waiters use the channel (empty if not given), so the
    /// logs of a resubscription name the lock.
    lock: Box<str>,
    /// The wakeups of local waiters in the lock's overtake claim queue ([`Claimant`]), with
    /// each one's place in it: usually none.
    claimants: std::sync::Mutex<Vec<(Rank, Arc<Notify>)>>,
    /// A fair lock's handoff heard on this (waiter's own) channel: 1 + the waiters left in
    /// the queue, or 0 for none (see [`Listener::take_handoff`]).
    handoff: AtomicU64,
}

impl Channel {
    fn new(state: SubState, lock: &str) -> Arc<Channel> {
        Arc::new(Channel {
            notify: Notify::new(),
            refs: AtomicUsize::new(0),
            state: Mutex::new(state),
            confirmed: AtomicUsize::new(0),
            lock: lock.into(),
            claimants: std::sync::Mutex::new(Vec::new()),
            handoff: AtomicU64::new(0),
        })
    }

    /// Wakes the waiter a release frees the lock for: the local member of the lock's
    /// overtake claim queue first in it, if there is one (only the queue's head may take the
    /// free lock, and no other local member can be it), else one waiter.
    fn wake_for_release(&self) {
        let claimants = self.claimants.lock().unwrap_or_else(|e| e.into_inner());
        match first(&claimants) {
            // If its claim ended meanwhile, it takes the lock or finds it held (its holder's
            // release wakes again); if it leaves instead, its withdrawal announces the free
            // lock (`lua/claim_drop.lua`).
            Some((_, wake)) => wake.notify_one(),
            None => self.notify.notify_one(),
        }
    }

    /// Whether the server confirmed a SUBSCRIBE of this channel sent after disconnect number
    /// `epoch`, i.e. on the connection that is current if no disconnect came since. (A
    /// SUBSCRIBE that read the count after a disconnect was counted went out on the new
    /// connection: the manager swaps connections before it reports the disconnect.)
    fn subscribed_since(&self, epoch: usize) -> bool {
        self.confirmed.load(Ordering::SeqCst) > epoch
    }
}

/// The entry of the local claimant first in the queue.
fn first(claimants: &[(Rank, Arc<Notify>)]) -> Option<&(Rank, Arc<Notify>)> {
    claimants
        .iter()
        .min_by(|(a, _), (b, _)| (a.is_none(), a).cmp(&(b.is_none(), b)))
}

/// A local waiter's place in its lock's overtake claim queue, as the server ranks it: its
/// score (server ms) and its member name, which orders equal scores (a sorted set orders
/// them by name). `None` before the server told it (the waiter was marked before the attempt
/// that queues it): ranked after every known place.
pub(crate) type Rank = Option<(i64, Arc<str>)>;

/// A local waiter in its lock's overtake claim queue, marked on the channel while alive:
/// a release wakes the first of them ([`Rank`]) through its [`Notify`].
pub(crate) struct Claimant {
    channel: Arc<Channel>,
    wake: Arc<Notify>,
}

impl Claimant {
    /// Records the waiter's place in the queue, as the server just reported it.
    pub(crate) fn rank(&self, rank: Rank) {
        let mut claimants = self
            .channel
            .claimants
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        if let Some(entry) = claimants
            .iter_mut()
            .find(|(_, w)| Arc::ptr_eq(w, &self.wake))
        {
            entry.0 = rank;
        }
    }

    /// Whether this waiter is the first of this client's in the queue: the only one of them
    /// that can be its head, and so the only one that must keep its entry alive.
    pub(crate) fn is_first(&self) -> bool {
        let claimants = self
            .channel
            .claimants
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        first(&claimants).is_some_and(|(_, w)| Arc::ptr_eq(w, &self.wake))
    }
}

impl Drop for Claimant {
    fn drop(&mut self) {
        let mut claimants = self
            .channel
            .claimants
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        let was_first = first(&claimants).is_some_and(|(_, w)| Arc::ptr_eq(w, &self.wake));
        if let Some(i) = claimants
            .iter()
            .position(|(_, w)| Arc::ptr_eq(w, &self.wake))
        {
            claimants.swap_remove(i);
        }
        // The next one is first now: it renews its entry at once (the others let theirs
        // lapse, and a renewal puts it back where it was: its score is when it began).
        if was_first {
            if let Some((_, next)) = first(&claimants) {
                next.notify_one();
            }
        }
    }
}

/// One waiter's share of a channel subscription; dropping it releases the share.
pub(crate) struct Subscription {
    shared: Arc<Shared>,
    name: String,
    channel: Arc<Channel>,
}

impl Listener {
    /// Connects the subscription connection of a standalone server or Sentinel master: a
    /// connection manager with a push sender if `client` asks for RESP3, else a dedicated
    /// RESP2 pub/sub connection.
    pub(crate) async fn connect(
        client: redis::Client,
        config: ConnectionManagerConfig,
        connect_timeout: Duration,
        response_timeout: Duration,
        self_id: String,
    ) -> Result<Listener> {
        let shared = Shared::new(self_id, response_timeout, connect_timeout);
        let conn = shared.connect_single(client, config).await?;
        shared.set_conn(conn);
        Ok(Listener { shared })
    }

    /// Connects the subscription connection of a Redis Cluster; `sharded` selects
    /// SSUBSCRIBE (Redis 7) over SUBSCRIBE.
    pub(crate) async fn connect_cluster(
        seeds: &[redis::ConnectionInfo],
        connect_timeout: Duration,
        response_timeout: Duration,
        sharded: bool,
        self_id: String,
    ) -> Result<Listener> {
        let shared = Shared::new(self_id, response_timeout, connect_timeout);
        let client = crate::deploy::cluster_client(
            seeds,
            connect_timeout,
            response_timeout,
            Some(shared.push_handler()),
        )?;
        let conn = client.get_async_connection().await?;
        shared.set_conn(SubConn::Cluster(conn, sharded));
        Ok(Listener { shared })
    }

    /// Takes a share of `channel`'s subscription, subscribing first if this is the first
    /// waiter. Returns once the server confirmed the subscription.
    ///
    /// # Cancel safety
    /// Dropping the future releases the share; the channel is unsubscribed in the background
    /// if no other waiter uses it.
    pub(crate) async fn subscribe(&self, channel: &str, lock: &str) -> Result<Subscription> {
        let entry = {
            let e = self
                .shared
                .channels
                .entry(channel.to_owned())
                .or_insert_with(|| Channel::new(SubState::Unsubscribed, lock));
            e.refs.fetch_add(1, Ordering::SeqCst);
            e.clone()
        };
        // From here on, dropping `sub` (error or cancellation) releases the share.
        let sub = Subscription {
            shared: self.shared.clone(),
            name: channel.to_owned(),
            channel: entry,
        };
        let mut state = sub.channel.state.lock().await;
        // A subscription confirmed before the latest disconnect is not trusted: the replay
        // after the reconnect may have been refused. The resync repairs it for the waiters
        // already there; a new waiter that comes first subscribes itself.
        let epoch = self.shared.disconnects.load(Ordering::SeqCst);
        if *state != SubState::Subscribed || !sub.channel.subscribed_since(epoch) {
            let shared = &self.shared;
            let mut result = shared
                .subscribe_locked(&sub.channel, &mut state, channel)
                .await;
            if matches!(&result, Err(e) if e.is_io_error() || e.is_connection_dropped()) {
                // The connection manager reconnects in the background after an I/O error;
                // SUBSCRIBE is idempotent, so one more try rides on the new connection.
                result = shared
                    .subscribe_locked(&sub.channel, &mut state, channel)
                    .await;
            }
            result?;
        }
        drop(state);
        Ok(sub)
    }

    /// Wakes one local waiter of `channel`, if any (used right after a local unlock, so the
    /// handoff inside one client does not wait for the pub/sub echo).
    pub(crate) fn notify_local(&self, channel: &str) {
        if let Some(c) = self.shared.channels.get(channel) {
            c.wake_for_release();
        }
    }

    /// Marks a waiter of `channel` (at `rank` in the queue) as a member of its lock's
    /// overtake claim queue (see [`claim`](crate::engine::claim)): a release wakes the member of
    /// this client first in the queue, through its `wake`, until its mark is dropped. `None`
    /// while the channel has no subscription (the claim was staked by the first attempt,
    /// before the waiter subscribed: ask again at the next attempt).
    pub(crate) fn claimant(
        &self,
        channel: &str,
        wake: &Arc<Notify>,
        rank: Rank,
    ) -> Option<Claimant> {
        let channel = self.shared.channels.get(channel)?.clone();
        channel
            .claimants
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push((rank, wake.clone()));
        Some(Claimant {
            channel,
            wake: wake.clone(),
        })
    }
}

impl Listener {
    /// Takes the handoff heard on `channel` (a fair waiter's own channel): `Some(n)` when a
    /// release gave this waiter the lock, with `n` waiters left in the queue
    /// (`lua/fair_queue.lua`'s `hand_over`); `None` when none was heard since the last take.
    pub(crate) fn take_handoff(&self, channel: &str) -> Option<u64> {
        let c = self.shared.channels.get(channel)?;
        c.handoff.swap(0, Ordering::SeqCst).checked_sub(1)
    }

    /// Wakes every local waiter of `channel` now (a latch found open, so its waiters need
    /// not wait for a wakeup that a subscription loss may have swallowed).
    pub(crate) fn notify_all(&self, channel: &str) {
        if let Some(c) = self.shared.channels.get(channel) {
            c.notify.notify_waiters();
        }
    }
}

impl Subscription {
    /// Wakes one waiter of this channel in this client (passing on a wakeup).
    pub(crate) fn notify_one(&self) {
        self.channel.notify.notify_one();
    }

    /// A future that completes on the next wakeup for this channel. Call
    /// [`Notified::enable`] on it before retrying the lock so no wakeup is lost.
    pub(crate) fn notified(&self) -> Notified<'_> {
        self.channel.notify.notified()
    }
}

impl Drop for Subscription {
    fn drop(&mut self) {
        if self.channel.refs.fetch_sub(1, Ordering::SeqCst) == 1 {
            let shared = self.shared.clone();
            let name = std::mem::take(&mut self.name);
            let channel = self.channel.clone();
            self.shared
                .handle
                .spawn(async move { shared.release_channel(&name, &channel, false).await });
        }
    }
}

impl Shared {
    fn new(self_id: String, op_timeout: Duration, connect_timeout: Duration) -> Arc<Shared> {
        Arc::new(Shared {
            op_timeout,
            connect_timeout,
            switched: Notify::new(),
            channels: DashMap::new(),
            self_id,
            conn: RwLock::new(None),
            handle: Handle::current(),
            resyncing: AtomicBool::new(false),
            disconnects: AtomicUsize::new(0),
            recent: std::sync::Mutex::new(VecDeque::new()),
        })
    }
}

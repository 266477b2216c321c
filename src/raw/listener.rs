//! One subscription connection per client, shared by every waiter.
//!
//! Waiters do not poll. A waiter subscribes its lock's channel (reference-counted: the first
//! waiter of a channel sends SUBSCRIBE, the last one to leave sends UNSUBSCRIBE), then waits on
//! the channel's [`Notify`]. Messages arrive as RESP3 pushes on a dedicated
//! [`ConnectionManager`]; the push handler runs on the connection's reader and only calls
//! `notify_one`, which costs nanoseconds.
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

use std::collections::VecDeque;

use futures::StreamExt;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

use dashmap::DashMap;
use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::cluster_async::ClusterConnection;
use redis::{PushInfo, PushKind, RedisResult, Value};
use tokio::runtime::Handle;
use tokio::sync::futures::Notified;
use tokio::sync::{Mutex, Notify};

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

/// How long a released channel stays in [`Shared::recent`], and at most how many.
const RECENT_WINDOW: Duration = Duration::from_secs(5);
const RECENT_MAX: usize = 50_000;

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
}

impl Channel {
    fn new(state: SubState) -> Arc<Channel> {
        Arc::new(Channel {
            notify: Notify::new(),
            refs: AtomicUsize::new(0),
            state: Mutex::new(state),
            confirmed: AtomicUsize::new(0),
        })
    }

    /// Whether the server confirmed a SUBSCRIBE of this channel sent after disconnect number
    /// `epoch`, i.e. on the connection that is current if no disconnect came since. (A
    /// SUBSCRIBE that read the count after a disconnect was counted went out on the new
    /// connection: the manager swaps connections before it reports the disconnect.)
    fn subscribed_since(&self, epoch: usize) -> bool {
        self.confirmed.load(Ordering::SeqCst) > epoch
    }
}

/// Longest pause between two attempts to subscribe a channel again that waiters use; also
/// how often those waiters look at their lock themselves while it cannot be subscribed.
const REPAIR_MAX_DELAY: Duration = Duration::from_secs(1);

/// One waiter's share of a channel subscription; dropping it releases the share.
pub(crate) struct Subscription {
    shared: Arc<Shared>,
    name: String,
    channel: Arc<Channel>,
}

impl Listener {
    /// Connects the subscription connection of a standalone server or Sentinel master.
    pub(crate) async fn connect(
        client: redis::Client,
        config: ConnectionManagerConfig,
        response_timeout: Duration,
        self_id: String,
    ) -> Result<Listener> {
        let shared = Shared::new(self_id, response_timeout);
        let conn =
            ConnectionManager::new_with_config(client, shared.manager_config(config)).await?;
        shared.set_conn(SubConn::Single(conn));
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
        let shared = Shared::new(self_id, response_timeout);
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

    /// Follows a Sentinel master: each client sent on `masters` gets a new subscription
    /// connection, and every channel in use is subscribed there again (see
    /// [`Shared::switch`]). Runs until the sender is dropped.
    pub(crate) fn follow(
        &self,
        mut masters: tokio::sync::watch::Receiver<redis::Client>,
        config: ConnectionManagerConfig,
    ) {
        let weak = Arc::downgrade(&self.shared);
        masters.mark_unchanged();
        tokio::spawn(async move {
            while masters.changed().await.is_ok() {
                let client = masters.borrow_and_update().clone();
                let Some(shared) = weak.upgrade() else {
                    return;
                };
                let config = shared.manager_config(config.clone());
                match ConnectionManager::new_with_config(client, config).await {
                    Ok(conn) => shared.switch(SubConn::Single(conn)).await,
                    Err(e) => tracing::warn!(
                        error = %e,
                        "could not connect the subscription connection to the new master"
                    ),
                }
            }
        });
    }

    /// Takes a share of `channel`'s subscription, subscribing first if this is the first
    /// waiter. Returns once the server confirmed the subscription.
    ///
    /// # Cancel safety
    /// Dropping the future releases the share; the channel is unsubscribed in the background
    /// if no other waiter uses it.
    pub(crate) async fn subscribe(&self, channel: &str) -> Result<Subscription> {
        let entry = {
            let e = self
                .shared
                .channels
                .entry(channel.to_owned())
                .or_insert_with(|| Channel::new(SubState::Unsubscribed));
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
            c.notify.notify_one();
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
    fn new(self_id: String, op_timeout: Duration) -> Arc<Shared> {
        Arc::new(Shared {
            op_timeout,
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

    /// `config` with this listener's push handler and automatic resubscription.
    fn manager_config(
        self: &Arc<Self>,
        config: ConnectionManagerConfig,
    ) -> ConnectionManagerConfig {
        config
            .set_push_sender(self.push_handler())
            .set_automatic_resubscription()
    }

    /// The push sender of a subscription connection: hands every push to [`Shared::on_push`]
    /// while the listener lives.
    fn push_handler(
        self: &Arc<Self>,
    ) -> impl Fn(PushInfo) -> Result<(), ()> + Send + Sync + 'static {
        let weak = Arc::downgrade(self);
        move |push: PushInfo| {
            if let Some(shared) = weak.upgrade() {
                shared.on_push(push);
            }
            Ok(())
        }
    }

    /// `op` within the response timeout. A connection that waits out its reconnect backoff
    /// (server down, or a Sentinel master that moved away) would otherwise keep the
    /// channel's lock, and every waiter of the channel, for seconds.
    async fn bounded(
        &self,
        op: impl std::future::Future<Output = RedisResult<()>>,
    ) -> RedisResult<()> {
        // Created before the call, so a switch while it runs is not missed.
        let switched = self.switched.notified();
        tokio::select! {
            r = tokio::time::timeout(self.op_timeout, op) => match r {
                Ok(r) => r,
                Err(_) => Err(redis::RedisError::from(std::io::Error::new(
                    std::io::ErrorKind::TimedOut,
                    "subscription command timed out",
                ))),
            },
            // The connection was replaced (a Sentinel master moved): this call went to the
            // old one. The caller retries, or the switch resubscribes the channel.
            _ = switched => Err(redis::RedisError::from(std::io::Error::new(
                std::io::ErrorKind::ConnectionAborted,
                "subscription connection replaced while the command waited",
            ))),
        }
    }

    fn set_conn(&self, conn: SubConn) {
        *self.conn.write().unwrap_or_else(|e| e.into_inner()) = Some(conn);
    }

    fn conn(&self) -> SubConn {
        self.conn
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
            .expect("listener connection is set before use")
    }

    /// Moves to a new connection (a new Sentinel master): messages published meanwhile may
    /// be lost, so one waiter per channel is woken; channels in use are subscribed on the new
    /// connection, then one waiter per channel is woken again.
    async fn switch(self: &Arc<Self>, conn: SubConn) {
        self.set_conn(conn);
        self.switched.notify_waiters();
        let epoch = self.disconnects.fetch_add(1, Ordering::SeqCst) + 1;
        self.wake_one_each();
        // Every channel, idle ones too: an idle channel still marked subscribed (its release
        // pending) must not let its next waiter skip subscribing on the new connection.
        let all: Vec<(String, Arc<Channel>)> = self
            .channels
            .iter()
            .map(|c| (c.key().clone(), c.value().clone()))
            .collect();
        let this = &self;
        futures::stream::iter(all)
            .for_each_concurrent(16, |(name, channel)| async move {
                this.resubscribe(&name, &channel, Some(epoch)).await
            })
            .await;
        self.wake_one_each();
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
    async fn resubscribe(
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
            let mut delay = Duration::from_millis(50);
            for attempt in 2.. {
                tokio::time::sleep(delay).await;
                delay = (delay * 2).min(REPAIR_MAX_DELAY);
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
                if attempt > 1 {
                    tracing::warn!(channel = name, attempt, "channel subscribed again");
                }
                true
            }
            Err(e) => {
                if attempt == 1 {
                    tracing::warn!(
                        channel = name,
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

    /// SUBSCRIBE `name` on the current connection; `state` is the channel's, locked by the
    /// caller: unknown while the command is out, subscribed once confirmed.
    async fn subscribe_locked(
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
    async fn release_channel(&self, name: &str, channel: &Arc<Channel>, force: bool) {
        let mut delay = Duration::from_millis(100);
        for _ in 0..5 {
            if self.unsubscribe_if_idle(name, channel, force).await {
                return;
            }
            tokio::time::sleep(delay).await;
            delay *= 4;
        }
        tracing::debug!(channel = name, "release gave up; the next resync retries");
    }

    fn on_push(self: &Arc<Self>, push: PushInfo) {
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
                    c.notify.notify_one();
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
                        .or_insert_with(|| Channel::new(SubState::Unknown))
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

    /// After messages may have been lost: wakes one waiter of every channel, to look at its
    /// lock again. One is what a lost unlock message would have woken (`notify_one`): if the
    /// lock is free it takes it, and its own unlock wakes the next waiter; if not, the
    /// holder's unlock will publish. Waking every waiter instead sent one lock script call
    /// per waiter, twice per reconnect: with thousands of waiters and repeated connection
    /// kills, that burst queued ahead of every real handoff (on the client's command
    /// connection and in Redis), and locks stayed free for 0.5-2 s while waited for, also
    /// after the faults stopped. (A lock kind whose unlock wakes all waiters, e.g. readers,
    /// must pass the wakeup on among them.)
    fn wake_one_each(&self) {
        for c in self.channels.iter() {
            c.notify.notify_one();
        }
    }

    /// After a reconnect: wait until the manager has replayed the subscriptions (any command
    /// completes only after that), then wake one waiter per channel again, repair what the
    /// replay missed, and drop idle channels.
    async fn resync(self: Arc<Self>) {
        let mut seen;
        loop {
            seen = self.disconnects.load(Ordering::SeqCst);
            let mut delay = Duration::from_millis(10);
            loop {
                // Bounded: a connection waiting out its reconnect backoff (or replaced by a
                // Sentinel switch meanwhile) must not hold up the resync.
                let ping = tokio::time::timeout(Duration::from_secs(1), self.conn().ping()).await;
                if matches!(ping, Ok(Ok(()))) {
                    break;
                }
                tokio::time::sleep(delay).await;
                delay = (delay * 2).min(Duration::from_secs(1));
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
        tracing::warn!("subscription connection restored; resubscribing");
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
                .or_insert_with(|| Channel::new(SubState::Unknown));
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

/// The subscription connection of one deployment. Cheap to clone.
#[derive(Clone)]
enum SubConn {
    /// A standalone server or the current Sentinel master.
    Single(ConnectionManager),
    /// A Redis Cluster; `true`: sharded channels (SSUBSCRIBE).
    Cluster(ClusterConnection, bool),
}

impl SubConn {
    async fn subscribe(&mut self, channel: &str) -> RedisResult<()> {
        match self {
            SubConn::Single(c) => c.subscribe(channel).await,
            SubConn::Cluster(c, true) => c.ssubscribe(channel).await,
            SubConn::Cluster(c, false) => c.subscribe(channel).await,
        }
    }

    async fn unsubscribe(&mut self, channel: &str) -> RedisResult<()> {
        match self {
            SubConn::Single(c) => c.unsubscribe(channel).await,
            SubConn::Cluster(c, true) => c.sunsubscribe(channel).await,
            SubConn::Cluster(c, false) => c.unsubscribe(channel).await,
        }
    }

    /// Completes once the connection answers again (for a cluster: every node).
    async fn ping(&mut self) -> RedisResult<()> {
        let _: Value = match self {
            SubConn::Single(c) => redis::cmd("PING").query_async(c).await?,
            SubConn::Cluster(c, _) => redis::cmd("PING").query_async(c).await?,
        };
        Ok(())
    }
}

//! Following a Sentinel master: a new subscription connection for each new master, and every
//! channel subscribed there again.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use redis::aio::ConnectionManagerConfig;

use super::conn::SubConn;
use super::{Channel, Listener, Shared};
use crate::backoff::{Backoff, Retries};

impl Listener {
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
                // Until connected to the newest master: a master that was just promoted may
                // refuse connections for a moment, and giving up would leave every waiter
                // on the old server, hearing no unlock until the next failover.
                let mut pauses = Retries::new(Backoff::new(
                    Duration::from_millis(50),
                    Duration::from_secs(1),
                ));
                loop {
                    let client = masters.borrow_and_update().clone();
                    let Some(shared) = weak.upgrade() else {
                        return;
                    };
                    match shared.connect_single(client, config.clone()).await {
                        Ok(conn) => {
                            shared.switch(conn).await;
                            break;
                        }
                        Err(e) => tracing::warn!(
                            error = %e,
                            "could not connect the subscription connection to the new master; retrying"
                        ),
                    }
                    drop(shared);
                    // A newer master meanwhile is tried at once; else after a pause.
                    let _ = tokio::time::timeout(pauses.next(), masters.changed()).await;
                }
            }
        });
    }
}

impl Shared {
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
}

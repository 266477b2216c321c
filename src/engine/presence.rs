//! Presence keys: `<ns>:client:{<id>}`, one per owner id whose holds this client may write
//! (its own id, and the id of every `RedLockSet` over it), with the watchdog timeout as TTL,
//! refreshed every third of it while the client lives and deleted when it shuts down.
//!
//! They let an operator (`Admin::leaks`, `lockwise leaks`) tell a hold of a live client from
//! one whose client is gone, on every server version and deployment, without `CLIENT LIST`
//! rights: a hold whose owner id has no presence key belongs to a client that stopped
//! renewing (crashed, killed, or cut off for longer than its watchdog timeout). One `SET`
//! per id and period; the refresh shares nothing with the lock paths.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

use crate::deploy::CommandConn;
use crate::wire::keys::{Keys, Role};

/// The presence keys of one client: which ids it announces, and the task refreshing them.
pub(crate) struct Presence {
    /// Announced ids (by presence key) and how many users each has (a set's id is added once
    /// per `RedLockSet` over this client).
    keys: Arc<Mutex<HashMap<String, usize>>>,
    /// Wakes the task when an id is added, so its key is written at once.
    changed: Arc<Notify>,
    namespace: String,
    /// Cancelled once the task deleted the keys after the client's shutdown.
    done: CancellationToken,
    ttl_ms: u64,
}

impl Presence {
    /// Starts announcing `own_id` (the client's id; `None`: none yet), until `shutdown`
    /// (the hold registry's: the watchdog stopped) is cancelled. The task writes the keys every period from now on; the first write is
    /// [`write_now`](Self::write_now)'s.
    pub(crate) fn start(
        conn: CommandConn,
        namespace: &str,
        own_id: Option<&str>,
        timeout: Duration,
        shutdown: CancellationToken,
    ) -> Presence {
        let presence = Presence {
            keys: Arc::default(),
            changed: Arc::new(Notify::new()),
            namespace: namespace.to_string(),
            done: CancellationToken::new(),
            ttl_ms: timeout.as_millis().max(1) as u64,
        };
        if let Some(id) = own_id {
            lock(&presence.keys).insert(Presence::key(namespace, id), 1);
        }
        let task = Task {
            conn,
            keys: presence.keys.clone(),
            changed: presence.changed.clone(),
            ttl_ms: presence.ttl_ms,
            period: (timeout / 3).max(Duration::from_millis(1)),
        };
        let done = presence.done.clone();
        tokio::spawn(async move {
            task.run(shutdown).await;
            done.cancel();
        });
        presence
    }

    /// Writes every announced key now: `build` awaits it, so no hold of the new client is
    /// ever seen without its presence key (an operator's `leaks` would call it a leak). A
    /// failed write is logged; the task writes again next period.
    ///
    /// # Cancel safety
    /// Dropping the future may leave some keys unwritten until the task's next period.
    pub(crate) async fn write_now(&self, conn: &CommandConn) {
        let keys: Vec<String> = lock(&self.keys).keys().cloned().collect();
        write_all(conn, &keys, self.ttl_ms).await;
    }

    /// Completes once the client shut down and its presence keys were deleted.
    pub(crate) async fn gone(&self) {
        self.done.cancelled().await
    }

    /// The presence key of owner id `id` in `namespace`.
    pub(crate) fn key(namespace: &str, id: &str) -> String {
        Keys::new(namespace, id).key(Role::Client)
    }

    /// Announces `id` too (written at once, then with the others).
    pub(crate) fn add(&self, id: &str) {
        let key = Presence::key(&self.namespace, id);
        *lock(&self.keys).entry(key).or_default() += 1;
        self.changed.notify_one();
    }

    /// Stops announcing `id` once each [`add`](Self::add) of it is matched; its key then
    /// expires within the watchdog timeout.
    pub(crate) fn remove(&self, id: &str) {
        let key = Presence::key(&self.namespace, id);
        let mut keys = lock(&self.keys);
        if let Some(n) = keys.get_mut(&key) {
            *n -= 1;
            if *n == 0 {
                keys.remove(&key);
            }
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// One `SET key 1 PX ttl` per key, concurrently; failures are logged (the next period
/// writes again).
async fn write_all(conn: &CommandConn, keys: &[String], ttl_ms: u64) {
    let writes = keys.iter().map(|key| {
        let mut conn = conn.clone();
        async move {
            redis::cmd("SET")
                .arg(key)
                .arg(1)
                .arg("PX")
                .arg(ttl_ms)
                .query_async::<()>(&mut conn)
                .await
        }
    });
    for result in futures::future::join_all(writes).await {
        if let Err(e) = result {
            tracing::debug!(error = %e, "presence key not written; retried next period");
        }
    }
}

struct Task {
    conn: CommandConn,
    keys: Arc<Mutex<HashMap<String, usize>>>,
    changed: Arc<Notify>,
    ttl_ms: u64,
    period: Duration,
}

impl Task {
    /// Writes the keys every period, and at once when one is added ([`Presence::add`]);
    /// the first write is [`Presence::write_now`]'s.
    async fn run(self, shutdown: CancellationToken) {
        loop {
            tokio::select! {
                _ = shutdown.cancelled() => break,
                _ = self.changed.notified() => {}
                _ = tokio::time::sleep(self.period) => {}
            }
            let keys: Vec<String> = lock(&self.keys).keys().cloned().collect();
            write_all(&self.conn, &keys, self.ttl_ms).await;
        }
        // The client is gone: its holds are no longer renewed, so neither is its presence.
        let keys: Vec<String> = lock(&self.keys).drain().map(|(k, _)| k).collect();
        for key in keys {
            let _ = redis::cmd("DEL")
                .arg(&key)
                .query_async::<()>(&mut self.conn.clone())
                .await;
        }
    }
}

//! The follower task (checks, periodic and on request) and the `+switch-master` watcher.
//! Both hold the master only weakly while they wait, and end once the client is dropped.

use std::sync::{Arc, Weak};
use std::time::Duration;

use futures::StreamExt;
use redis::RedisResult;

use super::master::{Outcome, SentinelMaster};
use crate::backoff::jitter;

/// Pause after a check that found a master it could not use yet, before the next one; also
/// the least pause after a check no sentinel answered, even when a command asks for one (so
/// commands arriving while the sentinels are down or unreachable do not run checks back to
/// back). Each is jittered to between half of it and all of it.
const RETRY_PAUSE: Duration = Duration::from_millis(100);

/// Starts the follower and the watcher of `master`.
pub(super) fn start(master: &Arc<SentinelMaster>) {
    tokio::spawn(run_checks(Arc::downgrade(master), master.wanted.clone()));
    tokio::spawn(watch_switches(Arc::downgrade(master)));
}

/// Checks every [`check_every`](super::SentinelSettings::check_every), and at once when
/// asked (`wanted`); after a check that found an unusable master, again soon; after a
/// silent one, not before [`RETRY_PAUSE`] (each retry pause jittered to half of it or
/// more, so a fleet's clients do not ask the sentinels in step).
async fn run_checks(master: Weak<SentinelMaster>, wanted: Arc<tokio::sync::Notify>) {
    let mut pause = match master.upgrade() {
        Some(m) => m.settings.check_every(),
        None => return,
    };
    loop {
        let waited = tokio::time::timeout(pause, wanted.notified()).await;
        let Some(m) = master.upgrade() else {
            return;
        };
        if waited.is_err() {
            tracing::trace!(master = %m.settings.master_name, "sentinel: periodic check");
        }
        let every = m.settings.check_every();
        let outcome = m.check().await;
        drop(m);
        pause = match outcome {
            Outcome::Confirmed => every,
            Outcome::Unusable => jitter(RETRY_PAUSE),
            Outcome::Silent => {
                tokio::time::sleep(jitter(RETRY_PAUSE.min(every))).await;
                every.saturating_sub(RETRY_PAUSE)
            }
        };
    }
}

/// Listens for `+switch-master` on one sentinel at a time (the next one if it goes away) and
/// has the master checked at once when ours is announced: the old master is in doubt from
/// that moment. Ends when the client is dropped.
async fn watch_switches(master: Weak<SentinelMaster>) {
    let mut next = 0usize;
    loop {
        let Some(m) = master.upgrade() else {
            return;
        };
        let sentinel = m.settings.sentinels[next % m.settings.sentinels.len()].clone();
        let name = m.settings.master_name.clone();
        let connect_timeout = m.settings.connect_timeout;
        drop(m);
        next += 1;
        let subscribed = async {
            let mut pubsub = redis::Client::open(sentinel)?.get_async_pubsub().await?;
            pubsub.subscribe("+switch-master").await?;
            RedisResult::Ok(pubsub)
        };
        let pubsub = match tokio::time::timeout(connect_timeout, subscribed).await {
            Ok(Ok(p)) => p,
            _ => {
                tokio::time::sleep(jitter(Duration::from_millis(200))).await;
                continue;
            }
        };
        // A switch may have happened while no sentinel was watched.
        if let Some(m) = master.upgrade() {
            m.wanted.notify_one();
        }
        let mut messages = pubsub.into_on_message();
        loop {
            // Wake up now and then to notice a dropped client.
            let msg = match tokio::time::timeout(Duration::from_secs(1), messages.next()).await {
                Ok(Some(msg)) => msg,
                Ok(None) => break, // the sentinel went away: watch the next one
                Err(_) if master.strong_count() == 0 => return,
                Err(_) => continue,
            };
            // "<name> <old ip> <old port> <new ip> <new port>"
            let payload: String = msg.get_payload().unwrap_or_default();
            if payload.split(' ').next() == Some(name.as_str()) {
                let Some(m) = master.upgrade() else {
                    return;
                };
                tracing::debug!(switch = %payload, "sentinel: +switch-master announced");
                m.doubt();
            }
        }
    }
}

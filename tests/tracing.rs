//! Tracing spans and events against real redis-servers, seen by a capturing
//! `tracing_subscriber` layer installed once for this binary: the `lockwise.acquire` and
//! `lockwise.release` spans with their stable fields and levels, the fencing token, the
//! `follows_from` link from a background release to the acquire that created its hold, the
//! per-lock renewal events (trace) and the lost-lock warning, both named after the lock and
//! parented to its acquire span, and contention never logged as an error. Tests run in
//! parallel; each looks only at records of its own lock names.

use std::collections::HashMap;
use std::sync::{Mutex, OnceLock};
use std::time::Duration;
use suite::OrNone;

use lockwise::Client;
use suite::kit::{within, WATCHDOG};
use suite::RedisServer;
use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id, Record};
use tracing::{Event, Level, Subscriber};
use tracing_subscriber::layer::{Context, SubscriberExt};
use tracing_subscriber::registry::LookupSpan;
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::Layer;

/// One span as the layer saw it.
#[derive(Clone, Debug)]
struct SpanRec {
    name: &'static str,
    level: Level,
    fields: HashMap<String, String>,
}

impl SpanRec {
    fn field(&self, name: &str) -> Option<&str> {
        self.fields.get(name).map(String::as_str)
    }
}

/// One event, with the span it belongs to (explicit parent or current span).
#[derive(Clone, Debug)]
struct EventRec {
    level: Level,
    fields: HashMap<String, String>,
    parent: Option<SpanRec>,
}

#[derive(Default)]
struct Captured {
    /// Live spans by id (ids are reused after a span closes).
    live: HashMap<u64, SpanRec>,
    /// Every span, as it was when it closed.
    closed: Vec<SpanRec>,
    events: Vec<EventRec>,
    /// (follower, followed), as they were when the link was made.
    follows: Vec<(SpanRec, SpanRec)>,
}

struct Capture(&'static Mutex<Captured>);

struct Fields<'a>(&'a mut HashMap<String, String>);

impl Visit for Fields<'_> {
    fn record_str(&mut self, field: &Field, value: &str) {
        self.0.insert(field.name().to_string(), value.to_string());
    }
    fn record_u64(&mut self, field: &Field, value: u64) {
        self.0.insert(field.name().to_string(), value.to_string());
    }
    fn record_i64(&mut self, field: &Field, value: i64) {
        self.0.insert(field.name().to_string(), value.to_string());
    }
    fn record_bool(&mut self, field: &Field, value: bool) {
        self.0.insert(field.name().to_string(), value.to_string());
    }
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        self.0
            .insert(field.name().to_string(), format!("{value:?}"));
    }
}

impl<S> Layer<S> for Capture
where
    S: Subscriber + for<'a> LookupSpan<'a>,
{
    fn on_new_span(&self, attrs: &Attributes<'_>, id: &Id, _: Context<'_, S>) {
        let mut fields = HashMap::new();
        attrs.record(&mut Fields(&mut fields));
        let rec = SpanRec {
            name: attrs.metadata().name(),
            level: *attrs.metadata().level(),
            fields,
        };
        self.0.lock().unwrap().live.insert(id.into_u64(), rec);
    }

    fn on_record(&self, id: &Id, values: &Record<'_>, _: Context<'_, S>) {
        if let Some(rec) = self.0.lock().unwrap().live.get_mut(&id.into_u64()) {
            values.record(&mut Fields(&mut rec.fields));
        }
    }

    fn on_follows_from(&self, id: &Id, follows: &Id, _: Context<'_, S>) {
        let mut c = self.0.lock().unwrap();
        let pair = (
            c.live.get(&id.into_u64()).cloned(),
            c.live.get(&follows.into_u64()).cloned(),
        );
        if let (Some(a), Some(b)) = pair {
            c.follows.push((a, b));
        }
    }

    fn on_event(&self, event: &Event<'_>, ctx: Context<'_, S>) {
        let mut fields = HashMap::new();
        event.record(&mut Fields(&mut fields));
        let parent_id = ctx.event_span(event).map(|s| s.id().into_u64());
        let mut c = self.0.lock().unwrap();
        let parent = parent_id.and_then(|id| c.live.get(&id).cloned());
        c.events.push(EventRec {
            level: *event.metadata().level(),
            fields,
            parent,
        });
    }

    fn on_close(&self, id: Id, _: Context<'_, S>) {
        let mut c = self.0.lock().unwrap();
        if let Some(rec) = c.live.remove(&id.into_u64()) {
            c.closed.push(rec);
        }
    }
}

fn captured() -> &'static Mutex<Captured> {
    static CAPTURED: OnceLock<&'static Mutex<Captured>> = OnceLock::new();
    CAPTURED.get_or_init(|| {
        let store: &'static Mutex<Captured> = Box::leak(Box::default());
        tracing_subscriber::registry().with(Capture(store)).init();
        store
    })
}

/// Every span (live or closed) named `name` on the lock `lock`.
fn spans(name: &str, lock: &str) -> Vec<SpanRec> {
    let c = captured().lock().unwrap();
    c.live
        .values()
        .chain(c.closed.iter())
        .filter(|s| s.name == name && s.field("lock") == Some(lock))
        .cloned()
        .collect()
}

/// Events whose `lock` field is `lock`.
fn events(lock: &str) -> Vec<EventRec> {
    let c = captured().lock().unwrap();
    c.events
        .iter()
        .filter(|e| e.fields.get("lock").map(String::as_str) == Some(lock))
        .cloned()
        .collect()
}

/// Events whose span is an acquire or release span of `lock`.
fn events_in(lock: &str) -> Vec<EventRec> {
    let c = captured().lock().unwrap();
    c.events
        .iter()
        .filter(|e| e.parent.as_ref().and_then(|p| p.field("lock")) == Some(lock))
        .cloned()
        .collect()
}

fn message(e: &EventRec) -> &str {
    e.fields.get("message").map_or("", String::as_str)
}

async fn client(server: &RedisServer, test: &str, watchdog: Duration) -> Client {
    captured();
    suite::kit::client_with(server, test, watchdog).await
}

/// After each test: no key without a TTL but fencing counters, no channel subscribed.
async fn clean(server: &RedisServer, client: &Client) {
    let mut c = server.conn().await;
    for (key, pttl) in suite::kit::keys_in(&mut c, client.namespace()).await {
        assert!(pttl != -1 || key.contains(":fence:"), "{key} has no TTL");
    }
    assert!(
        suite::no_channels_within(&c, Duration::from_secs(3)).await,
        "channels left subscribed"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acquire_and_release_spans_carry_stable_fields() {
    let server = RedisServer::start();
    let client = client(&server, "t_fields", WATCHDOG).await;
    let other = suite::kit::peer(&server, &client).await;
    let lock = client.lock("t-fields");
    let guard = within(5, lock.lock()).await.unwrap();
    let owner = guard.owner().to_string();
    // Contention: a peer's try_lock times out.
    let none = within(
        5,
        other
            .lock("t-fields")
            .try_lock(Duration::from_millis(100), None),
    )
    .await
    .or_none()
    .unwrap();
    assert!(none.is_none());
    within(5, guard.unlock()).await.unwrap();

    let acquires = spans("lockwise.acquire", "t-fields");
    assert_eq!(acquires.len(), 2, "{acquires:?}");
    let mine = acquires
        .iter()
        .find(|s| s.field("owner") == Some(&owner))
        .expect("the acquire span names the owner");
    assert_eq!(mine.level, Level::DEBUG);
    assert_eq!(mine.field("kind"), Some("reentrant"));
    assert_eq!(mine.field("outcome"), Some("acquired"));
    assert_eq!(mine.field("holds"), Some("1"));
    assert!(mine.field("waited_ms").is_some(), "{mine:?}");
    let timed_out = acquires
        .iter()
        .find(|s| s.field("owner") != Some(&owner))
        .unwrap();
    assert_eq!(timed_out.field("outcome"), Some("timeout"));
    assert!(
        timed_out
            .field("waited_ms")
            .unwrap()
            .parse::<u64>()
            .unwrap()
            >= 99
    );

    let releases = spans("lockwise.release", "t-fields");
    assert_eq!(releases.len(), 1, "{releases:?}");
    let release = &releases[0];
    assert_eq!(release.level, Level::DEBUG);
    assert_eq!(release.field("kind"), Some("reentrant"));
    assert_eq!(release.field("owner"), Some(owner.as_str()));
    assert_eq!(release.field("outcome"), Some("released"));
    assert_eq!(release.field("remaining"), Some("0"));
    assert_eq!(release.field("background"), Some("false"));

    // acquire / release / timeout are debug; contention is never a warning or an error.
    let levels: Vec<Level> = events_in("t-fields").iter().map(|e| e.level).collect();
    assert!(!levels.is_empty());
    assert!(levels.contains(&Level::DEBUG), "{levels:?}");
    assert!(levels.iter().all(|l| *l >= Level::DEBUG), "{levels:?}");
    clean(&server, &client).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fenced_acquire_records_its_token_and_a_fair_one_its_queue() {
    let server = RedisServer::start();
    let client = client(&server, "t_token", WATCHDOG).await;
    let guard = within(5, client.fenced_lock("t-token").lock())
        .await
        .unwrap();
    let token = guard.token();
    within(5, guard.unlock()).await.unwrap();
    let acquire = spans("lockwise.acquire", "t-token");
    assert_eq!(acquire.len(), 1);
    assert_eq!(acquire[0].field("kind"), Some("fenced"));
    assert_eq!(
        acquire[0].field("fencing_token"),
        Some(token.to_string().as_str())
    );

    let guard = within(5, client.fair_lock("t-fair").lock()).await.unwrap();
    within(5, guard.unlock()).await.unwrap();
    let acquire = spans("lockwise.acquire", "t-fair");
    assert_eq!(acquire[0].field("kind"), Some("fair"));
    assert_eq!(
        acquire[0].field("fencing_token"),
        None,
        "only fenced locks have tokens"
    );
    let queued: Vec<_> = events_in("t-fair")
        .into_iter()
        .filter(|e| e.fields.contains_key("queued"))
        .collect();
    assert_eq!(queued.len(), 1);
    assert_eq!(queued[0].fields["queued"], "0");
    clean(&server, &client).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_background_release_follows_from_its_acquire() {
    let server = RedisServer::start();
    let client = client(&server, "t_follows", WATCHDOG).await;
    let lock = client.lock("t-follows");
    let guard = within(5, lock.lock()).await.unwrap();
    let owner = guard.owner().to_string();
    drop(guard);
    assert!(
        suite::eventually(Duration::from_secs(3), || async {
            !lock.is_locked().await.unwrap()
        })
        .await
    );
    let release = suite::eventually(Duration::from_secs(3), || async {
        spans("lockwise.release", "t-follows")
            .iter()
            .any(|s| s.field("outcome") == Some("released"))
    })
    .await;
    assert!(release, "{:?}", spans("lockwise.release", "t-follows"));
    let links: Vec<(SpanRec, SpanRec)> = captured()
        .lock()
        .unwrap()
        .follows
        .iter()
        .filter(|(a, _)| a.field("lock") == Some("t-follows"))
        .cloned()
        .collect();
    assert_eq!(links.len(), 1, "{links:?}");
    let (release, acquire) = &links[0];
    assert_eq!(release.name, "lockwise.release");
    assert_eq!(release.field("background"), Some("true"));
    assert_eq!(acquire.name, "lockwise.acquire");
    assert_eq!(acquire.field("lock"), Some("t-follows"));
    assert_eq!(acquire.field("owner"), Some(owner.as_str()));
    assert_eq!(acquire.field("outcome"), Some("acquired"));
    clean(&server, &client).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn renewals_are_trace_events_named_after_the_lock() {
    let server = RedisServer::start();
    // Renewals every 200 ms.
    let client = client(&server, "t_renew", Duration::from_millis(600)).await;
    let guard = within(5, client.lock("t-renew").lock()).await.unwrap();
    tokio::time::sleep(Duration::from_millis(1_000)).await;
    within(5, guard.unlock()).await.unwrap();
    let renewals: Vec<EventRec> = events("t-renew")
        .into_iter()
        .filter(|e| message(e) == "lock renewed")
        .collect();
    assert!(renewals.len() >= 2, "{renewals:?}");
    for e in &renewals {
        assert_eq!(e.level, Level::TRACE);
        assert_eq!(e.fields["kind"], "reentrant");
        let parent = e.parent.as_ref().expect("parented to the acquire span");
        assert_eq!(parent.name, "lockwise.acquire");
        assert_eq!(parent.field("lock"), Some("t-renew"));
    }
    clean(&server, &client).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_lock_is_a_warning_that_names_the_lock() {
    let server = RedisServer::start();
    let client = client(&server, "t_lost", Duration::from_millis(600)).await;
    let lock = client.lock("t-lost");
    let guard = within(5, lock.lock()).await.unwrap();
    let mut c = server.conn().await;
    let _: () = redis::cmd("DEL")
        .arg(lock.key())
        .query_async(&mut c)
        .await
        .unwrap();
    within(5, guard.lost().cancelled()).await;
    let lost: Vec<EventRec> = events("t-lost")
        .into_iter()
        .filter(|e| message(e) == "lock lost")
        .collect();
    assert_eq!(lost.len(), 1, "{lost:?}");
    assert_eq!(lost[0].level, Level::WARN);
    assert_eq!(lost[0].fields["key"], lock.key());
    assert_eq!(lost[0].fields["kind"], "reentrant");
    assert_eq!(
        lost[0].parent.as_ref().map(|p| p.name),
        Some("lockwise.acquire")
    );
    assert!(within(5, guard.unlock()).await.unwrap_err().is_not_held());
    // Only the loss is a warning; nothing about this lock was an error.
    assert!(events("t-lost")
        .iter()
        .chain(events_in("t-lost").iter())
        .all(|e| e.level != Level::ERROR));
    clean(&server, &client).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_resubscription_names_the_lock_of_its_channel() {
    let server = RedisServer::start();
    let client = client(&server, "t_resub", WATCHDOG).await;
    let other = suite::kit::peer(&server, &client).await;
    let guard = within(5, other.lock("t-resub").lock()).await.unwrap();
    let lock = client.lock("t-resub");
    let waiter = tokio::spawn(async move { lock.lock().await.map(|g| g.unlock()) });
    let mut c = server.conn().await;
    let channel = format!("{}:channel:{{t-resub}}", client.namespace());
    assert!(
        suite::eventually(Duration::from_secs(5), || {
            let mut c = c.clone();
            let channel = channel.clone();
            async move { suite::numsub(&mut c, &channel).await >= 1 }
        })
        .await
    );
    assert!(suite::kill_pubsub(&mut c).await >= 1);
    let named = suite::eventually(Duration::from_secs(5), || async {
        events("t-resub")
            .iter()
            .any(|e| message(e) == "channel subscribed again" && e.fields["channel"] == channel)
    })
    .await;
    assert!(named, "{:?}", events("t-resub"));
    let restored = captured().lock().unwrap().events.iter().any(|e| {
        e.level == Level::WARN && message(e) == "subscription connection restored; resubscribing"
    });
    assert!(restored, "the reconnect itself is a warning");
    within(5, guard.unlock()).await.unwrap();
    within(10, within(10, waiter).await.unwrap().unwrap())
        .await
        .unwrap();
    clean(&server, &client).await;
}

//! One name, one lock: every mutex kind of a name (`RLock`, `SpinLock`, `FencedLock`, `FairLock`, a
//! `MultiLock` member, a `RedLock` on its node) uses the same lock hash, so a holder of one
//! kind excludes every other kind, and its release wakes their waiters by pub/sub (not by
//! the holder's TTL).

use suite::checker;

use std::time::{Duration, Instant};
use suite::OrNone;

use futures::future::BoxFuture;
use futures::FutureExt;
use lockwise::{Client, RedLockSet};
use suite::RedisServer;

use checker::{assert_clean, History};

/// Watchdog timeout of the clients: a waiter woken only by the holder's TTL would wait this
/// long, so a wakeup well within it came by pub/sub.
const WATCHDOG: Duration = Duration::from_secs(10);

#[derive(Clone, Copy, Debug)]
enum Kind {
    Plain,
    Spin,
    Fenced,
    Fair,
    Multi,
    Redlock,
}

const KINDS: [Kind; 6] = [
    Kind::Plain,
    Kind::Spin,
    Kind::Fenced,
    Kind::Fair,
    Kind::Multi,
    Kind::Redlock,
];

/// A held lock of some kind, released by `unlock`.
struct Held {
    owner: String,
    unlock: BoxFuture<'static, lockwise::Result<()>>,
}

/// Acquires `name` as `kind`, waiting at most `wait`; `None` on timeout.
async fn take(client: &Client, kind: Kind, name: &str, wait: Duration) -> Option<Held> {
    try_take(client, kind, name, wait).await.unwrap()
}

/// [`take`], with the error of the call.
async fn try_take(
    client: &Client,
    kind: Kind,
    name: &str,
    wait: Duration,
) -> lockwise::Result<Option<Held>> {
    macro_rules! held {
        ($guard:expr) => {
            $guard?.map(|g| Held {
                owner: g.owner().to_string(),
                unlock: async move { g.unlock().await }.boxed(),
            })
        };
    }
    let res = match kind {
        Kind::Plain => held!(client.lock(name).try_lock(wait, None).await.or_none()),
        Kind::Spin => held!(client.spin_lock(name).try_lock(wait, None).await.or_none()),
        Kind::Fenced => held!(client
            .fenced_lock(name)
            .try_lock(wait, None)
            .await
            .or_none()),
        Kind::Fair => held!(client.fair_lock(name).try_lock(wait, None).await.or_none()),
        Kind::Multi => held!(client
            .multi_lock([name, "other-member"])
            .try_lock(wait, None)
            .await
            .or_none()),
        Kind::Redlock => held!(RedLockSet::new(std::slice::from_ref(client))
            .lock(name)
            .try_lock(wait, None)
            .await
            .or_none()),
    };
    Ok(res)
}

async fn clients(server: &RedisServer, ns: &str) -> (Client, Client) {
    let build = || async {
        Client::builder(server.url())
            .namespace(ns)
            .watchdog_timeout(WATCHDOG)
            .build()
            .await
            .unwrap()
    };
    (build().await, build().await)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_kind_excludes_every_other_kind_of_the_same_name() {
    let server = RedisServer::start();
    let ns = suite::unique_ns("same-name-excludes");
    let (a, b) = clients(&server, &ns).await;
    let mut conn = server.conn().await;
    for holder in KINDS {
        for waiter in KINDS {
            let name = format!("{holder:?}-{waiter:?}");
            let ctx = format!("{holder:?} held, {waiter:?} tries");
            let held = take(&a, holder, &name, Duration::ZERO).await.expect("free");
            assert!(
                take(&b, waiter, &name, Duration::ZERO).await.is_none(),
                "{ctx}: the other kind must wait"
            );
            // A waiter of the other kind is woken by the release, not by the TTL.
            let (b2, name2) = (b.clone(), name.clone());
            let waiting = tokio::spawn(async move {
                let started = Instant::now();
                let got = take(&b2, waiter, &name2, WATCHDOG * 2).await;
                (got, started.elapsed())
            });
            tokio::time::sleep(Duration::from_millis(200)).await;
            (held.unlock).await.unwrap();
            let (got, waited) = waiting.await.unwrap();
            let got = got.unwrap_or_else(|| panic!("{ctx}: the waiter gets the lock"));
            assert!(
                waited < WATCHDOG / 2,
                "{ctx}: woken after {waited:?}, not by the release"
            );
            assert!(!got.owner.is_empty());
            got.unlock.await.unwrap();
        }
    }
    let keys: Vec<String> = redis::cmd("KEYS")
        .arg(format!("{ns}:*"))
        .query_async(&mut conn)
        .await
        .unwrap();
    let keys: Vec<String> = keys
        .into_iter()
        .filter(|k| !suite::is_presence(k))
        .collect();
    assert!(
        keys.iter().all(|k| k.contains(":fence:")),
        "only fencing counters stay: {keys:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mixed_kinds_on_one_name_never_overlap() {
    let server = RedisServer::start();
    let ns = suite::unique_ns("same-name-mixed");
    let (a, b) = clients(&server, &ns).await;
    let hist = History::new();
    let deadline = Instant::now() + Duration::from_secs(3);
    let mut tasks = Vec::new();
    for (i, kind) in KINDS.iter().cycle().take(20).enumerate() {
        let (client, hist, kind) = (
            if i % 2 == 0 { a.clone() } else { b.clone() },
            hist.clone(),
            *kind,
        );
        tasks.push(tokio::spawn(async move {
            let me = format!("{kind:?}-{i}");
            while Instant::now() < deadline {
                let id = hist.invoke(&me, "shared");
                match try_take(&client, kind, "shared", Duration::from_millis(500)).await {
                    Ok(Some(held)) => {
                        hist.ok(&id, &held.owner, None, None);
                        tokio::time::sleep(Duration::from_millis(2)).await;
                        hist.release(&id);
                        if let Err(e) = held.unlock.await {
                            // A reply lost to a loaded machine (response timeout): the
                            // release is settled in the background.
                            assert!(e.is_retryable(), "{me}: unlock: {e:?}");
                        }
                    }
                    Ok(None) => hist.fail(&id, "timed out"),
                    // Only a lost reply may fail an acquire here; its outcome is unknown.
                    Err(e) => {
                        assert!(e.is_retryable(), "{me}: {e:?}");
                        hist.unknown(&id, &e.to_string());
                    }
                }
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    assert!(hist.ok_count() > 50, "progress: {} holds", hist.ok_count());
    assert_clean(&hist.check_overlaps());
}

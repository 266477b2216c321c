//! RESP2: a server without `HELLO` (renamed away, as on some proxies and managed services)
//! and a forced RESP2 client. Waiters must be woken by pub/sub on the dedicated RESP2
//! subscription connection, also after it is killed, and no channel may stay subscribed.

use std::time::{Duration, Instant};
use suite::OrNone;

use lockwise::{Client, Error};
use suite::{Conn, RedisServer};

/// Long enough that a waiter left to the holder's TTL fails the test's bounds by far.
const LEASE: Duration = Duration::from_secs(20);
/// A wakeup by pub/sub (or by the loss handling) comes well within this.
const WOKEN_WITHIN: Duration = Duration::from_secs(3);

fn no_hello_server() -> RedisServer {
    RedisServer::start_with(&["--rename-command", "HELLO", ""])
}

async fn client(server: &RedisServer, ns: &str) -> Client {
    Client::builder(server.url())
        .namespace(ns)
        .build()
        .await
        .expect("a server without HELLO is spoken to in RESP2")
}

fn channel(ns: &str, name: &str) -> String {
    format!("{ns}:channel:{{{name}}}")
}

async fn numsub_is(conn: &Conn, channel: &str, n: u64) -> bool {
    suite::eventually(Duration::from_secs(5), || {
        let mut c = conn.clone();
        let channel = channel.to_string();
        async move { suite::numsub(&mut c, &channel).await == n }
    })
    .await
}

/// The `resp=` field of every client connection but the inspecting one.
async fn client_protocols(conn: &mut Conn) -> Vec<String> {
    let list: String = redis::cmd("CLIENT")
        .arg("LIST")
        .query_async(conn)
        .await
        .unwrap();
    list.lines()
        .filter(|l| !l.contains("cmd=client|list"))
        .filter_map(|l| l.split(' ').find_map(|f| f.strip_prefix("resp=")))
        .map(str::to_string)
        .collect()
}

/// Waits for `name` in a task of its own; returns how long the wait took once acquired.
fn waiter(client: &Client, name: &str) -> tokio::task::JoinHandle<Duration> {
    let lock = client.lock(name).non_reentrant();
    tokio::spawn(async move {
        let started = Instant::now();
        let guard = lock
            .try_lock(Duration::from_secs(15), Some(LEASE))
            .await
            .or_none()
            .expect("waiter try_lock")
            .expect("waiter acquired within 15 s");
        let waited = started.elapsed();
        guard.unlock().await.expect("waiter unlock");
        waited
    })
}

#[tokio::test]
async fn server_without_hello_connects_and_wakes_waiters_by_pubsub() {
    let server = no_hello_server();
    let mut conn = server.conn().await;
    let hello: redis::RedisResult<redis::Value> =
        redis::cmd("HELLO").arg(3).query_async(&mut conn).await;
    assert!(hello.is_err(), "HELLO is renamed away: {hello:?}");
    let ns = suite::unique_ns("resp2-wake");
    let holder = client(&server, &ns).await;
    let other = client(&server, &ns).await;
    assert!(
        client_protocols(&mut conn).await.iter().all(|p| p == "2"),
        "every connection of the clients speaks RESP2"
    );

    let held = holder
        .lock("job")
        .lock_with_lease(LEASE)
        .await
        .expect("holder");
    let waiting = waiter(&other, "job");
    assert!(numsub_is(&conn, &channel(&ns, "job"), 1).await);
    tokio::time::sleep(Duration::from_millis(200)).await;
    let released = Instant::now();
    held.unlock().await.expect("holder unlock");
    let waited = waiting.await.unwrap();
    assert!(
        released.elapsed() < WOKEN_WITHIN,
        "the waiter acquired {:?} after the unlock (waited {waited:?}); the lease is {LEASE:?}",
        released.elapsed()
    );

    // Nothing stays subscribed once nobody waits.
    assert!(
        suite::no_channels_within(&conn, Duration::from_secs(5)).await,
        "channels left subscribed: {:?}",
        suite::active_channels(&mut conn).await
    );
}

#[tokio::test]
async fn resp2_subscription_connection_killed_while_waiting() {
    let server = no_hello_server();
    let mut conn = server.conn().await;
    let ns = suite::unique_ns("resp2-kill");
    let holder = client(&server, &ns).await;
    let other = client(&server, &ns).await;
    let ch = channel(&ns, "job");

    // Killed while waiting; the connection comes back with the channel subscribed again and
    // the next unlock wakes the waiter.
    let held = holder.lock("job").lock_with_lease(LEASE).await.unwrap();
    let waiting = waiter(&other, "job");
    assert!(numsub_is(&conn, &ch, 1).await);
    let killed: i64 = suite::kill_pubsub(&mut conn).await;
    assert!(killed >= 1, "the subscription connections were killed");
    assert!(
        numsub_is(&conn, &ch, 1).await,
        "the waiter's channel is subscribed again on the new connection"
    );
    let released = Instant::now();
    held.unlock().await.unwrap();
    waiting.await.unwrap();
    assert!(
        released.elapsed() < WOKEN_WITHIN,
        "woken {:?} after the unlock",
        released.elapsed()
    );

    // Killed right before the unlock: the message may be lost with the connection, and the
    // loss itself must wake the waiter.
    let held = holder.lock("job").lock_with_lease(LEASE).await.unwrap();
    let waiting = waiter(&other, "job");
    assert!(numsub_is(&conn, &ch, 1).await);
    let _: i64 = suite::kill_pubsub(&mut conn).await;
    let released = Instant::now();
    held.unlock().await.unwrap();
    waiting.await.unwrap();
    assert!(
        released.elapsed() < WOKEN_WITHIN,
        "woken {:?} after the unlock",
        released.elapsed()
    );

    assert!(
        suite::no_channels_within(&conn, Duration::from_secs(5)).await,
        "channels left subscribed: {:?}",
        suite::active_channels(&mut conn).await
    );
}

#[tokio::test]
async fn forced_resp2_on_a_resp3_server() {
    let server = RedisServer::start();
    let mut conn = server.conn().await;
    let ns = suite::unique_ns("resp2-forced");
    let forced = Client::builder(server.url())
        .namespace(&ns)
        .force_resp2(true)
        .build()
        .await
        .unwrap();
    let protocols = client_protocols(&mut conn).await;
    assert!(
        !protocols.is_empty() && protocols.iter().all(|p| p == "2"),
        "{protocols:?}"
    );
    // A RESP3 client and a RESP2 client hand the lock to each other by pub/sub.
    let resp3 = suite::client(&server, &ns, Duration::from_secs(30)).await;
    let held = resp3.lock("job").lock_with_lease(LEASE).await.unwrap();
    let waiting = waiter(&forced, "job");
    assert!(numsub_is(&conn, &channel(&ns, "job"), 1).await);
    let released = Instant::now();
    held.unlock().await.unwrap();
    waiting.await.unwrap();
    assert!(released.elapsed() < WOKEN_WITHIN);
}

#[tokio::test]
async fn resp2_on_a_cluster_builder_is_a_typed_error() {
    let err = Client::cluster_builder(["redis://127.0.0.1:1/"])
        .force_resp2(true)
        .build()
        .await
        .unwrap_err();
    assert!(
        matches!(
            err,
            Error::InvalidArgument {
                argument: "protocol",
                ..
            }
        ),
        "{err:?}"
    );
}

/// Many channels and repeated kills of the RESP2 subscription connection: every waiter is
/// still woken by the unlocks, and nothing stays subscribed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resp2_many_channels_survive_repeated_kills() {
    let server = no_hello_server();
    let mut conn = server.conn().await;
    let ns = suite::unique_ns("resp2-many");
    let holder = client(&server, &ns).await;
    let other = client(&server, &ns).await;
    let names: Vec<String> = (0..40).map(|i| format!("job-{i}")).collect();
    let mut held = Vec::new();
    for n in &names {
        held.push(holder.lock(n).lock_with_lease(LEASE).await.unwrap());
    }
    let waiting: Vec<_> = names
        .iter()
        .flat_map(|n| [waiter(&other, n), waiter(&other, n)])
        .collect();
    for n in &names {
        assert!(numsub_is(&conn, &channel(&ns, n), 1).await);
    }
    for _ in 0..5 {
        let _: i64 = suite::kill_pubsub(&mut conn).await;
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    for n in &names {
        assert!(
            numsub_is(&conn, &channel(&ns, n), 1).await,
            "{n} subscribed again after the kills"
        );
    }
    let released = Instant::now();
    for g in held {
        g.unlock().await.unwrap();
    }
    for w in waiting {
        w.await.unwrap();
    }
    assert!(
        released.elapsed() < Duration::from_secs(5),
        "all 80 waiters acquired {:?} after the unlocks",
        released.elapsed()
    );
    assert!(
        suite::no_channels_within(&conn, Duration::from_secs(5)).await,
        "channels left subscribed: {:?}",
        suite::active_channels(&mut conn).await
    );
}

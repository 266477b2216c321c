//! Who owns a hold: the calling task (default, reentrant), each guard alone
//! (`non_reentrant()`), or an owner the caller names (`with_owner(id)`).
//!
//! The trap this guards against is real in web services: hyper (under axum) serves every
//! request of one HTTP/1.1 keep-alive connection in one task, so a task-owned lock taken by
//! one request and handed to a spawned job is re-entered by the next request on that
//! connection. The first test runs that scenario through a real axum server and a real
//! keep-alive client connection, and checks the recorded hold intervals.

use suite::checker;

use std::sync::{Arc, Mutex};
use std::time::Duration;
use suite::OrNone;

use axum::extract::{RawQuery, State};
use axum::routing::get;
use axum::Router;
use http_body_util::{BodyExt, Empty};
use hyper::body::Bytes;
use hyper_util::rt::TokioIo;
use lockwise::{Client, Lock, LockGuard, Ownership, RLockGuard, RedLockSet};
use suite::{Conn, RedisServer};

use checker::{assert_clean, History};

const JOB: Duration = Duration::from_millis(300);

#[derive(Clone)]
struct App {
    client: Client,
    /// A Redlock set over the one server (quorum 1), for the `redlock` kind.
    set: RedLockSet,
    hist: History,
    jobs: Arc<Mutex<Vec<tokio::task::JoinHandle<()>>>>,
}

/// The handler: takes the job's lock (of the kind in the query: `rlock`, `multi` or
/// `redlock`), hands the guard to a spawned job and answers at once with the id of the task
/// that served the request.
async fn start_job(State(app): State<App>, RawQuery(query): RawQuery) -> String {
    let query = query.unwrap_or_default();
    let param = |k: &str| {
        query
            .split('&')
            .find_map(|kv| kv.strip_prefix(&format!("{k}=")))
            .unwrap_or("")
            .to_string()
    };
    let (kind, mode) = (param("kind"), param("mode"));
    match kind.as_str() {
        "multi" => take_for_job(&app, app.client.multi_lock(["job-a", "job-b"]), &mode).await,
        "redlock" => take_for_job(&app, app.set.lock("job"), &mode).await,
        _ => take_for_job(&app, app.client.lock("job"), &mode).await,
    }
    format!("{}", tokio::task::id())
}

/// Takes `lock` (made non-reentrant, or its guard detached, as `mode` says) and hands the
/// guard to a spawned job that holds it for [`JOB`]; written once for every kind through
/// the `Lock` contract.
async fn take_for_job<L: Lock>(app: &App, lock: L, mode: &str) {
    let lock = if mode == "non_reentrant" {
        lock.non_reentrant()
    } else {
        lock
    };
    let id = app.hist.invoke("handler", lock.name());
    let mut guard = lock.lock().await.expect("lock");
    if mode == "detach" {
        // The guard leaves this task: give it an owner of its own first.
        guard.detach().await.expect("detach");
    }
    app.hist.ok(&id, guard.owner(), None, None);
    let hist = app.hist.clone();
    let job = tokio::spawn(async move {
        tokio::time::sleep(JOB).await;
        hist.release(&id);
        guard.unlock().await.expect("unlock");
    });
    app.jobs.lock().unwrap().push(job);
}

/// Serves `start_job` and sends two requests over one keep-alive connection; checks that the
/// scenario is real (one task served both requests, both took the lock) and returns the
/// recorded history.
async fn two_requests_on_one_connection(mode: &str) -> History {
    two_requests(Kind::RLock, mode, Ownership::Task).await
}

/// Which kind the handler takes.
#[derive(Clone, Copy, Debug)]
enum Kind {
    RLock,
    Multi,
    RedLock,
}

/// [`two_requests_on_one_connection`] for `kind`, with a client whose handles default to
/// `ownership`.
async fn two_requests(kind: Kind, mode: &str, ownership: Ownership) -> History {
    let server = RedisServer::start();
    let ns = suite::unique_ns(&format!("ownership-keepalive-{mode}"));
    let client = Client::builder(server.url())
        .namespace(&ns)
        .watchdog_timeout(Duration::from_secs(5))
        .ownership(ownership)
        .build()
        .await
        .expect("client");
    let app = App {
        set: RedLockSet::new(std::slice::from_ref(&client)),
        client,
        hist: History::new(),
        jobs: Arc::default(),
    };
    let kind = match kind {
        Kind::RLock => "rlock",
        Kind::Multi => "multi",
        Kind::RedLock => "redlock",
    };
    let router = Router::new()
        .route("/job", get(start_job))
        .with_state(app.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, router).await.unwrap() });

    let stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .unwrap();
    tokio::spawn(conn);
    let mut served_by = Vec::new();
    for _ in 0..2 {
        // The connection takes the next request once the previous response is read.
        sender.ready().await.unwrap();
        let req = hyper::Request::get(format!("/job?mode={mode}&kind={kind}"))
            .header("host", "localhost")
            .body(Empty::<Bytes>::new())
            .unwrap();
        let resp = tokio::time::timeout(JOB * 10, sender.send_request(req))
            .await
            .expect("the request is answered")
            .unwrap();
        assert!(resp.status().is_success());
        let body = resp.into_body().collect().await.unwrap().to_bytes();
        served_by.push(String::from_utf8(body.to_vec()).unwrap());
    }
    let jobs: Vec<_> = std::mem::take(&mut *app.jobs.lock().unwrap());
    for job in jobs {
        job.await.unwrap();
    }
    let mut conn = server.conn().await;
    assert_no_keys(&mut conn, &ns).await;
    assert_eq!(served_by[0], served_by[1], "one connection, one task");
    assert_eq!(app.hist.ok_count(), 2);
    app.hist
}

async fn assert_no_keys(conn: &mut Conn, ns: &str) {
    let keys: Vec<String> = redis::cmd("KEYS")
        .arg(format!("{ns}:*"))
        .query_async(conn)
        .await
        .unwrap();
    let keys: Vec<String> = keys
        .into_iter()
        .filter(|k| !suite::is_presence(k))
        .collect();
    assert!(keys.is_empty(), "keys left behind: {keys:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keep_alive_requests_wait_for_the_job_of_a_non_reentrant_lock() {
    let hist = two_requests_on_one_connection("non_reentrant").await;
    assert_clean(&hist.check_overlaps());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keep_alive_requests_wait_for_the_job_of_a_detached_guard() {
    let hist = two_requests_on_one_connection("detach").await;
    let acq = hist.acquisitions();
    assert_ne!(
        acq[0].owner, acq[1].owner,
        "each detached guard has its own owner"
    );
    assert_clean(&hist.check_overlaps());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keep_alive_requests_reenter_a_task_owned_lock() {
    // The trap, shown: with the default (task-owned) handle the second request re-enters
    // the hold the first request's job still uses. This is why `non_reentrant()` exists.
    let hist = two_requests_on_one_connection("task").await;
    // The checker accepts overlapping holds of one owner (re-entry); here both holds have
    // the handler task's owner, and the second began while the first job still ran.
    let acq = hist.acquisitions();
    assert_eq!(
        acq[0].owner, acq[1].owner,
        "one owner: the connection's task"
    );
    assert!(
        acq[1].acquired.unwrap() < acq[0].released.unwrap(),
        "the connection's next request re-entered while the first job held the lock"
    );
}

/// The same keep-alive scenario for a `MultiLock` and a `RedLock`: reproduced with the
/// default (task-owned) handle, the next request re-entered the set still held by the first
/// request's job; a non-reentrant handle or a detached guard makes it wait.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keep_alive_requests_and_multi_and_redlock_guards() {
    for kind in [Kind::Multi, Kind::RedLock] {
        let hist = two_requests(kind, "task", Ownership::Task).await;
        let acq = hist.acquisitions();
        assert_eq!(
            acq[0].owner, acq[1].owner,
            "{kind:?}: the connection's task"
        );
        assert!(
            acq[1].acquired.unwrap() < acq[0].released.unwrap(),
            "{kind:?}: the trap, shown: the next request re-entered"
        );
        for mode in ["non_reentrant", "detach"] {
            let hist = two_requests(kind, mode, Ownership::Task).await;
            let acq = hist.acquisitions();
            assert_ne!(acq[0].owner, acq[1].owner, "{kind:?} {mode}: own owners");
            assert_clean(&hist.check_overlaps());
        }
    }
}

/// A client built with `Ownership::PerHold` makes every handle non-reentrant in one line:
/// the keep-alive scenario waits for the job with every kind, with no per-handle call.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_per_hold_client_makes_every_handle_non_reentrant() {
    for kind in [Kind::RLock, Kind::Multi, Kind::RedLock] {
        let hist = two_requests(kind, "default", Ownership::PerHold).await;
        let acq = hist.acquisitions();
        assert_ne!(acq[0].owner, acq[1].owner, "{kind:?}: own owners");
        assert_clean(&hist.check_overlaps());
    }
    let server = RedisServer::start();
    let client = Client::builder(server.url())
        .ownership(Ownership::PerHold)
        .build()
        .await
        .unwrap();
    assert!(!client.lock("x").is_reentrant());
    assert!(!client.fair_lock("x").is_reentrant());
    assert!(!client.fenced_lock("x").is_reentrant());
    assert!(!client.rw_lock("x").is_reentrant());
    assert!(!client.multi_lock(["x"]).is_reentrant());
    assert!(!RedLockSet::new(std::slice::from_ref(&client))
        .lock("x")
        .is_reentrant());
    assert!(
        client.lock("x").reentrant().is_reentrant(),
        "a handle can opt back in"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn guard_that_outlives_its_task_excludes_every_later_task() {
    let server = RedisServer::start();
    let ns = suite::unique_ns("ownership-outlives");
    let client = suite::client(&server, &ns, Duration::from_secs(5)).await;
    let lock = client.lock("state").non_reentrant();
    let hist = History::new();
    let kept: Arc<Mutex<Option<RLockGuard>>> = Arc::default();

    // A task takes the lock, leaves its guard in shared state, and ends.
    let (l, h, k) = (lock.clone(), hist.clone(), kept.clone());
    tokio::spawn(async move {
        let id = h.invoke("keeper", "state");
        let guard = l.lock().await.unwrap();
        h.ok(&id, guard.owner(), None, None);
        *k.lock().unwrap() = Some(guard);
        // Remember the id for the release record.
        h.note(&id, "kept");
    })
    .await
    .unwrap();
    let kept_id = hist.acquisitions()[0].id.clone();

    // Many short tasks later (tokio may give them the ended task's id): none gets in.
    let mut tasks = Vec::new();
    for i in 0..50 {
        let (l, h) = (lock.clone(), hist.clone());
        tasks.push(tokio::spawn(async move {
            let id = h.invoke(&format!("later-{i}"), "state");
            match l
                .try_lock(Duration::from_millis(20), None)
                .await
                .or_none()
                .unwrap()
            {
                Some(g) => {
                    h.ok(&id, g.owner(), None, None);
                    h.release(&id);
                    g.unlock().await.unwrap();
                }
                None => h.fail(&id, "timed out"),
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    assert_eq!(hist.ok_count(), 1, "only the kept guard holds the lock");

    let guard = kept.lock().unwrap().take().unwrap();
    hist.release(&checker::AcqId(kept_id));
    guard.unlock().await.unwrap();
    let g = lock.try_lock(Duration::ZERO, None).await.or_none().unwrap();
    assert!(g.is_some(), "free once the kept guard is released");
    g.unwrap().unlock().await.unwrap();
    assert_clean(&hist.check_overlaps());
    assert_no_keys(&mut server.conn().await, &ns).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn non_reentrant_handles_never_reenter_in_one_task() {
    let server = RedisServer::start();
    let ns = suite::unique_ns("ownership-non-reentrant");
    let client = suite::client(&server, &ns, Duration::from_secs(5)).await;
    let mut conn = server.conn().await;

    let lock = client.lock("a").non_reentrant();
    assert!(!lock.is_reentrant() && client.lock("a").is_reentrant());
    let first = lock.lock().await.unwrap();
    assert!(first.owner().starts_with(&format!("{}:h", client.id())));
    assert!(lock
        .try_lock(Duration::from_millis(100), None)
        .await
        .or_none()
        .unwrap()
        .is_none());
    // The task-owned handle of the same lock waits too: the hold is the guard's.
    assert!(client
        .lock("a")
        .try_lock(Duration::ZERO, None)
        .await
        .or_none()
        .unwrap()
        .is_none());
    assert_eq!(lock.hold_count().await.unwrap(), 0);
    assert!(lock.is_locked().await.unwrap());
    first.unlock().await.unwrap();
    let second = lock.lock().await.unwrap();
    second.unlock().await.unwrap();

    let fair = client.fair_lock("f").non_reentrant();
    let g = fair.lock().await.unwrap();
    assert!(fair
        .try_lock(Duration::from_millis(100), None)
        .await
        .or_none()
        .unwrap()
        .is_none());
    g.unlock().await.unwrap();

    let fenced = client.fenced_lock("t").non_reentrant();
    let g = fenced.lock().await.unwrap();
    assert!(fenced
        .try_lock(Duration::from_millis(100), None)
        .await
        .or_none()
        .unwrap()
        .is_none());
    let token = g.token();
    g.unlock().await.unwrap();
    let g = fenced.lock().await.unwrap();
    assert!(
        g.token() > token,
        "every hold of a non-reentrant handle is a new token"
    );
    g.unlock().await.unwrap();

    let keys: Vec<String> = redis::cmd("KEYS")
        .arg(format!("{ns}:*"))
        .query_async(&mut conn)
        .await
        .unwrap();
    let keys: Vec<String> = keys
        .into_iter()
        .filter(|k| !suite::is_presence(k))
        .collect();
    assert!(keys.iter().all(|k| k.contains(":fence:")), "{keys:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn named_owner_reenters_across_tasks_and_excludes_others() {
    let server = RedisServer::start();
    let ns = suite::unique_ns("ownership-named");
    let client = suite::client(&server, &ns, Duration::from_secs(5)).await;
    let lock = client.lock("batch");
    let named = lock.with_owner("batch-7");

    let first = tokio::spawn({
        let named = named.clone();
        async move { named.lock().await.unwrap() }
    })
    .await
    .unwrap();
    assert!(first.owner().ends_with(":owner:batch-7"));
    // Another task with the same owner re-enters the same hold.
    let second = tokio::spawn({
        let named = named.clone();
        async move {
            named
                .try_lock(Duration::ZERO, None)
                .await
                .or_none()
                .unwrap()
        }
    })
    .await
    .unwrap()
    .expect("the same named owner re-enters");
    assert_eq!(second.owner(), first.owner());
    assert_eq!(named.hold_count().await.unwrap(), 2);
    // Other owners wait: the calling task, and another name.
    assert!(lock
        .try_lock(Duration::ZERO, None)
        .await
        .or_none()
        .unwrap()
        .is_none());
    let other = lock.with_owner("batch-8");
    assert!(other
        .try_lock(Duration::ZERO, None)
        .await
        .or_none()
        .unwrap()
        .is_none());
    second.unlock().await.unwrap();
    assert!(named.is_held_by_current_task().await.unwrap());
    first.unlock().await.unwrap();
    assert!(!lock.is_locked().await.unwrap());

    // Bad owner ids: a typed error from every method, nothing written.
    for bad in [String::new(), "x".repeat(257), "a\nb".to_string()] {
        let handle = lock.with_owner(&bad);
        let err = handle.lock().await.expect_err("rejected");
        assert!(
            matches!(
                err,
                lockwise::Error::InvalidArgument {
                    argument: "owner",
                    ..
                }
            ),
            "{err:?}"
        );
        assert!(handle.hold_count().await.is_err());
        let err = client
            .fair_lock("f")
            .with_owner(&bad)
            .try_lock(Duration::ZERO, None)
            .await
            .or_none();
        assert!(err.is_err());
    }
    assert_no_keys(&mut server.conn().await, &ns).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn detached_guard_keeps_the_lock_and_excludes_the_task_that_took_it() {
    let server = RedisServer::start();
    let ns = suite::unique_ns("ownership-detach");
    let watchdog = Duration::from_millis(900);
    let client = suite::client(&server, &ns, watchdog).await;
    let mut conn = server.conn().await;
    let lock = client.lock("d");

    let mut guard = lock.lock().await.unwrap();
    let task_owner = guard.owner().to_string();
    guard.detach().await.unwrap();
    assert_ne!(guard.owner(), task_owner);
    assert!(guard.owner().starts_with(&format!("{}:h", client.id())));
    let fields: std::collections::BTreeMap<String, i64> = redis::cmd("HGETALL")
        .arg(lock.key())
        .query_async(&mut conn)
        .await
        .unwrap();
    assert_eq!(
        fields,
        std::collections::BTreeMap::from([(guard.owner().to_string(), 1)]),
        "the hold moved, nothing else"
    );
    // The task that took it waits like any other owner.
    assert!(lock
        .try_lock(Duration::from_millis(100), None)
        .await
        .or_none()
        .unwrap()
        .is_none());
    assert_eq!(lock.hold_count().await.unwrap(), 0);
    // The watchdog renews the detached hold: it outlives several timeouts.
    tokio::time::sleep(watchdog * 3).await;
    assert!(!guard.is_lost(), "renewed under its new owner");
    assert!(guard.validity() > Duration::ZERO);
    let waiter = tokio::spawn({
        let lock = lock.clone();
        async move { lock.lock().await.unwrap() }
    });
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(!waiter.is_finished());
    guard.unlock().await.unwrap();
    waiter.await.unwrap().unlock().await.unwrap();
    assert!(!lock.is_locked().await.unwrap());

    // A re-entered hold is not detached: the guard stays as it was.
    let mut outer = lock.lock().await.unwrap();
    let mut inner = lock.lock().await.unwrap();
    let err = inner.detach().await.expect_err("re-entered");
    assert!(
        matches!(
            err,
            lockwise::Error::InvalidArgument {
                argument: "guard",
                ..
            }
        ),
        "{err:?}"
    );
    assert_eq!(lock.hold_count().await.unwrap(), 2);
    inner.unlock().await.unwrap();
    outer.detach().await.unwrap();
    outer.unlock().await.unwrap();

    // Fair and fenced guards detach the same way; the token stays.
    let mut fenced = client.fenced_lock("t").lock().await.unwrap();
    let token = fenced.token();
    fenced.detach().await.unwrap();
    assert_eq!(fenced.token(), token);
    assert!(client
        .fenced_lock("t")
        .try_lock(Duration::ZERO, None)
        .await
        .or_none()
        .unwrap()
        .is_none());
    fenced.unlock().await.unwrap();
    let mut fair = client.fair_lock("f").lock().await.unwrap();
    fair.detach().await.unwrap();
    assert!(client
        .fair_lock("f")
        .try_lock(Duration::ZERO, None)
        .await
        .or_none()
        .unwrap()
        .is_none());
    fair.unlock().await.unwrap();

    // A hold that is gone: NotHeld, nothing left behind.
    let mut gone = lock.lock().await.unwrap();
    assert!(lock.force_unlock().await.unwrap());
    let err = gone.detach().await.expect_err("gone");
    assert!(err.is_not_held(), "{err:?}");
    drop(gone);
    tokio::time::sleep(Duration::from_millis(100)).await;
    let keys: Vec<String> = redis::cmd("KEYS")
        .arg(format!("{ns}:*"))
        .query_async(&mut conn)
        .await
        .unwrap();
    let keys: Vec<String> = keys
        .into_iter()
        .filter(|k| !suite::is_presence(k))
        .collect();
    assert!(keys.iter().all(|k| k.contains(":fence:")), "{keys:?}");
}

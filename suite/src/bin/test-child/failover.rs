//! The `failover-worker` role: a Sentinel client whose tasks take fenced locks (re-entering
//! some) through failovers until `stop`, counting the errors its callers saw.

use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use lockwise::{Client, Error};

use super::{checker, emit, env};
use checker::History;
use suite::OrNone;

/// What the callers of one failover worker saw go wrong, by call and kind of error.
#[derive(Default)]
struct Errors(Mutex<std::collections::BTreeMap<String, u64>>);

impl Errors {
    fn count(&self, call: &str, e: &Error) {
        let kind = match e {
            Error::Redis(r) => match r.code() {
                Some(code) => code.to_string(),
                None if r.is_timeout() => "timeout".to_string(),
                None => "io".to_string(),
            },
            other => format!("{other:?}")
                .split([' ', '{', '('])
                .next()
                .unwrap_or("other")
                .to_string(),
        };
        *self
            .0
            .lock()
            .unwrap()
            .entry(format!("{call}:{kind}"))
            .or_default() += 1;
    }

    fn line(&self) -> String {
        let m = self.0.lock().unwrap();
        m.iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect::<Vec<_>>()
            .join(" ")
    }
}

/// The child half of `sentinel_failovers_followed_by_every_process`: a Sentinel client
/// (sentinels in `url`, comma-separated, the first one watched for `+switch-master`; master
/// `LOCKWISE_FP_MASTER`) whose `LOCKWISE_FP_TASKS` tasks take the fenced locks `f0` ..
/// `f<LOCKWISE_FP_LOCKS - 1>` in turn: `try_lock` (2 s), hold 2-10 ms (one hold in four
/// re-enters the lock once inside; the hold ends when `lost()` fires, even while that
/// re-entry waits), unlock, think 5-20 ms. Streams its history line by line
/// (the parent stops it at any moment), prints `@running`, and on `stop` (stdin) finishes the
/// holds, prints `@errors <call:kind=n ...>` and exits.
pub(super) async fn worker(url: String, ns: String, label: String) {
    let master = env("LOCKWISE_FP_MASTER");
    let tasks: usize = env("LOCKWISE_FP_TASKS").parse().unwrap();
    let locks: usize = env("LOCKWISE_FP_LOCKS").parse().unwrap();
    // The default watchdog timeout (30 s): a hold the server counts that no task believes
    // in outlives the test's final check of the master.
    let c = Client::sentinel_builder(url.split(','), master)
        .namespace(&ns)
        .build()
        .await
        .expect("sentinel client");
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let errors = Arc::new(Errors::default());
    let h = History::new();
    let mut workers = Vec::new();
    for t in 0..tasks {
        let (c, stop, errors, h) = (c.clone(), stop.clone(), errors.clone(), h.clone());
        let who = format!("{label}/t{t}");
        workers.push(tokio::spawn(async move {
            let mut n = t;
            while !stop.load(Ordering::SeqCst) {
                n += 1;
                let name = format!("f{}", n % locks);
                let lock = c.fenced_lock(&name);
                let id = h.invoke(&who, &name);
                emit(&h.line_of(&id));
                let g = match lock.try_lock(Duration::from_secs(2), None).await.or_none() {
                    Ok(Some(g)) => g,
                    Ok(None) => {
                        h.fail(&id, "timeout");
                        emit(&h.line_of(&id));
                        continue;
                    }
                    Err(e) => {
                        errors.count("lock", &e);
                        h.unknown(&id, &e.to_string().replace('\n', " "));
                        emit(&h.line_of(&id));
                        tokio::time::sleep(Duration::from_millis(20)).await;
                        continue;
                    }
                };
                h.ok(&id, g.owner(), Some(g.token()), None);
                emit(&h.line_of(&id));
                let lost = g.lost();
                // When lost() fires, this task stops relying on the hold, wherever it is (a
                // re-entry below may be waiting through a failover meanwhile: the hold ends
                // then, not when that call returns).
                let lost_at = tokio::spawn({
                    let lost = lost.clone();
                    async move {
                        lost.cancelled().await;
                        checker::now_ns()
                    }
                });
                let hold = Duration::from_millis(rand::random_range(2..=10));
                if n % 4 == 0 {
                    // Re-entry inside the hold: the server's count goes to 2 and back.
                    match lock.lock().await {
                        Ok(inner) => {
                            if let Err(e) = inner.unlock().await {
                                errors.count("reentry-unlock", &e);
                            }
                        }
                        Err(e) => errors.count("reentry", &e),
                    }
                }
                tokio::select! {
                    _ = tokio::time::sleep(hold) => {}
                    _ = lost.cancelled() => {}
                }
                let (ended, note) = if lost.is_cancelled() {
                    (
                        lost_at.await.unwrap_or_else(|_| checker::now_ns()),
                        "lost-seen",
                    )
                } else {
                    lost_at.abort();
                    (checker::now_ns(), "unlock")
                };
                h.release_at(&id, ended, note);
                emit(&h.line_of(&id));
                if let Err(e) = g.unlock().await {
                    if !(e.is_not_held() && lost.is_cancelled()) {
                        errors.count("unlock", &e);
                    }
                }
                let think = rand::random_range(5..=20);
                tokio::time::sleep(Duration::from_millis(think)).await;
            }
        }));
    }
    emit("@running");
    let line = tokio::task::spawn_blocking(|| {
        let mut l = String::new();
        std::io::stdin().read_line(&mut l).unwrap();
        l
    })
    .await
    .unwrap();
    assert_eq!(line.trim(), "stop");
    stop.store(true, Ordering::SeqCst);
    for w in workers {
        w.await.unwrap();
    }
    emit(&format!("@errors {}", errors.line()));
}

//! The faults: their schedule and their injection.

use super::*;

// ---------------------------------------------------------------------------------------------
// Faults

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Fault {
    KillPubsub,
    KillNormal,
    ScriptFlush,
    DebugSleep,
    StopServer,
    StopWorker,
    KillWorker,
}

impl Fault {
    pub(super) const ALL: [Fault; 7] = [
        Fault::KillPubsub,
        Fault::KillNormal,
        Fault::ScriptFlush,
        Fault::DebugSleep,
        Fault::StopServer,
        Fault::StopWorker,
        Fault::KillWorker,
    ];

    pub(super) fn parse(name: &str) -> Option<Fault> {
        Some(match name {
            "pubsub" => Fault::KillPubsub,
            "normal" => Fault::KillNormal,
            "flush" => Fault::ScriptFlush,
            "sleep" => Fault::DebugSleep,
            "server-stop" => Fault::StopServer,
            "worker-stop" => Fault::StopWorker,
            "worker-kill" => Fault::KillWorker,
            _ => return None,
        })
    }
}

/// The fault schedule: (offset from the start, fault), sorted.
pub(super) fn schedule(
    rng: &mut StdRng,
    span: Duration,
    stop_worker_for: Duration,
    only: &[Fault],
) -> Vec<(Duration, Fault)> {
    let mut events = Vec::new();
    let mut periodic = |every_ms: u64, fault: Fault, rng: &mut StdRng| {
        let mut at = rng.random_range(0..every_ms);
        while Duration::from_millis(at) < span {
            events.push((Duration::from_millis(at), fault));
            at += rng.random_range(every_ms / 2..every_ms * 3 / 2);
        }
    };
    periodic(600, Fault::KillPubsub, rng);
    periodic(1500, Fault::KillNormal, rng);
    periodic(2000, Fault::ScriptFlush, rng);
    periodic(5000, Fault::DebugSleep, rng);
    periodic(6000, Fault::StopServer, rng);
    // Worker faults at fixed fractions, each stop over before the phase ends.
    let last_stop = span.saturating_sub(stop_worker_for + Duration::from_millis(500));
    for frac in [0.2, 0.6] {
        events.push((span.mul_f64(frac).min(last_stop), Fault::StopWorker));
    }
    for frac in [0.4, 0.8] {
        events.push((span.mul_f64(frac), Fault::KillWorker));
    }
    events.retain(|e| only.contains(&e.1));
    events.sort_by_key(|e| e.0);
    events
}

pub(super) async fn client_kill(
    conn: &mut ConnectionManager,
    kind: &str,
) -> redis::RedisResult<i64> {
    redis::cmd("CLIENT")
        .arg("KILL")
        .arg("TYPE")
        .arg(kind)
        .query_async(conn)
        .await
}

/// Runs one fault; returns a line for the log when something is worth saying.
pub(super) async fn inject(
    c: &Arc<Coordinator>,
    conn: &mut ConnectionManager,
    fault: Fault,
    server_pid: Option<u32>,
    rng: &mut StdRng,
    stop_worker_for: Duration,
) -> Result<(), String> {
    let e = |e: redis::RedisError| e.to_string();
    match fault {
        Fault::KillPubsub => {
            client_kill(conn, "pubsub").await.map_err(e)?;
            c.state().count_fault("CLIENT KILL TYPE pubsub");
        }
        Fault::KillNormal => {
            client_kill(conn, "normal").await.map_err(e)?;
            c.state().count_fault("CLIENT KILL TYPE normal");
        }
        Fault::ScriptFlush => {
            redis::cmd("SCRIPT")
                .arg("FLUSH")
                .query_async::<()>(conn)
                .await
                .map_err(e)?;
            c.state().count_fault("SCRIPT FLUSH");
        }
        Fault::DebugSleep => {
            redis::cmd("DEBUG")
                .arg("SLEEP")
                .arg("0.3")
                .query_async::<()>(conn)
                .await
                .map_err(e)?;
            c.state().count_fault("DEBUG SLEEP 0.3");
        }
        Fault::StopServer => {
            let Some(pid) = server_pid else {
                return Err("no server pid (REDIS_URL): server SIGSTOP skipped".into());
            };
            signal(pid, Sig::Stop).map_err(|e| e.to_string())?;
            tokio::time::sleep(Duration::from_millis(300)).await;
            signal(pid, Sig::Cont).map_err(|e| e.to_string())?;
            c.state().count_fault("SIGSTOP server 300 ms");
        }
        Fault::StopWorker => {
            let w = pick_worker(c, rng).ok_or("no worker to stop")?;
            let pid = c.pid(w);
            signal(pid, Sig::Stop).map_err(|e| e.to_string())?;
            let at = now_ns();
            {
                let mut s = c.state();
                s.workers[w].stops.push((at, 0));
                s.count_fault("SIGSTOP worker");
            }
            println!(
                "  +{:>5.1} s  SIGSTOP {} for {:?}",
                c.rel(at),
                c.state().workers[w].label,
                stop_worker_for
            );
            let c = c.clone();
            tokio::spawn(async move {
                tokio::time::sleep(stop_worker_for).await;
                let _ = signal(pid, Sig::Cont);
                if let Some(s) = c.state().workers[w].stops.last_mut() {
                    s.1 = now_ns();
                }
            });
        }
        Fault::KillWorker => {
            let w = pick_worker(c, rng).ok_or("no worker to kill")?;
            // Before the signal: the worker's open holds were still held at this moment.
            let at = now_ns();
            {
                let mut procs = c.procs.lock().unwrap();
                let _ = procs[w].child.kill();
                let _ = procs[w].child.wait();
            }
            let label = {
                let mut s = c.state();
                s.workers[w].killed_at = Some(at);
                s.count_fault("SIGKILL worker");
                s.workers[w].label.clone()
            };
            let nw = c.spawn_worker(rng.random()).map_err(|e| e.to_string())?;
            println!(
                "  +{:>5.1} s  SIGKILL {label}; started {} in its place",
                c.rel(at),
                c.state().workers[nw].label
            );
        }
    }
    Ok(())
}

/// A live, ready, running worker, at random.
pub(super) fn pick_worker(c: &Coordinator, rng: &mut StdRng) -> Option<usize> {
    let s = c.state();
    let candidates: Vec<usize> = s
        .live()
        .into_iter()
        .filter(|&w| s.workers[w].ready && s.workers[w].stops.iter().all(|st| st.1 != 0))
        .collect();
    (!candidates.is_empty()).then(|| candidates[rng.random_range(0..candidates.len())])
}

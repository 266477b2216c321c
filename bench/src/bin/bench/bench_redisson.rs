//! Workload 14 (`--redisson-only`): lockwise in Redisson's key layout against its own layout,
//! in the same run, three rounds with the layouts alternating: uncontended lock -> unlock
//! pairs/s at 64 tasks, and the contended handoff gap of `RLock` and `FairLock` (4 Clients x
//! 8 tasks). Then a mixed fleet on one lock: 2 lockwise Clients x 4 tasks and 2
//! Redisson-protocol peers (`suite::redisson`, the test suite's "Java service") x 4
//! threads, every hold recorded; the gap between holds by direction of the handoff
//! (lockwise -> Java is a Java thread woken by a lockwise release, and so on). PING p50 is
//! the reference of each round.

use std::sync::Arc;

use lockwise::KeyLayout;
use suite::redisson::RedissonPeer;

use super::*;

/// One hold of the mixed fleet: which side held it, and when.
struct MixedHold {
    java: bool,
    from: Instant,
    to: Instant,
}

pub(super) async fn run(url: &str, seconds: f64) -> Result<(), BoxError> {
    let layouts = [KeyLayout::Lockwise, KeyLayout::Redisson];
    for round in 1..=3 {
        let ping = ping_rtt(url).await?.0;
        println!("round {round}: PING p50 {ping:.1} µs");
        let mut pairs = Vec::new();
        for layout in layouts {
            let r = uncontended_in(url, seconds, CONCURRENCY, layout).await?;
            pairs.push(r.rate);
            println!(
                "  uncontended 64 tasks, {layout:<9?} {:>9.0} pairs/s  p50 {:>6.1} µs",
                r.rate, r.p50
            );
        }
        println!(
            "  uncontended Redisson / lockwise layout: {:.2}",
            pairs[1] / pairs[0]
        );
        for (kind, label, total) in [
            (LockKind::Plain, "RLock", 0),
            (LockKind::Fair, "FairLock", 800),
        ] {
            for layout in layouts {
                let c = contended_in(url, kind, total, layout).await?;
                println!(
                    "  {label:<8} handoff, {layout:<9?} gap p50 {:>6.1} µs ({:.2}x PING)  \
                     p99 {:>7.1} µs  {:>5.0} acq/s  overlaps {}  counter {}/{}",
                    c.gap_p50,
                    c.gap_p50 / ping,
                    c.gap_p99,
                    c.rate,
                    c.overlaps,
                    c.counter,
                    c.acquisitions
                );
            }
        }
        mixed(url, ping).await?;
    }
    Ok(())
}

/// 2 lockwise Clients x 4 tasks and 2 Redisson peers x 4 threads take one lock 1,200 times.
async fn mixed(url: &str, ping: f64) -> Result<(), BoxError> {
    const TOTAL: usize = 1200;
    const NAME: &str = "bench-mixed";
    const TTL_MS: u64 = 30_000;
    let remaining = Arc::new(AtomicUsize::new(TOTAL));
    let holds: Arc<Mutex<Vec<MixedHold>>> = Arc::new(Mutex::new(Vec::new()));
    let mut tasks: Vec<tokio::task::JoinHandle<Result<(), BoxError>>> = Vec::new();
    let take = |remaining: &AtomicUsize| {
        remaining
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |r| r.checked_sub(1))
            .is_ok()
    };
    // Kept alive to the end: a handle of a dropped Client takes no more locks.
    let mut clients = Vec::new();
    for _ in 0..2 {
        let client = lockwise::Client::builder(url)
            .key_layout(KeyLayout::Redisson)
            .build()
            .await?;
        clients.push(client.clone());
        for _ in 0..4 {
            let (lock, remaining, holds) = (client.lock(NAME), remaining.clone(), holds.clone());
            tasks.push(tokio::spawn(async move {
                while take(&remaining) {
                    let guard = lock.lock().await?;
                    let from = Instant::now();
                    tokio::task::yield_now().await;
                    let to = Instant::now();
                    guard.unlock().await?;
                    holds.lock().unwrap().push(MixedHold {
                        java: false,
                        from,
                        to,
                    });
                }
                Ok(())
            }));
        }
    }
    for _ in 0..2 {
        let peer = Arc::new(RedissonPeer::connect(url).await);
        for thread in 1..=4u64 {
            let (peer, remaining, holds) = (peer.clone(), remaining.clone(), holds.clone());
            tasks.push(tokio::spawn(async move {
                while take(&remaining) {
                    let wait = Duration::from_secs(60);
                    if !peer.lock(NAME, thread, TTL_MS, wait).await {
                        return Err("a Redisson peer waited 60 s".into());
                    }
                    let from = Instant::now();
                    tokio::task::yield_now().await;
                    let to = Instant::now();
                    peer.unlock(NAME, thread, TTL_MS).await;
                    holds.lock().unwrap().push(MixedHold {
                        java: true,
                        from,
                        to,
                    });
                }
                if !peer.bad_payloads().is_empty() {
                    return Err("a payload Redisson could not parse".into());
                }
                Ok(())
            }));
        }
    }
    let started = Instant::now();
    for t in tasks {
        t.await??;
    }
    let elapsed = started.elapsed().as_secs_f64();
    drop(clients);
    let mut holds = std::mem::take(&mut *holds.lock().unwrap());
    holds.sort_by_key(|h| h.from);
    // Gaps by (previous side, next side): 0 lockwise, 1 Java.
    let mut gaps: [[Vec<f64>; 2]; 2] = Default::default();
    let mut overlaps = 0;
    for w in holds.windows(2) {
        if w[1].from < w[0].to {
            overlaps += 1;
        } else {
            let gap = (w[1].from - w[0].to).as_secs_f64() * 1e6;
            gaps[usize::from(w[0].java)][usize::from(w[1].java)].push(gap);
        }
    }
    let java = holds.iter().filter(|h| h.java).count();
    println!(
        "  mixed fleet: {} holds ({} lockwise, {java} Java), {:.0} acq/s, overlaps {overlaps}",
        holds.len(),
        holds.len() - java,
        holds.len() as f64 / elapsed
    );
    for (from, to, label) in [
        (0, 0, "lockwise -> lockwise"),
        (0, 1, "lockwise -> Java    "),
        (1, 0, "Java -> lockwise    "),
        (1, 1, "Java -> Java        "),
    ] {
        let g = &mut gaps[from][to];
        g.sort_by(f64::total_cmp);
        println!(
            "    {label} {:>5} handoffs  gap p50 {:>7.1} µs ({:.2}x PING)  p99 {:>8.1} µs",
            g.len(),
            percentile(g, 0.5),
            percentile(g, 0.5) / ping,
            percentile(g, 0.99)
        );
    }
    Ok(())
}

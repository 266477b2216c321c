//! Workloads 4 and 5: the watchdog with many held locks and one Client with many waiters;
//! the process CPU time and memory they cost.

use super::*;

/// Process CPU time (user + system) from /proc/self/stat, in seconds.
pub(super) fn cpu_seconds() -> f64 {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    // Fields after the parenthesised command name; utime and stime are fields 14 and 15.
    let rest = stat.rsplit(')').next().unwrap_or("");
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let ticks = |i: usize| {
        fields
            .get(i)
            .and_then(|f| f.parse::<f64>().ok())
            .unwrap_or(0.0)
    };
    (ticks(11) + ticks(12)) / 100.0
}

/// Resident set size from /proc/self/statm, in bytes.
pub(super) fn rss_bytes() -> f64 {
    let statm = std::fs::read_to_string("/proc/self/statm").unwrap_or_default();
    let pages: f64 = statm
        .split_whitespace()
        .nth(1)
        .and_then(|p| p.parse().ok())
        .unwrap_or(0.0);
    pages * 4096.0
}

/// One section of `INFO`, as the server sent it.
pub(super) struct Info(String);

impl Info {
    pub(super) async fn read(
        conn: &mut ConnectionManager,
        section: &str,
    ) -> Result<Info, BoxError> {
        Ok(Info(
            redis::cmd("INFO").arg(section).query_async(conn).await?,
        ))
    }

    /// The value of the line `name:value`, if there is one.
    pub(super) fn field(&self, name: &str) -> Option<&str> {
        self.0
            .lines()
            .find_map(|l| l.strip_prefix(name)?.strip_prefix(':'))
            .map(str::trim)
    }

    /// [`field`](Self::field) as a number; 0 when absent or not a number.
    pub(super) fn number<T: std::str::FromStr + Default>(&self, name: &str) -> T {
        self.field(name)
            .and_then(|v| v.parse().ok())
            .unwrap_or_default()
    }
}

/// (script calls, HMGET calls) so far: the renew script (`lua/renew.lua`) runs one HMGET per
/// key.
pub(super) async fn script_calls(conn: &mut ConnectionManager) -> Result<(u64, u64), BoxError> {
    let info = Info::read(conn, "commandstats").await?;
    // `cmdstat_<cmd>:calls=N,usec=...`
    let calls = |cmd: &str| -> u64 {
        info.field(&format!("cmdstat_{cmd}"))
            .and_then(|v| v.strip_prefix("calls="))
            .and_then(|r| r.split(',').next())
            .and_then(|n| n.parse().ok())
            .unwrap_or(0)
    };
    Ok((calls("evalsha") + calls("eval"), calls("hmget")))
}

pub(super) struct WatchdogScale {
    pub(super) locks: usize,
    pub(super) period: Duration,
    pub(super) calls_per_period: f64,
    pub(super) keys_per_call: f64,
    pub(super) lost: usize,
    pub(super) cpu_percent: f64,
    pub(super) cpu_percent_default: f64,
    pub(super) rss_per_lock: f64,
    pub(super) acquire_s: f64,
}

/// 4. Many watchdog locks on one Client: renew calls, losses, CPU and memory.
pub(super) async fn watchdog_scale(url: &str, n: usize) -> Result<WatchdogScale, BoxError> {
    // Short for the run, but not so short that renewing 100k keys per period saturates a
    // Redis that shares two cores with this client (at 3 s it did: keys expired).
    let timeout = Duration::from_secs(6);
    let period = timeout / 3;
    let client = lockwise::Client::builder(url)
        .namespace(format!(
            "bench-watchdog-{}",
            lockwise::Uuid::new_v4().simple()
        ))
        .watchdog_timeout(timeout)
        .build()
        .await?;
    let mut conn = raw_conn(url).await?;
    let rss_before = rss_bytes();
    let t = Instant::now();
    let guards: Vec<lockwise::RLockGuard> = stream::iter(0..n)
        .map(|i| {
            let lock = client.lock(format!("w{i}"));
            async move { lock.lock().await }
        })
        .buffer_unordered(CONCURRENCY)
        .collect::<Vec<_>>()
        .await
        .into_iter()
        .collect::<Result<_, _>>()?;
    let acquire_s = t.elapsed().as_secs_f64();
    let rss_after = rss_bytes();
    // Let the first renewals happen, then measure three whole periods.
    tokio::time::sleep(period + period / 2).await;
    let calls0 = script_calls(&mut conn).await?;
    let cpu0 = cpu_seconds();
    let t0 = Instant::now();
    tokio::time::sleep(period * 3).await;
    let calls1 = script_calls(&mut conn).await?;
    let (calls, keys) = (calls1.0 - calls0.0, calls1.1 - calls0.1);
    let cpu = cpu_seconds() - cpu0;
    let wall = t0.elapsed().as_secs_f64();
    let lost = guards.iter().filter(|g| g.is_lost()).count();
    // Release everything (and check nothing was lost meanwhile).
    stream::iter(guards)
        .map(|g| g.unlock())
        .buffer_unordered(CONCURRENCY)
        .collect::<Vec<_>>()
        .await
        .into_iter()
        .collect::<Result<Vec<()>, _>>()?;
    let cpu_percent = cpu / wall * 100.0;
    Ok(WatchdogScale {
        locks: n,
        period,
        calls_per_period: calls as f64 * period.as_secs_f64() / wall,
        keys_per_call: keys as f64 / calls.max(1) as f64,
        lost,
        cpu_percent,
        // Renewal work scales with renewals per second: the default timeout (period 10 s)
        // renews 10 s / period times less often.
        cpu_percent_default: cpu_percent * period.as_secs_f64() / 10.0,
        rss_per_lock: (rss_after - rss_before) / n as f64,
        acquire_s,
    })
}

pub(super) struct WaiterScale {
    pub(super) waiters: usize,
    pub(super) acquired: usize,
    pub(super) pubsub_connections: usize,
    pub(super) all_acquired_ms: f64,
    pub(super) channels_left: usize,
}

pub(super) async fn pubsub_channels(conn: &mut ConnectionManager) -> Result<usize, BoxError> {
    Ok(Info::read(conn, "stats").await?.number("pubsub_channels"))
}

/// 5. Many waiters on distinct locks held by another Client, then release all.
pub(super) async fn waiter_scale(
    url: &str,
    n: usize,
    overtake_limit: Option<Duration>,
) -> Result<WaiterScale, BoxError> {
    let ns = format!("bench-waiters-{}", lockwise::Uuid::new_v4().simple());
    let holder = lockwise::Client::builder(url)
        .namespace(ns.clone())
        .overtake_limit(overtake_limit)
        .build()
        .await?;
    let waiter = lockwise::Client::builder(url)
        .namespace(ns)
        .overtake_limit(overtake_limit)
        .build()
        .await?;
    let mut conn = raw_conn(url).await?;
    let held: Vec<lockwise::RLockGuard> = stream::iter(0..n)
        .map(|i| {
            let lock = holder.lock(format!("l{i}"));
            async move { lock.lock().await }
        })
        .buffer_unordered(CONCURRENCY)
        .collect::<Vec<_>>()
        .await
        .into_iter()
        .collect::<Result<_, _>>()?;
    let acquired_at: Arc<Mutex<Vec<Instant>>> = Arc::new(Mutex::new(Vec::with_capacity(n)));
    let mut tasks = Vec::with_capacity(n);
    for i in 0..n {
        let lock = waiter.lock(format!("l{i}"));
        let acquired_at = acquired_at.clone();
        tasks.push(tokio::spawn(async move {
            let guard = lock.lock().await?;
            acquired_at.lock().unwrap().push(Instant::now());
            guard.unlock().await?;
            Ok::<_, BoxError>(())
        }));
    }
    // Wait until every waiter is subscribed.
    let wait_start = Instant::now();
    while pubsub_channels(&mut conn).await? < n {
        if wait_start.elapsed() > Duration::from_secs(60) {
            return Err("waiters did not all subscribe within 60 s".into());
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let clients: String = redis::cmd("CLIENT")
        .arg("LIST")
        .arg("TYPE")
        .arg("pubsub")
        .query_async(&mut conn)
        .await?;
    let pubsub_connections = clients.lines().filter(|l| !l.trim().is_empty()).count();
    let released = Instant::now();
    stream::iter(held)
        .map(|g| g.unlock())
        .buffer_unordered(CONCURRENCY)
        .collect::<Vec<_>>()
        .await
        .into_iter()
        .collect::<Result<Vec<()>, _>>()?;
    for t in tasks {
        t.await??;
    }
    let acquired_at = std::mem::take(&mut *acquired_at.lock().unwrap());
    let last = acquired_at.iter().max().copied().unwrap_or(released);
    // Unsubscribing happens in the background: give it a moment.
    let mut channels_left = pubsub_channels(&mut conn).await?;
    let settle = Instant::now();
    while channels_left > 0 && settle.elapsed() < Duration::from_secs(10) {
        tokio::time::sleep(Duration::from_millis(20)).await;
        channels_left = pubsub_channels(&mut conn).await?;
    }
    Ok(WaiterScale {
        waiters: n,
        acquired: acquired_at.len(),
        pubsub_connections,
        all_acquired_ms: (last - released).as_secs_f64() * 1e3,
        channels_left,
    })
}

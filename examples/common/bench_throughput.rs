//! Workload 10: uncontended throughput against the references, at several concurrencies.
//!
//! For each concurrency (tasks of one process, each on its own key, one multiplexed RESP3
//! connection per side, the kind lockwise uses) three rows are measured, interleaved over two
//! rounds so drift on a shared machine hits all of them:
//! - `SET NX PX`: a plain non-reentrant lock, `SET key token NX PX 30000` and a
//!   compare-and-delete script (`GET` = token → `DEL`): what a good non-reentrant crate does;
//! - ceiling: lockwise's own lock and unlock scripts sent raw (workload 1 at this concurrency);
//! - lockwise: `lock()` → `unlock()` through the library, with its script calls per pair.
//!
//! At concurrency 1 the pair latency (p50 / p99) is the lone caller's. Each row also gives the
//! server's CPU time per pair (`INFO cpu`, user + system, over the row's runs): what one
//! Redis spends for each client's pair, whatever the client machine can do.

use serde_json::{json, Value as Json};

use super::{
    ceiling_at, mean, raw_conn, redis, script_calls, timed_pairs_at, uncontended_at, BoxError,
    Info, Rate,
};

/// The concurrencies of the sweep.
const TASKS: [usize; 4] = [1, 8, 64, 256];

/// Compare-and-delete: the release of a `SET NX PX` lock.
const COMPARE_AND_DELETE: &str =
    "if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end return 0";

/// The `SET NX PX` reference with `tasks` tasks, each on its own key.
async fn set_nx_px(url: &str, seconds: f64, tasks: usize) -> Result<Rate, BoxError> {
    let conn = raw_conn(url).await?;
    let sha: String = redis::cmd("SCRIPT")
        .arg("LOAD")
        .arg(COMPARE_AND_DELETE)
        .query_async(&mut conn.clone())
        .await?;
    let run_id = uuid::Uuid::new_v4().simple().to_string();
    let seq = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
    timed_pairs_at(tasks, seconds, move |i| {
        let mut conn = conn.clone();
        let key = format!("bench:setnx:{run_id}:{i}");
        let token = format!(
            "{run_id}:{}",
            seq.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
        );
        let sha = sha.clone();
        async move {
            let ok: Option<String> = redis::cmd("SET")
                .arg(&key)
                .arg(&token)
                .arg("NX")
                .arg("PX")
                .arg(30_000)
                .query_async(&mut conn)
                .await?;
            if ok.is_none() {
                return Err(format!("{key} was taken: the keys are per task").into());
            }
            let deleted: i64 = redis::cmd("EVALSHA")
                .arg(&sha)
                .arg(1)
                .arg(&key)
                .arg(&token)
                .query_async(&mut conn)
                .await?;
            if deleted != 1 {
                return Err(format!("{key}: the compare-and-delete found another token").into());
            }
            Ok(())
        }
    })
    .await
}

/// One concurrency's figures.
struct Row {
    tasks: usize,
    set_nx: Vec<Rate>,
    ceiling: Vec<Rate>,
    library: Vec<Rate>,
    calls_per_pair: f64,
    /// Server CPU seconds and pairs per variant: SET NX PX, ceiling, lockwise.
    cpu: [(f64, usize); 3],
}

impl Row {
    /// Server CPU µs per pair of variant `i`.
    fn cpu_us(&self, i: usize) -> f64 {
        let (s, n) = self.cpu[i];
        s * 1e6 / n.max(1) as f64
    }
}

/// The server's CPU time so far (user + system, seconds).
async fn server_cpu(conn: &mut redis::aio::ConnectionManager) -> Result<f64, BoxError> {
    let info = Info::read(conn, "cpu").await?;
    Ok(info.number::<f64>("used_cpu_user") + info.number::<f64>("used_cpu_sys"))
}

/// Runs one measured round and adds its server CPU time and pairs to `acc`.
async fn cpu_of(
    stats: &mut redis::aio::ConnectionManager,
    acc: &mut (f64, usize),
    round: impl std::future::Future<Output = Result<Rate, BoxError>>,
) -> Result<Rate, BoxError> {
    let before = server_cpu(stats).await?;
    let r = round.await?;
    acc.0 += server_cpu(stats).await? - before;
    acc.1 += r.pairs;
    Ok(r)
}

fn rate(rounds: &[Rate]) -> f64 {
    mean(&rounds.iter().map(|r| r.rate).collect::<Vec<_>>())
}

fn json_of(rounds: &[Rate]) -> Json {
    let last = rounds.last();
    json!({"pairs_per_s": rate(rounds), "rounds": rounds.iter().map(|r| r.rate).collect::<Vec<_>>(),
           "pair_p50_us": last.map(|r| r.p50), "pair_p99_us": last.map(|r| r.p99)})
}

/// Runs the sweep, prints one line per concurrency (and the lone caller's latency), and
/// returns the figures for the JSON report. Each round lasts `seconds / 2`.
pub(crate) async fn run(url: &str, seconds: f64) -> Result<Json, BoxError> {
    let round = (seconds / 2.0).max(0.5);
    let mut stats = raw_conn(url).await?;
    let mut rows = Vec::new();
    for tasks in TASKS {
        let mut row = Row {
            tasks,
            set_nx: Vec::new(),
            ceiling: Vec::new(),
            library: Vec::new(),
            calls_per_pair: 0.0,
            cpu: [(0.0, 0); 3],
        };
        let (mut calls, mut pairs) = (0u64, 0usize);
        for _ in 0..2 {
            let r = cpu_of(&mut stats, &mut row.cpu[0], set_nx_px(url, round, tasks)).await?;
            row.set_nx.push(r);
            let r = cpu_of(&mut stats, &mut row.cpu[1], ceiling_at(url, round, tasks)).await?;
            row.ceiling.push(r);
            let before = script_calls(&mut stats).await?.0;
            let lib = cpu_of(
                &mut stats,
                &mut row.cpu[2],
                uncontended_at(url, round, tasks),
            )
            .await?;
            // The renewals of other workloads are over; the INFO call itself is not a script.
            calls += script_calls(&mut stats).await?.0 - before;
            pairs += lib.pairs;
            row.library.push(lib);
        }
        row.calls_per_pair = calls as f64 / pairs.max(1) as f64;
        let (s, c, l) = (rate(&row.set_nx), rate(&row.ceiling), rate(&row.library));
        println!(
            "uncontended x{:<4}       SET NX PX {s:>7.0}  ceiling {c:>7.0}  lockwise {l:>7.0} pairs/s   \
             lockwise / SET NX PX {:.2}   / ceiling {:.2}   script calls per pair {:.2}",
            tasks,
            l / s,
            l / c,
            row.calls_per_pair
        );
        println!(
            "  server CPU per pair    SET NX PX {:.1} µs  ceiling {:.1} µs  lockwise {:.1} µs",
            row.cpu_us(0),
            row.cpu_us(1),
            row.cpu_us(2)
        );
        rows.push(row);
    }
    let lone = &rows[0];
    let p = |rounds: &[Rate]| rounds.last().map_or((0.0, 0.0), |r| (r.p50, r.p99));
    let ((sp50, sp99), (lp50, lp99)) = (p(&lone.set_nx), p(&lone.library));
    println!(
        "lone caller (x1)         pair p50 / p99: SET NX PX {sp50:.1} / {sp99:.1} µs, lockwise {lp50:.1} / {lp99:.1} µs \
         (p50 ratio {:.2})",
        lp50 / sp50.max(f64::MIN_POSITIVE)
    );
    Ok(Json::Array(
        rows.iter()
            .map(|r| {
                json!({"tasks": r.tasks, "set_nx_px": json_of(&r.set_nx), "ceiling": json_of(&r.ceiling),
                       "lockwise": json_of(&r.library), "script_calls_per_pair": r.calls_per_pair,
                       "server_cpu_us_per_pair": {"set_nx_px": r.cpu_us(0), "ceiling": r.cpu_us(1),
                           "lockwise": r.cpu_us(2)},
                       "ratio_to_set_nx_px": rate(&r.library) / rate(&r.set_nx),
                       "ratio_to_ceiling": rate(&r.library) / rate(&r.ceiling)})
            })
            .collect(),
    ))
}

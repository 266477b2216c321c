//! Workload 10: uncontended throughput against the references, at several concurrencies.
//!
//! For each concurrency (tasks of one process, each on its own key, one multiplexed RESP3
//! connection per side, the kind lockwise uses) three rows are measured, interleaved over two
//! rounds so drift on a shared machine hits all of them:
//! - `SET NX PX`: a plain non-reentrant lock, `SET key token NX PX 30000` and a
//!   compare-and-delete script (`GET` = token → `DEL`): what a good non-reentrant crate does;
//! - ceiling: lockwise's own lock and unlock scripts sent raw (workload 1 at this concurrency);
//! - lockwise: `lock()` → `unlock()` through the library, with its script calls per pair;
//! - floor: two empty script calls (`return 1`) per pair, the least any design that runs one
//!   script for each lock and each unlock can cost Redis.
//!
//! After the sweep, the batched floor: the Redis commands of lockwise's pair, 64 pairs per
//! script call (`floor_pairs.lua`), so the cost of the script call is shared. That is the
//! least a pair on the hash layout can cost Redis, however script calls are batched.
//!
//! At concurrency 1 the pair latency (p50 / p99) is the lone caller's. Each row also gives the
//! server's CPU time per pair (`INFO cpu`, user + system, over the row's runs): what one
//! Redis spends for each client's pair, whatever the client machine can do.

use serde_json::{json, Value as Json};

use super::{
    ceiling_at, cpu_seconds, mean, raw_conn, redis, script_calls, timed_pairs_at, uncontended_at,
    BoxError, Info, Rate,
};

/// The concurrencies of the sweep.
const TASKS: [usize; 4] = [1, 8, 64, 256];

/// Compare-and-delete: the release of a `SET NX PX` lock.
const COMPARE_AND_DELETE: &str =
    "if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end return 0";

/// The least a script call can do: the floor's two calls per pair run it.
const EMPTY: &str = "return 1";

/// Pairs per script call of the batched floor.
const BATCH: usize = 64;

/// Loads `source` and returns its SHA1.
async fn load(conn: &redis::aio::ConnectionManager, source: &str) -> Result<String, BoxError> {
    Ok(redis::cmd("SCRIPT")
        .arg("LOAD")
        .arg(source)
        .query_async(&mut conn.clone())
        .await?)
}

/// The floor: two empty script calls per pair (each with its lock's key), `tasks` tasks.
async fn empty_scripts(url: &str, seconds: f64, tasks: usize) -> Result<Rate, BoxError> {
    let conn = raw_conn(url).await?;
    let sha = load(&conn, EMPTY).await?;
    let run_id = uuid::Uuid::new_v4().simple().to_string();
    timed_pairs_at(tasks, seconds, move |i| {
        let mut conn = conn.clone();
        let key = format!("bench:floor:{{{run_id}-{i}}}");
        let sha = sha.clone();
        async move {
            for _ in 0..2 {
                let _: i64 = redis::cmd("EVALSHA")
                    .arg(&sha)
                    .arg(1)
                    .arg(&key)
                    .query_async(&mut conn)
                    .await?;
            }
            Ok(())
        }
    })
    .await
}

/// The batched floor: `tasks` tasks, each sending [`BATCH`] pairs' commands per script call
/// on keys of its own. Returns the round's rate in script calls (each is `BATCH` pairs).
async fn batched_pairs(url: &str, seconds: f64, tasks: usize) -> Result<Rate, BoxError> {
    let conn = raw_conn(url).await?;
    let sha = load(&conn, include_str!("floor_pairs.lua")).await?;
    let run_id = uuid::Uuid::new_v4().simple().to_string();
    timed_pairs_at(tasks, seconds, move |i| {
        let mut conn = conn.clone();
        let sha = sha.clone();
        let owner = format!("{run_id}:{i}");
        let keys: Vec<String> = (0..BATCH)
            .flat_map(|j| {
                let tag = format!("{{{run_id}-{i}-{j}}}");
                ["lock", "claim", "channel", "fairqueue"]
                    .map(|r| format!("bench:batched:{r}:{tag}"))
            })
            .collect();
        async move {
            let done: usize = redis::cmd("EVALSHA")
                .arg(&sha)
                .arg(keys.len())
                .arg(&keys)
                .arg(&owner)
                .arg(30_000)
                .arg(&owner)
                .query_async(&mut conn)
                .await?;
            if done != BATCH {
                return Err(format!("the batched floor did {done} of {BATCH} pairs").into());
            }
            Ok(())
        }
    })
    .await
}

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
    floor: Vec<Rate>,
    calls_per_pair: f64,
    /// Server CPU seconds and pairs per variant: SET NX PX, ceiling, lockwise, floor.
    cpu: [(f64, usize); 4],
    /// This process's CPU seconds per variant, over the same rounds.
    client_cpu: [f64; 4],
}

impl Row {
    /// Server CPU µs per pair of variant `i`.
    fn cpu_us(&self, i: usize) -> f64 {
        let (s, n) = self.cpu[i];
        s * 1e6 / n.max(1) as f64
    }

    /// Runs one round of variant `i`, adding its server and client CPU time to the row.
    async fn measure(
        &mut self,
        i: usize,
        stats: &mut redis::aio::ConnectionManager,
        round: impl std::future::Future<Output = Result<Rate, BoxError>>,
    ) -> Result<Rate, BoxError> {
        cpu_of(stats, &mut self.cpu[i], &mut self.client_cpu[i], round).await
    }

    /// Client (this process's) CPU µs per pair of variant `i`.
    fn client_us(&self, i: usize) -> f64 {
        self.client_cpu[i] * 1e6 / self.cpu[i].1.max(1) as f64
    }
}

/// The server's CPU time so far (user + system, seconds).
async fn server_cpu(conn: &mut redis::aio::ConnectionManager) -> Result<f64, BoxError> {
    let info = Info::read(conn, "cpu").await?;
    Ok(info.number::<f64>("used_cpu_user") + info.number::<f64>("used_cpu_sys"))
}

/// Runs one measured round and adds its server CPU time and pairs to `acc`, and this
/// process's CPU time to `client`.
async fn cpu_of(
    stats: &mut redis::aio::ConnectionManager,
    acc: &mut (f64, usize),
    client: &mut f64,
    round: impl std::future::Future<Output = Result<Rate, BoxError>>,
) -> Result<Rate, BoxError> {
    let before = server_cpu(stats).await?;
    let own = cpu_seconds();
    let r = round.await?;
    *client += cpu_seconds() - own;
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
            floor: Vec::new(),
            calls_per_pair: 0.0,
            cpu: [(0.0, 0); 4],
            client_cpu: [0.0; 4],
        };
        let (mut calls, mut pairs) = (0u64, 0usize);
        for _ in 0..2 {
            let r = row
                .measure(0, &mut stats, set_nx_px(url, round, tasks))
                .await?;
            row.set_nx.push(r);
            let r = row
                .measure(1, &mut stats, ceiling_at(url, round, tasks))
                .await?;
            row.ceiling.push(r);
            let before = script_calls(&mut stats).await?.0;
            let lib = row
                .measure(2, &mut stats, uncontended_at(url, round, tasks))
                .await?;
            // The renewals of other workloads are over; the INFO call itself is not a script.
            calls += script_calls(&mut stats).await?.0 - before;
            pairs += lib.pairs;
            row.library.push(lib);
            let r = row
                .measure(3, &mut stats, empty_scripts(url, round, tasks))
                .await?;
            row.floor.push(r);
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
            "  server CPU per pair    SET NX PX {:.1} µs  ceiling {:.1} µs  lockwise {:.1} µs  \
             floor (two empty script calls) {:.1} µs, {:.0} pairs/s",
            row.cpu_us(0),
            row.cpu_us(1),
            row.cpu_us(2),
            row.cpu_us(3),
            rate(&row.floor)
        );
        println!(
            "  client CPU per pair    SET NX PX {:.1} µs  ceiling {:.1} µs  lockwise {:.1} µs  floor {:.1} µs",
            row.client_us(0),
            row.client_us(1),
            row.client_us(2),
            row.client_us(3)
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
    // The batched floor, against the reference at 64 tasks measured just before it.
    let (mut batched, mut client) = ((0.0, 0), 0.0);
    for _ in 0..2 {
        cpu_of(
            &mut stats,
            &mut batched,
            &mut client,
            batched_pairs(url, round, 4),
        )
        .await?;
    }
    let batched_us = batched.0 * 1e6 / (batched.1.max(1) * BATCH) as f64;
    let reference_us = rows
        .iter()
        .find(|r| r.tasks == 64)
        .map_or(0.0, |r| r.cpu_us(0));
    println!(
        "batched floor            server CPU per pair {batched_us:.1} µs with {BATCH} pairs per script call \
         (SET NX PX at x64: {reference_us:.1} µs)"
    );
    let rows_json = Json::Array(
        rows.iter()
            .map(|r| {
                json!({"tasks": r.tasks, "set_nx_px": json_of(&r.set_nx), "ceiling": json_of(&r.ceiling),
                       "lockwise": json_of(&r.library), "script_calls_per_pair": r.calls_per_pair,
                       "floor": json_of(&r.floor),
                       "server_cpu_us_per_pair": {"set_nx_px": r.cpu_us(0), "ceiling": r.cpu_us(1),
                           "lockwise": r.cpu_us(2), "floor": r.cpu_us(3)},
                       "client_cpu_us_per_pair": {"set_nx_px": r.client_us(0), "ceiling": r.client_us(1),
                           "lockwise": r.client_us(2), "floor": r.client_us(3)},
                       "ratio_to_set_nx_px": rate(&r.library) / rate(&r.set_nx),
                       "ratio_to_ceiling": rate(&r.library) / rate(&r.ceiling)})
            })
            .collect(),
    );
    Ok(
        json!({"rows": rows_json, "batched_floor_server_cpu_us_per_pair": batched_us,
              "batched_floor_pairs_per_call": BATCH}),
    )
}

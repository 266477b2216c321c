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
    ceiling_at, cpu_seconds, load_script, mean, raw_conn, redis, script_calls, timed_pairs_at,
    uncontended_at, BoxError, Info, Rate,
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

/// The floor: two empty script calls per pair (each with its lock's key), `tasks` tasks.
async fn empty_scripts(url: &str, seconds: f64, tasks: usize) -> Result<Rate, BoxError> {
    let conn = raw_conn(url).await?;
    let sha = load_script(&conn, EMPTY).await?;
    let run_id = lockwise::Uuid::new_v4().simple().to_string();
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
    let sha = load_script(&conn, include_str!("floor_pairs.lua")).await?;
    let run_id = lockwise::Uuid::new_v4().simple().to_string();
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

/// `SET key value NX PX 30000` on a key only this task uses: an error if it was taken.
pub(crate) async fn take_per_task_key(
    conn: &mut redis::aio::ConnectionManager,
    key: &str,
    value: &str,
) -> Result<(), BoxError> {
    let taken: Option<String> = redis::cmd("SET")
        .arg(key)
        .arg(value)
        .arg("NX")
        .arg("PX")
        .arg(30_000)
        .query_async(conn)
        .await?;
    match taken {
        Some(_) => Ok(()),
        None => Err(format!("{key} was taken: the keys are per task").into()),
    }
}

/// The `SET NX PX` reference with `tasks` tasks, each on its own key.
pub(crate) async fn set_nx_px(url: &str, seconds: f64, tasks: usize) -> Result<Rate, BoxError> {
    let conn = raw_conn(url).await?;
    let sha = load_script(&conn, COMPARE_AND_DELETE).await?;
    let run_id = lockwise::Uuid::new_v4().simple().to_string();
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
            take_per_task_key(&mut conn, &key, &token).await?;
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

/// The variants of a row, as indexes into its arrays.
const SET_NX: usize = 0;
const CEILING: usize = 1;
const LIBRARY: usize = 2;
const FLOOR: usize = 3;

/// One concurrency's figures, per variant (an index into its vectors).
pub(crate) struct Row {
    tasks: usize,
    /// The rounds of each variant (here: SET NX PX, ceiling, lockwise, floor).
    pub(crate) rounds: Vec<Vec<Rate>>,
    /// Server CPU seconds per variant, over its rounds.
    server_cpu: Vec<f64>,
    /// This process's CPU seconds per variant, over the same rounds.
    client_cpu: Vec<f64>,
    calls_per_pair: f64,
}

impl Row {
    /// The empty figures of `variants` variants at `tasks` tasks.
    pub(crate) fn new(tasks: usize, variants: usize) -> Row {
        Row {
            tasks,
            rounds: (0..variants).map(|_| Vec::new()).collect(),
            server_cpu: vec![0.0; variants],
            client_cpu: vec![0.0; variants],
            calls_per_pair: 0.0,
        }
    }

    /// Runs one round of variant `v` and records it with its server and client CPU time.
    pub(crate) async fn measure(
        &mut self,
        v: usize,
        stats: &mut redis::aio::ConnectionManager,
        round: impl std::future::Future<Output = Result<Rate, BoxError>>,
    ) -> Result<(), BoxError> {
        let (r, server, client) = cpu_of(stats, round).await?;
        self.rounds[v].push(r);
        self.server_cpu[v] += server;
        self.client_cpu[v] += client;
        Ok(())
    }

    fn pairs(&self, v: usize) -> usize {
        self.rounds[v].iter().map(|r| r.pairs).sum::<usize>().max(1)
    }

    /// Server CPU µs per pair of variant `v`.
    pub(crate) fn server_us(&self, v: usize) -> f64 {
        self.server_cpu[v] * 1e6 / self.pairs(v) as f64
    }

    /// Client (this process's) CPU µs per pair of variant `v`.
    pub(crate) fn client_us(&self, v: usize) -> f64 {
        self.client_cpu[v] * 1e6 / self.pairs(v) as f64
    }

    /// Mean pairs/s of variant `v` over its rounds.
    pub(crate) fn rate(&self, v: usize) -> f64 {
        mean(&self.rounds[v].iter().map(|r| r.rate).collect::<Vec<_>>())
    }

    fn json(&self, v: usize) -> Json {
        let rounds = &self.rounds[v];
        let last = rounds.last();
        json!({"pairs_per_s": self.rate(v), "rounds": rounds.iter().map(|r| r.rate).collect::<Vec<_>>(),
               "pair_p50_us": last.map(|r| r.p50), "pair_p99_us": last.map(|r| r.p99),
               "server_cpu_us_per_pair": self.server_us(v), "client_cpu_us_per_pair": self.client_us(v)})
    }
}

/// The server's CPU time so far (user + system, seconds).
async fn server_cpu(conn: &mut redis::aio::ConnectionManager) -> Result<f64, BoxError> {
    let info = Info::read(conn, "cpu").await?;
    Ok(info.number::<f64>("used_cpu_user") + info.number::<f64>("used_cpu_sys"))
}

/// Runs one measured round; returns it with the server's and this process's CPU seconds.
async fn cpu_of(
    stats: &mut redis::aio::ConnectionManager,
    round: impl std::future::Future<Output = Result<Rate, BoxError>>,
) -> Result<(Rate, f64, f64), BoxError> {
    let before = server_cpu(stats).await?;
    let own = cpu_seconds();
    let r = round.await?;
    let client = cpu_seconds() - own;
    Ok((r, server_cpu(stats).await? - before, client))
}

/// Runs the sweep, prints one line per concurrency (and the lone caller's latency), and
/// returns the figures for the JSON report. Each round lasts `seconds / 2`.
pub(crate) async fn run(url: &str, seconds: f64) -> Result<Json, BoxError> {
    let round = (seconds / 2.0).max(0.5);
    let mut stats = raw_conn(url).await?;
    let mut rows = Vec::new();
    for tasks in TASKS {
        let mut row = Row::new(tasks, 4);
        let mut calls = 0u64;
        for _ in 0..2 {
            row.measure(SET_NX, &mut stats, set_nx_px(url, round, tasks))
                .await?;
            row.measure(CEILING, &mut stats, ceiling_at(url, round, tasks))
                .await?;
            let before = script_calls(&mut stats).await?.0;
            row.measure(LIBRARY, &mut stats, uncontended_at(url, round, tasks))
                .await?;
            // The renewals of other workloads are over; the INFO call itself is not a script.
            calls += script_calls(&mut stats).await?.0 - before;
            row.measure(FLOOR, &mut stats, empty_scripts(url, round, tasks))
                .await?;
        }
        row.calls_per_pair = calls as f64 / row.pairs(LIBRARY) as f64;
        let (s, c, l) = (row.rate(SET_NX), row.rate(CEILING), row.rate(LIBRARY));
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
            row.server_us(SET_NX),
            row.server_us(CEILING),
            row.server_us(LIBRARY),
            row.server_us(FLOOR),
            row.rate(FLOOR)
        );
        println!(
            "  client CPU per pair    SET NX PX {:.1} µs  ceiling {:.1} µs  lockwise {:.1} µs  floor {:.1} µs",
            row.client_us(SET_NX),
            row.client_us(CEILING),
            row.client_us(LIBRARY),
            row.client_us(FLOOR)
        );
        rows.push(row);
    }
    let lone = &rows[0];
    let p = |v: usize| lone.rounds[v].last().map_or((0.0, 0.0), |r| (r.p50, r.p99));
    let ((sp50, sp99), (lp50, lp99)) = (p(SET_NX), p(LIBRARY));
    println!(
        "lone caller (x1)         pair p50 / p99: SET NX PX {sp50:.1} / {sp99:.1} µs, lockwise {lp50:.1} / {lp99:.1} µs \
         (p50 ratio {:.2})",
        lp50 / sp50.max(f64::MIN_POSITIVE)
    );
    // The batched floor, against the reference at 64 tasks measured just before it.
    let (mut batched_cpu, mut batched_calls) = (0.0, 0);
    for _ in 0..2 {
        let (r, server, _) = cpu_of(&mut stats, batched_pairs(url, round, 4)).await?;
        batched_cpu += server;
        batched_calls += r.pairs;
    }
    let batched_us = batched_cpu * 1e6 / (batched_calls.max(1) * BATCH) as f64;
    let reference_us = rows
        .iter()
        .find(|r| r.tasks == 64)
        .map_or(0.0, |r| r.server_us(SET_NX));
    println!(
        "batched floor            server CPU per pair {batched_us:.1} µs with {BATCH} pairs per script call \
         (SET NX PX at x64: {reference_us:.1} µs)"
    );
    let rows_json = Json::Array(
        rows.iter()
            .map(|r| {
                json!({"tasks": r.tasks, "set_nx_px": r.json(SET_NX), "ceiling": r.json(CEILING),
                       "lockwise": r.json(LIBRARY), "floor": r.json(FLOOR),
                       "script_calls_per_pair": r.calls_per_pair,
                       "ratio_to_set_nx_px": r.rate(LIBRARY) / r.rate(SET_NX),
                       "ratio_to_ceiling": r.rate(LIBRARY) / r.rate(CEILING)})
            })
            .collect(),
    );
    Ok(
        json!({"rows": rows_json, "batched_floor_server_cpu_us_per_pair": batched_us,
              "batched_floor_pairs_per_call": BATCH}),
    )
}

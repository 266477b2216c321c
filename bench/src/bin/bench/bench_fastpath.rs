//! Workload 15 (`--fastpath-only`, not in the full run): what a lock whose uncontended path is
//! a native `SET NX PX` would cost, before anyone builds it.
//!
//! Today every kind's lock is a hash taken by a script (`lua/lock.lua`); the alternative is a
//! string key taken by `SET key owner NX PX`, with re-entry, overtake claims and fair queues
//! moved to slower paths. This workload times that design's uncontended pair on raw calls (no
//! library code, so it bounds the design from above) in two forms of its release:
//! - native lock, today's release inputs: the release script keeps `lua/unlock.lua`'s four
//!   keys and five arguments and its commands (`GET` for `HGET`, `DEL`, `PUBLISH`, one
//!   `EXISTS` over the claim queue and the fair queue);
//! - native lock, marked release: the release is the reference's compare-and-delete; waiters,
//!   claims and fair queues would mark the value so that a marked release takes a slower path
//!   that derives its other keys from the lock key's hash tag (Redis 7.0 and Valkey 8.1
//!   Clusters let a script touch undeclared keys of its own slot).
//!
//! Each row is set against the `SET NX PX` reference measured in the same rounds, and the
//! reference is measured twice: the second copy's ratio is the noise band of the run.
//! The library's own row (workload 10's `lockwise`) runs in the same rounds for scale.
//!
//! Two more rows keep today's hash lock and change only its release, on raw calls: today's
//! two scripts sent raw (workload 10's ceiling), and the same with a release of one key and
//! two arguments (the lock key, the owner, the expected count), as a release that derived its
//! channel and fair-queue keys from the lock key's hash tag when the hold is marked would
//! send on the common path: what passing fewer inputs alone would give.

use super::bench_throughput::{set_nx_px, take_per_task_key, Row};
use super::{
    ceiling_with, load_script, raw_conn, redis, timed_pairs_at, uncontended_at, BoxError, Rate,
};

/// The concurrencies measured.
const TASKS: [usize; 4] = [1, 8, 64, 256];

/// The two forms of the native lock's release.
#[derive(Clone, Copy)]
enum Release {
    /// Today's inputs, on a string lock: KEYS lock, channel, fair queue, claim queue; ARGV
    /// owner, message, expected count, publish command, fair channel prefix.
    TodayInputs,
    /// The marked release's fast path: an unmarked value equal to the owner is deleted; any
    /// other answers -3 (the slower path, never reached here). KEYS lock; ARGV owner.
    Marked,
}

impl Release {
    fn source(self) -> &'static str {
        match self {
            Release::TodayInputs => {
                "local v = redis.call('get', KEYS[1]) \
                 if v ~= ARGV[1] then return -1 end \
                 redis.call('del', KEYS[1]) \
                 redis.pcall(ARGV[4] == 'spublish' and 'spublish' or 'publish', KEYS[2], ARGV[2]) \
                 if redis.call('exists', KEYS[3], KEYS[4]) == 0 then return 0 end \
                 return 0"
            }
            Release::Marked => {
                "local v = redis.pcall('get', KEYS[1]) \
                 if v == ARGV[1] then redis.call('del', KEYS[1]) return 0 end return -3"
            }
        }
    }
}

/// The rows, in the order each round runs them.
const ROWS: [&str; 7] = [
    "SET NX PX",
    "SET NX PX again",
    "lockwise today",
    "native, today's release inputs",
    "native, marked release",
    "hash, today's scripts raw",
    "hash, release of 1 key + 2 args",
];

/// One native-lock pair design: `tasks` tasks, `SET NX PX` then `release`.
async fn native(url: &str, seconds: f64, tasks: usize, release: Release) -> Result<Rate, BoxError> {
    let conn = raw_conn(url).await?;
    let sha = load_script(&conn, release.source()).await?;
    let run_id = lockwise::Uuid::new_v4().simple().to_string();
    // Each task's inputs, made once (as the library's row makes its handles once): the lock
    // key, the owner, the message and the three other keys of today's release.
    let inputs: std::sync::Arc<Vec<[String; 6]>> = std::sync::Arc::new(
        (0..tasks)
            .map(|i| {
                let tag = format!("{{{run_id}-{i}}}");
                [
                    format!("bench:native:lock:{tag}"),
                    format!("{run_id}:{i}"),
                    run_id.clone(),
                    format!("bench:native:channel:{tag}"),
                    format!("bench:native:fairqueue:{tag}"),
                    format!("bench:native:claim:{tag}"),
                ]
            })
            .collect(),
    );
    timed_pairs_at(tasks, seconds, move |i| {
        let mut conn = conn.clone();
        let sha = sha.clone();
        let inputs = inputs.clone();
        async move {
            let [key, owner, message, others @ ..] = &inputs[i];
            take_per_task_key(&mut conn, key, owner).await?;
            let mut call = redis::cmd("EVALSHA");
            call.arg(&sha);
            match release {
                Release::Marked => {
                    call.arg(1).arg(key).arg(owner);
                }
                Release::TodayInputs => {
                    call.arg(4)
                        .arg(key)
                        .arg(others)
                        .arg(owner)
                        .arg(message)
                        .arg(0)
                        .arg("publish")
                        .arg("bench:native:fair:");
                }
            }
            let released: i64 = call.query_async(&mut conn).await?;
            if released != 0 {
                return Err(format!("{key}: the release answered {released}").into());
            }
            Ok(())
        }
    })
    .await
}

/// Runs the workload: three interleaved rounds of every row at each concurrency; prints the
/// median ratio to the reference (with its range), and server and client CPU per pair.
pub(crate) async fn run(url: &str, seconds: f64) -> Result<(), BoxError> {
    let round = (seconds / 2.0).max(0.5);
    let mut stats = raw_conn(url).await?;
    for tasks in TASKS {
        let mut row = Row::new(tasks, ROWS.len());
        for _ in 0..3 {
            for v in 0..ROWS.len() {
                let stats = &mut stats;
                match v {
                    0 | 1 => row.measure(v, stats, set_nx_px(url, round, tasks)).await?,
                    2 => {
                        row.measure(v, stats, uncontended_at(url, round, tasks))
                            .await?
                    }
                    3 => {
                        let pair = native(url, round, tasks, Release::TodayInputs);
                        row.measure(v, stats, pair).await?
                    }
                    4 => {
                        let pair = native(url, round, tasks, Release::Marked);
                        row.measure(v, stats, pair).await?
                    }
                    5 => {
                        let pair = ceiling_with(url, round, tasks, false);
                        row.measure(v, stats, pair).await?
                    }
                    _ => {
                        let pair = ceiling_with(url, round, tasks, true);
                        row.measure(v, stats, pair).await?
                    }
                }
            }
        }
        for (v, name) in ROWS.iter().enumerate() {
            let mut ratios: Vec<f64> = (row.rounds[v].iter().zip(&row.rounds[0]))
                .map(|(a, b)| a.rate / b.rate)
                .collect();
            ratios.sort_by(f64::total_cmp);
            println!(
                "fast path x{tasks:<4} {name:<31} {:>7.0} pairs/s  ÷ SET NX PX {:.2} ({:.2}–{:.2})  \
                 server CPU per pair {:.1} µs  client {:.1} µs",
                row.rate(v),
                ratios[1],
                ratios[0],
                ratios[2],
                row.server_us(v),
                row.client_us(v)
            );
        }
    }
    Ok(())
}

//! The Lua scripts and the one small runner that calls them.
//!
//! Each script lives in `lua/<name>.lua` with a header listing its KEYS, ARGV and replies,
//! and every one is declared here (see `scripts!` below), nowhere else; a test checks that
//! each file in `lua/` is declared and documents its interface.
//! Calls go out as EVALSHA; a NOSCRIPT reply (script cache flushed, server restarted, a
//! failover to a replica that never saw the script) is answered by sending the same call as
//! EVAL, which also reloads the cache. EVAL is safe to repeat here because NOSCRIPT means the
//! script did not run.

use std::collections::BTreeSet;
use std::sync::LazyLock;

use redis::aio::ConnectionLike;
use redis::{Cmd, FromRedisValue, RedisResult, ToRedisArgs, Value};

/// A Lua script embedded at build time with its SHA1.
pub(crate) struct Script {
    source: String,
    sha: String,
}

impl Script {
    /// The script made of `files` (their text, in order), with every `--#include <part>` line
    /// replaced by that part's code ([`PARTS`]).
    fn new(files: &[&str]) -> Script {
        let source = assemble(files);
        Script {
            sha: redis::Script::new(&source).get_hash().to_string(),
            source,
        }
    }

    /// The call as `EVALSHA` (or, with `eval`, as `EVAL` with the source).
    fn call(&self, eval: bool, keys: &[&str], args: &[&dyn ToRedisArgsDyn]) -> Cmd {
        let mut cmd = Cmd::new();
        match eval {
            false => cmd.arg("EVALSHA").arg(&self.sha),
            true => cmd.arg("EVAL").arg(&self.source),
        };
        cmd.arg(keys.len()).arg(keys);
        for a in args {
            a.write_to(&mut cmd);
        }
        cmd
    }

    /// Runs the script with `keys` and `args`: EVALSHA, then EVAL on NOSCRIPT.
    pub(crate) async fn run<T, C>(
        &self,
        conn: &mut C,
        keys: &[&str],
        args: &[&dyn ToRedisArgsDyn],
    ) -> RedisResult<T>
    where
        T: FromRedisValue,
        C: ConnectionLike + Send,
    {
        match self.call(false, keys, args).query_async(conn).await {
            Err(e) if is_noscript(&e) => {
                tracing::debug!("script cache miss (NOSCRIPT), falling back to EVAL");
                self.call(true, keys, args).query_async(conn).await
            }
            other => other,
        }
    }
}

/// Loads every core script into the server's cache (SCRIPT LOAD), so the first calls do
/// not pay a NOSCRIPT round trip. Optional: calls fall back to EVAL anyway. One command per
/// script, so on a cluster redis-rs sends each to every node.
pub(crate) async fn preload<C: ConnectionLike + Send>(conn: &mut C) -> RedisResult<()> {
    // MULTI_CHECK: the permission check at connect calls it first.
    for script in [
        &*LOCK,
        &*UNLOCK,
        &*BATCH,
        &*RENEW,
        &*FORCE_UNLOCK,
        &*MULTI_CHECK,
    ] {
        let _: redis::Value = redis::cmd("SCRIPT")
            .arg("LOAD")
            .arg(&script.source)
            .query_async(conn)
            .await?;
    }
    Ok(())
}

/// Replica acknowledgement wanted after each lock write: `WAIT replicas timeout`.
#[derive(Clone, Copy, Debug)]
pub(crate) struct ReplicaSync {
    pub(crate) replicas: u32,
    pub(crate) timeout_ms: u64,
}

impl Script {
    /// [`Script::run`] with `WAIT replicas timeout` pipelined right behind the script on the
    /// same connection: one round trip, and WAIT covers the script's write. Returns the
    /// script's reply and WAIT's (the number of replicas that acknowledged, or the error of
    /// a server that refuses WAIT).
    pub(crate) async fn run_synced<T, C>(
        &self,
        conn: &mut C,
        keys: &[&str],
        args: &[&dyn ToRedisArgsDyn],
        sync: ReplicaSync,
    ) -> RedisResult<(T, RedisResult<i64>)>
    where
        T: FromRedisValue,
        C: ConnectionLike + Send,
    {
        let call = |eval: bool| {
            let mut pipe = redis::pipe();
            pipe.ignore_errors()
                .add_command(self.call(eval, keys, args))
                .cmd("WAIT")
                .arg(sync.replicas)
                .arg(sync.timeout_ms);
            pipe
        };
        let mut replies: Vec<Value> = call(false).query_async(conn).await?;
        if matches!(replies.first(), Some(Value::ServerError(e)) if e.code() == "NOSCRIPT") {
            tracing::debug!("script cache miss (NOSCRIPT), falling back to EVAL");
            replies = call(true).query_async(conn).await?;
        }
        let mut replies = replies.into_iter();
        let (Some(script), Some(wait)) = (replies.next(), replies.next()) else {
            return Err(redis::RedisError::from((
                redis::ErrorKind::UnexpectedReturnType,
                "script + WAIT pipeline answered fewer than two replies",
            )));
        };
        let reply = T::from_redis_value(script.extract_error()?)?;
        let acks = wait
            .extract_error()
            .and_then(|v| Ok(i64::from_redis_value(v)?));
        Ok((reply, acks))
    }
}

/// Object-safe adapter so scripts take mixed argument types in one slice.
pub(crate) trait ToRedisArgsDyn: Sync {
    fn write_to(&self, cmd: &mut Cmd);
}

impl<T: ToRedisArgs + Sync> ToRedisArgsDyn for T {
    fn write_to(&self, cmd: &mut Cmd) {
        cmd.arg(self);
    }
}

fn is_noscript(e: &redis::RedisError) -> bool {
    e.code() == Some("NOSCRIPT")
}

/// Passages that several scripts share, kept once in `lua/` and spliced into each script
/// where a line reads `--#include <file>`, without the part's header comment. A part is
/// inline code, not a function: the script Redis receives still runs as one `EVALSHA` and
/// pays no closure for it.
const PARTS: &[(&str, &str)] = &[
    (
        "release_count.lua",
        include_str!("../../lua/release_count.lua"),
    ),
    ("claim_grant.lua", include_str!("../../lua/claim_grant.lua")),
    (
        "redisson_rw_mode.lua",
        include_str!("../../lua/redisson_rw_mode.lua"),
    ),
];

/// The line that splices in a part.
const INCLUDE: &str = "--#include ";

/// `files` one after the other, each `--#include <part>` line replaced by the part's code.
/// An unknown part is a defect of `lua/` (a test assembles every script).
fn assemble(files: &[&str]) -> String {
    let mut out = String::new();
    for line in files.iter().flat_map(|f| f.lines()) {
        match line.trim_start().strip_prefix(INCLUDE) {
            Some(name) => {
                let Some((_, part)) = PARTS.iter().find(|(file, _)| *file == name.trim()) else {
                    panic!("lua/: `{line}` names no part in src/wire/scripts.rs PARTS");
                };
                for code in part.lines().skip_while(|l| l.starts_with("--")) {
                    out.push_str(code);
                    out.push('\n');
                }
            }
            None => {
                out.push_str(line);
                out.push('\n');
            }
        }
    }
    out
}

/// Declares each script as a `static` [`Script`] built from its `lua/` files (several files
/// are concatenated in order: a shared prelude first; parts are spliced in, see [`PARTS`]),
/// and, for the tests, the list of what was declared.
macro_rules! scripts {
    ($($(#[$doc:meta])* $name:ident = $first:literal $(+ $rest:literal)*;)*) => {
        $(
            $(#[$doc])*
            pub(crate) static $name: LazyLock<Script> = LazyLock::new(|| {
                Script::new(&[
                    include_str!(concat!("../../lua/", $first)),
                    $(include_str!(concat!("../../lua/", $rest)),)*
                ])
            });
        )*

        /// The `lua/` files the scripts above are made of.
        #[cfg(test)]
        const DECLARED_FILES: &[&str] = &[$($first, $($rest,)*)*];

        /// Every script above, with its name.
        static ALL: &[(&str, &LazyLock<Script>)] = &[$((stringify!($name), &$name),)*];
    };
}

/// Every Redis command the scripts whose name `runs` accepts may run (each
/// `redis.call('name', ..)` or `redis.pcall('name', ..)` with a literal name in its source;
/// the publish command is chosen at run time and checked with the pub/sub commands). The
/// permission check at connect asks for these (the layout room says which scripts a layout
/// runs), so the list cannot drift from `lua/`.
pub(crate) fn commands_run(runs: impl Fn(&str) -> bool) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    for (name, script) in ALL {
        if !runs(name) {
            continue;
        }
        let source = &script.source;
        for call in ["redis.call(", "redis.pcall("] {
            for (at, _) in source.match_indices(call) {
                let rest = source[at + call.len()..].trim_start();
                let Some(quote) = rest.chars().next().filter(|q| *q == '\'' || *q == '"') else {
                    continue;
                };
                if let Some(end) = rest[1..].find(quote) {
                    out.insert(rest[1..1 + end].to_ascii_lowercase());
                }
            }
        }
    }
    out
}

scripts! {
    /// `lua/lock.lua`'s fast path, then the shared `lua/claim.lua` and
    /// `lua/lock_contended.lua` (reached only when the lock or its claim exists)
    LOCK = "lock.lua" + "claim.lua" + "lock_contended.lua";
    /// `lua/batch.lua`: the fast paths of `lua/lock.lua` and `lua/unlock.lua` for calls
    /// queued on one connection (src/engine/batch.rs)
    BATCH = "batch.lua";
    /// `lua/claim_drop.lua`: a waiter withdraws its overtake claim
    CLAIM_DROP = "claim_drop.lua";
    /// `lua/unlock.lua`, then the shared `lua/fair_queue.lua` and `lua/unlock_fair.lua`
    /// (reached only when the name has a fair queue): the release of every kind
    UNLOCK = "unlock.lua" + "fair_queue.lua" + "unlock_fair.lua";
    /// `lua/renew.lua`
    RENEW = "renew.lua";
    /// `lua/force_unlock.lua`, after the shared `lua/fair_queue.lua`: for every kind
    FORCE_UNLOCK = "fair_queue.lua" + "force_unlock.lua";
    /// `lua/rekey.lua`, then `lua/rekey_end.lua`: a guard's hold moves to an owner of its
    /// own (`detach`)
    REKEY = "rekey.lua" + "rekey_end.lua";
    /// `lua/rekey.lua`, then `lua/redisson_rekey.lua`: `detach` in Redisson's layout (a
    /// reader's timeout key moves too)
    REDISSON_REKEY = "rekey.lua" + "redisson_rekey.lua";
    /// `lua/latch_set.lua`
    LATCH_SET = "latch_set.lua";
    /// `lua/latch_count_down.lua`
    LATCH_COUNT_DOWN = "latch_count_down.lua";
    /// `lua/latch_state.lua`
    LATCH_STATE = "latch_state.lua";
    /// `lua/semaphore_set.lua`, after the shared `lua/semaphore_prelude.lua`
    SEMAPHORE_SET = "semaphore_prelude.lua" + "semaphore_set.lua";
    /// `lua/semaphore_acquire.lua`, after the shared `lua/semaphore_prelude.lua`
    SEMAPHORE_ACQUIRE = "semaphore_prelude.lua" + "semaphore_acquire.lua";
    /// `lua/semaphore_add.lua`, after the shared `lua/semaphore_prelude.lua`
    SEMAPHORE_ADD = "semaphore_prelude.lua" + "semaphore_add.lua";
    /// `lua/semaphore_drain.lua`, after the shared `lua/semaphore_prelude.lua`
    SEMAPHORE_DRAIN = "semaphore_prelude.lua" + "semaphore_drain.lua";
    /// `lua/lease_sem_acquire.lua`, after the shared `lua/lease_sem_common.lua`
    LEASE_SEM_ACQUIRE = "lease_sem_common.lua" + "lease_sem_acquire.lua";
    /// `lua/lease_sem_release.lua`, after the shared `lua/lease_sem_common.lua`
    LEASE_SEM_RELEASE = "lease_sem_common.lua" + "lease_sem_release.lua";
    /// `lua/lease_sem_update.lua`, after the shared `lua/lease_sem_common.lua`
    LEASE_SEM_UPDATE = "lease_sem_common.lua" + "lease_sem_update.lua";
    /// `lua/lease_sem_add.lua`, after the shared `lua/lease_sem_common.lua`
    LEASE_SEM_ADD = "lease_sem_common.lua" + "lease_sem_add.lua";
    /// `lua/lease_sem_state.lua`, after the shared `lua/lease_sem_common.lua`
    LEASE_SEM_STATE = "lease_sem_common.lua" + "lease_sem_state.lua";
    /// `lua/fenced_lock.lua`, after the shared `lua/claim.lua` and `lua/fence_counter.lua`
    FENCED_LOCK = "claim.lua" + "fence_counter.lua" + "fenced_lock.lua";
    /// `lua/fenced_write.lua`
    FENCED_WRITE = "fenced_write.lua";
    /// `lua/multi_check.lua`: whether members are still held by their owners.
    MULTI_CHECK = "multi_check.lua";
    /// `lua/fair_lock.lua`, after the shared `lua/fair_queue.lua`
    FAIR_LOCK = "fair_queue.lua" + "fair_lock.lua";
    /// `lua/fair_leave.lua`, after the shared `lua/fair_queue.lua`
    FAIR_LEAVE = "fair_queue.lua" + "fair_leave.lua";
    /// `lua/fair_confirm.lua`, after the shared `lua/fair_queue.lua`: a handoff's first renewal
    FAIR_CONFIRM = "fair_queue.lua" + "fair_confirm.lua";
    /// `lua/rw_read.lua`, after the shared `lua/rw_prelude.lua` and `lua/claim.lua`
    RW_READ = "rw_prelude.lua" + "claim.lua" + "rw_read.lua";
    /// `lua/rw_write.lua`, after the shared `lua/rw_prelude.lua` and `lua/claim.lua`
    RW_WRITE = "rw_prelude.lua" + "claim.lua" + "rw_write.lua";
    /// `lua/rw_unlock_read.lua`, after the shared `lua/rw_prelude.lua`
    RW_UNLOCK_READ = "rw_prelude.lua" + "rw_unlock_read.lua";
    /// `lua/rw_unlock_write.lua`, after the shared `lua/rw_prelude.lua`
    RW_UNLOCK_WRITE = "rw_prelude.lua" + "rw_unlock_write.lua";
    /// `lua/rw_leave.lua`, after the shared `lua/rw_prelude.lua`
    RW_LEAVE = "rw_prelude.lua" + "rw_leave.lua";
    /// `lua/rw_force_unlock.lua`
    RW_FORCE_UNLOCK = "rw_force_unlock.lua";
    /// `lua/redisson_unlock.lua`: a release in Redisson's layout
    REDISSON_UNLOCK = "redisson_unlock.lua";
    /// `lua/redisson_force_unlock.lua`: a force unlock in Redisson's layout
    REDISSON_FORCE_UNLOCK = "redisson_force_unlock.lua";
    /// `lua/redisson_fenced_lock.lua`, after the shared `lua/fence_counter.lua`
    REDISSON_FENCED_LOCK = "fence_counter.lua" + "redisson_fenced_lock.lua";
    /// `lua/redisson_fair_lock.lua`, after the shared `lua/redisson_fair_prelude.lua`
    REDISSON_FAIR_LOCK = "redisson_fair_prelude.lua" + "redisson_fair_lock.lua";
    /// `lua/redisson_fair_leave.lua`, after the shared `lua/redisson_fair_prelude.lua`
    REDISSON_FAIR_LEAVE = "redisson_fair_prelude.lua" + "redisson_fair_leave.lua";
    /// `lua/redisson_fair_unlock.lua`, after the shared `lua/redisson_fair_prelude.lua`
    REDISSON_FAIR_UNLOCK = "redisson_fair_prelude.lua" + "redisson_fair_unlock.lua";
    /// `lua/redisson_fair_force_unlock.lua`, after the shared `lua/redisson_fair_prelude.lua`
    REDISSON_FAIR_FORCE_UNLOCK = "redisson_fair_prelude.lua" + "redisson_fair_force_unlock.lua";
    /// `lua/redisson_semaphore_set.lua`, after the shared `lua/redisson_semaphore_prelude.lua`:
    /// `try_set_permits` in Redisson's layout
    REDISSON_SEMAPHORE_SET = "redisson_semaphore_prelude.lua" + "redisson_semaphore_set.lua";
    /// `lua/redisson_semaphore_acquire.lua`, after the shared
    /// `lua/redisson_semaphore_prelude.lua`: an acquire in Redisson's layout
    REDISSON_SEMAPHORE_ACQUIRE =
        "redisson_semaphore_prelude.lua" + "redisson_semaphore_acquire.lua";
    /// `lua/redisson_semaphore_add.lua`, after the shared `lua/redisson_semaphore_prelude.lua`:
    /// a release or `add_permits` in Redisson's layout
    REDISSON_SEMAPHORE_ADD = "redisson_semaphore_prelude.lua" + "redisson_semaphore_add.lua";
    /// `lua/redisson_semaphore_drain.lua`, after the shared
    /// `lua/redisson_semaphore_prelude.lua`: a drain in Redisson's layout
    REDISSON_SEMAPHORE_DRAIN = "redisson_semaphore_prelude.lua" + "redisson_semaphore_drain.lua";
    /// `lua/redisson_latch_set.lua`: `try_set_count` in Redisson's layout
    REDISSON_LATCH_SET = "redisson_latch_set.lua";
    /// `lua/redisson_latch_count_down.lua`: `count_down` in Redisson's layout
    REDISSON_LATCH_COUNT_DOWN = "redisson_latch_count_down.lua";
    /// `lua/redisson_rw_read.lua`: a read acquire of a `RwLock` in Redisson's layout
    REDISSON_RW_READ = "redisson_rw_read.lua";
    /// `lua/redisson_rw_write.lua`: a write acquire of a `RwLock` in Redisson's layout
    REDISSON_RW_WRITE = "redisson_rw_write.lua";
    /// `lua/redisson_rw_unlock_read.lua`: a read release in Redisson's layout
    REDISSON_RW_UNLOCK_READ = "redisson_rw_unlock_read.lua";
    /// `lua/redisson_rw_unlock_write.lua`: a write release in Redisson's layout
    REDISSON_RW_UNLOCK_WRITE = "redisson_rw_unlock_write.lua";
    /// `lua/redisson_rw_force_unlock.lua`: a `RwLock` force unlock in Redisson's layout
    REDISSON_RW_FORCE_UNLOCK = "redisson_rw_force_unlock.lua";
    /// `lua/redisson_lease_sem_acquire.lua`, after the shared
    /// `lua/redisson_lease_sem_prelude.lua`: a `LeaseSemaphore` acquire in Redisson's layout
    REDISSON_LEASE_SEM_ACQUIRE =
        "redisson_lease_sem_prelude.lua" + "redisson_lease_sem_acquire.lua";
    /// `lua/redisson_lease_sem_release.lua`, after the shared
    /// `lua/redisson_lease_sem_prelude.lua`: a release by id in Redisson's layout
    REDISSON_LEASE_SEM_RELEASE =
        "redisson_lease_sem_prelude.lua" + "redisson_lease_sem_release.lua";
    /// `lua/redisson_lease_sem_update.lua`, after the shared
    /// `lua/redisson_lease_sem_prelude.lua`: `update_lease` in Redisson's layout
    REDISSON_LEASE_SEM_UPDATE =
        "redisson_lease_sem_prelude.lua" + "redisson_lease_sem_update.lua";
    /// `lua/redisson_lease_sem_add.lua`, after the shared
    /// `lua/redisson_lease_sem_prelude.lua`: `try_set_permits` / `add_permits` in Redisson's
    /// layout
    REDISSON_LEASE_SEM_ADD = "redisson_lease_sem_prelude.lua" + "redisson_lease_sem_add.lua";
    /// `lua/redisson_lease_sem_state.lua`, after the shared
    /// `lua/redisson_lease_sem_prelude.lua`: the available and leased counts in Redisson's
    /// layout
    REDISSON_LEASE_SEM_STATE =
        "redisson_lease_sem_prelude.lua" + "redisson_lease_sem_state.lua";
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;

    /// The `--` comment lines a script file starts with.
    fn header(src: &str) -> String {
        src.lines()
            .take_while(|l| l.starts_with("--"))
            .collect::<Vec<_>>()
            .join("\n")
    }

    /// Every `KEYS[n]` / `ARGV[n]` (literal index) in the code of a script, outside comments.
    fn indexed_uses(src: &str) -> BTreeSet<String> {
        let mut uses = BTreeSet::new();
        for line in src.lines().filter(|l| !l.trim_start().starts_with("--")) {
            let code = line.split("--").next().unwrap_or("");
            for table in ["KEYS[", "ARGV["] {
                for (at, _) in code.match_indices(table) {
                    let rest = &code[at + table.len()..];
                    let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
                    if !digits.is_empty() && rest[digits.len()..].starts_with(']') {
                        uses.insert(format!("{table}{digits}]"));
                    }
                }
            }
        }
        uses
    }

    /// Reads `lua/` at test time: every file has a header naming its KEYS, ARGV and what it
    /// returns (and every `KEYS[n]` / `ARGV[n]` its code uses), and every file is part of a
    /// declared script, so no script is left orphaned or declared elsewhere.
    #[test]
    fn every_script_is_declared_here_and_documents_its_interface() {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("lua");
        let mut files = BTreeSet::new();
        for entry in std::fs::read_dir(&dir).expect("lua/ is readable") {
            let path = entry.expect("lua/ entry").path();
            if path.extension().is_some_and(|e| e == "lua") {
                let name = path.file_name().unwrap().to_string_lossy().into_owned();
                let src = std::fs::read_to_string(&path).expect("script is readable");
                let head = header(&src);
                for part in ["KEYS", "ARGV", "Returns"] {
                    assert!(head.contains(part), "{name}: {part} missing in:\n{head}");
                }
                for used in indexed_uses(&src) {
                    assert!(
                        head.contains(&used),
                        "{name} uses {used}, its header does not say"
                    );
                }
                files.insert(name);
            }
        }
        let declared: BTreeSet<String> = DECLARED_FILES
            .iter()
            .chain(PARTS.iter().map(|(file, _)| file))
            .map(|f| f.to_string())
            .collect();
        assert_eq!(
            files, declared,
            "lua/ files vs. scripts declared in src/wire/scripts.rs"
        );
        assert!(!files.is_empty());
    }

    #[test]
    fn the_commands_scripts_run_are_read_from_their_source() {
        let own = commands_run(|name| !name.starts_with("REDISSON_"));
        let all = commands_run(|_| true);
        for command in ["hincrby", "pexpire", "zadd", "time", "lrem"] {
            assert!(own.contains(command), "{command} in {own:?}");
        }
        // Only Redisson's scripts run these.
        for command in ["hlen", "rename", "zincrby", "zrevrangebyscore"] {
            assert!(!own.contains(command) && all.contains(command), "{command}");
        }
        assert!(own.is_subset(&all));
        assert!(
            !own.contains("publish"),
            "chosen at run time, not a literal"
        );
    }

    #[test]
    fn hashes_are_sha1_hex() {
        assert_eq!(LOCK.sha.len(), 40);
        assert_ne!(LOCK.sha, UNLOCK.sha);
    }

    /// Every script assembles (each `--#include` names a part), every part is spliced into
    /// some script, and no directive reaches Redis.
    #[test]
    fn parts_are_spliced_and_used() {
        let mut used = BTreeSet::new();
        for (name, script) in ALL {
            assert!(
                !script.source.contains(INCLUDE),
                "{name} still has a directive"
            );
            for (file, part) in PARTS {
                let code: String = part
                    .lines()
                    .skip_while(|l| l.starts_with("--"))
                    .map(|l| format!("{l}\n"))
                    .collect();
                if script.source.contains(&code) {
                    used.insert(*file);
                }
            }
        }
        let parts: BTreeSet<&str> = PARTS.iter().map(|(file, _)| *file).collect();
        assert_eq!(used, parts, "parts no script splices in");
    }

    /// The test support's reading of `lua/` (what the conformance test and the benchmark's
    /// raw calls run) is what the engine sends, for every script.
    #[test]
    fn the_suite_assembles_every_script_as_the_engine_does() {
        for (name, script) in ALL {
            assert_eq!(suite::lua::script(name), script.source, "{name}");
        }
    }
}

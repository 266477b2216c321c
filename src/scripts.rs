//! The Lua scripts and the one small runner that calls them.
//!
//! Each script lives in `lua/<name>.lua` with a header listing its KEYS, ARGV and replies.
//! Calls go out as EVALSHA; a NOSCRIPT reply (script cache flushed, server restarted, a
//! failover to a replica that never saw the script) is answered by sending the same call as
//! EVAL, which also reloads the cache. EVAL is safe to repeat here because NOSCRIPT means the
//! script did not run.

use std::sync::LazyLock;

use redis::aio::ConnectionLike;
use redis::{Cmd, FromRedisValue, RedisResult, ToRedisArgs, Value};

/// A Lua script embedded at build time with its SHA1.
pub(crate) struct Script {
    source: &'static str,
    sha: String,
}

impl Script {
    pub(crate) fn new(source: &'static str) -> Script {
        Script {
            sha: redis::Script::new(source).get_hash().to_string(),
            source,
        }
    }

    /// The call as `EVALSHA` (or, with `eval`, as `EVAL` with the source).
    fn call(&self, eval: bool, keys: &[&str], args: &[&dyn ToRedisArgsDyn]) -> Cmd {
        let mut cmd = Cmd::new();
        match eval {
            false => cmd.arg("EVALSHA").arg(&self.sha),
            true => cmd.arg("EVAL").arg(self.source),
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
    for script in [&*LOCK, &*UNLOCK, &*RENEW, &*FORCE_UNLOCK] {
        let _: redis::Value = redis::cmd("SCRIPT")
            .arg("LOAD")
            .arg(script.source)
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

/// `lua/lock.lua`
pub(crate) static LOCK: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("../lua/lock.lua")));
/// `lua/unlock.lua`
pub(crate) static UNLOCK: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("../lua/unlock.lua")));
/// `lua/renew.lua`
pub(crate) static RENEW: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("../lua/renew.lua")));
/// `lua/force_unlock.lua`
pub(crate) static FORCE_UNLOCK: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("../lua/force_unlock.lua")));

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_script_documents_its_interface() {
        for src in [
            include_str!("../lua/lock.lua"),
            include_str!("../lua/unlock.lua"),
            include_str!("../lua/renew.lua"),
            include_str!("../lua/force_unlock.lua"),
        ] {
            let header: String = src
                .lines()
                .take_while(|l| l.starts_with("--"))
                .collect::<Vec<_>>()
                .join("\n");
            assert!(header.contains("KEYS["), "{header}");
            assert!(
                header.contains("ARGV[") || header.contains("ARGV"),
                "{header}"
            );
            assert!(header.contains("Returns"), "{header}");
        }
    }

    #[test]
    fn hashes_are_sha1_hex() {
        assert_eq!(LOCK.sha.len(), 40);
        assert_ne!(LOCK.sha, UNLOCK.sha);
    }
}

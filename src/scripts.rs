//! The Lua scripts and the one small runner that calls them.
//!
//! Each script lives in `lua/<name>.lua` with a header listing its KEYS, ARGV and replies.
//! Calls go out as EVALSHA; a NOSCRIPT reply (script cache flushed, server restarted, a
//! failover to a replica that never saw the script) is answered by sending the same call as
//! EVAL, which also reloads the cache. EVAL is safe to repeat here because NOSCRIPT means the
//! script did not run.

use std::sync::LazyLock;

use redis::aio::ConnectionLike;
use redis::{Cmd, FromRedisValue, RedisResult, ToRedisArgs};

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
        let call = |verb: &str, body: &str| {
            let mut cmd = Cmd::new();
            cmd.arg(verb).arg(body).arg(keys.len()).arg(keys);
            for a in args {
                a.write_to(&mut cmd);
            }
            cmd
        };
        match call("EVALSHA", &self.sha).query_async(conn).await {
            Err(e) if is_noscript(&e) => {
                tracing::debug!("script cache miss (NOSCRIPT), falling back to EVAL");
                call("EVAL", self.source).query_async(conn).await
            }
            other => other,
        }
    }
}

/// Loads every core script into the server's cache (SCRIPT LOAD), so the first calls do
/// not pay a NOSCRIPT round trip. Optional: calls fall back to EVAL anyway.
pub(crate) async fn preload<C: ConnectionLike + Send>(conn: &mut C) -> RedisResult<()> {
    let mut pipe = redis::pipe();
    for script in [&*LOCK, &*UNLOCK, &*RENEW, &*FORCE_UNLOCK] {
        pipe.cmd("SCRIPT").arg("LOAD").arg(script.source).ignore();
    }
    pipe.query_async(conn).await
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

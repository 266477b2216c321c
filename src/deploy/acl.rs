//! The permission check at connect: does the connected Redis user's ACL allow what lockwise
//! runs? Finding out at the first contended wait (a refused SUBSCRIBE) or at an unlock (a
//! refused PUBLISH) is too late, so [`check`] asks once, up front, and fails the connect
//! with [`Error::Permission`] naming what is missing.
//!
//! Two steps:
//! 1. `ACL DRYRUN <user> <command> <args>` (Redis 7.0+) for every command lockwise sends,
//!    those its scripts run included, on a key and a channel under `<namespace>:`. It tells
//!    exactly which command, key or channel is refused. It needs `ACL WHOAMI` and
//!    `ACL DRYRUN` themselves, which a restricted user usually may not run: then this step
//!    is skipped (a debug log), as on servers without ACLs.
//! 2. Real calls that need no ACL rights and change nothing: a read-only script (EVALSHA,
//!    EVAL on NOSCRIPT) on a key under `<namespace>:`, and a PUBLISH (SPUBLISH on a sharded
//!    cluster) of an empty message on a channel under `<namespace>:` that no lock uses.
//!    They catch the usual gaps (no channel rights, the Redis 7 default `resetchannels`;
//!    no key pattern; no script commands) on any server.

use redis::RedisError;

use super::CommandConn;
use crate::error::{Error, Result};
use crate::key_layout::KeyLayout;
use crate::layout::commands_run;
use crate::wire::scripts::MULTI_CHECK;

/// The commands the client itself sends on the keys of the namespace (the scripts' own are
/// read from them, [`commands_run`]).
const SENT: &[&str] = &["ping", "evalsha", "eval", "hget", "exists", "pttl", "llen"];

/// How to ask `ACL DRYRUN` about each command lockwise may run: the command name, then
/// arguments where `K` stands for a key and `C` for a channel under the namespace (the
/// server checks the arity and finds the keys by position, so each needs arguments of its
/// shape). Which commands are asked about is [`SENT`] and what the scripts run; a unit test
/// checks that each has a shape here.
const SHAPES: &[&[&str]] = &[
    &["ping"],
    &[
        "evalsha",
        "0000000000000000000000000000000000000000",
        "1",
        "K",
    ],
    &["eval", "return 1", "1", "K"],
    &["time"],
    &["hset", "K", "f", "1"],
    &["hexists", "K", "f"],
    &["hget", "K", "f"],
    &["hmget", "K", "f"],
    &["hgetall", "K"],
    &["hincrby", "K", "f", "1"],
    &["hdel", "K", "f"],
    &["hlen", "K"],
    &["exists", "K"],
    &["pttl", "K"],
    &["pexpire", "K", "1"],
    &["del", "K"],
    &["rename", "K", "K"],
    &["get", "K"],
    &["set", "K", "1"],
    &["incr", "K"],
    &["decr", "K"],
    &["incrby", "K", "1"],
    &["decrby", "K", "1"],
    &["llen", "K"],
    &["lindex", "K", "0"],
    &["lrange", "K", "0", "1"],
    &["lrem", "K", "0", "w"],
    &["lpop", "K"],
    &["rpush", "K", "w"],
    &["zadd", "K", "1", "w"],
    &["zincrby", "K", "1", "w"],
    &["zrem", "K", "w"],
    &["zscore", "K", "w"],
    &["zcard", "K"],
    &["zrange", "K", "0", "0"],
    &["zrangebyscore", "K", "0", "1"],
    &["zrevrangebyscore", "K", "1", "0"],
    &["zremrangebyscore", "K", "0", "1"],
];

/// Every command a client of `layout` runs on the namespace's keys: those it sends, then
/// those its scripts run, each in its [`SHAPES`] form (a command without one, which the
/// unit test rules out, is left to the probe calls of step 2).
fn needed(layout: KeyLayout) -> Vec<&'static [&'static str]> {
    let scripts = commands_run(layout);
    let names = SENT.iter().copied().chain(
        scripts
            .iter()
            .map(String::as_str)
            .filter(|c| !SENT.contains(c)),
    );
    names
        .filter_map(|command| {
            let shape = SHAPES.iter().find(|s| s[0] == command).copied();
            if shape.is_none() {
                tracing::debug!(command, "no ACL DRYRUN form for a command");
            }
            shape
        })
        .collect()
}

/// The reads of a read-only client ([`super::read_only`]): all it needs, on keys under
/// the namespace.
const READS_NEEDED: &[&[&str]] = &[
    &["ping"],
    &["time"],
    &["scan", "0"],
    &["exists", "K"],
    &["pttl", "K"],
    &["get", "K"],
    &["hget", "K", "f"],
    &["hgetall", "K"],
    &["llen", "K"],
    &["lrange", "K", "0", "1"],
    &["zrange", "K", "0", "1"],
    &["zcard", "K"],
];

/// Checks that the connected user may run what lockwise runs on `namespace`'s keys and
/// channels; `publish` is the deployment's publish command (`"publish"` or `"spublish"`),
/// whose subscribe pair is checked with it. A `read_only` client needs only its reads
/// (step 1 alone, on [`READS_NEEDED`]): a read-only Redis user passes. The commands
/// asked for are those of `layout`'s scripts.
///
/// # Errors
/// [`Error::Permission`] naming the refused command, or the key or channel pattern;
/// [`Error::Redis`] when a probe call fails otherwise (connection lost).
///
/// # Cancel safety
/// Dropping the future abandons the check; it wrote nothing.
pub(super) async fn check(
    conn: &mut CommandConn,
    namespace: &str,
    publish: &str,
    read_only: bool,
    layout: KeyLayout,
) -> Result<()> {
    // No lock name maps to this key or channel (theirs are `<ns>:<role>:{<name>}`).
    let probe = format!("{namespace}:acl-probe");
    if read_only {
        return dry_run(conn, namespace, READS_NEEDED, &[], &probe).await;
    }
    let (subscribe, unsubscribe) = match publish {
        "spublish" => ("ssubscribe", "sunsubscribe"),
        _ => ("subscribe", "unsubscribe"),
    };
    let pubsub: [&[&str]; 3] = [&[publish, "C", "m"], &[subscribe, "C"], &[unsubscribe, "C"]];
    dry_run(conn, namespace, &needed(layout), &pubsub, &probe).await?;

    let reply: redis::RedisResult<Vec<i64>> =
        MULTI_CHECK.run(conn, &[&probe], &[&"acl-probe"]).await;
    refused(reply, namespace, "evalsha")?;
    let reply: redis::RedisResult<i64> = redis::cmd(publish)
        .arg(&probe)
        .arg("")
        .query_async(conn)
        .await;
    refused(reply, namespace, publish)?;
    Ok(())
}

/// Step 1 of the module docs: `ACL DRYRUN` for every command of `needed` and `pubsub`, if
/// the user may.
async fn dry_run(
    conn: &mut CommandConn,
    namespace: &str,
    needed: &[&[&str]],
    pubsub: &[&[&str]],
    probe: &str,
) -> Result<()> {
    let user: String = match redis::cmd("ACL").arg("WHOAMI").query_async(conn).await {
        Ok(user) => user,
        Err(e) => {
            tracing::debug!(error = %e, "ACL WHOAMI refused; not checking permissions with ACL DRYRUN");
            return Ok(());
        }
    };
    for &args in needed.iter().chain(pubsub) {
        let mut cmd = redis::cmd("ACL");
        cmd.arg("DRYRUN").arg(&user);
        for a in args {
            cmd.arg(match *a {
                "K" | "C" => probe,
                a => a,
            });
        }
        let verdict: String = match cmd.query_async(conn).await {
            Ok(verdict) => verdict,
            Err(e) => {
                // ACL DRYRUN refused, or older than Redis 7.0: step 2 still runs.
                tracing::debug!(error = %e, "ACL DRYRUN failed; not checking permissions with it");
                return Ok(());
            }
        };
        if verdict != "OK" {
            return Err(permission(&verdict, namespace, args[0]));
        }
    }
    Ok(())
}

/// Turns a permission refusal of a probe call into [`Error::Permission`]; other errors
/// pass as [`Error::Redis`], replies are dropped.
fn refused<T>(reply: redis::RedisResult<T>, namespace: &str, command: &str) -> Result<()> {
    match reply {
        Ok(_) => Ok(()),
        Err(e) if is_noperm(&e) => Err(permission(&e.to_string(), namespace, command)),
        Err(e) => Err(e.into()),
    }
}

fn is_noperm(e: &RedisError) -> bool {
    e.code() == Some("NOPERM") || e.to_string().contains("no permissions")
}

/// What a refusal text (a NOPERM error or an ACL DRYRUN verdict) says is missing: a command
/// (named in quotes by the server; `command` if not), a channel or a key.
fn permission(reason: &str, namespace: &str, command: &str) -> Error {
    // Only the server's own words count, not quoted names (a namespace may contain "key").
    let lower: String = reason
        .split('\'')
        .step_by(2)
        .collect::<String>()
        .to_ascii_lowercase();
    let what = if lower.contains("channel") {
        format!("channels `{namespace}:*` ({command})")
    } else if lower.contains("key") {
        format!("keys `{namespace}:*` ({command})")
    } else {
        let named = reason.split('\'').nth(1).unwrap_or(command);
        format!("command `{}`", named.to_ascii_lowercase())
    };
    Error::Permission {
        what,
        reason: reason.trim().to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn what(reason: &str) -> String {
        match permission(reason, "ns", "evalsha") {
            Error::Permission { what, .. } => what,
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn every_command_a_script_runs_is_asked_about() {
        for layout in [KeyLayout::Lockwise, KeyLayout::Redisson] {
            let asked: Vec<&str> = needed(layout).iter().map(|c| c[0]).collect();
            let scripts = commands_run(layout);
            for command in scripts
                .iter()
                .map(String::as_str)
                .chain(SENT.iter().copied())
            {
                assert!(
                    asked.contains(&command),
                    "{command} ({layout:?}) has no ACL DRYRUN form in SHAPES"
                );
            }
        }
        let redisson: Vec<&str> = needed(KeyLayout::Redisson).iter().map(|c| c[0]).collect();
        for command in ["hlen", "rename", "zincrby", "zrevrangebyscore"] {
            assert!(redisson.contains(&command), "{command}");
        }
    }

    /// The guide's minimal ACL rule grants every command a client of the default layout
    /// runs (what its scripts run is read from them, so a new command in `lua/` fails here
    /// until the guide says so).
    #[test]
    fn the_guides_minimal_user_may_run_every_command() {
        let guide = include_str!("../../docs/guide/deployments.md");
        let rule = guide
            .lines()
            .find(|l| l.starts_with("ACL SETUSER locker "))
            .expect("the guide's minimal user");
        let granted = |text: &str, command: &str| {
            text.split(|c: char| c.is_whitespace() || c == '`')
                .any(|w| w == format!("+{command}"))
        };
        let own = needed(KeyLayout::Lockwise);
        for command in &own {
            assert!(
                granted(rule, command[0]),
                "the guide's minimal user lacks +{}",
                command[0]
            );
        }
        // Redisson's layout: the guide names what its scripts run besides.
        let redisson = guide
            .split("\n- ")
            .find(|bullet| bullet.starts_with("In Redisson's key layout"))
            .expect("the guide's note on Redisson's layout");
        for command in needed(KeyLayout::Redisson) {
            if !own.contains(&command) {
                assert!(
                    granted(redisson, command[0]),
                    "the guide's Redisson note lacks +{}",
                    command[0]
                );
            }
        }
    }

    #[test]
    fn refusals_name_the_command_key_or_channel() {
        assert_eq!(
            what("User u has no permissions to run the 'hincrby' command"),
            "command `hincrby`"
        );
        assert_eq!(
            what("NOPERM this user has no permissions to run the 'evalsha' command"),
            "command `evalsha`"
        );
        assert_eq!(
            what("No permissions to access a key"),
            "keys `ns:*` (evalsha)"
        );
        assert_eq!(
            what("NOPERM this user has no permissions to access one of the channels used as arguments"),
            "channels `ns:*` (evalsha)"
        );
        assert_eq!(
            what("This user has no permissions to access the 'ns:acl-probe' channel"),
            "channels `ns:*` (evalsha)"
        );
    }
}

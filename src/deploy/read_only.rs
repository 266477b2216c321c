//! The gate of a read-only client ([`ClientBuilder::read_only`](crate::ClientBuilder::read_only)):
//! its command connection sends the reads in [`READS`] and refuses every other command
//! before it leaves the process, with [`read_only_refusal`] (which the crate reports as
//! `Error::ReadOnlyClient`). One gate on the connection, so no path of any kind (an acquire,
//! a release, a renewal, a count down, a force unlock, a script) can write through such a
//! client, and a read-only Redis user can run it.

use redis::{Arg, Cmd};

use crate::error::read_only_refusal;

/// What a read-only client may send: the commands of `Admin`'s views and of the handles'
/// plain reads, and the read-only subcommands of the connect checks. `(command, None)`
/// allows every form; `(command, Some(sub))` that subcommand only.
const READS: &[(&str, Option<&str>)] = &[
    ("ping", None),
    ("time", None),
    ("info", None),
    ("scan", None),
    ("exists", None),
    ("pttl", None),
    ("get", None),
    ("hget", None),
    ("hgetall", None),
    ("hexists", None),
    ("llen", None),
    ("lrange", None),
    ("lindex", None),
    ("zcard", None),
    ("zrange", None),
    ("zscore", None),
    ("pubsub", None),
    ("acl", Some("whoami")),
    ("acl", Some("dryrun")),
    ("cluster", Some("slots")),
    ("cluster", Some("shards")),
];

/// `Err` with the refusal if `cmd` is not a read a read-only client may send.
pub(super) fn gate(cmd: &Cmd) -> redis::RedisResult<()> {
    let mut words = cmd.args_iter().filter_map(|a| match a {
        Arg::Simple(bytes) => Some(String::from_utf8_lossy(bytes).to_ascii_lowercase()),
        _ => None,
    });
    let name = words.next().unwrap_or_default();
    let sub = words.next();
    let allowed = READS
        .iter()
        .any(|&(c, s)| c == name && s.is_none_or(|s| sub.as_deref() == Some(s)));
    if allowed {
        Ok(())
    } else {
        Err(read_only_refusal(&name))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_pass_and_everything_else_is_refused() {
        assert!(gate(redis::cmd("HGETALL").arg("k")).is_ok());
        assert!(gate(redis::cmd("acl").arg("WHOAMI")).is_ok());
        for cmd in [
            redis::cmd("EVALSHA").arg("0").arg(0).clone(),
            redis::cmd("SET").arg("k").arg(1).clone(),
            redis::cmd("ACL").arg("SETUSER").arg("u").clone(),
            redis::cmd("PUBLISH").arg("c").arg("m").clone(),
            redis::cmd("SCRIPT").arg("LOAD").arg("return 1").clone(),
        ] {
            let e = crate::Error::from(gate(&cmd).unwrap_err());
            assert!(e.is_read_only_client(), "{e}");
        }
    }
}

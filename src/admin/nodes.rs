//! The masters of the deployment, and the commands that must run on each of them: SCAN,
//! and PUBSUB NUMSUB where subscribers may sit on any node.
//!
//! Standalone and Sentinel have one master (the Sentinel's current one); on a Cluster the
//! masters come from `CLUSTER SLOTS` and each command is routed to one of them by address.

use redis::cluster_routing::{Route, RoutingInfo, SingleNodeRoutingInfo, SlotAddr};
use redis::{Cmd, FromRedisValue, Value};

use super::unexpected;
use crate::deploy::{self, CommandConn};
use crate::engine::Core;
use crate::error::{Error, Result};

/// Keys asked for per SCAN call (a hint to the server; it may return more or fewer).
const SCAN_COUNT: usize = 500;

/// One master: the connection itself, or a Cluster node's address.
enum Node {
    Direct(CommandConn),
    Cluster {
        conn: redis::cluster_async::ClusterConnection,
        host: String,
        port: u16,
    },
}

impl Node {
    async fn query<T: FromRedisValue>(&self, cmd: &Cmd) -> Result<T> {
        match self {
            Node::Direct(conn) => Ok(cmd.query_async(&mut conn.clone()).await?),
            Node::Cluster { conn, host, port } => {
                let routing = RoutingInfo::SingleNode(SingleNodeRoutingInfo::ByAddress {
                    host: host.clone(),
                    port: *port,
                });
                let value = conn.clone().route_command(cmd.clone(), routing).await?;
                redis::from_redis_value(value).map_err(|e| unexpected("reply", e))
            }
        }
    }
}

/// The masters of `core`'s deployment.
async fn masters(core: &Core) -> Result<Vec<Node>> {
    let deploy::Route::Cluster(conn) = &core.conn.route else {
        return Ok(vec![Node::Direct(core.conn.clone())]);
    };
    let slots: Vec<Value> = redis::cmd("CLUSTER")
        .arg("SLOTS")
        .query_async(&mut conn.clone())
        .await?;
    let mut addrs: Vec<(String, u16)> = Vec::new();
    for range in slots {
        let Value::Array(parts) = range else {
            return Err(unexpected("CLUSTER SLOTS", "a range is not an array"));
        };
        let Some(Value::Array(master)) = parts.get(2) else {
            return Err(unexpected("CLUSTER SLOTS", "a range has no master"));
        };
        let (host, port): (String, u16) = match master.as_slice() {
            [host, port, ..] => (
                redis::from_redis_value_ref(host).map_err(|e| unexpected("CLUSTER SLOTS", e))?,
                redis::from_redis_value_ref(port).map_err(|e| unexpected("CLUSTER SLOTS", e))?,
            ),
            _ => return Err(unexpected("CLUSTER SLOTS", "a master has no address")),
        };
        if !addrs.contains(&(host.clone(), port)) {
            addrs.push((host, port));
        }
    }
    Ok(addrs
        .into_iter()
        .map(|(host, port)| Node::Cluster {
            conn: conn.clone(),
            host,
            port,
        })
        .collect())
}

/// What a bounded scan found.
pub(super) struct Scan {
    /// The keys, each once.
    pub(super) keys: Vec<String>,
    /// Whether every master was scanned to the end.
    pub(super) complete: bool,
}

/// The keys `<ns>:*` of every master, at most `limit` of them. In Redisson's layout, whose
/// lock keys are bare names: every hash instead (`SCAN .. TYPE hash`), for the caller to
/// sort out which are locks.
pub(super) async fn scan(core: &Core, limit: usize) -> Result<Scan> {
    if limit == 0 {
        return Err(Error::invalid("limit", "must be at least 1 key"));
    }
    let bare = crate::layout::admin(core.layout).bare_names;
    let pattern = match bare {
        true => "*".to_string(),
        false => format!("{}:*", glob_escape(&core.namespace)),
    };
    let mut keys = Vec::new();
    for node in masters(core).await? {
        let mut cursor = 0u64;
        loop {
            if keys.len() >= limit {
                keys.truncate(limit);
                return Ok(Scan {
                    keys,
                    complete: false,
                });
            }
            let (next, batch): (u64, Vec<String>) = node
                .query(
                    redis::cmd("SCAN")
                        .arg(cursor)
                        .arg("MATCH")
                        .arg(&pattern)
                        .arg("COUNT")
                        .arg(SCAN_COUNT.min(limit))
                        .arg(bare.then_some(&["TYPE", "hash"][..])),
                )
                .await?;
            keys.extend(batch);
            cursor = next;
            if cursor == 0 {
                break;
            }
        }
    }
    // SCAN may return a key twice (rehashing); each counts once.
    keys.sort();
    keys.dedup();
    let complete = keys.len() <= limit;
    keys.truncate(limit);
    Ok(Scan { keys, complete })
}

/// Connections subscribed to `channels` (all of one lock, so of one Cluster slot): `PUBSUB
/// SHARDNUMSUB` on the slot's master when unlock messages are sharded, else `PUBSUB NUMSUB`
/// summed over every master (a plain subscription may sit on any Cluster node).
pub(super) async fn subscribers(core: &Core, channels: &[String]) -> Result<u64> {
    if channels.is_empty() {
        return Ok(0);
    }
    let sharded = core.publish == "spublish";
    let mut cmd = redis::cmd("PUBSUB");
    cmd.arg(if sharded { "SHARDNUMSUB" } else { "NUMSUB" })
        .arg(channels);
    let replies: Vec<Vec<(String, u64)>> = match (&core.conn.route, sharded) {
        (deploy::Route::Cluster(conn), true) => {
            let route = Route::with_key(channels[0].as_bytes(), SlotAddr::Master);
            let routing = RoutingInfo::SingleNode(SingleNodeRoutingInfo::SpecificNode(route));
            let value = conn.clone().route_command(cmd, routing).await?;
            vec![redis::from_redis_value(value).map_err(|e| unexpected("PUBSUB", e))?]
        }
        _ => {
            let mut all = Vec::new();
            for node in masters(core).await? {
                all.push(node.query(&cmd).await?);
            }
            all
        }
    };
    Ok(replies.iter().flatten().map(|(_, n)| n).sum())
}

/// `text` with the glob characters of SCAN MATCH escaped.
fn glob_escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        if matches!(c, '*' | '?' | '[' | ']' | '\\') {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

#[cfg(test)]
mod tests {
    #[test]
    fn glob_characters_are_escaped() {
        assert_eq!(super::glob_escape("app"), "app");
        assert_eq!(super::glob_escape("a*b?[c]\\"), "a\\*b\\?\\[c\\]\\\\");
    }
}

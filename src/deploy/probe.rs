//! Probing at connect: the checks a new client makes before it trusts a server, and the
//! small connect helpers every deployment shares.
//!
//! A probe is one plain connection that fails fast (no reconnect backoff) on a wrong address
//! or password. It preloads the scripts (except on a cluster node, where every node needs
//! them), tells a cluster node from a standalone server, reads the major version (sharded
//! pub/sub needs Redis 7) and warns when the server may evict lock keys. Replica sync is
//! checked once on the command connection: a server without `WAIT` runs without it.

use std::time::Duration;

use redis::{AsyncConnectionConfig, ConnectionInfo, IntoConnectionInfo, ProtocolVersion};

use super::CommandConn;
use crate::error::{io_timeout, Error, Result};
use crate::wire::scripts::ReplicaSync;

/// Parses `url` and asks for RESP3 (needed for push messages on one multiplexed connection).
pub(super) fn resp3(url: &str) -> Result<ConnectionInfo> {
    let info = url
        .into_connection_info()
        .map_err(|e| Error::invalid("url", format!("{}: {e}", redact(url))))?;
    let settings = info
        .redis_settings()
        .clone()
        .set_protocol(ProtocolVersion::RESP3);
    Ok(info.set_redis_settings(settings))
}

/// `url` without its password, for error messages.
pub(super) fn redact(url: &str) -> String {
    match (url.find("://"), url.rfind('@')) {
        (Some(scheme), Some(at)) if at > scheme => {
            format!("{}://***@{}", &url[..scheme], &url[at + 1..])
        }
        _ => url.to_string(),
    }
}

/// `fut` within `timeout`, else a timeout error.
pub(super) async fn within<T>(
    timeout: Duration,
    fut: impl std::future::Future<Output = redis::RedisResult<T>>,
) -> Result<T> {
    match tokio::time::timeout(timeout, fut).await {
        Ok(r) => Ok(r?),
        Err(_) => Err(Error::Redis(io_timeout(
            "connecting to the cluster timed out",
        ))),
    }
}

/// One plain connection first: fails fast (no reconnect backoff) on a wrong address or
/// password, within the connect timeout. Preloads the scripts if `preload` (and the server
/// lets it; a read-only client does not), warns about eviction and returns the server's
/// major version.
pub(super) async fn probe(
    client: &redis::Client,
    config: &AsyncConnectionConfig,
    preload: bool,
) -> Result<u32> {
    let mut probe = client
        .get_multiplexed_async_connection_with_config(config)
        .await?;
    let _: String = redis::cmd("PING").query_async(&mut probe).await?;
    let info: String = redis::cmd("INFO")
        .query_async(&mut probe)
        .await
        .unwrap_or_default(); // INFO may be renamed or forbidden (managed Redis)
    if preload && !is_cluster_node(&info) {
        // Only an optimisation: a server that refuses SCRIPT LOAD (an ACL without
        // `script|load`, a renamed SCRIPT command) still runs the scripts with EVAL.
        if let Err(e) = crate::wire::scripts::preload(&mut probe).await {
            tracing::debug!(error = %e, "script preload refused; scripts will be sent with EVAL");
        }
    }
    warn_if_evicting(&info);
    Ok(info_field(&info, "redis_version")
        .and_then(|v| v.split('.').next()?.parse().ok())
        .unwrap_or(0))
}

fn is_cluster_node(info: &str) -> bool {
    info_field(info, "cluster_enabled") == Some("1")
}

fn info_field<'a>(info: &'a str, name: &str) -> Option<&'a str> {
    info.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(':'))
        .map(str::trim)
}

/// Replica sync needs WAIT: a server that refuses it is reported once, here, and the client
/// runs without replica sync.
pub(super) async fn check_wait_support(
    conn: &mut CommandConn,
    sync: ReplicaSync,
) -> Option<ReplicaSync> {
    let reply: redis::RedisResult<i64> = redis::cmd("WAIT").arg(0).arg(0).query_async(conn).await;
    match reply {
        Ok(_) => Some(sync),
        Err(e) => {
            tracing::warn!(
                error = %e,
                "the server does not support WAIT: replica sync is off for this client"
            );
            None
        }
    }
}

/// Warns (once per client, at connect) when the server may evict keys: an evicted lock is a
/// lock silently released while its holder works, and an evicted fencing counter restarts
/// from the server clock. Under `noeviction` a full server refuses writes instead, and lock
/// calls fail closed with an OOM error ([`Error::is_oom`]).
fn warn_if_evicting(info: &str) {
    let maxmemory: u64 = info_field(info, "maxmemory")
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    let policy = info_field(info, "maxmemory_policy").unwrap_or("noeviction");
    if maxmemory > 0 && policy != "noeviction" {
        tracing::warn!(
            maxmemory,
            policy,
            "redis may evict keys (maxmemory-policy is not noeviction): an evicted lock is \
             released while its holder still works; use noeviction for lock data"
        );
    }
}

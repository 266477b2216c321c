//! RESP3 or RESP2: which protocol the connections speak.
//!
//! lockwise asks for RESP3 (`HELLO 3`), where subscription messages arrive as pushes on a
//! reconnecting connection manager. A server or proxy without `HELLO` (Redis 5, some
//! managed services and proxies, or `HELLO` renamed away) refuses that at connect; the
//! client then speaks RESP2, with a dedicated pub/sub connection for its subscriptions (see
//! the listener). [`Protocol::Resp2`](super::Protocol::Resp2) skips the RESP3 attempt. A Redis Cluster needs RESP3:
//! redis-rs has no RESP2 subscriptions on cluster connections.

use redis::{AsyncConnectionConfig, ConnectionInfo, ErrorKind, ProtocolVersion};

use super::probe::probe;
use super::Protocol;
use crate::error::{Error, Result};

/// The library name every connection of the client `self_id` announces (`CLIENT SETINFO
/// LIB-NAME`, sent by redis-rs with the connection's setup and never failing it), so an
/// operator can tell in `CLIENT LIST` which lockwise client a connection belongs to (the
/// owner field of its holds starts with the same id). Redis >= 7.2 and Valkey show it; older
/// servers ignore it.
fn lib_name(self_id: &str) -> String {
    format!("lockwise:{self_id}")
}

/// `settings` announcing the client `self_id` by its library name (see [`lib_name`]).
pub(super) fn named(
    settings: redis::RedisConnectionInfo,
    self_id: &str,
) -> redis::RedisConnectionInfo {
    settings.set_lib_name(lib_name(self_id), env!("CARGO_PKG_VERSION"))
}

/// `info` asking for `version`.
pub(super) fn with_protocol(info: ConnectionInfo, version: ProtocolVersion) -> ConnectionInfo {
    let settings = info.redis_settings().clone().set_protocol(version);
    info.set_redis_settings(settings)
}

/// Whether `e` says the server does not speak RESP3: `HELLO` unknown (renamed, or a server
/// or proxy without it) or the protocol version refused (`NOPROTO`).
pub(super) fn refuses_resp3(e: &Error) -> bool {
    let Error::Redis(e) = e else {
        return false;
    };
    if e.kind() == ErrorKind::RESP3NotSupported || e.code() == Some("NOPROTO") {
        return true;
    }
    // redis-rs recognizes only the old wording (with backquotes); Redis 6.2+ quotes with '.
    let detail = e.detail().unwrap_or_default().to_ascii_lowercase();
    detail.contains("unknown command") && detail.contains("hello")
}

/// Probes the standalone server at `info` ([`probe`]) in the protocol it speaks: RESP3
/// unless `protocol` forces RESP2, or RESP2 after the server refused `HELLO` (which fails
/// the probe's connection setup, before it runs anything). Returns the client for that
/// protocol.
pub(super) async fn probe_in_protocol(
    info: ConnectionInfo,
    protocol: Protocol,
    config: &AsyncConnectionConfig,
    preload: bool,
) -> Result<redis::Client> {
    let client = redis::Client::open(with_protocol(info.clone(), protocol.first()))?;
    match probe(&client, config, preload).await {
        Ok(_) => Ok(client),
        Err(e) if protocol == Protocol::Auto && refuses_resp3(&e) => {
            tracing::info!("the server does not speak RESP3 (no HELLO): using RESP2");
            let client = redis::Client::open(with_protocol(info, ProtocolVersion::RESP2))?;
            probe(&client, config, preload).await?;
            Ok(client)
        }
        Err(e) => Err(e),
    }
}

/// The error for a Redis Cluster that does not speak RESP3, or a forced RESP2 on one.
pub(super) fn cluster_needs_resp3() -> Error {
    Error::invalid(
        "protocol",
        "a Redis Cluster client needs RESP3 (HELLO): redis-rs has no RESP2 subscriptions on \
         cluster connections",
    )
}

//! Cluster: the redis-rs cluster client both connections of a Cluster deployment use.
//!
//! The command connection and the subscription listener each build one from the same seeds,
//! with RESP3 and lockwise's timeouts; the listener's also carries its push sender.

use std::time::Duration;

use redis::{ConnectionInfo, ProtocolVersion};

use crate::error::{Error, Result};

/// A redis-rs cluster client for `seeds`, RESP3, with lockwise's timeouts. `push` receives the
/// subscription messages (the listener's connection); `None` for the command connection.
pub(crate) fn cluster_client(
    seeds: &[ConnectionInfo],
    connect_timeout: Duration,
    response_timeout: Duration,
    push: Option<impl redis::aio::AsyncPushSender>,
) -> Result<redis::cluster::ClusterClient> {
    if seeds.is_empty() {
        return Err(Error::invalid("cluster seeds", "no seed address given"));
    }
    let mut builder = redis::cluster::ClusterClientBuilder::new(seeds.to_vec())
        .use_protocol(ProtocolVersion::RESP3)
        .connection_timeout(connect_timeout)
        .response_timeout(response_timeout)
        .retries(6)
        .min_retry_wait(50)
        .max_retry_wait(1000);
    if let Some(push) = push {
        builder = builder.push_sender(push);
    }
    builder
        .build()
        .map_err(|e| Error::invalid("cluster seeds", e.to_string()))
}

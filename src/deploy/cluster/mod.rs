//! Cluster: connecting through seeds, the redis-rs cluster clients, and (in
//! [`send`](mod@send)) the resending of commands the Cluster refused unrun.
//!
//! The command connection and the subscription listener each build a cluster client from
//! the same seeds, with RESP3 and lockwise's timeouts; the listener's also carries its push
//! sender. The topology past the seeds is discovered by redis-rs. The command connection's
//! client is built with `retries(0)`, so that redis-rs sends each command once, and
//! [`send`](fn@send) resends what the Cluster refused unrun (DESIGN invariant 13: see
//! "At most once" in [`send`](mod@send)).
//!
//! # Layout
//! - this file: the clients, and connecting through the seeds.
//! - [`send`](mod@send): the command connection's commands, sent at most once.

mod send;

use std::time::Duration;

use redis::{ConnectionInfo, ProtocolVersion};

use super::probe::{probe, resp3, within};
use super::protocol;
use super::Protocol;
use super::{CommandConn, Options, Route, Subscriber};
use crate::error::{Error, Result};

pub(super) use send::{send, send_pipeline};

/// The subscription listener's redis-rs cluster client for `seeds`, RESP3, with lockwise's
/// timeouts; `push` receives the subscription messages. It keeps redis-rs's own retries:
/// it sends only `(S)SUBSCRIBE`, `(S)UNSUBSCRIBE` and `PING`, which are safe to run twice.
/// The command connection's is [`command_client`].
pub(crate) fn cluster_client(
    seeds: &[ConnectionInfo],
    connect_timeout: Duration,
    response_timeout: Duration,
    push: Option<impl redis::aio::AsyncPushSender>,
) -> Result<redis::cluster::ClusterClient> {
    let mut builder = builder(seeds, connect_timeout, response_timeout)?
        .retries(6)
        .min_retry_wait(50)
        .max_retry_wait(1000);
    if let Some(push) = push {
        builder = builder.push_sender(push);
    }
    build(builder)
}

/// The command connection's redis-rs cluster client: as [`cluster_client`], but with
/// `retries(0)`, so that redis-rs never sends a script a second time after it may have run
/// (see "At most once" in [`send`](mod@send)); [`send`](fn@send) resends what the Cluster
/// refused unrun.
fn command_client(
    seeds: &[ConnectionInfo],
    connect_timeout: Duration,
    response_timeout: Duration,
) -> Result<redis::cluster::ClusterClient> {
    build(builder(seeds, connect_timeout, response_timeout)?.retries(0))
}

/// A cluster client builder for `seeds` with RESP3 and lockwise's timeouts.
fn builder(
    seeds: &[ConnectionInfo],
    connect_timeout: Duration,
    response_timeout: Duration,
) -> Result<redis::cluster::ClusterClientBuilder> {
    if seeds.is_empty() {
        return Err(Error::invalid("cluster seeds", "no seed address given"));
    }
    Ok(redis::cluster::ClusterClientBuilder::new(seeds.to_vec())
        .use_protocol(ProtocolVersion::RESP3)
        .connection_timeout(connect_timeout)
        .response_timeout(response_timeout))
}

/// Builds the client; a bad seed is an invalid argument.
fn build(builder: redis::cluster::ClusterClientBuilder) -> Result<redis::cluster::ClusterClient> {
    builder
        .build()
        .map_err(|e| Error::invalid("cluster seeds", e.to_string()))
}

/// Probes the cluster through its seeds (the first that answers tells the version and the
/// memory policy), then connects the command connection and the listener. Returns them
/// with the command that publishes unlock messages: `spublish` on Redis 7 (sharded
/// pub/sub), else `publish`.
pub(super) async fn connect<L: Subscriber>(
    seeds: &[String],
    options: &Options,
) -> Result<(CommandConn, L, &'static str)> {
    if options.protocol == Protocol::Resp2 {
        return Err(protocol::cluster_needs_resp3());
    }
    let seeds = seeds.iter().map(|s| resp3(s)).collect::<Result<Vec<_>>>()?;
    // Any seed answers for the cluster's version and memory policy.
    let mut version = None;
    let mut last_error = None;
    for seed in &seeds {
        match redis::Client::open(seed.clone()) {
            Ok(client) => match probe(&client, &options.probe, false).await {
                Ok(v) => {
                    version = Some(v);
                    break;
                }
                Err(e) if protocol::refuses_resp3(&e) => {
                    return Err(protocol::cluster_needs_resp3())
                }
                Err(e) => last_error = Some(e),
            },
            Err(e) => last_error = Some(e.into()),
        }
    }
    let Some(version) = version else {
        return Err(
            last_error.unwrap_or_else(|| Error::invalid("cluster seeds", "no seed address given"))
        );
    };
    let sharded = version >= 7;
    if !sharded {
        tracing::info!(
            version,
            "redis < 7 has no sharded pub/sub: unlock messages use PUBLISH, which \
             every cluster node relays"
        );
    }
    let client = command_client(&seeds, options.connect_timeout, options.response_timeout)?;
    let conn = within(options.connect_timeout, client.get_async_connection()).await?;
    let listener = L::connect_cluster(
        &seeds,
        options.connect_timeout,
        options.response_timeout,
        sharded,
        options.self_id.clone(),
    )
    .await?;
    let publish = if sharded { "spublish" } else { "publish" };
    let mut commands = CommandConn::new(Route::Cluster(conn));
    // The resends of a command refused unrun start within one response timeout, as
    // redis-rs's own retries did (its overall response timeout).
    commands.resend_within = options.response_timeout;
    Ok((commands, listener, publish))
}

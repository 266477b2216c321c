//! Cluster: sending the command connection's commands at most once, and resending those
//! the Cluster refused unrun.
//!
//! # At most once (DESIGN invariant 13)
//!
//! redis-rs 1.8's async Cluster client, given `retries(n > 0)`, sends a request again after
//! its connection dropped (`RetryMethod::Reconnect`) or its reply timed out
//! (`RetryImmediately`), although the server may have run it: an unlock, a release of
//! permits or a count down whose reply was lost then runs twice. The command connection is
//! therefore built with `retries(0)`: redis-rs sends each request once, hands every error
//! back, and still repairs itself (a MOVED or READONLY still rebuilds its slot map, a
//! dropped connection is still reconnected). What it no longer does is follow redirects, so
//! [`send`] and [`send_pipeline`] do that here, for the errors that prove the command did not
//! run ([`did_not_run`]) and for nothing else. A lost reply reaches the engine as an error,
//! and the engine settles the unknown outcome itself.

use std::time::Duration;

use redis::aio::ConnectionLike;
use redis::cluster_async::ClusterConnection;
use redis::cluster_routing::SingleNodeRoutingInfo;
use redis::{Cmd, ErrorKind, Pipeline, RedisError, RedisResult, Value};
use tokio::time::Instant;

use crate::backoff::Backoff;
use crate::error::did_not_run;

/// At most this many resends of one command refused unrun (redis-rs's former `retries(6)`).
const RESENDS: u32 = 6;

/// The pauses before resends that are not redirects: 50 ms doubling to 1 s, jittered.
const PAUSES: Backoff = Backoff::new(Duration::from_millis(50), Duration::from_secs(1));

/// The pause before resend number `n` (0-based). The first resend of a followed redirect
/// goes at once: after MOVED redis-rs has rebuilt its slot map before it routes the resend,
/// and an ASK names the node. Else 50 ms, doubling up to 1 s, jittered ([`PAUSES`]).
fn pause(n: u32, redirected: bool) -> Duration {
    if redirected && n == 0 {
        return Duration::ZERO;
    }
    PAUSES.pause(n)
}

/// Whether resend number `n`, after `pause`, may go: at most [`RESENDS`], none starting
/// later than `within` after the first send (`started`). If not, the last error is returned:
/// it says the command did not run, so the engine may send it again itself.
fn may_resend(n: u32, pause: Duration, started: Instant, within: Duration) -> bool {
    n < RESENDS && started.elapsed() + pause <= within
}

/// Sends `cmd` through the cluster connection; redis-rs (`retries(0)`) sends it once. Sent
/// again only while the reply proves it did not run ([`did_not_run`]: a redirect, a
/// failover state, or no connection to send it on): after MOVED, by slot (redis-rs has
/// rebuilt its slot map); after ASK, to the node the ASK names, behind `ASKING`; else after
/// a pause. A dropped connection or a timeout is returned: the command may have run.
/// Resends start within `within` of the first send.
pub(crate) async fn send(
    conn: &mut ClusterConnection,
    cmd: &Cmd,
    within: Duration,
) -> RedisResult<Value> {
    let started = Instant::now();
    let mut ask: Option<SingleNodeRoutingInfo> = None;
    let mut n = 0;
    loop {
        let reply = match ask.take() {
            None => conn.req_packed_command(cmd).await,
            Some(node) => asking(conn, cmd, node).await,
        };
        let e = match reply {
            Err(e) if did_not_run(&e) => e,
            other => return other,
        };
        let pause = pause(n, matches!(e.code(), Some("MOVED" | "ASK")));
        if !may_resend(n, pause, started, within) {
            return Err(e);
        }
        ask = ask_node(&e);
        tracing::debug!(error = %e, resend = n + 1, "cluster refused a command unrun; resending");
        tokio::time::sleep(pause).await;
        n += 1;
    }
}

/// [`send`] for a pipeline, which goes to one node, with one difference: `ASKING` covers one
/// command, not a pipeline, so after an ASK the pipeline goes to the slot's owner again after
/// a pause, until the slot's migration ends (then MOVED). redis-rs answers a pipeline whose
/// replies hold a redirect or a failover state with that one error, not the others' replies.
/// lockwise sends on a Cluster only pipelines for which that error proves that nothing that
/// writes ran: all keys in one slot, and only reads, or one script followed by a keyless
/// `WAIT` (which the Cluster never redirects, so the error is the script's).
pub(crate) async fn send_pipeline(
    conn: &mut ClusterConnection,
    pipeline: &Pipeline,
    offset: usize,
    count: usize,
    within: Duration,
) -> RedisResult<Vec<Value>> {
    let started = Instant::now();
    let mut n = 0;
    loop {
        let e = match conn.req_packed_commands(pipeline, offset, count).await {
            Err(e) if did_not_run(&e) => e,
            other => return other,
        };
        let pause = pause(n, e.code() == Some("MOVED"));
        if !may_resend(n, pause, started, within) {
            return Err(e);
        }
        tracing::debug!(error = %e, resend = n + 1, "cluster refused a pipeline unrun; resending");
        tokio::time::sleep(pause).await;
        n += 1;
    }
}

/// The node an ASK redirect names, for the next send of its command.
fn ask_node(e: &RedisError) -> Option<SingleNodeRoutingInfo> {
    if e.code() != Some("ASK") {
        return None;
    }
    let (addr, _slot) = e.redirect_node()?;
    let (host, port) = addr.rsplit_once(':')?;
    Some(SingleNodeRoutingInfo::ByAddress {
        host: host.to_string(),
        port: port.parse().ok()?,
    })
}

/// Sends `cmd` to `node` behind `ASKING`, as an ASK redirect asks, in one pipeline on the
/// node's connection; answers `cmd`'s reply as [`ClusterConnection::req_packed_command`]
/// would.
async fn asking(
    conn: &mut ClusterConnection,
    cmd: &Cmd,
    node: SingleNodeRoutingInfo,
) -> RedisResult<Value> {
    let mut pipeline = redis::pipe();
    pipeline.cmd("ASKING").add_command(cmd.clone());
    let mut replies = conn.route_pipeline(pipeline, 1, 1, node).await?;
    replies.pop().ok_or_else(|| {
        RedisError::from((
            ErrorKind::UnexpectedReturnType,
            "ASKING pipeline answered no reply",
        ))
    })
}

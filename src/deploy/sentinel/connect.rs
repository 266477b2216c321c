//! Connecting a Sentinel deployment: resolving its master, probing it, and connecting the
//! command connection and the subscription listener, which then follow the master.

use redis::{ProtocolVersion, RedisConnectionInfo};

use super::master::SentinelMaster;
use super::{follow, MasterAuth, SentinelSettings};
use crate::deploy::probe::{probe, resp3};
use crate::deploy::{protocol, CommandConn, Options, Route, Subscriber};
use crate::error::Result;

/// Resolves the master named `master_name` through the `sentinels` and connects to it
/// (starting the follower), probes it, then connects the listener and has it follow the
/// master. Returns them with the command that publishes unlock messages.
///
/// Sentinels and master are spoken to in RESP3, or in RESP2 if one of them refuses `HELLO`
/// (or the builder forces RESP2).
pub(crate) async fn connect<L: Subscriber>(
    sentinels: &[String],
    master_name: &str,
    auth: &MasterAuth,
    options: &Options,
) -> Result<(CommandConn, L, &'static str)> {
    let first = options.protocol.first();
    match connect_with(sentinels, master_name, auth, options, first).await {
        Err(e) if first == ProtocolVersion::RESP3 && protocol::refuses_resp3(&e) => {
            tracing::info!("a sentinel or the master does not speak RESP3 (no HELLO): using RESP2");
            connect_with(
                sentinels,
                master_name,
                auth,
                options,
                ProtocolVersion::RESP2,
            )
            .await
        }
        other => other,
    }
}

async fn connect_with<L: Subscriber>(
    sentinels: &[String],
    master_name: &str,
    auth: &MasterAuth,
    options: &Options,
    version: ProtocolVersion,
) -> Result<(CommandConn, L, &'static str)> {
    let sentinels = sentinels
        .iter()
        .map(|s| Ok(protocol::with_protocol(resp3(s)?, version)))
        .collect::<Result<Vec<_>>>()?;
    let mut master = protocol::named(RedisConnectionInfo::default(), &options.self_id)
        .set_protocol(version)
        .set_db(auth.db.unwrap_or(0));
    if let Some(u) = &auth.username {
        master = master.set_username(u);
    }
    if let Some(p) = &auth.password {
        master = master.set_password(p);
    }
    let settings = SentinelSettings {
        sentinels,
        master_name: master_name.to_string(),
        master,
        connect_timeout: options.connect_timeout,
        response_timeout: options.response_timeout,
        check_interval: options.sentinel_check_interval,
        watchdog_timeout: options.watchdog_timeout,
    };
    let sentinel = SentinelMaster::connect(settings, options.manager.clone()).await?;
    follow::start(&sentinel);
    let client = sentinel.switches().borrow().clone();
    probe(&client, &options.probe, !options.read_only).await?;
    let listener = L::connect(
        client,
        options.manager.clone(),
        options.connect_timeout,
        options.response_timeout,
        options.self_id.clone(),
    )
    .await?;
    listener.follow(sentinel.switches(), options.manager.clone());
    Ok((
        CommandConn::new(Route::Sentinel(sentinel)),
        listener,
        "publish",
    ))
}

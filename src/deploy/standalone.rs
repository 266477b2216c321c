//! Standalone: one server, one connection manager for commands (it reconnects by itself)
//! and one for the subscription listener.

use redis::aio::ConnectionManager;

use super::probe::resp3;
use super::{protocol, CommandConn, Options, Route, Subscriber, Target};
use crate::error::Result;

/// Probes the server at `target` (RESP3, or RESP2 if it has no `HELLO` or the builder
/// forces it), then connects the command connection and the listener. Returns them with the
/// command that publishes unlock messages.
pub(super) async fn connect<L: Subscriber>(
    target: &Target,
    options: &Options,
) -> Result<(CommandConn, L, &'static str)> {
    let info = match target {
        Target::Url(url) => resp3(url)?,
        Target::Info(info) => (**info).clone(),
    };
    let settings = protocol::named(info.redis_settings().clone(), &options.self_id);
    let info = info.set_redis_settings(settings);
    let client =
        protocol::probe_in_protocol(info, options.protocol, &options.probe, !options.read_only)
            .await?;
    let conn = ConnectionManager::new_with_config(client.clone(), options.manager.clone()).await?;
    let listener = L::connect(
        client,
        options.manager.clone(),
        options.connect_timeout,
        options.response_timeout,
        options.self_id.clone(),
    )
    .await?;
    Ok((CommandConn::new(Route::Single(conn)), listener, "publish"))
}

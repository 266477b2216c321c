//! Standalone: one server, one connection manager for commands (it reconnects by itself)
//! and one for the subscription listener.

use redis::aio::ConnectionManager;

use super::probe::{probe, redact, resp3};
use super::{Commands, Options, Subscriber};
use crate::error::{Error, Result};

/// Probes the server at `url`, then connects the command connection and the listener.
/// Returns them with the command that publishes unlock messages.
pub(super) async fn connect<L: Subscriber>(
    url: &str,
    options: &Options,
) -> Result<(Commands, L, &'static str)> {
    let client = redis::Client::open(resp3(url)?)
        .map_err(|e| Error::invalid("url", format!("{}: {e}", redact(url))))?;
    probe(&client, &options.probe).await?;
    let conn = ConnectionManager::new_with_config(client.clone(), options.manager.clone()).await?;
    let listener = L::connect(
        client,
        options.manager.clone(),
        options.response_timeout,
        options.self_id.clone(),
    )
    .await?;
    Ok((Commands::Single(conn), listener, "publish"))
}

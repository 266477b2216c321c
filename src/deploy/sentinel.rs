//! Sentinel: the current master of a Sentinel-monitored set, and following it.
//!
//! redis-rs resolves a Sentinel master once and never again, so a failover would leave the
//! client writing to a demoted replica. [`SentinelMaster`] resolves the master itself
//! (`SENTINEL get-master-addr-by-name`, then `ROLE`), re-resolves it on `+switch-master`,
//! on `READONLY` and after connection errors, and tells the subscription listener about each
//! new master through a [`watch`] channel.

use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use futures::StreamExt;
use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::{
    ConnectionAddr, ConnectionInfo, IntoConnectionInfo, ProtocolVersion, RedisConnectionInfo,
    RedisResult, Value,
};
use tokio::sync::watch;
use tokio::time::Instant;

use super::probe::{probe, resp3};
use super::{protocol, Commands, Options, Subscriber};
use crate::error::{Error, Result};

/// Credentials and database of a Sentinel master (set only for Sentinel deployments).
#[derive(Clone, Default)]
pub(crate) struct MasterAuth {
    pub(crate) username: Option<String>,
    pub(crate) password: Option<String>,
    pub(crate) db: Option<i64>,
}

/// Resolves the master named `master_name` through the `sentinels` and connects to it
/// (starting the `+switch-master` watcher), probes it, then connects the listener and has it
/// follow the master. Returns them with the command that publishes unlock messages.
///
/// Sentinels and master are spoken to in RESP3, or in RESP2 if one of them refuses `HELLO`
/// (or the builder forces RESP2).
pub(super) async fn connect<L: Subscriber>(
    sentinels: &[String],
    master_name: &str,
    auth: &MasterAuth,
    options: &Options,
) -> Result<(Commands, L, &'static str)> {
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
) -> Result<(Commands, L, &'static str)> {
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
    };
    let sentinel = SentinelMaster::connect(settings, options.manager.clone()).await?;
    let client = sentinel.switches().borrow().clone();
    probe(&client, &options.probe).await?;
    let listener = L::connect(
        client,
        options.manager.clone(),
        options.connect_timeout,
        options.response_timeout,
        options.self_id.clone(),
    )
    .await?;
    listener.follow(sentinel.switches(), options.manager.clone());
    Ok((Commands::Sentinel(sentinel), listener, "publish"))
}

/// Whether a failed call may be sent again.
pub(super) enum Retry {
    Yes,
    No,
}

/// Whether `e` says the server we talk to is not (or no longer) a writable master.
pub(crate) fn is_readonly(e: &redis::RedisError) -> bool {
    e.code() == Some("READONLY")
}

fn is_connection_error(e: &redis::RedisError) -> bool {
    e.is_io_error() || e.is_connection_dropped() || e.is_connection_refusal() || e.is_timeout()
}

/// How to reach and authenticate with a Sentinel-monitored master.
#[derive(Clone)]
pub(crate) struct SentinelSettings {
    /// The sentinels' addresses (their own credentials, if any, in the URLs).
    pub(crate) sentinels: Vec<ConnectionInfo>,
    /// The monitored master's name (`sentinel monitor <name> ...`).
    pub(crate) master_name: String,
    /// Credentials, database and protocol for the master itself.
    pub(crate) master: RedisConnectionInfo,
    pub(crate) connect_timeout: Duration,
    pub(crate) response_timeout: Duration,
}

/// The current master of a Sentinel set and its command connection (see the module docs).
pub(crate) struct SentinelMaster {
    settings: SentinelSettings,
    config: ConnectionManagerConfig,
    current: RwLock<Current>,
    /// Serializes refreshes; a refresh that waited finds the work done.
    refreshing: tokio::sync::Mutex<()>,
    /// When the last refresh finished: connection errors refresh at most every
    /// [`REFRESH_EVERY`].
    last_refresh: Mutex<Option<Instant>>,
    /// The current master's client, for the subscription listener to follow.
    switches: watch::Sender<redis::Client>,
}

struct Current {
    addr: (String, u16),
    conn: ConnectionManager,
}

/// Least time between two refreshes triggered by connection errors.
const REFRESH_EVERY: Duration = Duration::from_millis(250);

impl SentinelMaster {
    /// Resolves the master and connects to it; starts the `+switch-master` watcher.
    pub(crate) async fn connect(
        settings: SentinelSettings,
        config: ConnectionManagerConfig,
    ) -> Result<Arc<SentinelMaster>> {
        if settings.sentinels.is_empty() {
            return Err(Error::invalid("sentinels", "no sentinel address given"));
        }
        let (addr, client) = resolve(&settings).await?;
        let conn = ConnectionManager::new_with_config(client.clone(), config.clone()).await?;
        let (switches, _) = watch::channel(client);
        let master = Arc::new(SentinelMaster {
            settings,
            config,
            current: RwLock::new(Current { addr, conn }),
            refreshing: tokio::sync::Mutex::new(()),
            last_refresh: Mutex::new(None),
            switches,
        });
        tokio::spawn(watch_switches(Arc::downgrade(&master)));
        Ok(master)
    }

    /// The current master's command connection.
    pub(crate) fn conn(&self) -> ConnectionManager {
        self.current
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .conn
            .clone()
    }

    /// Runs `call` on the current master's connection. If the master moves while the call
    /// waits (typically for the old, dead master's reconnect backoff, which can take
    /// seconds), the call is abandoned with a connection error: its outcome is unknown, which
    /// the lock paths handle, and the caller's retry goes to the new master at once.
    pub(super) async fn on_current<T, F, Fut>(&self, call: F) -> RedisResult<T>
    where
        F: FnOnce(ConnectionManager) -> Fut,
        Fut: std::future::Future<Output = RedisResult<T>>,
    {
        let mut moved = self.switches.subscribe();
        let conn = self.conn();
        tokio::select! {
            reply = call(conn) => reply,
            _ = moved.changed() => Err(redis::RedisError::from(std::io::Error::new(
                std::io::ErrorKind::ConnectionAborted,
                "the sentinel master moved while the command waited; outcome unknown",
            ))),
        }
    }

    /// The current master's client; changes after each failover.
    pub(crate) fn switches(&self) -> watch::Receiver<redis::Client> {
        self.switches.subscribe()
    }

    /// The current master's address.
    pub(crate) fn addr(&self) -> (String, u16) {
        self.current
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .addr
            .clone()
    }

    /// Reacts to a failed call: READONLY refreshes now (and allows one retry once the
    /// master moved); a connection error refreshes in the background.
    pub(super) async fn after_error(self: &Arc<Self>, error: Option<&redis::RedisError>) -> Retry {
        let Some(e) = error else {
            return Retry::No;
        };
        if is_readonly(e) {
            let before = self.addr();
            self.refresh().await;
            if self.addr() != before {
                return Retry::Yes;
            }
        } else if is_connection_error(e) {
            let due = {
                let last = self.last_refresh.lock().unwrap_or_else(|e| e.into_inner());
                last.is_none_or(|at| at.elapsed() >= REFRESH_EVERY)
            };
            if due {
                let this = self.clone();
                tokio::spawn(async move { this.refresh().await });
            }
        }
        Retry::No
    }

    /// Asks the sentinels for the master; moves the connections if it changed.
    pub(crate) async fn refresh(&self) {
        let started = Instant::now();
        let _one_at_a_time = self.refreshing.lock().await;
        let fresh = self
            .last_refresh
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .is_some_and(|at| at >= started);
        if fresh {
            return; // a refresh finished while we waited
        }
        let outcome = self.switch_if_moved().await;
        *self.last_refresh.lock().unwrap_or_else(|e| e.into_inner()) = Some(Instant::now());
        if let Err(e) = outcome {
            tracing::debug!(error = %e, "sentinel: master not resolved; keeping the current one");
        }
    }

    async fn switch_if_moved(&self) -> Result<()> {
        let (addr, client) = resolve(&self.settings).await?;
        if addr == self.addr() {
            return Ok(());
        }
        let conn = ConnectionManager::new_with_config(client.clone(), self.config.clone()).await?;
        let old = {
            let mut current = self.current.write().unwrap_or_else(|e| e.into_inner());
            let old = current.addr.clone();
            *current = Current {
                addr: addr.clone(),
                conn,
            };
            old
        };
        tracing::warn!(
            master = %self.settings.master_name,
            from = %format!("{}:{}", old.0, old.1),
            to = %format!("{}:{}", addr.0, addr.1),
            "sentinel: master moved; commands and subscriptions follow"
        );
        self.switches.send_replace(client);
        Ok(())
    }
}

/// Asks each sentinel in turn for the master's address and checks that the server there is
/// a master (`ROLE`): a sentinel may still announce a master that was demoted.
async fn resolve(settings: &SentinelSettings) -> Result<((String, u16), redis::Client)> {
    let mut last_error = None;
    for sentinel in &settings.sentinels {
        match resolve_via(settings, sentinel).await {
            Ok(found) => return Ok(found),
            Err(e) => last_error = Some(e),
        }
    }
    Err(last_error.unwrap_or_else(|| Error::invalid("sentinels", "no sentinel address given")))
}

async fn resolve_via(
    settings: &SentinelSettings,
    sentinel: &ConnectionInfo,
) -> Result<((String, u16), redis::Client)> {
    let config = redis::AsyncConnectionConfig::new()
        .set_connection_timeout(Some(settings.connect_timeout))
        .set_response_timeout(Some(settings.response_timeout));
    let mut conn = redis::Client::open(sentinel.clone())?
        .get_multiplexed_async_connection_with_config(&config)
        .await?;
    let reply: Option<(String, u16)> = redis::cmd("SENTINEL")
        .arg("get-master-addr-by-name")
        .arg(&settings.master_name)
        .query_async(&mut conn)
        .await?;
    let Some((host, port)) = reply else {
        return Err(Error::UnexpectedReply(format!(
            "sentinel {} does not know a master named `{}`",
            sentinel.addr(),
            settings.master_name
        )));
    };
    let info = ConnectionAddr::Tcp(host.clone(), port)
        .into_connection_info()?
        .set_redis_settings(settings.master.clone());
    let client = redis::Client::open(info)?;
    let mut master = client
        .get_multiplexed_async_connection_with_config(&config)
        .await?;
    let role: Vec<Value> = redis::cmd("ROLE").query_async(&mut master).await?;
    match role.first() {
        Some(Value::BulkString(r)) if r == b"master" => Ok(((host, port), client)),
        Some(Value::SimpleString(r)) if r == "master" => Ok(((host, port), client)),
        other => Err(Error::UnexpectedReply(format!(
            "{host}:{port}, announced as master `{}`, has role {other:?}",
            settings.master_name
        ))),
    }
}

/// Listens for `+switch-master` on one sentinel at a time (the next one if it goes away) and
/// refreshes the master when ours is announced. Ends when the client is dropped.
async fn watch_switches(master: std::sync::Weak<SentinelMaster>) {
    let mut next = 0usize;
    loop {
        let Some(m) = master.upgrade() else {
            return;
        };
        let sentinel = m.settings.sentinels[next % m.settings.sentinels.len()].clone();
        let name = m.settings.master_name.clone();
        let connect_timeout = m.settings.connect_timeout;
        drop(m);
        next += 1;
        let subscribed = async {
            let mut pubsub = redis::Client::open(sentinel)?.get_async_pubsub().await?;
            pubsub.subscribe("+switch-master").await?;
            RedisResult::Ok(pubsub)
        };
        let pubsub = match tokio::time::timeout(connect_timeout, subscribed).await {
            Ok(Ok(p)) => p,
            _ => {
                tokio::time::sleep(Duration::from_millis(200)).await;
                continue;
            }
        };
        // A switch may have happened while no sentinel was watched.
        if let Some(m) = master.upgrade() {
            m.refresh().await;
        }
        let mut messages = pubsub.into_on_message();
        loop {
            // Wake up now and then to notice a dropped client.
            let msg = match tokio::time::timeout(Duration::from_secs(1), messages.next()).await {
                Ok(Some(msg)) => msg,
                Ok(None) => break, // the sentinel went away: watch the next one
                Err(_) if master.strong_count() == 0 => return,
                Err(_) => continue,
            };
            // "<name> <old ip> <old port> <new ip> <new port>"
            let payload: String = msg.get_payload().unwrap_or_default();
            if payload.split(' ').next() == Some(name.as_str()) {
                let Some(m) = master.upgrade() else {
                    return;
                };
                m.refresh().await;
            }
        }
    }
}

//! [`Client`]: connections, the subscription listener and the watchdog, shared by all locks.

use std::sync::Arc;
use std::time::Duration;

use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::{AsyncConnectionConfig, IntoConnectionInfo, ProtocolVersion};
use uuid::Uuid;

use crate::error::{Error, Result};
use crate::keys::{check_millis, check_namespace};
use crate::listener::Listener;
use crate::reentrant::RLock;
use crate::watchdog::Watchdog;

/// Default watchdog timeout: a watchdog lock's TTL, renewed every third of it.
pub const DEFAULT_WATCHDOG_TIMEOUT: Duration = Duration::from_secs(30);
/// Default per-command response timeout.
pub const DEFAULT_RESPONSE_TIMEOUT: Duration = Duration::from_secs(1);
/// Default timeout for establishing a connection.
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// Default key namespace (prefix of every key and channel).
pub const DEFAULT_NAMESPACE: &str = "relock";

/// A connection to Redis and the background machinery every lock of it shares: one command
/// connection, one subscription connection and one watchdog task.
///
/// Cheap to clone (an `Arc` inside); create one per process and clone it where needed. Each
/// `Client` has its own id, part of every lock owner it creates, so two `Client`s in one
/// process are two different owners.
///
/// Dropping the last clone stops the watchdog: locks held with the watchdog then expire within
/// the watchdog timeout and their guards report [`lost`](crate::RLockGuard::lost). Lock handles
/// and guards do not keep the watchdog alive; they keep only the connections.
#[derive(Clone)]
pub struct Client {
    inner: Arc<ClientHandle>,
}

/// Stops the watchdog when the last `Client` clone goes away.
struct ClientHandle {
    core: Arc<Core>,
}

impl Drop for ClientHandle {
    fn drop(&mut self) {
        self.core.watchdog.shutdown();
    }
}

/// State shared by the client, its lock handles and guards.
pub(crate) struct Core {
    pub(crate) id: Uuid,
    /// `id` as text: the owner prefix and the unlock message payload.
    pub(crate) id_str: String,
    pub(crate) namespace: String,
    pub(crate) conn: ConnectionManager,
    pub(crate) listener: Listener,
    pub(crate) watchdog: Watchdog,
    pub(crate) watchdog_timeout: Duration,
    pub(crate) watchdog_ms: u64,
    pub(crate) handle: tokio::runtime::Handle,
}

impl Client {
    /// Connects with the default settings.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for a malformed URL, [`Error::Redis`] when the server cannot
    /// be reached or rejects the connection (e.g. wrong password).
    ///
    /// # Cancel safety
    /// Dropping the future abandons the connection attempt; nothing is left behind.
    pub async fn connect(url: &str) -> Result<Client> {
        Client::builder(url).build().await
    }

    /// Starts a [`ClientBuilder`] for the Redis server at `url`
    /// (`redis://[user:password@]host[:port][/db]`, `rediss://` with TLS support in redis-rs).
    pub fn builder(url: impl Into<String>) -> ClientBuilder {
        ClientBuilder {
            url: url.into(),
            watchdog_timeout: DEFAULT_WATCHDOG_TIMEOUT,
            response_timeout: DEFAULT_RESPONSE_TIMEOUT,
            connect_timeout: DEFAULT_CONNECT_TIMEOUT,
            namespace: DEFAULT_NAMESPACE.to_string(),
        }
    }

    /// A handle to the reentrant lock `name`. Cheap; nothing is sent to Redis. An invalid
    /// name (empty, longer than [`MAX_NAME_LEN`](crate::MAX_NAME_LEN)) is reported by the
    /// handle's methods as [`Error::InvalidArgument`].
    pub fn lock(&self, name: impl AsRef<str>) -> RLock {
        RLock::new(self.inner.core.clone(), name.as_ref())
    }

    /// A handle to the fair (first-come, first-served) lock `name`: an [`RLock`]-like lock
    /// whose waiters acquire in the order they asked, at the cost of a queue in Redis (see
    /// [`FairLock`](crate::FairLock)). Cheap; nothing is sent to Redis. An invalid name is
    /// reported by the handle's methods as [`Error::InvalidArgument`].
    pub fn fair_lock(&self, name: impl AsRef<str>) -> crate::FairLock {
        crate::fair::FairLock::new(self.inner.core.clone(), name.as_ref())
    }

    /// A handle to the fenced lock `name`: an [`RLock`] whose every new owner gets a larger
    /// fencing token (see [`FencedLock`](crate::FencedLock)). It is the same lock as
    /// `lock(name)`. Cheap; nothing is sent to Redis; an invalid name is reported by the
    /// handle's methods.
    pub fn fenced_lock(&self, name: impl AsRef<str>) -> crate::FencedLock {
        crate::fenced::FencedLock::new(self.inner.core.clone(), name.as_ref())
    }

    /// A value kept in Redis at `key` (used as given, no namespace) that rejects writes with
    /// a stale fencing token (see [`FencedValue`](crate::FencedValue)). Cheap; nothing is
    /// sent to Redis.
    pub fn fenced_value(&self, key: impl AsRef<str>) -> crate::FencedValue {
        crate::fenced::FencedValue::new(self.inner.core.clone(), key.as_ref())
    }

    /// A handle to the multi-lock over the reentrant locks `names`: all of them or none
    /// (see [`MultiLock`](crate::MultiLock)). Names are sorted and deduplicated; an empty
    /// list or an invalid name is reported by the handle's methods as
    /// [`Error::InvalidArgument`]. Cheap; nothing is sent to Redis.
    pub fn multi_lock<I, S>(&self, names: I) -> crate::MultiLock
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        crate::multi::MultiLock::new(self.inner.core.clone(), names)
    }

    /// This client's id, the first part of every owner field it writes.
    pub fn id(&self) -> Uuid {
        self.inner.core.id
    }

    /// The TTL of watchdog locks; they are renewed every third of it.
    pub fn watchdog_timeout(&self) -> Duration {
        self.inner.core.watchdog_timeout
    }

    /// The prefix of every key and channel this client uses.
    pub fn namespace(&self) -> &str {
        &self.inner.core.namespace
    }

    /// The shared state behind this client, for lock kinds built outside this module.
    pub(crate) fn core(&self) -> &Arc<Core> {
        &self.inner.core
    }
}

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Client")
            .field("id", &self.inner.core.id)
            .field("namespace", &self.inner.core.namespace)
            .field("watchdog_timeout", &self.inner.core.watchdog_timeout)
            .finish_non_exhaustive()
    }
}

/// Settings for a [`Client`]; from [`Client::builder`].
#[derive(Debug, Clone)]
#[must_use = "a builder does nothing until .build().await"]
pub struct ClientBuilder {
    url: String,
    watchdog_timeout: Duration,
    response_timeout: Duration,
    connect_timeout: Duration,
    namespace: String,
}

impl ClientBuilder {
    /// TTL of locks taken without a lease; the watchdog renews them every `timeout / 3`.
    /// A crashed process's locks are free again at most this long after the crash.
    /// Default 30 s; at least 1 ms.
    pub fn watchdog_timeout(mut self, timeout: Duration) -> Self {
        self.watchdog_timeout = timeout;
        self
    }

    /// How long to wait for any one reply. A lock attempt whose reply is late has an unknown
    /// outcome: relock reports [`Error::Redis`] and releases whatever the attempt may have
    /// taken. Default 1 s.
    pub fn response_timeout(mut self, timeout: Duration) -> Self {
        self.response_timeout = timeout;
        self
    }

    /// How long to wait for a connection (initial and reconnects). Default 5 s.
    pub fn connect_timeout(mut self, timeout: Duration) -> Self {
        self.connect_timeout = timeout;
        self
    }

    /// Prefix of every key and channel (default `"relock"`); must not be empty or contain
    /// `{` or `}`. Clients that must see the same locks need the same namespace.
    pub fn namespace(mut self, namespace: impl Into<String>) -> Self {
        self.namespace = namespace.into();
        self
    }

    /// Checks the settings, connects (command and subscription connections, RESP3) and starts
    /// the watchdog task.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for a bad setting or URL; [`Error::Redis`] when the server
    /// is unreachable within the connect timeout or refuses the connection.
    ///
    /// # Cancel safety
    /// Dropping the future abandons the attempt; connections made so far are closed.
    pub async fn build(self) -> Result<Client> {
        check_namespace(&self.namespace)?;
        let watchdog_ms = check_millis("watchdog_timeout", self.watchdog_timeout)?;
        check_millis("response_timeout", self.response_timeout)?;
        check_millis("connect_timeout", self.connect_timeout)?;

        let info = self
            .url
            .as_str()
            .into_connection_info()
            .map_err(|e| Error::invalid("url", format!("{}: {e}", self.url)))?;
        let settings = info
            .redis_settings()
            .clone()
            .set_protocol(ProtocolVersion::RESP3);
        let info = info.set_redis_settings(settings);
        let client = redis::Client::open(info)
            .map_err(|e| Error::invalid("url", format!("{}: {e}", self.url)))?;

        // One plain connection first: fails fast (no reconnect backoff) on a wrong address or
        // password, within the connect timeout.
        let probe_config = AsyncConnectionConfig::new()
            .set_connection_timeout(Some(self.connect_timeout))
            .set_response_timeout(Some(self.response_timeout));
        let mut probe = client
            .get_multiplexed_async_connection_with_config(&probe_config)
            .await?;
        let _: String = redis::cmd("PING").query_async(&mut probe).await?;
        crate::scripts::preload(&mut probe).await?;
        warn_if_evicting(&mut probe).await;
        drop(probe);

        let config = ConnectionManagerConfig::new()
            .set_connection_timeout(Some(self.connect_timeout))
            .set_response_timeout(Some(self.response_timeout))
            .set_number_of_retries(6)
            .set_max_delay(Duration::from_secs(2));
        let conn = ConnectionManager::new_with_config(client.clone(), config.clone()).await?;
        let id = Uuid::new_v4();
        let id_str = id.to_string();
        let listener = Listener::connect(client, config, id_str.clone()).await?;
        let watchdog = Watchdog::start(conn.clone(), self.watchdog_timeout);
        tracing::debug!(client = %id, namespace = %self.namespace, "relock client connected");
        let core = Arc::new(Core {
            id,
            id_str,
            namespace: self.namespace,
            conn,
            listener,
            watchdog,
            watchdog_timeout: self.watchdog_timeout,
            watchdog_ms,
            handle: tokio::runtime::Handle::current(),
        });
        Ok(Client {
            inner: Arc::new(ClientHandle { core }),
        })
    }
}

/// Warns (once per client, at connect) when the server may evict keys: an evicted lock is a
/// lock silently released while its holder works, and an evicted fencing counter restarts
/// from the server clock. Under `noeviction` a full server refuses writes instead, and lock
/// calls fail closed with an OOM error ([`Error::is_oom`]).
async fn warn_if_evicting(conn: &mut redis::aio::MultiplexedConnection) {
    let info: redis::RedisResult<String> = redis::cmd("INFO").arg("memory").query_async(conn).await;
    let Ok(info) = info else {
        return; // INFO may be renamed or forbidden (managed Redis): nothing to check
    };
    let field = |name: &str| {
        info.lines()
            .find_map(|l| l.strip_prefix(name)?.strip_prefix(':'))
            .map(str::trim)
    };
    let maxmemory: u64 = field("maxmemory").and_then(|v| v.parse().ok()).unwrap_or(0);
    let policy = field("maxmemory_policy").unwrap_or("noeviction");
    if maxmemory > 0 && policy != "noeviction" {
        tracing::warn!(
            maxmemory,
            policy,
            "redis may evict keys (maxmemory-policy is not noeviction): an evicted lock is \
             released while its holder still works; use noeviction for lock data"
        );
    }
}

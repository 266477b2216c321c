//! The one error type of the crate.

use std::fmt;

/// What went wrong in a lockwise call.
///
/// Contention is not a failure, but a `try_lock` (or `try_acquire`) that gave up is not a
/// success either: it returns [`Error::Timeout`], so the guard is the value a caller could
/// forget to use, and the compiler says so (`#[must_use]`). Tell it apart with
/// [`is_timeout`](Error::is_timeout); real failures answer
/// [`is_retryable`](Error::is_retryable) instead.
///
/// # Example
///
/// ```rust,no_run
/// use std::time::Duration;
///
/// # async fn demo(client: lockwise::Client) -> lockwise::Result<()> {
/// match client.lock("report").try_lock(Duration::from_secs(1), None).await {
///     Ok(guard) => match guard.unlock().await {
///         // The lease ran out, or the lock was force-unlocked, while it was held.
///         Err(lockwise::Error::NotHeld { .. }) => eprintln!("lock expired before unlock"),
///         other => other?,
///     },
///     Err(e) if e.is_timeout() => eprintln!("busy: someone else holds it"),
///     Err(e) if e.is_retryable() => eprintln!("transient failure, try again: {e}"),
///     Err(e) => return Err(e),
/// }
/// # Ok(()) }
/// ```
#[non_exhaustive]
#[derive(Debug)]
pub enum Error {
    /// An argument was rejected before anything was sent to Redis: an empty or too long lock
    /// name, a zero, sub-millisecond or too large duration, a bad namespace or URL.
    InvalidArgument {
        /// Which argument (`"name"`, `"lease"`, `"watchdog_timeout"`, ...).
        argument: &'static str,
        /// Why it was rejected.
        reason: String,
    },
    /// A `try_lock` or `try_acquire` waited as long as it was allowed and the lock (or the
    /// permits) stayed taken by others: nothing was taken. Contention, not a failure:
    /// [`is_timeout`](Error::is_timeout) is true, [`is_retryable`](Error::is_retryable)
    /// false.
    Timeout {
        /// The lock's (or semaphore's) name.
        name: String,
    },
    /// The lock was lost while a [`Lock::run`](crate::Lock::run) body ran under it (its
    /// lease ran out, the watchdog found it gone, it was force-unlocked, the client shut
    /// down): the body was dropped before it finished.
    Lost {
        /// The lock's name.
        name: String,
    },
    /// The caller released a hold it no longer has: the lock expired (lease ran out, or the
    /// watchdog could not renew it), was force-unlocked, or is held by another owner.
    /// Nothing was released.
    NotHeld {
        /// The lock's name.
        name: String,
    },
    /// Redis or the connection failed. For a lock attempt the outcome may be unknown; lockwise
    /// then releases whatever the attempt may have taken, in the background.
    Redis(redis::RedisError),
    /// Redis answered something lockwise did not expect (a script from another version, or a
    /// key of the wrong type under the lock's name).
    UnexpectedReply(String),
    /// A fenced write was rejected: the resource already saw a larger fencing token, so the
    /// writer's lock was lost and someone else has held it since. Nothing was written; do
    /// not retry with the same token.
    StaleToken {
        /// The token the writer presented.
        presented: u64,
        /// The largest token the resource has seen.
        highest: u64,
    },
    /// Replica sync is on ([`ClientBuilder::replica_sync`](crate::ClientBuilder::replica_sync))
    /// and fewer replicas than required acknowledged the lock write within the sync timeout.
    /// The lock was released again (fail closed): a failover now could hand it to a second
    /// owner. Retryable: the replicas may catch up.
    ReplicaSync {
        /// How many replicas acknowledged (`WAIT`'s reply; 0 when the server refused WAIT).
        acked: u32,
        /// How many were required.
        required: u32,
    },
    /// The Redis user lacks a permission lockwise needs (an ACL rule), found at connect:
    /// a command lockwise runs, its keys `<namespace>:*` or its channels `<namespace>:*`.
    /// Nothing was written. The "ACL" section of [`guide::deployments`](crate::guide::deployments) has the minimal
    /// `ACL SETUSER` rule.
    Permission {
        /// What is missing: ``command `hincrby` ``, ``channels `lockwise:*` `` or
        /// ``keys `lockwise:*` ``.
        what: String,
        /// What the server said.
        reason: String,
    },
    /// The last [`Client`](crate::Client) clone was dropped: its watchdog has stopped, so
    /// the handle can take no more locks (a guard it handed out would be lost at once).
    /// Nothing was taken. Keep a `Client` alive as long as its lock handles are used.
    ClientClosed,
    /// A write lock was asked for by an owner that holds the read lock of the same
    /// [`RwLock`](crate::RwLock) and not its write lock. Waiting would wait for itself (and
    /// two owners upgrading at once would wait for each other), so the upgrade is refused at
    /// once; nothing was changed. Release the read holds first, or take the write lock
    /// first and the read lock under it (a downgrade).
    UpgradeRefused {
        /// The lock's name.
        name: String,
    },
    /// The client was built [`read_only`](crate::ClientBuilder::read_only) and the call
    /// needed a command that is not a read (a lock script, a release, a renewal, a force
    /// unlock, a count down...): it was refused before it left the process, so nothing was
    /// written. Not retryable; use a client built without `read_only`.
    ReadOnlyClient {
        /// The refused command, lowercase (`evalsha`, `set`, ...).
        command: String,
    },
    /// The client's [`KeyLayout`](crate::KeyLayout) has no place for this option: a client
    /// built with [`KeyLayout::Redisson`](crate::KeyLayout::Redisson) speaks Redisson's
    /// format, which has no overtake claims, so `build` refuses an explicit
    /// [`overtake_limit`](crate::ClientBuilder::overtake_limit) (the "Mixed fleets with
    /// Redisson" guide lists what differs). Refused before anything was sent; nothing is
    /// ever written in another format instead. Not retryable.
    Unsupported {
        /// What was refused (`"overtake_limit"`).
        what: &'static str,
        /// The layout that has no place for it.
        layout: crate::KeyLayout,
    },
}

impl Error {
    /// Whether trying again later may succeed: I/O errors, timeouts, dropped connections,
    /// server-side conditions such as LOADING, BUSY, OOM, READONLY or MASTERDOWN, cluster
    /// redirections left over after lockwise's own resends (MOVED, ASK, TRYAGAIN,
    /// CLUSTERDOWN: a failover under way), no connection to the slot's node yet, and
    /// [`Error::ReplicaSync`].
    ///
    /// # Example
    ///
    /// ```rust,no_run
    /// use std::time::Duration;
    ///
    /// # async fn demo(client: lockwise::Client) -> lockwise::Result<()> {
    /// let guard = loop {
    ///     match client.lock("orders").lock().await {
    ///         Err(e) if e.is_retryable() => tokio::time::sleep(Duration::from_millis(100)).await,
    ///         other => break other?,
    ///     }
    /// };
    /// guard.unlock().await?;
    /// # Ok(()) }
    /// ```
    pub fn is_retryable(&self) -> bool {
        match self {
            Error::ReplicaSync { .. } => true,
            Error::Redis(e) => {
                e.is_io_error()
                    || e.is_timeout()
                    || e.is_connection_dropped()
                    || e.is_connection_refusal()
                    // MOVED / ASK / TRYAGAIN / CLUSTERDOWN left over once the transport's
                    // resends ran out: a cluster failover or resharding under way.
                    || e.is_cluster_error()
                    || e.kind() == redis::ErrorKind::ClusterConnectionNotFound
                    || matches!(
                        e.code(),
                        Some("LOADING" | "BUSY" | "OOM" | "MASTERDOWN" | "READONLY")
                    )
            }
            _ => false,
        }
    }

    /// Whether Redis refused a write because it is out of memory (`OOM`, under
    /// `maxmemory-policy noeviction`). Lock calls then fail closed: nothing was taken.
    ///
    /// # Example
    ///
    /// ```rust,no_run
    /// # async fn demo(client: lockwise::Client) -> lockwise::Result<()> {
    /// match client.lock("orders").lock().await {
    ///     Err(e) if e.is_oom() => eprintln!("redis is full: nothing was taken"),
    ///     other => other?.unlock().await?,
    /// }
    /// # Ok(()) }
    /// ```
    pub fn is_oom(&self) -> bool {
        matches!(self, Error::Redis(e) if e.code() == Some("OOM"))
    }

    /// Whether this is [`Error::Timeout`]: a `try_lock` or `try_acquire` that waited in vain.
    ///
    /// # Example
    ///
    /// ```rust,no_run
    /// use std::time::Duration;
    ///
    /// # async fn demo(client: lockwise::Client) -> lockwise::Result<()> {
    /// match client.lock("nightly").try_lock(Duration::ZERO, None).await {
    ///     Ok(guard) => guard.unlock().await?,
    ///     Err(e) if e.is_timeout() => println!("another instance runs it: skipped"),
    ///     Err(e) => return Err(e),
    /// }
    /// # Ok(()) }
    /// ```
    pub fn is_timeout(&self) -> bool {
        matches!(self, Error::Timeout { .. })
    }

    /// Whether this is [`Error::Lost`].
    ///
    /// # Example
    ///
    /// ```rust,no_run
    /// use lockwise::Lock;
    ///
    /// # async fn demo(client: lockwise::Client) -> lockwise::Result<()> {
    /// match client.lock("report").run(|_held| async { /* long work */ }).await {
    ///     Err(e) if e.is_lost() => eprintln!("the lock was lost: the work was stopped"),
    ///     other => other?,
    /// }
    /// # Ok(()) }
    /// ```
    pub fn is_lost(&self) -> bool {
        matches!(self, Error::Lost { .. })
    }

    /// Whether this is [`Error::NotHeld`].
    ///
    /// # Example
    ///
    /// ```rust,no_run
    /// use std::time::Duration;
    ///
    /// # async fn demo(client: lockwise::Client) -> lockwise::Result<()> {
    /// let guard = client.lock("report").lock_with_lease(Duration::from_secs(5)).await?;
    /// match guard.unlock().await {
    ///     Err(e) if e.is_not_held() => eprintln!("the lease ran out first"),
    ///     other => other?,
    /// }
    /// # Ok(()) }
    /// ```
    pub fn is_not_held(&self) -> bool {
        matches!(self, Error::NotHeld { .. })
    }

    /// Whether this is [`Error::ReplicaSync`]: the lock was taken but not replicated in time,
    /// and was released again.
    ///
    /// # Example
    ///
    /// ```rust,no_run
    /// # async fn demo(client: lockwise::Client) -> lockwise::Result<()> {
    /// match client.lock("ledger").lock().await {
    ///     Err(e) if e.is_replica_sync() => eprintln!("not replicated in time, try again: {e}"),
    ///     other => other?.unlock().await?,
    /// }
    /// # Ok(()) }
    /// ```
    pub fn is_replica_sync(&self) -> bool {
        matches!(self, Error::ReplicaSync { .. })
    }

    /// Whether this is [`Error::StaleToken`] (never retryable: the token stays stale).
    ///
    /// # Example
    ///
    /// ```rust,no_run
    /// # async fn demo(client: lockwise::Client) -> lockwise::Result<()> {
    /// let balance = client.fenced_value("ledger:balance");
    /// match balance.write(7, 100).await {
    ///     Err(e) if e.is_stale_token() => eprintln!("a newer holder wrote: stop"),
    ///     other => other?,
    /// }
    /// # Ok(()) }
    /// ```
    pub fn is_stale_token(&self) -> bool {
        matches!(self, Error::StaleToken { .. })
    }

    /// Whether this is [`Error::Permission`]: the Redis user's ACL lacks something lockwise
    /// needs. Not retryable until the ACL is changed.
    ///
    /// # Example
    ///
    /// ```rust,no_run
    /// # async fn demo() -> lockwise::Result<()> {
    /// match lockwise::Client::connect("redis://app:secret@127.0.0.1/").await {
    ///     Err(e) if e.is_permission() => eprintln!("the ACL lacks something: {e}"),
    ///     other => drop(other?),
    /// }
    /// # Ok(()) }
    /// ```
    pub fn is_permission(&self) -> bool {
        matches!(self, Error::Permission { .. })
    }

    /// Whether this is [`Error::ReadOnlyClient`]: a read-only client refused a write.
    ///
    /// # Example
    ///
    /// ```rust,no_run
    /// # async fn demo(reader: lockwise::Client) -> lockwise::Result<()> {
    /// // `reader` was built with `.read_only(true)`: writes are refused before they are sent.
    /// match reader.lock("orders").lock().await {
    ///     Err(e) if e.is_read_only_client() => println!("read-only: nothing was sent"),
    ///     other => other?.unlock().await?,
    /// }
    /// # Ok(()) }
    /// ```
    pub fn is_read_only_client(&self) -> bool {
        matches!(self, Error::ReadOnlyClient { .. })
    }

    /// Whether this is [`Error::Unsupported`]: the client's key layout has no place for
    /// the option.
    ///
    /// # Example
    ///
    /// ```rust,no_run
    /// # async fn demo() -> lockwise::Result<()> {
    /// use std::time::Duration;
    /// use lockwise::{Client, KeyLayout};
    /// let built = Client::builder("redis://127.0.0.1/")
    ///     .key_layout(KeyLayout::Redisson)
    ///     .overtake_limit(Some(Duration::from_millis(200)))
    ///     .build()
    ///     .await;
    /// match built {
    ///     Err(e) if e.is_unsupported() => println!("no Redisson counterpart: {e}"),
    ///     other => drop(other?),
    /// }
    /// # Ok(()) }
    /// ```
    pub fn is_unsupported(&self) -> bool {
        matches!(self, Error::Unsupported { .. })
    }

    /// Whether this is [`Error::ClientClosed`].
    ///
    /// # Example
    ///
    /// ```rust,no_run
    /// use std::time::Duration;
    ///
    /// # async fn demo(client: lockwise::Client) -> lockwise::Result<()> {
    /// client.shutdown(Duration::from_secs(5)).await;
    /// let refused = client.lock("orders").lock().await;
    /// assert!(refused.is_err_and(|e| e.is_client_closed()));
    /// # Ok(()) }
    /// ```
    pub fn is_client_closed(&self) -> bool {
        matches!(self, Error::ClientClosed)
    }

    /// Whether an acquire that is already waiting may simply try again after this error: a
    /// command that did not run because the deployment is changing ([`did_not_run`]), or a
    /// lost connection or timeout (the outcome is unknown; the settlement that follows ends
    /// before the next attempt is sent).
    pub(crate) fn is_transient(&self) -> bool {
        match self {
            Error::Redis(e) => {
                did_not_run(e)
                    || e.is_io_error()
                    || e.is_timeout()
                    || e.is_connection_dropped()
                    || e.is_connection_refusal()
            }
            _ => false,
        }
    }

    /// [`did_not_run`] for a crate error.
    pub(crate) fn did_not_run(&self) -> bool {
        matches!(self, Error::Redis(e) if did_not_run(e))
    }

    pub(crate) fn timeout(name: &str) -> Self {
        Error::Timeout {
            name: name.to_string(),
        }
    }

    pub(crate) fn invalid(argument: &'static str, reason: impl Into<String>) -> Self {
        Error::InvalidArgument {
            argument,
            reason: reason.into(),
        }
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::InvalidArgument { argument, reason } => {
                write!(f, "invalid argument `{argument}`: {reason}")
            }
            Error::Timeout { name } => write!(
                f,
                "`{}` was not acquired within the wait: others held it the whole time",
                abbreviate(name)
            ),
            Error::Lost { name } => write!(
                f,
                "lock `{}` was lost while the body ran under it; the body was stopped",
                abbreviate(name)
            ),
            Error::NotHeld { name } => write!(
                f,
                "lock `{}` is not held by this owner (expired, force-unlocked or taken over)",
                abbreviate(name)
            ),
            Error::Redis(e) => write!(f, "redis error: {e}"),
            Error::UnexpectedReply(what) => write!(f, "unexpected reply from redis: {what}"),
            Error::StaleToken { presented, highest } => write!(
                f,
                "stale fencing token {presented}: the resource already saw token {highest}"
            ),
            Error::ReplicaSync { acked, required } => write!(
                f,
                "lock write acknowledged by {acked} of {required} required replicas within the \
                 replica-sync timeout; the lock was released again (fail closed)"
            ),
            Error::Permission { what, reason } => write!(
                f,
                "the redis user may not use {what}, which lockwise needs ({reason}); see the \
                 ACL section of the deployments guide for the minimal rule"
            ),
            Error::UpgradeRefused { name } => write!(
                f,
                "read-write lock {name:?}: the owner holds a read lock; upgrading it to a write \
                 lock is refused"
            ),
            Error::ReadOnlyClient { command } => write!(
                f,
                "this lockwise client is read-only: `{command}` was not sent (nothing written)"
            ),
            Error::Unsupported { what, layout } => write!(
                f,
                "{what} has no counterpart in the {layout:?} key layout: refused, nothing sent"
            ),
            Error::ClientClosed => write!(
                f,
                "the lockwise client was closed (its last Client clone was dropped): no new \
                 locks can be taken through it"
            ),
        }
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Error::Redis(e) => Some(e),
            _ => None,
        }
    }
}

impl From<redis::RedisError> for Error {
    fn from(e: redis::RedisError) -> Self {
        match refused_read_only(&e) {
            Some(command) => Error::ReadOnlyClient {
                command: command.to_string(),
            },
            None => Error::Redis(e),
        }
    }
}

/// Marks a command a read-only client refused (the detail of its [`redis::RedisError`]).
const READ_ONLY_REFUSAL: &str = "refused by a read-only lockwise client: ";

/// The error a read-only client's command connection answers `command` with, instead of
/// sending it; it becomes [`Error::ReadOnlyClient`]. The command never left the process.
pub(crate) fn read_only_refusal(command: &str) -> redis::RedisError {
    redis::RedisError::from((
        redis::ErrorKind::Client,
        "read-only client",
        format!("{READ_ONLY_REFUSAL}{command}"),
    ))
}

/// The command of a [`read_only_refusal`], if `e` is one.
pub(crate) fn refused_read_only(e: &redis::RedisError) -> Option<&str> {
    if e.kind() != redis::ErrorKind::Client {
        return None;
    }
    e.detail()?.strip_prefix(READ_ONLY_REFUSAL)
}

/// Whether the command did not run because the deployment is changing: the server refused
/// it with a redirection the Cluster transport did not follow (`MOVED`, `ASK`), a failover
/// or resharding under way (`TRYAGAIN`, `CLUSTERDOWN`, `MASTERDOWN`), a demoted master
/// (`READONLY`) or a server still loading its data (`LOADING`); or redis-rs's Cluster client
/// had no connection to send it on (`ClusterConnectionNotFound`, raised before anything is
/// written). Sending it again later is safe.
pub(crate) fn did_not_run(e: &redis::RedisError) -> bool {
    e.kind() == redis::ErrorKind::ClusterConnectionNotFound
        || matches!(
            e.code(),
            Some(
                "MOVED"
                    | "ASK"
                    | "TRYAGAIN"
                    | "CLUSTERDOWN"
                    | "MASTERDOWN"
                    | "READONLY"
                    | "LOADING"
            )
        )
}

/// An I/O timeout error saying `why`: nothing answered in time (retryable, and an unknown
/// outcome for a call that may have been sent).
pub(crate) fn io_timeout(why: impl Into<String>) -> redis::RedisError {
    std::io::Error::new(std::io::ErrorKind::TimedOut, why.into()).into()
}

/// Keeps error messages readable when a name is huge.
fn abbreviate(name: &str) -> String {
    const MAX: usize = 200;
    if name.len() <= MAX {
        return name.to_string();
    }
    let mut end = MAX;
    while !name.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}... ({} bytes)", &name[..end], name.len())
}

/// The crate's result type.
///
/// # Example
///
/// ```rust,no_run
/// /// Whether the nightly job may start now: nobody holds its lock.
/// async fn nightly_is_free(client: &lockwise::Client) -> lockwise::Result<bool> {
///     Ok(!client.lock("nightly").is_locked().await?)
/// }
/// ```
pub type Result<T, E = Error> = std::result::Result<T, E>;

#[cfg(test)]
mod tests;

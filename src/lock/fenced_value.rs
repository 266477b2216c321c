//! [`FencedValue`]: a value kept in Redis that rejects writes carrying a stale fencing token,
//! the resource side of a [`FencedLock`](crate::FencedLock).
//!
//! The value and the highest token that wrote it share one hash, so the check-and-write is
//! one script call (`lua/fenced_write.lua`) on one Cluster slot.

use std::sync::Arc;

use redis::{FromRedisValue, ToRedisArgs};

use crate::engine::Core;
use crate::error::{Error, Result};
use crate::wire::scripts::FENCED_WRITE;

/// Tokens stay below 2<sup>53</sup> so Lua's doubles hold them exactly.
const MAX_TOKEN: u64 = (1 << 53) - 1;

/// A value kept in Redis that only accepts writes carrying a fencing token at least as large
/// as the largest it has seen: a late write by a former lock holder is rejected with
/// [`Error::StaleToken`].
///
/// Get one from [`Client::fenced_value`](crate::Client::fenced_value). The value and its
/// highest token live in one hash at the given key (fields `value` and `token`), so the
/// check-and-write is one atomic script on one Cluster slot. The key is used as given (no
/// namespace): it is your data, and lockwise writes it **without a TTL**, as the highest token
/// must live as long as the value it protects.
///
/// # Example
///
/// ```rust,no_run
/// # async fn demo(client: lockwise::Client) -> lockwise::Result<()> {
/// let value = client.fenced_value("config:limits");
/// let guard = client.fenced_lock("config").lock().await?;
/// value.write(guard.token(), "v2").await?; // Err(StaleToken) if a newer holder wrote
/// let current: Option<String> = value.read().await?;
/// assert_eq!(current.as_deref(), Some("v2"));
/// guard.unlock().await?;
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct FencedValue {
    core: Arc<Core>,
    key: Arc<str>,
}

impl FencedValue {
    pub(crate) fn new(core: Arc<Core>, key: &str) -> FencedValue {
        FencedValue {
            core,
            key: key.into(),
        }
    }

    /// The Redis key of the value's hash.
    ///
    /// # Example
    ///
    /// ```rust,no_run
    /// # async fn demo(client: lockwise::Client) -> lockwise::Result<()> {
    /// let balance = client.fenced_value("ledger:balance");
    /// // Used as given, without the client's namespace.
    /// assert_eq!(balance.key(), "ledger:balance");
    /// # Ok(()) }
    /// ```
    pub fn key(&self) -> &str {
        &self.key
    }

    fn check(&self) -> Result<()> {
        if self.key.is_empty() {
            return Err(Error::invalid(
                "key",
                "a fenced value key must not be empty",
            ));
        }
        Ok(())
    }

    /// Writes `value` if `token` is at least the largest token that wrote before (equal
    /// tokens are accepted, so one holder may write many times), and remembers `token`.
    ///
    /// # Errors
    /// [`Error::StaleToken`] when a larger token wrote before; nothing was written.
    /// [`Error::InvalidArgument`] for an empty key or a token of 0 or 2<sup>53</sup> and
    /// above (no fenced lock issues those). [`Error::Redis`] when Redis fails (also
    /// WRONGTYPE when the key holds something other than a hash).
    ///
    /// # Cancel safety
    /// Dropping the future may or may not have written the value.
    ///
    /// # Example
    ///
    /// ```rust,no_run
    /// # async fn demo(client: lockwise::Client) -> lockwise::Result<()> {
    /// let guard = client.fenced_lock("ledger").lock().await?;
    /// let balance = client.fenced_value("ledger:balance");
    /// match balance.write(guard.token(), 100).await {
    ///     Ok(()) => guard.unlock().await?,
    ///     Err(e) if e.is_stale_token() => eprintln!("lost the lock; a newer holder wrote"),
    ///     Err(e) => return Err(e),
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn write<V: ToRedisArgs + Send + Sync>(&self, token: u64, value: V) -> Result<()> {
        self.check()?;
        if token == 0 || token > MAX_TOKEN {
            return Err(Error::invalid(
                "token",
                format!("a fencing token is between 1 and 2^53 - 1, got {token}"),
            ));
        }
        let token_arg = token.to_string();
        let (written, highest): (i64, String) = FENCED_WRITE
            .run(
                &mut self.core.conn.clone(),
                &[&self.key],
                &[&token_arg, &value],
            )
            .await?;
        if written == 1 {
            return Ok(());
        }
        let highest = highest.parse::<u64>().map_err(|_| {
            Error::UnexpectedReply(format!("fenced value token is not an integer: {highest}"))
        })?;
        tracing::debug!(key = %self.key, presented = token, highest, "stale fencing token rejected");
        Err(Error::StaleToken {
            presented: token,
            highest,
        })
    }

    /// Reads the value; `None` when it was never written (or was deleted).
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for an empty key; [`Error::Redis`] when Redis fails or the
    /// value does not convert to `V`.
    ///
    /// # Cancel safety
    /// Cancel safe (read only).
    ///
    /// # Example
    ///
    /// ```rust,no_run
    /// # async fn demo(client: lockwise::Client) -> lockwise::Result<()> {
    /// let balance = client.fenced_value("ledger:balance");
    /// let current: Option<i64> = balance.read().await?;
    /// println!("balance: {}", current.unwrap_or(0));
    /// # Ok(()) }
    /// ```
    pub async fn read<V: FromRedisValue>(&self) -> Result<Option<V>> {
        self.check()?;
        Ok(redis::cmd("HGET")
            .arg(&*self.key)
            .arg("value")
            .query_async(&mut self.core.conn.clone())
            .await?)
    }

    /// The largest token that wrote the value; `None` when it was never written.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for an empty key; [`Error::Redis`] when Redis fails.
    ///
    /// # Cancel safety
    /// Cancel safe (read only).
    ///
    /// # Example
    ///
    /// ```rust,no_run
    /// # async fn demo(client: lockwise::Client) -> lockwise::Result<()> {
    /// let balance = client.fenced_value("ledger:balance");
    /// if let Some(token) = balance.highest_token().await? {
    ///     println!("last written with token {token}");
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn highest_token(&self) -> Result<Option<u64>> {
        self.check()?;
        Ok(redis::cmd("HGET")
            .arg(&*self.key)
            .arg("token")
            .query_async(&mut self.core.conn.clone())
            .await?)
    }
}

impl std::fmt::Debug for FencedValue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FencedValue")
            .field("key", &self.key)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn max_token_fits_a_double() {
        assert_eq!(super::MAX_TOKEN as f64 as u64, super::MAX_TOKEN);
    }
}

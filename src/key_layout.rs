//! [`KeyLayout`]: whose key and channel names a client writes. Below every other module (the
//! error type names it too).

/// Which key layout a client's locks and synchronizers use
/// ([`ClientBuilder::key_layout`](crate::ClientBuilder::key_layout)).
///
/// # Example
///
/// ```rust,no_run
/// # async fn demo() -> lockwise::Result<()> {
/// use lockwise::{Client, KeyLayout};
/// // Share locks with Java services that use Redisson 3.45 – 4.7:
/// let client = Client::builder("redis://127.0.0.1/")
///     .key_layout(KeyLayout::Redisson)
///     .build()
///     .await?;
/// let guard = client.lock("invoice:42").lock().await?; // Redisson's RLock `invoice:42`
/// guard.unlock().await?;
/// # Ok(()) }
/// ```
#[non_exhaustive]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum KeyLayout {
    /// lockwise's own: `<namespace>:<role>:{<name>}` keys, every feature (the default).
    #[default]
    Lockwise,
    /// Redisson's, byte for byte (Redisson 3.45 – 4.7): the lock hash is the bare name,
    /// channels and payloads are Redisson's, so Java services using Redisson and lockwise
    /// clients exclude and wake each other on the same names. Kinds and options without a
    /// Redisson counterpart return [`Error::Unsupported`](crate::Error::Unsupported). The namespace names only
    /// lockwise's presence keys. See the "Mixed fleets with Redisson" guide.
    Redisson,
}

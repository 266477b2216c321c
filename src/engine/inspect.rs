//! Read-only inspection shared by every hash-based kind.

use std::time::Duration;

pub(crate) use super::settle::owner_holds;
use super::Core;
use crate::error::Result;

/// Whether a lock hash exists (any owner holds it). Shared by every hash-based kind.
pub(crate) async fn is_locked(core: &Core, key: &str) -> Result<bool> {
    let n: i64 = redis::cmd("EXISTS")
        .arg(key)
        .query_async(&mut core.conn.clone())
        .await?;
    Ok(n == 1)
}

/// Time until a lock hash expires: `None` when it does not exist, `Duration::MAX` when it
/// has no TTL (never written by lockwise).
pub(crate) async fn remaining_ttl(core: &Core, key: &str) -> Result<Option<Duration>> {
    let ms: i64 = redis::cmd("PTTL")
        .arg(key)
        .query_async(&mut core.conn.clone())
        .await?;
    Ok(match ms {
        -2 => None,
        -1 => Some(Duration::MAX),
        ms => Some(Duration::from_millis(ms.max(0) as u64)),
    })
}

//! What Redis holds: keys, holds and channels of the run's namespace.

use super::*;

// ---------------------------------------------------------------------------------------------
// Redis inspection

pub(super) async fn admin(url: &str) -> Result<ConnectionManager, BoxError> {
    let config = ConnectionManagerConfig::new()
        .set_response_timeout(Some(Duration::from_secs(3)))
        .set_connection_timeout(Some(Duration::from_secs(3)));
    Ok(ConnectionManager::new_with_config(redis::Client::open(url)?, config).await?)
}

/// Keys of the namespace with their PTTL.
pub(super) async fn keys_of(
    conn: &mut ConnectionManager,
    pattern: &str,
) -> redis::RedisResult<Vec<(String, i64)>> {
    let keys: Vec<String> = redis::cmd("KEYS").arg(pattern).query_async(conn).await?;
    let mut out = Vec::new();
    // A live client's presence key (`<ns>:client:{<id>}`) is the client's, not a lock's.
    for k in keys.into_iter().filter(|k| !k.contains(":client:{")) {
        let pttl: i64 = redis::cmd("PTTL").arg(&k).query_async(conn).await?;
        if pttl != -2 {
            out.push((k, pttl));
        }
    }
    Ok(out)
}

pub(super) fn is_fence(key: &str) -> bool {
    key.contains(":fence:")
}

/// Every hold in Redis: one belief per owner field of every lock hash.
pub(super) async fn holds_in_redis(
    conn: &mut ConnectionManager,
    ns: &str,
) -> redis::RedisResult<Vec<Belief>> {
    let keys: Vec<String> = redis::cmd("KEYS")
        .arg(format!("{ns}:lock:*"))
        .query_async(conn)
        .await?;
    let mut out = Vec::new();
    for k in keys {
        let fields: Vec<(String, String)> = redis::cmd("HGETALL").arg(&k).query_async(conn).await?;
        let token = fields
            .iter()
            .find(|(f, _)| f == "token")
            .and_then(|(_, v)| v.parse().ok());
        for (owner, count) in fields
            .iter()
            .filter(|(f, _)| lockwise_testkit::is_owner_field(f))
        {
            out.push(Belief {
                key: k.clone(),
                owner: owner.clone(),
                count: count.parse().unwrap_or(-1),
                token,
            });
        }
    }
    out.sort();
    Ok(out)
}

/// Channels of the namespace with subscribers (plain and sharded).
pub(super) async fn channels_of(
    conn: &mut ConnectionManager,
    ns: &str,
) -> redis::RedisResult<Vec<String>> {
    let mut out: Vec<String> = redis::cmd("PUBSUB")
        .arg("CHANNELS")
        .arg(format!("{ns}*"))
        .query_async(conn)
        .await?;
    // SHARDCHANNELS exists from Redis 7.0; an older server has no sharded channels anyway.
    if let Ok(sharded) = redis::cmd("PUBSUB")
        .arg("SHARDCHANNELS")
        .arg(format!("{ns}*"))
        .query_async::<Vec<String>>(conn)
        .await
    {
        out.extend(sharded);
    }
    Ok(out)
}

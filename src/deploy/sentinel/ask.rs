//! Asking the sentinels for the master, and connecting to a master they name.

use std::time::Duration;

use futures::stream::{FuturesUnordered, StreamExt};
use redis::aio::{ConnectionManager, ConnectionManagerConfig, MultiplexedConnection};
use redis::{ConnectionAddr, ConnectionInfo, IntoConnectionInfo, Value};
use tokio::time::Instant;

use super::SentinelSettings;
use crate::error::{io_timeout, Error, Result};

/// The master as one sentinel sees it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct View {
    pub(super) addr: (String, u16),
    /// The sentinel's configuration epoch for the master: each failover raises it, so the
    /// highest one is the newest view.
    pub(super) epoch: u64,
}

/// One cached connection per sentinel (made on first use, dropped after an error).
pub(super) struct Sentinels {
    conns: Vec<tokio::sync::Mutex<Option<MultiplexedConnection>>>,
}

impl Sentinels {
    pub(super) fn new(settings: &SentinelSettings) -> Sentinels {
        Sentinels {
            conns: settings
                .sentinels
                .iter()
                .map(|_| tokio::sync::Mutex::new(None))
                .collect(),
        }
    }

    /// Asks every sentinel at once and returns the newest view (the highest configuration
    /// epoch; among equal epochs, the address most sentinels name). Each sentinel gets the
    /// response timeout (plus the connect timeout for a new connection), but once a majority
    /// answered, the others get only about as long again as that took (at least 10 ms): a
    /// stalled sentinel does not hold up a check. Fails only when no sentinel answered.
    pub(super) async fn newest_master(&self, settings: &SentinelSettings) -> Result<View> {
        let started = Instant::now();
        let mut asks: FuturesUnordered<_> = settings
            .sentinels
            .iter()
            .zip(&self.conns)
            .map(|(info, conn)| ask_one(settings, info, conn))
            .collect();
        let majority = settings.sentinels.len() / 2 + 1;
        let mut views = Vec::new();
        let mut last_error = None;
        let mut grace: Option<Instant> = None;
        loop {
            let next = match grace {
                Some(until) => match tokio::time::timeout_at(until, asks.next()).await {
                    Ok(next) => next,
                    Err(_) => break, // the rest are late: go with the majority
                },
                None => asks.next().await,
            };
            match next {
                None => break,
                Some(Ok(v)) => views.push(v),
                Some(Err(e)) => last_error = Some(e),
            }
            if grace.is_none() && views.len() >= majority {
                let took = started.elapsed();
                grace = Some(Instant::now() + took.max(Duration::from_millis(10)));
            }
        }
        newest(&views).ok_or_else(|| {
            last_error.unwrap_or_else(|| Error::invalid("sentinels", "no sentinel address given"))
        })
    }
}

/// The newest view: highest epoch, then most votes, then the first.
fn newest(views: &[View]) -> Option<View> {
    let top = views.iter().map(|v| v.epoch).max()?;
    let candidates: Vec<&View> = views.iter().filter(|v| v.epoch == top).collect();
    let votes = |a: &(String, u16)| candidates.iter().filter(|v| v.addr == *a).count();
    candidates
        .iter()
        .max_by_key(|v| votes(&v.addr))
        .map(|v| (*v).clone())
}

/// One sentinel's view, on its cached connection (reconnected after an error).
async fn ask_one(
    settings: &SentinelSettings,
    info: &ConnectionInfo,
    slot: &tokio::sync::Mutex<Option<MultiplexedConnection>>,
) -> Result<View> {
    let mut cached = slot.lock().await;
    let mut conn = match cached.take() {
        Some(c) => c,
        None => {
            let config = redis::AsyncConnectionConfig::new()
                .set_connection_timeout(Some(settings.connect_timeout))
                .set_response_timeout(Some(settings.response_timeout));
            let client = redis::Client::open(info.clone())?;
            let connect = client.get_multiplexed_async_connection_with_config(&config);
            bounded(settings.connect_timeout, connect).await?
        }
    };
    let view = bounded(
        settings.response_timeout,
        view_of(&mut conn, info, settings),
    )
    .await?;
    *cached = Some(conn);
    Ok(view)
}

/// `SENTINEL MASTER <name>` (address and configuration epoch); a sentinel that refuses it
/// (an ACL that allows only `get-master-addr-by-name`) is asked that instead, with epoch 0.
async fn view_of(
    conn: &mut MultiplexedConnection,
    info: &ConnectionInfo,
    settings: &SentinelSettings,
) -> Result<View> {
    let name = &settings.master_name;
    let unknown = || {
        Error::UnexpectedReply(format!(
            "sentinel {} does not know a master named `{name}`",
            info.addr()
        ))
    };
    let reply: redis::RedisResult<Value> = redis::cmd("SENTINEL")
        .arg("MASTER")
        .arg(name)
        .query_async(conn)
        .await;
    match reply {
        Ok(v) => {
            let fields = fields(v)?;
            let get = |k: &str| fields.iter().find(|(f, _)| f == k).map(|(_, v)| v.as_str());
            let (Some(ip), Some(port)) = (get("ip"), get("port").and_then(|p| p.parse().ok()))
            else {
                return Err(Error::UnexpectedReply(format!(
                    "sentinel {} answered SENTINEL MASTER without an address",
                    info.addr()
                )));
            };
            let epoch = get("config-epoch")
                .and_then(|e| e.parse().ok())
                .unwrap_or(0);
            Ok(View {
                addr: (ip.to_string(), port),
                epoch,
            })
        }
        Err(e) if e.code() == Some("NOPERM") => {
            let addr: Option<(String, u16)> = redis::cmd("SENTINEL")
                .arg("get-master-addr-by-name")
                .arg(name)
                .query_async(conn)
                .await?;
            Ok(View {
                addr: addr.ok_or_else(unknown)?,
                epoch: 0,
            })
        }
        Err(e) if e.to_string().contains("No such master") => Err(unknown()),
        Err(e) => Err(e.into()),
    }
}

/// A flat `[field, value, ...]` reply (RESP2) or a map (RESP3) as string pairs.
fn fields(v: Value) -> Result<Vec<(String, String)>> {
    let text = |v: &Value| -> String {
        match v {
            Value::BulkString(b) => String::from_utf8_lossy(b).into_owned(),
            Value::SimpleString(s) => s.clone(),
            Value::Int(i) => i.to_string(),
            other => format!("{other:?}"),
        }
    };
    match v {
        Value::Array(items) => Ok(items
            .chunks(2)
            .filter(|c| c.len() == 2)
            .map(|c| (text(&c[0]), text(&c[1])))
            .collect()),
        Value::Map(pairs) => Ok(pairs.iter().map(|(k, v)| (text(k), text(v))).collect()),
        other => Err(Error::UnexpectedReply(format!(
            "SENTINEL MASTER answered {other:?}"
        ))),
    }
}

/// Connects the command connection to the master at `addr` and checks with `ROLE` that it
/// is one (a sentinel may still name a server that was demoted, or one whose promotion is
/// not finished). Bounded by the connect timeout.
pub(super) async fn connect_master(
    settings: &SentinelSettings,
    config: &ConnectionManagerConfig,
    addr: &(String, u16),
) -> Result<(ConnectionManager, redis::Client)> {
    let info = ConnectionAddr::Tcp(addr.0.clone(), addr.1)
        .into_connection_info()?
        .set_redis_settings(settings.master.clone());
    let client = redis::Client::open(info)?;
    let connect = async {
        let mut conn = ConnectionManager::new_with_config(client.clone(), config.clone()).await?;
        let role: Vec<Value> = redis::cmd("ROLE").query_async(&mut conn).await?;
        Ok::<_, redis::RedisError>((conn, role))
    };
    let (conn, role) = bounded(settings.connect_timeout, connect).await?;
    match role.first() {
        Some(Value::BulkString(r)) if r == b"master" => Ok((conn, client)),
        Some(Value::SimpleString(r)) if r == "master" => Ok((conn, client)),
        other => Err(Error::UnexpectedReply(format!(
            "{}:{}, named master `{}` by the sentinels, has role {other:?}",
            addr.0, addr.1, settings.master_name
        ))),
    }
}

/// `fut` within `timeout`, else a timeout error.
async fn bounded<T, E>(
    timeout: Duration,
    fut: impl std::future::Future<Output = std::result::Result<T, E>>,
) -> Result<T>
where
    Error: From<E>,
{
    match tokio::time::timeout(timeout, fut).await {
        Ok(r) => Ok(r?),
        Err(_) => Err(Error::Redis(io_timeout(
            "a sentinel or master did not answer in time",
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn view(port: u16, epoch: u64) -> View {
        View {
            addr: ("127.0.0.1".into(), port),
            epoch,
        }
    }

    /// A sentinel that lags behind a failover (lower epoch) never wins, even outnumbering
    /// the others; among equal epochs the majority does.
    #[test]
    fn the_newest_view_wins() {
        assert_eq!(newest(&[]), None);
        let got = newest(&[view(1, 3), view(1, 3), view(2, 4)]).unwrap();
        assert_eq!(got, view(2, 4));
        let got = newest(&[view(1, 4), view(2, 4), view(2, 4)]).unwrap();
        assert_eq!(got, view(2, 4));
        let got = newest(&[view(7, 0)]).unwrap();
        assert_eq!(got, view(7, 0));
    }

    #[test]
    fn sentinel_master_replies_in_both_protocols() {
        let flat = Value::Array(vec![
            Value::BulkString(b"ip".to_vec()),
            Value::BulkString(b"10.0.0.1".to_vec()),
            Value::BulkString(b"config-epoch".to_vec()),
            Value::BulkString(b"5".to_vec()),
        ]);
        let map = Value::Map(vec![(
            Value::SimpleString("config-epoch".into()),
            Value::Int(5),
        )]);
        assert!(fields(flat)
            .unwrap()
            .contains(&("ip".into(), "10.0.0.1".into())));
        assert_eq!(
            fields(map).unwrap(),
            vec![("config-epoch".into(), "5".into())]
        );
        assert!(fields(Value::Nil).is_err());
    }
}

//! Where every client starts: [`Client::builder`] and its siblings for each deployment,
//! each returning a [`ClientBuilder`].

use redis::ConnectionInfo;

use super::ClientBuilder;
use crate::client::Client;
use crate::deploy::{Deployment, Target};

impl Client {
    /// Starts a [`ClientBuilder`] for the standalone Redis server at `url`
    /// (`redis://[user:password@]host[:port][/db]`; `rediss://` for TLS, which needs the
    /// `tls-rustls` or `tls-native-tls` feature, see [`guide::deployments`](crate::guide::deployments), "TLS").
    ///
    /// # Example
    ///
    /// ```rust,no_run
    /// use std::time::Duration;
    ///
    /// # async fn demo() -> lockwise::Result<()> {
    /// let client = lockwise::Client::builder("redis://:secret@127.0.0.1:6379/2")
    ///     .response_timeout(Duration::from_millis(500))
    ///     .build()
    ///     .await?;
    /// # Ok(()) }
    /// ```
    pub fn builder(url: impl Into<String>) -> ClientBuilder {
        ClientBuilder::new(Deployment::Standalone {
            target: Target::Url(url.into()),
        })
    }

    /// Starts a [`ClientBuilder`] for the standalone server of an existing redis-rs client:
    /// its address, credentials, database and TLS settings (e.g. a custom root CA from
    /// `redis::Client::build_with_tls`, with a TLS feature) are used as they are. Only the
    /// protocol is lockwise's choice (RESP3, or RESP2 if the server has no `HELLO`; see
    /// [`ClientBuilder::force_resp2`]). `client` is not used for connections itself.
    ///
    /// # Example
    ///
    /// ```rust,no_run
    /// # async fn demo() -> lockwise::Result<()> {
    /// let existing = lockwise::redis::Client::open("redis://127.0.0.1/")?;
    /// let client = lockwise::Client::builder_from(&existing).build().await?;
    /// # Ok(()) }
    /// ```
    pub fn builder_from(client: &redis::Client) -> ClientBuilder {
        Client::builder_from_info(client.get_connection_info().clone())
    }

    /// Starts a [`ClientBuilder`] for the standalone server described by `info`, e.g. built
    /// in code with a password and database instead of written into a URL. As with
    /// [`Client::builder_from`], the protocol in `info` is ignored.
    ///
    /// # Example
    ///
    /// ```rust,no_run
    /// use lockwise::redis::IntoConnectionInfo;
    ///
    /// # async fn demo() -> lockwise::Result<()> {
    /// let info = "redis://127.0.0.1:6379".into_connection_info()?;
    /// let settings = info.redis_settings().clone().set_password("secret").set_db(2);
    /// let info = info.set_redis_settings(settings);
    /// let client = lockwise::Client::builder_from_info(info).build().await?;
    /// # Ok(()) }
    /// ```
    pub fn builder_from_info(info: ConnectionInfo) -> ClientBuilder {
        ClientBuilder::new(Deployment::Standalone {
            target: Target::Info(Box::new(info)),
        })
    }

    /// Starts a [`ClientBuilder`] for a Redis Cluster reached through any of the `seeds`
    /// (`redis://[user:password@]host:port` URLs of some of its nodes; the rest of the
    /// topology is discovered). See [`guide::deployments`](crate::guide::deployments) for what a failover does to
    /// held locks.
    ///
    /// # Example
    ///
    /// ```rust,no_run
    /// # async fn demo() -> lockwise::Result<()> {
    /// let seeds = ["redis://10.0.0.1:7000", "redis://10.0.0.2:7000"];
    /// let client = lockwise::Client::cluster_builder(seeds).build().await?;
    /// let guard = client.lock("orders:42").lock().await?;
    /// guard.unlock().await?;
    /// # Ok(()) }
    /// ```
    pub fn cluster_builder<I, S>(seeds: I) -> ClientBuilder
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        ClientBuilder::new(Deployment::Cluster {
            seeds: seeds.into_iter().map(Into::into).collect(),
        })
    }

    /// Starts a [`ClientBuilder`] for the master named `master_name` of a Sentinel set, found
    /// through any of the `sentinels` (`redis://host:port` URLs of sentinels; credentials in
    /// a URL are the sentinel's). The client follows failovers: commands and subscriptions
    /// move to the new master. Credentials and database of the master itself:
    /// [`ClientBuilder::master_password`], [`ClientBuilder::master_username`],
    /// [`ClientBuilder::master_db`].
    ///
    /// # Example
    ///
    /// ```rust,no_run
    /// # async fn demo() -> lockwise::Result<()> {
    /// let sentinels = ["redis://10.0.0.1:26379", "redis://10.0.0.2:26379"];
    /// let client = lockwise::Client::sentinel_builder(sentinels, "mymaster")
    ///     .master_password("secret")
    ///     .build()
    ///     .await?;
    /// # Ok(()) }
    /// ```
    pub fn sentinel_builder<I, S>(sentinels: I, master_name: impl Into<String>) -> ClientBuilder
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        ClientBuilder::new(Deployment::Sentinel {
            sentinels: sentinels.into_iter().map(Into::into).collect(),
            master_name: master_name.into(),
        })
    }
}

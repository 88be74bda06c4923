//! [`Redis`]: one multiplexed, self-reconnecting connection shared by every limiter
//! and every task of an instance, with a time limit on every call.

use crate::metrics::Metrics;
use crate::{ConfigError, Error};
use core::fmt;
use core::pin::Pin;
use core::time::Duration;
use redis::aio::{ConnectionLike, ConnectionManager, ConnectionManagerConfig};
use redis::{Cmd, FromRedisValue, Pipeline, RedisFuture, ScriptInvocation, Value};
use std::sync::Arc;

/// A Redis Cluster hash slot (see [`Redis::slot_of`]).
#[cfg(feature = "cluster")]
pub(crate) type Slot = redis::cluster_routing::Slot;
/// No slots without Redis Cluster.
#[cfg(not(feature = "cluster"))]
pub(crate) type Slot = core::convert::Infallible;

/// How an instance talks to Redis: time limits, and for TLS the certificate to trust.
/// Built by [`RedisOptions::builder`]; [`RedisOptions::default()`] is 100 ms per
/// call and 1 s to connect.
///
/// ```
/// use std::time::Duration;
/// use weir_redis::RedisOptions;
///
/// let options = RedisOptions::builder().call_timeout(Duration::from_millis(20)).connect_timeout(Duration::from_secs(2)).build()?;
/// assert_eq!(options.call_timeout(), Duration::from_millis(20));
/// # Ok::<(), weir_redis::ConfigError>(())
/// ```
#[derive(Clone)]
pub struct RedisOptions {
    call_timeout: Duration,
    connect_timeout: Duration,
    #[cfg(feature = "tls")]
    root_certificate: Option<Vec<u8>>,
}

impl Default for RedisOptions {
    fn default() -> Self {
        Self {
            call_timeout: Duration::from_millis(100),
            connect_timeout: Duration::from_secs(1),
            #[cfg(feature = "tls")]
            root_certificate: None,
        }
    }
}

impl fmt::Debug for RedisOptions {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedisOptions")
            .field("call_timeout", &self.call_timeout)
            .field("connect_timeout", &self.connect_timeout)
            .finish_non_exhaustive()
    }
}

impl RedisOptions {
    /// The options at their defaults: 100 ms per call, 1 s to connect, the system's
    /// trust store.
    pub fn builder() -> RedisOptionsBuilder {
        RedisOptionsBuilder(Self::default())
    }

    /// The most one call waits for its reply (see
    /// [`RedisOptionsBuilder::call_timeout`]).
    pub fn call_timeout(&self) -> Duration {
        self.call_timeout
    }

    /// The most establishing the connection may take (see
    /// [`RedisOptionsBuilder::connect_timeout`]).
    pub fn connect_timeout(&self) -> Duration {
        self.connect_timeout
    }

    fn client(&self, url: &str) -> Result<redis::Client, Error> {
        #[cfg(feature = "tls")]
        if let Some(root) = &self.root_certificate {
            let certificates = redis::TlsCertificates { client_tls: None, root_cert: Some(root.clone()) };
            return redis::Client::build_with_tls(url, certificates).map_err(|e| url_error(url, e));
        }
        redis::Client::open(url).map_err(|e| url_error(url, e))
    }
}

/// The options of a [`RedisOptions`]: setters that never fail, checked together by
/// [`build`](Self::build). From [`RedisOptions::builder`].
///
/// ```
/// use std::time::Duration;
/// use weir_redis::{ConfigError, RedisOptions};
///
/// let error = RedisOptions::builder().call_timeout(Duration::ZERO).build().unwrap_err();
/// assert_eq!(error, ConfigError::Zero { what: "call_timeout" });
/// ```
#[derive(Clone, Debug)]
#[must_use = "a builder does nothing until `build` is called"]
pub struct RedisOptionsBuilder(RedisOptions);

impl RedisOptionsBuilder {
    /// The most one call (a check, refund or snapshot) waits for its reply before it
    /// fails with [`Error::Timeout`] (and a fail policy decides instead); not zero.
    /// Choose it from the latency budget of a request, not from Redis's typical
    /// latency: on loopback a decision takes 50–100 µs; across a data centre about
    /// 0.5 ms. Default: 100 ms.
    pub fn call_timeout(self, timeout: Duration) -> Self {
        Self(RedisOptions { call_timeout: timeout, ..self.0 })
    }

    /// The most establishing (or re-establishing) the connection may take; not
    /// zero. Default: 1 s.
    pub fn connect_timeout(self, timeout: Duration) -> Self {
        Self(RedisOptions { connect_timeout: timeout, ..self.0 })
    }

    /// For `rediss://` URLs: trust this CA certificate (PEM) instead of the system's
    /// trust store (a private CA, or a self-signed server certificate in tests).
    /// Default: the system's trust store.
    #[cfg(feature = "tls")]
    pub fn root_certificate(self, pem: impl Into<Vec<u8>>) -> Self {
        Self(RedisOptions { root_certificate: Some(pem.into()), ..self.0 })
    }

    /// The options, or the first one refused: [`ConfigError::Zero`] for a zero
    /// `call_timeout` (every call would time out) or `connect_timeout` (no
    /// connection could be made).
    pub fn build(self) -> Result<RedisOptions, ConfigError> {
        if self.0.call_timeout.is_zero() {
            return Err(ConfigError::Zero { what: "call_timeout" });
        }
        if self.0.connect_timeout.is_zero() {
            return Err(ConfigError::Zero { what: "connect_timeout" });
        }
        Ok(self.0)
    }
}

fn url_error(url: &str, e: redis::RedisError) -> Error {
    // Never echo a password back: print the URL without it.
    let shown = match (url.find("://"), url.rfind('@')) {
        (Some(scheme), Some(at)) if at > scheme => format!("{}://…@{}", &url[..scheme], &url[at + 1..]),
        _ => url.to_owned(),
    };
    Error::Config(ConfigError::Url { url: shown, message: e.to_string() })
}

/// A connection to Redis (one server, or a Redis Cluster) shared by every limiter
/// of an instance: clone it freely (clones share the connection).
///
/// All calls of all tasks are pipelined on one multiplexed connection, which
/// reconnects by itself after a failure (redis-rs's `ConnectionManager`); every
/// call is bounded by [`RedisOptions::call_timeout`].
///
/// URLs are those of redis-rs: `redis://[user][:password@]host[:port][/db]`,
/// `rediss://…` for TLS (feature `tls`), `redis+unix:///path`. A wrong password is
/// an [`Error::Auth`] from [`connect`](Self::connect), not a failure later.
///
/// ```no_run
/// # async fn demo() -> Result<(), weir_redis::Error> {
/// use weir_redis::Redis;
///
/// let redis = Redis::connect("redis://:s3cret@10.0.0.5:6379/2").await?;
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct Redis {
    conn: Conn,
    call_timeout: Duration,
    /// Shared by the clones of one connection, and by no other: what tells
    /// whether two limiters can be decided in one script (a batch).
    origin: Arc<()>,
}

impl fmt::Debug for Redis {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let kind = match self.conn {
            Conn::Single(_) => "single",
            #[cfg(feature = "cluster")]
            Conn::Cluster(_) => "cluster",
        };
        f.debug_struct("Redis").field("kind", &kind).field("call_timeout", &self.call_timeout).finish()
    }
}

#[derive(Clone)]
enum Conn {
    Single(ConnectionManager),
    #[cfg(feature = "cluster")]
    Cluster(redis::cluster_async::ClusterConnection),
}

impl ConnectionLike for Conn {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        match self {
            Self::Single(c) => c.req_packed_command(cmd),
            #[cfg(feature = "cluster")]
            Self::Cluster(c) => c.req_packed_command(cmd),
        }
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        match self {
            Self::Single(c) => c.req_packed_commands(pipeline, offset, count),
            #[cfg(feature = "cluster")]
            Self::Cluster(c) => c.req_packed_commands(pipeline, offset, count),
        }
    }

    fn get_db(&self) -> i64 {
        match self {
            Self::Single(c) => c.get_db(),
            #[cfg(feature = "cluster")]
            Self::Cluster(c) => c.get_db(),
        }
    }
}

/// A connection that counts the scripts loaded through it (`SCRIPT LOAD`: redis-rs
/// sends one when `EVALSHA` is answered `NOSCRIPT`).
#[cfg(feature = "metrics")]
struct Watched<'a> {
    conn: Conn,
    reloads: &'a metrics::Counter,
}

#[cfg(feature = "metrics")]
impl ConnectionLike for Watched<'_> {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        let mut args = cmd.args_iter().map(|arg| match arg {
            redis::Arg::Simple(bytes) => bytes,
            _ => &[],
        });
        if args.next().is_some_and(|a| a.eq_ignore_ascii_case(b"SCRIPT"))
            && args.next().is_some_and(|a| a.eq_ignore_ascii_case(b"LOAD"))
        {
            self.reloads.increment(1);
        }
        self.conn.req_packed_command(cmd)
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        self.conn.req_packed_commands(pipeline, offset, count)
    }

    fn get_db(&self) -> i64 {
        self.conn.get_db()
    }
}

impl Redis {
    /// Connects to one Redis server with the default [`RedisOptions`].
    pub async fn connect(url: &str) -> Result<Self, Error> {
        Self::connect_with(url, RedisOptions::default()).await
    }

    /// Connects to one Redis server.
    ///
    /// Fails with [`Error::Auth`] for refused credentials, [`Error::Unavailable`] or
    /// [`Error::Timeout`] when the server cannot be reached within the connect
    /// timeout, and [`Error::Config`] for a URL that does not parse.
    pub async fn connect_with(url: &str, options: RedisOptions) -> Result<Self, Error> {
        let client = options.client(url)?;
        // One quick retry inside redis-rs; beyond that, our callers' fail policy and
        // back-off decide when to try again, so a dead Redis is not hammered.
        let config = ConnectionManagerConfig::new()
            .set_connection_timeout(Some(options.connect_timeout))
            .set_response_timeout(None)
            .set_number_of_retries(1)
            .set_min_delay(Duration::from_millis(10))
            .set_max_delay(Duration::from_millis(100));
        let limit = options.connect_timeout.saturating_mul(3);
        let manager = tokio::time::timeout(limit, ConnectionManager::new_with_config(client, config))
            .await
            .map_err(|_| Error::Timeout { after: limit })?
            .map_err(Error::from_redis)?;
        let redis = Self { conn: Conn::Single(manager), call_timeout: options.call_timeout, origin: Arc::default() };
        redis.ping().await?;
        Ok(redis)
    }

    /// Connects to a Redis Cluster through any of its nodes (`redis://host:port`
    /// URLs, credentials in the URLs). Keys of one client always land in one slot
    /// (see the crate docs on hash tags), so tiers run as one script there too.
    #[cfg(feature = "cluster")]
    pub async fn connect_cluster(urls: &[&str], options: RedisOptions) -> Result<Self, Error> {
        let builder = redis::cluster::ClusterClientBuilder::new(urls.iter().copied())
            .connection_timeout(options.connect_timeout)
            .response_timeout(options.call_timeout)
            .retries(2);
        #[cfg(feature = "tls")]
        let builder = match &options.root_certificate {
            Some(root) => builder.certs(redis::TlsCertificates { client_tls: None, root_cert: Some(root.clone()) }),
            None => builder,
        };
        let client = builder.build().map_err(|e| url_error(urls.first().copied().unwrap_or_default(), e))?;
        let limit = options.connect_timeout.saturating_mul(3);
        let conn = tokio::time::timeout(limit, client.get_async_connection())
            .await
            .map_err(|_| Error::Timeout { after: limit })?
            .map_err(Error::from_redis)?;
        let redis = Self { conn: Conn::Cluster(conn), call_timeout: options.call_timeout, origin: Arc::default() };
        redis.ping().await?;
        Ok(redis)
    }

    /// The per-call time limit ([`RedisOptions::call_timeout`]).
    pub fn call_timeout(&self) -> Duration {
        self.call_timeout
    }

    /// One `PING` round trip, within the call time limit.
    pub async fn ping(&self) -> Result<(), Error> {
        let mut conn = self.conn.clone();
        let reply: String = self.bounded(redis::cmd("PING").query_async(&mut conn)).await?;
        if reply == "PONG" { Ok(()) } else { Err(Error::reply(format_args!("PING answered {reply:?}"))) }
    }

    /// Runs one script (by `EVALSHA`, loading it on `NOSCRIPT`) within the time
    /// limit, recorded in `metrics` (its time, a timeout, a reload).
    pub(crate) async fn invoke<T: FromRedisValue>(
        &self,
        invocation: &ScriptInvocation<'_>,
        metrics: &Metrics,
    ) -> Result<T, Error> {
        let started = metrics.is_on().then(std::time::Instant::now);
        let result = self.bounded(self.invoke_watched(invocation, metrics)).await;
        if let Some(started) = started {
            metrics.called(started.elapsed().as_secs_f64(), &result);
        }
        result
    }

    /// `invocation.invoke_async` on a clone of the connection; with the `metrics`
    /// feature, counting the script's reloads (redis-rs loads it, by `SCRIPT
    /// LOAD`, when `EVALSHA` is answered `NOSCRIPT`).
    async fn invoke_watched<T: FromRedisValue>(
        &self,
        invocation: &ScriptInvocation<'_>,
        metrics: &Metrics,
    ) -> redis::RedisResult<T> {
        #[cfg(feature = "metrics")]
        if let Some(reloads) = metrics.reloads() {
            return invocation.invoke_async(&mut Watched { conn: self.conn.clone(), reloads }).await;
        }
        let _ = metrics;
        invocation.invoke_async(&mut self.conn.clone()).await
    }

    /// Runs one script like [`invoke`](Self::invoke), as a future that owns
    /// what it needs (a clone of the connection, the invocation, the metric
    /// handles): one that a task can finish after the caller that sent it has
    /// gone (a batch dropped while its script is in flight).
    pub(crate) fn invoke_owned(
        &self,
        invocation: ScriptInvocation<'static>,
        metrics: Metrics,
    ) -> Pin<Box<dyn Future<Output = Result<Vec<u64>, Error>> + Send>> {
        let redis = self.clone();
        Box::pin(async move { redis.invoke(&invocation, &metrics).await })
    }

    /// Whether `other` is a clone of this connection (the same one).
    pub(crate) fn is_same(&self, other: &Redis) -> bool {
        Arc::ptr_eq(&self.origin, &other.origin)
    }

    /// For a Redis Cluster, the hash slot of `key` (redis-rs's: CRC16 of its
    /// hash tag); `None` for one server, where every key is in one place.
    pub(crate) fn slot_of(&self, key: &str) -> Option<Slot> {
        match &self.conn {
            Conn::Single(_) => {
                let _ = key;
                None
            }
            #[cfg(feature = "cluster")]
            Conn::Cluster(_) => Some(redis::cluster_routing::Slot::for_key(key)),
        }
    }

    /// Runs one script like [`invoke`](Self::invoke), with no time limit: the
    /// caller bounds it (a lease renewal whose reply may still be delivered after
    /// the check that asked for it has ended).
    pub(crate) async fn invoke_unbounded<T: FromRedisValue>(
        &self,
        invocation: &ScriptInvocation<'_>,
        metrics: &Metrics,
    ) -> Result<T, Error> {
        let started = metrics.is_on().then(std::time::Instant::now);
        let result = self.invoke_watched(invocation, metrics).await.map_err(Error::from_redis);
        if let Some(started) = started {
            metrics.called(started.elapsed().as_secs_f64(), &result);
        }
        result
    }

    /// Runs one command within the time limit (see `__private::command`).
    /// Runs `pipeline` within the call time limit (tests read a transaction's
    /// replies with it).
    pub(crate) async fn pipeline<T: FromRedisValue>(&self, pipeline: &Pipeline) -> Result<T, Error> {
        let mut conn = self.conn.clone();
        self.bounded(pipeline.query_async(&mut conn)).await
    }

    pub(crate) async fn command<T: FromRedisValue>(&self, cmd: &Cmd) -> Result<T, Error> {
        let mut conn = self.conn.clone();
        self.bounded(cmd.query_async(&mut conn)).await
    }

    async fn bounded<T>(&self, call: impl Future<Output = redis::RedisResult<T>>) -> Result<T, Error> {
        match tokio::time::timeout(self.call_timeout, call).await {
            Ok(reply) => reply.map_err(Error::from_redis),
            Err(_) => Err(Error::Timeout { after: self.call_timeout }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn build_refuses_zero_timeouts() {
        // A zero call timeout was accepted, and every call then timed out.
        let zero = RedisOptions::builder().call_timeout(Duration::ZERO).build();
        assert_eq!(zero.unwrap_err(), ConfigError::Zero { what: "call_timeout" });
        let zero = RedisOptions::builder().connect_timeout(Duration::ZERO).build();
        assert_eq!(zero.unwrap_err(), ConfigError::Zero { what: "connect_timeout" });
        assert!(ConfigError::Zero { what: "call_timeout" }.to_string().starts_with("call_timeout"));

        let options = RedisOptions::builder()
            .call_timeout(Duration::from_millis(20))
            .connect_timeout(Duration::from_secs(2))
            .build()
            .unwrap();
        assert_eq!(
            (options.call_timeout(), options.connect_timeout()),
            (Duration::from_millis(20), Duration::from_secs(2))
        );
        let default = RedisOptions::default();
        assert_eq!(
            (default.call_timeout(), default.connect_timeout()),
            (Duration::from_millis(100), Duration::from_secs(1))
        );
    }
}

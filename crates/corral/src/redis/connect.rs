//! The constructors of [`RedisStore`]: one server, a cluster or a Sentinel
//! group, each connected now (`connect*`) or in the background
//! (`connect*_lazy`), and the store assembled around the connection and
//! its subscriber.

use std::sync::{Arc, Mutex};

use super::config::RECONNECT_MIN_DELAY;
use super::conn::client;
use super::conn::cluster::Cluster;
use super::conn::sentinel::{Sentinels, Source};
use super::conn::standalone::{Reconnect, Standalone};
use super::conn::Connection;
use super::errors::{bounded, store_error};
use super::read::batch::Reads;
use super::read::expiries::Expiries;
use super::read::lanes;
use super::subscriber::{Feed, Settings, ShardedClient, Subscriber};
use super::tracking::{self, Tracker};
use super::{Inner, RedisConfig, RedisStore};
use crate::data::error::{StoreError, StoreErrorKind};
use crate::redact::redact_url;
use crate::store::Sinks;

/// How many times a standalone store tries to connect before
/// [`RedisStore::connect`] reports the server unavailable (each within the
/// connect timeout; a lost connection is retried until it is back).
const CONNECT_ATTEMPTS: u32 = 3;

/// What a cluster store is built from: the cluster client, the
/// subscriber's, and the seeds as shown in its `Debug`.
struct ClusterSeeds<'a> {
    urls: &'a [String],
    cluster: ::redis::cluster::ClusterClient,
    /// The subscriber's own cluster client (sharded pub/sub).
    sharded: ShardedClient,
    /// A client per seed, for the tracking listeners.
    clients: Vec<::redis::Client>,
    target: String,
}

impl<'a> ClusterSeeds<'a> {
    fn new(urls: &'a [String], config: &RedisConfig) -> Result<Self, StoreError> {
        if urls.is_empty() {
            return Err(StoreError::new(
                StoreErrorKind::Configuration,
                "redis cluster: no node URLs given",
            ));
        }
        // Each seed is checked as `connect` checks one server's URL (its
        // scheme, its TLS material), with the same errors.
        let clients = urls
            .iter()
            .map(|url| client::client(url, config))
            .collect::<Result<Vec<_>, _>>()?;
        let cluster = client::cluster_builder(urls, config)?
            .connection_timeout(config.connect_timeout)
            .response_timeout(config.op_timeout)
            .build()
            .map_err(|e| scrub_seeds(urls, store_error("connect", &e)))?;
        let (seed_urls, settings) = (urls.to_vec(), config.clone());
        let sharded = ShardedClient::new(move |pushes| {
            client::cluster_builder(&seed_urls, &settings)?
                .use_protocol(::redis::ProtocolVersion::RESP3)
                .push_sender(pushes)
                .connection_timeout(settings.connect_timeout)
                .response_timeout(settings.op_timeout)
                .build()
                .map_err(|e| scrub_seeds(&seed_urls, store_error("connect", &e)))
        });
        let seeds = Self {
            urls,
            cluster,
            sharded,
            clients,
            target: format!(
                "cluster[{}]",
                urls.iter()
                    .map(|u| redact_url(u))
                    .collect::<Vec<_>>()
                    .join(",")
            ),
        };
        Ok(seeds)
    }

    /// `error` without any seed's password.
    fn scrub(&self, error: StoreError) -> StoreError {
        scrub_seeds(self.urls, error)
    }

    /// The store's parts, on `runtime`: its tracking by prefix (the only
    /// mode a cluster offers), with a listener kept on each master.
    fn parts(&self, config: &RedisConfig, runtime: &tokio::runtime::Handle) -> Parts {
        let mode = tracking::cluster_mode(config.tracking, &self.target);
        let parts = Parts::new(&config.clone().tracking(mode), &self.target, runtime);
        parts.tracker.listen_on_masters(tracking::Seeds {
            clients: self.clients.clone(),
            connect_timeout: config.connect_timeout,
            health_interval: config.health_interval,
            backoff: (RECONNECT_MIN_DELAY, config.reconnect_max_delay),
        });
        parts
    }
}

/// `error` without the password of any of `urls`.
fn scrub_seeds(urls: &[String], error: StoreError) -> StoreError {
    urls.iter()
        .fold(error, |e, url| client::scrubbed(url.as_str(), e))
}

/// The Sentinel group `master_name` asked at `sentinels`, with errors
/// that show none of their passwords.
fn sentinel_group(
    master_name: &str,
    sentinels: &[String],
    config: &RedisConfig,
) -> Result<Arc<Sentinels>, StoreError> {
    Sentinels::new(master_name, sentinels, config)
        .map(Arc::new)
        .map_err(|e| scrub_seeds(sentinels, e))
}

/// What a store is assembled from beside its connection: the caches'
/// sinks, the expiries it remembers and its client tracking, which share
/// them; made before the connection, whose every (re)connect turns the
/// tracking on.
struct Parts {
    sinks: Arc<Sinks>,
    expiries: Arc<Expiries>,
    tracker: Tracker,
}

impl Parts {
    /// The parts of the store named `target` with `config`, on `runtime`.
    fn new(config: &RedisConfig, target: &str, runtime: &tokio::runtime::Handle) -> Self {
        let sinks = Arc::new(Sinks::default());
        let expiries = Arc::new(Expiries::new(config.read_memory));
        let tracker = Tracker::new(
            (config.tracking, config.op_timeout),
            target,
            (Arc::clone(&sinks), Arc::clone(&expiries)),
            runtime.clone(),
        );
        Self {
            sinks,
            expiries,
            tracker,
        }
    }
}

/// How a standalone store's connection to `store` (its name in logs) is
/// made and remade under `config`.
fn reconnect(config: &RedisConfig, store: &str) -> Reconnect {
    Reconnect {
        store: store.into(),
        connect_timeout: config.connect_timeout,
        initial_attempts: CONNECT_ATTEMPTS,
        min_delay: RECONNECT_MIN_DELAY,
        max_delay: config.reconnect_max_delay,
        health_interval: config.health_interval,
        health_timeout: config.op_timeout,
    }
}

impl RedisStore {
    /// Connects to one Redis server (`redis://[user:password@]host[:port][/db]`,
    /// `rediss://...` for TLS with the feature `tls`, or `unix://`), loads
    /// the scripts and starts the subscriber. Must be called within a tokio
    /// runtime.
    ///
    /// The user name and password of the URL authenticate every connection
    /// of the store (commands, scripts and the subscriber); see "What it
    /// needs from Redis" for the least an ACL user needs. With `rediss://`,
    /// every connection uses TLS, verified against the webpki roots or the
    /// CA of [`RedisConfig::tls_root_ca`], with the client certificate of
    /// [`RedisConfig::tls_client_auth`] if given. The password appears in no
    /// `Debug` output or error (it is shown as `***`).
    ///
    /// # Errors
    ///
    /// [`StoreErrorKind::Configuration`] (not retryable) for a malformed
    /// URL, a `rediss://` URL without the feature `tls`, unreadable TLS
    /// material, or TLS material with a `redis://` URL;
    /// [`StoreErrorKind::Denied`] when authentication fails or the ACL
    /// refuses loading the scripts;
    /// [`StoreErrorKind::Unavailable`] or [`StoreErrorKind::Timeout`] when the
    /// server cannot be reached within `config.connect_timeout` (plus
    /// `config.op_timeout` to load the scripts);
    /// [`StoreErrorKind::Configuration`] outside a tokio runtime.
    pub async fn connect(url: &str, config: RedisConfig) -> Result<Self, StoreError> {
        let runtime = runtime()?;
        let config = config.normalized();
        let client = client::client(url, &config)?;
        let reconnect = reconnect(&config, &redact_url(url));
        let source = Source::Fixed(Box::new(client));
        let parts = Parts::new(&config, &redact_url(url), &runtime);
        let connection = bounded(
            config.connect_timeout,
            "connect",
            Standalone::connect(
                source.clone(),
                reconnect,
                runtime.clone(),
                parts.tracker.clone(),
            ),
        )
        .await
        .map_err(|e| client::scrubbed(url, e))?;
        let feed = Feed::Server(source, connection.moves());
        Self::finish(
            redact_url(url),
            Connection::Standalone(connection),
            (feed, parts),
            config,
            &runtime,
        )
        .await
    }

    /// Connects to a Redis Cluster through any of its nodes (`urls` are
    /// seeds, as in [`connect`](Self::connect)), loads the scripts on every
    /// master and starts the subscriber (on one node at a time, trying the
    /// seeds in turn). Must be called within a tokio runtime.
    ///
    /// # Errors
    ///
    /// As [`connect`](Self::connect); also
    /// [`StoreErrorKind::Configuration`] when `urls` is empty.
    pub async fn connect_cluster(urls: &[String], config: RedisConfig) -> Result<Self, StoreError> {
        let runtime = runtime()?;
        let config = config.normalized();
        let seeds = ClusterSeeds::new(urls, &config)?;
        let connection = bounded(
            config.connect_timeout,
            "connect",
            seeds.cluster.get_async_connection(),
        )
        .await
        .map_err(|e| seeds.scrub(e))?;
        let parts = seeds.parts(&config, &runtime);
        let connection = Cluster::new(
            seeds.cluster,
            connection,
            config.connect_timeout,
            runtime.clone(),
            &seeds.target,
        );
        Self::finish(
            seeds.target,
            Connection::Cluster(connection),
            (Feed::Cluster(seeds.sharded), parts),
            config,
            &runtime,
        )
        .await
    }

    /// A store for a Redis Cluster that does not wait for it, as
    /// [`connect_lazy`](Self::connect_lazy) is for one server: returns at
    /// once and connects from the seeds in the background, retrying with
    /// backoff until the cluster answers; until then store calls fail at
    /// once with [`StoreErrorKind::Unavailable`] (after waiting for the
    /// first attempt). Scripts are cached by each master on their first
    /// use. Must be called within a tokio runtime.
    ///
    /// # Errors
    ///
    /// As [`connect_lazy`](Self::connect_lazy); also
    /// [`StoreErrorKind::Configuration`] when `urls` is empty.
    pub fn connect_cluster_lazy(urls: &[String], config: RedisConfig) -> Result<Self, StoreError> {
        let runtime = runtime()?;
        let config = config.normalized();
        let seeds = ClusterSeeds::new(urls, &config)?;
        let parts = seeds.parts(&config, &runtime);
        let connection = Cluster::lazy(
            seeds.cluster,
            config.connect_timeout,
            runtime.clone(),
            (RECONNECT_MIN_DELAY, config.reconnect_max_delay),
            &seeds.target,
        );
        Ok(Self::assemble(
            seeds.target,
            Connection::Cluster(connection),
            (Feed::Cluster(seeds.sharded), parts),
            config,
            &runtime,
        ))
    }

    /// A store for one Redis server that does not wait for it: returns at
    /// once, and connects in the background — retrying with backoff (from
    /// 50 ms up to [`RedisConfig::reconnect_max_delay`]) for as long as the
    /// server does not answer. So a service can start while Redis is down:
    /// until it answers, store calls fail at once with
    /// [`StoreErrorKind::Unavailable`] (after waiting, bounded by
    /// [`RedisConfig::op_timeout`], for the first attempt), which a cache
    /// treats as it treats any outage (`get_or_fill` fills without a
    /// lease; see "A sick store" in the crate docs); from the moment Redis
    /// answers, the same store uses it. Scripts are not loaded up front:
    /// each is cached by the server on its first use (`EVAL` after
    /// `NOSCRIPT`). Must be called within a tokio runtime.
    ///
    /// URLs and TLS settings are as in [`connect`](Self::connect).
    ///
    /// ```no_run
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// use corral::{Cache, RedisConfig, RedisStore};
    ///
    /// // Returns at once, even while Redis is down.
    /// let store = RedisStore::connect_lazy("redis://127.0.0.1/", RedisConfig::default())?;
    /// let users = Cache::<String>::builder("users").store(store).build()?;
    /// # let _ = users;
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// # Errors
    ///
    /// Only what no retry can fix, as [`StoreErrorKind::Configuration`]: a
    /// malformed URL, a `rediss://` URL without the feature `tls`,
    /// unreadable TLS material, or TLS material with a `redis://` URL; a
    /// call outside a tokio runtime. A refused
    /// password shows later, as [`StoreErrorKind::Denied`] errors of the
    /// store's calls.
    pub fn connect_lazy(url: &str, config: RedisConfig) -> Result<Self, StoreError> {
        let runtime = runtime()?;
        let config = config.normalized();
        let client = client::client(url, &config)?;
        let reconnect = reconnect(&config, &redact_url(url));
        let source = Source::Fixed(Box::new(client));
        let parts = Parts::new(&config, &redact_url(url), &runtime);
        let tracker = parts.tracker.clone();
        let connection = Standalone::lazy(source.clone(), reconnect, runtime.clone(), tracker);
        let feed = Feed::Server(source, connection.moves());
        Ok(Self::assemble(
            redact_url(url),
            Connection::Standalone(connection),
            (feed, parts),
            config,
            &runtime,
        ))
    }

    /// Connects to the current master of the Sentinel group `master_name`,
    /// asking the sentinels at `sentinels` (`redis://[user:password@]host:port`,
    /// `rediss://` with the feature `tls`) in turn, loads the scripts and
    /// starts the subscriber. Must be called within a tokio runtime.
    ///
    /// The store follows failovers: every reconnect of the command
    /// connection or the subscriber asks the sentinels for the master
    /// again, and checks with `ROLE` that the node named is a master. A
    /// connection that breaks (the master died) or whose server answers
    /// `READONLY` (it was demoted to a replica) is made anew that way. The
    /// fences and the breaker work as on one server: a commit prepared
    /// before a failover is refused by the new master unless its lease key
    /// holds the commit's token (a lease lost with unreplicated writes is
    /// absent, and an absent lease refuses), and calls fail with
    /// [`StoreErrorKind::Unavailable`] while no master answers. See
    /// "Sentinel" in the [`RedisStore`] docs.
    ///
    /// The master is reached with [`RedisConfig::master_auth`] and
    /// [`RedisConfig::master_db`], over TLS when the sentinels' URLs are
    /// `rediss://` (with the same TLS material).
    ///
    /// # Errors
    ///
    /// As [`connect`](Self::connect); also
    /// [`StoreErrorKind::Configuration`] when `master_name` or `sentinels`
    /// is empty, [`StoreErrorKind::Protocol`] when no sentinel that
    /// answered knows `master_name`; [`StoreErrorKind::Unavailable`] when
    /// no sentinel answers. The message names the master and the sentinels
    /// asked (without passwords).
    pub async fn connect_sentinel(
        master_name: &str,
        sentinels: &[String],
        config: RedisConfig,
    ) -> Result<Self, StoreError> {
        let runtime = runtime()?;
        let config = config.normalized();
        let group = sentinel_group(master_name, sentinels, &config)?;
        let source = Source::Sentinel(Arc::clone(&group));
        // Each sentinel may take the connect timeout, then the master's
        // connect and its `ROLE`.
        let steps = u32::try_from(sentinels.len())
            .unwrap_or(u32::MAX)
            .saturating_add(2);
        let parts = Parts::new(&config, &group.target(), &runtime);
        let connection = bounded(
            config.connect_timeout.saturating_mul(steps),
            "connect",
            Standalone::connect(
                source.clone(),
                reconnect(&config, &group.target()),
                runtime.clone(),
                parts.tracker.clone(),
            ),
        )
        .await
        .map_err(|e| group.scrub(scrub_seeds(sentinels, e)))?;
        let feed = Feed::Server(source, connection.moves());
        Self::finish(
            group.target(),
            Connection::Standalone(connection),
            (feed, parts),
            config,
            &runtime,
        )
        .await
    }

    /// A store on a Sentinel group that does not wait for it, as
    /// [`connect_lazy`](Self::connect_lazy) is for one server: returns at
    /// once and finds the master in the background, retrying with backoff
    /// until one answers. Must be called within a tokio runtime.
    ///
    /// # Errors
    ///
    /// As [`connect_lazy`](Self::connect_lazy); also
    /// [`StoreErrorKind::Configuration`] when `master_name` or `sentinels`
    /// is empty. An unknown master name shows later, as errors of the store's
    /// calls.
    pub fn connect_sentinel_lazy(
        master_name: &str,
        sentinels: &[String],
        config: RedisConfig,
    ) -> Result<Self, StoreError> {
        let runtime = runtime()?;
        let config = config.normalized();
        let group = sentinel_group(master_name, sentinels, &config)?;
        let source = Source::Sentinel(Arc::clone(&group));
        let reconnect = reconnect(&config, &group.target());
        let parts = Parts::new(&config, &group.target(), &runtime);
        let tracker = parts.tracker.clone();
        let connection = Standalone::lazy(source.clone(), reconnect, runtime.clone(), tracker);
        let feed = Feed::Server(source, connection.moves());
        Ok(Self::assemble(
            group.target(),
            Connection::Standalone(connection),
            (feed, parts),
            config,
            &runtime,
        ))
    }

    async fn finish(
        target: String,
        connection: Connection,
        feed: (Feed, Parts),
        config: RedisConfig,
        runtime: &tokio::runtime::Handle,
    ) -> Result<Self, StoreError> {
        connection.load_scripts(config.op_timeout).await?;
        Ok(Self::assemble(target, connection, feed, config, runtime))
    }

    /// The store around a connection (scripts loaded or not) and its
    /// `parts`, with its subscriber listening on `feed`.
    fn assemble(
        target: String,
        connection: Connection,
        (feed, parts): (Feed, Parts),
        config: RedisConfig,
        runtime: &tokio::runtime::Handle,
    ) -> Self {
        let subscriber = Subscriber::spawn(
            runtime,
            feed,
            Settings {
                connect_timeout: config.connect_timeout,
                op_timeout: config.op_timeout,
                max_backoff: config.reconnect_max_delay,
                health_interval: config.health_interval,
                store: target.as_str().into(),
            },
            parts.sinks,
        );
        Self {
            inner: Arc::new(Inner {
                target,
                reads: Reads::new(
                    connection.clone(),
                    lanes::for_connection(&connection, &config, runtime),
                    config.op_timeout,
                    runtime.clone(),
                ),
                connection,
                rng: Mutex::new(crate::rng::seeded()),
                subscriber,
                expiries: parts.expiries,
                absences: super::read::absences::Absences::new(),
                tracker: parts.tracker,
                config,
            }),
        }
    }
}

/// The tokio runtime the store's connections and subscriber run on.
fn runtime() -> Result<tokio::runtime::Handle, StoreError> {
    tokio::runtime::Handle::try_current().map_err(|_| {
        StoreError::new(
            StoreErrorKind::Configuration,
            "RedisStore: connect must be called within a tokio runtime",
        )
    })
}

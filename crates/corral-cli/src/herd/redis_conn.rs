//! The herd's own Redis connection (fill counters, PING) and its corral
//! store, on one server or on a cluster: `--redis` takes one URL, or several
//! comma-separated node URLs of one Redis Cluster (its seeds).

use anyhow::Context as _;
use redis::aio::MultiplexedConnection;
use redis::cluster_async::ClusterConnection;
use redis::{Cmd, FromRedisValue, RedisResult};

/// The URLs in a `--redis` value: one, or several separated by commas
/// (then they name the nodes of one cluster).
pub(crate) fn seeds(redis: &str) -> Vec<String> {
    redis
        .split(',')
        .map(str::trim)
        .filter(|url| !url.is_empty())
        .map(str::to_owned)
        .collect()
}

/// Whether a `--redis` value names a cluster (several URLs).
pub(crate) fn is_cluster(redis: &str) -> bool {
    seeds(redis).len() > 1
}

/// corral's store on `redis`: [`corral::RedisStore::connect`] for one URL,
/// [`corral::RedisStore::connect_cluster`] for several.
pub(crate) async fn store(redis: &str) -> anyhow::Result<corral::RedisStore> {
    let urls = seeds(redis);
    let config = corral::RedisConfig::default();
    let store = match urls.as_slice() {
        [one] => corral::RedisStore::connect(one, config).await,
        _ => corral::RedisStore::connect_cluster(&urls, config).await,
    };
    store.with_context(|| format!("connecting the corral store to {redis}"))
}

/// A multiplexed connection to one server or to a cluster (routed by slot).
#[derive(Clone)]
pub(crate) enum Conn {
    /// One server.
    Single(MultiplexedConnection),
    /// A cluster.
    Cluster(ClusterConnection),
}

impl Conn {
    /// Connects to `redis` (one URL or several cluster seeds).
    pub(crate) async fn connect(redis: &str) -> anyhow::Result<Self> {
        let urls = seeds(redis);
        match urls.as_slice() {
            [] => anyhow::bail!("--redis names no URL"),
            [one] => Ok(Self::Single(
                redis::Client::open(one.as_str())
                    .context("parsing the Redis URL")?
                    .get_multiplexed_async_connection()
                    .await
                    .context("connecting to Redis")?,
            )),
            _ => Ok(Self::Cluster(
                redis::cluster::ClusterClient::new(urls)
                    .context("parsing the Redis Cluster URLs")?
                    .get_async_connection()
                    .await
                    .context("connecting to the Redis Cluster")?,
            )),
        }
    }

    /// Sends `cmd` and reads its reply.
    pub(crate) async fn query<T: FromRedisValue>(&mut self, cmd: &Cmd) -> RedisResult<T> {
        match self {
            Self::Single(conn) => cmd.query_async(conn).await,
            Self::Cluster(conn) => cmd.query_async(conn).await,
        }
    }

    /// The integer values of `keys` (absent: `None`), then deletes them: one
    /// `MGET` and one `DEL` on a server; per key on a cluster, where the keys
    /// live in different slots.
    pub(crate) async fn take_counts(&mut self, keys: &[String]) -> RedisResult<Vec<Option<u64>>> {
        if let Self::Single(_) = self {
            let counts = self.query(redis::cmd("MGET").arg(keys)).await?;
            self.query::<()>(redis::cmd("DEL").arg(keys)).await?;
            return Ok(counts);
        }
        let mut counts = Vec::with_capacity(keys.len());
        for key in keys {
            counts.push(self.query(redis::cmd("GET").arg(key)).await?);
            self.query::<()>(redis::cmd("DEL").arg(key)).await?;
        }
        Ok(counts)
    }
}

#[cfg(test)]
mod tests {
    use super::{is_cluster, seeds};

    #[test]
    fn splits_seeds() {
        assert_eq!(seeds("redis://a:1/"), vec!["redis://a:1/"]);
        assert_eq!(
            seeds("redis://a:1/, redis://b:2/,"),
            vec!["redis://a:1/", "redis://b:2/"]
        );
        assert!(!is_cluster("redis://a:1/"));
        assert!(is_cluster("redis://a:1/,redis://b:2/"));
    }
}

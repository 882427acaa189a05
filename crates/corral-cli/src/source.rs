//! The source of truth, counted where its calls land: a seeded SQLite file
//! of orders read through a bounded [`deadpool_sqlite`] pool (the default
//! run), or a source that sleeps `--fill-ms` a call (the outage, and the
//! server that the Redis run's fills call).
//!
//! Every SQLite fill is one deliberately costly query: a user's order
//! totals, with no index on `orders.user_id`, so a full scan. A call waits
//! at most `--pool-wait-ms` for one of the `--pool-size` connections; past
//! that it gives up and counts a timeout.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use deadpool_sqlite::rusqlite::{named_params, Connection};
use deadpool_sqlite::{Manager, Object, Pool, PoolError, Runtime, TimeoutType};

use crate::plot::Timeline;
use crate::scenario::Load;
use crate::HerdArgs;

const SCHEMA: &str = "DROP TABLE IF EXISTS orders;
    CREATE TABLE orders (id INTEGER PRIMARY KEY, user_id INTEGER NOT NULL,
        amount_cents INTEGER NOT NULL, status INTEGER NOT NULL, note TEXT NOT NULL);";

/// The orders, from a fixed formula so every run holds the same data.
const ORDERS: &str = "
    WITH RECURSIVE n(id) AS (SELECT 1 UNION ALL SELECT id + 1 FROM n WHERE id < :rows),
        o(id, user_id) AS (SELECT id, (id * 2654435761) % :users + 1 FROM n)
    INSERT INTO orders SELECT id, user_id, 100 + (id * 7919) % 49901, id % 3,
        'order ' || id || ' of user ' || user_id || ', shipped by carrier ' || id % 7 FROM o";

/// The fill: one user's order totals, a scan of every order (no index on
/// `user_id`).
const USER_TOTALS: &str = "
    SELECT COUNT(*), COALESCE(SUM(amount_cents), 0),
           COALESCE(SUM(CASE WHEN status = 2 THEN amount_cents ELSE 0 END), 0)
    FROM orders WHERE user_id = ?1";

/// Creates and seeds the SQLite file, in a temporary directory (which
/// goes away when dropped) unless `--db` names one; blocking.
pub(crate) fn seed(args: &HerdArgs) -> anyhow::Result<(Option<tempfile::TempDir>, PathBuf)> {
    let (dir, path) = match &args.db {
        Some(path) => (None, path.clone()),
        None => {
            let dir = tempfile::Builder::new().prefix("corral-herd-").tempdir()?;
            let path = dir.path().join("herd.sqlite3");
            (Some(dir), path)
        }
    };
    let conn = Connection::open(&path)?;
    let (rows, users) = (i64::try_from(args.rows)?, i64::try_from(args.users)?);
    conn.execute_batch(SCHEMA)?;
    let seeded = conn.execute(ORDERS, named_params! { ":rows": rows, ":users": users });
    seeded.with_context(|| format!("seeding {path:?}"))?;
    Ok((dir, path))
}

fn user_totals(conn: &Connection, user: i64) -> deadpool_sqlite::rusqlite::Result<String> {
    let mut statement = conn.prepare_cached(USER_TOTALS)?;
    statement.query_row([user], |row| {
        let (orders, total, refunded): (i64, i64, i64) = (row.get(0)?, row.get(1)?, row.get(2)?);
        let totals = format!("user {user}: {orders} orders, {total} cents, {refunded} refunded");
        Ok(totals)
    })
}

/// A side's source: what its fills call, counted where the calls land.
/// Its values start with their key.
pub(crate) struct Source {
    /// The SQLite file's pool; without one, a call sleeps `--fill-ms`.
    pub(crate) pool: Option<Pool>,
    args: HerdArgs,
    /// While set, every call fails (after it ran).
    pub(crate) down: AtomicBool,
    /// Calls that ran at the source, that found no pooled connection in
    /// time, and that got none for another reason.
    pub(crate) counts: [AtomicU64; 3],
    pub(crate) timeline: Arc<Timeline>,
}

impl Source {
    /// The SQLite file at `sqlite` through a pool of `--pool-size`
    /// connections, or else the sleeping source.
    pub(crate) fn new(args: &HerdArgs, sqlite: Option<&Path>) -> anyhow::Result<Self> {
        let config = sqlite.map(deadpool_sqlite::Config::new);
        let pool = config.map(|config| {
            Pool::builder(Manager::from_config(&config, Runtime::Tokio1))
                .max_size(args.pool_size as usize)
                .wait_timeout(Some(Duration::from_millis(args.pool_wait_ms)))
                .runtime(Runtime::Tokio1)
                .build()
        });
        Ok(Self {
            pool: pool.transpose()?,
            args: args.clone(),
            down: AtomicBool::new(false),
            counts: Default::default(),
            timeline: Arc::default(),
        })
    }

    /// Its counts since they were last taken.
    pub(crate) fn take_counts(&self) -> [u64; 3] {
        self.counts.each_ref().map(|count| count.swap(0, Relaxed))
    }

    /// A pooled connection, waited for up to `--pool-wait-ms`.
    async fn connection(&self, pool: &Pool) -> anyhow::Result<Object> {
        let (wait, [_, timeouts, errors]) = (self.args.pool_wait_ms, &self.counts);
        pool.get().await.map_err(|error| match error {
            PoolError::Timeout(TimeoutType::Wait) => {
                timeouts.fetch_add(1, Relaxed);
                anyhow::anyhow!("no SQLite connection came free within {wait} ms")
            }
            other => {
                errors.fetch_add(1, Relaxed);
                anyhow::anyhow!("SQLite pool: {other}")
            }
        })
    }
}

impl Load for Source {
    /// One counted call: the totals of the key's user (its number a stable
    /// hash of the key, FNV-1a), or a sleep; the value is `{key} → …`.
    async fn load(&self, key: &str) -> anyhow::Result<String> {
        let conn = match &self.pool {
            Some(pool) => Some(self.connection(pool).await?),
            None => None,
        };
        self.counts[0].fetch_add(1, Relaxed);
        let running = self.timeline.run();
        let value = match conn {
            Some(conn) => {
                let hash = key.bytes().fold(0xcbf2_9ce4_8422_2325_u64, |h, b| {
                    (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
                });
                let user = (hash % self.args.users.max(1)) as i64 + 1;
                let totals = conn.interact(move |conn| user_totals(conn, user)).await;
                totals.map_err(|e| anyhow::anyhow!("SQLite query task: {e}"))??
            }
            None => {
                tokio::time::sleep(Duration::from_millis(self.args.fill_ms)).await;
                "its value".to_owned()
            }
        };
        drop(running);
        anyhow::ensure!(!self.down.load(Relaxed), "the source is down");
        Ok(format!("{key} → {value}"))
    }
}

//! The default run's source of truth: a SQLite file of orders, seeded for
//! the run, read through a bounded [`deadpool_sqlite`] pool (queries run on
//! tokio's blocking threads).
//!
//! Every fill is one deliberately costly query: a user's order totals, with
//! no index on `orders.user_id`, so a full scan. A call waits at most
//! `--pool-wait-ms` for one of the `--pool-size` connections; past that it
//! gives up and counts a timeout.

use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context as _;
use deadpool_sqlite::rusqlite::{named_params, Connection};
use deadpool_sqlite::{Manager, Pool, PoolError, Runtime, TimeoutType, Timeouts};
use serde::Serialize;

use super::scenario::Load;
use super::timeline::{Gauge, Timeline};

/// Flags of `corral herd` for the SQLite source (the default run).
#[derive(Debug, Clone, clap::Args)]
pub(crate) struct SqliteArgs {
    /// Default run: the SQLite file to create and seed (its `users` and
    /// `orders` tables are replaced) [default: a file in a fresh temporary
    /// directory].
    #[arg(long, value_name = "PATH")]
    db: Option<PathBuf>,
    /// Default run: orders to seed; each fill's query scans all of them.
    #[arg(long, default_value_t = 400_000, value_parser = clap::value_parser!(u64).range(1..=100_000_000))]
    rows: u64,
    /// Default run: users the orders belong to; each key names one of them.
    #[arg(long, default_value_t = 2_000, value_parser = clap::value_parser!(u64).range(1..=10_000_000))]
    users: u64,
    /// Default run: connections in the SQLite pool of each side.
    #[arg(long, default_value_t = 4, value_parser = clap::value_parser!(u64).range(1..=1024))]
    pool_size: u64,
    /// Default run: how long a call waits for a pooled connection before
    /// it gives up (counted as a timeout), in milliseconds.
    #[arg(long, default_value_t = 1_000, value_parser = clap::value_parser!(u64).range(1..=600_000))]
    pool_wait_ms: u64,
}

/// A seeded SQLite file, as the report describes it; its temporary
/// directory, if any, goes away with it.
#[derive(Debug, Serialize)]
pub(crate) struct Database {
    #[serde(skip)]
    _dir: Option<tempfile::TempDir>,
    pub(crate) path: PathBuf,
    pub(crate) rows: u64,
    pub(crate) users: u64,
    pub(crate) pool_size: u64,
    pub(crate) pool_wait_ms: u64,
    /// How long creating and seeding the file took.
    pub(crate) seed_ms: f64,
    /// How long one fill query took alone (uncounted, before the run).
    pub(crate) query_ms: f64,
}

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

impl Database {
    /// Creates the file (in a temporary directory unless `--db` names one),
    /// seeds it and times one fill query; fails if it cannot. Blocking.
    pub(crate) fn create(args: &SqliteArgs) -> anyhow::Result<Self> {
        let (dir, path) = match &args.db {
            Some(path) => (None, path.clone()),
            None => {
                let dir = tempfile::Builder::new().prefix("corral-herd-").tempdir()?;
                let path = dir.path().join("herd.sqlite3");
                (Some(dir), path)
            }
        };
        let ms = |started: Instant| started.elapsed().as_micros() as f64 / 1000.0;
        let started = Instant::now();
        let conn = Connection::open(&path)?;
        let (rows, users) = (i64::try_from(args.rows)?, i64::try_from(args.users)?);
        conn.execute_batch(SCHEMA)?;
        let seeded = conn.execute(ORDERS, named_params! { ":rows": rows, ":users": users });
        seeded.with_context(|| format!("seeding {path:?}"))?;
        let seed_ms = ms(started);
        let started = Instant::now();
        user_totals(&conn, 1)?;
        let (pool_size, pool_wait_ms) = (args.pool_size, args.pool_wait_ms);
        let (_dir, rows, users, query_ms) = (dir, args.rows, args.users, ms(started));
        Ok(Self {
            _dir,
            path,
            rows,
            users,
            pool_size,
            pool_wait_ms,
            seed_ms,
            query_ms,
        })
    }

    /// A source over this file with its own pool and counters, its calls
    /// recorded in `timeline`.
    pub(crate) fn source(&self, timeline: &Arc<Timeline>) -> anyhow::Result<SqliteSource> {
        let wait = Duration::from_millis(self.pool_wait_ms);
        let config = deadpool_sqlite::Config::new(&self.path);
        let pool = Pool::builder(Manager::from_config(&config, Runtime::Tokio1))
            .max_size(usize::try_from(self.pool_size)?)
            .wait_timeout(Some(wait))
            .runtime(Runtime::Tokio1)
            .build()?;
        Ok(SqliteSource {
            pool,
            wait,
            users: self.users,
            counts: Default::default(),
            timeline: Arc::clone(timeline),
        })
    }
}

/// One fill query: the user's totals.
fn user_totals(conn: &Connection, user: i64) -> deadpool_sqlite::rusqlite::Result<String> {
    let mut statement = conn.prepare_cached(USER_TOTALS)?;
    statement.query_row([user], |row| {
        let (orders, total, refunded): (i64, i64, i64) = (row.get(0)?, row.get(1)?, row.get(2)?);
        Ok(format!(
            "user {user}: {orders} orders, {total} cents, {refunded} refunded"
        ))
    })
}

/// What a source's calls came to.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub(crate) struct SourceCounts {
    /// Queries SQLite ran.
    pub(crate) sqlite_queries: u64,
    /// Calls that found no free connection in time.
    pub(crate) timeouts: u64,
    /// Calls that failed otherwise.
    pub(crate) errors: u64,
}

/// A side's view of the database: a bounded pool, and counts of its calls.
pub(crate) struct SqliteSource {
    pool: Pool,
    wait: Duration,
    users: u64,
    counts: [AtomicU64; 3],
    timeline: Arc<Timeline>,
}

impl SqliteSource {
    /// The user a key names (a stable hash of the key, FNV-1a).
    fn user_of(&self, key: &str) -> i64 {
        let hash = key.bytes().fold(0xcbf2_9ce4_8422_2325_u64, |h, b| {
            (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
        });
        (hash % self.users.max(1)) as i64 + 1
    }

    /// Its counts since the last time they were taken.
    pub(crate) fn take_counts(&self) -> SourceCounts {
        let [sqlite_queries, timeouts, errors] = self.counts.each_ref().map(|c| c.swap(0, Relaxed));
        SourceCounts {
            sqlite_queries,
            timeouts,
            errors,
        }
    }
}

impl Load for SqliteSource {
    /// One counted fill: waits (bounded) for a connection, then queries the
    /// totals of the key's user; the value is `{key} → {totals}`. A call
    /// that finds no connection in time counts as a timeout.
    async fn load(&self, key: &str) -> anyhow::Result<String> {
        let user = self.user_of(key);
        let [queries, timeouts, errors] = &self.counts;
        // Only a call that finds no connection free waits at the door.
        let at_once = Timeouts {
            wait: Some(Duration::ZERO),
            ..self.pool.timeouts()
        };
        let conn = match self.pool.timeout_get(&at_once).await {
            Err(PoolError::Timeout(TimeoutType::Wait)) => {
                let _waiting = self.timeline.enter(Gauge::Waiting);
                self.pool.get().await
            }
            conn => conn,
        };
        let conn = match conn {
            Ok(conn) => conn,
            Err(PoolError::Timeout(TimeoutType::Wait)) => {
                timeouts.fetch_add(1, Relaxed);
                let wait = self.wait.as_millis();
                anyhow::bail!("no SQLite connection came free within {wait} ms");
            }
            Err(other) => {
                errors.fetch_add(1, Relaxed);
                anyhow::bail!("SQLite pool: {other}");
            }
        };
        queries.fetch_add(1, Relaxed);
        let running = self.timeline.enter(Gauge::Running);
        let result = conn.interact(move |conn| user_totals(conn, user)).await;
        drop(running);
        let value = result.map_err(|e| anyhow::anyhow!("SQLite query task: {e}"));
        let totals = value.and_then(|v| Ok(v?)).inspect_err(|_| {
            errors.fetch_add(1, Relaxed);
        })?;
        Ok(format!("{key} → {totals}"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_fill_is_its_user_s_totals_and_every_call_is_counted() {
        let dir = tempfile::tempdir().expect("temp dir");
        let db = Some(dir.path().join("t.sqlite3"));
        let args = SqliteArgs {
            db,
            rows: 2_000,
            users: 50,
            pool_size: 1,
            pool_wait_ms: 20,
        };
        let timeline = Arc::default();
        let db = Database::create(&args).expect("create");
        let source = db.source(&timeline).expect("pool");
        let conn = Connection::open(dir.path().join("t.sqlite3")).expect("open");
        for key in ["a", "herd:local:r0:k3"] {
            let totals = user_totals(&conn, source.user_of(key)).expect("totals");
            assert_eq!(
                source.load(key).await.expect("query"),
                format!("{key} → {totals}")
            );
        }
        let held = source.pool.get().await.expect("the one connection");
        let error = source.load("k").await.expect_err("no connection is free");
        assert!(error.to_string().contains("within 20 ms"), "{error}");
        drop(held);
        let counts = SourceCounts {
            sqlite_queries: 2,
            timeouts: 1,
            errors: 0,
        };
        assert_eq!(source.take_counts(), counts);
        assert_eq!(source.take_counts(), SourceCounts::default());
        let series = timeline.take();
        assert_eq!(series.started.iter().sum::<u64>(), 2);
        assert_eq!(series.running.iter().max(), Some(&1));
        assert_eq!(series.waiting.iter().max(), Some(&1), "{series:?}");
    }
}

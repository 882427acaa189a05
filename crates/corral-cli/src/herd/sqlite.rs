//! The source of truth of the default herd: a SQLite file of orders, seeded
//! for the run and read through a bounded connection pool.
//!
//! Every fill is one deliberately costly query: the order totals of one
//! user, with no index on `orders.user_id`, so each query scans the whole
//! table. A call waits at most `--pool-wait-ms` for one of the
//! `--pool-size` connections; past that it gives up and counts a timeout.
//! The pool is [`deadpool_sqlite`]: its connections run on tokio's blocking
//! threads (`interact`), so a long query never stalls the runtime's workers.

use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context as _;
use deadpool_sqlite::rusqlite::{self, params};
use deadpool_sqlite::{Manager, Pool, PoolError, Runtime, TimeoutType};
use serde::Serialize;

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

impl SqliteArgs {
    /// How long a call may wait for a connection.
    pub(crate) fn pool_wait(&self) -> Duration {
        Duration::from_millis(self.pool_wait_ms)
    }
}

/// What the report says about the database.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct DatabaseInfo {
    /// Always `sqlite`.
    pub(crate) kind: &'static str,
    /// The file.
    pub(crate) path: String,
    /// Orders seeded.
    pub(crate) rows: u64,
    /// Users seeded.
    pub(crate) users: u64,
    /// Connections in each side's pool.
    pub(crate) pool_size: u64,
    /// Bound on the wait for a connection.
    pub(crate) pool_wait_ms: u64,
    /// How long creating and seeding the file took.
    pub(crate) seed_ms: f64,
    /// How long one fill query took alone (uncounted, before the run).
    pub(crate) query_ms: f64,
}

/// A seeded SQLite file, with the answer each user's query must give. A
/// temporary directory, if the file lives in one, goes away with it.
pub(crate) struct Database {
    _dir: Option<tempfile::TempDir>,
    path: PathBuf,
    expected: Arc<Vec<String>>,
    info: DatabaseInfo,
}

const SCHEMA: &str = "
    DROP TABLE IF EXISTS orders;
    DROP TABLE IF EXISTS users;
    CREATE TABLE users (id INTEGER PRIMARY KEY, name TEXT NOT NULL);
    CREATE TABLE orders (
        id INTEGER PRIMARY KEY,
        user_id INTEGER NOT NULL,
        amount_cents INTEGER NOT NULL,
        status INTEGER NOT NULL,
        note TEXT NOT NULL
    );";

/// The fill: one user's order totals. There is no index on `user_id`, so
/// SQLite scans every order.
const USER_TOTALS: &str = "
    SELECT COUNT(*), COALESCE(SUM(amount_cents), 0),
           COALESCE(SUM(CASE WHEN status = 2 THEN amount_cents ELSE 0 END), 0)
    FROM orders WHERE user_id = ?1";

/// Every user's totals in one pass, to check the answers against.
const ALL_TOTALS: &str = "
    SELECT user_id, COUNT(*), SUM(amount_cents),
           SUM(CASE WHEN status = 2 THEN amount_cents ELSE 0 END)
    FROM orders GROUP BY user_id";

/// The value of a user's key: what [`USER_TOTALS`] says about them.
fn answer(user: u64, orders: i64, total: i64, refunded: i64) -> String {
    format!("user {user}: {orders} orders, {total} cents, {refunded} refunded")
}

impl Database {
    /// Creates the file (in a temporary directory unless `--db` names one),
    /// seeds it in one transaction, reads every user's expected answer and
    /// times one fill query. Blocking: run it off the runtime's workers.
    ///
    /// # Errors
    ///
    /// If the file cannot be created or written.
    pub(crate) fn create(args: &SqliteArgs) -> anyhow::Result<Self> {
        let (dir, path) = match &args.db {
            Some(path) => (None, path.clone()),
            None => {
                let dir = tempfile::Builder::new()
                    .prefix("corral-herd-")
                    .tempdir()
                    .context("creating a temporary directory for the database")?;
                let path = dir.path().join("herd.sqlite3");
                (Some(dir), path)
            }
        };
        let started = Instant::now();
        let mut conn = rusqlite::Connection::open(&path)
            .with_context(|| format!("opening {}", path.display()))?;
        seed(&mut conn, args.rows, args.users)
            .with_context(|| format!("seeding {}", path.display()))?;
        let seed_ms = ms(started.elapsed());
        let expected =
            expected_answers(&conn, args.users).context("reading every user's totals")?;
        let started = Instant::now();
        user_totals(&conn, 1).context("timing one fill query")?;
        let query_ms = ms(started.elapsed());
        Ok(Self {
            _dir: dir,
            info: DatabaseInfo {
                kind: "sqlite",
                path: path.display().to_string(),
                rows: args.rows,
                users: args.users,
                pool_size: args.pool_size,
                pool_wait_ms: args.pool_wait_ms,
                seed_ms,
                query_ms,
            },
            path,
            expected: Arc::new(expected),
        })
    }

    /// What the report says about it.
    pub(crate) fn info(&self) -> &DatabaseInfo {
        &self.info
    }

    /// A source over this file with its own pool of `args.pool_size`
    /// connections and its own counters.
    ///
    /// # Errors
    ///
    /// If the pool cannot be built.
    pub(crate) fn source(&self, args: &SqliteArgs) -> anyhow::Result<SqliteSource> {
        SqliteSource::open(
            &self.path,
            usize::try_from(args.pool_size).context("--pool-size")?,
            args.pool_wait(),
            Arc::clone(&self.expected),
        )
    }
}

fn ms(d: Duration) -> f64 {
    d.as_micros() as f64 / 1000.0
}

/// Fills the tables in one transaction through prepared statements, from a
/// fixed seed so every run holds the same data.
fn seed(conn: &mut rusqlite::Connection, rows: u64, users: u64) -> rusqlite::Result<()> {
    conn.execute_batch(SCHEMA)?;
    let tx = conn.transaction()?;
    {
        let mut user = tx.prepare("INSERT INTO users (id, name) VALUES (?1, ?2)")?;
        for id in 1..=users {
            user.execute(params![to_i64(id), format!("user-{id:07}")])?;
        }
        let mut order = tx.prepare(
            "INSERT INTO orders (id, user_id, amount_cents, status, note) VALUES (?1, ?2, ?3, ?4, ?5)",
        )?;
        let mut rng = fastrand::Rng::with_seed(0x5eed);
        for id in 1..=rows {
            let user_id = rng.u64(1..=users);
            let amount: i64 = rng.i64(100..=50_000);
            let status: i64 = rng.i64(0..=2);
            order.execute(params![
                to_i64(id),
                to_i64(user_id),
                amount,
                status,
                format!(
                    "order {id} of user {user_id}, shipped by carrier {}",
                    id % 7
                )
            ])?;
        }
    }
    tx.commit()
}

fn to_i64(n: u64) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

/// Every user's answer, indexed by `user - 1` (users without orders too).
fn expected_answers(conn: &rusqlite::Connection, users: u64) -> rusqlite::Result<Vec<String>> {
    let mut expected: Vec<String> = (1..=users).map(|user| answer(user, 0, 0, 0)).collect();
    let mut all = conn.prepare(ALL_TOTALS)?;
    let mut rows = all.query([])?;
    while let Some(row) = rows.next()? {
        let user: i64 = row.get(0)?;
        let slot = usize::try_from(user - 1)
            .ok()
            .and_then(|i| expected.get_mut(i));
        if let Some(slot) = slot {
            *slot = answer(user.unsigned_abs(), row.get(1)?, row.get(2)?, row.get(3)?);
        }
    }
    Ok(expected)
}

/// One fill query.
fn user_totals(conn: &rusqlite::Connection, user: u64) -> rusqlite::Result<String> {
    let mut statement = conn.prepare_cached(USER_TOTALS)?;
    statement.query_row(params![to_i64(user)], |row| {
        Ok(answer(user, row.get(0)?, row.get(1)?, row.get(2)?))
    })
}

/// Why a read of the database failed.
#[derive(Debug)]
pub(crate) enum QueryError {
    /// No pooled connection came free within the bound.
    PoolTimeout(Duration),
    /// The pool could not hand out a connection.
    Pool(String),
    /// SQLite refused the query.
    Sqlite(rusqlite::Error),
    /// The query's blocking task panicked or was cancelled.
    Interact(String),
}

impl QueryError {
    /// Whether this is a wait for a connection that ran out of time.
    pub(crate) fn is_timeout(&self) -> bool {
        matches!(self, Self::PoolTimeout(_))
    }
}

impl fmt::Display for QueryError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::PoolTimeout(wait) => write!(
                f,
                "no SQLite connection came free within {} ms",
                wait.as_millis()
            ),
            Self::Pool(e) => write!(f, "SQLite pool: {e}"),
            Self::Sqlite(e) => write!(f, "SQLite: {e}"),
            Self::Interact(e) => write!(f, "SQLite query task: {e}"),
        }
    }
}

impl std::error::Error for QueryError {}

/// A side's view of the database: a bounded pool, and counts of what
/// happened to its calls.
pub(crate) struct SqliteSource {
    pool: Pool,
    wait: Duration,
    expected: Arc<Vec<String>>,
    queries: AtomicU64,
    timeouts: AtomicU64,
    errors: AtomicU64,
}

/// What a source's calls came to.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub(crate) struct SourceCounts {
    /// Queries SQLite ran.
    pub(crate) queries: u64,
    /// Calls that found no free connection in time.
    pub(crate) timeouts: u64,
    /// Calls that failed otherwise.
    pub(crate) errors: u64,
}

impl SourceCounts {
    /// What happened between `before` and `self`.
    pub(crate) fn since(self, before: Self) -> Self {
        Self {
            queries: self.queries - before.queries,
            timeouts: self.timeouts - before.timeouts,
            errors: self.errors - before.errors,
        }
    }
}

impl SqliteSource {
    fn open(
        path: &Path,
        pool_size: usize,
        wait: Duration,
        expected: Arc<Vec<String>>,
    ) -> anyhow::Result<Self> {
        let manager = Manager::from_config(&deadpool_sqlite::Config::new(path), Runtime::Tokio1);
        let pool = Pool::builder(manager)
            .max_size(pool_size)
            .wait_timeout(Some(wait))
            .runtime(Runtime::Tokio1)
            .build()
            .context("building the SQLite pool")?;
        Ok(Self {
            pool,
            wait,
            expected,
            queries: AtomicU64::new(0),
            timeouts: AtomicU64::new(0),
            errors: AtomicU64::new(0),
        })
    }

    /// The user a key names (a stable hash of the key, FNV-1a).
    fn user_of(&self, key: &str) -> u64 {
        let hash = key.bytes().fold(0xcbf2_9ce4_8422_2325_u64, |h, b| {
            (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
        });
        hash % (self.expected.len().max(1) as u64) + 1
    }

    /// Whether `value` is what the database holds for `key`.
    pub(crate) fn is_value_of(&self, key: &str, value: &str) -> bool {
        let index = usize::try_from(self.user_of(key) - 1).unwrap_or(usize::MAX);
        self.expected.get(index).is_some_and(|v| v == value)
    }

    /// One fill: waits (bounded) for a connection, then runs the user's
    /// query on a blocking thread. Counted.
    ///
    /// # Errors
    ///
    /// A [`QueryError`]; timeouts and other errors are counted apart.
    pub(crate) async fn load(&self, key: &str) -> Result<String, QueryError> {
        let result = self.query(self.user_of(key)).await;
        if let Err(error) = &result {
            let counter = if error.is_timeout() {
                &self.timeouts
            } else {
                &self.errors
            };
            counter.fetch_add(1, Relaxed);
        }
        result
    }

    async fn query(&self, user: u64) -> Result<String, QueryError> {
        let conn = self.pool.get().await.map_err(|error| match error {
            PoolError::Timeout(TimeoutType::Wait) => QueryError::PoolTimeout(self.wait),
            other => QueryError::Pool(other.to_string()),
        })?;
        self.queries.fetch_add(1, Relaxed);
        conn.interact(move |conn| user_totals(conn, user))
            .await
            .map_err(|e| QueryError::Interact(e.to_string()))?
            .map_err(QueryError::Sqlite)
    }

    /// Its counts so far.
    pub(crate) fn counts(&self) -> SourceCounts {
        SourceCounts {
            queries: self.queries.load(Relaxed),
            timeouts: self.timeouts.load(Relaxed),
            errors: self.errors.load(Relaxed),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(db: &Path) -> SqliteArgs {
        SqliteArgs {
            db: Some(db.to_owned()),
            rows: 2_000,
            users: 50,
            pool_size: 2,
            pool_wait_ms: 5_000,
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn every_query_answers_what_the_seed_holds_and_is_counted() {
        let dir = tempfile::tempdir().expect("temp dir");
        let args = args(&dir.path().join("t.sqlite3"));
        let db = Database::create(&args).expect("create");
        let source = db.source(&args).expect("pool");
        for key in ["a", "b", "herd:local:r0:k3"] {
            let value = source.load(key).await.expect("query");
            assert!(source.is_value_of(key, &value), "{key}: {value}");
            assert!(!source.is_value_of(key, "user 0: nothing"));
        }
        assert_eq!(
            source.counts(),
            SourceCounts {
                queries: 3,
                timeouts: 0,
                errors: 0
            }
        );
        // Seeding again replaces the tables: same data, same answers.
        let again = Database::create(&args).expect("re-create");
        assert_eq!(again.expected, db.expected);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_call_that_finds_no_free_connection_times_out_and_is_counted() {
        let dir = tempfile::tempdir().expect("temp dir");
        let mut args = args(&dir.path().join("t.sqlite3"));
        args.pool_size = 1;
        args.pool_wait_ms = 20;
        let db = Database::create(&args).expect("create");
        let source = db.source(&args).expect("pool");
        let held = source.pool.get().await.expect("the one connection");
        let error = source.load("k").await.expect_err("no connection is free");
        assert!(error.is_timeout(), "{error}");
        drop(held);
        source.load("k").await.expect("free again");
        assert_eq!(
            source.counts(),
            SourceCounts {
                queries: 1,
                timeouts: 1,
                errors: 0
            }
        );
    }
}

//! The source of truth: a SQLite file of users, seeded by the coordinator
//! and read (and, in the write mix, updated) by every replica through a
//! `deadpool-sqlite` pool.

use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::time::Duration;

use deadpool_sqlite::rusqlite::{self, params, OptionalExtension as _};
use deadpool_sqlite::{Config, Pool, Runtime};
use serde::{Deserialize, Serialize};

/// One user, as the service hands it out: the cached value is its JSON
/// (about 190 bytes), which every request decodes.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct User {
    pub(crate) id: i64,
    pub(crate) name: String,
    pub(crate) email: String,
    pub(crate) city: String,
    pub(crate) bio: String,
    pub(crate) version: i64,
}

const CITIES: [&str; 8] = [
    "Lisbon", "Oslo", "Kyoto", "Quito", "Nairobi", "Tallinn", "Perth", "Montreal",
];
const WORDS: [&str; 12] = [
    "likes", "hiking", "rust", "coffee", "old", "maps", "and", "quiet", "trains", "jazz",
    "gardens", "chess",
];

/// How long a statement waits for SQLite's write lock (held by another
/// replica's update) before it fails.
const BUSY_TIMEOUT: Duration = Duration::from_secs(5);

/// Creates `path` with `rows` users (ids 1..=rows) in one transaction, in
/// WAL mode so that the replicas' reads do not wait for a write.
pub(crate) fn seed(path: &Path, rows: u64) -> anyhow::Result<()> {
    let mut conn = rusqlite::Connection::open(path)?;
    conn.query_row("PRAGMA journal_mode = WAL", [], |_| Ok(()))?;
    conn.execute_batch(
        "CREATE TABLE users (id INTEGER PRIMARY KEY, name TEXT NOT NULL, email TEXT NOT NULL,
             city TEXT NOT NULL, bio TEXT NOT NULL, version INTEGER NOT NULL);",
    )?;
    let tx = conn.transaction()?;
    {
        let mut insert = tx.prepare(
            "INSERT INTO users (id, name, email, city, bio, version) VALUES (?1, ?2, ?3, ?4, ?5, 0)",
        )?;
        let mut rng = fastrand::Rng::with_seed(44);
        for id in 1..=rows {
            let bio: Vec<&str> = (0..10).map(|_| WORDS[rng.usize(..WORDS.len())]).collect();
            insert.execute(params![
                id as i64,
                format!("user-{id:06}"),
                format!("user{id:06}@example.com"),
                CITIES[rng.usize(..CITIES.len())],
                bio.join(" "),
            ])?;
        }
    }
    tx.commit()?;
    Ok(())
}

/// A replica's pool over the seeded file, counting its queries.
#[derive(Clone)]
pub(crate) struct Db {
    pool: Pool,
    queries: Arc<AtomicU64>,
}

impl Db {
    /// A pool of `size` connections over `path`, each opened before the
    /// first request, one at a time: a request then only waits for an idle
    /// one (see [`user_json`](Self::user_json)).
    pub(crate) async fn open(path: &str, size: usize) -> anyhow::Result<Self> {
        let pool = Config::new(path)
            .builder(Runtime::Tokio1)?
            .max_size(size)
            .build()?;
        let mut opened = Vec::with_capacity(size);
        for _ in 0..size {
            opened.push(pool.get().await.map_err(|e| anyhow::anyhow!("pool: {e}"))?);
        }
        drop(opened);
        let queries = Arc::new(AtomicU64::new(0));
        Ok(Self { pool, queries })
    }

    /// The reads (`SELECT`s) made so far.
    pub(crate) fn queries(&self) -> u64 {
        self.queries.load(Relaxed)
    }

    /// User `id` as JSON (a fill's query); an error if there is none.
    ///
    /// The query is a task of its own, so a caller dropped meanwhile (a
    /// fill past its timeout) does not cancel the pool's `get`: deadpool
    /// would then open another connection while the first one's open goes
    /// on, on a blocking thread, and under overload hundreds of such opens
    /// pile up on SQLite's open lock.
    pub(crate) async fn user_json(&self, id: u64) -> anyhow::Result<String> {
        let db = self.clone();
        tokio::spawn(async move { db.query_user(id).await }).await?
    }

    async fn query_user(&self, id: u64) -> anyhow::Result<String> {
        self.queries.fetch_add(1, Relaxed);
        let conn = self
            .pool
            .get()
            .await
            .map_err(|e| anyhow::anyhow!("pool: {e}"))?;
        let user = conn
            .interact(move |conn| {
                conn.busy_timeout(BUSY_TIMEOUT)?;
                let mut select = conn.prepare_cached(
                    "SELECT id, name, email, city, bio, version FROM users WHERE id = ?1",
                )?;
                select
                    .query_row(params![id as i64], |row| {
                        Ok(User {
                            id: row.get(0)?,
                            name: row.get(1)?,
                            email: row.get(2)?,
                            city: row.get(3)?,
                            bio: row.get(4)?,
                            version: row.get(5)?,
                        })
                    })
                    .optional()
            })
            .await
            .map_err(|e| anyhow::anyhow!("sqlite task: {e}"))??;
        let user = user.ok_or_else(|| anyhow::anyhow!("no user {id}"))?;
        Ok(serde_json::to_string(&user)?)
    }

    /// Bumps user `id`'s version (the write mix's update).
    pub(crate) async fn update(&self, id: u64) -> anyhow::Result<()> {
        let conn = self
            .pool
            .get()
            .await
            .map_err(|e| anyhow::anyhow!("pool: {e}"))?;
        conn.interact(move |conn| {
            conn.busy_timeout(BUSY_TIMEOUT)?;
            conn.pragma_update(None, "synchronous", "NORMAL")?;
            let mut update =
                conn.prepare_cached("UPDATE users SET version = version + 1 WHERE id = ?1")?;
            update.execute(params![id as i64])
        })
        .await
        .map_err(|e| anyhow::anyhow!("sqlite task: {e}"))??;
        Ok(())
    }
}

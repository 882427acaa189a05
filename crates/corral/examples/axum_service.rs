//! An HTTP service whose source of truth is a SQLite database, read
//! through corral.
//!
//! ```sh
//! cargo run --release -p corral-cache --example axum_service -- [--addr 127.0.0.1:3000]
//!     [--redis redis://127.0.0.1:6379/] [--rows 200000] [--users 1000]
//!     [--pool-size 4] [--pool-wait-ms 1000]
//! ```
//!
//! On start it seeds a SQLite file in a temporary directory: `--users` users
//! and `--rows` orders, with no index on `orders.user_id`, so a user's order
//! totals are a full scan — a deliberately costly query, run through a
//! bounded pool (`deadpool-sqlite`; a request waits at most
//! `--pool-wait-ms` for a connection, then gets a 503).
//!
//! - `GET /users/{id}`: the user's totals through a `#[corral::cached]`
//!   function: one query per user per TTL, however many requests arrive at
//!   once; "no such user" is cached as "not found" for a shorter negative
//!   TTL (a user created meanwhile shows up within it). With
//!   `--redis URL` (or `CORRAL_REDIS_URL`) the cache is a `RedisStore` with
//!   an in-process L1 in front, so every instance of the service shares one
//!   fill per key; without it, the embedded in-process cache.
//! - `GET /uncached/users/{id}`: the same query on every request.
//! - `GET /metrics`: Prometheus text: `app_requests_total{route}`,
//!   `app_sqlite_queries_total{route}`, `app_errors_total{route}`, and
//!   corral's own `corral_*` counters and histograms (feature `metrics`,
//!   which this example requires), through the same recorder.
//!
//! Load it with the `axum_load` example.

use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;

use axum::extract::{Path as UrlPath, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use deadpool_sqlite::rusqlite::{self, params};
use deadpool_sqlite::{Manager, Pool, PoolError, Runtime, TimeoutType};
use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusHandle};
use serde::{Deserialize, Serialize};

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// What `GET /users/{id}` answers.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct UserTotals {
    id: i64,
    name: String,
    orders: i64,
    total_cents: i64,
    refunded_cents: i64,
}

/// The service's flags.
#[derive(Clone)]
struct Args {
    addr: SocketAddr,
    redis: Option<String>,
    rows: u64,
    users: i64,
    pool_size: usize,
    pool_wait: Duration,
}

impl Args {
    fn parse() -> Result<Self, BoxError> {
        let mut args = Self {
            addr: "127.0.0.1:3000".parse()?,
            redis: std::env::var("CORRAL_REDIS_URL").ok(),
            rows: 200_000,
            users: 1_000,
            pool_size: 4,
            pool_wait: Duration::from_millis(1_000),
        };
        let mut flags = std::env::args().skip(1);
        while let Some(flag) = flags.next() {
            let value = flags
                .next()
                .ok_or_else(|| format!("{flag} needs a value"))?;
            match flag.as_str() {
                "--addr" => args.addr = value.parse()?,
                "--redis" => args.redis = Some(value),
                "--rows" => args.rows = value.parse()?,
                "--users" => args.users = value.parse::<i64>()?.max(1),
                "--pool-size" => args.pool_size = value.parse::<usize>()?.max(1),
                "--pool-wait-ms" => args.pool_wait = Duration::from_millis(value.parse()?),
                _ => return Err(format!("unknown flag {flag}").into()),
            }
        }
        Ok(args)
    }
}

/// The database: a bounded pool over the seeded file.
#[derive(Clone)]
struct Db {
    pool: Pool,
    wait: Duration,
}

/// Why a query gave no answer.
#[derive(Debug)]
enum DbError {
    /// No pooled connection came free in time.
    Busy(Duration),
    /// The pool, SQLite or the blocking task failed.
    Failed(String),
}

impl std::fmt::Display for DbError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Busy(wait) => write!(
                f,
                "no database connection came free within {} ms",
                wait.as_millis()
            ),
            Self::Failed(e) => write!(f, "database: {e}"),
        }
    }
}

impl std::error::Error for DbError {}

impl Db {
    /// Creates and seeds `path` (one transaction, prepared statements, a
    /// fixed random seed), then opens a pool over it.
    fn create(path: &Path, args: &Args) -> Result<Self, BoxError> {
        let mut conn = rusqlite::Connection::open(path)?;
        conn.execute_batch(
            "CREATE TABLE users (id INTEGER PRIMARY KEY, name TEXT NOT NULL);
             CREATE TABLE orders (id INTEGER PRIMARY KEY, user_id INTEGER NOT NULL,
                 amount_cents INTEGER NOT NULL, status INTEGER NOT NULL, note TEXT NOT NULL);",
        )?;
        let tx = conn.transaction()?;
        {
            let mut user = tx.prepare("INSERT INTO users (id, name) VALUES (?1, ?2)")?;
            for id in 1..=args.users {
                user.execute(params![id, format!("user-{id:05}")])?;
            }
            let mut order = tx.prepare(
                "INSERT INTO orders (user_id, amount_cents, status, note) VALUES (?1, ?2, ?3, ?4)",
            )?;
            let mut rng = fastrand::Rng::with_seed(7);
            for n in 0..args.rows {
                let user_id = rng.i64(1..=args.users);
                order.execute(params![
                    user_id,
                    rng.i64(100..=50_000),
                    rng.i64(0..=2),
                    format!("order {n} of user {user_id}")
                ])?;
            }
        }
        tx.commit()?;
        let pool = Pool::builder(Manager::from_config(
            &deadpool_sqlite::Config::new(path),
            Runtime::Tokio1,
        ))
        .max_size(args.pool_size)
        .wait_timeout(Some(args.pool_wait))
        .runtime(Runtime::Tokio1)
        .build()?;
        Ok(Self {
            pool,
            wait: args.pool_wait,
        })
    }

    /// One user's totals (`None`: no such user): a full scan of the orders.
    /// Counted in `app_sqlite_queries_total{route}`.
    async fn user_totals(
        &self,
        id: i64,
        route: &'static str,
    ) -> Result<Option<UserTotals>, DbError> {
        let conn = self.pool.get().await.map_err(|e| match e {
            PoolError::Timeout(TimeoutType::Wait) => DbError::Busy(self.wait),
            other => DbError::Failed(other.to_string()),
        })?;
        metrics::counter!("app_sqlite_queries_total", "route" => route).increment(1);
        conn.interact(move |conn| {
            conn.query_row(
                "SELECT (SELECT name FROM users WHERE id = ?1), COUNT(*),
                        COALESCE(SUM(amount_cents), 0),
                        COALESCE(SUM(CASE WHEN status = 2 THEN amount_cents ELSE 0 END), 0)
                 FROM orders WHERE user_id = ?1",
                params![id],
                |row| {
                    let name: Option<String> = row.get(0)?;
                    let (orders, total_cents, refunded_cents) =
                        (row.get(1)?, row.get(2)?, row.get(3)?);
                    Ok(name.map(|name| UserTotals {
                        id,
                        name,
                        orders,
                        total_cents,
                        refunded_cents,
                    }))
                },
            )
        })
        .await
        .map_err(|e| DbError::Failed(e.to_string()))?
        .map_err(|e| DbError::Failed(e.to_string()))
    }
}

/// What every handler shares.
#[derive(Clone)]
struct App {
    db: Db,
    users: corral::Cache<UserTotals>,
    metrics: PrometheusHandle,
}

/// A handler's error: a status and a line of text, counted.
struct Failure(StatusCode, String);

impl IntoResponse for Failure {
    fn into_response(self) -> Response {
        (self.0, self.1).into_response()
    }
}

fn failure(route: &'static str, status: StatusCode, message: String) -> Failure {
    metrics::counter!("app_errors_total", "route" => route).increment(1);
    Failure(status, message)
}

fn found(
    route: &'static str,
    id: i64,
    user: Option<UserTotals>,
) -> Result<Json<UserTotals>, Failure> {
    user.map(Json)
        .ok_or_else(|| failure(route, StatusCode::NOT_FOUND, format!("no user {id}")))
}

/// One user's totals read through `users`: concurrent calls for one user
/// share one query, in this process and (with Redis) across instances.
/// `Some` is cached for the cache's TTL; `None` ("no such user") as "not
/// found" for its negative TTL. `db` is left out of the key.
#[corral::cached(cache = users, key = "user:{id}")]
async fn cached_totals(
    users: corral::Cache<UserTotals>,
    db: Db,
    id: i64,
) -> Result<Option<UserTotals>, DbError> {
    db.user_totals(id, "cached").await
}

/// An error with its causes on one line (`Display` of a corral error says
/// what happened; the cause is its `source`).
fn with_causes(error: &dyn std::error::Error) -> String {
    let mut line = error.to_string();
    let mut cause = error.source();
    while let Some(next) = cause {
        line.push_str(&format!(": {next}"));
        cause = next.source();
    }
    line
}

/// `GET /users/{id}`: through corral.
async fn cached_user(
    State(app): State<App>,
    UrlPath(id): UrlPath<i64>,
) -> Result<Json<UserTotals>, Failure> {
    const ROUTE: &str = "cached";
    metrics::counter!("app_requests_total", "route" => ROUTE).increment(1);
    let user = cached_totals(app.users.clone(), app.db.clone(), id)
        .await
        .map_err(|e| {
            let status = match &e {
                corral::Error::Fill(inner) if matches!(**inner, DbError::Busy(_)) => {
                    StatusCode::SERVICE_UNAVAILABLE
                }
                _ => StatusCode::INTERNAL_SERVER_ERROR,
            };
            failure(ROUTE, status, with_causes(&e))
        })?;
    found(ROUTE, id, user)
}

/// `GET /uncached/users/{id}`: the query on every request.
async fn uncached_user(
    State(app): State<App>,
    UrlPath(id): UrlPath<i64>,
) -> Result<Json<UserTotals>, Failure> {
    const ROUTE: &str = "uncached";
    metrics::counter!("app_requests_total", "route" => ROUTE).increment(1);
    let user = app.db.user_totals(id, ROUTE).await.map_err(|e| {
        let status = match e {
            DbError::Busy(_) => StatusCode::SERVICE_UNAVAILABLE,
            DbError::Failed(_) => StatusCode::INTERNAL_SERVER_ERROR,
        };
        failure(ROUTE, status, e.to_string())
    })?;
    found(ROUTE, id, user)
}

/// `GET /metrics`: everything recorded through the `metrics` facade.
async fn metrics_text(State(app): State<App>) -> String {
    app.metrics.render()
}

fn router(app: App) -> Router {
    Router::new()
        .route("/users/{id}", get(cached_user))
        .route("/uncached/users/{id}", get(uncached_user))
        .route("/metrics", get(metrics_text))
        .with_state(app)
}

#[tokio::main]
async fn main() -> Result<(), BoxError> {
    let args = Args::parse()?;
    let metrics = PrometheusBuilder::new().install_recorder()?;

    let dir = tempfile::Builder::new().prefix("corral-axum-").tempdir()?;
    let path = dir.path().join("service.sqlite3");
    let started = std::time::Instant::now();
    let db = {
        let (path, args) = (path.clone(), args.clone());
        tokio::task::spawn_blocking(move || Db::create(&path, &args)).await??
    };
    eprintln!(
        "seeded {} ({} users, {} orders) in {:.0?}",
        path.display(),
        args.users,
        args.rows,
        started.elapsed()
    );

    let builder = corral::Cache::<UserTotals>::builder("users")
        .ttl(Duration::from_secs(60))
        .negative_ttl(Duration::from_secs(5))
        .fill_timeout(Duration::from_secs(10));
    let users = match &args.redis {
        Some(url) => {
            let store = corral::RedisStore::connect(url, corral::RedisConfig::default()).await?;
            eprintln!("cache: Redis at {url}, with an in-process L1");
            builder.store(store).l1(true).build()?
        }
        None => {
            eprintln!("cache: embedded, in process");
            builder.build()?
        }
    };

    let listener = tokio::net::TcpListener::bind(args.addr).await?;
    eprintln!("listening on http://{}", listener.local_addr()?);
    axum::serve(listener, router(App { db, users, metrics }))
        .with_graceful_shutdown(async {
            // Ctrl-C stops the service; if the signal cannot be watched,
            // it runs until killed.
            if tokio::signal::ctrl_c().await.is_err() {
                std::future::pending::<()>().await;
            }
        })
        .await?;
    drop(dir);
    Ok(())
}

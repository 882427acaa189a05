//! The default run, in process: corral's `get_or_fill` against a naive
//! cache-aside over a map, each reading the same seeded SQLite file of
//! orders through its own bounded [`deadpool_sqlite`] pool. corral's fills
//! share a fill budget (by default of the pool's size); callers ask for
//! keys in turn or Zipf-distributed.
//!
//! Every fill is one deliberately costly query: a user's order totals, with
//! no index on `orders.user_id`, so a full scan. A call waits at most
//! `--pool-wait-ms` for one of the `--pool-size` connections; past that it
//! gives up and counts a timeout.

use std::collections::HashSet;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context as _;
use corral_testkit::Tally;
use deadpool_sqlite::rusqlite::{named_params, Connection};
use deadpool_sqlite::{Manager, Pool, PoolError, Runtime, TimeoutType, Timeouts};

use super::plot::{Gauge, Timeline};
use super::report::{group, Comparison, SideReport};
use super::scenario::{fill_budget, round_keys, run_round, Contender, CorralSide, Load, NaiveSide};
use super::HerdArgs;

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

/// Seeds the database, then runs the scenario through corral, then through the
/// naive cache-aside; fails if the database cannot be created, the cache cannot
/// be built or a caller task panicked.
pub(crate) async fn run(args: &HerdArgs) -> anyhow::Result<Comparison> {
    let seeding = args.clone();
    let db = tokio::task::spawn_blocking(move || Seeded::create(&seeding)).await??;
    let budget = args.budget.unwrap_or(args.pool_size);
    let fills = fill_budget(args, budget)?;
    let mut builder = corral::Cache::<String>::builder("herd")
        .ttl(Duration::from_secs(600))
        .capacity(corral::Capacity::Entries(
            (args.keys * args.rounds).max(1024),
        ))
        .fill_timeout(Duration::from_millis(args.pool_wait_ms) + Duration::from_secs(30));
    if let Some(fills) = fills.clone() {
        builder = builder.fill_budget(fills);
    }
    let cache = builder.build().context("building the corral cache")?;
    let source = Arc::new(SqliteSource::open(&db.path, args)?);
    let corral = Arc::new(CorralSide::new(cache, &source));
    // An adaptive budget's limit, sampled every 20 ms while fills queue.
    let (adaptive, mut limits) = (fills.filter(|_| args.adaptive_max.is_some()), Vec::new());
    let sample = async {
        while let Some(fills) = &adaptive {
            tokio::time::sleep(Duration::from_millis(20)).await;
            let stats = fills.stats();
            if stats.queued > 0 {
                limits.push(stats.limit as u64);
            }
        }
        std::future::pending().await
    };
    let corral = tokio::select! {
        report = measure("corral", &corral, &source, args) => report?,
        () = sample => unreachable!("sampling never ends"),
    };
    limits.sort_unstable();
    let quantile = |q: f64| limits[((limits.len() - 1) as f64 * q).round() as usize];
    let adaptive = args.adaptive_max.filter(|_| !limits.is_empty());
    let adaptive = adaptive.map(|max| (max, [0.1, 0.5, 0.9].map(quantile)));
    let source = Arc::new(SqliteSource::open(&db.path, args)?);
    let naive = Arc::new(NaiveSide::new(Duration::from_secs(600), &source));
    let naive = measure("naive", &naive, &source, args).await?;
    let setting = db.setting(args, budget, adaptive);
    Ok(Comparison::new(args, setting, corral, naive))
}

/// Every round through one side, after an uncounted warm-up: one call
/// fills a key of its own, then callers hit it, so the first round pays
/// nothing for starting threads, opening a connection and growing
/// allocations.
async fn measure<C: Contender>(
    side: &'static str,
    contender: &Arc<C>,
    source: &SqliteSource,
    args: &HerdArgs,
) -> anyhow::Result<SideReport> {
    let (warm, timeline) = (round_keys("local-warm-up", 1), &source.timeline);
    run_round(contender, 1, &warm, timeline).await?;
    run_round(contender, args.callers.min(1000), &warm, timeline).await?;
    let (_, _, before) = (source.take_counts(), timeline.take(), contender.stats());
    let (mut tally, mut hot) = (Tally::default(), Tally::default());
    for round in 0..args.rounds {
        let (keys, asked) = asked(args, round);
        let played = run_round(contender, args.callers, &asked, timeline).await?;
        // The latencies of the callers of the round's 10 hottest keys.
        let hottest = &keys[..keys.len().min(10)];
        let asked = asked.iter().zip(&played.latencies_us);
        let hot_us = asked.filter(|(key, _)| hottest.contains(key));
        hot.latencies_us.extend(hot_us.map(|(_, us)| us));
        tally.absorb(played);
    }
    let [queries, timeouts, errors] = source.take_counts();
    let fills = queries + timeouts + errors;
    let mut report = SideReport::new(side, args.callers * args.rounds, fills, tally);
    (report.sqlite_queries, report.timeouts, report.errors) =
        (Some(queries), Some(timeouts), Some(errors));
    let coalesced = contender.stats().zip(before);
    report.coalesced = coalesced.map(|(now, then)| now.coalesced - then.coalesced);
    report.hot_p50_ms = (args.zipf != 0.0).then(|| hot.latency_ms(0.5));
    Ok(report.over(timeline.take()))
}

/// A round's keys, and the key each of its callers asks for: caller `i`
/// key `i % keys`, or with `--zipf s` a key drawn with weight 1/k^s for the
/// k-th (a fixed seed per round, so both sides get the same draws).
fn asked(args: &HerdArgs, round: u64) -> (Vec<String>, Vec<String>) {
    let keys = round_keys(&format!("local:r{round}"), args.keys);
    let cumulative: Vec<f64> = (1..=keys.len())
        .scan(0.0, |total, k| {
            *total += 1.0 / (k as f64).powf(args.zipf);
            Some(*total)
        })
        .collect();
    let total = cumulative.last().copied().unwrap_or(0.0);
    let mut rng = fastrand::Rng::with_seed(0x5eed_0000 + round);
    let mut pick = |caller: usize| match args.zipf {
        0.0 => caller % keys.len(),
        _ => cumulative.partition_point(|&c| c < rng.f64() * total),
    };
    let callers = usize::try_from(args.callers).unwrap_or(usize::MAX);
    let asked = (0..callers).map(|caller| keys[pick(caller).min(keys.len() - 1)].clone());
    (keys.clone(), asked.collect())
}

/// The seeded SQLite file; its temporary directory, if any, goes away
/// with it.
struct Seeded {
    _dir: Option<tempfile::TempDir>,
    path: PathBuf,
    /// How long creating and seeding the file took, and one fill query alone.
    seed_ms: f64,
    query_ms: f64,
}

impl Seeded {
    /// Creates the file (in a temporary directory unless `--db` names one),
    /// seeds it and times one fill query; fails if it cannot. Blocking.
    fn create(args: &HerdArgs) -> anyhow::Result<Self> {
        let (_dir, path) = match &args.db {
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
        let (seed_ms, started) = (ms(started), Instant::now());
        user_totals(&conn, 1)?;
        let query_ms = ms(started);
        Ok(Self {
            _dir,
            path,
            seed_ms,
            query_ms,
        })
    }
}

impl Seeded {
    /// The run's JSON setting, title and limits at the source: the pool,
    /// and corral's `budget` (`adaptive`: its most, and the limit's p10,
    /// p50 and p90 while fills queued).
    fn setting(
        &self,
        args: &HerdArgs,
        budget: u64,
        adaptive: Option<(u64, [u64; 3])>,
    ) -> (serde_json::Value, String, Vec<(String, u64)>) {
        let (pool, wait) = (args.pool_size, group(args.pool_wait_ms));
        let mut limits = vec![(format!("pool of {pool} connections"), pool)];
        let corral_budget = match (budget, adaptive) {
            (0, _) => "none".to_owned(),
            (n, None) => {
                limits.push((format!("corral's budget of {n}"), n));
                format!("{n} fills at once")
            }
            (n, Some((max, [p10, p50, p90]))) => {
                limits.push((format!("corral's budget, at most {max}"), max));
                format!("adaptive from {n} (1 to {max}), while fills queued {p50} (p10 {p10}, p90 {p90})")
            }
        };
        let distinct: usize = (0..args.rounds)
            .map(|round| asked(args, round).1.iter().collect::<HashSet<_>>().len())
            .sum();
        let distinct = group(distinct as u64);
        let keys = match args.zipf {
            0.0 => "uniform".to_owned(),
            s => format!(
                "Zipf s = {s}, {distinct} of {} asked",
                args.keys * args.rounds
            ),
        };
        let title = format!(
            "corral herd: {} callers on {} cold keys, {} rounds (in process, keys {keys})\n\
             source: SQLite, {} orders of {} users (seeded in {:.0} ms); one fill query {:.1} \
             ms; pool of {pool} connections per side, wait ≤ {wait} ms; corral's fill budget: \
             {corral_budget}",
            group(args.callers),
            group(args.keys),
            group(args.rounds),
            group(args.rows),
            group(args.users),
            self.seed_ms,
            self.query_ms,
        );
        let database = serde_json::json!({
            "path": self.path, "rows": args.rows, "users": args.users, "pool_size": pool,
            "pool_wait_ms": args.pool_wait_ms, "seed_ms": self.seed_ms, "query_ms": self.query_ms,
        });
        let setting = serde_json::json!({
            "mode": "embedded", "database": database, "budget": budget, "zipf": args.zipf,
            "adaptive": adaptive,
        });
        (setting, title, limits)
    }
}

/// One fill query: the user's totals.
fn user_totals(conn: &Connection, user: i64) -> deadpool_sqlite::rusqlite::Result<String> {
    let mut statement = conn.prepare_cached(USER_TOTALS)?;
    statement.query_row([user], |row| {
        let (orders, total, refunded): (i64, i64, i64) = (row.get(0)?, row.get(1)?, row.get(2)?);
        let totals = format!("user {user}: {orders} orders, {total} cents, {refunded} refunded");
        Ok(totals)
    })
}

/// A side's view of the database: a bounded pool; its queries run, calls
/// that found no connection in time, calls that failed otherwise; and its
/// timeline.
struct SqliteSource {
    pool: Pool,
    args: HerdArgs,
    counts: [AtomicU64; 3],
    timeline: Arc<Timeline>,
}

impl SqliteSource {
    /// A pool of `--pool-size` connections to `path`.
    fn open(path: &std::path::Path, args: &HerdArgs) -> anyhow::Result<Self> {
        let config = deadpool_sqlite::Config::new(path);
        let pool = Pool::builder(Manager::from_config(&config, Runtime::Tokio1))
            .max_size(usize::try_from(args.pool_size)?)
            .wait_timeout(Some(Duration::from_millis(args.pool_wait_ms)))
            .runtime(Runtime::Tokio1)
            .build()?;
        let (args, counts, timeline) = (args.clone(), Default::default(), Arc::default());
        Ok(Self {
            pool,
            args,
            counts,
            timeline,
        })
    }

    /// The user a key names (a stable hash of the key, FNV-1a).
    fn user_of(&self, key: &str) -> i64 {
        let hash = key.bytes().fold(0xcbf2_9ce4_8422_2325_u64, |h, b| {
            (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
        });
        (hash % self.args.users.max(1)) as i64 + 1
    }

    /// Its counts since the last time they were taken.
    fn take_counts(&self) -> [u64; 3] {
        self.counts.each_ref().map(|count| count.swap(0, Relaxed))
    }
}

impl Load for SqliteSource {
    /// One counted fill: waits (bounded) for a connection, then queries the
    /// totals of the key's user; the value is `{key} → {totals}`.
    async fn load(&self, key: &str) -> anyhow::Result<String> {
        let (user, [queries, timeouts, errors]) = (self.user_of(key), &self.counts);
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
                let wait = self.args.pool_wait_ms;
                anyhow::bail!("no SQLite connection came free within {wait} ms");
            }
            Err(other) => {
                errors.fetch_add(1, Relaxed);
                anyhow::bail!("SQLite pool: {other}");
            }
        };
        queries.fetch_add(1, Relaxed);
        let running = self.timeline.enter(Gauge::Running);
        let totals = conn.interact(move |conn| user_totals(conn, user)).await;
        drop(running);
        let totals = totals.map_err(|e| anyhow::anyhow!("SQLite query task: {e}"));
        let totals = totals.and_then(|v| Ok(v?)).inspect_err(|_| {
            errors.fetch_add(1, Relaxed);
        })?;
        Ok(format!("{key} → {totals}"))
    }
}

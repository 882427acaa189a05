//! A service's caches from one config, on one store, serving the last good
//! value while the database is down (fail-safe).
//!
//! ```sh
//! cargo run -p corral-cache --features config --example service_config
//! # on Redis, with the users cache's own TTL:
//! CORRAL_REDIS_URL=redis://127.0.0.1:6379/ CORRAL_USERS_TTL=2s \
//!     cargo run -p corral-cache --features config --example service_config
//! ```

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use corral::{Cache, CacheConfig};
use serde::{Deserialize, Serialize};

/// What the service ships with; `CORRAL_*` variables override it.
const DEFAULTS: &str = r#"
ttl = "1s"
fill_timeout = "2s"
fail_safe = "1h"          # keep the last good value for an hour past its TTL
fail_safe_throttle = "5s" # and ask a failing database again every 5 s

[cache.users]
version = 2               # bumped when `User` changed shape
"#;

#[derive(Clone, Debug, Serialize, Deserialize)]
struct User {
    id: u64,
    name: String,
}

#[derive(Debug)]
struct DbDown;

impl std::fmt::Display for DbDown {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("the database did not answer")
    }
}

impl std::error::Error for DbDown {}

/// The source of truth, which can go down.
#[derive(Default)]
struct Db {
    down: AtomicBool,
}

impl Db {
    async fn user(&self, id: u64) -> Result<User, DbDown> {
        if self.down.load(Ordering::Relaxed) {
            return Err(DbDown);
        }
        Ok(User {
            id,
            name: format!("user {id}"),
        })
    }

    async fn open_orders(&self, user: u64) -> Result<u64, DbDown> {
        if self.down.load(Ordering::Relaxed) {
            return Err(DbDown);
        }
        Ok(user % 3)
    }
}

/// The service's read path: the cache in front of the database.
async fn user(users: &Cache<User>, db: &Arc<Db>, id: u64) -> Result<User, corral::Error<DbDown>> {
    let db = Arc::clone(db);
    users
        .get_or_fill(
            &format!("user:{id}"),
            move || async move { db.user(id).await },
        )
        .await
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let config = CacheConfig::from_toml(DEFAULTS)?.overlay(CacheConfig::from_env()?);
    // One store for the whole process: every cache below shares it.
    let caches = config.caches()?;
    let users: Cache<User> = caches.build("users")?;
    let orders: Cache<u64> = caches.build("orders")?;
    let db = Arc::new(Db::default());

    println!("{:?}", user(&users, &db, 7).await?);
    let open = {
        let db = Arc::clone(&db);
        orders
            .get_or_fill("open:7", move || async move { db.open_orders(7).await })
            .await?
    };
    println!("open orders of user 7: {open}");

    // The database goes down and the TTL passes: the last good value is
    // served instead of the error.
    db.down.store(true, Ordering::Relaxed);
    tokio::time::sleep(Duration::from_millis(1100)).await;
    let still = user(&users, &db, 7).await?;
    println!("database down, still served: {still:?}");
    println!("fail-safe hits: {}", users.stats().fail_safe_hits);

    // A user never cached has nothing to fall back on: the error comes
    // through, typed.
    match user(&users, &db, 8).await {
        Err(corral::Error::Fill(error)) => println!("user 8: {error}"),
        other => println!("user 8: {other:?}"),
    }
    Ok(())
}

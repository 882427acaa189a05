//! # corral — read-through caching that cannot stampede
//!
//! When a hot key is missing or expires, corral runs **one** fill — across
//! every task of a process (in-process single-flight) and across every
//! process that shares a store (a fill lease in Redis) — and hands that one
//! result to every caller.
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! use std::time::Duration;
//!
//! let users = corral::Cache::<String>::builder("users")
//!     .ttl(Duration::from_secs(60))
//!     .jitter(0.1)
//!     .build()?;
//!
//! let name = users
//!     .get_or_fill("user:42", || async { Ok::<_, std::io::Error>("Ada".to_string()) })
//!     .await?;
//! assert_eq!(name, "Ada");
//! # Ok(())
//! # }
//! ```
//!
//! ## Tiers
//!
//! | built with | values live | one fill per key |
//! |---|---|---|
//! | nothing (default) | in-process, decoded, bounded by entries or bytes | per process |
//! | [`.store(MemoryStore)`](CacheBuilder::store) | an in-process shared store of envelopes, with leases | per store |
//! | `.store(RedisStore)` (feature `redis`, default) | Redis or Redis Cluster | across every process sharing it |
//!
//! ## Freshness and failure
//!
//! | setting | what readers get |
//! |---|---|
//! | `ttl` (+ `jitter`) | the value while fresh; then a fill |
//! | `grace` | past the TTL, the stale value at once while one refresh runs ([`Freshness::Stale`]) |
//! | `eager_refresh(f)` | a background refresh once `f` of the TTL has passed |
//! | `fail_safe(max)` | if the fill fails, the expired value ([`Freshness::FailSafe`]), re-cached for `fail_safe_throttle` |
//! | `soft_timeout` | with a fail-safe value at hand, that value after the soft timeout while the fill goes on |
//! | `negative_ttl` | a cached "not found" from [`Cache::get_or_fill_optional`] or an [`Answer::not_found`] |
//!
//! [`Cache::fetch`] is the general call: its fill answers an [`Answer`] (a
//! value or "not found", with its own TTL, or not to be cached) and its
//! caller gets a [`Fetched`] value with its [`Freshness`].
//!
//! ## Features
//!
//! | feature | default | what it adds |
//! |---|---|---|
//! | `redis` | yes | [`RedisStore`]: standalone and cluster Redis 7 |

#![warn(missing_docs, unreachable_pub, rust_2018_idioms)]
#![forbid(unsafe_code)]

mod backplane;
mod builder;
mod cache;
pub mod clock;
pub mod codec;
pub mod entry;
mod error;
mod flight;
mod freshness;
mod get_or_fill;
mod key;
mod leader;
mod local;
mod policy;
mod stats;
pub mod store;
mod sync;
mod tags;
mod ticker;

#[cfg(feature = "redis")]
mod redis;

pub use builder::{CacheBuilder, Capacity};
pub use cache::Cache;
pub use error::{ConfigError, Error, InvalidKey, StoreError, StoreErrorKind};
pub use freshness::{Answer, Cached, Fetched, Freshness};
pub use key::{validate_key, MAX_KEY_LEN};
pub use policy::FillOptions;
pub use stats::Stats;
pub use store::{MemoryStore, Store};

#[cfg(feature = "redis")]
pub use redis::{RedisConfig, RedisStore};

/// The README's examples, compiled and run as doctests.
#[cfg(doctest)]
#[doc = include_str!("../../../README.md")]
struct ReadmeDoctests;

//! corral's integration tests: one test binary, each file a module (one
//! binary links once, where a binary per file linked the whole dependency
//! tree again for each).
//!
//! To add tests, put them in a new file `tests/it/NAME.rs` and declare it
//! below with `mod NAME;` (under `#[cfg(feature = "...")]` if it needs a
//! feature that is not on by default). Shared helpers live in
//! `support/mod.rs` (`use crate::support::...`). Nothing here may assume
//! it has the process to itself: the tests of every module run side by
//! side in this one process, so anything process-wide (a `metrics`
//! recorder, a global `tracing` subscriber, environment variables, a panic
//! hook) belongs only in a worker process or in exactly one test, and
//! names it reads back from such a global must be unique to its module. A
//! worker process re-runs this binary with one ignored test selected by its
//! full name: pass `crate::support::test_name(module_path!(), "worker")` to
//! `Worker::start`.

mod support;

mod backends;
mod backplane_processes;
mod batch;
mod batched_reads;
mod breaker;
mod budget;
mod cached_macro;
mod cluster_faults;
mod codec_round_trip;
mod coherence_bcast;
mod coherence_cluster;
mod coherence_faults;
mod coherence_tracking;
#[cfg(feature = "compression")]
mod compression;
#[cfg(feature = "config")]
mod config;
mod core;
mod counts;
mod dead_connections;
mod deploys;
#[cfg(feature = "encryption")]
mod encryption;
mod errors;
mod freshness;
mod freshness_redis;
mod fuzz_regressions;
mod health;
mod leases;
mod limits;
#[cfg(feature = "memcached")]
mod memcached;
#[cfg(feature = "metrics")]
mod metrics;
#[cfg(feature = "metrics")]
mod metrics_instances;
mod processes;
mod read_lanes;
mod redaction;
mod redis_faults;
mod redis_reads;
mod redis_store;
mod round_trips;
mod sentinel;
mod sharded_pubsub;
#[cfg(feature = "config")]
mod startup;
#[cfg(feature = "memcached")]
mod store_loss;
mod store_trouble;
// Under a name that sorts first: libtest starts tests in name order, so its
// quarter-million-key run (the binary's longest, a worker process busy on
// one core) starts at once and overlaps the others instead of running on
// after them.
#[path = "tag_index.rs"]
mod a_tag_index;
mod tag_writes;
mod tags;
mod tiers;
mod tiers_redis;
#[cfg(feature = "tls")]
mod tls_acl;
mod tracing;
#[cfg(feature = "memcached")]
mod version_homes;

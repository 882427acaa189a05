//! Export of a cache's counters and durations through the `metrics` facade
//! (feature `metrics`).
//!
//! Counters are not pushed on every event: a hit must write no shared
//! memory, and a `metrics` counter is one shared atomic. Instead the cache's
//! own counters (striped for hits) are copied into `metrics` counters with
//! `absolute` by an exporter task every
//! [`metrics_interval`](crate::CacheBuilder::metrics_interval) and on
//! [`Cache::export_metrics`](crate::Cache::export_metrics). Handles are
//! fetched from the recorder at each export, so a recorder installed after
//! the cache was built still receives everything. Durations (fills, waits)
//! are recorded when they end: they are slow paths.
//!
//! Every metric carries the label `cache` = the cache's name.

use std::sync::{Arc, Weak};
use std::time::Duration;

use metrics::{counter, histogram};

use crate::stats::Stats;

/// The exported counters: name, extra label, and the value in a snapshot.
type Reading = (
    &'static str,
    Option<(&'static str, &'static str)>,
    fn(&Stats) -> u64,
);

const COUNTERS: &[Reading] = &[
    ("corral_hits_total", Some(("tier", "l1")), |s| {
        s.hits.saturating_sub(s.l2_hits)
    }),
    ("corral_hits_total", Some(("tier", "l2")), |s| s.l2_hits),
    ("corral_misses_total", None, |s| s.misses),
    ("corral_fills_total", None, |s| s.fills),
    ("corral_coalesced_total", None, |s| s.coalesced),
    ("corral_fill_errors_total", None, |s| s.fill_errors),
    ("corral_fill_panics_total", None, |s| s.fill_panics),
    ("corral_fill_timeouts_total", None, |s| s.fill_timeouts),
    ("corral_soft_timeouts_total", None, |s| s.soft_timeouts),
    ("corral_served_total", Some(("freshness", "stale")), |s| {
        s.stale_hits
    }),
    (
        "corral_served_total",
        Some(("freshness", "fail_safe")),
        |s| s.fail_safe_hits,
    ),
    (
        "corral_refreshes_total",
        Some(("outcome", "started")),
        |s| s.refreshes,
    ),
    (
        "corral_refreshes_total",
        Some(("outcome", "stood_down")),
        |s| s.refreshes_stood_down,
    ),
    (
        "corral_refreshes_total",
        Some(("outcome", "skipped")),
        |s| s.refreshes_skipped,
    ),
    ("corral_leases_total", Some(("outcome", "acquired")), |s| {
        s.leases_acquired
    }),
    ("corral_leases_total", Some(("outcome", "contended")), |s| {
        s.lease_waits
    }),
    ("corral_leases_total", Some(("outcome", "errored")), |s| {
        s.fail_open_fills
    }),
    ("corral_lease_renewals_total", None, |s| s.lease_renewals),
    ("corral_commits_total", None, |s| s.commits),
    ("corral_commits_refused_total", None, |s| s.commits_refused),
    ("corral_store_errors_total", None, |s| s.store_errors),
    ("corral_decode_failures_total", None, |s| s.decode_failures),
    ("corral_encode_failures_total", None, |s| s.encode_failures),
    ("corral_decrypt_failures_total", None, |s| {
        s.decrypt_failures
    }),
    ("corral_tag_misses_total", None, |s| s.tag_misses),
    ("corral_backplane_messages_total", None, |s| {
        s.backplane_messages
    }),
    ("corral_backplane_resets_total", None, |s| {
        s.backplane_resets
    }),
    ("corral_fills_queued_total", None, |s| s.fills_queued),
    ("corral_overloads_total", None, |s| s.overloads),
    (
        "corral_fleet_permits_total",
        Some(("outcome", "taken")),
        |s| s.fleet_permits,
    ),
    (
        "corral_fleet_permits_total",
        Some(("outcome", "errored")),
        |s| s.fleet_fail_open,
    ),
    ("corral_breaker_opened_total", None, |s| s.breaker_opened),
    ("corral_store_calls_skipped_total", None, |s| {
        s.store_calls_skipped
    }),
];

/// Copies `stats` into the recorder's counters of cache `name`.
pub(crate) fn export(name: &Arc<str>, stats: &Stats) {
    for (metric, extra, read) in COUNTERS {
        let value = read(stats);
        match extra {
            Some((label, label_value)) => {
                counter!(*metric, "cache" => Arc::clone(name), *label => *label_value)
                    .absolute(value);
            }
            None => counter!(*metric, "cache" => Arc::clone(name)).absolute(value),
        }
    }
}

/// Records how long a fill ran (the source of truth's call), in seconds.
pub(crate) fn fill_took(name: &Arc<str>, took: Duration) {
    histogram!("corral_fill_duration_seconds", "cache" => Arc::clone(name)).record(took);
}

/// Records how long a fill waited in its fill budget's queue.
pub(crate) fn queue_took(name: &Arc<str>, took: Duration) {
    histogram!("corral_fill_queue_wait_seconds", "cache" => Arc::clone(name)).record(took);
}

/// Sets the gauges of a cache's fill budget: permits held in this process,
/// fills queued, and the limit.
pub(crate) fn budget_load(name: &Arc<str>, budget: &crate::budget::FillBudget) {
    let stats = budget.stats();
    metrics::gauge!("corral_fill_budget_in_use", "cache" => Arc::clone(name))
        .set(stats.in_use as f64);
    metrics::gauge!("corral_fill_budget_queued", "cache" => Arc::clone(name))
        .set(stats.queued as f64);
    metrics::gauge!("corral_fill_budget_limit", "cache" => Arc::clone(name))
        .set(stats.limit as f64);
}

/// Records how long a caller waited for a flight led by another caller.
pub(crate) fn wait_took(name: &Arc<str>, took: Duration) {
    histogram!("corral_wait_duration_seconds", "cache" => Arc::clone(name)).record(took);
}

/// Exports `stats()` of the cache behind `weak` every `interval`, until the
/// cache is dropped.
pub(crate) fn spawn_exporter<T, F>(weak: Weak<T>, interval: Duration, stats: F)
where
    T: Send + Sync + 'static,
    F: Fn(&T) -> (Arc<str>, Stats) + Send + 'static,
{
    let Ok(runtime) = tokio::runtime::Handle::try_current() else {
        return;
    };
    runtime.spawn(async move {
        let mut ticks = tokio::time::interval(interval);
        ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            ticks.tick().await;
            let Some(inner) = weak.upgrade() else {
                return;
            };
            let (name, snapshot) = stats(&inner);
            export(&name, &snapshot);
        }
    });
}

//! Export of a cache's counters and durations through the `metrics` facade
//! (feature `metrics`).
//!
//! Counters are not pushed on every event: a hit must write no shared
//! memory, and a `metrics` counter is one shared atomic. Instead each cache
//! instance adds what its own counters (striped for hits) gained since its
//! last export to the `metrics` counters, by an exporter task every
//! [`metrics_interval`](crate::CacheBuilder::metrics_interval) and on
//! [`Cache::export_metrics`](crate::Cache::export_metrics); its gauges move
//! by what its readings changed. So two instances with the same name (one
//! label set) sum, and a dropped instance takes its gauge readings back.
//! Handles are fetched from the recorder at each export, with their HELP
//! text, so a recorder installed after the cache was built still receives
//! everything. Durations (fills, waits) are recorded when they end: they
//! are slow paths.
//!
//! Every metric carries the label `cache` = the cache's name.

use std::sync::{Arc, Weak};
use std::time::Duration;

use metrics::{counter, describe_counter, describe_gauge, describe_histogram, gauge, histogram};

use crate::stats::Stats;
use crate::sync::{lock, Mutex};

/// The exported counters: name, extra label, and the value in a snapshot.
type Reading = (
    &'static str,
    Option<(&'static str, &'static str)>,
    fn(&Stats) -> u64,
);

/// The HELP text of every counter, by name.
const COUNTER_HELP: &[(&str, &str)] = &[
    ("corral_hits_total", "Reads answered from the cache, by tier (l1: in process; l2: the shared store)."),
    ("corral_misses_total", "Reads that found no servable value (each caller counts once)."),
    ("corral_fills_total", "Fills started: calls of the source of truth."),
    ("corral_coalesced_total", "Callers that joined a fill already in flight instead of starting one."),
    ("corral_fill_errors_total", "Fills that returned an error."),
    ("corral_fill_panics_total", "Fills that panicked."),
    ("corral_fill_timeouts_total", "Flights stopped by the hard fill timeout."),
    ("corral_soft_timeouts_total", "Flights that served their fallback at the soft timeout and went on filling."),
    ("corral_served_total", "Callers served a value past its TTL, by freshness (stale: within the grace period; fail_safe: the fill failed)."),
    ("corral_refreshes_total", "Background refreshes, by outcome (started, stood_down: a fill already ran, skipped: the refresh limiter was full)."),
    ("corral_leases_total", "Fill lease requests, by outcome (acquired, contended: held by another process, errored: the store was unreachable)."),
    ("corral_lease_renewals_total", "Lease renewals sent while a long fill ran."),
    ("corral_commits_total", "Values written to the shared store by a fill."),
    ("corral_commits_refused_total", "Fill commits refused: the key was written, invalidated or leased anew, or a tag moved, meanwhile."),
    ("corral_store_errors_total", "Store calls that failed or timed out."),
    ("corral_store_waits_total", "Flights that waited for a store that did not answer their lease request."),
    ("corral_decode_failures_total", "Stored bytes that could not be decoded (treated as a miss)."),
    ("corral_encode_failures_total", "Values not stored: not encodable, not round-tripping through the codec, or over the size limit."),
    ("corral_decrypt_failures_total", "Stored bytes that did not decrypt (treated as a miss, never served)."),
    ("corral_tag_misses_total", "Entries read from the shared store that a tag invalidation or a clear had made a miss."),
    ("corral_backplane_messages_total", "Backplane messages from other caches acted on."),
    ("corral_backplane_resets_total", "Times the L1 was dropped and tag versions forgotten because backplane messages may have been lost."),
    ("corral_tracking_invalidations_total", "Changes reported by the store's server (client tracking) acted on: a key evicted from the L1, or a tag or clear version forgotten."),
    ("corral_l1_flushes_total", "Times the L1 was dropped and tag versions forgotten, by reason (backplane: messages may have been lost; reconnect, failover: the server may have stopped tracking reads; server_flush: the server dropped its data; silence: a connection carrying the server's reports stopped answering, and only what the L1 held on the store's word was dropped)."),
    ("corral_fills_queued_total", "Fills that waited in the fill budget's queue."),
    ("corral_overloads_total", "Flights that got no fill budget permit within its max_wait (callers got Error::Overloaded or a stale value; the source was not called)."),
    ("corral_fleet_permits_total", "Fleet fill budget permits, by outcome (taken from the store; errored: the store failed and the fill ran on the local permit alone)."),
    ("corral_compression_values_total", "Values written to the shared store, by outcome (compressed; skipped: at or over the threshold, stored as they are because compressing did not save an eighth)."),
    ("corral_compression_bytes_total", "Bytes of the values written compressed, by stage (before: encoded; after: compressed). Their ratio is before over after."),
    ("corral_breaker_opened_total", "Times the store's circuit breaker opened."),
    ("corral_store_calls_skipped_total", "Store calls not made because the circuit breaker was open."),
];

/// What one cache instance reads now for its gauges.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Gauges {
    /// Entries in its L1.
    pub(crate) l1_entries: u64,
    /// Flights (fills and refreshes) in progress.
    pub(crate) flights: u64,
    /// 1 while its circuit breaker is open (or half-open), else 0.
    pub(crate) breaker_open: u64,
    /// Its fill budget's permits held in this process, fills queued, and
    /// limit (0 without a budget).
    pub(crate) budget_in_use: u64,
    pub(crate) budget_queued: u64,
    pub(crate) budget_limit: u64,
}

/// An exported gauge: name, HELP text, and the reading.
type GaugeReading = (&'static str, &'static str, fn(&Gauges) -> u64);

/// The exported gauges.
const GAUGES: &[GaugeReading] = &[
    (
        "corral_l1_entries",
        "Entries in the in-process tier (summed over the instances of a cache).",
        |g| g.l1_entries,
    ),
    (
        "corral_flights_in_progress",
        "Fills and refreshes in progress.",
        |g| g.flights,
    ),
    (
        "corral_breaker_open",
        "Instances of the cache whose store circuit breaker is open or half-open.",
        |g| g.breaker_open,
    ),
    (
        "corral_fill_budget_in_use",
        "Permits of the cache's fill budget held in this process (a budget shared by several caches is reported by each).",
        |g| g.budget_in_use,
    ),
    (
        "corral_fill_budget_queued",
        "Fills waiting for a permit of the cache's fill budget.",
        |g| g.budget_queued,
    ),
    (
        "corral_fill_budget_limit",
        "The limit of the cache's fill budget now (an adaptive budget moves it).",
        |g| g.budget_limit,
    ),
];

/// What one cache instance last exported: its counters and gauge readings,
/// so that each export adds only what changed (and a dropped instance takes
/// its gauge readings back).
pub(crate) struct Exported {
    name: Arc<str>,
    last: Mutex<Last>,
}

#[derive(Default)]
struct Last {
    counters: Vec<u64>,
    gauges: Vec<u64>,
}

impl Exported {
    /// Nothing exported yet by the instance of cache `name`.
    pub(crate) fn new(name: Arc<str>) -> Self {
        Self {
            name,
            last: Mutex::new(Last {
                counters: vec![0; COUNTERS.len()],
                gauges: vec![0; GAUGES.len()],
            }),
        }
    }

    /// Adds what `stats` and `gauges` gained since the last export to the
    /// recorder's metrics of the cache.
    pub(crate) fn export(&self, stats: &Stats, gauges: &Gauges) {
        describe();
        let name = &self.name;
        let mut last = lock(&self.last);
        for ((metric, extra, read), last) in COUNTERS.iter().zip(&mut last.counters) {
            let value = read(stats);
            let delta = value.saturating_sub(*last);
            *last = value.max(*last);
            match extra {
                Some((label, label_value)) => {
                    counter!(*metric, "cache" => Arc::clone(name), *label => *label_value)
                        .increment(delta);
                }
                None => counter!(*metric, "cache" => Arc::clone(name)).increment(delta),
            }
        }
        for ((metric, _, read), last) in GAUGES.iter().zip(&mut last.gauges) {
            let value = read(gauges);
            let handle = gauge!(*metric, "cache" => Arc::clone(name));
            if value >= *last {
                handle.increment((value - *last) as f64);
            } else {
                handle.decrement((*last - value) as f64);
            }
            *last = value;
        }
    }
}

impl Drop for Exported {
    /// The instance is gone: its gauge readings leave the sums.
    fn drop(&mut self) {
        let last = lock(&self.last);
        for ((metric, _, _), last) in GAUGES.iter().zip(&last.gauges) {
            if *last > 0 {
                gauge!(*metric, "cache" => Arc::clone(&self.name)).decrement(*last as f64);
            }
        }
    }
}

/// Gives every metric its HELP text (in the recorder installed now).
fn describe() {
    for (metric, help) in COUNTER_HELP {
        describe_counter!(*metric, *help);
    }
    for (metric, help, _) in GAUGES {
        describe_gauge!(*metric, *help);
    }
    describe_histogram!(
        "corral_fill_duration_seconds",
        metrics::Unit::Seconds,
        "How long fills ran (the source of truth's call)."
    );
    describe_histogram!(
        "corral_fill_queue_wait_seconds",
        metrics::Unit::Seconds,
        "How long fills waited for a fill budget permit."
    );
    describe_histogram!(
        "corral_wait_duration_seconds",
        metrics::Unit::Seconds,
        "How long callers waited for a fill led by another caller."
    );
}

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
    ("corral_store_waits_total", None, |s| s.store_waits),
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
    ("corral_tracking_invalidations_total", None, |s| {
        s.tracking_invalidations
    }),
    (
        "corral_l1_flushes_total",
        Some(("reason", "backplane")),
        |s| s.backplane_resets,
    ),
    (
        "corral_l1_flushes_total",
        Some(("reason", "reconnect")),
        |s| s.l1_flushes_reconnect,
    ),
    (
        "corral_l1_flushes_total",
        Some(("reason", "failover")),
        |s| s.l1_flushes_failover,
    ),
    (
        "corral_l1_flushes_total",
        Some(("reason", "server_flush")),
        |s| s.l1_flushes_server_flush,
    ),
    (
        "corral_l1_flushes_total",
        Some(("reason", "topology")),
        |s| s.l1_flushes_topology,
    ),
    (
        "corral_l1_flushes_total",
        Some(("reason", "silence")),
        |s| s.l1_flushes_silence,
    ),
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
    (
        "corral_compression_values_total",
        Some(("outcome", "compressed")),
        |s| s.compressed_values,
    ),
    (
        "corral_compression_values_total",
        Some(("outcome", "skipped")),
        |s| s.compression_skipped,
    ),
    (
        "corral_compression_bytes_total",
        Some(("stage", "before")),
        |s| s.compression_bytes_before,
    ),
    (
        "corral_compression_bytes_total",
        Some(("stage", "after")),
        |s| s.compression_bytes_after,
    ),
    ("corral_breaker_opened_total", None, |s| s.breaker_opened),
    ("corral_store_calls_skipped_total", None, |s| {
        s.store_calls_skipped
    }),
];

/// Records how long a fill ran (the source of truth's call), in seconds.
pub(crate) fn fill_took(name: &Arc<str>, took: Duration) {
    histogram!("corral_fill_duration_seconds", "cache" => Arc::clone(name)).record(took);
}

/// Records how long a fill waited in its fill budget's queue.
pub(crate) fn queue_took(name: &Arc<str>, took: Duration) {
    histogram!("corral_fill_queue_wait_seconds", "cache" => Arc::clone(name)).record(took);
}

/// Records how long a caller waited for a flight led by another caller.
pub(crate) fn wait_took(name: &Arc<str>, took: Duration) {
    histogram!("corral_wait_duration_seconds", "cache" => Arc::clone(name)).record(took);
}

/// Runs `export` on the cache behind `weak` every `interval`, until the
/// cache is dropped; outside a tokio runtime there is nothing to run it
/// on, and a warning says so.
pub(crate) fn spawn_exporter<T, F>(name: &str, weak: Weak<T>, interval: Duration, export: F)
where
    T: Send + Sync + 'static,
    F: Fn(&T) + Send + 'static,
{
    let Ok(runtime) = tokio::runtime::Handle::try_current() else {
        tracing::warn!(
            cache = %name,
            "cache built outside a tokio runtime: its metrics are not exported every \
             metrics_interval (build it inside the runtime, or call Cache::export_metrics)"
        );
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
            export(&inner);
        }
    });
}

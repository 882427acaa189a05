//! The hit path of `get_or_fill` against moka and a bare quick_cache map,
//! measured the same way for all three, plus a coalesced cold-miss bench.
//!
//! Run with `cargo bench -p corral-cache --bench hit_path`; the figures and how to
//! read them are in `BENCHMARKS.md` at the repository root.
//!
//! Every hit bench uses one hot 16-byte key and a 32-byte `String` value that
//! is cloned per hit. A sample is one timed loop of `iters` awaited calls
//! inside one current-thread tokio runtime (`block_on` once per sample), each
//! call awaited right in the loop; the `_wrapped` groups put each call
//! behind one more `async fn` of the caller's (see `Shape`). The
//! 2-thread benches run that same loop on 2 OS threads at once, each with its
//! own current-thread runtime, started together by a barrier; the reported
//! time per call is the mean of the two threads' own loop times divided by
//! `iters` (per-thread time per call). The 2-thread benches run on the same
//! hot key of one cache, and again with each thread on its own cache
//! instance (which shows whether a hit writes any process-wide shared
//! memory).
//!
//! The machine these run on is shared and has 2 cores, so after each hit
//! bench the share of the timed loops' wall time the bench threads were
//! actually on a CPU is printed (from `/proc/thread-self/schedstat`, Linux
//! only). Below ~95% the figure includes time spent descheduled; for the
//! 2-thread benches it also means the two threads did not fully overlap.

use std::convert::Infallible;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};

/// Concurrent callers on one cold key in the cold-miss bench.
const COLD_CALLERS: usize = 1000;

#[path = "support/targets.rs"]
mod targets;

use targets::{
    corral_builder, corral_two_tier_builder, current_thread, hit_loop, moka_cache, on_cpu_nanos,
    quick_cache, Corral, CorralTwoTier, HitTarget, Moka, QuickCache, Shape, KEY, VALUE,
};

fn corral_cache() -> corral::Cache<String> {
    corral_builder().build().expect("corral cache")
}

/// The three targets, each with the hot key filled.
fn hot_targets() -> (Corral, Moka, QuickCache) {
    let corral = Corral(corral_cache());
    let moka = Moka(moka_cache());
    let quick = QuickCache(quick_cache());
    let runtime = current_thread();
    runtime.block_on(async {
        // The first get_or_fill / get_with fills; the rest are hits.
        for _ in 0..2 {
            assert_eq!(corral.hit(KEY).await, VALUE);
            assert_eq!(moka.hit(KEY).await, VALUE);
            assert_eq!(quick.hit(KEY).await, VALUE);
        }
    });
    (corral, moka, quick)
}

/// Wall time and on-CPU time of the timed loops of one bench.
#[derive(Default)]
struct Occupancy {
    wall: Duration,
    on_cpu: Option<Duration>,
}

impl Occupancy {
    fn add(&mut self, wall: Duration, on_cpu: Option<Duration>) {
        self.wall += wall;
        self.on_cpu = match (self.on_cpu, on_cpu) {
            (Some(total), Some(more)) => Some(total + more),
            (None, Some(more)) if self.wall == wall => Some(more),
            _ => None,
        };
    }

    fn report(&self, group: &str, name: &str) {
        if let Some(on_cpu) = self.on_cpu.filter(|_| !self.wall.is_zero()) {
            eprintln!(
                "{group}/{name}: bench threads on a CPU {:.1}% of their timed loops",
                100.0 * on_cpu.as_secs_f64() / self.wall.as_secs_f64()
            );
        }
    }
}

/// One timed loop of `iters` hits on `key` in `shape`: its wall time and
/// how long the thread was on a CPU meanwhile.
async fn timed_loop<T: HitTarget>(
    target: &T,
    shape: Shape,
    key: &str,
    iters: u64,
) -> (Duration, Option<Duration>) {
    let cpu_before = on_cpu_nanos();
    let start = Instant::now();
    hit_loop(target, shape, key, iters).await;
    let wall = start.elapsed();
    let on_cpu = on_cpu_nanos()
        .zip(cpu_before)
        .map(|(after, before)| Duration::from_nanos(after.saturating_sub(before)));
    (wall, on_cpu)
}

fn bench_one_thread<T: HitTarget>(
    c: &mut criterion::BenchmarkGroup<'_, criterion::measurement::WallTime>,
    group: &str,
    shape: Shape,
    target: &T,
) {
    let runtime = current_thread();
    let mut occupancy = Occupancy::default();
    c.bench_function(T::NAME, |b| {
        b.iter_custom(|iters| {
            let (wall, on_cpu) = runtime.block_on(timed_loop(target, shape, KEY, iters));
            occupancy.add(wall, on_cpu);
            wall
        });
    });
    occupancy.report(group, T::NAME);
}

/// Two threads at once, the first hitting the hot key in `targets[0]`, the
/// second in `targets[1]`.
fn bench_two_threads<T: HitTarget>(
    c: &mut criterion::BenchmarkGroup<'_, criterion::measurement::WallTime>,
    group: &str,
    shape: Shape,
    targets: [&T; 2],
) {
    const THREADS: u32 = 2;
    let mut occupancy = Occupancy::default();
    c.bench_function(T::NAME, |b| {
        b.iter_custom(|iters| {
            let barrier = Barrier::new(THREADS as usize);
            let loops: Vec<(Duration, Option<Duration>)> = std::thread::scope(|scope| {
                let workers: Vec<_> = targets
                    .into_iter()
                    .map(|target| {
                        let barrier = &barrier;
                        scope.spawn(move || {
                            let runtime = current_thread();
                            barrier.wait();
                            runtime.block_on(timed_loop(target, shape, KEY, iters))
                        })
                    })
                    .collect();
                workers
                    .into_iter()
                    .map(|worker| worker.join().expect("bench thread"))
                    .collect()
            });
            let mut total = Duration::ZERO;
            for (wall, on_cpu) in loops {
                occupancy.add(wall, on_cpu);
                total += wall;
            }
            total / THREADS
        });
    });
    occupancy.report(group, T::NAME);
}

/// A two-tier corral with the hot key in its L1.
fn hot_two_tier() -> CorralTwoTier {
    let target: CorralTwoTier = Corral(corral_two_tier_builder().build().expect("corral cache"));
    current_thread().block_on(async {
        for _ in 0..2 {
            assert_eq!(target.hit(KEY).await, VALUE);
        }
    });
    assert_eq!(target.0.local_len(), 1, "the hot key is in the L1");
    target
}

fn hit_path(c: &mut Criterion) {
    let (corral, moka, quick) = hot_targets();
    let two_tier = hot_two_tier();
    // Each thread on its own instance: nothing of the map is shared, so any
    // slowdown over 1 thread is a hit writing process-wide shared memory.
    let (corral_2, moka_2, quick_2) = hot_targets();

    for (shape, suffix) in [(Shape::Direct, ""), (Shape::Wrapped, "_wrapped")] {
        let name = format!("hit_1_thread{suffix}");
        let mut group = c.benchmark_group(&name);
        group.throughput(Throughput::Elements(1));
        bench_one_thread(&mut group, &name, shape, &corral);
        bench_one_thread(&mut group, &name, shape, &two_tier);
        bench_one_thread(&mut group, &name, shape, &moka);
        bench_one_thread(&mut group, &name, shape, &quick);
        group.finish();

        let name = format!("hit_2_threads_same_key{suffix}");
        let mut group = c.benchmark_group(&name);
        group.throughput(Throughput::Elements(1));
        bench_two_threads(&mut group, &name, shape, [&corral, &corral]);
        bench_two_threads(&mut group, &name, shape, [&two_tier, &two_tier]);
        bench_two_threads(&mut group, &name, shape, [&moka, &moka]);
        bench_two_threads(&mut group, &name, shape, [&quick, &quick]);
        group.finish();

        if shape == Shape::Direct {
            let name = "hit_2_threads_own_cache";
            let mut group = c.benchmark_group(name);
            group.throughput(Throughput::Elements(1));
            bench_two_threads(&mut group, name, shape, [&corral, &corral_2]);
            bench_two_threads(&mut group, name, shape, [&moka, &moka_2]);
            bench_two_threads(&mut group, name, shape, [&quick, &quick_2]);
            group.finish();
        }
    }

    // The counter the corral hit path bumps must have seen every hit, and
    // the two-tier cache answered from its L1, never from its store.
    assert!(corral.0.stats().hits > 0);
    let stats = two_tier.0.stats();
    assert!(stats.hits > 0);
    assert_eq!(stats.l2_hits, 0);
}

/// Keys never used before in this process, so every round starts cold.
fn fresh_key() -> Arc<str> {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    format!("cold:{:011}", NEXT.fetch_add(1, Ordering::Relaxed)).into()
}

/// `COLD_CALLERS` tasks on one cold key through corral; returns when all
/// have their value.
async fn corral_cold_round(cache: &corral::Cache<String>) {
    let key = fresh_key();
    let tasks: Vec<_> = (0..COLD_CALLERS)
        .map(|_| {
            let cache = cache.clone();
            let key = Arc::clone(&key);
            tokio::spawn(async move {
                cache
                    .get_or_fill(&key, || async { Ok::<_, Infallible>(VALUE.to_owned()) })
                    .await
            })
        })
        .collect();
    for task in tasks {
        match task.await {
            Ok(Ok(value)) => debug_assert_eq!(value, VALUE),
            Ok(Err(error)) => panic!("corral cold call failed: {error}"),
            Err(error) => panic!("corral cold task failed: {error}"),
        }
    }
}

/// `COLD_CALLERS` tasks on one cold key through moka's coalescing `get_with`.
async fn moka_cold_round(cache: &moka::future::Cache<String, String>, inits: &Arc<AtomicUsize>) {
    let key = fresh_key();
    let tasks: Vec<_> = (0..COLD_CALLERS)
        .map(|_| {
            let cache = cache.clone();
            let key = Arc::clone(&key);
            let inits = Arc::clone(inits);
            tokio::spawn(async move {
                cache
                    .get_with_by_ref(&*key, async move {
                        inits.fetch_add(1, Ordering::Relaxed);
                        VALUE.to_owned()
                    })
                    .await
            })
        })
        .collect();
    for task in tasks {
        match task.await {
            Ok(value) => debug_assert_eq!(value, VALUE),
            Err(error) => panic!("moka cold task failed: {error}"),
        }
    }
}

fn cold_miss(c: &mut Criterion) {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("tokio runtime");
    let corral = corral_cache();
    let moka = moka_cache();
    let moka_inits = Arc::new(AtomicUsize::new(0));

    // Both really coalesce: one fill per round, checked before timing.
    runtime.block_on(async {
        let fills = corral.stats().fills;
        corral_cold_round(&corral).await;
        assert_eq!(
            corral.stats().fills - fills,
            1,
            "corral ran more than one fill"
        );
        let inits = moka_inits.load(Ordering::Relaxed);
        moka_cold_round(&moka, &moka_inits).await;
        assert_eq!(
            moka_inits.load(Ordering::Relaxed) - inits,
            1,
            "moka ran more than one init"
        );
    });

    let mut group = c.benchmark_group("cold_miss_coalesced");
    group.throughput(Throughput::Elements(COLD_CALLERS as u64));
    group.bench_function(BenchmarkId::new("corral_get_or_fill", COLD_CALLERS), |b| {
        b.iter_custom(|iters| {
            runtime.block_on(async {
                let start = Instant::now();
                for _ in 0..iters {
                    corral_cold_round(&corral).await;
                }
                start.elapsed()
            })
        });
    });
    group.bench_function(
        BenchmarkId::new("moka_get_with_by_ref", COLD_CALLERS),
        |b| {
            b.iter_custom(|iters| {
                runtime.block_on(async {
                    let start = Instant::now();
                    for _ in 0..iters {
                        moka_cold_round(&moka, &moka_inits).await;
                    }
                    start.elapsed()
                })
            });
        },
    );
    group.finish();
}

fn config() -> Criterion {
    // A 2-core, noisy machine: modest times keep a whole run under ~3 minutes.
    Criterion::default()
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(4))
        .sample_size(50)
}

criterion_group! {
    name = benches;
    config = config();
    targets = hit_path, cold_miss
}
criterion_main!(benches);

//! Interleaved hit timings: corral, moka and quick_cache measured in
//! alternation, round after round, so that every ratio compares timings
//! taken moments apart (see `BENCHMARKS.md`).
//!
//! ```text
//! cargo run --release -p corral-cache --example hit_pairs -- [ROUNDS] [LOOP_MS]
//! ```
//!
//! On a shared 2-vCPU machine the cost of two threads hitting one key swings
//! by 2× and more over minutes (other tenants' load, and where the host
//! places the two vCPUs, which decides what a cache-line transfer costs), so
//! timings of one library taken a minute after another's do not compare.
//! Each round here times, for every target in a rotating order, one loop of
//! about LOOP_MS in each of five modes: 1 thread; 2 threads on the same hot
//! key of one cache; 2 threads each on its own cache instance (nothing of
//! the map is shared: any slowdown is a hit writing process-wide shared
//! memory); and the first two again with each call behind one more
//! `async fn` of the caller's (`Shape::Wrapped`). Hits are as in
//! `benches/hit_path.rs`: a 16-byte key, a 32-byte `String` value cloned per
//! hit, each thread awaiting in a loop inside its own current-thread tokio
//! runtime. A round counts only if every loop of a mode had its threads on a
//! CPU ≥ 95% of the time (`/proc/thread-self/schedstat`; override with
//! `HIT_PAIRS_MIN_ON_CPU=0.9`). It prints medians over the kept rounds of ns
//! per call (per thread) and of the per-round ratios corral / other.
//!
//! Each target exists in 4 instances, used in turn round after round: how
//! an instance's memory is laid out moves its contended cost (see
//! `INSTANCES`).
//!
//! The targets are corral, corral with per-call options carrying a tag made
//! with `format!` — given as a closure (built only on a miss) and as a
//! `FillOptions` value (built on every call) —, corral with a clock that
//! stores every reading into a process-wide atomic as
//! `coarsetime::Instant::now` does (what `CoarseClock` did before; shows
//! what that shared store costs), moka's `get_with_by_ref` and a bare
//! quick_cache `get`.

use std::process::ExitCode;
use std::sync::Barrier;
use std::time::Instant;

// Each measurement uses part of the shared targets.
#[allow(dead_code)]
#[path = "../benches/support/targets.rs"]
mod targets;

use targets::{
    corral_builder, corral_two_tier_builder, current_thread, hit_loop, moka_cache, on_cpu_nanos,
    quick_cache, Corral, CorralTagged, CorralTaggedEager, CorralTwoTier, HitTarget, Moka,
    QuickCache, Shape, KEY, VALUE,
};

/// `corral::clock::CoarseClock` as it was before it switched to
/// `now_without_cache_update`: `coarsetime::Instant::now` also stores every
/// reading into a process-wide atomic.
#[derive(Debug)]
struct StoringCoarseClock(coarsetime::Instant);

impl corral::clock::Clock for StoringCoarseClock {
    fn now_millis(&self) -> u64 {
        coarsetime::Instant::now()
            .duration_since(self.0)
            .as_millis()
    }
}

/// One timed loop of `calls` hits on `key` in `shape`: (wall ns, on-CPU ns).
async fn timed_loop<T: HitTarget>(target: &T, shape: Shape, key: &str, calls: u64) -> (f64, f64) {
    let cpu_before = on_cpu_nanos();
    let start = Instant::now();
    hit_loop(target, shape, key, calls).await;
    let wall = start.elapsed().as_nanos() as f64;
    let on_cpu = match (on_cpu_nanos(), cpu_before) {
        (Some(after), Some(before)) => after.saturating_sub(before) as f64,
        _ => f64::NAN,
    };
    (wall, on_cpu)
}

#[derive(Clone, Copy)]
enum Mode {
    OneThread,
    TwoThreadsSameKey,
    TwoThreadsOwnCache,
}

/// What each round measures: the thread arrangement, the shape of the
/// timed loop (see [`Shape`]) and the report's label.
const MODES: [(Mode, Shape, &str); 5] = [
    (Mode::OneThread, Shape::Direct, "1 thread"),
    (
        Mode::TwoThreadsSameKey,
        Shape::Direct,
        "2 threads, same key (per thread)",
    ),
    (
        Mode::TwoThreadsOwnCache,
        Shape::Direct,
        "2 threads, one cache each (per thread)",
    ),
    (
        Mode::OneThread,
        Shape::Wrapped,
        "1 thread, each call behind an async fn",
    ),
    (
        Mode::TwoThreadsSameKey,
        Shape::Wrapped,
        "2 threads, same key, each call behind an async fn (per thread)",
    ),
];

/// (ns per call per thread, on-CPU share of the loops' wall time), each
/// thread hitting the hot key in its own entry of `targets`.
fn measure<T: HitTarget>(targets: &[&T], shape: Shape, calls: u64) -> (f64, f64) {
    let barrier = Barrier::new(targets.len());
    let loops: Vec<(f64, f64)> = std::thread::scope(|scope| {
        let workers: Vec<_> = targets
            .iter()
            .map(|target| {
                let barrier = &barrier;
                scope.spawn(move || {
                    let runtime = current_thread();
                    barrier.wait();
                    runtime.block_on(timed_loop(*target, shape, KEY, calls))
                })
            })
            .collect();
        workers
            .into_iter()
            .map(|worker| worker.join().expect("bench thread"))
            .collect()
    });
    let wall: f64 = loops.iter().map(|(wall, _)| wall).sum();
    let on_cpu: f64 = loops.iter().map(|(_, on_cpu)| on_cpu).sum();
    (wall / targets.len() as f64 / calls as f64, on_cpu / wall)
}

/// [`measure`] of instance `instance` of `instances` in `mode`.
fn measure_mode<T: HitTarget>(
    instances: &[T],
    instance: usize,
    (mode, shape): (Mode, Shape),
    calls: u64,
) -> (f64, f64) {
    let first = &instances[instance % instances.len()];
    match mode {
        Mode::OneThread => measure(&[first], shape, calls),
        Mode::TwoThreadsSameKey => measure(&[first, first], shape, calls),
        Mode::TwoThreadsOwnCache => {
            let second = &instances[(instance + 1) % instances.len()];
            measure(&[first, second], shape, calls)
        }
    }
}

/// The targets, in report order; ratios are of the first over the others.
const NAMES: [&str; 7] = [
    "corral",
    "corral+tags()",
    "corral+tags",
    "corral+store",
    "corral L1+L2",
    "moka",
    "quick_cache",
];

/// Instances of each target; round `r` uses instance `r % INSTANCES`.
///
/// Under contention the cost depends on where an instance's memory landed:
/// quick_cache's shards (and so corral's and the baseline's) are not
/// cache-line padded, so what shares a line with the hot shard's lock word
/// differs from one instance to the next, by ±20% and more. Rotating over
/// several instances of each averages that out instead of crowning
/// whichever instance happened to be laid out better.
const INSTANCES: usize = 4;

struct Targets {
    corral: Vec<Corral>,
    tagged: Vec<CorralTagged>,
    tagged_eager: Vec<CorralTaggedEager>,
    corral_storing: Vec<Corral>,
    two_tier: Vec<CorralTwoTier>,
    moka: Vec<Moka>,
    quick: Vec<QuickCache>,
}

impl Targets {
    fn new() -> Self {
        let corral = |clock: Option<StoringCoarseClock>| {
            let builder = corral_builder();
            let builder = match clock {
                Some(clock) => builder.clock(clock),
                None => builder,
            };
            Corral(builder.build().expect("corral cache"))
        };
        let mut targets = Self {
            corral: Vec::new(),
            tagged: Vec::new(),
            tagged_eager: Vec::new(),
            corral_storing: Vec::new(),
            two_tier: Vec::new(),
            moka: Vec::new(),
            quick: Vec::new(),
        };
        // Built interleaved, so no target gets all the neighbouring memory.
        for _ in 0..INSTANCES {
            targets.corral.push(corral(None));
            targets.tagged.push(CorralTagged(
                corral_builder().build().expect("corral cache"),
            ));
            targets.tagged_eager.push(CorralTaggedEager(
                corral_builder().build().expect("corral cache"),
            ));
            targets.corral_storing.push(corral(Some(StoringCoarseClock(
                coarsetime::Instant::now_without_cache_update(),
            ))));
            targets.two_tier.push(Corral(
                corral_two_tier_builder().build().expect("corral cache"),
            ));
            targets.moka.push(Moka(moka_cache()));
            targets.quick.push(QuickCache(quick_cache()));
        }
        current_thread().block_on(async {
            for instance in 0..INSTANCES {
                // The first get_or_fill / get_with fills; the rest are hits.
                for _ in 0..2 {
                    assert_eq!(targets.corral[instance].hit(KEY).await, VALUE);
                    assert_eq!(targets.tagged[instance].hit(KEY).await, VALUE);
                    assert_eq!(targets.tagged_eager[instance].hit(KEY).await, VALUE);
                    assert_eq!(targets.corral_storing[instance].hit(KEY).await, VALUE);
                    assert_eq!(targets.two_tier[instance].hit(KEY).await, VALUE);
                    assert_eq!(targets.moka[instance].hit(KEY).await, VALUE);
                    assert_eq!(targets.quick[instance].hit(KEY).await, VALUE);
                }
            }
        });
        targets
    }

    fn measure(
        &self,
        index: usize,
        instance: usize,
        mode: (Mode, Shape),
        calls: u64,
    ) -> (f64, f64) {
        match index {
            0 => measure_mode(&self.corral, instance, mode, calls),
            1 => measure_mode(&self.tagged, instance, mode, calls),
            2 => measure_mode(&self.tagged_eager, instance, mode, calls),
            3 => measure_mode(&self.corral_storing, instance, mode, calls),
            4 => measure_mode(&self.two_tier, instance, mode, calls),
            5 => measure_mode(&self.moka, instance, mode, calls),
            _ => measure_mode(&self.quick, instance, mode, calls),
        }
    }
}

fn median(values: &mut [f64]) -> f64 {
    values.sort_by(f64::total_cmp);
    let mid = values.len() / 2;
    if values.len() % 2 == 1 {
        values[mid]
    } else {
        (values[mid - 1] + values[mid]) / 2.0
    }
}

/// Median, 10th and 90th percentile.
fn spread(mut values: Vec<f64>) -> (f64, f64, f64) {
    let mid = median(&mut values);
    let last = values.len() - 1;
    (mid, values[last / 10], values[last - last / 10])
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let parse = |index: usize, default: u64| match args.get(index) {
        None => Some(default),
        Some(text) => text.parse::<u64>().ok().filter(|value| *value > 0),
    };
    let (Some(rounds), Some(loop_ms)) = (parse(0, 40), parse(1, 120)) else {
        eprintln!("usage: hit_pairs [ROUNDS] [LOOP_MS]");
        return ExitCode::from(2);
    };
    let min_on_cpu = std::env::var("HIT_PAIRS_MIN_ON_CPU")
        .ok()
        .and_then(|text| text.parse::<f64>().ok())
        .unwrap_or(0.95);
    let targets = Targets::new();

    // Calls per loop so that each loop lasts about LOOP_MS (scheduler
    // accounting has tick granularity, so loops must be long).
    let mut calls = [[0_u64; NAMES.len()]; MODES.len()];
    for (slot, (mode, shape, _)) in MODES.iter().enumerate() {
        for (index, calls) in calls[slot].iter_mut().enumerate() {
            let (per_call, _) = targets.measure(index, 0, (*mode, *shape), 20_000);
            *calls = ((loop_ms as f64 * 1e6 / per_call) as u64).max(1000);
        }
    }

    let mut kept: [Vec<[f64; NAMES.len()]>; MODES.len()] = Default::default();
    for round in 0..rounds {
        for (slot, (mode, shape, _)) in MODES.iter().enumerate() {
            let mut ns = [0.0; NAMES.len()];
            let mut clean = true;
            for step in 0..NAMES.len() {
                let index = (usize::try_from(round).unwrap_or(0) + step) % NAMES.len();
                let instance = usize::try_from(round).unwrap_or(0);
                let (per_call, on_cpu) =
                    targets.measure(index, instance, (*mode, *shape), calls[slot][index]);
                ns[index] = per_call;
                clean &= on_cpu >= min_on_cpu;
            }
            if clean {
                kept[slot].push(ns);
            }
        }
    }

    println!(
        "{rounds} rounds, loops of ~{loop_ms} ms; a round counts if every loop had its threads >= {:.0}% on a CPU",
        100.0 * min_on_cpu
    );
    println!("medians over kept rounds (p10–p90)");
    for (slot, (_, _, label)) in MODES.iter().enumerate() {
        let rounds = &kept[slot];
        println!("{label}: {} rounds kept", rounds.len());
        if rounds.is_empty() {
            continue;
        }
        for (index, name) in NAMES.iter().enumerate() {
            let (ns, lo, hi) = spread(rounds.iter().map(|ns| ns[index]).collect());
            print!("  {name:<13} {ns:7.1} ns/call ({lo:.1}–{hi:.1})");
            if index != 0 {
                let (ratio, rlo, rhi) = spread(rounds.iter().map(|ns| ns[0] / ns[index]).collect());
                print!("   corral/{name} {ratio:.2} ({rlo:.2}–{rhi:.2})");
            }
            println!();
        }
        let two_tier = NAMES.len() - 3;
        let quick = NAMES.len() - 1;
        let (ratio, lo, hi) = spread(rounds.iter().map(|ns| ns[two_tier] / ns[quick]).collect());
        println!("  corral L1+L2/quick_cache {ratio:.2} ({lo:.2}–{hi:.2})");
    }
    ExitCode::SUCCESS
}

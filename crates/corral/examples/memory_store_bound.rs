//! New keys, one after another, through one cache on a bounded
//! `MemoryStore` (the default bound, 100,000 keys), as a new user would
//! first try it: `.store(MemoryStore::new()).l1(true)`, an L1 of 1,000
//! entries, a TTL of 600 s. Prints, at each checkpoint, the µs per new key
//! over the last 10,000 keys — by the wall clock, and on a CPU (this
//! thread's time on a CPU, `/proc/thread-self/schedstat`: what other
//! processes on a busy machine take from it is left out) — and the keys the
//! store holds then (see `BENCHMARKS.md`).
//!
//! ```text
//! memory_store_bound [KEYS]     (default 1,000,000)
//! ```
//!
//! Each row is printed as soon as it is measured, so a run cut short (by
//! `timeout`, say) still shows how far it got.

use std::convert::Infallible;
use std::time::{Duration, Instant};

use corral::store::MemoryStore;
use corral::{Cache, Capacity};

/// The key counts at which a row is printed.
const CHECKPOINTS: [u64; 10] = [
    10_000, 50_000, 100_000, 110_000, 120_000, 150_000, 200_000, 300_000, 500_000, 1_000_000,
];

/// Keys over which each row's time per key is measured.
const WINDOW: u64 = 10_000;

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let keys: u64 = match std::env::args().nth(1) {
        Some(arg) => arg.parse().expect("KEYS: a number of keys"),
        None => 1_000_000,
    };
    let store = MemoryStore::new();
    let cache: Cache<String> = Cache::builder("bound")
        .store(store.clone())
        .l1(true)
        .capacity(Capacity::Entries(1_000))
        .ttl(Duration::from_secs(600))
        .build()
        .expect("cache");
    println!(
        "| keys filled so far | µs per new key, wall (over the last {WINDOW}) \
         | µs per new key, on a CPU | keys in the store |"
    );
    println!("|---|---|---|---|");
    let started = Instant::now();
    let mut window = (Instant::now(), on_cpu_nanos());
    for filled in 1..=keys {
        let key = format!("key:{filled}");
        let value = cache
            .get_or_fill(&key, move || async move {
                Ok::<_, Infallible>(format!("value {filled}"))
            })
            .await
            .expect("fill");
        std::hint::black_box(value);
        if filled % WINDOW == 0 {
            if CHECKPOINTS.contains(&filled) || filled == keys {
                let wall = window.0.elapsed().as_secs_f64() * 1e6 / WINDOW as f64;
                let on_cpu = match (on_cpu_nanos(), window.1) {
                    (Some(now), Some(then)) => {
                        format!(
                            "{:.1}",
                            now.saturating_sub(then) as f64 / 1e3 / WINDOW as f64
                        )
                    }
                    _ => "?".to_owned(),
                };
                println!("| {filled} | {wall:.1} | {on_cpu} | {} |", store.len());
            }
            window = (Instant::now(), on_cpu_nanos());
        }
    }
    let stats = cache.stats();
    println!(
        "\n{keys} keys in {:.1} s; fills {}, store len {}",
        started.elapsed().as_secs_f64(),
        stats.fills,
        store.len()
    );
}

/// Nanoseconds this thread has spent on a CPU, if the kernel says
/// (`/proc/thread-self/schedstat`, Linux only).
fn on_cpu_nanos() -> Option<u64> {
    let stat = std::fs::read_to_string("/proc/thread-self/schedstat").ok()?;
    stat.split_whitespace().next()?.parse().ok()
}

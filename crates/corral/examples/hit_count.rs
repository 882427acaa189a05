//! K hits on one hot key, for counting instructions per hit under
//! `valgrind --tool=callgrind` (see `scripts/callgrind` and `BENCHMARKS.md`).
//!
//! ```text
//! hit_count <corral|corral_hot|corral_tags_hot|corral_eager_tags_hot|moka|quick_cache|quick_cache_hot> <K>
//! ```
//!
//! Every run builds the cache, fills the hot key and does one warm-up hit
//! whatever K is, so instructions per hit = (total(K) − total(0)) / K.
//! `corral_hot` first keeps the cache's clock ticking, as a hot cache's
//! is, and waits until its hits read the ticked clock reading instead of
//! the clock, so `scripts/callgrind` counts only inside its `hot_loop`
//! (`--toggle-collect`); `quick_cache_hot` runs the same loop on the bare
//! map, for the like-for-like comparison. `corral_tags_hot` and
//! `corral_eager_tags_hot` are `corral_hot` with per-call options carrying
//! a `format!`ed tag, given as a closure (built only on a miss) and as a
//! `FillOptions` value (built on every call). `corral_loop` and
//! `corral_tags_loop` run the targets' own loops of awaited hits, as
//! `hit_pairs` times them, with the clock left to itself, and
//! `corral_wrapped_loop` each hit behind one more `async fn` (`hit_pairs`'
//! "behind an async fn" rows);
//! `corral_ttl_loop` is `corral`'s loop with options that allocate nothing
//! (a TTL). The
//! hot key is 16 bytes and the 32-byte `String` value is cloned per hit, as
//! in `benches/hit_path.rs`; each hit is awaited in one loop inside one
//! current-thread tokio runtime.

use std::convert::Infallible;
use std::future::Future;
use std::hint::black_box;
use std::pin::pin;
use std::process::ExitCode;
use std::task::{Context, Poll, Waker};

// Each measurement uses part of the shared targets.
#[allow(dead_code)]
#[path = "../benches/support/targets.rs"]
mod targets;

use targets::{
    corral_builder, moka_cache, quick_cache, Corral, CorralTagged, CorralTaggedEager, HitTarget,
    QuickCache, KEY, VALUE,
};

async fn corral_hits(hits: u64) {
    let cache = corral_builder().build().expect("corral cache");
    for _ in 0..=hits {
        let value = cache
            .get_or_fill(black_box(KEY), || async {
                Ok::<_, Infallible>(VALUE.to_owned())
            })
            .await;
        black_box(value.expect("corral get_or_fill"));
    }
    assert_eq!(
        cache.stats().hits,
        hits,
        "every call but the first is a hit"
    );
}

/// `hot_loop` over `target`, a corral target over `cache`, once its hits
/// read the ticked clock.
async fn corral_hot_hits<T: HitTarget>(target: T, cache: corral::Cache<String>, hits: u64) {
    black_box(target.hit(KEY).await);
    // Under valgrind hits come far too slowly to heat the cache: its clock
    // is kept ticking instead, as a hot cache's is.
    assert!(cache.keep_clock_ticking(), "the default clock ticks");
    let started = std::time::Instant::now();
    while !cache.hits_read_ticked_clock() {
        assert!(
            started.elapsed() < std::time::Duration::from_secs(120),
            "the clock never started ticking"
        );
        std::thread::yield_now();
    }
    hot_loop(&target, hits);
    assert!(
        cache.hits_read_ticked_clock(),
        "the clock stopped ticking during the measured hits"
    );
}

/// The measured hits of the `_hot` kinds: each call of the shared
/// `HitTarget::hit` polled once in place (a hit is ready on its first
/// poll), as an `.await` in a loop does but without the runtime, in a
/// function of its own so that callgrind can count it alone.
#[inline(never)]
fn hot_loop<T: HitTarget>(target: &T, hits: u64) {
    let mut context = Context::from_waker(Waker::noop());
    for _ in 0..hits {
        let call = pin!(target.hit(black_box(KEY)));
        match call.poll(&mut context) {
            Poll::Ready(value) => black_box(value),
            Poll::Pending => panic!("a hit was not ready on its first poll"),
        };
    }
}

fn corral_cache() -> corral::Cache<String> {
    corral_builder().build().expect("corral cache")
}

/// A warm-up hit, then `target`'s own loop of `hits` awaited hits (the
/// loop `hit_pairs` times in its `Direct` shape), the clock left to itself.
async fn loop_hits<T: HitTarget>(target: T, cache: corral::Cache<String>, hits: u64) {
    black_box(target.hit(KEY).await);
    target.hits(KEY, hits).await;
    assert_eq!(
        cache.stats().hits,
        hits,
        "every call but the first is a hit"
    );
}

/// Hits each behind one more `async fn` (`hit_pairs`' "behind an async
/// fn" shape).
async fn wrapped_hits<T: HitTarget>(target: T, cache: corral::Cache<String>, hits: u64) {
    for _ in 0..=hits {
        black_box(target.hit(black_box(KEY)).await);
    }
    assert_eq!(
        cache.stats().hits,
        hits,
        "every call but the first is a hit"
    );
}

/// Awaited hits, each call given the options `options()` makes.
async fn options_loop_hits<P: corral::CallOptions>(hits: u64, options: impl Fn() -> P) {
    let cache = corral_cache();
    for _ in 0..=hits {
        let value = cache
            .get_or_fill(black_box(KEY), || async {
                Ok::<_, Infallible>(VALUE.to_owned())
            })
            .options(options())
            .await;
        black_box(value.expect("corral get_or_fill"));
    }
    assert_eq!(
        cache.stats().hits,
        hits,
        "every call but the first is a hit"
    );
}

/// Awaited hits with per-call options that allocate nothing (a TTL): what
/// passing options at all costs in an awaited loop.
async fn ttl_loop_hits(hits: u64) {
    options_loop_hits(hits, || {
        corral::FillOptions::new().ttl(std::time::Duration::from_secs(3600))
    })
    .await;
}

/// [`ttl_loop_hits`] with the options given as a closure.
async fn lazy_ttl_loop_hits(hits: u64) {
    options_loop_hits(hits, || {
        || corral::FillOptions::new().ttl(std::time::Duration::from_secs(3600))
    })
    .await;
}

/// Awaited hits with a lazy tag made with `format!` from a tenant known
/// before the loop (no `black_box` per hit, unlike `CorralTagged::hits`).
async fn lazy_tags_loop_hits(hits: u64) {
    let tenant = black_box(7_u32);
    options_loop_hits(hits, || {
        move || corral::FillOptions::new().tags([format!("tenant:{tenant}")])
    })
    .await;
}

async fn moka_hits(hits: u64) {
    let cache = moka_cache();
    for _ in 0..=hits {
        black_box(
            cache
                .get_with_by_ref(black_box(KEY), async { VALUE.to_owned() })
                .await,
        );
    }
}

async fn quick_cache_hits(hits: u64) {
    let cache = quick_cache();
    // The same wrapper as the bench: an async block awaited per hit.
    let hit = || async { cache.get(black_box(KEY)).expect("hot key present") };
    black_box(hit().await);
    for _ in 0..hits {
        black_box(hit().await);
    }
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().collect();
    let (kind, hits) = match args.as_slice() {
        [_, kind, hits] => match hits.parse::<u64>() {
            Ok(hits) => (kind.as_str(), hits),
            Err(_) => return usage(),
        },
        _ => return usage(),
    };
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("tokio runtime");
    match kind {
        "corral" => runtime.block_on(corral_hits(hits)),
        "corral_hot" | "corral_tags_hot" | "corral_eager_tags_hot" => {
            let cache = corral_builder().build().expect("corral cache");
            let handle = cache.clone();
            match kind {
                "corral_hot" => {
                    runtime.block_on(corral_hot_hits(Corral::<false>(cache), handle, hits))
                }
                "corral_tags_hot" => {
                    runtime.block_on(corral_hot_hits(CorralTagged(cache), handle, hits));
                }
                _ => runtime.block_on(corral_hot_hits(CorralTaggedEager(cache), handle, hits)),
            }
        }
        "corral_loop" => {
            let cache = corral_cache();
            runtime.block_on(loop_hits(Corral::<false>(cache.clone()), cache, hits));
        }
        "corral_wrapped_loop" => {
            let cache = corral_cache();
            runtime.block_on(wrapped_hits(Corral::<false>(cache.clone()), cache, hits));
        }
        "corral_tags_loop" => {
            let cache = corral_cache();
            runtime.block_on(loop_hits(CorralTagged(cache.clone()), cache, hits));
        }
        "corral_ttl_loop" => runtime.block_on(ttl_loop_hits(hits)),
        "corral_lazy_ttl_loop" => runtime.block_on(lazy_ttl_loop_hits(hits)),
        "corral_lazy_tags_loop" => runtime.block_on(lazy_tags_loop_hits(hits)),
        "moka" => runtime.block_on(moka_hits(hits)),
        "quick_cache" => runtime.block_on(quick_cache_hits(hits)),
        "quick_cache_hot" => hot_loop(&QuickCache(quick_cache()), hits),
        _ => return usage(),
    }
    ExitCode::SUCCESS
}

fn usage() -> ExitCode {
    eprintln!(
        "usage: hit_count <corral|corral_hot|corral_tags_hot|corral_eager_tags_hot|corral_loop|\
         corral_wrapped_loop|corral_tags_loop|corral_ttl_loop|corral_lazy_ttl_loop|corral_lazy_tags_loop|moka|quick_cache|quick_cache_hot> <hits>"
    );
    ExitCode::from(2)
}

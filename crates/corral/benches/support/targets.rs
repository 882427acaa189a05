//! The caches under test on the hit path, shared by `benches/hit_path.rs`,
//! `examples/hit_pairs.rs` and `examples/hit_count.rs` so that all three
//! measure exactly the same hit: one hot 16-byte key, a 32-byte `String`
//! value cloned per hit, in one of two shapes (see [`Shape`]).

use std::convert::Infallible;
use std::future::Future;
use std::hint::black_box;
use std::time::Duration;

/// The hot key: 16 bytes.
pub(crate) const KEY: &str = "user:0000000042!";
/// The cached value: 32 bytes, cloned on every hit.
pub(crate) const VALUE: &str = "0123456789abcdef0123456789ABCDEF";
/// Entry bound of every cache under test.
pub(crate) const CAPACITY: u64 = 10_000;
/// TTL of the caches that have one (long enough never to expire in a run).
pub(crate) const TTL: Duration = Duration::from_secs(3600);

/// How the timed loop reaches each library's call.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Shape {
    /// Each call awaited (or, for the bare map, called) right in the loop,
    /// as a service's handler awaits `get_or_fill`: the library's future is
    /// polled inside the loop's own state machine. The shape the targets of
    /// `BENCHMARKS.md` are judged on.
    Direct,
    /// Each call behind one more `async fn` of the caller's
    /// ([`HitTarget::hit`]). The compiler inlines quick_cache's wrapper (it
    /// awaits nothing) but not corral's or moka's, whose futures then live
    /// in the wrapper's state and hand their output back through memory.
    Wrapped,
}

/// One of the caches under test, answering hits on the hot key.
pub(crate) trait HitTarget: Sync {
    /// Label in reports.
    const NAME: &'static str;
    /// One read of `key`, expected to hit.
    fn hit(&self, key: &str) -> impl Future<Output = String>;
    /// `calls` reads of `key` in one loop, each awaited right there
    /// ([`Shape::Direct`]); every value goes through `black_box`.
    fn hits(&self, key: &str, calls: u64) -> impl Future<Output = ()>;
}

/// `calls` hits on `key` through `target` in `shape`.
pub(crate) async fn hit_loop<T: HitTarget>(target: &T, shape: Shape, key: &str, calls: u64) {
    match shape {
        Shape::Direct => target.hits(key, calls).await,
        Shape::Wrapped => {
            for _ in 0..calls {
                black_box(target.hit(black_box(key)).await);
            }
        }
    }
}

/// corral's `get_or_fill` on a filled key (`TWO_TIER`: of a cache with an
/// L1 in front of a store).
pub(crate) struct Corral<const TWO_TIER: bool = false>(pub(crate) corral::Cache<String>);

impl<const TWO_TIER: bool> HitTarget for Corral<TWO_TIER> {
    const NAME: &'static str = if TWO_TIER {
        "corral_two_tier_get_or_fill"
    } else {
        "corral_get_or_fill"
    };

    async fn hit(&self, key: &str) -> String {
        match self
            .0
            .get_or_fill(key, || async { Ok::<_, Infallible>(VALUE.to_owned()) })
            .await
        {
            Ok(value) => value,
            Err(error) => panic!("corral hit failed: {error}"),
        }
    }

    async fn hits(&self, key: &str, calls: u64) {
        for _ in 0..calls {
            match self
                .0
                .get_or_fill(black_box(key), || async {
                    Ok::<_, Infallible>(VALUE.to_owned())
                })
                .await
            {
                Ok(value) => black_box(value),
                Err(error) => panic!("corral hit failed: {error}"),
            };
        }
    }
}

/// corral's `get_or_fill` with per-call options carrying a tag made with
/// `format!` (a tenant's), given as a closure: built only on a miss, so a
/// hit should cost what a hit without options costs. (Measured by
/// `hit_pairs` only.)
#[allow(dead_code)]
pub(crate) struct CorralTagged(pub(crate) corral::Cache<String>);

/// The same, with the options built eagerly (a `FillOptions` value): the
/// tag's `String` and `Arc` are allocated and freed on every hit.
#[allow(dead_code)]
pub(crate) struct CorralTaggedEager(pub(crate) corral::Cache<String>);

/// The tenant of the tagged targets' tag (read through `black_box`).
#[allow(dead_code)]
const TENANT: u32 = 7;

impl HitTarget for CorralTagged {
    const NAME: &'static str = "corral_get_or_fill_lazy_tags";

    async fn hit(&self, key: &str) -> String {
        let tenant = black_box(TENANT);
        match self
            .0
            .get_or_fill(key, || async { Ok::<_, Infallible>(VALUE.to_owned()) })
            .options(move || corral::FillOptions::new().tags([format!("tenant:{tenant}")]))
            .await
        {
            Ok(value) => value,
            Err(error) => panic!("corral hit failed: {error}"),
        }
    }

    async fn hits(&self, key: &str, calls: u64) {
        // Opaque to the compiler, once: a `black_box` inside the loop is a
        // barrier that costs an awaited hit ~20 ns by itself.
        let tenant = black_box(TENANT);
        for _ in 0..calls {
            match self
                .0
                .get_or_fill(black_box(key), || async {
                    Ok::<_, Infallible>(VALUE.to_owned())
                })
                .options(move || corral::FillOptions::new().tags([format!("tenant:{tenant}")]))
                .await
            {
                Ok(value) => black_box(value),
                Err(error) => panic!("corral hit failed: {error}"),
            };
        }
    }
}

impl HitTarget for CorralTaggedEager {
    const NAME: &'static str = "corral_get_or_fill_eager_tags";

    async fn hit(&self, key: &str) -> String {
        let tenant = black_box(TENANT);
        match self
            .0
            .get_or_fill(key, || async { Ok::<_, Infallible>(VALUE.to_owned()) })
            .options(corral::FillOptions::new().tags([format!("tenant:{tenant}")]))
            .await
        {
            Ok(value) => value,
            Err(error) => panic!("corral hit failed: {error}"),
        }
    }

    async fn hits(&self, key: &str, calls: u64) {
        // Opaque to the compiler, once: a `black_box` inside the loop is a
        // barrier that costs an awaited hit ~20 ns by itself.
        let tenant = black_box(TENANT);
        for _ in 0..calls {
            match self
                .0
                .get_or_fill(black_box(key), || async {
                    Ok::<_, Infallible>(VALUE.to_owned())
                })
                .options(corral::FillOptions::new().tags([format!("tenant:{tenant}")]))
                .await
            {
                Ok(value) => black_box(value),
                Err(error) => panic!("corral hit failed: {error}"),
            };
        }
    }
}

/// corral's `get_or_fill` on a key held in the L1 of a two-tier cache (an
/// L1 in front of the embedded store, listening to its backplane): the hit
/// path of a service's cache in front of Redis.
pub(crate) type CorralTwoTier = Corral<true>;

/// moka's `future::Cache::get_with_by_ref` on a present key.
pub(crate) struct Moka(pub(crate) moka::future::Cache<String, String>);

impl HitTarget for Moka {
    const NAME: &'static str = "moka_get_with_by_ref";

    async fn hit(&self, key: &str) -> String {
        self.0
            .get_with_by_ref(key, async { VALUE.to_owned() })
            .await
    }

    async fn hits(&self, key: &str, calls: u64) {
        for _ in 0..calls {
            black_box(
                self.0
                    .get_with_by_ref(black_box(key), async { VALUE.to_owned() })
                    .await,
            );
        }
    }
}

/// A bare `quick_cache::sync::Cache::get`: the practical floor.
pub(crate) struct QuickCache(pub(crate) quick_cache::sync::Cache<String, String>);

impl HitTarget for QuickCache {
    const NAME: &'static str = "quick_cache_get";

    async fn hit(&self, key: &str) -> String {
        match self.0.get(key) {
            Some(value) => value,
            None => panic!("quick_cache lost the hot key"),
        }
    }

    async fn hits(&self, key: &str, calls: u64) {
        for _ in 0..calls {
            match self.0.get(black_box(key)) {
                Some(value) => black_box(value),
                None => panic!("quick_cache lost the hot key"),
            };
        }
    }
}

/// corral's builder as every measurement configures it.
pub(crate) fn corral_builder() -> corral::CacheBuilder<String> {
    corral::Cache::<String>::builder("bench")
        .ttl(TTL)
        .capacity(corral::Capacity::Entries(CAPACITY))
}

/// corral with an L1 in front of a store, as every measurement configures
/// it.
pub(crate) fn corral_two_tier_builder() -> corral::CacheBuilder<String> {
    corral_builder()
        .store(corral::store::MemoryStore::new())
        .l1(true)
}

/// moka as every measurement configures it.
pub(crate) fn moka_cache() -> moka::future::Cache<String, String> {
    moka::future::Cache::builder()
        .max_capacity(CAPACITY)
        .time_to_live(TTL)
        .build()
}

/// A bare quick_cache map holding the hot key.
pub(crate) fn quick_cache() -> quick_cache::sync::Cache<String, String> {
    let cache =
        quick_cache::sync::Cache::new(usize::try_from(CAPACITY).expect("capacity fits usize"));
    cache.insert(KEY.to_owned(), VALUE.to_owned());
    cache
}

/// A current-thread tokio runtime with every driver.
pub(crate) fn current_thread() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("tokio runtime")
}

/// Nanoseconds the calling thread has spent on a CPU, if the kernel says
/// (`/proc/thread-self/schedstat`, Linux only).
pub(crate) fn on_cpu_nanos() -> Option<u64> {
    let stat = std::fs::read_to_string("/proc/thread-self/schedstat").ok()?;
    stat.split_whitespace().next()?.parse().ok()
}

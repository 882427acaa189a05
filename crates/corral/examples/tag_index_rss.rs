//! Memory of the tag index: fills distinct keys, each under its own tag,
//! through an L1 of 1,000 entries (no shared store) and prints the
//! process's resident set (`/proc/self/statm`) as it goes. Linux only.
//!
//! `cargo run --release -p corral-cache --example tag_index_rss [KEYS]`
//! (KEYS defaults to 1,000,000). With tags on every fill, RSS should stay
//! flat once the L1 is full: the index holds only what the L1 holds.

use std::time::Duration;

use corral::FillOptions;
use corral::{Cache, Capacity};

fn rss_mib() -> f64 {
    let statm = std::fs::read_to_string("/proc/self/statm").unwrap_or_default();
    let pages: f64 = statm
        .split_whitespace()
        .nth(1)
        .and_then(|field| field.parse().ok())
        .unwrap_or(0.0);
    pages * 4096.0 / (1024.0 * 1024.0)
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let keys: usize = std::env::args()
        .nth(1)
        .map(|arg| arg.parse())
        .transpose()?
        .unwrap_or(1_000_000);
    let untagged = std::env::args().nth(2).as_deref() == Some("untagged");
    let cache = Cache::<u64>::builder("rss")
        .capacity(Capacity::Entries(1_000))
        .ttl(Duration::from_secs(3_600))
        .build()?;
    let checkpoints = [keys / 10, keys / 4, keys / 2, keys];
    let mut base = None;
    for i in 0..keys {
        let key = format!("user:{i}");
        let mut options = FillOptions::new();
        if !untagged {
            options = options.tags([format!("tenant:{i}")]);
        }
        let value = i as u64;
        cache
            .get_or_fill(&key, move || async move { Ok::<_, std::io::Error>(value) })
            .options(options)
            .await?;
        if checkpoints.contains(&(i + 1)) {
            let rss = rss_mib();
            let base = *base.get_or_insert(rss);
            println!(
                "keys={:>8} l1={:>5} rss={rss:>7.1} MiB growth since {} keys={:>6.1} MiB",
                i + 1,
                cache.local_len(),
                keys / 10,
                rss - base
            );
        }
    }
    Ok(())
}

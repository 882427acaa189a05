//! `corral`: the stampede demo of the corral cache.
//!
//! `corral herd` runs a stampede — many concurrent callers on a few cold
//! keys — through corral and through a naive cache-aside, side by side, and
//! reports how many times each one called the source of truth.

#![warn(missing_docs, unreachable_pub, rust_2018_idioms)]
#![forbid(unsafe_code)]

mod herd;

/// The `corral` command line: its subcommands.
#[derive(Debug, clap::Parser)]
#[command(name = "corral", version, about = "The corral cache's stampede demo")]
enum Cli {
    /// Runs a stampede of concurrent callers on cold keys through corral and
    /// through a naive cache-aside, and compares fills and latencies.
    Herd(herd::HerdArgs),
    /// One worker process of `corral herd --redis` (started by it, with its
    /// config as JSON; takes orders on stdin, answers on stdout).
    #[command(hide = true)]
    HerdWorker {
        /// The worker's config, as JSON.
        config: String,
    },
}

fn main() -> anyhow::Result<()> {
    match <Cli as clap::Parser>::parse() {
        Cli::Herd(args) => herd::run(args),
        Cli::HerdWorker { config } => herd::run_worker(&config),
    }
}

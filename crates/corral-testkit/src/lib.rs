//! Real-server test fixtures for corral.
//!
//! Tests run against a real `redis-server`, never a mock (see DESIGN.md §5).
//! [`RedisServer`] spawns one on a free loopback port with persistence off,
//! waits until it answers `PING`, and kills it on drop — also when the test
//! panics. It can freeze (`SIGSTOP`), thaw, kill and restart the server on the
//! same port for fault tests, and reads `INFO commandstats` so tests can count
//! the commands an operation sent, or records them one by one with
//! `MONITOR` ([`RedisServer::monitor`]). [`RedisCluster`] starts a three-master
//! cluster with `redis-cli --cluster create`, optionally with one replica
//! per master, and can kill a master and wait until its replica took over.
//! [`RedisSentinel`] starts a master, a replica and three `redis-sentinel`
//! processes, and can kill the master and wait for the sentinels' failover.
//!
//! [`FaultProxy`] relays TCP connections to a server and can blackhole them
//! (they stay open but nothing passes, no FIN, no RST), to test how clients
//! find connections that died silently.
//!
//! [`MemcachedServer`] does the same for a `memcached` process (TCP on a
//! free loopback port, `-U 0`): freeze, thaw, kill, raw requests.
//!
//! [`Worker`] runs a child process that takes line commands on its stdin
//! and answers `@`-lines on its stdout: this test binary again (one ignored
//! test as its entry), or any program (the `corral herd` demo's workers).
//! [`Callers`] spawns concurrent callers held at a gate, releases them
//! together and [`Tally`]s what they measured.
//!
//! Every failure panics with the tail of the server log(s) in the message
//! (but [`Worker::spawn`], [`Worker::tell`] and [`Worker::answer`], which
//! return errors for programs).
//!
//! The binaries are found on `PATH` as `redis-server` and `redis-cli`; set
//! `CORRAL_REDIS_SERVER` / `CORRAL_REDIS_CLI` to use others (and
//! `CORRAL_REDIS_SENTINEL` for `redis-sentinel`). Everything binds
//! and connects to `127.0.0.1` only.
//!
//! ```no_run
//! use corral_testkit::RedisServer;
//!
//! let server = RedisServer::start();
//! assert_eq!(server.cli(&["PING"]), "PONG");
//! server.reset_stats();
//! server.cli(&["SET", "k", "v"]);
//! assert_eq!(server.command_stats().get("set"), Some(&1));
//! ```

mod cluster;
mod gate;
mod memcached;
mod monitor;
mod process;
mod proxy;
mod resp;
mod sentinel;
mod server;
mod stampede;
mod traces;
mod worker;

pub use cluster::RedisCluster;
pub use gate::{until, until_repeating, until_yielding, Gate};
pub use memcached::MemcachedServer;
pub use monitor::{Executed, Monitor};
pub use process::cpu_micros;
pub use proxy::FaultProxy;
pub use sentinel::{RedisSentinel, SENTINEL_MASTER_NAME};
pub use server::{parse_command_stats, parse_command_times, CommandTime, RedisServer, TlsFiles};
pub use stampede::{micros, Callers, Stampede, StampedeReport, Tally};
pub use traces::{capture, Captured};
pub use worker::{Worker, ANSWER_TIMEOUT};

/// How many lines [`log_tail`] keeps.
pub const LOG_TAIL_LINES: usize = 60;

/// Formats the tail of a server log (its last [`LOG_TAIL_LINES`] lines) for a
/// failure message, noting how many lines were left out.
pub fn log_tail(log: &str) -> String {
    let lines: Vec<&str> = log.lines().collect();
    let skip = lines.len().saturating_sub(LOG_TAIL_LINES);
    let mut out = String::new();
    if skip > 0 {
        out.push_str(&format!("[... {skip} earlier log lines left out ...]\n"));
    }
    for line in &lines[skip..] {
        out.push_str(line);
        out.push('\n');
    }
    if lines.is_empty() {
        out.push_str("[log is empty]\n");
    }
    out
}

#[cfg(test)]
mod tests {
    use super::{log_tail, LOG_TAIL_LINES};

    #[test]
    fn log_tail_keeps_the_last_lines() {
        let log: String = (0..100).map(|i| format!("line {i}\n")).collect();
        let tail = log_tail(&log);
        assert!(tail.starts_with("[... 40 earlier log lines left out ...]\n"));
        assert!(tail.contains("line 40\n"));
        assert!(!tail.contains("line 39\n"));
        assert!(tail.ends_with("line 99\n"));
        assert_eq!(tail.lines().count(), LOG_TAIL_LINES + 1);
    }

    #[test]
    fn log_tail_of_short_and_empty_logs() {
        assert_eq!(log_tail("a\nb"), "a\nb\n");
        assert_eq!(log_tail(""), "[log is empty]\n");
    }
}

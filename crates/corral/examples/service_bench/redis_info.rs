//! What the Redis server says it did: `INFO commandstats` (calls and
//! microseconds per command) and `INFO cpu`.

use std::collections::BTreeMap;

use redis::aio::MultiplexedConnection;
use serde::{Deserialize, Serialize};

/// The benchmark's own commands, left out of the counts.
const OWN: [&str; 3] = ["info", "config", "flushall"];

/// One command's calls and time.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub(crate) struct CommandStat {
    pub(crate) calls: u64,
    pub(crate) usec: u64,
}

impl CommandStat {
    /// Microseconds per call; 0 without calls.
    pub(crate) fn usec_per_call(&self) -> f64 {
        if self.calls == 0 {
            0.0
        } else {
            self.usec as f64 / self.calls as f64
        }
    }
}

/// The commands the server ran since its last `CONFIG RESETSTAT`, but the
/// benchmark's own, by name (`get`, `evalsha`, `client|tracking`, ...).
///
/// Commands a script runs are counted too (in their own names) and their
/// time is also in the script's: the sum of time counts it twice.
pub(crate) async fn command_stats(
    conn: &mut MultiplexedConnection,
) -> anyhow::Result<BTreeMap<String, CommandStat>> {
    let info: String = redis::cmd("INFO")
        .arg("commandstats")
        .query_async(conn)
        .await?;
    Ok(parse_command_stats(&info))
}

fn parse_command_stats(info: &str) -> BTreeMap<String, CommandStat> {
    let mut stats = BTreeMap::new();
    for line in info.lines() {
        let Some((name, fields)) = line
            .trim()
            .strip_prefix("cmdstat_")
            .and_then(|l| l.split_once(':'))
        else {
            continue;
        };
        if OWN
            .iter()
            .any(|own| name == *own || name.starts_with(&format!("{own}|")))
        {
            continue;
        }
        let mut stat = CommandStat::default();
        for field in fields.split(',') {
            match field.split_once('=') {
                Some(("calls", n)) => stat.calls = n.parse().unwrap_or(0),
                Some(("usec", n)) => stat.usec = n.parse().unwrap_or(0),
                _ => {}
            }
        }
        stats.insert(name.to_owned(), stat);
    }
    stats
}

/// The server's user + system CPU so far, in seconds (`INFO cpu`).
pub(crate) async fn server_cpu(conn: &mut MultiplexedConnection) -> anyhow::Result<f64> {
    let info: String = redis::cmd("INFO").arg("cpu").query_async(conn).await?;
    let cpu = info.lines().filter_map(|line| {
        let (name, value) = line.trim().split_once(':')?;
        let counted = name == "used_cpu_sys" || name == "used_cpu_user";
        counted.then(|| value.parse::<f64>().ok()).flatten()
    });
    Ok(cpu.sum())
}

/// Empties the server (`FLUSHALL`) and its counters (`CONFIG RESETSTAT`).
pub(crate) async fn flush(conn: &mut MultiplexedConnection) -> anyhow::Result<()> {
    let () = redis::cmd("FLUSHALL").query_async(conn).await?;
    reset_stats(conn).await
}

/// Resets the server's counters (`CONFIG RESETSTAT`).
pub(crate) async fn reset_stats(conn: &mut MultiplexedConnection) -> anyhow::Result<()> {
    let () = redis::cmd("CONFIG")
        .arg("RESETSTAT")
        .query_async(conn)
        .await?;
    Ok(())
}

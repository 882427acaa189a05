//! What the Redis server says it did: `INFO commandstats` (calls and
//! microseconds per command) and `INFO cpu`.

use std::collections::BTreeMap;

use redis::aio::MultiplexedConnection;

/// The benchmark's own commands, left out of the counts.
const OWN: [&str; 3] = ["info", "config", "flushall"];

/// One command's calls and time.
pub(crate) use corral_testkit::CommandTime as CommandStat;

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
    let own = |name: &str| {
        OWN.iter().any(|own| {
            name == *own
                || name
                    .strip_prefix(own)
                    .is_some_and(|sub| sub.starts_with('|'))
        })
    };
    corral_testkit::parse_command_times(info)
        .into_iter()
        .filter(|(name, _)| !own(name))
        .collect()
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

//! A three-master Redis Cluster on loopback ports.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::process::Command;
use std::thread;
use std::time::{Duration, Instant};

use crate::server::{info_field, PortNeeds};
use crate::{log_tail, process, resp, RedisServer};

/// Number of masters in the cluster.
const NODES: usize = 3;
/// How long `redis-cli --cluster create` may take.
const CREATE_TIMEOUT: Duration = Duration::from_secs(30);
/// How long to wait, after `create`, for every node to report a healthy,
/// agreed slot map.
const AGREE_TIMEOUT: Duration = Duration::from_secs(10);

/// Three `redis-server` masters (no replicas) joined into a cluster by
/// `redis-cli --cluster create`, covering all 16384 slots.
///
/// Each node is an ordinary [`RedisServer`] (with `--cluster-enabled yes`,
/// `--cluster-node-timeout 5000` and its `nodes.conf` in its own temp dir)
/// whose cluster bus port (`port + 10000`) was also free. All nodes are killed
/// on drop.
#[derive(Debug)]
pub struct RedisCluster {
    nodes: Vec<RedisServer>,
}

impl RedisCluster {
    /// Starts three cluster-enabled masters, runs
    /// `redis-cli --cluster create ... --cluster-replicas 0 --cluster-yes`,
    /// then waits (at most 10 s) until `CLUSTER INFO` reports
    /// `cluster_state:ok` on every node and all nodes agree on the slot map.
    ///
    /// # Panics
    ///
    /// If any step fails; the message holds every node's log tail.
    pub fn start() -> RedisCluster {
        let args = [
            "--cluster-enabled",
            "yes",
            "--cluster-config-file",
            "nodes.conf",
            "--cluster-node-timeout",
            "5000",
        ];
        let nodes = (0..NODES)
            .map(|_| RedisServer::start_inner(&args, PortNeeds::WithClusterBus))
            .collect();
        let cluster = RedisCluster { nodes };

        let mut create = Command::new(process::redis_cli_bin());
        create.arg("--cluster").arg("create");
        for node in &cluster.nodes {
            create.arg(format!("127.0.0.1:{}", node.port()));
        }
        create.args(["--cluster-replicas", "0", "--cluster-yes"]);
        match process::run(&mut create, CREATE_TIMEOUT) {
            Ok(done) if done.status.success() => {}
            Ok(done) => cluster.fail(&format!(
                "redis-cli --cluster create failed\n{}",
                done.describe()
            )),
            Err(e) => cluster.fail(&format!("redis-cli --cluster create: {e}")),
        }

        cluster.wait_until_agreed();
        cluster
    }

    /// The nodes, in start order.
    pub fn nodes(&self) -> &[RedisServer] {
        &self.nodes
    }

    /// Every node's URL (`redis://127.0.0.1:PORT/`), e.g. as cluster client
    /// seeds.
    pub fn urls(&self) -> Vec<String> {
        self.nodes.iter().map(RedisServer::url).collect()
    }

    /// [`RedisServer::command_stats`] summed over all nodes.
    ///
    /// # Panics
    ///
    /// If a node does not answer.
    pub fn command_stats(&self) -> BTreeMap<String, u64> {
        let mut total = BTreeMap::new();
        for node in &self.nodes {
            for (name, calls) in node.command_stats() {
                *total.entry(name).or_insert(0) += calls;
            }
        }
        total
    }

    /// [`RedisServer::reset_stats`] on every node.
    ///
    /// # Panics
    ///
    /// If a node does not answer.
    pub fn reset_stats(&self) {
        for node in &self.nodes {
            node.reset_stats();
        }
    }

    /// Every node's log tail, labelled by port.
    pub fn logs(&self) -> String {
        let mut out = String::new();
        for node in &self.nodes {
            let _ = write!(
                out,
                "--- node 127.0.0.1:{} log tail ---\n{}",
                node.port(),
                log_tail(&node.log())
            );
        }
        out
    }

    fn fail(&self, why: &str) -> ! {
        panic!("corral-testkit: redis cluster: {why}\n{}", self.logs())
    }

    /// Polls until every node says `cluster_state:ok` with all slots assigned
    /// and all nodes known, and all nodes report the same slot map.
    fn wait_until_agreed(&self) {
        let deadline = Instant::now() + AGREE_TIMEOUT;
        loop {
            let last = match self.check_agreed() {
                Ok(()) => return,
                Err(why) => why,
            };
            if Instant::now() >= deadline {
                self.fail(&format!(
                    "nodes did not agree on a healthy cluster within {AGREE_TIMEOUT:?}; last check: {last}"
                ));
            }
            thread::sleep(Duration::from_millis(20));
        }
    }

    fn check_agreed(&self) -> Result<(), String> {
        let mut first_map: Option<(u16, Vec<String>)> = None;
        for node in &self.nodes {
            let port = node.port();
            let ask = |args: &[&str]| -> Result<String, String> {
                resp::command(port, args, Duration::from_secs(2))
                    .map(Option::unwrap_or_default)
                    .map_err(|e| format!("node {port}: {e}"))
            };
            let info = ask(&["CLUSTER", "INFO"])?;
            for (field, want) in [
                ("cluster_state", "ok".to_owned()),
                ("cluster_slots_assigned", "16384".to_owned()),
                ("cluster_known_nodes", NODES.to_string()),
            ] {
                let got = info_field(&info, field);
                if got != Some(want.as_str()) {
                    return Err(format!("node {port}: {field} is {got:?}, want {want}"));
                }
            }
            let map = slot_map(&ask(&["CLUSTER", "NODES"])?);
            match &first_map {
                None => first_map = Some((port, map)),
                Some((first_port, first)) if *first != map => {
                    return Err(format!(
                        "slot maps differ: node {first_port} sees {first:?}, node {port} sees {map:?}"
                    ));
                }
                Some(_) => {}
            }
        }
        Ok(())
    }
}

/// The slot ownership in a `CLUSTER NODES` reply, as sorted
/// `"ip:port slot-ranges..."` strings (flags and timings left out, so every
/// node reports the same text once they agree).
fn slot_map(nodes: &str) -> Vec<String> {
    let mut map: Vec<String> = nodes
        .lines()
        .filter_map(|line| {
            let fields: Vec<&str> = line.split_whitespace().collect();
            let addr = fields.get(1)?.split('@').next()?;
            let slots: Vec<&str> = fields
                .get(8..)
                .unwrap_or_default()
                .iter()
                .copied()
                .filter(|s| !s.starts_with('['))
                .collect();
            Some(format!("{addr} {}", slots.join(" ")))
        })
        .collect();
    map.sort();
    map
}

#[cfg(test)]
mod tests {
    use super::slot_map;

    #[test]
    fn slot_map_ignores_flags_and_migrations() {
        let a = "aaa 127.0.0.1:7001@17001 myself,master - 0 0 1 connected 0-5460\n\
                 bbb 127.0.0.1:7002@17002 master - 0 1700000000000 2 connected 5461-10922 [42->-ccc]\n\
                 ccc 127.0.0.1:7003@17003,host master - 0 1700000000001 3 connected 10923-16383\n";
        let b = "ccc 127.0.0.1:7003@17003 myself,master - 0 0 3 connected 10923-16383\n\
                 aaa 127.0.0.1:7001@17001 master - 0 1700000000002 1 connected 0-5460\n\
                 bbb 127.0.0.1:7002@17002 master - 0 1700000000003 2 connected 5461-10922\n";
        assert_eq!(slot_map(a), slot_map(b));
        assert_eq!(
            slot_map(a),
            vec![
                "127.0.0.1:7001 0-5460",
                "127.0.0.1:7002 5461-10922",
                "127.0.0.1:7003 10923-16383"
            ]
        );
    }
}

//! A three-master Redis Cluster on loopback ports, optionally with one
//! replica per master for failover tests.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::process::Command;
use std::thread;
use std::time::{Duration, Instant};

use crate::server::{info_field, PortNeeds};
use crate::{log_tail, process, resp, RedisServer};

/// Number of masters in the cluster.
const MASTERS: usize = 3;
/// How long `redis-cli --cluster create` may take.
const CREATE_TIMEOUT: Duration = Duration::from_secs(30);
/// How long to wait, after `create`, for every node to report a healthy,
/// agreed slot map (and, with replicas, for every replica to be in sync).
const AGREE_TIMEOUT: Duration = Duration::from_secs(20);
/// `--cluster-node-timeout` of a cluster without replicas.
const NODE_TIMEOUT_MS: &str = "5000";
/// `--cluster-node-timeout` of a cluster with replicas: short, so a killed
/// master is failed over in a few seconds.
const FAILOVER_NODE_TIMEOUT_MS: &str = "1000";
/// How long [`RedisCluster::wait_for_failover`] waits.
const FAILOVER_TIMEOUT: Duration = Duration::from_secs(20);
/// Timeout of one fixture request to a node.
const ASK_TIMEOUT: Duration = Duration::from_secs(2);

/// Three `redis-server` masters joined into a cluster by
/// `redis-cli --cluster create`, covering all 16384 slots; with
/// [`start_with_replicas`](Self::start_with_replicas), each master also has
/// one replica that takes over when it dies.
///
/// Each node is an ordinary [`RedisServer`] (with `--cluster-enabled yes`,
/// a `--cluster-node-timeout` and its `nodes.conf` in its own temp dir)
/// whose cluster bus port (`port + 10000`) was also free. All nodes are killed
/// on drop.
#[derive(Debug)]
pub struct RedisCluster {
    nodes: Vec<RedisServer>,
    replicas: usize,
}

impl RedisCluster {
    /// Starts three cluster-enabled masters (`--cluster-node-timeout 5000`),
    /// runs `redis-cli --cluster create ... --cluster-replicas 0 --cluster-yes`,
    /// then waits (at most 20 s) until `CLUSTER INFO` reports
    /// `cluster_state:ok` on every node and all nodes agree on the slot map.
    ///
    /// # Panics
    ///
    /// If any step fails; the message holds every node's log tail.
    pub fn start() -> RedisCluster {
        Self::start_inner(0, NODE_TIMEOUT_MS)
    }

    /// Starts three masters and three replicas (six nodes, in that order:
    /// `redis-cli` makes the first three masters) with
    /// `--cluster-node-timeout 1000`, so a killed master's replica is
    /// promoted within a few seconds; runs
    /// `redis-cli --cluster create ... --cluster-replicas 1 --cluster-yes`,
    /// then waits (at most 20 s) until every node reports `cluster_state:ok`,
    /// all agree on the slot map and roles, and every replica's link to its
    /// master is up with no sync in progress.
    ///
    /// # Panics
    ///
    /// As [`start`](Self::start).
    pub fn start_with_replicas() -> RedisCluster {
        Self::start_inner(1, FAILOVER_NODE_TIMEOUT_MS)
    }

    fn start_inner(replicas: usize, node_timeout_ms: &str) -> RedisCluster {
        let args = [
            "--cluster-enabled",
            "yes",
            "--cluster-config-file",
            "nodes.conf",
            "--cluster-node-timeout",
            node_timeout_ms,
        ];
        let nodes = (0..MASTERS * (1 + replicas))
            .map(|_| RedisServer::start_inner(&args, PortNeeds::WithClusterBus))
            .collect();
        let cluster = RedisCluster { nodes, replicas };

        let mut create = Command::new(process::redis_cli_bin());
        create.arg("--cluster").arg("create");
        for node in &cluster.nodes {
            create.arg(format!("127.0.0.1:{}", node.port()));
        }
        create.args(["--cluster-replicas", &replicas.to_string(), "--cluster-yes"]);
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
            let info = ask(port, &["CLUSTER", "INFO"])?;
            for (field, want) in [
                ("cluster_state", "ok".to_owned()),
                ("cluster_slots_assigned", "16384".to_owned()),
                ("cluster_known_nodes", self.nodes.len().to_string()),
            ] {
                let got = info_field(&info, field);
                if got != Some(want.as_str()) {
                    return Err(format!("node {port}: {field} is {got:?}, want {want}"));
                }
            }
            let nodes = ask(port, &["CLUSTER", "NODES"])?;
            let view = parse_nodes(&nodes);
            let replicas = view.iter().filter(|n| n.is_replica()).count();
            if replicas != MASTERS * self.replicas {
                return Err(format!(
                    "node {port} sees {replicas} replicas, want {}",
                    MASTERS * self.replicas
                ));
            }
            if let Some(odd) = view.iter().find(|n| !n.is_healthy()) {
                return Err(format!("node {port} sees {} as {:?}", odd.port, odd.flags));
            }
            if view.iter().any(|n| n.myself && n.is_replica()) {
                let replication = ask(port, &["INFO", "replication"])?;
                for (field, want) in [
                    ("master_link_status", "up"),
                    ("master_sync_in_progress", "0"),
                ] {
                    let got = info_field(&replication, field);
                    if got != Some(want) {
                        return Err(format!("replica {port}: {field} is {got:?}, want {want}"));
                    }
                }
            }
            let map = slot_map(&nodes);
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

    /// The hash slot of `key` (`CLUSTER KEYSLOT`, asked of a running node).
    ///
    /// # Panics
    ///
    /// If no running node answers.
    pub fn slot_of(&self, key: &str) -> u16 {
        let reply = self.ask_any(&["CLUSTER", "KEYSLOT", key]);
        reply
            .parse()
            .unwrap_or_else(|_| self.fail(&format!("CLUSTER KEYSLOT {key:?} answered {reply:?}")))
    }

    /// The index (in [`nodes`](Self::nodes)) of the master that serves
    /// `key`'s slot, as a running node sees it (`CLUSTER NODES`).
    ///
    /// # Panics
    ///
    /// If no running node answers, or none of the nodes serves the slot.
    pub fn master_of(&self, key: &str) -> usize {
        let slot = self.slot_of(key);
        let view = parse_nodes(&self.ask_any(&["CLUSTER", "NODES"]));
        view.iter()
            .find(|n| n.is_master() && n.serves(slot))
            .and_then(|n| self.index_of(n.port))
            .unwrap_or_else(|| self.fail(&format!("no node serves slot {slot}")))
    }

    /// Kills node `index` (`SIGKILL`, see [`RedisServer::kill`]); it stays
    /// dead. With replicas, [`wait_for_failover`](Self::wait_for_failover)
    /// then waits for its replica to take over.
    ///
    /// # Panics
    ///
    /// If `index` is out of range.
    pub fn kill(&mut self, index: usize) {
        self.nodes[index].kill();
    }

    /// Restarts every node, killed or not, on its port and with its
    /// directory — so with its `nodes.conf`: the cluster comes back with the
    /// same nodes and slot map, and no data — then waits (at most 20 s)
    /// until the nodes agree on a healthy cluster again.
    ///
    /// # Panics
    ///
    /// If a node cannot be restarted or they do not agree in time.
    pub fn restart_all(&mut self) {
        for node in &mut self.nodes {
            node.restart();
        }
        self.wait_until_agreed();
    }

    /// After the master of `key`'s slot, node `dead`, was
    /// [killed](Self::kill): polls (at most 20 s) until every running node
    /// reports `cluster_state:ok` and all of them see the slot served by the
    /// same running master (the promoted replica). Returns that master's
    /// index.
    ///
    /// # Panics
    ///
    /// If that does not happen in time; the message holds the last check
    /// and every node's log tail.
    pub fn wait_for_failover(&self, key: &str, dead: usize) -> usize {
        let slot = self.slot_of(key);
        let deadline = Instant::now() + FAILOVER_TIMEOUT;
        loop {
            let last = match self.check_failed_over(slot, dead) {
                Ok(index) => return index,
                Err(why) => why,
            };
            if Instant::now() >= deadline {
                self.fail(&format!(
                    "slot {slot} was not failed over within {FAILOVER_TIMEOUT:?}; last check: {last}"
                ));
            }
            thread::sleep(Duration::from_millis(20));
        }
    }

    fn check_failed_over(&self, slot: u16, dead: usize) -> Result<usize, String> {
        let mut owner = None;
        for (index, node) in self.nodes.iter().enumerate() {
            if index == dead || !node.is_running() {
                continue;
            }
            let port = node.port();
            let info = ask(port, &["CLUSTER", "INFO"])?;
            let state = info_field(&info, "cluster_state");
            if state != Some("ok") {
                return Err(format!("node {port}: cluster_state is {state:?}"));
            }
            let view = parse_nodes(&ask(port, &["CLUSTER", "NODES"])?);
            let serving = view
                .iter()
                .find(|n| n.is_master() && n.serves(slot))
                .and_then(|n| self.index_of(n.port));
            match serving {
                Some(i) if i != dead && self.nodes[i].is_running() => match owner {
                    None => owner = Some(i),
                    Some(o) if o != i => {
                        return Err(format!("nodes disagree on slot {slot}: {o} or {i}"));
                    }
                    Some(_) => {}
                },
                other => {
                    return Err(format!("node {port} sees slot {slot} served by {other:?}"));
                }
            }
        }
        owner.ok_or_else(|| "no running node".to_owned())
    }

    /// Asks the first running node that answers.
    fn ask_any(&self, args: &[&str]) -> String {
        let mut last = String::from("no running node");
        for node in self.nodes.iter().filter(|n| n.is_running()) {
            match ask(node.port(), args) {
                Ok(reply) => return reply,
                Err(e) => last = e,
            }
        }
        self.fail(&format!("{args:?}: {last}"))
    }

    /// The indices (in [`nodes`](Self::nodes)) of the nodes of `key`'s
    /// shard: the master that serves its slot first, then its replicas, as
    /// a running node sees them (`CLUSTER NODES`).
    ///
    /// # Panics
    ///
    /// If no running node answers, or none of the nodes serves the slot.
    pub fn shard_of(&self, key: &str) -> Vec<usize> {
        let slot = self.slot_of(key);
        let view = parse_nodes(&self.ask_any(&["CLUSTER", "NODES"]));
        let Some(master) = view.iter().find(|n| n.is_master() && n.serves(slot)) else {
            self.fail(&format!("no node serves slot {slot}"))
        };
        std::iter::once(master)
            .chain(view.iter().filter(|n| n.master == master.id))
            .filter_map(|n| self.index_of(n.port))
            .collect()
    }

    /// Moves `slot`, with its keys, to the master at `to` (an index in
    /// [`nodes`](Self::nodes)), as a resharding does: `CLUSTER SETSLOT ...
    /// IMPORTING`/`MIGRATING`, `MIGRATE` of every key in it, then `CLUSTER
    /// SETSLOT ... NODE` on every master; waits until all nodes agree on
    /// the slot map. The old owner drops its sharded subscriptions of the
    /// slot (`SUNSUBSCRIBE` pushed to their clients).
    ///
    /// # Panics
    ///
    /// If a step fails or the nodes do not agree within 20 s; the message
    /// holds every node's log tail.
    pub fn move_slot(&self, slot: u16, to: usize) {
        let view = parse_nodes(&self.ask_any(&["CLUSTER", "NODES"]));
        let Some(from) = view.iter().find(|n| n.is_master() && n.serves(slot)) else {
            self.fail(&format!("no node serves slot {slot}"))
        };
        let port = self.nodes[to].port();
        let Some(target) = view.iter().find(|n| n.port == port && n.is_master()) else {
            self.fail(&format!("node {to} is not a master"))
        };
        if from.port == target.port {
            return;
        }
        let Some(source) = self.index_of(from.port).map(|i| &self.nodes[i]) else {
            self.fail(&format!(
                "node on port {} is not in this cluster",
                from.port
            ))
        };
        let slot_text = slot.to_string();
        let destination = &self.nodes[to];
        destination.cli(&["CLUSTER", "SETSLOT", &slot_text, "IMPORTING", &from.id]);
        source.cli(&["CLUSTER", "SETSLOT", &slot_text, "MIGRATING", &target.id]);
        loop {
            let keys = source.cli(&["CLUSTER", "GETKEYSINSLOT", &slot_text, "100"]);
            let keys: Vec<&str> = keys.lines().filter(|k| !k.is_empty()).collect();
            if keys.is_empty() {
                break;
            }
            let port_text = port.to_string();
            let mut migrate = vec!["MIGRATE", "127.0.0.1", &port_text, "", "0", "5000", "KEYS"];
            migrate.extend(keys);
            source.cli(&migrate);
        }
        // The new owner first, then the old one, then the rest (replicas
        // refuse SETSLOT and learn it from their masters).
        let others = self
            .nodes
            .iter()
            .filter(|n| n.is_running() && n.port() != port && n.port() != from.port);
        for node in [destination, source].into_iter().chain(others) {
            let _ = node.try_cli(&["CLUSTER", "SETSLOT", &slot_text, "NODE", &target.id]);
        }
        self.wait_until_agreed();
    }

    /// A numeric field of node `index`'s `CLUSTER INFO` (0 when absent),
    /// e.g. `cluster_stats_messages_publish_received`.
    ///
    /// # Panics
    ///
    /// If the node does not answer.
    pub fn cluster_info(&self, index: usize, field: &str) -> u64 {
        let port = self.nodes[index].port();
        let info = ask(port, &["CLUSTER", "INFO"]).unwrap_or_else(|e| self.fail(&e));
        info_field(&info, field)
            .and_then(|value| value.parse().ok())
            .unwrap_or(0)
    }

    fn index_of(&self, port: u16) -> Option<usize> {
        self.nodes.iter().position(|n| n.port() == port)
    }
}

/// One request to a node, `nil` read as `""`.
fn ask(port: u16, args: &[&str]) -> Result<String, String> {
    resp::command(port, args, ASK_TIMEOUT)
        .map(Option::unwrap_or_default)
        .map_err(|e| format!("node {port}: {e}"))
}

/// One line of `CLUSTER NODES`.
struct NodeLine {
    id: String,
    /// The id of its master (`-` for a master).
    master: String,
    port: u16,
    myself: bool,
    flags: Vec<String>,
    slots: Vec<(u16, u16)>,
}

impl NodeLine {
    fn has(&self, flag: &str) -> bool {
        self.flags.iter().any(|f| f == flag)
    }

    fn is_master(&self) -> bool {
        self.has("master") && !self.has("fail")
    }

    fn is_replica(&self) -> bool {
        self.has("slave")
    }

    fn is_healthy(&self) -> bool {
        !["fail", "fail?", "handshake", "noaddr"]
            .iter()
            .any(|f| self.has(f))
    }

    fn serves(&self, slot: u16) -> bool {
        self.slots.iter().any(|&(lo, hi)| (lo..=hi).contains(&slot))
    }
}

/// Parses a `CLUSTER NODES` reply (importing/migrating entries left out).
fn parse_nodes(nodes: &str) -> Vec<NodeLine> {
    nodes
        .lines()
        .filter_map(|line| {
            let fields: Vec<&str> = line.split_whitespace().collect();
            let addr = fields.get(1)?.split('@').next()?;
            let port = addr.rsplit(':').next()?.parse().ok()?;
            let flags: Vec<String> = fields.get(2)?.split(',').map(str::to_owned).collect();
            let slots = fields
                .get(8..)
                .unwrap_or_default()
                .iter()
                .filter(|s| !s.starts_with('['))
                .filter_map(|s| match s.split_once('-') {
                    Some((lo, hi)) => Some((lo.parse().ok()?, hi.parse().ok()?)),
                    None => s.parse().ok().map(|one| (one, one)),
                })
                .collect();
            Some(NodeLine {
                id: (*fields.first()?).to_owned(),
                master: (*fields.get(3)?).to_owned(),
                port,
                myself: flags.iter().any(|f| f == "myself"),
                flags,
                slots,
            })
        })
        .collect()
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
    use super::{parse_nodes, slot_map};

    #[test]
    fn parses_roles_and_slots() {
        let text = "aaa 127.0.0.1:7001@17001 myself,master - 0 0 1 connected 0-5460 7000\n\
                    bbb 127.0.0.1:7002@17002 slave aaa 0 1700000000000 1 connected\n\
                    ccc 127.0.0.1:7003@17003 master,fail - 0 1700000000001 3 disconnected\n";
        let view = parse_nodes(text);
        assert_eq!(view.len(), 3);
        assert!(view[0].myself && view[0].is_master());
        assert!(view[0].serves(0) && view[0].serves(5460) && view[0].serves(7000));
        assert!(!view[0].serves(5461));
        assert!(view[1].is_replica() && !view[1].myself);
        assert!(!view[2].is_master() && !view[2].is_healthy());
        assert_eq!(view[2].port, 7003);
    }

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

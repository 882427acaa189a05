//! A Redis Sentinel group on loopback ports: a master, one replica and
//! three `redis-sentinel` processes (quorum 2), for failover tests.

use std::fs::{self, OpenOptions};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use tempfile::TempDir;

use crate::server::{free_port, info_field, PortNeeds};
use crate::{log_tail, resp, RedisServer};

/// The name the sentinels monitor the group under.
pub const SENTINEL_MASTER_NAME: &str = "corral-master";
/// How many sentinels run.
const SENTINELS: usize = 3;
/// Sentinels that must agree the master is down.
const QUORUM: usize = 2;
/// `down-after-milliseconds`: how long a master may not answer before the
/// sentinels consider it down.
const DOWN_AFTER_MS: u64 = 500;
/// `failover-timeout`: also the pause before a failed failover is tried
/// again (twice this).
const FAILOVER_TIMEOUT_MS: u64 = 2000;
/// How long the start waits for the replica to sync and the sentinels to
/// see each other and the replica.
const READY_TIMEOUT: Duration = Duration::from_secs(30);
/// How long [`RedisSentinel::wait_failover`] waits.
const FAILOVER_TIMEOUT: Duration = Duration::from_secs(30);
/// Timeout of one fixture request.
const ASK_TIMEOUT: Duration = Duration::from_secs(2);
/// How many ports a sentinel start tries.
const PORT_ATTEMPTS: usize = 8;

/// A master and one replica (ordinary [`RedisServer`]s, the replica with
/// `--replicaof`) watched by three `redis-sentinel` processes under
/// [`SENTINEL_MASTER_NAME`], with quorum 2, `down-after-milliseconds 500`
/// and `failover-timeout 2000`: a killed master is replaced by its replica
/// within a few seconds. Everything is killed on drop; failures panic with
/// every log tail.
///
/// The sentinel binary is `redis-sentinel` from `PATH`, or
/// `CORRAL_REDIS_SENTINEL`.
#[derive(Debug)]
pub struct RedisSentinel {
    nodes: Vec<RedisServer>,
    master: usize,
    sentinels: Vec<SentinelProcess>,
}

impl RedisSentinel {
    /// Starts the master, the replica (and waits until it is in sync), then
    /// the three sentinels, and waits (at most 30 s) until every sentinel
    /// sees the master as healthy with one replica and two other
    /// sentinels.
    ///
    /// # Panics
    ///
    /// If any step fails; the message holds every log tail.
    pub fn start() -> RedisSentinel {
        let master = RedisServer::start();
        let port = master.port().to_string();
        let replica = RedisServer::start_with(&["--replicaof", "127.0.0.1", &port]);
        let mut group = RedisSentinel {
            nodes: vec![master, replica],
            master: 0,
            sentinels: Vec::new(),
        };
        group.wait_until(READY_TIMEOUT, "the replica to sync", |g| {
            let info = ask(g.nodes[1].port(), &["INFO", "replication"])?;
            match info_field(&info, "master_link_status") {
                Some("up") => Ok(()),
                other => Err(format!("master_link_status {other:?}")),
            }
        });
        for _ in 0..SENTINELS {
            let sentinel = SentinelProcess::start(group.nodes[0].port())
                .unwrap_or_else(|why| group.fail(&why));
            group.sentinels.push(sentinel);
        }
        group.wait_until(READY_TIMEOUT, "the sentinels to agree", |g| {
            let want = format!("status=ok,address=127.0.0.1:{port},slaves=1,sentinels={SENTINELS}");
            for sentinel in &g.sentinels {
                let view = sentinel.master_line()?;
                if !view.contains(&want) {
                    return Err(format!("sentinel {}: {view}", sentinel.port));
                }
            }
            Ok(())
        });
        group
    }

    /// The sentinels' URLs, `redis://127.0.0.1:PORT/`.
    pub fn sentinel_urls(&self) -> Vec<String> {
        self.sentinels
            .iter()
            .map(|s| format!("redis://127.0.0.1:{}/", s.port))
            .collect()
    }

    /// The name the group is monitored under ([`SENTINEL_MASTER_NAME`]).
    pub fn master_name(&self) -> &str {
        SENTINEL_MASTER_NAME
    }

    /// The current master, as the fixture knows it (the one started first,
    /// or the one [`wait_failover`](Self::wait_failover) found).
    pub fn master(&self) -> &RedisServer {
        &self.nodes[self.master]
    }

    /// The master and the replica, in the order they were started.
    pub fn nodes(&self) -> &[RedisServer] {
        &self.nodes
    }

    /// Kills the current master (`SIGKILL`); it stays dead.
    pub fn kill_master(&mut self) {
        self.nodes[self.master].kill();
    }

    /// After [`kill_master`](Self::kill_master): polls (at most 30 s) until
    /// every sentinel names the replica as the master and the replica says
    /// it is one. Returns the new master's URL.
    ///
    /// # Panics
    ///
    /// If that does not happen in time; the message holds the last check
    /// and every log tail.
    pub fn wait_failover(&mut self) -> String {
        let dead = self.master;
        let new = 1 - dead;
        let port = self.nodes[new].port();
        self.wait_until(FAILOVER_TIMEOUT, "the failover", |g| {
            for sentinel in &g.sentinels {
                let view = sentinel.master_line()?;
                if !view.contains(&format!("address=127.0.0.1:{port},")) {
                    return Err(format!("sentinel {}: {view}", sentinel.port));
                }
            }
            let info = ask(port, &["INFO", "replication"])?;
            match info_field(&info, "role") {
                Some("master") => Ok(()),
                other => Err(format!("node {port} has role {other:?}")),
            }
        });
        self.master = new;
        self.nodes[new].url()
    }

    /// A manual failover (`SENTINEL FAILOVER`): the replica is promoted
    /// and the old master, still running, becomes its replica. Waits as
    /// [`wait_failover`](Self::wait_failover) does and returns the new
    /// master's URL.
    ///
    /// # Panics
    ///
    /// If a sentinel refuses the failover or it does not happen in time.
    pub fn failover(&mut self) -> String {
        let port = self.sentinels[0].port;
        if let Err(why) = ask(port, &["SENTINEL", "FAILOVER", SENTINEL_MASTER_NAME]) {
            self.fail(&format!("SENTINEL FAILOVER: {why}"));
        }
        self.wait_failover()
    }

    /// Swaps the roles by hand, as an operator would, without the
    /// sentinels' own failover (which ends with `CLIENT KILL TYPE normal`
    /// on the demoted master): `REPLICAOF NO ONE` on the replica,
    /// `REPLICAOF` the new master on the old one — whose clients stay
    /// connected and get `READONLY` for writes — then every sentinel is
    /// pointed at the new master (`SENTINEL REMOVE` + `SENTINEL MONITOR`).
    /// Waits (at most 30 s) until every sentinel names it, and returns its
    /// URL.
    ///
    /// # Panics
    ///
    /// If a command fails or the sentinels do not name the new master in
    /// time.
    pub fn swap_roles_by_hand(&mut self) -> String {
        let new = 1 - self.master;
        let (old_port, new_port) = (self.nodes[self.master].port(), self.nodes[new].port());
        let new_port_text = new_port.to_string();
        let mut steps: Vec<(u16, Vec<String>)> = vec![
            (
                new_port,
                vec!["REPLICAOF".into(), "NO".into(), "ONE".into()],
            ),
            (
                old_port,
                vec![
                    "REPLICAOF".into(),
                    "127.0.0.1".into(),
                    new_port_text.clone(),
                ],
            ),
        ];
        for sentinel in &self.sentinels {
            let name = SENTINEL_MASTER_NAME.to_owned();
            steps.push((
                sentinel.port,
                vec!["SENTINEL".into(), "REMOVE".into(), name.clone()],
            ));
            steps.push((
                sentinel.port,
                vec![
                    "SENTINEL".into(),
                    "MONITOR".into(),
                    name.clone(),
                    "127.0.0.1".into(),
                    new_port_text.clone(),
                    QUORUM.to_string(),
                ],
            ));
            steps.push((
                sentinel.port,
                vec![
                    "SENTINEL".into(),
                    "SET".into(),
                    name,
                    "down-after-milliseconds".into(),
                    DOWN_AFTER_MS.to_string(),
                ],
            ));
        }
        for (port, args) in &steps {
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            if let Err(why) = ask(*port, &args) {
                self.fail(&format!("{args:?} on {port}: {why}"));
            }
        }
        self.wait_until(
            FAILOVER_TIMEOUT,
            "the sentinels to name the new master",
            |g| {
                for sentinel in &g.sentinels {
                    let view = sentinel.master_line()?;
                    if !view.contains(&format!("address=127.0.0.1:{new_port},")) {
                        return Err(format!("sentinel {}: {view}", sentinel.port));
                    }
                }
                Ok(())
            },
        );
        self.master = new;
        self.nodes[new].url()
    }

    /// Every log: the two servers' and the sentinels'.
    pub fn logs(&self) -> String {
        let mut out = String::new();
        for node in &self.nodes {
            out.push_str(&format!(
                "--- redis-server 127.0.0.1:{} ---\n{}",
                node.port(),
                log_tail(&node.log())
            ));
        }
        for sentinel in &self.sentinels {
            out.push_str(&format!(
                "--- redis-sentinel 127.0.0.1:{} ---\n{}",
                sentinel.port,
                log_tail(&sentinel.log())
            ));
        }
        out
    }

    fn fail(&self, why: &str) -> ! {
        panic!("corral-testkit: sentinel group: {why}\n{}", self.logs())
    }

    /// Polls `check` every 20 ms until it passes, failing after `timeout`.
    fn wait_until(
        &self,
        timeout: Duration,
        what: &str,
        check: impl Fn(&Self) -> Result<(), String>,
    ) {
        let deadline = Instant::now() + timeout;
        loop {
            let last = match check(self) {
                Ok(()) => return,
                Err(why) => why,
            };
            if Instant::now() >= deadline {
                self.fail(&format!(
                    "waited {timeout:?} for {what}; last check: {last}"
                ));
            }
            thread::sleep(Duration::from_millis(20));
        }
    }
}

/// One `redis-sentinel` process, killed on drop.
#[derive(Debug)]
struct SentinelProcess {
    port: u16,
    child: Option<Child>,
    dir: TempDir,
}

impl SentinelProcess {
    /// Starts a sentinel monitoring the master on `master_port`, and waits
    /// until it answers `PING`.
    fn start(master_port: u16) -> Result<SentinelProcess, String> {
        let dir = tempfile::Builder::new()
            .prefix("corral-sentinel-")
            .tempdir()
            .map_err(|e| format!("cannot create a temp dir: {e}"))?;
        let mut sentinel = SentinelProcess {
            port: 0,
            child: None,
            dir,
        };
        let mut last = String::new();
        for _ in 0..PORT_ATTEMPTS {
            sentinel.port = free_port(PortNeeds::ClientOnly);
            match sentinel.spawn_and_wait(master_port) {
                Ok(()) => return Ok(sentinel),
                Err(why) => {
                    sentinel.kill();
                    last = why;
                    if !sentinel.log().contains("Address already in use") {
                        break;
                    }
                }
            }
        }
        Err(format!(
            "redis-sentinel did not start: {last}\n--- its log ---\n{}",
            log_tail(&sentinel.log())
        ))
    }

    fn spawn_and_wait(&mut self, master_port: u16) -> Result<(), String> {
        let dir = self.dir.path();
        let config = dir.join("sentinel.conf");
        let name = SENTINEL_MASTER_NAME;
        fs::write(
            &config,
            format!(
                "port {port}\nbind 127.0.0.1\ndaemonize no\ndir {dir}\nlogfile {log}\n\
                 sentinel monitor {name} 127.0.0.1 {master_port} {QUORUM}\n\
                 sentinel down-after-milliseconds {name} {DOWN_AFTER_MS}\n\
                 sentinel failover-timeout {name} {FAILOVER_TIMEOUT_MS}\n\
                 sentinel parallel-syncs {name} 1\n",
                port = self.port,
                dir = dir.display(),
                log = self.log_path().display(),
            ),
        )
        .map_err(|e| format!("cannot write {}: {e}", config.display()))?;
        let stdio = OpenOptions::new()
            .create(true)
            .append(true)
            .open(dir.join("stdio.log"))
            .and_then(|f| Ok((f.try_clone()?, f)))
            .map_err(|e| format!("cannot open stdio.log: {e}"))?;
        let binary =
            std::env::var_os("CORRAL_REDIS_SENTINEL").unwrap_or_else(|| "redis-sentinel".into());
        let child = Command::new(&binary)
            .arg(&config)
            .current_dir(dir)
            .stdin(Stdio::null())
            .stdout(stdio.0)
            .stderr(stdio.1)
            .spawn()
            .map_err(|e| {
                format!(
                    "cannot run {binary:?}: {e} (is Debian's redis-sentinel package installed? \
                     CORRAL_REDIS_SENTINEL may name another binary)"
                )
            })?;
        self.child = Some(child);
        let deadline = Instant::now() + READY_TIMEOUT;
        loop {
            if let Some(child) = self.child.as_mut() {
                if let Ok(Some(status)) = child.try_wait() {
                    return Err(format!("redis-sentinel exited during start: {status}"));
                }
            }
            if matches!(resp::command(self.port, &["PING"], ASK_TIMEOUT), Ok(Some(r)) if r == "PONG")
            {
                return Ok(());
            }
            if Instant::now() >= deadline {
                return Err(format!("did not answer PING within {READY_TIMEOUT:?}"));
            }
            thread::sleep(Duration::from_millis(10));
        }
    }

    /// The sentinel's `master0:` line of `INFO sentinel`.
    fn master_line(&self) -> Result<String, String> {
        let info = ask(self.port, &["INFO", "sentinel"])?;
        info_field(&info, "master0")
            .map(str::to_owned)
            .ok_or_else(|| format!("sentinel {}: no master0 in INFO sentinel", self.port))
    }

    fn log_path(&self) -> PathBuf {
        self.dir.path().join("sentinel.log")
    }

    fn log(&self) -> String {
        let mut log = fs::read_to_string(self.log_path()).unwrap_or_default();
        let stdio = fs::read_to_string(self.dir.path().join("stdio.log")).unwrap_or_default();
        if !stdio.trim().is_empty() {
            log.push_str("--- stdout/stderr ---\n");
            log.push_str(&stdio);
        }
        log
    }

    fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

impl Drop for SentinelProcess {
    fn drop(&mut self) {
        self.kill();
    }
}

/// One request to a node or sentinel, `nil` read as `""`.
fn ask(port: u16, args: &[&str]) -> Result<String, String> {
    resp::command(port, args, ASK_TIMEOUT)
        .map(Option::unwrap_or_default)
        .map_err(|e| format!("127.0.0.1:{port}: {e}"))
}

//! One `redis-server` process on a loopback port.

use std::collections::BTreeMap;
use std::fs::{self, OpenOptions};
use std::net::{Ipv4Addr, TcpListener};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::thread;
use std::time::{Duration, Instant};

use tempfile::TempDir;

use crate::{log_tail, process, resp};

/// How long [`RedisServer::start`] and [`RedisServer::restart`] wait for the
/// server to answer `PING`.
const READY_TIMEOUT: Duration = Duration::from_secs(10);
/// Timeout of one fixture-internal request (`INFO`, `CONFIG`, ...).
const REQUEST_TIMEOUT: Duration = Duration::from_secs(5);
/// Timeout of one [`RedisServer::cli`] run.
const CLI_TIMEOUT: Duration = Duration::from_secs(10);
/// How many ports `start` tries when the probed port was taken before
/// `redis-server` could bind it.
const PORT_ATTEMPTS: usize = 8;
/// Distance from the client port to the cluster bus port.
pub(crate) const CLUSTER_BUS_OFFSET: u16 = 10_000;
const LOG_FILE: &str = "redis.log";
const STDIO_FILE: &str = "stdio.log";

/// Which ports are acceptable for a new server.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum PortNeeds {
    /// Only the client port must be free.
    ClientOnly,
    /// The cluster bus port (`port + 10000`) must be free as well.
    WithClusterBus,
}

/// Why a start attempt failed.
enum StartError {
    /// The port was taken between probing and binding: try another one.
    PortTaken,
    /// Anything else: give up.
    Failed(String),
}

/// The PEM files of a TLS-only server ([`RedisServer::start_tls`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsFiles {
    /// The server's certificate chain (`--tls-cert-file`); it must name
    /// `127.0.0.1` (an IP subject alternative name) for clients that check
    /// the host.
    pub cert: PathBuf,
    /// The server's private key (`--tls-key-file`).
    pub key: PathBuf,
    /// The CA that signed `cert` (`--tls-ca-cert-file`); the fixture's own
    /// `redis-cli` runs trust it (`--cacert`).
    pub ca: PathBuf,
}

/// A `redis-server` child process on `127.0.0.1`, killed on drop.
///
/// It runs with `--save "" --appendonly no` (no persistence), a log file in
/// its own temporary directory, and `--enable-debug-command local` so tests
/// may use `DEBUG SLEEP` and friends. Dropping it — also while a test
/// panics — kills the process (continuing it first if frozen), waits for it
/// and removes the directory.
#[derive(Debug)]
pub struct RedisServer {
    port: u16,
    extra_args: Vec<String>,
    tls: Option<TlsFiles>,
    child: Mutex<Option<Child>>,
    frozen: AtomicBool,
    dir: TempDir,
}

impl RedisServer {
    /// Starts `redis-server` on a free loopback port with
    /// `--save "" --appendonly no` and a log file in a temp dir, and waits
    /// (at most 10 s) until it answers `PING`.
    ///
    /// Retries with another port if the probed port was taken before the
    /// server could bind it.
    ///
    /// # Panics
    ///
    /// If the server cannot be started or does not answer in time; the
    /// message holds the tail of the server log.
    pub fn start() -> RedisServer {
        Self::start_with(&[])
    }

    /// Like [`start`](Self::start), with extra `redis-server` arguments
    /// appended last (so they override the fixture's defaults), e.g.
    /// `&["--maxmemory", "10mb", "--maxmemory-policy", "allkeys-lru"]`.
    ///
    /// # Panics
    ///
    /// As [`start`](Self::start).
    pub fn start_with(args: &[&str]) -> RedisServer {
        Self::start_inner(args, PortNeeds::ClientOnly)
    }

    /// Starts a TLS-only `redis-server`: `--port 0 --tls-port PORT` with the
    /// certificate, key and CA of `files` and `--tls-auth-clients no`
    /// (clients need no certificate), then `args` (which may override
    /// those, e.g. `--tls-auth-clients yes`). Waits until it answers `PING`
    /// over TLS (through `redis-cli --tls --cacert`).
    ///
    /// [`port`](Self::port) is the TLS port, [`url`](Self::url) a
    /// `rediss://` URL; [`cli`](Self::cli), [`command_stats`](Self::command_stats)
    /// and [`ping_within`](Self::ping_within) go through `redis-cli --tls`.
    ///
    /// # Panics
    ///
    /// As [`start`](Self::start).
    pub fn start_tls(files: &TlsFiles, args: &[&str]) -> RedisServer {
        Self::start_configured(args, Some(files.clone()), PortNeeds::ClientOnly)
    }

    pub(crate) fn start_inner(args: &[&str], needs: PortNeeds) -> RedisServer {
        Self::start_configured(args, None, needs)
    }

    fn start_configured(args: &[&str], tls: Option<TlsFiles>, needs: PortNeeds) -> RedisServer {
        let dir = tempfile::Builder::new()
            .prefix("corral-redis-")
            .tempdir()
            .unwrap_or_else(|e| panic!("corral-testkit: cannot create a temp dir: {e}"));
        let mut server = RedisServer {
            port: 0,
            extra_args: args.iter().map(|&a| a.to_owned()).collect(),
            tls,
            child: Mutex::new(None),
            frozen: AtomicBool::new(false),
            dir,
        };
        for _ in 0..PORT_ATTEMPTS {
            server.port = free_port(needs);
            match server.spawn_and_wait() {
                Ok(()) => return server,
                Err(StartError::PortTaken) => server.kill(),
                Err(StartError::Failed(why)) => server.fail(&why),
            }
        }
        server.fail(&format!(
            "every one of {PORT_ATTEMPTS} probed ports was taken before redis-server could bind it"
        ))
    }

    /// The TCP port the server listens on (on `127.0.0.1`).
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The URL clients connect with: `redis://127.0.0.1:PORT/`, or
    /// `rediss://127.0.0.1:PORT/` for a [TLS server](Self::start_tls).
    pub fn url(&self) -> String {
        let scheme = if self.tls.is_some() {
            "rediss"
        } else {
            "redis"
        };
        format!("{scheme}://127.0.0.1:{}/", self.port)
    }

    /// The process id of the running server, or `None` after [`kill`](Self::kill).
    pub fn pid(&self) -> Option<u32> {
        self.lock_child().as_ref().map(Child::id)
    }

    /// The server's temporary directory (working dir, log file, cluster
    /// config file).
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// Suspends the server with `SIGSTOP`: connections are still accepted by
    /// the kernel but nothing is answered until [`thaw`](Self::thaw).
    ///
    /// # Panics
    ///
    /// If the server is not running or the signal cannot be sent.
    pub fn freeze(&self) {
        self.send_signal("STOP");
        self.frozen.store(true, Ordering::SeqCst);
    }

    /// Resumes a server suspended by [`freeze`](Self::freeze) (`SIGCONT`).
    ///
    /// # Panics
    ///
    /// If the server is not running or the signal cannot be sent.
    pub fn thaw(&self) {
        self.send_signal("CONT");
        self.frozen.store(false, Ordering::SeqCst);
    }

    /// Kills the server with `SIGKILL` and waits for it to exit. Does
    /// nothing if it is not running.
    pub fn kill(&mut self) {
        let child = self
            .child
            .get_mut()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        if let Some(mut child) = child {
            // SIGKILL also ends a stopped process; no SIGCONT needed here.
            let _ = child.kill();
            let _ = child.wait();
        }
        self.frozen.store(false, Ordering::SeqCst);
    }

    /// Kills the server if it is running and starts a new one on the same
    /// port, with the same arguments and directory (so the same log file) but
    /// empty data, and waits until it answers `PING`.
    ///
    /// # Panics
    ///
    /// If the new server cannot bind the port within 10 s or does not answer.
    pub fn restart(&mut self) {
        self.kill();
        let deadline = Instant::now() + READY_TIMEOUT;
        loop {
            match self.spawn_and_wait() {
                Ok(()) => return,
                Err(StartError::PortTaken) if Instant::now() < deadline => {
                    self.kill();
                    thread::sleep(Duration::from_millis(50));
                }
                Err(StartError::PortTaken) => self.fail(&format!(
                    "restart: port {} stayed taken by another process",
                    self.port
                )),
                Err(StartError::Failed(why)) => self.fail(&format!("restart: {why}")),
            }
        }
    }

    /// Whether the server process is alive (a frozen server counts as
    /// running).
    pub fn is_running(&self) -> bool {
        match self.lock_child().as_mut() {
            Some(child) => matches!(child.try_wait(), Ok(None)),
            None => false,
        }
    }

    /// The server log so far (all starts, including restarts), followed by
    /// anything the process wrote to stdout/stderr.
    pub fn log(&self) -> String {
        let mut log = fs::read_to_string(self.log_path()).unwrap_or_default();
        let stdio = fs::read_to_string(self.stdio_path()).unwrap_or_default();
        if !stdio.trim().is_empty() {
            log.push_str("--- redis-server stdout/stderr ---\n");
            log.push_str(&stdio);
        }
        log
    }

    /// Runs `redis-cli -h 127.0.0.1 -p PORT <args>` and returns its stdout,
    /// trimmed. Error replies come back as text (`redis-cli` prints them on
    /// stdout), e.g. `"ERR unknown command ..."`.
    ///
    /// # Panics
    ///
    /// If `redis-cli` cannot run, exits unsuccessfully (e.g. cannot connect)
    /// or takes longer than 10 s (e.g. the server is frozen); the message
    /// holds its output and the server log tail. Use
    /// [`try_cli`](Self::try_cli) to get that as an `Err` instead.
    pub fn cli(&self, args: &[&str]) -> String {
        self.try_cli(args)
            .unwrap_or_else(|e| self.fail(&format!("redis-cli {args:?}: {e}")))
    }

    /// Like [`cli`](Self::cli), but returns failures as `Err` with
    /// `redis-cli`'s output.
    pub fn try_cli(&self, args: &[&str]) -> Result<String, String> {
        self.cli_within(args, CLI_TIMEOUT)
    }

    /// Runs `redis-cli` (with `--tls --cacert` for a TLS server), bounded
    /// by `timeout`.
    fn cli_within(&self, args: &[&str], timeout: Duration) -> Result<String, String> {
        let mut command = Command::new(process::redis_cli_bin());
        command
            .args(["-h", "127.0.0.1", "-p"])
            .arg(self.port.to_string());
        if let Some(tls) = &self.tls {
            command.arg("--tls").arg("--cacert").arg(&tls.ca);
        }
        let finished = process::run(command.args(args), timeout)?;
        if finished.status.success() {
            Ok(finished.stdout.trim().to_owned())
        } else {
            Err(finished.describe())
        }
    }

    /// Sends `PING` on a fresh connection and reports whether `PONG` came
    /// back within `timeout` (applied to connect, write and read). A frozen
    /// or killed server gives `false`.
    pub fn ping_within(&self, timeout: Duration) -> bool {
        matches!(self.ask(&["PING"], timeout), Ok(Some(r)) if r == "PONG")
    }

    /// One command on a fresh connection (the fixture's own RESP client, or
    /// `redis-cli --tls` for a TLS server): the reply as text, `None` for
    /// nil.
    fn ask(&self, args: &[&str], timeout: Duration) -> Result<Option<String>, String> {
        if self.tls.is_none() {
            return resp::command(self.port, args, timeout);
        }
        let reply = self.cli_within(args, timeout)?;
        if let Some(error) = reply
            .strip_prefix("ERR ")
            .or_else(|| reply.strip_prefix("NOPERM "))
        {
            return Err(error.to_owned());
        }
        Ok(Some(reply))
    }

    /// Parses `INFO commandstats` into command name (lower case, e.g.
    /// `"get"`, `"evalsha"`, `"publish"`; subcommands as `"config|resetstat"`)
    /// to number of calls. Commands never called since the last
    /// [`reset_stats`](Self::reset_stats) are absent. The `INFO` that reads
    /// the stats is not itself counted in the result.
    ///
    /// # Panics
    ///
    /// If the server does not answer within 5 s.
    pub fn command_stats(&self) -> BTreeMap<String, u64> {
        let info = self.request(&["INFO", "commandstats"]);
        parse_command_stats(&info)
    }

    /// [`command_stats`](Self::command_stats) with each command's time:
    /// name to its calls and microseconds (`INFO commandstats`' `usec`).
    ///
    /// # Panics
    ///
    /// If the server does not answer within 5 s.
    pub fn command_times(&self) -> BTreeMap<String, CommandTime> {
        let info = self.request(&["INFO", "commandstats"]);
        parse_command_times(&info)
    }

    /// Resets the server's statistics (`CONFIG RESETSTAT`), so
    /// [`command_stats`](Self::command_stats) counts from zero.
    ///
    /// # Panics
    ///
    /// If the server does not answer within 5 s.
    pub fn reset_stats(&self) {
        self.request(&["CONFIG", "RESETSTAT"]);
    }

    /// Sends one command over the fixture's own connection and returns the
    /// reply as text (`""` for nil), panicking with the log tail on error.
    pub(crate) fn request(&self, args: &[&str]) -> String {
        match self.ask(args, REQUEST_TIMEOUT) {
            Ok(reply) => reply.unwrap_or_default(),
            Err(e) => self.fail(&format!("{args:?}: {e}")),
        }
    }

    /// Whether the server only speaks TLS ([`start_tls`](Self::start_tls)).
    pub(crate) fn is_tls(&self) -> bool {
        self.tls.is_some()
    }

    /// Panics with `why`, the port and the log tail.
    pub(crate) fn fail(&self, why: &str) -> ! {
        panic!(
            "corral-testkit: redis-server on 127.0.0.1:{}: {why}\n--- server log tail ({}) ---\n{}",
            self.port,
            self.log_path().display(),
            log_tail(&self.log())
        )
    }

    fn lock_child(&self) -> MutexGuard<'_, Option<Child>> {
        self.child.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn send_signal(&self, signal: &str) {
        if let Err(e) = self.signal_if_running(signal) {
            self.fail(&e);
        }
    }

    /// Signals the child only while it is alive and unreaped (the lock keeps
    /// it from being reaped meanwhile), so the pid cannot have been reused.
    fn signal_if_running(&self, signal: &str) -> Result<(), String> {
        let mut child = self.lock_child();
        if let Some(c) = child.as_mut() {
            if let Ok(None) = c.try_wait() {
                return process::signal(c.id(), signal);
            }
        }
        Err(format!(
            "cannot send SIG{signal}: the server is not running"
        ))
    }

    fn log_path(&self) -> PathBuf {
        self.dir.path().join(LOG_FILE)
    }

    fn stdio_path(&self) -> PathBuf {
        self.dir.path().join(STDIO_FILE)
    }

    /// Spawns the server on `self.port` and waits until it answers.
    fn spawn_and_wait(&mut self) -> Result<(), StartError> {
        let log_before = self.log().len();
        let child = self.spawn()?;
        let pid = child.id();
        *self.child.get_mut().unwrap_or_else(PoisonError::into_inner) = Some(child);
        self.wait_ready(pid, log_before)
    }

    fn spawn(&self) -> Result<Child, StartError> {
        let dir = self.dir.path();
        let stdio = OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.stdio_path())
            .and_then(|f| Ok((f.try_clone()?, f)))
            .map_err(|e| StartError::Failed(format!("cannot open {STDIO_FILE}: {e}")))?;
        let mut command = Command::new(process::redis_server_bin());
        match &self.tls {
            None => command.arg("--port").arg(self.port.to_string()),
            Some(tls) => command
                .args(["--port", "0", "--tls-port"])
                .arg(self.port.to_string())
                .arg("--tls-cert-file")
                .arg(&tls.cert)
                .arg("--tls-key-file")
                .arg(&tls.key)
                .arg("--tls-ca-cert-file")
                .arg(&tls.ca)
                .args(["--tls-auth-clients", "no"]),
        };
        command
            .args(["--bind", "127.0.0.1"])
            .args(["--save", ""])
            .args(["--appendonly", "no"])
            .args(["--daemonize", "no"])
            .args(["--enable-debug-command", "local"])
            .arg("--dir")
            .arg(dir)
            .arg("--logfile")
            .arg(self.log_path())
            .args(&self.extra_args)
            .current_dir(dir)
            .stdin(Stdio::null())
            .stdout(stdio.0)
            .stderr(stdio.1)
            .spawn()
            .map_err(|e| {
                StartError::Failed(format!(
                    "cannot run {:?}: {e} (is Debian's redis-server package installed? \
                     CORRAL_REDIS_SERVER may name another binary)",
                    process::redis_server_bin()
                ))
            })
    }

    /// Polls until the server with `pid` answers `PING` on `self.port`.
    /// `log_before` is the log length before this spawn, so only this
    /// attempt's log lines are searched for a bind failure.
    fn wait_ready(&self, pid: u32, log_before: usize) -> Result<(), StartError> {
        let deadline = Instant::now() + READY_TIMEOUT;
        loop {
            let exited = match self.lock_child().as_mut().map(Child::try_wait) {
                Some(Ok(None)) => None,
                Some(Ok(Some(status))) => Some(status.to_string()),
                Some(Err(e)) => Some(format!("unknown status ({e})")),
                None => Some("no process".to_owned()),
            };
            if let Some(status) = exited {
                let log = self.log();
                let this_attempt = log.get(log_before..).unwrap_or(&log);
                return Err(if this_attempt.contains("Address already in use") {
                    StartError::PortTaken
                } else {
                    StartError::Failed(format!("redis-server exited during start: {status}"))
                });
            }
            if self.ping_within(Duration::from_millis(250)) {
                // Make sure the PONG came from our process, not from another
                // server that grabbed the port between probing and binding.
                if let Ok(Some(info)) = self.ask(&["INFO", "server"], REQUEST_TIMEOUT) {
                    return match info_field(&info, "process_id") {
                        Some(p) if p == pid.to_string() => Ok(()),
                        _ => Err(StartError::PortTaken),
                    };
                }
            }
            if Instant::now() >= deadline {
                return Err(StartError::Failed(format!(
                    "did not answer PING within {READY_TIMEOUT:?}"
                )));
            }
            thread::sleep(Duration::from_millis(10));
        }
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        if self.frozen.load(Ordering::SeqCst) {
            let _ = self.signal_if_running("CONT");
        }
        self.kill();
        // `self.dir` (a TempDir) is removed when the fields drop, after this.
    }
}

/// A port on 127.0.0.1 that was free a moment ago (and whose cluster bus
/// port was too, if asked).
pub(crate) fn free_port(needs: PortNeeds) -> u16 {
    for _ in 0..1000 {
        let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
            .unwrap_or_else(|e| panic!("corral-testkit: cannot bind 127.0.0.1:0: {e}"));
        let port = match listener.local_addr() {
            Ok(addr) => addr.port(),
            Err(e) => panic!("corral-testkit: local_addr of a probe socket: {e}"),
        };
        match needs {
            PortNeeds::ClientOnly => return port,
            PortNeeds::WithClusterBus => {
                let Some(bus) = port.checked_add(CLUSTER_BUS_OFFSET) else {
                    continue;
                };
                if TcpListener::bind((Ipv4Addr::LOCALHOST, bus)).is_ok() {
                    return port;
                }
            }
        }
    }
    panic!("corral-testkit: found no free port pair (port, port + {CLUSTER_BUS_OFFSET})")
}

/// The value of `name:value` in an `INFO`-style reply.
pub(crate) fn info_field<'a>(info: &'a str, name: &str) -> Option<&'a str> {
    info.lines().find_map(|line| {
        let (key, value) = line.split_once(':')?;
        (key == name).then(|| value.trim())
    })
}

/// Parses `INFO commandstats` lines like
/// `cmdstat_get:calls=3,usec=5,usec_per_call=1.67,rejected_calls=0,failed_calls=0`
/// into command name (lower case) to number of calls.
pub fn parse_command_stats(info: &str) -> BTreeMap<String, u64> {
    parse_command_times(info)
        .into_iter()
        .map(|(name, time)| (name, time.calls))
        .collect()
}

/// One command's calls and time, as `INFO commandstats` reports them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct CommandTime {
    /// Calls since the last `CONFIG RESETSTAT`.
    pub calls: u64,
    /// Microseconds spent in them.
    pub usec: u64,
}

impl CommandTime {
    /// Microseconds per call; 0 without calls.
    pub fn usec_per_call(&self) -> f64 {
        if self.calls == 0 {
            0.0
        } else {
            self.usec as f64 / self.calls as f64
        }
    }
}

/// [`parse_command_stats`] with each command's time (a line without
/// `calls=` is left out; one without `usec=` counts 0 µs).
pub fn parse_command_times(info: &str) -> BTreeMap<String, CommandTime> {
    info.lines()
        .filter_map(|line| {
            let (name, fields) = line.trim().strip_prefix("cmdstat_")?.split_once(':')?;
            let field = |key: &str| {
                fields
                    .split(',')
                    .find_map(|f| f.strip_prefix(key)?.strip_prefix('='))
                    .and_then(|n| n.parse().ok())
            };
            let time = CommandTime {
                calls: field("calls")?,
                usec: field("usec").unwrap_or(0),
            };
            Some((name.to_ascii_lowercase(), time))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::{info_field, parse_command_stats};

    #[test]
    fn parses_command_stats() {
        let info = "# Commandstats\r\n\
            cmdstat_get:calls=3,usec=5,usec_per_call=1.67,rejected_calls=0,failed_calls=0\r\n\
            cmdstat_config|resetstat:calls=1,usec=9,usec_per_call=9.00,rejected_calls=0,failed_calls=0\r\n\
            cmdstat_EVALSHA:calls=12,usec=5,usec_per_call=1.00\r\n";
        let stats = parse_command_stats(info);
        assert_eq!(stats.len(), 3);
        assert_eq!(stats["get"], 3);
        assert_eq!(stats["config|resetstat"], 1);
        assert_eq!(stats["evalsha"], 12);
        let times = super::parse_command_times(info);
        assert_eq!(times["get"].usec, 5);
        assert_eq!(times["config|resetstat"].usec, 9);
        assert_eq!(times["evalsha"].calls, 12);
    }

    #[test]
    fn finds_info_fields() {
        let info = "# Server\r\nredis_version:7.0.15\r\nprocess_id:1234\r\n";
        assert_eq!(info_field(info, "process_id"), Some("1234"));
        assert_eq!(info_field(info, "redis_version"), Some("7.0.15"));
        assert_eq!(info_field(info, "tcp_port"), None);
    }
}

//! Running helper processes (`redis-cli`, `kill`) with a bounded wait.

use std::ffi::OsString;
use std::io::Read;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::thread;
use std::time::{Duration, Instant};

/// Path of the `redis-server` binary (`CORRAL_REDIS_SERVER`, else from `PATH`).
pub(crate) fn redis_server_bin() -> OsString {
    std::env::var_os("CORRAL_REDIS_SERVER").unwrap_or_else(|| "redis-server".into())
}

/// Path of the `redis-cli` binary (`CORRAL_REDIS_CLI`, else from `PATH`).
pub(crate) fn redis_cli_bin() -> OsString {
    std::env::var_os("CORRAL_REDIS_CLI").unwrap_or_else(|| "redis-cli".into())
}

/// What a finished helper process left behind.
#[derive(Debug)]
pub(crate) struct Finished {
    pub(crate) status: ExitStatus,
    pub(crate) stdout: String,
    pub(crate) stderr: String,
}

impl Finished {
    /// A one-paragraph description for failure messages.
    pub(crate) fn describe(&self) -> String {
        format!(
            "exit status: {}\nstdout:\n{}\nstderr:\n{}",
            self.status,
            self.stdout.trim_end(),
            self.stderr.trim_end()
        )
    }
}

/// Runs `cmd` with stdin closed and stdout/stderr captured, killing it if it
/// has not finished within `timeout`.
pub(crate) fn run(cmd: &mut Command, timeout: Duration) -> Result<Finished, String> {
    let what = format!("{cmd:?}");
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("could not run {what}: {e}"))?;
    let stdout = drain(child.stdout.take());
    let stderr = drain(child.stderr.take());
    let status = wait_bounded(&mut child, timeout);
    let stdout = stdout.join().unwrap_or_default();
    let stderr = stderr.join().unwrap_or_default();
    match status {
        Ok(status) => Ok(Finished {
            status,
            stdout,
            stderr,
        }),
        Err(e) => Err(format!("{what}: {e}\nstdout:\n{stdout}\nstderr:\n{stderr}")),
    }
}

fn drain(pipe: Option<impl Read + Send + 'static>) -> thread::JoinHandle<String> {
    thread::spawn(move || {
        let mut buf = Vec::new();
        if let Some(mut pipe) = pipe {
            let _ = pipe.read_to_end(&mut buf);
        }
        String::from_utf8_lossy(&buf).into_owned()
    })
}

fn wait_bounded(child: &mut Child, timeout: Duration) -> Result<ExitStatus, String> {
    let deadline = Instant::now() + timeout;
    loop {
        match child.try_wait() {
            Ok(Some(status)) => return Ok(status),
            Ok(None) if Instant::now() >= deadline => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(format!("did not finish within {timeout:?}; killed"));
            }
            Ok(None) => thread::sleep(Duration::from_millis(2)),
            Err(e) => return Err(format!("wait failed: {e}")),
        }
    }
}

/// Sends `signal` (a name such as `STOP`, `CONT`) to `pid` with `kill(1)`.
pub(crate) fn signal(pid: u32, signal: &str) -> Result<(), String> {
    let finished = run(
        Command::new("kill")
            .arg(format!("-{signal}"))
            .arg(pid.to_string()),
        Duration::from_secs(10),
    )?;
    if finished.status.success() {
        Ok(())
    } else {
        Err(format!(
            "kill -{signal} {pid} failed\n{}",
            finished.describe()
        ))
    }
}

/// CPU time (user + system) of process `pid` so far (`"self"`: this one),
/// in microseconds, from fields 14 and 15 of `/proc/<pid>/stat` (clock
/// ticks of 10 ms); 0 where there is no such file (not Linux, or the
/// process is gone).
pub fn cpu_micros(pid: &str) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    // The command name (field 2) may hold spaces: count from its `)`.
    let rest = stat.rsplit_once(')').map_or("", |(_, rest)| rest);
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let ticks = |at: usize| {
        fields
            .get(at)
            .and_then(|f| f.parse::<f64>().ok())
            .unwrap_or(0.0)
    };
    (ticks(11) + ticks(12)) * 1e6 / 100.0
}

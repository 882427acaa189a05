//! Worker processes for multi-process tests and demos: a child process
//! that answers in lines on its stdout and takes commands on its stdin,
//! killed on drop.
//!
//! [`Worker::start`] runs the current test binary again with one ignored
//! test selected (and panics on any failure, as a fixture does);
//! [`Worker::spawn`] runs any command that speaks the same protocol (and
//! returns errors, for programs such as the `corral herd` demo).

use std::io;
use std::process::Stdio;
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader, Lines};
use tokio::process::{Child, ChildStdin, ChildStdout, Command};

/// How long a worker may take to answer one command, unless told otherwise.
pub const ANSWER_TIMEOUT: Duration = Duration::from_secs(60);

/// A worker process.
///
/// The worker says `@ready` once it can take commands, and answers with
/// lines that contain a `@`-word (`@report {...}`); any other line it (or a
/// test harness around it) prints is skipped.
pub struct Worker {
    child: Child,
    stdin: ChildStdin,
    lines: Lines<BufReader<ChildStdout>>,
}

impl Worker {
    /// Starts the current test binary running only the ignored test `entry`,
    /// with `env` set, and waits for its `@ready` line.
    ///
    /// # Panics
    ///
    /// If the process cannot start or does not say `@ready` in time.
    pub async fn start(entry: &str, env: &[(&str, String)]) -> Self {
        let binary = std::env::current_exe().expect("the test binary's path");
        let mut command = Command::new(binary);
        command.args([
            "--exact",
            entry,
            "--ignored",
            "--nocapture",
            "--test-threads=1",
        ]);
        for (name, value) in env {
            command.env(name, value);
        }
        Self::spawn(command)
            .await
            .unwrap_or_else(|e| panic!("worker {entry}: {e}"))
    }

    /// Starts `command` with piped stdin and stdout (stderr is inherited),
    /// and waits up to [`ANSWER_TIMEOUT`] for its `@ready` line.
    ///
    /// # Errors
    ///
    /// If the process cannot start, exits or does not say `@ready` in time.
    pub async fn spawn(mut command: Command) -> io::Result<Self> {
        let mut child = command
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .kill_on_drop(true)
            .spawn()?;
        let stdin = child
            .stdin
            .take()
            .ok_or_else(|| io::Error::other("no stdin"))?;
        let stdout = child
            .stdout
            .take()
            .ok_or_else(|| io::Error::other("no stdout"))?;
        let mut worker = Self {
            child,
            stdin,
            lines: BufReader::new(stdout).lines(),
        };
        worker.answer("@ready", ANSWER_TIMEOUT).await?;
        Ok(worker)
    }

    /// Sends one command line.
    ///
    /// # Errors
    ///
    /// If the worker's stdin is closed (it exited).
    pub async fn tell(&mut self, command: &str) -> io::Result<()> {
        self.stdin
            .write_all(format!("{command}\n").as_bytes())
            .await?;
        self.stdin.flush().await
    }

    /// The rest of the next line that contains `prefix` (a test harness may
    /// print `test name ... ` before the first answer on the same line),
    /// waiting at most `within`.
    ///
    /// # Errors
    ///
    /// If the worker exits or stays silent for `within`.
    pub async fn answer(&mut self, prefix: &str, within: Duration) -> io::Result<String> {
        let read = async {
            while let Some(line) = self.lines.next_line().await? {
                if let Some((_, rest)) = line.split_once(prefix) {
                    return Ok(rest.trim().to_owned());
                }
            }
            Err(io::Error::other(format!(
                "the worker exited before answering {prefix}"
            )))
        };
        tokio::time::timeout(within, read).await.map_err(|_| {
            io::Error::new(
                io::ErrorKind::TimedOut,
                format!("the worker did not answer {prefix} within {within:?}"),
            )
        })?
    }

    /// Sends one command line.
    ///
    /// # Panics
    ///
    /// If the worker's stdin is closed.
    pub async fn send(&mut self, command: &str) {
        self.tell(command)
            .await
            .expect("write a command to the worker");
    }

    /// [`Worker::answer`] within [`ANSWER_TIMEOUT`].
    ///
    /// # Panics
    ///
    /// If the worker exits or does not answer in time.
    pub async fn expect(&mut self, prefix: &str) -> String {
        self.answer(prefix, ANSWER_TIMEOUT)
            .await
            .unwrap_or_else(|e| panic!("{e}"))
    }

    /// Kills the worker (SIGKILL) and waits for it.
    ///
    /// # Panics
    ///
    /// If the kill fails.
    pub async fn kill(&mut self) {
        self.child.kill().await.expect("kill the worker");
    }
}

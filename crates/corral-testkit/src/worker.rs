//! Worker processes for multi-process tests: the test binary runs itself
//! again with one ignored test selected, talks to it over stdin/stdout in
//! lines, and kills it on drop.

use std::process::Stdio;
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader, Lines};
use tokio::process::{Child, ChildStdin, ChildStdout, Command};

/// How long a worker may take to answer one command.
const ANSWER_TIMEOUT: Duration = Duration::from_secs(60);

/// A worker process: this test binary running the (ignored) test `entry`.
///
/// The worker answers with lines that start with `@`; anything else it or
/// the test harness prints is skipped.
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
        command
            .args([
                "--exact",
                entry,
                "--ignored",
                "--nocapture",
                "--test-threads=1",
            ])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .kill_on_drop(true);
        for (name, value) in env {
            command.env(name, value);
        }
        let mut child = command.spawn().expect("spawn a worker process");
        let stdin = child.stdin.take().expect("worker stdin");
        let lines = BufReader::new(child.stdout.take().expect("worker stdout")).lines();
        let mut worker = Self {
            child,
            stdin,
            lines,
        };
        worker.expect("@ready").await;
        worker
    }

    /// Sends one command line.
    pub async fn send(&mut self, command: &str) {
        let line = format!("{command}\n");
        self.stdin
            .write_all(line.as_bytes())
            .await
            .expect("write a command to the worker");
        self.stdin.flush().await.expect("flush the worker's stdin");
    }

    /// The rest of the next line that contains `prefix` (the harness may
    /// print `test name ... ` before the first answer on the same line).
    pub async fn expect(&mut self, prefix: &str) -> String {
        let read = async {
            loop {
                let line = self
                    .lines
                    .next_line()
                    .await
                    .expect("read from the worker")
                    .unwrap_or_else(|| panic!("the worker exited before answering {prefix}"));
                if let Some((_, rest)) = line.split_once(prefix) {
                    return rest.trim().to_owned();
                }
            }
        };
        tokio::time::timeout(ANSWER_TIMEOUT, read)
            .await
            .unwrap_or_else(|_| panic!("the worker did not answer {prefix} in time"))
    }

    /// Kills the worker (SIGKILL) and waits for it.
    pub async fn kill(&mut self) {
        self.child.kill().await.expect("kill the worker");
    }
}

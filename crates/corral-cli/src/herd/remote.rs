//! The source of truth of `corral herd --redis`: one server in the parent
//! process that every worker's fills call over loopback TCP, so that the
//! fills running at once across processes are counted where they land, by
//! the source itself.
//!
//! Protocol: a connection per call; the caller writes its worker's index,
//! a tab, its key and a newline; the server holds the call for the fill
//! time and answers the value and a newline.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use tokio::io::{AsyncBufReadExt as _, AsyncWriteExt as _, BufReader};
use tokio::net::{TcpListener, TcpStream};

use super::scenario::{AtOnce, Load};

/// What the source counted since it was last asked.
#[derive(Debug, Default)]
struct Counts {
    calls: AtomicU64,
    at_once: AtOnce,
    /// Calls running now of worker 0 (the one `--kill-one` kills).
    running_of_first: AtomicU64,
}

/// The source server, serving until dropped.
pub(crate) struct SourceServer {
    addr: SocketAddr,
    counts: Arc<Counts>,
    task: tokio::task::JoinHandle<()>,
}

impl SourceServer {
    /// Listens on a free loopback port; each call takes `fill`.
    pub(crate) async fn start(fill: Duration) -> anyhow::Result<Self> {
        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .context("binding the source server")?;
        let addr = listener.local_addr()?;
        let counts = Arc::new(Counts::default());
        let serving = Arc::clone(&counts);
        let task = tokio::spawn(async move {
            while let Ok((conn, _)) = listener.accept().await {
                tokio::spawn(answer(conn, Arc::clone(&serving), fill));
            }
        });
        Ok(Self { addr, counts, task })
    }

    /// Where workers call it.
    pub(crate) fn addr(&self) -> String {
        self.addr.to_string()
    }

    /// Whether a call of worker 0 is running now.
    pub(crate) fn first_worker_filling(&self) -> bool {
        self.counts.running_of_first.load(Relaxed) > 0
    }

    /// Calls received and the most at once, since the last time taken.
    pub(crate) fn take(&self) -> (u64, u64) {
        let calls = self.counts.calls.swap(0, Relaxed);
        (calls, self.counts.at_once.take_most())
    }
}

impl Drop for SourceServer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// One call: counted while it runs.
async fn answer(conn: TcpStream, counts: Arc<Counts>, fill: Duration) {
    let (read, mut write) = conn.into_split();
    let mut line = String::new();
    if BufReader::new(read).read_line(&mut line).await.is_err() {
        return;
    }
    let (worker, key) = line
        .trim_end()
        .split_once('\t')
        .unwrap_or(("", line.trim_end()));
    let first = worker == "0";
    counts.calls.fetch_add(1, Relaxed);
    counts.at_once.enter();
    if first {
        counts.running_of_first.fetch_add(1, Relaxed);
    }
    tokio::time::sleep(fill).await;
    if first {
        counts.running_of_first.fetch_sub(1, Relaxed);
    }
    counts.at_once.leave();
    let value = format!("{key} → its value\n");
    let _ = write.write_all(value.as_bytes()).await;
}

/// A worker's side of the source: calls the server, counting its calls.
#[derive(Debug)]
pub(crate) struct RemoteSource {
    addr: String,
    /// The calling worker's index.
    worker: u64,
    calls: AtomicU64,
}

impl RemoteSource {
    pub(crate) fn new(addr: String, worker: u64) -> Self {
        Self {
            addr,
            worker,
            calls: AtomicU64::new(0),
        }
    }

    pub(crate) fn calls(&self) -> u64 {
        self.calls.load(Relaxed)
    }
}

impl Load for RemoteSource {
    async fn load(&self, key: &str) -> anyhow::Result<String> {
        self.calls.fetch_add(1, Relaxed);
        let conn = TcpStream::connect(&self.addr)
            .await
            .context("calling the source")?;
        let (read, mut write) = conn.into_split();
        let line = format!("{}\t{key}\n", self.worker);
        write.write_all(line.as_bytes()).await?;
        let mut value = String::new();
        BufReader::new(read).read_line(&mut value).await?;
        anyhow::ensure!(value.ends_with('\n'), "the source hung up");
        value.pop();
        Ok(value)
    }
}

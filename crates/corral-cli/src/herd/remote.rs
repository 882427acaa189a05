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

use super::scenario::Load;
use super::timeline::{Gauge, Series, Timeline};

/// What the source counted since it was last asked.
#[derive(Debug, Default)]
struct Counts {
    calls: AtomicU64,
    timeline: Timeline,
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

    /// Where the rounds' calls are recorded (and the workers' callers added).
    pub(crate) fn timeline(&self) -> &Timeline {
        &self.counts.timeline
    }

    /// Calls received and the timeline, since the last time taken.
    pub(crate) fn take(&self) -> (u64, Series) {
        let calls = self.counts.calls.swap(0, Relaxed);
        (calls, self.counts.timeline.take())
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
    let running = counts.timeline.enter(Gauge::Running);
    let of_first = if first { 1 } else { 0 };
    counts.running_of_first.fetch_add(of_first, Relaxed);
    tokio::time::sleep(fill).await;
    counts.running_of_first.fetch_sub(of_first, Relaxed);
    drop(running);
    let value = format!("{key} → its value\n");
    let _ = write.write_all(value.as_bytes()).await;
}

/// A worker's side of the source: the server's address and the calling
/// worker's index.
#[derive(Debug)]
pub(crate) struct RemoteSource(pub(crate) String, pub(crate) u64);

impl Load for RemoteSource {
    async fn load(&self, key: &str) -> anyhow::Result<String> {
        let conn = TcpStream::connect(&self.0).await;
        let (read, mut write) = conn.context("calling the source")?.into_split();
        let line = format!("{}\t{key}\n", self.1);
        write.write_all(line.as_bytes()).await?;
        let mut value = String::new();
        BufReader::new(read).read_line(&mut value).await?;
        anyhow::ensure!(value.ends_with('\n'), "the source hung up");
        value.pop();
        Ok(value)
    }
}

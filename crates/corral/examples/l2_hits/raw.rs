//! The floor of the `raw/mget` variant: the least a client can do per read
//! of one of the seeded keys on one connection — no cache, no redis-rs, no
//! key names built, no values decoded.
//!
//! Callers queue the index of their key and wait on a oneshot. A writer
//! task sends everything queued as one `MGET` while fewer than
//! [`IN_FLIGHT`] are unanswered; a reader task parses each reply (RESP2
//! arrays of bulk strings) and hands every caller its bytes. This is the
//! batching the store's reads do, each read bounded by a timeout as the
//! store's are, with nothing else around it: what it
//! reaches against a bare `GET` bounds what any read of a cache can reach
//! on the same machine. Errors panic (a benchmark, not a client).

use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::{mpsc, oneshot, Notify, OwnedSemaphorePermit, Semaphore};

/// `MGET`s sent and not yet answered, at most.
const IN_FLIGHT: usize = 2;

type Reply = oneshot::Sender<Vec<u8>>;

/// Reads of fixed keys, batched into `MGET`s on one connection.
pub(crate) struct RawReads {
    queue: Mutex<Vec<(usize, Reply)>>,
    queued: Notify,
    names: Vec<String>,
}

impl RawReads {
    /// Connects to the server on `port` of 127.0.0.1; `names` are the keys
    /// read, by index.
    pub(crate) async fn connect(port: u16, names: Vec<String>) -> Arc<Self> {
        let stream = TcpStream::connect(("127.0.0.1", port))
            .await
            .expect("raw connection");
        stream.set_nodelay(true).expect("nodelay");
        let (read, write) = stream.into_split();
        let reads = Arc::new(Self {
            queue: Mutex::new(Vec::new()),
            queued: Notify::new(),
            names,
        });
        let (sent, unanswered) = mpsc::unbounded_channel();
        tokio::spawn(write_batches(Arc::clone(&reads), write, sent));
        tokio::spawn(read_replies(read, unanswered));
        reads
    }

    /// The value of key `index`.
    pub(crate) async fn get(&self, index: usize) -> Vec<u8> {
        let (reply, answer) = oneshot::channel();
        let first = {
            let mut queue = self.queue.lock().expect("queue");
            queue.push((index, reply));
            queue.len() == 1
        };
        if first {
            self.queued.notify_one();
        }
        // Bounded, as every read of a store is.
        tokio::time::timeout(Duration::from_secs(1), answer)
            .await
            .expect("raw reply in time")
            .expect("raw reply")
    }

    /// Waits for a place in flight and a non-empty queue, and takes it.
    async fn next_batch(
        &self,
        places: &Arc<Semaphore>,
    ) -> (Vec<(usize, Reply)>, OwnedSemaphorePermit) {
        let place = Arc::clone(places).acquire_owned().await.expect("places");
        loop {
            let batch = std::mem::take(&mut *self.queue.lock().expect("queue"));
            if !batch.is_empty() {
                return (batch, place);
            }
            self.queued.notified().await;
        }
    }
}

/// A batch sent: its callers, in order, and its place in flight.
type Sent = (Vec<Reply>, OwnedSemaphorePermit);

async fn write_batches(
    reads: Arc<RawReads>,
    mut write: tokio::net::tcp::OwnedWriteHalf,
    sent: mpsc::UnboundedSender<Sent>,
) {
    let places = Arc::new(Semaphore::new(IN_FLIGHT));
    let mut out = Vec::with_capacity(8192);
    loop {
        let (batch, place) = reads.next_batch(&places).await;
        out.clear();
        push_header(&mut out, b'*', batch.len() + 1);
        out.extend_from_slice(b"$4\r\nMGET\r\n");
        let mut replies = Vec::with_capacity(batch.len());
        for (index, reply) in batch {
            let name = reads.names[index].as_bytes();
            push_header(&mut out, b'$', name.len());
            out.extend_from_slice(name);
            out.extend_from_slice(b"\r\n");
            replies.push(reply);
        }
        write.write_all(&out).await.expect("raw write");
        if sent.send((replies, place)).is_err() {
            return;
        }
    }
}

async fn read_replies(
    mut read: tokio::net::tcp::OwnedReadHalf,
    mut unanswered: mpsc::UnboundedReceiver<Sent>,
) {
    let mut input = Vec::with_capacity(1 << 16);
    while let Some((replies, place)) = unanswered.recv().await {
        let values = loop {
            if let Some((values, used)) = parse_array(&input, replies.len()) {
                input.drain(..used);
                break values;
            }
            let n = read.read_buf(&mut input).await.expect("raw read");
            assert!(n > 0, "the server closed the raw connection");
        };
        for (reply, value) in replies.into_iter().zip(values) {
            let _ = reply.send(value);
        }
        // The place is given back once the callers are woken, so that the
        // next batch holds what they queue meanwhile.
        drop(place);
    }
}

fn push_header(out: &mut Vec<u8>, kind: u8, n: usize) {
    out.push(kind);
    out.extend_from_slice(n.to_string().as_bytes());
    out.extend_from_slice(b"\r\n");
}

/// The number of a `<kind><number>\r\n` line at `at`, and where the next
/// line starts; `None` if the line is not all in `input` yet.
fn header(input: &[u8], at: usize) -> Option<(i64, usize)> {
    let end = at + input.get(at..)?.windows(2).position(|w| w == b"\r\n")?;
    let number = std::str::from_utf8(&input[at + 1..end])
        .ok()
        .and_then(|n| n.parse().ok())
        .expect("a RESP length");
    Some((number, end + 2))
}

/// An array of `n` bulk strings (nil: empty) at the start of `input`, and
/// its length in bytes; `None` if it is not all there yet.
fn parse_array(input: &[u8], n: usize) -> Option<(Vec<Vec<u8>>, usize)> {
    let (count, mut at) = header(input, 0)?;
    assert_eq!(count, n as i64, "an MGET reply of another length");
    let mut values = Vec::with_capacity(n);
    for _ in 0..n {
        let (len, start) = header(input, at)?;
        let Ok(len) = usize::try_from(len) else {
            values.push(Vec::new());
            at = start;
            continue;
        };
        let end = start + len;
        if input.len() < end + 2 {
            return None;
        }
        values.push(input[start..end].to_vec());
        at = end + 2;
    }
    Some((values, at))
}

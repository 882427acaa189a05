//! Connections to one memcached server: the meta text protocol
//! (`mg`/`ms`/`md`/`mn`, memcached 1.6+) over TCP, in a bounded pool.
//!
//! A call writes one or more requests and reads exactly one reply per
//! request (no quiet mode), so requests to one server pipeline in one round
//! trip. A connection goes back to the pool only after a call that read all
//! of its replies; one that failed or was cancelled (the store's timeout
//! drops the future) is closed, so a late reply never reaches another call.

use std::sync::Mutex;

use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufStream};
use tokio::net::TcpStream;
use tokio::sync::Semaphore;

use crate::data::error::{StoreError, StoreErrorKind};
use crate::sync::lock_std;

/// The longest reply line read (status and flags; never data).
const MAX_LINE: u64 = 4096;

/// The status of a meta reply.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Status {
    /// `VA`: a value follows.
    Value,
    /// `HD`: done, no value.
    Done,
    /// `EN`: not found (`mg`).
    Miss,
    /// `NS`: not stored (`ms` in add mode over an existing item).
    NotStored,
    /// `EX`: the compare-and-swap token did not match.
    Exists,
    /// `NF`: not found (`ms` with a cas token, `md`).
    NotFound,
    /// `MN`: the answer to `mn`.
    NoOp,
}

/// One reply: status, flags (`c<cas>`, `t<ttl>`, ...) and data.
#[derive(Debug)]
pub(super) struct Reply {
    pub(super) status: Status,
    flags: Vec<String>,
    pub(super) data: Option<Vec<u8>>,
}

impl Reply {
    fn flag(&self, name: char) -> Option<&str> {
        self.flags.iter().find_map(|f| f.strip_prefix(name))
    }

    /// The item's compare-and-swap token (`c` flag).
    pub(super) fn cas(&self) -> Option<u64> {
        self.flag('c')?.parse().ok()
    }

    /// The item's remaining time to live in seconds, `-1` for none (`t` flag).
    pub(super) fn ttl(&self) -> Option<i64> {
        self.flag('t')?.parse().ok()
    }
}

/// A request: `mg <key> <flags>`.
pub(super) fn mg(key: &str, flags: &str) -> Vec<u8> {
    format!("mg {key} {flags}\r\n").into_bytes()
}

/// A request: `ms <key> <len> <flags>` and the data.
pub(super) fn ms(key: &str, data: &[u8], flags: &str) -> Vec<u8> {
    let mut out = format!("ms {key} {} {flags}\r\n", data.len()).into_bytes();
    out.extend_from_slice(data);
    out.extend_from_slice(b"\r\n");
    out
}

/// A request: `md <key> <flags>`.
pub(super) fn md(key: &str, flags: &str) -> Vec<u8> {
    format!("md {key} {flags}\r\n").into_bytes()
}

/// A request: `mn` (no-op; the server answers `MN`).
pub(super) fn mn() -> Vec<u8> {
    b"mn\r\n".to_vec()
}

type Conn = BufStream<TcpStream>;

/// One server: its address and a pool of at most `max` connections.
#[derive(Debug)]
pub(super) struct Server {
    addr: String,
    idle: Mutex<Vec<Conn>>,
    permits: Semaphore,
    max_data: usize,
}

impl Server {
    /// A server at `addr` (`host:port`) with at most `max` connections,
    /// accepting values of at most `max_data` bytes.
    pub(super) fn new(addr: String, max: usize, max_data: usize) -> Self {
        Self {
            addr,
            idle: Mutex::new(Vec::new()),
            permits: Semaphore::new(max.max(1)),
            max_data,
        }
    }

    /// The server's address.
    pub(super) fn addr(&self) -> &str {
        &self.addr
    }

    /// Sends `requests` in one write and reads one reply for each. Not
    /// bounded in time: the caller bounds it.
    pub(super) async fn call(&self, requests: &[Vec<u8>]) -> Result<Vec<Reply>, StoreError> {
        let _permit = self
            .permits
            .acquire()
            .await
            .map_err(|_| self.unavailable("pool closed"))?;
        let pooled = lock_std(&self.idle).pop();
        let mut conn = match pooled {
            Some(conn) => conn,
            None => {
                let stream = TcpStream::connect(&self.addr)
                    .await
                    .map_err(|e| self.io(e))?;
                let _ = stream.set_nodelay(true);
                BufStream::new(stream)
            }
        };
        for request in requests {
            conn.write_all(request).await.map_err(|e| self.io(e))?;
        }
        conn.flush().await.map_err(|e| self.io(e))?;
        let mut replies = Vec::with_capacity(requests.len());
        for _ in requests {
            replies.push(self.read_reply(&mut conn).await?);
        }
        lock_std(&self.idle).push(conn);
        Ok(replies)
    }

    async fn read_reply(&self, conn: &mut Conn) -> Result<Reply, StoreError> {
        let mut line = Vec::new();
        (&mut *conn)
            .take(MAX_LINE)
            .read_until(b'\n', &mut line)
            .await
            .map_err(|e| self.io(e))?;
        if line.is_empty() {
            return Err(self.unavailable("connection closed"));
        }
        if !line.ends_with(b"\r\n") {
            return Err(protocol(&self.addr, "reply line too long or cut"));
        }
        let text = String::from_utf8_lossy(&line[..line.len() - 2]).into_owned();
        let mut words = text.split(' ');
        let status = match words.next().unwrap_or_default() {
            "VA" => Status::Value,
            "HD" => Status::Done,
            "EN" => Status::Miss,
            "NS" => Status::NotStored,
            "EX" => Status::Exists,
            "NF" => Status::NotFound,
            "MN" => Status::NoOp,
            _ => return Err(protocol(&self.addr, &format!("server said: {text}"))),
        };
        let mut data = None;
        if status == Status::Value {
            let size: usize = words
                .next()
                .and_then(|w| w.parse().ok())
                .ok_or_else(|| protocol(&self.addr, &format!("bad VA line: {text}")))?;
            if size > self.max_data {
                return Err(protocol(&self.addr, &format!("a {size}-byte value")));
            }
            let mut bytes = vec![0; size + 2];
            conn.read_exact(&mut bytes).await.map_err(|e| self.io(e))?;
            if !bytes.ends_with(b"\r\n") {
                return Err(protocol(&self.addr, "value not followed by CRLF"));
            }
            bytes.truncate(size);
            data = Some(bytes);
        }
        let flags = words.map(str::to_owned).collect();
        Ok(Reply {
            status,
            flags,
            data,
        })
    }

    /// The server could not be reached, or the connection broke.
    fn unavailable(&self, why: &str) -> StoreError {
        let message = format!("memcached {}: {why}", self.addr);
        StoreError::new(StoreErrorKind::Unavailable, message)
    }

    fn io(&self, error: std::io::Error) -> StoreError {
        self.unavailable(&error.to_string())
    }
}

/// A protocol error: the server's answer was not what the call expects.
pub(super) fn protocol(addr: &str, why: &str) -> StoreError {
    StoreError::new(StoreErrorKind::Protocol, format!("memcached {addr}: {why}"))
}

/// A reply of `status` to a `verb` request, where no such reply belongs.
pub(super) fn answered(addr: &str, verb: &str, status: Status) -> StoreError {
    protocol(addr, &format!("{verb} answered {status:?}"))
}

//! One `memcached` process on a loopback port.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{Ipv4Addr, TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::thread;
use std::time::{Duration, Instant};

use tempfile::TempDir;

use crate::{log_tail, process};

/// How long [`MemcachedServer::start`] waits for the server to answer.
const READY_TIMEOUT: Duration = Duration::from_secs(10);
/// Timeout of one fixture-internal request.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(5);
/// How many ports `start` tries when the probed one was taken first.
const PORT_ATTEMPTS: usize = 8;
const LOG_FILE: &str = "memcached.log";

/// Path of the `memcached` binary (`CORRAL_MEMCACHED`, else from `PATH`).
fn memcached_bin() -> std::ffi::OsString {
    std::env::var_os("CORRAL_MEMCACHED").unwrap_or_else(|| "memcached".into())
}

/// A `memcached` child process on `127.0.0.1` (TCP only, `-U 0`), killed
/// on drop — also while a test panics (continued first if frozen).
#[derive(Debug)]
pub struct MemcachedServer {
    port: u16,
    child: Mutex<Option<Child>>,
    frozen: AtomicBool,
    dir: TempDir,
    /// Extra arguments, after the fixture's own.
    args: Vec<String>,
}

impl MemcachedServer {
    /// Starts `memcached -l 127.0.0.1 -p PORT -U 0 -m 64 -v -u root` on a free port
    /// with its output in a log file, and waits (at most 10 s) until it
    /// answers the meta no-op `mn`.
    ///
    /// # Panics
    ///
    /// If it cannot be started or does not answer in time; the message holds
    /// the tail of its log.
    pub fn start() -> MemcachedServer {
        Self::start_with(&[])
    }

    /// Like [`start`](Self::start), with extra `memcached` arguments after
    /// the fixture's own (so they override them), e.g. `&["-m", "4"]` for a
    /// server that evicts after 4 MiB.
    ///
    /// # Panics
    ///
    /// As [`start`](Self::start).
    pub fn start_with(args: &[&str]) -> MemcachedServer {
        let dir = tempfile::Builder::new()
            .prefix("corral-memcached-")
            .tempdir()
            .unwrap_or_else(|e| panic!("corral-testkit: cannot create a temp dir: {e}"));
        let mut server = MemcachedServer {
            port: 0,
            child: Mutex::new(None),
            frozen: AtomicBool::new(false),
            dir,
            args: args.iter().map(|arg| (*arg).to_owned()).collect(),
        };
        for _ in 0..PORT_ATTEMPTS {
            server.port = free_port();
            match server.spawn_and_wait() {
                Ok(()) => return server,
                Err(None) => server.kill(),
                Err(Some(why)) => server.fail(&why),
            }
        }
        server.fail("every probed port was taken before memcached could bind it")
    }

    /// The TCP port (on `127.0.0.1`).
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The address clients connect to: `127.0.0.1:PORT`.
    pub fn addr(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    /// The process id, or `None` after [`kill`](Self::kill).
    pub fn pid(&self) -> Option<u32> {
        self.lock_child().as_ref().map(Child::id)
    }

    /// Suspends the server (`SIGSTOP`): the kernel still accepts
    /// connections, nothing is answered until [`thaw`](Self::thaw).
    ///
    /// # Panics
    ///
    /// If the server is not running or the signal cannot be sent.
    pub fn freeze(&self) {
        self.signal("STOP");
        self.frozen.store(true, Ordering::SeqCst);
    }

    /// Resumes a frozen server (`SIGCONT`).
    ///
    /// # Panics
    ///
    /// As [`freeze`](Self::freeze).
    pub fn thaw(&self) {
        self.signal("CONT");
        self.frozen.store(false, Ordering::SeqCst);
    }

    /// Kills the server and waits for it (no-op if not running).
    pub fn kill(&mut self) {
        if let Some(mut child) = self.lock_child().take() {
            if self.frozen.swap(false, Ordering::SeqCst) {
                let _ = process::signal(child.id(), "CONT");
            }
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// The server's log so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.log_path()).unwrap_or_default()
    }

    /// Sends one raw text-protocol request (with its trailing `\r\n`) and
    /// returns the first reply line, without `\r\n`.
    ///
    /// # Panics
    ///
    /// If the server does not answer within 5 s.
    pub fn request(&self, request: &[u8]) -> String {
        self.try_request(request, REQUEST_TIMEOUT)
            .unwrap_or_else(|e| self.fail(&format!("request failed: {e}")))
    }

    /// Writes `data` as the raw item `key` for `ttl_secs` seconds (a
    /// classic `set`).
    ///
    /// # Panics
    ///
    /// If the server does not answer `STORED`.
    pub fn set_raw(&self, key: &str, data: &[u8], ttl_secs: u32) {
        let mut request = format!("set {key} 0 {ttl_secs} {}\r\n", data.len()).into_bytes();
        request.extend_from_slice(data);
        request.extend_from_slice(b"\r\n");
        let reply = self.request(&request);
        if reply != "STORED" {
            self.fail(&format!("set {key}: {reply}"));
        }
    }

    /// Whether the item `key` exists, asked with the meta debug command
    /// `me`, which does not count as a fetch (a fetched item is sheltered
    /// from eviction by memcached's segmented LRU).
    pub fn exists(&self, key: &str) -> bool {
        let reply = self.request(format!("me {key}\r\n").as_bytes());
        reply.starts_with("ME ")
    }

    /// The length of the value of item `key`, if it exists (read with
    /// `mg <key> s`, which counts as a fetch).
    pub fn value_len(&self, key: &str) -> Option<usize> {
        let reply = self.request(format!("mg {key} s\r\n").as_bytes());
        reply
            .strip_prefix("HD ")?
            .split(' ')
            .find_map(|flag| flag.strip_prefix('s')?.parse().ok())
    }

    /// Writes `count` items named `<prefix><n>` (zero-padded to `key_len`
    /// bytes) with `value_len`-byte values and no expiry, and reads each
    /// once, pipelined on one connection: items of one size land in one
    /// slab class, so this evicts that class's least recently used items
    /// once memory is full — fetched ones too, as the flood's items are
    /// fetched as well (memcached's segmented LRU keeps a fetched item from
    /// items never read). Returns how many writes the server refused.
    ///
    /// # Panics
    ///
    /// If the server does not answer within 5 s, or `key_len` is too
    /// short for `prefix` and `count`.
    pub fn flood(&self, prefix: &str, count: usize, key_len: usize, value_len: usize) -> usize {
        let digits = key_len.saturating_sub(prefix.len());
        assert!(
            digits >= count.to_string().len(),
            "corral-testkit: key_len {key_len} leaves no room for {count} items after {prefix:?}"
        );
        self.try_flood(prefix, count, digits, value_len)
            .unwrap_or_else(|e| self.fail(&format!("flood failed: {e}")))
    }

    fn try_flood(
        &self,
        prefix: &str,
        count: usize,
        digits: usize,
        value_len: usize,
    ) -> Result<usize, String> {
        let mut stream = TcpStream::connect((Ipv4Addr::LOCALHOST, self.port))
            .map_err(|e| format!("connect: {e}"))?;
        stream
            .set_read_timeout(Some(REQUEST_TIMEOUT))
            .map_err(|e| format!("timeouts: {e}"))?;
        let value = vec![b'x'; value_len];
        let mut refused = 0;
        let mut reader = BufReader::new(stream.try_clone().map_err(|e| e.to_string())?);
        for batch in (0..count).collect::<Vec<_>>().chunks(1000) {
            let mut out = Vec::with_capacity(batch.len() * (value_len + 64));
            for n in batch {
                out.extend_from_slice(
                    format!("ms {prefix}{n:0digits$} {value_len} T0 q\r\n").as_bytes(),
                );
                out.extend_from_slice(&value);
                out.extend_from_slice(b"\r\n");
            }
            for n in batch {
                out.extend_from_slice(format!("mg {prefix}{n:0digits$} q\r\n").as_bytes());
            }
            out.extend_from_slice(b"mn\r\n");
            stream.write_all(&out).map_err(|e| format!("write: {e}"))?;
            loop {
                let mut line = String::new();
                reader
                    .read_line(&mut line)
                    .map_err(|e| format!("read: {e}"))?;
                match line.trim_end() {
                    "MN" => break,
                    "" => return Err("connection closed".into()),
                    "HD" => {}
                    _ => refused += 1,
                }
            }
        }
        Ok(refused)
    }

    /// Drops every item (`flush_all`).
    ///
    /// # Panics
    ///
    /// If the server does not answer `OK`.
    pub fn flush_all(&self) {
        let reply = self.request(b"flush_all\r\n");
        if reply != "OK" {
            self.fail(&format!("flush_all: {reply}"));
        }
    }

    fn try_request(&self, request: &[u8], timeout: Duration) -> Result<String, String> {
        let mut stream = TcpStream::connect((Ipv4Addr::LOCALHOST, self.port))
            .map_err(|e| format!("connect: {e}"))?;
        stream
            .set_read_timeout(Some(timeout))
            .and_then(|()| stream.set_write_timeout(Some(timeout)))
            .map_err(|e| format!("timeouts: {e}"))?;
        stream
            .write_all(request)
            .map_err(|e| format!("write: {e}"))?;
        let mut line = String::new();
        BufReader::new(stream)
            .take(64 * 1024)
            .read_line(&mut line)
            .map_err(|e| format!("read: {e}"))?;
        Ok(line.trim_end().to_owned())
    }

    fn log_path(&self) -> PathBuf {
        self.dir.path().join(LOG_FILE)
    }

    fn lock_child(&self) -> MutexGuard<'_, Option<Child>> {
        self.child.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn signal(&self, signal: &str) {
        let pid = self.pid();
        let Some(pid) = pid else {
            self.fail(&format!("cannot send SIG{signal}: not running"));
        };
        if let Err(e) = process::signal(pid, signal) {
            self.fail(&e);
        }
    }

    fn fail(&self, why: &str) -> ! {
        panic!(
            "corral-testkit: memcached on port {}: {why}\nlog:\n{}",
            self.port,
            log_tail(&self.log())
        )
    }

    /// `Err(None)`: the port was taken; `Err(Some(why))`: give up.
    fn spawn_and_wait(&mut self) -> Result<(), Option<String>> {
        let log = std::fs::File::create(self.log_path())
            .map_err(|e| Some(format!("cannot create the log: {e}")))?;
        let err = log
            .try_clone()
            .map_err(|e| Some(format!("cannot clone the log: {e}")))?;
        let child = Command::new(memcached_bin())
            // `-u root`: memcached refuses to run as root without `-u`, and
            // ignores it when not root.
            .args(["-l", "127.0.0.1", "-U", "0", "-m", "64", "-v", "-u", "root"])
            .arg("-p")
            .arg(self.port.to_string())
            .args(&self.args)
            .stdin(Stdio::null())
            .stdout(log)
            .stderr(err)
            .spawn()
            .map_err(|e| {
                Some(format!(
                    "cannot run memcached ({e}); install it (scripts/install-deps) or set CORRAL_MEMCACHED"
                ))
            })?;
        *self.lock_child() = Some(child);
        let deadline = Instant::now() + READY_TIMEOUT;
        loop {
            if let Ok(reply) = self.try_request(b"mn\r\n", Duration::from_millis(500)) {
                if reply == "MN" {
                    return Ok(());
                }
            }
            let exited = self
                .lock_child()
                .as_mut()
                .map(|c| matches!(c.try_wait(), Ok(Some(_))))
                .unwrap_or(true);
            if exited {
                let log = self.log();
                return if log.contains("Address already in use") || log.contains("bind") {
                    Err(None)
                } else {
                    Err(Some(format!(
                        "memcached exited at start\n{}",
                        log_tail(&log)
                    )))
                };
            }
            if Instant::now() >= deadline {
                return Err(Some(format!("no answer within {READY_TIMEOUT:?}")));
            }
            thread::sleep(Duration::from_millis(5));
        }
    }
}

impl Drop for MemcachedServer {
    fn drop(&mut self) {
        self.kill();
    }
}

fn free_port() -> u16 {
    TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .unwrap_or_else(|e| panic!("corral-testkit: cannot probe a free port: {e}"))
}

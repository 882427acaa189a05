//! A TCP relay that can go silent: the half-open connections of a
//! partitioned host or a dropped NAT entry, which die without an error.
//!
//! [`FaultProxy`] listens on a free loopback port and relays every
//! connection it accepts to a target address, on plain threads (so sync and
//! async tests use it alike). [`FaultProxy::blackhole`] makes every current
//! connection stop relaying in both directions while staying open: no FIN,
//! no RST, the bytes each side sends are read and dropped. A client then
//! sees nothing but silence. Connections accepted afterwards relay normally
//! (the route is back; only the old connections' state was lost), unless
//! [`FaultProxy::hold_new`] holds them too. [`FaultProxy::retarget`] sends
//! the connections accepted from then on to another server, as a DNS name
//! moved by a managed service's failover does, while the open ones stay
//! with the old server. [`FaultProxy::delay_replies`] holds every byte
//! the server sends for a while before passing it on, as an overloaded
//! server host or a congested link does: the server has done the work, the
//! client hears of it late. [`FaultProxy::limit_bandwidth`] makes it a
//! slow link: every connection's bytes share one capacity per direction.
//!
//! The proxy's kernel acknowledges what the client sends, so TCP keepalive
//! and `TCP_USER_TIMEOUT` on the client see a live peer: only the client's
//! own application-level checks (a `PING` that gets no answer) can find a
//! blackholed connection.

use std::io::{ErrorKind, Read, Write};
use std::net::{Ipv4Addr, Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU16, AtomicU64, AtomicUsize, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

/// A relay from a loopback port to a target address whose connections can
/// be blackholed; everything it opened is closed on drop.
///
/// ```no_run
/// use corral_testkit::{FaultProxy, RedisServer};
///
/// let server = RedisServer::start();
/// let proxy = FaultProxy::start(server.port());
/// // Clients connect to `proxy.url()` instead of `server.url()`...
/// assert_eq!(proxy.blackhole(), 0);
/// ```
#[derive(Debug)]
pub struct FaultProxy {
    port: u16,
    shared: Arc<Shared>,
    acceptor: Option<JoinHandle<()>>,
}

#[derive(Debug)]
struct Shared {
    /// The loopback port new connections are relayed to.
    target_port: AtomicU16,
    /// Set on drop: the acceptor stops.
    stopping: AtomicBool,
    /// Whether new connections start blackholed.
    hold_new: AtomicBool,
    /// Connections accepted so far.
    accepted: AtomicUsize,
    /// How long bytes from the target are held before they are passed on,
    /// in microseconds (0: at once).
    reply_delay_us: AtomicU64,
    /// The bandwidth of each direction in bytes per second (0: no limit).
    bandwidth: AtomicU64,
    /// When each direction (upstream, downstream) has sent every byte
    /// handed to it so far, at the bandwidth.
    link_free_at: [Mutex<Instant>; 2],
    links: Mutex<Vec<Arc<Link>>>,
    relays: Mutex<Vec<JoinHandle<()>>>,
}

/// One relayed connection: the client's side and the target's side.
#[derive(Debug)]
struct Link {
    client: TcpStream,
    target: TcpStream,
    /// Blackholed: bytes are read and dropped in both directions.
    holed: AtomicBool,
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

impl FaultProxy {
    /// Starts relaying `127.0.0.1:<free port>` to `127.0.0.1:target_port`.
    ///
    /// # Panics
    ///
    /// If no loopback port can be bound or a thread cannot be spawned.
    pub fn start(target_port: u16) -> FaultProxy {
        let listener =
            TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).expect("fault proxy: bind a free port");
        let port = listener
            .local_addr()
            .expect("fault proxy: local address")
            .port();
        let shared = Arc::new(Shared {
            target_port: AtomicU16::new(target_port),
            stopping: AtomicBool::new(false),
            hold_new: AtomicBool::new(false),
            accepted: AtomicUsize::new(0),
            reply_delay_us: AtomicU64::new(0),
            bandwidth: AtomicU64::new(0),
            link_free_at: [Mutex::new(Instant::now()), Mutex::new(Instant::now())],
            links: Mutex::new(Vec::new()),
            relays: Mutex::new(Vec::new()),
        });
        let accepting = Arc::clone(&shared);
        let acceptor = thread::Builder::new()
            .name("fault-proxy-accept".into())
            .spawn(move || accept(&listener, &accepting))
            .expect("fault proxy: spawn the acceptor");
        FaultProxy {
            port,
            shared,
            acceptor: Some(acceptor),
        }
    }

    /// The port clients connect to.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// `redis://127.0.0.1:<port>/`: a Redis URL through the proxy.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/", self.port)
    }

    /// Blackholes every connection accepted so far: from now on nothing
    /// passes in either direction, and neither side is closed. Returns how
    /// many connections were still open (and are now silent).
    pub fn blackhole(&self) -> usize {
        let links = lock(&self.shared.links);
        let mut open = 0;
        for link in links.iter() {
            if !link.holed.swap(true, Ordering::SeqCst) {
                open += 1;
            }
        }
        open
    }

    /// Blackholes only the `index`th connection accepted (from 0, in the
    /// order they were accepted), as [`blackhole`](Self::blackhole) does
    /// all of them. Returns whether there was such a connection, not
    /// blackholed yet.
    pub fn blackhole_connection(&self, index: usize) -> bool {
        lock(&self.shared.links)
            .get(index)
            .is_some_and(|link| !link.holed.swap(true, Ordering::SeqCst))
    }

    /// Closes every connection accepted so far, both sides (the client and
    /// the target each see their connection end), as a lost network link
    /// whose peers are told. Returns how many connections were accepted
    /// so far (those closed before included); connections accepted later
    /// relay (or start blackholed, see [`hold_new`](Self::hold_new)).
    pub fn cut(&self) -> usize {
        let links = lock(&self.shared.links);
        for link in links.iter() {
            let _ = link.client.shutdown(Shutdown::Both);
            let _ = link.target.shutdown(Shutdown::Both);
        }
        links.len()
    }

    /// Closes only the `index`th connection accepted (from 0, in the order
    /// they were accepted), both sides, as [`cut`](Self::cut) does all of
    /// them. Returns whether there was such a connection.
    pub fn cut_connection(&self, index: usize) -> bool {
        let links = lock(&self.shared.links);
        let Some(link) = links.get(index) else {
            return false;
        };
        let _ = link.client.shutdown(Shutdown::Both);
        let _ = link.target.shutdown(Shutdown::Both);
        true
    }

    /// Whether connections accepted from now on start blackholed (`true`:
    /// the host stays unreachable) or relay (`false`, the default).
    pub fn hold_new(&self, hold: bool) {
        self.shared.hold_new.store(hold, Ordering::SeqCst);
    }

    /// Relays connections accepted from now on to `127.0.0.1:target_port`;
    /// the connections already open stay with their server.
    pub fn retarget(&self, target_port: u16) {
        self.shared.target_port.store(target_port, Ordering::SeqCst);
    }

    /// Holds what the server sends, on every connection, for `delay` from
    /// when the proxy read it before passing it on (`Duration::ZERO`: pass
    /// it on at once, the default). Order is kept: bytes read later are
    /// never passed on before bytes read earlier. Requests are relayed at
    /// once, so the server does the work when asked and the client hears
    /// of it late.
    pub fn delay_replies(&self, delay: Duration) {
        let micros = u64::try_from(delay.as_micros()).unwrap_or(u64::MAX);
        self.shared.reply_delay_us.store(micros, Ordering::SeqCst);
    }

    /// Makes the proxy a link of `bytes_per_second` in each direction
    /// (`None`: as fast as loopback, the default), shared by every
    /// connection as the capacity of one network link is: bytes wait
    /// their turn, each chunk relayed once the link has had the time to
    /// send it and everything handed to it before. Applies to the bytes
    /// read from now on.
    pub fn limit_bandwidth(&self, bytes_per_second: Option<u64>) {
        self.shared
            .bandwidth
            .store(bytes_per_second.unwrap_or(0), Ordering::SeqCst);
    }

    /// How many connections the proxy has accepted so far.
    pub fn accepted(&self) -> usize {
        self.shared.accepted.load(Ordering::SeqCst)
    }
}

impl Drop for FaultProxy {
    fn drop(&mut self) {
        self.shared.stopping.store(true, Ordering::SeqCst);
        // Wakes the acceptor's blocking `accept`.
        let _ = TcpStream::connect((Ipv4Addr::LOCALHOST, self.port));
        if let Some(acceptor) = self.acceptor.take() {
            let _ = acceptor.join();
        }
        for link in lock(&self.shared.links).drain(..) {
            let _ = link.client.shutdown(Shutdown::Both);
            let _ = link.target.shutdown(Shutdown::Both);
        }
        let relays = std::mem::take(&mut *lock(&self.shared.relays));
        for relay in relays {
            let _ = relay.join();
        }
    }
}

/// Accepts connections until the proxy is dropped, starting two relay
/// threads for each.
fn accept(listener: &TcpListener, shared: &Arc<Shared>) {
    for client in listener.incoming() {
        if shared.stopping.load(Ordering::SeqCst) {
            return;
        }
        let Ok(client) = client else { continue };
        // A target that refuses: the client sees its connection closed.
        let target_port = shared.target_port.load(Ordering::SeqCst);
        let Ok(target) = TcpStream::connect(SocketAddr::from((Ipv4Addr::LOCALHOST, target_port)))
        else {
            continue;
        };
        let _ = client.set_nodelay(true);
        let _ = target.set_nodelay(true);
        let link = Arc::new(Link {
            client,
            target,
            holed: AtomicBool::new(shared.hold_new.load(Ordering::SeqCst)),
        });
        // Counted once listed: a connection `accepted` counts can be
        // blackholed by its index.
        lock(&shared.links).push(Arc::clone(&link));
        shared.accepted.fetch_add(1, Ordering::SeqCst);
        let mut relays = lock(&shared.relays);
        let (held, due) = mpsc::channel::<(Instant, Vec<u8>)>();
        let upstream = {
            let (link, shared) = (Arc::clone(&link), Arc::clone(shared));
            thread::Builder::new()
                .name("fault-proxy-relay".into())
                .spawn(move || relay(&link, &shared, true, None))
        };
        let downstream = {
            let (link, shared) = (Arc::clone(&link), Arc::clone(shared));
            thread::Builder::new()
                .name("fault-proxy-relay".into())
                .spawn(move || relay(&link, &shared, false, Some(held)))
        };
        let replies = {
            let link = Arc::clone(&link);
            thread::Builder::new()
                .name("fault-proxy-replies".into())
                .spawn(move || pass_on_when_due(&link, &due))
        };
        relays.extend([upstream, downstream, replies].into_iter().flatten());
    }
}

/// Bytes read from the target, each chunk with when it is due.
type Held = mpsc::Sender<(Instant, Vec<u8>)>;

/// Copies one direction of `link` (client to target if `upstream`) until
/// either side closes, at the proxy's bandwidth; while the link is
/// blackholed, reads and drops. A close is passed on only while the link
/// relays: a blackholed link stays open on both sides. Downstream, what is
/// read goes to `held` stamped with when it is due (the proxy's reply
/// delay from now), for [`pass_on_when_due`] to write.
fn relay(link: &Link, shared: &Shared, upstream: bool, held: Option<Held>) {
    let (from, to) = if upstream {
        (&link.client, &link.target)
    } else {
        (&link.target, &link.client)
    };
    let mut buf = [0u8; 16 * 1024];
    loop {
        let read = (&*from).read(&mut buf);
        let n = match read {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == ErrorKind::Interrupted => continue,
            Err(_) => break,
        };
        if link.holed.load(Ordering::SeqCst) {
            continue;
        }
        pace(shared, upstream, n);
        if let Some(held) = &held {
            let delay = Duration::from_micros(shared.reply_delay_us.load(Ordering::SeqCst));
            if held
                .send((Instant::now() + delay, buf[..n].to_vec()))
                .is_err()
            {
                break;
            }
            continue;
        }
        if (&*to).write_all(&buf[..n]).is_err() {
            break;
        }
    }
    // Downstream, the close is passed on by `pass_on_when_due` once the
    // held bytes are out (dropping `held` ends it).
    if held.is_none() && !link.holed.load(Ordering::SeqCst) {
        let _ = to.shutdown(Shutdown::Write);
    }
}

/// Writes the target's bytes to the client, each chunk once it is due, in
/// the order read; passes the close on once the reader is done.
fn pass_on_when_due(link: &Link, due: &mpsc::Receiver<(Instant, Vec<u8>)>) {
    for (at, bytes) in due {
        let wait = at.saturating_duration_since(Instant::now());
        if !wait.is_zero() {
            thread::sleep(wait);
        }
        if link.holed.load(Ordering::SeqCst) {
            continue;
        }
        if (&link.client).write_all(&bytes).is_err() {
            return;
        }
    }
    if !link.holed.load(Ordering::SeqCst) {
        let _ = link.client.shutdown(Shutdown::Write);
    }
}

/// Waits until the direction (`upstream` or not) has sent `bytes` more at
/// the proxy's bandwidth, after every byte handed to it before: the
/// transmission time of one shared link. No wait without a limit.
fn pace(shared: &Shared, upstream: bool, bytes: usize) {
    let rate = shared.bandwidth.load(Ordering::SeqCst);
    if rate == 0 {
        return;
    }
    let sent_at = {
        let mut free_at = lock(&shared.link_free_at[usize::from(upstream)]);
        let start = (*free_at).max(Instant::now());
        *free_at = start + Duration::from_secs_f64(bytes as f64 / rate as f64);
        *free_at
    };
    let now = Instant::now();
    if sent_at > now {
        thread::sleep(sent_at - now);
    }
}

//! The fixture against real `redis-server` processes.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use corral_testkit::{FaultProxy, RedisCluster, RedisServer};

/// Sends an inline `PING` over a raw TCP connection and reports whether
/// `+PONG` came back within `timeout` (independent of the fixture's client).
fn raw_ping(port: u16, timeout: Duration) -> bool {
    let attempt = || -> std::io::Result<bool> {
        let addr = ("127.0.0.1", port);
        let mut stream = TcpStream::connect(addr)?;
        stream.set_read_timeout(Some(timeout))?;
        stream.set_write_timeout(Some(timeout))?;
        stream.write_all(b"PING\r\n")?;
        let mut buf = [0_u8; 7];
        stream.read_exact(&mut buf)?;
        Ok(&buf == b"+PONG\r\n")
    };
    attempt().unwrap_or(false)
}

#[test]
fn starts_and_answers_ping() {
    let server = RedisServer::start();
    assert!(server.is_running());
    assert_eq!(server.cli(&["PING"]), "PONG");
    assert_eq!(
        server.url(),
        format!("redis://127.0.0.1:{}/", server.port())
    );
    assert_eq!(server.cli(&["CONFIG", "GET", "save"]), "save");
    assert_eq!(
        server.cli(&["CONFIG", "GET", "appendonly"]),
        "appendonly\nno"
    );
    assert!(server.log().contains("Ready to accept connections"));
}

#[test]
fn start_with_passes_extra_args() {
    let server = RedisServer::start_with(&["--maxmemory-policy", "allkeys-lru"]);
    assert_eq!(
        server.cli(&["CONFIG", "GET", "maxmemory-policy"]),
        "maxmemory-policy\nallkeys-lru"
    );
}

#[test]
fn freeze_stops_answers_and_thaw_resumes_them() {
    let server = RedisServer::start();
    let timeout = Duration::from_millis(300);
    assert!(raw_ping(server.port(), timeout));

    server.freeze();
    assert!(server.is_running(), "a frozen server is still running");
    assert!(!raw_ping(server.port(), timeout), "frozen server answered");
    assert!(!server.ping_within(timeout), "frozen server answered");

    server.thaw();
    assert!(raw_ping(server.port(), Duration::from_secs(5)));
    assert_eq!(server.cli(&["PING"]), "PONG");
}

#[test]
fn drop_kills_a_frozen_server() {
    let server = RedisServer::start();
    let port = server.port();
    let dir = server.dir().to_owned();
    server.freeze();
    drop(server);
    assert!(!raw_ping(port, Duration::from_millis(300)));
    assert!(!dir.exists(), "temp dir {} was left behind", dir.display());
}

#[test]
fn kill_then_restart_on_the_same_port_with_empty_data() {
    let mut server = RedisServer::start();
    let port = server.port();
    assert_eq!(server.cli(&["SET", "before-restart", "1"]), "OK");
    assert_eq!(server.cli(&["EXISTS", "before-restart"]), "1");

    server.kill();
    assert!(!server.is_running());
    assert_eq!(server.pid(), None);
    assert!(!server.ping_within(Duration::from_millis(300)));
    assert!(server.try_cli(&["PING"]).is_err());
    server.kill(); // idempotent

    server.restart();
    assert!(server.is_running());
    assert_eq!(server.port(), port);
    assert_eq!(server.cli(&["PING"]), "PONG");
    assert_eq!(server.cli(&["EXISTS", "before-restart"]), "0");
    assert_eq!(server.cli(&["DBSIZE"]), "0");

    // Restarting a running server works too.
    server.restart();
    assert_eq!(server.port(), port);
    assert_eq!(server.cli(&["PING"]), "PONG");
}

#[test]
fn command_stats_count_commands() {
    let server = RedisServer::start();
    server.cli(&["SET", "a", "1"]);
    server.reset_stats();
    assert_eq!(server.command_stats().get("set"), None);

    for key in ["a", "b", "c"] {
        assert_eq!(server.cli(&["SET", key, "1"]), "OK");
    }
    server.cli(&["GET", "a"]);
    let stats = server.command_stats();
    assert_eq!(stats.get("set"), Some(&3), "{stats:?}");
    assert_eq!(stats.get("get"), Some(&1), "{stats:?}");
}

#[test]
fn cluster_starts_healthy_and_hash_tags_share_a_slot() {
    let cluster = RedisCluster::start();
    assert_eq!(cluster.nodes().len(), 3);
    assert_eq!(cluster.urls().len(), 3);
    for node in cluster.nodes() {
        let info = node.cli(&["CLUSTER", "INFO"]);
        assert!(
            info.lines().any(|l| l.trim() == "cluster_state:ok"),
            "node {}: {info}",
            node.port()
        );
    }

    let node = &cluster.nodes()[0];
    let slot_x = node.cli(&["CLUSTER", "KEYSLOT", "{a}x"]);
    let slot_y = node.cli(&["CLUSTER", "KEYSLOT", "{a}y"]);
    assert_eq!(slot_x, slot_y);

    cluster.reset_stats();
    assert_eq!(node.cli(&["-c", "SET", "{a}x", "1"]), "OK");
    assert_eq!(node.cli(&["-c", "SET", "{a}y", "2"]), "OK");
    let holders: Vec<u16> = cluster
        .nodes()
        .iter()
        .filter(|n| n.cli(&["CLUSTER", "COUNTKEYSINSLOT", &slot_x]) == "2")
        .map(RedisServer::port)
        .collect();
    assert_eq!(holders.len(), 1, "both keys on one node: {holders:?}");
    assert_eq!(cluster.command_stats().get("set"), Some(&2));
}

/// Sends an inline `PING` on `stream` and reads `+PONG` within its read
/// timeout: `Ok(true)` on `+PONG`, `Ok(false)` when the read timed out.
fn ping_on(stream: &mut TcpStream) -> std::io::Result<bool> {
    stream.write_all(b"PING\r\n")?;
    let mut buf = [0_u8; 7];
    match stream.read_exact(&mut buf) {
        Ok(()) => Ok(&buf == b"+PONG\r\n"),
        Err(e)
            if matches!(
                e.kind(),
                std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
            ) =>
        {
            Ok(false)
        }
        Err(e) => Err(e),
    }
}

#[test]
fn fault_proxy_relays_and_blackholes_without_closing() {
    let server = RedisServer::start();
    let proxy = FaultProxy::start(server.port());
    let mut old = TcpStream::connect(("127.0.0.1", proxy.port())).expect("connect");
    old.set_read_timeout(Some(Duration::from_millis(300)))
        .expect("timeout");
    assert!(ping_on(&mut old).expect("relayed PING"), "relays");
    assert_eq!(proxy.accepted(), 1);

    assert_eq!(proxy.blackhole(), 1, "one open connection blackholed");
    // Silence, not a close: the write succeeds and the read times out
    // (a FIN would read 0 bytes, a RST an error).
    assert!(!ping_on(&mut old).expect("no error on a blackholed connection"));

    // A new connection relays (the route is back).
    let mut new = TcpStream::connect(("127.0.0.1", proxy.port())).expect("connect");
    new.set_read_timeout(Some(Duration::from_secs(5)))
        .expect("timeout");
    assert!(ping_on(&mut new).expect("PING on a new connection"));
    assert_eq!(proxy.accepted(), 2);

    // Held: new connections are silent too.
    proxy.hold_new(true);
    let mut held = TcpStream::connect(("127.0.0.1", proxy.port())).expect("connect");
    held.set_read_timeout(Some(Duration::from_millis(300)))
        .expect("timeout");
    assert!(!ping_on(&mut held).expect("no error on a held connection"));
    assert!(ping_on(&mut new).expect("the relaying connection still relays"));
}

/// Sends `GET big` on a new connection through `port` and reads the
/// `len`-byte reply whole.
fn get_big(port: u16, len: usize) -> Vec<u8> {
    let mut stream = TcpStream::connect(("127.0.0.1", port)).expect("connect");
    stream
        .write_all(b"*2\r\n$3\r\nGET\r\n$3\r\nbig\r\n")
        .expect("GET");
    let header = format!("${len}\r\n");
    let mut reply = vec![0_u8; header.len() + len + 2];
    stream.read_exact(&mut reply).expect("reply");
    assert!(reply.starts_with(header.as_bytes()));
    reply[header.len()..header.len() + len].to_vec()
}

#[test]
fn fault_proxy_limits_the_bandwidth_its_connections_share() {
    const LEN: usize = 200_000;
    let server = RedisServer::start();
    let proxy = FaultProxy::start(server.port());
    let value: Vec<u8> = (0..LEN).map(|i| (i % 251) as u8).collect();
    let mut set = TcpStream::connect(("127.0.0.1", proxy.port())).expect("connect");
    set.write_all(format!("*3\r\n$3\r\nSET\r\n$3\r\nbig\r\n${LEN}\r\n").as_bytes())
        .and_then(|()| set.write_all(&value))
        .and_then(|()| set.write_all(b"\r\n"))
        .expect("SET");
    let mut ok = [0_u8; 5];
    set.read_exact(&mut ok).expect("reply");
    assert_eq!(&ok, b"+OK\r\n");

    // 1 MB/s: two replies of 200 KB on two connections take 0.4 s at
    // least, however fast loopback is.
    proxy.limit_bandwidth(Some(1_000_000));
    let started = std::time::Instant::now();
    let port = proxy.port();
    let readers: Vec<_> = (0..2)
        .map(|_| std::thread::spawn(move || get_big(port, LEN)))
        .collect();
    for reader in readers {
        assert_eq!(reader.join().expect("reader"), value, "relayed whole");
    }
    let took = started.elapsed();
    assert!(took >= Duration::from_millis(390), "{took:?}");
    proxy.limit_bandwidth(None);
    assert_eq!(get_big(port, LEN), value);
}

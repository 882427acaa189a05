//! A `MONITOR` recorder: the commands a `redis-server` executes for its
//! clients, in execution order, read up to "now" without sleeping.
//!
//! "Now" is a marker: [`Monitor::commands`] sends `ECHO <marker>` on a
//! connection of its own and reads the `MONITOR` stream until the marker
//! shows up. Redis feeds `MONITOR` in the order it executes commands, so
//! everything executed before the `ECHO` was answered has been read by
//! then.
//!
//! A script's own commands (`[0 lua]` lines) follow the `EVAL`/`EVALSHA`/
//! `FCALL` that ran them; they are kept with it
//! ([`Executed::lua`]), apart from the client commands, which are what a
//! test counts.

use std::io::{BufRead, BufReader, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use crate::resp;
use crate::server::RedisServer;

/// How long [`Monitor::commands`] waits for its marker.
const MARKER_TIMEOUT: Duration = Duration::from_secs(10);
/// Prefix of every marker a [`Monitor`] sends.
const MARKER_PREFIX: &str = "corral-testkit-monitor:";
/// Commands only a connection in pub/sub mode sends (with `PING`).
const PUBSUB_COMMANDS: [&str; 6] = [
    "SUBSCRIBE",
    "UNSUBSCRIBE",
    "PSUBSCRIBE",
    "PUNSUBSCRIBE",
    "SSUBSCRIBE",
    "SUNSUBSCRIBE",
];

/// One command a client made the server execute, as `MONITOR` showed it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Executed {
    /// The client connection, as the server names it: `IP:PORT` (or
    /// `unix:PATH`), the `addr` of `CLIENT LIST`.
    pub client: String,
    /// The command's name and arguments as sent (bytes that are not UTF-8
    /// replaced by U+FFFD).
    pub args: Vec<String>,
    /// The commands a script run by this command executed (its `[0 lua]`
    /// lines), in order, each as name and arguments; empty for a command
    /// that ran no script.
    pub lua: Vec<Vec<String>>,
}

impl Executed {
    /// The command's name in upper case, e.g. `"EVALSHA"`.
    pub fn name(&self) -> String {
        self.args
            .first()
            .map(|name| name.to_ascii_uppercase())
            .unwrap_or_default()
    }

    /// Whether the script this command ran executed `command` (any case)
    /// with `arg` as one of its arguments.
    pub fn ran(&self, command: &str, arg: &str) -> bool {
        self.lua.iter().any(|call| {
            call.first()
                .is_some_and(|name| name.eq_ignore_ascii_case(command))
                && call.iter().skip(1).any(|a| a == arg)
        })
    }
}

impl RedisServer {
    /// Starts recording the commands the server executes for its clients
    /// (`MONITOR` on a connection of the recorder's own): see [`Monitor`].
    /// Commands executed after this returns are recorded.
    ///
    /// # Panics
    ///
    /// If the server does not answer within 10 s, or is a
    /// [TLS server](Self::start_tls).
    pub fn monitor(&self) -> Monitor<'_> {
        Monitor::start(self)
    }
}

/// A `MONITOR` connection to a [`RedisServer`], made by
/// [`RedisServer::monitor`]; closed on drop.
///
/// It records every command clients make the server execute, except:
/// - the traffic of connections in pub/sub mode (a subscriber's
///   `SUBSCRIBE`s and keep-alive `PING`s): a connection that `CLIENT LIST`
///   flags `P`, or that sent a `SUBSCRIBE`-family command, is left out
///   whole;
/// - a bare `PING`, `ROLE` or `TIME` (no argument) from any connection: a
///   health check (and its reading of the server's clock) on its own
///   schedule, not part of the operation a test records;
/// - the recorder's own marker connection (`CLIENT LIST`, `ECHO`);
/// - script commands, which are kept with the command that ran them.
///
/// Other requests of the fixture (`cli`, `command_stats`, ...) are
/// recorded like any client's: do not make them while recording.
#[derive(Debug)]
pub struct Monitor<'a> {
    server: &'a RedisServer,
    reader: BufReader<TcpStream>,
    /// Unique to this recorder on its server (its connection's own port).
    marker: String,
    taken: u64,
}

impl<'a> Monitor<'a> {
    /// Opens a connection to `server`, sends `MONITOR` and waits for its
    /// `OK`: every command executed after this returns is recorded.
    fn start(server: &'a RedisServer) -> Self {
        if server.is_tls() {
            fail(
                server,
                "a TLS server cannot be monitored by the fixture".to_owned(),
            );
        }
        let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, server.port()));
        let stream = TcpStream::connect_timeout(&addr, MARKER_TIMEOUT)
            .unwrap_or_else(|e| fail(server, format!("connect to {addr}: {e}")));
        stream
            .set_read_timeout(Some(MARKER_TIMEOUT))
            .and_then(|()| stream.set_nodelay(true))
            .unwrap_or_else(|e| fail(server, format!("configure the socket: {e}")));
        let own_port = stream
            .local_addr()
            .map(|local| local.port())
            .unwrap_or_else(|e| fail(server, format!("local address: {e}")));
        (&stream)
            .write_all(b"*1\r\n$7\r\nMONITOR\r\n")
            .unwrap_or_else(|e| fail(server, format!("send MONITOR: {e}")));
        let mut reader = BufReader::new(stream);
        let mut line = String::new();
        match reader.read_line(&mut line) {
            Ok(_) if line.trim_end() == "+OK" => {}
            Ok(_) => fail(server, format!("unexpected reply {line:?}")),
            Err(e) => fail(server, format!("read the reply: {e}")),
        }
        Self {
            server,
            reader,
            marker: format!("{MARKER_PREFIX}{}:{own_port}:", std::process::id()),
            taken: 0,
        }
    }

    /// Every client command the server executed since the recorder started
    /// (or since the last call), in execution order, without the traffic
    /// left out (see [`Monitor`]). Reads until its marker comes back.
    ///
    /// # Panics
    ///
    /// If the server does not answer, or the marker does not come back
    /// within 10 s; the message holds the server log tail.
    pub fn commands(&mut self) -> Vec<Executed> {
        self.taken += 1;
        let marker = format!("{}{}", self.marker, self.taken);
        let (own, subscribers) = self.mark(&marker);
        let deadline = Instant::now() + MARKER_TIMEOUT;
        let mut executed: Vec<Executed> = Vec::new();
        let mut line = Vec::new();
        loop {
            line.clear();
            if Instant::now() > deadline {
                self.fail(&format!("marker {marker:?} did not come back"));
            }
            match self.reader.read_until(b'\n', &mut line) {
                Ok(0) => self.fail("the server closed the MONITOR connection"),
                Ok(_) => {}
                Err(e) => self.fail(&format!("read: {e}")),
            }
            let Some((source, args)) = parse_line(&line) else {
                let text = String::from_utf8_lossy(&line);
                self.fail(&format!("unexpected MONITOR line {text:?}"));
            };
            if source == "lua" {
                // A script's command belongs to the client command before
                // it; one that started before the recorder is dropped.
                if let Some(last) = executed.last_mut() {
                    last.lua.push(args);
                }
                continue;
            }
            if source == own {
                if args.len() == 2 && args[0].eq_ignore_ascii_case("ECHO") && args[1] == marker {
                    break;
                }
                continue;
            }
            if args.len() == 1
                && ["PING", "ROLE", "TIME"]
                    .iter()
                    .any(|check| args[0].eq_ignore_ascii_case(check))
            {
                continue;
            }
            executed.push(Executed {
                client: source,
                args,
                lua: Vec::new(),
            });
        }
        let mut left_out = subscribers;
        left_out.extend(
            executed
                .iter()
                .filter(|command| PUBSUB_COMMANDS.contains(&command.name().as_str()))
                .map(|command| command.client.clone()),
        );
        executed.retain(|command| !left_out.contains(&command.client));
        executed
    }

    /// Sends `CLIENT LIST` and `ECHO marker` on a new connection: that
    /// connection's address and the addresses of the connections in
    /// pub/sub mode.
    fn mark(&self, marker: &str) -> (String, Vec<String>) {
        let port = self.server.port();
        let replies = resp::commands(
            port,
            &[&["CLIENT", "LIST"], &["ECHO", marker]],
            MARKER_TIMEOUT,
        )
        .unwrap_or_else(|e| self.fail(&format!("CLIENT LIST + ECHO: {e}")));
        let (own, replies) = replies;
        let list = replies
            .first()
            .cloned()
            .flatten()
            .unwrap_or_else(|| self.fail("CLIENT LIST answered nil"));
        (own, pubsub_clients(&list))
    }

    fn fail(&self, why: &str) -> ! {
        fail(self.server, why.to_owned())
    }
}

/// Panics with `why` about `server`'s recorder.
fn fail(server: &RedisServer, why: String) -> ! {
    server.fail(&format!("MONITOR: {why}"))
}

/// The `addr` of each client that `CLIENT LIST` flags as in pub/sub mode.
fn pubsub_clients(list: &str) -> Vec<String> {
    list.lines()
        .filter_map(|client| {
            let field = |name: &str| {
                client
                    .split(' ')
                    .find_map(|pair| pair.strip_prefix(name)?.strip_prefix('='))
            };
            field("flags")
                .is_some_and(|flags| flags.contains('P'))
                .then(|| field("addr").map(str::to_owned))
                .flatten()
        })
        .collect()
}

/// Splits a `MONITOR` line — `+1700000000.123456 [0 127.0.0.1:5000]
/// "SET" "k" "v"` — into its source (`127.0.0.1:5000`, `lua`,
/// `unix:/path`) and its unescaped arguments.
fn parse_line(line: &[u8]) -> Option<(String, Vec<String>)> {
    let line = line.strip_prefix(b"+")?;
    let line = line.strip_suffix(b"\r\n").or(line.strip_suffix(b"\n"))?;
    let open = line.iter().position(|&b| b == b'[')?;
    let close = open + line[open..].iter().position(|&b| b == b']')?;
    let inside = std::str::from_utf8(&line[open + 1..close]).ok()?;
    let (_db, source) = inside.split_once(' ')?;
    let args = unquote_all(&line[close + 1..])?;
    Some((source.to_owned(), args))
}

/// The arguments of a `MONITOR` line: each in double quotes, escaped as
/// Redis's `sdscatrepr` escapes (`\\`, `\"`, `\n`, `\r`, `\t`, `\a`, `\b`,
/// `\xHH`).
fn unquote_all(mut rest: &[u8]) -> Option<Vec<String>> {
    let mut args = Vec::new();
    loop {
        while let [b' ', tail @ ..] = rest {
            rest = tail;
        }
        let [b'"', tail @ ..] = rest else {
            return rest.is_empty().then_some(args);
        };
        rest = tail;
        let mut arg = Vec::new();
        loop {
            match rest {
                [b'"', tail @ ..] => {
                    rest = tail;
                    break;
                }
                [b'\\', b'x', high, low, tail @ ..] => {
                    let hex = [*high, *low];
                    let hex = std::str::from_utf8(&hex).ok()?;
                    arg.push(u8::from_str_radix(hex, 16).ok()?);
                    rest = tail;
                }
                [b'\\', escaped, tail @ ..] => {
                    arg.push(match escaped {
                        b'n' => b'\n',
                        b'r' => b'\r',
                        b't' => b'\t',
                        b'a' => 0x07,
                        b'b' => 0x08,
                        other => *other,
                    });
                    rest = tail;
                }
                [byte, tail @ ..] => {
                    arg.push(*byte);
                    rest = tail;
                }
                [] => return None,
            }
        }
        args.push(String::from_utf8_lossy(&arg).into_owned());
    }
}

#[cfg(test)]
mod tests {
    use std::io::{BufRead, BufReader, Write};
    use std::net::TcpStream;
    use std::time::Duration;

    use super::{parse_line, pubsub_clients};
    use crate::resp;
    use crate::RedisServer;

    const TIMEOUT: Duration = Duration::from_secs(5);

    #[test]
    fn records_client_commands_with_their_scripts_up_to_now() {
        let server = RedisServer::start();
        server.request(&["SET", "before", "1"]);
        let mut monitor = server.monitor();
        // A subscriber, in pub/sub mode before the first marker: left out.
        let subscriber = TcpStream::connect(("127.0.0.1", server.port())).expect("connect");
        (&subscriber)
            .write_all(b"*2\r\n$9\r\nSUBSCRIBE\r\n$2\r\nch\r\n*1\r\n$4\r\nPING\r\n")
            .expect("subscribe");
        let mut confirmed = BufReader::new(&subscriber);
        let mut line = String::new();
        while !line.starts_with("+PONG") && !line.starts_with("pong") {
            line.clear();
            confirmed.read_line(&mut line).expect("subscriber reply");
        }
        server.request(&["SET", "k", "v"]);
        let script = "redis.call('SET', KEYS[1], ARGV[1]) return redis.call('GET', KEYS[1])";
        server.request(&["EVAL", script, "1", "s", "a\"b\n"]);
        // A health check's bare PING or ROLE is left out; a PING with an
        // argument is kept.
        server.request(&["PING"]);
        server.cli(&["ROLE"]);
        server.cli(&["TIME"]);
        server.request(&["PING", "hello"]);

        let commands = monitor.commands();
        let names: Vec<String> = commands.iter().map(|command| command.name()).collect();
        assert_eq!(names, ["SET", "EVAL", "PING"], "{commands:?}");
        assert_eq!(commands[2].args, strings(&["PING", "hello"]));
        assert_eq!(commands[0].args, strings(&["SET", "k", "v"]));
        assert!(commands[0].lua.is_empty());
        assert_eq!(
            commands[1].lua,
            [strings(&["SET", "s", "a\"b\n"]), strings(&["GET", "s"])]
        );
        assert!(commands[1].ran("set", "a\"b\n") && !commands[1].ran("DEL", "s"));

        // Up to now, and only what came after the last call.
        assert_eq!(monitor.commands(), []);
        let (client, _) = resp::commands(server.port(), &[&["GET", "k"]], TIMEOUT).expect("GET");
        let commands = monitor.commands();
        assert_eq!(commands.len(), 1, "{commands:?}");
        assert_eq!(commands[0].client, client);
        assert_eq!(commands[0].args, strings(&["GET", "k"]));
    }

    fn strings(args: &[&str]) -> Vec<String> {
        args.iter().map(|&arg| arg.to_owned()).collect()
    }

    #[test]
    fn parses_client_and_script_lines() {
        let line = b"+1796404324.158677 [0 127.0.0.1:39390] \"evalsha\" \"ab\" \"1\" \"k\"\r\n";
        assert_eq!(
            parse_line(line),
            Some((
                "127.0.0.1:39390".to_owned(),
                strings(&["evalsha", "ab", "1", "k"])
            ))
        );
        let line = b"+1796404324.158735 [0 lua] \"SET\" \"k\" \"a\\\"b\\n\\\\\\x01\\xff\"\r\n";
        assert_eq!(
            parse_line(line),
            Some((
                "lua".to_owned(),
                strings(&["SET", "k", "a\"b\n\\\u{1}\u{fffd}"])
            ))
        );
        let line = b"+1.0 [3 unix:/tmp/redis.sock] \"PING\" \"a b\"\r\n";
        assert_eq!(
            parse_line(line),
            Some(("unix:/tmp/redis.sock".to_owned(), strings(&["PING", "a b"])))
        );
    }

    #[test]
    fn refuses_what_is_not_a_monitor_line() {
        assert_eq!(parse_line(b"+OK\r\n"), None);
        assert_eq!(parse_line(b"-ERR no\r\n"), None);
        assert_eq!(parse_line(b"+1.0 [0 lua] \"unterminated\r\n"), None);
    }

    #[test]
    fn finds_connections_in_pubsub_mode() {
        let list = "id=3 addr=127.0.0.1:5001 laddr=127.0.0.1:6379 fd=8 name= flags=P db=0 sub=1\n\
                    id=4 addr=127.0.0.1:5002 laddr=127.0.0.1:6379 fd=9 name= flags=N db=0 sub=0\n\
                    id=5 addr=127.0.0.1:5003 laddr=127.0.0.1:6379 fd=10 name= flags=O db=0 sub=0\n";
        assert_eq!(pubsub_clients(list), strings(&["127.0.0.1:5001"]));
    }
}

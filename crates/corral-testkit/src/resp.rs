//! A minimal RESP2 client, enough for the fixture's own readiness checks and
//! `INFO`/`CLUSTER` queries and the `MONITOR` recorder's markers. It only ever connects to 127.0.0.1.

use std::io::{BufRead, BufReader, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpStream};
use std::time::Duration;

/// A reply the fixture understands: simple strings, integers and bulk strings
/// are returned as text, `nil` as `None`.
pub(crate) type Reply = Option<String>;

/// Sends one command to `127.0.0.1:port` on a fresh connection and reads one
/// reply, with `timeout` applied to the connect, every write and every read.
///
/// `Err` carries a human-readable reason (I/O error, timeout, or the server's
/// error reply).
pub(crate) fn command(port: u16, args: &[&str], timeout: Duration) -> Result<Reply, String> {
    let (_, mut replies) = commands(port, &[args], timeout)?;
    replies.pop().ok_or_else(|| "no reply".to_owned())
}

/// Sends `requests` pipelined to `127.0.0.1:port` on a fresh connection and
/// reads one reply each, with `timeout` applied to the connect, every
/// write and every read: the connection's own address (`127.0.0.1:PORT`,
/// as the server names it) and the replies, in order.
///
/// `Err` carries a human-readable reason (I/O error, timeout, or the
/// server's error reply to any of them).
pub(crate) fn commands(
    port: u16,
    requests: &[&[&str]],
    timeout: Duration,
) -> Result<(String, Vec<Reply>), String> {
    let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
    let stream = TcpStream::connect_timeout(&addr, timeout)
        .map_err(|e| format!("connect to {addr}: {e}"))?;
    stream
        .set_read_timeout(Some(timeout))
        .and_then(|()| stream.set_write_timeout(Some(timeout)))
        .and_then(|()| stream.set_nodelay(true))
        .map_err(|e| format!("configure socket to {addr}: {e}"))?;
    let own = stream
        .local_addr()
        .map_err(|e| format!("local address of a socket to {addr}: {e}"))?
        .to_string();

    let mut request = Vec::new();
    for args in requests {
        request.extend_from_slice(format!("*{}\r\n", args.len()).as_bytes());
        for arg in *args {
            request.extend_from_slice(format!("${}\r\n", arg.len()).as_bytes());
            request.extend_from_slice(arg.as_bytes());
            request.extend_from_slice(b"\r\n");
        }
    }
    (&stream)
        .write_all(&request)
        .map_err(|e| format!("write to {addr}: {e}"))?;

    let mut reader = BufReader::new(&stream);
    let replies = requests
        .iter()
        .map(|_| read_reply(&mut reader).map_err(|e| format!("reply from {addr}: {e}")))
        .collect::<Result<_, _>>()?;
    Ok((own, replies))
}

fn read_reply(reader: &mut impl BufRead) -> Result<Reply, String> {
    let mut line = String::new();
    let n = reader.read_line(&mut line).map_err(|e| e.to_string())?;
    if n == 0 {
        return Err("connection closed before a reply".to_owned());
    }
    let line = line.trim_end_matches(['\r', '\n']);
    let (kind, rest) = line.split_at(line.len().min(1));
    match kind {
        "+" | ":" => Ok(Some(rest.to_owned())),
        "-" => Err(format!("error reply: {rest}")),
        "$" => {
            let len: i64 = rest
                .parse()
                .map_err(|_| format!("bad bulk length {rest:?}"))?;
            let Ok(len) = usize::try_from(len) else {
                return Ok(None);
            };
            let mut buf = vec![0_u8; len + 2];
            reader.read_exact(&mut buf).map_err(|e| e.to_string())?;
            buf.truncate(len);
            String::from_utf8(buf)
                .map(Some)
                .map_err(|_| "bulk reply is not UTF-8".to_owned())
        }
        _ => Err(format!("unsupported reply {line:?}")),
    }
}

#[cfg(test)]
mod tests {
    use super::read_reply;

    #[test]
    fn parses_replies() {
        let mut r: &[u8] = b"+PONG\r\n";
        assert_eq!(read_reply(&mut r), Ok(Some("PONG".to_owned())));
        let mut r: &[u8] = b":42\r\n";
        assert_eq!(read_reply(&mut r), Ok(Some("42".to_owned())));
        let mut r: &[u8] = b"$5\r\na\r\nbc\r\n";
        assert_eq!(read_reply(&mut r), Ok(Some("a\r\nbc".to_owned())));
        let mut r: &[u8] = b"$-1\r\n";
        assert_eq!(read_reply(&mut r), Ok(None));
        let mut r: &[u8] = b"-ERR nope\r\n";
        assert!(read_reply(&mut r).is_err());
        let mut r: &[u8] = b"";
        assert!(read_reply(&mut r).is_err());
    }
}

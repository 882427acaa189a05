//! RESP2 replies read straight off a byte buffer into redis-rs [`Value`]s:
//! what the batched reads' own connections ([`lanes`](super::lanes)) read
//! instead of redis-rs's general parser, which costs an `MGET` about as
//! much per value as a whole `GET`.
//!
//! Only the types a RESP2 server sends are read: simple strings, errors,
//! integers, bulk strings and arrays (nil bulk strings and arrays as
//! [`Value::Nil`]). A reply is checked whole before any of it is copied,
//! so a buffer holding part of a reply costs a scan, never an allocation;
//! anything else (a RESP3 type, a malformed length, nesting deeper than
//! [`MAX_DEPTH`]) is a [`Malformed`] reply.

use ::redis::Value;

/// The deepest nesting of arrays read (a batch's replies are one deep).
const MAX_DEPTH: usize = 8;

/// The longest bulk string read: Redis' own bound (`proto-max-bulk-len`'s
/// default is 512 MiB).
const MAX_BULK: usize = 512 << 20;

/// Bytes that are not a RESP2 reply, with what was wrong.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(in crate::redis) struct Malformed(pub(in crate::redis) &'static str);

/// The end (exclusive) of the whole reply starting at `at` in `buf`;
/// `Ok(None)` if `buf` holds only part of it. Copies nothing: what to ask
/// before [`read`]ing a reply found cut short once, so that a long reply
/// arriving in many pieces is not copied again for each.
pub(in crate::redis) fn complete(buf: &[u8], at: usize) -> Result<Option<usize>, Malformed> {
    scan(buf, at, 0)
}

/// The reply starting at `at` in `buf` and the position after it;
/// `Ok(None)` if `buf` holds only part of it (what was copied of it is
/// dropped).
pub(in crate::redis) fn read(buf: &[u8], at: usize) -> Result<Option<(Value, usize)>, Malformed> {
    value(buf, at, 0)
}

fn scan(buf: &[u8], at: usize, depth: usize) -> Result<Option<usize>, Malformed> {
    let Some((kind, number, body)) = header(buf, at)? else {
        return Ok(None);
    };
    match kind {
        b'+' | b'-' | b':' => Ok(Some(body)),
        b'$' => match bulk_len(number)? {
            None => Ok(Some(body)),
            Some(len) => match buf.get(body + len..body + len + 2) {
                None => Ok(None),
                Some(b"\r\n") => Ok(Some(body + len + 2)),
                Some(_) => Err(Malformed("a bulk string not ended by CRLF")),
            },
        },
        b'*' => {
            if depth >= MAX_DEPTH {
                return Err(Malformed("arrays nested too deep"));
            }
            let Some(items) = array_len(number)? else {
                return Ok(Some(body));
            };
            let mut next = body;
            for _ in 0..items {
                match scan(buf, next, depth + 1)? {
                    Some(end) => next = end,
                    None => return Ok(None),
                }
            }
            Ok(Some(next))
        }
        _ => Err(Malformed("a reply type RESP2 does not have")),
    }
}

fn value(buf: &[u8], at: usize, depth: usize) -> Result<Option<(Value, usize)>, Malformed> {
    let Some((kind, number, body)) = header(buf, at)? else {
        return Ok(None);
    };
    let line = &buf[at + 1..body - 2];
    let value = match kind {
        b'+' if line == b"OK" => Value::Okay,
        b'+' => Value::SimpleString(String::from_utf8_lossy(line).into_owned()),
        // Errors are rare: redis-rs's own parser classifies them.
        b'-' => ::redis::parse_redis_value(&buf[at..body])
            .map_err(|_| Malformed("an error reply redis-rs cannot read"))?,
        b':' => Value::Int(number.ok_or(Malformed("a bad integer"))?),
        b'$' => match bulk_len(number)? {
            None => Value::Nil,
            Some(len) => {
                let end = body + len;
                let Some(ending) = buf.get(end..end + 2) else {
                    return Ok(None);
                };
                if ending != b"\r\n" {
                    return Err(Malformed("a bulk string not ended by CRLF"));
                }
                return Ok(Some((Value::BulkString(buf[body..end].to_vec()), end + 2)));
            }
        },
        b'*' => {
            if depth >= MAX_DEPTH {
                return Err(Malformed("arrays nested too deep"));
            }
            let Some(items) = array_len(number)? else {
                return Ok(Some((Value::Nil, body)));
            };
            let mut values = Vec::with_capacity(items.min(buf.len() - body));
            let mut next = body;
            for _ in 0..items {
                let Some((item, end)) = value(buf, next, depth + 1)? else {
                    return Ok(None);
                };
                values.push(item);
                next = end;
            }
            return Ok(Some((Value::Array(values), next)));
        }
        _ => return Err(Malformed("a reply type RESP2 does not have")),
    };
    Ok(Some((value, body)))
}

/// The reply's type byte, its line's number (for the types that carry
/// one), and where its body begins (after the line's CRLF); `None` while
/// the line is incomplete.
fn header(buf: &[u8], at: usize) -> Result<Option<(u8, Option<i64>, usize)>, Malformed> {
    let Some(&kind) = buf.get(at) else {
        return Ok(None);
    };
    let Some(newline) = buf[at + 1..].iter().position(|&b| b == b'\n') else {
        return Ok(None);
    };
    let end = at + 1 + newline;
    if end == at + 1 || buf[end - 1] != b'\r' {
        return Err(Malformed("a line not ended by CRLF"));
    }
    let line = &buf[at + 1..end - 1];
    let number = match kind {
        b':' | b'$' | b'*' => Some(integer(line).ok_or(Malformed("a bad length or integer"))?),
        _ => None,
    };
    Ok(Some((kind, number, end + 1)))
}

fn integer(line: &[u8]) -> Option<i64> {
    let (negative, digits) = match line.split_first() {
        Some((b'-', rest)) => (true, rest),
        _ => (false, line),
    };
    if digits.is_empty() || digits.len() > 19 {
        return None;
    }
    let mut n: i64 = 0;
    for &d in digits {
        if !d.is_ascii_digit() {
            return None;
        }
        n = n.checked_mul(10)?.checked_add(i64::from(d - b'0'))?;
    }
    Some(if negative { -n } else { n })
}

/// A bulk string's length; `None` for the nil bulk string (`$-1`).
fn bulk_len(number: Option<i64>) -> Result<Option<usize>, Malformed> {
    match number {
        Some(-1) => Ok(None),
        Some(n) => usize::try_from(n)
            .ok()
            .filter(|&len| len <= MAX_BULK)
            .map(Some)
            .ok_or(Malformed("a bad bulk string length")),
        None => Err(Malformed("a bad bulk string length")),
    }
}

/// An array's length; `None` for the nil array (`*-1`).
fn array_len(number: Option<i64>) -> Result<Option<usize>, Malformed> {
    match number {
        Some(-1) => Ok(None),
        Some(n) => usize::try_from(n)
            .map(Some)
            .map_err(|_| Malformed("a bad array length")),
        None => Err(Malformed("a bad array length")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn whole(bytes: &[u8]) -> Value {
        assert_eq!(complete(bytes, 0), Ok(Some(bytes.len())), "{bytes:?}");
        let (value, end) = read(bytes, 0).expect("reads").expect("whole");
        assert_eq!(end, bytes.len());
        value
    }

    #[test]
    fn reads_what_redis_rs_reads() {
        let replies: [&[u8]; 9] = [
            b"+OK\r\n",
            b"+PONG\r\n",
            b":-2\r\n",
            b":1234567\r\n",
            b"$-1\r\n",
            b"$0\r\n\r\n",
            b"$5\r\nhe\r\no\r\n",
            b"*3\r\n$1\r\na\r\n$-1\r\n:7\r\n",
            b"*2\r\n*1\r\n+x\r\n*-1\r\n",
        ];
        for reply in replies {
            let ours = whole(reply);
            let theirs = ::redis::parse_redis_value(reply).expect("redis-rs reads it");
            assert_eq!(ours, theirs, "{}", String::from_utf8_lossy(reply));
        }
    }

    #[test]
    fn error_replies_are_server_errors_redis_rs_classifies() {
        let refused = whole(b"-NOPERM this user has no permissions to run the 'mget' command\r\n");
        let Value::ServerError(error) = refused else {
            panic!("not a server error: {refused:?}");
        };
        assert_eq!(error.code(), "NOPERM");
        let wrong = whole(b"*1\r\n-WRONGTYPE Operation against a key\r\n");
        assert!(
            matches!(wrong, Value::Array(ref items) if matches!(&items[0], Value::ServerError(e) if e.code() == "WRONGTYPE"))
        );
    }

    #[test]
    fn every_cut_of_a_reply_is_incomplete_not_wrong() {
        let reply = b"*4\r\n:5\r\n$3\r\nabc\r\n$-1\r\n*1\r\n+OK\r\n";
        for cut in 0..reply.len() {
            assert_eq!(complete(&reply[..cut], 0), Ok(None), "cut at {cut}");
            assert_eq!(read(&reply[..cut], 0), Ok(None), "cut at {cut}");
        }
        assert_eq!(complete(reply, 0), Ok(Some(reply.len())));
        // Replies one after another: each found from where the last ended.
        let two = [&reply[..], b":9\r\n"].concat();
        let end = complete(&two, 0).expect("well formed").expect("whole");
        assert_eq!(read(&two, end), Ok(Some((Value::Int(9), two.len()))));
    }

    #[test]
    fn malformed_bytes_are_errors_not_panics() {
        let bad: [&[u8]; 10] = [
            b"%1\r\n",
            b"_\r\n",
            b"$x\r\n",
            b"$-2\r\n",
            b"*-5\r\n",
            b":\r\n",
            b":99999999999999999999\r\n",
            b"+OK\n",
            b"\r\n",
            b"$3\r\nabcd\r\n",
        ];
        for reply in bad {
            let scanned = complete(reply, 0);
            let read = read(reply, 0);
            assert!(
                scanned.is_err() && read.is_err(),
                "{} was taken as a reply",
                String::from_utf8_lossy(reply)
            );
        }
        let deep = "*1\r\n".repeat(MAX_DEPTH + 1) + ":1\r\n";
        assert!(complete(deep.as_bytes(), 0).is_err());
    }

    proptest::proptest! {
        /// Any bytes: an answer or an error, never a panic; what is read
        /// whole is what redis-rs reads.
        #[test]
        fn any_bytes_are_read_or_refused(bytes in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..64)) {
            let scanned = complete(&bytes, 0);
            if let Ok(Some((value, end))) = read(&bytes, 0) {
                proptest::prop_assert_eq!(scanned, Ok(Some(end)));
                if let Ok(theirs) = ::redis::parse_redis_value(&bytes[..end]) {
                    proptest::prop_assert_eq!(value, theirs);
                }
            }
        }

        /// Well-formed replies cut anywhere are incomplete, never wrong.
        #[test]
        fn arrays_of_bulk_strings_read_whole_and_cut(values in proptest::collection::vec(proptest::option::of(proptest::collection::vec(proptest::prelude::any::<u8>(), 0..40)), 0..8), cut in 0usize..400) {
            let mut bytes = format!("*{}\r\n", values.len()).into_bytes();
            for value in &values {
                match value {
                    Some(value) => {
                        bytes.extend_from_slice(format!("${}\r\n", value.len()).as_bytes());
                        bytes.extend_from_slice(value);
                        bytes.extend_from_slice(b"\r\n");
                    }
                    None => bytes.extend_from_slice(b"$-1\r\n"),
                }
            }
            let expected = Value::Array(values.iter().map(|value| match value {
                Some(value) => Value::BulkString(value.clone()),
                None => Value::Nil,
            }).collect());
            proptest::prop_assert_eq!(read(&bytes, 0), Ok(Some((expected, bytes.len()))));
            let cut = cut.min(bytes.len());
            if cut < bytes.len() {
                proptest::prop_assert_eq!(complete(&bytes[..cut], 0), Ok(None));
                proptest::prop_assert_eq!(read(&bytes[..cut], 0), Ok(None));
            }
        }
    }
}

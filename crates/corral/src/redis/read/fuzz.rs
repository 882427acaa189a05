//! The RESP2 reader on arbitrary bytes, for [`crate::fuzzing::resp`]
//! (feature `test-hooks`).

use super::resp::{complete, read};

/// Reads `bytes` as a reply starting at 0 and checks what holds for any
/// input: the scan ([`complete`]) and the read agree on where a reply
/// ends and on what is refused; a reply read whole is what redis-rs reads,
/// reads the same from any offset, and every cut of it is incomplete,
/// never wrong.
pub(crate) fn resp(bytes: &[u8]) {
    let scanned = complete(bytes, 0);
    let Ok(Some((value, end))) = read(bytes, 0) else {
        match (scanned, read(bytes, 0)) {
            (Err(_), read) => assert!(read.is_err(), "the scan refused what the read took"),
            (Ok(Some(_)), read) => assert!(read.is_err(), "the read found cut short a whole reply"),
            // Cut short for both, or refused by the read alone (a whole
            // error reply redis-rs cannot read).
            (Ok(None), _) => {}
        }
        return;
    };
    assert_eq!(scanned, Ok(Some(end)), "the scan and the read end apart");
    if let Ok(theirs) = ::redis::parse_redis_value(&bytes[..end]) {
        assert_eq!(value, theirs, "redis-rs reads this reply otherwise");
    }

    // The same reply behind other bytes, read from where it starts.
    let mut behind = vec![b'+', b'x', b'\r', b'\n'];
    behind.extend_from_slice(bytes);
    assert_eq!(complete(&behind, 4), Ok(Some(end + 4)));
    assert_eq!(read(&behind, 4), Ok(Some((value, end + 4))));

    // A few cuts (every cut would make a run quadratic in the input).
    let first = usize::from(bytes.first().copied().unwrap_or(0));
    for cut in [end - 1, end / 2, first % end] {
        assert_eq!(complete(&bytes[..cut], 0), Ok(None), "cut at {cut}");
        assert_eq!(read(&bytes[..cut], 0), Ok(None), "cut at {cut}");
    }
}

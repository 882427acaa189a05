//! The slot item of a logical key: fence, generation and value in one
//! memcached item, so one `cas` guards all three.
//!
//! ```text
//! offset size field
//!  0     1    tag 0xC1 (never a byte of UTF-8 text)
//!  1     1    f: length of the fence token, 0..=64 (0: no fence)
//!  2     f    the fence token (lowercase hex)
//!  2+f   1    g: length of the generation token, 0..=64 (0: none)
//!  3+f   g    the generation token (lowercase hex)
//!  3+f+g 4    extra: whole seconds the item outlives its value (u32, BE)
//!  7+f+g 1    1 if a value follows, 0 if not
//!  8+f+g ...  the envelope bytes
//! ```
//!
//! Anything else is *unframed* (bytes written by something else): all of it
//! is the value, with no fence and no generation, so a refresh over
//! "no generation" replaces it and no commit can match its fence.

use std::sync::Arc;

const TAG: u8 = 0xC1;
const MAX_TOKEN: usize = 64;

/// The decoded slot item.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(super) struct Slot {
    /// The fence token.
    pub(super) fence: Option<Arc<str>>,
    /// The token of the write that produced the value.
    pub(super) generation: Option<Arc<str>>,
    /// Seconds the item outlives the value (the fence of a refresh lease
    /// may need longer than the value has left).
    pub(super) extra: u32,
    /// The envelope bytes.
    pub(super) value: Option<Vec<u8>>,
}

fn put_token(out: &mut Vec<u8>, token: Option<&str>) {
    let token = token.filter(|t| t.len() <= MAX_TOKEN).unwrap_or("");
    out.push(token.len() as u8);
    out.extend_from_slice(token.as_bytes());
}

fn take_token(bytes: &[u8]) -> Option<(Option<Arc<str>>, &[u8])> {
    let (&n, rest) = bytes.split_first()?;
    let n = usize::from(n);
    if n > MAX_TOKEN || rest.len() < n {
        return None;
    }
    let (token, rest) = rest.split_at(n);
    if !token
        .iter()
        .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(b))
    {
        return None;
    }
    let token = (n > 0).then(|| Arc::from(String::from_utf8_lossy(token).as_ref()));
    Some((token, rest))
}

impl Slot {
    /// The slot of a write of `value` by `token`: its fence and its
    /// generation.
    pub(super) fn written(token: Arc<str>, value: &[u8]) -> Self {
        Self {
            fence: Some(Arc::clone(&token)),
            generation: Some(token),
            extra: 0,
            value: Some(value.to_vec()),
        }
    }

    /// The item bytes.
    pub(super) fn encode(&self) -> Vec<u8> {
        let value_len = self.value.as_ref().map_or(0, Vec::len);
        let mut out = Vec::with_capacity(8 + 2 * MAX_TOKEN + value_len);
        out.push(TAG);
        put_token(&mut out, self.fence.as_deref());
        put_token(&mut out, self.generation.as_deref());
        out.extend_from_slice(&self.extra.to_be_bytes());
        match &self.value {
            Some(value) => {
                out.push(1);
                out.extend_from_slice(value);
            }
            None => out.push(0),
        }
        out
    }

    /// The slot in `bytes`; unframed bytes are a value without fence or
    /// generation.
    pub(super) fn decode(bytes: Vec<u8>) -> Slot {
        Self::framed(&bytes).unwrap_or(Slot {
            value: Some(bytes),
            ..Slot::default()
        })
    }

    fn framed(bytes: &[u8]) -> Option<Slot> {
        let (&tag, rest) = bytes.split_first()?;
        if tag != TAG {
            return None;
        }
        let (fence, rest) = take_token(rest)?;
        let (generation, rest) = take_token(rest)?;
        if rest.len() < 5 {
            return None;
        }
        let (extra, rest) = rest.split_at(4);
        let extra = u32::from_be_bytes([extra[0], extra[1], extra[2], extra[3]]);
        let value = match rest.split_first()? {
            (1, value) => Some(value.to_vec()),
            (0, []) => None,
            _ => return None,
        };
        Some(Slot {
            fence,
            generation,
            extra,
            value,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::Slot;

    #[test]
    fn slots_round_trip() {
        let slot = Slot {
            fence: Some("ab12".into()),
            generation: Some("cd".into()),
            extra: 7,
            value: Some(b"envelope".to_vec()),
        };
        assert_eq!(Slot::decode(slot.encode()), slot);
        let empty = Slot {
            fence: Some("ff".into()),
            ..Slot::default()
        };
        assert_eq!(Slot::decode(empty.encode()), empty);
    }

    #[test]
    fn foreign_bytes_are_an_unframed_value() {
        for bytes in [
            &b""[..],
            b"garbage",
            &[0xC1, 70],
            &[0xC1, 1, b'G', 0, 0, 0, 0, 0, 0],
        ] {
            let slot = Slot::decode(bytes.to_vec());
            assert_eq!(slot.value.as_deref(), Some(bytes));
            assert_eq!((slot.fence, slot.generation), (None, None));
        }
    }
}

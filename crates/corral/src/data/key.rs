//! What a key may be.

use std::fmt;

/// Why a key was rejected. See [`validate_key`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum InvalidKey {
    /// The key is the empty string.
    Empty,
    /// The key is longer than [`MAX_KEY_LEN`] bytes.
    TooLong {
        /// The key's length in bytes.
        len: usize,
    },
    /// The key contains a control character.
    ControlCharacter {
        /// Where the first one starts.
        byte_offset: usize,
    },
    /// A fill declared more distinct tags than an entry can carry (63).
    TooManyTags {
        /// How many distinct tags it declared.
        count: usize,
    },
}

impl fmt::Display for InvalidKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Empty => f.write_str("invalid key: empty"),
            Self::TooLong { len } => {
                write!(f, "invalid key: {len} bytes, the limit is {}", MAX_KEY_LEN)
            }
            Self::ControlCharacter { byte_offset } => {
                write!(f, "invalid key: control character at byte {byte_offset}")
            }
            Self::TooManyTags { count } => write!(
                f,
                "invalid tags: {count} distinct tags, the limit is {}",
                MAX_TAGS - 1
            ),
        }
    }
}

impl std::error::Error for InvalidKey {}

/// The longest key accepted, in bytes of UTF-8.
pub const MAX_KEY_LEN: usize = 1024;

/// The most tags one entry may carry (the clear version's among them).
pub(crate) const MAX_TAGS: usize = 64;

/// Checks a user key: 1 to [`MAX_KEY_LEN`] bytes of UTF-8 with no control
/// characters (Unicode category Cc: `\0`–`\x1f`, `\x7f`–`\u{9f}`).
///
/// Any other character is allowed, including `{`, `}`, `:` and spaces; stores
/// encode keys so that no user key can collide with another or with corral's
/// internal keys.
pub fn validate_key(key: &str) -> Result<(), InvalidKey> {
    if key.is_empty() {
        return Err(InvalidKey::Empty);
    }
    if key.len() > MAX_KEY_LEN {
        return Err(InvalidKey::TooLong { len: key.len() });
    }
    if let Some(byte_offset) = first_control(key) {
        return Err(InvalidKey::ControlCharacter { byte_offset });
    }
    Ok(())
}

/// Where the first control character of `key` starts, read byte by byte
/// (every `get_or_fill` that reaches the store checks its key): the ASCII
/// ones are single bytes, `\u{80}`–`\u{9f}` are `0xC2` then `0x80`–`0x9F`,
/// and a lead byte `0xC2` always starts a character.
fn first_control(key: &str) -> Option<usize> {
    let bytes = key.as_bytes();
    // Printable ASCII, the usual key: one comparison a byte, no branch.
    if bytes.iter().fold(true, |printable, &byte| {
        printable & (0x20..0x7f).contains(&byte)
    }) {
        return None;
    }
    bytes.iter().enumerate().find_map(|(at, &byte)| {
        let control = byte < 0x20
            || byte == 0x7f
            || (byte == 0xc2
                && bytes
                    .get(at + 1)
                    .is_some_and(|next| (0x80..=0x9f).contains(next)));
        control.then_some(at)
    })
}

/// Appends the `digits` low hexadecimal digits of `value` to `out`,
/// lowercase and zero-padded (at most 32), without the formatter.
pub(crate) fn push_hex(out: &mut String, value: u128, digits: usize) {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    for shift in (0..digits.min(32)).rev() {
        out.push(char::from(HEX[(value >> (4 * shift)) as usize & 0xf]));
    }
}

/// Appends `value` in decimal to `out`, without the formatter.
#[cfg_attr(not(feature = "redis"), allow(dead_code))]
pub(crate) fn push_decimal(out: &mut String, mut value: u64) {
    let mut digits = [0_u8; 20];
    let mut at = digits.len();
    loop {
        at -= 1;
        digits[at] = b'0' + (value % 10) as u8;
        value /= 10;
        if value == 0 {
            break;
        }
    }
    out.extend(digits[at..].iter().map(|&digit| char::from(digit)));
}

/// 64-bit FNV-1a of `bytes`: fixed by its specification, so every process
/// and version of corral derives the same hash for a key (Redis hash tags, trace labels) (unlike `std`'s
/// `DefaultHasher`, whose algorithm may change).
pub(crate) fn fnv1a64(bytes: &[u8]) -> u64 {
    fnv1a64_from(0xcbf2_9ce4_8422_2325, bytes)
}

/// FNV-1a of `bytes` continued from `hash` (the offset basis for a fresh
/// hash).
pub(crate) fn fnv1a64_from(hash: u64, bytes: &[u8]) -> u64 {
    const PRIME: u64 = 0x0000_0100_0000_01b3;
    bytes.iter().fold(hash, |hash, &byte| {
        (hash ^ u64::from(byte)).wrapping_mul(PRIME)
    })
}

/// How a key appears in traces: a stable hash (`h:` and 16 hex digits of
/// its FNV-1a) unless the cache was built with
/// [`trace_raw_keys`](crate::CacheBuilder::trace_raw_keys), so keys that
/// hold personal data stay out of logs. The same key gives the same label
/// in every process and every version of corral.
pub(crate) struct KeyLabel<'a> {
    pub(crate) key: &'a str,
    pub(crate) raw: bool,
}

impl std::fmt::Display for KeyLabel<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.raw {
            f.write_str(self.key)
        } else {
            write!(f, "h:{:016x}", fnv1a64(self.key.as_bytes()))
        }
    }
}

/// The longest cache name accepted.
pub(crate) const MAX_NAME_LEN: usize = 64;

/// Cache names label stats and namespace keys in shared stores: 1 to 64
/// characters from `A-Z a-z 0-9 _ - .`.
pub(crate) fn valid_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= MAX_NAME_LEN
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.'))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hex_and_decimal_without_the_formatter() {
        for value in [0_u128, 1, 0xab, u128::from(u64::MAX), u128::MAX] {
            let mut hex = String::new();
            push_hex(&mut hex, value, 32);
            assert_eq!(hex, format!("{value:032x}"));
        }
        let mut short = String::new();
        push_hex(&mut short, 0x1234_5678_9abc_def0_u128, 16);
        assert_eq!(short, "123456789abcdef0");
        for value in [0_u64, 7, 10, 999, 1_000_000, u64::MAX] {
            let mut text = String::new();
            push_decimal(&mut text, value);
            assert_eq!(text, value.to_string());
        }
    }

    #[test]
    fn accepts_braces_colons_unicode_and_max_length() {
        assert!(validate_key("}{a}:b c").is_ok());
        assert!(validate_key("ключ").is_ok());
        assert!(validate_key(&"k".repeat(MAX_KEY_LEN)).is_ok());
    }

    #[test]
    fn rejects_empty_long_and_control() {
        assert_eq!(validate_key(""), Err(InvalidKey::Empty));
        assert_eq!(
            validate_key(&"k".repeat(MAX_KEY_LEN + 1)),
            Err(InvalidKey::TooLong {
                len: MAX_KEY_LEN + 1
            })
        );
        assert_eq!(
            validate_key("ab\ncd"),
            Err(InvalidKey::ControlCharacter { byte_offset: 2 })
        );
        assert!(validate_key("a\0").is_err());
        assert!(validate_key("a\u{7f}").is_err());
    }

    #[test]
    fn control_characters_are_found_where_chars_say() {
        let by_chars = |key: &str| {
            key.char_indices()
                .find(|(_, c)| c.is_control())
                .map(|(at, _)| at)
        };
        let mut cases: Vec<String> = [
            "",
            "plain",
            "ключ",
            "é\u{9f}",
            "a\u{a0}b",
            "\u{c2}\u{80}",
            "x\u{80}",
            "\u{7e}\u{7f}",
        ]
        .iter()
        .map(|s| (*s).to_owned())
        .collect();
        for c in (0..0x250u32).filter_map(char::from_u32) {
            cases.push(format!("k{c}ey"));
            cases.push(format!("ж{c}"));
        }
        for key in &cases {
            assert_eq!(first_control(key), by_chars(key), "{key:?}");
        }
    }

    #[test]
    fn names() {
        assert!(valid_name("users.v2-a_b"));
        assert!(!valid_name(""));
        assert!(!valid_name("a{b}"));
        assert!(!valid_name("a:b"));
        assert!(!valid_name(&"n".repeat(65)));
    }
}

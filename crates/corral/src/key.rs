//! What a key may be.

use crate::error::InvalidKey;

/// The longest key accepted, in bytes of UTF-8.
pub const MAX_KEY_LEN: usize = 1024;

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
    if let Some(position) = key.char_indices().find(|(_, c)| c.is_control()) {
        return Err(InvalidKey::ControlCharacter {
            byte_offset: position.0,
        });
    }
    Ok(())
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
    fn names() {
        assert!(valid_name("users.v2-a_b"));
        assert!(!valid_name(""));
        assert!(!valid_name("a{b}"));
        assert!(!valid_name("a:b"));
        assert!(!valid_name(&"n".repeat(65)));
    }
}

//! The store-level frame around an envelope in a Redis value: the value's
//! generation travels with its bytes, so one plain `GET` reads both.
//!
//! ```text
//! offset size field
//!  0     1    tag 0xC0 (a byte that never occurs in UTF-8 text)
//!  1     1    n: length of the generation token, 1..=64
//!  2     n    the token: lowercase hex digits (the lease token of a
//!             commit, a fresh random token of a `set`), followed, where
//!             the writer knew the server's clock, by 12 more: the
//!             value's expiry on that clock (see `with_expiry`)
//!  2+n   ...  the envelope bytes, unchanged
//! ```
//!
//! Anything else — another tag, a bad length, a token that is not lowercase
//! hex, fewer than `2 + n` bytes — is *unframed*: all of its bytes are handed
//! on as the envelope (the cache's strict decoder then rejects foreign bytes
//! and counts them) and it has no generation. The Lua scripts parse frames
//! by the same rule ([`LUA_GENERATION`]), where "no generation" is the empty
//! string, as [`Grant::OverGeneration(None)`](crate::store::Grant) is sent:
//! so a value with broken framing can always be replaced by a refresh over
//! the generation read with it.

use std::sync::Arc;

/// The first byte of a framed value.
pub(super) const TAG: u8 = 0xC0;
/// The longest generation token a frame holds.
pub(super) const MAX_TOKEN: usize = 64;

/// The Lua twin of [`unframe`]'s generation: `generation(value)` is the
/// token of a well-framed value, `''` otherwise. Prepended to the scripts
/// that compare generations.
macro_rules! lua_generation {
    () => {
        r"
local function generation(value)
  if string.byte(value, 1) ~= 192 then
    return ''
  end
  local n = string.byte(value, 2) or 0
  if n < 1 or n > 64 or #value < 2 + n then
    return ''
  end
  local token = string.sub(value, 3, 2 + n)
  if string.find(token, '^[0-9a-f]+$') then
    return token
  end
  return ''
end
"
    };
}
pub(super) use lua_generation;

/// The Lua source of the generation parser, for tests of its text.
#[cfg(test)]
pub(super) const LUA_GENERATION: &str = lua_generation!();

/// `envelope` framed with `token` as its generation. The store's tokens are
/// 32 lowercase hex digits; any other token makes an unframed value (the
/// fences refuse commits with tokens the store did not grant anyway).
pub(super) fn frame(token: &str, envelope: &[u8]) -> Vec<u8> {
    let mut framed = Vec::with_capacity(2 + token.len() + envelope.len());
    framed.push(TAG);
    framed.push(u8::try_from(token.len()).unwrap_or(0));
    framed.extend_from_slice(token.as_bytes());
    framed.extend_from_slice(envelope);
    framed
}

/// The length of the random tokens `RedisStore` draws.
pub(super) const DRAWN: usize = 32;

/// Hex digits of an expiry in a generation: 48 bits of milliseconds.
const EXPIRY_DIGITS: usize = 12;

/// The generation of a write of drawn `token` (32 hex digits) that expires
/// at `expiry_ms` on the server's clock (see [`clock`](super::clock)): the
/// token, then the expiry in 12 hex digits. Any generation is compared
/// whole, so it stays one write's own; a reader that finds the expiry in
/// it needs no `PTTL`. Past 48 bits, the token alone.
pub(super) fn with_expiry(token: &str, expiry_ms: u64) -> String {
    if expiry_ms >> (4 * EXPIRY_DIGITS) != 0 {
        return token.to_owned();
    }
    format!("{token}{expiry_ms:012x}")
}

/// The expiry (ms, on the server's clock) a generation names: one of
/// [`with_expiry`]'s, a drawn token and 12 hex digits.
pub(super) fn expiry_of(generation: &str) -> Option<u64> {
    if generation.len() != DRAWN + EXPIRY_DIGITS || !is_token(generation.as_bytes()) {
        return None;
    }
    named_expiry(generation)
}

/// [`expiry_of`] for a generation [`unframe`] gave (its digits checked
/// there): the length and the expiry's digits alone are read.
pub(super) fn named_expiry(generation: &str) -> Option<u64> {
    let digits = generation
        .as_bytes()
        .get(DRAWN..)
        .filter(|digits| digits.len() == EXPIRY_DIGITS)?;
    digits.iter().try_fold(0_u64, |expiry, &digit| {
        let value = match digit {
            b'0'..=b'9' => digit - b'0',
            b'a'..=b'f' => digit - b'a' + 10,
            _ => return None,
        };
        Some(expiry << 4 | u64::from(value))
    })
}

/// Whether `generation` is one `RedisStore` writes: a drawn token, alone
/// or naming its value's expiry ([`with_expiry`]).
pub(super) fn is_written(generation: &str) -> bool {
    [DRAWN, DRAWN + EXPIRY_DIGITS].contains(&generation.len()) && is_token(generation.as_bytes())
}

/// Splits a stored value into its envelope bytes and its generation
/// (`None` for an unframed value), reusing the buffer.
pub(super) fn unframe(mut bytes: Vec<u8>) -> (Vec<u8>, Option<Arc<str>>) {
    let Some(len) = token_len(&bytes) else {
        return (bytes, None);
    };
    let generation = std::str::from_utf8(&bytes[2..2 + len])
        .ok()
        .map(Arc::<str>::from);
    strip(&mut bytes, 2 + len);
    (bytes, generation)
}

/// The envelope bytes of a stored value framed with exactly `token` (a
/// valid token), reusing the buffer; the value untouched if it is any
/// other. What [`unframe`] gives when the generation is `token`, without
/// checking the token's digits again or building a string of it.
pub(super) fn unframe_as(mut bytes: Vec<u8>, token: &str) -> Result<Vec<u8>, Vec<u8>> {
    let framed = match bytes.as_slice() {
        [TAG, n, rest @ ..] => {
            usize::from(*n) == token.len() && rest.get(..token.len()) == Some(token.as_bytes())
        }
        _ => false,
    };
    if !framed {
        return Err(bytes);
    }
    strip(&mut bytes, 2 + token.len());
    Ok(bytes)
}

/// Removes the first `header` bytes (at most `bytes.len()`) in place: the
/// envelope moves to the front of the buffer read, nothing is allocated.
#[inline]
fn strip(bytes: &mut Vec<u8>, header: usize) {
    let header = header.min(bytes.len());
    bytes.copy_within(header.., 0);
    bytes.truncate(bytes.len() - header);
}

/// The length of the token of a well-framed value.
fn token_len(bytes: &[u8]) -> Option<usize> {
    match bytes {
        [TAG, n, rest @ ..] => {
            let n = usize::from(*n);
            (n <= rest.len() && is_token(&rest[..n])).then_some(n)
        }
        _ => None,
    }
}

/// Whether `token` is 1..=64 lowercase hex digits.
fn is_token(token: &[u8]) -> bool {
    (1..=MAX_TOKEN).contains(&token.len())
        && token
            .iter()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(b))
}

#[cfg(test)]
mod tests {
    use super::*;

    const TOKEN: &str = "0123456789abcdef0123456789abcdef";

    #[test]
    fn frames_round_trip() {
        for envelope in [&b""[..], b"CRL\0 envelope", &[0xC0; 70]] {
            let framed = frame(TOKEN, envelope);
            assert_eq!(framed[0], TAG);
            assert_eq!(usize::from(framed[1]), TOKEN.len());
            let (bytes, generation) = unframe(framed);
            assert_eq!(bytes, envelope);
            assert_eq!(generation.as_deref(), Some(TOKEN));
        }
    }

    #[test]
    fn broken_frames_are_unframed_bytes_without_generation() {
        let long = "a".repeat(MAX_TOKEN + 1);
        let mut no_room = frame(TOKEN, b"");
        no_room.pop();
        let cases: Vec<Vec<u8>> = vec![
            Vec::new(),
            vec![TAG],
            vec![TAG, 0],
            vec![TAG, 0, b'x'],
            no_room,
            b"CRL\0legacy envelope".to_vec(),
            b"garbage".to_vec(),
            [&[TAG, 4][..], b"ABCD", b"rest"].concat(),
            [&[TAG, 4][..], b"ab-d", b"rest"].concat(),
            [&[TAG, 4][..], &[0xff, 0xfe, b'a', b'b'], b"rest"].concat(),
            [&[TAG, 65][..], long.as_bytes()].concat(),
            [&[TAG, 0xff][..], &[b'a'; 300][..]].concat(),
        ];
        for case in cases {
            let (bytes, generation) = unframe(case.clone());
            assert_eq!(bytes, case, "unframed bytes pass whole");
            assert_eq!(generation, None, "{case:?}");
        }
    }

    #[test]
    fn unframing_as_a_known_token_is_unframing() {
        let framed = frame(TOKEN, b"CRL\0 envelope");
        assert_eq!(
            unframe_as(framed.clone(), TOKEN).as_deref(),
            Ok(&b"CRL\0 envelope"[..])
        );
        let other = "1123456789abcdef0123456789abcdef";
        assert_eq!(unframe_as(framed.clone(), other), Err(framed.clone()));
        let short = framed[..2 + TOKEN.len() - 1].to_vec();
        assert_eq!(unframe_as(short.clone(), TOKEN), Err(short));
        assert_eq!(
            unframe_as(frame(TOKEN, b"").to_vec(), TOKEN),
            Ok(Vec::new())
        );
        let shorter = frame(&TOKEN[1..], b"e");
        assert_eq!(unframe_as(shorter.clone(), TOKEN), Err(shorter));
        assert_eq!(
            unframe_as(b"CRL\0legacy".to_vec(), TOKEN),
            Err(b"CRL\0legacy".to_vec())
        );
        assert_eq!(unframe_as(Vec::new(), TOKEN), Err(Vec::new()));
    }

    #[test]
    fn a_generation_may_name_its_expiry() {
        let expiry = 1_700_000_001_260;
        let generation = with_expiry(TOKEN, expiry);
        assert_eq!(generation.len(), DRAWN + EXPIRY_DIGITS);
        assert!(generation.starts_with(TOKEN));
        assert_eq!(expiry_of(&generation), Some(expiry));
        // Framed, it is a generation like any other (the Lua rule too: at
        // most 64 lowercase hex digits).
        let (bytes, read) = unframe(frame(&generation, b"e"));
        assert_eq!(
            (bytes.as_slice(), read.as_deref()),
            (&b"e"[..], Some(&*generation))
        );
        assert_eq!(expiry_of(TOKEN), None, "a drawn token alone names none");
        assert_eq!(expiry_of(&generation.to_uppercase()), None);
        assert_eq!(expiry_of(&generation[1..]), None);
        // What a read's frame gave: only the expiry's digits are read.
        assert_eq!(named_expiry(read.as_deref().expect("framed")), Some(expiry));
        assert_eq!(named_expiry(TOKEN), None);
        assert_eq!(named_expiry(&generation[..DRAWN + EXPIRY_DIGITS - 1]), None);
        assert_eq!(named_expiry(&generation.to_uppercase()), None);
        assert_eq!(
            with_expiry(TOKEN, 1 << 48),
            TOKEN,
            "past 48 bits: the token"
        );
        assert_eq!(
            expiry_of(&with_expiry(TOKEN, (1 << 48) - 1)),
            Some((1 << 48) - 1)
        );
    }

    #[test]
    fn longest_token_is_accepted() {
        let longest = "f".repeat(MAX_TOKEN);
        let (bytes, generation) = unframe(frame(&longest, b"e"));
        assert_eq!(bytes, b"e");
        assert_eq!(generation.as_deref(), Some(longest.as_str()));
    }

    #[test]
    fn lua_rule_matches_the_rust_one() {
        // The Lua text states the same limits as the Rust parser.
        assert!(LUA_GENERATION.contains("~= 192"));
        assert_eq!(TAG, 192);
        assert!(LUA_GENERATION.contains(&format!("n > {MAX_TOKEN}")));
        assert!(LUA_GENERATION.contains("'^[0-9a-f]+$'"));
    }
}

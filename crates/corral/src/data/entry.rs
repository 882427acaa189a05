//! The envelope: the bytes corral writes to a shared store.
//!
//! ```text
//! offset size field
//!  0     4    magic  b"CRL\0"
//!  4     1    envelope format version (1)
//!  5     1    codec id
//!  6     2    flags: bit 0 "not found" (no value bytes), bit 1 "kept by
//!             fail-safe", bit 2 "stamped" (below), bit 3 "compressed";
//!             other bits must be 0 in format 1
//!  8     4    the cache's schema version (u32 LE)
//! 12     8    fresh TTL in ms (u64 LE): fresh while age < this
//! 20     8    stale TTL in ms (u64 LE): servable while age < this
//! 28     8    physical TTL in ms (u64 LE): the store keeps the bytes this long
//! 36     4    value length (u32 LE)
//! 40     n    value bytes (the codec's encoding)
//! ```
//!
//! With flag bit 3 ("compressed") the value bytes are a compressed frame of
//! the codec's encoding (see [`compression`](crate::data::compression)):
//! the value length is the frame's, and the encoding's own length, inside
//! the frame, is what the cache's size limit bounds.
//!
//! With flag bit 2 ("stamped") the value is followed by the tag versions
//! the entry was filled under (see the cache's tags): a count (u16 LE),
//! then per tag its length (u16 LE), its UTF-8 bytes, its version's length
//! (u8; 0: the tag had no version) and the version's UTF-8 bytes. The empty
//! tag stands for the namespace's clear version. An entry without the flag
//! was filled under no tags and no clear version.
//!
//! Decoding is strict: wrong magic, format, codec, flags or schema version, a
//! length that does not match, a value over the cache's size limit
//! (decompressed), or a frame that does not unpack are all rejected, and
//! the caller treats them as a counted miss.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use crate::clock::millis;
use crate::codec::Codec;
use crate::data::compression::frames::Frames;
use crate::data::compression::{Packed, Packing, UnpackError};
use crate::data::key::MAX_TAGS;
use crate::data::stamps::Stamps;

const MAGIC: [u8; 4] = *b"CRL\0";
const FORMAT: u8 = 1;
/// Size of the envelope header in bytes.
pub(crate) const HEADER_LEN: usize = 40;

/// The freshness TTLs written with a value. The age of an entry is judged by
/// the store's own clock (its remaining time to live), never by a timestamp.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Ttls {
    /// Fresh while younger than this.
    pub(crate) fresh: Duration,
    /// Servable (stale) while younger than this; at least `fresh`.
    pub(crate) stale: Duration,
    /// Kept physically this long; at least `stale`.
    pub(crate) physical: Duration,
}

impl Ttls {
    /// These TTLs, none longer than `cap`.
    pub(crate) fn capped(self, cap: Duration) -> Self {
        Self {
            fresh: self.fresh.min(cap),
            stale: self.stale.min(cap),
            physical: self.physical.min(cap),
        }
    }

    /// TTLs for an entry that is fresh for `ttl` and then gone.
    #[cfg(any(test, feature = "test-hooks"))]
    pub(crate) fn simple(ttl: Duration) -> Self {
        Self {
            fresh: ttl,
            stale: ttl,
            physical: ttl,
        }
    }
}

/// Flag: the entry is a cached "not found" and carries no value bytes.
pub(crate) const FLAG_NOT_FOUND: u16 = 1;
/// Flag: the entry was re-cached by fail-safe after its source failed.
pub(crate) const FLAG_FAIL_SAFE: u16 = 2;
/// Flag: tag versions follow the value.
pub(crate) const FLAG_STAMPED: u16 = 4;
/// Flag: the value bytes are a compressed frame of the encoding.
pub(crate) const FLAG_COMPRESSED: u16 = 8;
const KNOWN_FLAGS: u16 = FLAG_NOT_FOUND | FLAG_FAIL_SAFE | FLAG_STAMPED | FLAG_COMPRESSED;

/// Why an envelope was rejected.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum DecodeError {
    /// Shorter than the header.
    Truncated,
    /// Not written by corral.
    BadMagic,
    /// Written by another envelope format.
    UnknownFormat(u8),
    /// Written with another codec.
    CodecMismatch {
        /// The codec id found.
        found: u8,
    },
    /// Flags this version does not understand.
    UnknownFlags(u16),
    /// Written for another schema version of the cache.
    SchemaMismatch {
        /// The schema version found.
        found: u32,
    },
    /// The value length does not match the bytes.
    LengthMismatch,
    /// The value is larger than allowed.
    TooLarge {
        /// The value's length.
        len: usize,
    },
    /// TTLs out of order.
    BadTtls,
    /// The codec rejected the value bytes.
    Codec(String),
    /// The tag versions after the value are malformed.
    BadStamps,
    /// The compressed value did not unpack.
    Unpack(UnpackError),
}

impl From<UnpackError> for DecodeError {
    fn from(error: UnpackError) -> Self {
        match error {
            UnpackError::TooLarge { len } => Self::TooLarge { len },
            error => Self::Unpack(error),
        }
    }
}

/// How one cache writes and reads envelopes.
pub(crate) struct Format<'a, V> {
    /// Its codec.
    pub(crate) codec: &'a dyn Codec<V>,
    /// Its schema version.
    pub(crate) schema: u32,
    /// The longest encoding it writes or reads, decompressed.
    pub(crate) max_value_bytes: usize,
    /// How it compresses what it writes, and unpacks what is compressed.
    pub(crate) frames: &'a Frames,
}

impl fmt::Display for DecodeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "undecodable entry: {self:?}")
    }
}

impl std::error::Error for DecodeError {}

/// A decoded envelope.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Decoded<V> {
    /// The value; `None` for a cached "not found".
    pub(crate) value: Option<V>,
    /// The TTLs it was written with.
    pub(crate) ttls: Ttls,
    /// Its flags ([`FLAG_NOT_FOUND`], [`FLAG_FAIL_SAFE`], [`FLAG_STAMPED`],
    /// [`FLAG_COMPRESSED`]).
    pub(crate) flags: u16,
    /// The tag versions it was filled under (empty without [`FLAG_STAMPED`]).
    pub(crate) stamps: Stamps,
}

/// Encodes `value` (`None`: a cached "not found") into an envelope,
/// refusing values whose encoding is larger than the format's
/// `max_value_bytes`, and compressing it as the format's frames say.
/// `flags` may carry [`FLAG_FAIL_SAFE`]; [`FLAG_NOT_FOUND`] is set from
/// `value`, [`FLAG_STAMPED`] when `stamps` hold a tag or a clear version,
/// and [`FLAG_COMPRESSED`] when the value was compressed.
pub(crate) fn encode<V: 'static>(
    format: &Format<'_, V>,
    ttls: Ttls,
    flags: u16,
    value: Option<&V>,
    stamps: &Stamps,
) -> Result<(Vec<u8>, Packing), String> {
    let stamped = stamps
        .iter()
        .any(|(tag, version)| !tag.is_empty() || version.is_some());
    let mut flags = (flags & FLAG_FAIL_SAFE)
        | if value.is_none() { FLAG_NOT_FOUND } else { 0 }
        | if stamped { FLAG_STAMPED } else { 0 };
    let codec = format.codec;
    let max_value_bytes = format.max_value_bytes;
    let mut out = Vec::with_capacity(HEADER_LEN + 32);
    out.extend_from_slice(&MAGIC);
    out.push(FORMAT);
    out.push(codec.id());
    out.extend_from_slice(&flags.to_le_bytes());
    out.extend_from_slice(&format.schema.to_le_bytes());
    out.extend_from_slice(&millis(ttls.fresh).to_le_bytes());
    out.extend_from_slice(&millis(ttls.stale).to_le_bytes());
    out.extend_from_slice(&millis(ttls.physical).to_le_bytes());
    out.extend_from_slice(&[0; 4]);
    if let Some(value) = value {
        codec
            .encode(value, &mut out)
            .map_err(|e| format!("encode failed: {e}"))?;
    }
    let mut len = out.len() - HEADER_LEN;
    if len > max_value_bytes {
        return Err(format!(
            "value is {len} bytes encoded, the limit is {max_value_bytes}"
        ));
    }
    let packed = match value {
        Some(_) => format.frames.pack(&out[HEADER_LEN..]),
        None => Packed::Plain,
    };
    let packing = match packed {
        Packed::Plain => Packing::Plain,
        Packed::Skipped => Packing::Skipped,
        Packed::Frame(frame) => {
            let before = len;
            out.truncate(HEADER_LEN);
            frame.write_to(&mut out);
            len = frame.len();
            flags |= FLAG_COMPRESSED;
            out[6..8].copy_from_slice(&flags.to_le_bytes());
            Packing::Packed { before, after: len }
        }
    };
    let len32 = u32::try_from(len).map_err(|_| format!("value is {len} bytes encoded"))?;
    out[36..40].copy_from_slice(&len32.to_le_bytes());
    if stamped {
        encode_stamps(stamps, &mut out)?;
    }
    Ok((out, packing))
}

fn encode_stamps(stamps: &Stamps, out: &mut Vec<u8>) -> Result<(), String> {
    if stamps.len() > MAX_TAGS {
        return Err(format!("{} tags, the limit is {MAX_TAGS}", stamps.len()));
    }
    out.extend_from_slice(&(stamps.len() as u16).to_le_bytes());
    for (tag, version) in stamps.iter() {
        let tag_len = u16::try_from(tag.len()).map_err(|_| "tag too long".to_owned())?;
        out.extend_from_slice(&tag_len.to_le_bytes());
        out.extend_from_slice(tag.as_bytes());
        let version = version.unwrap_or_default();
        let version_len = u8::try_from(version.len()).map_err(|_| "tag version too long")?;
        out.push(version_len);
        out.extend_from_slice(version);
    }
    Ok(())
}

/// Reads the stamps after the value; `None` if malformed or not exactly
/// filling `bytes`.
fn decode_stamps(bytes: &[u8]) -> Option<Stamps> {
    // The usual stamps, read without allocating: one stamp, the empty tag
    // (the clear version), a version that is all the rest.
    if let [1, 0, 0, 0, len, version @ ..] = bytes {
        if usize::from(*len) == version.len() {
            if let Some(stamps) = Stamps::clear_only(version) {
                return Some(stamps);
            }
        }
    }
    let (count, mut rest) = split(bytes, 2)?;
    let count = usize::from(u16::from_le_bytes([count[0], count[1]]));
    if count > MAX_TAGS {
        return None;
    }
    let mut stamps = Vec::with_capacity(count);
    for _ in 0..count {
        let (len, tail) = split(rest, 2)?;
        let (tag, tail) = split(tail, usize::from(u16::from_le_bytes([len[0], len[1]])))?;
        let (len, tail) = split(tail, 1)?;
        let (version, tail) = split(tail, usize::from(len[0]))?;
        let tag: Arc<str> = std::str::from_utf8(tag).ok()?.into();
        let version = match version {
            [] => None,
            bytes => Some(Arc::from(std::str::from_utf8(bytes).ok()?)),
        };
        stamps.push((tag, version));
        rest = tail;
    }
    rest.is_empty().then_some(Stamps::new(stamps))
}

fn split(bytes: &[u8], at: usize) -> Option<(&[u8], &[u8])> {
    (bytes.len() >= at).then(|| bytes.split_at(at))
}

/// Decodes an envelope strictly, unpacking a compressed value. Never
/// panics, whatever the bytes, and never allocates more than the format's
/// `max_value_bytes` for the value.
pub(crate) fn decode<V: 'static>(
    format: &Format<'_, V>,
    bytes: &[u8],
) -> Result<Decoded<V>, DecodeError> {
    let (codec, schema, max_value_bytes) = (format.codec, format.schema, format.max_value_bytes);
    let header = bytes.get(..HEADER_LEN).ok_or(DecodeError::Truncated)?;
    if header[0..4] != MAGIC {
        return Err(DecodeError::BadMagic);
    }
    if header[4] != FORMAT {
        return Err(DecodeError::UnknownFormat(header[4]));
    }
    if header[5] != codec.id() {
        return Err(DecodeError::CodecMismatch { found: header[5] });
    }
    let flags = u16::from_le_bytes([header[6], header[7]]);
    if flags & !KNOWN_FLAGS != 0 {
        return Err(DecodeError::UnknownFlags(flags));
    }
    let found_schema = u32::from_le_bytes(word(header, 8));
    if found_schema != schema {
        return Err(DecodeError::SchemaMismatch {
            found: found_schema,
        });
    }
    let ttls = Ttls {
        fresh: Duration::from_millis(u64::from_le_bytes(dword(header, 12))),
        stale: Duration::from_millis(u64::from_le_bytes(dword(header, 20))),
        physical: Duration::from_millis(u64::from_le_bytes(dword(header, 28))),
    };
    if ttls.fresh > ttls.stale || ttls.stale > ttls.physical {
        return Err(DecodeError::BadTtls);
    }
    let len = u32::from_le_bytes(word(header, 36)) as usize;
    if len > max_value_bytes {
        return Err(DecodeError::TooLarge { len });
    }
    let rest = &bytes[HEADER_LEN..];
    let (body, stamps) = if flags & FLAG_STAMPED != 0 {
        let (body, tail) = split(rest, len).ok_or(DecodeError::LengthMismatch)?;
        (body, decode_stamps(tail).ok_or(DecodeError::BadStamps)?)
    } else {
        (rest, Stamps::default())
    };
    if body.len() != len {
        return Err(DecodeError::LengthMismatch);
    }
    if flags & FLAG_NOT_FOUND != 0 {
        if !body.is_empty() {
            return Err(DecodeError::LengthMismatch);
        }
        return Ok(Decoded {
            value: None,
            ttls,
            flags,
            stamps,
        });
    }
    let value = if flags & FLAG_COMPRESSED == 0 {
        codec.decode(body)
    } else {
        codec.decode(&format.frames.unpack(body, max_value_bytes)?)
    };
    let value = value.map_err(|e| DecodeError::Codec(e.to_string()))?;
    Ok(Decoded {
        value: Some(value),
        ttls,
        flags,
        stamps,
    })
}

fn word(header: &[u8], at: usize) -> [u8; 4] {
    let mut out = [0; 4];
    out.copy_from_slice(&header[at..at + 4]);
    out
}

fn dword(header: &[u8], at: usize) -> [u8; 8] {
    let mut out = [0; 8];
    out.copy_from_slice(&header[at..at + 8]);
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::codec::{Json, Postcard};
    use crate::data::compression::Compression;
    use proptest::prelude::*;

    const MAX: usize = 1 << 20;

    /// Runs `run` with the format of `codec`, `schema` and
    /// `max_value_bytes`, without compression.
    fn with_format<V: 'static, T>(
        codec: &dyn Codec<V>,
        schema: u32,
        max_value_bytes: usize,
        run: impl FnOnce(&Format<'_, V>) -> T,
    ) -> T {
        let frames = Frames::new(Compression::none());
        run(&Format {
            codec,
            schema,
            max_value_bytes,
            frames: &frames,
        })
    }

    /// [`super::encode`] without compression, its arguments one by one.
    fn encode<V: 'static>(
        codec: &dyn Codec<V>,
        schema: u32,
        ttls: Ttls,
        flags: u16,
        value: Option<&V>,
        max_value_bytes: usize,
        stamps: &Stamps,
    ) -> Result<Vec<u8>, String> {
        with_format(codec, schema, max_value_bytes, |format| {
            super::encode(format, ttls, flags, value, stamps).map(|(bytes, _)| bytes)
        })
    }

    /// [`super::decode`], its arguments one by one.
    fn decode<V: 'static>(
        codec: &dyn Codec<V>,
        schema: u32,
        bytes: &[u8],
        max_value_bytes: usize,
    ) -> Result<Decoded<V>, DecodeError> {
        with_format(codec, schema, max_value_bytes, |format| {
            super::decode(format, bytes)
        })
    }

    fn roundtrip(codec: &dyn Codec<String>) {
        let ttls = Ttls {
            fresh: Duration::from_secs(1),
            stale: Duration::from_secs(2),
            physical: Duration::from_secs(3),
        };
        let bytes = encode(
            codec,
            7,
            ttls,
            FLAG_FAIL_SAFE,
            Some(&"hello".to_string()),
            MAX,
            &Stamps::default(),
        )
        .expect("encodes");
        let decoded = decode(codec, 7, &bytes, MAX).expect("decodes");
        assert_eq!(decoded.value.as_deref(), Some("hello"));
        assert_eq!(decoded.ttls, ttls);
        assert_eq!(decoded.flags, FLAG_FAIL_SAFE);
        let bytes =
            encode::<String>(codec, 7, ttls, 0, None, MAX, &Stamps::default()).expect("encodes");
        let decoded = decode(codec, 7, &bytes, MAX).expect("decodes");
        assert_eq!(decoded.value, None);
        assert_eq!(decoded.flags, FLAG_NOT_FOUND);
    }

    fn stamps() -> Stamps {
        Stamps::new(vec![
            ("".into(), Some("c0ffee".into())),
            ("team:7".into(), None),
            ("user:42".into(), Some("0123456789abcdef".into())),
        ])
    }

    #[test]
    fn stamps_round_trip_and_truncations_are_rejected() {
        let ttls = Ttls::simple(Duration::from_secs(1));
        let value = "v".to_string();
        let bytes = encode(&Postcard, 1, ttls, 0, Some(&value), MAX, &stamps()).expect("encodes");
        let decoded = decode::<String>(&Postcard, 1, &bytes, MAX).expect("decodes");
        assert_eq!(decoded.stamps, stamps());
        assert_eq!(decoded.flags, FLAG_STAMPED);
        assert_eq!(decoded.value.as_deref(), Some("v"));
        for cut in HEADER_LEN..bytes.len() {
            assert!(
                decode::<String>(&Postcard, 1, &bytes[..cut], MAX).is_err(),
                "cut at {cut}"
            );
        }
        let plain = encode(
            &Postcard,
            1,
            ttls,
            0,
            Some(&value),
            MAX,
            &Stamps::new(vec![("".into(), None)]),
        )
        .expect("encodes");
        assert_eq!(
            plain.len(),
            HEADER_LEN + 2,
            "no tag, no clear version: no stamps"
        );
        let not_found =
            encode::<String>(&Postcard, 1, ttls, 0, None, MAX, &stamps()).expect("encodes");
        let decoded = decode::<String>(&Postcard, 1, &not_found, MAX).expect("decodes");
        assert_eq!((decoded.value, decoded.stamps), (None, stamps()));
    }

    #[test]
    fn the_usual_stamps_decode_like_any_other() {
        let ttls = Ttls::simple(Duration::from_secs(1));
        let value = "v".to_string();
        for version in [
            "0123456789abcdef",
            "c0ffee",
            "0123456789abcdé",
            "0123456789abcdef0",
        ] {
            let stamps = Stamps::new(vec![("".into(), Some(version.into()))]);
            let bytes = encode(&Postcard, 1, ttls, 0, Some(&value), MAX, &stamps).expect("encodes");
            let decoded = decode::<String>(&Postcard, 1, &bytes, MAX).expect("decodes");
            assert_eq!(decoded.stamps, stamps, "{version}");
            assert_eq!(decoded.flags, FLAG_STAMPED);
            for cut in HEADER_LEN..bytes.len() {
                assert!(decode::<String>(&Postcard, 1, &bytes[..cut], MAX).is_err());
            }
        }
        // A version that is not UTF-8 is rejected, as before, at the inline
        // length or not.
        for version in ["0123456789abcdef", "0123456789abcdeé"] {
            let stamps = Stamps::new(vec![("".into(), Some(version.into()))]);
            let mut bytes =
                encode(&Postcard, 1, ttls, 0, Some(&value), MAX, &stamps).expect("encodes");
            let last = bytes.len() - 1;
            bytes[last] = 0xff;
            assert_eq!(
                decode::<String>(&Postcard, 1, &bytes, MAX),
                Err(DecodeError::BadStamps),
                "{version}"
            );
        }
    }

    #[test]
    fn compressed_values_are_flagged_read_by_any_cache_and_bounded_decompressed() {
        let ttls = Ttls::simple(Duration::from_secs(1));
        let value = "{\"sku\":\"A-1\",\"qty\":2},".repeat(200);
        let plain = Frames::new(Compression::none());
        let reader = |max_value_bytes| Format {
            codec: &Postcard,
            schema: 1,
            max_value_bytes,
            frames: &plain,
        };
        for setting in [Compression::lz4(), Compression::zstd(3)] {
            let frames = Frames::new(setting);
            let format = Format {
                frames: &frames,
                ..reader(MAX)
            };
            let (bytes, packing) =
                super::encode(&format, ttls, 0, Some(&value), &stamps()).expect("encodes");
            let Packing::Packed { before, after } = packing else {
                panic!("{setting}: not compressed: {packing:?}");
            };
            assert_eq!(
                before,
                value.len() + 2,
                "postcard: a varint length, the bytes"
            );
            assert!(bytes.len() < HEADER_LEN + after + 64 && after < before / 4);
            let decoded = super::decode(&reader(MAX), &bytes).expect("decodes");
            assert_eq!(decoded.value.as_ref(), Some(&value));
            assert_eq!(decoded.flags, FLAG_STAMPED | FLAG_COMPRESSED);
            assert_eq!(decoded.stamps, stamps());
            // The limit bounds the decompressed size, not the stored one.
            assert_eq!(
                super::decode(&reader(before - 1), &bytes).map(|d| d.value),
                Err(DecodeError::TooLarge { len: before })
            );
            for cut in HEADER_LEN..bytes.len() {
                assert!(super::decode(&reader(MAX), &bytes[..cut]).is_err());
            }
            // A "not found" has nothing to compress.
            let (bytes, packing) =
                super::encode::<String>(&format, ttls, 0, None, &Stamps::default())
                    .expect("encodes");
            assert_eq!(packing, Packing::Plain);
            assert_eq!(
                decode::<String>(&Postcard, 1, &bytes, MAX).map(|d| d.flags),
                Ok(FLAG_NOT_FOUND)
            );
        }
    }

    #[test]
    fn roundtrips_with_both_codecs() {
        roundtrip(&Postcard);
        roundtrip(&Json);
    }

    #[test]
    fn rejects_other_schema_codec_and_oversize() {
        let ttls = Ttls::simple(Duration::from_secs(1));
        let bytes = encode(
            &Postcard,
            1,
            ttls,
            0,
            Some(&"v".to_string()),
            MAX,
            &Stamps::default(),
        )
        .expect("encodes");
        assert_eq!(
            decode::<String>(&Postcard, 2, &bytes, MAX),
            Err(DecodeError::SchemaMismatch { found: 1 })
        );
        assert_eq!(
            decode::<String>(&Json, 1, &bytes, MAX),
            Err(DecodeError::CodecMismatch { found: 1 })
        );
        assert!(decode::<String>(&Postcard, 1, &bytes, 1).is_err());
        assert!(encode(
            &Postcard,
            1,
            ttls,
            0,
            Some(&"long value".to_string()),
            4,
            &Stamps::default()
        )
        .is_err());
    }

    #[test]
    fn rejects_truncation_and_trailing_bytes() {
        let ttls = Ttls::simple(Duration::from_secs(1));
        let bytes = encode(
            &Postcard,
            1,
            ttls,
            0,
            Some(&"value".to_string()),
            MAX,
            &Stamps::default(),
        )
        .expect("encodes");
        for cut in 0..bytes.len() {
            assert!(decode::<String>(&Postcard, 1, &bytes[..cut], MAX).is_err());
        }
        let mut longer = bytes.clone();
        longer.push(0);
        assert_eq!(
            decode::<String>(&Postcard, 1, &longer, MAX),
            Err(DecodeError::LengthMismatch)
        );
    }

    proptest! {
        #[test]
        fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..200)) {
            let _ = decode::<String>(&Postcard, 1, &bytes, MAX);
            let _ = decode::<Vec<u64>>(&Json, 1, &bytes, MAX);
        }

        #[test]
        fn corrupted_envelopes_never_panic(value in ".{0,40}", flips in proptest::collection::vec((any::<usize>(), any::<u8>()), 1..6)) {
            let mut bytes = encode(&Postcard, 1, Ttls::simple(Duration::from_secs(5)), 0, Some(&value), MAX, &stamps()).expect("encodes");
            for (at, byte) in flips {
                let at = at % bytes.len();
                bytes[at] ^= byte;
            }
            let _ = decode::<String>(&Postcard, 1, &bytes, MAX);
        }

        #[test]
        fn roundtrip_any_string(value in ".{0,100}", fresh in 0u64..1_000_000) {
            let ttls = Ttls { fresh: Duration::from_millis(fresh), stale: Duration::from_millis(fresh), physical: Duration::from_millis(fresh) };
            let bytes = encode(&Postcard, 3, ttls, 0, Some(&value), MAX, &Stamps::default()).expect("encodes");
            prop_assert_eq!(decode::<String>(&Postcard, 3, &bytes, MAX).expect("decodes").value, Some(value));
        }
    }
}

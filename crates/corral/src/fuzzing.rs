//! Entry points for fuzz targets and their regression tests (feature
//! `test-hooks`; hidden, not a stable API). Each takes arbitrary bytes,
//! must never panic, and checks the invariants that do not depend on the
//! input being well formed.

use std::time::Duration;

use crate::codec::{Codec, Json, Postcard};
use crate::data::compression::frames::Frames;
use crate::data::compression::{Compression, Packing};
use crate::data::entry::{self, Format, Ttls};
use crate::data::stamps::Stamps;

/// The size limit of the fuzzed envelopes.
const MAX: usize = 1 << 20;

/// The TTLs of the envelopes the targets frame bytes in.
const TTLS: Ttls = Ttls {
    fresh: Duration::from_millis(1),
    stale: Duration::from_millis(2),
    physical: Duration::from_millis(3),
};

/// The envelope decoder on arbitrary bytes, with both codecs; whatever
/// decodes re-encodes to bytes that decode to the same entry.
pub fn envelope(bytes: &[u8]) {
    let frames = Frames::new(Compression::none());
    check_envelope::<String>(&Postcard, &frames, bytes);
    check_envelope::<Vec<u32>>(&Postcard, &frames, bytes);
    check_envelope::<String>(&Json, &frames, bytes);
    // The same bytes behind a valid header: the body and stamps decoders
    // see them too, not only the header checks.
    if let Some(framed) = behind_header(bytes, 0) {
        check_envelope::<String>(&Postcard, &frames, &framed);
    }
    if let Some(framed) = behind_header(bytes, entry::FLAG_STAMPED) {
        check_envelope::<String>(&Postcard, &frames, &framed);
    }
}

/// Compressed values on arbitrary bytes: as the frame of a compressed
/// envelope they never panic a reader (nor make it allocate past its
/// limit: the fuzz script bounds each allocation); as a value, each
/// algorithm's envelope is read back whole by a cache that does not
/// compress, and its truncations and altered bytes are refused or read,
/// never a panic.
pub fn compressed(bytes: &[u8]) {
    let reader = Frames::new(Compression::none());
    if let Some(framed) = behind_header(bytes, entry::FLAG_COMPRESSED) {
        check_envelope::<Vec<u8>>(&Postcard, &reader, &framed);
        check_envelope::<String>(&Postcard, &reader, &framed);
    }
    let value = bytes.to_vec();
    for setting in [Compression::lz4(), Compression::zstd(1)] {
        let writer = Frames::new(setting.min_bytes(0));
        let format = format(&Postcard, 7, &writer);
        let Ok((envelope, packing)) =
            entry::encode(&format, TTLS, 0, Some(&value), &Stamps::default())
        else {
            continue;
        };
        let format = Format {
            frames: &reader,
            ..format
        };
        match entry::decode(&format, &envelope) {
            Ok(decoded) => assert_eq!(decoded.value.as_ref(), Some(&value), "{setting}"),
            Err(error) => panic!("{setting}: a compressed envelope does not decode: {error:?}"),
        }
        if !matches!(packing, Packing::Packed { .. }) {
            continue;
        }
        let at = bytes.first().map_or(0, |b| usize::from(*b)) * 7919 % envelope.len();
        let _ = entry::decode(&format, &envelope[..at.max(entry::HEADER_LEN)]);
        let mut altered = envelope.clone();
        altered[at] ^= bytes.last().copied().unwrap_or(1).max(1);
        let _ = entry::decode(&format, &altered);
    }
}

/// `bytes` as the value bytes of a valid header with `flags`.
fn behind_header(bytes: &[u8], flags: u16) -> Option<Vec<u8>> {
    let frames = Frames::new(Compression::none());
    let format = format(&Postcard, 7, &frames);
    let (mut framed, _) =
        entry::encode::<Vec<u8>>(&format, TTLS, 0, Some(&Vec::new()), &Stamps::default()).ok()?;
    let len = u32::try_from(bytes.len()).unwrap_or(u32::MAX);
    framed.truncate(entry::HEADER_LEN);
    framed.get_mut(36..40)?.copy_from_slice(&len.to_le_bytes());
    framed.get_mut(6..8)?.copy_from_slice(&flags.to_le_bytes());
    framed.extend_from_slice(bytes);
    Some(framed)
}

/// The envelope format of the fuzzed entries: up to [`MAX`] bytes.
fn format<'a, V>(codec: &'a dyn Codec<V>, schema: u32, frames: &'a Frames) -> Format<'a, V> {
    Format {
        codec,
        schema,
        max_value_bytes: MAX,
        frames,
    }
}

fn check_envelope<V>(codec: &dyn Codec<V>, frames: &Frames, bytes: &[u8])
where
    V: PartialEq + std::fmt::Debug + 'static,
{
    for schema in [0, 7] {
        let format = format(codec, schema, frames);
        let Ok(decoded) = entry::decode(&format, bytes) else {
            continue;
        };
        let again = entry::encode(
            &format,
            decoded.ttls,
            decoded.flags,
            decoded.value.as_ref(),
            &decoded.stamps,
        );
        let Ok((again, _)) = again else {
            continue;
        };
        match entry::decode(&format, &again) {
            Ok(round) => {
                assert_eq!(round.value, decoded.value, "a value changed on re-encoding");
                assert_eq!(round.ttls, decoded.ttls, "TTLs changed on re-encoding");
            }
            Err(error) => panic!("a re-encoded entry does not decode: {error:?}"),
        }
    }
}

/// Key validation and the Redis key encoding on arbitrary bytes: a valid
/// key's value, lease and fence keys share one hash slot and differ from
/// each other; the value frame round-trips.
pub fn keys(bytes: &[u8]) {
    let text = String::from_utf8_lossy(bytes);
    let (name, key) = text.split_at(text.len().min(text.find('\u{0}').unwrap_or(0)));
    let _ = crate::data::key::validate_key(key);
    // Namespaces are `<cache name>:v<version>`, and cache names are
    // checked (ASCII letters, digits, `_`, `-`, `.`): a brace there would
    // move the hash tag. Keys may hold any character.
    let name: String = name
        .chars()
        .filter(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'))
        .take(64)
        .collect();
    let namespace = format!(
        "{}:v{}",
        if name.is_empty() { "n" } else { &name },
        bytes.len() % 10
    );
    let namespace = namespace.as_str();
    #[cfg(feature = "redis")]
    crate::redis::fuzz_keys(namespace, key, bytes);
    #[cfg(not(feature = "redis"))]
    let _ = namespace;
}

/// The RESP2 reader of the batched reads' connections on arbitrary bytes:
/// no panic; the scan and the read agree on where a reply ends; what is
/// read whole is what redis-rs reads, from any offset, and every cut of
/// it is incomplete, never wrong.
pub fn resp(bytes: &[u8]) {
    #[cfg(feature = "redis")]
    crate::redis::read::fuzz::resp(bytes);
    #[cfg(not(feature = "redis"))]
    let _ = bytes;
}

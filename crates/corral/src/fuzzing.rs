//! Entry points for fuzz targets and their regression tests (feature
//! `test-hooks`; hidden, not a stable API). Each takes arbitrary bytes,
//! must never panic, and checks the invariants that do not depend on the
//! input being well formed.

use std::time::Duration;

use crate::codec::{Codec, Json, Postcard};
use crate::data::entry::{self, Ttls};
use crate::data::stamps::Stamps;

/// The envelope decoder on arbitrary bytes, with both codecs; whatever
/// decodes re-encodes to bytes that decode to the same entry.
pub fn envelope(bytes: &[u8]) {
    check_envelope::<String>(&Postcard, bytes);
    check_envelope::<Vec<u32>>(&Postcard, bytes);
    check_envelope::<String>(&Json, bytes);
    // The same bytes behind a valid header: the body and stamps decoders
    // see them too, not only the header checks.
    let ttls = Ttls {
        fresh: Duration::from_millis(1),
        stale: Duration::from_millis(2),
        physical: Duration::from_millis(3),
    };
    if let Ok(mut framed) = entry::encode::<Vec<u8>>(
        &Postcard,
        7,
        ttls,
        0,
        Some(&Vec::new()),
        1 << 20,
        &Stamps::default(),
    ) {
        let len = u32::try_from(bytes.len()).unwrap_or(u32::MAX);
        framed.truncate(entry::HEADER_LEN);
        if let Some(field) = framed.get_mut(36..40) {
            field.copy_from_slice(&len.to_le_bytes());
        }
        framed.extend_from_slice(bytes);
        check_envelope::<String>(&Postcard, &framed);
        if let Some(flags) = framed.get_mut(6..8) {
            flags.copy_from_slice(&entry::FLAG_STAMPED.to_le_bytes());
        }
        check_envelope::<String>(&Postcard, &framed);
    }
}

fn check_envelope<V>(codec: &dyn Codec<V>, bytes: &[u8])
where
    V: PartialEq + std::fmt::Debug + 'static,
{
    for schema in [0, 7] {
        let Ok(decoded) = entry::decode(codec, schema, bytes, 1 << 20) else {
            continue;
        };
        let again = entry::encode(
            codec,
            schema,
            decoded.ttls,
            decoded.flags,
            decoded.value.as_ref(),
            1 << 20,
            &decoded.stamps,
        );
        let Ok(again) = again else {
            continue;
        };
        match entry::decode(codec, schema, &again, 1 << 20) {
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

//! How values become bytes in a shared store.
//!
//! # Which codec
//!
//! The default, [`Postcard`], is compact and fast but **not
//! self-describing**: it writes fields in order without their names, so a
//! value decodes only if it was encoded by exactly the same shape. Serde
//! attributes that make the encoded shape depend on the value, or that need
//! the format to describe itself, do not survive it:
//!
//! - `#[serde(skip_serializing_if = "...")]` (a skipped field shifts the
//!   ones after it),
//! - `#[serde(flatten)]`,
//! - `#[serde(untagged)]` enums, and internally or adjacently tagged enums
//!   (`#[serde(tag = "...")]`),
//! - `serde_json::Value` and other types that deserialize with
//!   `deserialize_any`,
//! - `#[serde(skip_serializing)]` without `skip_deserializing`.
//!
//! For such types choose a self-describing codec with
//! [`CacheBuilder::codec`](crate::CacheBuilder::codec) — [`Json`] here, or
//! your own [`Codec`] — or drop the attributes. You do not have to find out
//! in production: the first value a cache encodes is decoded back and
//! encoded again, and if that does not give the same bytes the write is
//! refused with [`Error::Encode`](crate::Error::Encode), naming the value's
//! type and the codec, and one ERROR is logged; every later write of that
//! cache to its shared store is refused the same way (fills still answer
//! their callers, uncached).

use serde::de::DeserializeOwned;
use serde::Serialize;
use std::fmt;

/// Turns values of type `V` into bytes and back.
///
/// The codec's [`id`](Codec::id) is written into every envelope, so bytes
/// written with one codec are a (counted) miss for a cache using another,
/// never a misread value.
pub trait Codec<V>: Send + Sync + 'static {
    /// A byte identifying this format in the envelope header. 1 and 2 are
    /// taken by [`Postcard`] and [`Json`]; pick 128–255 for your own.
    fn id(&self) -> u8;

    /// Appends the encoding of `value` to `out`.
    fn encode(&self, value: &V, out: &mut Vec<u8>) -> Result<(), CodecError>;

    /// Decodes a value from exactly `bytes`.
    fn decode(&self, bytes: &[u8]) -> Result<V, CodecError>;

    /// The codec's name in errors and logs.
    fn name(&self) -> &'static str {
        "custom"
    }
}

/// A codec failure.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CodecError {
    message: String,
}

impl CodecError {
    /// A codec error with a message.
    pub fn new(message: impl fmt::Display) -> Self {
        Self {
            message: message.to_string(),
        }
    }
}

impl fmt::Display for CodecError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for CodecError {}

/// The default codec: postcard, a compact serde format. Not self-describing:
/// change the cache's `version` when `V` changes shape, and see [the
/// module docs](self) for the serde attributes it cannot carry.
#[derive(Debug, Clone, Copy, Default)]
pub struct Postcard;

impl<V: Serialize + DeserializeOwned> Codec<V> for Postcard {
    fn id(&self) -> u8 {
        1
    }

    fn name(&self) -> &'static str {
        "postcard"
    }

    fn encode(&self, value: &V, out: &mut Vec<u8>) -> Result<(), CodecError> {
        let bytes = postcard::to_allocvec(value).map_err(CodecError::new)?;
        out.extend_from_slice(&bytes);
        Ok(())
    }

    fn decode(&self, bytes: &[u8]) -> Result<V, CodecError> {
        let (value, rest) = postcard::take_from_bytes(bytes).map_err(CodecError::new)?;
        if rest.is_empty() {
            Ok(value)
        } else {
            Err(CodecError::new(format!("{} trailing bytes", rest.len())))
        }
    }
}

/// JSON through `serde_json`: larger and slower than [`Postcard`], readable
/// with `redis-cli`.
#[derive(Debug, Clone, Copy, Default)]
pub struct Json;

impl<V: Serialize + DeserializeOwned> Codec<V> for Json {
    fn id(&self) -> u8 {
        2
    }

    fn name(&self) -> &'static str {
        "json"
    }

    fn encode(&self, value: &V, out: &mut Vec<u8>) -> Result<(), CodecError> {
        serde_json::to_writer(out, value).map_err(CodecError::new)
    }

    fn decode(&self, bytes: &[u8]) -> Result<V, CodecError> {
        serde_json::from_slice(bytes).map_err(CodecError::new)
    }
}

/// Whether `value` survives `codec`: encoded, decoded and encoded again, it
/// gives the same bytes. `None` if it does not encode at all (an error of
/// this value, reported by the write itself); otherwise `Err` says what
/// went wrong, naming `V` and the codec.
pub(crate) fn round_trips<V: 'static>(
    codec: &dyn Codec<V>,
    value: &V,
) -> Option<Result<(), String>> {
    let mut first = Vec::new();
    codec.encode(value, &mut first).ok()?;
    let failed = |what: String| {
        Err(format!(
            "values of type `{}` do not round-trip through the {} codec ({what}); \
             choose a self-describing codec with CacheBuilder::codec (e.g. corral::codec::Json), \
             or drop the serde attributes it cannot carry (skip_serializing_if, flatten, untagged, \
             serde_json::Value fields: see corral::codec)",
            std::any::type_name::<V>(),
            codec.name()
        ))
    };
    let decoded = match codec.decode(&first) {
        Ok(decoded) => decoded,
        Err(error) => return Some(failed(format!("its encoding does not decode: {error}"))),
    };
    let mut second = Vec::new();
    if let Err(error) = codec.encode(&decoded, &mut second) {
        return Some(failed(format!(
            "the decoded value does not encode: {error}"
        )));
    }
    if first != second {
        return Some(failed("the decoded value encodes differently".to_owned()));
    }
    Some(Ok(()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde::{Deserialize, Serialize};

    #[derive(Serialize, Deserialize)]
    struct Skipping {
        nickname: Option<String>,
        #[serde(skip_serializing_if = "Option::is_none")]
        email: Option<String>,
        id: u64,
    }

    #[test]
    fn skip_serializing_if_does_not_round_trip_through_postcard_but_does_through_json() {
        let value = Skipping {
            nickname: None,
            email: None,
            id: 7,
        };
        let Some(Err(message)) = round_trips(&Postcard, &value) else {
            panic!("postcard cannot carry a skipped field");
        };
        assert!(
            message.contains("Skipping") && message.contains("postcard"),
            "{message}"
        );
        assert_eq!(round_trips(&Json, &value), Some(Ok(())));
        assert_eq!(round_trips(&Postcard, &7_u64), Some(Ok(())));
    }
}

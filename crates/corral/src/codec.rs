//! How values become bytes in a shared store.

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
/// change the cache's `version` when `V` changes shape.
#[derive(Debug, Clone, Copy, Default)]
pub struct Postcard;

impl<V: Serialize + DeserializeOwned> Codec<V> for Postcard {
    fn id(&self) -> u8 {
        1
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

    fn encode(&self, value: &V, out: &mut Vec<u8>) -> Result<(), CodecError> {
        serde_json::to_writer(out, value).map_err(CodecError::new)
    }

    fn decode(&self, bytes: &[u8]) -> Result<V, CodecError> {
        serde_json::from_slice(bytes).map_err(CodecError::new)
    }
}

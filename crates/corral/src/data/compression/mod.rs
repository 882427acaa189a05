//! Compression of the values a cache writes to a shared store: the setting
//! ([`Compression`]), and the frame that carries a compressed value in the
//! envelope, made and read by [`frames`] (feature `compression`).
//!
//! A value is compressed after the codec has encoded it and before the
//! envelope is sealed (ciphertext does not shrink), only when its encoding
//! is at least [`min_bytes`](Compression::min_bytes) long and only when
//! compressing saves at least an eighth of it; the envelope's flag says so,
//! so every cache reads compressed and plain values alike, whatever it
//! writes.
//!
//! The value bytes of a compressed envelope are a frame:
//!
//! ```text
//! offset size field
//!  0     1    algorithm: 1 LZ4 block (lz4_flex), 2 zstd frame
//!  1     4    the encoding's length, decompressed (u32 LE)
//!  5     n    the compressed bytes (a zstd frame ends with a checksum
//!             of its content)
//! ```
//!
//! The decompressed length is checked against the cache's
//! `max_value_bytes` before anything is allocated, and the decompressor
//! writes into a buffer of exactly that length: a forged length, a
//! truncated frame or a bomb fails to unpack, never allocates past the
//! bound.

// Without the feature, nothing makes a frame: its parts are unused.
#![cfg_attr(not(feature = "compression"), allow(dead_code))]

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Deserializer};

use crate::data::error::ConfigError;

#[cfg_attr(not(feature = "compression"), path = "frames_off.rs")]
pub(crate) mod frames;

/// Frame algorithm byte: an LZ4 block.
pub(crate) const LZ4: u8 = 1;
/// Frame algorithm byte: a zstd frame.
pub(crate) const ZSTD: u8 = 2;
/// The algorithm byte and the decompressed length.
pub(crate) const PREFIX_LEN: usize = 5;

/// What became of a value's encoding on its way into an envelope.
#[derive(Debug)]
pub(crate) enum Packed {
    /// Compression is off, or the encoding is under the threshold.
    Plain,
    /// Compressing did not save an eighth: stored as it is.
    Skipped,
    /// Compressed: the frame replaces the encoding.
    Frame(Frame),
}

/// What compression did to one value's encoding, for the counters.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Packing {
    /// Not offered to the compressor (off, under the threshold, or no
    /// value).
    Plain,
    /// Offered, and stored as it is: compressing did not pay.
    Skipped,
    /// Stored compressed.
    Packed {
        /// The encoding's length.
        before: usize,
        /// The frame's length.
        after: usize,
    },
}

/// A compressed encoding, as [`PREFIX_LEN`] bytes of prefix and the
/// compressed bytes.
#[derive(Debug)]
pub(crate) struct Frame {
    algorithm: u8,
    /// The encoding's length.
    raw_len: u32,
    compressed: Vec<u8>,
}

impl Frame {
    /// Appends the frame to `out`.
    pub(crate) fn write_to(&self, out: &mut Vec<u8>) {
        out.push(self.algorithm);
        out.extend_from_slice(&self.raw_len.to_le_bytes());
        out.extend_from_slice(&self.compressed);
    }

    /// The frame's length, prefix included.
    pub(crate) fn len(&self) -> usize {
        PREFIX_LEN + self.compressed.len()
    }
}

/// Why a frame did not unpack.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum UnpackError {
    /// Shorter than its prefix.
    Truncated,
    /// Its decompressed length is over the cache's `max_value_bytes`.
    TooLarge {
        /// The decompressed length the frame claims.
        len: usize,
    },
    /// An algorithm byte this build does not know (or, without the
    /// feature `compression`, any).
    UnknownAlgorithm(u8),
    /// The decompressor refused the bytes, or they unpack to another
    /// length than the prefix says.
    Corrupt(String),
}

/// Splits a frame into its algorithm byte, decompressed length and
/// compressed bytes; refuses a length over `max_value_bytes`.
pub(crate) fn split_frame(
    frame: &[u8],
    max_value_bytes: usize,
) -> Result<(u8, usize, &[u8]), UnpackError> {
    if frame.len() < PREFIX_LEN {
        return Err(UnpackError::Truncated);
    }
    let (prefix, compressed) = frame.split_at(PREFIX_LEN);
    let len = u32::from_le_bytes([prefix[1], prefix[2], prefix[3], prefix[4]]) as usize;
    if len > max_value_bytes {
        return Err(UnpackError::TooLarge { len });
    }
    Ok((prefix[0], len, compressed))
}

/// The default of [`Compression::min_bytes`]: values whose encoding is
/// shorter are stored as they are.
pub(crate) const DEFAULT_MIN_BYTES: usize = 1024;

/// The zstd levels a [`Compression`] accepts.
const ZSTD_LEVELS: std::ops::RangeInclusive<i32> = 1..=22;

/// How a cache compresses the values it writes to its shared store
/// (feature `compression`; set with
/// [`CacheBuilder::compression`](crate::CacheBuilder::compression)).
///
/// A value's encoding (what the [codec](crate::codec) wrote) is compressed
/// when it is at least [`min_bytes`](Self::min_bytes) long (default 1 KiB),
/// then sealed if the cache encrypts. It is stored compressed only if that
/// saves at least an eighth of its bytes; otherwise as it is, counted in
/// [`Stats::compression_skipped`](crate::Stats::compression_skipped). The
/// envelope says how each value was compressed, so caches with different
/// settings — none, LZ4, zstd at any level — sharing a namespace read each
/// other's values (a rolling deploy that turns compression on or off
/// loses nothing). The in-process tier (L1) keeps values decoded: its hits
/// never decompress.
///
/// # Which one
///
/// Measured on JSON of 1.4, 10 and 100 KB (BENCHMARKS.md, "Values
/// compressed", with the L2 hit throughput on loopback and through slow
/// links):
///
/// | setting | JSON stored | CPU added per value (1.4 / 10 / 100 KB) | when |
/// |---|---|---|---|
/// | [`none`](Self::none) (the default) | as encoded | none | small values; a store with memory to spare on a fast network, where a read is bound by the client's CPU; values already compressed (images, archives) |
/// | [`lz4`](Self::lz4) | 1.8× to 4.1× smaller | write +2 / +13 / +143 µs, read +1 / +5 / +58 µs | values of a few KB and more where bytes cost: store memory, a link of 1 Gbit/s or less (2× the L2 hits at 100 KB), for the least CPU |
/// | [`zstd(1)`](Self::zstd) | 2.5× to 7.1× smaller | write +8 / +27 / +197 µs, read +4 / +12 / +68 µs | large values (tens of KB and more), slow links (6× the L2 hits at 100 KB on 100 Mbit/s), memcached's 1 MiB item limit, a Redis short of memory |
/// | zstd 3 and up | about as small as level 1 at these sizes | writes slower with each level | values written rarely and read often, large enough for higher levels to find more |
///
/// On loopback no setting raised L2 hit throughput (LZ4 0.95–0.99×,
/// zstd 0.73–0.98× of none): compression pays for bytes, not for CPU.
/// Values that do not shrink (random bytes) cost their writes the try
/// (+13 µs per 100 KB with LZ4) and their reads nothing.
///
/// A build without the feature `compression` reads a compressed value as
/// undecodable (a counted miss, then refilled): turn the feature on in
/// every build that shares a namespace before turning compression on.
///
/// ```
/// use corral::Compression;
///
/// let zstd: Compression = "zstd:3,min_bytes=4096".parse()?;
/// assert_eq!(zstd, Compression::zstd(3).min_bytes(4096));
/// assert_eq!(zstd.to_string(), "zstd:3,min_bytes=4096");
/// assert_eq!("lz4".parse::<Compression>()?, Compression::lz4());
/// assert_eq!("none".parse::<Compression>()?, Compression::none());
/// # Ok::<(), corral::ConfigError>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Compression {
    algorithm: Algorithm,
    min_bytes: usize,
}

/// A compression algorithm and its level.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Algorithm {
    /// Values are stored as encoded.
    None,
    /// LZ4 block format (`lz4_flex`).
    Lz4,
    /// A zstd frame at this level.
    Zstd(i32),
}

impl Compression {
    /// No compression: values are stored as the codec encodes them (the
    /// default). Compressed values written by other caches are still read.
    pub const fn none() -> Self {
        Self::of(Algorithm::None)
    }

    /// LZ4 (the block format, through `lz4_flex`): fast both ways, about
    /// half the ratio of zstd on JSON.
    pub const fn lz4() -> Self {
        Self::of(Algorithm::Lz4)
    }

    /// zstd at `level`, 1 (fastest) to 22 (smallest); 3 is zstd's own
    /// default. Another level makes [`build`](crate::CacheBuilder::build)
    /// fail.
    pub const fn zstd(level: i32) -> Self {
        Self::of(Algorithm::Zstd(level))
    }

    /// `algorithm` above the default size.
    const fn of(algorithm: Algorithm) -> Self {
        Self {
            algorithm,
            min_bytes: DEFAULT_MIN_BYTES,
        }
    }

    /// Compresses only values whose encoding is at least `bytes` long
    /// (default 1 KiB): below that, a value saves
    /// few bytes for the CPU it costs.
    #[must_use]
    pub const fn min_bytes(mut self, bytes: usize) -> Self {
        self.min_bytes = bytes;
        self
    }

    /// Whether this setting compresses anything.
    pub(crate) fn is_on(&self) -> bool {
        self.algorithm != Algorithm::None
    }

    /// Checks the level, and that this build can compress.
    pub(crate) fn validate(&self) -> Result<(), ConfigError> {
        if let Algorithm::Zstd(level) = self.algorithm {
            if !ZSTD_LEVELS.contains(&level) {
                return Err(ConfigError::new(format!(
                    "zstd level {level} is out of range: 1 to 22"
                )));
            }
        }
        if self.is_on() && !cfg!(feature = "compression") {
            return Err(ConfigError::new(format!(
                "compression {self} needs corral's feature `compression`"
            )));
        }
        Ok(())
    }
}

impl Default for Compression {
    /// [`Compression::none`].
    fn default() -> Self {
        Self::none()
    }
}

impl fmt::Display for Compression {
    /// `none`, `lz4` or `zstd:<level>`, then `,min_bytes=<n>` unless it is
    /// the default: the form [`FromStr`] reads.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.algorithm {
            Algorithm::None => f.write_str("none")?,
            Algorithm::Lz4 => f.write_str("lz4")?,
            Algorithm::Zstd(level) => write!(f, "zstd:{level}")?,
        }
        if self.min_bytes != DEFAULT_MIN_BYTES {
            write!(f, ",min_bytes={}", self.min_bytes)?;
        }
        Ok(())
    }
}

impl FromStr for Compression {
    type Err = ConfigError;

    /// Reads `none`, `lz4`, `zstd` (level 3) or `zstd:<level>`, optionally
    /// followed by `,min_bytes=<n>` (e.g. `zstd:3,min_bytes=4096`).
    fn from_str(text: &str) -> Result<Self, ConfigError> {
        let bad = || {
            ConfigError::new(format!(
                "compression {text:?}: expected \"none\", \"lz4\", \"zstd\" or \"zstd:<level>\", \
                 optionally followed by \",min_bytes=<bytes>\" (e.g. \"zstd:3,min_bytes=4096\")"
            ))
        };
        let (algorithm, rest) = match text.trim().split_once(',') {
            Some((algorithm, rest)) => (algorithm.trim(), Some(rest.trim())),
            None => (text.trim(), None),
        };
        let mut compression = match algorithm.split_once(':') {
            None if algorithm == "none" => Self::none(),
            None if algorithm == "lz4" => Self::lz4(),
            None if algorithm == "zstd" => Self::zstd(3),
            Some(("zstd", level)) => Self::zstd(level.trim().parse().map_err(|_| bad())?),
            _ => return Err(bad()),
        };
        if let Some(rest) = rest {
            let bytes = rest
                .strip_prefix("min_bytes")
                .and_then(|rest| rest.trim_start().strip_prefix('='))
                .and_then(|bytes| bytes.trim().parse().ok())
                .ok_or_else(bad)?;
            compression = compression.min_bytes(bytes);
        }
        Ok(compression)
    }
}

impl<'de> Deserialize<'de> for Compression {
    /// From a string, as [`FromStr`] reads it.
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = String::deserialize(deserializer)?;
        text.parse().map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn settings_parse_and_print_the_same_form() {
        for (text, expected) in [
            ("none", Compression::none()),
            ("lz4", Compression::lz4()),
            ("zstd", Compression::zstd(3)),
            (" zstd:19 ", Compression::zstd(19)),
            ("lz4,min_bytes=0", Compression::lz4().min_bytes(0)),
            (
                "zstd:1, min_bytes = 4096",
                Compression::zstd(1).min_bytes(4096),
            ),
        ] {
            let parsed: Compression = text.parse().expect(text);
            assert_eq!(parsed, expected, "{text}");
            assert_eq!(parsed.to_string().parse::<Compression>(), Ok(parsed));
        }
        for text in ["", "gzip", "zstd:", "zstd:x", "lz4:1", "lz4,min=3", "lz4,"] {
            let error = text.parse::<Compression>().expect_err(text);
            assert!(error.to_string().contains("zstd:<level>"), "{error}");
        }
    }

    #[test]
    fn levels_out_of_range_are_refused() {
        for level in [0, -1, 23] {
            let error = Compression::zstd(level).validate().expect_err("level");
            assert!(error.to_string().contains("1 to 22"), "{error}");
        }
        assert!(Compression::none().validate().is_ok());
        assert_eq!(
            Compression::lz4().validate().is_ok(),
            cfg!(feature = "compression")
        );
    }
}

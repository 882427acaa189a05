//! Making and reading compressed frames (feature `compression`): LZ4
//! blocks through `lz4_flex`, zstd frames through `zstd`, each unpacked
//! into a buffer of the length the frame's prefix states, checked first.

use std::sync::Mutex;

use zstd::bulk::{Compressor, Decompressor};

use super::{split_frame, Algorithm, Compression, Frame, Packed, UnpackError, LZ4, ZSTD};
use crate::sync::lock_std;

/// One cache's compression: its setting, and the zstd contexts it keeps
/// between values (a context costs more to make than a small value to
/// compress). Every cache holds one, compressing or not, to read the
/// compressed values others write.
pub(crate) struct Frames {
    setting: Compression,
    /// Idle zstd compression contexts, at the setting's level.
    compressors: Mutex<Vec<Compressor<'static>>>,
    /// Idle zstd decompression contexts.
    decompressors: Mutex<Vec<Decompressor<'static>>>,
    /// The most idle contexts of each kind kept.
    keep: usize,
}

impl Frames {
    /// The frames of a cache compressing with `setting`.
    pub(crate) fn new(setting: Compression) -> Self {
        let cpus = std::thread::available_parallelism().map_or(4, usize::from);
        Self {
            setting,
            compressors: Mutex::new(Vec::new()),
            decompressors: Mutex::new(Vec::new()),
            keep: cpus.clamp(1, 64),
        }
    }

    /// Compresses `raw`, a value's encoding, if the setting says so and it
    /// pays: the frame must be at least an eighth shorter than `raw`.
    pub(crate) fn pack(&self, raw: &[u8]) -> Packed {
        if !self.setting.is_on() || raw.len() < self.setting.min_bytes {
            return Packed::Plain;
        }
        let Ok(raw_len) = u32::try_from(raw.len()) else {
            return Packed::Skipped;
        };
        // The longest compressed part that pays, prefix included.
        let Some(limit) = (raw.len() - raw.len() / 8).checked_sub(super::PREFIX_LEN) else {
            return Packed::Skipped;
        };
        let compressed = match self.setting.algorithm {
            Algorithm::None => return Packed::Plain,
            Algorithm::Lz4 => lz4(raw).map(|bytes| (LZ4, bytes)),
            Algorithm::Zstd(level) => self.zstd(raw, level, limit).map(|bytes| (ZSTD, bytes)),
        };
        match compressed {
            Some((algorithm, compressed)) if compressed.len() <= limit => Packed::Frame(Frame {
                algorithm,
                raw_len,
                compressed,
            }),
            _ => Packed::Skipped,
        }
    }

    /// zstd of `raw` at `level` in at most `limit` bytes (`None` if it
    /// needs more, or the context fails), on a kept context.
    fn zstd(&self, raw: &[u8], level: i32, limit: usize) -> Option<Vec<u8>> {
        let mut context = match pop(&self.compressors) {
            Some(context) => context,
            None => compressor(level)?,
        };
        let mut out = Vec::with_capacity(limit);
        let written = context.compress_to_buffer(raw, &mut out);
        push(&self.compressors, context, self.keep);
        written.ok().map(|_| out)
    }

    /// Unpacks `frame` (the value bytes of a compressed envelope) into the
    /// encoding it holds. The decompressed length is checked against
    /// `max_value_bytes` before the buffer is allocated at exactly that
    /// length; the decompressor cannot write past it.
    pub(crate) fn unpack(
        &self,
        frame: &[u8],
        max_value_bytes: usize,
    ) -> Result<Vec<u8>, UnpackError> {
        let (algorithm, len, compressed) = split_frame(frame, max_value_bytes)?;
        let out = match algorithm {
            LZ4 => {
                let mut out = vec![0; len];
                let written = lz4_flex::block::decompress_into(compressed, &mut out)
                    .map_err(|e| UnpackError::Corrupt(e.to_string()))?;
                out.truncate(written);
                out
            }
            ZSTD => {
                let mut context = match pop(&self.decompressors) {
                    Some(context) => context,
                    None => Decompressor::new().map_err(|e| UnpackError::Corrupt(e.to_string()))?,
                };
                let mut out = Vec::with_capacity(len);
                let written = context.decompress_to_buffer(compressed, &mut out);
                push(&self.decompressors, context, self.keep);
                written.map_err(|e| UnpackError::Corrupt(e.to_string()))?;
                out
            }
            other => return Err(UnpackError::UnknownAlgorithm(other)),
        };
        if out.len() != len {
            return Err(UnpackError::Corrupt(format!(
                "{} bytes unpacked, the frame says {len}",
                out.len()
            )));
        }
        Ok(out)
    }
}

/// A zstd context at `level` whose frames end with a checksum of their
/// content (4 bytes): an altered frame fails to unpack rather than
/// unpacking to other bytes.
fn compressor(level: i32) -> Option<Compressor<'static>> {
    let mut context = Compressor::new(level).ok()?;
    context
        .set_parameter(zstd::zstd_safe::CParameter::ChecksumFlag(true))
        .ok()?;
    Some(context)
}

/// An LZ4 block of `raw`.
fn lz4(raw: &[u8]) -> Option<Vec<u8>> {
    let mut out = vec![0; lz4_flex::block::get_maximum_output_size(raw.len())];
    let written = lz4_flex::block::compress_into(raw, &mut out).ok()?;
    out.truncate(written);
    Some(out)
}

fn pop<T>(pool: &Mutex<Vec<T>>) -> Option<T> {
    lock_std(pool).pop()
}

/// Keeps `context` for the next value, unless `keep` are idle already.
fn push<T>(pool: &Mutex<Vec<T>>, context: T, keep: usize) {
    let mut idle = lock_std(pool);
    if idle.len() < keep {
        idle.push(context);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// JSON-like text: repetitive enough to compress.
    fn json(len: usize) -> Vec<u8> {
        let mut out = Vec::with_capacity(len + 64);
        let mut i = 0u32;
        while out.len() < len {
            out.extend_from_slice(
                format!(
                    r#"{{"order_id":{i},"status":"shipped","total_cents":{}}},"#,
                    i * 37
                )
                .as_bytes(),
            );
            i += 1;
        }
        out.truncate(len);
        out
    }

    fn frame_bytes(packed: Packed) -> Vec<u8> {
        let Packed::Frame(frame) = packed else {
            panic!("not compressed: {packed:?}");
        };
        let mut out = Vec::new();
        frame.write_to(&mut out);
        assert_eq!(out.len(), frame.len());
        out
    }

    #[test]
    fn both_algorithms_round_trip_above_the_threshold_only() {
        let raw = json(10_000);
        for setting in [
            Compression::lz4(),
            Compression::zstd(1),
            Compression::zstd(19),
        ] {
            let frames = Frames::new(setting);
            let frame = frame_bytes(frames.pack(&raw));
            assert!(frame.len() < raw.len() / 2, "{setting}: {}", frame.len());
            // Any cache reads it, whatever it writes.
            for reader in [
                Compression::none(),
                Compression::lz4(),
                Compression::zstd(3),
            ] {
                let reader = Frames::new(reader);
                assert_eq!(reader.unpack(&frame, raw.len()), Ok(raw.clone()));
                assert_eq!(
                    reader.unpack(&frame, raw.len() - 1),
                    Err(UnpackError::TooLarge { len: raw.len() })
                );
            }
            let small = Frames::new(setting.min_bytes(raw.len() + 1));
            assert!(matches!(small.pack(&raw), Packed::Plain));
        }
        assert!(matches!(
            Frames::new(Compression::none()).pack(&raw),
            Packed::Plain
        ));
    }

    #[test]
    fn what_does_not_shrink_by_an_eighth_is_skipped() {
        let mut rng = fastrand::Rng::with_seed(7);
        let noise: Vec<u8> = (0..4096).map(|_| rng.u8(..)).collect();
        for setting in [Compression::lz4(), Compression::zstd(3)] {
            let frames = Frames::new(setting.min_bytes(0));
            assert!(matches!(frames.pack(&noise), Packed::Skipped), "{setting}");
            assert!(matches!(frames.pack(b"tiny"), Packed::Skipped), "{setting}");
            assert!(matches!(frames.pack(b""), Packed::Skipped), "{setting}");
        }
    }

    #[test]
    fn forged_truncated_and_unknown_frames_fail_to_unpack() {
        let raw = json(20_000);
        let frames = Frames::new(Compression::none());
        for setting in [Compression::lz4(), Compression::zstd(3)] {
            let frame = frame_bytes(Frames::new(setting).pack(&raw));
            for cut in 0..frame.len() {
                assert!(
                    frames.unpack(&frame[..cut], 1 << 20).is_err(),
                    "{setting} cut at {cut}"
                );
            }
            // A length that lies, either way: no panic, no value.
            for len in [0u32, 1, raw.len() as u32 - 1, raw.len() as u32 + 1] {
                let mut forged = frame.clone();
                forged[1..5].copy_from_slice(&len.to_le_bytes());
                assert!(
                    frames.unpack(&forged, 1 << 20).is_err(),
                    "{setting} len {len}"
                );
            }
        }
        // zstd frames carry a checksum of their content: an altered byte
        // is refused, or changed nothing the content depends on.
        let frame = frame_bytes(Frames::new(Compression::zstd(3)).pack(&raw));
        let mut refused = 0;
        for at in super::super::PREFIX_LEN..frame.len() {
            let mut altered = frame.clone();
            altered[at] ^= 0x20;
            match frames.unpack(&altered, 1 << 20) {
                Ok(unpacked) => assert_eq!(unpacked, raw, "altered at {at}"),
                Err(_) => refused += 1,
            }
        }
        assert!(
            refused > (frame.len() - 5) * 9 / 10,
            "{refused} of {}",
            frame.len() - 5
        );
        assert_eq!(
            frames.unpack(&[9, 0, 0, 0, 0], 1 << 20),
            Err(UnpackError::UnknownAlgorithm(9))
        );
        assert_eq!(
            frames.unpack(&[ZSTD, 1], 1 << 20),
            Err(UnpackError::Truncated)
        );
    }

    #[test]
    fn a_bomb_is_refused_by_its_length_or_by_its_buffer() {
        // 4 MiB of zeros in a few KB.
        let zeros = vec![0u8; 4 << 20];
        for setting in [Compression::lz4(), Compression::zstd(3)] {
            let frame = frame_bytes(Frames::new(setting).pack(&zeros));
            assert!(frame.len() < 32 << 10, "{setting}: {}", frame.len());
            let frames = Frames::new(Compression::none());
            assert_eq!(
                frames.unpack(&frame, 1 << 20),
                Err(UnpackError::TooLarge { len: 4 << 20 })
            );
            // A prefix that understates the length: the buffer is that
            // small, and the decompressor stops at its end.
            let mut forged = frame.clone();
            forged[1..5].copy_from_slice(&4096u32.to_le_bytes());
            assert!(frames.unpack(&forged, 1 << 20).is_err(), "{setting}");
        }
    }
}

//! Stand-ins for the `compression` feature's frames when it is off: values
//! are written as they are, and a compressed value is not read.

use super::{split_frame, Compression, Packed, UnpackError};

/// A cache's compression, without the feature: none.
pub(crate) struct Frames;

impl Frames {
    /// The builder refuses any setting but [`Compression::none`] without
    /// the feature.
    pub(crate) fn new(_setting: Compression) -> Self {
        Self
    }

    pub(crate) fn pack(&self, _raw: &[u8]) -> Packed {
        Packed::Plain
    }

    /// Refuses every frame: this build has no decompressor.
    pub(crate) fn unpack(
        &self,
        frame: &[u8],
        max_value_bytes: usize,
    ) -> Result<Vec<u8>, UnpackError> {
        let (algorithm, _, _) = split_frame(frame, max_value_bytes)?;
        Err(UnpackError::UnknownAlgorithm(algorithm))
    }
}

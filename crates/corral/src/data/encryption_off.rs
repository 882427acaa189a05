//! Stand-ins for the `encryption` feature's types when it is off: nothing
//! can hold them, so a cache never encrypts.

use crate::data::error::ConfigError;

/// No encryption can be configured without the feature.
#[derive(Debug, Clone)]
pub(crate) enum Encryption {}

impl Encryption {
    pub(crate) fn cipher(&self, _namespace: &str) -> Result<Cipher, ConfigError> {
        match *self {}
    }
}

/// Why stored bytes did not open (never, without the feature).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum OpenError {}

impl std::fmt::Display for OpenError {
    fn fmt(&self, _f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match *self {}
    }
}

/// A cipher no cache holds without the feature.
pub(crate) enum Cipher {}

impl Cipher {
    pub(crate) fn seal(
        &self,
        _namespace: &str,
        _key: &str,
        _envelope: &[u8],
    ) -> Result<Vec<u8>, String> {
        match *self {}
    }

    pub(crate) fn open(
        &self,
        _namespace: &str,
        _key: &str,
        _bytes: &[u8],
    ) -> Result<Vec<u8>, OpenError> {
        match *self {}
    }
}

//! The data layer: what a cache entry is, what a key may be, how fresh a
//! value is and which settings judge it. Plain types and pure functions:
//! nothing here calls a store, spawns a task or knows a cache instance.

pub(crate) mod cause;
pub(crate) mod compression;
#[cfg_attr(not(feature = "encryption"), path = "encryption_off.rs")]
pub(crate) mod encryption;
pub(crate) mod entry;
pub(crate) mod error;
pub(crate) mod freshness;
pub(crate) mod key;
pub(crate) mod policy;
pub(crate) mod share;
pub(crate) mod stamps;
pub(crate) mod tags;
pub(crate) mod tracking;

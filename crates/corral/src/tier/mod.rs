//! The tiers: the in-process L1 (a bounded map of decoded values and its
//! clock) and the guarded shared store (the store behind its circuit
//! breaker and timeout, wrapped once and held by every caller of the store).

pub(crate) mod breaker;
pub(crate) mod call;
pub(crate) mod first_reads;
pub(crate) mod local;
pub(crate) mod pulse;
pub(crate) mod shared;
pub(crate) mod ticker;

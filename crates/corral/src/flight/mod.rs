//! Leading a flight: the caller's first read, the spawned leader (lease,
//! fill, commit, fallback) and the batch leader that fills many keys with
//! one call.

pub(crate) mod batch;
pub(crate) mod first_read;
pub(crate) mod leader;

//! Flights: the caller's side (from an L1 miss to the answer: read-ahead,
//! the flight joined or led, its first request), the spawned leader's side
//! (lease, fill, commit, fallback), and the batch leader that fills many
//! keys with one call.

pub(crate) mod batch;
pub(crate) mod caller;
pub(crate) mod leader;
pub(crate) mod permit;

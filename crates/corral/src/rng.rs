//! Random numbers without global state: each owner (a store's lease
//! tokens, a connection's backoff) holds its own generator, seeded from
//! the operating system.

/// A generator seeded from the OS-seeded keys of `std`'s `RandomState`.
pub(crate) fn seeded() -> fastrand::Rng {
    use std::hash::BuildHasher;
    let seed = std::collections::hash_map::RandomState::new().hash_one(0x636f_7272_616c_u64);
    fastrand::Rng::with_seed(seed)
}

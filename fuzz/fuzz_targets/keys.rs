//! Key validation, the Redis key encoding and the value frame on arbitrary
//! bytes: no panic, one hash slot per key, frames that round-trip.
#![no_main]

libfuzzer_sys::fuzz_target!(|bytes: &[u8]| corral::fuzzing::keys(bytes));

//! Compressed envelopes on arbitrary bytes: as a compressed value they
//! never panic the decoder nor make it allocate past its limit (see
//! `scripts/fuzz`); as a value, each algorithm's envelope reads back whole.
#![no_main]

libfuzzer_sys::fuzz_target!(|bytes: &[u8]| corral::fuzzing::compressed(bytes));

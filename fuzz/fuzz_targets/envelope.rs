//! The envelope decoder on arbitrary bytes: no panic, and whatever decodes
//! re-encodes to the same entry.
#![no_main]

libfuzzer_sys::fuzz_target!(|bytes: &[u8]| corral::fuzzing::envelope(bytes));

//! The RESP2 reader on arbitrary bytes: no panic, the scan and the read
//! agree, what reads whole is what redis-rs reads, cuts are incomplete.
#![no_main]

libfuzzer_sys::fuzz_target!(|bytes: &[u8]| corral::fuzzing::resp(bytes));

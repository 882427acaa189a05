//! Replays every input in `fuzz/regressions/<target>/` (crashers the fuzz
//! targets found once, and seeds) through the fuzz entry points, on stable,
//! so a fixed crash stays fixed. See `scripts/fuzz`.

use std::path::PathBuf;

fn inputs(target: &str) -> Vec<(PathBuf, Vec<u8>)> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../fuzz/regressions")
        .join(target);
    let mut inputs: Vec<_> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|entry| entry.expect("directory entry").path())
        .filter(|path| path.is_file())
        .map(|path| {
            let bytes = std::fs::read(&path).expect("readable input");
            (path, bytes)
        })
        .collect();
    inputs.sort();
    inputs
}

/// Every input kept for fuzz target `target`, through its entry point.
fn replay(target: &str, entry: fn(&[u8])) {
    let inputs = inputs(target);
    assert!(!inputs.is_empty(), "no seeds in fuzz/regressions/{target}");
    for (path, bytes) in inputs {
        eprintln!("{}", path.display());
        entry(&bytes);
    }
}

#[test]
fn envelope_inputs_decode_or_fail_cleanly() {
    replay("envelope", corral::fuzzing::envelope);
}

#[test]
fn key_inputs_encode_cleanly() {
    replay("keys", corral::fuzzing::keys);
}

#[test]
fn resp_inputs_read_or_fail_cleanly() {
    replay("resp", corral::fuzzing::resp);
}

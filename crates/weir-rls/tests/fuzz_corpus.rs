//! Every input the fuzzers kept (`fuzz/corpus/<target>/`), replayed through the
//! same code the cargo-fuzz targets run (`fuzz/src/targets.rs`), on the stable
//! toolchain: none panics, each is answered within its bounds. A crash the fuzzers
//! found is fixed with its input added here, so it stays fixed.

#[path = "../fuzz/src/targets.rs"]
mod targets;

use std::path::{Path, PathBuf};

/// The corpus files of `target`, in path order.
fn corpus(target: &str) -> Vec<PathBuf> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz/corpus").join(target);
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|entry| entry.expect("a corpus entry").path())
        .filter(|path| path.is_file())
        .collect();
    files.sort();
    files
}

fn replay(target: &str, run: fn(&[u8])) {
    let files = corpus(target);
    assert!(!files.is_empty(), "the {target} corpus is empty");
    for path in files {
        let data = std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        // The fuzzers ran with -max_len 64 KiB at most: a larger file was not theirs.
        assert!(data.len() <= 64 << 10, "{} is {} bytes", path.display(), data.len());
        if let Err(panic) = std::panic::catch_unwind(|| run(&data)) {
            let message = panic
                .downcast_ref::<String>()
                .map(String::as_str)
                .or_else(|| panic.downcast_ref::<&str>().copied())
                .unwrap_or("(no message)");
            panic!("{} panicked: {message}", path.display());
        }
    }
}

#[test]
fn the_config_corpus_loads_or_is_refused() {
    replay("config", targets::config);
}

#[test]
fn the_request_corpus_is_answered_or_refused() {
    replay("request", targets::request);
}

/// The kept crashes (`fuzz/corpus/crashes/<target>-*`), each of which panicked
/// before its fix.
#[test]
fn fixed_crashes_stay_fixed() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz/corpus/crashes");
    let Ok(entries) = std::fs::read_dir(&dir) else { return };
    for entry in entries {
        let path = entry.expect("a crash entry").path();
        let name = path.file_name().and_then(|n| n.to_str()).unwrap_or_default().to_owned();
        let data = std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        if name.starts_with("config-") {
            targets::config(&data);
        } else if name.starts_with("request-") {
            targets::request(&data);
        } else {
            panic!("{name}: a crash file is named <target>-<anything>");
        }
    }
}

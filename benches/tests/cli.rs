//! The command line rejects bad input with a clear error and a non-zero exit, and a
//! tiny run produces well-formed output. (No timing is asserted: benchmarks are
//! measurements, not tests.)

use clap::Parser;
use std::ffi::OsString;
use std::path::PathBuf;
use weir_bench::cli::{Args, BenchError, parse_duration};

fn args(line: &[&str]) -> Vec<OsString> {
    std::iter::once("weir-bench").chain(line.iter().copied()).map(OsString::from).collect()
}

fn validate(line: &[&str]) -> Result<weir_bench::cli::Config, BenchError> {
    Args::try_parse_from(args(line)).expect("parses").validate()
}

fn temp_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("weir-bench-test-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    dir
}

#[test]
fn zero_threads_is_an_error() {
    let e = validate(&["--threads", "1,0", "--out", temp_dir("t0").to_str().unwrap()]).unwrap_err();
    assert!(matches!(e, BenchError::BadThreads(_)));
    assert!(e.to_string().contains("0 is not a thread count"), "{e}");
    assert_eq!(weir_bench::cli::main(args(&["--threads", "0"])), 2);
}

#[test]
fn unknown_subject_is_an_error_that_points_to_list() {
    let e = validate(&["--only", "no-such-limiter"]).unwrap_err();
    assert!(e.to_string().contains("weir-bench list"), "{e}");
    assert_eq!(weir_bench::cli::main(args(&["--only", "no-such-limiter"])), 2);
}

#[test]
fn unwritable_output_folder_is_an_error() {
    let file = temp_dir("file");
    std::fs::write(&file, b"not a folder").unwrap();
    let inside = file.join("out");
    let e = validate(&["--out", inside.to_str().unwrap()]).unwrap_err();
    assert!(matches!(e, BenchError::Output(..)), "{e}");
    assert!(e.to_string().starts_with("cannot write to the output folder"), "{e}");
}

#[test]
fn bad_durations_and_reps_are_errors() {
    assert!(parse_duration("0ms").is_err());
    assert!(parse_duration("5 parsecs").is_err());
    assert!(parse_duration("fast").is_err());
    assert_eq!(parse_duration("1.5s"), Ok(std::time::Duration::from_millis(1500)));
    assert_eq!(parse_duration("200ms"), Ok(std::time::Duration::from_millis(200)));
    assert!(Args::try_parse_from(args(&["--duration", "0s"])).is_err());
    assert!(matches!(validate(&["--reps", "0"]), Err(BenchError::ZeroReps)));
    assert_eq!(weir_bench::cli::main(args(&["--threads", "x"])), 2);
    assert_eq!(weir_bench::cli::main(args(&["--quick", "--full"])), 2);
}

#[test]
fn defaults_are_the_quick_profile_on_one_two_and_all_cores() {
    let config = validate(&["--out", temp_dir("defaults").to_str().unwrap()]).unwrap();
    assert_eq!(config.profile, "quick");
    let cores = std::thread::available_parallelism().unwrap().get();
    let mut expected = vec![1, 2, cores];
    expected.sort_unstable();
    expected.dedup();
    assert_eq!(config.threads, expected);
    assert_eq!(config.duration, std::time::Duration::from_millis(200));
}

#[test]
fn a_tiny_run_writes_well_formed_csv() {
    let out = temp_dir("tiny");
    let code = weir_bench::cli::main(args(&[
        "throughput",
        "--threads",
        "1,2",
        "--duration",
        "2ms",
        "--reps",
        "1",
        "--only",
        "reference",
        "--only",
        "hot-denied/weir-gcra",
        "--no-progress",
        "--out",
        out.to_str().unwrap(),
    ]));
    assert_eq!(code, 0);
    let csv = std::fs::read_to_string(out.join("throughput.csv")).unwrap();
    let mut lines = csv.lines();
    let header: Vec<&str> = lines.next().unwrap().split(',').collect();
    assert_eq!(header[..4], ["scenario", "subject", "threads", "median_ops_per_sec"]);
    let rows: Vec<Vec<&str>> = lines.map(|l| l.split(',').collect()).collect();
    assert_eq!(rows.len(), 4 * 2, "4 subjects × 2 thread counts");
    for row in &rows {
        assert_eq!(row.len(), header.len(), "{row:?}");
        let ops: f64 = row[3].parse().unwrap();
        assert!(ops > 0.0);
    }
    assert!(rows.iter().any(|r| r[0] == "hot-denied" && r[1] == "weir-gcra+coarse"));
}

//! The command line rejects bad input with a clear error and a non-zero exit, and a
//! tiny run produces well-formed output. (No timing is asserted: benchmarks are
//! measurements, not tests.)

use clap::Parser;
use std::ffi::OsString;
use std::path::PathBuf;
use weir_bench::cli::{Args, parse_duration};
use weir_bench::harness::{BenchError, Config, Profile};

fn args(line: &[&str]) -> Vec<OsString> {
    std::iter::once("weir-bench").chain(line.iter().copied()).map(OsString::from).collect()
}

fn validate(line: &[&str]) -> Result<Config, BenchError> {
    Args::try_parse_from(args(line)).expect("parses").validate().map(|run| run.config)
}

/// The header and rows of a CSV file, parsed as CSV (fields may be quoted).
fn read_csv(path: &std::path::Path) -> (Vec<String>, Vec<Vec<String>>) {
    let mut reader = csv::Reader::from_path(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let header = reader.headers().unwrap().iter().map(String::from).collect();
    let rows = reader
        .records()
        .map(|r| r.unwrap_or_else(|e| panic!("{}: {e}", path.display())).iter().map(String::from).collect())
        .collect();
    (header, rows)
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
    assert_eq!(config.profile, Profile::Quick);
    assert!(config.pin);
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
    let (header, rows) = read_csv(&out.join("throughput.csv"));
    assert_eq!(
        header[..6],
        ["scenario", "subject", "threads", "median_ops_per_sec", "min_ops_per_sec", "max_ops_per_sec"]
    );
    assert_eq!(rows.len(), 4 * 2, "4 subjects × 2 thread counts");
    for row in &rows {
        assert_eq!(row.len(), header.len(), "{row:?}");
        let [median, min, max]: [f64; 3] = [3, 4, 5].map(|i| row[i].parse().unwrap());
        // Not `min > 0`: on a loaded machine a thread may not be scheduled at all
        // within a run of 2 ms (a cold CI run once saw 0 checks from one).
        assert!(min >= 0.0 && min <= median && median <= max, "{row:?}");
    }
    assert!(rows.iter().any(|r| r[0] == "hot-denied" && r[1] == "weir-gcra+coarse"));
}

/// Checks that every CSV file in `dir` has a header and rows of the same width, every
/// JSON file parses, every SVG is an SVG, and index.html shows every SVG and every
/// suite's table.
fn assert_well_formed(dir: &std::path::Path) {
    let mut svgs = Vec::new();
    let mut tables = 0;
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        let text = std::fs::read_to_string(&path).unwrap();
        let name = path.file_name().unwrap().to_str().unwrap().to_string();
        match path.extension().and_then(|e| e.to_str()) {
            Some("csv") => {
                let (header, rows) = read_csv(&path);
                assert!(!rows.is_empty(), "{} has no rows", path.display());
                for row in rows {
                    assert_eq!(row.len(), header.len(), "{}: {row:?}", path.display());
                }
            }
            Some("html") if name.ends_with(".table.html") => {
                assert!(text.starts_with("<section") && text.contains("</table>"), "{name}");
                tables += 1;
            }
            Some("json") => {
                let _: serde_json::Value =
                    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
            }
            Some("svg") => {
                assert!(text.starts_with("<svg") && text.trim_end().ends_with("</svg>"), "{}", path.display());
                svgs.push(path.file_name().unwrap().to_str().unwrap().to_string());
            }
            _ => {}
        }
    }
    let index = std::fs::read_to_string(dir.join("index.html")).unwrap();
    for svg in svgs {
        assert!(index.contains(&format!("<img src=\"{svg}\"")), "index.html does not show {svg}");
    }
    assert_eq!(index.matches("<table>").count(), tables, "index.html shows every suite table");
}

#[test]
fn a_tiny_run_of_every_suite_writes_well_formed_output() {
    let out = temp_dir("every-suite");
    let o = out.to_str().unwrap();
    let common = ["--threads", "1,2", "--duration", "2ms", "--reps", "1", "--no-progress", "--out", o];
    let suites: [&[&str]; 7] = [
        &["throughput", "--only", "reference", "--only", "hot-denied/weir-fixed"],
        &["single", "--only", "single/clock/manual"],
        &["memory", "--only", "memory/governor-keyed", "--probe-binary", env!("CARGO_BIN_EXE_weir-bench")],
        &["accuracy", "--only", "accuracy/weir-gcra"],
        &["queue", "--only", "queue/weir-leaky"],
        &["pacing", "--only", "pacing/100000"],
        &["compare", "--only", "compare/gcra", "--only", "compare/fixed-window"],
    ];
    for suite in suites {
        let line: Vec<&str> = suite.iter().chain(common.iter()).copied().collect();
        assert_eq!(weir_bench::cli::main(args(&line)), 0, "{line:?}");
    }
    for name in ["throughput", "single", "memory", "accuracy", "queue", "pacing", "compare"] {
        assert!(out.join(format!("{name}.csv")).exists(), "{name}.csv");
        assert!(out.join(format!("{name}.json")).exists(), "{name}.json");
    }
    assert!(out.join("compare-boundary-attack.svg").exists());
    assert!(out.join("throughput-reference.svg").exists());
    for name in ["throughput", "single", "memory", "accuracy", "queue", "pacing", "compare"] {
        assert!(out.join(format!("{name}.table.html")).exists(), "{name}.table.html");
    }
    assert_well_formed(&out);
}

#[test]
fn the_compare_traces_are_deterministic() {
    let config = Args::try_parse_from(args(&["compare", "--out", temp_dir("compare").to_str().unwrap()]))
        .unwrap()
        .validate()
        .unwrap()
        .config;
    let first = serde_json::to_string(&weir_bench::compare::traces(&config)).unwrap();
    let second = serde_json::to_string(&weir_bench::compare::traces(&config)).unwrap();
    assert_eq!(first, second);
    // And they show what the algorithms are known for: the fixed window lets the
    // boundary attack through twice, the others once.
    let traces = weir_bench::compare::traces(&config);
    let attack = |algorithm: &str| {
        traces.iter().find(|t| t.pattern == "boundary-attack" && t.algorithm == algorithm).unwrap().admitted
    };
    assert_eq!(attack("fixed-window"), 20);
    for algorithm in ["gcra", "sliding-window", "sliding-log"] {
        assert_eq!(attack(algorithm), 10, "{algorithm}");
    }
}

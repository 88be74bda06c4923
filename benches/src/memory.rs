//! The memory suite: bytes per key of every keyed store.
//!
//! Each store is measured in a fresh process (this binary, run with the hidden
//! `memory-probe` subcommand), so one measurement cannot inherit another's heap.
//! The probe counts exactly the bytes its allocator hands out and has not taken back
//! (a counting global allocator, switched on only in probes), and also reports the
//! growth of its resident set.

use crate::harness::{BenchError, Config, Output, progress};
use crate::html::{Cell, HtmlTable};
use crate::keyed::CheckKey;
use crate::report::{Machine, Table};
use serde::Serialize;
use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicBool, AtomicIsize, Ordering};
use weir_keyed::{Keyed, KeyedConfig};
use weir_rl_core::Quota;

/// Counts live heap bytes while [`COUNTING`] is on.
struct CountingAllocator;

static COUNTING: AtomicBool = AtomicBool::new(false);
static LIVE_BYTES: AtomicIsize = AtomicIsize::new(0);

// SAFETY: every call is forwarded unchanged to the system allocator; the counter is
// only arithmetic on the requested sizes.
unsafe impl GlobalAlloc for CountingAllocator {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // Ordering: Relaxed (both); a switch and a statistic, publishing nothing.
        if COUNTING.load(Ordering::Relaxed) {
            LIVE_BYTES.fetch_add(layout.size() as isize, Ordering::Relaxed);
        }
        // SAFETY: the caller's contract for `alloc` is passed on unchanged.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // Ordering: Relaxed (both); see `alloc`.
        if COUNTING.load(Ordering::Relaxed) {
            LIVE_BYTES.fetch_sub(layout.size() as isize, Ordering::Relaxed);
        }
        // SAFETY: the caller's contract for `dealloc` is passed on unchanged.
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // Ordering: Relaxed (both); see `alloc`.
        if COUNTING.load(Ordering::Relaxed) {
            LIVE_BYTES.fetch_add(new_size as isize - layout.size() as isize, Ordering::Relaxed);
        }
        // SAFETY: the caller's contract for `realloc` is passed on unchanged.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static ALLOCATOR: CountingAllocator = CountingAllocator;

/// The stores measured: weir's with `max_keys` equal to the keys stored (full) and
/// ten times that (10% full: shards are sized for the bound, so a store far below
/// its bound carries more table per key), and governor's.
const SUBJECTS: [&str; 3] = ["weir-keyed-full", "weir-keyed-10pct", "governor-keyed"];

/// Subject ids for `--only`.
pub fn ids() -> Vec<String> {
    SUBJECTS.iter().map(|s| format!("memory/{s}")).collect()
}

fn rss_bytes() -> Option<i64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let kb: i64 = status.lines().find(|l| l.starts_with("VmRSS:"))?.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb * 1024)
}

/// One request per hour per key: after its first check a key stays in use (not idle)
/// for an hour, so no store may drop it and every key is counted.
fn held_quota() -> Quota {
    Quota::per_hour(1).expect("a valid quota")
}

fn fill(store: &impl CheckKey, keys: u64) {
    for key in 0..keys {
        let _ = store.check_key(key.wrapping_mul(0x9E37_79B9_7F4A_7C15));
    }
}

/// In the probe process: builds `subject` with `keys` keys and prints
/// `allocated=<bytes> rss=<bytes>`.
pub fn probe(subject: &str, keys: u64) -> Result<(), BenchError> {
    let rss_before = rss_bytes();
    // Ordering: Relaxed; this thread alone allocates while counting.
    COUNTING.store(true, Ordering::Relaxed);
    let keep: Box<dyn std::any::Any> = match subject {
        "weir-keyed-full" | "weir-keyed-10pct" => {
            let bound = if subject.ends_with("full") { keys } else { keys * 10 };
            let config =
                KeyedConfig::builder(bound as usize).build().map_err(|e| BenchError::Measurement(e.to_string()))?;
            let store = Keyed::gcra(held_quota(), config);
            fill(&store, keys);
            if store.len() as u64 != keys {
                return Err(BenchError::Measurement(format!("{subject}: {} of {keys} keys stored", store.len())));
            }
            Box::new(store)
        }
        "governor-keyed" => {
            use std::num::NonZeroU32;
            let quota = governor::Quota::per_hour(NonZeroU32::new(1).expect("non-zero"));
            let store: crate::keyed::GovernorKeyed = governor::RateLimiter::keyed(quota);
            fill(&store, keys);
            Box::new(store)
        }
        other => return Err(BenchError::Measurement(format!("no memory subject {other:?}"))),
    };
    // Ordering: Relaxed; see above.
    let allocated = LIVE_BYTES.load(Ordering::Relaxed);
    let rss = rss_bytes().zip(rss_before).map_or(-1, |(after, before)| after - before);
    println!("allocated={allocated} rss={rss}");
    drop(keep);
    Ok(())
}

/// One store's footprint.
#[derive(Debug, Clone, Serialize)]
pub struct Footprint {
    /// Which store.
    pub subject: String,
    /// Keys stored.
    pub keys: u64,
    /// Heap bytes per key, counted exactly.
    pub allocated_per_key: f64,
    /// Resident-set growth per key (includes allocator overhead; -1 if unknown).
    pub rss_per_key: f64,
}

/// Runs the memory suite.
pub fn run(config: &Config, out: &Output) -> Result<String, BenchError> {
    let keys: u64 = if config.full() { 1_000_000 } else { 100_000 };
    let exe = match &config.probe_binary {
        Some(path) => path.clone(),
        None => {
            std::env::current_exe().map_err(|e| BenchError::Measurement(format!("cannot find this binary: {e}")))?
        }
    };
    let chosen: Vec<&str> = SUBJECTS.iter().copied().filter(|s| config.selects(&format!("memory/{s}"))).collect();
    let bar = progress(config, chosen.len());
    let mut results = Vec::new();
    for subject in chosen {
        bar.set_message(subject.to_string());
        let output = std::process::Command::new(&exe)
            .args(["memory-probe", subject, &keys.to_string()])
            .output()
            .map_err(|e| BenchError::Measurement(format!("cannot run the memory probe: {e}")))?;
        let text = String::from_utf8_lossy(&output.stdout);
        let field = |name: &str| -> Option<f64> {
            text.split_whitespace().find_map(|w| w.strip_prefix(name)?.strip_prefix('=')?.parse().ok())
        };
        let (Some(allocated), Some(rss)) = (field("allocated"), field("rss")) else {
            return Err(BenchError::Measurement(format!(
                "memory probe for {subject} printed {text:?} ({})",
                String::from_utf8_lossy(&output.stderr).trim()
            )));
        };
        results.push(Footprint {
            subject: subject.to_string(),
            keys,
            allocated_per_key: allocated / keys as f64,
            rss_per_key: if rss < 0.0 { -1.0 } else { rss / keys as f64 },
        });
        bar.inc(1);
    }
    bar.finish_and_clear();
    let machine = Machine::detect();
    let mut table = Table::new(vec!["store".into(), "keys".into(), "heap B/key".into(), "RSS B/key".into()]);
    for r in &results {
        table.row(vec![
            r.subject.clone(),
            r.keys.to_string(),
            format!("{:.1}", r.allocated_per_key),
            format!("{:.1}", r.rss_per_key),
        ]);
    }
    let rows: Vec<Vec<String>> = results
        .iter()
        .map(|r| {
            vec![
                r.subject.clone(),
                r.keys.to_string(),
                format!("{:.2}", r.allocated_per_key),
                format!("{:.2}", r.rss_per_key),
                machine.version(),
            ]
        })
        .collect();
    out.csv("memory.csv", &["subject", "keys", "heap_bytes_per_key", "rss_bytes_per_key", "commit"], &rows)?;
    let mut html = HtmlTable::new(
        "Memory per key",
        format!(
            "{}. {keys} u64 keys per store, each store in a fresh process, every key in use; heap bytes counted \
             exactly, resident-set growth as the OS reports it (one run each).",
            machine.describe()
        ),
        ["store", "keys", "heap B/key", "RSS B/key"].map(String::from).to_vec(),
    );
    for r in &results {
        html.row(vec![
            Cell::text(&r.subject),
            Cell::number(r.keys.to_string()),
            Cell::number(format!("{:.1}", r.allocated_per_key)),
            Cell::number(format!("{:.1}", r.rss_per_key)),
        ]);
    }
    out.html_table("memory", &html.render())?;
    out.json("memory.json", &serde_json::json!({ "machine": machine, "results": results }))?;
    Ok(format!(
        "weir-bench memory ({} profile)\nmachine: {}\n{keys} u64 keys per store, each store in a fresh process, \
         every key in use (1 per hour, just checked)\n\n{}",
        config.profile,
        machine.describe(),
        table.render()
    ))
}

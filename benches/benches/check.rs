//! ns per operation on one thread: clock reads, and one check on the allowed and
//! denied paths, with each clock, beside governor's direct limiter.
//!
//! `cargo bench -p weir-bench --bench check`

use criterion::{Criterion, criterion_group, criterion_main};
use std::hint::black_box;
use std::time::Duration;
use weir_bench::peers::{governor, governor_upkeep};
use weir_core::{Clock, CoarseClock, InstantClock, ManualClock, MonotonicClock, Quota};
use weir_gcra::Gcra;

fn open() -> Quota {
    Quota::per_second(1_000_000_000).and_then(|q| q.with_burst(1_000_000_000)).expect("valid")
}

fn closed<C: Clock>(clock: C) -> Gcra<C> {
    let limiter = Gcra::with_clock(Quota::per_hour(1).expect("valid"), clock);
    let _ = limiter.check();
    limiter
}

fn clocks(c: &mut Criterion) {
    let mut g = c.benchmark_group("clock");
    let mono = MonotonicClock::new();
    g.bench_function("monotonic (quanta)", |b| b.iter(|| black_box(&mono).now()));
    let instant = InstantClock::new();
    g.bench_function("instant (std)", |b| b.iter(|| black_box(&instant).now()));
    let coarse = CoarseClock::with_upkeep(Duration::from_millis(1)).expect("upkeep thread");
    g.bench_function("coarse", |b| b.iter(|| black_box(&coarse).now()));
    let manual = ManualClock::new();
    g.bench_function("manual", |b| b.iter(|| black_box(&manual).now()));
    let raw = quanta::Clock::new();
    g.bench_function("quanta raw", |b| b.iter(|| black_box(&raw).raw()));
    g.finish();
}

fn allowed(c: &mut Criterion) {
    let mut g = c.benchmark_group("check/allowed");
    let l = Gcra::with_clock(open(), MonotonicClock::new());
    g.bench_function("weir-gcra monotonic", |b| b.iter(|| black_box(&l).check().is_allowed()));
    let l = Gcra::with_clock(open(), InstantClock::new());
    g.bench_function("weir-gcra instant", |b| b.iter(|| black_box(&l).check().is_allowed()));
    let l = Gcra::with_clock(open(), CoarseClock::with_upkeep(Duration::from_millis(1)).expect("upkeep"));
    g.bench_function("weir-gcra coarse", |b| b.iter(|| black_box(&l).check().is_allowed()));
    let l = Gcra::with_clock(open(), MonotonicClock::new());
    g.bench_function("weir-gcra monotonic, full decision", |b| b.iter(|| black_box(black_box(&l).check())));
    let l = governor(1_000_000_000, 1_000_000_000);
    g.bench_function("governor", |b| b.iter(|| black_box(&l).check().is_ok()));
    let l = governor_upkeep(1_000_000_000, 1_000_000_000);
    g.bench_function("governor upkeep", |b| b.iter(|| black_box(&l).check().is_ok()));
    g.finish();
}

fn denied(c: &mut Criterion) {
    let mut g = c.benchmark_group("check/denied");
    let l = closed(MonotonicClock::new());
    g.bench_function("weir-gcra monotonic", |b| b.iter(|| black_box(&l).check().is_allowed()));
    let l = closed(CoarseClock::with_upkeep(Duration::from_millis(1)).expect("upkeep"));
    g.bench_function("weir-gcra coarse", |b| b.iter(|| black_box(&l).check().is_allowed()));
    let l = governor(1, 1);
    let _ = l.check();
    g.bench_function("governor", |b| b.iter(|| black_box(&l).check().is_ok()));
    let l = governor_upkeep(1, 1);
    let _ = l.check();
    g.bench_function("governor upkeep", |b| b.iter(|| black_box(&l).check().is_ok()));
    g.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default().warm_up_time(Duration::from_millis(500)).measurement_time(Duration::from_secs(2));
    targets = clocks, allowed, denied
}
criterion_main!(benches);

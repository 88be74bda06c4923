//! ns per operation on one thread: clock reads, and one check on the allowed and
//! denied paths, with each clock, beside governor's direct limiter; then every other
//! weir limiter (leased GCRA, the window family, a keyed store) on its default clock.
//!
//! `cargo bench -p weir-bench --bench check`

use criterion::{Criterion, criterion_group, criterion_main};
use std::hint::black_box;
use std::time::Duration;
use weir_bench::check::Check;
use weir_bench::keyed::{governor_keyed, open_quota, weir_keyed};
use weir_bench::peers::{governor, governor_upkeep};
use weir_bench::throughput::drained_leased;
use weir_bench::windows;
use weir_gcra::{Gcra, LeaseConfig, LeasedGcra};
use weir_keyed::{Keyed, KeyedConfig};
use weir_rl_core::{Clock, CoarseClock, InstantClock, ManualClock, MonotonicClock, Quota};
use weir_window::StripedMode;

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

/// Every other weir limiter, allowed and denied, on the default clock (`check` on one
/// thread: the leased and striped limiters take their thread's stripe).
fn algorithms(c: &mut Criterion) {
    fn bench(g: &mut criterion::BenchmarkGroup<'_, criterion::measurement::WallTime>, name: &str, l: &impl Check) {
        g.bench_function(name, |b| b.iter(|| black_box(l).check_one()));
    }
    let mut g = c.benchmark_group("algorithms/allowed");
    let leased = LeasedGcra::with_clock(open(), LeaseConfig::default(), MonotonicClock::new());
    bench(&mut g, "weir-leased", &leased);
    bench(&mut g, "weir-fixed", &windows::fixed_open());
    bench(&mut g, "weir-sliding", &windows::sliding_open());
    bench(&mut g, "weir-log", &windows::log_open());
    bench(&mut g, "weir-striped", &windows::striped_open(StripedMode::Exact));
    bench(&mut g, "weir-striped-approx", &windows::striped_open(StripedMode::Approximate));
    g.finish();

    let mut g = c.benchmark_group("algorithms/denied");
    bench(&mut g, "weir-leased", &drained_leased());
    bench(&mut g, "weir-fixed", &windows::fixed_closed());
    bench(&mut g, "weir-sliding", &windows::sliding_closed());
    bench(&mut g, "weir-log", &windows::log_closed());
    bench(&mut g, "weir-striped", &windows::striped_closed(StripedMode::Exact));
    bench(&mut g, "weir-striped-approx", &windows::striped_closed(StripedMode::Approximate));
    g.finish();

    // One existing key among 1 000, allowed path.
    let mut g = c.benchmark_group("keyed/allowed");
    // The default bench store is sized for 2²⁰ keys (2 384 shards, so these keys
    // mostly sit in different shards); a store sized for 4 096 keys has 10 shards.
    let keyed = weir_keyed();
    let small = Keyed::gcra(open_quota(), KeyedConfig::builder(4_096).build().expect("a valid config"));
    let gov = governor_keyed();
    for key in 0..1_000_u64 {
        let _ = keyed.check(&key);
        let _ = small.check(&key);
        let _ = gov.check_key(&key);
    }
    let mut key = 0_u64;
    g.bench_function("weir-keyed", |b| {
        b.iter(|| {
            key = (key + 1) % 1_000;
            keyed.check(black_box(&key)).is_allowed()
        })
    });
    g.bench_function("weir-keyed, max_keys 4096", |b| {
        b.iter(|| {
            key = (key + 1) % 1_000;
            small.check(black_box(&key)).is_allowed()
        })
    });
    g.bench_function("governor-keyed", |b| {
        b.iter(|| {
            key = (key + 1) % 1_000;
            gov.check_key(black_box(&key)).is_ok()
        })
    });
    g.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default().warm_up_time(Duration::from_millis(500)).measurement_time(Duration::from_secs(2));
    targets = clocks, allowed, denied, algorithms
}
criterion_main!(benches);

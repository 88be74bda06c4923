//! Instructions per check, counted by callgrind (iai-callgrind): every weir algorithm's
//! allowed and denied check (the lean `admit`, as a caller that asks only "may this
//! pass?" calls it; the `decision` group: the full `check` with its numbers read), and the keyed check of an existing key, each beside
//! governor's equivalent, with a fixed clock (a manual clock that never moves, so the
//! count is the same on every run and every machine) and with each crate's default
//! clock (weir's `MonotonicClock`, governor's `QuantaClock`).
//!
//! One benchmark is one check on a limiter built, and checked twice, beforehand: the
//! construction and the first checks (which take one-time costs: a thread's stripe,
//! a lease, a key's insertion, a closed limiter's first denial) are not counted, and
//! neither is dropping it. A
//! benchmark's count is the instructions of one check plus the benchmark function's
//! own entry and return (2 or 3: the `clock` group's fixed-clock read, a single load,
//! counts 3).
//!
//! Each group is one weir algorithm, its benchmarks first, then governor's direct
//! limiter (the keyed group: governor's keyed limiter), compared by id: under each
//! governor benchmark, "Comparison with weir_…" prints `weir|governor` and weir's
//! count relative to governor's, e.g. `60|24 (+150.000%) [+2.50000x]`.
//!
//! Needs valgrind and the runner of the same version as the library:
//!
//! ```sh
//! cargo install iai-callgrind-runner --version 0.16.1
//! cargo bench -p weir-bench --bench instructions
//! ```

// iai-callgrind's macros generate public modules and functions without docs.
#![allow(missing_docs)]

use governor::clock::FakeRelativeClock;
use governor::middleware::NoOpMiddleware;
use governor::state::keyed::DashMapStateStore;
use governor::state::{InMemoryState, NotKeyed};
use iai_callgrind::{Callgrind, EventKind, LibraryBenchmarkConfig, library_benchmark, library_benchmark_group, main};
use std::hint::black_box;
use std::num::NonZeroU32;
use weir_bench::check::{Check, Weir};
use weir_bench::keyed::{GovernorKeyed, governor_keyed, weir_keyed};
use weir_bench::peers::Governor;
use weir_bench::windows;
use weir_gcra::{Gcra, GcraAlgorithm, LeaseConfig, LeasedGcra};
use weir_keyed::{Keyed, KeyedConfig};
use weir_rl_core::{Clock, ManualClock, MonotonicClock, Quota};
use weir_window::{FixedWindow, SlidingLog, SlidingWindow, StripedMode, StripedSlidingWindow};

/// governor's direct limiter on its fake clock (time never moves unless advanced).
type FixedGovernor =
    governor::RateLimiter<NotKeyed, InMemoryState, FakeRelativeClock, NoOpMiddleware<governor::nanos::Nanos>>;
/// governor's keyed limiter (DashMap, default hasher) on its fake clock.
type FixedGovernorKeyed =
    governor::RateLimiter<u64, DashMapStateStore<u64>, FakeRelativeClock, NoOpMiddleware<governor::nanos::Nanos>>;

/// Keys stored before the keyed check; the check asks for one of them.
const KEYS: u64 = 1_000;
/// The existing key checked.
const KEY: u64 = 7;

/// Never exhausted within a few checks, for every limiter's encoding (the one-word
/// sliding counter holds at most 131 071 per second).
fn open() -> Quota {
    Quota::per_second(100_000).expect("a valid quota")
}

/// One per hour, taken by the warm-up check: every later check is denied.
fn closed() -> Quota {
    Quota::per_hour(1).expect("a valid quota")
}

fn governor_quota(per_hour: bool) -> governor::Quota {
    let n = |v| NonZeroU32::new(v).expect("non-zero");
    if per_hour { governor::Quota::per_hour(n(1)) } else { governor::Quota::per_second(n(100_000)) }
}

/// Leaks `limiter` after two warm-up checks, so the counted check neither builds nor
/// drops it and finds every one-time cost already paid: for a closed limiter, the
/// first check admits and the second is its first denial (which may record a
/// rollover or, for the striped window, reclaim leases once), so the counted check
/// is the steady denied path.
fn warmed<L>(limiter: L, check: impl Fn(&L)) -> &'static L {
    let limiter = Box::leak(Box::new(limiter));
    check(limiter);
    check(limiter);
    limiter
}

fn weir<L: Check>(limiter: L) -> &'static L {
    warmed(limiter, |l| {
        let _ = l.check_one();
    })
}

fn fixed() -> ManualClock {
    ManualClock::new()
}

// ---- setups, fixed clock ----

fn gcra_fixed(quota: Quota) -> &'static Gcra<ManualClock> {
    weir(Gcra::with_clock(quota, fixed()))
}

fn leased_fixed(quota: Quota) -> &'static LeasedGcra<ManualClock> {
    weir(LeasedGcra::with_clock(quota, LeaseConfig::default(), fixed()))
}

fn fixed_window_fixed(quota: Quota) -> &'static Weir<FixedWindow<ManualClock>> {
    weir(Weir(FixedWindow::with_clock(quota, fixed()).expect("a valid window")))
}

fn sliding_fixed(quota: Quota) -> &'static Weir<SlidingWindow<ManualClock>> {
    weir(Weir(SlidingWindow::with_clock(quota, fixed()).expect("a valid window")))
}

fn log_fixed(quota: Quota) -> &'static Weir<SlidingLog<ManualClock>> {
    weir(Weir(SlidingLog::with_clock(quota, fixed()).expect("a valid log")))
}

fn striped_fixed(quota: Quota) -> &'static Weir<StripedSlidingWindow<ManualClock>> {
    let limiter = StripedSlidingWindow::builder(quota).mode(StripedMode::Exact).build_with_clock(fixed());
    weir(Weir(limiter.expect("a valid window")))
}

fn governor_fixed(per_hour: bool) -> &'static FixedGovernor {
    let limiter = governor::RateLimiter::direct_with_clock(governor_quota(per_hour), FakeRelativeClock::default());
    warmed(limiter, |l| {
        let _ = l.check();
    })
}

fn weir_keyed_fixed() -> &'static Keyed<u64, GcraAlgorithm, ManualClock> {
    let config = KeyedConfig::builder(1 << 20).build().expect("a valid config");
    let store = Keyed::gcra_with_clock(open(), config, fixed());
    warmed(store, |s| {
        (0..KEYS).for_each(|k| {
            let _ = s.check(&k);
        })
    })
}

fn governor_keyed_fixed() -> &'static FixedGovernorKeyed {
    let store = governor::RateLimiter::dashmap_with_clock(governor_quota(false), FakeRelativeClock::default());
    warmed(store, |s| {
        (0..KEYS).for_each(|k| {
            let _ = s.check_key(&k);
        })
    })
}

// ---- setups, default clock ----

fn gcra_default(quota: Quota) -> &'static Gcra<MonotonicClock> {
    weir(Gcra::with_clock(quota, MonotonicClock::new()))
}

fn leased_default(quota: Quota) -> &'static LeasedGcra<MonotonicClock> {
    weir(LeasedGcra::with_clock(quota, LeaseConfig::default(), MonotonicClock::new()))
}

fn governor_default(per_hour: bool) -> &'static Governor {
    warmed(governor::RateLimiter::direct(governor_quota(per_hour)), |l| {
        let _ = l.check();
    })
}

fn weir_keyed_default() -> &'static Keyed<u64, GcraAlgorithm, MonotonicClock> {
    warmed(weir_keyed(), |s| {
        (0..KEYS).for_each(|k| {
            let _ = s.check(&k);
        })
    })
}

fn governor_keyed_default() -> &'static GovernorKeyed {
    warmed(governor_keyed(), |s| {
        (0..KEYS).for_each(|k| {
            let _ = s.check_key(&k);
        })
    })
}

// ---- governor, compared with weir in every group ----

#[library_benchmark]
#[bench::allowed_fixed_clock(governor_fixed(false))]
#[bench::denied_fixed_clock(governor_fixed(true))]
fn governor_direct_fixed(limiter: &'static FixedGovernor) -> bool {
    limiter.check().is_ok()
}

#[library_benchmark]
#[bench::allowed_default_clock(governor_default(false))]
#[bench::denied_default_clock(governor_default(true))]
fn governor_direct_default(limiter: &'static Governor) -> bool {
    limiter.check().is_ok()
}

// ---- weir, one function per algorithm and clock ----

#[library_benchmark]
#[bench::allowed_fixed_clock(gcra_fixed(open()))]
#[bench::denied_fixed_clock(gcra_fixed(closed()))]
fn weir_gcra_fixed(limiter: &'static Gcra<ManualClock>) -> bool {
    limiter.check_one()
}

#[library_benchmark]
#[bench::allowed_default_clock(gcra_default(open()))]
#[bench::denied_default_clock(gcra_default(closed()))]
fn weir_gcra_default(limiter: &'static Gcra<MonotonicClock>) -> bool {
    limiter.check_one()
}

#[library_benchmark]
#[bench::allowed_fixed_clock(leased_fixed(open()))]
#[bench::denied_fixed_clock(leased_fixed(closed()))]
fn weir_leased_fixed(limiter: &'static LeasedGcra<ManualClock>) -> bool {
    limiter.check_one()
}

#[library_benchmark]
#[bench::allowed_default_clock(leased_default(open()))]
#[bench::denied_default_clock(leased_default(closed()))]
fn weir_leased_default(limiter: &'static LeasedGcra<MonotonicClock>) -> bool {
    limiter.check_one()
}

#[library_benchmark]
#[bench::allowed_fixed_clock(fixed_window_fixed(open()))]
#[bench::denied_fixed_clock(fixed_window_fixed(closed()))]
fn weir_fixed_window_fixed(limiter: &'static Weir<FixedWindow<ManualClock>>) -> bool {
    limiter.check_one()
}

#[library_benchmark]
#[bench::allowed_default_clock(weir(windows::fixed_open()))]
#[bench::denied_default_clock(weir(windows::fixed_closed()))]
fn weir_fixed_window_default(limiter: &'static Weir<FixedWindow<MonotonicClock>>) -> bool {
    limiter.check_one()
}

#[library_benchmark]
#[bench::allowed_fixed_clock(sliding_fixed(open()))]
#[bench::denied_fixed_clock(sliding_fixed(closed()))]
fn weir_sliding_window_fixed(limiter: &'static Weir<SlidingWindow<ManualClock>>) -> bool {
    limiter.check_one()
}

#[library_benchmark]
#[bench::allowed_default_clock(weir(windows::sliding_open()))]
#[bench::denied_default_clock(weir(windows::sliding_closed()))]
fn weir_sliding_window_default(limiter: &'static Weir<SlidingWindow<MonotonicClock>>) -> bool {
    limiter.check_one()
}

#[library_benchmark]
#[bench::allowed_fixed_clock(log_fixed(open()))]
#[bench::denied_fixed_clock(log_fixed(closed()))]
fn weir_sliding_log_fixed(limiter: &'static Weir<SlidingLog<ManualClock>>) -> bool {
    limiter.check_one()
}

#[library_benchmark]
#[bench::allowed_default_clock(weir(windows::log_open()))]
#[bench::denied_default_clock(weir(windows::log_closed()))]
fn weir_sliding_log_default(limiter: &'static Weir<SlidingLog<MonotonicClock>>) -> bool {
    limiter.check_one()
}

#[library_benchmark]
#[bench::allowed_fixed_clock(striped_fixed(open()))]
#[bench::denied_fixed_clock(striped_fixed(closed()))]
fn weir_striped_exact_fixed(limiter: &'static Weir<StripedSlidingWindow<ManualClock>>) -> bool {
    limiter.check_one()
}

#[library_benchmark]
#[bench::allowed_default_clock(weir(windows::striped_open(StripedMode::Exact)))]
#[bench::denied_default_clock(weir(windows::striped_closed(StripedMode::Exact)))]
fn weir_striped_exact_default(limiter: &'static Weir<StripedSlidingWindow<MonotonicClock>>) -> bool {
    limiter.check_one()
}

// ---- the rich decision: what a caller that reads the numbers pays ----

#[library_benchmark]
#[bench::allowed_fixed_clock(gcra_fixed(open()))]
#[bench::denied_fixed_clock(gcra_fixed(closed()))]
fn weir_gcra_decision_fixed(limiter: &'static Gcra<ManualClock>) -> u64 {
    let decision = limiter.check();
    decision.remaining() ^ decision.reset_after().as_nanos() as u64
}

#[library_benchmark]
#[bench::allowed_fixed_clock(leased_fixed(open()))]
#[bench::denied_fixed_clock(leased_fixed(closed()))]
fn weir_leased_decision_fixed(limiter: &'static LeasedGcra<ManualClock>) -> u64 {
    let decision = limiter.check();
    decision.remaining() ^ decision.reset_after().as_nanos() as u64
}

// ---- keyed: one existing key among 1 000 ----

#[library_benchmark]
#[bench::existing_key_fixed_clock(governor_keyed_fixed())]
fn governor_keyed_fixed_clock(store: &'static FixedGovernorKeyed) -> bool {
    store.check_key(black_box(&KEY)).is_ok()
}

#[library_benchmark]
#[bench::existing_key_default_clock(governor_keyed_default())]
fn governor_keyed_default_clock(store: &'static GovernorKeyed) -> bool {
    store.check_key(black_box(&KEY)).is_ok()
}

#[library_benchmark]
#[bench::existing_key_fixed_clock(weir_keyed_fixed())]
fn weir_keyed_fixed_clock(store: &'static Keyed<u64, GcraAlgorithm, ManualClock>) -> bool {
    store.check(black_box(&KEY)).is_allowed()
}

#[library_benchmark]
#[bench::existing_key_default_clock(weir_keyed_default())]
fn weir_keyed_default_clock(store: &'static Keyed<u64, GcraAlgorithm, MonotonicClock>) -> bool {
    store.check(black_box(&KEY)).is_allowed()
}

// ---- the clocks alone: what a check costs beyond reading its clock is the difference ----

#[library_benchmark]
#[bench::fixed_clock(Box::leak(Box::new(fixed())))]
fn clock_read_fixed(clock: &'static ManualClock) -> u64 {
    clock.now().as_u64()
}

#[library_benchmark]
#[bench::default_clock(Box::leak(Box::new(MonotonicClock::new())))]
fn clock_read_default(clock: &'static MonotonicClock) -> u64 {
    clock.now().as_u64()
}

library_benchmark_group!(
    name = clock;
    benchmarks = clock_read_fixed, clock_read_default
);

library_benchmark_group!(
    name = gcra;
    compare_by_id = true;
    benchmarks = weir_gcra_fixed, governor_direct_fixed, weir_gcra_default, governor_direct_default
);

library_benchmark_group!(
    name = leased_gcra;
    compare_by_id = true;
    benchmarks = weir_leased_fixed, governor_direct_fixed, weir_leased_default, governor_direct_default
);

library_benchmark_group!(
    name = fixed_window;
    compare_by_id = true;
    benchmarks = weir_fixed_window_fixed, governor_direct_fixed, weir_fixed_window_default, governor_direct_default
);

library_benchmark_group!(
    name = sliding_window;
    compare_by_id = true;
    benchmarks = weir_sliding_window_fixed, governor_direct_fixed, weir_sliding_window_default, governor_direct_default
);

library_benchmark_group!(
    name = sliding_log;
    compare_by_id = true;
    benchmarks = weir_sliding_log_fixed, governor_direct_fixed, weir_sliding_log_default, governor_direct_default
);

library_benchmark_group!(
    name = striped_exact;
    compare_by_id = true;
    benchmarks = weir_striped_exact_fixed, governor_direct_fixed, weir_striped_exact_default, governor_direct_default
);

library_benchmark_group!(
    name = decision;
    benchmarks = weir_gcra_decision_fixed, weir_leased_decision_fixed
);

library_benchmark_group!(
    name = keyed;
    compare_by_id = true;
    benchmarks = weir_keyed_fixed_clock, governor_keyed_fixed_clock, weir_keyed_default_clock, governor_keyed_default_clock
);

main!(
    // Instructions only: the cache simulation's hits and cycle estimates are guesses
    // about a machine, the instruction count is a fact about the code.
    config = LibraryBenchmarkConfig::default().tool(Callgrind::default().format([EventKind::Ir]));
    library_benchmark_groups = clock,
    gcra,
    leased_gcra,
    fixed_window,
    sliding_window,
    sliding_log,
    striped_exact,
    decision,
    keyed
);

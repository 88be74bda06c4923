//! The leased GCRA against the exact one, on random schedules with real leases,
//! give-backs, refunds, quota changes and a clock that steps backwards: over every
//! prefix of a schedule it admits at most what an exact limiter whose burst is
//! larger by the documented over-admission bound admits, and it never admits a
//! request the exact limiter (of the same burst) calls `InsufficientCapacity`
//! (both err on exactly the same requests). The exact limiter charges every unit
//! its exact share of the period: `Gcra` itself for a whole-tick interval, and for
//! a byte rate (an interval that is not a whole number of ticks) a rational model
//! of it (`ExactShare`), since `Gcra` rounds each call up to a whole tick there.
//!
//! - The reference has the larger burst, not the same one: permits leased while the
//!   bucket refills are not in the bucket, so the leased bucket keeps refilling
//!   where the exact one, full, lets its refill go; spent later, they add to a full
//!   bucket's burst. Against the exact limiter of the same burst the excess grows
//!   with every such period (`leases_held_while_the_exact_bucket_is_full`), while
//!   every span stays within `burst + Δ / T + bound` (the module docs' formula).
//! - A reading earlier than one already used counts as no time passing, so the exact
//!   references read the latest time a check has read. (The exact limiter on the
//!   stepping clock itself is stricter than that: it holds a TAT set at a later
//!   reading against the earlier one, so it admits less than at the latest reading,
//!   by up to the step.)
//! - Across quota changes, admissions are compared by what they cost in time (cost ×
//!   the emission interval in force), with `bound × T` allowed per quota change.
//!   Counts of permits of different prices do not compare: a permit the leased
//!   limiter admitted within its bound under a slow quota is time the exact bucket
//!   still owes when the quota changes, and the new quota re-reads that time (as it
//!   re-reads the whole bucket) as many cheaper permits.

use proptest::prelude::*;
use std::cell::Cell;
use std::time::Duration;
use weir_gcra::{Gcra, LeaseConfig, LeasedGcra};
use weir_rl_core::{Clock, Decision, ManualClock, Nanos, Quota};

#[derive(Debug, Clone)]
enum Op {
    Advance(u64),
    /// The clock steps back by this many ns (saturating at its origin).
    StepBack(u64),
    Check {
        stripe: usize,
        n: u64,
    },
    /// Many checks of cost 1 at one instant, round-robin over the stripes.
    Burst(usize),
    /// `release_leases`.
    Release,
    /// A quota change to `quotas(burst)[i]`.
    SetQuota(usize),
    /// Both limiters refund up to this many units of their last decisions (never
    /// more than a check took in all, and not across a quota change).
    Refund(u64),
}

/// The quotas a schedule switches between: T = 1 µs, 4 µs and 250 ns, with bursts
/// around `burst`.
fn quotas(burst: u64) -> [Quota; 3] {
    [
        Quota::per_second(1_000_000).unwrap().with_burst(burst).unwrap(),
        Quota::per_second(250_000).unwrap().with_burst(burst.div_ceil(3)).unwrap(),
        Quota::per_second(4_000_000).unwrap().with_burst(burst * 2).unwrap(),
    ]
}

fn ops(step_back: bool, quota_changes: bool) -> impl Strategy<Value = Vec<Op>> {
    prop::collection::vec(
        prop_oneof![
            3 => (0u64..3_000).prop_map(Op::Advance),
            1 => (0u64..200_000).prop_map(Op::Advance),
            u32::from(step_back) => (0u64..100_000).prop_map(Op::StepBack),
            12 => (0usize..4, 1u64..8).prop_map(|(stripe, n)| Op::Check { stripe, n }),
            1 => (1usize..400).prop_map(Op::Burst),
            1 => Just(Op::Release),
            u32::from(quota_changes) => (0usize..3).prop_map(Op::SetQuota),
            2 => (1u64..8).prop_map(Op::Refund),
        ],
        1..300,
    )
}

/// Runs `ops` on a leased limiter (4 stripes), an exact one with the same quota and
/// an exact one whose burst is larger by `bound(leased)`, checking after every
/// check that the leased one errs exactly where the exact one does, and that its
/// admitted cost in time is within what the larger exact one admitted, plus
/// `bound × T` for each quota in force so far but the first.
fn run(
    burst: u64,
    max_lease: u64,
    lifetime_ns: u64,
    ops: Vec<Op>,
    bound: impl Fn(&LeasedGcra<ManualClock>) -> u64,
) -> Result<(), TestCaseError> {
    let quotas = quotas(burst);
    let clock = ManualClock::new();
    let latest = ManualClock::new();
    let config = LeaseConfig::builder()
        .stripes(4)
        .max_lease(max_lease)
        .lifetime(Duration::from_nanos(lifetime_ns))
        .build()
        .unwrap();
    let leased = LeasedGcra::with_clock(quotas[0], config, clock.clone());
    let exact = Gcra::with_clock(quotas[0], latest.clone());
    let larger = |quota: Quota| quota.with_burst(quota.burst() + bound(&leased)).unwrap();
    let reference = Gcra::with_clock(larger(quotas[0]), latest.clone());
    // Admitted cost in ticks of time, less what was refunded, and what the leased
    // limiter may exceed the reference by.
    let (by_leased, by_reference) = (Cell::new(0u64), Cell::new(0u64));
    let mut allowed_over = 0;
    // The last check's decisions, what is left of it to refund, and one unit's price.
    let last: Cell<Option<(Decision, Decision, u64, u64)>> = Cell::new(None);
    let check = |stripe: usize, n: u64, allowed_over: u64| -> Result<(), TestCaseError> {
        latest.set(clock.now().max(latest.now()));
        let (a, b, r) = (leased.check_on(stripe, n), exact.check_n(n), reference.check_n(n));
        prop_assert_eq!(a.is_err(), b.is_err(), "n = {}: leased {:?}, exact {:?}", n, a, b);
        let unit = leased.quota().emission_interval_ticks();
        let price = n * unit;
        by_leased.set(by_leased.get() + a.is_ok_and(|d| d.is_allowed()) as u64 * price);
        by_reference.set(by_reference.get() + r.is_ok_and(|d| d.is_allowed()) as u64 * price);
        if let (Ok(a), Ok(r)) = (a, r) {
            last.set(Some((a, r, n, unit)));
        }
        prop_assert!(
            by_leased.get() <= by_reference.get() + allowed_over,
            "leased admitted {} ticks' worth where the exact limiter with the larger burst admitted {} (allowance {} ticks) at {:?}",
            by_leased.get(),
            by_reference.get(),
            allowed_over,
            clock.now()
        );
        Ok(())
    };
    for op in ops {
        match op {
            Op::Advance(ns) => {
                clock.advance(Duration::from_nanos(ns));
            }
            Op::StepBack(ns) => clock.set(Nanos::new(clock.now().as_u64().saturating_sub(ns))),
            Op::Check { stripe, n } => check(stripe, n, allowed_over)?,
            Op::Burst(k) => {
                for i in 0..k {
                    check(i, 1, allowed_over)?;
                }
            }
            Op::Release => leased.release_leases(),
            Op::SetQuota(i) => {
                leased.set_quota(quotas[i]);
                exact.set_quota(quotas[i]);
                reference.set_quota(larger(quotas[i]));
                allowed_over += bound(&leased) * quotas[i].emission_interval_ticks();
                last.set(None);
            }
            Op::Refund(k) => {
                if let Some((a, r, left, unit)) = last.get() {
                    // The reference refunds at the latest time a check has read
                    // (a refund's own reading is not a check's).
                    let k = k.min(left);
                    leased.refund(k, &a).unwrap();
                    reference.refund(k, &r).unwrap();
                    by_leased.set(by_leased.get() - a.is_allowed() as u64 * k * unit);
                    by_reference.set(by_reference.get() - r.is_allowed() as u64 * k * unit);
                    last.set(Some((a, r, left - k, unit)));
                }
            }
        }
    }
    Ok(())
}

/// The schedule proptest shrank a failure of `within_the_bound_of_the_exact_limiter`
/// to, when it compared against the exact limiter of the same burst: the leased one
/// admitted 420 permits to its 391, one more than the bound of 28.
#[test]
fn the_shrunk_schedule_stays_within_the_larger_burst() {
    use Op::*;
    let check = |stripe| Check { stripe, n: 1 };
    let ops = vec![
        check(2),
        check(0),
        Advance(10_000),
        Burst(136),
        Advance(63_000),
        check(0),
        check(1),
        Advance(76_000),
        Burst(137),
        Advance(77_000),
        check(1),
        check(2),
        StepBack(0),
        check(0),
        Advance(66_000),
        Burst(140),
    ];
    run(128, 7, 135_168, ops, |l| l.over_admission_bound()).unwrap();
}

/// Why the reference has the larger burst: each stripe leases 7 permits (spending 1)
/// while both buckets refill, and spends the other 6 on top of a full bucket. The
/// exact limiter of the same burst, full meanwhile, let that refill go; the leased
/// bucket did not. Every round the leased limiter admits 19 or more beyond the exact one
/// (after two rounds more than the bound of 28, and without end), and never more than the exact
/// limiter with a burst larger by the bound, nor more than `burst + Δ / T + bound`.
#[test]
fn leases_held_while_the_exact_bucket_is_full() {
    let quota = quotas(128)[0]; // T = 1 µs
    let clock = ManualClock::new();
    let config =
        LeaseConfig::builder().stripes(4).max_lease(7).lifetime(Duration::from_nanos(135_168)).build().unwrap();
    let leased = LeasedGcra::with_clock(quota, config, clock.clone());
    let bound = leased.over_admission_bound();
    assert_eq!(bound, 28);
    let exact = Gcra::with_clock(quota, clock.clone());
    let larger = Gcra::with_clock(quota.with_burst(128 + bound).unwrap(), clock.clone());
    let (by_leased, by_exact, by_larger) = (Cell::new(0u64), Cell::new(0u64), Cell::new(0u64));
    let check = |stripe: usize| {
        by_leased.set(by_leased.get() + leased.check_on(stripe, 1).unwrap().is_allowed() as u64);
        by_exact.set(by_exact.get() + exact.check_n(1).unwrap().is_allowed() as u64);
        by_larger.set(by_larger.get() + larger.check_n(1).unwrap().is_allowed() as u64);
        assert!(by_leased.get() <= by_larger.get(), "{} > {}", by_leased.get(), by_larger.get());
        let elapsed_us = clock.now().as_u64() / 1_000;
        assert!(by_leased.get() <= 128 + elapsed_us + bound, "the span formula");
    };
    for round in 1..=10u64 {
        clock.advance(Duration::from_micros(60));
        (0..4).for_each(check);
        clock.advance(Duration::from_micros(100));
        (0..200).for_each(check);
        assert!(by_leased.get() - by_exact.get() >= 19 * round, "round {round}");
    }
    assert!(by_leased.get() > by_exact.get() + bound);
}

/// An exact limiter that charges every unit its exact share of the period
/// (`n × period / count`, in rational time: ticks × count), with a whole bucket
/// of `tolerance` ticks: what the leased limiter is within its bound of for every
/// quota. For a whole-tick interval it decides as `Gcra`; for a byte rate `Gcra`
/// rounds each call up to a whole tick, and so admits fewer single-unit calls.
struct ExactShare {
    count: u128,
    period_ticks: u128,
    tolerance: u128,
    tat: u128,
}

impl ExactShare {
    fn new(quota: Quota) -> Self {
        let count = u128::from(quota.count());
        let period_ticks = quota.period().as_nanos() * 16;
        Self { count, period_ticks, tolerance: u128::from(quota.tolerance_ticks()) * count, tat: 0 }
    }

    fn check(&mut self, now_ns: u64, n: u64) -> bool {
        let now = u128::from(now_ns) * 16 * self.count;
        let cost = u128::from(n) * self.period_ticks;
        let admitted = self.tat.max(now) - now + cost <= self.tolerance;
        if admitted {
            self.tat = self.tat.max(now) + cost;
        }
        admitted
    }
}

/// Byte rates (an interval that is not a whole number of ticks: 300 MB/s is 53.3
/// ticks a unit, 2.5 GB/s 6.4) on a monotonic clock: over every prefix the leased
/// limiter admits at most what the exact-share limiter with the larger burst
/// admits.
fn run_byte_rate(rate: u64, burst: u64, max_lease: u64, lifetime_ns: u64, ops: Vec<Op>) -> Result<(), TestCaseError> {
    let quota = Quota::per_second(rate).unwrap().with_burst(burst).unwrap();
    prop_assume!(!quota.is_whole_ticks());
    let clock = ManualClock::new();
    let config = LeaseConfig::builder()
        .stripes(4)
        .max_lease(max_lease)
        .lifetime(Duration::from_nanos(lifetime_ns))
        .build()
        .unwrap();
    let leased = LeasedGcra::with_clock(quota, config, clock.clone());
    let mut exact = ExactShare::new(quota.with_burst(burst + leased.over_admission_bound()).unwrap());
    let (mut by_leased, mut by_exact) = (0u64, 0u64);
    let mut check = |stripe: usize, n: u64| -> Result<(), TestCaseError> {
        let now = clock.now().as_u64();
        by_leased += leased.check_on(stripe, n).unwrap().is_allowed() as u64 * n;
        by_exact += exact.check(now, n) as u64 * n;
        prop_assert!(
            by_leased <= by_exact,
            "leased admitted {} units, the exact-share limiter {} at {} ns",
            by_leased,
            by_exact,
            now
        );
        Ok(())
    };
    for op in ops {
        match op {
            Op::Advance(ns) => {
                clock.advance(Duration::from_nanos(ns / 50));
            }
            Op::Check { stripe, n } => check(stripe, n.min(burst))?,
            Op::Burst(k) => {
                for i in 0..k {
                    check(i, 1)?;
                }
            }
            Op::Release => leased.release_leases(),
            Op::StepBack(_) | Op::SetQuota(_) | Op::Refund(_) => {}
        }
    }
    Ok(())
}

/// Burst, maximum lease and lifetime (ns). Short lifetimes and large bursts often:
/// then a stripe's lease (up to burst / 8 permits) holds more than its share of the
/// bound (`⌈lifetime / T⌉ + 1`), so a lease spent when it should not be shows.
fn config() -> impl Strategy<Value = (u64, u64, u64)> {
    (1u64..400, 2u64..64, prop_oneof![4_096u64..16_384, 4_096u64..200_000])
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(400))]

    /// A monotonic clock and one quota: the admitted count is within
    /// `over_admission_bound()` of the exact limiter's.
    #[test]
    fn within_the_bound_of_the_exact_limiter(
        (burst, max_lease, lifetime_ns) in config(),
        ops in ops(false, false),
    ) {
        run(burst, max_lease, lifetime_ns, ops, |l| l.over_admission_bound())?;
    }

    /// Byte rates, whose interval is not a whole number of ticks: within the bound
    /// of the exact-share limiter (`Gcra` rounds each single-unit call up to a
    /// whole tick, and admits fewer of them).
    #[test]
    fn byte_rates_within_the_bound_of_the_exact_share_limiter(
        rate in prop_oneof![Just(300_000_000u64), Just(2_500_000_000), 200_000_000u64..3_000_000_000],
        burst in 1_000u64..4_000,
        (_, max_lease, lifetime_ns) in config(),
        ops in ops(false, false),
    ) {
        run_byte_rate(rate, burst, max_lease, lifetime_ns, ops)?;
    }

    /// A clock that steps backwards: within `stripes × max_lease + ⌈lifetime / T⌉
    /// + 1` (module docs). A spend from a lease reads the clock without telling
    /// the bucket, so after a step back the bucket decides at a reading up to a
    /// lease's lifetime older than one a check already used, and has that much
    /// more refill than the exact limiter reading the latest time (the shrunk
    /// schedule in the regressions file: one more than `stripes × max_lease`).
    #[test]
    fn within_the_bound_with_a_clock_stepping_back(
        (burst, max_lease, lifetime_ns) in config(),
        ops in ops(true, false),
    ) {
        run(burst, max_lease, lifetime_ns, ops, |l| {
            let lifetime_us = l.config().lifetime().as_nanos().div_ceil(1_000) as u64; // T = 1 µs
            4 * l.config().max_lease() + lifetime_us + 1
        })?;
    }

    /// Quota changes revoke the leases: within `over_admission_bound()` of each
    /// quota in force, in time.
    #[test]
    fn within_the_bound_across_quota_changes(
        (burst, max_lease, lifetime_ns) in config(),
        ops in ops(false, true),
    ) {
        run(burst, max_lease, lifetime_ns, ops, |l| l.over_admission_bound())?;
    }

    /// Both at once.
    #[test]
    fn within_the_bound_across_quota_changes_with_a_clock_stepping_back(
        (burst, max_lease, lifetime_ns) in config(),
        ops in ops(true, true),
    ) {
        run(burst, max_lease, lifetime_ns, ops, |l| 4 * l.config().max_lease())?;
    }
}

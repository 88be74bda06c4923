//! The leased GCRA against the exact one, on random schedules with real leases,
//! give-backs, refunds, quota changes and a clock that steps backwards: over every prefix of a
//! schedule it admits at most the exact limiter's admissions plus the documented
//! over-admission bound, and it never admits a request the exact limiter calls
//! `InsufficientCapacity` (both err on exactly the same requests).
//!
//! - A reading earlier than one already used counts as no time passing, so the exact
//!   reference reads the latest time a check has read. (The exact limiter on the
//!   stepping clock itself is stricter than that: it holds a TAT set at a later
//!   reading against the earlier one, so it admits less than at the latest reading,
//!   by up to the step.)
//! - Across quota changes, admissions are compared by what they cost in time (cost ×
//!   the emission interval in force), with `bound × T` allowed per quota in force so
//!   far. Counts of permits of different prices do not compare: a permit the leased
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

/// Runs `ops` on a leased limiter (4 stripes) and an exact one, checking after every
/// check that the leased one's admitted cost in time is within `bound(leased)` of the
/// exact one's, summed over the quotas in force so far, and that it errs exactly
/// where the exact one does.
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
    // Admitted cost in ticks of time, less what was refunded, and what the leased
    // limiter may exceed by.
    let (by_leased, by_exact) = (Cell::new(0u64), Cell::new(0u64));
    let mut allowed_over = bound(&leased) * quotas[0].emission_interval_ticks();
    // The last check's decisions, what is left of it to refund, and one unit's price.
    let last: Cell<Option<(Decision, Decision, u64, u64)>> = Cell::new(None);
    let check = |stripe: usize, n: u64, allowed_over: u64| -> Result<(), TestCaseError> {
        latest.set(clock.now().max(latest.now()));
        let (a, b) = (leased.check_on(stripe, n), exact.check_n(n));
        prop_assert_eq!(a.is_err(), b.is_err(), "n = {}: leased {:?}, exact {:?}", n, a, b);
        let unit = leased.quota().emission_interval_ticks();
        let price = n * unit;
        by_leased.set(by_leased.get() + a.is_ok_and(|d| d.is_allowed()) as u64 * price);
        by_exact.set(by_exact.get() + b.is_ok_and(|d| d.is_allowed()) as u64 * price);
        if let (Ok(a), Ok(b)) = (a, b) {
            last.set(Some((a, b, n, unit)));
        }
        prop_assert!(
            by_leased.get() <= by_exact.get() + allowed_over,
            "leased admitted {} ticks' worth where the exact limiter admitted {} (bound {} ticks) at {:?}",
            by_leased.get(),
            by_exact.get(),
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
                allowed_over += bound(&leased) * quotas[i].emission_interval_ticks();
                last.set(None);
            }
            Op::Refund(k) => {
                if let Some((a, b, left, unit)) = last.get() {
                    // The exact limiter refunds at the latest time a check has read
                    // (a refund's own reading is not a check's).
                    let k = k.min(left);
                    leased.refund(k, &a).unwrap();
                    exact.refund(k, &b).unwrap();
                    by_leased.set(by_leased.get() - a.is_allowed() as u64 * k * unit);
                    by_exact.set(by_exact.get() - b.is_allowed() as u64 * k * unit);
                    last.set(Some((a, b, left - k, unit)));
                }
            }
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

    /// A clock that steps backwards: within `stripes × max_lease` (module docs).
    #[test]
    fn within_the_bound_with_a_clock_stepping_back(
        (burst, max_lease, lifetime_ns) in config(),
        ops in ops(true, false),
    ) {
        run(burst, max_lease, lifetime_ns, ops, |l| 4 * l.config().max_lease())?;
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

//! The leased (striped) GCRA: exact when leases are 1, within its documented
//! over-admission bound otherwise, never beyond the burst at a frozen clock.

use proptest::prelude::*;
use std::sync::Barrier;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;
use weir_gcra::{Gcra, LeaseConfig, LeaseConfigError, LeasedGcra};
use weir_rl_core::{Clock, ManualClock, Quota};

fn quota(per_sec: u64, burst: u64) -> Quota {
    Quota::per_second(per_sec).unwrap().with_burst(burst).unwrap()
}

#[test]
fn configuration_errors_are_typed() {
    assert_eq!(LeaseConfig::builder().stripes(0).build(), Err(LeaseConfigError::ZeroStripes));
    assert_eq!(LeaseConfig::builder().stripes(1 << 20).build(), Err(LeaseConfigError::TooManyStripes(1 << 20)));
    assert_eq!(LeaseConfig::builder().stripes(3).build().unwrap().stripes(), 4);
    assert_eq!(LeaseConfig::builder().stripes(1).max_lease(0).build(), Err(LeaseConfigError::ZeroLease));
    assert_eq!(
        LeaseConfig::builder().stripes(1).max_lease(1 << 20).build(),
        Err(LeaseConfigError::LeaseTooLarge(1 << 20))
    );
    assert!(LeaseConfig::builder().stripes(1).lifetime(Duration::ZERO).build().is_err());
    assert!(LeaseConfig::builder().stripes(1).lifetime(Duration::from_secs(90_000)).build().is_err());
    let e = LeaseConfig::builder().stripes(1).max_lease(0).build().unwrap_err();
    assert!(e.to_string().contains("use 1 for an exact limiter"));
}

#[test]
fn the_bound_formula() {
    let q = quota(1_000_000, 1_000); // T = 1 µs
    let c = LeaseConfig::builder().stripes(8).max_lease(64).lifetime(Duration::from_micros(10)).build().unwrap();
    assert_eq!(c.over_admission_bound(&q), 8 * 11, "min(64, 10 µs / 1 µs + 1) per stripe");
    let c = LeaseConfig::builder().stripes(8).max_lease(64).lifetime(Duration::from_millis(1)).build().unwrap();
    assert_eq!(c.over_admission_bound(&q), 8 * 64, "capped by the lease size");
    let exact = LeaseConfig::builder().stripes(8).max_lease(1).lifetime(Duration::from_millis(1)).build().unwrap();
    assert_eq!(exact.over_admission_bound(&q), 0, "leases of 1 are exact");
}

#[test]
fn near_the_limit_leases_shrink_to_one() {
    // Burst 10 over 4 stripes: a lease is remaining / 8 = 1 from the start, so the
    // limiter admits exactly the burst, spread over any stripes.
    let l =
        LeasedGcra::with_clock(quota(1, 10), LeaseConfig::builder().stripes(4).build().unwrap(), ManualClock::new());
    let admitted = (0..100).filter(|i| l.check_on(i % 4, 1).unwrap().is_allowed()).count();
    assert_eq!(admitted, 10);
    assert_eq!(l.snapshot().remaining(), 0);
}

#[test]
fn far_from_the_limit_a_stripe_leases_a_batch_and_gives_back_what_is_left() {
    let clock = ManualClock::new();
    let config = LeaseConfig::builder().stripes(2).max_lease(16).lifetime(Duration::from_millis(1)).build().unwrap();
    let l = LeasedGcra::with_clock(quota(1_000, 1_000), config, clock.clone());
    let d = l.check_on(0, 1).unwrap();
    assert!(d.is_allowed());
    assert_eq!(d.remaining(), 15, "a lease of 16, one spent");
    assert_eq!(l.snapshot().remaining(), 1_000 - 16, "the bucket counts the whole lease as used");
    for _ in 0..5 {
        assert!(l.check_on(0, 1).unwrap().is_allowed());
    }
    l.release_leases();
    assert_eq!(l.snapshot().remaining(), 1_000 - 6, "unused permits went back");

    // An expired lease is given back when its stripe next refills: its 15 unused
    // permits' debt less the 2 ms (2 permits) the bucket has refilled since.
    assert!(l.check_on(1, 1).unwrap().is_allowed()); // stripe 1 leases 16: 978 left
    clock.advance(Duration::from_millis(2)); // expired; the bucket refilled 2 meanwhile
    assert!(l.check_on(1, 1).unwrap().is_allowed()); // give back 13, new lease of 16
    assert_eq!(l.snapshot().remaining(), 978 + 2 + 13 - 16);
}

#[test]
fn leases_held_through_an_idle_period_cannot_be_spent_on_top_of_a_full_bucket() {
    // Every stripe takes a lease and spends one permit; then the bucket refills
    // completely. Spending everything at that instant admits at most
    // burst + over_admission_bound(), because the old leases have expired.
    let clock = ManualClock::new();
    let config = LeaseConfig::builder().stripes(4).max_lease(64).lifetime(Duration::from_micros(10)).build().unwrap();
    let l = LeasedGcra::with_clock(quota(1_000_000, 1_000), config, clock.clone());
    for stripe in 0..4 {
        assert_eq!(l.check_on(stripe, 1).unwrap().remaining(), 63);
    }
    clock.advance(Duration::from_millis(10));
    let admitted = (0..10_000).filter(|i| l.check_on(i % 4, 1).unwrap().is_allowed()).count() as u64;
    assert!(admitted <= 1_000 + l.over_admission_bound(), "admitted {admitted}");
    assert_eq!(l.over_admission_bound(), 4 * 11);
}

#[test]
fn more_than_the_burst_is_an_error() {
    let l =
        LeasedGcra::with_clock(quota(10, 5), LeaseConfig::builder().stripes(2).build().unwrap(), ManualClock::new());
    assert!(l.check_on(0, 6).is_err());
    assert!(l.check_on(0, 0).unwrap().is_allowed());
    assert!(l.check_on(1, 5).unwrap().is_allowed());
    assert!(l.check_on(0, 1).unwrap().is_denied());
}

#[test]
fn frozen_clock_eight_threads_never_exceed_the_burst() {
    for (burst, max_lease) in [(1_000u64, 64u64), (50_000, 1_000), (7, 4)] {
        let config = LeaseConfig::builder().stripes(8).max_lease(max_lease).build().unwrap();
        let l = LeasedGcra::with_clock(quota(1, burst), config, ManualClock::new());
        let barrier = Barrier::new(8);
        let admitted = AtomicU64::new(0);
        std::thread::scope(|s| {
            for _ in 0..8 {
                s.spawn(|| {
                    barrier.wait();
                    let mine = (0..burst).filter(|_| l.check().is_allowed()).count() as u64;
                    admitted.fetch_add(mine, Ordering::Relaxed);
                });
            }
        });
        let admitted = admitted.into_inner();
        assert!(admitted <= burst, "admitted {admitted} > burst {burst}");
        l.release_leases();
        assert_eq!(l.snapshot().remaining() + admitted, burst, "no permit lost");
    }
}

#[derive(Debug, Clone)]
enum Op {
    Advance(u64),
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
}

fn ops() -> impl Strategy<Value = Vec<Op>> {
    prop::collection::vec(
        prop_oneof![
            3 => (0u64..3_000).prop_map(Op::Advance),
            1 => (0u64..200_000).prop_map(Op::Advance),
            12 => (0usize..4, 1u64..4).prop_map(|(stripe, n)| Op::Check { stripe, n }),
            1 => (1usize..400).prop_map(Op::Burst),
            1 => Just(Op::Release),
            1 => (0usize..3).prop_map(Op::SetQuota),
        ],
        1..300,
    )
}

/// The quotas a schedule switches between: T = 1 µs (the first quota), 4 µs and
/// 250 ns, with bursts around `burst`.
fn quotas(burst: u64) -> [Quota; 3] {
    [quota(1_000_000, burst), quota(250_000, burst.div_ceil(3)), quota(4_000_000, burst * 2)]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(500))]

    /// Leases of one permit make the leased limiter exact: it decides as `Gcra`,
    /// across quota changes too.
    #[test]
    fn leases_of_one_decide_exactly_as_gcra(burst in 1u64..12, ops in ops()) {
        let quotas = quotas(burst);
        let clock = ManualClock::new();
        let config = LeaseConfig::builder().stripes(4).max_lease(1).build().unwrap();
        let leased = LeasedGcra::with_clock(quotas[0], config, clock.clone());
        let exact = Gcra::with_clock(quotas[0], clock.clone());
        for op in ops {
            match op {
                Op::Advance(ns) => { clock.advance(Duration::from_nanos(ns)); }
                Op::Check { stripe, n } => {
                    let (a, b) = (leased.check_on(stripe, n), exact.check_n(n));
                    prop_assert_eq!(a.is_err(), b.is_err());
                    let (Ok(a), Ok(b)) = (a, b) else { continue };
                    prop_assert_eq!(a.is_allowed(), b.is_allowed());
                    if a.is_denied() {
                        prop_assert_eq!(a.retry_after(), b.retry_after());
                    }
                }
                Op::Burst(k) => {
                    for i in 0..k {
                        prop_assert_eq!(leased.check_on(i, 1).unwrap().is_allowed(), exact.check().is_allowed());
                    }
                }
                Op::Release => leased.release_leases(),
                Op::SetQuota(i) => {
                    leased.set_quota(quotas[i]);
                    exact.set_quota(quotas[i]);
                }
            }
        }
    }

    /// With larger leases, in every span of time the admitted cost stays within
    /// `burst + span / T + over_admission_bound()`; across a quota change, within
    /// each quota's span (a change revokes the leases priced under the old one).
    #[test]
    fn admissions_stay_within_the_documented_bound(
        burst in 1u64..200,
        max_lease in 2u64..32,
        lifetime_us in 5u64..200,
        ops in ops(),
    ) {
        let quotas = quotas(burst);
        let clock = ManualClock::new();
        let config = LeaseConfig::builder().stripes(4).max_lease(max_lease).lifetime(Duration::from_micros(lifetime_us)).build().unwrap();
        let l = LeasedGcra::with_clock(quotas[0], config, clock.clone());
        // The admissions (time ns, cost) under each quota in force, in turn.
        let mut spans: Vec<(Quota, Vec<(u64, u64)>)> = vec![(quotas[0], Vec::new())];
        for op in ops {
            let admitted = &mut spans.last_mut().unwrap().1;
            match op {
                Op::Advance(ns) => { clock.advance(Duration::from_nanos(ns)); }
                Op::Check { stripe, n } => {
                    if l.check_on(stripe, n).is_ok_and(|d| d.is_allowed()) {
                        admitted.push((clock.now().as_u64(), n));
                    }
                }
                Op::Burst(k) => {
                    for i in 0..k {
                        if l.check_on(i, 1).unwrap().is_allowed() {
                            admitted.push((clock.now().as_u64(), 1));
                        }
                    }
                }
                Op::Release => l.release_leases(),
                Op::SetQuota(i) => {
                    l.set_quota(quotas[i]);
                    spans.push((quotas[i], Vec::new()));
                }
            }
        }
        for (q, admitted) in spans {
            let bound = config.over_admission_bound(&q);
            let t_ns = weir_rl_core::__private::ticks::to_nanos_ceil(q.emission_interval_ticks());
            for i in 0..admitted.len() {
                let mut cost = 0u64;
                for j in i..admitted.len() {
                    cost += admitted[j].1;
                    let span = admitted[j].0 - admitted[i].0;
                    // cost ≤ burst + span / T + bound, in whole requests (span / T rounded up).
                    prop_assert!(cost <= q.burst() + span.div_ceil(t_ns) + bound,
                        "{} admitted in {} ns: burst {}, T {} ns, bound {}", cost, span, q.burst(), t_ns, bound);
                }
            }
        }
    }
}

/// A manual clock that returns one stale reading when asked to: what a thread that
/// read the clock and was then preempted would use.
#[derive(Clone)]
struct StaleOnce {
    inner: ManualClock,
    stale: std::sync::Arc<std::sync::Mutex<Option<weir_rl_core::Nanos>>>,
}

impl Clock for StaleOnce {
    fn now(&self) -> weir_rl_core::Nanos {
        self.stale.lock().unwrap().take().unwrap_or_else(|| self.inner.now())
    }
}

// Regressions for give-back over-credits: a lease given back must be
// credited at its own grant's interval, from a fresh reading, never at a reading that
// lags (stale or stepped back) the time the bucket has already seen.

#[test]
fn a_lease_is_given_back_at_the_interval_it_was_granted_at() {
    let clock = ManualClock::new();
    let config = LeaseConfig::builder().stripes(2).max_lease(64).lifetime(Duration::from_millis(1)).build().unwrap();
    let l = LeasedGcra::with_clock(Quota::per_second(1_000).unwrap(), config, clock.clone());
    assert_eq!(l.check_on(0, 1).unwrap().remaining(), 63);
    let slower = Quota::per_second(1).unwrap().with_burst(10).unwrap();
    l.set_quota(slower);
    clock.advance(Duration::from_millis(2)); // stripe 0's lease expired, unspent
    let admitted = (0..100).filter(|i| l.check_on(if *i < 50 { 1 } else { 0 }, 1).unwrap().is_allowed()).count() as u64;
    assert!(admitted <= 10 + l.over_admission_bound(), "admitted {admitted}");
}

#[test]
fn a_stale_reading_does_not_make_an_old_lease_look_unpaid() {
    let clock = StaleOnce { inner: ManualClock::new(), stale: Default::default() };
    let config = LeaseConfig::builder().stripes(2).max_lease(64).lifetime(Duration::from_nanos(4_096)).build().unwrap();
    let l = LeasedGcra::with_clock(quota(1_000_000, 256), config, clock.clone());
    assert_eq!(l.check_on(0, 1).unwrap().remaining(), 63); // t = 0
    clock.inner.advance(Duration::from_secs(1));
    let mut admitted = (0..1_000).filter(|_| l.check_on(1, 1).unwrap().is_allowed()).count() as u64;
    *clock.stale.lock().unwrap() = Some(weir_rl_core::Nanos::ZERO); // a thread preempted since t = 0
    admitted += l.check_on(0, 64).unwrap().is_allowed() as u64 * 64;
    admitted += (0..1_000).filter(|_| l.check_on(1, 1).unwrap().is_allowed()).count() as u64;
    assert!(admitted <= 256 + l.over_admission_bound(), "admitted {admitted}");
}

#[test]
fn a_clock_stepping_back_does_not_make_an_old_lease_look_unpaid() {
    let clock = ManualClock::new();
    let config = LeaseConfig::builder().stripes(2).max_lease(64).lifetime(Duration::from_nanos(4_096)).build().unwrap();
    let l = LeasedGcra::with_clock(quota(1_000_000, 256), config, clock.clone());
    assert_eq!(l.check_on(0, 1).unwrap().remaining(), 63);
    clock.set(weir_rl_core::Nanos::new(1_000_000_000));
    let mut admitted = (0..1_000).filter(|_| l.check_on(1, 1).unwrap().is_allowed()).count() as u64;
    clock.set(weir_rl_core::Nanos::ZERO);
    admitted += l.check_on(0, 64).unwrap().is_allowed() as u64 * 64;
    clock.set(weir_rl_core::Nanos::new(1_000_000_000));
    admitted += (0..1_000).filter(|_| l.check_on(1, 1).unwrap().is_allowed()).count() as u64;
    assert!(admitted <= 256 + l.over_admission_bound(), "admitted {admitted}");
}

#[test]
fn a_quota_change_during_a_refill_never_turns_a_small_request_into_an_error() {
    let config = LeaseConfig::builder().stripes(1).max_lease(64).build().unwrap();
    let big = quota(1_000_000_000, 100_000);
    let small = quota(1_000_000_000, 40);
    let l = LeasedGcra::with_clock(big, config, weir_rl_core::MonotonicClock::new());
    let stop = std::sync::atomic::AtomicBool::new(false);
    std::thread::scope(|s| {
        s.spawn(|| {
            for _ in 0..20_000 {
                l.set_quota(big);
                l.set_quota(small);
            }
            stop.store(true, Ordering::Relaxed);
        });
        s.spawn(|| {
            while !stop.load(Ordering::Relaxed) {
                l.release_leases();
                assert!(l.check_on(0, 40).is_ok(), "40 never exceeds either burst");
            }
        });
    });
}

// A quota change revokes the leases granted under the old quota: their permits were
// priced at the old interval, and spending them on top of the new bucket would admit
// far beyond `burst + over_admission_bound()`.

#[test]
fn a_quota_change_revokes_outstanding_leases() {
    // One stripe at 1000/s leases 64 permits; at the same instant the quota drops to
    // 1/s with a burst of 10. The exact limiter admits 10 in all; so must the leased one
    // (the bound, 2, allows at most 12).
    let clock = ManualClock::new();
    let config = LeaseConfig::builder().stripes(1).max_lease(64).build().unwrap();
    let fast = Quota::per_second(1_000).unwrap();
    let slow = quota(1, 10);
    let leased = LeasedGcra::with_clock(fast, config, clock.clone());
    let exact = Gcra::with_clock(fast, clock.clone());
    assert_eq!(leased.check_on(0, 1).unwrap().remaining(), 63, "a lease of 64, one spent");
    assert!(exact.check().is_allowed());
    leased.set_quota(slow);
    exact.set_quota(slow);
    let leased_admitted = 1 + (0..100).filter(|_| leased.check_on(0, 1).unwrap().is_allowed()).count() as u64;
    let exact_admitted = 1 + (0..100).filter(|_| exact.check().is_allowed()).count() as u64;
    assert_eq!(exact_admitted, 10);
    assert_eq!(leased.over_admission_bound(), 2);
    assert_eq!(leased_admitted, exact_admitted, "leased admitted {leased_admitted}");
}

#[test]
fn after_a_quota_change_a_request_above_the_new_burst_is_an_error() {
    let clock = ManualClock::new();
    let config = LeaseConfig::builder().stripes(1).max_lease(64).build().unwrap();
    let leased = LeasedGcra::with_clock(Quota::per_second(1_000).unwrap(), config, clock.clone());
    assert_eq!(leased.check_on(0, 1).unwrap().remaining(), 63);
    leased.set_quota(quota(1, 10));
    assert_eq!(leased.check_on(0, 20), Err(weir_rl_core::InsufficientCapacity { requested: 20, capacity: 10 }));
    assert_eq!(leased.snapshot().remaining(), 9, "the lease's 63 unused permits went back");
}

// Refunds: the units an admission took go back to the bucket, less the time since
// they were charged (the lease's grant), as an unused lease's give-back does.

#[test]
fn a_refund_at_the_grant_instant_gives_everything_back() {
    let clock = ManualClock::new();
    let config = LeaseConfig::builder().stripes(2).max_lease(16).build().unwrap();
    let l = LeasedGcra::with_clock(quota(1_000, 100), config, clock.clone());
    let from_bucket = l.check_on(0, 5).unwrap(); // decided on the bucket: a lease of 16, 5 taken
    let from_lease = l.check_on(0, 1).unwrap();
    assert!(from_bucket.is_allowed() && from_lease.is_allowed());
    l.refund(5, &from_bucket).unwrap();
    l.refund(1, &from_lease).unwrap();
    l.release_leases();
    assert_eq!(l.snapshot().remaining(), 100, "nothing spent, nothing lost");
}

#[test]
fn a_refund_credits_the_debt_less_the_time_since_the_grant() {
    let clock = ManualClock::new();
    let config = LeaseConfig::builder().stripes(1).max_lease(8).lifetime(Duration::from_millis(10)).build().unwrap();
    let l = LeasedGcra::with_clock(quota(1_000, 100), config, clock.clone()); // T = 1 ms
    assert!(l.check_on(0, 1).unwrap().is_allowed()); // a lease of 8 at t = 0: 92 left
    clock.advance(Duration::from_millis(3));
    let spent = l.check_on(0, 5).unwrap(); // from the lease granted at 0
    assert!(spent.is_allowed());
    assert_eq!(spent.decided_at(), weir_rl_core::Nanos::ZERO, "stamped with its lease's grant");
    let before = l.snapshot().remaining(); // 92 + 3 refilled
    l.refund(5, &spent).unwrap(); // 5 ms of debt less the 3 ms since the grant
    assert_eq!(l.snapshot().remaining(), before + 2);
    clock.advance(Duration::from_millis(20));
    let late = l.check_on(0, 1).unwrap();
    clock.advance(Duration::from_millis(5));
    let before = l.snapshot().remaining();
    l.refund(1, &late).unwrap(); // 1 ms of debt, 5 ms since its lease's grant: nothing credited
    assert_eq!(l.snapshot().remaining(), before);
}

#[test]
fn a_leased_refund_of_a_denial_gives_nothing_and_too_much_is_an_error() {
    let l = LeasedGcra::with_clock(quota(1, 5), LeaseConfig::builder().stripes(1).build().unwrap(), ManualClock::new());
    assert!(l.check_on(0, 5).unwrap().is_allowed());
    let denied = l.check_on(0, 1).unwrap();
    assert!(denied.is_denied());
    l.refund(5, &denied).unwrap();
    assert_eq!(l.snapshot().remaining(), 0);
    assert_eq!(l.refund(6, &denied), Err(weir_rl_core::InsufficientCapacity { requested: 6, capacity: 5 }));
    let as_limiter: &dyn weir_rl_core::Limiter = &l;
    let d = as_limiter.check_n(0).unwrap();
    as_limiter.refund(0, &d).unwrap();
}

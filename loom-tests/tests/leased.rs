//! loom models of the leased GCRA's protocol: stripes claim, refill and install
//! leases while other threads spend them. At a frozen clock no permit is admitted
//! beyond the burst and none is lost (after `release_leases`, remaining + admitted =
//! burst); with a manual clock moving during the checks (loom sees its every read),
//! every window of time admits within the documented bound; a quota change revokes
//! the leases granted before it, so nothing priced under the old quota is spent
//! after it; a refund racing with checks at a frozen clock gives back exactly what
//! it took; a permit spent from a lease another thread installed carries that
//! grant's charge, so its refund after a quota change credits what it was charged.
#![cfg(loom)]

use loom::sync::Arc;
use loom::thread;
use weir_gcra::{LeaseConfig, LeasedGcra};
use weir_rl_core::{Clock, InsufficientCapacity, ManualClock, Nanos, Quota};

fn quota(burst: u64) -> Quota {
    Quota::per_second(100_000_000).unwrap().with_burst(burst).unwrap() // T = 10 ns
}

fn config(stripes: usize, max_lease: u64) -> LeaseConfig {
    LeaseConfig::builder().stripes(stripes).max_lease(max_lease).build().unwrap()
}

/// `plan[t]` = the stripes thread `t` checks (cost 1 each), at a frozen clock.
fn frozen(burst: u64, stripes: usize, max_lease: u64, plan: &'static [&'static [usize]]) {
    loom::model(move || {
        let l = Arc::new(LeasedGcra::with_clock(quota(burst), config(stripes, max_lease), Nanos::new(0)));
        let handles: Vec<_> = plan
            .iter()
            .map(|checks| {
                let l = l.clone();
                thread::spawn(move || checks.iter().filter(|&&s| l.check_on(s, 1).unwrap().is_allowed()).count() as u64)
            })
            .collect();
        let admitted: u64 = handles.into_iter().map(|h| h.join().unwrap()).sum();
        assert!(admitted <= burst, "admitted {admitted} > burst {burst}");
        l.release_leases();
        assert_eq!(l.snapshot().remaining() + admitted, burst, "a permit was lost");
    });
}

#[test]
fn two_stripes_lease_and_spend_concurrently() {
    // Burst 8 over 2 stripes: first leases are 8 / 4 = 2 permits.
    frozen(8, 2, 4, &[&[0, 0, 0], &[1, 1]]);
}

#[test]
fn two_threads_on_one_stripe_race_to_claim_and_install() {
    frozen(8, 1, 4, &[&[0, 0], &[0, 0]]);
}

#[test]
fn near_the_limit_the_stripes_share_the_last_permits_exactly() {
    // Burst 3, leases shrink to 1: exactly 3 of the 4 checks are admitted.
    frozen(3, 2, 4, &[&[0, 0], &[1, 1]]);
}

#[test]
fn a_refund_racing_with_checks_on_its_stripe_creates_and_loses_nothing() {
    // Burst 4 on one stripe, leases of up to 2; the clock is frozen, so a refund
    // gives back all it is asked for. The refunding thread is spawned last, so that
    // loom interleaves the other's checks (claims, refills, spends) with its steps.
    loom::model(|| {
        let l = Arc::new(LeasedGcra::with_clock(quota(4), config(1, 2), Nanos::new(0)));
        let other = {
            let l = l.clone();
            thread::spawn(move || (0..2).filter(|_| l.check_on(0, 1).unwrap().is_allowed()).count() as u64)
        };
        let refunder = {
            let l = l.clone();
            thread::spawn(move || {
                let d = l.check_on(0, 2).unwrap();
                let refunded = if d.is_allowed() { 2 } else { 0 };
                l.refund(2, &d).unwrap();
                let again = l.check_on(0, 1).unwrap().is_allowed() as u64;
                (refunded + again, refunded)
            })
        };
        let (mine, refunded) = refunder.join().unwrap();
        let admitted = other.join().unwrap() + mine;
        assert!(admitted <= 4 + refunded, "admitted {admitted}, refunded {refunded}");
        l.release_leases();
        assert_eq!(l.snapshot().remaining() + admitted - refunded, 4, "a permit was created or lost");
    });
}

/// One admission: the clock readings taken just before and just after its check
/// (it was admitted at a reading between the two), and its cost.
type Admission = (u64, u64, u64);

/// Runs `plan` (stripe, cost) in order, recording the admissions.
fn checks(l: &LeasedGcra<ManualClock>, plan: &[(usize, u64)]) -> Vec<Admission> {
    plan.iter()
        .filter_map(|&(stripe, n)| {
            let before = l.clock().now().as_u64();
            let allowed = l.check_on(stripe, n).unwrap().is_allowed();
            let after = l.clock().now().as_u64();
            allowed.then_some((before, after, n))
        })
        .collect()
}

/// The documented bound: in every span of time Δ the admitted cost is at most
/// `burst + ⌈Δ / T⌉ + over_admission_bound()`. Checked for every window between two
/// readings, counting the admissions certainly inside it.
fn assert_within_the_bound(admissions: &[Admission], burst: u64, t_ns: u64, bound: u64) {
    for &(from, _, _) in admissions {
        for &(_, to, _) in admissions {
            let inside = admissions.iter().filter(|&&(before, after, _)| before >= from && after <= to);
            let cost: u64 = inside.map(|&(_, _, n)| n).sum();
            let allowed = burst + to.saturating_sub(from).div_ceil(t_ns) + bound;
            assert!(cost <= allowed, "{cost} admitted in [{from}, {to}] ns, at most {allowed}: {admissions:?}");
        }
    }
}

#[test]
fn time_moving_during_refills_stays_within_the_bound() {
    // T = 10 µs, burst 8, one stripe, leases of at most 4 usable for 4.096 µs: the
    // bound is min(4, ⌈4.096 / 10⌉ + 1) = 2. A lease taken at 0 has expired when the
    // clock reaches 40 µs, where the bucket is full again: spending it there on top of
    // the bucket's 8 would admit 11 at one instant, more than 8 + 2.
    let t_ns = 10_000;
    loom::model(move || {
        let clock = ManualClock::new();
        let config = LeaseConfig::builder()
            .stripes(1)
            .max_lease(4)
            .lifetime(std::time::Duration::from_nanos(4_096))
            .build()
            .unwrap();
        let l = Arc::new(LeasedGcra::with_clock(
            Quota::per_second(100_000).unwrap().with_burst(8).unwrap(),
            config,
            clock.clone(),
        ));
        let bound = l.over_admission_bound();
        assert_eq!(bound, 2);
        // One thread takes a lease (at 0, or later if the clock has moved) and spends
        // from it, while the main thread moves the clock in two steps (at any point of
        // the spender's checks) and then asks for the whole burst.
        let spender = {
            let l = l.clone();
            thread::spawn(move || checks(&l, &[(0, 1), (0, 3)]))
        };
        clock.advance(std::time::Duration::from_micros(20));
        clock.advance(std::time::Duration::from_micros(20));
        let mut admitted = checks(&l, &[(0, 8)]);
        admitted.extend(spender.join().unwrap());
        assert_within_the_bound(&admitted, 8, t_ns, bound);
    });
}

/// Burst 64 at T = 10 ns over 2 stripes with leases of 4: every refill far from the
/// limit leases 4 permits.
fn before_the_change() -> Quota {
    quota(64)
}

#[test]
fn a_quota_change_racing_checks_that_hold_leases_revokes_them() {
    loom::model(|| {
        let l = Arc::new(LeasedGcra::with_clock(before_the_change(), config(2, 4), Nanos::new(0)));
        // Set up sequentially: 5 admitted, no lease on stripe 0, 3 left on stripe 1.
        assert_eq!(l.check_on(0, 1).unwrap().remaining(), 3);
        assert_eq!(l.check_on(0, 3).unwrap().remaining(), 0);
        l.release_leases();
        assert_eq!(l.check_on(1, 1).unwrap().remaining(), 3);
        let setup = 5;
        // The new quota's burst, 4, is below what is already admitted: once the change
        // is made, nothing more may be admitted, from a lease or from the bucket.
        let after = quota(4);
        let setter = {
            let l = l.clone();
            thread::spawn(move || {
                l.set_quota(after);
                assert!(l.check_on(1, 1).unwrap().is_denied(), "stripe 1's old lease was spent after the change");
                assert_eq!(l.check_on(0, 5), Err(InsufficientCapacity { requested: 5, capacity: 4 }));
                assert!(l.check_on(0, 1).unwrap().is_denied(), "a lease priced before the change was spent after it");
            })
        };
        // Meanwhile the main thread refills stripe 0 (under either quota) and checks it
        // again, then spends from stripe 1's lease.
        let admitted =
            [(0, 1), (0, 1), (1, 1)].iter().filter(|&&(s, n)| l.check_on(s, n).unwrap().is_allowed()).count() as u64;
        setter.join().unwrap();
        let admitted = setup + admitted;
        // No permit created or lost (the clock is frozen, so give-backs are exact):
        // under the old quota again, what is left plus what was admitted is the burst.
        l.set_quota(before_the_change());
        assert_eq!(l.snapshot().remaining() + admitted, 64, "admitted {admitted}");
    });
}

/// A permit spent from a lease that another thread installed carries that lease's
/// grant (its charge as well as its time), read after the Acquire load of the lease
/// word: a refund of it after a change to a slower quota credits the 10 ns it was
/// charged, never the new 20 ns (which would give back the other thread's unit).
#[test]
fn a_refund_of_a_leased_permit_credits_what_its_grant_charged() {
    loom::model(|| {
        // Burst 4 at T = 10 ns on one stripe, leases of up to 2: whichever check
        // refills first leases 2, and the other may spend the second permit.
        let l = Arc::new(LeasedGcra::with_clock(quota(4), config(1, 2), Nanos::new(0)));
        let checks: Vec<_> = (0..2)
            .map(|_| {
                let l = l.clone();
                thread::spawn(move || l.check_on(0, 1).unwrap())
            })
            .collect();
        let decisions: Vec<_> = checks.into_iter().map(|h| h.join().unwrap()).collect();
        assert!(decisions.iter().all(|d| d.is_allowed()), "{decisions:?}");
        // Burst 4 at T = 20 ns: the change gives back the unused permit (10 ns).
        l.set_quota(Quota::per_second(50_000_000).unwrap().with_burst(4).unwrap());
        l.refund(1, &decisions[1]).unwrap();
        // What stays in use is the other check's unit, charged 10 ns; the frozen
        // clock makes every give-back exact.
        let kept = l.snapshot().reset_after().as_nanos();
        assert_eq!(kept, 10, "{decisions:?}");
    });
}

#[test]
fn the_lean_check_spends_leases_as_the_full_one_does() {
    // One thread asks with `admit` (the lean spend; every thread is stripe 0 under
    // loom), the other with `check_on(0, 1)`, racing to claim, refill and spend one
    // stripe at a frozen clock: nothing beyond the burst, nothing lost.
    loom::model(|| {
        let l = Arc::new(LeasedGcra::with_clock(quota(4), config(1, 2), Nanos::new(0)));
        let lean = {
            let l = l.clone();
            thread::spawn(move || (0..2).filter(|_| l.admit().is_ok()).count() as u64)
        };
        let full = (0..2).filter(|_| l.check_on(0, 1).unwrap().is_allowed()).count() as u64;
        let admitted = lean.join().unwrap() + full;
        assert!(admitted <= 4, "admitted {admitted} > burst 4");
        l.release_leases();
        assert_eq!(l.snapshot().remaining() + admitted, 4, "a permit was lost");
    });
}

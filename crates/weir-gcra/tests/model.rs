//! Property tests against a sequential reference model.
//!
//! The model is the continuous-state leaky bucket ("the leaky bucket as a meter",
//! equivalent to GCRA), written independently: it tracks the capacity in use, in
//! ticks, as an `i128` that drains by the elapsed time, with no saturation, no
//! shared state and no CAS. For any sequence of operations at non-decreasing times
//! the limiter must decide exactly as the model does, down to every field.
//!
//! The model charges and credits per admission: it remembers the quota each
//! admission was charged under, and a refund after a quota change credits the
//! smaller of the refunded units' price then and now (never more than was charged);
//! a refund of an admission of 0 credits nothing.

use proptest::prelude::*;
use std::time::Duration;
use weir_gcra::Gcra;
use weir_rl_core::{Decision, ManualClock, Nanos, Quota, Snapshot};

const TICKS: i128 = 16;

#[derive(Debug, Clone)]
enum Op {
    Advance(u64),
    Check(u64),
    Refund(u64),
    SetQuota(Quota),
    Snapshot,
}

struct Model {
    quota: Quota,
    used: i128,
    last: i128,
    /// When the quota last changed (ns of elapsed time), if it has.
    changed_at: Option<u64>,
}

/// What an admission was charged under: the quota, and whether it took nothing.
#[derive(Clone, Copy)]
struct Charged {
    quota: Quota,
    zero_cost: bool,
}

fn ceil_ns(ticks: i128) -> u64 {
    ((ticks + TICKS - 1) / TICKS) as u64
}

impl Model {
    /// The quota's period in ticks and count, and whether it is charged in whole
    /// ticks (the interval rounded up) or exactly (`n × period / count`, rounded up per
    /// call): whole from 1000 ticks on, or when the interval is a whole number of ticks
    /// (`Quota`'s docs, "Precision").
    fn charging(&self) -> (i128, i128, bool) {
        let (period, count) = (self.quota.period().as_nanos() as i128 * TICKS, self.quota.count() as i128);
        let interval = (period + count - 1) / count;
        (period, count, interval >= 1000 || period % count == 0)
    }
    fn cost(&self, n: u64) -> i128 {
        let (period, count, whole) = self.charging();
        if whole { n as i128 * ((period + count - 1) / count) } else { (n as i128 * period + count - 1) / count }
    }
    /// What a refund of `n` credits under the quota in force: as charged for whole
    /// ticks; rounded down (never more than any call was charged for the units) for
    /// exact charging.
    fn credit(&self, n: u64) -> i128 {
        let (period, count, whole) = self.charging();
        if whole { n as i128 * ((period + count - 1) / count) } else { n as i128 * period / count }
    }
    /// What `n` units charged under `then` are worth as a credit after a quota
    /// change: their interval then, in whole ticks, or, charged exactly, as the
    /// decision records it: in 2⁻³² tick rounded down (`Quota::unit_charge`).
    fn credit_charged(then: Quota, n: u64) -> i128 {
        let model = Model { quota: then, used: 0, last: 0, changed_at: None };
        let (period, count, whole) = model.charging();
        if whole { n as i128 * ((period + count - 1) / count) } else { (n as i128 * ((period << 32) / count)) >> 32 }
    }
    fn tolerance(&self) -> i128 {
        self.cost(self.quota.burst())
    }
    /// The most units `left` ticks pay for, at most the burst.
    fn units(&self, left: i128) -> u64 {
        let (period, count, whole) = self.charging();
        let units = if whole { left / ((period + count - 1) / count) } else { left * count / period };
        (units as u64).min(self.quota.burst())
    }
    fn drain(&mut self, now_ns: u64) {
        let now = now_ns as i128 * TICKS;
        self.used = (self.used - (now - self.last)).max(0);
        self.last = now;
    }
    fn snapshot(&self) -> Snapshot {
        let remaining = self.units((self.tolerance() - self.used).max(0));
        Snapshot::new(self.quota.burst(), remaining, ceil_ns(self.used))
    }
    fn check(&mut self, n: u64) -> Option<Decision> {
        if n > self.quota.burst() {
            return None;
        }
        let cost = self.cost(n);
        if self.used + cost <= self.tolerance() {
            self.used += cost;
            Some(Decision::allowed(self.snapshot()))
        } else {
            Some(Decision::denied(self.snapshot(), ceil_ns(self.used + cost - self.tolerance())))
        }
    }
    fn charged(&self, n: u64) -> Charged {
        Charged { quota: self.quota, zero_cost: n == 0 }
    }
    /// Refunds `n` of an admission (`allowed`, charged as `charged` says) made at
    /// `at_ns`, `since_ns` ago, or of a denial (nothing): what is left of its debt,
    /// the credit less the time since. The credit is nothing for an admission of 0,
    /// else the units' price now, or, if the quota changed at or after the
    /// admission's reading, the smaller of their price then and now.
    fn refund(&mut self, n: u64, allowed: bool, charged: Charged, at_ns: u64, since_ns: u64) -> bool {
        if n > self.quota.burst() {
            return false;
        }
        if allowed && !charged.zero_cost {
            let mut credit = self.credit(n);
            if self.changed_at.is_some_and(|changed| changed >= at_ns) {
                credit = credit.min(Self::credit_charged(charged.quota, n));
            }
            let credit = (credit - since_ns as i128 * TICKS).max(0);
            self.used = (self.used - credit).max(0);
        }
        true
    }
}

fn quota() -> impl Strategy<Value = Quota> {
    (1u64..50, prop_oneof![Just(1u64), Just(1_000), Just(1_000_000), Just(1_000_000_000)], 1u64..20)
        .prop_filter_map("representable", |(count, period_ns, burst)| {
            Quota::new(count, Duration::from_nanos(period_ns * 7)).ok()?.with_burst(burst).ok()
        })
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (0u64..2_000_000).prop_map(Op::Advance),
        1 => (0u64..10_000_000_000).prop_map(Op::Advance),
        8 => (0u64..25).prop_map(Op::Check),
        1 => (0u64..25).prop_map(Op::Refund),
        1 => quota().prop_map(Op::SetQuota),
        1 => Just(Op::Snapshot),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2_000))]

    #[test]
    fn decides_exactly_as_the_reference_model(start in 0u64..u64::MAX / 64, q in quota(), ops in prop::collection::vec(op(), 1..120)) {
        let clock = ManualClock::starting_at(Nanos::new(start));
        let limiter = Gcra::with_clock(q, clock.clone());
        let mut model = Model { quota: q, used: 0, last: 0, changed_at: None };
        let mut elapsed = 0u64;
        let mut last = limiter.check_n(0).unwrap(); // the decision a refund gives back
        let mut last_at = 0u64; // when `last` was decided, in ns of `elapsed`
        let mut last_charged = model.charged(0); // what `last` was charged under
        for op in ops {
            match op {
                Op::Advance(ns) => {
                    clock.advance(Duration::from_nanos(ns));
                    elapsed += ns;
                }
                Op::Check(n) => {
                    model.drain(elapsed);
                    let expected = model.check(n);
                    let actual = limiter.check_n(n);
                    if let Ok(d) = actual {
                        last = d;
                        last_at = elapsed;
                        last_charged = model.charged(n);
                    }
                    match expected {
                        None => prop_assert!(actual.is_err()),
                        Some(d) if n == 0 => prop_assert_eq!(actual.unwrap(), Decision::allowed(d.snapshot())),
                        Some(d) => prop_assert_eq!(actual.unwrap(), d),
                    }
                }
                Op::Refund(n) => {
                    model.drain(elapsed);
                    let since = elapsed - last_at;
                    let modelled = model.refund(n, last.is_allowed(), last_charged, last_at, since);
                    prop_assert_eq!(limiter.refund(n, &last).is_ok(), modelled);
                }
                Op::SetQuota(q) => {
                    model.drain(elapsed);
                    model.quota = q;
                    model.changed_at = Some(elapsed);
                    limiter.set_quota(q);
                }
                Op::Snapshot => {
                    model.drain(elapsed);
                    prop_assert_eq!(limiter.snapshot(), model.snapshot());
                }
            }
        }
    }

    /// With readings that jump backwards as well as forwards, every admission still
    /// conforms to the quota measured in "clamped" time (the latest reading any check
    /// used): for any two admissions i ≤ j, the cost admitted from i to j is at most
    /// `burst + (c_j − c_i) / T`. A backward step never admits a burst.
    #[test]
    fn backward_steps_never_break_the_envelope(q in quota(), steps in prop::collection::vec((-5_000_000i64..5_000_000, 1u64..4), 1..200)) {
        let clock = ManualClock::starting_at(Nanos::new(1 << 40));
        let limiter = Gcra::with_clock(q, clock.clone());
        let mut reading = 1i64 << 40;
        let mut clamped = reading;
        let mut admissions: Vec<(i128, u64)> = Vec::new(); // (clamped time in ticks, cost)
        for (step, n) in steps {
            reading += step;
            clock.set(Nanos::new(reading as u64));
            clamped = clamped.max(reading);
            if let Ok(d) = limiter.check_n(n.min(q.burst())) && d.is_allowed() {
                admissions.push((clamped as i128 * TICKS, n.min(q.burst())));
            }
        }
        let interval = q.emission_interval_ticks() as i128;
        for i in 0..admissions.len() {
            let mut cost = 0i128;
            for j in i..admissions.len() {
                cost += admissions[j].1 as i128;
                let span = admissions[j].0 - admissions[i].0;
                prop_assert!(cost * interval <= q.burst() as i128 * interval + span,
                    "admitted {} in {} ticks with {:?}", cost, span, q);
            }
        }
    }
}

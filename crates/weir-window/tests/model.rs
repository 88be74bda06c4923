//! Property tests against sequential reference models.
//!
//! The references are written independently of the implementation: plain integers
//! in maps and deques, no bit packing, no atomics, no clamping. The fixed window is
//! a count per window index `t / P`; the sliding counter compares the estimate in
//! the "sum" form `prev·(P − e) + (curr + n)·P ≤ limit·P` and finds `remaining` by
//! trying every count and `retry_after` by binary search over time; the log is a
//! deque of timestamps. For any sequence of operations at non-decreasing times:
//!
//! - the fixed window, the sliding counter and the sliding log decide exactly as
//!   their references, down to every field of every decision and snapshot, with
//!   refunds of the last admission among the operations (the fixed window's to its
//!   window while it is current, the counter's to its window while it is the
//!   current or the previous one, the log's as removed entries);
//! - the striped limiter in exact mode, used from one thread on any stripes, admits
//!   and denies exactly as the sliding reference, with the same `retry_after` and
//!   denial snapshot, and `snapshot()` equal to the reference's after every step
//!   (fast-path decisions' `remaining` is documented as an estimate);
//! - the striped limiter in approximate mode keeps the reference estimate of what
//!   it admitted within `limit + batch − 1` at every admission.
//!
//! With readings that jump backwards as well as forwards, every admission still
//! conforms to the rules measured at the latest reading so far ("no time passing").

use proptest::prelude::*;
use std::collections::{HashMap, VecDeque};
use std::time::Duration;
use weir_rl_core::{Decision, Limiter, ManualClock, Nanos, Quota, Snapshot};
use weir_window::{FixedWindow, SlidingLog, SlidingWindow, StripedMode, StripedSlidingWindow};

#[derive(Debug, Clone)]
enum Op {
    Advance(u64),
    Check {
        n: u64,
        stripe: usize,
    },
    /// A refund of up to this many of the last admission's units (never more than it
    /// took in all, as the contract asks).
    Refund(u64),
    Snapshot,
}

/// The last admission: its decision, when it was made, and how much of it can still
/// be refunded.
#[derive(Debug, Clone, Copy)]
struct Admission {
    decision: Decision,
    t: u64,
    left: u64,
}

impl Admission {
    /// Records a decision of cost `n` made at `t` (a denial leaves nothing to refund).
    fn of(decision: Decision, t: u64, n: u64) -> Self {
        Self { decision, t, left: if decision.is_allowed() { n } else { 0 } }
    }

    /// Takes up to `n` of what is left to refund.
    fn take(last: &mut Option<Admission>, n: u64) -> Option<(Admission, u64)> {
        let a = last.as_mut()?;
        let k = n.min(a.left);
        a.left -= k;
        Some((*a, k))
    }
}

/// A quota with a small limit and a period from 97 ns to a minute.
fn quota() -> impl Strategy<Value = Quota> {
    (1u64..40, prop_oneof![Just(97u64), Just(1_000), Just(999_983), Just(1_000_000_000), Just(60_000_000_000)])
        .prop_filter_map("representable", |(count, period)| Quota::new(count, Duration::from_nanos(period)).ok())
}

fn period(q: &Quota) -> u64 {
    q.period().as_nanos() as u64
}

/// Operations whose time steps are scaled to the quota's period.
fn ops(q: Quota, len: usize) -> impl Strategy<Value = Vec<Op>> {
    let p = period(&q);
    let limit = q.count();
    prop::collection::vec(
        prop_oneof![
            3 => (0..p / 4 + 1).prop_map(Op::Advance),
            2 => (0..2 * p + 2).prop_map(Op::Advance),
            1 => Just(Op::Advance(p)),
            8 => (0..limit + 2, 0usize..8).prop_map(move |(n, stripe)| Op::Check { n: n.min(limit + 1), stripe }),
            2 => (0..limit + 1).prop_map(Op::Refund),
            1 => Just(Op::Snapshot),
        ],
        1..len,
    )
}

/// Where the clock starts: near its origin, mid-window, or far out (a UNIX-epoch clock).
fn start() -> impl Strategy<Value = u64> {
    prop_oneof![0u64..1_000_000, 1_796_000_000_000_000_000u64..1_796_000_100_000_000_000]
}

// ---------------------------------------------------------------------------------
// References.

/// Counts per window index `t / P` (windows aligned to the clock's origin).
#[derive(Debug)]
struct Windows {
    limit: u64,
    period: u64,
    counts: HashMap<u64, u64>,
}

impl Windows {
    fn new(q: &Quota) -> Self {
        Self { limit: q.count(), period: period(q), counts: HashMap::new() }
    }
    fn count(&self, window: u64) -> u64 {
        self.counts.get(&window).copied().unwrap_or(0)
    }

    // --- fixed window

    fn fixed_snapshot(&self, t: u64) -> Snapshot {
        let w = t / self.period;
        let used = self.count(w);
        let reset = if used == 0 { 0 } else { (w + 1) * self.period - t };
        Snapshot::new(self.limit, self.limit - used, reset)
    }
    /// A refund of `n` units admitted at `ta`, at `t`: to the admission's window if
    /// it is the current one (fixed), or the current or previous one (sliding).
    fn refund(&mut self, ta: u64, t: u64, n: u64, windows_that_count: u64) {
        let (wa, w) = (ta / self.period, t / self.period);
        if w - wa < windows_that_count {
            let count = self.counts.entry(wa).or_default();
            *count -= n.min(*count);
        }
    }
    fn fixed_check(&mut self, t: u64, n: u64) -> Decision {
        let w = t / self.period;
        if self.count(w) + n <= self.limit {
            *self.counts.entry(w).or_default() += n;
            Decision::allowed(self.fixed_snapshot(t))
        } else {
            Decision::denied(self.fixed_snapshot(t), (w + 1) * self.period - t)
        }
    }

    // --- sliding counter

    /// Whether `extra` more fit at `t`: `prev·(P − e) + (curr + extra)·P ≤ limit·P`.
    fn fits(&self, t: u64, extra: u64) -> bool {
        let (w, e) = (t / self.period, t % self.period);
        let prev = if w == 0 { 0 } else { self.count(w - 1) } as u128;
        let (curr, p) = (self.count(w) as u128, self.period as u128);
        prev * (p - e as u128) + (curr + extra as u128) * p <= self.limit as u128 * p
    }
    fn sliding_snapshot(&self, t: u64) -> Snapshot {
        let remaining = (0..=self.limit).rev().find(|&k| self.fits(t, k)).unwrap_or(0);
        let w = t / self.period;
        let reset = if self.count(w) > 0 {
            (w + 2) * self.period - t
        } else if w > 0 && self.count(w - 1) > 0 {
            (w + 1) * self.period - t
        } else {
            0
        };
        Snapshot::new(self.limit, remaining, reset)
    }
    fn sliding_check(&mut self, t: u64, n: u64) -> Decision {
        if self.fits(t, n) {
            *self.counts.entry(t / self.period).or_default() += n;
            return Decision::allowed(self.sliding_snapshot(t));
        }
        // The first later instant that fits (the estimate only falls with time).
        let (mut lo, mut hi) = (t, t + 2 * self.period);
        while hi - lo > 1 {
            let mid = lo + (hi - lo) / 2;
            if self.fits(mid, n) { hi = mid } else { lo = mid }
        }
        Decision::denied(self.sliding_snapshot(t), hi - t)
    }
    /// The estimate at `t`, times P, of what was admitted.
    fn estimate_times_period(&self, t: u64) -> u128 {
        let (w, e) = (t / self.period, t % self.period);
        let prev = if w == 0 { 0 } else { self.count(w - 1) } as u128;
        prev * (self.period - e) as u128 + self.count(w) as u128 * self.period as u128
    }
}

/// The timestamps of admitted requests.
#[derive(Debug)]
struct Log {
    limit: u64,
    period: u64,
    entries: VecDeque<u64>,
}

impl Log {
    fn live(&self, t: u64) -> Vec<u64> {
        self.entries.iter().copied().filter(|&s| s + self.period > t).collect()
    }
    fn snapshot(&self, t: u64) -> Snapshot {
        let live = self.live(t);
        let reset = live.last().map_or(0, |newest| newest + self.period - t);
        Snapshot::new(self.limit, self.limit - live.len() as u64, reset)
    }
    /// Removes up to `n` of the latest entries at or before `ta` that are live at `t`.
    fn refund(&mut self, ta: u64, t: u64, n: u64) {
        for _ in 0..n {
            match self.entries.iter().rposition(|&s| s <= ta && s + self.period > t) {
                Some(i) => {
                    self.entries.remove(i);
                }
                None => break,
            }
        }
    }
    fn check(&mut self, t: u64, n: u64) -> Decision {
        let live = self.live(t);
        if live.len() as u64 + n <= self.limit {
            self.entries.extend(std::iter::repeat_n(t, n as usize));
            return Decision::allowed(self.snapshot(t));
        }
        let must_leave = (live.len() as u64 + n - self.limit) as usize;
        Decision::denied(self.snapshot(t), live[must_leave - 1] + self.period - t)
    }
}

/// A check of cost `n` on stripe `s`: whether it was admitted.
type CheckFn<'a> = &'a dyn Fn(u64, usize) -> bool;

fn as_decision(d: Decision, n: u64) -> Decision {
    if n == 0 { Decision::allowed(d.snapshot()) } else { d }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(400))]

    #[test]
    fn fixed_window_decides_exactly_as_the_reference(start in start(), (q, ops) in quota().prop_flat_map(|q| (Just(q), ops(q, 100)))) {
        let clock = ManualClock::starting_at(Nanos::new(start));
        let limiter = FixedWindow::with_clock(q, clock.clone()).unwrap();
        let mut reference = Windows::new(&q);
        let mut last = None;
        for op in ops {
            let t = clock.now_u64();
            match op {
                Op::Advance(ns) => { clock.advance(Duration::from_nanos(ns)); }
                Op::Check { n, .. } if n > q.count() => prop_assert!(limiter.check_n(n).is_err()),
                Op::Check { n, .. } => {
                    let expected = if n == 0 { Decision::allowed(reference.fixed_snapshot(t)) } else { reference.fixed_check(t, n) };
                    let actual = limiter.check_n(n).unwrap();
                    prop_assert_eq!(actual, expected);
                    last = Some(Admission::of(actual, t, n));
                }
                Op::Refund(n) => if let Some((a, k)) = Admission::take(&mut last, n) {
                    limiter.refund(k, &a.decision).unwrap();
                    reference.refund(a.t, t, k, 1);
                    prop_assert_eq!(limiter.snapshot(), reference.fixed_snapshot(t));
                }
                Op::Snapshot => prop_assert_eq!(limiter.snapshot(), reference.fixed_snapshot(t)),
            }
        }
    }

    #[test]
    fn sliding_window_decides_exactly_as_the_reference(start in start(), (q, ops) in quota().prop_flat_map(|q| (Just(q), ops(q, 100)))) {
        let clock = ManualClock::starting_at(Nanos::new(start));
        let limiter = SlidingWindow::with_clock(q, clock.clone()).unwrap();
        let mut reference = Windows::new(&q);
        let mut last = None;
        for op in ops {
            let t = clock.now_u64();
            match op {
                Op::Advance(ns) => { clock.advance(Duration::from_nanos(ns)); }
                Op::Check { n, .. } if n > q.count() => prop_assert!(limiter.check_n(n).is_err()),
                Op::Check { n, .. } => {
                    let expected = if n == 0 { Decision::allowed(reference.sliding_snapshot(t)) } else { reference.sliding_check(t, n) };
                    let actual = limiter.check_n(n).unwrap();
                    prop_assert_eq!(actual, expected);
                    last = Some(Admission::of(actual, t, n));
                }
                Op::Refund(n) => if let Some((a, k)) = Admission::take(&mut last, n) {
                    limiter.refund(k, &a.decision).unwrap();
                    reference.refund(a.t, t, k, 2);
                    prop_assert_eq!(limiter.snapshot(), reference.sliding_snapshot(t));
                }
                Op::Snapshot => prop_assert_eq!(limiter.snapshot(), reference.sliding_snapshot(t)),
            }
        }
    }

    #[test]
    fn sliding_log_decides_exactly_as_the_reference(start in start(), (q, ops) in quota().prop_flat_map(|q| (Just(q), ops(q, 100)))) {
        let clock = ManualClock::starting_at(Nanos::new(start));
        let limiter = SlidingLog::with_clock(q, clock.clone()).unwrap();
        let mut reference = Log { limit: q.count(), period: period(&q), entries: VecDeque::new() };
        let mut last = None;
        for op in ops {
            let t = clock.now_u64();
            match op {
                Op::Advance(ns) => { clock.advance(Duration::from_nanos(ns)); }
                Op::Check { n, .. } if n > q.count() => prop_assert!(limiter.check_n(n).is_err()),
                Op::Check { n, .. } => {
                    let expected = if n == 0 { Decision::allowed(reference.snapshot(t)) } else { reference.check(t, n) };
                    let actual = limiter.check_n(n).unwrap();
                    prop_assert_eq!(actual, expected);
                    last = Some(Admission::of(actual, t, n));
                }
                Op::Refund(n) => if let Some((a, k)) = Admission::take(&mut last, n) {
                    limiter.refund(k, &a.decision).unwrap();
                    reference.refund(a.t, t, k);
                    prop_assert_eq!(limiter.snapshot(), reference.snapshot(t));
                }
                Op::Snapshot => prop_assert_eq!(limiter.snapshot(), reference.snapshot(t)),
            }
        }
    }

    /// Exact mode, and approximate mode with batch 1 (which leases nothing ahead, so
    /// it has nothing to over-grant), decide as the sliding reference from any stripes.
    #[test]
    fn striped_exact_decides_as_the_sliding_reference(
        start in start(),
        stripes in prop_oneof![Just(1usize), Just(2), Just(4)],
        batch_fraction in 0u64..=100,
        approximate_with_batch_1 in any::<bool>(),
        (q, ops) in quota().prop_flat_map(|q| (Just(q), ops(q, 100))),
    ) {
        let (mode, batch) = if approximate_with_batch_1 {
            (StripedMode::Approximate, 1)
        } else {
            (StripedMode::Exact, (q.count() * batch_fraction / 100).max(1))
        };
        let clock = ManualClock::starting_at(Nanos::new(start));
        let limiter = StripedSlidingWindow::builder(q).stripes(stripes).batch(batch).mode(mode).build_with_clock(clock.clone()).unwrap();
        let mut reference = Windows::new(&q);
        let mut last = None;
        for op in ops {
            let t = clock.now_u64();
            match op {
                Op::Advance(ns) => { clock.advance(Duration::from_nanos(ns)); }
                Op::Check { n, stripe } if n > q.count() => prop_assert!(limiter.check_n_on(stripe, n).is_err()),
                Op::Refund(n) => if let Some((a, k)) = Admission::take(&mut last, n) {
                    limiter.refund(k, &a.decision).unwrap();
                    reference.refund(a.t, t, k, 2);
                    prop_assert_eq!(limiter.snapshot(), reference.sliding_snapshot(t));
                }
                Op::Check { n, stripe } => {
                    let actual = limiter.check_n_on(stripe, n).unwrap();
                    last = Some(Admission::of(actual, t, n));
                    let expected = as_decision(if n == 0 { Decision::allowed(reference.sliding_snapshot(t)) } else { reference.sliding_check(t, n) }, n);
                    prop_assert_eq!(actual.is_allowed(), expected.is_allowed(), "{:?} vs {:?}", actual, expected);
                    if actual.is_denied() || n == 0 {
                        prop_assert_eq!(actual, expected);
                    } else {
                        prop_assert_eq!(actual.reset_after(), expected.reset_after());
                        prop_assert_eq!(actual.limit(), q.count());
                    }
                    prop_assert_eq!(limiter.snapshot(), reference.sliding_snapshot(t));
                }
                Op::Snapshot => prop_assert_eq!(limiter.snapshot(), reference.sliding_snapshot(t)),
            }
        }
    }

    /// Approximate mode: whatever the stripes and batch, the reference estimate of
    /// what was admitted stays within `limit + batch − 1` at every admission.
    #[test]
    fn striped_approximate_stays_within_one_batch(
        start in start(),
        stripes in prop_oneof![Just(1usize), Just(2), Just(4), Just(8)],
        batch_fraction in 0u64..=100,
        (q, ops) in quota().prop_flat_map(|q| (Just(q), ops(q, 150))),
    ) {
        let batch = (q.count() * batch_fraction / 100).max(1);
        let clock = ManualClock::starting_at(Nanos::new(start));
        let limiter = StripedSlidingWindow::builder(q).stripes(stripes).batch(batch).mode(StripedMode::Approximate).build_with_clock(clock.clone()).unwrap();
        let mut admitted = Windows::new(&q);
        let mut last = None;
        for op in ops {
            let t = clock.now_u64();
            match op {
                Op::Advance(ns) => { clock.advance(Duration::from_nanos(ns)); }
                Op::Check { n, stripe } if n > q.count() => prop_assert!(limiter.check_n_on(stripe, n).is_err()),
                Op::Refund(n) => if let Some((a, k)) = Admission::take(&mut last, n) {
                    limiter.refund(k, &a.decision).unwrap();
                    admitted.refund(a.t, t, k, 2);
                }
                Op::Check { n, stripe } => {
                    let decision = limiter.check_n_on(stripe, n).unwrap();
                    last = Some(Admission::of(decision, t, n));
                    if decision.is_allowed() && n > 0 {
                        *admitted.counts.entry(t / admitted.period).or_default() += n;
                        let bound = (q.count() + batch - 1) as u128 * admitted.period as u128;
                        prop_assert!(admitted.estimate_times_period(t) <= bound,
                            "estimate {} > limit {} + batch {} - 1", admitted.estimate_times_period(t) as f64 / admitted.period as f64, q.count(), batch);
                    }
                }
                Op::Snapshot => { let _ = limiter.snapshot(); }
            }
        }
    }

    /// Readings that jump backwards as well as forwards: every admission conforms to
    /// the rules at the latest reading so far (`clamped`), never looser.
    #[test]
    fn backward_steps_never_break_the_rules(
        q in quota(),
        stripes in prop_oneof![Just(1usize), Just(2), Just(4)],
        steps in prop::collection::vec((-3_000i64..3_000, 1u64..4, 0usize..4), 1..150),
    ) {
        let p = period(&q);
        let base = 1u64 << 50;
        let clock = ManualClock::starting_at(Nanos::new(base));
        let fixed = FixedWindow::with_clock(q, clock.clone()).unwrap();
        let sliding = SlidingWindow::with_clock(q, clock.clone()).unwrap();
        let log = SlidingLog::with_clock(q, clock.clone()).unwrap();
        let striped = StripedSlidingWindow::builder(q).stripes(stripes).batch(q.count().div_ceil(3)).build_with_clock(clock.clone()).unwrap();
        let limiters: [(&str, CheckFn); 4] = [
            ("fixed", &|n, _| fixed.check_n(n).unwrap().is_allowed()),
            ("sliding", &|n, _| sliding.check_n(n).unwrap().is_allowed()),
            ("log", &|n, _| log.check_n(n).unwrap().is_allowed()),
            ("striped", &|n, s| striped.check_n_on(s, n).unwrap().is_allowed()),
        ];
        for (name, check) in limiters {
            clock.set(Nanos::new(base));
            let (mut reading, mut clamped, mut clamped_admitted) = (base, base, base);
            let mut windows = Windows::new(&q);
            let mut stamps: Vec<(u64, u64)> = Vec::new(); // (clamped admitted reading, n)
            for &(step, n, stripe) in &steps {
                reading = reading.saturating_add_signed(step * p as i64 / 1_000);
                clock.set(Nanos::new(reading));
                clamped = clamped.max(reading);
                let n = n.min(q.count());
                if !check(n, stripe) {
                    continue;
                }
                clamped_admitted = clamped_admitted.max(reading);
                *windows.counts.entry(clamped / p).or_default() += n;
                stamps.push((clamped_admitted, n));
                match name {
                    "fixed" => prop_assert!(windows.count(clamped / p) <= q.count(), "{}: window over the limit", name),
                    "sliding" | "striped" => prop_assert!(
                        windows.estimate_times_period(clamped) <= q.count() as u128 * p as u128,
                        "{}: estimate over the limit at {}", name, clamped
                    ),
                    _ => {
                        let in_window: u64 = stamps.iter().filter(|(s, _)| s + p > clamped_admitted).map(|(_, n)| n).sum();
                        prop_assert!(in_window <= q.count(), "log: {} in a window", in_window);
                    }
                }
            }
        }
    }
}

/// `ManualClock::now` as a `u64`, for brevity.
trait NowU64 {
    fn now_u64(&self) -> u64;
}

impl NowU64 for ManualClock {
    fn now_u64(&self) -> u64 {
        weir_rl_core::Clock::now(self).as_u64()
    }
}

#[test]
fn the_references_agree_with_the_worked_examples() {
    let q = Quota::per_minute(100).unwrap();
    let minute = 60_000_000_000;
    let mut r = Windows::new(&q);
    r.counts.insert(0, 80);
    r.counts.insert(1, 30);
    assert_eq!(r.sliding_snapshot(minute + 45_000_000_000).remaining(), 50);
    let mut log = Log { limit: 5, period: minute, entries: VecDeque::new() };
    for s in [0, 20, 30, 40, 45] {
        assert!(log.check(s * 1_000_000_000, 1).is_allowed());
    }
    assert_eq!(log.check(50_000_000_000, 1).retry_after(), Some(Duration::from_secs(10)));
    let _ = Limiter::snapshot(&FixedWindow::with_clock(q, ManualClock::new()).unwrap());
}

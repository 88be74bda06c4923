//! `AllOf` over weir's own algorithms (GCRA, fixed window, sliding window, sliding
//! log), refunds included, on a clock that moves between the members' readings:
//! every member is refunded against a reading no later than its own, so no member
//! ever admits what its own exact reference would deny.
//!
//! Each member is one algorithm's state behind a [`KeyedLimiter`], with a *shadow*:
//! the same algorithm, fed only what the member admitted (at the member's own
//! reading) and refunded exactly (with the shadow's own decision of that admission,
//! at the refund's reading). The shadow is the most the member may admit: a member
//! refunded as the contract allows is at least as strict as its shadow, so a member
//! admission that its shadow denies is an over-admission.

use proptest::prelude::*;
use std::cell::{Cell, RefCell};
use std::time::Duration;
use weir_rl::gcra::GcraAlgorithm;
use weir_rl::window::{FixedWindowAlgorithm, SlidingLogAlgorithm, SlidingWindowAlgorithm};
use weir_rl::{
    Algorithm, AllOf, Decision, InsufficientCapacity, KeyedLimiter, ManualClock, Nanos, Policy, Quota, Snapshot,
};

/// The time every member reads: each member call first moves it on by the next of
/// `steps` (a clock that moves between the members' readings of one check).
struct Time {
    now: Cell<u64>,
    steps: Vec<u64>,
    next: Cell<usize>,
}

impl Time {
    fn new(steps: Vec<u64>) -> Self {
        // At the clock's origin: a reading of 0 is a reading like any other.
        Self { now: Cell::new(0), steps, next: Cell::new(0) }
    }

    /// Moves time on by the next step and returns the reading.
    fn tick(&self) -> Nanos {
        if !self.steps.is_empty() {
            let i = self.next.get();
            self.next.set(i + 1);
            self.now.set(self.now.get() + self.steps[i % self.steps.len()]);
        }
        Nanos::new(self.now.get())
    }
}

/// One member's admission: its own decision, its shadow's, and its cost.
#[derive(Clone, Copy)]
struct Admission {
    own: Decision,
    shadow: Decision,
}

/// One algorithm's single state as a keyed limiter (the key is ignored), with its
/// shadow (see the module docs).
struct Member<'t, A: Algorithm> {
    name: &'static str,
    algorithm: A,
    state: A::State,
    clock: ManualClock,
    shadow: A,
    shadow_state: A::State,
    shadow_clock: ManualClock,
    policy: [Policy; 1],
    time: &'t Time,
    admissions: RefCell<Vec<Admission>>,
    /// The admission the next refund gives back (set by the test for an all-of
    /// refund; else the latest admission, which is what `AllOf` gives back itself).
    refund_of: Cell<Option<usize>>,
    violations: &'t RefCell<Vec<String>>,
}

impl<'t, A: Algorithm> Member<'t, A> {
    fn new(
        name: &'static str,
        make: impl Fn() -> A,
        limit: u64,
        time: &'t Time,
        violations: &'t RefCell<Vec<String>>,
    ) -> Self {
        let (algorithm, shadow) = (make(), make());
        let (state, shadow_state) = (algorithm.new_state(), shadow.new_state());
        Self {
            name,
            algorithm,
            state,
            clock: ManualClock::new(),
            shadow,
            shadow_state,
            shadow_clock: ManualClock::new(),
            policy: [Policy::new(limit, Duration::from_micros(1))],
            time,
            admissions: RefCell::new(Vec::new()),
            refund_of: Cell::new(None),
            violations,
        }
    }
}

impl<A: Algorithm> KeyedLimiter<u32> for Member<'_, A> {
    fn check_n(&self, _: &u32, n: u64) -> Result<Decision, InsufficientCapacity> {
        let now = self.time.tick();
        self.clock.set(now);
        let own = self.algorithm.check_n(&self.state, n, &self.clock)?;
        if own.is_allowed() && n > 0 {
            self.shadow_clock.set(now);
            let shadow = self.shadow.check_n(&self.shadow_state, n, &self.shadow_clock)?;
            if shadow.is_denied() {
                self.violations.borrow_mut().push(format!(
                    "{}: admitted {n} at {} ns where its exact reference denies",
                    self.name,
                    now.as_u64()
                ));
            }
            self.admissions.borrow_mut().push(Admission { own, shadow });
        }
        Ok(own)
    }

    fn refund(&self, _: &u32, n: u64, admission: &Decision) -> Result<(), InsufficientCapacity> {
        let now = self.time.tick();
        self.clock.set(now);
        let admissions = self.admissions.borrow();
        let of = self.refund_of.take().or(admissions.len().checked_sub(1));
        if let Some(of) = of.filter(|_| admission.is_allowed() && !admission.is_zero_cost()) {
            let Admission { own, shadow } = admissions[of];
            if admission.decided_at() > own.decided_at() {
                self.violations.borrow_mut().push(format!(
                    "{}: refunded against the reading {} ns, later than its own {} ns",
                    self.name,
                    admission.decided_at().as_u64(),
                    own.decided_at().as_u64()
                ));
            }
            self.shadow_clock.set(now);
            self.shadow.refund(&self.shadow_state, n, &shadow, &self.shadow_clock)?;
        }
        self.algorithm.refund(&self.state, n, admission, &self.clock)
    }

    fn snapshot(&self, _: &u32) -> Snapshot {
        self.algorithm.snapshot(&self.state, Nanos::new(self.time.now.get()))
    }

    fn policies(&self) -> &[Policy] {
        &self.policy
    }
}

/// The members a test can stack, each `limit` per microsecond.
#[derive(Debug, Clone, Copy)]
enum Kind {
    Gcra,
    Fixed,
    Sliding,
    Log,
}

fn quota(limit: u64) -> Quota {
    Quota::new(limit, Duration::from_micros(1)).unwrap()
}

fn member<'t>(kind: Kind, limit: u64, time: &'t Time, violations: &'t RefCell<Vec<String>>) -> Box<dyn Stacked + 't> {
    match kind {
        // A bucket of `limit` refilling `2 × limit` per microsecond.
        Kind::Gcra => Box::new(Member::new(
            "gcra",
            || {
                GcraAlgorithm::new(
                    Quota::new(2 * limit, Duration::from_micros(1)).unwrap().with_burst(limit).unwrap(),
                    Nanos::ZERO,
                )
            },
            limit,
            time,
            violations,
        )),
        Kind::Fixed => Box::new(Member::new(
            "fixed window",
            || FixedWindowAlgorithm::new(quota(limit), Nanos::ZERO).unwrap(),
            limit,
            time,
            violations,
        )),
        Kind::Sliding => Box::new(Member::new(
            "sliding window",
            || SlidingWindowAlgorithm::new(quota(limit), Nanos::ZERO).unwrap(),
            limit,
            time,
            violations,
        )),
        Kind::Log => Box::new(Member::new(
            "sliding log",
            || SlidingLogAlgorithm::new(quota(limit), Nanos::ZERO).unwrap(),
            limit,
            time,
            violations,
        )),
    }
}

/// A member of any algorithm, as the test drives it.
trait Stacked: KeyedLimiter<u32> {
    fn admissions(&self) -> usize;
    fn refund_of(&self, admission: usize);
}

impl<A: Algorithm> Stacked for Member<'_, A> {
    fn admissions(&self) -> usize {
        self.admissions.borrow().len()
    }
    fn refund_of(&self, admission: usize) {
        self.refund_of.set(Some(admission));
    }
}

#[derive(Debug, Clone)]
enum Op {
    /// Time passes (ns).
    Advance(u64),
    /// An all-of check of this cost.
    Check(u64),
    /// Gives back up to this many units of the all-of admission this many back (each
    /// admission is refunded at most once).
    Refund { back: usize, n: u64 },
}

fn ops() -> impl Strategy<Value = Vec<Op>> {
    prop::collection::vec(
        prop_oneof![
            3 => (0u64..1_500).prop_map(Op::Advance),
            8 => (0u64..4).prop_map(Op::Check),
            3 => (0usize..4, 1u64..4).prop_map(|(back, n)| Op::Refund { back, n }),
        ],
        1..120,
    )
}

/// Runs `ops` on an all-of of `members`, returning what went wrong.
fn run(kinds: &[(Kind, u64)], steps: Vec<u64>, ops: &[Op]) -> Vec<String> {
    let time = Time::new(steps);
    let violations = RefCell::new(Vec::new());
    let members: Vec<Box<dyn Stacked + '_>> =
        kinds.iter().map(|&(kind, limit)| member(kind, limit, &time, &violations)).collect();
    let all = AllOf::new::<u32>(members).unwrap();
    // Each all-of admission: its decision, cost, each member's admission, whether
    // it was refunded.
    let mut admitted: Vec<(Decision, u64, Vec<usize>, bool)> = Vec::new();
    for op in ops {
        match *op {
            Op::Advance(ns) => time.now.set(time.now.get() + ns),
            Op::Check(n) => {
                if let Ok(decision) = all.check_n(&0, n)
                    && decision.is_allowed()
                    && n > 0
                {
                    let parts = all.members().iter().map(|m| m.admissions() - 1).collect();
                    admitted.push((decision, n, parts, false));
                }
            }
            Op::Refund { back, n } => {
                let Some(i) = admitted.len().checked_sub(back + 1) else { continue };
                let (decision, cost, parts, refunded) = &mut admitted[i];
                if *refunded {
                    continue;
                }
                *refunded = true;
                for (member, &part) in all.members().iter().zip(parts.iter()) {
                    member.refund_of(part);
                }
                all.refund(&0, n.min(*cost), decision).unwrap();
            }
        }
    }
    drop(all);
    violations.into_inner()
}

/// A member whose clock moves on by 1 ns when it is checked.
struct Later<L>(L, ManualClock);
impl<L: KeyedLimiter<u32>> KeyedLimiter<u32> for Later<L> {
    fn check_n(&self, key: &u32, n: u64) -> Result<Decision, InsufficientCapacity> {
        self.1.advance(Duration::from_nanos(1));
        self.0.check_n(key, n)
    }
    fn refund(&self, key: &u32, n: u64, admission: &Decision) -> Result<(), InsufficientCapacity> {
        self.0.refund(key, n, admission)
    }
    fn snapshot(&self, key: &u32) -> Snapshot {
        self.0.snapshot(key)
    }
    fn policies(&self) -> &[Policy] {
        self.0.policies()
    }
}
/// One limiter of any kind, for every key.
struct One<L>(L, [Policy; 1]);
impl<L: weir_rl::Limiter> KeyedLimiter<u32> for One<L> {
    fn check_n(&self, _: &u32, n: u64) -> Result<Decision, InsufficientCapacity> {
        self.0.check_n(n)
    }
    fn refund(&self, _: &u32, n: u64, admission: &Decision) -> Result<(), InsufficientCapacity> {
        self.0.refund(n, admission)
    }
    fn snapshot(&self, _: &u32) -> Snapshot {
        self.0.snapshot()
    }
    fn policies(&self) -> &[Policy] {
        &self.1
    }
}
/// The worked case: a fixed window of 2 per second first, a GCRA second that
/// decides, the clock moving 1 ns during the GCRA's check. The first request is
/// counted in window 0 (at 1 s − 1 ns) and decided by the GCRA at 1 s; refunding it
/// gave the unit back to window 1, which then admitted 3 for a limit of 2.
#[test]
fn a_refund_never_reaches_a_window_the_admission_was_not_counted_in() {
    let second = |ns: u64| Nanos::new(1_000_000_000 + ns);
    let clock = ManualClock::new();
    let policy = [Policy::new(2, Duration::from_secs(1))];
    let window =
        One(weir_rl::window::FixedWindow::with_clock(Quota::per_second(2).unwrap(), clock.clone()).unwrap(), policy);
    // One every nanosecond, one at a time: it decides (nothing left after an admission).
    let bucket = weir_rl::gcra::Gcra::with_clock(
        Quota::per_second(1_000_000_000).unwrap().with_burst(1).unwrap(),
        clock.clone(),
    );
    let all = AllOf::new((window, Later(One(bucket, policy), clock.clone()))).unwrap();

    clock.set(Nanos::new(999_999_999));
    let first = all.check_n(&0, 1).unwrap();
    assert!(first.is_allowed());
    assert_eq!(first.policy_index(), 1, "the GCRA decides");
    clock.set(second(10));
    assert!(all.check_n(&0, 1).unwrap().is_allowed());
    assert!(all.check_n(&0, 1).unwrap().is_allowed());
    assert!(all.check_n(&0, 1).unwrap().is_denied(), "window 1 is full");
    all.refund(&0, 1, &first).unwrap();
    assert!(all.check_n(&0, 1).unwrap().is_denied(), "a third admission in [1 s, 2 s) for a limit of 2");
}

/// The worked case at the clock's origin: the window member decides at reading 0,
/// which was taken for "not said" and passed over, so the window was refunded
/// against the GCRA's reading 1 ns later, in the next window, and admitted 3 for a
/// limit of 2 there.
#[test]
fn a_member_deciding_at_the_clocks_origin_is_refunded_against_its_own_reading() {
    let clock = ManualClock::new(); // reads 0
    let policy = [Policy::new(2, Duration::from_secs(1))];
    // Windows [.., 1 ns), [1 ns, 1 s + 1 ns), ...: a boundary 1 ns after the origin.
    let window = One(
        weir_rl::window::FixedWindow::builder(Quota::per_second(2).unwrap())
            .window_start(Nanos::new(1))
            .build_with_clock(clock.clone())
            .unwrap(),
        policy,
    );
    let bucket = weir_rl::gcra::Gcra::with_clock(
        Quota::per_second(1_000_000_000).unwrap().with_burst(1).unwrap(),
        clock.clone(),
    );
    let all = AllOf::new((window, Later(One(bucket, policy), clock.clone()))).unwrap();
    let first = all.check_n(&0, 1).unwrap(); // the window at 0 (window 0), the GCRA at 1 ns
    assert!(first.is_allowed());
    assert_eq!((first.decided_at(), first.is_stamped()), (Nanos::ZERO, true));
    clock.set(Nanos::new(10)); // window 1
    assert!(all.check_n(&0, 1).unwrap().is_allowed());
    assert!(all.check_n(&0, 1).unwrap().is_allowed());
    assert!(all.check_n(&0, 1).unwrap().is_denied(), "window 1 is full");
    all.refund(&0, 1, &first).unwrap(); // gives nothing to window 1
    assert!(all.check_n(&0, 1).unwrap().is_denied(), "a third admission in window 1 for a limit of 2");
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    /// Any stack of two to four members, any checks and refunds, the clock moving
    /// between the members' readings: no member admits beyond its exact reference,
    /// and none is refunded against a reading later than its own.
    #[test]
    fn no_member_admits_beyond_its_reference(
        kinds in prop::collection::vec(
            (prop_oneof![Just(Kind::Gcra), Just(Kind::Fixed), Just(Kind::Sliding), Just(Kind::Log)], 2u64..6),
            2..5,
        ),
        steps in prop::collection::vec(prop_oneof![3 => 0u64..3, 1 => 0u64..700], 1..8),
        ops in ops(),
    ) {
        let violations = run(&kinds, steps, &ops);
        prop_assert!(violations.is_empty(), "{:?}", violations);
    }
}

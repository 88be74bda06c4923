//! loom models of the GCRA limiter's atomic protocol: the CAS on the TAT, refunds
//! and quota changes racing with checks.
//!
//! Each model runs a few operations per thread at explicit times and checks that
//! what the threads saw (every field of every decision) and the final state equal
//! those of running the same operations one at a time, in some order that keeps each
//! thread's program order and real-time precedence (linearizability), through an
//! independent sequential reference (plain integers, no atomics). A check decides wholly under the quota it read (its
//! decision's `limit` says which); a check that read the old quota before a change
//! may land after it, so the reference applies to each check the quota it saw.
#![cfg(loom)]

use loom::sync::Arc;
use loom::thread;
use loom_tests::{RealTime, Span, linearizations};
use weir_gcra::{GcraAlgorithm, GcraState};
use weir_rl_core::{Algorithm, Decision, Nanos, Quota, Snapshot};

const TICKS: u64 = 16;

#[derive(Debug, Clone, Copy, PartialEq)]
enum Op {
    Check { n: u64, at: u64 },
    Refund { n: u64, at: u64 },
    SetQuota { burst: u64 },
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum Outcome {
    Decided(Decision),
    Done,
}

/// Burst 1 at 100 M/s (T = 10 ns), or burst 3 at 50 M/s (T = 20 ns): the burst tells
/// which quota a decision was made under.
fn quota(burst: u64) -> Quota {
    match burst {
        1 => Quota::per_second(100_000_000).unwrap().with_burst(1).unwrap(),
        b => Quota::per_second(50_000_000).unwrap().with_burst(b).unwrap(),
    }
}

/// Runs `op`; a refund gives back `n` of the thread's `last` decision (through
/// [`Algorithm::refund`]: nothing if that decision was a denial).
fn run(algorithm: &GcraAlgorithm, state: &GcraState, op: Op, last: &mut Option<Decision>) -> Outcome {
    match op {
        Op::Check { n, at } => {
            let decision = algorithm.check_n(state, n, &Nanos::new(at)).unwrap();
            *last = Some(decision);
            Outcome::Decided(decision)
        }
        Op::Refund { n, at } => {
            let admission = last.expect("a refund follows a check");
            Algorithm::refund(algorithm, state, n, &admission, &Nanos::new(at)).unwrap();
            Outcome::Done
        }
        Op::SetQuota { burst } => {
            algorithm.set_quota(quota(burst));
            Outcome::Done
        }
    }
}

/// The sequential reference: capacity in use, in ticks, as plain integers.
struct Reference {
    tat: u64,
}

fn ceil_ns(ticks: u64) -> u64 {
    ticks.div_ceil(TICKS)
}

impl Reference {
    fn check(&mut self, q: Quota, n: u64, at: u64) -> Decision {
        let (t, tolerance, at) = (q.emission_interval_ticks(), q.tolerance_ticks(), at * TICKS);
        let used = self.tat.saturating_sub(at);
        let snapshot = |used: u64| Snapshot::new(q.burst(), tolerance.saturating_sub(used) / t, ceil_ns(used));
        if used + n * t <= tolerance {
            self.tat = at + used + n * t;
            Decision::allowed(snapshot(used + n * t))
        } else {
            Decision::denied(snapshot(used), ceil_ns(used + n * t - tolerance))
        }
    }
    /// A refund of `n` units of an admission charged under `then`, with `now` in
    /// force: each unit credits the smaller of its interval then and now (the same
    /// as now's if the quota did not change), never more than it was charged.
    fn refund(&mut self, now: Quota, then: Quota, n: u64, at: u64) {
        let at = at * TICKS;
        let used = self.tat.saturating_sub(at);
        let interval = now.emission_interval_ticks().min(then.emission_interval_ticks());
        if used > 0 {
            self.tat = at + used.saturating_sub(n * interval);
        }
    }
}

/// Runs `threads` concurrently under loom (initial quota: `burst`) and asserts that
/// the outcomes and final state equal those of some linearization.
fn assert_linearizable(burst: u64, threads: Vec<Vec<Op>>) {
    let threads = std::sync::Arc::new(threads);
    loom::model(move || {
        let algorithm = Arc::new(GcraAlgorithm::new(quota(burst), Nanos::ZERO));
        let state = Arc::new(algorithm.new_state());
        let clock = Arc::new(RealTime::new());
        let handles: Vec<_> = (0..threads.len())
            .map(|t| {
                let (algorithm, state, threads, clock) =
                    (algorithm.clone(), state.clone(), threads.clone(), clock.clone());
                thread::spawn(move || {
                    let mut last = None;
                    threads[t]
                        .iter()
                        .map(|&op| clock.time(|| run(&algorithm, &state, op, &mut last)))
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        let (seen, spans): (Vec<Vec<Outcome>>, Vec<Vec<Span>>) =
            handles.into_iter().map(|h| h.join().unwrap().into_iter().unzip()).unzip();
        let final_quota = algorithm.quota();
        let final_snapshot = algorithm.snapshot(&state, Nanos::ZERO);

        let matches = linearizations(&threads, &spans).into_iter().any(|history| {
            let mut reference = Reference { tat: 0 };
            let mut next = vec![0; threads.len()];
            let mut current = quota(burst);
            // The quota each thread's last check was admitted under, if it was (what
            // its refund gives back).
            let mut admitted: Vec<Option<Quota>> = vec![None; threads.len()];
            for (t, op) in history {
                let observed = seen[t][next[t]];
                next[t] += 1;
                let ok = match (op, observed) {
                    (Op::Check { n, at }, Outcome::Decided(d)) => {
                        admitted[t] = d.is_allowed().then(|| quota(d.limit()));
                        reference.check(quota(d.limit()), n, at) == d
                    }
                    (Op::Refund { n, at }, Outcome::Done) => {
                        if let Some(then) = admitted[t] {
                            reference.refund(current, then, n, at);
                        }
                        true
                    }
                    (Op::SetQuota { burst }, Outcome::Done) => {
                        current = quota(burst);
                        true
                    }
                    _ => false,
                };
                if !ok {
                    return false;
                }
            }
            let used = reference.tat;
            let expected = Snapshot::new(
                final_quota.burst(),
                final_quota.tolerance_ticks().saturating_sub(used) / final_quota.emission_interval_ticks(),
                ceil_ns(used),
            );
            expected == final_snapshot
        });
        assert!(matches, "no linearization explains {seen:?} (spans {spans:?}) ending in {final_snapshot:?}");
    });
}

#[test]
fn concurrent_checks_at_one_time_never_exceed_the_burst() {
    // 3 threads want 2 each from a bucket of 3: exactly one gets them.
    let check = Op::Check { n: 2, at: 0 };
    assert_linearizable(3, vec![vec![check], vec![check], vec![check]]);
}

#[test]
fn concurrent_checks_at_different_times() {
    // Refill between the readings: a slower reading never moves the TAT back.
    assert_linearizable(
        3,
        vec![
            vec![Op::Check { n: 3, at: 0 }, Op::Check { n: 1, at: 20 }],
            vec![Op::Check { n: 1, at: 10 }, Op::Check { n: 2, at: 40 }],
        ],
    );
}

#[test]
fn refund_racing_with_checks() {
    // The refunding thread is spawned last, so that loom interleaves the others'
    // checks between its check and its refund. Its refund gives back 2 if its check
    // was admitted, nothing if it was denied.
    assert_linearizable(
        3,
        vec![
            vec![Op::Check { n: 2, at: 0 }],
            vec![Op::Check { n: 1, at: 0 }],
            vec![Op::Check { n: 2, at: 0 }, Op::Refund { n: 2, at: 0 }],
        ],
    );
}

#[test]
fn quota_change_racing_with_checks() {
    // A check decides under burst 1 (T = 10 ns) or burst 3 (T = 20 ns), never a mix.
    assert_linearizable(
        1,
        vec![
            vec![Op::SetQuota { burst: 3 }],
            vec![Op::Check { n: 1, at: 0 }, Op::Check { n: 1, at: 0 }],
            vec![Op::Check { n: 1, at: 0 }],
        ],
    );
}

#[test]
fn refund_racing_with_a_quota_change() {
    // The first thread's unit is charged 10 ns under burst 1; the change to burst 3
    // (T = 20 ns) may land before its check, between its check and its refund, or
    // after the refund, and the third thread's check may add 20 ns of debt after
    // it. A refund credits the smaller of the unit's interval then and now: crediting
    // 20 ns for a unit charged 10 ns would give back the third thread's debt.
    assert_linearizable(
        1,
        vec![
            vec![Op::Check { n: 1, at: 0 }, Op::Refund { n: 1, at: 0 }],
            vec![Op::SetQuota { burst: 3 }],
            vec![Op::Check { n: 1, at: 0 }],
        ],
    );
}

#[test]
fn a_refund_of_another_limiters_decision_racing_a_timed_quota_change() {
    // The first thread is checked as the member of an all-of check that did not
    // decide it: its refund is handed the decision without its charge. A change to
    // burst 3 (T = 20 ns), recorded at reading 0, races it, and a third check adds
    // debt. The refund may credit the price under the quota in force only if that
    // quota has not changed since the decision: crediting 20 ns for a unit charged
    // 10 ns would give back the third check's debt.
    loom::model(|| {
        let algorithm = Arc::new(GcraAlgorithm::new(quota(1), Nanos::ZERO));
        let state = Arc::new(algorithm.new_state());
        let member = {
            let (algorithm, state) = (algorithm.clone(), state.clone());
            thread::spawn(move || {
                let d = algorithm.check_n(&state, 1, &Nanos::ZERO).unwrap();
                Algorithm::refund(&*algorithm, &state, 1, &d.without_charge(), &Nanos::ZERO).unwrap();
                d
            })
        };
        let change = {
            let algorithm = algorithm.clone();
            thread::spawn(move || algorithm.set_quota_with_clock(quota(3), &Nanos::ZERO))
        };
        let other = algorithm.check_n(&state, 1, &Nanos::ZERO).unwrap();
        let mine = member.join().unwrap();
        change.join().unwrap();
        // Debt in ns at reading 0: every admission's price, less the refund's credit.
        let price = |d: Decision| if d.is_allowed() { if d.limit() == 1 { 10 } else { 20 } } else { 0 };
        let used = algorithm.snapshot(&state, Nanos::ZERO).reset_after().as_nanos() as u64;
        assert!(used >= price(other), "the refund credited another admission's debt: {used} ns left");
        if mine.limit() == 3 {
            // Decided under the new quota, after the change: it cannot be told
            // whether the quota changed after it, so nothing comes back.
            assert_eq!(used, price(other) + price(mine));
        }
        assert!(used <= price(other) + price(mine));
    });
}

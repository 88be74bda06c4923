//! loom models of the window limiters' atomic protocols: the fixed window's and the
//! sliding counter's rollover CAS, the sliding log's sequence lock, and the striped
//! sliding window's fast path (spending a lease), slow path (granting, shrinking and
//! reclaiming leases) and rollover (closing, opening, returning leases).
//!
//! Each model runs a few operations per thread at explicit times (checks, and refunds
//! of a thread's last admission) and checks what the threads saw against an
//! independent sequential reference (plain integers):
//!
//! - the fixed window, the sliding counter and the log are linearizable: every field
//!   of every decision, and the final state, equal those of running the same
//!   operations one at a time in some order that keeps each thread's order;
//! - the striped limiter's admissions are linearizable (some order of the admitted
//!   operations is admitted in full by the reference, and leaves the reference in
//!   the state the limiter's snapshot shows: no request lost or counted twice),
//!   with no over-admission in exact mode and at most `batch − 1` in approximate
//!   mode. Its denials may be stricter than the reference while another thread holds
//!   a lease, so they are not required to match; but once every thread has finished,
//!   in exact mode, checks on a stripe no thread used must be decided exactly as the
//!   reference decides them (a denial then means no capacity is left anywhere).
//!
//! Readings that are earlier than one already used count as no time passing, in the
//! references as in the limiters.
#![cfg(all(loom, feature = "window"))]

use loom::sync::Arc;
use loom::thread;
use loom_tests::interleavings;
use std::time::Duration;
use weir_rl_core::{Algorithm, Decision, Nanos, Quota, Snapshot};
use weir_window::__private::{check_n_on_at, snapshot_at};
use weir_window::{
    FixedWindowAlgorithm, SlidingLogAlgorithm, SlidingWindowAlgorithm, StripedMode, StripedSlidingWindow,
};

/// Every model's window: 100 ns.
const P: u64 = 100;

fn quota(limit: u64) -> Quota {
    Quota::new(limit, Duration::from_nanos(P)).unwrap()
}

#[derive(Debug, Clone, Copy, PartialEq)]
struct Check {
    n: u64,
    at: u64,
    stripe: usize,
}

fn check(n: u64, at: u64) -> Step {
    Step::Check(Check { n, at, stripe: 0 })
}

fn on(stripe: usize, n: u64, at: u64) -> Step {
    Step::Check(Check { n, at, stripe })
}

/// A refund of `n` of the thread's last decision, at the reading `at`.
fn refund(n: u64, at: u64) -> Step {
    Step::Refund { n, at }
}

/// One operation of a model thread.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Step {
    Check(Check),
    /// Gives back `n` of what the thread's last check took (nothing if it was denied).
    Refund {
        n: u64,
        at: u64,
    },
}

/// What a step returned: a check's decision, or a refund's completion.
type Seen = Option<Decision>;

/// Runs `threads` concurrently under loom, each thread's steps through `run` (which
/// is handed the thread's last decision, for refunds), and hands what they saw to
/// `judge` along with the shared limiter.
fn model<L: Send + Sync + 'static>(
    threads: Vec<Vec<Step>>,
    make: impl Fn() -> L + Send + Sync + 'static,
    run: impl Fn(&L, Check) -> Decision + Send + Sync + 'static,
    give_back: impl Fn(&L, u64, &Decision, u64) + Send + Sync + 'static,
    judge: impl Fn(&L, &[Vec<Step>], &[Vec<Seen>]) + Send + Sync + 'static,
) {
    let threads = std::sync::Arc::new(threads);
    let run = std::sync::Arc::new(run);
    let give_back = std::sync::Arc::new(give_back);
    loom::model(move || {
        let limiter = Arc::new(make());
        let handles: Vec<_> = (0..threads.len())
            .map(|t| {
                let (limiter, threads, run, give_back) =
                    (limiter.clone(), threads.clone(), run.clone(), give_back.clone());
                thread::spawn(move || {
                    let mut last = None;
                    let mut seen = Vec::new();
                    for &step in &threads[t] {
                        seen.push(match step {
                            Step::Check(c) => {
                                let d = run(&limiter, c);
                                last = Some(d);
                                Some(d)
                            }
                            Step::Refund { n, at } => {
                                give_back(&limiter, n, &last.expect("a refund follows a check"), at);
                                None
                            }
                        });
                    }
                    seen
                })
            })
            .collect();
        let seen: Vec<Vec<Seen>> = handles.into_iter().map(|h| h.join().unwrap()).collect();
        judge(&limiter, &threads, &seen);
    });
}

/// A sequential reference that takes refunds: `check` returns the decision and,
/// when admitted, where the admission was counted (its window, or for the log its
/// effective time), which `refund` is handed back.
trait Reference {
    fn check(&mut self, c: Check) -> (Decision, u64);
    fn refund(&mut self, n: u64, counted_in: u64, at: u64);
}

/// Whether some interleaving of `threads` (keeping each thread's order) makes a
/// fresh `R` answer exactly `seen` and end in the state `accept` approves.
fn linearizable<R: Reference>(
    threads: &[Vec<Step>],
    seen: &[Vec<Seen>],
    fresh: impl Fn() -> R,
    accept: impl Fn(&R) -> bool,
) -> bool {
    interleavings(threads).into_iter().any(|history| {
        let mut reference = fresh();
        let mut next = vec![0; threads.len()];
        // Each thread's last admission: where it was counted.
        let mut last: Vec<Option<u64>> = vec![None; threads.len()];
        history.into_iter().all(|(t, step)| {
            let observed = seen[t][next[t]];
            next[t] += 1;
            match step {
                Step::Check(c) => {
                    let (decision, counted_in) = reference.check(c);
                    last[t] = decision.is_allowed().then_some(counted_in);
                    Some(decision) == observed
                }
                Step::Refund { n, at } => {
                    if let Some(counted_in) = last[t] {
                        reference.refund(n, counted_in, at);
                    }
                    observed.is_none()
                }
            }
        }) && accept(&reference)
    })
}

// ---------------------------------------------------------------------------------
// References: windows are `[k·P, (k+1)·P)`; a reading before the latest window used
// is decided at that window's start (the fixed window: anywhere in it).

#[derive(Debug, Default)]
struct FixedRef {
    limit: u64,
    window: u64,
    count: u64,
}

impl FixedRef {
    fn snapshot(&self, at: u64) -> Snapshot {
        let w = (at / P).max(self.window);
        let count = if w == self.window { self.count } else { 0 };
        Snapshot::new(self.limit, self.limit - count, if count > 0 { (w + 1) * P - at } else { 0 })
    }
}

impl Reference for FixedRef {
    fn check(&mut self, c: Check) -> (Decision, u64) {
        let w = (c.at / P).max(self.window);
        let count = if w == self.window { self.count } else { 0 };
        let end = (w + 1) * P - c.at;
        let decision = if count + c.n <= self.limit {
            (self.window, self.count) = (w, count + c.n);
            Decision::allowed(Snapshot::new(self.limit, self.limit - count - c.n, end))
        } else {
            Decision::denied(Snapshot::new(self.limit, self.limit - count, if count > 0 { end } else { 0 }), end)
        };
        (decision, w)
    }
    /// Only to the admission's window, while it is the current one.
    fn refund(&mut self, n: u64, window: u64, at: u64) {
        if (at / P).max(self.window) == window && self.window == window {
            self.count -= n.min(self.count);
        }
    }
}

#[derive(Debug, Default, Clone)]
struct SlidingRef {
    limit: u64,
    /// The latest window used, and the counts of it and the one before.
    window: u64,
    prev: u64,
    curr: u64,
}

impl SlidingRef {
    /// The window, elapsed time, previous and current counts a reading sees.
    fn view(&self, at: u64) -> (u64, u64, u64, u64) {
        let w = at / P;
        if w < self.window {
            (self.window, 0, self.prev, self.curr)
        } else if w == self.window {
            (w, at % P, self.prev, self.curr)
        } else if w == self.window + 1 {
            (w, at % P, self.curr, 0)
        } else {
            (w, at % P, 0, 0)
        }
    }
    /// prev·(P − e)/P + curr + n ≤ limit, in the sum form.
    fn fits(prev: u64, curr: u64, e: u64, n: u64, limit: u64) -> bool {
        prev * (P - e) + (curr + n) * P <= limit * P
    }
    fn snapshot(&self, at: u64) -> Snapshot {
        let (w, e, prev, curr) = self.view(at);
        let remaining = (0..=self.limit).rev().find(|&k| Self::fits(prev, curr, e, k, self.limit)).unwrap_or(0);
        let start = w * P;
        let reset = if curr > 0 {
            start + 2 * P - at
        } else if prev > 0 {
            start + P - at
        } else {
            0
        };
        Snapshot::new(self.limit, remaining, reset)
    }
    /// Admits or denies `c`; on denial, the first instant (scanned) at which it fits.
    fn check(&mut self, c: Check) -> Decision {
        let (w, e, prev, curr) = self.view(c.at);
        (self.window, self.prev, self.curr) = (w, prev, curr);
        if Self::fits(prev, curr, e, c.n, self.limit) {
            self.curr += c.n;
            return Decision::allowed(self.snapshot(c.at));
        }
        let start = w * P;
        let first = (start + e..start + 3 * P)
            .find(|&t| {
                let later = self.view(t);
                Self::fits(later.2, later.3, later.1, c.n, self.limit)
            })
            .unwrap();
        Decision::denied(self.snapshot(c.at), first - c.at)
    }
    /// Takes `n` off the count of window `window` if it is the current one or the
    /// previous one at `at`, moving to `at`'s window (as the limiter's CAS does)
    /// only if something was taken.
    fn give_back(&mut self, n: u64, window: u64, at: u64) {
        let (w, _, prev, curr) = self.view(at);
        let (prev2, curr2) = match w.checked_sub(window) {
            Some(0) => (prev, curr - n.min(curr)),
            Some(1) => (prev - n.min(prev), curr),
            _ => return,
        };
        if (prev2, curr2) != (prev, curr) {
            (self.window, self.prev, self.curr) = (w, prev2, curr2);
        }
    }
    /// Replays a check the limiter decided: an admitted one must fit (and is
    /// counted); a denied one only moves time forward (its reading was used).
    fn replay(&mut self, c: Check, admitted: bool) -> bool {
        let (w, e, prev, curr) = self.view(c.at);
        (self.window, self.prev, self.curr) = (w, prev, curr);
        if !admitted {
            return true;
        }
        Self::fits(prev, curr, e, c.n, self.limit) && {
            self.curr += c.n;
            true
        }
    }
}

impl Reference for SlidingRef {
    fn check(&mut self, c: Check) -> (Decision, u64) {
        let window = (c.at / P).max(self.window);
        (SlidingRef::check(self, c), window)
    }
    fn refund(&mut self, n: u64, window: u64, at: u64) {
        self.give_back(n, window, at);
    }
}

#[derive(Debug, Default)]
struct LogRef {
    limit: u64,
    entries: Vec<u64>,
    /// The latest admission's effective time: the floor of later readings (kept
    /// when a refund removes that admission's entries).
    newest: u64,
}

impl Reference for LogRef {
    fn check(&mut self, c: Check) -> (Decision, u64) {
        let at = c.at.max(self.newest);
        let live: Vec<u64> = self.entries.iter().copied().filter(|&s| s + P > at).collect();
        let snapshot = |live: &[u64]| {
            Snapshot::new(self.limit, self.limit - live.len() as u64, live.last().map_or(0, |s| s + P - c.at))
        };
        if live.len() as u64 + c.n <= self.limit {
            self.entries.extend(std::iter::repeat_n(at, c.n as usize));
            self.newest = at;
            let live: Vec<u64> = self.entries.iter().copied().filter(|&s| s + P > at).collect();
            return (Decision::allowed(snapshot(&live)), at);
        }
        let must_leave = (live.len() as u64 + c.n - self.limit) as usize;
        (Decision::denied(snapshot(&live), live[must_leave - 1] + P - c.at), at)
    }
    /// Removes up to `n` of the latest live entries stamped at or before `admitted`.
    fn refund(&mut self, n: u64, admitted: u64, at: u64) {
        let at = at.max(self.newest);
        for _ in 0..n {
            match self.entries.iter().rposition(|&s| s <= admitted && s + P > at) {
                Some(i) => {
                    self.entries.remove(i);
                }
                None => break,
            }
        }
    }
}

// ---------------------------------------------------------------------------------
// Fixed window: the rollover is the same CAS as an admission.

fn fixed_model(limit: u64, threads: Vec<Vec<Step>>) {
    model(
        threads,
        move || {
            let algorithm = FixedWindowAlgorithm::new(quota(limit), Nanos::ZERO).unwrap();
            let state = algorithm.new_state();
            (algorithm, state)
        },
        |(a, s), c| a.check_n(s, c.n, &Nanos::new(c.at)).unwrap(),
        |(a, s), n, d, at| a.refund(s, n, d, &Nanos::new(at)).unwrap(),
        move |(a, s), threads, seen| {
            let end = Nanos::new(3 * P - 1);
            let final_snapshot = a.snapshot(s, end);
            let ok = linearizable(
                threads,
                seen,
                || FixedRef { limit, ..FixedRef::default() },
                |r| r.snapshot(end.as_u64()) == final_snapshot,
            );
            assert!(ok, "no sequential order explains {seen:?}");
        },
    );
}

#[test]
fn fixed_window_concurrent_checks_in_one_window() {
    fixed_model(2, vec![vec![check(1, 10)], vec![check(2, 20)], vec![check(1, 30)]]);
}

#[test]
fn fixed_window_rollover_races_with_late_checks() {
    // Two threads move into window 1 while another still checks in window 0 (its
    // reading lags): the late check counts in window 1 if the rollover landed first.
    fixed_model(2, vec![vec![check(2, 50), check(1, 150)], vec![check(1, 120), check(1, 60)], vec![check(1, 90)]]);
}

#[test]
fn fixed_window_refund_races_with_checks_and_a_rollover() {
    // Thread 1 takes the whole of window 1 and gives 1 back in it (thread 0's check
    // there is admitted if it comes after); its second refund, read in window 2,
    // must not land in window 2's count, which thread 0 fills (the final snapshot,
    // at 299, shows that count). The refunding thread is spawned last, so that loom
    // interleaves the other thread's checks between its steps.
    fixed_model(2, vec![vec![check(1, 130), check(2, 220)], vec![check(2, 110), refund(1, 120), refund(1, 210)]]);
}

// ---------------------------------------------------------------------------------
// Sliding counter: rollover (curr → prev) in the admission CAS, and on denial.

fn sliding_model(limit: u64, threads: Vec<Vec<Step>>) {
    model(
        threads,
        move || {
            let algorithm = SlidingWindowAlgorithm::new(quota(limit), Nanos::ZERO).unwrap();
            let state = algorithm.new_state();
            (algorithm, state)
        },
        |(a, s), c| a.check_n(s, c.n, &Nanos::new(c.at)).unwrap(),
        |(a, s), n, d, at| a.refund(s, n, d, &Nanos::new(at)).unwrap(),
        move |(a, s), threads, seen| {
            let end = 3 * P + 50;
            let final_snapshot = a.snapshot(s, Nanos::new(end));
            let ok = linearizable(
                threads,
                seen,
                || SlidingRef { limit, ..SlidingRef::default() },
                |r| r.snapshot(end) == final_snapshot,
            );
            assert!(ok, "no sequential order explains {seen:?}");
        },
    );
}

#[test]
fn sliding_window_rollover_races_with_admissions() {
    sliding_model(3, vec![vec![check(2, 40), check(2, 150)], vec![check(1, 60), check(1, 170)], vec![check(2, 120)]]);
}

#[test]
fn sliding_window_denial_records_the_rollover() {
    // A denial in window 1 rolls the word; a lagging reading in window 0 must then be
    // decided at window 1's start (2 × 1.0 + 1 ≤ 3, counted in window 1), never in
    // window 0, where it would leave room for 2 more at 195 instead of none.
    // (The lagging reading follows the denial in program order: the harness orders
    // only by program order.)
    sliding_model(3, vec![vec![check(2, 50), check(3, 190), check(1, 60)], vec![check(2, 195)]]);
}

#[test]
fn sliding_window_refund_races_with_a_rollover() {
    // Thread 1's admission in window 1 is refunded from window 2: to the previous
    // count, whether or not thread 0's check has rolled the word into window 2
    // already; never to window 2's own count (which the final snapshot, at 350,
    // weighs as the previous window). If thread 0 comes first, thread 1's lagging
    // check is decided in window 2, where it is denied. (The refunding thread is
    // spawned last, as in the fixed window's model.)
    sliding_model(3, vec![vec![check(1, 290)], vec![check(3, 150), refund(2, 230)]]);
}

// ---------------------------------------------------------------------------------
// Sliding log: the sequence lock.

fn log_model(limit: u64, end: u64, threads: Vec<Vec<Step>>) {
    model(
        threads,
        move || {
            let algorithm = SlidingLogAlgorithm::new(quota(limit), Nanos::ZERO).unwrap();
            let state = algorithm.new_state();
            (algorithm, state)
        },
        |(a, s), c| a.check_n(s, c.n, &Nanos::new(c.at)).unwrap(),
        |(a, s), n, d, at| a.refund(s, n, d, &Nanos::new(at)).unwrap(),
        move |(a, s), threads, seen| {
            let final_snapshot = a.snapshot(s, Nanos::new(end));
            let ok = linearizable(
                threads,
                seen,
                || LogRef { limit, ..LogRef::default() },
                |r| {
                    let live: Vec<u64> = r.entries.iter().copied().filter(|&s| s + P > end).collect();
                    let expected =
                        Snapshot::new(limit, limit - live.len() as u64, live.last().map_or(0, |s| s + P - end));
                    expected == final_snapshot
                },
            );
            assert!(ok, "no sequential order explains {seen:?}");
        },
    );
}

#[test]
fn sliding_log_writers_race() {
    log_model(2, 150, vec![vec![check(1, 10)], vec![check(1, 20), check(1, 30)]]);
}

#[test]
fn sliding_log_expiry_races_with_a_writer() {
    log_model(2, 150, vec![vec![check(2, 10), check(1, 115)], vec![check(1, 105)]]);
}

#[test]
fn sliding_log_refund_races_with_a_writer() {
    // The refund removes thread 1's entry at 10, not thread 0's at 15 (moving that
    // one down if it landed first), while thread 0 writes and checks; at 112 the
    // final snapshot tells the two apart (10 has expired, 15 has not).
    log_model(2, 112, vec![vec![check(1, 15), check(1, 30)], vec![check(1, 10), refund(1, 20)]]);
}

// ---------------------------------------------------------------------------------
// Striped sliding window.

fn striped(limit: u64, stripes: usize, batch: u64, mode: StripedMode) -> StripedSlidingWindow<Nanos> {
    StripedSlidingWindow::builder(quota(limit))
        .stripes(stripes)
        .batch(batch)
        .mode(mode)
        .build_with_clock(Nanos::ZERO)
        .unwrap()
}

/// The striped limiter's judgement: in some order of the checks (keeping each
/// thread's order), the sliding reference with `limit + slack` (slack 0: exact mode)
/// admits every check the limiter admitted (denied checks only move time forward),
/// and ends in the state the limiter's snapshot shows at `end`.
///
/// In exact mode the denials are judged too, once the threads have finished: the
/// limiter has one stripe more than the threads use (`stripes` of theirs, rounded
/// up with the idle one to a power of two), and after they join, checks of 1 on the
/// idle stripe at the latest reading any thread used, repeated until one is denied,
/// must be decided exactly as the reference decides them after the threads' checks.
/// A denial there while capacity is left anywhere (a lease on some stripe that a
/// denial skipped) fails the model.
fn striped_model(limit: u64, stripes: usize, batch: u64, mode: StripedMode, end: u64, threads: Vec<Vec<Step>>) {
    let slack = match mode {
        StripedMode::Exact => 0,
        StripedMode::Approximate => batch - 1,
    };
    let at_of = |step: &Step| match *step {
        Step::Check(c) => c.at,
        Step::Refund { at, .. } => at,
    };
    assert!(
        threads.iter().flatten().all(|s| !matches!(s, Step::Check(c) if c.stripe >= stripes)),
        "threads use stripes 0..{stripes}"
    );
    let idle = stripes;
    let probe_at = threads.iter().flatten().map(at_of).max().unwrap_or(0);
    model(
        threads,
        move || striped(limit, stripes + 1, batch, mode),
        |l, c| check_n_on_at(l, c.stripe, c.n, Nanos::new(c.at)).unwrap(),
        |l, n, d, _| l.refund(n, d).unwrap(),
        move |l, threads, seen| {
            let final_snapshot = snapshot_at(l, Nanos::new(end));
            // Quiescence: every thread has finished. Probe the idle stripe.
            let mut probes = Vec::new();
            if mode == StripedMode::Exact {
                while probes.len() as u64 <= limit {
                    let allowed = check_n_on_at(l, idle, 1, Nanos::new(probe_at)).unwrap().is_allowed();
                    probes.push(allowed);
                    if !allowed {
                        break;
                    }
                }
            }
            let decided: Vec<Vec<(Step, bool)>> = threads
                .iter()
                .zip(seen)
                .map(|(steps, seen)| {
                    steps.iter().zip(seen).map(|(&s, d)| (s, d.is_some_and(|d| d.is_allowed()))).collect()
                })
                .collect();
            let ok = interleavings(&decided).into_iter().any(|history| {
                let mut reference = SlidingRef { limit: limit + slack, ..SlidingRef::default() };
                // Each thread's last admission: the window it was counted in.
                let mut last: Vec<Option<u64>> = vec![None; decided.len()];
                history.into_iter().all(|(t, (step, admitted))| match step {
                    Step::Check(c) => {
                        last[t] = admitted.then_some((c.at / P).max(reference.window));
                        reference.replay(c, admitted)
                    }
                    Step::Refund { n, at } => {
                        if let Some(window) = last[t] {
                            reference.give_back(n, window, at);
                        }
                        true
                    }
                }) && {
                    // The state must match with the true limit (slack only loosens admission).
                    let mut exact = SlidingRef { limit, ..reference.clone() };
                    let probe = Check { n: 1, at: probe_at, stripe: idle };
                    exact.snapshot(end).remaining() == final_snapshot.remaining()
                        && exact.snapshot(end).reset_after() == final_snapshot.reset_after()
                        && probes.iter().all(|&allowed| exact.check(probe).is_allowed() == allowed)
                }
            });
            assert!(
                ok,
                "{mode:?}: no order of the admitted checks fits: {seen:?}, final {final_snapshot:?}, \
                 then on the idle stripe at {probe_at}: {probes:?}"
            );
        },
    );
}

#[test]
fn striped_fast_path_on_a_shared_stripe() {
    // Frozen time; both threads use stripe 0. Leases of 2: the second admission on a
    // lease is a fast-path CAS on the stripe, racing with the other thread's own
    // fast path, its grant and its install.
    striped_model(
        3,
        2,
        2,
        StripedMode::Exact,
        50,
        vec![vec![on(0, 1, 10), on(0, 1, 10)], vec![on(0, 1, 10), on(0, 1, 10)]],
    );
}

#[test]
fn striped_fast_path_on_own_stripes() {
    // Limit 3 with leases of 2: the second grant must shrink to the 1 left.
    striped_model(
        3,
        2,
        2,
        StripedMode::Exact,
        50,
        vec![vec![on(0, 1, 10), on(0, 1, 10)], vec![on(1, 1, 10), on(1, 1, 10)]],
    );
}

#[test]
fn striped_slow_path_shrinks_and_reclaims_leases() {
    // Limit 3, leases of up to 2: the last capacity is granted in shrunken leases, and
    // a check that finds nothing left reclaims the other stripe's lease before denying.
    striped_model(
        3,
        2,
        2,
        StripedMode::Exact,
        50,
        vec![vec![on(0, 1, 10), on(0, 2, 10)], vec![on(1, 1, 10), on(1, 1, 10)]],
    );
}

#[test]
fn striped_denial_races_with_a_lease_being_installed() {
    // Limit 2, leases of 2: thread 0's grant takes both tokens (1 admitted, 1 leased
    // to stripe 0), and thread 1, finding none left, reclaims before denying. Its pass
    // may read stripe 0 after the grant but before the lease lands there and find
    // nothing: that token must still be found by a later check on another stripe.
    striped_model(2, 2, 2, StripedMode::Exact, 50, vec![vec![on(0, 1, 10)], vec![on(1, 1, 10)]]);
}

#[test]
fn striped_slow_path_three_threads_at_the_limit() {
    striped_model(2, 2, 2, StripedMode::Exact, 50, vec![vec![on(0, 1, 10)], vec![on(1, 2, 10)], vec![on(1, 1, 10)]]);
}

#[test]
fn striped_rollover_with_leases_outstanding() {
    // Window 0's leases are outstanding when window 1 opens: they are spent in window 0
    // (CAS first) or returned to it, never lost, never spent in window 1.
    striped_model(
        2,
        2,
        2,
        StripedMode::Exact,
        250,
        vec![vec![on(0, 1, 10), on(0, 1, 120)], vec![on(1, 1, 20), on(1, 2, 130)]],
    );
}

#[test]
fn striped_rollover_races_with_a_lagging_reading() {
    striped_model(
        3,
        2,
        2,
        StripedMode::Exact,
        250,
        vec![vec![on(0, 1, 30), on(0, 1, 150)], vec![on(1, 2, 140), on(1, 1, 40)]],
    );
}

#[test]
fn striped_lease_returned_while_its_window_closes() {
    // Both threads use stripe 0, limit 4, leases of 2. In window 0 both are granted a
    // lease (1 spent, 1 leased); thread 0's install finds thread 1's lease there and
    // returns its token, while thread 1, checking in window 1, closes window 0, copies
    // its count and opens window 1. The returned token must not stay counted in window
    // 0's count, which weighs on window 1's checks.
    striped_model(4, 1, 2, StripedMode::Exact, 150, vec![vec![on(0, 1, 10)], vec![on(0, 1, 20), on(0, 1, 120)]]);
}

#[test]
fn striped_previous_count_is_read_after_the_rollover() {
    // Thread 0 fills window [100, 200) and moves the limiter on to [200, 300) while
    // thread 1 checks at 205: however the reads interleave, thread 1 must weigh the
    // full previous count (2 × 0.95), never a value read before the last grant.
    striped_model(2, 2, 1, StripedMode::Exact, 250, vec![vec![on(0, 2, 150), on(0, 1, 210)], vec![on(1, 1, 205)]]);
}

#[test]
fn striped_approximate_over_admits_less_than_one_batch() {
    striped_model(
        3,
        2,
        2,
        StripedMode::Approximate,
        50,
        vec![vec![on(0, 1, 10), on(0, 1, 10)], vec![on(1, 2, 10)], vec![on(1, 1, 10)]],
    );
}

#[test]
fn striped_refund_races_with_a_rollover() {
    // Thread 1's admission in window 0 is refunded in window 1: to `current` if
    // window 0 is still open, to `previous` once thread 0 has closed and copied it,
    // never to window 1's count.
    striped_model(2, 2, 2, StripedMode::Exact, 150, vec![vec![on(0, 2, 130)], vec![on(1, 2, 10), refund(1, 120)]]);
}

//! loom models of the window limiters' atomic protocols: the fixed window's and the
//! sliding counter's rollover CAS, the sliding log's sequence lock, and the striped
//! sliding window's fast path (spending a lease), slow path (granting, shrinking and
//! reclaiming leases) and rollover (closing, opening, returning leases).
//!
//! Each model runs a few operations per thread at explicit times and checks what
//! the threads saw against an independent sequential reference (plain integers):
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
use weir_core::{Algorithm, Decision, Nanos, Quota, Snapshot};
use weir_window::{
    FixedWindowAlgorithm, SlidingLogAlgorithm, SlidingWindowAlgorithm, StripedBuilder, StripedMode,
    StripedSlidingWindow,
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

fn check(n: u64, at: u64) -> Check {
    Check { n, at, stripe: 0 }
}

fn on(stripe: usize, n: u64, at: u64) -> Check {
    Check { n, at, stripe }
}

/// Runs `threads` concurrently under loom, each thread's checks through `run`, and
/// hands what they saw to `judge` along with the shared limiter.
fn model<L: Send + Sync + 'static>(
    threads: Vec<Vec<Check>>,
    make: impl Fn() -> L + Send + Sync + 'static,
    run: impl Fn(&L, Check) -> Decision + Send + Sync + 'static,
    judge: impl Fn(&L, &[Vec<Check>], &[Vec<Decision>]) + Send + Sync + 'static,
) {
    let threads = std::sync::Arc::new(threads);
    let run = std::sync::Arc::new(run);
    loom::model(move || {
        let limiter = Arc::new(make());
        let handles: Vec<_> = (0..threads.len())
            .map(|t| {
                let (limiter, threads, run) = (limiter.clone(), threads.clone(), run.clone());
                thread::spawn(move || threads[t].iter().map(|&c| run(&limiter, c)).collect::<Vec<_>>())
            })
            .collect();
        let seen: Vec<Vec<Decision>> = handles.into_iter().map(|h| h.join().unwrap()).collect();
        judge(&limiter, &threads, &seen);
    });
}

/// Whether some interleaving of `threads` (keeping each thread's order) makes a
/// fresh `R` answer exactly `seen` and end in the state `accept` approves.
fn linearizable<R>(
    threads: &[Vec<Check>],
    seen: &[Vec<Decision>],
    fresh: impl Fn() -> R,
    decide: impl Fn(&mut R, Check) -> Decision,
    accept: impl Fn(&R) -> bool,
) -> bool {
    interleavings(threads).into_iter().any(|history| {
        let mut reference = fresh();
        let mut next = vec![0; threads.len()];
        history.into_iter().all(|(t, c)| {
            let observed = seen[t][next[t]];
            next[t] += 1;
            decide(&mut reference, c) == observed
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
    fn check(&mut self, c: Check) -> Decision {
        let w = (c.at / P).max(self.window);
        let count = if w == self.window { self.count } else { 0 };
        let end = (w + 1) * P - c.at;
        if count + c.n <= self.limit {
            (self.window, self.count) = (w, count + c.n);
            Decision::allowed(Snapshot::new(self.limit, self.limit - count - c.n, end))
        } else {
            Decision::denied(Snapshot::new(self.limit, self.limit - count, if count > 0 { end } else { 0 }), end)
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

#[derive(Debug, Default)]
struct LogRef {
    limit: u64,
    entries: Vec<u64>,
}

impl LogRef {
    fn check(&mut self, c: Check) -> Decision {
        let at = c.at.max(self.entries.last().copied().unwrap_or(0));
        let live: Vec<u64> = self.entries.iter().copied().filter(|&s| s + P > at).collect();
        let snapshot = |live: &[u64]| {
            Snapshot::new(self.limit, self.limit - live.len() as u64, live.last().map_or(0, |s| s + P - c.at))
        };
        if live.len() as u64 + c.n <= self.limit {
            self.entries.extend(std::iter::repeat_n(at, c.n as usize));
            let live: Vec<u64> = self.entries.iter().copied().filter(|&s| s + P > at).collect();
            return Decision::allowed(snapshot(&live));
        }
        let must_leave = (live.len() as u64 + c.n - self.limit) as usize;
        Decision::denied(snapshot(&live), live[must_leave - 1] + P - c.at)
    }
}

// ---------------------------------------------------------------------------------
// Fixed window: the rollover is the same CAS as an admission.

fn fixed_model(limit: u64, threads: Vec<Vec<Check>>) {
    model(
        threads,
        move || {
            let algorithm = FixedWindowAlgorithm::new(quota(limit), Nanos::ZERO).unwrap();
            let state = algorithm.new_state();
            (algorithm, state)
        },
        |(a, s), c| a.check_n(s, c.n, &Nanos::new(c.at)).unwrap(),
        move |(a, s), threads, seen| {
            let end = Nanos::new(3 * P - 1);
            let final_snapshot = a.snapshot(s, end);
            let ok = linearizable(
                threads,
                seen,
                || FixedRef { limit, ..FixedRef::default() },
                |r, c| r.check(c),
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

// ---------------------------------------------------------------------------------
// Sliding counter: rollover (curr → prev) in the admission CAS, and on denial.

fn sliding_model(limit: u64, threads: Vec<Vec<Check>>) {
    model(
        threads,
        move || {
            let algorithm = SlidingWindowAlgorithm::new(quota(limit), Nanos::ZERO).unwrap();
            let state = algorithm.new_state();
            (algorithm, state)
        },
        |(a, s), c| a.check_n(s, c.n, &Nanos::new(c.at)).unwrap(),
        move |(a, s), threads, seen| {
            let end = 3 * P + 50;
            let final_snapshot = a.snapshot(s, Nanos::new(end));
            let ok = linearizable(
                threads,
                seen,
                || SlidingRef { limit, ..SlidingRef::default() },
                |r, c| r.check(c),
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

// ---------------------------------------------------------------------------------
// Sliding log: the sequence lock.

fn log_model(limit: u64, threads: Vec<Vec<Check>>) {
    model(
        threads,
        move || {
            let algorithm = SlidingLogAlgorithm::new(quota(limit), Nanos::ZERO).unwrap();
            let state = algorithm.new_state();
            (algorithm, state)
        },
        |(a, s), c| a.check_n(s, c.n, &Nanos::new(c.at)).unwrap(),
        move |(a, s), threads, seen| {
            let end = 150;
            let final_snapshot = a.snapshot(s, Nanos::new(end));
            let ok = linearizable(
                threads,
                seen,
                || LogRef { limit, entries: Vec::new() },
                |r, c| r.check(c),
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
    log_model(2, vec![vec![check(1, 10)], vec![check(1, 20), check(1, 30)]]);
}

#[test]
fn sliding_log_expiry_races_with_a_writer() {
    log_model(2, vec![vec![check(2, 10), check(1, 115)], vec![check(1, 105)]]);
}

// ---------------------------------------------------------------------------------
// Striped sliding window.

fn striped(limit: u64, stripes: usize, batch: u64, mode: StripedMode) -> StripedSlidingWindow<Nanos> {
    StripedBuilder::new(quota(limit)).stripes(stripes).batch(batch).mode(mode).build_with_clock(Nanos::ZERO).unwrap()
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
fn striped_model(limit: u64, stripes: usize, batch: u64, mode: StripedMode, end: u64, threads: Vec<Vec<Check>>) {
    let slack = match mode {
        StripedMode::Exact => 0,
        StripedMode::Approximate => batch - 1,
    };
    assert!(threads.iter().flatten().all(|c| c.stripe < stripes), "threads use stripes 0..{stripes}");
    let idle = stripes;
    let probe_at = threads.iter().flatten().map(|c| c.at).max().unwrap_or(0);
    model(
        threads,
        move || striped(limit, stripes + 1, batch, mode),
        |l, c| l.check_n_on_at(c.stripe, c.n, Nanos::new(c.at)).unwrap(),
        move |l, threads, seen| {
            let final_snapshot = l.snapshot_at(Nanos::new(end));
            // Quiescence: every thread has finished. Probe the idle stripe.
            let mut probes = Vec::new();
            if mode == StripedMode::Exact {
                while probes.len() as u64 <= limit {
                    let allowed = l.check_n_on_at(idle, 1, Nanos::new(probe_at)).unwrap().is_allowed();
                    probes.push(allowed);
                    if !allowed {
                        break;
                    }
                }
            }
            let decided: Vec<Vec<(Check, bool)>> = threads
                .iter()
                .zip(seen)
                .map(|(checks, decisions)| checks.iter().zip(decisions).map(|(&c, d)| (c, d.is_allowed())).collect())
                .collect();
            let ok = interleavings(&decided).into_iter().any(|history| {
                let mut reference = SlidingRef { limit: limit + slack, ..SlidingRef::default() };
                history.into_iter().all(|(_, (c, admitted))| reference.replay(c, admitted)) && {
                    // The state must match with the true limit (slack only loosens admission).
                    let mut exact = SlidingRef { limit, ..reference.clone() };
                    exact.snapshot(end).remaining() == final_snapshot.remaining()
                        && exact.snapshot(end).reset_after() == final_snapshot.reset_after()
                        && probes.iter().all(|&allowed| exact.check(on(idle, 1, probe_at)).is_allowed() == allowed)
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

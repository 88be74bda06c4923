//! Refunds on every window limiter, with a hand-driven clock: capacity goes back to
//! the window the admission was counted in, and only while that window still weighs
//! on decisions; a refund never lets more through than if the refunded requests had
//! never been admitted.

use weir_rl_core::{Algorithm, Clock, InsufficientCapacity, Limiter, ManualClock, Nanos, Quota};
use weir_window::{
    FixedWindow, FixedWindowAlgorithm, SlidingLog, SlidingLogAlgorithm, SlidingWindow, SlidingWindowAlgorithm,
    StripedMode, StripedSlidingWindow,
};

const SECOND: u64 = 1_000_000_000;

/// The clock reading of a time of day, for a clock whose origin is midnight.
fn at(h: u64, m: u64, s: u64) -> Nanos {
    Nanos::new(((h * 60 + m) * 60 + s) * SECOND)
}

fn admitted(limiter: &dyn Limiter, requests: usize) -> usize {
    (0..requests).filter(|_| limiter.check().is_allowed()).count()
}

/// Every window limiter, 10 per minute, on `clock`, by name.
fn all(clock: &ManualClock) -> Vec<(&'static str, Box<dyn Limiter>)> {
    let quota = Quota::per_minute(10).unwrap();
    let striped = |mode, batch| {
        StripedSlidingWindow::builder(quota).stripes(2).batch(batch).mode(mode).build_with_clock(clock.clone()).unwrap()
    };
    vec![
        ("fixed", Box::new(FixedWindow::with_clock(quota, clock.clone()).unwrap())),
        ("sliding", Box::new(SlidingWindow::with_clock(quota, clock.clone()).unwrap())),
        ("log", Box::new(SlidingLog::with_clock(quota, clock.clone()).unwrap())),
        ("striped-exact", Box::new(striped(StripedMode::Exact, 3))),
        ("striped-approximate", Box::new(striped(StripedMode::Approximate, 1))),
    ]
}

#[test]
fn a_refund_in_the_same_window_gives_the_capacity_back_once() {
    for (name, limiter) in all(&ManualClock::starting_at(at(12, 0, 10))) {
        let admission = limiter.check_n(10).unwrap();
        assert!(admission.is_allowed(), "{name}");
        assert!(limiter.check().is_denied(), "{name}");
        limiter.refund(4, &admission).unwrap();
        assert_eq!(limiter.snapshot().remaining(), 4, "{name}");
        assert_eq!(admitted(&*limiter, 100), 4, "{name}: exactly the 4 given back");
    }
}

#[test]
fn a_refund_never_gives_back_more_than_was_counted() {
    for (name, limiter) in all(&ManualClock::starting_at(at(12, 0, 10))) {
        let admission = limiter.check_n(3).unwrap();
        limiter.refund(10, &admission).unwrap(); // more than the admission took: back to empty, no further
        assert_eq!(limiter.snapshot().remaining(), 10, "{name}");
        assert_eq!(admitted(&*limiter, 100), 10, "{name}: never beyond the limit");
    }
}

#[test]
fn a_denial_refunds_nothing_and_too_much_is_an_error() {
    for (name, limiter) in all(&ManualClock::starting_at(at(12, 0, 10))) {
        assert!(limiter.check_n(10).unwrap().is_allowed());
        let denied = limiter.check();
        assert!(denied.is_denied(), "{name}");
        limiter.refund(5, &denied).unwrap();
        assert_eq!(admitted(&*limiter, 100), 0, "{name}: a denial consumed nothing");
        assert_eq!(limiter.refund(11, &denied), Err(InsufficientCapacity { requested: 11, capacity: 10 }), "{name}");
        limiter.refund(0, &denied).unwrap();
    }
}

/// 10 admitted at 12:00:50, refunded in the next window at 12:01:10. The fixed
/// window's old window no longer matters: nothing changes. The sliding counters
/// still weigh it (10 × 50/60 = 8.3 of it), and take 6 off the previous count
/// (4 × 50/60 = 3.3: 6 admitted instead of 1). The log still holds the entries, and
/// removes 6 of them. A second refund of 6 after that: the fixed window still gives
/// nothing to the new window; the others take what is left of the old admission.
#[test]
fn after_a_rollover_the_refund_goes_to_the_window_it_was_counted_in() {
    // (name, admitted without a refund, with one; after a second refund, without the
    // first and with it)
    for (name, fresh, refunded, second_without, second_with) in [
        ("fixed", 10, 10, 0, 0),
        ("sliding", 1, 6, 5, 4),
        ("log", 0, 6, 6, 4),
        ("striped-exact", 1, 6, 5, 4),
        ("striped-approximate", 1, 6, 5, 4),
    ] {
        for refund in [false, true] {
            let clock = ManualClock::starting_at(at(12, 0, 50));
            let limiter = all(&clock).into_iter().find(|(n, _)| *n == name).unwrap().1;
            let admission = limiter.check_n(10).unwrap();
            assert!(admission.is_allowed(), "{name}");
            clock.set(at(12, 1, 10));
            if refund {
                limiter.refund(6, &admission).unwrap();
            }
            let expected = if refund { refunded } else { fresh };
            assert_eq!(admitted(&*limiter, 100), expected, "{name}, refunded: {refund}");
            limiter.refund(6, &admission).unwrap();
            let expected = if refund { second_with } else { second_without };
            assert_eq!(admitted(&*limiter, 100), expected, "{name}, refunded again: {refund}");
        }
    }
}

/// 10 admitted at 12:00:50, 5 at 12:01:55, and the first admission refunded at
/// 12:02:10, two windows later: its window weighs on nothing any more (and the
/// log's entries expired at 12:01:50), so the refund gives nothing to the windows
/// that do count.
#[test]
fn two_windows_later_a_refund_gives_nothing() {
    for (name, limiter_clock) in ["fixed", "sliding", "log", "striped-exact", "striped-approximate"]
        .into_iter()
        .map(|name| (name, ManualClock::starting_at(at(12, 0, 50))))
    {
        let limiter = all(&limiter_clock).into_iter().find(|(n, _)| *n == name).unwrap().1;
        let admission = limiter.check_n(10).unwrap();
        limiter_clock.set(at(12, 1, 55));
        assert!(limiter.check_n(5).unwrap().is_allowed(), "{name}");
        limiter_clock.set(at(12, 2, 10));
        let before = admitted(&*limiter, 100);
        assert!(before > 0, "{name}");
        limiter.refund(10, &admission).unwrap();
        assert_eq!(admitted(&*limiter, 100), 0, "{name}: the refund gave something to a later window");
    }
}

/// A stale refund of an admission in window 0 while the state already counts window
/// 1: nothing for the fixed window; the sliding counter's previous count.
#[test]
fn the_window_counts_of_the_algorithm_states() {
    let quota = Quota::per_second(10).unwrap();
    let fixed = FixedWindowAlgorithm::new(quota, Nanos::ZERO).unwrap();
    let sliding = SlidingWindowAlgorithm::new(quota, Nanos::ZERO).unwrap();
    let (f, s) = (fixed.new_state(), sliding.new_state());
    let early = Nanos::new(SECOND / 2);
    let late = Nanos::new(SECOND + SECOND / 2);
    let a = fixed.check_n(&f, 10, &early).unwrap();
    let b = sliding.check_n(&s, 10, &early).unwrap();
    assert_eq!((a.decided_at(), b.decided_at()), (early, early));
    assert!(fixed.check_n(&f, 10, &late).unwrap().is_allowed()); // window 1 is full
    assert!(sliding.check_n(&s, 5, &late).unwrap().is_allowed()); // 10 × 0.5 + 5
    fixed.refund(&f, 10, &a, &late).unwrap();
    sliding.refund(&s, 10, &b, &late).unwrap();
    assert!(fixed.check(&f, &late).is_denied(), "window 0's refund must not land in window 1");
    assert_eq!(sliding.snapshot(&s, late).remaining(), 5, "the previous count, emptied");
}

/// A reading that lags the window the state has moved to is decided in that window
/// (no time passing), and the decision is stamped with that window's start, so a
/// refund of it goes to that window.
#[test]
fn a_lagging_admission_is_refunded_to_the_window_it_counted_in() {
    let quota = Quota::per_second(10).unwrap();
    let fixed = FixedWindowAlgorithm::new(quota, Nanos::ZERO).unwrap();
    let sliding = SlidingWindowAlgorithm::new(quota, Nanos::ZERO).unwrap();
    let (f, s) = (fixed.new_state(), sliding.new_state());
    let late = Nanos::new(SECOND + 1);
    let lagging = Nanos::new(SECOND / 2);
    assert!(fixed.check(&f, &late).is_allowed());
    assert!(sliding.check(&s, &late).is_allowed());
    let a = fixed.check_n(&f, 9, &lagging).unwrap();
    let b = sliding.check_n(&s, 9, &lagging).unwrap();
    assert!(a.is_allowed() && b.is_allowed());
    assert_eq!((a.decided_at(), b.decided_at()), (Nanos::new(SECOND), Nanos::new(SECOND)));
    fixed.refund(&f, 9, &a, &late).unwrap();
    sliding.refund(&s, 9, &b, &late).unwrap();
    assert_eq!(fixed.snapshot(&f, late).remaining(), 9);
    assert_eq!(sliding.snapshot(&s, late).remaining(), 9);
}

/// The log removes the entries of the refunded admission (the latest ones at or
/// before its time), not later admissions' entries: those would expire later, and
/// removing them instead would let more through once the refunded ones expire.
#[test]
fn the_log_removes_the_admissions_own_entries() {
    let clock = ManualClock::starting_at(at(12, 0, 0));
    let log = SlidingLog::with_clock(Quota::per_minute(10).unwrap(), clock.clone()).unwrap();
    clock.set(at(12, 0, 10));
    let a = log.check_n(3).unwrap();
    clock.set(at(12, 0, 20));
    assert!(log.check_n(7).unwrap().is_allowed());
    log.refund(3, &a).unwrap();
    clock.set(at(12, 0, 30));
    assert_eq!(admitted(&log, 100), 3);
    clock.set(at(12, 1, 15)); // a's entries would have expired by now; b's 7 and these 3 have not
    assert_eq!(admitted(&log, 100), 0);
    clock.set(at(12, 1, 25)); // b's have
    assert_eq!(admitted(&log, 100), 7);
}

/// Removing entries once the ring has wrapped: the positions that become the oldest
/// get stand-ins that are expired, and the entries after the removed ones move down.
#[test]
fn the_log_refunds_after_its_ring_wraps() {
    let secs = |s: u64| Nanos::new(s * SECOND);
    let clock = ManualClock::new();
    let log = SlidingLog::with_clock(Quota::per_minute(3).unwrap(), clock.clone()).unwrap();
    let mut admissions = Vec::new();
    for s in [5, 10, 20, 66] {
        clock.set(secs(s));
        let d = log.check();
        assert!(d.is_allowed(), "at {s}");
        admissions.push(d);
    }
    assert!(log.check().is_denied(), "10, 20 and 66 are live at 66");
    log.refund(1, &admissions[1]).unwrap(); // the entry at 10
    clock.set(secs(67));
    assert_eq!(admitted(&log, 10), 1, "20 and 66 are live");
    clock.set(secs(79));
    assert_eq!(admitted(&log, 10), 0);
    clock.set(secs(80)); // 20 expires
    assert_eq!(admitted(&log, 10), 1);
    let s = log.snapshot();
    assert_eq!((s.remaining(), s.reset_after().as_secs()), (0, 60), "66, 67 and 80 are live; 80 leaves last");
}

/// The snapshot's reset is the newest entry's, after a refund removed the newest.
#[test]
fn the_log_resets_from_its_newest_remaining_entry() {
    let secs = |s: u64| Nanos::new(s * SECOND);
    let clock = ManualClock::new();
    let log = SlidingLog::with_clock(Quota::per_minute(3).unwrap(), clock.clone()).unwrap();
    assert!(log.check().is_allowed());
    clock.set(secs(30));
    let newest = log.check();
    log.refund(1, &newest).unwrap();
    let s = log.snapshot();
    assert_eq!((s.remaining(), s.reset_after().as_secs()), (2, 30), "the entry at 0 leaves at 60");
}

#[test]
fn a_refund_on_a_retired_state_changes_nothing() {
    let quota = Quota::per_second(10).unwrap();
    let now = Nanos::new(5);
    let fixed = FixedWindowAlgorithm::new(quota, Nanos::ZERO).unwrap();
    let sliding = SlidingWindowAlgorithm::new(quota, Nanos::ZERO).unwrap();
    let log = SlidingLogAlgorithm::new(quota, Nanos::ZERO).unwrap();
    let (f, s, l) = (fixed.new_state(), sliding.new_state(), log.new_state());
    let a = fixed.check(&f, &now);
    let b = sliding.check(&s, &now);
    let c = log.check(&l, &now);
    let later = Nanos::new(3 * SECOND);
    use weir_rl_core::Retire;
    assert!(fixed.try_retire(&f, later) && sliding.try_retire(&s, later) && log.try_retire(&l, later));
    fixed.refund(&f, 1, &a, &later).unwrap();
    sliding.refund(&s, 1, &b, &later).unwrap();
    log.refund(&l, 1, &c, &later).unwrap();
    assert!(fixed.is_retired(&f) && sliding.is_retired(&s) && log.is_retired(&l));
}

/// Every window limiter's decisions say when they were made.
#[test]
fn decisions_are_stamped_with_their_reading() {
    let clock = ManualClock::starting_at(at(12, 0, 10));
    for (name, limiter) in all(&clock) {
        assert_eq!(limiter.check().decided_at(), clock.now(), "{name}: allowed");
        assert_eq!(limiter.check_n(0).unwrap().decided_at(), clock.now(), "{name}: zero");
        assert!(limiter.check_n(9).unwrap().is_allowed());
        assert_eq!(limiter.check().decided_at(), clock.now(), "{name}: denied");
    }
}

//! Every documented behaviour of the window limiters, with a hand-driven clock:
//! the worked examples of the write-ups, the fields of every decision, exact retry
//! times, errors, and inputs at the edges (u64::MAX, Nanos::MAX, clocks stepping
//! back).

use std::time::Duration;
use weir_rl_core::{Algorithm, Clock, Decision, InsufficientCapacity, Limiter, ManualClock, Nanos, Quota};
use weir_window::{
    FixedWindow, FixedWindowAlgorithm, SlidingLog, SlidingLogAlgorithm, SlidingWindow, SlidingWindowAlgorithm,
    StripedMode, StripedSlidingWindow, WindowError,
};

const SECOND: u64 = 1_000_000_000;

/// The clock reading of a time of day, for a clock whose origin is midnight.
fn at(h: u64, m: u64, s: u64) -> Nanos {
    Nanos::new(((h * 60 + m) * 60 + s) * SECOND)
}

fn admitted(limiter: &dyn Limiter, requests: usize) -> usize {
    (0..requests).filter(|_| limiter.check().is_allowed()).count()
}

/// Every limiter of the crate enforcing `quota` on `clock`, by name.
fn all(quota: Quota, clock: &ManualClock) -> Vec<(&'static str, Box<dyn Limiter>)> {
    vec![
        ("fixed", Box::new(FixedWindow::with_clock(quota, clock.clone()).unwrap())),
        ("sliding", Box::new(SlidingWindow::with_clock(quota, clock.clone()).unwrap())),
        ("log", Box::new(SlidingLog::with_clock(quota, clock.clone()).unwrap())),
        ("striped-exact", Box::new(striped(quota, clock, StripedMode::Exact))),
        ("striped-approximate", Box::new(striped(quota, clock, StripedMode::Approximate))),
    ]
}

fn striped(quota: Quota, clock: &ManualClock, mode: StripedMode) -> StripedSlidingWindow<ManualClock> {
    StripedSlidingWindow::builder(quota).stripes(4).batch(1).mode(mode).build_with_clock(clock.clone()).unwrap()
}

// ---------------------------------------------------------------------------------
// The worked examples.

/// 100 per minute: 100 at 12:00:55 and 100 at 12:01:05. The fixed window admits
/// all 200 (the boundary burst); the sliding counter only 8 of the second batch
/// (100 × 55/60 = 91.7 still counts); the sliding log none.
#[test]
fn worked_example_boundary_burst() {
    let quota = Quota::per_minute(100).unwrap();
    for (name, second_batch) in [("fixed", 100), ("sliding", 8), ("log", 0), ("striped-exact", 8)] {
        let clock = ManualClock::starting_at(at(12, 0, 0));
        let limiter = all(quota, &clock).into_iter().find(|(n, _)| *n == name).unwrap().1;
        clock.set(at(12, 0, 55));
        assert_eq!(admitted(&*limiter, 100), 100, "{name}: the first batch");
        clock.set(at(12, 1, 5));
        assert_eq!(admitted(&*limiter, 100), second_batch, "{name}: the second batch");
    }
}

/// The sliding counter, 100 per minute: previous window 80, current 30, 45 s into
/// the current window: the estimate is 80 × 0.25 + 30 = 50, so a request is admitted.
#[test]
fn worked_example_sliding_estimate() {
    let clock = ManualClock::starting_at(at(12, 0, 10));
    let limiter = SlidingWindow::with_clock(Quota::per_minute(100).unwrap(), clock.clone()).unwrap();
    assert!(limiter.check_n(80).unwrap().is_allowed(), "80 in the 12:00 window");
    clock.set(at(12, 1, 10)); // 80 × 50/60 = 66.7 + 30 ≤ 100
    assert!(limiter.check_n(30).unwrap().is_allowed(), "30 in the 12:01 window");
    clock.set(at(12, 1, 45));
    assert_eq!(limiter.snapshot().remaining(), 50, "estimate 80 × 0.25 + 30 = 50");
    let d = limiter.check();
    assert!(d.is_allowed());
    assert_eq!(d.remaining(), 49);
    assert!(limiter.check_n(49).unwrap().is_allowed());
    assert!(limiter.check().is_denied(), "exactly 100 by the estimate");

    // The same through the striped limiter (exact mode, any batch).
    let clock = ManualClock::starting_at(at(12, 0, 10));
    let striped = StripedSlidingWindow::builder(Quota::per_minute(100).unwrap())
        .stripes(4)
        .batch(16)
        .build_with_clock(clock.clone())
        .unwrap();
    assert!(striped.check_n_on(1, 80).unwrap().is_allowed());
    clock.set(at(12, 1, 10));
    assert!(striped.check_n_on(2, 30).unwrap().is_allowed());
    clock.set(at(12, 1, 45));
    assert_eq!(striped.snapshot().remaining(), 50);
    assert_eq!((0..100).filter(|i| striped.check_on(*i).is_allowed()).count(), 50);
}

/// The sliding log, 5 per 60 s: admitted at 12:04:40, 12:05:00, 12:05:10, 12:05:20,
/// 12:05:25; a request at 12:05:30 is denied until 12:05:40.
#[test]
fn worked_example_sliding_log() {
    let clock = ManualClock::starting_at(at(12, 4, 40));
    let limiter = SlidingLog::with_clock(Quota::new(5, Duration::from_secs(60)).unwrap(), clock.clone()).unwrap();
    for t in [at(12, 4, 40), at(12, 5, 0), at(12, 5, 10), at(12, 5, 20), at(12, 5, 25)] {
        clock.set(t);
        assert!(limiter.check().is_allowed());
    }
    clock.set(at(12, 5, 30));
    let d = limiter.check();
    assert!(d.is_denied());
    assert_eq!(d.retry_after(), Some(Duration::from_secs(10)));
    assert_eq!(d.reset_after(), Duration::from_secs(55), "the 12:05:25 entry leaves at 12:06:25");
    clock.set(Nanos::new(at(12, 5, 40).as_u64() - 1));
    assert!(limiter.check().is_denied(), "1 ns early");
    clock.set(at(12, 5, 40));
    assert!(limiter.check().is_allowed());
    assert!(limiter.check().is_denied());
}

// ---------------------------------------------------------------------------------
// Decisions.

#[test]
fn decisions_carry_limit_remaining_and_reset() {
    let quota = Quota::per_second(10).unwrap();
    // Fixed: 4 at 0.25 s of a 1 s window.
    let clock = ManualClock::starting_at(Nanos::new(SECOND / 4));
    let fixed = FixedWindow::with_clock(quota, clock.clone()).unwrap();
    let d = fixed.check_n(4).unwrap();
    assert_eq!((d.is_allowed(), d.limit(), d.remaining(), d.retry_after()), (true, 10, 6, None));
    assert_eq!(d.reset_after(), Duration::from_millis(750));
    let d = fixed.check_n(7).unwrap();
    assert_eq!((d.is_denied(), d.remaining()), (true, 6), "a denial reports what is left");
    assert_eq!(d.retry_after(), Some(Duration::from_millis(750)));
    assert_eq!(fixed.snapshot(), d.snapshot(), "a denial changes nothing");

    // Sliding: 4 now; in the next window at 0.5 s, 2 of them still count.
    let sliding = SlidingWindow::with_clock(quota, clock.clone()).unwrap();
    let d = sliding.check_n(4).unwrap();
    assert_eq!((d.remaining(), d.reset_after()), (6, Duration::from_millis(1_750)));
    clock.set(Nanos::new(3 * SECOND / 2));
    let s = sliding.snapshot();
    assert_eq!((s.limit(), s.remaining(), s.reset_after()), (10, 8, Duration::from_millis(500)));

    // Log: the reset is when the newest entry leaves.
    let log = SlidingLog::with_clock(quota, clock.clone()).unwrap();
    assert_eq!(log.check_n(3).unwrap().reset_after(), Duration::from_secs(1));
    clock.advance(Duration::from_millis(400));
    assert!(log.check().is_allowed());
    let s = log.snapshot();
    assert_eq!((s.remaining(), s.reset_after()), (6, Duration::from_secs(1)));

    // An empty limiter is at full capacity now.
    for (name, limiter) in all(quota, &clock) {
        let s = limiter.snapshot();
        assert_eq!((s.limit(), s.remaining(), s.reset_after()), (10, 10, Duration::ZERO), "{name}");
    }
}

/// `retry_after` is exact: at `t + retry_after` the same request is admitted, 1 ns
/// earlier it is not (when nothing else is admitted). Checked at many fill levels and
/// times, for every algorithm whose denials are exact.
#[test]
fn retry_after_is_exact_to_the_nanosecond() {
    let quotas = [
        Quota::per_second(10).unwrap(),
        Quota::new(7, Duration::from_nanos(1_000)).unwrap(),
        Quota::new(3, Duration::from_millis(1_234)).unwrap(),
        Quota::per_minute(1).unwrap(),
    ];
    for quota in quotas {
        let period = quota.period().as_nanos() as u64;
        for start in [0, 1, period / 3, period - 1] {
            for first in [1, quota.count() / 2 + 1, quota.count()] {
                for n in [1, quota.count()] {
                    for (name, make) in makers() {
                        let clock = ManualClock::starting_at(Nanos::new(10 * period + start));
                        let limiter = make(quota, &clock);
                        // Fill: `first` now, then a few more a third of a window later.
                        assert!(limiter.check_n(first).unwrap().is_allowed());
                        clock.advance(Duration::from_nanos(period / 3));
                        while limiter.check().is_allowed() {}
                        let d = limiter.check_n(n).unwrap();
                        assert!(d.is_denied(), "{name}");
                        let retry = d.retry_after().unwrap().as_nanos() as u64;
                        let t = clock.now().as_u64();
                        assert!(retry > 0, "{name}");
                        clock.set(Nanos::new(t + retry - 1));
                        assert!(limiter.check_n(n).unwrap().is_denied(), "{name} {quota}: n={n} admitted 1 ns early");
                        clock.set(Nanos::new(t + retry));
                        assert!(
                            limiter.check_n(n).unwrap().is_allowed(),
                            "{name} {quota}: n={n} denied at retry_after"
                        );
                    }
                }
            }
        }
    }
}

type Maker = fn(Quota, &ManualClock) -> Box<dyn Limiter>;

/// Constructors of the limiters whose denials carry exact retry times.
fn makers() -> Vec<(&'static str, Maker)> {
    vec![
        ("fixed", |q, c| Box::new(FixedWindow::with_clock(q, c.clone()).unwrap())),
        ("sliding", |q, c| Box::new(SlidingWindow::with_clock(q, c.clone()).unwrap())),
        ("log", |q, c| Box::new(SlidingLog::with_clock(q, c.clone()).unwrap())),
        ("striped-exact", |q, c| {
            Box::new(
                StripedSlidingWindow::builder(q)
                    .stripes(2)
                    .batch(q.count().div_ceil(3))
                    .build_with_clock(c.clone())
                    .unwrap(),
            )
        }),
    ]
}

#[test]
fn more_than_the_limit_is_an_error_and_zero_is_free() {
    let clock = ManualClock::new();
    for (name, limiter) in all(Quota::per_second(5).unwrap(), &clock) {
        for n in [6, u64::MAX] {
            assert_eq!(limiter.check_n(n), Err(InsufficientCapacity { requested: n, capacity: 5 }), "{name}");
        }
        assert_eq!(limiter.snapshot().remaining(), 5, "{name}: an error consumes nothing");
        assert!(limiter.check_n(5).unwrap().is_allowed(), "{name}");
        let d = limiter.check_n(0).unwrap();
        assert!(d.is_allowed() && d.remaining() == 0, "{name}: zero is admitted, consumes nothing");
        assert!(limiter.check().is_denied(), "{name}");
    }
}

// ---------------------------------------------------------------------------------
// Construction.

#[test]
fn bad_input_is_a_typed_error() {
    let clock = ManualClock::new();
    let burst = Quota::per_minute(100).unwrap().with_burst(10).unwrap();
    let expected = WindowError::BurstIsNotCount { count: 100, burst: 10 };
    assert_eq!(FixedWindow::with_clock(burst, clock.clone()).unwrap_err(), expected);
    assert_eq!(SlidingWindow::with_clock(burst, clock.clone()).unwrap_err(), expected);
    assert_eq!(SlidingLog::with_clock(burst, clock.clone()).unwrap_err(), expected);
    assert_eq!(StripedSlidingWindow::builder(burst).build_with_clock(clock.clone()).unwrap_err(), expected);
    assert!(FixedWindow::with_clock(Quota::per_minute(100).unwrap().with_burst(100).unwrap(), clock.clone()).is_ok());

    let q = Quota::per_second(100).unwrap();
    let build = |b: weir_window::StripedBuilder| b.build_with_clock(clock.clone()).map(|_| ());
    assert_eq!(build(StripedSlidingWindow::builder(q).stripes(0)), Err(WindowError::ZeroStripes));
    assert_eq!(
        build(StripedSlidingWindow::builder(q).stripes(5000)),
        Err(WindowError::TooManyStripes { stripes: 5000, max: 4096 })
    );
    assert_eq!(build(StripedSlidingWindow::builder(q).batch(0)), Err(WindowError::ZeroBatch));
    assert_eq!(
        build(StripedSlidingWindow::builder(q).batch(101)),
        Err(WindowError::BatchAboveLimit { batch: 101, limit: 100 })
    );
    let striped = StripedSlidingWindow::builder(q).stripes(5).batch(100).build_with_clock(clock.clone()).unwrap();
    assert_eq!((striped.stripes(), striped.batch(), striped.mode()), (8, 100, StripedMode::Exact), "rounded up");

    let huge = Quota::per_second(1 << 25).unwrap();
    assert_eq!(
        SlidingLog::with_clock(huge, clock.clone()).unwrap_err(),
        WindowError::LogTooLarge { limit: 1 << 25, max: 1 << 24 }
    );
    assert!(SlidingLog::with_clock(Quota::per_second(1 << 24).unwrap(), clock.clone()).is_ok());
}

/// The single-word sliding counter's three fields share 64 bits: the limit is bounded
/// by the window length, and the error says what fits.
#[test]
fn limits_too_large_for_the_encoding_are_refused_with_what_fits() {
    let clock = ManualClock::new();
    for (period, max) in
        [(Duration::from_millis(1), 4_095), (Duration::from_secs(1), 131_071), (Duration::from_secs(60), 1_048_575)]
    {
        assert!(SlidingWindow::with_clock(Quota::new(max, period).unwrap(), clock.clone()).is_ok());
        let error = SlidingWindow::with_clock(Quota::new(max + 1, period).unwrap(), clock.clone()).unwrap_err();
        assert_eq!(error, WindowError::LimitTooLarge { limit: max + 1, window: period, max_limit: max });
        assert!(error.to_string().contains(&format!("use at most {max} per")), "{error}");
        // The other algorithms take the same quota.
        let q = Quota::new(max + 1, period).unwrap();
        assert!(FixedWindow::with_clock(q, clock.clone()).is_ok());
        assert!(StripedSlidingWindow::builder(q).build_with_clock(clock.clone()).is_ok());
    }
    // The extremes of what a Quota allows: 16 per ns, and one per 9 years.
    for q in [Quota::per_second(16_000_000_000).unwrap(), Quota::new(1, Duration::from_secs(9 * 365 * 86_400)).unwrap()]
    {
        let _ = FixedWindow::with_clock(q, clock.clone()).map(|l| l.check());
        let _ = SlidingWindow::with_clock(q, clock.clone()).map(|l| l.check());
        let _ = StripedSlidingWindow::builder(q).build_with_clock(clock.clone()).map(|l| l.check());
    }
    assert!(FixedWindow::with_clock(Quota::per_second(16_000_000_000).unwrap(), clock.clone()).is_ok());
}

#[test]
fn errors_say_what_to_do() {
    let e = WindowError::BatchAboveLimit { batch: 5, limit: 2 }.to_string();
    assert!(e.contains("use at most 2"), "{e}");
    let e = WindowError::LogTooLarge { limit: 1 << 30, max: 1 << 24 }.to_string();
    assert!(e.contains("SlidingWindow"), "{e}");
    let e = WindowError::ZeroStripes.to_string();
    assert!(e.contains("at least 1"), "{e}");
}

/// Windows start at the clock's origin by default, or wherever asked.
#[test]
fn windows_align_to_the_clock_origin_or_where_asked() {
    let q = Quota::per_minute(1).unwrap();
    let clock = ManualClock::starting_at(at(12, 0, 40));
    let origin = FixedWindow::with_clock(q, clock.clone()).unwrap();
    let creation = FixedWindow::builder(q).window_start(clock.now()).build_with_clock(clock.clone()).unwrap();
    let half = FixedWindow::builder(q).window_start(Nanos::new(30 * SECOND)).build_with_clock(clock.clone()).unwrap();
    for limiter in [&origin, &creation, &half] {
        assert!(limiter.check().is_allowed());
    }
    assert_eq!(origin.check().retry_after(), Some(Duration::from_secs(20)), "next window at 12:01:00");
    assert_eq!(creation.check().retry_after(), Some(Duration::from_secs(60)), "at 12:01:40");
    assert_eq!(half.check().retry_after(), Some(Duration::from_secs(50)), "at 12:01:30");

    let striped =
        StripedSlidingWindow::builder(q).window_start(Nanos::new(30 * SECOND)).build_with_clock(clock.clone()).unwrap();
    assert!(striped.check().is_allowed());
    clock.set(at(12, 1, 30));
    assert_eq!(striped.snapshot().remaining(), 0, "the previous window counts fully at its end");
    clock.set(at(12, 2, 0));
    assert_eq!(striped.snapshot().remaining(), 0, "half of it: 0.5 rounds up");
    clock.set(at(12, 2, 30));
    assert_eq!(striped.snapshot().remaining(), 1);
}

// ---------------------------------------------------------------------------------
// Time at the edges.

/// A clock stepping back is no time passing: never a burst, never a panic.
#[test]
fn a_clock_stepping_backwards_never_admits_a_burst() {
    for (name, limiter) in all(Quota::per_second(2).unwrap(), &ManualClock::new()) {
        let clock = ManualClock::starting_at(Nanos::new(10 * SECOND));
        // Rebuild each limiter on its own clock: `all` takes the clock by reference.
        let limiter = {
            drop(limiter);
            all(Quota::per_second(2).unwrap(), &clock).into_iter().find(|(n, _)| *n == name).unwrap().1
        };
        assert_eq!(admitted(&*limiter, 10), 2, "{name}");
        clock.set(Nanos::new(5 * SECOND)); // 5 s back
        assert_eq!(admitted(&*limiter, 10), 0, "{name}: no time has passed");
        clock.set(Nanos::ZERO);
        assert_eq!(admitted(&*limiter, 10), 0, "{name}: before the limiter was made");
        clock.set(Nanos::new(10 * SECOND + SECOND / 2));
        assert_eq!(admitted(&*limiter, 10), 0, "{name}");
        clock.set(Nanos::new(12 * SECOND));
        assert_eq!(admitted(&*limiter, 10), 2, "{name}: two windows on, all is clear");
    }
}

/// A denial in a later window is remembered: a reading stepping back after it is not
/// decided in the older window (where more could fit).
#[test]
fn a_reading_before_a_denial_is_not_decided_in_an_older_window() {
    let clock = ManualClock::starting_at(Nanos::new(10));
    let limiter = SlidingWindow::with_clock(Quota::new(10, Duration::from_nanos(100)).unwrap(), clock.clone()).unwrap();
    assert!(limiter.check_n(4).unwrap().is_allowed());
    clock.set(Nanos::new(190)); // next window, 4 × 0.1 = 0.4 counts
    assert!(limiter.check_n(10).unwrap().is_denied());
    clock.set(Nanos::new(20)); // back into the first window
    assert!(limiter.check_n(6).unwrap().is_allowed(), "decided at 100 ns: 4 × 1.0 + 6 ≤ 10");
    clock.set(Nanos::new(195)); // 4 × 0.05 + 6: 3 more, not 9
    assert_eq!(admitted(&limiter, 20), 3);
}

#[test]
fn readings_near_the_end_of_time_never_panic() {
    let quota = Quota::per_second(3).unwrap();
    for start in [Nanos::MAX, Nanos::new(u64::MAX - 1), Nanos::new(u64::MAX / 2)] {
        let clock = ManualClock::starting_at(start);
        for (name, limiter) in all(quota, &clock) {
            assert_eq!(admitted(&*limiter, 10), 3, "{name} at {start:?}");
            clock.advance(Duration::from_secs(3600));
            let _ = limiter.check();
            let _ = limiter.check_n(3);
            let _ = limiter.snapshot();
            clock.set(Nanos::ZERO);
            let _ = limiter.check();
            clock.set(start);
        }
    }
}

/// Window numbers last at least 2^58 ns (9.1 years); after the horizon the last
/// window never ends and the limiter fails closed.
#[test]
fn after_the_horizon_the_limiter_fails_closed() {
    // 2^20 per ns-scale window: the sliding counter's 64 − 2·21 = 22 window bits
    // just reach 2^58 ns with 2^36 ns (68.7 s) windows.
    let quota = Quota::new(1 << 20, Duration::from_nanos(1 << 36)).unwrap();
    let clock = ManualClock::new();
    let limiter = SlidingWindow::with_clock(quota, clock.clone()).unwrap();
    clock.set(Nanos::new(1 << 59)); // past the horizon
    assert!(limiter.check_n(1 << 20).unwrap().is_allowed());
    for step in [1 << 36, 1 << 40, u64::MAX >> 2] {
        clock.advance(Duration::from_nanos(step));
        assert!(limiter.check().is_denied(), "time stopped at the horizon");
    }
    let fixed = FixedWindow::with_clock(Quota::per_second(1).unwrap(), ManualClock::starting_at(Nanos::MAX)).unwrap();
    assert!(fixed.check().is_allowed());
    assert!(fixed.check().is_denied());
}

// ---------------------------------------------------------------------------------
// Traits.

#[test]
fn works_through_the_limiter_trait_and_as_a_trait_object() {
    let clock = ManualClock::new();
    for (name, limiter) in all(Quota::per_second(2).unwrap(), &clock) {
        let shared: std::sync::Arc<dyn Limiter> = std::sync::Arc::from(limiter);
        assert!(shared.check().is_allowed(), "{name}");
        assert!(shared.check_n(1).unwrap().is_allowed(), "{name}");
        assert!(shared.check().is_denied(), "{name}");
        assert_eq!(shared.snapshot().remaining(), 0, "{name}");
    }
    fn is_send_sync<T: Send + Sync>() {}
    is_send_sync::<FixedWindow<ManualClock>>();
    is_send_sync::<SlidingWindow<ManualClock>>();
    is_send_sync::<SlidingLog<ManualClock>>();
    is_send_sync::<StripedSlidingWindow<ManualClock>>();
    is_send_sync::<StripedSlidingWindow>();
}

#[test]
fn per_key_states_share_one_algorithm() {
    let q = Quota::per_second(2).unwrap();
    fn exercise<A: Algorithm>(algorithm: &A, name: &str) {
        let (a, b) = (algorithm.new_state(), algorithm.new_state());
        let now = Nanos::new(100);
        assert_eq!(algorithm.limit(), 2);
        assert!(algorithm.is_idle(&a, now), "{name}");
        assert!(algorithm.check(&a, &now).is_allowed(), "{name}");
        assert!(algorithm.check(&a, &now).is_allowed(), "{name}");
        assert!(algorithm.check(&a, &now).is_denied(), "{name}");
        assert!(algorithm.check(&b, &now).is_allowed(), "{name}: states are independent");
        assert!(!algorithm.is_idle(&a, now), "{name}");
        assert!(!algorithm.is_idle(&a, Nanos::new(SECOND / 2)), "{name}: still counts");
        assert!(algorithm.is_idle(&a, Nanos::new(2 * SECOND + 100)), "{name}: all gone two windows on");
        assert_eq!(algorithm.snapshot(&a, Nanos::new(2 * SECOND + 100)).remaining(), 2, "{name}");
    }
    exercise(&FixedWindowAlgorithm::new(q, Nanos::ZERO).unwrap(), "fixed");
    exercise(&SlidingWindowAlgorithm::new(q, Nanos::ZERO).unwrap(), "sliding");
    exercise(&SlidingLogAlgorithm::new(q, Nanos::ZERO).unwrap(), "log");
    let fixed = FixedWindowAlgorithm::new(q, Nanos::ZERO).unwrap();
    let key = fixed.new_state();
    assert!(fixed.check_n(&key, 2, &Nanos::new(10)).unwrap().is_allowed());
    assert!(fixed.is_idle(&key, Nanos::new(SECOND)), "a fixed window forgets at the boundary");
}

#[test]
fn a_striped_limiter_spreads_threads_and_takes_explicit_stripes() {
    let clock = ManualClock::new();
    let limiter = StripedSlidingWindow::builder(Quota::per_second(1_000).unwrap())
        .stripes(4)
        .batch(10)
        .build_with_clock(clock.clone())
        .unwrap();
    // Stripes far out of range are taken modulo the count, never a panic.
    for stripe in [0, 3, 4, usize::MAX] {
        assert!(limiter.check_on(stripe).is_allowed());
        assert!(limiter.check_n_on(stripe, 3).unwrap().is_allowed());
    }
    assert_eq!(limiter.snapshot().remaining(), 1_000 - 16, "leases are not counted as admitted");
    let d: Decision = limiter.check_on(1);
    assert!(d.remaining() <= 1_000 - 17);
    assert!(format!("{limiter:?}").contains("stripes: 4"));
    let _ = StripedSlidingWindow::new(Quota::per_second(10).unwrap()).unwrap().check();
    let _ = StripedSlidingWindow::builder(Quota::per_second(10).unwrap()).build().unwrap().check();
}

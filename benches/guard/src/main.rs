//! One check of one of weir's limiters, for callgrind to count: `.ci/instructions`
//! runs this binary once per check under `valgrind --tool=callgrind
//! --toggle-collect=<the check's function>` and compares the instructions with
//! `benches/guard/baseline.txt`.
//!
//! Each check is a function of its own, not mangled, so that callgrind can be told
//! to count it alone: the limiter is built and checked twice before (a key is
//! stored, a lease taken, a closed limiter's first denial made), with a clock that
//! never moves, so the count is the same on every run and every machine for one
//! compiler. What is counted is the function: the check and its entry and return.
//!
//! ```sh
//! .ci/instructions            # compare with the baseline
//! .ci/instructions --bless    # write the baseline from this build
//! ```

use std::hint::black_box;
use weir_gcra::{Gcra, GcraAlgorithm, LeaseConfig, LeasedGcra};
use weir_keyed::{Keyed, KeyedConfig};
use weir_rl_core::{ManualClock, Quota};
use weir_window::{FixedWindow, SlidingWindow};

/// Never exhausted within a few checks.
fn open() -> Quota {
    Quota::per_second(100_000).expect("a valid quota")
}

/// One per hour, taken by the first warm-up check: every later check is denied.
fn closed() -> Quota {
    Quota::per_hour(1).expect("a valid quota")
}

/// Leaks `limiter` after two warm-up calls of `check`.
fn warmed<L>(limiter: L, check: impl Fn(&'static L) -> bool) -> &'static L {
    let limiter = Box::leak(Box::new(limiter));
    black_box(check(limiter));
    black_box(check(limiter));
    limiter
}

/// The function each check runs, one per limiter type and call (the allowed and
/// denied checks of one limiter run the same function: two functions of the same
/// body would be folded into one, under one of their names), and the checks: a
/// name, a setup, warmed up with the same call inline (not through the function,
/// which callgrind counts every call of).
macro_rules! guarded {
    ($($(#[$doc:meta])* $function:ident($ty:ty) = |$l:ident| $call:expr => { $($check:ident: $setup:expr;)* })*) => {
        $(
            $(#[$doc])*
            #[unsafe(no_mangle)]
            #[inline(never)]
            pub fn $function($l: &'static $ty) -> bool {
                $call
            }
        )*

        /// Every check's name and the function it runs, in order.
        const CHECKS: &[(&str, &str)] = &[$($((stringify!($check), stringify!($function))),*),*];

        fn run(name: &str) -> Option<bool> {
            match name {
                $($(stringify!($check) => {
                    let limiter: &'static $ty = warmed($setup, |$l| $call);
                    Some(black_box($function(black_box(limiter))))
                })*)*
                _ => None,
            }
        }
    };
}

type Store = Keyed<u64, GcraAlgorithm, ManualClock>;

/// A store of 1 000 keys, every one checked once; key 7 is checked.
fn store() -> Store {
    let store = Keyed::gcra_with_clock(
        open(),
        KeyedConfig::builder(1 << 20).build().expect("a valid config"),
        ManualClock::new(),
    );
    (0..1_000u64).for_each(|k| {
        black_box(store.check(&k).is_allowed());
    });
    store
}

guarded! {
    /// `Gcra::admit`.
    guard_gcra(Gcra<ManualClock>) = |l| l.admit().is_ok() => {
        gcra_allowed: Gcra::with_clock(open(), ManualClock::new());
        gcra_denied: Gcra::with_clock(closed(), ManualClock::new());
    }
    /// `LeasedGcra::admit`.
    guard_leased(LeasedGcra<ManualClock>) = |l| l.admit().is_ok() => {
        leased_allowed: LeasedGcra::with_clock(open(), LeaseConfig::default(), ManualClock::new());
        leased_denied: LeasedGcra::with_clock(closed(), LeaseConfig::default(), ManualClock::new());
    }
    /// `FixedWindow::admit`.
    guard_fixed_window(FixedWindow<ManualClock>) = |l| l.admit().is_ok() => {
        fixed_window_allowed: FixedWindow::with_clock(open(), ManualClock::new()).expect("a window");
        fixed_window_denied: FixedWindow::with_clock(closed(), ManualClock::new()).expect("a window");
    }
    /// `SlidingWindow::admit`.
    guard_sliding_window(SlidingWindow<ManualClock>) = |l| l.admit().is_ok() => {
        sliding_window_allowed: SlidingWindow::with_clock(open(), ManualClock::new()).expect("a window");
        sliding_window_denied: SlidingWindow::with_clock(closed(), ManualClock::new()).expect("a window");
    }
    /// `Gcra::check`, with the decision's numbers read.
    guard_gcra_decision(Gcra<ManualClock>) = |l| {
        let d = l.check();
        black_box(d.remaining() ^ d.reset_after().as_nanos() as u64);
        d.is_allowed()
    } => {
        gcra_decision_allowed: Gcra::with_clock(open(), ManualClock::new());
        gcra_decision_denied: Gcra::with_clock(closed(), ManualClock::new());
    }
    /// `Keyed::check` of key 7.
    guard_keyed(Store) = |s| s.check(black_box(&7)).is_allowed() => {
        keyed_allowed: store();
        keyed_denied: {
            let s = store();
            while s.check(&7).is_allowed() {}
            s
        };
    }
}

fn main() {
    let mut args = std::env::args().skip(1);
    match args.next().as_deref() {
        // `check function`, one a line: what `.ci/instructions` runs and counts.
        Some("--list") | None => CHECKS.iter().for_each(|(check, function)| println!("{check} {function}")),
        Some(name) => {
            if run(name).is_none() {
                eprintln!("no check named {name:?}; `--list` names them");
                std::process::exit(2);
            }
        }
    }
}

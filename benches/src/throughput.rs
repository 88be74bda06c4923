//! The throughput suite: aggregate checks per second over a thread sweep, weir and
//! peers side by side, allowed and denied paths separately.

use crate::harness::{Workload, run};
use crate::peers::{Governor, GovernorUpkeep, MutexTokenBucket, governor, governor_upkeep};
use crossbeam_utils::CachePadded;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;
use weir_core::{Clock, CoarseClock, MonotonicClock, Quota};
use weir_gcra::Gcra;

/// Which situation a subject measures.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Scenario {
    /// One limiter shared by every thread, every check admitted.
    HotAllowed,
    /// One limiter shared by every thread, exhausted: every check denied.
    HotDenied,
    /// One limiter per thread, every check admitted.
    PerThread,
    /// Hardware references: what the machine can do at all.
    Reference,
}

impl Scenario {
    /// Short name for tables and CSV.
    pub fn name(self) -> &'static str {
        match self {
            Self::HotAllowed => "hot-allowed",
            Self::HotDenied => "hot-denied",
            Self::PerThread => "per-thread",
            Self::Reference => "reference",
        }
    }
}

/// One measurable thing.
#[derive(Debug, Clone, Copy)]
pub struct Subject {
    /// What it measures.
    pub scenario: Scenario,
    /// Who is measured ("weir-gcra", "governor", ...).
    pub name: &'static str,
    /// The subject of the same scenario this one is compared with (same clock
    /// class: precise with precise, coarse with coarse); `None` for peers.
    pub compare_to: Option<&'static str>,
    /// Runs it once on `threads` threads for `duration`.
    pub run: fn(usize, Duration) -> crate::harness::Sample,
}

impl Subject {
    /// `scenario/name`, what `--only` matches against.
    pub fn id(&self) -> String {
        format!("{}/{}", self.scenario.name(), self.name)
    }
}

/// A rate the allowed-path subjects never reach: 10⁹ per second, burst 10⁹.
const OPEN: u32 = 1_000_000_000;

fn open_quota() -> Quota {
    Quota::per_second(OPEN as u64).and_then(|q| q.with_burst(OPEN as u64)).expect("a valid quota")
}

/// One request per hour, already taken: every check is denied.
fn closed_quota() -> Quota {
    Quota::per_hour(1).expect("a valid quota")
}

/// A limiter the suites can check: one admission attempt, true when admitted.
/// Implemented per type so the hot loop is monomorphized and inlined.
pub trait Check: Sync {
    /// Checks one request.
    fn check_one(&self) -> bool;
}

impl<C: Clock + Sync> Check for Gcra<C> {
    #[inline]
    fn check_one(&self) -> bool {
        self.check().is_allowed()
    }
}

impl Check for Governor {
    #[inline]
    fn check_one(&self) -> bool {
        self.check().is_ok()
    }
}

impl Check for GovernorUpkeep {
    #[inline]
    fn check_one(&self) -> bool {
        self.check().is_ok()
    }
}

impl Check for MutexTokenBucket {
    #[inline]
    fn check_one(&self) -> bool {
        self.check()
    }
}

/// A shared limiter, checked by every thread.
struct Shared<L>(L);

impl<L: Check> Workload for Shared<L> {
    type Local = ();
    fn local(&self, _: usize) {}
    #[inline]
    fn op(&self, _: &mut ()) -> bool {
        self.0.check_one()
    }
}

/// A limiter per thread, made by the function before the timed region.
struct EachThread<L>(fn() -> L);

impl<L: Check + Send> Workload for EachThread<L> {
    type Local = L;
    fn local(&self, _: usize) -> L {
        (self.0)()
    }
    #[inline]
    fn op(&self, local: &mut L) -> bool {
        local.check_one()
    }
}

fn coarse_clock() -> CoarseClock {
    CoarseClock::with_upkeep(Duration::from_millis(1)).expect("the coarse clock's upkeep thread starts")
}

fn drained_gcra<C: Clock>(clock: C) -> Gcra<C> {
    let limiter = Gcra::with_clock(closed_quota(), clock);
    let _ = limiter.check();
    limiter
}

/// The hardware reference: every thread increments one shared word.
struct SharedAtomic(CachePadded<AtomicU64>);

impl Workload for SharedAtomic {
    type Local = ();
    fn local(&self, _: usize) {}
    #[inline]
    fn op(&self, _: &mut ()) -> bool {
        // Ordering: Relaxed; a counter, publishing nothing.
        self.0.fetch_add(1, Ordering::Relaxed) != u64::MAX
    }
}

/// The hardware reference: every thread increments its own word on its own line.
struct PerThreadAtomic(Vec<CachePadded<AtomicU64>>);

impl Workload for PerThreadAtomic {
    type Local = usize;
    fn local(&self, thread: usize) -> usize {
        thread
    }
    #[inline]
    fn op(&self, thread: &mut usize) -> bool {
        // Ordering: Relaxed; a counter, publishing nothing.
        self.0[*thread].fetch_add(1, Ordering::Relaxed) != u64::MAX
    }
}

/// Every subject of the throughput suite, in table order.
pub fn subjects() -> Vec<Subject> {
    use Scenario::*;
    let s = |scenario, name, compare_to, run| Subject { scenario, name, compare_to, run };
    let (gov, gov_upkeep) = (Some("governor"), Some("governor+upkeep"));
    vec![
        s(HotAllowed, "weir-gcra", gov, |t, d| {
            run(&Shared(Gcra::with_clock(open_quota(), MonotonicClock::new())), t, d)
        }),
        s(HotAllowed, "weir-gcra+coarse", gov_upkeep, |t, d| {
            run(&Shared(Gcra::with_clock(open_quota(), coarse_clock())), t, d)
        }),
        s(HotAllowed, "governor", None, |t, d| run(&Shared(governor(OPEN, OPEN)), t, d)),
        s(HotAllowed, "governor+upkeep", None, |t, d| run(&Shared(governor_upkeep(OPEN, OPEN)), t, d)),
        s(HotAllowed, "mutex-bucket", gov, |t, d| run(&Shared(MutexTokenBucket::new(OPEN as f64, OPEN as f64)), t, d)),
        s(HotDenied, "weir-gcra", gov, |t, d| run(&Shared(drained_gcra(MonotonicClock::new())), t, d)),
        s(HotDenied, "weir-gcra+coarse", gov_upkeep, |t, d| run(&Shared(drained_gcra(coarse_clock())), t, d)),
        s(HotDenied, "governor", None, |t, d| {
            let limiter = governor(1, 1);
            let _ = limiter.check();
            run(&Shared(limiter), t, d)
        }),
        s(HotDenied, "governor+upkeep", None, |t, d| {
            let limiter = governor_upkeep(1, 1);
            let _ = limiter.check();
            run(&Shared(limiter), t, d)
        }),
        s(HotDenied, "mutex-bucket", gov, |t, d| {
            let limiter = MutexTokenBucket::new(1.0 / 3600.0, 1.0);
            limiter.drain();
            run(&Shared(limiter), t, d)
        }),
        s(PerThread, "weir-gcra", gov, |t, d| {
            run(&EachThread(|| Gcra::with_clock(open_quota(), MonotonicClock::new())), t, d)
        }),
        s(PerThread, "governor", None, |t, d| run(&EachThread(|| governor(OPEN, OPEN)), t, d)),
        s(Reference, "shared-fetch-add", None, |t, d| run(&SharedAtomic(CachePadded::new(AtomicU64::new(0))), t, d)),
        s(Reference, "per-thread-counter", None, |t, d| {
            run(&PerThreadAtomic((0..t).map(|_| CachePadded::new(AtomicU64::new(0))).collect()), t, d)
        }),
    ]
}

//! [`Contention`]: what a check does after losing a race to another thread's.

/// What a check of a one-word limiter (GCRA, the fixed and sliding windows, a
/// per-key state) does when its compare-and-swap loses to another thread's: the
/// one choice that trades fairness between threads for total throughput under
/// contention. It changes nothing on an uncontended check (the retry path is out
/// of line), and nothing about what is admitted: every mode is exact.
///
/// ```
/// use weir_rl_core::{Contention, Quota};
///
/// assert_eq!(Contention::default(), Contention::Fair);
/// # let _ = Quota::per_second(1);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[non_exhaustive]
pub enum Contention {
    /// Retry at once, deciding at the check's own clock reading with the value the
    /// failed compare-and-swap found: a retry that reads nothing new is as short as
    /// the race it lost. Threads hitting one limiter take turns, as they do on
    /// governor's: every thread's checks go through at about the same rate (at 2
    /// threads the slowest thread did 0.8 to 0.9 of the mean; BENCHMARKS.md, "The
    /// single check"), and the total is what moving the limiter's cache line
    /// between cores allows. The default.
    #[default]
    Fair,
    /// Back off before retrying (exponentially, up to 2⁶ spin hints; the windows and
    /// the log then read the clock afresh), so the thread that won keeps the cache
    /// line and runs on nearly alone: the total under
    /// contention is higher (2 to 4 times governor's at 2 threads on the machines
    /// in BENCHMARKS.md), but **unfair**: a thread that lost may wait while another
    /// makes many checks (at 2 threads the slowest thread measured at 0.06 to 0.6
    /// of the mean). For a limiter whose callers only care about the total: a
    /// batch job's threads sharing an outgoing rate, say; not for one that serves
    /// clients whose latency matters.
    Greedy,
}

//! A lock-free token bucket in GCRA encoding: a rate with a burst allowance, exact
//! under concurrency, one atomic word of state.
//!
//! # What to use when
//!
//! | you need | use |
//! |---|---|
//! | one limit (a service, an outgoing API), checked from any number of threads | [`Gcra`] |
//! | one limit that many threads hit at once, where a stated over-admission buys throughput | [`LeasedGcra`] (module [`leased`]), configured by [`LeaseConfig`] |
//! | a limit per client (IP, API key, user) | weir-keyed's `Keyed::gcra`, which keeps one [`GcraState`] per key under one [`GcraAlgorithm`] |
//!
//! A [`Quota`] here is a rate and a bucket: `Quota::per_minute(100)` refills 100 a
//! minute into a bucket of 100 (its burst, unless `with_burst` says otherwise), so a
//! client that saved up takes 100 at once and then one every 0.6 s.
//!
//! **Costs.** [`Gcra`]: an admission is one clock read and one CAS on one word, a
//! denial one clock read and one load, with nothing written to shared memory;
//! nothing is allocated. [`LeasedGcra`]: most admissions are one CAS on the calling
//! thread's own stripe, so throughput grows with threads where one shared word
//! cannot; it pays with a bounded over-admission ([`LeasedGcra::over_admission_bound`]).
//! Measured costs, against governor in the same runs, are in BENCHMARKS.md; the
//! reasons behind the design are in DESIGN.md ("weir-gcra").
//!
//! # The algorithm
//!
//! The Generic Cell Rate Algorithm (ATM Forum UNI 3.1, ITU-T I.371; described for
//! request limiting in Brandur Leach's "Rate limiting, cells, and GCRA" and used by
//! redis-cell and governor) keeps a token bucket's whole state in one number, the
//! *theoretical arrival time* (TAT): the time at which the bucket would be full again
//! if nothing more were admitted. With emission interval `T = period / count` (the
//! time one unit of capacity takes to come back) and burst `B`, a request of cost `n`
//! arriving at `now` is
//!
//! ```text
//! new_tat  = max(tat, now) + n·T
//! admitted   iff   new_tat − now ≤ B·T      (then tat := new_tat)
//! ```
//!
//! and a denied request changes nothing. `tat − now` is the capacity in use, measured
//! in time; `B·T` is the whole bucket.
//!
//! # Burst semantics
//!
//! From a full bucket, exactly `B` requests of cost 1 are admitted back to back (the
//! `B`-th one brings `new_tat − now` to exactly `B·T`), then one more every `T`.
//! redis-cell's `max_burst` parameter admits `max_burst + 1` back to back (it checks
//! the TAT *before* adding the request's `T`, with tolerance `max_burst·T`), so
//! redis-cell's `max_burst = 9` is weir's `burst = 10`.
//!
//! # Guarantees
//!
//! - **Exact**: the limiter decides exactly as the sequential algorithm above, in the
//!   order in which the compare-and-swaps land (linearizable). Concurrent checks never
//!   admit more in total than the sequential algorithm would (loom-checked in
//!   `loom-tests/tests/gcra.rs`, property-tested against a reference model).
//! - **Lock-free**: a check retries its CAS only when another operation changed the
//!   TAT in between (or a weak CAS failed spuriously), so some operation always
//!   completes.
//! - **Allowed path**: one CAS on one word. **Denied path**: one load, no write to
//!   shared memory, so a limiter under attack scales across cores.
//! - **No panic** on any input. Time is kept in ticks (1/16 ns) relative to the
//!   limiter's creation, saturating. A clock reading earlier than one already used is
//!   treated as no time having passed: decisions are as strict as at the later reading
//!   or stricter, never looser. The limiter's clock stops 18 years after its creation
//!   (2⁶³ ticks); from then on it admits no more than one burst (it fails closed).
//!
//! # Example
//!
//! The worked example of the write-ups, with a hand-driven clock: capacity 20,
//! refill 10 per second.
//!
//! ```
//! use std::time::Duration;
//! use weir_rl_core::{ManualClock, Quota};
//! use weir_gcra::Gcra;
//!
//! let clock = ManualClock::new();
//! let limiter = Gcra::with_clock(Quota::per_second(10)?.with_burst(20)?, clock.clone());
//! let d = limiter.check_n(20)?; // drain the bucket
//! assert!(d.is_allowed() && d.remaining() == 0);
//!
//! clock.advance(Duration::from_secs(2)); // 2 s idle: 20 tokens back
//! let admitted = (0..15).filter(|_| limiter.check().is_allowed()).count();
//! assert_eq!((admitted, limiter.snapshot().remaining()), (15, 5));
//! let admitted = (0..6).filter(|_| limiter.check().is_allowed()).count();
//! assert_eq!(admitted, 5);
//!
//! let denied = limiter.check();
//! assert_eq!(denied.retry_after(), Some(Duration::from_millis(100)));
//! clock.advance(Duration::from_millis(100));
//! assert!(limiter.check().is_allowed());
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! # Giving back what was not used
//!
//! [`Gcra::refund`] (and [`Limiter::refund`](weir_rl_core::Limiter::refund),
//! [`Algorithm::refund`] for per-key states) gives back units an admission took and
//! the caller did not use, e.g. a request that failed before doing any work, or the
//! earlier quotas of an all-of check that a later one denied. It credits `n × T`
//! (rounded down, so that a call given back in pieces never credits more than it was
//! charged: [`Quota::credit_ticks`]) less the time since the admission was decided
//! (that time has been repaying its debt; crediting it again would free capacity a
//! later admission took), never beyond a full bucket, and nothing for a denial or
//! for an admission of 0 (it took nothing, whatever `n` is given back). `T` is the
//! interval in force, or the interval the admission was charged at (its decision
//! records it) if that is less, so a refund never credits more than was charged,
//! whatever quota changes came in between (see "Changing the quota at run time").
//! A decision that records no charge of this limiter's (another limiter's, such as
//! the decision an all-of check hands the members that did not decide it) is
//! credited at `T` only while the quota has never been replaced, and with nothing
//! once it has, as what it cost here is not known (a check reads its clock before
//! the quota, so its reading does not tell which quota it was made under):
//!
//! ```
//! use weir_rl_core::{ManualClock, Quota};
//! use weir_gcra::Gcra;
//!
//! let limiter = Gcra::with_clock(Quota::per_minute(10)?, ManualClock::new());
//! let admission = limiter.check_n(3)?;
//! limiter.refund(2, &admission)?;
//! assert_eq!(limiter.snapshot().remaining(), 9);
//! limiter.refund(5, &admission)?; // never beyond full
//! assert_eq!(limiter.snapshot().remaining(), 10);
//! assert!(limiter.refund(11, &admission).is_err()); // more than any check can take
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! # Changing the quota at run time
//!
//! [`Gcra::set_quota`] replaces the quota without losing state: the TAT is kept, so
//! the time until the bucket is full again (what the last `reset_after` told the
//! client) is unchanged, and the capacity in use is re-read under the new quota. A
//! check sees the old quota or the new one, never a mix ([`QuotaCell`]).
//!
//! A refund of an admission decided under an earlier quota credits each unit the
//! smaller of its interval then and now: take 10 at 10 per second (1 s of
//! capacity), change to 1 per second with burst 10, and a refund of 5 of the 10
//! credits the 0.5 s they were charged, not 5 s; after a change to a faster quota it
//! credits the new, shorter interval. This holds however many changes come between
//! the admission and its refund (the decision records the interval itself, not a
//! count of changes):
//!
//! ```
//! use weir_rl_core::{ManualClock, Quota};
//! use weir_gcra::Gcra;
//!
//! let limiter = Gcra::with_clock(Quota::per_second(10)?, ManualClock::new());
//! let admission = limiter.check_n(10)?; // charged 10 × 0.1 s
//! limiter.set_quota(Quota::per_second(1)?.with_burst(10)?);
//! limiter.refund(5, &admission)?; // 0.5 s back: 0.5 s still in use
//! assert_eq!(limiter.snapshot().remaining(), 9);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! # Choosing a clock
//!
//! [`Gcra::new`] uses [`MonotonicClock`](weir_rl_core::MonotonicClock). For the hottest
//! paths, [`CoarseClock`](weir_rl_core::CoarseClock) costs one load per read; its lag `L`
//! (upkeep interval plus scheduling delay) delays refills by up to `L` and may admit
//! up to `L × rate` extra in a short real interval (see its docs). Measured costs are in BENCHMARKS.md.

#![no_std]
#![cfg_attr(docsrs, feature(doc_cfg))]

extern crate alloc;
#[cfg(feature = "std")]
extern crate std;

/// Declares a limiter struct generic over its clock `C`, which defaults to
/// [`MonotonicClock`](weir_rl_core::MonotonicClock) where the `std` feature provides it.
macro_rules! default_clock_struct {
    ($(#[$meta:meta])* pub struct $name:ident<C> { $($field:ident: $ty:ty),* $(,)? }) => {
        #[cfg(feature = "std")]
        $(#[$meta])*
        pub struct $name<C = weir_rl_core::MonotonicClock> { $($field: $ty),* }
        #[cfg(not(feature = "std"))]
        $(#[$meta])*
        pub struct $name<C> { $($field: $ty),* }
    };
}

pub mod leased;
mod private;
mod stripes;
pub use leased::{LeaseConfig, LeaseConfigBuilder, LeaseConfigError, LeasedGcra};

/// Cross-crate internals: what weir-keyed's hot keys use of this crate (the
/// leased engine of one key, and the state transitions that move a key's bucket
/// to it and back). **Not part of the public API**: no stability promise, may
/// change in any release.
#[doc(hidden)]
pub mod __private {
    pub use crate::private::{
        StateKind, check_contended, check_n_contended, is_promoted, promote, retire_orphan, retire_promoted, state_kind,
    };
    pub use crate::stripes::LeaseStripes;
}

use weir_rl_core::__private::sync::{AtomicU64, Backoff, CachePadded, Ordering};
use weir_rl_core::__private::ticks;
use weir_rl_core::{
    Algorithm, Clock, Contention, Decision, InsufficientCapacity, Nanos, Quota, QuotaCell, Retire, Snapshot,
};

/// The latest time, in ticks since the limiter's creation, that a limiter uses. Later
/// readings are clamped to it, so `now + capacity in use` (at most 2⁶³ ticks, see
/// [`weir_rl_core::MAX_TOLERANCE_TICKS`]) never overflows a `u64`.
const HORIZON_TICKS: u64 = (1 << 63) - 1;

/// The last reading, in ns since the origin, that a limiter uses (the horizon).
const LAST_NS: u64 = HORIZON_TICKS >> ticks::SHIFT;

/// The TAT of a retired state ([`Retire`]): far beyond any live TAT (at most
/// `HORIZON_TICKS + MAX_TOLERANCE_TICKS` < 2⁶³ + 2⁶²), so a retired state admits
/// nothing.
const RETIRED: u64 = u64::MAX;

/// The TAT of a state whose bucket has moved to a hot-key `LeaseStripes`
/// (`__private::promote`): like [`RETIRED`], beyond any live TAT, so checks on
/// it are denied and the caller routes them to the hot bucket.
const PROMOTED: u64 = u64::MAX - 1;

/// GCRA parameters shared by any number of [`GcraState`]s: the quota and the time
/// origin the states' ticks count from.
///
/// This is the [`Algorithm`] half, for per-key stores; most users want [`Gcra`].
#[derive(Debug)]
#[repr(C)] // the quota cell first (see `Gcra`)
pub struct GcraAlgorithm {
    /// The quota in force, and when it last changed.
    quota: CachePadded<QuotaCell>,
    /// Clock reading (ns) that tick 0 of every state corresponds to.
    origin: u64,
    /// What a check does after losing a race (read on the retry path only).
    contention: Contention,
}

/// One bucket's state: the theoretical arrival time, in ticks (1/16 ns) since the
/// [`GcraAlgorithm`]'s origin. A value at or below "now" means a full bucket.
#[derive(Debug)]
pub struct GcraState {
    tat: AtomicU64,
}

impl GcraState {
    /// A full bucket.
    pub fn new() -> Self {
        Self { tat: AtomicU64::new(0) }
    }
}

impl Default for GcraState {
    fn default() -> Self {
        Self::new()
    }
}

impl GcraAlgorithm {
    /// Parameters for `quota`, with tick 0 at the clock reading `origin` (use the
    /// clock's `now()` at creation).
    pub fn new(quota: Quota, origin: Nanos) -> Self {
        Self { quota: CachePadded::new(QuotaCell::new(quota)), origin: origin.as_u64(), contention: Contention::Fair }
    }

    /// The same parameters, with checks that lose a race to another thread's
    /// retrying as `contention` says ([`Contention::Fair`] by default).
    pub fn with_contention(self, contention: Contention) -> Self {
        Self { contention, ..self }
    }

    /// What a check does after losing a race.
    pub fn contention(&self) -> Contention {
        self.contention
    }

    /// The current quota.
    pub fn quota(&self) -> Quota {
        self.quota.load()
    }

    /// Replaces the quota; every state keeps its TAT (see the crate docs). The
    /// time of the change is not known here, so from now on a refund of an
    /// admission that recorded no charge of this algorithm's (another limiter's
    /// decision) credits nothing; prefer
    /// [`set_quota_with_clock`](Self::set_quota_with_clock) with the states' clock.
    /// For a weir-keyed store with hot keys, change the quota with the store's own
    /// `set_quota`, which also gives back the hot keys' leases.
    pub fn set_quota(&self, quota: Quota) {
        self.quota.store(quota);
    }

    /// Replaces the quota, as [`set_quota`](Self::set_quota) does, recording the
    /// time of the change from `clock` (the clock the states are checked with), so
    /// that a refund can tell a decision made before the change from one made
    /// after it (see the crate docs, "Giving back what was not used").
    pub fn set_quota_with_clock<C: Clock + ?Sized>(&self, quota: Quota, clock: &C) {
        self.quota.store_with_clock(quota, clock);
    }

    /// What giving back `n` units of `admission` credits under `quota` (the quota in
    /// force, loaded before this call), in ticks, never more than the admission was
    /// charged for them:
    ///
    /// - nothing for an admission that took nothing ([`Decision::is_zero_cost`]);
    /// - for an admission that recorded its charge ([`Decision::unit_charge`]), the
    ///   smaller of their price at that charge and their price under `quota` (just
    ///   their price under `quota` when that is the same charge and the quota has not
    ///   changed since the decision, which credits a byte rate's units exactly);
    /// - for a decision that recorded none (another limiter's, such as an all-of
    ///   member that did not decide), their price under `quota` if the quota was
    ///   never replaced, else nothing: what it was charged is not known. (Not
    ///   "replaced since the decision was made": a check reads the clock, then the
    ///   quota, and nothing orders the two, so a decision stamped after a change's
    ///   recorded reading may still have been made under the old quota; credited at
    ///   a slower new quota's price, it gave back another admission's debt.)
    #[inline]
    pub(crate) fn credit_for(&self, quota: &Quota, n: u64, admission: &Decision) -> u64 {
        if admission.is_zero_cost() {
            return 0;
        }
        let current = quota.credit_ticks(n);
        match admission.unit_charge() {
            // The charge of this same quota, never replaced since the decision: each
            // unit's price exactly (a byte rate's rounding included).
            Some(charge) if charge == quota.unit_charge() && !self.quota.changed_since(admission.decided_at()) => {
                current
            }
            Some(charge) => current.min(Quota::credit_ticks_at(charge, n)),
            None if self.quota.unchanged().is_none() => 0,
            None => current,
        }
    }

    /// `now` in ticks since the origin, clamped to `[0, horizon]`. One compare on
    /// the way every reading takes (a reading before the origin wraps to above the
    /// horizon too); only a reading outside the range takes the other branch.
    #[inline(always)]
    fn ticks_at(&self, now: Nanos) -> u64 {
        match self.ticks_in_range(now) {
            Some(ticks) => ticks,
            None => now.as_u64().saturating_sub(self.origin).min(LAST_NS) << ticks::SHIFT,
        }
    }

    /// `now` in ticks since the origin if it is in `[origin, horizon]`: one
    /// subtraction and one compare (a reading before the origin wraps to above the
    /// horizon too). What the inline check path reads time with; a reading outside
    /// the range goes to the out-of-line path, which clamps it.
    #[inline(always)]
    fn ticks_in_range(&self, now: Nanos) -> Option<u64> {
        let since = now.as_u64().wrapping_sub(self.origin);
        (since <= LAST_NS).then_some(since << ticks::SHIFT)
    }

    /// A snapshot with `used` ticks of capacity in use. `remaining` is divided out
    /// only if asked for.
    #[inline]
    fn snapshot_of(quota: &Quota, used: u64) -> Snapshot {
        let left = quota.tolerance_ticks().saturating_sub(used);
        let reset_after_ns = ticks::to_nanos_ceil(used);
        if quota.is_whole_ticks() {
            Snapshot::with_capacity_left(quota.burst(), left, quota.emission_interval_ticks(), reset_after_ns)
        } else {
            // A byte rate's interval is not a whole tick: divide now.
            Snapshot::new(quota.burst(), units_in(quota, left).min(quota.burst()), reset_after_ns)
        }
    }

    /// The one admission routine: `n <= burst` is the caller's to check.
    #[inline(always)]
    pub(crate) fn acquire<C: Clock + ?Sized>(&self, quota: &Quota, state: &GcraState, n: u64, clock: &C) -> Decision {
        self.acquire_inner::<C, false>(quota, state, n, clock.now(), clock).0
    }

    /// [`acquire`](Self::acquire), also returning how many CAS races it lost (a
    /// measure of contention on this state; unused counts compile away).
    ///
    /// Inlined into the caller: one load, one clock read, one compare and at most
    /// one CAS, with no loop; a lost race goes on in the out-of-line
    /// [`acquire_contended`](Self::acquire_contended). Both paths yield an
    /// [`Outcome`], and the `Decision` is built from it once they join, inline, from
    /// the quota's plain words: a caller that reads only whether the request was
    /// admitted has nothing else computed or loaded (measured in BENCHMARKS.md,
    /// "The single check").
    #[inline(always)]
    fn acquire_counting<C: Clock + ?Sized>(
        &self,
        quota: &Quota,
        state: &GcraState,
        n: u64,
        clock: &C,
    ) -> (Decision, u32) {
        self.acquire_inner::<C, true>(quota, state, n, clock.now(), clock)
    }

    /// [`acquire_counting`](Self::acquire_counting), counting the races lost only
    /// if `COUNT` (a count taken through a pointer keeps a stack slot, and so a
    /// stack frame, in a caller that never reads it).
    #[inline(always)]
    fn acquire_inner<C: Clock + ?Sized, const COUNT: bool>(
        &self,
        quota: &Quota,
        state: &GcraState,
        n: u64,
        reading: Nanos,
        clock: &C,
    ) -> (Decision, u32) {
        // One unit costs the interval rounded up to a whole tick, for every quota
        // (a byte rate's single unit too), and may find `unit_slack` in use: no
        // branch on how the quota is charged, no subtraction.
        let (cost, slack) = if n == 1 {
            (quota.emission_interval_ticks(), quota.unit_slack_ticks())
        } else {
            // `cost ≤ tolerance` as `n ≤ burst`.
            let cost = quota.cost_ticks(n);
            (cost, quota.tolerance_ticks() - cost)
        };
        // Ordering: Relaxed; the TAT is the whole state and publishes no other memory.
        // Every read-modify-write of it is ordered by its modification order alone.
        // The clock was read first (`reading`), then the quota and the TAT: a clock
        // that may call into the system (quanta's fallback) then finds nothing
        // loaded to keep across the call. A TAT that moved on since `reading`
        // (admissions at later readings) is judged at `reading`: as strict as at a
        // later one or stricter, never looser (a reading earlier than one already
        // used counts as no time passing).
        let tat = state.tat.load(Ordering::Relaxed);
        // Inline: a reading in range, and its attempts, as `attempt` makes them.
        // Every other case (a reading out of range; a lost race under
        // `Contention::Greedy`) goes on out of line, where nothing this frame holds
        // is live across the call: the inline path keeps every value in registers
        // the call may clobber, so it saves none.
        let mut raced = 0u32; // races lost inline (counted only if `COUNT`)
        let first = match self.ticks_in_range(reading) {
            Some(now) => match Self::attempt_at(state, tat, cost, slack, reading, now) {
                // A lost race under `Contention::Fair`: retry at once, at the same
                // reading, with the value the failed CAS found, until a CAS lands
                // or the request is denied (lock-free: a failed CAS means another
                // landed). A retry that reads nothing new is as short as the race
                // it lost, so the threads of one limiter take turns (governor's
                // policy); a fresh clock reading each time made the loser's window
                // longer than the winner's next check, and it lost again.
                Err(mut found) if self.contention == Contention::Fair => loop {
                    if COUNT {
                        raced = raced.saturating_add(1);
                    }
                    match Self::attempt_at(state, found, cost, slack, reading, now) {
                        Ok(outcome) => break Ok(outcome),
                        Err(actual) => found = actual,
                    }
                },
                first => first,
            },
            None => Err(tat), // no attempt made: the reading needs clamping
        };
        let (outcome, lost) = match first {
            Ok(outcome) => (outcome, raced),
            // One call site for both ways out (a lost race, a reading out of range):
            // the inline path then needs no stack frame, only the call's block does.
            Err(found) if COUNT => {
                let mut lost = 0;
                (self.finish_counting(state, tat, found, cost, slack, clock, &mut lost), lost)
            }
            Err(found) => (self.finish(state, found, cost, slack, clock), u32::from(found != tat)),
        };
        (Self::decision(quota, cost, outcome), lost)
    }

    /// One admission attempt against the TAT value `tat` for a request costing
    /// `cost` ticks, admitted while the TAT is at most `slack` ahead of now: what it
    /// decided, or the value a failed CAS found (another admission landed since
    /// `tat` was read).
    ///
    /// `new_tat = max(tat, now) + cost` is admitted iff `new_tat − now ≤ tolerance`,
    /// that is iff `tat ≤ now + (tolerance − cost)`: one compare, no saturation
    /// (`now < 2⁶³`, `slack ≤ 2⁶²`). A retired or promoted TAT (≥ 2⁶⁴ − 2) is above
    /// every such bound, so it is denied here too.
    #[inline(always)]
    fn attempt<C: Clock + ?Sized>(
        &self,
        state: &GcraState,
        tat: u64,
        cost: u64,
        slack: u64,
        clock: &C,
    ) -> Result<Outcome, u64> {
        let reading = clock.now();
        Self::attempt_at(state, tat, cost, slack, reading, self.ticks_at(reading))
    }

    /// [`attempt`](Self::attempt) at the clock reading `reading`, `now` ticks since
    /// the origin.
    #[inline(always)]
    fn attempt_at(
        state: &GcraState,
        tat: u64,
        cost: u64,
        slack: u64,
        reading: Nanos,
        now: u64,
    ) -> Result<Outcome, u64> {
        if tat > now + slack {
            return Ok(Outcome::denied(reading, tat, now)); // denied: nothing is written
        }
        // tat ≤ now + slack: new_tat ≤ now + tolerance < 2⁶³ + 2⁶², no overflow.
        let new_tat = tat.max(now) + cost;
        // Ordering: Relaxed on success and failure; see `acquire_counting`. The CAS
        // admits only if no other admission landed since `tat` was read.
        match state.tat.compare_exchange(tat, new_tat, Ordering::Relaxed, Ordering::Relaxed) {
            Ok(_) => Ok(Outcome::admitted(reading, tat, now)),
            Err(actual) => Err(actual),
        }
    }

    /// The decision `outcome` stands for, for a request costing `cost` ticks under
    /// `quota`.
    #[inline(always)]
    fn decision(quota: &Quota, cost: u64, outcome: Outcome) -> Decision {
        let used = outcome.used();
        if outcome.is_admitted() {
            // used ≤ slack: no overflow.
            Decision::allowed(Self::snapshot_of(quota, used + cost)).at(outcome.reading).charged(quota.unit_charge())
        } else {
            // The wait: until the debt is back within the tolerance (denied: `used +
            // cost > tolerance`; `used < 2⁶³`, `cost ≤ 2⁶²`: no overflow). A retired
            // state's clamped debt makes it 18 years.
            let excess = used + cost - quota.tolerance_ticks();
            Decision::denied(Self::snapshot_of(quota, used), ticks::to_nanos_ceil(excess)).at(outcome.reading)
        }
    }

    /// The rest of an admission the inline path did not finish: attempts against
    /// `found` (what a failed CAS returned: another admission landed, and the
    /// failed `lock cmpxchg` left the line in this core's cache; or the TAT the
    /// inline path read, when its clock reading was out of range and it made no
    /// attempt) with a fresh clock reading each (clamped to the limiter's range),
    /// each after no wait ([`Contention::Fair`]) or a short exponential backoff
    /// ([`Contention::Greedy`]: contenders stop stealing the line from the one
    /// about to succeed; one short wait, too, before the attempt of a reading out
    /// of range). Measured in BENCHMARKS.md ("fairness"). Every attempt decides for
    /// the same cost and slack as the first (a lease's refill sizes and charges
    /// under one quota).
    ///
    /// The outcome comes back in two registers ([`Outcome`] is two words): a larger
    /// one would come back through memory, and the caller's inline path would store
    /// its own outcome there too, to join the two. Six arguments, all in registers:
    /// a seventh, on the stack, would give the inline path a stack frame.
    #[cold]
    #[inline(never)]
    fn finish<C: Clock + ?Sized>(
        &self,
        state: &GcraState,
        mut found: u64,
        cost: u64,
        slack: u64,
        clock: &C,
    ) -> Outcome {
        let mut backoff = Backoff::retrying(self.contention);
        loop {
            backoff.spin();
            match self.attempt(state, found, cost, slack, clock) {
                Ok(outcome) => return outcome,
                Err(actual) => found = actual,
            }
        }
    }

    /// [`finish`](Self::finish), adding the races it loses to `lost` (`found !=
    /// tat`: the inline attempt lost one too).
    #[cold]
    #[inline(never)]
    #[allow(clippy::too_many_arguments)] // the inline path's registers, passed as they are
    fn finish_counting<C: Clock + ?Sized>(
        &self,
        state: &GcraState,
        tat: u64,
        mut found: u64,
        cost: u64,
        slack: u64,
        clock: &C,
        lost: &mut u32,
    ) -> Outcome {
        let mut backoff = Backoff::retrying(self.contention);
        let mut raced = found != tat;
        loop {
            if raced {
                *lost = lost.saturating_add(1);
                backoff.spin();
            }
            match self.attempt(state, found, cost, slack, clock) {
                Ok(outcome) => return outcome,
                Err(actual) => found = actual,
            }
            raced = true;
        }
    }

    /// One unit's check under the quota in force, also returning how many CAS races
    /// it lost (what weir-keyed's hot keys read). The clock first: see
    /// `acquire_inner`.
    #[inline(always)]
    pub(crate) fn check_counting<C: Clock + ?Sized>(&self, state: &GcraState, clock: &C) -> (Decision, u32) {
        let reading = clock.now();
        self.acquire_inner::<C, true>(&self.quota.load(), state, 1, reading, clock)
    }

    /// [`Algorithm::check_n`] under `quota` (the one quota in force for the whole
    /// check), also returning how many CAS races it lost (what weir-keyed's hot
    /// keys read).
    #[inline(always)]
    pub(crate) fn check_n_counting<C: Clock + ?Sized>(
        &self,
        quota: &Quota,
        state: &GcraState,
        n: u64,
        clock: &C,
    ) -> Result<(Decision, u32), InsufficientCapacity> {
        if n > quota.burst() {
            return Err(InsufficientCapacity { requested: n, capacity: quota.burst() });
        }
        if n == 0 {
            let now = clock.now();
            return Ok((Decision::allowed(self.snapshot_with(quota, state, now)).at(now).zero_cost(), 0));
        }
        Ok(self.acquire_counting(quota, state, n, clock))
    }

    /// The wait a check of one unit would be denied with now, if it would be
    /// denied: the clock, the quota's plain words and one load of the TAT, nothing
    /// written. `None` if it would be admitted, or the reading is out of range
    /// (the caller's full check decides those). A leased check's lean denied path.
    #[inline(always)]
    pub(crate) fn unit_denial<C: Clock + ?Sized>(&self, state: &GcraState, clock: &C) -> Option<weir_rl_core::Wait> {
        // The clock first, as in `acquire_inner`.
        let reading = clock.now();
        let quota = self.quota.load();
        // Ordering: Relaxed; see `acquire_inner`.
        let tat = state.tat.load(Ordering::Relaxed);
        let most = self.ticks_in_range(reading)? + quota.unit_slack_ticks();
        // Denied iff the TAT is past the most that admits one unit; the wait is
        // the excess (see `decision`).
        (tat > most).then(|| weir_rl_core::Wait::from_nanos(ticks::to_nanos_ceil(tat - most)))
    }

    /// The denial `acquire` would return for `n` (≤ burst), if it would deny: one
    /// load, nothing written; else the clock reading it was judged at. Here the
    /// clock is read after the TAT, so that the reading returned is never older than
    /// the TAT it was judged against (the refill that follows charges from it).
    #[inline]
    pub(crate) fn peek_denial<C: Clock + ?Sized>(
        &self,
        quota: &Quota,
        state: &GcraState,
        n: u64,
        clock: &C,
    ) -> Result<Decision, Nanos> {
        let cost = if n == 1 { quota.emission_interval_ticks() } else { quota.cost_ticks(n) };
        // Ordering: Relaxed; see `acquire_counting`.
        let tat = state.tat.load(Ordering::Relaxed);
        let reading = clock.now();
        let now = self.ticks_at(reading);
        if tat > now + (quota.tolerance_ticks() - cost) {
            Ok(Self::decision(quota, cost, Outcome::denied(reading, tat, now)))
        } else {
            Err(reading)
        }
    }

    /// Gives back `credit_at(now)` ticks of capacity in use, never beyond a full
    /// bucket, where `now` is a clock reading taken after the TAT it applies to was
    /// read (so a credit that shrinks with time is never computed from a stale
    /// reading).
    pub(crate) fn refund_ticks_with<C: Clock + ?Sized>(
        &self,
        state: &GcraState,
        clock: &C,
        credit_at: impl Fn(Nanos) -> u64,
    ) {
        // Ordering: Relaxed; see `acquire`.
        let mut tat = state.tat.load(Ordering::Relaxed);
        loop {
            let reading = clock.now();
            let now = self.ticks_at(reading);
            let credit = credit_at(reading);
            if tat <= now || credit == 0 || tat >= PROMOTED {
                return; // already full, retired (idle, so full), or moved to a hot bucket
            }
            let new_tat = tat.saturating_sub(credit).max(now);
            // Ordering: Relaxed; see `acquire`.
            match state.tat.compare_exchange_weak(tat, new_tat, Ordering::Relaxed, Ordering::Relaxed) {
                Ok(_) => return,
                Err(actual) => tat = actual,
            }
        }
    }

    /// `state`'s snapshot at `now` under `quota` (a quota the caller loaded once).
    pub(crate) fn snapshot_with(&self, quota: &Quota, state: &GcraState, now: Nanos) -> Snapshot {
        let now = self.ticks_at(now);
        // Ordering: Relaxed; see `acquire`.
        let tat = state.tat.load(Ordering::Relaxed);
        Self::snapshot_of(quota, tat.saturating_sub(now))
    }
}

/// What one admission attempt decided, before its [`Decision`] is built, in two
/// words: the clock reading it was decided at, and the capacity in use before the
/// request (ticks, below 2⁶³) with whether it was admitted in the top bit.
#[derive(Debug, Clone, Copy)]
struct Outcome {
    reading: Nanos,
    used_admitted: u64,
}

/// The top bit of [`Outcome::used_admitted`].
const ADMITTED: u64 = 1 << 63;

impl Outcome {
    /// An admission judged at `tat` and `now` (ticks): `tat ≤ now + slack`, so
    /// what was in use is at most 2⁶².
    #[inline(always)]
    fn admitted(reading: Nanos, tat: u64, now: u64) -> Self {
        Self { reading, used_admitted: (tat.max(now) - now) | ADMITTED }
    }

    /// A denial judged at `tat` and `now`; what was in use is clamped below 2⁶³
    /// (only a retired or promoted TAT reaches it: a live TAT is never more than
    /// 2⁶² ahead).
    #[inline(always)]
    fn denied(reading: Nanos, tat: u64, now: u64) -> Self {
        Self { reading, used_admitted: (tat.max(now) - now).min(ADMITTED - 1) }
    }

    #[inline(always)]
    fn is_admitted(self) -> bool {
        self.used_admitted & ADMITTED != 0
    }

    /// Ticks of capacity in use before the request.
    #[inline(always)]
    fn used(self) -> u64 {
        self.used_admitted & !ADMITTED
    }
}

/// [`Quota::units_in`] for a byte rate (an interval that is not a whole tick), with
/// no panic path: a check whose caller reads only allowed-or-denied then computes
/// none of its decision's numbers (the compiler drops a division whose result goes
/// unused only if it cannot panic). The same `⌊ticks × count / period⌋`.
#[inline]
fn units_in(quota: &Quota, ticks: u64) -> u64 {
    let period_ticks = quota.period().as_nanos().saturating_mul(u128::from(ticks::PER_NANO));
    let units = (u128::from(ticks) * u128::from(quota.count())).checked_div(period_ticks).unwrap_or(0);
    u64::try_from(units).unwrap_or(u64::MAX)
}

impl Algorithm for GcraAlgorithm {
    type State = GcraState;

    #[inline]
    fn limit(&self) -> u64 {
        self.quota.load().burst()
    }

    fn new_state(&self) -> GcraState {
        GcraState::new()
    }

    #[inline]
    fn check_n<C: Clock + ?Sized>(
        &self,
        state: &GcraState,
        n: u64,
        clock: &C,
    ) -> Result<Decision, InsufficientCapacity> {
        Ok(self.check_n_counting(&self.quota.load(), state, n, clock)?.0)
    }

    #[inline(always)] // the whole fast path, into the caller
    fn check<C: Clock + ?Sized>(&self, state: &GcraState, clock: &C) -> Decision {
        // The clock first: see `acquire_inner`. 1 ≤ burst, always.
        let reading = clock.now();
        self.acquire_inner::<C, false>(&self.quota.load(), state, 1, reading, clock).0
    }

    /// Credits `n` units' time less the time since `admission` was decided, never
    /// below a full bucket; nothing for a denied `admission` or one of cost 0. A
    /// unit's time is `T` under the quota in force (rounded down:
    /// [`Quota::credit_ticks`]), or the `T` it was charged at (recorded in the
    /// decision) if that is less: never more than the admission was charged. A
    /// decision that recorded no charge (another limiter's) is credited at `T` if
    /// the quota was never replaced, else not at all (see the
    /// crate docs). The time since repaid that much of the admission's debt already;
    /// crediting it again could give back capacity that a later admission took.
    fn refund<C: Clock + ?Sized>(
        &self,
        state: &GcraState,
        n: u64,
        admission: &Decision,
        clock: &C,
    ) -> Result<(), InsufficientCapacity> {
        let quota = self.quota.load();
        if n > quota.burst() {
            return Err(InsufficientCapacity { requested: n, capacity: quota.burst() });
        }
        if admission.is_allowed() {
            // What is left of the admission's debt: time since it was decided has
            // been repaying it, and crediting more would give back capacity that a
            // later admission took (over-admission). The same rule as a lease's
            // give-back.
            let credit = self.credit_for(&quota, n, admission);
            let admitted_at = admission.decided_at().as_u64();
            self.refund_ticks_with(state, clock, |now| {
                credit.saturating_sub(ticks::from_nanos(now.as_u64().saturating_sub(admitted_at)))
            });
        }
        Ok(())
    }

    fn snapshot(&self, state: &GcraState, now: Nanos) -> Snapshot {
        let quota = self.quota.load();
        let now = self.ticks_at(now);
        // Ordering: Relaxed; see `acquire`.
        let tat = state.tat.load(Ordering::Relaxed);
        Self::snapshot_of(&quota, tat.saturating_sub(now))
    }

    fn is_idle(&self, state: &GcraState, now: Nanos) -> bool {
        // Ordering: Relaxed; see `acquire`.
        state.tat.load(Ordering::Relaxed) <= self.ticks_at(now)
    }
}

impl Retire for GcraAlgorithm {
    fn try_retire(&self, state: &GcraState, now: Nanos) -> bool {
        let now = self.ticks_at(now);
        // One CAS to RETIRED while the TAT is idle: an admission that lands first
        // changes the TAT, and the new value is judged again (retired only if it is
        // still idle at `now`, which changes no decision at or after `now`); one that
        // comes after finds RETIRED and is denied. A promoted TAT is never idle.
        weir_rl_core::__private::sync::replace_if(&state.tat, RETIRED, |tat| tat <= now)
    }

    fn is_retired(&self, state: &GcraState) -> bool {
        // Ordering: Relaxed; see `try_retire`.
        state.tat.load(Ordering::Relaxed) == RETIRED
    }
}

default_clock_struct! {
    /// A token bucket in GCRA encoding: the limiter most users want.
    ///
    /// See the [crate docs](https://docs.rs/weir-gcra) for the algorithm, its guarantees and a worked
    /// example. Share it between threads by reference (`&Gcra`, `Arc<Gcra>`); every
    /// method takes `&self`.
    ///
    /// ```
    /// use weir_rl_core::Quota;
    /// use weir_gcra::Gcra;
    ///
    /// let limiter = Gcra::new(Quota::per_second(100)?);
    /// let decision = limiter.check();
    /// assert!(decision.is_allowed());
    /// assert_eq!(decision.remaining(), 99);
    /// # Ok::<(), weir_rl_core::QuotaError>(())
    /// ```
    #[derive(Debug)]
    // The quota cell first: the check addresses every word of it from the
    // limiter's own address.
    #[repr(C)]
    pub struct Gcra<C> { algorithm: GcraAlgorithm, state: CachePadded<GcraState>, clock: C }
}

impl<C: Clock> Gcra<C> {
    /// Checks one request: admits it or denies it (consuming nothing).
    #[inline(always)] // the whole fast path, into the caller
    pub fn check(&self) -> Decision {
        Algorithm::check(&self.algorithm, &self.state, &self.clock)
    }

    /// Checks a request of cost `n`, all or nothing. `n` above the burst is an
    /// error (it can never be admitted); `n == 0` is admitted and consumes nothing
    /// (and a refund against it gives nothing back).
    #[inline]
    pub fn check_n(&self, n: u64) -> Result<Decision, InsufficientCapacity> {
        Algorithm::check_n(&self.algorithm, &self.state, n, &self.clock)
    }

    /// The lean check of one request: admitted, or how long to wait
    /// ([`Limiter::admit`](weir_rl_core::Limiter::admit)). The same cost as
    /// [`check`](Self::check) when only its outcome is read: the decision's other
    /// numbers are computed only where they are read.
    ///
    /// ```
    /// use weir_rl_core::{ManualClock, Quota};
    /// use weir_gcra::Gcra;
    ///
    /// let limiter = Gcra::with_clock(Quota::per_minute(1)?, ManualClock::new());
    /// assert!(limiter.admit().is_ok());
    /// assert_eq!(limiter.admit().unwrap_err().duration().as_secs(), 60);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    #[inline(always)]
    pub fn admit(&self) -> Result<(), weir_rl_core::Wait> {
        self.check().verdict()
    }

    /// Gives back `n` units that `admission` (a decision of this limiter) took and
    /// the caller did not use: what is left of their debt (see the crate docs,
    /// "Giving back what was not used"), never beyond a full bucket, nothing for a
    /// denial. `n` above the burst is an error.
    #[inline]
    pub fn refund(&self, n: u64, admission: &Decision) -> Result<(), InsufficientCapacity> {
        Algorithm::refund(&self.algorithm, &self.state, n, admission, &self.clock)
    }

    /// The current state, without consuming anything.
    pub fn snapshot(&self) -> Snapshot {
        Algorithm::snapshot(&self.algorithm, &self.state, self.clock.now())
    }

    /// The clock this limiter reads.
    pub fn clock(&self) -> &C {
        &self.clock
    }
}

impl<C: Clock> weir_rl_core::Limiter for Gcra<C> {
    #[inline(always)]
    fn check(&self) -> Decision {
        Gcra::check(self)
    }
    #[inline(always)]
    fn admit(&self) -> Result<(), weir_rl_core::Wait> {
        Gcra::admit(self)
    }
    #[inline]
    fn check_n(&self, n: u64) -> Result<Decision, InsufficientCapacity> {
        Gcra::check_n(self, n)
    }
    #[inline]
    fn refund(&self, n: u64, admission: &Decision) -> Result<(), InsufficientCapacity> {
        Gcra::refund(self, n, admission)
    }
    fn snapshot(&self) -> Snapshot {
        Gcra::snapshot(self)
    }
}

#[cfg(feature = "std")]
impl Gcra<weir_rl_core::MonotonicClock> {
    /// A full bucket enforcing `quota`, on the default [`MonotonicClock`](weir_rl_core::MonotonicClock).
    pub fn new(quota: Quota) -> Self {
        Self::with_clock(quota, weir_rl_core::MonotonicClock::new())
    }
}

impl<C: Clock> Gcra<C> {
    /// A full bucket enforcing `quota`, reading time from `clock`.
    pub fn with_clock(quota: Quota, clock: C) -> Self {
        let algorithm = GcraAlgorithm::new(quota, clock.now());
        Self { algorithm, state: CachePadded::new(GcraState::new()), clock }
    }

    /// The quota in force.
    pub fn quota(&self) -> Quota {
        self.algorithm.quota()
    }

    /// The same limiter, whose checks that lose a race to another thread's retry as
    /// `contention` says: [`Contention::Fair`] by default (threads take turns);
    /// [`Contention::Greedy`] backs off, for more checks in all under contention
    /// but unfair between threads (see [`Contention`]).
    ///
    /// ```
    /// use weir_rl_core::{Contention, Quota};
    /// use weir_gcra::Gcra;
    ///
    /// let batch = Gcra::new(Quota::per_second(1_000)?).with_contention(Contention::Greedy);
    /// assert!(batch.admit().is_ok());
    /// # Ok::<(), weir_rl_core::QuotaError>(())
    /// ```
    pub fn with_contention(self, contention: Contention) -> Self {
        Self { algorithm: self.algorithm.with_contention(contention), ..self }
    }

    /// Replaces the quota without losing state: the time until the bucket is full
    /// again is kept, and checks see either the old or the new quota, never a mix.
    /// A later refund of an earlier admission credits at most what it was charged
    /// (see the crate docs, "Changing the quota at run time").
    ///
    /// ```
    /// use weir_rl_core::{ManualClock, Quota};
    /// use weir_gcra::Gcra;
    ///
    /// let limiter = Gcra::with_clock(Quota::per_second(10)?, ManualClock::new());
    /// assert!(limiter.check_n(10)?.is_allowed()); // empty: full again in 1 s
    /// limiter.set_quota(Quota::per_second(100)?);  // same 1 s, 100 per second
    /// let s = limiter.snapshot();
    /// assert_eq!((s.limit(), s.remaining(), s.reset_after().as_millis()), (100, 0, 1000));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn set_quota(&self, quota: Quota) {
        self.algorithm.set_quota_with_clock(quota, &self.clock);
    }
}

/// The README's example, compiled and run as a doc test.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
pub struct ReadmeDoctests;

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
//! credited at `T` only if the quota has not changed since it was made (at or
//! after its [`decided_at`](weir_rl_core::Decision::decided_at), by the limiter's
//! clock), and with nothing otherwise, as what it cost here is not known:
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
use weir_rl_core::{Algorithm, Clock, Decision, InsufficientCapacity, Nanos, Quota, QuotaCell, Retire, Snapshot};

/// The latest time, in ticks since the limiter's creation, that a limiter uses. Later
/// readings are clamped to it, so `now + capacity in use` (at most 2⁶³ ticks, see
/// [`weir_rl_core::MAX_TOLERANCE_TICKS`]) never overflows a `u64`.
const HORIZON_TICKS: u64 = (1 << 63) - 1;

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
pub struct GcraAlgorithm {
    /// The quota in force, and when it last changed.
    quota: CachePadded<QuotaCell>,
    /// Clock reading (ns) that tick 0 of every state corresponds to.
    origin: u64,
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
        Self { quota: CachePadded::new(QuotaCell::new(quota)), origin: origin.as_u64() }
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
    ///   member that did not decide), their price under `quota` if the quota has not
    ///   changed since the decision was made, else nothing: what it was charged is
    ///   not known.
    #[inline]
    pub(crate) fn credit_for(&self, quota: &Quota, n: u64, admission: &Decision) -> u64 {
        if admission.is_zero_cost() {
            return 0;
        }
        let changed = self.quota.changed_since(admission.decided_at());
        let current = quota.credit_ticks(n);
        match admission.unit_charge() {
            Some(charge) if charge == quota.unit_charge() && !changed => current,
            Some(charge) => current.min(Quota::credit_ticks_at(charge, n)),
            None if changed => 0,
            None => current,
        }
    }

    /// `now` in ticks since the origin, clamped to the horizon (clamped in ns first,
    /// so the shift cannot overflow: one compare, no saturation logic).
    #[inline]
    fn ticks_at(&self, now: Nanos) -> u64 {
        now.as_u64().saturating_sub(self.origin).min(HORIZON_TICKS >> ticks::SHIFT) << ticks::SHIFT
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
        self.acquire_counting(quota, state, n, clock).0
    }

    /// [`acquire`](Self::acquire), also returning how many CAS races it lost (a
    /// measure of contention on this state; unused counts compile away).
    ///
    /// Inlined into the caller: one load, one clock read, the decision and at most
    /// one CAS, with no loop and no backoff; a lost race goes on in the out-of-line
    /// [`acquire_contended`](Self::acquire_contended). Both paths yield an
    /// [`Outcome`] (two words), and the `Decision` is built from it once they
    /// join, inline: a caller that reads only part of the decision has no more of
    /// it computed (built in each path, the whole decision was written to the
    /// place the out-of-line path returns it in: 35 instructions of a keyed check).
    #[inline(always)]
    fn acquire_counting<C: Clock + ?Sized>(
        &self,
        quota: &Quota,
        state: &GcraState,
        n: u64,
        clock: &C,
    ) -> (Decision, u32) {
        // Ordering: Relaxed; the TAT is the whole state and publishes no other memory.
        // Every read-modify-write of it is ordered by its modification order alone.
        let tat = state.tat.load(Ordering::Relaxed);
        let (outcome, lost) = match self.attempt(quota, state, tat, n, clock) {
            Ok(outcome) => (outcome, 0),
            Err(actual) => self.acquire_contended(*quota, state, actual, n, clock),
        };
        (Self::decision(quota, n, outcome), lost)
    }

    /// One admission attempt against the TAT value `tat`: what it decided, or the
    /// value a failed CAS found (another admission landed since `tat` was read).
    #[inline(always)]
    fn attempt<C: Clock + ?Sized>(
        &self,
        quota: &Quota,
        state: &GcraState,
        tat: u64,
        n: u64,
        clock: &C,
    ) -> Result<Outcome, u64> {
        // The clock is read after the TAT: a retry decides with a fresh reading,
        // never more strictly than it must. (A stale reading could never move the
        // TAT backwards anyway: `new_tat ≥ tat` always.)
        let reading = clock.now();
        let now = self.ticks_at(reading);
        // ≤ 2^63 for a live state (a TAT is never set more than 2^62 ahead);
        // saturates the debt for a retired one (TAT = RETIRED), which is then denied.
        let outcome = Outcome { reading, used: tat.max(now) - now };
        let Some(debt) = outcome.debt(quota, n) else {
            return Ok(outcome); // denied: nothing is written
        };
        let new_tat = now + debt; // now ≤ 2^63 − 1, debt ≤ 2^62: no overflow
        // Ordering: Relaxed on success and failure; see `acquire_counting`. The CAS
        // admits only if no other admission landed since `tat` was read.
        match state.tat.compare_exchange(tat, new_tat, Ordering::Relaxed, Ordering::Relaxed) {
            Ok(_) => Ok(outcome),
            Err(actual) => Err(actual),
        }
    }

    /// The decision `outcome` stands for, for a request of `n` under `quota`.
    #[inline(always)]
    fn decision(quota: &Quota, n: u64, outcome: Outcome) -> Decision {
        match outcome.debt(quota, n) {
            Some(debt) => {
                Decision::allowed(Self::snapshot_of(quota, debt)).at(outcome.reading).charged(quota.unit_charge())
            }
            None => {
                // The wait: until the debt is back within the tolerance. (A retired
                // state's saturated debt makes it as long as can be.)
                let excess = outcome.used.saturating_add(quota.cost_ticks(n)) - quota.tolerance_ticks();
                Decision::denied(Self::snapshot_of(quota, outcome.used), ticks::to_nanos_ceil(excess))
                    .at(outcome.reading)
            }
        }
    }

    /// [`attempt`](Self::attempt) again after a lost race, with the value the failed
    /// CAS returned (the failed `lock cmpxchg` left the line in this core's cache),
    /// after a short exponential backoff so contenders stop stealing the line from
    /// the one about to succeed. Measured in BENCHMARKS.md ("retry policy").
    /// The quota is passed by value, so that the fast path keeps its copy in
    /// registers and only this cold path stores one; every retry decides under it,
    /// as the first attempt did (a lease's refill sizes and charges under one quota).
    #[cold]
    #[inline(never)]
    fn acquire_contended<C: Clock + ?Sized>(
        &self,
        quota: Quota,
        state: &GcraState,
        mut tat: u64,
        n: u64,
        clock: &C,
    ) -> (Outcome, u32) {
        let mut backoff = Backoff::new();
        let mut lost = 1u32;
        loop {
            backoff.spin();
            match self.attempt(&quota, state, tat, n, clock) {
                Ok(outcome) => return (outcome, lost),
                Err(actual) => tat = actual,
            }
            lost = lost.saturating_add(1);
        }
    }

    /// The denial `acquire` would return for `n` (≤ burst), if it would deny: one
    /// load, nothing written; else the clock reading it was judged at. As in
    /// `acquire`, the clock is read after the TAT, so a thread paused before the call
    /// is not denied on old time.
    #[inline]
    pub(crate) fn peek_denial<C: Clock + ?Sized>(
        &self,
        quota: &Quota,
        state: &GcraState,
        n: u64,
        clock: &C,
    ) -> Result<Decision, Nanos> {
        // Ordering: Relaxed; see `acquire_counting`.
        let tat = state.tat.load(Ordering::Relaxed);
        let reading = clock.now();
        let now = self.ticks_at(reading);
        let outcome = Outcome { reading, used: tat.max(now) - now };
        match outcome.debt(quota, n) {
            None => Ok(Self::decision(quota, n, outcome)),
            Some(_) => Err(reading),
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

/// What one admission attempt decided, before its [`Decision`] is built: the
/// clock reading it was decided at and the ticks of capacity in use then.
#[derive(Debug, Clone, Copy)]
struct Outcome {
    reading: Nanos,
    used: u64,
}

impl Outcome {
    /// The debt admitting `n` under `quota` leaves, or `None` if it passes the
    /// tolerance (denied). (`n ≤ burst`: the increment is at most 2^62.)
    #[inline(always)]
    fn debt(self, quota: &Quota, n: u64) -> Option<u64> {
        let debt = self.used.saturating_add(quota.cost_ticks(n));
        (debt <= quota.tolerance_ticks()).then_some(debt)
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
        let quota = self.quota.load();
        if n > quota.burst() {
            return Err(InsufficientCapacity { requested: n, capacity: quota.burst() });
        }
        if n == 0 {
            let now = clock.now();
            return Ok(Decision::allowed(self.snapshot_with(&quota, state, now)).at(now).zero_cost());
        }
        Ok(self.acquire(&quota, state, n, clock))
    }

    #[inline(always)] // the whole fast path, into the caller
    fn check<C: Clock + ?Sized>(&self, state: &GcraState, clock: &C) -> Decision {
        let quota = self.quota.load();
        self.acquire(&quota, state, 1, clock) // 1 ≤ burst, always
    }

    /// Credits `n` units' time less the time since `admission` was decided, never
    /// below a full bucket; nothing for a denied `admission` or one of cost 0. A
    /// unit's time is `T` under the quota in force (rounded down:
    /// [`Quota::credit_ticks`]), or the `T` it was charged at (recorded in the
    /// decision) if that is less: never more than the admission was charged. A
    /// decision that recorded no charge (another limiter's) is credited at `T` if
    /// the quota has not changed since it was decided, else not at all (see the
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

//! [`LeasedGcra`]: one GCRA bucket that many threads can hit at once.
//!
//! ```
//! use weir_rl_core::Quota;
//! use weir_gcra::{LeaseConfig, LeasedGcra};
//!
//! // One stripe per hardware thread, leases of at most 64 permits, usable for 1 ms.
//! let limiter = LeasedGcra::new(Quota::per_second(1_000_000)?, LeaseConfig::default());
//! assert!(limiter.check().is_allowed());
//! // What it may admit beyond the exact limiter, in any span of time:
//! assert!(limiter.over_admission_bound() <= limiter.config().stripes() as u64 * 64);
//! # Ok::<(), weir_rl_core::QuotaError>(())
//! ```
//!
//! # The problem
//!
//! An exact limiter shared by many threads writes one cache line per admitted
//! request. Every core running such a thread wants that line exclusively, so
//! aggregate throughput is bounded by how fast the line moves between cores,
//! whatever the core count (measured in BENCHMARKS.md; see DESIGN.md, "weir-gcra").
//!
//! # The construction
//!
//! Each *stripe* (a cache-padded word; threads are spread over stripes round-robin,
//! see [`weir_rl_core::stripes`]) holds a **lease**: a few permits taken from the exact
//! bucket with one `check_n(L)`. A check first tries to take a permit from its own
//! stripe (one CAS on a line that only the threads of this stripe write); only when
//! the lease is empty or expired does it go to the shared bucket for a new one.
//!
//! - **Adaptive size.** A new lease is `clamp(remaining / (2·stripes), n, max_lease)`
//!   permits, `remaining` being what the bucket can admit now: large while the
//!   bucket is far from empty, down to exactly the request's cost near the limit, so
//!   near the limit leased mode *is* the exact limiter (one bucket CAS per request).
//! - **Expiry.** A lease is spendable from its grant for `lifetime`, rounded down to
//!   4.096 µs units (the resolution of its expiry). When its stripe next needs a
//!   lease, the owner gives back what is left of the old one, and
//!   [`LeasedGcra::release_leases`] gives back every lease at once. "What is left" is
//!   the unused permits' debt, charged at the interval they were granted at, *less the
//!   time since the grant*: the bucket has been refilling meanwhile and may already
//!   have repaid that debt, so crediting every unused permit would credit other
//!   stripes' debt and over-admit. The time is
//!   measured to the latest reading any refill has seen, so neither a stale reading
//!   nor a clock stepping backwards shortens it.
//! - **Ownership.** A stripe being refilled is marked claimed; other threads of the
//!   stripe decide exactly on the bucket meanwhile, so nobody waits for a refill.
//! - **Quota changes.** A lease's permits are sized and priced under one quota, so
//!   [`LeasedGcra::set_quota`] revokes every lease: each is given back as above (at
//!   the interval it was charged at), and a stripe being refilled is marked so that
//!   its refill gives back the lease it takes instead of installing it. A refill
//!   reads the quota after claiming its stripe, so once the change is made every new
//!   lease is sized and charged under the new quota, and a request above the new
//!   burst is an error, never served from an old lease.

//! # The bound
//!
//! Leased permits are admitted by the exact bucket when the lease is granted and
//! spent later, so a permit may be spent up to `lifetime` after its grant, when the
//! exact bucket (which has refilled meanwhile) would not have admitted it. In any
//! span of time Δ, the admitted cost is at most
//!
//! ```text
//! burst + Δ / T  +  stripes × min(max_lease, ⌈lifetime / T⌉ + 1)
//! ```
//!
//! where `T` is the emission interval. The last term is the over-admission bound,
//! [`LeasedGcra::over_admission_bound`]. Over any prefix of a schedule the leased
//! limiter admits at most what an exact [`Gcra`] with a burst larger by that bound
//! admits, not what a [`Gcra`] of the same burst admits plus the bound: a lease
//! taken while the bucket refills holds its permits outside the bucket, so the
//! bucket keeps refilling where the exact one, full, lets the refill go, and the
//! lease is then spent on top of a full bucket. Every such period adds up to the
//! bound to what the leased limiter admits beyond the exact one of the same burst,
//! so that difference has no bound of its own over a long schedule; the span
//! formula above, and the comparison with the larger burst, are the guarantees.
//! The formula is asserted by property tests against random schedules
//! (`tests/leased.rs`) and by a loom model of concurrent checks with the clock
//! moving (`loom-tests/tests/leased.rs`), the comparison with [`Gcra`] by property
//! tests (`tests/leased_model.rs`); with a frozen clock no permit is ever admitted
//! beyond the burst (loom). With `max_lease = 1` the bound is 0 and the limiter
//! decides exactly as [`Gcra`].
//!
//! **Byte rates.** The exact limiter of the comparison charges every unit its
//! exact share of the period, `T`. That is [`Gcra`] for every interval that is a
//! whole number of ticks (every rate up to 16 million per second), but not for a
//! byte rate: there [`Gcra`] charges each call `⌈n × T⌉` ticks, rounded up per call
//! (see [`Quota`]'s "Precision"), so a single-unit call costs `⌈T⌉` (54 ticks at
//! 300 MB/s, where `T` is 53.3), while a lease is charged `⌈lease × T⌉` once and
//! spent without rounding. Single units arriving between the two rates (0.298 a
//! nanosecond at 300 MB/s) are then admitted by the leased limiter at up to `1/T`
//! and by [`Gcra`] at `1/⌈T⌉`, so over a long schedule the leased limiter admits
//! more of them than a [`Gcra`] with the larger burst (2 329 more in 600 000
//! requests, `tests/byte_rates.rs`); it never admits more than the exact-share
//! limiter with the larger burst (`tests/leased_model.rs` draws byte rates), and
//! the span formula holds for every quota. Calls of at least 62.5 ns worth of
//! capacity are charged within 0.1% of their share either way.
//!
//! Across a quota change the bound holds for each quota in turn: what is admitted
//! before the change is within the old quota's bound, and from the change on every
//! span obeys the formula with the new quota's burst, `T` and bound (no lease priced
//! under the old quota is spent after it). Compared with a [`Gcra`] of the larger
//! burst given the same change, the leased limiter admits at most
//! `over_admission_bound() × T` more in *time* per quota change: a permit admitted within the old quota's bound is time
//! the exact bucket still owes at the change, and the new quota re-reads that time,
//! as it re-reads the whole bucket ([`Gcra::set_quota`](crate::Gcra::set_quota)),
//! in its own permits, which are more of them when the new `T` is shorter.
//!
//! Capacity is never created: a give-back credits at most the lease's remaining
//! share of the bucket's debt. A refund ([`LeasedGcra::refund`]) follows the same
//! rule for the units an admission took: their debt (at the interval they were
//! charged, or the interval in force if that is less: after a quota change, the
//! smaller of the two, as for [`Gcra`]) less the time since they were
//! charged (the grant of the lease they came from, which each admission is stamped
//! with, with the grant's interval), so refunding an admission soon after it gives nearly all of it back, and
//! one a lease lifetime later may give back nothing. It can be *lost* for a while instead: the part of an
//! unused lease's debt that the give-back does not credit (at most `elapsed` since
//! the grant) stays in the bucket until the bucket is next full, at most
//! `burst × T` later. With a clock that steps backwards, a give-back still measures
//! time to the latest reading seen, and a lease is not spendable at a reading before
//! its grant; an expired, unreturned lease can become spendable again at a reading
//! back inside its lifetime; and a spend from a lease reads the clock without
//! telling the bucket, so after a step back the bucket decides at a reading up to a
//! lifetime older than one a check has already used, with up to `⌈lifetime / T⌉`
//! more refill than an exact limiter reading the latest time. So for such clocks
//! the bound is `stripes × max_lease + ⌈lifetime / T⌉ + 1` (against [`Gcra`]
//! reading the latest time a check has read; `tests/leased_model.rs`).

//! # What a decision reports
//!
//! An admission from a lease reports the permits left in this stripe's lease as
//! `remaining` (a lower bound: other stripes may hold more) and, as `reset_after`, the
//! time until full as of the lease's grant. [`LeasedGcra::snapshot`] reads the bucket
//! itself, counting leased permits as used.
//!
//! [`Gcra`]: crate::Gcra

use crate::GcraAlgorithm;
use crate::stripes::LeaseStripes;
use core::fmt;
use core::time::Duration;
#[cfg(feature = "std")]
use weir_rl_core::Limiter;
use weir_rl_core::stripes::MAX_STRIPES;
use weir_rl_core::{Algorithm, Clock, Decision, InsufficientCapacity, Quota, Snapshot};

/// Bits of a lease word holding the permits left.
pub(crate) const PERMIT_BITS: u32 = 16;
/// The largest lease.
pub const MAX_LEASE: u64 = (1 << PERMIT_BITS) - 1;
/// A lease's expiry is kept in units of 2^12 ns (4.096 µs) since the limiter's
/// creation, in the 48 high bits: 36 years.
pub(crate) const EXPIRY_SHIFT_NS: u32 = 12;
/// The largest expiry (below the lease words that mark a stripe claimed or revoked).
pub(crate) const MAX_EXPIRY: u64 = (u64::MAX >> PERMIT_BITS) - 2;

/// How a [`LeasedGcra`] (or a hot key of a per-key store) spreads its bucket over
/// stripes: how many stripes, the largest lease a stripe takes, and how long a
/// lease stays spendable. Built with [`LeaseConfig::builder`]; the
/// [`Default`] is one stripe per hardware thread
/// ([`default_stripes`](weir_rl_core::stripes::default_stripes)), leases of at most 64
/// permits, usable for 1 ms.
///
/// ```
/// use std::time::Duration;
/// use weir_gcra::LeaseConfig;
///
/// let config = LeaseConfig::builder().stripes(4).max_lease(32).lifetime(Duration::from_micros(100)).build()?;
/// assert_eq!((config.stripes(), config.max_lease()), (4, 32));
/// assert!(LeaseConfig::builder().max_lease(0).build().is_err()); // the error names the option
/// # Ok::<(), weir_gcra::LeaseConfigError>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LeaseConfig {
    pub(crate) stripes: usize,
    pub(crate) max_lease: u64,
    pub(crate) lifetime: Duration,
}

/// The default lease size and lifetime.
const DEFAULT_MAX_LEASE: u64 = 64;
const DEFAULT_LIFETIME: Duration = Duration::from_millis(1);

impl Default for LeaseConfig {
    /// One stripe per hardware thread, leases of at most 64 permits, usable for 1 ms.
    fn default() -> Self {
        Self {
            stripes: weir_rl_core::stripes::default_stripes(),
            max_lease: DEFAULT_MAX_LEASE,
            lifetime: DEFAULT_LIFETIME,
        }
    }
}

/// Builds a [`LeaseConfig`]: every option starts at its default, each setter
/// replaces one and never fails, and [`build`](Self::build) checks them all.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[must_use = "a builder does nothing until `build` is called"]
pub struct LeaseConfigBuilder {
    stripes: usize,
    max_lease: u64,
    lifetime: Duration,
}

impl LeaseConfigBuilder {
    /// `n` stripes (1 ..= [`MAX_STRIPES`], rounded up to a power of two); threads
    /// share them round-robin (see [`weir_rl_core::stripes`]). Default: one per
    /// hardware thread.
    pub fn stripes(self, n: usize) -> Self {
        Self { stripes: n, ..self }
    }

    /// Leases of at most `n` permits (1 ..= [`MAX_LEASE`]); 1 makes the limiter
    /// exact. Default: 64.
    pub fn max_lease(self, n: u64) -> Self {
        Self { max_lease: n, ..self }
    }

    /// Leases spendable for `lifetime` after their grant (4.096 µs ..= 1 day).
    /// Default: 1 ms.
    pub fn lifetime(self, lifetime: Duration) -> Self {
        Self { lifetime, ..self }
    }

    /// The configuration, or the first option out of its range.
    pub fn build(self) -> Result<LeaseConfig, LeaseConfigError> {
        let stripes = match weir_rl_core::__private::checked_stripes(self.stripes) {
            Some(stripes) => stripes,
            None if self.stripes == 0 => return Err(LeaseConfigError::ZeroStripes),
            None => return Err(LeaseConfigError::TooManyStripes(self.stripes)),
        };
        match self.max_lease {
            0 => return Err(LeaseConfigError::ZeroLease),
            n if n > MAX_LEASE => return Err(LeaseConfigError::LeaseTooLarge(n)),
            _ => {}
        }
        if self.lifetime < Duration::from_nanos(1 << EXPIRY_SHIFT_NS) || self.lifetime > Duration::from_secs(86_400) {
            return Err(LeaseConfigError::Lifetime(self.lifetime));
        }
        Ok(LeaseConfig { stripes, max_lease: self.max_lease, lifetime: self.lifetime })
    }
}

impl LeaseConfig {
    /// A builder starting from the [`Default`]s.
    pub fn builder() -> LeaseConfigBuilder {
        let LeaseConfig { stripes, max_lease, lifetime } = Self::default();
        LeaseConfigBuilder { stripes, max_lease, lifetime }
    }

    /// Stripes (a power of two).
    pub fn stripes(&self) -> usize {
        self.stripes
    }

    /// The largest lease.
    pub fn max_lease(&self) -> u64 {
        self.max_lease
    }

    /// How long a lease stays usable.
    pub fn lifetime(&self) -> Duration {
        self.lifetime
    }

    /// The over-admission bound for `quota`:
    /// `stripes × min(max_lease, ⌈lifetime / T⌉ + 1)` (see the module docs).
    pub fn over_admission_bound(&self, quota: &Quota) -> u64 {
        let lifetime_ticks = weir_rl_core::__private::ticks::from_nanos(
            weir_rl_core::__private::duration_as_nanos_saturating(self.lifetime),
        );
        // ⌈lifetime / T⌉ + 1, with T exact (a byte rate's T is not a whole tick).
        let per_stripe = if quota.is_whole_ticks() {
            lifetime_ticks.div_ceil(quota.emission_interval_ticks()).saturating_add(1)
        } else {
            quota.units_in(lifetime_ticks).saturating_add(2)
        };
        (self.stripes as u64).saturating_mul(per_stripe.min(self.max_lease)) * (self.max_lease > 1) as u64
    }
}

/// Why a [`LeaseConfig`] is invalid.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum LeaseConfigError {
    /// Zero stripes.
    ZeroStripes,
    /// More than [`MAX_STRIPES`] stripes.
    TooManyStripes(usize),
    /// A maximum lease of zero permits.
    ZeroLease,
    /// A maximum lease above [`MAX_LEASE`].
    LeaseTooLarge(u64),
    /// A lifetime below 4.096 µs or above a day.
    Lifetime(Duration),
}

impl fmt::Display for LeaseConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Self::ZeroStripes => f.write_str("stripes is zero; a leased limiter needs at least one stripe"),
            Self::TooManyStripes(n) => {
                write!(f, "stripes {n} is more than the {MAX_STRIPES} a leased limiter supports")
            }
            Self::ZeroLease => f.write_str("max_lease is zero; use 1 for an exact limiter, more to scale"),
            Self::LeaseTooLarge(n) => write!(f, "max_lease {n} is more than the largest lease, {MAX_LEASE} permits"),
            Self::Lifetime(d) => write!(f, "lifetime {d:?} is outside 4.096 µs ..= 1 day"),
        }
    }
}

#[cfg(feature = "std")]
impl std::error::Error for LeaseConfigError {}

default_clock_struct! {
    /// One GCRA bucket that many threads can hit at once: stripes lease batches of
    /// permits from it, with a documented, bounded over-admission (see the
    /// [module docs](crate::leased)).
    ///
    /// ```
    /// use std::time::Duration;
    /// use weir_rl_core::{ManualClock, Quota};
    /// use weir_gcra::{LeaseConfig, LeasedGcra};
    ///
    /// let quota = Quota::per_second(1_000_000)?; // T = 1 µs
    /// let config = LeaseConfig::builder().stripes(4).max_lease(32).lifetime(Duration::from_micros(100)).build()?;
    /// let limiter = LeasedGcra::with_clock(quota, config, ManualClock::new());
    /// assert!(limiter.check().is_allowed());
    /// // 4 stripes × min(32, 100 µs / 1 µs + 1) = 128
    /// assert_eq!(limiter.over_admission_bound(), 128);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    #[derive(Debug)]
    pub struct LeasedGcra<C> { algorithm: GcraAlgorithm, stripes: LeaseStripes, clock: C }
}

#[cfg(feature = "std")]
impl LeasedGcra<weir_rl_core::MonotonicClock> {
    /// A full bucket enforcing `quota`, spread as `config` says
    /// ([`LeaseConfig::default`]: one stripe per hardware thread), on the default
    /// [`MonotonicClock`](weir_rl_core::MonotonicClock).
    ///
    /// ```
    /// use weir_rl_core::Quota;
    /// use weir_gcra::{LeaseConfig, LeasedGcra};
    ///
    /// let limiter = LeasedGcra::new(Quota::per_second(1_000)?, LeaseConfig::default());
    /// assert!(limiter.check().is_allowed());
    /// # Ok::<(), weir_rl_core::QuotaError>(())
    /// ```
    pub fn new(quota: Quota, config: LeaseConfig) -> Self {
        Self::with_clock(quota, config, weir_rl_core::MonotonicClock::new())
    }
}

impl<C: Clock> LeasedGcra<C> {
    /// A full bucket enforcing `quota`, spread as `config` says, reading `clock`.
    pub fn with_clock(quota: Quota, config: LeaseConfig, clock: C) -> Self {
        let origin = clock.now();
        Self { algorithm: GcraAlgorithm::new(quota, origin), stripes: LeaseStripes::new(config, origin), clock }
    }

    /// Checks one request on the calling thread's stripe.
    #[cfg(feature = "std")]
    #[inline]
    pub fn check(&self) -> Decision {
        self.check_on(weir_rl_core::__private::thread_stripe(), 1).unwrap_or_else(|_| self.never_admits())
    }

    /// The lean check of one request on the calling thread's stripe: admitted, or
    /// how long to wait ([`Limiter::admit`]). A spend from the stripe's lease makes
    /// no decision, so reads nothing of the lease's grant; use
    /// [`check`](Self::check) for the numbers a client is told, or to refund.
    ///
    /// ```
    /// use weir_rl_core::{ManualClock, Quota};
    /// use weir_gcra::{LeaseConfig, LeasedGcra};
    ///
    /// let config = LeaseConfig::builder().stripes(1).max_lease(4).build()?;
    /// let limiter = LeasedGcra::with_clock(Quota::per_hour(3)?, config, ManualClock::new());
    /// assert!((0..3).all(|_| limiter.admit().is_ok()));
    /// assert_eq!(limiter.admit().unwrap_err().duration().as_secs(), 1_200); // 20 minutes
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    #[cfg(feature = "std")]
    #[inline(always)]
    pub fn admit(&self) -> Result<(), weir_rl_core::Wait> {
        self.stripes.admit_on(&self.algorithm, weir_rl_core::__private::thread_stripe(), &self.clock)
    }

    /// Checks a request of cost `n` on the calling thread's stripe.
    #[cfg(feature = "std")]
    #[inline]
    pub fn check_n(&self, n: u64) -> Result<Decision, InsufficientCapacity> {
        self.check_on(weir_rl_core::__private::thread_stripe(), n)
    }

    /// Checks a request of cost `n` on stripe `stripe` (taken modulo the stripe
    /// count). For `no_std` callers, or callers that pin work to stripes themselves.
    #[inline]
    pub fn check_on(&self, stripe: usize, n: u64) -> Result<Decision, InsufficientCapacity> {
        self.stripes.check_on(&self.algorithm, stripe, n, &self.clock)
    }

    /// Gives back `n` units that `admission` (a decision of this limiter) took and
    /// the caller did not use: their debt (never more than they were charged, also
    /// after a quota change), less the time since they were charged
    /// (a lease's grant, up to its lifetime before the admission), is credited to
    /// the bucket, never beyond full; nothing for a denial. Capacity is never
    /// created (see the module docs); with a lease's grant long past, little or
    /// nothing comes back. `n` above the burst is an error.
    ///
    /// ```
    /// use weir_rl_core::{ManualClock, Quota};
    /// use weir_gcra::{LeaseConfig, LeasedGcra};
    ///
    /// let config = LeaseConfig::builder().stripes(1).max_lease(4).build()?;
    /// let limiter = LeasedGcra::with_clock(Quota::per_second(10)?, config, ManualClock::new());
    /// let admission = limiter.check_on(0, 3)?;
    /// limiter.refund(3, &admission)?; // the clock has not moved: all 3 come back
    /// limiter.release_leases();
    /// assert_eq!(limiter.snapshot().remaining(), 10);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn refund(&self, n: u64, admission: &Decision) -> Result<(), InsufficientCapacity> {
        self.stripes.refund(&self.algorithm, n, admission, &self.clock)
    }

    /// Gives every unused leased permit back to the bucket (what is left of its debt;
    /// see the module docs), e.g. before a quiet period. A refill in progress gives
    /// back the lease it takes as well, so when this returns no lease granted before
    /// the call can be spent.
    pub fn release_leases(&self) {
        self.stripes.release(&self.algorithm, &self.clock);
    }

    /// The bucket's state, counting leased permits as used.
    pub fn snapshot(&self) -> Snapshot {
        self.algorithm.snapshot(self.stripes.bucket(), self.clock.now())
    }

    /// See [`LeaseConfig::over_admission_bound`].
    pub fn over_admission_bound(&self) -> u64 {
        self.stripes.config().over_admission_bound(&self.algorithm.quota())
    }

    /// The configuration.
    pub fn config(&self) -> &LeaseConfig {
        self.stripes.config()
    }

    /// The quota in force.
    pub fn quota(&self) -> Quota {
        self.algorithm.quota()
    }

    /// The same limiter, whose checks on the bucket that lose a race to another
    /// thread's (refills, checks decided on the bucket) retry as `contention` says
    /// ([`Contention::Fair`](weir_rl_core::Contention::Fair) by default).
    pub fn with_contention(self, contention: weir_rl_core::Contention) -> Self {
        Self { algorithm: self.algorithm.with_contention(contention), ..self }
    }

    /// Replaces the quota (see [`Gcra::set_quota`](crate::Gcra::set_quota)) and
    /// revokes every lease granted under the old one, as
    /// [`release_leases`](Self::release_leases) does: a lease's permits were sized
    /// and priced under the old quota, and spending them on top of the new bucket
    /// could admit far beyond `burst + over_admission_bound()`. When this returns, no
    /// old lease can be spent, and new leases are sized and charged under `quota`.
    ///
    /// ```
    /// use weir_rl_core::{ManualClock, Quota};
    /// use weir_gcra::{LeaseConfig, LeasedGcra};
    ///
    /// let config = LeaseConfig::builder().stripes(1).max_lease(64).build()?;
    /// let limiter = LeasedGcra::with_clock(Quota::per_second(1_000)?, config, ManualClock::new());
    /// assert_eq!(limiter.check_on(0, 1)?.remaining(), 63); // a lease of 64, one spent
    /// limiter.set_quota(Quota::per_second(1)?.with_burst(10)?);
    /// // The 63 unused permits went back: 9 of the new burst of 10 are left, as for `Gcra`.
    /// let admitted = (0..100).filter(|_| limiter.check_on(0, 1).is_ok_and(|d| d.is_allowed())).count();
    /// assert_eq!(admitted, 9);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn set_quota(&self, quota: Quota) {
        self.algorithm.set_quota_with_clock(quota, &self.clock);
        self.stripes.release(&self.algorithm, &self.clock);
    }

    /// The clock this limiter reads.
    pub fn clock(&self) -> &C {
        &self.clock
    }

    #[cfg(feature = "std")]
    #[cold]
    fn never_admits(&self) -> Decision {
        // Unreachable in practice: a cost of 1 never exceeds a burst (≥ 1).
        Decision::denied(self.snapshot(), u64::MAX)
    }
}

#[cfg(feature = "std")]
impl<C: Clock> Limiter for LeasedGcra<C> {
    #[inline]
    fn check(&self) -> Decision {
        LeasedGcra::check(self)
    }
    #[inline]
    fn admit(&self) -> Result<(), weir_rl_core::Wait> {
        LeasedGcra::admit(self)
    }
    #[inline]
    fn check_n(&self, n: u64) -> Result<Decision, InsufficientCapacity> {
        LeasedGcra::check_n(self, n)
    }
    #[inline]
    fn refund(&self, n: u64, admission: &Decision) -> Result<(), InsufficientCapacity> {
        LeasedGcra::refund(self, n, admission)
    }
    fn snapshot(&self) -> Snapshot {
        LeasedGcra::snapshot(self)
    }
}

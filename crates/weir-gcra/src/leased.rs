//! [`LeasedGcra`]: one GCRA bucket that every core can hit at once.
//!
//! # The problem
//!
//! An exact limiter shared by every core writes one cache line per admitted request.
//! Every core wants that line exclusively, so aggregate throughput is bounded by how
//! fast the line moves between cores, whatever the core count (BENCHMARKS.md: one
//! shared `fetch_add` falls from 363 M/s on one thread to 104 M/s on two).
//!
//! # The construction
//!
//! Each *stripe* (a cache-padded word; threads are spread over stripes round-robin)
//! holds a **lease**: a few permits taken from the exact bucket with one
//! `check_n(L)`. A check first tries to take a permit from its own stripe (one
//! uncontended CAS on a line no other core writes); only when the lease is empty or
//! expired does it go to the shared bucket for a new one.
//!
//! - **Adaptive size.** A new lease is `clamp(remaining / (2·stripes), n, max_lease)`
//!   permits, `remaining` being what the bucket can admit now: large while the
//!   bucket is far from empty, down to exactly the request's cost near the limit, so
//!   near the limit leased mode *is* the exact limiter (one bucket CAS per request).
//! - **Expiry.** A lease is usable for `lifetime`; the owner gives back what is left
//!   of an expired lease when it next comes for a new one, and
//!   [`LeasedGcra::release_leases`] gives back every lease at once. "What is left" is
//!   the unused permits' debt *less the time since the grant*: the bucket has been
//!   refilling meanwhile and may already have repaid that debt, so crediting every
//!   unused permit would credit other stripes' debt and over-admit (a property test
//!   found exactly that).
//!
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
//! [`LeasedGcra::over_admission_bound`]; it is asserted by property tests against
//! random schedules (`tests/leased.rs`), and with a frozen clock no permit is ever
//! admitted beyond the burst (loom: `loom-tests/tests/leased.rs`). With
//! `max_lease = 1` the bound is 0 and the limiter decides exactly as [`Gcra`].
//!
//! Capacity held by an unused lease is never lost for longer than `lifetime`: its
//! remaining debt is given back when its stripe next refills, and in any case the
//! lease's debt is repaid by the bucket's own refill within `lease × T ≤ lifetime`
//! after the lease stopped being spendable (when `max_lease × T ≤ lifetime`; else
//! within `max_lease × T`).
//!
//! # What a decision reports
//!
//! An admission from a lease reports the permits left in this stripe's lease as
//! `remaining` (a lower bound: other stripes may hold more) and, as `reset_after`, the
//! time until full as of the lease's grant. [`LeasedGcra::snapshot`] reads the bucket
//! itself, counting leased permits as used.
//!
//! [`Gcra`]: crate::Gcra

use crate::{GcraAlgorithm, GcraState};
use core::fmt;
use core::time::Duration;
#[cfg(feature = "std")]
use weir_core::Limiter;
use weir_core::sync::{AtomicU64, CachePadded, Ordering};
use weir_core::{Algorithm, Clock, Decision, InsufficientCapacity, Nanos, Quota, Snapshot};

use alloc::boxed::Box;
use alloc::vec::Vec;

/// Bits of a lease word holding the permits left.
const PERMIT_BITS: u32 = 16;
/// The largest lease.
pub const MAX_LEASE: u64 = (1 << PERMIT_BITS) - 1;
/// A lease's expiry is kept in units of 2^12 ns (4.096 µs) since the limiter's
/// creation, in the 48 high bits: 36 years.
const EXPIRY_SHIFT_NS: u32 = 12;
/// The most stripes a limiter may have.
pub const MAX_STRIPES: usize = 1 << 12;

/// How a [`LeasedGcra`] spreads its bucket over stripes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LeaseConfig {
    stripes: usize,
    max_lease: u64,
    lifetime: Duration,
}

impl LeaseConfig {
    /// `stripes` stripes (rounded up to a power of two), leases of at most 64
    /// permits, usable for 1 ms.
    pub fn new(stripes: usize) -> Result<Self, LeaseConfigError> {
        if stripes == 0 {
            return Err(LeaseConfigError::ZeroStripes);
        }
        if stripes > MAX_STRIPES {
            return Err(LeaseConfigError::TooManyStripes(stripes));
        }
        Ok(Self { stripes: stripes.next_power_of_two(), max_lease: 64, lifetime: Duration::from_millis(1) })
    }

    /// One stripe per available core (rounded up to a power of two).
    #[cfg(feature = "std")]
    pub fn per_core() -> Self {
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get()).min(MAX_STRIPES);
        Self { stripes: cores.next_power_of_two(), max_lease: 64, lifetime: Duration::from_millis(1) }
    }

    /// Leases of at most `max_lease` permits (1 ..= 65535). 1 makes the limiter exact.
    pub fn with_max_lease(self, max_lease: u64) -> Result<Self, LeaseConfigError> {
        match max_lease {
            0 => Err(LeaseConfigError::ZeroLease),
            n if n > MAX_LEASE => Err(LeaseConfigError::LeaseTooLarge(n)),
            n => Ok(Self { max_lease: n, ..self }),
        }
    }

    /// Leases usable for `lifetime` after their grant (at least 4.096 µs, at most a day).
    pub fn with_lifetime(self, lifetime: Duration) -> Result<Self, LeaseConfigError> {
        if lifetime < Duration::from_nanos(1 << EXPIRY_SHIFT_NS) || lifetime > Duration::from_secs(86_400) {
            return Err(LeaseConfigError::Lifetime(lifetime));
        }
        Ok(Self { lifetime, ..self })
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
        let lifetime_ticks =
            weir_core::ticks::from_nanos(weir_core::nanos::duration_as_nanos_saturating(self.lifetime));
        let per_stripe = lifetime_ticks.div_ceil(quota.emission_interval_ticks()).saturating_add(1);
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
            Self::ZeroStripes => f.write_str("a leased limiter needs at least one stripe"),
            Self::TooManyStripes(n) => {
                write!(f, "{n} stripes is more than the {MAX_STRIPES} a leased limiter supports")
            }
            Self::ZeroLease => f.write_str("the maximum lease is zero; use 1 for an exact limiter, more to scale"),
            Self::LeaseTooLarge(n) => write!(f, "a lease of {n} permits is more than the maximum of {MAX_LEASE}"),
            Self::Lifetime(d) => write!(f, "a lease lifetime of {d:?} is outside 4.096 µs ..= 1 day"),
        }
    }
}

#[cfg(feature = "std")]
impl std::error::Error for LeaseConfigError {}

/// One stripe: its lease, and what the bucket looked like when it was granted.
#[derive(Debug, Default)]
struct Stripe {
    /// `expiry << 16 | permits`: permits left, and the expiry in 4.096 µs units since
    /// the limiter's origin. 0 = no lease.
    lease: AtomicU64,
    /// The bucket's burst, reset-after (ns) and clock reading (ns) at the grant, for
    /// the decisions of admissions from this lease (so the fast path reads nothing
    /// shared). Written by the granting thread only.
    granted_limit: AtomicU64,
    granted_reset_ns: AtomicU64,
    granted_at_ns: AtomicU64,
}

const fn pack(permits: u64, expiry: u64) -> u64 {
    expiry << PERMIT_BITS | permits
}

const fn unpack(word: u64) -> (u64, u64) {
    (word & MAX_LEASE, word >> PERMIT_BITS)
}

/// A GCRA bucket and the stripes that lease permits from it, without a quota or a
/// clock of their own: the parts of a [`LeasedGcra`] that a per-key store keeps per
/// hot key (the quota and clock are the store's).
#[derive(Debug)]
pub struct LeaseStripes {
    state: CachePadded<GcraState>,
    stripes: Box<[CachePadded<Stripe>]>,
    config: LeaseConfig,
    /// Clock reading (ns) the lease expiries count from.
    origin_ns: u64,
    lifetime_units: u64,
}

impl LeaseStripes {
    /// A full bucket spread as `config` says; lease expiries count from `origin`.
    pub fn new(config: LeaseConfig, origin: Nanos) -> Self {
        let stripes: Vec<CachePadded<Stripe>> = (0..config.stripes).map(|_| CachePadded::default()).collect();
        let lifetime_ns = weir_core::nanos::duration_as_nanos_saturating(config.lifetime);
        Self {
            state: CachePadded::new(GcraState::new()),
            stripes: stripes.into_boxed_slice(),
            config,
            origin_ns: origin.as_u64(),
            lifetime_units: lifetime_ns >> EXPIRY_SHIFT_NS,
        }
    }

    /// The bucket the stripes lease from.
    pub fn bucket(&self) -> &GcraState {
        &self.state
    }

    /// The configuration.
    pub fn config(&self) -> &LeaseConfig {
        &self.config
    }

    /// Checks a request of cost `n` on stripe `stripe` (taken modulo the stripe
    /// count), under `algorithm`'s quota, at `clock`'s time.
    #[inline]
    pub fn check_on<C: Clock + ?Sized>(
        &self,
        algorithm: &GcraAlgorithm,
        stripe: usize,
        n: u64,
        clock: &C,
    ) -> Result<Decision, InsufficientCapacity> {
        let stripe = &self.stripes[stripe & (self.stripes.len() - 1)];
        let now = clock.now();
        let now_units = self.units(now);
        // Ordering: Relaxed; a lease word carries only its own permits and expiry;
        // permits leave the shared bucket by the bucket's own CAS, so no other memory
        // is published through it.
        let mut word = stripe.lease.load(Ordering::Relaxed);
        loop {
            let (permits, expiry) = unpack(word);
            if n == 0 || permits < n || now_units >= expiry {
                break;
            }
            // Ordering: Relaxed; see the load above.
            match stripe.lease.compare_exchange_weak(word, word - n, Ordering::Relaxed, Ordering::Relaxed) {
                Ok(_) => return Ok(Self::leased_decision(stripe, permits - n, now)),
                Err(actual) => word = actual,
            }
        }
        self.refill(algorithm, stripe, word, n, now, now_units)
    }

    /// The slow path: give back what is left of the stripe's lease, take a new one
    /// (or exactly `n` near the limit), and install what is left of it.
    #[cold]
    fn refill(
        &self,
        algorithm: &GcraAlgorithm,
        stripe: &Stripe,
        mut word: u64,
        n: u64,
        now: Nanos,
        now_units: u64,
    ) -> Result<Decision, InsufficientCapacity> {
        let burst = algorithm.limit();
        if n > burst {
            return Err(InsufficientCapacity { requested: n, capacity: burst });
        }
        if n == 0 {
            return Ok(Decision::allowed(algorithm.snapshot(&self.state, now)));
        }
        // Claim the stripe's lease (so no other thread of this stripe spends it while
        // it is being given back), then give back what is left of its debt.
        while word != 0 {
            // Ordering: Relaxed; see `check_on`.
            match stripe.lease.compare_exchange_weak(word, 0, Ordering::Relaxed, Ordering::Relaxed) {
                Ok(_) => {
                    self.give_back(algorithm, word, now);
                    break;
                }
                Err(actual) => word = actual,
            }
        }
        // Lease size: a share of what the bucket can admit now, at least n.
        let remaining = algorithm.snapshot(&self.state, now).remaining();
        let share = remaining / (2 * self.stripes.len() as u64);
        let lease = share.clamp(n, self.config.max_lease.max(n)).min(burst);
        let mut decision = algorithm.check_n(&self.state, lease, &now)?;
        let mut granted = lease;
        if decision.is_denied() && lease > n {
            decision = algorithm.check_n(&self.state, n, &now)?;
            granted = n;
        }
        if decision.is_denied() {
            return Ok(decision);
        }
        let left = granted - n;
        if left > 0 {
            let expiry = now_units.saturating_add(self.lifetime_units).min(u64::MAX >> PERMIT_BITS);
            // Ordering: Relaxed; these describe the lease to its own stripe's readers,
            // which only use them to fill in decisions (approximate by design).
            stripe.granted_limit.store(burst, Ordering::Relaxed);
            // Ordering: Relaxed; as above.
            stripe.granted_reset_ns.store(decision.reset_after().as_nanos() as u64, Ordering::Relaxed);
            // Ordering: Relaxed; as above.
            stripe.granted_at_ns.store(now.as_u64(), Ordering::Relaxed);
            // Install the rest, unless another thread of this stripe installed a lease
            // meanwhile: then give ours back.
            let lease = pack(left, expiry);
            // Ordering: Relaxed; see `check_on`.
            if stripe.lease.compare_exchange(0, lease, Ordering::Relaxed, Ordering::Relaxed).is_err() {
                self.give_back(algorithm, lease, now);
            }
        }
        Ok(Decision::allowed(Snapshot::new(burst, left, decision.reset_after().as_nanos() as u64)))
    }

    fn leased_decision(stripe: &Stripe, left: u64, now: Nanos) -> Decision {
        // Ordering: Relaxed (all three); approximate by design (see the module docs).
        let limit = stripe.granted_limit.load(Ordering::Relaxed);
        let reset = stripe.granted_reset_ns.load(Ordering::Relaxed);
        let at = stripe.granted_at_ns.load(Ordering::Relaxed);
        let reset = reset.saturating_sub(now.as_u64().saturating_sub(at));
        Decision::allowed(Snapshot::new(limit, left, reset))
    }

    /// Gives back to the bucket what is left of a claimed lease `word`: the unused
    /// permits' debt less the time since the grant. The bucket has been refilling
    /// since the grant, and that refill may already have repaid this lease's debt,
    /// so crediting all unused permits could credit other stripes' debt (over-admit).
    /// The lease's remaining share of the bucket's debt is at least
    /// `unused·T − elapsed`, never more than `unused·T`; crediting that lower bound
    /// is always safe. The grant time is recovered from the expiry, rounded down,
    /// which only overstates the elapsed time.
    fn give_back(&self, algorithm: &GcraAlgorithm, word: u64, now: Nanos) {
        let (permits, expiry) = unpack(word);
        if permits == 0 || expiry >= u64::MAX >> PERMIT_BITS {
            return; // nothing left, or an expiry clamped at the horizon: credit nothing
        }
        let granted_ns = self.origin_ns.saturating_add(expiry.saturating_sub(self.lifetime_units) << EXPIRY_SHIFT_NS);
        let elapsed_ticks = weir_core::ticks::from_nanos(now.as_u64().saturating_sub(granted_ns));
        let owed = permits.saturating_mul(algorithm.quota().emission_interval_ticks());
        let credit = owed.saturating_sub(elapsed_ticks);
        if credit > 0 {
            algorithm.refund_ticks(&self.state, credit, &now);
        }
    }

    /// Gives every lease back to the bucket (what is left of its debt).
    pub fn release(&self, algorithm: &GcraAlgorithm, now: Nanos) {
        for stripe in self.stripes.iter() {
            // Ordering: Relaxed; see `check_on`.
            let word = stripe.lease.swap(0, Ordering::Relaxed);
            self.give_back(algorithm, word, now);
        }
    }

    /// Whether every lease granted so far has expired at `now`: every grant advanced
    /// the bucket's TAT past its grant time, so a TAT at least one lifetime in the
    /// past means no lease can still be spent.
    pub fn all_leases_expired(&self, algorithm: &GcraAlgorithm, now: Nanos) -> bool {
        let lifetime = Nanos::new(self.lifetime_units << EXPIRY_SHIFT_NS);
        let earlier = Nanos::new(now.as_u64().saturating_sub(lifetime.as_u64() + (1 << EXPIRY_SHIFT_NS)));
        algorithm.is_idle(&self.state, earlier)
    }

    /// `now` in lease-expiry units since the origin.
    #[inline]
    fn units(&self, now: Nanos) -> u64 {
        now.as_u64().saturating_sub(self.origin_ns) >> EXPIRY_SHIFT_NS
    }
}

macro_rules! leased_struct {
    ($($default:ty)?) => {
        /// One GCRA bucket that every core can hit at once: stripes lease batches of
        /// permits from it, with a documented, bounded over-admission (see the
        /// [module docs](crate::leased)).
        ///
        /// ```
        /// use std::time::Duration;
        /// use weir_core::{ManualClock, Quota};
        /// use weir_gcra::{LeaseConfig, LeasedGcra};
        ///
        /// let quota = Quota::per_second(1_000_000)?; // T = 1 µs
        /// let config = LeaseConfig::new(4)?.with_max_lease(32)?.with_lifetime(Duration::from_micros(100))?;
        /// let limiter = LeasedGcra::with_clock(quota, config, ManualClock::new());
        /// assert!(limiter.check().is_allowed());
        /// // 4 stripes × min(32, 100 µs / 1 µs + 1) = 128
        /// assert_eq!(limiter.over_admission_bound(), 128);
        /// # Ok::<(), Box<dyn std::error::Error>>(())
        /// ```
        #[derive(Debug)]
        pub struct LeasedGcra<C $(= $default)?> {
            algorithm: GcraAlgorithm,
            stripes: LeaseStripes,
            clock: C,
        }
    };
}

#[cfg(feature = "std")]
leased_struct!(weir_core::MonotonicClock);
#[cfg(not(feature = "std"))]
leased_struct!();

#[cfg(feature = "std")]
impl LeasedGcra<weir_core::MonotonicClock> {
    /// A full bucket enforcing `quota`, one stripe per core, on the default clock.
    pub fn new(quota: Quota) -> Self {
        Self::with_clock(quota, LeaseConfig::per_core(), weir_core::MonotonicClock::new())
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
        self.check_on(stripe_of_this_thread(), 1).unwrap_or_else(|_| self.never_admits())
    }

    /// Checks a request of cost `n` on the calling thread's stripe.
    #[cfg(feature = "std")]
    #[inline]
    pub fn check_n(&self, n: u64) -> Result<Decision, InsufficientCapacity> {
        self.check_on(stripe_of_this_thread(), n)
    }

    /// Checks a request of cost `n` on stripe `stripe` (taken modulo the stripe
    /// count). For `no_std` callers, or callers that pin work to stripes themselves.
    #[inline]
    pub fn check_on(&self, stripe: usize, n: u64) -> Result<Decision, InsufficientCapacity> {
        self.stripes.check_on(&self.algorithm, stripe, n, &self.clock)
    }

    /// Gives every unused leased permit back to the bucket (what is left of its debt;
    /// see the module docs), e.g. before a quiet period or to read an exact snapshot.
    pub fn release_leases(&self) {
        self.stripes.release(&self.algorithm, self.clock.now());
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

    /// Replaces the quota (see [`Gcra::set_quota`](crate::Gcra::set_quota)); leases
    /// already granted stay valid until they expire.
    pub fn set_quota(&self, quota: Quota) {
        self.algorithm.set_quota(quota);
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
    fn check_n(&self, n: u64) -> Result<Decision, InsufficientCapacity> {
        LeasedGcra::check_n(self, n)
    }
    fn snapshot(&self) -> Snapshot {
        LeasedGcra::snapshot(self)
    }
}

/// The calling thread's stripe index: threads are numbered round-robin on first use.
/// (Under loom, where statics cannot hold modelled atomics, every thread is stripe 0;
/// models pick stripes explicitly with `check_on`.)
#[cfg(feature = "std")]
#[inline]
pub fn stripe_of_this_thread() -> usize {
    #[cfg(not(loom))]
    {
        use weir_core::sync::AtomicUsize;
        static NEXT: AtomicUsize = AtomicUsize::new(0);
        std::thread_local! {
            // Ordering: Relaxed; a ticket counter, publishing nothing.
            static INDEX: usize = NEXT.fetch_add(1, Ordering::Relaxed);
        }
        INDEX.with(|i| *i)
    }
    #[cfg(loom)]
    0
}

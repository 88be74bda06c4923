//! [`LeasedGcra`]: one GCRA bucket that every core can hit at once.
//!
//! # The problem
//!
//! An exact limiter shared by every core writes one cache line per admitted request.
//! Every core wants that line exclusively, so aggregate throughput is bounded by how
//! fast the line moves between cores, whatever the core count (BENCHMARKS.md: one
//! shared `fetch_add` falls from 410 M/s on one thread to 111 M/s on two).
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
//! - **Expiry.** A lease is spendable from its grant for `lifetime`, rounded down to
//!   4.096 µs units (the resolution of its expiry). When its stripe next needs a
//!   lease, the owner gives back what is left of the old one, and
//!   [`LeasedGcra::release_leases`] gives back every lease at once. "What is left" is
//!   the unused permits' debt, charged at the interval they were granted at, *less the
//!   time since the grant*: the bucket has been refilling meanwhile and may already
//!   have repaid that debt, so crediting every unused permit would credit other
//!   stripes' debt and over-admit (a property test found exactly that). The time is
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
//! [`LeasedGcra::over_admission_bound`]. For requests of cost 1, over any prefix of
//! a schedule the leased limiter also admits at most what the exact [`Gcra`] admits
//! plus that bound; with larger costs that comparison does not hold (once the two
//! states differ by a permit, the exact limiter may deny an `n`-unit request the
//! leased one admits), and the span formula above is the guarantee. The
//! formula is asserted by property tests against random schedules
//! (`tests/leased.rs`) and by a loom model of concurrent checks with the clock
//! moving (`loom-tests/tests/leased.rs`), the comparison with [`Gcra`] by property
//! tests (`tests/leased_model.rs`); with a frozen clock no permit is ever admitted
//! beyond the burst (loom). With `max_lease = 1` the bound is 0 and the limiter
//! decides exactly as [`Gcra`].
//!
//! Across a quota change the bound holds for each quota in turn: what is admitted
//! before the change is within the old quota's bound, and from the change on every
//! span obeys the formula with the new quota's burst, `T` and bound (no lease priced
//! under the old quota is spent after it). Compared with [`Gcra`] given the same
//! change, the leased limiter admits at most `over_admission_bound() × T` more in
//! *time* per quota in force: a permit admitted within the old quota's bound is time
//! the exact bucket still owes at the change, and the new quota re-reads that time,
//! as it re-reads the whole bucket ([`Gcra::set_quota`](crate::Gcra::set_quota)),
//! in its own permits, which are more of them when the new `T` is shorter.
//!
//! Capacity is never created: a give-back credits at most the lease's remaining
//! share of the bucket's debt. A refund ([`LeasedGcra::refund`]) follows the same
//! rule for the units an admission took: their debt less the time since they were
//! charged (the grant of the lease they came from, which each admission is stamped
//! with), so refunding an admission soon after it gives nearly all of it back, and
//! one a lease lifetime later may give back nothing. It can be *lost* for a while instead: the part of an
//! unused lease's debt that the give-back does not credit (at most `elapsed` since
//! the grant) stays in the bucket until the bucket is next full, at most
//! `burst × T` later. With a clock that steps backwards, a give-back still measures
//! time to the latest reading seen, and a lease is not spendable at a reading before
//! its grant; an expired, unreturned lease can become spendable again at a reading
//! back inside its lifetime, so for such clocks the bound is `stripes × max_lease`
//! (against [`Gcra`] reading the latest time a check has read).

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
use weir_core::__private::sync::{AtomicU64, CachePadded, Ordering};
#[cfg(feature = "std")]
use weir_core::Limiter;
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
/// The largest expiry (below [`REVOKED`]'s and [`CLAIMED`]'s).
const MAX_EXPIRY: u64 = (u64::MAX >> PERMIT_BITS) - 2;
pub use weir_core::stripes::MAX_STRIPES;

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
        let stripes = match weir_core::__private::checked_stripes(stripes) {
            Some(stripes) => stripes,
            None if stripes == 0 => return Err(LeaseConfigError::ZeroStripes),
            None => return Err(LeaseConfigError::TooManyStripes(stripes)),
        };
        Ok(Self { stripes, max_lease: 64, lifetime: Duration::from_millis(1) })
    }

    /// One stripe per available core (rounded up to a power of two).
    #[cfg(feature = "std")]
    pub fn per_core() -> Self {
        Self { stripes: weir_core::stripes::default_stripes(), max_lease: 64, lifetime: Duration::from_millis(1) }
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
            weir_core::__private::ticks::from_nanos(weir_core::__private::duration_as_nanos_saturating(self.lifetime));
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

/// One stripe: its lease, and what was true when the lease was granted.
///
/// The lease word has four kinds of value: `0` (no lease), [`CLAIMED`] (one thread
/// owns the stripe while it gives back the old lease and takes a new one),
/// [`REVOKED`] (still owned, but the lease being taken must be given back, not
/// installed), or a lease `expiry << 16 | permits`. Only the thread that claimed the
/// stripe writes the grant fields; it publishes them with the Release operation that
/// installs the lease, and the next claimer reads them after its Acquire claim, so a
/// give-back always uses the grant time and interval of exactly the lease it gives
/// back.
#[derive(Debug, Default)]
struct Stripe {
    lease: AtomicU64,
    /// The clock reading (ns) the lease was granted at (at or before the bucket's
    /// own reading for the grant).
    granted_at_ns: AtomicU64,
    /// What the lease's permits were charged at ([`charge_of`]).
    granted_interval: AtomicU64,
    /// The bucket's burst and reset-after (ns) at the grant, for the decisions of
    /// admissions from this lease (the fast path reads nothing shared).
    granted_limit: AtomicU64,
    granted_reset_ns: AtomicU64,
}

/// Marks a [`charge_of`] that is a fixed-point interval (2⁻³² tick) rather than whole
/// ticks.
const FRACTIONAL_CHARGE: u64 = 1 << 63;

/// How a grant's permits were charged, in one word for `Stripe::granted_interval`:
/// the emission interval in whole ticks, or, for a quota charged exactly (a byte
/// rate: `!is_whole_ticks()`, so an interval under 1000 ticks), that interval in
/// 2⁻³² tick rounded down, marked [`FRACTIONAL_CHARGE`].
fn charge_of(quota: &Quota) -> u64 {
    if quota.is_whole_ticks() {
        return quota.emission_interval_ticks();
    }
    let period_ticks = quota.period().as_nanos() * weir_core::__private::ticks::PER_NANO as u128;
    // Under 1000 ticks: below 2⁴² in 2⁻³² tick, clear of the mark.
    FRACTIONAL_CHARGE | ((period_ticks << 32) / quota.count() as u128) as u64
}

/// The debt, in ticks, of `permits` unused permits charged at `charge` ([`charge_of`]),
/// never more than their part of what their grant was charged: whole intervals
/// exactly; fractional ones rounded down (the grant was rounded up), so a give-back
/// never credits a tick that was not charged.
fn credit_of(permits: u64, charge: u64) -> u64 {
    if charge & FRACTIONAL_CHARGE == 0 {
        permits.saturating_mul(charge)
    } else {
        ((permits as u128 * (charge & !FRACTIONAL_CHARGE) as u128) >> 32) as u64
    }
}

/// The lease word of a stripe being refilled: zero permits, so the fast path never
/// spends from it; other threads of the stripe decide on the bucket meanwhile.
const CLAIMED: u64 = (u64::MAX >> PERMIT_BITS) << PERMIT_BITS;

/// The lease word of a stripe being refilled whose leases [`LeaseStripes::release`]
/// revoked meanwhile (a quota change, say): the refill may have sized and charged
/// its new lease under the old quota, so it gives that lease back instead of
/// installing it. Zero permits, like [`CLAIMED`].
const REVOKED: u64 = CLAIMED - (1 << PERMIT_BITS);

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
    /// The latest clock reading (ns) any refill used: a give-back measures the time
    /// since a grant from at least this, so a clock stepping backwards counts as no
    /// time passing and cannot make an old lease's debt look unpaid.
    latest_ns: CachePadded<AtomicU64>,
    stripes: Box<[CachePadded<Stripe>]>,
    config: LeaseConfig,
    /// Clock reading (ns) the lease expiries count from.
    origin_ns: u64,
    lifetime_units: u64,
    /// Who these stripes belong to (a per-key store records the key's state here),
    /// so that a holder of another state never uses them.
    owner: usize,
}

impl LeaseStripes {
    /// A full bucket spread as `config` says; lease expiries count from `origin`.
    pub fn new(config: LeaseConfig, origin: Nanos) -> Self {
        let stripes: Vec<CachePadded<Stripe>> = (0..config.stripes).map(|_| CachePadded::default()).collect();
        let lifetime_ns = weir_core::__private::duration_as_nanos_saturating(config.lifetime);
        Self {
            state: CachePadded::new(GcraState::new()),
            latest_ns: CachePadded::new(AtomicU64::new(origin.as_u64())),
            stripes: stripes.into_boxed_slice(),
            config,
            origin_ns: origin.as_u64(),
            lifetime_units: lifetime_ns >> EXPIRY_SHIFT_NS,
            owner: 0,
        }
    }

    /// The same, recording `owner` (any identifier the caller chooses; a per-key
    /// store uses the address of the key's state).
    pub fn with_owner(self, owner: usize) -> Self {
        Self { owner, ..self }
    }

    /// The owner recorded by [`with_owner`](Self::with_owner) (0 if none).
    pub fn owner(&self) -> usize {
        self.owner
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
        // Ordering: Relaxed; spending from a lease needs only the atomicity of this
        // word's CAS (permits left the bucket by the bucket's own CAS); the grant
        // fields the decision reports are approximate by design.
        let mut word = stripe.lease.load(Ordering::Relaxed);
        if n != 0 && unpack(word).0 == 0 {
            // The denied path, decided here: with nothing of the stripe's lease to
            // give back (or the stripe claimed by a refill), a bucket that denies `n`
            // is the decision, read from one load with nothing written and the clock
            // read after it, as `Gcra` denies (one clock read per check: the refill
            // below uses the same reading). Claiming the stripe and asking for a
            // lease would deny the same, at about twice the cost (BENCHMARKS.md,
            // "Leased GCRA, denied path").
            let quota = algorithm.quota();
            let now = if n <= quota.burst() {
                match algorithm.peek_denial(&quota, &self.state, n, clock) {
                    Ok(denied) => return Ok(denied),
                    Err(now) => now,
                }
            } else {
                clock.now()
            };
            return self.refill(algorithm, stripe, word, n, now, clock);
        }
        let now = clock.now();
        let now_units = self.units(now);
        loop {
            let (permits, expiry) = unpack(word);
            // A lease is spendable from its grant until its expiry; a reading before
            // the grant (a clock stepping backwards) does not revive an old lease.
            let valid = now_units < expiry && now_units.saturating_add(self.lifetime_units) >= expiry;
            if n == 0 || permits < n || !valid {
                break;
            }
            // The grant time, read before the CAS: the decision is stamped with it (a
            // refund measures the time since the permits were charged from it).
            // Ordering: Relaxed; the Release CAS below keeps it from being a later
            // lease's.
            let granted_at = stripe.granted_at_ns.load(Ordering::Relaxed);
            // Ordering: Release on success: a refill that claims the stripe after this
            // CAS Acquires the word it wrote (or a later one of its release sequence),
            // so the refill's writes of the next grant's fields happen after the read
            // above, which therefore sees this lease's grant time or an earlier one,
            // never a later one (an earlier one only makes a refund credit less).
            // Relaxed on failure; see the load above.
            match stripe.lease.compare_exchange_weak(word, word - n, Ordering::Release, Ordering::Relaxed) {
                Ok(_) => return Ok(Self::leased_decision(stripe, permits - n, granted_at, now)),
                Err(actual) => word = actual,
            }
        }
        self.refill(algorithm, stripe, word, n, now, clock)
    }

    /// The slow path: claim the stripe, give back what is left of its lease, take a
    /// new one (or exactly `n` near the limit), and install what is left of it.
    #[cold]
    fn refill<C: Clock + ?Sized>(
        &self,
        algorithm: &GcraAlgorithm,
        stripe: &Stripe,
        mut word: u64,
        n: u64,
        now: Nanos,
        clock: &C,
    ) -> Result<Decision, InsufficientCapacity> {
        // The quota for what is decided before the stripe is claimed; a new lease is
        // sized and charged under the quota read after the claim (below).
        let quota = algorithm.quota();
        if n > quota.burst() {
            return Err(InsufficientCapacity { requested: n, capacity: quota.burst() });
        }
        if n == 0 {
            return Ok(Decision::allowed(algorithm.snapshot_with(&quota, &self.state, now)).at(now));
        }
        // Claim the stripe (the caller has already denied what the bucket denies
        // with nothing of this stripe's lease to give back). If another thread of this stripe is refilling it, do not
        // wait: decide this request exactly, on the bucket.
        loop {
            if word == CLAIMED || word == REVOKED {
                return Ok(algorithm.acquire(&quota, &self.state, n, clock));
            }
            // Ordering: Acquire on success pairs with the Release store that installed
            // this lease, so its grant fields are visible below.
            match stripe.lease.compare_exchange_weak(word, CLAIMED, Ordering::Acquire, Ordering::Relaxed) {
                Ok(_) => break,
                Err(actual) => word = actual,
            }
        }
        self.give_back_owned(algorithm, stripe, word, clock);
        // One quota for the new lease, read after the claim: sizes and charges agree
        // even if the quota changes meanwhile, and a lease is never priced under a
        // quota that a change has already revoked. A change whose revocation (in
        // `release`) reached this stripe before the claim is visible here: the claim
        // read the Release store that ended that revocation, or a later value. A
        // change that reaches the stripe after the claim marks it REVOKED, and
        // `install` gives the new lease back.
        let quota = algorithm.quota();
        if n > quota.burst() {
            self.install(algorithm, stripe, 0, clock);
            return Err(InsufficientCapacity { requested: n, capacity: quota.burst() });
        }
        // Lease size: a share of what the bucket can admit now, at least n.
        let now = clock.now();
        // Ordering: Relaxed; see `latest_ns`.
        self.latest_ns.fetch_max(now.as_u64(), Ordering::Relaxed);
        let remaining = algorithm.snapshot_with(&quota, &self.state, now).remaining();
        let share = remaining / (2 * self.stripes.len() as u64);
        let lease = share.clamp(n, self.config.max_lease.max(n)).min(quota.burst());
        let mut decision = algorithm.acquire(&quota, &self.state, lease, clock);
        let mut granted = lease;
        if decision.is_denied() && lease > n {
            decision = algorithm.acquire(&quota, &self.state, n, clock);
            granted = n;
        }
        let left = if decision.is_allowed() { granted - n } else { 0 };
        let installed = if left > 0 {
            // Ordering: Relaxed (all four); published by the Release CAS in `install`.
            stripe.granted_at_ns.store(now.as_u64(), Ordering::Relaxed);
            stripe.granted_interval.store(charge_of(&quota), Ordering::Relaxed);
            stripe.granted_limit.store(quota.burst(), Ordering::Relaxed);
            stripe.granted_reset_ns.store(decision.reset_after().as_nanos() as u64, Ordering::Relaxed);
            let expiry = self.units(now).saturating_add(self.lifetime_units).min(MAX_EXPIRY);
            pack(left, expiry)
        } else {
            0
        };
        self.install(algorithm, stripe, installed, clock);
        if decision.is_denied() {
            return Ok(decision);
        }
        // Stamped with the grant's reading, which is at or before the bucket's own
        // (`refund` measures the time since the charge from it).
        Ok(Decision::allowed(Snapshot::new(quota.burst(), left, decision.reset_after().as_nanos() as u64)).at(now))
    }

    /// Ends this thread's ownership of a stripe it claimed by installing `lease` (a
    /// lease word whose grant fields this thread has written, or 0), unless
    /// [`release`](Self::release) revoked the stripe meanwhile: then `lease` is given
    /// back and the stripe left empty.
    fn install<C: Clock + ?Sized>(&self, algorithm: &GcraAlgorithm, stripe: &Stripe, lease: u64, clock: &C) {
        // Ordering: Release on success publishes the grant fields to the next claimer
        // (see `Stripe`) and ends the ownership. Acquire on failure pairs with the
        // Release CAS in `release` that marked the stripe REVOKED, so the quota change
        // before it happens-before the Release store of 0 below, and so before the
        // next claimer's quota read. Strong: a spurious failure would revoke for
        // nothing.
        if stripe.lease.compare_exchange(CLAIMED, lease, Ordering::Release, Ordering::Acquire).is_err() {
            // Only `release` changes a claimed word, and only to REVOKED.
            self.give_back_owned(algorithm, stripe, lease, clock);
            // Ordering: Release ends the ownership (nothing new to publish).
            stripe.lease.store(0, Ordering::Release);
        }
    }

    /// An admission from a lease granted at `granted_at` (ns), stamped with that
    /// time: when its permits were charged to the bucket.
    fn leased_decision(stripe: &Stripe, left: u64, granted_at: u64, now: Nanos) -> Decision {
        // Ordering: Relaxed (both); approximate by design (see the module docs).
        let limit = stripe.granted_limit.load(Ordering::Relaxed);
        let reset = stripe.granted_reset_ns.load(Ordering::Relaxed);
        let reset = reset.saturating_sub(now.as_u64().saturating_sub(granted_at));
        Decision::allowed(Snapshot::new(limit, left, reset)).at(Nanos::new(granted_at))
    }

    /// Gives back `n` units that `admission` (a decision of these stripes) took and
    /// the caller did not use: credits the bucket with their debt, at the quota in
    /// force, less the time since they were charged, as a lease's give-back does (the
    /// bucket has been refilling since, and may have repaid part of that debt
    /// already; crediting all of it could credit other stripes' debt). An admission
    /// is stamped with the time its permits were charged: its lease's grant, or the
    /// bucket check that decided it. Nothing for a denial; `n` above the burst is an
    /// error.
    pub fn refund<C: Clock + ?Sized>(
        &self,
        algorithm: &GcraAlgorithm,
        n: u64,
        admission: &Decision,
        clock: &C,
    ) -> Result<(), InsufficientCapacity> {
        let quota = algorithm.quota();
        if n > quota.burst() {
            return Err(InsufficientCapacity { requested: n, capacity: quota.burst() });
        }
        if n == 0 || admission.is_denied() {
            return Ok(());
        }
        let owed = credit_of(n, charge_of(&quota));
        let charged_at = admission.decided_at().as_u64();
        algorithm.refund_ticks_with(&self.state, clock, |now| {
            // Ordering: Relaxed; a monotone hint (see `latest_ns`).
            let latest = self.latest_ns.fetch_max(now.as_u64(), Ordering::Relaxed).max(now.as_u64());
            owed.saturating_sub(weir_core::__private::ticks::from_nanos(latest.saturating_sub(charged_at)))
        });
        Ok(())
    }

    /// Gives back to the bucket what is left of the lease `word` of a stripe this
    /// thread has claimed: the unused permits' debt, charged at the interval of their
    /// grant, less the time since the grant. The bucket has been refilling since the
    /// grant, and that refill may already have repaid part of this debt, so crediting
    /// all of it could credit other stripes' debt (over-admit); the lease's remaining
    /// share of the bucket's debt is at least `unused·T − elapsed`, so crediting that
    /// is always safe. The elapsed time comes from a reading taken inside the
    /// refund's CAS loop, after the TAT is read, never from an older one; a reading
    /// before the grant credits nothing.
    fn give_back_owned<C: Clock + ?Sized>(&self, algorithm: &GcraAlgorithm, stripe: &Stripe, word: u64, clock: &C) {
        let (permits, _) = unpack(word);
        if permits == 0 {
            return;
        }
        // Ordering: Relaxed (both); made visible by the Acquire claim (see `Stripe`).
        let granted_at = stripe.granted_at_ns.load(Ordering::Relaxed);
        let charge = stripe.granted_interval.load(Ordering::Relaxed);
        let owed = credit_of(permits, charge);
        algorithm.refund_ticks_with(&self.state, clock, |now| {
            // Ordering: Relaxed; a monotone hint (see `latest_ns`), read after the
            // refill that granted this lease raised it.
            let latest = self.latest_ns.fetch_max(now.as_u64(), Ordering::Relaxed).max(now.as_u64());
            owed.saturating_sub(weir_core::__private::ticks::from_nanos(latest.saturating_sub(granted_at)))
        });
    }

    /// Revokes every lease: gives each back to the bucket (what is left of its debt:
    /// the unused permits' debt at their grant's interval, less the time since the
    /// grant; see the module docs), and marks each stripe being refilled right now so
    /// that its refill gives back the lease it is taking instead of installing it.
    ///
    /// When this returns, no lease granted before the call can be spent, and every
    /// refill that claims a stripe afterwards reads the quota in force when the call
    /// began, or a newer one. So after changing `algorithm`'s quota, calling this
    /// revokes every lease priced under the old one ([`LeasedGcra::set_quota`] does
    /// both).
    pub fn release<C: Clock + ?Sized>(&self, algorithm: &GcraAlgorithm, clock: &C) {
        for stripe in self.stripes.iter() {
            // Ordering: Relaxed; every value is judged again by the CAS below.
            let mut word = stripe.lease.load(Ordering::Relaxed);
            loop {
                let result = match word {
                    // Already marked: its refill will give its new lease back.
                    REVOKED => break,
                    // Ordering: Release pairs with the Acquire failure of the refill's
                    // install (see `install`); Relaxed on failure (judged again).
                    CLAIMED => stripe.lease.compare_exchange(CLAIMED, REVOKED, Ordering::Release, Ordering::Relaxed),
                    // Claim even an empty stripe: the Release store of 0 that ends this
                    // claim is what carries the caller's quota change to the stripe's
                    // next claimer. Ordering: Acquire on success, as in `refill`.
                    _ => stripe.lease.compare_exchange(word, CLAIMED, Ordering::Acquire, Ordering::Relaxed),
                };
                match result {
                    Ok(CLAIMED) => break, // marked REVOKED
                    Ok(_) => {
                        self.give_back_owned(algorithm, stripe, word, clock);
                        // Ordering: Release ends the ownership, and publishes the
                        // caller's quota change to the next claimer (see `refill`).
                        stripe.lease.store(0, Ordering::Release);
                        break;
                    }
                    Err(actual) => word = actual,
                }
            }
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
        self.check_on(weir_core::__private::thread_stripe(), 1).unwrap_or_else(|_| self.never_admits())
    }

    /// Checks a request of cost `n` on the calling thread's stripe.
    #[cfg(feature = "std")]
    #[inline]
    pub fn check_n(&self, n: u64) -> Result<Decision, InsufficientCapacity> {
        self.check_on(weir_core::__private::thread_stripe(), n)
    }

    /// Checks a request of cost `n` on stripe `stripe` (taken modulo the stripe
    /// count). For `no_std` callers, or callers that pin work to stripes themselves.
    #[inline]
    pub fn check_on(&self, stripe: usize, n: u64) -> Result<Decision, InsufficientCapacity> {
        self.stripes.check_on(&self.algorithm, stripe, n, &self.clock)
    }

    /// Gives back `n` units that `admission` (a decision of this limiter) took and
    /// the caller did not use: their debt, less the time since they were charged
    /// (a lease's grant, up to its lifetime before the admission), is credited to
    /// the bucket, never beyond full; nothing for a denial. Capacity is never
    /// created (see the module docs); with a lease's grant long past, little or
    /// nothing comes back. `n` above the burst is an error.
    ///
    /// ```
    /// use weir_core::{ManualClock, Quota};
    /// use weir_gcra::{LeaseConfig, LeasedGcra};
    ///
    /// let config = LeaseConfig::new(1)?.with_max_lease(4)?;
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

    /// Replaces the quota (see [`Gcra::set_quota`](crate::Gcra::set_quota)) and
    /// revokes every lease granted under the old one, as
    /// [`release_leases`](Self::release_leases) does: a lease's permits were sized
    /// and priced under the old quota, and spending them on top of the new bucket
    /// could admit far beyond `burst + over_admission_bound()`. When this returns, no
    /// old lease can be spent, and new leases are sized and charged under `quota`.
    ///
    /// ```
    /// use weir_core::{ManualClock, Quota};
    /// use weir_gcra::{LeaseConfig, LeasedGcra};
    ///
    /// let config = LeaseConfig::new(1)?.with_max_lease(64)?;
    /// let limiter = LeasedGcra::with_clock(Quota::per_second(1_000)?, config, ManualClock::new());
    /// assert_eq!(limiter.check_on(0, 1)?.remaining(), 63); // a lease of 64, one spent
    /// limiter.set_quota(Quota::per_second(1)?.with_burst(10)?);
    /// // The 63 unused permits went back: 9 of the new burst of 10 are left, as for `Gcra`.
    /// let admitted = (0..100).filter(|_| limiter.check_on(0, 1).is_ok_and(|d| d.is_allowed())).count();
    /// assert_eq!(admitted, 9);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn set_quota(&self, quota: Quota) {
        self.algorithm.set_quota(quota);
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

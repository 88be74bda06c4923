//! [`LeaseStripes`]: the engine of [`LeasedGcra`](crate::LeasedGcra), one GCRA bucket
//! and the stripes that lease permits from it (see the [`leased`](crate::leased)
//! module docs for the construction and its bound). A per-key store keeps one per
//! hot key; reached from other crates through [`crate::__private`], not part of
//! the public API.

use crate::leased::{EXPIRY_SHIFT_NS, LeaseConfig, MAX_EXPIRY, MAX_LEASE, PERMIT_BITS};
use crate::{GcraAlgorithm, GcraState};
use weir_rl_core::__private::sync::{AtomicU64, CachePadded, Ordering};
use weir_rl_core::{Algorithm, Clock, Decision, InsufficientCapacity, Nanos, Quota, Snapshot, Wait};

use alloc::boxed::Box;
use alloc::vec::Vec;

/// One stripe: its lease, and what was true when the lease was granted.
///
/// The lease word has four kinds of value: `0` (no lease), [`CLAIMED`] (one thread
/// owns the stripe while it gives back the old lease and takes a new one),
/// [`REVOKED`] (still owned, but the lease being taken must be given back, not
/// installed), or a lease `expiry << 16 | permits`. Only the thread that claimed the
/// stripe writes the grant fields; it publishes them with the Release operation that
/// installs the lease, and the next claimer reads them after its Acquire claim, so a
/// give-back always uses the grant time and interval of exactly the lease it gives
/// back. A check spending from the lease reads them after its Acquire load of the
/// lease word and before its Release CAS, so its decision carries exactly the
/// grant's time and charge.
#[derive(Debug, Default)]
struct Stripe {
    lease: AtomicU64,
    /// The clock reading (ns) the lease was granted at (at or before the bucket's
    /// own reading for the grant).
    granted_at_ns: AtomicU64,
    /// What each of the lease's permits was charged ([`Quota::unit_charge`]).
    granted_interval: AtomicU64,
    /// The bucket's burst and reset-after (ns) at the grant, for the decisions of
    /// admissions from this lease (the fast path reads nothing shared).
    granted_limit: AtomicU64,
    granted_reset_ns: AtomicU64,
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
/// clock of their own: the parts of a [`LeasedGcra`](crate::LeasedGcra) that a per-key store keeps per
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
        let lifetime_ns = weir_rl_core::__private::duration_as_nanos_saturating(config.lifetime);
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
        // Ordering: Acquire pairs with the Release CAS in `install` that put this
        // lease in the word (every later spend is a read-modify-write, so any lease
        // value read is in that CAS's release sequence): the grant fields written
        // before it are visible below, so a decision from the lease carries its
        // grant's time and charge, which a refund credits. (Spending itself needs
        // only the atomicity of this word's CAS: permits left the bucket by the
        // bucket's own CAS.) The reported limit and reset are approximate by design.
        let mut word = stripe.lease.load(Ordering::Acquire);
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
            // The grant's time and charge, read before the CAS: the decision is
            // stamped with them (a refund measures the time since the permits were
            // charged, and credits at most what they were charged).
            // Ordering: Relaxed (both); the Acquire load of `word` keeps them
            // from being an earlier lease's, the Release CAS below from being a
            // later one's.
            let granted_at = stripe.granted_at_ns.load(Ordering::Relaxed);
            let charge = stripe.granted_interval.load(Ordering::Relaxed);
            // Ordering: Release on success: a refill that claims the stripe after this
            // CAS Acquires the word it wrote (or a later one of its release sequence),
            // so the refill's writes of the next grant's fields happen after the reads
            // above, which therefore see this lease's grant, never a later one.
            // Acquire on failure, as for the load above: the value found may be a
            // new lease, whose fields the next attempt reads.
            match stripe.lease.compare_exchange_weak(word, word - n, Ordering::Release, Ordering::Acquire) {
                Ok(_) => {
                    let decision = Self::leased_decision(stripe, permits - n, granted_at, now);
                    return Ok(decision.charged(charge));
                }
                Err(actual) => word = actual,
            }
        }
        self.refill(algorithm, stripe, word, n, now, clock)
    }

    /// The lean check of one unit on stripe `stripe` ([`Limiter::admit`]): one
    /// spend from the stripe's lease, inline (a load, a clock read, the lease's
    /// validity and one CAS on the stripe's own line; no grant field is read, as
    /// no decision is made); every other case is [`check_on`](Self::check_on), out
    /// of line, and its verdict.
    ///
    /// [`Limiter::admit`]: weir_rl_core::Limiter::admit
    #[inline(always)]
    pub fn admit_on<C: Clock + ?Sized>(&self, algorithm: &GcraAlgorithm, stripe: usize, clock: &C) -> Result<(), Wait> {
        let index = stripe & (self.stripes.len() - 1);
        let stripe = &self.stripes[index];
        // Ordering: Acquire, as in `check_on` (nothing is read under it here; kept
        // so that every spend follows one protocol).
        let word = stripe.lease.load(Ordering::Acquire);
        let (permits, expiry) = unpack(word);
        if permits != 0 {
            // A reading before the origin goes to the slow path, which decides it
            // clamped (wrapping, it could land on a lease's own units when the origin
            // is in the upper half of the range).
            if let Some(since) = clock.now().as_u64().checked_sub(self.origin_ns)
                && let now_units = since >> EXPIRY_SHIFT_NS
                // See `check_on`: spendable from its grant (at most a lifetime before
                // the expiry) until its expiry.
                && now_units < expiry
                && expiry - now_units <= self.lifetime_units
                // Ordering: Release on success and Relaxed on failure, as in
                // `check_on` (a failure goes to the slow path, which loads again).
                && stripe.lease.compare_exchange(word, word - 1, Ordering::Release, Ordering::Relaxed).is_ok()
            {
                return Ok(());
            }
        } else if let Some(wait) = algorithm.unit_denial(&self.state, clock) {
            // No lease: a bucket that denies one unit is the verdict, read with
            // one load and nothing written, as `Gcra` denies.
            return Err(wait);
        }
        self.admit_slow(algorithm, index, clock)
    }

    /// [`admit_on`](Self::admit_on)'s every other case: the verdict of
    /// [`check_on`](Self::check_on).
    #[cold]
    #[inline(never)]
    fn admit_slow<C: Clock + ?Sized>(&self, algorithm: &GcraAlgorithm, index: usize, clock: &C) -> Result<(), Wait> {
        // One unit never exceeds a burst (at least 1).
        match self.check_on(algorithm, index, 1, clock) {
            Ok(decision) => decision.verdict(),
            Err(_) => Err(Wait::from_nanos(u64::MAX)),
        }
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
            return Ok(Decision::allowed(algorithm.snapshot_with(&quota, &self.state, now)).at(now).zero_cost());
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
            stripe.granted_interval.store(quota.unit_charge(), Ordering::Relaxed);
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
        let snapshot = Snapshot::new(quota.burst(), left, decision.reset_after().as_nanos() as u64);
        Ok(Decision::allowed(snapshot).at(now).charged(quota.unit_charge()))
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
    /// the caller did not use: credits the bucket with their debt (at the quota in
    /// force, or at the price they were charged if that is less: never more than
    /// was charged; see `GcraAlgorithm::credit_for`), less the time since they were
    /// charged, as a lease's give-back does (the
    /// bucket has been refilling since, and may have repaid part of that debt
    /// already; crediting all of it could credit other stripes' debt). An admission
    /// is stamped with the time its permits were charged: its lease's grant, or the
    /// bucket check that decided it. Nothing for a denial or an admission of 0; `n`
    /// above the burst is an error.
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
        let owed = algorithm.credit_for(&quota, n, admission);
        let charged_at = admission.decided_at().as_u64();
        algorithm.refund_ticks_with(&self.state, clock, |now| {
            // Ordering: Relaxed; a monotone hint (see `latest_ns`).
            let latest = self.latest_ns.fetch_max(now.as_u64(), Ordering::Relaxed).max(now.as_u64());
            owed.saturating_sub(weir_rl_core::__private::ticks::from_nanos(latest.saturating_sub(charged_at)))
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
        let owed = Quota::credit_ticks_at(charge, permits);
        algorithm.refund_ticks_with(&self.state, clock, |now| {
            // Ordering: Relaxed; a monotone hint (see `latest_ns`), read after the
            // refill that granted this lease raised it.
            let latest = self.latest_ns.fetch_max(now.as_u64(), Ordering::Relaxed).max(now.as_u64());
            owed.saturating_sub(weir_rl_core::__private::ticks::from_nanos(latest.saturating_sub(granted_at)))
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
    /// revokes every lease priced under the old one ([`LeasedGcra::set_quota`](crate::LeasedGcra::set_quota) does
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

    /// `now` in lease-expiry units since the origin (0 before it).
    #[inline]
    fn units(&self, now: Nanos) -> u64 {
        now.as_u64().saturating_sub(self.origin_ns) >> EXPIRY_SHIFT_NS
    }
}

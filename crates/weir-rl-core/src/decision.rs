//! [`Decision`], [`Snapshot`] and [`InsufficientCapacity`]: what a check answers.

use core::fmt;
use core::time::Duration;

/// What a client needs to regulate itself, read without consuming anything: the
/// fields of the `RateLimit` / `X-RateLimit-*` response headers.
///
/// `remaining` is kept as capacity left and the capacity one request takes, and
/// divided only when [`remaining`](Snapshot::remaining) is asked for: a check whose
/// caller only needs allowed-or-denied never pays for the division.
#[derive(Clone, Copy)]
pub struct Snapshot {
    limit: u64,
    /// Capacity left, in `unit`s of the algorithm's choosing.
    left: u64,
    /// Capacity one request takes, in the same units; never zero.
    unit: u64,
    reset_after_ns: u64,
}

impl Snapshot {
    /// A snapshot of a limiter admitting up to `limit` at once, with `remaining` of them
    /// admissible now, that will be full again after `reset_after_ns` nanoseconds.
    #[inline]
    pub const fn new(limit: u64, remaining: u64, reset_after_ns: u64) -> Self {
        Self { limit, left: remaining, unit: 1, reset_after_ns }
    }

    /// Like [`new`](Self::new), with `remaining = left / unit` (rounded down), computed
    /// when asked for. A `unit` of zero is read as one.
    #[inline]
    pub const fn with_capacity_left(limit: u64, left: u64, unit: u64, reset_after_ns: u64) -> Self {
        Self { limit, left, unit: if unit == 0 { 1 } else { unit }, reset_after_ns }
    }

    /// The most requests admitted at once (the burst, or a window's limit).
    #[inline]
    pub const fn limit(&self) -> u64 {
        self.limit
    }

    /// How many units one request could take right now: `check_n(remaining)` would
    /// be admitted. For every quota up to 16 million per second this is also how
    /// many single requests would be admitted back to back; for byte rates above it,
    /// where each call is charged at least a whole tick (see
    /// [`Quota`](crate::Quota)'s "Precision"), fewer single-unit calls fit.
    #[inline]
    pub const fn remaining(&self) -> u64 {
        self.left / self.unit
    }

    /// How long until the limiter is back at its full `limit` if nothing else is
    /// admitted (the `RateLimit-Reset` header).
    #[inline]
    pub const fn reset_after(&self) -> Duration {
        Duration::from_nanos(self.reset_after_ns)
    }
}

/// `Snapshot { limit, remaining, reset_after }`: what a client would be told.
impl fmt::Debug for Snapshot {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Snapshot")
            .field("limit", &self.limit)
            .field("remaining", &self.remaining())
            .field("reset_after", &self.reset_after())
            .finish()
    }
}

impl PartialEq for Snapshot {
    fn eq(&self, other: &Self) -> bool {
        (self.limit, self.remaining(), self.reset_after_ns) == (other.limit, other.remaining(), other.reset_after_ns)
    }
}

impl Eq for Snapshot {}

impl core::hash::Hash for Snapshot {
    fn hash<H: core::hash::Hasher>(&self, state: &mut H) {
        (self.limit, self.remaining(), self.reset_after_ns).hash(state);
    }
}

/// The charge word of an admission that took nothing ([`Decision::zero_cost`]):
/// above every unit charge ([`Quota::unit_charge`](crate::Quota::unit_charge) is a
/// whole-tick interval of at most 2⁶², or a fixed-point one below 2⁶³ + 2⁴²).
const ZERO_COST: u64 = u64::MAX;

/// Why a request was denied.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum DenyReason {
    /// The rate limit is exhausted; retry after [`Decision::retry_after`].
    RateLimited,
    /// A per-key store is full and its policy denies new keys.
    KeyCapacity,
}

impl fmt::Display for DenyReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::RateLimited => "rate limited",
            Self::KeyCapacity => "too many distinct keys",
        })
    }
}

/// The answer to a check: admitted or not, plus what a client needs to regulate
/// itself.
///
/// ```
/// use weir_rl_core::{Decision, Snapshot};
/// use std::time::Duration;
///
/// let d = Decision::denied(Snapshot::new(10, 0, 1_000_000_000), 100_000_000);
/// assert!(d.is_denied());
/// assert_eq!(d.retry_after(), Some(Duration::from_millis(100)));
/// assert_eq!(d.remaining(), 0);
/// ```
#[must_use = "a Decision says whether the request may proceed"]
#[derive(Clone, Copy)]
pub struct Decision {
    snapshot: Snapshot,
    /// `None` when admitted.
    denial: Option<DenyReason>,
    /// Which of a store's [`Policy`](crate::Policy)s decided (0 for a single quota).
    policy: u16,
    /// On a denial, the retry-after in nanoseconds. On an admission, what each unit
    /// was charged ([`Quota::unit_charge`](crate::Quota::unit_charge)), [`ZERO_COST`]
    /// if it took nothing, or zero if the limiter did not say: one word serves all,
    /// since only an admission is ever refunded and only a denial has a retry-after.
    retry_after_or_charge: u64,
    /// The clock reading the decision was made at, in the deciding limiter's time
    /// base (zero if the limiter did not say).
    decided_at: u64,
    /// Whether `decided_at` was said ([`Decision::at`]): a reading of 0 is a real
    /// reading (a clock at its origin), not "not said".
    stamped: bool,
    /// Decided by a store's fallback limiter, not by the key's own state.
    fallback: bool,
}

impl Decision {
    /// An admission; `snapshot` is the state after it.
    #[inline]
    pub const fn allowed(snapshot: Snapshot) -> Self {
        Self {
            snapshot,
            denial: None,
            policy: 0,
            retry_after_or_charge: 0,
            decided_at: 0,
            stamped: false,
            fallback: false,
        }
    }

    /// A denial for [`DenyReason::RateLimited`]: the same request would be admitted
    /// after `retry_after_ns` nanoseconds if nothing else is admitted meanwhile.
    #[inline]
    pub const fn denied(snapshot: Snapshot, retry_after_ns: u64) -> Self {
        Self {
            snapshot,
            denial: Some(DenyReason::RateLimited),
            policy: 0,
            retry_after_or_charge: retry_after_ns,
            decided_at: 0,
            stamped: false,
            fallback: false,
        }
    }

    /// A denial for another `reason`.
    #[inline]
    pub const fn denied_because(reason: DenyReason, snapshot: Snapshot, retry_after_ns: u64) -> Self {
        Self {
            snapshot,
            denial: Some(reason),
            policy: 0,
            retry_after_or_charge: retry_after_ns,
            decided_at: 0,
            stamped: false,
            fallback: false,
        }
    }

    /// The same decision, made at `now` (the deciding limiter's clock reading). A
    /// refund of the admission passes the decision back, and algorithms whose state
    /// is per window give the capacity back to the window the admission was counted
    /// in, not to a later one.
    #[inline]
    pub const fn at(self, now: crate::Nanos) -> Self {
        Self { decided_at: now.as_u64(), stamped: true, ..self }
    }

    /// The clock reading this decision was made at, in the deciding limiter's time
    /// base ([`Nanos::ZERO`](crate::Nanos::ZERO) if it did not say: see
    /// [`is_stamped`](Self::is_stamped)).
    #[inline]
    pub const fn decided_at(&self) -> crate::Nanos {
        crate::Nanos::new(self.decided_at)
    }

    /// Whether the limiter said when this decision was made ([`at`](Self::at)): a
    /// [`decided_at`](Self::decided_at) of zero is then a real reading (a clock at
    /// its origin), not "not said".
    #[inline]
    pub const fn is_stamped(&self) -> bool {
        self.stamped
    }

    /// The same decision with no reading said (as if [`at`](Self::at) had never
    /// been called): what a store answers with when the reading it has is not in
    /// the time base of the state it would be refunded to (a remote store's local
    /// fallback).
    #[doc(hidden)] // what stores record for their refunds: not part of the public API
    #[inline]
    pub const fn unstamped(self) -> Self {
        Self { decided_at: 0, stamped: false, ..self }
    }

    /// The same admission, recording that each of its units was charged
    /// `unit_charge` ([`Quota::unit_charge`](crate::Quota::unit_charge), never zero),
    /// so that a refund after a quota change credits at most what was charged, not
    /// the units' price under the new quota. A denial, or an admission that took
    /// nothing ([`zero_cost`](Self::zero_cost)), is returned unchanged.
    #[doc(hidden)] // what token-bucket algorithms record for their refunds: not part of the public API
    #[inline]
    pub const fn charged(self, unit_charge: u64) -> Self {
        match (self.denial, self.retry_after_or_charge) {
            (Some(_), _) | (None, ZERO_COST) => self,
            (None, _) if unit_charge == 0 || unit_charge == ZERO_COST => self,
            (None, _) => Self { retry_after_or_charge: unit_charge, ..self },
        }
    }

    /// For an admission that recorded its charge ([`charged`](Self::charged)): what
    /// each unit was charged.
    #[doc(hidden)] // what token-bucket algorithms record for their refunds: not part of the public API
    #[inline]
    pub const fn unit_charge(&self) -> Option<u64> {
        match (self.denial, self.retry_after_or_charge) {
            (None, charge) if charge != 0 && charge != ZERO_COST => Some(charge),
            _ => None,
        }
    }

    /// The same admission, recording that it took nothing (a check of cost 0): a
    /// refund against it credits nothing, whatever it is asked to give back. A
    /// denial is returned unchanged.
    #[doc(hidden)] // what limiters record for their refunds: not part of the public API
    #[inline]
    pub const fn zero_cost(self) -> Self {
        match self.denial {
            Some(_) => self,
            None => Self { retry_after_or_charge: ZERO_COST, ..self },
        }
    }

    /// Whether this is an admission that took nothing ([`zero_cost`](Self::zero_cost)).
    #[doc(hidden)] // what limiters record for their refunds: not part of the public API
    #[inline]
    pub const fn is_zero_cost(&self) -> bool {
        self.denial.is_none() && self.retry_after_or_charge == ZERO_COST
    }

    /// The same decision without the charge it recorded (still one that took
    /// nothing if it was): what a limiter that did not make it may be handed, such
    /// as the members of an all-of check other than the one that decided, so that
    /// none of them credits another's charge.
    #[doc(hidden)] // what limiters record for their refunds: not part of the public API
    #[inline]
    pub const fn without_charge(self) -> Self {
        match (self.denial, self.retry_after_or_charge) {
            (None, charge) if charge != ZERO_COST => Self { retry_after_or_charge: 0, ..self },
            _ => self,
        }
    }

    /// The retry-after in nanoseconds: zero for an admission.
    #[inline]
    const fn retry_after_ns(&self) -> u64 {
        match self.denial {
            Some(_) => self.retry_after_or_charge,
            None => 0,
        }
    }

    /// The same decision, attributed to policy `index` of the store that made it
    /// (see [`KeyedLimiter::policies`](crate::KeyedLimiter::policies)). Indices above
    /// `u16::MAX` are kept as `u16::MAX`.
    #[inline]
    pub const fn for_policy(self, index: usize) -> Self {
        let policy = if index > u16::MAX as usize { u16::MAX } else { index as u16 };
        Self { policy, ..self }
    }

    /// The same denial, for `reason` instead of its own; an admission is returned
    /// unchanged. What a store answers with when one of its own limiters decided
    /// for another cause (a full store's overflow limiter: the store's capacity,
    /// not the key's rate).
    #[inline]
    pub const fn because(self, reason: DenyReason) -> Self {
        match self.denial {
            Some(_) => Self { denial: Some(reason), ..self },
            None => self,
        }
    }

    /// The same decision, marked as made by a store's fallback limiter (a per-key
    /// store's overflow limiter when it is full, a remote store's local fallback
    /// while it is unreachable) rather than by the key's own state: such an
    /// admission took nothing from the key, so the store gives nothing back to the
    /// key when it is refunded.
    #[inline]
    pub const fn from_fallback(self) -> Self {
        Self { fallback: true, ..self }
    }

    /// Whether a store's fallback limiter made this decision (see
    /// [`from_fallback`](Self::from_fallback)).
    #[inline]
    pub const fn is_from_fallback(&self) -> bool {
        self.fallback
    }

    /// Which of the deciding store's policies decided: for an all-of check, the
    /// quota that denied, or, when all admitted, the one with the least left.
    #[inline]
    pub const fn policy_index(&self) -> usize {
        self.policy as usize
    }

    /// Whether the request was admitted.
    #[inline]
    pub const fn is_allowed(&self) -> bool {
        self.denial.is_none()
    }

    /// Whether the request was denied.
    #[inline]
    pub const fn is_denied(&self) -> bool {
        self.denial.is_some()
    }

    /// Why the request was denied, or `None` if it was admitted.
    #[inline]
    pub const fn deny_reason(&self) -> Option<DenyReason> {
        self.denial
    }

    /// On denial, how long until the same request would be admitted (the
    /// `Retry-After` header); `None` when admitted.
    #[inline]
    pub const fn retry_after(&self) -> Option<Duration> {
        match self.denial {
            Some(_) => Some(Duration::from_nanos(self.retry_after_or_charge)),
            None => None,
        }
    }

    /// The state after this decision.
    #[inline]
    pub const fn snapshot(&self) -> Snapshot {
        self.snapshot
    }

    /// See [`Snapshot::limit`].
    #[inline]
    pub const fn limit(&self) -> u64 {
        self.snapshot.limit
    }

    /// See [`Snapshot::remaining`].
    #[inline]
    pub const fn remaining(&self) -> u64 {
        self.snapshot.remaining()
    }

    /// See [`Snapshot::reset_after`].
    #[inline]
    pub const fn reset_after(&self) -> Duration {
        self.snapshot.reset_after()
    }
}

/// Decisions are equal when they say the same to a client: outcome, numbers and
/// deciding policy. When each was made ([`Decision::decided_at`]), whether a
/// fallback made it ([`Decision::is_from_fallback`]) and what an admission was
/// charged are not compared.
impl PartialEq for Decision {
    fn eq(&self, other: &Self) -> bool {
        (self.snapshot, self.denial, self.policy, self.retry_after_ns())
            == (other.snapshot, other.denial, other.policy, other.retry_after_ns())
    }
}

impl Eq for Decision {}

impl core::hash::Hash for Decision {
    fn hash<H: core::hash::Hasher>(&self, state: &mut H) {
        (self.snapshot, self.denial, self.policy, self.retry_after_ns()).hash(state);
    }
}

/// What a client would be told: `Decision { allowed, limit, remaining, reset_after,
/// retry_after }` (and the reason and policy when they say something).
impl fmt::Debug for Decision {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut d = f.debug_struct("Decision");
        d.field("allowed", &self.is_allowed())
            .field("limit", &self.limit())
            .field("remaining", &self.remaining())
            .field("reset_after", &self.reset_after());
        if let Some(retry_after) = self.retry_after() {
            d.field("retry_after", &retry_after);
        }
        if let Some(reason) = self.denial.filter(|r| *r != DenyReason::RateLimited) {
            d.field("reason", &reason);
        }
        if self.policy != 0 {
            d.field("policy", &self.policy);
        }
        d.finish()
    }
}

/// How long a denied request should wait before it would be admitted: the answer
/// of the lean check, [`Limiter::admit`](crate::Limiter::admit), when it denies.
///
/// ```
/// use std::time::Duration;
/// use weir_rl_core::Wait;
///
/// let wait = Wait::from_nanos(1_500_000_000);
/// assert_eq!(wait.duration(), Duration::from_millis(1_500));
/// assert_eq!(wait.to_string(), "rate limited: retry after 1.5s");
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Wait {
    nanos: u64,
}

impl Wait {
    /// A wait of `nanos` nanoseconds.
    #[inline]
    pub const fn from_nanos(nanos: u64) -> Self {
        Self { nanos }
    }

    /// The wait in nanoseconds.
    #[inline]
    pub const fn as_nanos(&self) -> u64 {
        self.nanos
    }

    /// The wait (the `Retry-After` a server would send, before rounding up to
    /// whole seconds).
    #[inline]
    pub const fn duration(&self) -> Duration {
        Duration::from_nanos(self.nanos)
    }
}

impl fmt::Display for Wait {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "rate limited: retry after {:?}", self.duration())
    }
}

#[cfg(feature = "std")]
impl std::error::Error for Wait {}

impl Decision {
    /// The lean form of this decision: `Ok` if admitted, else how long to wait
    /// ([`retry_after`](Self::retry_after)).
    #[inline(always)]
    pub const fn verdict(&self) -> Result<(), Wait> {
        match self.denial {
            None => Ok(()),
            Some(_) => Err(Wait { nanos: self.retry_after_or_charge }),
        }
    }
}

/// The request asked for more than the limiter can ever admit at once (`n` greater
/// than the burst). Retrying will never help, so this is an error, not a denial.
///
/// ```
/// use weir_rl_core::InsufficientCapacity;
///
/// let e = InsufficientCapacity { requested: 12, capacity: 10 };
/// assert_eq!(
///     e.to_string(),
///     "asked for 12 at once but at most 10 can ever be admitted at once; split the request or raise the burst"
/// );
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct InsufficientCapacity {
    /// What was asked for.
    pub requested: u64,
    /// The most that can ever be admitted at once.
    pub capacity: u64,
}

impl fmt::Display for InsufficientCapacity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "asked for {} at once but at most {} can ever be admitted at once; \
             split the request or raise the burst",
            self.requested, self.capacity
        )
    }
}

#[cfg(feature = "std")]
impl std::error::Error for InsufficientCapacity {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_decision_stays_seven_words() {
        // Returned by every check: the charge an admission records shares the
        // retry-after's word.
        assert!(core::mem::size_of::<Decision>() <= 7 * 8);
    }

    #[test]
    fn a_charge_is_recorded_on_admissions_only_and_never_compared() {
        let snapshot = Snapshot::new(10, 9, 100);
        let allowed = Decision::allowed(snapshot);
        assert_eq!(allowed.unit_charge(), None);
        let charged = allowed.charged(1_600);
        assert_eq!(charged.unit_charge(), Some(1_600));
        assert_eq!(charged.retry_after(), None);
        assert_eq!(charged, allowed);
        assert_eq!(charged.without_charge().unit_charge(), None);
        let denied = Decision::denied(snapshot, 42).charged(1_600);
        assert_eq!((denied.unit_charge(), denied.retry_after()), (None, Some(Duration::from_nanos(42))));
    }

    #[test]
    fn a_zero_cost_admission_stays_one() {
        let free = Decision::allowed(Snapshot::new(10, 10, 0)).zero_cost();
        assert!(free.is_zero_cost() && free.is_allowed());
        assert_eq!(free.unit_charge(), None);
        assert!(free.charged(1_600).is_zero_cost(), "a charge does not undo it");
        assert!(free.without_charge().is_zero_cost());
        assert_eq!(free.retry_after(), None);
        assert!(!Decision::allowed(Snapshot::new(10, 10, 0)).is_zero_cost());
        let denied = Decision::denied(Snapshot::new(10, 0, 1), 1).zero_cost();
        assert!(!denied.is_zero_cost() && denied.retry_after() == Some(Duration::from_nanos(1)));
    }
}

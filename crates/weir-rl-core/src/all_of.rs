//! [`AllOf`]: several quotas checked all or nothing (documented on the type).

use crate::{Decision, InsufficientCapacity, KeyedLimiter, Policy, Snapshot};
use alloc::boxed::Box;
use alloc::vec::Vec;
use core::fmt;

/// The limiters an [`AllOf`] checks, in order.
///
/// Implemented for tuples of up to eight [`KeyedLimiter`]s (of any types), arrays,
/// `Vec`s and boxed slices. `member(i)` is `Some` exactly for `i < len()`.
pub trait AllOfMembers<K: ?Sized> {
    /// How many members there are.
    fn len(&self) -> usize;

    /// Whether there are none.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Member `index`, or `None` past the last.
    fn member(&self, index: usize) -> Option<&dyn KeyedLimiter<K>>;
}

macro_rules! tuple_members {
    ($len:literal: $($name:ident $index:tt),+) => {
        impl<K: ?Sized, $($name: KeyedLimiter<K>),+> AllOfMembers<K> for ($($name,)+) {
            #[inline]
            fn len(&self) -> usize {
                $len
            }

            #[inline]
            fn member(&self, index: usize) -> Option<&dyn KeyedLimiter<K>> {
                match index {
                    $($index => Some(&self.$index),)+
                    _ => None,
                }
            }
        }
    };
}

tuple_members!(1: A 0);
tuple_members!(2: A 0, B 1);
tuple_members!(3: A 0, B 1, C 2);
tuple_members!(4: A 0, B 1, C 2, D 3);
tuple_members!(5: A 0, B 1, C 2, D 3, E 4);
tuple_members!(6: A 0, B 1, C 2, D 3, E 4, F 5);
tuple_members!(7: A 0, B 1, C 2, D 3, E 4, F 5, G 6);
tuple_members!(8: A 0, B 1, C 2, D 3, E 4, F 5, G 6, H 7);

impl<K: ?Sized, L: KeyedLimiter<K>> AllOfMembers<K> for [L] {
    #[inline]
    fn len(&self) -> usize {
        <[L]>::len(self)
    }

    #[inline]
    fn member(&self, index: usize) -> Option<&dyn KeyedLimiter<K>> {
        self.get(index).map(|m| m as &dyn KeyedLimiter<K>)
    }
}

impl<K: ?Sized, L: KeyedLimiter<K>, const N: usize> AllOfMembers<K> for [L; N] {
    #[inline]
    fn len(&self) -> usize {
        N
    }

    #[inline]
    fn member(&self, index: usize) -> Option<&dyn KeyedLimiter<K>> {
        self.as_slice().member(index)
    }
}

impl<K: ?Sized, L: KeyedLimiter<K>> AllOfMembers<K> for Vec<L> {
    #[inline]
    fn len(&self) -> usize {
        Vec::len(self)
    }

    #[inline]
    fn member(&self, index: usize) -> Option<&dyn KeyedLimiter<K>> {
        self.as_slice().member(index)
    }
}

impl<K: ?Sized, L: KeyedLimiter<K>> AllOfMembers<K> for Box<[L]> {
    #[inline]
    fn len(&self) -> usize {
        <[L]>::len(self)
    }

    #[inline]
    fn member(&self, index: usize) -> Option<&dyn KeyedLimiter<K>> {
        (**self).member(index)
    }
}

/// Why an [`AllOf`] could not be built.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum AllOfError {
    /// No members: there would be no quota to enforce.
    NoMembers,
    /// More than `u16::MAX` policies in all: [`Decision::policy_index`] could not
    /// name every one.
    TooManyPolicies(usize),
}

impl fmt::Display for AllOfError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::NoMembers => f.write_str("an all-of limiter needs at least one member quota"),
            Self::TooManyPolicies(n) => {
                write!(f, "an all-of limiter can name at most {} policies, not {n}", u16::MAX)
            }
        }
    }
}

#[cfg(feature = "std")]
impl std::error::Error for AllOfError {}

/// [`AllOf`]: a request must pass several quotas at once (per minute, per day and a
/// burst), and a request denied by one consumes nothing from the others.
///
/// # How it decides
///
/// The members are checked in order. Each admission is kept; when a later member
/// denies the request (or reports [`InsufficientCapacity`]), the earlier admissions
/// are refunded ([`KeyedLimiter::refund`], with each member's own decision, so a
/// per-window member gives the capacity back to the window it was taken from), and
/// the answer is a denial. When every member admits, the answer is the admission
/// of the member with the least remaining (the first of them on a tie): the quota
/// that binds next, whose numbers a client should see.
///
/// **A denial tells the longest wait.** The denial returned is, of every member
/// that denies the request, the one with the longest
/// [`retry_after`](Decision::retry_after): the time until this request would be
/// admitted by all of them (a per-second and a per-minute quota both spent: the
/// minute's wait, not the second's, after which the retry would be denied again).
/// The members after the first denier are looked at for it: one whose
/// [`snapshot`](KeyedLimiter::snapshot) has room for the request is passed over
/// (it would admit), the others are checked, which on a denial writes nothing; one
/// that admits after all gives its admission back at once. Still nothing is
/// consumed by a denied request.
///
/// Either way the [`Decision`] is tagged with [`Decision::for_policy`]: its index in
/// [`AllOf::policies`], the members' policies one after the other (a member with two
/// policies takes two indices).
///
/// # Guarantees, and the one transient
///
/// - **Never over-admits.** Every member admits or denies by its own exact protocol,
///   and an all-of admission holds an admission from every member. However checks
///   interleave, no member admits more than its quota.
/// - **A denied request consumes nothing**, once its check returns: what it took
///   from earlier members is given back before `check_n` returns.
/// - **The transient.** Between an earlier member's admission and its refund (the
///   time it takes to check the later members), the capacity is held. A concurrent
///   request checked in that window may be denied by that member although the
///   capacity comes back a moment later: a spurious denial, never an over-admission.
///   It only happens when the quotas are nearly exhausted and requests race for the
///   last units. Put the quota most likely to deny first (the daily quota before the
///   burst) and most denials take nothing from anyone.
/// - **No allocation per check.** The members' admissions are held on the stack
///   (one frame per member); the policies are gathered once, at construction.
///
/// # Members
///
/// Any [`AllOfMembers`]: a tuple of up to eight limiters of different types (a GCRA
/// burst, a sliding window per minute, a fixed window per day), an array, a `Vec` or
/// a boxed slice of one type, or of boxed trait objects
/// (`Vec<Box<dyn KeyedLimiter<K> + Send + Sync>>`). `AllOf` is itself a
/// [`KeyedLimiter`], so it nests, and [`Local`](crate::Local) gives it the async form.
///
/// ```
/// use std::sync::Mutex;
/// use std::time::Duration;
/// use weir_rl_core::{AllOf, Decision, InsufficientCapacity, KeyedLimiter, Policy, Snapshot};
///
/// /// A toy store: `limit` per window for every key together, never refilled.
/// struct Counter { policy: [Policy; 1], used: Mutex<u64> }
/// # impl Counter {
/// #     fn new(limit: u64, window: Duration) -> Self {
/// #         Self { policy: [Policy::new(limit, window)], used: Mutex::new(0) }
/// #     }
/// # }
/// impl KeyedLimiter<str> for Counter {
///     // ... check_n admits while `used + n <= limit`, refund subtracts ...
/// #     fn check_n(&self, _: &str, n: u64) -> Result<Decision, InsufficientCapacity> {
/// #         let limit = self.policy[0].limit();
/// #         let mut used = self.used.lock().unwrap();
/// #         if *used + n > limit {
/// #             return Ok(Decision::denied(Snapshot::new(limit, limit - *used, 1), 1));
/// #         }
/// #         *used += n;
/// #         Ok(Decision::allowed(Snapshot::new(limit, limit - *used, 1)))
/// #     }
/// #     fn refund(&self, _: &str, n: u64, _: &Decision) -> Result<(), InsufficientCapacity> {
/// #         let mut used = self.used.lock().unwrap();
/// #         *used = used.saturating_sub(n);
/// #         Ok(())
/// #     }
/// #     fn snapshot(&self, _: &str) -> Snapshot {
/// #         let limit = self.policy[0].limit();
/// #         Snapshot::new(limit, limit - *self.used.lock().unwrap(), 1)
/// #     }
/// #     fn policies(&self) -> &[Policy] {
/// #         &self.policy
/// #     }
/// }
///
/// let minute = Counter::new(30, Duration::from_secs(60));
/// let day = Counter::new(2, Duration::from_secs(86_400));
/// let tier = AllOf::new((minute, day))?;
///
/// assert!(tier.check_n("alice", 1)?.is_allowed());
/// let second = tier.check_n("alice", 1)?;
/// assert!(second.is_allowed());
/// assert_eq!((second.policy_index(), second.remaining()), (1, 0)); // the day binds
///
/// let third = tier.check_n("alice", 1)?;
/// assert!(third.is_denied());
/// assert_eq!(third.policy_index(), 1); // denied by the day...
/// assert_eq!(tier.members().0.snapshot("alice").remaining(), 28); // ...the minute is untouched
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub struct AllOf<M> {
    members: M,
    /// Every member's policies, in member order.
    policies: Box<[Policy]>,
    /// `offsets[i]`: the index in `policies` of member `i`'s first policy.
    offsets: Box<[usize]>,
}

impl<M> AllOf<M> {
    /// All of `members`, checked in order. Fails if there are none, or more than
    /// `u16::MAX` policies among them. `K` is the key type the members are checked
    /// with; where a member checks several (a store of `String` keys checks `&str`
    /// and `&String` alike), name it: `AllOf::new::<str>(members)`.
    pub fn new<K: ?Sized>(members: M) -> Result<Self, AllOfError>
    where
        M: AllOfMembers<K>,
    {
        if members.is_empty() {
            return Err(AllOfError::NoMembers);
        }
        let mut policies = Vec::new();
        let mut offsets = Vec::with_capacity(members.len());
        for member in (0..members.len()).filter_map(|i| members.member(i)) {
            offsets.push(policies.len());
            policies.extend_from_slice(member.policies());
        }
        if policies.len() > usize::from(u16::MAX) {
            return Err(AllOfError::TooManyPolicies(policies.len()));
        }
        Ok(Self { members, policies: policies.into_boxed_slice(), offsets: offsets.into_boxed_slice() })
    }

    /// The members.
    pub fn members(&self) -> &M {
        &self.members
    }

    /// Every member's policies, in member order: what [`Decision::policy_index`]
    /// indexes.
    pub fn policies(&self) -> &[Policy] {
        &self.policies
    }

    /// The member whose decision `admission` is ([`tag`](Self::tag) read backwards),
    /// and its own policy index; `None` for an index past every policy.
    fn decider(&self, admission: &Decision) -> Option<(usize, usize)> {
        let index = admission.policy_index();
        // A member without policies shares its index with the next member: which
        // of them decided cannot be told, and none is given the charge.
        let policyless = self.offsets.windows(2).any(|pair| pair[0] == pair[1])
            || self.offsets.last().is_some_and(|&last| last == self.policies.len());
        if index >= self.policies.len() || policyless {
            return None;
        }
        // The last member whose first policy is at or before `index`.
        let member = self.offsets.partition_point(|&offset| offset <= index).checked_sub(1)?;
        Some((member, index - self.offsets[member]))
    }

    /// Member `member`'s decision, tagged with its index among all policies.
    #[inline]
    fn tag(&self, member: usize, decision: Decision) -> Decision {
        let offset = self.offsets.get(member).copied().unwrap_or(0);
        decision.for_policy(offset.saturating_add(decision.policy_index()))
    }

    /// Checks members `index..` in order; returns `None` past the last member.
    /// Refunds member `index`'s admission itself if a later member denies or fails.
    fn check_from<K: ?Sized>(&self, index: usize, key: &K, n: u64) -> Result<Option<Decision>, InsufficientCapacity>
    where
        M: AllOfMembers<K>,
    {
        let Some(member) = self.members.member(index) else {
            return Ok(None);
        };
        let admission = member.check_n(key, n)?;
        if admission.is_denied() {
            return self.longest_wait(index, key, n, self.tag(index, admission)).map(Some);
        }
        let later = self.check_from(index + 1, key, n);
        if !matches!(later, Ok(None)) && !matches!(later, Ok(Some(d)) if d.is_allowed()) {
            // A later member denied or failed: give back what this one took, to the
            // window it took it from. A refund of what this very member just admitted
            // cannot ask for more than it can hold; should a member still fail, the
            // denial stands (nothing is over-admitted, at worst capacity is held).
            let _ = member.refund(key, n, &admission);
            return later;
        }
        let mine = self.tag(index, admission);
        Ok(Some(match later {
            // Every member admitted: the answer is the one with the least left,
            // stamped with the earliest reading any of them decided at (see
            // `KeyedLimiter::refund` for `AllOf`).
            Ok(Some(later)) => {
                let chosen = if later.remaining() < mine.remaining() { later } else { mine };
                match earliest(&mine, &later) {
                    Some(at) => chosen.at(at),
                    None => chosen.unstamped(),
                }
            }
            _ => mine,
        }))
    }
}

/// The earlier of two members' readings, passing over a decision that says none
/// ([`Decision::is_stamped`]: a limiter that does not stamp its decisions, or a
/// fallback's decision): the reading an all-of admission is stamped with, so that
/// a refund hands no member a reading later than its own. A reading of 0 is a
/// reading (a clock at its origin): passing it over handed such a member a later
/// one, and a fixed window admitted 3 for a limit of 2.
#[inline]
fn earliest(a: &Decision, b: &Decision) -> Option<crate::Nanos> {
    match (a.is_stamped(), b.is_stamped()) {
        (true, true) => Some(a.decided_at().min(b.decided_at())),
        (true, false) => Some(a.decided_at()),
        (false, true) => Some(b.decided_at()),
        (false, false) => None,
    }
}

impl<M> AllOf<M> {
    /// `denial` (member `denier`'s), or the denial of a later member whose wait is
    /// longer: a request retried after the first denier's wait would be denied again
    /// by that member. A later member whose snapshot has room for `n` is not checked
    /// (it would admit: it has no wait of its own); one that is checked denies
    /// without writing anything, and should it admit after all (its capacity came
    /// back meanwhile), its admission is given back at once. `n` more than a later
    /// member can ever admit is that member's [`InsufficientCapacity`].
    fn longest_wait<K: ?Sized>(
        &self,
        denier: usize,
        key: &K,
        n: u64,
        mut denial: Decision,
    ) -> Result<Decision, InsufficientCapacity>
    where
        M: AllOfMembers<K>,
    {
        for index in denier + 1..self.members.len() {
            let Some(member) = self.members.member(index) else { break };
            if member.snapshot(key).remaining() >= n {
                continue;
            }
            let decision = member.check_n(key, n)?;
            if decision.is_allowed() {
                // Taken by a check made only to read a wait: given back, as a
                // denied request consumes nothing.
                let _ = member.refund(key, n, &decision);
            } else if decision.retry_after() > denial.retry_after() {
                denial = self.tag(index, decision);
            }
        }
        Ok(denial)
    }
}

impl<K: ?Sized, M: AllOfMembers<K>> KeyedLimiter<K> for AllOf<M> {
    /// Checks every member in order (see [`AllOf`]). `n` more than a
    /// member can ever admit is that member's [`InsufficientCapacity`], after the
    /// earlier members' admissions are refunded.
    fn check_n(&self, key: &K, n: u64) -> Result<Decision, InsufficientCapacity> {
        let decision = match self.check_from(0, key, n)? {
            Some(decision) => decision,
            // `new` ruled out an empty list.
            None => Decision::allowed(Snapshot::new(u64::MAX, u64::MAX, 0)),
        };
        // A check of 0 took nothing from any member, whoever decided: its refund
        // gives nothing back to any of them.
        Ok(if n == 0 { decision.zero_cost() } else { decision })
    }

    /// Gives `n` back to every member. The member that decided `admission` (its
    /// [`policy_index`](Decision::policy_index)) is given its own decision, with
    /// the charge it recorded; every other member is given the decision without
    /// any charge ([`Decision::without_charge`]), since the deciding member's charge
    /// is not what it charged: a member that records charges (weir-gcra's) then
    /// credits the units' price under its quota only if that quota was never
    /// replaced, and nothing otherwise. An admission of 0 credits
    /// nothing. Every member is refunded even if one fails; the first failure is
    /// returned.
    ///
    /// **Which reading each member is refunded against.** An all-of admission
    /// is stamped ([`Decision::decided_at`]) with the *earliest* reading at which
    /// any member decided it (members read their clocks one after the other, and
    /// must share a clock). Every member is handed that reading, which is never
    /// later than its own, and an earlier reading is conservative for every
    /// algorithm: a window member gives the units back only if the earlier
    /// reading's window is still the current one (a window boundary falling
    /// between two members' readings makes it give back nothing, never into a
    /// window the admission was not counted in); a token bucket credits the
    /// units less the time since the earlier reading (a little less); a sliding
    /// log removes entries at or before the earlier reading (which expire no
    /// later than the admission's own). Handing every member the deciding member's
    /// reading instead gave a window member that decided just before a boundary
    /// the units back in the next window, where they had never been counted: a
    /// fixed window of 2 admitted 3 in one window.
    fn refund(&self, key: &K, n: u64, admission: &Decision) -> Result<(), InsufficientCapacity> {
        let decider = self.decider(admission);
        let others = admission.without_charge();
        let mut result = Ok(());
        for (index, member) in (0..self.members.len()).filter_map(|i| Some((i, self.members.member(i)?))) {
            let refunded = match decider {
                Some((at, local)) if at == index => member.refund(key, n, &admission.for_policy(local)),
                _ => member.refund(key, n, &others),
            };
            if result.is_ok() {
                result = refunded;
            }
        }
        result
    }

    /// The member snapshot with the least remaining (the first on a tie).
    fn snapshot(&self, key: &K) -> Snapshot {
        let mut least: Option<Snapshot> = None;
        for member in (0..self.members.len()).filter_map(|i| self.members.member(i)) {
            let snapshot = member.snapshot(key);
            if least.is_none_or(|least| snapshot.remaining() < least.remaining()) {
                least = Some(snapshot);
            }
        }
        least.unwrap_or(Snapshot::new(u64::MAX, u64::MAX, 0))
    }

    fn policies(&self) -> &[Policy] {
        &self.policies
    }
}

impl<M: fmt::Debug> fmt::Debug for AllOf<M> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AllOf").field("members", &self.members).field("policies", &self.policies).finish()
    }
}

#[cfg(all(test, feature = "std"))]
mod tests {
    use super::*;
    use core::time::Duration;
    use std::sync::Mutex;
    use std::vec;

    /// `limit` per key, never refilled; records every refund.
    #[derive(Debug)]
    struct Counter {
        policy: [Policy; 1],
        used: Mutex<std::collections::HashMap<u32, u64>>,
        refunds: Mutex<u64>,
    }

    impl Counter {
        fn new(limit: u64) -> Self {
            Self {
                policy: [Policy::new(limit, Duration::from_secs(60))],
                used: Mutex::new(Default::default()),
                refunds: Mutex::new(0),
            }
        }

        fn used(&self, key: u32) -> u64 {
            self.used.lock().unwrap().get(&key).copied().unwrap_or(0)
        }
    }

    impl KeyedLimiter<u32> for Counter {
        fn check_n(&self, key: &u32, n: u64) -> Result<Decision, InsufficientCapacity> {
            let limit = self.policy[0].limit();
            if n > limit {
                return Err(InsufficientCapacity { requested: n, capacity: limit });
            }
            let mut used = self.used.lock().unwrap();
            let used = used.entry(*key).or_insert(0);
            if *used + n > limit {
                return Ok(Decision::denied(Snapshot::new(limit, limit - *used, 60), 60));
            }
            *used += n;
            Ok(Decision::allowed(Snapshot::new(limit, limit - *used, 60)))
        }
        fn refund(&self, key: &u32, n: u64, _: &Decision) -> Result<(), InsufficientCapacity> {
            *self.refunds.lock().unwrap() += n;
            let mut used = self.used.lock().unwrap();
            let used = used.entry(*key).or_insert(0);
            *used = used.saturating_sub(n);
            Ok(())
        }
        fn snapshot(&self, key: &u32) -> Snapshot {
            let limit = self.policy[0].limit();
            Snapshot::new(limit, limit - self.used(*key), 60)
        }
        fn policies(&self) -> &[Policy] {
            &self.policy
        }
    }

    /// A member that, during its check, runs `during` (another request arriving
    /// between an earlier member's admission and this member's decision).
    struct Interleave<'a> {
        inner: Counter,
        during: Mutex<Option<Box<dyn FnOnce() + 'a>>>,
    }

    impl KeyedLimiter<u32> for Interleave<'_> {
        fn check_n(&self, key: &u32, n: u64) -> Result<Decision, InsufficientCapacity> {
            let during = self.during.lock().unwrap().take();
            if let Some(during) = during {
                during();
            }
            self.inner.check_n(key, n)
        }
        fn refund(&self, key: &u32, n: u64, admission: &Decision) -> Result<(), InsufficientCapacity> {
            self.inner.refund(key, n, admission)
        }
        fn snapshot(&self, key: &u32) -> Snapshot {
            self.inner.snapshot(key)
        }
        fn policies(&self) -> &[Policy] {
            self.inner.policies()
        }
    }

    #[test]
    fn a_denial_by_a_later_quota_leaves_the_earlier_untouched() {
        let all = AllOf::new((Counter::new(30), Counter::new(1))).unwrap();
        assert!(all.check_n(&7, 1).unwrap().is_allowed());
        let denied = all.check_n(&7, 1).unwrap();
        assert!(denied.is_denied());
        assert_eq!(denied.policy_index(), 1);
        assert_eq!(all.members().0.used(7), 1, "the first request's unit, nothing from the denied one");
        assert_eq!(*all.members().0.refunds.lock().unwrap(), 1);
        assert_eq!(all.members().1.used(7), 1);
        // Other keys are not affected.
        assert!(all.check_n(&8, 1).unwrap().is_allowed());
    }

    /// Denies every request, telling it to wait `retry` ns.
    struct Refuses {
        policy: [Policy; 1],
        retry: u64,
    }

    impl Refuses {
        fn new(retry: u64) -> Self {
            Self { policy: [Policy::new(1, Duration::from_nanos(retry))], retry }
        }
    }

    impl KeyedLimiter<u32> for Refuses {
        fn check_n(&self, _: &u32, _: u64) -> Result<Decision, InsufficientCapacity> {
            Ok(Decision::denied(Snapshot::new(1, 0, self.retry), self.retry))
        }
        fn refund(&self, _: &u32, _: u64, _: &Decision) -> Result<(), InsufficientCapacity> {
            Ok(())
        }
        fn snapshot(&self, _: &u32) -> Snapshot {
            Snapshot::new(1, 0, self.retry)
        }
        fn policies(&self) -> &[Policy] {
            &self.policy
        }
    }

    /// The first member to deny is not the whole answer: a retry after its wait
    /// would be denied by a later member, so the denial is the longest wait of every
    /// member that denies; the members that admit it give back what they took.
    #[test]
    fn a_denial_tells_the_longest_wait_of_the_members_that_deny() {
        let all = AllOf::new((Counter::new(5), Refuses::new(1_000), Counter::new(5), Refuses::new(59_000))).unwrap();
        let denied = all.check_n(&0, 1).unwrap();
        assert!(denied.is_denied());
        assert_eq!(denied.retry_after(), Some(Duration::from_nanos(59_000)));
        assert_eq!(denied.policy_index(), 3, "the member with the longest wait");
        assert_eq!((all.members().0.used(0), all.members().2.used(0)), (0, 0), "nothing consumed");
        // The longest wait comes first: still the longest.
        let all = AllOf::new((Refuses::new(59_000), Counter::new(5), Refuses::new(1_000))).unwrap();
        let denied = all.check_n(&0, 1).unwrap();
        assert_eq!((denied.retry_after(), denied.policy_index()), (Some(Duration::from_nanos(59_000)), 0));
        assert_eq!(all.members().1.used(0), 0);
    }

    #[test]
    fn a_denial_by_the_first_quota_touches_nothing() {
        let all = AllOf::new((Counter::new(1), Counter::new(5))).unwrap();
        assert!(all.check_n(&1, 1).unwrap().is_allowed());
        assert!(all.check_n(&1, 1).unwrap().is_denied());
        assert_eq!((all.members().0.used(1), all.members().1.used(1)), (1, 1));
        assert_eq!(*all.members().0.refunds.lock().unwrap(), 0);
        assert_eq!(*all.members().1.refunds.lock().unwrap(), 0);
    }

    #[test]
    fn an_admission_is_tagged_with_the_quota_that_binds_next() {
        let all = AllOf::new([Counter::new(10), Counter::new(3), Counter::new(3)]).unwrap();
        let d = all.check_n(&0, 1).unwrap();
        assert!(d.is_allowed());
        assert_eq!((d.policy_index(), d.remaining(), d.limit()), (1, 2, 3), "the first of the tied least");
        assert_eq!(all.policies().len(), 3);
        assert_eq!(all.snapshot(&0).remaining(), 2);
    }

    #[test]
    fn insufficient_capacity_refunds_the_earlier_admissions() {
        let all = AllOf::new((Counter::new(10), Counter::new(3))).unwrap();
        assert_eq!(all.check_n(&0, 5), Err(InsufficientCapacity { requested: 5, capacity: 3 }));
        assert_eq!(all.members().0.used(0), 0);
    }

    #[test]
    fn nested_members_are_indexed_after_each_other() {
        let inner = AllOf::new((Counter::new(5), Counter::new(4))).unwrap();
        let all = AllOf::new((Counter::new(9), inner)).unwrap();
        assert_eq!(all.policies().len(), 3);
        let d = all.check_n(&0, 4).unwrap();
        assert_eq!((d.policy_index(), d.remaining()), (2, 0));
        let d = all.check_n(&0, 1).unwrap();
        assert!(d.is_denied());
        assert_eq!(d.policy_index(), 2);
        assert_eq!(all.members().0.used(0), 4);
    }

    #[test]
    fn trait_objects_of_different_types_are_members() {
        let members: Vec<Box<dyn KeyedLimiter<u32> + Send + Sync>> =
            vec![Box::new(Counter::new(2)), Box::new(AllOf::new((Counter::new(1),)).unwrap())];
        let all = AllOf::new(members).unwrap();
        assert!(all.check_n(&0, 1).unwrap().is_allowed());
        assert!(all.check_n(&0, 1).unwrap().is_denied());
        let empty: Vec<Counter> = Vec::new();
        assert_eq!(AllOf::new::<u32>(empty).err(), Some(AllOfError::NoMembers));
    }

    #[test]
    fn refund_gives_back_to_every_member() {
        let all = AllOf::new((Counter::new(3), Counter::new(3))).unwrap();
        let d = all.check_n(&0, 2).unwrap();
        all.refund(&0, 2, &d).unwrap();
        assert_eq!((all.members().0.used(0), all.members().1.used(0)), (0, 0));
    }

    /// Admits everything with `remaining` left, recording `charge`; remembers the
    /// charges its refunds were handed.
    struct Charges {
        policy: Vec<Policy>,
        remaining: u64,
        charge: u64,
        refunded_with: Mutex<Vec<(Option<u64>, usize, bool)>>,
    }

    impl Charges {
        fn new(policies: usize, remaining: u64, charge: u64) -> Self {
            let policy = vec![Policy::new(100, Duration::from_secs(1)); policies];
            Self { policy, remaining, charge, refunded_with: Mutex::new(Vec::new()) }
        }
    }

    impl KeyedLimiter<u32> for Charges {
        fn check_n(&self, _: &u32, _: u64) -> Result<Decision, InsufficientCapacity> {
            let last = self.policy.len().saturating_sub(1);
            Ok(Decision::allowed(Snapshot::new(100, self.remaining, 0)).charged(self.charge).for_policy(last))
        }
        fn refund(&self, _: &u32, _: u64, admission: &Decision) -> Result<(), InsufficientCapacity> {
            let seen = (admission.unit_charge(), admission.policy_index(), admission.is_zero_cost());
            self.refunded_with.lock().unwrap().push(seen);
            Ok(())
        }
        fn snapshot(&self, _: &u32) -> Snapshot {
            Snapshot::new(100, self.remaining, 0)
        }
        fn policies(&self) -> &[Policy] {
            &self.policy
        }
    }

    /// A refund hands the deciding member its own decision (its charge, its own
    /// policy index) and every other member the decision without a charge, also
    /// through a member of several policies and a nested all-of.
    #[test]
    fn a_refund_hands_only_the_decider_its_charge() {
        let inner = AllOf::new((Charges::new(1, 50, 7), Charges::new(2, 3, 11))).unwrap();
        let all = AllOf::new((Charges::new(2, 9, 5), inner, Charges::new(1, 40, 13))).unwrap();
        let d = all.check_n(&0, 1).unwrap();
        assert_eq!((d.policy_index(), d.unit_charge()), (4, Some(11)), "the inner member of two policies");
        all.refund(&0, 1, &d).unwrap();
        let (first, inner, last) = all.members();
        assert_eq!(*first.refunded_with.lock().unwrap(), [(None, 4, false)]);
        assert_eq!(*inner.members().0.refunded_with.lock().unwrap(), [(None, 2, false)]);
        assert_eq!(*inner.members().1.refunded_with.lock().unwrap(), [(Some(11), 1, false)]);
        assert_eq!(*last.refunded_with.lock().unwrap(), [(None, 4, false)]);
        // An admission of 0 is one that took nothing, for every member.
        let free = all.check_n(&0, 0).unwrap();
        all.refund(&0, 1, &free).unwrap();
        assert_eq!(last.refunded_with.lock().unwrap()[1], (None, 4, true));
        assert_eq!(inner.members().1.refunded_with.lock().unwrap()[1], (None, 1, true));
    }

    /// Admits everything, stamping its decisions with a fixed reading and `left`
    /// remaining.
    struct Stamps {
        policy: [Policy; 1],
        at: Option<u64>,
        left: u64,
    }

    impl KeyedLimiter<u32> for Stamps {
        fn check_n(&self, _: &u32, _: u64) -> Result<Decision, InsufficientCapacity> {
            let decision = Decision::allowed(Snapshot::new(10, self.left, 0));
            Ok(match self.at {
                Some(at) => decision.at(crate::Nanos::new(at)),
                None => decision,
            })
        }
        fn refund(&self, _: &u32, _: u64, _: &Decision) -> Result<(), InsufficientCapacity> {
            Ok(())
        }
        fn snapshot(&self, _: &u32) -> Snapshot {
            Snapshot::new(10, self.left, 0)
        }
        fn policies(&self) -> &[Policy] {
            &self.policy
        }
    }

    /// An admission is stamped with the earliest reading any member decided it at
    /// (a decision that says no reading passed over; a reading of 0 is one),
    /// whichever member decided, so that a refund hands no member a reading later
    /// than its own.
    #[test]
    fn an_admission_is_stamped_with_the_earliest_members_reading() {
        let stamps = |at, left| Stamps { policy: [Policy::new(10, Duration::from_secs(1))], at: Some(at), left };
        let silent = |left| Stamps { policy: [Policy::new(10, Duration::from_secs(1))], at: None, left };
        let all = AllOf::new((stamps(7, 9), stamps(5, 8), silent(1), stamps(6, 9))).unwrap();
        let d = all.check_n(&0, 1).unwrap();
        assert_eq!((d.policy_index(), d.decided_at(), d.is_stamped()), (2, crate::Nanos::new(5), true));
        let all = AllOf::new((stamps(7, 9), stamps(0, 8))).unwrap();
        let d = all.check_n(&0, 1).unwrap();
        assert_eq!((d.decided_at(), d.is_stamped()), (crate::Nanos::ZERO, true), "a reading of 0 is a reading");
        let all = AllOf::new((silent(3), silent(4))).unwrap();
        assert!(!all.check_n(&0, 1).unwrap().is_stamped());
    }

    /// The documented transient: while a request holds the first quota's last unit
    /// on its way to being denied by the second, a concurrent request is denied by the
    /// first (spuriously: the unit comes back a moment later), never admitted twice.
    #[test]
    fn a_request_racing_a_refund_is_denied_spuriously_never_over_admitted() {
        let first = Counter::new(1);
        let spurious = Mutex::new(None);
        let racing = AllOf::new((&first,)).unwrap();
        let exhausted = Counter::new(1);
        assert!(exhausted.check_n(&0, 1).unwrap().is_allowed());
        let all = AllOf::new((&first, Interleave { inner: exhausted, during: Mutex::new(None) })).unwrap();
        *all.members().1.during.lock().unwrap() = Some(Box::new(|| {
            *spurious.lock().unwrap() = Some(racing.check_n(&0, 1).unwrap());
        }));
        assert!(all.check_n(&0, 1).unwrap().is_denied());
        let raced = spurious.lock().unwrap().take().unwrap();
        assert!(raced.is_denied(), "the unit was held by the request being denied");
        assert_eq!(first.used(0), 0, "and then given back");
        assert!(racing.check_n(&0, 1).unwrap().is_allowed());
    }

    /// Under real threads: no member ever admits more than its quota, every all-of
    /// admission holds one unit of every member, and denied requests leave nothing.
    #[test]
    fn concurrent_checks_never_over_admit_and_denials_consume_nothing() {
        for round in 0..20u32 {
            let all = AllOf::new((Counter::new(40), Counter::new(25), Counter::new(30))).unwrap();
            let admitted = Mutex::new(0u64);
            std::thread::scope(|s| {
                for t in 0..4u64 {
                    let (all, admitted) = (&all, &admitted);
                    s.spawn(move || {
                        for i in 0..30u64 {
                            let n = 1 + (i + t + u64::from(round)) % 3;
                            if all.check_n(&round, n).unwrap().is_allowed() {
                                *admitted.lock().unwrap() += n;
                            }
                        }
                    });
                }
            });
            let admitted = *admitted.lock().unwrap();
            let (a, b, c) = all.members();
            assert!(admitted <= 25, "round {round}: admitted {admitted} > the tightest quota");
            assert_eq!((a.used(round), b.used(round), c.used(round)), (admitted, admitted, admitted));
        }
    }

    proptest::proptest! {
        /// Sequentially, an all-of decides exactly as the model: admit iff every
        /// member has room, and then take from every member.
        #[test]
        fn decides_as_the_sequential_model(
            limits in proptest::collection::vec(1u64..8, 1..4),
            requests in proptest::collection::vec(0u64..4, 0..30),
        ) {
            let all = AllOf::new(limits.iter().map(|&l| Counter::new(l)).collect::<Vec<_>>()).unwrap();
            let mut used = vec![0u64; limits.len()];
            for n in requests {
                let fits = limits.iter().zip(&used).all(|(l, u)| u + n <= *l);
                match all.check_n(&0, n) {
                    Err(_) => proptest::prop_assert!(limits.iter().any(|&l| n > l)),
                    Ok(d) => {
                        proptest::prop_assert_eq!(d.is_allowed(), fits);
                        if fits {
                            used.iter_mut().for_each(|u| *u += n);
                            let least = limits.iter().zip(&used).map(|(l, u)| l - u).min().unwrap();
                            proptest::prop_assert_eq!(d.remaining(), least);
                        }
                    }
                }
                for (i, member) in all.members().iter().enumerate() {
                    proptest::prop_assert_eq!(member.used(0), used[i]);
                }
            }
        }
    }
}

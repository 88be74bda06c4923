//! [`Resilient`]: what a [`RedisLimiter`] decides when Redis is slow or down.
//!
//! A check that gets no answer within the call timeout (or finds the connection
//! down) is decided by the [`FailPolicy`] instead: admit, deny, or ask a local weir
//! limiter running at `rate ÷ instances`. Redis is then left alone for a back-off
//! (doubling from [`Backoff::initial`] up to [`Backoff::max`]); after it, one check
//! probes Redis while the others keep using the policy, and the first answer
//! brings every check back to Redis. So a dead Redis costs each request at most one
//! timeout at the start of an outage and nothing after, and sees one probe per
//! back-off period, not one per request.
//!
//! A check dropped at its await (a client that disconnects) leaves no probe
//! behind: the probe flag is held by a guard that clears it however the check
//! ends, so the next check after the back-off probes again (before, one dropped
//! probe kept the limiter on its policy for good). A dropped call may still have
//! reached Redis; whether it was admitted there is Redis's to say.
//!
//! Which path decided is in [`Checked::path`]; a middleware that only needs the
//! [`Decision`] uses the [`AsyncKeyedLimiter`] impl. A decision made locally (fail
//! open, fail closed or the fallback) is marked [`Decision::is_from_fallback`]
//! (and has [`Decision::decided_at`] zero), and its refund is dropped; one made
//! by Redis carries Redis's time (or the limiter clock's, which may read zero)
//! and is refunded in Redis.
//!
//! # The local fallback
//!
//! Each instance enforces `count ÷ instances` per period with burst
//! `max(1, burst ÷ instances)` per key (windows: `limit ÷ instances` per window),
//! in a `weir_keyed::Keyed` GCRA store of bounded size, so the fleet as a whole
//! stays near the configured limit while Redis is away, if the load is spread
//! evenly over `instances` instances. (An "insurance" limiter at the full rate on
//! every instance would admit `instances ×` the limit.) The fallback's stores are
//! made with the `Resilient` and never cleared: they keep their state across
//! outages (a key that spent its local share in one outage starts the next with
//! what has refilled since, not with a full bucket), and decisions in Redis
//! between outages do not touch them; a tier's
//! quotas are checked all-of: a check of each, and when any denies, the
//! admissions of the others are refunded (less the time since they were made,
//! weir-gcra's rule), so a denied request keeps nothing and no quota is ever
//! passed over (two racing requests may each take from some quotas and then be
//! denied by another, which only admits less). A request that fits the quota
//! (`n ≤ burst`) but not the divided burst is denied, with `retry_after` the
//! time until Redis is tried again, never an error: it can only be admitted by
//! Redis. Refunds of fallback admissions are dropped.

use crate::limiter::deciding;
use crate::{ConfigError, Error, RedisLimiter};
use core::fmt;
use core::time::Duration;
use weir_keyed::{Keyed, KeyedConfig};
use weir_rl_core::__private::sync::{AtomicBool, AtomicU64, Ordering};
use weir_rl_core::{AsyncKeyedLimiter, Clock, Decision, MonotonicClock, Policy, Quota, Snapshot};

/// What to decide while Redis does not answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum FailPolicy {
    /// Admit every request (availability first: an outage lifts the limit).
    Open,
    /// Deny every request, with `retry_after` = the time until Redis is tried again,
    /// or, while a probe of Redis is in flight, the current back-off (protection
    /// first: an outage stops the traffic).
    Closed,
    /// Decide with a local limiter per instance at the quota's rate divided by its
    /// [`instances`](LocalFallback::instances) (see the [module docs](crate::fail)).
    LocalFallback(LocalFallback),
}

/// The local limiter of [`FailPolicy::LocalFallback`]: how many instances share the
/// limit, and the most keys the local limiter holds. Both are checked when it is
/// made.
///
/// ```
/// use weir_redis::{ConfigError, FailPolicy, LocalFallback};
///
/// // Ten instances behind the load balancer: each enforces a tenth of the rate.
/// let policy = FailPolicy::LocalFallback(LocalFallback::new(10, 100_000)?);
/// assert_eq!(LocalFallback::new(0, 100_000), Err(ConfigError::Zero { what: "LocalFallback::instances" }));
/// # let _ = policy;
/// # Ok::<(), ConfigError>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LocalFallback {
    instances: u32,
    max_keys: usize,
}

impl LocalFallback {
    /// A fallback for a limit shared by `instances` instances (the divisor, at least
    /// 1), holding at most `max_keys` keys (at least 1); or [`ConfigError::Zero`]
    /// naming the one that is zero, or [`ConfigError::Fallback`] for a `max_keys` no
    /// store can take.
    pub fn new(instances: u32, max_keys: usize) -> Result<Self, ConfigError> {
        if instances == 0 {
            return Err(ConfigError::Zero { what: "LocalFallback::instances" });
        }
        keyed_config(max_keys, weir_keyed::DEFAULT_STORE_NAME)?;
        Ok(Self { instances, max_keys })
    }

    /// How many instances share the limit (the divisor).
    pub fn instances(&self) -> u32 {
        self.instances
    }

    /// The most keys the local limiter holds.
    pub fn max_keys(&self) -> usize {
        self.max_keys
    }
}

/// The local store's configuration for `max_keys` keys, named `name` (the `store`
/// label of its metrics: the limiter's name).
fn keyed_config(max_keys: usize, name: &str) -> Result<KeyedConfig, ConfigError> {
    KeyedConfig::builder(max_keys).name(name).build().map_err(|e| match e {
        weir_keyed::KeyedConfigError::ZeroMaxKeys => ConfigError::Zero { what: "LocalFallback::max_keys" },
        e => ConfigError::Fallback { message: format!("LocalFallback::max_keys: {e}") },
    })
}

/// Which path made a decision.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Path {
    /// Redis, the shared state.
    Redis,
    /// [`FailPolicy::Open`] admitted it.
    FailOpen,
    /// [`FailPolicy::Closed`] denied it.
    FailClosed,
    /// [`FailPolicy::LocalFallback`]'s local limiter decided.
    LocalFallback,
}

/// A decision and the path that made it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Checked {
    /// The decision.
    pub decision: Decision,
    /// Who made it.
    pub path: Path,
}

/// How long Redis is left alone after it failed: `initial`, doubled after each
/// failed probe, at most `max`. Made by [`Backoff::new`], which refuses a zero
/// first pause and a longest pause shorter than the first.
///
/// ```
/// use std::time::Duration;
/// use weir_redis::{Backoff, ConfigError};
///
/// let backoff = Backoff::new(Duration::from_millis(50), Duration::from_secs(2))?;
/// assert_eq!((backoff.initial(), backoff.max()), (Duration::from_millis(50), Duration::from_secs(2)));
/// assert!(matches!(
///     Backoff::new(Duration::from_secs(2), Duration::from_millis(50)),
///     Err(ConfigError::BackoffMaxBelowInitial { .. })
/// ));
/// # Ok::<(), ConfigError>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Backoff {
    initial: Duration,
    max: Duration,
}

impl Backoff {
    /// Pauses from `initial` (not zero: Redis would be probed again at once),
    /// doubling up to `max` (at least `initial`); or [`ConfigError::Zero`]
    /// (`Backoff::initial`) or [`ConfigError::BackoffMaxBelowInitial`].
    pub fn new(initial: Duration, max: Duration) -> Result<Self, ConfigError> {
        if initial.is_zero() {
            return Err(ConfigError::Zero { what: "Backoff::initial" });
        }
        if max < initial {
            return Err(ConfigError::BackoffMaxBelowInitial { initial, max });
        }
        Ok(Self { initial, max })
    }

    /// The first pause (default 100 ms).
    pub fn initial(&self) -> Duration {
        self.initial
    }

    /// The longest pause (default 5 s).
    pub fn max(&self) -> Duration {
        self.max
    }
}

impl Default for Backoff {
    /// 100 ms, doubling up to 5 s.
    fn default() -> Self {
        Self { initial: Duration::from_millis(100), max: Duration::from_secs(5) }
    }
}

type Fallback<C> = Keyed<Vec<u8>, weir_gcra::GcraAlgorithm, C>;

/// A [`RedisLimiter`] with a [`FailPolicy`] for when Redis is slow or down, and
/// automatic recovery with back-off (see the [module docs](crate::fail)).
///
/// ```no_run
/// # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
/// use weir_rl_core::Quota;
/// use weir_redis::{FailPolicy, LocalFallback, Path, Redis, RedisLimiter, Resilient};
///
/// let redis = Redis::connect("redis://127.0.0.1:6379").await?;
/// let limiter = RedisLimiter::builder(&redis, Quota::per_second(100)?).build()?;
/// // Ten instances behind the load balancer: each enforces 10/s alone while Redis is away.
/// let fallback = LocalFallback::new(10, 100_000)?;
/// let limiter = Resilient::builder(limiter, FailPolicy::LocalFallback(fallback)).build()?;
/// let checked = limiter.check_traced("203.0.113.7", 1).await?;
/// if checked.path != Path::Redis {
///     // count it: the shared limit is not in force
/// }
/// # Ok(()) }
/// ```
pub struct Resilient<C: Clock = MonotonicClock> {
    limiter: RedisLimiter,
    policy: FailPolicy,
    /// One local store per quota, for [`FailPolicy::LocalFallback`].
    fallback: Box<[Fallback<C>]>,
    clock: C,
    backoff: Backoff,
    /// 0 while Redis is healthy; otherwise the clock reading (ns, at least 1) before
    /// which Redis is not tried again.
    down_until: AtomicU64,
    /// The current back-off (ns), doubled after each failed probe.
    backoff_ns: AtomicU64,
    /// Whether a probe is in flight (only one at a time after a back-off).
    probing: AtomicBool,
}

impl<C: Clock> fmt::Debug for Resilient<C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Resilient")
            .field("limiter", &self.limiter)
            .field("policy", &self.policy)
            .field("backoff", &self.backoff)
            .field("healthy", &self.is_healthy())
            .finish_non_exhaustive()
    }
}

/// A quota for one of `instances` instances: the rate divided, the burst too.
fn divided(quota: Quota, instances: u32) -> Result<Quota, ConfigError> {
    let fallback = |e: weir_rl_core::QuotaError| ConfigError::Fallback { message: e.to_string() };
    let period = quota
        .period()
        .checked_mul(instances)
        .ok_or(ConfigError::Fallback { message: format!("{quota} × {instances} instances is too long a period") })?;
    Quota::new(quota.count(), period)
        .and_then(|q| q.with_burst((quota.burst() / u64::from(instances)).max(1)))
        .map_err(fallback)
}

impl Resilient<MonotonicClock> {
    /// The options of `limiter` with `policy`, at their defaults (the default
    /// [`Backoff`]).
    pub fn builder(limiter: RedisLimiter, policy: FailPolicy) -> ResilientBuilder {
        ResilientBuilder { limiter, policy, backoff: Backoff::default() }
    }
}

/// The options of a [`Resilient`]: setters that never fail, checked together by
/// [`build`](Self::build) or [`build_with_clock`](Self::build_with_clock). From
/// [`Resilient::builder`].
///
/// ```no_run
/// # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
/// use std::time::Duration;
/// use weir_rl_core::Quota;
/// use weir_redis::{Backoff, FailPolicy, Redis, RedisLimiter, Resilient};
///
/// let redis = Redis::connect("redis://127.0.0.1:6379").await?;
/// let limiter = RedisLimiter::builder(&redis, Quota::per_second(100)?).build()?;
/// let backoff = Backoff::new(Duration::from_millis(50), Duration::from_secs(2))?;
/// let limiter = Resilient::builder(limiter, FailPolicy::Open).backoff(backoff).build()?;
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
#[must_use = "a builder does nothing until `build` is called"]
pub struct ResilientBuilder {
    limiter: RedisLimiter,
    policy: FailPolicy,
    backoff: Backoff,
}

impl ResilientBuilder {
    /// How long Redis is left alone after it failed. Default: [`Backoff::default()`]
    /// (100 ms, doubling up to 5 s).
    pub fn backoff(self, backoff: Backoff) -> Self {
        Self { backoff, ..self }
    }

    /// The limiter with its policy, timing back-offs (and the local fallback) with
    /// the monotonic clock; or [`ConfigError::Fallback`] when the limiter's quota
    /// divided by [`LocalFallback::instances`] cannot be a quota (a period too long,
    /// say).
    pub fn build(self) -> Result<Resilient<MonotonicClock>, ConfigError> {
        self.build_with_clock(MonotonicClock::new())
    }

    /// As [`build`](Self::build), timing back-offs (and the local fallback) with
    /// `clock`.
    pub fn build_with_clock<C: Clock + Clone>(self, clock: C) -> Result<Resilient<C>, ConfigError> {
        let Self { limiter, policy, backoff } = self;
        let mut fallback = Vec::new();
        if let FailPolicy::LocalFallback(local) = policy {
            let config = keyed_config(local.max_keys, limiter.name())?;
            for quota in limiter.quotas() {
                let quota = divided(quota, local.instances)?;
                fallback.push(Keyed::gcra_with_clock(quota, config.clone(), clock.clone()));
            }
        }
        Ok(Resilient {
            limiter,
            policy,
            fallback: fallback.into_boxed_slice(),
            clock,
            backoff,
            down_until: AtomicU64::new(0),
            backoff_ns: AtomicU64::new(0),
            probing: AtomicBool::new(false),
        })
    }
}

impl<C: Clock> Resilient<C> {
    /// The limiter behind the policy.
    pub fn limiter(&self) -> &RedisLimiter {
        &self.limiter
    }

    /// The policy.
    pub fn policy(&self) -> FailPolicy {
        self.policy
    }

    /// Whether the last answer came from Redis (no outage under way).
    pub fn is_healthy(&self) -> bool {
        // Ordering: Relaxed; a hint, read alone.
        self.down_until.load(Ordering::Relaxed) == 0
    }

    /// Checks one request. See [`check_traced`](Self::check_traced).
    pub async fn check(&self, key: &(impl AsRef<[u8]> + ?Sized)) -> Result<Decision, Error> {
        Ok(self.check_traced(key, 1).await?.decision)
    }

    /// Checks a request of cost `n` for `key`: in Redis when it answers, else by the
    /// fail policy. Errors are those a retry would not fix ([`Error::WrongType`],
    /// [`Error::InsufficientCapacity`], …); an unavailable Redis is never an error
    /// here.
    pub async fn check_traced(&self, key: &(impl AsRef<[u8]> + ?Sized), n: u64) -> Result<Checked, Error> {
        let key = key.as_ref();
        // Held across the call: a probe is released however this future ends,
        // dropped at the await included (a client that disconnects).
        let Some(_call) = self.may_call() else {
            return self.counted(self.decide_locally(key, n), n);
        };
        let reply = self.limiter.check_n(key, n).await;
        match reply {
            Ok(decision) => {
                self.succeeded();
                Ok(Checked { decision, path: Path::Redis })
            }
            Err(e) if e.is_unavailable() => {
                self.failed();
                self.counted(self.decide_locally(key, n), n)
            }
            Err(e) => Err(e),
        }
    }

    /// Counts a local decision of a request of cost `n` (not a peek) in the
    /// limiter's metrics (Redis's are counted by the limiter).
    #[inline]
    pub(crate) fn counted(&self, checked: Result<Checked, Error>, n: u64) -> Result<Checked, Error> {
        if let Ok(checked) = &checked
            && n > 0
        {
            self.limiter.metrics.decided_by(checked.path, checked.decision.is_allowed());
        }
        checked
    }

    /// Gives back `n` units of `admission`. A Redis admission is refunded in Redis
    /// (silently dropped while Redis is unavailable); a local one
    /// ([`Decision::is_from_fallback`]) is dropped.
    pub async fn refund(&self, key: &(impl AsRef<[u8]> + ?Sized), n: u64, admission: &Decision) -> Result<(), Error> {
        if admission.is_from_fallback() {
            return Ok(());
        }
        if !self.is_healthy() {
            return Ok(());
        }
        match self.limiter.refund(key, n, admission).await {
            Err(e) if e.is_unavailable() => {
                self.failed();
                Ok(())
            }
            other => other,
        }
    }

    /// `key`'s state: from Redis when it answers, else from the policy.
    pub async fn snapshot(&self, key: &(impl AsRef<[u8]> + ?Sized)) -> Result<Snapshot, Error> {
        Ok(self.check_traced(key, 0).await?.decision.snapshot())
    }

    /// Whether a call to Redis may be made now: Redis is healthy, or its back-off
    /// is over and this call wins the one probe. The permit, held until the call
    /// has ended, releases the probe when dropped.
    pub(crate) fn may_call(&self) -> Option<CallPermit<'_>> {
        // Ordering: Relaxed; the health words are hints that publish no other data:
        // a stale read at worst sends one more call to Redis or to the policy.
        let until = self.down_until.load(Ordering::Relaxed);
        if until == 0 {
            return Some(CallPermit { probing: None });
        }
        if self.clock.now().as_u64() < until {
            return None;
        }
        // Ordering: Relaxed; see above. The swap only elects one prober.
        if self.probing.swap(true, Ordering::Relaxed) {
            return None;
        }
        Some(CallPermit { probing: Some(&self.probing) })
    }

    /// Whether a probe is in flight (see `__private::is_probing`).
    pub(crate) fn is_probing(&self) -> bool {
        // Ordering: Relaxed; see `may_call`.
        self.probing.load(Ordering::Relaxed)
    }

    /// Redis answered: back to normal.
    pub(crate) fn succeeded(&self) {
        // Ordering: Relaxed; see `may_call`.
        if self.down_until.load(Ordering::Relaxed) != 0 {
            // Ordering: Relaxed; see `may_call`.
            self.down_until.store(0, Ordering::Relaxed);
            // Ordering: Relaxed; see `may_call`.
            self.backoff_ns.store(0, Ordering::Relaxed);
        }
    }

    /// Redis did not answer: leave it alone for the next back-off.
    pub(crate) fn failed(&self) {
        // `Backoff::new` keeps 0 < initial <= max.
        let (initial, max) = (duration_ns(self.backoff.initial), duration_ns(self.backoff.max));
        // Ordering: Relaxed; see `may_call`. Concurrent failures may each double it;
        // the cap bounds the result.
        let previous = self.backoff_ns.load(Ordering::Relaxed);
        let pause = if previous == 0 { initial } else { previous.saturating_mul(2).min(max) };
        // Ordering: Relaxed; see `may_call`.
        self.backoff_ns.store(pause, Ordering::Relaxed);
        let until = self.clock.now().as_u64().saturating_add(pause).max(1);
        // Ordering: Relaxed; see `may_call`.
        self.down_until.store(until, Ordering::Relaxed);
    }

    /// The time until the next probe, for a fail-closed `retry_after`; while a
    /// probe is in flight (the back-off is over), the current back-off: the
    /// least a client waits if the probe fails, and a retry after it is
    /// answered by Redis if the probe succeeds. Never below 1 ns.
    fn until_probe_ns(&self) -> u64 {
        // Ordering: Relaxed; see `may_call`.
        let until = self.down_until.load(Ordering::Relaxed);
        match until.checked_sub(self.clock.now().as_u64()) {
            Some(left) if left > 0 => left,
            // Ordering: Relaxed; see `may_call`.
            _ => self.backoff_ns.load(Ordering::Relaxed).max(duration_ns(self.backoff.initial)).max(1),
        }
    }

    fn decide_locally(&self, key: &[u8], n: u64) -> Result<Checked, Error> {
        Ok(self.decide_locally_held(key, n)?.0)
    }

    /// A decision by the policy, and what it took: for an admission by the
    /// local fallback, the key's name in its stores and each store's admission,
    /// for [`give_back_locally`](Self::give_back_locally) (a batch that the
    /// other items refuse); `None` when nothing was taken.
    pub(crate) fn decide_locally_held(&self, key: &[u8], n: u64) -> Result<(Checked, Option<LocalHeld>), Error> {
        let limit = self.limiter.capacity();
        if n > limit {
            return Err(Error::InsufficientCapacity(weir_rl_core::InsufficientCapacity {
                requested: n,
                capacity: limit,
            }));
        }
        let mut held = None;
        let (decision, path) = match self.policy {
            FailPolicy::Open => (Decision::allowed(Snapshot::new(limit, limit.saturating_sub(n), 0)), Path::FailOpen),
            FailPolicy::Closed => {
                let snapshot = Snapshot::new(limit, 0, 0);
                let decision = if n == 0 {
                    Decision::allowed(snapshot)
                } else {
                    Decision::denied(snapshot, self.until_probe_ns())
                };
                (decision, Path::FailClosed)
            }
            // The store keeps the key's name (at most 3 × max_key_bytes bytes, or
            // a hash), never the key itself.
            FailPolicy::LocalFallback(_) => {
                let name = self.limiter.key_name(key)?;
                let (decision, admissions) = self.fallback_check(name.as_bytes(), n)?;
                if n > 0 && !admissions.is_empty() {
                    held = Some(LocalHeld { name, n, admissions });
                }
                (decision, Path::LocalFallback)
            }
        };
        Ok((Checked { decision: decision.unstamped().from_fallback(), path }, held))
    }

    /// Gives back to the local fallback's stores what
    /// [`decide_locally_held`](Self::decide_locally_held) took (weir-gcra's
    /// refund rule: less the time since).
    pub(crate) fn give_back_locally(&self, held: &LocalHeld) {
        for (store, admission) in self.fallback.iter().zip(&held.admissions) {
            let _ = store.refund(held.name.as_bytes(), held.n, admission);
        }
    }

    /// All-of over the fallback stores: a check of each; if any denies, the
    /// admissions of the others are refunded, so a denied request keeps nothing
    /// (each store decides at its own clock reading, so a quota that refills
    /// between two readings cannot let a request past another that is exhausted).
    /// A request above a store's divided burst (it fits the quota, so Redis may
    /// admit it) is denied until the next probe of Redis.
    fn fallback_check(&self, key: &[u8], n: u64) -> Result<(Decision, Vec<Decision>), Error> {
        let mut decisions = Vec::with_capacity(self.fallback.len());
        let mut failed = None;
        for (i, store) in self.fallback.iter().enumerate() {
            match store.check_n(key, n) {
                Ok(decision) => decisions.push(decision),
                Err(_) => {
                    // `n` fits the quota (checked by the caller) but not this
                    // store's divided burst.
                    failed = Some(i);
                    break;
                }
            }
        }
        if failed.is_some() || decisions.iter().any(Decision::is_denied) {
            for (store, decision) in self.fallback.iter().zip(&decisions) {
                // A denial took nothing (`refund` skips it); `n` was admitted, so it
                // fits the store.
                let _ = store.refund(key, n, decision);
            }
        }
        if let Some(i) = failed {
            // Never admitted locally, though Redis could admit it: denied until
            // Redis is tried again, not an error ("never fits" it is not).
            let snapshot = self.fallback[i].snapshot(key);
            return Ok((Decision::denied(snapshot, self.until_probe_ns()).for_policy(i), Vec::new()));
        }
        if decisions.iter().any(Decision::is_denied) {
            return Ok((deciding(decisions), Vec::new()));
        }
        Ok((deciding(decisions.iter().copied()), decisions))
    }
}

/// What a local fallback admission took (see
/// [`Resilient::decide_locally_held`]): the key's name in the stores, the cost,
/// and each store's admission.
#[derive(Debug)]
pub(crate) struct LocalHeld {
    name: String,
    n: u64,
    admissions: Vec<Decision>,
}

/// Leave to call Redis, from [`Resilient::may_call`]: for a probe, it holds the
/// probe flag and clears it when dropped, so a call that ends in any way (an
/// answer, an error, or its future dropped at the await) leaves no probe behind,
/// and the next check after the back-off probes again.
pub(crate) struct CallPermit<'a> {
    /// The flag this call won, if it is the probe.
    probing: Option<&'a AtomicBool>,
}

impl Drop for CallPermit<'_> {
    fn drop(&mut self) {
        if let Some(probing) = self.probing {
            // Ordering: Relaxed; see `Resilient::may_call`. The verdict of the probe
            // (`succeeded` or `failed`) is stored before this, in program order;
            // another check that reads the flag clear and a stale verdict at worst
            // probes once more.
            probing.store(false, Ordering::Relaxed);
        }
    }
}

fn duration_ns(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

impl<K: AsRef<[u8]> + ?Sized + Sync, C: Clock + Send + Sync> AsyncKeyedLimiter<K> for Resilient<C> {
    type Error = Error;

    async fn check_n(&self, key: &K, n: u64) -> Result<Decision, Error> {
        Ok(self.check_traced(key, n).await?.decision)
    }

    fn refund(&self, key: &K, n: u64, admission: &Decision) -> impl Future<Output = Result<(), Error>> + Send {
        Resilient::refund(self, key, n, admission)
    }

    fn snapshot(&self, key: &K) -> impl Future<Output = Result<Snapshot, Error>> + Send {
        Resilient::snapshot(self, key)
    }

    fn policies(&self) -> &[Policy] {
        self.limiter.policies()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_backoff_is_refused_rather_than_adjusted() {
        // A zero first pause was raised to 1 ns, and a longest pause below the first
        // raised to the first.
        assert_eq!(
            Backoff::new(Duration::ZERO, Duration::from_secs(1)),
            Err(ConfigError::Zero { what: "Backoff::initial" })
        );
        let (initial, max) = (Duration::from_secs(2), Duration::from_millis(50));
        let e = Backoff::new(initial, max).unwrap_err();
        assert_eq!(e, ConfigError::BackoffMaxBelowInitial { initial, max });
        assert!(e.to_string().starts_with("Backoff::max: "), "{e}");
        let backoff = Backoff::new(initial, initial).unwrap();
        assert_eq!((backoff.initial(), backoff.max()), (initial, initial));
        let default = Backoff::default();
        assert_eq!((default.initial(), default.max()), (Duration::from_millis(100), Duration::from_secs(5)));
    }

    #[test]
    fn a_local_fallback_is_checked_when_made() {
        assert_eq!(LocalFallback::new(0, 10), Err(ConfigError::Zero { what: "LocalFallback::instances" }));
        assert_eq!(LocalFallback::new(4, 0), Err(ConfigError::Zero { what: "LocalFallback::max_keys" }));
        assert!(
            matches!(LocalFallback::new(4, usize::MAX), Err(ConfigError::Fallback { message }) if message.starts_with("LocalFallback::max_keys: "))
        );
        let fallback = LocalFallback::new(4, 10).unwrap();
        assert_eq!((fallback.instances(), fallback.max_keys()), (4, 10));
    }
}

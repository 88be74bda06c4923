//! [`Tiers`]: plans (free / pro / enterprise), each its own all-of store, chosen per
//! request by your async lookup, with a bounded, expiring cache.

use crate::key::Key;
use crate::store::Store;
use core::fmt;
use core::future::Future;
use core::pin::Pin;
use std::sync::Arc;
use std::time::Duration;
use weir_core::{Clock, MonotonicClock};

type LookupFuture = Pin<Box<dyn Future<Output = Result<String, String>> + Send>>;
type LookupFn = dyn Fn(Key) -> LookupFuture + Send + Sync;

/// What a tiered limit does when the lookup fails (or names a tier that does not
/// exist).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum OnLookupError {
    /// Use this tier (the most restrictive one, usually), cached for
    /// [`failure_ttl`](TiersBuilder::failure_ttl) so a failing backend is not asked on every request.
    Tier(String),
    /// Refuse the request with `503 Service Unavailable` (nothing cached).
    Deny,
}

/// Plans, each enforced by its own store (typically an [`AllOf`](weir_core::AllOf)
/// of a burst, a per-minute and a per-day quota, checked all or nothing), and the
/// lookup that says which plan a client is on.
///
/// The lookup (a database or an auth service, say) is an async function of the
/// client's [`Key`]. Its answers are cached for `ttl` (300 s by default), at most
/// `max_entries` of them (10 000 by default; when the cache is full, expired entries
/// go first, then arbitrary ones, an eighth of the cache at a time). A request whose
/// tier is cached takes one lock-free map read; a miss awaits the lookup. Concurrent
/// misses for one key each run the lookup (no request coalescing).
///
/// Built by [`Tiers::builder`], whose [`build`](TiersBuilder::build) checks that
/// there is a tier, that the fallback tier is one of them and that the cache holds
/// an answer.
///
/// ```
/// use weir_core::{AllOf, Quota};
/// use weir_keyed::{KeyedConfig, KeyedFixedWindow, KeyedGcra, KeyedSlidingWindow};
/// use weir_tower::{Key, OnLookupError, Store, Tiers};
///
/// /// A plan: `per_minute` a minute and `per_day` a day, at most `burst` at once,
/// /// all or nothing.
/// fn plan(per_minute: u64, per_day: u64, burst: u64) -> Result<Store, Box<dyn std::error::Error>> {
///     let keys = KeyedConfig::builder(100_000).build()?;
///     let burst: KeyedGcra<Key> = KeyedGcra::gcra(Quota::per_minute(per_minute)?.with_burst(burst)?, keys.clone());
///     let minute: KeyedSlidingWindow<Key> = KeyedSlidingWindow::sliding_window(Quota::per_minute(per_minute)?, keys.clone())?;
///     let day: KeyedFixedWindow<Key> = KeyedFixedWindow::fixed_window(Quota::per_day(per_day)?, keys)?;
///     Ok(Store::local(AllOf::new((burst, minute, day))?).named(["burst", "minute", "day"]))
/// }
///
/// let tiers = Tiers::builder(|key: Key| async move {
///     // Ask your database which plan `key` is on.
///     Ok::<_, std::io::Error>(if key.payload().starts_with(b"pro-") { "pro" } else { "free" })
/// })
/// .tier("free", plan(30, 1_000, 10)?)
/// .tier("pro", plan(300, 50_000, 50)?)
/// .on_lookup_error(OnLookupError::Tier("free".into()))
/// .build()?;
/// # let _ = tiers;
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub struct Tiers {
    tiers: Vec<(Arc<str>, Store)>,
    lookup: Arc<LookupFn>,
    cache: papaya::HashMap<Key, Cached>,
    ttl: Duration,
    failure_ttl: Duration,
    max_entries: usize,
    on_error: OnLookupError,
    clock: Arc<dyn Clock + Send + Sync>,
}

/// A cached answer: tier index, and when it expires (clock nanoseconds).
#[derive(Debug, Clone, Copy)]
struct Cached {
    tier: usize,
    expires_ns: u64,
}

/// Why a request's tier could not be resolved (the lookup failed and the policy is
/// [`OnLookupError::Deny`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LookupFailed(pub String);

impl fmt::Display for LookupFailed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "the tier lookup failed: {}", self.0)
    }
}

impl std::error::Error for LookupFailed {}

/// Which [`TiersBuilder`] option was refused, and why.
///
/// ```
/// use weir_tower::{Key, Tiers, TiersError};
///
/// let lookup = |_: Key| async { Ok::<_, std::io::Error>("free") };
/// assert_eq!(Tiers::builder(lookup).build().unwrap_err(), TiersError::NoTiers);
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum TiersError {
    /// No [`tier`](TiersBuilder::tier) was added: every lookup would fail.
    NoTiers,
    /// [`on_lookup_error`](TiersBuilder::on_lookup_error) names a fallback tier
    /// that is not one of the tiers.
    UnknownFallback {
        /// The tier named.
        name: String,
    },
    /// [`max_entries`](TiersBuilder::max_entries) was zero: no answer could be
    /// cached (for no caching, set a zero [`ttl`](TiersBuilder::ttl)).
    ZeroMaxEntries,
}

impl TiersError {
    /// The option refused: `"tier"`, `"on_lookup_error"` or `"max_entries"`.
    pub fn option(&self) -> &'static str {
        match self {
            Self::NoTiers => "tier",
            Self::UnknownFallback { .. } => "on_lookup_error",
            Self::ZeroMaxEntries => "max_entries",
        }
    }
}

impl fmt::Display for TiersError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::NoTiers => f.write_str("tier: no tier was added; a tiered limit needs at least one"),
            Self::UnknownFallback { name } => {
                write!(f, "on_lookup_error: the fallback tier `{name}` is not one of the tiers")
            }
            Self::ZeroMaxEntries => {
                f.write_str("max_entries: the tier cache holds at least one answer, not 0 (a zero ttl caches nothing)")
            }
        }
    }
}

impl std::error::Error for TiersError {}

/// The options of [`Tiers`]: setters that never fail, checked together by
/// [`build`](Self::build) or [`build_with_clock`](Self::build_with_clock). From
/// [`Tiers::builder`].
#[derive(Clone)]
#[must_use = "a builder does nothing until `build` is called"]
pub struct TiersBuilder {
    tiers: Vec<(Arc<str>, Store)>,
    lookup: Arc<LookupFn>,
    ttl: Duration,
    failure_ttl: Duration,
    max_entries: usize,
    on_error: OnLookupError,
}

impl fmt::Debug for TiersBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TiersBuilder")
            .field("tiers", &self.tiers)
            .field("ttl", &self.ttl)
            .field("failure_ttl", &self.failure_ttl)
            .field("max_entries", &self.max_entries)
            .field("on_error", &self.on_error)
            .finish_non_exhaustive()
    }
}

impl TiersBuilder {
    /// Adds tier `name`, enforced by `store`. A later tier of the same name replaces
    /// the earlier one.
    pub fn tier(mut self, name: impl AsRef<str>, store: Store) -> Self {
        let name: Arc<str> = Arc::from(name.as_ref());
        match self.tiers.iter_mut().find(|(n, _)| *n == name) {
            Some(slot) => slot.1 = store,
            None => self.tiers.push((name, store)),
        }
        self
    }

    /// How long an answer is cached (zero: not cached). Default: 300 s.
    pub fn ttl(self, ttl: Duration) -> Self {
        Self { ttl, ..self }
    }

    /// How long the fallback tier of [`OnLookupError::Tier`] is cached after a
    /// failed lookup (zero: not cached). Default: 10 s.
    pub fn failure_ttl(self, ttl: Duration) -> Self {
        Self { failure_ttl: ttl, ..self }
    }

    /// The most answers cached (at least 1). Default: 10 000.
    pub fn max_entries(self, n: usize) -> Self {
        Self { max_entries: n, ..self }
    }

    /// What to do when the lookup fails. Default: [`OnLookupError::Deny`].
    pub fn on_lookup_error(self, on_error: OnLookupError) -> Self {
        Self { on_error, ..self }
    }

    /// The tiers, their cache expiring by the monotonic clock; or the first option
    /// refused: [`TiersError::NoTiers`], [`TiersError::UnknownFallback`],
    /// [`TiersError::ZeroMaxEntries`].
    pub fn build(self) -> Result<Tiers, TiersError> {
        self.build_with_clock(MonotonicClock::new())
    }

    /// As [`build`](Self::build), the cache expiring by `clock` (a
    /// [`ManualClock`](weir_core::ManualClock) in tests).
    pub fn build_with_clock(self, clock: impl Clock + Send + Sync + 'static) -> Result<Tiers, TiersError> {
        self.build_with_shared_clock(Arc::new(clock))
    }

    pub(crate) fn build_with_shared_clock(self, clock: Arc<dyn Clock + Send + Sync>) -> Result<Tiers, TiersError> {
        let Self { tiers, lookup, ttl, failure_ttl, max_entries, on_error } = self;
        if tiers.is_empty() {
            return Err(TiersError::NoTiers);
        }
        if let OnLookupError::Tier(name) = &on_error
            && !tiers.iter().any(|(n, _)| **n == **name)
        {
            return Err(TiersError::UnknownFallback { name: name.clone() });
        }
        if max_entries == 0 {
            return Err(TiersError::ZeroMaxEntries);
        }
        Ok(Tiers { tiers, lookup, cache: papaya::HashMap::new(), ttl, failure_ttl, max_entries, on_error, clock })
    }
}

impl Tiers {
    /// The options of tiers chosen by `lookup`, an async function from a client's
    /// key to its tier's name (`Ok("pro")`), or an error; with no tiers yet, the
    /// others at their defaults.
    pub fn builder<F, Fut, T, E>(lookup: F) -> TiersBuilder
    where
        F: Fn(Key) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<T, E>> + Send + 'static,
        T: AsRef<str>,
        E: fmt::Display,
    {
        let lookup = Arc::new(move |key: Key| -> LookupFuture {
            let answer = lookup(key);
            Box::pin(async move {
                match answer.await {
                    Ok(tier) => Ok(tier.as_ref().to_owned()),
                    Err(e) => Err(e.to_string()),
                }
            })
        });
        TiersBuilder {
            tiers: Vec::new(),
            lookup,
            ttl: Duration::from_secs(300),
            failure_ttl: Duration::from_secs(10),
            max_entries: 10_000,
            on_error: OnLookupError::Deny,
        }
    }

    /// How long an answer is cached.
    pub fn ttl(&self) -> Duration {
        self.ttl
    }

    /// How long the fallback tier is cached after a failed lookup.
    pub fn failure_ttl(&self) -> Duration {
        self.failure_ttl
    }

    /// The most answers cached.
    pub fn max_entries(&self) -> usize {
        self.max_entries
    }

    /// What is done when the lookup fails.
    pub fn on_lookup_error(&self) -> &OnLookupError {
        &self.on_error
    }

    /// The tiers, in the order added: names and stores.
    pub fn tiers(&self) -> impl Iterator<Item = (&str, &Store)> {
        self.tiers.iter().map(|(name, store)| (&**name, store))
    }

    pub(crate) fn store(&self, tier: usize) -> Option<&Store> {
        self.tiers.get(tier).map(|(_, store)| store)
    }

    fn index_of(&self, name: &str) -> Option<usize> {
        self.tiers.iter().position(|(n, _)| &**n == name)
    }

    /// `key`'s tier if the cache holds a live answer: one lock-free read.
    pub fn cached(&self, key: &Key) -> Option<usize> {
        let now = self.clock.now().as_u64();
        let cache = self.cache.pin();
        cache.get(key).filter(|c| c.expires_ns > now).map(|c| c.tier)
    }

    /// `key`'s tier: cached, or looked up (and then cached).
    pub async fn resolve(&self, key: &Key) -> Result<usize, LookupFailed> {
        if let Some(tier) = self.cached(key) {
            return Ok(tier);
        }
        let answer = (self.lookup)(key.clone()).await;
        let answer = answer.and_then(|name| self.index_of(&name).ok_or_else(|| format!("no tier is named `{name}`")));
        match answer {
            Ok(tier) => {
                self.remember(key, tier, self.ttl);
                Ok(tier)
            }
            Err(error) => match &self.on_error {
                OnLookupError::Tier(name) => {
                    // Built only with a fallback that is one of the tiers.
                    let tier = self.index_of(name).ok_or_else(|| LookupFailed(error.clone()))?;
                    tracing::warn!(target: "weir_tower", key = %key, %error, fallback = %name, "tier lookup failed");
                    self.remember(key, tier, self.failure_ttl);
                    Ok(tier)
                }
                OnLookupError::Deny => {
                    tracing::warn!(target: "weir_tower", key = %key, %error, "tier lookup failed");
                    Err(LookupFailed(error))
                }
            },
        }
    }

    fn remember(&self, key: &Key, tier: usize, ttl: Duration) {
        if ttl.is_zero() {
            return;
        }
        let now = self.clock.now().as_u64();
        let expires_ns = now.saturating_add(u64::try_from(ttl.as_nanos()).unwrap_or(u64::MAX));
        let cache = self.cache.pin();
        if cache.len() >= self.max_entries && !cache.contains_key(key) {
            // Make room for an eighth of the cache: expired entries first, then any.
            let target = self.max_entries - self.max_entries.div_ceil(8);
            cache.retain(|_, c| c.expires_ns > now);
            let excess = cache.len().saturating_sub(target);
            if excess > 0 {
                let victims: Vec<Key> = cache.keys().take(excess).cloned().collect();
                for victim in &victims {
                    cache.remove(victim);
                }
            }
        }
        cache.insert(key.clone(), Cached { tier, expires_ns });
    }

    /// Answers cached now (live or expired, not yet dropped).
    pub fn cached_len(&self) -> usize {
        self.cache.len()
    }

    /// Forgets every cached answer (after plans changed, say).
    pub fn clear_cache(&self) {
        self.cache.pin().clear();
    }
}

impl fmt::Debug for Tiers {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Tiers")
            .field("tiers", &self.tiers)
            .field("ttl", &self.ttl)
            .field("failure_ttl", &self.failure_ttl)
            .field("max_entries", &self.max_entries)
            .field("on_error", &self.on_error)
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use weir_core::{ManualClock, Policy};

    use crate::test_support::Open;

    fn store() -> Store {
        Store::local(Open([Policy::new(1, Duration::from_secs(1))]))
    }

    fn block_on<F: Future>(f: F) -> F::Output {
        tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(f)
    }

    fn counting(calls: Arc<AtomicUsize>) -> TiersBuilder {
        Tiers::builder(move |key: Key| {
            calls.fetch_add(1, Ordering::Relaxed);
            async move {
                match key.payload() {
                    b"down" => Err("backend down"),
                    b"ghost" => Ok("platinum"),
                    p if p.starts_with(b"pro") => Ok("pro"),
                    _ => Ok("free"),
                }
            }
        })
        .tier("free", store())
        .tier("pro", store())
    }

    #[test]
    fn answers_are_cached_until_they_expire() {
        let calls = Arc::new(AtomicUsize::new(0));
        let clock = ManualClock::new();
        let tiers = counting(calls.clone()).ttl(Duration::from_secs(300)).build_with_clock(clock.clone()).unwrap();
        let key = Key::user("pro-1");
        assert_eq!(tiers.cached(&key), None);
        assert_eq!(block_on(tiers.resolve(&key)), Ok(1));
        assert_eq!(block_on(tiers.resolve(&key)), Ok(1));
        assert_eq!(tiers.cached(&key), Some(1));
        assert_eq!(calls.load(Ordering::Relaxed), 1);
        clock.advance(Duration::from_secs(300));
        assert_eq!(tiers.cached(&key), None);
        assert_eq!(block_on(tiers.resolve(&key)), Ok(1));
        assert_eq!(calls.load(Ordering::Relaxed), 2);
    }

    #[test]
    fn failures_follow_the_policy() {
        let calls = Arc::new(AtomicUsize::new(0));
        let clock = ManualClock::new();
        let deny = counting(calls.clone()).build_with_clock(clock.clone()).unwrap();
        assert_eq!(block_on(deny.resolve(&Key::user("down"))), Err(LookupFailed("backend down".into())));
        assert!(block_on(deny.resolve(&Key::user("ghost"))).is_err(), "an unknown tier is a failure");
        assert_eq!(deny.cached_len(), 0);

        let fallback = counting(calls.clone())
            .on_lookup_error(OnLookupError::Tier("free".into()))
            .failure_ttl(Duration::from_secs(10))
            .build_with_clock(clock.clone())
            .unwrap();
        let before = calls.load(Ordering::Relaxed);
        assert_eq!(block_on(fallback.resolve(&Key::user("down"))), Ok(0));
        assert_eq!(block_on(fallback.resolve(&Key::user("down"))), Ok(0));
        assert_eq!(calls.load(Ordering::Relaxed), before + 1, "the fallback is cached");
        clock.advance(Duration::from_secs(10));
        assert_eq!(fallback.cached(&Key::user("down")), None);
    }

    #[test]
    fn build_names_the_option_it_refuses() {
        let calls = Arc::new(AtomicUsize::new(0));
        let e = counting(calls.clone()).on_lookup_error(OnLookupError::Tier("gold".into())).build().unwrap_err();
        assert_eq!(e, TiersError::UnknownFallback { name: "gold".into() });
        assert!(e.to_string().starts_with("on_lookup_error: "), "{e}");
        // Was silently raised to one entry by `max_entries(0)`.
        let e = counting(calls.clone()).max_entries(0).build().unwrap_err();
        assert_eq!((e.clone(), e.option()), (TiersError::ZeroMaxEntries, "max_entries"));
        let e = Tiers::builder(|_: Key| async { Ok::<_, &str>("free") }).build().unwrap_err();
        assert_eq!(e, TiersError::NoTiers);
        let tiers = counting(calls).ttl(Duration::ZERO).max_entries(1).build().unwrap();
        assert_eq!(
            (tiers.ttl(), tiers.failure_ttl(), tiers.max_entries()),
            (Duration::ZERO, Duration::from_secs(10), 1)
        );
        assert_eq!(tiers.on_lookup_error(), &OnLookupError::Deny);
    }

    #[test]
    fn the_cache_stays_bounded() {
        let calls = Arc::new(AtomicUsize::new(0));
        let tiers = counting(calls).max_entries(16).build_with_clock(ManualClock::new()).unwrap();
        for i in 0..200 {
            block_on(tiers.resolve(&Key::user(&format!("user-{i}")))).unwrap();
            assert!(tiers.cached_len() <= 16);
        }
        // The latest answer is always kept.
        assert_eq!(tiers.cached(&Key::user("user-199")), Some(0));
    }
}

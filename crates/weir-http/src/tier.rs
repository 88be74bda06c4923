//! [`Tiers`]: plans (free / pro / enterprise), each its own all-of store, chosen per
//! request by your async lookup, with an expiring cache of its answers that stays
//! bounded in entries and in bytes under any sequence of keys, shares one lookup
//! among concurrent misses for a key, and is left as it was by a request dropped
//! at any await.

use crate::key::Key;
use crate::store::Store;
use core::fmt;
use core::future::Future;
use core::pin::Pin;
use quick_cache::sync::{Cache, DefaultLifecycle, PlaceholderGuard};
use quick_cache::{OptionsBuilder, Weighter};
use std::hash::RandomState;
use std::sync::Arc;
use std::time::Duration;
use weir_rl_core::{Clock, MonotonicClock};

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

/// Plans, each enforced by its own store (typically an [`AllOf`](weir_rl_core::AllOf)
/// of a burst, a per-minute and a per-day quota, checked all or nothing), and the
/// lookup that says which plan a client is on.
///
/// The lookup (a database or an auth service, say) is an async function of the
/// client's [`Key`]. Its answers are cached for `ttl` (300 s by default; a fallback
/// tier for `failure_ttl`, 10 s), in a cache that holds, whatever keys clients send:
///
/// - **Entries.** At most `max_entries` answers (10 000 by default), live or expired
///   ([`cached_len`](Self::cached_len)).
/// - **Bytes.** An answer weighs 256 bytes, or 192 plus its key's payload length for
///   a payload longer than 64 bytes; the answers weigh at most `max_entries × 256`
///   bytes (2.56 MB by default, [`cached_bytes`](Self::cached_bytes)), so long keys
///   displace short ones. The cache is split into shards (up to four a core, each of
///   at least 32 answers) that hold an equal share each; an answer heavier than 97 %
///   of its shard's share is not cached, and its key is looked up on every request. All
///   told (its slots, its index, the records of recently evicted keys that its
///   eviction keeps, long keys' bytes), the cache allocates at most twice that
///   weight: 5.12 MB by default (about 160 bytes an answer of a short key, measured).
/// - **Eviction.** When a shard is full, an answer read since it was cached is kept
///   over one that was not (CLOCK-Pro, in quick_cache), so a flood of one-off keys
///   does not evict the tiers of the clients that keep coming. An expired answer is
///   looked up again when its key comes back, or evicted as any other.
/// - **Reads.** A request whose tier is cached takes one read of its key's shard,
///   under the shard's read lock: readers never wait on one another, only on an
///   insertion into the same shard. A miss awaits the lookup.
/// - **Coalescing.** Concurrent misses for one key share one lookup: the first runs
///   it, the others wait for its answer, a refusal under [`OnLookupError::Deny`]
///   included (which is then not kept).
/// - **Cancellation.** A [`resolve`](Self::resolve) dropped at any await leaves
///   nothing behind: a waiter just stops waiting, and a dropped lookup hands its
///   turn to the next waiter (who runs the lookup) or, with none, removes its mark.
///   Only a lookup that completed is cached.
///
/// Built by [`Tiers::builder`], whose [`build`](TiersBuilder::build) checks that
/// there is a tier, that the fallback tier is one of them and that the cache holds
/// an answer.
///
/// ```
/// use weir_rl_core::{AllOf, Quota};
/// use weir_keyed::{KeyedConfig, KeyedFixedWindow, KeyedGcra, KeyedSlidingWindow};
/// use weir_http::{Key, OnLookupError, Store, Tiers};
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
    cache: AnswerCache,
    ttl: Duration,
    failure_ttl: Duration,
    max_entries: usize,
    on_error: OnLookupError,
    /// The index of [`OnLookupError::Tier`]'s tier (checked by `build`).
    fallback: Option<usize>,
    clock: Arc<dyn Clock + Send + Sync>,
    name: Arc<str>,
    #[cfg(feature = "metrics")]
    metrics: crate::metrics::TierMetrics,
}

type AnswerCache = Cache<Key, Cached, Weigh, RandomState, DefaultLifecycle<Key, Cached>>;
type LoadGuard<'a> = PlaceholderGuard<'a, Key, Cached, Weigh, RandomState, DefaultLifecycle<Key, Cached>>;

/// What one cached answer weighs at least, in bytes: an answer whose key's payload
/// is at most 64 bytes weighs this much; a longer one weighs
/// [`ENTRY_OVERHEAD_BYTES`] plus its payload's length, so it displaces several short
/// ones. Conservative: the cache allocates about 160 bytes an answer of a short key,
/// the records of recently evicted keys included (a unit test measures it).
pub(crate) const ENTRY_BYTES: u64 = 256;

/// What an answer weighs beside its key's payload: the cache's slot (the key's inline
/// encoding, the answer, the eviction links), its index, and its share of the
/// records of recently evicted keys that the eviction keeps (half as many as
/// answers), with room for the slots' growth.
pub(crate) const ENTRY_OVERHEAD_BYTES: u64 = 192;

/// The weight of an answer for `key`, in bytes: [`ENTRY_BYTES`], or for a key whose
/// payload is longer than 64 bytes, [`ENTRY_OVERHEAD_BYTES`] plus its length.
pub(crate) fn entry_weight(key: &Key) -> u64 {
    let payload = u64::try_from(key.payload().len()).unwrap_or(u64::MAX);
    ENTRY_BYTES.max(ENTRY_OVERHEAD_BYTES.saturating_add(payload))
}

/// The weigher of the cache: [`entry_weight`]; an answer that is not kept (a zero
/// ttl, a refused lookup) weighs nothing, so putting it in the cache for the requests
/// waiting on it evicts nothing, and it is removed right after.
#[derive(Debug, Clone, Copy)]
struct Weigh;

impl Weighter<Key, Cached> for Weigh {
    fn weight(&self, key: &Key, cached: &Cached) -> u64 {
        if cached.is_kept() { entry_weight(key) } else { 0 }
    }
}

/// An answer of the lookup, as cached.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Cached {
    answer: Answer,
    /// When the lookup answered (clock nanoseconds).
    answered_ns: u64,
    /// When the answer expires (clock nanoseconds); at `answered_ns` or before for an
    /// answer that is not kept.
    expires_ns: u64,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Answer {
    /// The tier's index.
    Tier(usize),
    /// The lookup failed and the policy is [`OnLookupError::Deny`]: the error, for
    /// the requests that waited on this lookup (never kept).
    Failed(Arc<str>),
}

impl Cached {
    /// Whether the answer stays in the cache after the requests waiting on it have it.
    fn is_kept(&self) -> bool {
        self.expires_ns > self.answered_ns
    }

    /// Whether the answer serves a request that came at `asked_ns`: it was live then,
    /// or the lookup answered after the request came (the request waited on it).
    fn serves(&self, asked_ns: u64) -> bool {
        self.expires_ns > asked_ns || self.answered_ns >= asked_ns
    }

    fn result(&self) -> Result<usize, LookupFailed> {
        match &self.answer {
            Answer::Tier(tier) => Ok(*tier),
            Answer::Failed(error) => Err(LookupFailed(error.to_string())),
        }
    }
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
/// use weir_http::{Key, Tiers, TiersError};
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
    name: Arc<str>,
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

    /// The most answers cached (at least 1), which also bounds their weight to
    /// `n × 256` bytes (see [`Tiers`]). Default: 10 000. The cache's shards hold an
    /// equal share each, so it holds the largest multiple of their count up to `n`.
    pub fn max_entries(self, n: usize) -> Self {
        Self { max_entries: n, ..self }
    }

    /// The tiers' name: the `tiers` label of their metrics (the `metrics` feature;
    /// see the crate docs, "Metrics"). Default: `default`.
    pub fn name(self, name: impl AsRef<str>) -> Self {
        Self { name: Arc::from(name.as_ref()), ..self }
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
    /// [`ManualClock`](weir_rl_core::ManualClock) in tests).
    pub fn build_with_clock(self, clock: impl Clock + Send + Sync + 'static) -> Result<Tiers, TiersError> {
        self.build_with_shared_clock(Arc::new(clock))
    }

    pub(crate) fn build_with_shared_clock(self, clock: Arc<dyn Clock + Send + Sync>) -> Result<Tiers, TiersError> {
        let Self { tiers, lookup, ttl, failure_ttl, max_entries, on_error, name } = self;
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
        let fallback = match &on_error {
            OnLookupError::Tier(name) => tiers.iter().position(|(n, _)| **n == **name),
            OnLookupError::Deny => None,
        };
        let cache = answer_cache(max_entries);
        Ok(Tiers {
            tiers,
            lookup,
            cache,
            ttl,
            failure_ttl,
            max_entries,
            on_error,
            fallback,
            clock,
            #[cfg(feature = "metrics")]
            metrics: crate::metrics::TierMetrics::register(&name),
            name,
        })
    }
}

/// The most shards the cache is split into: four per core (readers of different
/// shards share no lock), and no more than leave each shard 32 answers.
fn shard_count(max_entries: usize) -> usize {
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let mut shards = cores.saturating_mul(4).checked_next_power_of_two().unwrap_or(1 << 16).min(1 << 16);
    while shards > 1 && max_entries / shards < 32 {
        shards /= 2;
    }
    shards
}

/// A cache of at most `max_entries` answers weighing at most `max_entries ×`
/// [`ENTRY_BYTES`] bytes (a shard of `n` answers has room for `n × ENTRY_BYTES` and a
/// sixteenth of one answer, so that one answer of `ENTRY_BYTES` fits beside its
/// eviction's 97 % share for answers asked for again).
fn answer_cache(max_entries: usize) -> AnswerCache {
    let shards = shard_count(max_entries);
    let per_shard = max_entries / shards;
    let per_shard_bytes = u64::try_from(per_shard)
        .unwrap_or(u64::MAX)
        .saturating_mul(ENTRY_BYTES)
        .saturating_add(ENTRY_BYTES / 16)
        // Far beyond any memory: the sum of weights cannot overflow.
        .min(u64::MAX / 4 / shards as u64);
    let options = OptionsBuilder::new()
        .shards(shards)
        .estimated_items_capacity(per_shard * shards)
        .weight_capacity(per_shard_bytes * shards as u64)
        .build()
        // Every option is set.
        .expect("the tier cache's options are complete");
    Cache::with_options(options, Weigh, RandomState::new(), DefaultLifecycle::default())
}

impl Tiers {
    /// The options of tiers chosen by `lookup`, an async function from a client's
    /// key to its tier's name (`Ok("pro")`), or an error; with no tiers yet, the
    /// others at their defaults.
    ///
    /// The lookup sees the request's [`Key`] as the store keeps it: for a client value
    /// longer than [`MAX_KEY_BYTES`](crate::MAX_KEY_BYTES) (an API key of more than 128
    /// bytes, say) that is its 16-byte hash ([`Key::is_hashed`]), not the value, unless
    /// the key source refuses such keys ([`LongKeys::Refuse`](crate::LongKeys::Refuse)).
    /// A lookup that needs long values whole should read them from the request in a
    /// layer of its own.
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
            name: Arc::from("default"),
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

    /// The tiers' name (the `tiers` label of their metrics).
    pub fn name(&self) -> &str {
        &self.name
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

    /// `key`'s tier if the cache holds a live answer: one read of a shard of the
    /// cache, under the shard's read lock (readers never wait on one another).
    pub fn cached(&self, key: &Key) -> Option<usize> {
        let now = self.clock.now().as_u64();
        match self.cache.get(key) {
            Some(Cached { answer: Answer::Tier(tier), expires_ns, .. }) if expires_ns > now => {
                #[cfg(feature = "metrics")]
                self.metrics.hits.increment(1);
                Some(tier)
            }
            _ => None,
        }
    }

    /// `key`'s tier: cached, or looked up (and then cached).
    ///
    /// Concurrent misses for one key share one lookup: the first runs it, the others
    /// wait for its answer (a refusal under [`OnLookupError::Deny`] included). Dropped
    /// while it waits, a request leaves nothing behind: a waiter just stops waiting,
    /// and a dropped lookup hands its turn to the next waiter, who runs the lookup
    /// itself.
    pub async fn resolve(&self, key: &Key) -> Result<usize, LookupFailed> {
        let asked_ns = self.clock.now().as_u64();
        // An answer found is stale only if it expired before this request came and
        // no lookup answered since; it is then removed and the key asked for again.
        // Two rounds at most: a third answer (the clock stepped back while lookups
        // raced) serves as it is.
        let mut round = 0;
        loop {
            match self.cache.get_value_or_guard_async(key).await {
                Ok(found) if found.serves(asked_ns) || round == 2 => return found.result(),
                Ok(stale) => {
                    self.cache.remove_if(key, |c| *c == stale);
                    round += 1;
                }
                Err(guard) => return self.look_up(key, guard).await,
            }
        }
    }

    /// Runs the lookup for `key`, whose placeholder `guard` holds, and hands the
    /// answer to the requests waiting on it; keeps it for `ttl` (`failure_ttl` for a
    /// fallback). Dropped mid-lookup, `guard` hands the placeholder to the next
    /// waiter, or removes it.
    async fn look_up(&self, key: &Key, guard: LoadGuard<'_>) -> Result<usize, LookupFailed> {
        let answer = (self.lookup)(key.clone()).await;
        let answered_ns = self.clock.now().as_u64();
        let answer = answer.and_then(|name| self.index_of(&name).ok_or_else(|| format!("no tier is named `{name}`")));
        #[cfg(feature = "metrics")]
        {
            self.metrics.lookups.increment(1);
            if answer.is_err() {
                self.metrics.failures.increment(1);
            }
        }
        let (answer, ttl) = match answer {
            Ok(tier) => (Answer::Tier(tier), self.ttl),
            Err(error) => match (&self.on_error, self.fallback) {
                (OnLookupError::Tier(name), Some(tier)) => {
                    tracing::warn!(target: "weir_http", key = %key, %error, fallback = %name, "tier lookup failed");
                    (Answer::Tier(tier), self.failure_ttl)
                }
                _ => {
                    tracing::warn!(target: "weir_http", key = %key, %error, "tier lookup failed");
                    (Answer::Failed(Arc::from(error)), Duration::ZERO)
                }
            },
        };
        let ttl_ns = u64::try_from(ttl.as_nanos()).unwrap_or(u64::MAX);
        let cached = Cached { answer, answered_ns, expires_ns: answered_ns.saturating_add(ttl_ns) };
        // Err: the placeholder was dropped (`clear_cache`); the waiters have the answer
        // all the same.
        let _ = guard.insert(cached.clone());
        if !cached.is_kept() {
            self.cache.remove_if(key, |c| *c == cached);
        }
        cached.result()
    }

    /// Answers cached now (live or expired, not yet evicted): at most
    /// [`max_entries`](Self::max_entries).
    pub fn cached_len(&self) -> usize {
        self.cache.len()
    }

    /// What the cached answers weigh now, in bytes (see [`Tiers`]): at most
    /// `max_entries × 256`.
    pub fn cached_bytes(&self) -> u64 {
        self.cache.weight()
    }

    /// Forgets every cached answer (after plans changed, say). A lookup in flight
    /// still answers the requests waiting on it; its answer is not cached.
    pub fn clear_cache(&self) {
        self.cache.clear();
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
    use weir_rl_core::{ManualClock, Policy};

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
        // The latest answer is kept: the older ones, never read again, go first.
        assert_eq!(tiers.cached(&Key::user("user-199")), Some(0));
    }

    /// Hung on key #38 751 or so, spinning in the concurrent map's `retain` while
    /// its memory grew without bound, when the cache was trimmed by hand.
    #[test]
    fn a_hundred_thousand_distinct_keys_stay_within_the_default_cache() {
        let calls = Arc::new(AtomicUsize::new(0));
        let tiers = counting(calls.clone()).build_with_clock(ManualClock::new()).unwrap();
        assert_eq!(tiers.max_entries(), 10_000);
        block_on(async {
            for i in 0..100_000 {
                let key = Key::api_key(format!("key-{i}").as_bytes());
                assert_eq!(tiers.resolve(&key).await, Ok(0));
                assert!(tiers.cached_len() <= 10_000, "{} answers cached after key #{i}", tiers.cached_len());
            }
        });
        assert_eq!(calls.load(Ordering::Relaxed), 100_000, "each distinct key is looked up once");
    }

    #[test]
    fn long_keys_weigh_their_bytes_and_displace_short_ones() {
        let calls = Arc::new(AtomicUsize::new(0));
        let tiers = counting(calls.clone()).max_entries(1_000).build_with_clock(ManualClock::new()).unwrap();
        let bound = 1_000 * ENTRY_BYTES;
        let longest = crate::MAX_KEY_BYTES;
        assert_eq!(entry_weight(&Key::api_key(&[b'k'; 64])), ENTRY_BYTES);
        assert_eq!(entry_weight(&Key::api_key(&vec![b'k'; longest])), ENTRY_OVERHEAD_BYTES + longest as u64);
        // A longer value is kept as its hash, whatever its length.
        assert_eq!(entry_weight(&Key::api_key(&vec![b'h'; 1 << 20])), ENTRY_BYTES);
        block_on(async {
            for i in 0..5_000 {
                tiers.resolve(&Key::api_key(format!("short-{i}").as_bytes())).await.unwrap();
                assert!(tiers.cached_len() <= 1_000 && tiers.cached_bytes() <= bound);
            }
            assert!(tiers.cached_len() > 900, "short keys fill the cache: {}", tiers.cached_len());
            // Asked for twice each (a key seen once is evicted first), the longest
            // keys kept whole take the short ones' room.
            for i in 0..1_000 {
                let mut key = format!("long-{i}-").into_bytes();
                key.resize(longest, b'x');
                for _ in 0..2 {
                    tiers.resolve(&Key::api_key(&key)).await.unwrap();
                    assert!(tiers.cached_bytes() <= bound, "{} bytes after long key #{i}", tiers.cached_bytes());
                }
            }
        });
        // 320 bytes each: at most 800 of them in 256 000 bytes (and a sixteenth of
        // an answer of slack per shard, at most 16 shards here), and a fifth of one
        // more for every short key (256 bytes) that kept its place.
        let short = (0..5_000).filter(|i| tiers.cached(&Key::api_key(format!("short-{i}").as_bytes())).is_some());
        let short = short.count();
        assert!(short < 100, "{short} short keys kept their place");
        assert!(tiers.cached_len() <= 800 + short.div_ceil(4), "{} with {short} short keys", tiers.cached_len());
        assert!(tiers.cached_bytes() > bound / 2, "{}", tiers.cached_bytes());
        // A key heavier than its shard's share of the cache is answered, not cached.
        let tiny = counting(calls.clone()).max_entries(1).build_with_clock(ManualClock::new()).unwrap();
        let heavy = Key::api_key(&vec![b'h'; longest]);
        let before = calls.load(Ordering::Relaxed);
        assert_eq!(block_on(tiny.resolve(&heavy)), Ok(0));
        assert_eq!(block_on(tiny.resolve(&heavy)), Ok(0));
        assert_eq!(calls.load(Ordering::Relaxed), before + 2);
        assert_eq!(tiny.cached(&heavy), None);
        assert!(tiny.cached_bytes() <= ENTRY_BYTES);
    }

    #[test]
    fn the_cache_allocates_within_its_weight() {
        let tiers = counting(Arc::default()).build_with_clock(ManualClock::new()).unwrap();
        block_on(async {
            for i in 0..30_000 {
                tiers.resolve(&Key::api_key(format!("key-{i:08}").as_bytes())).await.unwrap();
            }
        });
        assert_eq!(tiers.cached_len(), 10_000);
        // The slots in use (answers and the records of evicted keys) and the index's
        // allocation, within the weight bound: the slots' vector may hold as many
        // again in spare room, so the cache allocates at most twice the bound.
        let used = tiers.cache.memory_used().total() as u64;
        assert!(used <= 10_000 * ENTRY_BYTES, "{used} bytes for 10 000 answers");
    }

    /// A lookup that parks until the test lets it answer: a permit each.
    fn gated(gate: Arc<tokio::sync::Semaphore>, calls: Arc<AtomicUsize>) -> TiersBuilder {
        Tiers::builder(move |key: Key| {
            calls.fetch_add(1, Ordering::SeqCst);
            let gate = gate.clone();
            async move {
                gate.acquire().await.expect("the gate stays open").forget();
                if key.payload() == b"down" { Err("backend down") } else { Ok("pro") }
            }
        })
        .tier("free", store())
        .tier("pro", store())
    }

    #[tokio::test(flavor = "current_thread")]
    async fn concurrent_misses_for_one_key_share_one_lookup() {
        let gate = Arc::new(tokio::sync::Semaphore::new(0));
        let calls = Arc::new(AtomicUsize::new(0));
        let tiers = gated(gate.clone(), calls.clone()).build_with_clock(ManualClock::new()).unwrap();
        let key = Key::user("u");
        let down = Key::user("down");
        let all = async {
            tokio::join!(
                tiers.resolve(&key),
                tiers.resolve(&key),
                tiers.resolve(&key),
                tiers.resolve(&down),
                tiers.resolve(&down),
            )
        };
        let open = async {
            tokio::task::yield_now().await;
            gate.add_permits(2);
        };
        let (answers, ()) = tokio::join!(all, open);
        let failed = Err(LookupFailed("backend down".into()));
        assert_eq!(answers, (Ok(1), Ok(1), Ok(1), failed.clone(), failed));
        assert_eq!(calls.load(Ordering::SeqCst), 2, "one lookup a key");
        assert_eq!(tiers.cached_len(), 1, "the refusal is handed to its waiters, not kept");
        assert_eq!(tiers.cached(&key), Some(1));
    }

    #[tokio::test(flavor = "current_thread")]
    async fn an_answer_that_is_not_kept_is_still_shared() {
        let gate = Arc::new(tokio::sync::Semaphore::new(0));
        let calls = Arc::new(AtomicUsize::new(0));
        let tiers =
            gated(gate.clone(), calls.clone()).ttl(Duration::ZERO).build_with_clock(ManualClock::new()).unwrap();
        let key = Key::user("u");
        let open = async {
            tokio::task::yield_now().await;
            gate.add_permits(1);
        };
        let (a, b, ()) = tokio::join!(tiers.resolve(&key), tiers.resolve(&key), open);
        assert_eq!((a, b), (Ok(1), Ok(1)));
        assert_eq!(calls.load(Ordering::SeqCst), 1);
        assert_eq!((tiers.cached_len(), tiers.cached_bytes()), (0, 0), "a zero ttl caches nothing");
        gate.add_permits(1);
        assert_eq!(tiers.resolve(&key).await, Ok(1));
        assert_eq!(calls.load(Ordering::SeqCst), 2);
    }

    #[tokio::test(flavor = "current_thread")]
    async fn a_resolve_dropped_at_any_await_leaves_nothing_behind() {
        let calls = Arc::new(AtomicUsize::new(0));
        let lookup = {
            let calls = calls.clone();
            move |key: Key| {
                calls.fetch_add(1, Ordering::SeqCst);
                async move {
                    tokio::task::yield_now().await;
                    tokio::task::yield_now().await;
                    if key.payload() == b"down" { Err("backend down") } else { Ok("pro") }
                }
            }
        };
        for (name, key, cached) in [("kept", Key::user("u"), 1), ("refused", Key::user("down"), 0)] {
            let tiers = Tiers::builder(lookup.clone())
                .tier("free", store())
                .tier("pro", store())
                .build_with_clock(ManualClock::new())
                .unwrap();
            let cuts = weir_testkit::each_cancellation(
                || tiers.resolve(&key),
                async |k, finished| {
                    if finished {
                        assert_eq!(tiers.cached_len(), cached, "{name}: run to the end");
                        return;
                    }
                    assert_eq!(tiers.cached_len(), 0, "{name}: dropped after {k} polls");
                    // No placeholder is left to wait on: a fresh resolve runs its own
                    // lookup to the end.
                    let before = calls.load(Ordering::SeqCst);
                    let fresh = weir_testkit::poll_times(tiers.resolve(&key), 100).await;
                    assert!(fresh.is_some(), "{name}: a resolve after a drop at {k} polls hangs");
                    assert_eq!(calls.load(Ordering::SeqCst), before + 1, "{name}");
                    tiers.clear_cache();
                },
            )
            .await;
            assert_eq!(cuts, 4, "{name}: dropped before its first poll, at each yield, run to the end");
        }
    }

    #[tokio::test(flavor = "current_thread")]
    async fn a_dropped_lookup_hands_its_turn_to_a_waiter() {
        let gate = Arc::new(tokio::sync::Semaphore::new(0));
        let calls = Arc::new(AtomicUsize::new(0));
        let tiers = gated(gate.clone(), calls.clone()).build_with_clock(ManualClock::new()).unwrap();
        let key = Key::user("u");
        // The first runs the lookup and is dropped while it waits; the second was
        // waiting on it, and runs the lookup itself.
        let first = weir_testkit::poll_times(tiers.resolve(&key), 1);
        let second = async {
            let mut second = std::pin::pin!(tiers.resolve(&key));
            assert!(weir_testkit::poll_times(second.as_mut(), 1).await.is_none());
            second.await
        };
        let open = async {
            tokio::task::yield_now().await;
            tokio::task::yield_now().await;
            gate.add_permits(1);
        };
        let (first, second, ()) = tokio::join!(first, second, open);
        assert_eq!((first, second), (None, Ok(1)));
        assert_eq!(calls.load(Ordering::SeqCst), 2);
        assert_eq!(tiers.cached(&key), Some(1));
    }
}

//! How a store bounds and maintains itself: [`KeyedConfig`] and the policy of a
//! full store, [`AtCapacity`].

#[cfg(doc)]
use crate::Keyed;
use crate::KeyedConfigError;
use std::fmt;
use std::sync::Arc;
use std::time::Duration;
#[cfg(doc)]
use weir_rl_core::DenyReason;
use weir_rl_core::Limiter;

/// What a full store does with a request for a key it does not hold.
#[derive(Clone)]
#[non_exhaustive]
pub enum AtCapacity {
    /// Evict an idle key to make room (exact: no decision changes), wherever it is
    /// stored; only if none is idle, deny the new key with
    /// [`DenyReason::KeyCapacity`]. The default. See the crate docs ("Finding an
    /// idle key") for what the search costs.
    EvictIdle,
    /// Deny the new key with [`DenyReason::KeyCapacity`] without evicting on demand.
    /// Incremental sweeps are paced by insertions, and a full store of this policy
    /// inserts nothing: it stays full of idle keys until [`Keyed::sweep`],
    /// [`Keyed::sweep_all`] or a background sweeper ([`Keyed::spawn_sweeper`]) runs.
    /// Pair it with a sweeper.
    Deny,
    /// Evict an idle key to make room, as [`EvictIdle`](Self::EvictIdle); only if
    /// none is idle, check the request against this shared limiter instead (all keys
    /// that do not fit share it). Its decisions are marked
    /// [`from_fallback`](weir_rl_core::Decision::from_fallback), and its denials
    /// are for [`DenyReason::KeyCapacity`](weir_rl_core::DenyReason::KeyCapacity):
    /// the store's capacity, not the key's rate.
    EvictIdleOrOverflow(Arc<dyn Limiter + Send + Sync>),
}

impl fmt::Debug for AtCapacity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::EvictIdle => "EvictIdle",
            Self::Deny => "Deny",
            Self::EvictIdleOrOverflow(_) => "EvictIdleOrOverflow(..)",
        })
    }
}

/// How a [`Keyed`] store bounds and maintains itself: at most `max_keys` keys,
/// what to do with a new key when it is full, and how eagerly idle keys are swept.
/// Built with [`KeyedConfig::builder`].
///
/// ```
/// use std::time::Duration;
/// use weir_keyed::{AtCapacity, KeyedConfig};
///
/// let config = KeyedConfig::builder(100_000)
///     .at_capacity(AtCapacity::Deny)
///     .capacity_retry_after(Duration::from_secs(5))
///     .build()?;
/// assert_eq!(config.max_keys(), 100_000);
/// assert!(KeyedConfig::builder(0).build().is_err()); // the error names the option
/// # Ok::<(), weir_keyed::KeyedConfigError>(())
/// ```
#[derive(Debug, Clone)]
pub struct KeyedConfig {
    pub(crate) max_keys: usize,
    pub(crate) at_capacity: AtCapacity,
    pub(crate) sweep_every: usize,
    pub(crate) sweep_from: usize,
    pub(crate) capacity_retry_after: Duration,
    /// The store's name: the `store` label of its metrics.
    pub(crate) name: Arc<str>,
    /// The store's metric handles, registered when a store is built from this
    /// configuration (`metrics` feature).
    #[cfg(feature = "metrics")]
    pub(crate) metrics: StoreMetrics,
}

/// The name a store is given unless [`KeyedConfigBuilder::name`] says otherwise.
pub const DEFAULT_STORE_NAME: &str = "default";

/// A store's metric handles (the `metrics` feature), registered once, when the
/// store is built, with the recorder installed then: a store built before a
/// recorder is installed records nothing.
#[cfg(feature = "metrics")]
#[derive(Debug, Clone)]
pub(crate) struct StoreMetrics {
    /// `weir_keyed_keys`: keys stored.
    pub(crate) keys: metrics::Gauge,
    /// `weir_keyed_hot_keys`: keys in hot-key mode.
    pub(crate) hot_keys: metrics::Gauge,
    /// `weir_keyed_evictions_total{cause="sweep"}`.
    pub(crate) evicted_by_sweep: metrics::Counter,
    /// `weir_keyed_evictions_total{cause="room"}`.
    pub(crate) evicted_for_room: metrics::Counter,
    /// `weir_keyed_evictions_total{cause="removed"}`.
    pub(crate) removed: metrics::Counter,
    /// `weir_keyed_capacity_denials_total`.
    pub(crate) capacity_denials: metrics::Counter,
    /// `weir_keyed_overflow_checks_total`.
    pub(crate) overflow_checks: metrics::Counter,
    /// `weir_keyed_shard_sweeps_total`.
    pub(crate) shard_sweeps: metrics::Counter,
    /// `weir_keyed_hot_promotions_total`.
    pub(crate) hot_promotions: metrics::Counter,
    /// `weir_keyed_hardened_shards_total`.
    pub(crate) hardened_shards: metrics::Counter,
}

#[cfg(feature = "metrics")]
impl StoreMetrics {
    /// Handles that record nothing: a configuration's, until a store registers its
    /// own.
    pub(crate) fn noop() -> Self {
        let (c, g) = (metrics::Counter::noop, metrics::Gauge::noop);
        Self {
            keys: g(),
            hot_keys: g(),
            evicted_by_sweep: c(),
            evicted_for_room: c(),
            removed: c(),
            capacity_denials: c(),
            overflow_checks: c(),
            shard_sweeps: c(),
            hot_promotions: c(),
            hardened_shards: c(),
        }
    }

    /// Registers the handles of store `name` with the recorder installed now.
    pub(crate) fn register(name: &Arc<str>) -> Self {
        let store = metrics::SharedString::from(name.to_string());
        let evictions = |cause: &'static str| metrics::counter!("weir_keyed_evictions_total", "store" => store.clone(), "cause" => cause);
        Self {
            keys: metrics::gauge!("weir_keyed_keys", "store" => store.clone()),
            hot_keys: metrics::gauge!("weir_keyed_hot_keys", "store" => store.clone()),
            evicted_by_sweep: evictions("sweep"),
            evicted_for_room: evictions("room"),
            removed: evictions("removed"),
            capacity_denials: metrics::counter!("weir_keyed_capacity_denials_total", "store" => store.clone()),
            overflow_checks: metrics::counter!("weir_keyed_overflow_checks_total", "store" => store.clone()),
            shard_sweeps: metrics::counter!("weir_keyed_shard_sweeps_total", "store" => store.clone()),
            hot_promotions: metrics::counter!("weir_keyed_hot_promotions_total", "store" => store.clone()),
            hardened_shards: metrics::counter!("weir_keyed_hardened_shards_total", "store" => store),
        }
    }
}

/// Builds a [`KeyedConfig`]: `max_keys` is given, every other option starts at its
/// default, each setter replaces one and never fails, and [`build`](Self::build)
/// checks them all.
#[derive(Debug, Clone)]
#[must_use = "a builder does nothing until `build` is called"]
pub struct KeyedConfigBuilder {
    config: KeyedConfig,
}

impl KeyedConfig {
    /// A builder for a store of at most `max_keys` keys (at least 1, at most
    /// `usize::MAX / 2`), with the defaults: evict idle keys when full
    /// ([`AtCapacity::EvictIdle`]); once half full, sweep one shard every 64 new
    /// keys; a key denied for capacity is told to retry after 1 s.
    pub fn builder(max_keys: usize) -> KeyedConfigBuilder {
        KeyedConfigBuilder {
            config: Self {
                max_keys,
                at_capacity: AtCapacity::EvictIdle,
                sweep_every: 64,
                sweep_from: max_keys / 2,
                capacity_retry_after: Duration::from_secs(1),
                name: Arc::from(DEFAULT_STORE_NAME),
                #[cfg(feature = "metrics")]
                metrics: StoreMetrics::noop(),
            },
        }
    }

    /// The bound on stored keys.
    pub fn max_keys(&self) -> usize {
        self.max_keys
    }

    /// What a full store does with a new key.
    pub fn at_capacity(&self) -> &AtCapacity {
        &self.at_capacity
    }

    /// New keys per incremental sweep of one shard.
    pub fn sweep_every(&self) -> usize {
        self.sweep_every
    }

    /// The key count from which insertions pace sweeps.
    pub fn sweep_from(&self) -> usize {
        self.sweep_from
    }

    /// The `Retry-After` given to a key denied for capacity.
    pub fn capacity_retry_after(&self) -> Duration {
        self.capacity_retry_after
    }

    /// The store's name: the `store` label of its metrics (`metrics` feature).
    pub fn name(&self) -> &str {
        &self.name
    }
}

impl KeyedConfigBuilder {
    /// What to do with a new key when the store is full. Default:
    /// [`AtCapacity::EvictIdle`].
    pub fn at_capacity(mut self, policy: AtCapacity) -> Self {
        self.config.at_capacity = policy;
        self
    }

    /// Sweep one shard for idle keys every `n` new keys (at least 1). Default: 64.
    pub fn sweep_every(mut self, n: usize) -> Self {
        self.config.sweep_every = n;
        self
    }

    /// Run the incremental sweep only while the store holds at least `keys` keys, or
    /// every hot-key slot is taken (default: half of `max_keys`; 0 sweeps from the
    /// first key; more than `max_keys` never paces a sweep for the key count, leaving
    /// eviction to a full store's policy, explicit sweeps and the background
    /// sweeper). See the crate docs for why sweeping a store far below its bound
    /// costs more than it saves.
    pub fn sweep_from(mut self, keys: usize) -> Self {
        self.config.sweep_from = keys;
        self
    }

    /// The `Retry-After` given to a key denied for capacity. Default: 1 s.
    pub fn capacity_retry_after(mut self, after: Duration) -> Self {
        self.config.capacity_retry_after = after;
        self
    }

    /// The store's name, the `store` label of its metrics (the `metrics` feature;
    /// see the crate docs, "Metrics"): a name from your configuration (`per_ip`),
    /// never a client's key. Default: [`DEFAULT_STORE_NAME`] (`default`).
    pub fn name(mut self, name: impl AsRef<str>) -> Self {
        self.config.name = Arc::from(name.as_ref());
        self
    }

    /// The configuration, or the first option out of its range.
    pub fn build(self) -> Result<KeyedConfig, KeyedConfigError> {
        let config = self.config;
        if config.max_keys == 0 {
            return Err(KeyedConfigError::ZeroMaxKeys);
        }
        if config.max_keys > usize::MAX / 2 {
            return Err(KeyedConfigError::MaxKeysTooLarge(config.max_keys));
        }
        if config.sweep_every == 0 {
            return Err(KeyedConfigError::ZeroSweepEvery);
        }
        Ok(config)
    }
}

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
    /// that do not fit share it).
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

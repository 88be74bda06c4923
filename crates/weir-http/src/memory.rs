//! In-memory stores for configured quotas: `weir_keyed::Keyed` over each algorithm.

use crate::config::{Algorithm, QuotaConfig};
use crate::key::Key;
use weir_keyed::{Keyed, KeyedConfig};
use weir_rl_core::{Clock, KeyedLimiter};

/// The store of one configured quota.
pub(crate) fn store<C: Clock + Send + Sync + 'static>(
    config: &QuotaConfig,
    clock: C,
) -> Result<Box<dyn KeyedLimiter<Key> + Send + Sync>, String> {
    let keyed = KeyedConfig::builder(config.max_keys).name(&config.store).build().map_err(|e| e.to_string())?;
    let quota = config.quota;
    Ok(match config.algorithm {
        Algorithm::Gcra => Box::new(Keyed::<Key, _, C>::gcra_with_clock(quota, keyed, clock)),
        Algorithm::SlidingWindow => {
            Box::new(Keyed::<Key, _, C>::sliding_window_with_clock(quota, keyed, clock).map_err(|e| e.to_string())?)
        }
        Algorithm::FixedWindow => {
            Box::new(Keyed::<Key, _, C>::fixed_window_with_clock(quota, keyed, clock).map_err(|e| e.to_string())?)
        }
        Algorithm::SlidingLog => {
            Box::new(Keyed::<Key, _, C>::sliding_log_with_clock(quota, keyed, clock).map_err(|e| e.to_string())?)
        }
    })
}

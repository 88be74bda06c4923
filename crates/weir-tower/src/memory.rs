//! In-memory stores for configured quotas.

use crate::config::{Algorithm, QuotaConfig};
use crate::key::Key;
use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use weir_core::{Clock, Decision, InsufficientCapacity, KeyedLimiter, Policy, Snapshot};
use weir_gcra::GcraAlgorithm;
use weir_window::fixed::FixedWindowAlgorithm;
use weir_window::log::SlidingLogAlgorithm;
use weir_window::sliding::SlidingWindowAlgorithm;

/// The store of one configured quota.
pub(crate) fn store<C: Clock + Send + Sync + 'static>(
    config: &QuotaConfig,
    clock: C,
) -> Result<Box<dyn KeyedLimiter<Key> + Send + Sync>, String> {
    let now = clock.now();
    let quota = config.quota;
    Ok(match config.algorithm {
        Algorithm::Gcra => Box::new(Interim::new(GcraAlgorithm::new(quota, now), Policy::of(&quota), clock)),
        Algorithm::SlidingWindow => {
            let a = SlidingWindowAlgorithm::new(quota, now).map_err(|e| e.to_string())?;
            let p = Policy::new(a.limit(), a.window());
            Box::new(Interim::new(a, p, clock))
        }
        Algorithm::FixedWindow => {
            let a = FixedWindowAlgorithm::new(quota, now).map_err(|e| e.to_string())?;
            let p = Policy::new(a.limit(), a.window());
            Box::new(Interim::new(a, p, clock))
        }
        Algorithm::SlidingLog => {
            let a = SlidingLogAlgorithm::new(quota, now).map_err(|e| e.to_string())?;
            let p = Policy::new(a.limit(), a.window());
            Box::new(Interim::new(a, p, clock))
        }
    })
}

/// One state per key under a mutex.
struct Interim<A: weir_core::Algorithm, C> {
    algorithm: A,
    states: Mutex<HashMap<Key, Arc<A::State>>>,
    policy: [Policy; 1],
    clock: C,
}

impl<A: weir_core::Algorithm, C: Clock> Interim<A, C> {
    fn new(algorithm: A, policy: Policy, clock: C) -> Self {
        Self { algorithm, states: Mutex::new(HashMap::new()), policy: [policy], clock }
    }

    fn state(&self, key: &Key) -> Arc<A::State> {
        let mut states = self.states.lock().unwrap_or_else(PoisonError::into_inner);
        Arc::clone(states.entry(key.clone()).or_insert_with(|| Arc::new(self.algorithm.new_state())))
    }
}

impl<A, C> KeyedLimiter<Key> for Interim<A, C>
where
    A: weir_core::Algorithm,
    C: Clock,
{
    fn check_n(&self, key: &Key, n: u64) -> Result<Decision, InsufficientCapacity> {
        self.algorithm.check_n(&*self.state(key), n, &self.clock)
    }

    fn refund(&self, key: &Key, n: u64, admission: &Decision) -> Result<(), InsufficientCapacity> {
        self.algorithm.refund(&*self.state(key), n, admission, &self.clock)
    }

    fn snapshot(&self, key: &Key) -> Snapshot {
        self.algorithm.snapshot(&*self.state(key), self.clock.now())
    }

    fn policies(&self) -> &[Policy] {
        &self.policy
    }
}

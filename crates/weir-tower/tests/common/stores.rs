//! In-test stores: per-key state under a mutex, on a manual clock.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use weir_core::{Clock, Decision, InsufficientCapacity, KeyedLimiter, ManualClock, Policy, Quota, Snapshot};
use weir_gcra::{GcraAlgorithm, GcraState};
use weir_tower::Key;

/// An in-test GCRA store: one `GcraState` per key, on a manual clock.
pub struct InTestGcra {
    algorithm: GcraAlgorithm,
    clock: ManualClock,
    states: Mutex<HashMap<Key, Arc<GcraState>>>,
    policy: [Policy; 1],
}

impl InTestGcra {
    pub fn new(quota: Quota, clock: ManualClock) -> Self {
        Self {
            algorithm: GcraAlgorithm::new(quota, clock.now()),
            clock,
            states: Mutex::new(HashMap::new()),
            policy: [Policy::of(&quota)],
        }
    }

    fn state(&self, key: &Key) -> Arc<GcraState> {
        Arc::clone(self.states.lock().unwrap().entry(key.clone()).or_default())
    }
}

impl KeyedLimiter<Key> for InTestGcra {
    fn check_n(&self, key: &Key, n: u64) -> Result<Decision, InsufficientCapacity> {
        weir_core::Algorithm::check_n(&self.algorithm, &*self.state(key), n, &self.clock)
    }
    fn refund(&self, key: &Key, n: u64, _: &Decision) -> Result<(), InsufficientCapacity> {
        self.algorithm.refund(&self.state(key), n, &self.clock)
    }
    fn snapshot(&self, key: &Key) -> Snapshot {
        weir_core::Algorithm::snapshot(&self.algorithm, &*self.state(key), self.clock.now())
    }
    fn policies(&self) -> &[Policy] {
        &self.policy
    }
}

/// An in-test window store: `limit` per key, never refilled (the test's clock does
/// not move), refunds exact.
pub struct InTestCount {
    used: Mutex<HashMap<Key, u64>>,
    policy: [Policy; 1],
}

impl InTestCount {
    pub fn new(limit: u64, window: Duration) -> Self {
        Self { used: Mutex::new(HashMap::new()), policy: [Policy::new(limit, window)] }
    }

    pub fn used(&self, key: &Key) -> u64 {
        self.used.lock().unwrap().get(key).copied().unwrap_or(0)
    }
}

impl KeyedLimiter<Key> for InTestCount {
    fn check_n(&self, key: &Key, n: u64) -> Result<Decision, InsufficientCapacity> {
        let limit = self.policy[0].limit();
        if n > limit {
            return Err(InsufficientCapacity { requested: n, capacity: limit });
        }
        let window = self.policy[0].window().as_nanos() as u64;
        let mut used = self.used.lock().unwrap();
        let used = used.entry(key.clone()).or_insert(0);
        if *used + n > limit {
            return Ok(Decision::denied(Snapshot::new(limit, limit - *used, window), window));
        }
        *used += n;
        Ok(Decision::allowed(Snapshot::new(limit, limit - *used, window)))
    }
    fn refund(&self, key: &Key, n: u64, _: &Decision) -> Result<(), InsufficientCapacity> {
        let mut used = self.used.lock().unwrap();
        let used = used.entry(key.clone()).or_insert(0);
        *used = used.saturating_sub(n);
        Ok(())
    }
    fn snapshot(&self, key: &Key) -> Snapshot {
        let limit = self.policy[0].limit();
        Snapshot::new(limit, limit - self.used(key), self.policy[0].window().as_nanos() as u64)
    }
    fn policies(&self) -> &[Policy] {
        &self.policy
    }
}

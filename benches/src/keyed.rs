//! Keyed workloads for the throughput suite: key per thread, 100k keys uniformly
//! spread, Zipf-skewed keys, one hot key; weir-keyed beside governor's keyed limiter.

use crate::harness::Workload;
use rand::rngs::Xoshiro256PlusPlus;
use rand::{RngExt, SeedableRng};
use rand_distr::{Distribution, Zipf};
use std::hash::BuildHasher;
use std::sync::{Arc, OnceLock};
use weir_gcra::{GcraAlgorithm, LeaseConfig};
use weir_keyed::{HotKeyMode, HotKeys, KeyHasher, Keyed, KeyedConfig};
use weir_rl_core::{Clock, MonotonicClock, Quota};

/// Distinct keys in the spread scenarios.
pub const KEYS: u64 = 100_000;
/// Length of a precomputed key sequence (a power of two).
const SEQUENCE: usize = 1 << 20;

/// A keyed limiter the suite can check.
pub trait CheckKey: Sync {
    /// Checks one request for `key`.
    fn check_key(&self, key: u64) -> bool;
}

impl<C: Clock + Sync, S: BuildHasher + Clone + Sync, H: HotKeyMode<GcraAlgorithm>> CheckKey
    for Keyed<u64, GcraAlgorithm, C, S, H>
{
    #[inline]
    fn check_key(&self, key: u64) -> bool {
        self.check(&key).is_allowed()
    }
}

/// governor's keyed limiter on its default clock and hasher (DashMap, SipHash).
pub type GovernorKeyed = governor::DefaultKeyedRateLimiter<u64>;

impl CheckKey for GovernorKeyed {
    #[inline]
    fn check_key(&self, key: u64) -> bool {
        self.check_key(&key).is_ok()
    }
}

/// Which keys the threads ask for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Keys {
    /// Thread `t` always asks for key `t`.
    PerThread,
    /// Uniform over [`KEYS`] keys.
    Uniform,
    /// Zipf (s = 1) over [`KEYS`] keys: a few keys take most requests.
    Zipf,
    /// Every thread asks for key 0.
    Hot,
}

/// The key sequence for a pattern (empty for per-thread and hot, which need none):
/// `SEQUENCE` keys drawn from a seeded generator, so every run and every subject
/// sees the same keys; computed once per process.
pub fn sequence(keys: Keys) -> Arc<[u64]> {
    static UNIFORM: OnceLock<Arc<[u64]>> = OnceLock::new();
    static ZIPF: OnceLock<Arc<[u64]>> = OnceLock::new();
    let seeded = || Xoshiro256PlusPlus::seed_from_u64(0x5EED);
    match keys {
        Keys::PerThread | Keys::Hot => Arc::from(Vec::new()),
        Keys::Uniform => UNIFORM
            .get_or_init(|| {
                let mut rng = seeded();
                (0..SEQUENCE).map(|_| rng.random_range(0..KEYS)).collect()
            })
            .clone(),
        Keys::Zipf => ZIPF
            .get_or_init(|| {
                let mut rng = seeded();
                // Ranks 1..=KEYS, rank 1 the most popular; key = rank − 1.
                let zipf = Zipf::new(KEYS as f64, 1.0).expect("n ≥ 1 and s ≥ 0 are valid Zipf parameters");
                (0..SEQUENCE).map(|_| (zipf.sample(&mut rng) as u64).clamp(1, KEYS) - 1).collect()
            })
            .clone(),
    }
}

/// A keyed limiter checked by every thread with the keys of `pattern`.
#[derive(Debug)]
pub struct KeyedWorkload<L> {
    limiter: L,
    pattern: Keys,
    sequence: Arc<[u64]>,
}

impl<L: CheckKey> KeyedWorkload<L> {
    /// Builds the workload and stores every key it will use (outside the timed region).
    pub fn new(limiter: L, pattern: Keys, threads: usize) -> Self {
        let sequence = sequence(pattern);
        let keys: Vec<u64> = match pattern {
            Keys::PerThread => (0..threads as u64).collect(),
            Keys::Hot => vec![0],
            Keys::Uniform | Keys::Zipf => (0..KEYS).collect(),
        };
        for key in keys {
            let _ = limiter.check_key(key);
        }
        Self { limiter, pattern, sequence }
    }
}

impl<L: CheckKey> Workload for KeyedWorkload<L> {
    type Local = (usize, u64);
    fn local(&self, thread: usize) -> (usize, u64) {
        // Threads start at spread-out positions of the shared sequence.
        (thread.wrapping_mul(SEQUENCE / 16 + 7919), thread as u64)
    }
    #[inline]
    fn op(&self, (position, thread): &mut (usize, u64)) -> bool {
        let key = match self.pattern {
            Keys::PerThread => *thread,
            Keys::Hot => 0,
            Keys::Uniform | Keys::Zipf => {
                *position = position.wrapping_add(1);
                self.sequence[*position & (SEQUENCE - 1)]
            }
        };
        self.limiter.check_key(key)
    }
}

/// 10⁹ per second with burst 10⁹ for every key: never exhausted (allowed path).
pub fn open_quota() -> Quota {
    Quota::per_second(1_000_000_000).and_then(|q| q.with_burst(1_000_000_000)).expect("a valid quota")
}

/// weir's keyed GCRA store, sized for the spread scenarios.
pub fn weir_keyed() -> Keyed<u64, GcraAlgorithm, MonotonicClock> {
    Keyed::gcra(open_quota(), KeyedConfig::builder(1 << 20).build().expect("a valid config"))
}

/// The same with std's SipHash `RandomState` as its hasher (the default until
/// `KeyHasher`): what the hash costs, in the same run.
pub fn weir_keyed_siphash() -> Keyed<u64, GcraAlgorithm, MonotonicClock, std::hash::RandomState> {
    let clock = MonotonicClock::new();
    let algorithm = GcraAlgorithm::new(open_quota(), clock.now());
    let config = KeyedConfig::builder(1 << 20).build().expect("a valid config");
    Keyed::with_hasher(algorithm, config, clock, std::hash::RandomState::new())
}

/// The same with hot-key mode: a key whose check loses 2 CAS races goes to per-thread
/// lease stripes.
pub fn weir_keyed_hot() -> Keyed<u64, GcraAlgorithm, MonotonicClock, KeyHasher, HotKeys> {
    weir_keyed().with_hot_keys(HotKeys::builder().lease(LeaseConfig::default()).build().expect("a valid configuration"))
}

/// governor's keyed limiter with the same quota.
pub fn governor_keyed() -> GovernorKeyed {
    use std::num::NonZeroU32;
    let n = NonZeroU32::new(1_000_000_000).expect("non-zero");
    governor::RateLimiter::keyed(governor::Quota::per_second(n).allow_burst(n))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn zipf_is_skewed_and_uniform_is_not() {
        let zipf = sequence(Keys::Zipf);
        let top = zipf.iter().filter(|&&k| k < 10).count() as f64 / zipf.len() as f64;
        assert!(top > 0.2, "the 10 most popular keys take {top:.2} of requests");
        let uniform = sequence(Keys::Uniform);
        let top = uniform.iter().filter(|&&k| k < 10).count() as f64 / uniform.len() as f64;
        assert!(top < 0.01);
        assert!(zipf.iter().chain(uniform.iter()).all(|&k| k < KEYS));
    }
}

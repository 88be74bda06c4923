//! Instructions per keyed check, for callgrind: a store of 100 000 `u64` keys on a
//! fixed clock (weir's `ManualClock`, governor's `FakeRelativeClock`), then
//! `CHECKS` checks of existing keys drawn uniformly (the draw, a million keys, is
//! made in every run, so it cancels out). Run it twice under callgrind, with 0
//! checks and with a million, and divide the difference by a million:
//!
//! ```sh
//! cargo build --release -p weir-bench --example keyed_instructions
//! for store in weir weir-siphash governor; do for n in 0 1000000; do
//!   valgrind --tool=callgrind --callgrind-out-file=/dev/null target/release/examples/keyed_instructions $store $n 2>&1 | grep 'Collected'
//! done; done
//! ```

use governor::clock::FakeRelativeClock;
use std::hash::{BuildHasher, RandomState};
use std::hint::black_box;
use weir_gcra::GcraAlgorithm;
use weir_keyed::{KeyHasher, Keyed, KeyedConfig};
use weir_rl_core::{Clock, ManualClock, Quota};

const KEYS: u64 = 100_000;
/// Keys drawn in every run, checked or not (see `main`).
const SEQUENCE: usize = 1_000_000;

/// The keys checked: uniform over the stored ones (xorshift), precomputed.
fn sequence(checks: usize) -> Vec<u64> {
    let mut state = 0x9E37_79B9_7F4A_7C15_u64;
    (0..checks)
        .map(|_| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state % KEYS
        })
        .collect()
}

fn weir<S: BuildHasher + Clone + Send + Sync + 'static>(hasher: S, keys: &[u64]) -> u64 {
    let clock = ManualClock::new();
    let quota = Quota::per_second(1_000_000_000).and_then(|q| q.with_burst(1_000_000_000)).expect("a valid quota");
    let algorithm = GcraAlgorithm::new(quota, clock.now());
    let config = KeyedConfig::builder(1 << 20).build().expect("a valid config");
    let store: Keyed<u64, _, _, S> = Keyed::with_hasher(algorithm, config, clock, hasher);
    (0..KEYS).for_each(|k| assert!(store.check(&k).is_allowed()));
    keys.iter().map(|k| store.check(black_box(k)).is_allowed() as u64).sum()
}

fn governor(keys: &[u64]) -> u64 {
    let n = std::num::NonZeroU32::new(1_000_000_000).expect("non-zero");
    let store = governor::RateLimiter::dashmap_with_clock(
        governor::Quota::per_second(n).allow_burst(n),
        FakeRelativeClock::default(),
    );
    (0..KEYS).for_each(|k| assert!(store.check_key(&k).is_ok()));
    keys.iter().map(|k| store.check_key(black_box(k)).is_ok() as u64).sum()
}

fn main() {
    let mut args = std::env::args().skip(1);
    let store = args.next().unwrap_or_else(|| "weir".into());
    let checks: usize = args.next().map_or(1_000_000, |n| n.parse().expect("a number of checks"));
    // The sequence is made at its full length in every run, so that a run of none
    // pays for it too and the difference counts only the checks.
    let keys = sequence(checks.max(SEQUENCE));
    let keys = &keys[..checks];
    let allowed = match store.as_str() {
        "weir" => weir(KeyHasher::new(), keys),
        "weir-siphash" => weir(RandomState::new(), keys),
        "governor" => governor(keys),
        other => panic!("unknown store {other}: weir, weir-siphash or governor"),
    };
    println!("{store}: {allowed} of {checks} allowed");
}

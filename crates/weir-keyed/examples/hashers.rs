//! What the store's one hash per check costs, by hasher: ns per check of an
//! existing `u64` key among 100 000 (uniformly drawn, so most are not in cache),
//! GCRA on the default clock, one thread, and ns per hash alone. Run with
//! `cargo run --release -p weir-keyed --example hashers`.

use std::hash::{BuildHasher, RandomState};
use std::hint::black_box;
use std::time::Instant;
use weir_gcra::GcraAlgorithm;
use weir_keyed::{Keyed, KeyedConfig};
use weir_rl_core::{MonotonicClock, Quota};

const KEYS: u64 = 100_000;
const CHECKS: usize = 20_000_000;

fn sequence() -> Vec<u64> {
    let mut state = 0x9E37_79B9_7F4A_7C15_u64;
    (0..1 << 20)
        .map(|_| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state % KEYS
        })
        .collect()
}

fn per_check<S: BuildHasher + Clone + Send + Sync + 'static>(hasher: S, keys: &[u64]) -> f64 {
    let quota = Quota::per_second(1_000_000_000).and_then(|q| q.with_burst(1_000_000_000)).expect("a valid quota");
    let clock = MonotonicClock::new();
    let algorithm = GcraAlgorithm::new(quota, weir_rl_core::Clock::now(&clock));
    let store: Keyed<u64, _, _, S> =
        Keyed::with_hasher(algorithm, KeyedConfig::builder(1 << 20).build().expect("a valid config"), clock, hasher);
    for key in 0..KEYS {
        let _ = store.check(&key);
    }
    let start = Instant::now();
    let mut allowed = 0u64;
    for i in 0..CHECKS {
        allowed += store.check(&keys[i & (keys.len() - 1)]).is_allowed() as u64;
    }
    black_box(allowed);
    start.elapsed().as_nanos() as f64 / CHECKS as f64
}

fn per_hash<S: BuildHasher>(hasher: &S) -> f64 {
    let start = Instant::now();
    let mut sum = 0u64;
    for key in 0..CHECKS as u64 {
        sum = sum.wrapping_add(hasher.hash_one(black_box(key)));
    }
    black_box(sum);
    start.elapsed().as_nanos() as f64 / CHECKS as f64
}

fn row<S: BuildHasher + Clone + Send + Sync + 'static>(name: &str, hasher: S, keys: &[u64]) {
    let check = (0..3).map(|_| per_check(hasher.clone(), keys)).fold(f64::MAX, f64::min);
    let hash = (0..3).map(|_| per_hash(&hasher)).fold(f64::MAX, f64::min);
    println!("| {name} | {check:.1} | {hash:.2} |");
}

fn main() {
    let keys = sequence();
    println!("| hasher | ns per check, 100 000 keys | ns per hash of a u64 |");
    println!("|---|---:|---:|");
    row("std `RandomState` (SipHash-1-3)", RandomState::new(), &keys);
    row("foldhash `fast`", foldhash::fast::RandomState::default(), &keys);
    row("foldhash `quality`", foldhash::quality::RandomState::default(), &keys);
}

//! A flood of distinct keys (spoofed source addresses) into a bounded store: memory
//! stays bounded and nothing panics. Memory is measured exactly, by counting the
//! bytes this test binary has allocated and not yet freed.
//!
//! 4 million keys in optimized builds, 40 times the store's bound (1 million for the variant with pauses) (`cargo test --release -p weir-keyed --test
//! flood`, which CI runs); 200 000 in debug builds, to keep `cargo test` fast (once
//! the store is full, every new key searches for the one key going idle: a shard's
//! sweep each).
//!
//! Every new key finds the store full just as its oldest key goes idle, so every
//! one must be admitted (`AtCapacity::EvictIdle` denies only when no key is idle).

use std::time::Duration;
use weir_keyed::{AtCapacity, Keyed, KeyedConfig};
use weir_rl_core::{DenyReason, ManualClock, Quota};

mod support;

#[global_allocator]
static ALLOCATOR: support::Counting = support::Counting;

const MAX_KEYS: usize = 100_000;
/// Generous bound per stored key: the measured figure is about 55 bytes for `u64`
/// keys (BENCHMARKS.md); this leaves room for tables mid-resize and entries
/// awaiting reclamation.
const BYTES_PER_KEY_BOUND: isize = 160;

fn flood(policy: AtCapacity, idle_between: bool, release_keys: u64) {
    let keys: u64 = if cfg!(debug_assertions) { 200_000 } else { release_keys };
    let clock = ManualClock::new();
    let before = support::live_bytes();
    let store: Keyed<u64, _, _> = Keyed::gcra_with_clock(
        Quota::per_second(10).unwrap(),
        KeyedConfig::builder(MAX_KEYS).at_capacity(policy).build().unwrap(),
        clock.clone(),
    );
    let (mut capacity_denials, mut peak) = (0u64, 0isize);
    for key in 0..keys {
        // Each spoofed address sends one request; time moves 1 µs per request.
        clock.advance(Duration::from_micros(1));
        let d = store.check(&key.wrapping_mul(0x9E37_79B9_7F4A_7C15));
        capacity_denials += (d.deny_reason() == Some(DenyReason::KeyCapacity)) as u64;
        if key % 65_536 == 0 {
            assert!(store.len() <= MAX_KEYS);
            peak = peak.max(support::live_bytes() - before);
        }
        if idle_between && key % 250_000 == 249_999 {
            clock.advance(Duration::from_secs(1)); // a pause: every key goes idle
        }
    }
    let bound = MAX_KEYS as isize * BYTES_PER_KEY_BOUND;
    eprintln!(
        "{keys} keys: peak {:.1} MB ({:.0} B per stored key), {} capacity denials, {} stored",
        peak as f64 / 1e6,
        peak as f64 / MAX_KEYS as f64,
        capacity_denials,
        store.len()
    );
    assert!(peak <= bound, "peak {peak} B above the bound {bound} B");
    assert!(store.len() <= MAX_KEYS);
    assert_eq!(capacity_denials, 0, "a new key was denied while a key was idle");
}

#[test]
fn a_flood_of_distinct_keys_keeps_memory_bounded() {
    // 10 per second: a key stays non-idle for 100 ms, i.e. for the next 100 000
    // requests at 1 µs each, so the store runs full and must refuse or evict.
    flood(AtCapacity::EvictIdle, false, 4_000_000);
}

#[test]
fn a_flood_with_pauses_recycles_idle_keys() {
    flood(AtCapacity::EvictIdle, true, 1_000_000);
}

//! The default hasher spreads the keys servers see: a store of hundreds of
//! thousands of them (sequential ids, ids with a stride, addresses as strings, as
//! `IpAddr` and as the tower layer encodes them), filled or churned through
//! evictions, hardens none of its shards.

use std::hash::{Hash, Hasher};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::time::Duration;
use weir_keyed::{Keyed, KeyedConfig};
use weir_rl_core::{ManualClock, Quota};

/// Keys per store, and stores of each kind (each with its own seed): fewer in
/// debug builds, to keep `cargo test` fast (CI also runs this test optimized).
const KEYS: u64 = if cfg!(debug_assertions) { 50_000 } else { 200_000 };
const STORES: usize = if cfg!(debug_assertions) { 2 } else { 6 };

/// A key hashed as its bytes alone (`Hasher::write`), as the tower layer's keys are.
#[derive(Clone, PartialEq, Eq)]
struct Bytes(Vec<u8>);

impl Hash for Bytes {
    fn hash<H: Hasher>(&self, state: &mut H) {
        state.write(&self.0);
    }
}

fn fill<K: Hash + Eq + Clone + Send + Sync + 'static>(what: &str, key: impl Fn(u64) -> K) {
    for store in 0..STORES {
        let clock = ManualClock::new();
        let filled: Keyed<K, _, _> = Keyed::gcra_with_clock(
            Quota::per_second(1).unwrap(),
            KeyedConfig::builder(KEYS as usize).build().unwrap(),
            clock.clone(),
        );
        for i in 0..KEYS {
            assert!(filled.check(&key(i)).is_allowed());
        }
        assert_eq!(filled.hardened_shards().keys, 0, "{what}, store {store}: filled");
        // Churn: a store of a tenth as many places, its idle keys evicted for new ones.
        let churned: Keyed<K, _, _> = Keyed::gcra_with_clock(
            Quota::per_second(1).unwrap(),
            KeyedConfig::builder(KEYS as usize / 10).build().unwrap(),
            clock.clone(),
        );
        for i in 0..KEYS {
            if i % 1_000 == 0 {
                clock.advance(Duration::from_secs(2));
            }
            let _ = churned.check(&key(i));
        }
        assert_eq!(churned.hardened_shards().keys, 0, "{what}, store {store}: churned");
    }
}

#[test]
fn sequential_ids() {
    fill("sequential", |i| i);
}

#[test]
fn strided_ids() {
    fill("strided", |i| i * 4096);
}

#[test]
fn address_strings() {
    fill("strings", |i| format!("10.{}.{}.{}", i >> 16, (i >> 8) & 255, i & 255));
}

#[test]
fn ipv4_addresses() {
    fill("ipv4", |i| IpAddr::V4(Ipv4Addr::from(0x0A00_0000 + i as u32)));
}

#[test]
fn ipv6_prefixes() {
    // One /64 each, as a layer groups them.
    fill("ipv6", |i| IpAddr::V6(Ipv6Addr::from((0x2001_0db8_u128 << 96) | (u128::from(i) << 64))));
}

#[test]
fn tower_encoded_addresses() {
    fill("tower ipv4", |i| {
        let [a, b, c, d] = (0x0A00_0000 + i as u32).to_be_bytes();
        Bytes(vec![1, 32, a, b, c, d])
    });
    fill("tower ipv6", |i| {
        let mut bytes = vec![1, 64];
        bytes.extend_from_slice(&((0x2001_0db8_u128 << 96) | (u128::from(i) << 64)).to_be_bytes());
        Bytes(bytes)
    });
}

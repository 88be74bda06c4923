//! One shard of 60 000 keys: its index passes 2¹⁶ words, where a shard's index
//! address no longer carries the index's length (read from the array instead),
//! and comes back below it when a sweep compacts it. Every key is found and
//! limited exactly on both sides, with a hash that spreads the keys and with one
//! that collides them all (the shard hardens), and the dropped store leaves no
//! byte allocated.

mod support;

use std::hash::{BuildHasher, Hasher};
use std::time::Duration;
use weir_gcra::GcraAlgorithm;
use weir_keyed::{Keyed, KeyedConfig};
use weir_rl_core::{Clock, ManualClock, Quota};

#[global_allocator]
static ALLOCATOR: support::Counting = support::Counting;

/// splitmix64 of the key with the shard bits (32 to 47) cleared: every key in
/// shard 0; with `true`, one constant hash for every key.
#[derive(Clone, Copy, Default)]
struct OneShard(bool);

struct OneShardHasher(u64, bool);

impl BuildHasher for OneShard {
    type Hasher = OneShardHasher;
    fn build_hasher(&self) -> OneShardHasher {
        OneShardHasher(0, self.0)
    }
}

impl Hasher for OneShardHasher {
    fn finish(&self) -> u64 {
        if self.1 {
            return 0x0123_0000_89AB_CDEF;
        }
        let mut z = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        (z ^ (z >> 31)) & !0x0000_FFFF_0000_0000
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = self.0.rotate_left(8) ^ u64::from(b);
        }
    }
}

const KEYS: u64 = 60_000;

fn one_shard(colliding: bool) {
    let before = support::live_bytes();
    {
        let clock = ManualClock::new();
        let algorithm = GcraAlgorithm::new(Quota::per_second(2).expect("a quota"), clock.now());
        // No sweep paced by insertions: the keys stay until the test sweeps.
        let config = KeyedConfig::builder(KEYS as usize).sweep_from(usize::MAX / 4).build().expect("a config");
        let store: Keyed<u64, _, _, OneShard> =
            Keyed::with_hasher(algorithm, config, clock.clone(), OneShard(colliding));
        for key in 0..KEYS {
            assert!(store.check(&key).is_allowed(), "key {key}");
        }
        assert_eq!(store.len(), KEYS as usize);
        for key in 0..KEYS {
            assert!(store.check(&key).is_allowed(), "key {key}, its second");
            assert!(store.check(&key).is_denied(), "key {key}: its burst of 2 spent");
        }
        let mut seen = 0;
        store.for_each(|_, _| seen += 1);
        assert_eq!(seen, KEYS as usize);
        for key in 1_000..KEYS {
            assert!(store.remove(&key), "remove {key}");
        }
        assert_eq!(store.sweep_all(), 0, "nothing idle; the sweep compacts the index below 2^16 words");
        assert_eq!(store.len(), 1_000);
        for key in 0..KEYS {
            assert_eq!(store.check(&key).is_denied(), key < 1_000, "key {key}");
        }
        clock.advance(Duration::from_secs(5));
        assert_eq!(store.sweep_all(), KEYS as usize);
        assert!(store.is_empty());
        for key in 0..KEYS {
            assert!(store.check(&key).is_allowed() && store.check(&key).is_allowed(), "key {key}");
            assert!(store.check(&key).is_denied(), "key {key}");
        }
    }
    assert_eq!(support::live_bytes() - before, 0, "bytes left allocated by the dropped store");
}

/// One test in this binary: the allocator's count is the whole process's.
#[test]
fn one_shard_of_60_000_keys_spread_or_colliding() {
    one_shard(false);
    one_shard(true);
}

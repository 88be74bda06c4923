//! A shard hardens (rebuilds its index by SipHash, for good) once its keys
//! collide; these tests choose each key's hash to drive a shard, or the hot keys'
//! shard, through its hardening on every path that rebuilds an index (an
//! insertion, a promotion, a compaction after a sweep), and check what the store
//! promises on each: every key held once, its state kept, every place and hot
//! slot usable, the promotion of a key to hot mode done while slots are free,
//! and each hardening counted.

use std::hash::{BuildHasher, Hasher};
use std::time::Duration;
use weir_gcra::{GcraAlgorithm, LeaseConfig};
use weir_keyed::{HotKeys, Keyed, KeyedConfig};
use weir_rl_core::{Clock, ManualClock, Quota};

/// Keys with this bit hash alike (all 64 bits): they collide in any shard.
const COLLIDE: u64 = 1 << 40;
/// Keys with this bit share their low 32 bits (their home in any index) but
/// spread over the store's shards: they collide only where they meet, in the
/// hot keys' shard.
const SAME_HOME: u64 = 1 << 41;

fn mix(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    x = (x ^ (x >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    x ^ (x >> 31)
}

/// Hashes a `u64` key to a value chosen by its bits (see `COLLIDE`, `SAME_HOME`);
/// any other key spreads.
#[derive(Clone, Copy, Debug, Default)]
struct Chosen;

impl BuildHasher for Chosen {
    type Hasher = ChosenHash;
    fn build_hasher(&self) -> ChosenHash {
        ChosenHash(0)
    }
}

struct ChosenHash(u64);

impl Hasher for ChosenHash {
    fn finish(&self) -> u64 {
        let key = self.0;
        if key & COLLIDE != 0 {
            0x0123_4567_89ab_cdef
        } else if key & SAME_HOME != 0 {
            (mix(key) & 0xFFFF_FFFF_0000_0000) | 0x1234_5678
        } else {
            mix(key)
        }
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = self.0.rotate_left(8) ^ u64::from(b);
        }
    }
    fn write_u64(&mut self, i: u64) {
        self.0 = i;
    }
}

type Store = Keyed<u64, GcraAlgorithm, ManualClock, Chosen, HotKeys>;

fn hot_store(clock: &ManualClock, max_keys: usize, max_hot_keys: usize) -> Store {
    let algorithm = GcraAlgorithm::new(Quota::per_second(3).unwrap(), clock.now());
    let lease = LeaseConfig::builder().stripes(1).max_lease(1).build().unwrap();
    Keyed::with_hasher(algorithm, KeyedConfig::builder(max_keys).build().unwrap(), clock.clone(), Chosen)
        .with_hot_keys(HotKeys::builder().lease(lease).max_hot_keys(max_hot_keys).build().unwrap())
}

/// `promote` returns false only when every hot slot is taken (or the store is
/// full): here 256 slots, 150 keys. The promotion whose insertion rebuilds the
/// hot keys' shard into its hardened index must still promote its key.
#[test]
fn promote_succeeds_while_hot_slots_are_free_across_the_hot_shards_hardening() {
    let clock = ManualClock::new();
    let store = hot_store(&clock, 440, 256);
    for i in 0..150 {
        assert!(store.check(&(COLLIDE | i)).is_allowed());
    }
    for i in 0..150 {
        let key = COLLIDE | i;
        let hardened = store.hardened_shards();
        assert!(
            store.promote(&key),
            "key {i}: not promoted with {} of 256 hot slots taken (hot shard hardened before: {}, after: {})",
            i,
            hardened.hot_keys,
            store.hardened_shards().hot_keys
        );
        assert!(store.is_hot(&key));
    }
}

/// Hot keys whose own shards stay fast while the hot keys' shard hardens (their
/// homes collide only there): each hot key keeps its burst, a removal frees its
/// hot slot, and every slot is usable again afterwards.
#[test]
fn hot_keys_in_a_hardened_hot_shard_over_fast_shards_are_limited_and_freed() {
    let clock = ManualClock::new();
    let store = hot_store(&clock, 1 << 16, 128); // 149 shards
    let keys: Vec<u64> = (0..100).map(|i| SAME_HOME | i).collect();
    for &key in &keys {
        assert!(store.check(&key).is_allowed());
    }
    for &key in &keys {
        // A second try for the one promotion that hardened the hot shard (see the
        // test above).
        assert!(store.promote(&key) || store.promote(&key), "key {key:#x}");
    }
    let weir_keyed::HardenedShards { keys: own, hot_keys: hot, .. } = store.hardened_shards();
    assert!(hot && own == 0, "the scenario: hot shard hardened ({hot}), own shards not ({own} hardened)");
    for &key in &keys {
        assert!(store.is_hot(&key));
        assert!(store.check(&key).is_allowed(), "key {key:#x}");
        assert!(store.check(&key).is_allowed(), "key {key:#x}");
        assert!(store.check(&key).is_denied(), "hot key {key:#x} admitted past its burst");
    }
    for &key in &keys {
        assert!(store.remove(&key));
        assert!(!store.is_hot(&key));
    }
    // Every hot slot was given back by the removals.
    let fresh: Vec<u64> = (1_000..1_128).map(|i| SAME_HOME | i).collect();
    for &key in &fresh {
        assert!(store.check(&key).is_allowed());
        assert!(store.promote(&key) || store.promote(&key), "hot slot lost before key {key:#x}");
    }
}

/// A refund across the hardening of the key's shard gives back to the key's one
/// state (not to a fresh one, nor lost).
#[test]
fn a_refund_across_the_hardening_reaches_the_keys_state() {
    let clock = ManualClock::new();
    let store = hot_store(&clock, 440, 16);
    let first = COLLIDE;
    let admission = store.check_n(&first, 3).unwrap();
    assert!(admission.is_allowed());
    for i in 1..200 {
        assert!(store.check(&(COLLIDE | i)).is_allowed());
    }
    assert!(store.hardened_shards().keys == 1, "the scenario: the shard hardened");
    store.refund(&first, 2, &admission).unwrap();
    assert_eq!(store.snapshot(&first).remaining(), 2);
    assert!(store.check(&first).is_allowed());
    assert!(store.check(&first).is_allowed());
    assert!(store.check(&first).is_denied());
}

/// Spread keys fill a shard; colliding keys join it after its last rebuild; a
/// sweep evicts the spread ones, and the compaction that follows rebuilds the
/// index for the colliding keys alone: it hardens there. Their states are kept
/// (each key denied after its burst), and the hardening is counted like one
/// made by an insertion.
#[test]
fn a_compaction_that_hardens_keeps_every_state() {
    let clock = ManualClock::new();
    let store = hot_store(&clock, 440, 16); // one shard
    for key in 0..300 {
        assert!(store.check(&key).is_allowed());
    }
    let colliding: Vec<u64> = (0..70).map(|i| COLLIDE | i).collect();
    for &key in &colliding {
        assert!(store.check(&key).is_allowed());
    }
    assert_eq!(store.hardened_shards().keys, 0, "the scenario: no insertion hardened the shard");
    clock.advance(Duration::from_secs(10));
    for &key in &colliding {
        assert!(store.check(&key).is_allowed());
        assert!(store.check(&key).is_allowed());
    }
    assert_eq!(store.sweep_all(), 300);
    assert_eq!(store.hardened_shards().keys, 1, "the scenario: the compaction hardened the shard");
    for &key in &colliding {
        assert!(store.check(&key).is_allowed(), "key {key:#x}");
        assert!(store.check(&key).is_denied(), "key {key:#x} got a fresh state across the compaction");
    }
    assert_eq!(store.len(), 70);
}

#[cfg(feature = "metrics")]
fn hardened_counted(name: &str, scenario: impl FnOnce(KeyedConfig)) -> Option<u64> {
    use metrics_util::debugging::{DebugValue, DebuggingRecorder};
    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    metrics::with_local_recorder(&recorder, || scenario(KeyedConfig::builder(440).name(name).build().unwrap()));
    let label = format!("store={name}");
    snapshotter.snapshot().into_vec().into_iter().find_map(|(key, _, _, value)| {
        let labels: Vec<String> = key.key().labels().map(|l| format!("{}={}", l.key(), l.value())).collect();
        match value {
            DebugValue::Counter(n)
                if key.key().name() == "weir_keyed_hardened_shards_total" && labels == [label.clone()] =>
            {
                Some(n)
            }
            _ => None,
        }
    })
}

/// `weir_keyed_hardened_shards_total` counts a shard hardened by the compaction
/// after a sweep (see `a_compaction_that_hardens_keeps_every_state`).
#[cfg(feature = "metrics")]
#[test]
fn a_hardening_by_compaction_is_counted() {
    let clock = ManualClock::new();
    let mut hardened = weir_keyed::HardenedShards::default();
    let counted = hardened_counted("compacted", |config| {
        let algorithm = GcraAlgorithm::new(Quota::per_second(3).unwrap(), clock.now());
        let store: Keyed<u64, _, _, _> = Keyed::with_hasher(algorithm, config, clock.clone(), Chosen);
        (0..300).for_each(|key| assert!(store.check(&key).is_allowed()));
        (0..70).for_each(|i| assert!(store.check(&(COLLIDE | i)).is_allowed()));
        clock.advance(Duration::from_secs(10));
        (0..70).for_each(|i| assert!(store.check(&(COLLIDE | i)).is_allowed()));
        assert_eq!(store.sweep_all(), 300);
        hardened = store.hardened_shards();
    });
    assert_eq!(hardened.keys, 1, "the scenario: the compaction hardened the shard");
    assert_eq!(counted, Some(1), "one shard hardened");
}

/// `weir_keyed_hardened_shards_total` counts the hot keys' shard when promotions
/// harden it.
#[cfg(feature = "metrics")]
#[test]
fn a_hardening_of_the_hot_keys_shard_is_counted() {
    let clock = ManualClock::new();
    let mut hardened = weir_keyed::HardenedShards::default();
    let counted = hardened_counted("hot", |config| {
        let algorithm = GcraAlgorithm::new(Quota::per_second(3).unwrap(), clock.now());
        let store = Keyed::with_hasher(algorithm, config, clock.clone(), Chosen)
            .with_hot_keys(HotKeys::builder().max_hot_keys(256).build().unwrap());
        // One shard (a bound of 440 keys); keys sharing their home, so that the hot keys'
        // shard hardens; their own shard too.
        (0..150).for_each(|i| {
            assert!(store.check(&(SAME_HOME | i)).is_allowed());
            let _ = store.promote(&(SAME_HOME | i)) || store.promote(&(SAME_HOME | i));
        });
        hardened = store.hardened_shards();
    });
    assert_eq!((hardened.keys, hardened.hot_keys), (1, true), "the scenario: both shards hardened");
    assert_eq!(counted, Some(2), "two shards hardened");
}

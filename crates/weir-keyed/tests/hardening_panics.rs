//! Keys that all hash alike under the store's hasher (so that their shard, and
//! the hot keys' shard, harden: their indexes are rebuilt by the strong hash), and
//! whose `Hash`, `Eq` or `Clone` panic on their k-th call, for every k: also
//! inside the rebuild that hardens, and inside the strong hash. Afterwards the
//! store must hold exactly what it says (see `panicking_keys.rs`).

#[path = "support/panicking_key.rs"]
mod harness;
mod support;

use harness::{Key, Sizes, each_panic};
use std::time::Duration;
use support::Colliding;
use weir_gcra::GcraAlgorithm;
use weir_keyed::{HotKeyMode, HotKeys};
use weir_rl_core::ManualClock;

/// Places (one shard); keys: the index rebuilt at the 85th holds 84 colliding
/// keys, and hardens; every k in optimized builds (CI runs this test so, beside the
/// flood test), every 9th in debug ones (about 9 s instead of 80); hot slots:
/// enough for the hot keys' shard to harden.
const SIZES: Sizes =
    Sizes { max_keys: 128, keys: 100, k_step: if cfg!(debug_assertions) { 9 } else { 1 }, hot_slots: 100 };

/// Every key hashes alike under the store's own hasher.
type Store<H> = harness::Store<Colliding, H>;

/// Checks every key of the scenarios in (each admitted).
fn fill<H: HotKeyMode<GcraAlgorithm>>(store: &Store<H>, _: &ManualClock) {
    harness::fill(SIZES, store);
}

#[test]
fn insertions_through_the_hardening_rebuild() {
    each_panic(SIZES, harness::store, None, |_, _| {}, fill);
}

#[test]
fn a_partial_sweep_and_compaction_of_a_hardened_shard() {
    each_panic(SIZES, harness::store, None, fill, |store, clock| {
        clock.advance(Duration::from_secs(1));
        for id in (0..SIZES.keys).step_by(4) {
            let _ = store.check(&Key::new(id));
        }
        store.sweep_all();
        for id in (0..SIZES.keys).step_by(2) {
            let _ = store.check(&Key::new(id));
        }
    });
}

#[test]
fn removals_from_a_hardened_shard() {
    each_panic(SIZES, harness::store, None, fill, |store, _| {
        for id in 0..SIZES.keys {
            assert!(store.remove(&Key::new(id)));
        }
    });
}

#[test]
fn promotions_that_harden_the_hot_keys_shard() {
    each_panic(
        SIZES,
        harness::hot_store,
        Some(|store, key| store.promote(key) || store.promote(key)),
        fill,
        |store, clock| {
            for id in 0..90 {
                store.promote(&Key::new(id));
            }
            for id in 0..4 {
                let _ = store.check(&Key::new(id));
            }
            store.remove(&Key::new(0));
            clock.advance(Duration::from_secs(1));
            store.sweep_all();
            store.promote(&Key::new(1));
        },
    );
}

#[test]
fn the_scenarios_harden_both_shards() {
    let clock = ManualClock::new();
    let store: Store<HotKeys> = harness::hot_store(SIZES, &clock);
    fill(&store, &clock);
    assert_eq!((store.hardened_shards().keys, store.hardened_shards().hot_keys), (1, false));
    for id in 0..90 {
        store.promote(&Key::new(id));
    }
    assert_eq!((store.hardened_shards().keys, store.hardened_shards().hot_keys), (1, true));
}

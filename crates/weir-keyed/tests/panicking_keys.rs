//! Keys whose `Hash`, `Eq` or `Clone` panic on their k-th call, for every k, through
//! every operation that runs user code on keys: insertion (with index rebuilds), a
//! sweep, `remove`, promotion to hot mode and the checks of hot keys. A panicking
//! key may fail its own call; afterwards the store must hold exactly what it says:
//! `len()` equals what iteration finds, every one of the `max_keys` places (and
//! every hot slot) is usable, and every key the store took is dropped exactly once.
//!
//! A small version runs under miri (`MIRIFLAGS=-Zmiri-permissive-provenance
//! cargo +nightly miri test -p weir-keyed --test panicking_keys`), which also
//! checks that nothing leaks and nothing is dropped twice.

#[path = "support/panicking_key.rs"]
mod harness;

use harness::{Key, Sizes, each_panic};
use std::hash::{BuildHasherDefault, DefaultHasher};
use std::time::Duration;
use weir_gcra::GcraAlgorithm;
use weir_keyed::HotKeyMode;
use weir_rl_core::ManualClock;

type Fixed = BuildHasherDefault<DefaultHasher>;

/// Places (one shard): enough for several index rebuilds (under miri, one: the
/// smallest index is rebuilt at its 15th key); keys; every k, or under miri every
/// third; hot slots.
const SIZES: Sizes = if cfg!(miri) {
    Sizes { max_keys: 16, keys: 15, k_step: 3, hot_slots: 4 }
} else {
    Sizes { max_keys: 64, keys: 40, k_step: 1, hot_slots: 4 }
};

type Store<H> = harness::Store<Fixed, H>;

/// Checks every key of the scenarios in (each admitted).
fn fill<H: HotKeyMode<GcraAlgorithm>>(store: &Store<H>, _: &ManualClock) {
    harness::fill(SIZES, store);
}

#[test]
fn insertions_and_index_rebuilds() {
    each_panic(SIZES, harness::store, None, |_, _| {}, fill);
}

#[test]
fn a_sweep() {
    each_panic(SIZES, harness::store, None, fill, |store, clock| {
        clock.advance(Duration::from_secs(1));
        store.sweep_all();
    });
}

#[test]
fn a_partial_sweep_with_busy_keys() {
    each_panic(SIZES, harness::store, None, fill, |store, clock| {
        clock.advance(Duration::from_secs(1));
        for id in (0..SIZES.keys).step_by(3) {
            let _ = store.check(&Key::new(id));
        }
        store.sweep_all();
        for id in (0..SIZES.keys).step_by(2) {
            let _ = store.check(&Key::new(id));
        }
    });
}

#[test]
fn removals() {
    each_panic(SIZES, harness::store, None, fill, |store, _| {
        for id in 0..SIZES.keys {
            assert!(store.remove(&Key::new(id)));
        }
    });
}

#[test]
fn promotions_checks_and_sweeps_of_hot_keys() {
    each_panic(SIZES, harness::hot_store, Some(|store, key| store.promote(key)), fill, |store, clock| {
        for id in 0..SIZES.hot_slots as u64 {
            store.promote(&Key::new(id));
        }
        for id in 0..SIZES.hot_slots as u64 + 2 {
            let _ = store.check(&Key::new(id));
        }
        store.remove(&Key::new(0));
        clock.advance(Duration::from_secs(1));
        store.sweep_all();
        store.promote(&Key::new(1));
    });
}

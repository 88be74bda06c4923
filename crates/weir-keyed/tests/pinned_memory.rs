//! Memory stays bounded by `max_keys` while a thread holds reclamation back: a
//! `for_each` callback paused (its shard's epoch guard held) while a flood of new
//! keys evicts idle ones, each unlinked entry awaiting a reclamation that cannot
//! run yet. Once the callback returns and the store is swept, the slab chunks the
//! flood took are given back. Memory is measured exactly, by counting the bytes
//! this test binary has allocated and not yet freed (one test in this binary, so
//! that nothing else allocates meanwhile).

use std::sync::mpsc;
use std::time::Duration;
use weir_keyed::{AtCapacity, Keyed, KeyedConfig};
use weir_rl_core::{DenyReason, ManualClock, Quota};

mod support;

#[global_allocator]
static ALLOCATOR: support::Counting = support::Counting;

const MAX_KEYS: u64 = 1_000;
/// New keys arriving while the callback is paused.
const FLOOD: u64 = 200_000;

fn bytes() -> isize {
    support::live_bytes()
}

#[test]
fn a_flood_while_a_callback_holds_a_guard_keeps_memory_bounded() {
    let clock = ManualClock::new();
    let config = KeyedConfig::builder(MAX_KEYS as usize).at_capacity(AtCapacity::EvictIdle).build().unwrap();
    let store: Keyed<u64, _, _> = Keyed::gcra_with_clock(Quota::per_second(10).unwrap(), config, clock.clone());
    for key in 0..MAX_KEYS {
        assert!(store.check(&key).is_allowed());
    }
    let full = bytes();

    let (paused_tx, paused) = mpsc::channel();
    let store = &store;
    let (release, release_rx) = mpsc::channel::<()>();
    let (mut admitted, mut refused, mut peak) = (0u64, 0u64, 0isize);
    std::thread::scope(|scope| {
        let metrics = scope.spawn(move || {
            let mut first = true;
            store.for_each(|_, _| {
                if std::mem::take(&mut first) {
                    paused_tx.send(()).unwrap();
                    release_rx.recv().unwrap(); // paused, inside the iteration
                }
            });
        });
        paused.recv().unwrap();
        for key in MAX_KEYS..MAX_KEYS + FLOOD {
            // One new key every 1 ms: a key is idle 100 ms after its check, so
            // each new key finds an idle one to evict.
            clock.advance(Duration::from_millis(1));
            let decision = store.check(&key);
            match decision.deny_reason() {
                None => admitted += 1,
                Some(DenyReason::KeyCapacity) => refused += 1,
                Some(other) => panic!("a fresh key denied for {other:?}"),
            }
            if key % 1_000 == 0 {
                peak = peak.max(bytes() - full);
            }
            assert!(store.len() <= MAX_KEYS as usize);
        }
        release.send(()).unwrap();
        metrics.join().unwrap();
    });
    peak = peak.max(bytes() - full);
    eprintln!(
        "{FLOOD} new keys while pinned: {admitted} admitted, {refused} refused as at a full store, \
         peak {:.1} KB above the full store's {:.1} KB",
        peak as f64 / 1e3,
        full as f64 / 1e3
    );
    // Without a bound every evicted key and state stayed in memory (17.8 MB for
    // these 200 000 keys). The slabs hold at most twice the keys plus a slack of
    // slots awaiting reclamation (and chunks double).
    let bound = 1024 * 1024;
    assert!(peak <= bound, "peak {peak} B above the full store, more than {bound} B");
    assert!(admitted >= MAX_KEYS, "new keys were admitted until the slack was used: {admitted}");

    // Released: once every key is idle and swept, the chunks the flood took are
    // given back.
    clock.advance(Duration::from_secs(1));
    store.sweep_all();
    assert!(store.is_empty());
    let left = bytes() - full;
    eprintln!("after the sweep: {:.1} KB above the full store", left as f64 / 1e3);
    assert!(left <= 0, "{left} B more than the full store held, with no key stored");
    // And the store takes new keys again.
    for key in 0..MAX_KEYS {
        assert!(store.check(&(key + 10 * FLOOD)).is_allowed());
    }
}

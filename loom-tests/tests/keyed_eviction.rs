//! loom models of weir-keyed's store: the production `Keyed` code paths (`check_n`
//! with its retry on a retired state, the sweep's retire-then-unlink, `remove`, and
//! hot-key promotion with its owner checks, `check_hot`'s clean-up and
//! `retire_promoted`), over the small model map weir-keyed uses under loom in place
//! of its table (each map operation one atomic step, as each of the table's is to
//! the store); and, in `mod table`, the table's own publication protocol.
//!
//! At a clock frozen at 0 no state that admitted anything is ever idle, so whatever
//! the interleaving, a key admits at most its burst; and eviction only drops idle
//! states, so it never loses an admission either. The models in
//! `keyed_moving_clock.rs` move the clock past a key's idle time while a check of
//! the key races with its eviction.
#![cfg(all(loom, feature = "keyed"))]

use loom::sync::Arc;
use loom::thread;
use loom_tests::keyed::{Hasher, store, three_checks_racing_a_sweep};
use weir_gcra::{GcraAlgorithm, LeaseConfig};
use weir_keyed::{HotKeys, Keyed};
use weir_rl_core::{Nanos, Quota};

fn gcra(burst: u64) -> GcraAlgorithm {
    let quota = Quota::per_second(100_000_000).unwrap().with_burst(burst).unwrap();
    GcraAlgorithm::new(quota, Nanos::ZERO)
}

/// A GCRA store with hot keys: one stripe, leases of one permit (exact), at most
/// two hot keys (so that two promotions of one key can both hold a slot).
fn hot_store(burst: u64) -> Keyed<u8, GcraAlgorithm, Nanos, Hasher, HotKeys> {
    let lease = LeaseConfig::builder().stripes(1).max_lease(1).build().unwrap();
    store(gcra(burst)).with_hot_keys(HotKeys::builder().lease(lease).max_hot_keys(2).build().unwrap())
}

fn admitted(store: &Keyed<u8, GcraAlgorithm, Nanos, Hasher, HotKeys>, checks: usize) -> u64 {
    (0..checks).filter(|_| store.check(&1).is_allowed()).count() as u64
}

#[test]
fn a_sweep_racing_with_checks_never_loses_or_duplicates_an_admission() {
    three_checks_racing_a_sweep(|| gcra(2));
}

#[test]
fn a_state_in_use_is_never_retired() {
    loom::model(|| {
        let store = Arc::new(store(gcra(1)));
        let checker = {
            let store = store.clone();
            thread::spawn(move || store.check(&1).is_allowed())
        };
        store.sweep();
        assert!(checker.join().unwrap());
        // The admission happened: whether the sweep ran before it (and dropped an idle
        // state) or after (and found it in use), the key now has no capacity left.
        assert!(store.check(&1).is_denied());
    });
}

/// Promotion to hot stripes racing with checks: every admission lands in exactly
/// one of the two buckets, so at a frozen clock the key admits at most its burst and
/// no permit is lost in the hand-over.
#[test]
fn promotion_racing_with_checks_loses_nothing() {
    loom::model(|| {
        let store = Arc::new(hot_store(3));
        let promoter = {
            let store = store.clone();
            thread::spawn(move || store.promote(&1))
        };
        let checker = {
            let store = store.clone();
            thread::spawn(move || admitted(&store, 1))
        };
        let mine = admitted(&store, 2);
        promoter.join().unwrap();
        let admitted = mine + checker.join().unwrap();
        assert!(admitted <= 3);
        assert_eq!(store.snapshot(&1).remaining() + admitted, 3, "a permit was lost in the hand-over");
    });
}

/// A promotion delayed past its state's eviction (the key's state S0 is swept while
/// the promoter holds it) must not touch the stripes of the key's next state S1:
/// the thread that swept S0 then promotes the key again (S1) and checks it.
#[test]
fn a_promotion_racing_a_sweep_and_a_new_promotion_keeps_the_burst() {
    loom::model(|| {
        let store = Arc::new(hot_store(1));
        let promoter = {
            let store = store.clone();
            thread::spawn(move || store.promote(&1))
        };
        store.sweep();
        store.promote(&1);
        let mine = admitted(&store, 2);
        promoter.join().unwrap();
        assert!(mine <= 1, "admitted {mine} > burst 1");
        assert!(store.check(&1).is_denied(), "the key's state was lost");
    });
}

/// The same with an operator's `remove` (which resets the key) in place of the
/// sweep: after the reset the key admits at most its burst, and no hot slot leaks.
#[test]
fn a_promotion_racing_a_remove_and_a_new_promotion_keeps_the_burst() {
    loom::model(|| {
        let store = Arc::new(hot_store(1));
        assert!(store.check(&1).is_allowed()); // S0, spent
        let promoter = {
            let store = store.clone();
            thread::spawn(move || store.promote(&1))
        };
        store.remove(&1);
        store.promote(&1);
        let mine = admitted(&store, 2);
        promoter.join().unwrap();
        assert!(mine <= 1, "admitted {mine} > burst 1 after the reset");
        assert!(store.check(&1).is_denied(), "the key's state was lost");
        // Both hot slots are free once the key is gone.
        store.remove(&1);
        assert!(store.promote(&2) && store.promote(&3), "a hot slot leaked");
    });
}

/// A sweep retiring an idle hot key (its bucket, then its state) racing with checks
/// of that key: whichever comes first, the key admits exactly its burst.
#[test]
fn a_sweep_of_an_idle_hot_key_racing_with_checks_keeps_the_burst() {
    loom::model(|| {
        let store = Arc::new(hot_store(1));
        assert!(store.promote(&1)); // idle: nothing spent, no lease granted
        let sweeper = {
            let store = store.clone();
            thread::spawn(move || store.sweep())
        };
        let mine = admitted(&store, 2);
        sweeper.join().unwrap();
        assert_eq!(mine, 1);
        assert!(store.check(&1).is_denied());
    });
}

/// A full store's search for an idle key (which finds none, and publishes when the
/// shard's and the store's keys can next go idle) racing with a `remove` and the
/// insertion of a key that goes idle before any key the search saw: the bounds
/// never hide the new key, so once it is idle a full store evicts it for the next
/// new key.
#[test]
fn a_search_publishing_bounds_never_hides_a_key_inserted_meanwhile() {
    use std::time::Duration;
    use weir_keyed::KeyedConfig;
    use weir_rl_core::ManualClock;
    loom::model(|| {
        let clock = ManualClock::new();
        // At most two keys, one shard; one permit every 10 ns, a burst of 4.
        let store = Arc::new(Keyed::with_hasher(
            gcra(4),
            KeyedConfig::builder(2).build().unwrap(),
            clock.clone(),
            Hasher::default(),
        ));
        assert!(store.check_n(&1, 4).unwrap().is_allowed()); // idle at 40 ns
        assert!(store.check_n(&2, 4).unwrap().is_allowed()); // idle at 40 ns: full
        let searcher = {
            let store = store.clone();
            thread::spawn(move || store.check(&3).is_allowed()) // idle at 10 ns if stored
        };
        store.remove(&2);
        let inserted = store.check(&4).is_allowed(); // idle at 10 ns if stored
        let searched = searcher.join().unwrap();
        assert!(inserted || searched, "the room made by remove went unused");
        clock.advance(Duration::from_nanos(10));
        assert!(store.check(&5).is_allowed(), "key 3 or 4 is idle: the full store must evict it");
    });
}

/// A full store's search for an idle key (which finds none, and publishes when
/// the keys can next go idle) racing with a refund that makes a stored key idle
/// at once: the published bounds never hide that key, so the search takes its
/// place, or the next new key does.
#[test]
fn a_search_publishing_bounds_never_hides_a_key_a_refund_made_idle() {
    use weir_keyed::KeyedConfig;
    use weir_rl_core::ManualClock;
    loom::model(|| {
        let clock = ManualClock::new();
        // At most two keys, one shard; one permit every 10 ns, a burst of 4.
        let config = KeyedConfig::builder(2).build().unwrap();
        let store = Arc::new(Keyed::with_hasher(gcra(4), config, clock.clone(), Hasher::default()));
        assert!(store.check_n(&1, 4).unwrap().is_allowed()); // idle at 40 ns
        let admission = store.check_n(&2, 4).unwrap(); // idle at 40 ns: full
        assert!(admission.is_allowed());
        let searcher = {
            let store = store.clone();
            thread::spawn(move || store.check(&3).is_allowed())
        };
        store.refund(&2, 4, &admission).unwrap(); // key 2 is full again: idle now
        let searched = searcher.join().unwrap();
        assert!(searched || store.check(&4).is_allowed(), "key 2 is idle: the full store must evict it");
    });
}

/// Two first checks of one new key in a store at its bound but for that key (one
/// place left): whichever inserts the key, the other finds it, so both are decided
/// on its one state and neither is refused for capacity; the store ends with the
/// key in its one free place.
#[test]
fn racing_first_checks_of_a_new_key_share_the_last_place() {
    use weir_keyed::{AtCapacity, KeyedConfig};
    use weir_rl_core::DenyReason;
    loom::model(|| {
        let config = KeyedConfig::builder(2).at_capacity(AtCapacity::Deny).build().unwrap();
        let store = Arc::new(Keyed::with_hasher(gcra(4), config, Nanos::ZERO, Hasher::default()));
        assert!(store.check(&9).is_allowed()); // one place left
        let other = {
            let store = store.clone();
            thread::spawn(move || store.check(&1))
        };
        let mine = store.check(&1);
        let theirs = other.join().unwrap();
        for decision in [mine, theirs] {
            assert_ne!(decision.deny_reason(), Some(DenyReason::KeyCapacity), "refused while the store had room");
            assert!(decision.is_allowed());
        }
        assert_eq!(store.len(), 2);
    });
}

/// The table a store keeps its keys in, on its own: its publication protocol
/// (an entry written, then its index word published; an index rebuilt, then its
/// address published; a word turned into a tombstone) under loom's atomics, lock
/// and cells, which check that no lookup reads an entry or an index word before it
/// was written.
mod table {
    use super::*;
    use std::hash::{BuildHasher, BuildHasherDefault};
    use weir_keyed::loom_table::{Collector, HARDENED, Hashers, Inserted, Shard};

    fn hashers() -> Hashers<Hasher> {
        Hashers::new(Hasher::default())
    }

    /// `key`'s hash for the shard's mode now.
    fn hash(shard: &Shard<u8, u64>, key: u8) -> u64 {
        hashers().for_shard(&key, shard.is_hardened())
    }

    fn insert(shard: &Shard<u8, u64>, collector: &Collector, key: u8, value: u64) -> Result<u64, u64> {
        insert_with(shard, collector, &hashers(), key, value)
    }

    /// Inserts with `hashers`, hashing again as often as the shard asks.
    fn insert_with<S: BuildHasher>(
        shard: &Shard<u8, u64>,
        collector: &Collector,
        hashers: &Hashers<S>,
        key: u8,
        value: u64,
    ) -> Result<u64, u64> {
        let guard = collector.enter();
        loop {
            let hash = hashers.for_shard(&key, shard.is_hardened());
            match shard.try_insert(hash, key, value, || true, hashers, &guard) {
                Ok(value) => return Ok(*value),
                Err(Inserted::Held(value)) => return Err(*value),
                Err(Inserted::Rehash { .. }) => {}
                Err(Inserted::Refused | Inserted::Full) => unreachable!("admitted, and a model's slab is small"),
            }
        }
    }

    fn get(shard: &Shard<u8, u64>, collector: &Collector, key: u8) -> Option<u64> {
        shard.get(hash(shard, key), &key, &collector.enter()).copied()
    }

    /// Looks `key` up until it is found, at most `tries` times, yielding in
    /// between (loom lets the other threads run at a yield): what the first found.
    fn look(shard: &Shard<u8, u64>, collector: &Collector, key: u8, tries: usize) -> Option<u64> {
        for _ in 1..tries {
            if let Some(found) = get(shard, collector, key) {
                return Some(found);
            }
            thread::yield_now();
        }
        get(shard, collector, key)
    }

    /// A lookup racing with the key's insertion sees nothing or the whole entry.
    #[test]
    fn a_lookup_racing_an_insertion_sees_the_whole_entry_or_nothing() {
        loom::model(|| {
            let table = Arc::new((Shard::<u8, u64>::with_slack(64), Collector::new()));
            let writer = {
                let table = table.clone();
                thread::spawn(move || insert(&table.0, &table.1, 1, 10))
            };
            let seen = look(&table.0, &table.1, 1, 2);
            assert!(seen.is_none() || seen == Some(10));
            assert_eq!(writer.join().unwrap(), Ok(10));
            assert_eq!(get(&table.0, &table.1, 1), Some(10));
        });
    }

    /// Two insertions of one key: one wins, and both see its value.
    #[test]
    fn racing_insertions_of_a_key_agree_on_one_entry() {
        loom::model(|| {
            let table = Arc::new((Shard::<u8, u64>::with_slack(64), Collector::new()));
            let other = {
                let table = table.clone();
                thread::spawn(move || insert(&table.0, &table.1, 1, 20))
            };
            let mine = insert(&table.0, &table.1, 1, 10);
            let theirs = other.join().unwrap();
            match (mine, theirs) {
                (Ok(10), Err(10)) | (Err(20), Ok(20)) => {}
                other => panic!("two entries for one key: {other:?}"),
            }
        });
    }

    /// A lookup racing with the key's removal sees the entry or nothing, and a
    /// lookup racing with a rebuild of the index (three insertions into the
    /// smallest index) still finds a key that was there throughout.
    #[test]
    fn lookups_racing_a_removal_and_a_rebuild_find_what_was_there() {
        loom::model(|| {
            let table = Arc::new((Shard::<u8, u64>::with_slack(64), Collector::new()));
            insert(&table.0, &table.1, 1, 10).unwrap();
            insert(&table.0, &table.1, 2, 20).unwrap();
            let writer = {
                let table = table.clone();
                thread::spawn(move || {
                    assert_eq!(table.0.remove_if(hash(&table.0, 2), &2, |_, _| true, &table.1.enter()), Some(&20));
                    insert(&table.0, &table.1, 3, 30).unwrap();
                    insert(&table.0, &table.1, 4, 40).unwrap(); // the index is rebuilt
                })
            };
            thread::yield_now();
            assert_eq!(get(&table.0, &table.1, 1), Some(10), "a key there throughout was missed");
            let two = get(&table.0, &table.1, 2);
            assert!(two.is_none() || two == Some(20));
            // Found only in the rebuilt index: seen whole, or not at all.
            let four = look(&table.0, &table.1, 4, 2);
            assert!(four.is_none() || four == Some(40));
            writer.join().unwrap();
            assert_eq!(get(&table.0, &table.1, 2), None);
            let guard = table.1.enter();
            let mut keys: Vec<u8> = table.0.iter(&guard).map(|(k, _)| *k).collect();
            keys.sort_unstable();
            assert_eq!(keys, [1, 3, 4]);
        });
    }

    /// Every key hashes alike: the most a flood of colliding keys can make of a
    /// fast hash.
    #[derive(Default)]
    struct Colliding;

    impl std::hash::Hasher for Colliding {
        fn finish(&self) -> u64 {
            7
        }

        fn write(&mut self, _: &[u8]) {}
    }

    /// Two first insertions of one key, one of them hardening the shard (three keys
    /// of one fast hash fill the smallest index): one wins, the other finds its
    /// entry (by a scan, if it hashed before the hardening, or by the strong hash
    /// after a `Rehash`), never a second entry.
    #[test]
    fn racing_insertions_of_a_key_across_a_hardening_agree_on_one_entry() {
        loom::model(|| {
            let hashers = Hashers::new(BuildHasherDefault::<Colliding>::default());
            let table = Arc::new((Shard::<u8, u64>::with_slack(64), Collector::new()));
            for key in 1..=3 {
                insert_with(&table.0, &table.1, &hashers, key, u64::from(key) * 10).unwrap();
            }
            let other = {
                let table = table.clone();
                thread::spawn(move || {
                    let hashers = Hashers::new(BuildHasherDefault::<Colliding>::default());
                    insert_with(&table.0, &table.1, &hashers, 4, 41)
                })
            };
            let mine = insert_with(&table.0, &table.1, &hashers, 4, 40);
            match (mine, other.join().unwrap()) {
                (Ok(40), Err(40)) | (Err(41), Ok(41)) => {}
                other => panic!("two entries for one key: {other:?}"),
            }
            assert!(table.0.is_hardened());
            assert_eq!(table.0.iter(&table.1.enter()).count(), 4);
        });
    }

    /// An insertion that hardens the shard (its index rebuilt by the strong hash:
    /// three keys of one fast hash fill the smallest index) racing with a lookup
    /// by the fast hash, computed before the hardening: the lookup still finds a
    /// key that was there throughout, an insertion by a fast hash is refused
    /// (`Rehash`, nothing taken) once the shard has hardened, and afterwards every
    /// key is found, and held once.
    #[test]
    fn a_lookup_racing_the_hardening_of_its_shard_finds_what_was_there() {
        loom::model(|| {
            let hashers = Hashers::new(BuildHasherDefault::<Colliding>::default());
            let table = Arc::new((Shard::<u8, u64>::with_slack(64), Collector::new()));
            for key in 1..=3 {
                insert_with(&table.0, &table.1, &hashers, key, u64::from(key) * 10).unwrap();
            }
            let fast = hashers.fast(&1u8);
            assert!(!table.0.is_hardened());
            let writer = {
                let table = table.clone();
                thread::spawn(move || {
                    let hashers = Hashers::new(BuildHasherDefault::<Colliding>::default());
                    insert_with(&table.0, &table.1, &hashers, 4, 40).unwrap(); // hardens
                })
            };
            assert_eq!(table.0.get(fast, &1, &table.1.enter()), Some(&10), "a key there throughout was missed");
            writer.join().unwrap();
            assert!(table.0.is_hardened());
            let guard = table.1.enter();
            assert!(matches!(
                table.0.try_insert(hashers.fast(&5u8), 5, 50, || panic!("nothing is taken"), &hashers, &guard),
                Err(Inserted::Rehash { hardened: false })
            ));
            assert_ne!(hashers.for_shard(&1u8, true) & HARDENED, 0);
            for key in 1..=4u8 {
                let strong = hashers.for_shard(&key, true);
                assert_eq!(table.0.get(strong, &key, &guard), Some(&(u64::from(key) * 10)));
                assert_eq!(table.0.get(hashers.fast(&key), &key, &guard), Some(&(u64::from(key) * 10)));
            }
            assert_eq!(table.0.iter(&guard).count(), 4);
        });
    }
}

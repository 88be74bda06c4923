//! A sweep's index shrink rehashes the keys it keeps (user code): a `Hash` that
//! panics there fails that sweep and leaves the shard consistent, and a check's
//! paced sweep never shrinks the index, so another key's panicking `Hash` cannot
//! fail a check that already took its admission.

use std::cell::Cell;
use std::hash::{Hash, Hasher};
use std::panic::{AssertUnwindSafe, catch_unwind};
use weir_gcra::GcraAlgorithm;
use weir_keyed::{Keyed, KeyedConfig};
use weir_rl_core::{DenyReason, ManualClock, Quota};

thread_local! {
    /// Hash calls until the one that panics (0: none).
    static HASH_COUNTDOWN: Cell<u64> = const { Cell::new(0) };
}

#[derive(PartialEq, Eq, Debug)]
struct K(u64);
impl Hash for K {
    fn hash<H: Hasher>(&self, h: &mut H) {
        HASH_COUNTDOWN.with(|c| {
            let n = c.get();
            if n > 0 {
                c.set(n - 1);
                if n == 1 {
                    panic!("Hash panics (armed)");
                }
            }
        });
        self.0.hash(h);
    }
}
impl Clone for K {
    fn clone(&self) -> Self {
        K(self.0)
    }
}

fn store(max: usize, every: usize) -> Keyed<K, GcraAlgorithm, ManualClock> {
    let config = KeyedConfig::builder(max).sweep_every(every).sweep_from(0).build().unwrap();
    Keyed::gcra_with_clock(Quota::per_minute(10).unwrap(), config, ManualClock::new())
}

fn count(s: &Keyed<K, GcraAlgorithm, ManualClock>) -> usize {
    let mut n = 0;
    s.for_each(|_, _| n += 1);
    n
}

/// A sweep's index shrink rehashes keys (user code): a panicking Hash there makes
/// `sweep_all` panic; afterwards the shard must be consistent.
#[test]
fn panicking_hash_in_sweep_index_shrink_leaves_store_consistent() {
    let s = store(1000, 1_000_000);
    for k in 0..100 {
        assert!(s.check(&K(k)).is_allowed());
    }
    for k in 5..100 {
        assert!(s.remove(&K(k)));
    }
    HASH_COUNTDOWN.with(|c| c.set(1));
    let r = catch_unwind(AssertUnwindSafe(|| s.sweep_all()));
    HASH_COUNTDOWN.with(|c| c.set(0));
    assert!(r.is_err(), "expected the shrink's rehash to hit the armed Hash");
    assert_eq!(s.len(), 5);
    assert_eq!(count(&s), 5);
    for k in 0..5 {
        assert_eq!(s.snapshot(&K(k)).remaining(), 9, "key {k} kept its state");
    }
    // Every place usable again, and the shard shrinks on the next sweep.
    s.sweep_all();
    for k in 1000..1995 {
        assert!(s.check(&K(k)).is_allowed(), "place for key {k}");
    }
    assert_eq!(s.len(), 1000);
    assert_eq!(count(&s), 1000);
    assert_eq!(s.check(&K(5000)).deny_reason(), Some(DenyReason::KeyCapacity));
}

/// A paced sweep runs inside a check, after its decision: it must not rehash other
/// keys (it did: the check panicked from another key's `Hash` in the index shrink
/// after taking its admission, 9 of 10 left and no decision returned).
#[test]
fn a_checks_paced_sweep_runs_no_other_keys_hash() {
    let s = store(1000, 1);
    for k in 0..100 {
        assert!(s.check(&K(k)).is_allowed());
    }
    for k in 5..100 {
        assert!(s.remove(&K(k)));
    }
    // Call 1: the store hashes the new key; call 2: the sweep's rehash.
    HASH_COUNTDOWN.with(|c| c.set(2));
    let r = catch_unwind(AssertUnwindSafe(|| s.check(&K(7777))));
    HASH_COUNTDOWN.with(|c| c.set(0));
    let admitted_anyway = s.snapshot(&K(7777)).remaining();
    assert!(
        r.is_ok_and(|d| d.is_allowed()),
        "check of key 7777 panicked (another key's Hash in the paced sweep's shrink) \
         although it consumed an admission: remaining {admitted_anyway} of 10"
    );
    assert_eq!(admitted_anyway, 9);
}

//! A keyed store's refund (through `Algorithm::refund`, and through a hot key's
//! lease stripes) gives back what the admission was charged, even after the store's
//! quota changed in between.

use weir_core::{ManualClock, Quota};
use weir_gcra::{GcraAlgorithm, LeaseConfig};
use weir_keyed::{HotKeys, Keyed, KeyedConfig};

fn config() -> KeyedConfig {
    KeyedConfig::builder(100).build().unwrap()
}

fn one_per_second_burst_10() -> Quota {
    Quota::per_second(1).unwrap().with_burst(10).unwrap()
}

/// Take 10 at 10/s, change to 1/s with burst 10, refund 5 of the 10: they were
/// charged 0.5 s, so 9 of the new burst fit, as for one `Gcra` (not 10).
#[test]
fn a_keys_refund_credits_the_interval_it_was_charged() {
    let clock = ManualClock::new();
    let store: Keyed<u64, GcraAlgorithm, ManualClock> =
        Keyed::gcra_with_clock(Quota::per_second(10).unwrap(), config(), clock.clone());
    let admission = store.check_n(&7, 10).unwrap();
    assert!(admission.is_allowed());
    store.set_quota(one_per_second_burst_10());
    store.refund(&7, 5, &admission).unwrap();
    let admitted = (0..100).filter(|_| store.check(&7).is_allowed()).count();
    assert_eq!(admitted, 9);
}

/// The same for a hot key, whose bucket lives in lease stripes.
#[test]
fn a_hot_keys_refund_credits_the_interval_it_was_charged() {
    let clock = ManualClock::new();
    let hot =
        HotKeys::builder().lease(LeaseConfig::builder().stripes(1).max_lease(4).build().unwrap()).build().unwrap();
    let store =
        Keyed::<u64, _, _>::gcra_with_clock(Quota::per_second(10).unwrap(), config(), clock.clone()).with_hot_keys(hot);
    assert!(store.promote(&7));
    let admission = store.check_n(&7, 10).unwrap();
    assert!(admission.is_allowed());
    store.set_quota(one_per_second_burst_10());
    store.refund(&7, 5, &admission).unwrap();
    let admitted = (0..100).filter(|_| store.check(&7).is_allowed()).count();
    assert_eq!(admitted, 9);
}

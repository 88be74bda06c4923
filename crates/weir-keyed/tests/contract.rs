//! The per-key contract of weir-rl-core ([`KeyedLimiter`], [`AsyncKeyedLimiter`]) on
//! `Keyed`: check, refund, snapshot and policies for every algorithm and key borrow
//! form, all-of checks that refund, and the async form's ready futures.

use std::future::Future;
use std::pin::pin;
use std::task::{Context, Poll, Waker};
use std::time::Duration;
use weir_gcra::LeaseConfig;
use weir_keyed::{HotKeys, Keyed, KeyedConfig, KeyedGcra};
use weir_rl_core::{AllOf, AsyncKeyedLimiter, Clock, Decision, KeyedLimiter, ManualClock, Policy, Quota};

fn config() -> KeyedConfig {
    KeyedConfig::builder(1_000).build().unwrap()
}

/// Polls a future once: the in-memory store's futures are ready at the first poll.
fn ready<F: Future>(future: F) -> F::Output {
    let mut future = pin!(future);
    match future.as_mut().poll(&mut Context::from_waker(Waker::noop())) {
        Poll::Ready(output) => output,
        Poll::Pending => panic!("an in-memory store's future was not ready at once"),
    }
}

/// What a middleware does: nothing but the trait.
fn spend<S: KeyedLimiter<str> + ?Sized>(store: &S, key: &str, n: u64) -> Decision {
    store.check_n(key, n).unwrap()
}

#[test]
fn gcra_store_through_the_trait_with_borrowed_keys() {
    let clock = ManualClock::new();
    let store: KeyedGcra<String, _> = Keyed::gcra_with_clock(Quota::per_second(3).unwrap(), config(), clock.clone());
    let dyn_store: &dyn KeyedLimiter<str> = &store;
    assert_eq!(dyn_store.policies(), &[Policy::of(&Quota::per_second(3).unwrap())]);
    let admitted = spend(dyn_store, "alice", 2);
    assert!(admitted.is_allowed());
    assert_eq!(admitted.remaining(), 1);
    assert_eq!(admitted.decided_at(), clock.now(), "a decision says when it was made");
    assert_eq!(dyn_store.snapshot("alice").remaining(), 1);
    assert!(spend(dyn_store, "alice", 2).is_denied());
    assert!(dyn_store.check_n("alice", 4).is_err(), "more than the burst is an error");
    // The owned form works too.
    let owned: &dyn KeyedLimiter<String> = &store;
    assert_eq!(owned.snapshot(&"alice".to_owned()).remaining(), 1);
}

#[test]
fn a_refund_gives_back_what_was_taken_and_no_more() {
    let clock = ManualClock::new();
    let store: KeyedGcra<u64, _> = Keyed::gcra_with_clock(Quota::per_second(4).unwrap(), config(), clock.clone());
    let first = store.check_n(&1, 3).unwrap();
    assert!(first.is_allowed());
    store.refund(&1, 2, &first).unwrap();
    assert_eq!(store.snapshot(&1).remaining(), 3);
    // Never beyond a full bucket.
    store.refund(&1, 3, &first).unwrap();
    assert_eq!(store.snapshot(&1).remaining(), 4);
    // A denial took nothing; a key never stored has nothing to give back.
    let spent = store.check_n(&1, 4).unwrap();
    let denied = store.check(&1);
    assert!(denied.is_denied());
    store.refund(&1, 1, &denied).unwrap();
    assert_eq!(store.snapshot(&1).remaining(), 0);
    store.refund(&2, 1, &spent).unwrap();
    assert!(store.is_empty() || store.len() == 1);
    assert!(store.refund(&1, 5, &spent).is_err(), "no check could have taken 5");
}

#[test]
fn an_all_of_check_denied_by_a_later_quota_takes_nothing_from_the_earlier() {
    let clock = ManualClock::new();
    let per_second: KeyedGcra<String, _> =
        Keyed::gcra_with_clock(Quota::per_second(10).unwrap(), config(), clock.clone());
    let per_minute: KeyedGcra<String, _> =
        Keyed::gcra_with_clock(Quota::per_minute(3).unwrap(), config(), clock.clone());
    let tier = AllOf::new::<str>((per_second, per_minute)).unwrap();
    assert_eq!(tier.policies(), &[Policy::new(10, Duration::from_secs(1)), Policy::new(3, Duration::from_secs(60))]);
    assert!(tier.check_n("alice", 3).unwrap().is_allowed());
    // The minute has nothing left: the second's admission is refunded.
    let denied = tier.check_n("alice", 2).unwrap();
    assert!(denied.is_denied());
    assert_eq!(denied.policy_index(), 1);
    assert_eq!(tier.members().0.snapshot("alice").remaining(), 7, "the refused request took nothing");
}

#[test]
fn a_hot_key_is_refunded_on_its_hot_bucket_without_over_credit() {
    let clock = ManualClock::new();
    let lease = LeaseConfig::builder().stripes(1).max_lease(1).build().unwrap(); // exact leases
    let store = KeyedGcra::<u64, _>::gcra_with_clock(Quota::per_second(4).unwrap(), config(), clock.clone())
        .with_hot_keys(HotKeys::builder().lease(lease).build().unwrap());
    assert!(store.promote(&7));
    let admission = store.check_n(&7, 3).unwrap();
    assert!(admission.is_allowed());
    assert_eq!(store.snapshot(&7).remaining(), 1);
    store.refund(&7, 3, &admission).unwrap();
    assert_eq!(store.snapshot(&7).remaining(), 4);
    store.refund(&7, 3, &admission).unwrap();
    assert_eq!(store.snapshot(&7).remaining(), 4, "never beyond a full bucket");
    assert!(store.check_n(&7, 4).unwrap().is_allowed());
    assert!(store.check(&7).is_denied());
}

/// An admission from a lease: its permits were charged when the lease was granted,
/// and the bucket has been refilling since, so a late refund gives back the debt
/// less the time since the grant (here nothing), never the whole cost.
#[test]
fn a_late_refund_of_a_leased_admission_gives_back_only_what_is_still_owed() {
    let clock = ManualClock::new();
    let lease = LeaseConfig::builder().stripes(1).max_lease(4).lifetime(Duration::from_millis(10)).build().unwrap();
    // T = 1 ms, burst 8.
    let quota = Quota::per_second(1_000).unwrap().with_burst(8).unwrap();
    let store = KeyedGcra::<u64, _>::gcra_with_clock(quota, config(), clock.clone())
        .with_hot_keys(HotKeys::builder().lease(lease).build().unwrap());
    assert!(store.promote(&7));
    let leased = store.check(&7); // takes a lease of 4 (8 / (2 × 1 stripe)), spends 1
    assert!(leased.is_allowed());
    let before = store.snapshot(&7).remaining();
    clock.advance(Duration::from_millis(2)); // the bucket has refilled 2 units since the grant
    let refilled = store.snapshot(&7).remaining();
    store.refund(&7, 1, &leased).unwrap();
    assert_eq!(store.snapshot(&7).remaining(), refilled, "1 unit's debt, 2 ms old: nothing is still owed");
    assert!(refilled <= before + 2);
}

#[test]
fn the_async_form_is_ready_at_once() {
    let clock = ManualClock::new();
    let store: KeyedGcra<String, _> = Keyed::gcra_with_clock(Quota::per_minute(2).unwrap(), config(), clock);
    async fn admit<S: AsyncKeyedLimiter<str>>(store: &S, key: &str) -> Result<Decision, S::Error> {
        let decision = store.check_n(key, 2).await?;
        store.refund(key, 1, &decision).await?;
        Ok(decision)
    }
    let decision = ready(admit(&store, "bob")).unwrap();
    assert!(decision.is_allowed());
    assert_eq!(ready(AsyncKeyedLimiter::snapshot(&store, "bob")).unwrap().remaining(), 1);
    assert_eq!(AsyncKeyedLimiter::<str>::policies(&store), &[Policy::new(2, Duration::from_secs(60))]);
    assert!(ready(AsyncKeyedLimiter::check_n(&store, "bob", 3)).is_err());
}

#[cfg(feature = "window")]
mod windows {
    use super::*;
    use weir_keyed::{KeyedFixedWindow, KeyedSlidingLog, KeyedSlidingWindow};
    use weir_window::WindowError;

    #[test]
    fn window_stores_through_the_trait() {
        let clock = ManualClock::new();
        let quota = Quota::per_minute(3).unwrap();
        let minute = Policy::new(3, Duration::from_secs(60));
        let fixed: KeyedFixedWindow<String, _> =
            Keyed::fixed_window_with_clock(quota, config(), clock.clone()).unwrap();
        let sliding: KeyedSlidingWindow<String, _> =
            Keyed::sliding_window_with_clock(quota, config(), clock.clone()).unwrap();
        let log: KeyedSlidingLog<String, _> = Keyed::sliding_log_with_clock(quota, config(), clock.clone()).unwrap();
        let stores: [&dyn KeyedLimiter<str>; 3] = [&fixed, &sliding, &log];
        for store in stores {
            assert_eq!(store.policies(), &[minute]);
            let admission = spend(store, "alice", 3);
            assert!(admission.is_allowed());
            assert!(spend(store, "alice", 1).is_denied());
            store.refund("alice", 2, &admission).unwrap();
            assert_eq!(store.snapshot("alice").remaining(), 2, "given back to the window it was taken from");
            assert!(spend(store, "alice", 2).is_allowed());
            assert!(spend(store, "alice", 1).is_denied());
        }
    }

    #[test]
    fn a_window_refund_after_its_window_gives_nothing_to_the_next() {
        let clock = ManualClock::new();
        let store: KeyedFixedWindow<u64, _> =
            Keyed::fixed_window_with_clock(Quota::per_second(2).unwrap(), config(), clock.clone()).unwrap();
        let admission = store.check_n(&1, 1).unwrap();
        clock.advance(Duration::from_secs(1));
        assert!(store.check_n(&1, 2).unwrap().is_allowed());
        store.refund(&1, 1, &admission).unwrap();
        assert!(store.check(&1).is_denied(), "the old window's refund went to the new one");
    }

    #[test]
    fn a_window_store_refuses_a_burst_it_would_ignore() {
        let quota = Quota::per_minute(100).unwrap().with_burst(10).unwrap();
        let refused = Keyed::<u64, _>::sliding_window(quota, config()).unwrap_err();
        assert_eq!(refused, WindowError::BurstIsNotCount { count: 100, burst: 10 });
    }
}

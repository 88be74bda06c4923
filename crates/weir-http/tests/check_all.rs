//! `check_all`: limits with explicit keys, all or nothing: refunds of earlier (and
//! later) admissions when one refuses, the longest wait among the refusing limits,
//! a cost of 0, shadow limits, failures, and the future dropped at each of its
//! awaits (`weir_testkit::each_cancellation`) leaving nothing taken.

use std::collections::HashMap;
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use weir_http::{Charge, Key, Outcome, Store, check_all};
use weir_keyed::{AtCapacity, KeyedConfig, KeyedFixedWindow};
use weir_rl_core::{
    AsyncKeyedLimiter, Decision, DenyReason, InsufficientCapacity, KeyedLimiter, ManualClock, Policy as QuotaPolicy,
    Quota, Snapshot,
};
use weir_testkit::each_cancellation;

/// A fixed window of `limit` per `window`, on a clock that does not move.
fn local(limit: u64, window: Duration) -> (Arc<KeyedFixedWindow<Key, ManualClock>>, Store) {
    let config = KeyedConfig::builder(100).build().unwrap();
    let quota = Quota::new(limit, window).unwrap();
    let store = Arc::new(KeyedFixedWindow::fixed_window_with_clock(quota, config, ManualClock::new()).unwrap());
    (Arc::clone(&store), Store::local(store))
}

fn used(store: &KeyedFixedWindow<Key, ManualClock>, key: &Key) -> u64 {
    KeyedLimiter::policies(store)[0].limit() - KeyedLimiter::snapshot(store, key).remaining()
}

/// A remote store of `limit` per minute per key: a check is charged when it is
/// sent (as a Redis script runs when it arrives), its reply two yields later; a
/// refund is applied when it is sent, its reply a yield later. `fail` makes every
/// check fail.
#[derive(Clone)]
struct Remote(Arc<RemoteState>);

struct RemoteState {
    policy: [QuotaPolicy; 1],
    used: Mutex<HashMap<Key, u64>>,
    fail: bool,
}

impl Remote {
    fn new(limit: u64) -> Self {
        let policy = [QuotaPolicy::new(limit, Duration::from_secs(60))];
        Self(Arc::new(RemoteState { policy, used: Mutex::default(), fail: false }))
    }

    fn failing(limit: u64) -> Self {
        let policy = [QuotaPolicy::new(limit, Duration::from_secs(60))];
        Self(Arc::new(RemoteState { policy, used: Mutex::default(), fail: true }))
    }

    fn used(&self, key: &Key) -> u64 {
        self.0.used.lock().unwrap().get(key).copied().unwrap_or(0)
    }
}

impl AsyncKeyedLimiter<Key> for Remote {
    type Error = InsufficientCapacity;

    async fn check_n(&self, key: &Key, n: u64) -> Result<Decision, InsufficientCapacity> {
        if self.0.fail {
            tokio::task::yield_now().await;
            return Err(InsufficientCapacity { requested: n, capacity: 0 });
        }
        let limit = self.0.policy[0].limit();
        let decision = {
            let mut all = self.0.used.lock().unwrap();
            let used = all.entry(key.clone()).or_default();
            if *used + n > limit {
                Decision::denied(Snapshot::new(limit, limit - *used, 60_000_000_000), 60_000_000_000)
            } else {
                *used += n;
                Decision::allowed(Snapshot::new(limit, limit - *used, 60_000_000_000))
            }
        };
        tokio::task::yield_now().await;
        tokio::task::yield_now().await;
        Ok(decision)
    }

    async fn refund(&self, key: &Key, n: u64, _: &Decision) -> Result<(), InsufficientCapacity> {
        if let Some(used) = self.0.used.lock().unwrap().get_mut(key) {
            *used = used.saturating_sub(n);
        }
        tokio::task::yield_now().await;
        Ok(())
    }

    async fn snapshot(&self, key: &Key) -> Result<Snapshot, InsufficientCapacity> {
        let limit = self.0.policy[0].limit();
        Ok(Snapshot::new(limit, limit - self.used(key), 0))
    }

    fn policies(&self) -> &[QuotaPolicy] {
        &self.0.policy
    }
}

/// Lets the tasks a dropped check spawned run to their end.
async fn settle() {
    for _ in 0..10 {
        tokio::task::yield_now().await;
    }
}

#[tokio::test(flavor = "current_thread")]
async fn every_limit_admits_and_each_admission_stays_charged() {
    let (minute, minute_store) = local(3, Duration::from_secs(60));
    let remote = Remote::new(5);
    let remote_store = Store::remote(remote.clone());
    let (a, b) = (Key::custom(b"a"), Key::custom(b"b"));
    let checked = check_all(&[Charge::new(&minute_store, &a, 2), Charge::new(&remote_store, &b, 1)]).await;
    assert!(checked.is_admitted(), "{checked:?}");
    assert_eq!(checked.decisions().iter().map(|d| d.map(|d| d.remaining())).collect::<Vec<_>>(), [Some(1), Some(4)]);
    assert_eq!((used(&minute, &a), remote.used(&b)), (2, 1));
}

/// A refusal gives back what every other limit admitted, before and after it, and
/// says the longest wait among the limits that refuse; every limit is decided.
#[tokio::test(flavor = "current_thread")]
async fn a_refusal_charges_nothing_and_says_the_longest_wait() {
    let (second, second_store) = local(1, Duration::from_secs(1));
    let (hour, hour_store) = local(1, Duration::from_secs(3_600));
    let (day, day_store) = local(10, Duration::from_secs(86_400));
    let remote = Remote::new(10);
    let remote_store = Store::remote(remote.clone());
    let k = Key::custom(b"k");
    let charges = [
        Charge::new(&day_store, &k, 1),
        Charge::new(&second_store, &k, 1),
        Charge::new(&remote_store, &k, 1),
        Charge::new(&hour_store, &k, 1),
    ];
    assert!(check_all(&charges).await.is_admitted());
    let checked = check_all(&charges).await;
    let Outcome::Refused { limit, retry_after } = *checked.outcome() else { panic!("{checked:?}") };
    // The hour's wait, not the second's: a retry after a second is refused again.
    assert_eq!(limit, 3);
    assert!(retry_after > Duration::from_secs(1), "{retry_after:?}");
    assert!(checked.decisions().iter().all(Option::is_some), "every limit decided: {checked:?}");
    assert!(checked.decision(1).unwrap().is_denied() && checked.decision(3).unwrap().is_denied());
    assert!(checked.decision(0).unwrap().is_allowed() && checked.decision(2).unwrap().is_allowed());
    // Only the first request is charged.
    assert_eq!((used(&day, &k), used(&second, &k), remote.used(&k), used(&hour, &k)), (1, 1, 1, 1));
}

/// A cost of 0 reads a limit without charging it, and never refuses.
#[tokio::test(flavor = "current_thread")]
async fn a_cost_of_zero_reads_without_charging() {
    let (minute, store) = local(2, Duration::from_secs(60));
    let k = Key::custom(b"k");
    for _ in 0..2 {
        assert!(check_all(&[Charge::new(&store, &k, 1)]).await.is_admitted());
    }
    let read = check_all(&[Charge::new(&store, &k, 0)]).await;
    assert!(read.is_admitted(), "{read:?}");
    assert_eq!(read.decision(0).map(|d| (d.limit(), d.remaining())), Some((2, 0)));
    assert_eq!(used(&minute, &k), 2);
    assert!(!check_all(&[Charge::new(&store, &k, 1)]).await.is_admitted());
}

/// A shadow limit is decided and charged, its refusal reported, and it refuses
/// nothing; when another limit refuses, its admission is given back too.
#[tokio::test(flavor = "current_thread")]
async fn a_shadow_limit_is_decided_and_charged_but_never_refuses() {
    let (enforced, enforced_store) = local(3, Duration::from_secs(60));
    let (shadow, shadow_store) = local(1, Duration::from_secs(60));
    let k = Key::custom(b"k");
    let charges = [Charge::new(&shadow_store, &k, 1).shadow(true), Charge::new(&enforced_store, &k, 1)];
    assert!(charges[0].is_shadow() && !charges[1].is_shadow());
    let first = check_all(&charges).await;
    assert!(first.is_admitted() && first.decision(0).unwrap().is_allowed());
    let second = check_all(&charges).await;
    assert!(second.is_admitted(), "a shadow refusal refuses nothing: {second:?}");
    assert!(second.decision(0).unwrap().is_denied(), "and is reported");
    assert_eq!((used(&shadow, &k), used(&enforced, &k)), (1, 2));

    // The enforced limit refuses: the shadow limit's admission is given back.
    let (tight, tight_store) = local(1, Duration::from_secs(60));
    let (roomy, roomy_store) = local(10, Duration::from_secs(60));
    let charges = [Charge::new(&roomy_store, &k, 1).shadow(true), Charge::new(&tight_store, &k, 1)];
    assert!(check_all(&charges).await.is_admitted());
    let refused = check_all(&charges).await;
    assert!(matches!(refused.outcome(), Outcome::Refused { limit: 1, .. }), "{refused:?}");
    assert_eq!((used(&roomy, &k), used(&tight, &k)), (1, 1));
}

/// A cost above what a store ever admits is its own answer, not a wait; a shadow
/// limit's is only logged.
#[tokio::test(flavor = "current_thread")]
async fn a_cost_above_the_quota_is_its_own_outcome() {
    let (first, first_store) = local(10, Duration::from_secs(60));
    let (_, small) = local(3, Duration::from_secs(60));
    let k = Key::custom(b"k");
    let checked = check_all(&[Charge::new(&first_store, &k, 4), Charge::new(&small, &k, 4)]).await;
    assert!(matches!(checked.outcome(), Outcome::AboveQuota { limit: 1, cost: 4, most: 3 }), "{checked:?}");
    assert_eq!(used(&first, &k), 0, "given back");
    let shadow = check_all(&[Charge::new(&first_store, &k, 4), Charge::new(&small, &k, 4).shadow(true)]).await;
    assert!(shadow.is_admitted() && shadow.decision(1).is_none(), "{shadow:?}");
    assert_eq!(used(&first, &k), 4);
}

/// A store that fails makes the request unavailable, and what was charged is given
/// back; a shadow store's failure is only logged.
#[tokio::test(flavor = "current_thread")]
async fn a_failed_store_gives_back_what_others_charged() {
    let (minute, store) = local(10, Duration::from_secs(60));
    let failing = Store::remote(Remote::failing(10));
    let k = Key::custom(b"k");
    let checked = check_all(&[Charge::new(&store, &k, 1), Charge::new(&failing, &k, 1)]).await;
    assert!(matches!(checked.outcome(), Outcome::Unavailable { limit: 1, retry_after: None, .. }), "{checked:?}");
    assert_eq!(used(&minute, &k), 0);
    let shadow = check_all(&[Charge::new(&store, &k, 1), Charge::new(&failing, &k, 1).shadow(true)]).await;
    assert!(shadow.is_admitted() && shadow.decision(1).is_none(), "{shadow:?}");
    assert_eq!(used(&minute, &k), 1);
}

/// A store full of other keys refuses for its capacity: a refusal whose decision
/// says so (not an outage), with the store's wait.
#[tokio::test(flavor = "current_thread")]
async fn a_full_store_refuses_for_its_capacity() {
    let config = KeyedConfig::builder(1)
        .at_capacity(AtCapacity::Deny)
        .capacity_retry_after(Duration::from_secs(5))
        .build()
        .unwrap();
    let full =
        KeyedFixedWindow::<Key, _>::fixed_window_with_clock(Quota::per_minute(5).unwrap(), config, ManualClock::new())
            .unwrap();
    let store = Store::local(full);
    assert!(check_all(&[Charge::new(&store, &Key::custom(b"first"), 1)]).await.is_admitted());
    let checked = check_all(&[Charge::new(&store, &Key::custom(b"second"), 1)]).await;
    let Outcome::Refused { limit: 0, retry_after } = *checked.outcome() else { panic!("{checked:?}") };
    assert_eq!(retry_after, Duration::from_secs(5));
    assert_eq!(checked.decision(0).unwrap().deny_reason(), Some(DenyReason::KeyCapacity));
}

/// Dropped at each of its awaits, a check leaves nothing taken (once the task it
/// hands its remote admissions to has run): neither in memory, nor remotely, nor a
/// remote check in flight; run to its end, it charges each limit once.
#[tokio::test(flavor = "current_thread")]
async fn a_dropped_check_leaves_nothing_taken() {
    for refused in [false, true] {
        let (minute, store) = local(10, Duration::from_secs(60));
        let (remote, later) = (Remote::new(10), Remote::new(if refused { 0 } else { 10 }));
        let (remote_store, later_store) = (Store::remote(remote.clone()), Store::remote(later.clone()));
        let k = Key::custom(b"k");
        let cuts = each_cancellation(
            || async {
                let charges =
                    [Charge::new(&store, &k, 1), Charge::new(&remote_store, &k, 2), Charge::new(&later_store, &k, 3)];
                check_all(&charges).await.is_admitted()
            },
            async |polls, finished| {
                settle().await;
                let charged = u64::from(finished && !refused);
                let taken = (used(&minute, &k), remote.used(&k), later.used(&k));
                assert_eq!(taken, (charged, 2 * charged, 3 * charged), "refused: {refused}, {polls} polls");
            },
        )
        .await;
        assert!(cuts > 3, "the check was dropped at each of its awaits: {cuts}");
    }
}

/// A check dropped with no tokio runtime running (another executor) keeps the
/// in-memory guarantee: its in-memory admissions are given back in the drop.
#[test]
fn a_check_dropped_off_a_runtime_gives_back_in_memory_admissions() {
    let (minute, store) = local(10, Duration::from_secs(60));
    let remote_store = Store::remote(Remote::new(10));
    let k = Key::custom(b"k");
    let charges = [Charge::new(&store, &k, 1), Charge::new(&remote_store, &k, 1)];
    let mut future = Box::pin(check_all(&charges));
    let waker = std::task::Waker::noop();
    let mut cx = std::task::Context::from_waker(waker);
    // The first poll charges the store in memory and parks on the remote check
    // (whose yield needs no runtime to be polled, only to be woken).
    let _ = future.as_mut().poll(&mut cx);
    assert_eq!(used(&minute, &k), 1);
    drop(future);
    assert_eq!(used(&minute, &k), 0);
}

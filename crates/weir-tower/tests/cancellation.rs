//! The layer's response future dropped at each of its awaits
//! (`weir_testkit::each_cancellation`), as a server drops it when its client goes
//! away: with an in-memory store, with layered limits over remote (async) stores
//! and an in-memory one, on the admitted and on the refused path, and with a
//! throttle wait (and a wait in a second throttle). After each drop: no place left
//! in a throttle's line, no turn kept in an earlier throttle, nothing held in an
//! in-memory store, and, once the task the drop hands them to has run, nothing in a
//! remote store (its admissions, and a check in flight, given back); and the next
//! request decided as those say.

use bytes::Bytes;
use core::convert::Infallible;
use core::future::Future;
use http::{Request, Response, StatusCode};
use std::cell::{Cell, RefCell};
use std::rc::Rc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tower::{ServiceExt, service_fn};
use weir_keyed::{KeyedConfig, KeyedFixedWindow};
use weir_rl_core::{
    AsyncKeyedLimiter, Decision, InsufficientCapacity, KeyedLimiter, ManualClock, Policy as QuotaPolicy, Quota,
    Snapshot,
};
use weir_testkit::each_cancellation;
use weir_tower::{Key, KeySource, KeyedThrottle, Limit, Policy, RateLimitLayer, Store};

/// A remote store of `limit` for every key together: a check is charged when it is
/// sent (as a Redis script runs when it arrives), and its reply comes two yields
/// later; a refund is applied when it is sent, its reply a yield later.
struct Remote {
    policy: [QuotaPolicy; 1],
    used: Mutex<u64>,
    checks: AtomicU64,
}

#[derive(Clone)]
struct RemoteStore(Arc<Remote>);

impl RemoteStore {
    fn new(limit: u64) -> Self {
        Self(Arc::new(Remote {
            policy: [QuotaPolicy::new(limit, Duration::from_secs(60))],
            used: Mutex::new(0),
            checks: AtomicU64::new(0),
        }))
    }

    fn used(&self) -> u64 {
        *self.0.used.lock().unwrap()
    }
}

impl AsyncKeyedLimiter<Key> for RemoteStore {
    type Error = InsufficientCapacity;

    async fn check_n(&self, _: &Key, n: u64) -> Result<Decision, InsufficientCapacity> {
        // Ordering: Relaxed; a count read by the test's own thread.
        self.0.checks.fetch_add(1, Ordering::Relaxed);
        let limit = self.0.policy[0].limit();
        let decision = {
            let mut used = self.0.used.lock().unwrap();
            if *used + n > limit {
                Decision::denied(Snapshot::new(limit, limit - *used, 1_000_000_000), 1_000_000_000)
            } else {
                *used += n;
                Decision::allowed(Snapshot::new(limit, limit - *used, 1_000_000_000))
            }
        };
        tokio::task::yield_now().await;
        tokio::task::yield_now().await;
        Ok(decision)
    }

    async fn refund(&self, _: &Key, n: u64, _: &Decision) -> Result<(), InsufficientCapacity> {
        {
            let mut used = self.0.used.lock().unwrap();
            *used = used.saturating_sub(n);
        }
        tokio::task::yield_now().await;
        Ok(())
    }

    fn snapshot(&self, _: &Key) -> impl Future<Output = Result<Snapshot, InsufficientCapacity>> + Send {
        let limit = self.0.policy[0].limit();
        let used = self.used();
        async move { Ok(Snapshot::new(limit, limit - used, 0)) }
    }

    fn policies(&self) -> &[QuotaPolicy] {
        &self.0.policy
    }
}

/// Lets the tasks a dropped request spawned (to give back remote admissions) run.
async fn settle() {
    for _ in 0..10 {
        tokio::task::yield_now().await;
    }
}

/// A fixed window of `limit` per minute on a clock that does not move.
fn local(limit: u64) -> Arc<KeyedFixedWindow<Key, ManualClock>> {
    let config = KeyedConfig::builder(100).build().unwrap();
    Arc::new(
        KeyedFixedWindow::fixed_window_with_clock(Quota::per_minute(limit).unwrap(), config, ManualClock::new())
            .unwrap(),
    )
}

fn used(store: &KeyedFixedWindow<Key, ManualClock>) -> u64 {
    KeyedLimiter::<Key>::policies(store)[0].limit() - KeyedLimiter::<Key>::snapshot(store, &Key::global()).remaining()
}

thread_local! {
    /// How many requests reached the service on this thread: each test runs on its
    /// own thread (current-thread runtimes), so tests run at once do not count each
    /// other's requests.
    static SERVED: Cell<u64> = const { Cell::new(0) };
}

fn served() -> u64 {
    SERVED.with(Cell::get)
}

/// A request through `layer` around a service that yields twice before it answers
/// (so that the service's own future has awaits too), counting the requests that
/// reach it in [`SERVED`]: the whole of what a server runs for one request,
/// `poll_ready` and `call` included.
fn request(layer: &RateLimitLayer) -> impl Future<Output = Response<Bytes>> + use<> {
    let service = tower::Layer::layer(
        layer,
        service_fn(|_: Request<()>| {
            SERVED.with(|served| served.set(served.get() + 1));
            async {
                tokio::task::yield_now().await;
                tokio::task::yield_now().await;
                Ok::<_, Infallible>(Response::new(Bytes::from_static(b"ok")))
            }
        }),
    );
    async move { service.oneshot(Request::get("/").body(()).unwrap()).await.unwrap() }
}

/// A policy of in-memory stores is decided in `call`: once called, the request is
/// admitted, and its admission stands whenever its future is dropped (it reached
/// the service, or was about to); dropped before its first poll, it was never
/// decided and costs nothing.
#[tokio::test(flavor = "current_thread")]
async fn an_in_memory_decision_stands_once_made() {
    let store = local(100);
    let limit = Limit::new(KeySource::global(), Store::local(Arc::clone(&store)));
    let layer = RateLimitLayer::new(Policy::builder("api").limit(limit).build().unwrap());
    let mut decided = 0;
    let cuts = each_cancellation(
        || request(&layer),
        async |k, finished| {
            decided += u64::from(k > 0);
            assert_eq!(used(&store), decided, "dropped after {k} polls (finished: {finished})");
        },
    )
    .await;
    assert!(cuts >= 3, "{cuts}");
}

/// Layered limits: remote, in memory, remote (the all-or-nothing check of async
/// stores). Dropped at any await before the service is called, the in-memory store
/// holds nothing (its admission is given back by the drop), and each remote store
/// nothing once the task the drop spawned has given back its admission (or the
/// check it had in flight); once the service is called, the request was admitted
/// by all three, and stays so.
#[tokio::test(flavor = "current_thread")]
async fn layered_limits_over_remote_stores_hold_nothing_in_memory_after_a_drop() {
    struct Run {
        layer: RateLimitLayer,
        first: RemoteStore,
        middle: Arc<KeyedFixedWindow<Key, ManualClock>>,
        last: RemoteStore,
        served: u64,
    }
    let current: Rc<RefCell<Option<Run>>> = Rc::new(RefCell::new(None));
    let cuts = each_cancellation(
        || {
            let (first, last) = (RemoteStore::new(10), RemoteStore::new(10));
            let middle = local(1);
            let policy = Policy::builder("api")
                .limit(Limit::new(KeySource::global(), Store::remote(first.clone())))
                .limit(Limit::new(KeySource::global(), Store::local(Arc::clone(&middle))))
                .limit(Limit::new(KeySource::global(), Store::remote(last.clone())))
                .build()
                .unwrap();
            let layer = RateLimitLayer::new(policy);
            let future = request(&layer);
            *current.borrow_mut() = Some(Run { layer, first, middle, last, served: served() });
            future
        },
        async |k, finished| {
            let Run { layer, first, middle, last, served: before } = current.borrow_mut().take().unwrap();
            let (a, b, c) = (first.used(), used(&middle), last.used());
            if finished || served() > before {
                assert_eq!((a, b, c), (1, 1, 1), "admitted by all three (poll {k}, finished: {finished})");
                // The in-memory unit is spent: the next request is refused, and its
                // refusal consumes nothing from the remote stores (the first store's
                // admission is given back; the last is asked for its wait and gives
                // back what it took).
                assert_eq!(request(&layer).await.status(), StatusCode::TOO_MANY_REQUESTS);
                assert_eq!((first.used(), last.used()), (1, 1));
                return;
            }
            assert_eq!(b, 0, "the in-memory admission held after a drop at poll {k}");
            assert!(a <= 1 && c <= 1, "at most the check already sent (poll {k})");
            settle().await;
            assert_eq!((first.used(), last.used()), (0, 0), "given back by the task (poll {k})");
            // The next request decides as these say: admitted by the in-memory unit.
            assert_eq!(request(&layer).await.status(), StatusCode::OK);
        },
    )
    .await;
    // Each remote check has two awaits, the service two.
    assert!(cuts >= 6, "{cuts}");
}

/// The refused path: the in-memory limit is spent, so every request is refused
/// after the first remote store admitted it, which is given back (a remote refund:
/// an await), and the last remote store is asked for its wait (a check and a
/// refund: more awaits). Dropped at any of them, each remote store keeps nothing
/// once the task the drop spawned has run.
#[tokio::test(flavor = "current_thread")]
async fn a_refusal_dropped_while_it_gives_back_keeps_at_most_what_was_sent() {
    let (first, last) = (RemoteStore::new(10), RemoteStore::new(10));
    let middle = local(1);
    assert!(KeyedLimiter::<Key>::check_n(&*middle, &Key::global(), 1).unwrap().is_allowed());
    let policy = Policy::builder("api")
        .limit(Limit::new(KeySource::global(), Store::remote(first.clone())))
        .limit(Limit::new(KeySource::global(), Store::local(Arc::clone(&middle))))
        .limit(Limit::new(KeySource::global(), Store::remote(last.clone())))
        .build()
        .unwrap();
    let layer = RateLimitLayer::new(policy);
    let cuts = each_cancellation(
        || request(&layer),
        async |k, finished| {
            assert_eq!(used(&middle), 1, "poll {k}");
            if finished {
                assert_eq!((first.used(), last.used()), (0, 0), "a refusal consumes nothing");
                return;
            }
            assert!(first.used() <= 1 && last.used() <= 1, "at most the check in flight (poll {k})");
            settle().await;
            assert_eq!((first.used(), last.used()), (0, 0), "given back by the task (poll {k})");
        },
    )
    .await;
    assert!(cuts >= 4, "{cuts}");
}

/// A throttle wait: the request was admitted by the in-memory limit, then waits
/// its turn. Dropped while it waits, it leaves the line (no waiter left behind),
/// the in-memory admission is given back, and the next request waits no longer
/// than one emission interval.
#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn a_throttle_wait_dropped_leaves_the_line_and_gives_back_what_it_held() {
    struct Run {
        layer: RateLimitLayer,
        store: Arc<KeyedFixedWindow<Key, ManualClock>>,
        throttle: Arc<KeyedThrottle>,
        served: u64,
    }
    let fresh = || {
        let store = local(100);
        let throttle = Arc::new(KeyedThrottle::builder(Quota::per_second(1).unwrap(), 4).build().unwrap());
        let policy = Policy::builder("api")
            .limit(Limit::throttle_shared(KeySource::global(), Arc::clone(&throttle)))
            .limit(Limit::new(KeySource::global(), Store::local(Arc::clone(&store))))
            .build()
            .unwrap();
        Run { layer: RateLimitLayer::new(policy), store, throttle, served: served() }
    };
    let current: Rc<RefCell<Option<Run>>> = Rc::new(RefCell::new(None));
    let cuts = each_cancellation(
        || {
            // Each cut on fresh limits whose throttle has just admitted one request,
            // so that this one waits a whole interval.
            let run = fresh();
            let first = request(&run.layer);
            let next = request(&run.layer);
            *current.borrow_mut() = Some(run);
            async move {
                assert_eq!(first.await.status(), StatusCode::OK);
                next.await
            }
        },
        async |k, finished| {
            let run = current.borrow_mut().take().unwrap();
            assert_eq!(run.throttle.waiting(&Key::global()), 0, "a waiter left in line after poll {k}");
            let admitted = used(&run.store);
            if finished {
                assert_eq!(admitted, 2, "both admitted");
                return;
            }
            assert_eq!(
                admitted,
                served() - run.served,
                "only a request the service saw keeps its admission (poll {k})"
            );
            // The next request waits at most one interval from now.
            let start = tokio::time::Instant::now();
            assert_eq!(request(&run.layer).await.status(), StatusCode::OK);
            assert!(start.elapsed() <= Duration::from_secs(1), "waited {:?} after poll {k}", start.elapsed());
        },
    )
    .await;
    assert!(cuts >= 4, "{cuts}");
}

/// A tier lookup that waits (a database call), after an in-memory limit admitted the
/// request: dropped while the lookup waits, the in-memory admission is given back
/// and the tier's store holds nothing; the next request is decided as if the
/// dropped one had never come.
#[tokio::test(flavor = "current_thread")]
async fn a_tier_lookup_dropped_gives_back_what_the_earlier_limits_took() {
    struct Run {
        layer: RateLimitLayer,
        per_client: Arc<KeyedFixedWindow<Key, ManualClock>>,
        tier: Arc<KeyedFixedWindow<Key, ManualClock>>,
        served: u64,
    }
    let current: Rc<RefCell<Option<Run>>> = Rc::new(RefCell::new(None));
    let cuts = each_cancellation(
        || {
            let (per_client, tier) = (local(1), local(10));
            let tiers = weir_tower::Tiers::builder(|_: Key| async {
                tokio::task::yield_now().await;
                tokio::task::yield_now().await;
                Ok::<_, Infallible>("free")
            })
            .tier("free", Store::local(Arc::clone(&tier)))
            .build()
            .unwrap();
            let policy = Policy::builder("api")
                .limit(Limit::new(KeySource::global(), Store::local(Arc::clone(&per_client))))
                .limit(Limit::tiered(KeySource::global(), tiers))
                .build()
                .unwrap();
            let layer = RateLimitLayer::new(policy);
            let future = request(&layer);
            *current.borrow_mut() = Some(Run { layer, per_client, tier, served: served() });
            future
        },
        async |k, finished| {
            let Run { layer, per_client, tier, served: before } = current.borrow_mut().take().unwrap();
            let admitted = served() - before;
            assert_eq!((used(&per_client), used(&tier)), (admitted, admitted), "poll {k} (finished: {finished})");
            let next = request(&layer).await.status();
            let want = if admitted == 1 { StatusCode::TOO_MANY_REQUESTS } else { StatusCode::OK };
            assert_eq!(next, want, "the next request after poll {k}");
        },
    )
    .await;
    assert!(cuts >= 4, "{cuts}");
}

/// Two throttles: the request passes throttle A (1 per minute, idle) at once, then
/// waits its turn in throttle B (1 per second, whose turn another layer's request
/// has just taken). Dropped at any await before its decision, it leaves no waiter
/// in either line and gives A's turn back: the next request through A goes within
/// B's one interval, not a minute later. (Once the service is called, the request
/// is admitted for good, and A's turn spent.)
#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn a_request_dropped_in_a_second_throttle_gives_back_its_turn_in_the_first() {
    struct Run {
        layer: RateLimitLayer,
        a: Arc<KeyedThrottle>,
        b: Arc<KeyedThrottle>,
        served: u64,
    }
    let fresh = || {
        let a = Arc::new(KeyedThrottle::builder(Quota::per_minute(1).unwrap(), 4).build().unwrap());
        let b = Arc::new(KeyedThrottle::builder(Quota::per_second(1).unwrap(), 4).build().unwrap());
        let policy = Policy::builder("api")
            .limit(Limit::throttle_shared(KeySource::global(), Arc::clone(&a)))
            .limit(Limit::throttle_shared(KeySource::global(), Arc::clone(&b)))
            .build()
            .unwrap();
        let only_b = Policy::builder("b").limit(Limit::throttle_shared(KeySource::global(), Arc::clone(&b)));
        (
            Run { layer: RateLimitLayer::new(policy), a, b, served: served() },
            RateLimitLayer::new(only_b.build().unwrap()),
        )
    };
    let current: Rc<RefCell<Option<Run>>> = Rc::new(RefCell::new(None));
    let cuts = each_cancellation(
        || {
            let (run, only_b) = fresh();
            let first = request(&only_b);
            let next = request(&run.layer);
            *current.borrow_mut() = Some(run);
            async move {
                assert_eq!(first.await.status(), StatusCode::OK);
                next.await
            }
        },
        async |k, finished| {
            let run = current.borrow_mut().take().unwrap();
            assert_eq!((run.a.waiting(&Key::global()), run.b.waiting(&Key::global())), (0, 0), "poll {k}");
            if finished || served() - run.served == 2 {
                return; // admitted (the service was called): A's turn is spent, as it should be
            }
            let start = tokio::time::Instant::now();
            assert_eq!(request(&run.layer).await.status(), StatusCode::OK);
            assert!(start.elapsed() <= Duration::from_secs(1), "waited {:?} after poll {k}", start.elapsed());
            tokio::time::advance(Duration::from_secs(120)).await;
        },
    )
    .await;
    assert!(cuts >= 3, "{cuts}");
}

//! Waiting instead of being rejected: [`until_ready`] and [`until_key_ready`] wait
//! until a limiter admits, up to a deadline; [`FifoWait`] makes the waiters of each
//! key take their turns in arrival order.
//!
//! A wait is a loop off the check path: check; if denied, sleep for the decision's
//! `retry_after` and check again. It gives up *at once* when the decision says the
//! request cannot be admitted by the deadline (the retry time is past it), rather
//! than sleep to find out. The sleeps are tokio's, so under paused time
//! (`#[tokio::test(start_paused = true)]`) a limiter on a
//! [`TokioClock`](weir_rl_core::TokioClock) is tested to the nanosecond without sleeping.
//!
//! **Deadlines.** A deadline is a tokio [`Instant`] (re-exported here), not the
//! limiter's [`Nanos`](weir_rl_core::Nanos): the waits sleep on tokio's timer, which
//! counts in its `Instant`s (and pauses with it in tests), and the limiter's clock
//! may be any clock, whose origin tokio does not know. (weir-leaky's `Throttle` is
//! the other way round: it schedules on its own clock, so its `acquire_deadline`
//! takes `Nanos` of that clock.) To wait at most a [`Duration`], use
//! [`until_ready_timeout`] or [`until_key_ready_timeout`].
//!
//! **Order.** Plain waits are not ordered: a waiter woken at its retry time competes
//! with requests arriving then (one that checks first takes the capacity; the waiter
//! sleeps again). [`FifoWait`] orders the waiters of one key: only the head of a
//! key's line checks; the others wait behind it in arrival order (tokio's fair mutex),
//! and a waiter that gives up or is dropped (its client went away) leaves the line.
//! Checks made directly on the limiter, not through the `FifoWait`, are not ordered
//! with the line. For a line that also paces, use weir-leaky's `Throttle` (the
//! middleware's throttle mode).
//!
//! **Cancellation.** A wait dropped at any await (its client went away) leaves no
//! place in a line. Over an in-memory limiter ([`until_ready`], or
//! [`until_key_ready`] over an in-memory store) it consumed nothing: a check that
//! admits ends the wait in the same poll. Over a store whose check awaits (a remote
//! store, such as Redis, charges a check when it arrives), a wait dropped while a
//! check is in flight may have consumed what that check admits (at most `n`, one
//! check's worth): the reply that would say so, and end the wait, never comes.
//!
//! ```
//! use std::time::Duration;
//! use weir_rl_core::{Limiter, Quota, TokioClock};
//! use weir_gcra::Gcra;
//! use weir_http::wait::until_ready;
//!
//! # #[tokio::main(flavor = "current_thread", start_paused = true)]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let limiter = Gcra::with_clock(Quota::per_second(10)?, TokioClock::new());
//! let start = tokio::time::Instant::now();
//! for _ in 0..10 {
//!     assert!(limiter.check().is_allowed()); // the burst
//! }
//! let deadline = start + Duration::from_secs(1);
//! until_ready(&limiter, 1, deadline).await?; // waits 100 ms for the next token
//! assert_eq!(start.elapsed(), Duration::from_millis(100));
//! let too_late = until_ready(&limiter, 1, start + Duration::from_millis(150)).await;
//! assert!(too_late.is_err()); // its turn (200 ms) is past the deadline: gives up at once
//! assert_eq!(start.elapsed(), Duration::from_millis(100));
//! # Ok(())
//! # }
//! ```

use core::fmt;
use core::hash::Hash;
use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;
use weir_rl_core::{AsyncKeyedLimiter, Decision, InsufficientCapacity, Limiter};

/// The deadlines of these waits: tokio's `Instant` (re-exported), since the waits
/// sleep on tokio's timer (see the [module docs](self)).
pub use tokio::time::Instant;

/// Why a wait ended without an admission.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum WaitError<E> {
    /// The request could not be admitted by the deadline. `decision` is the last
    /// denial, when a check was made (its `retry_after` says when it would have been
    /// admitted); `None` when the deadline passed while waiting in line.
    Deadline {
        /// The last denial.
        decision: Option<Decision>,
    },
    /// The limiter failed (for an in-memory limiter: `n` above what it can ever
    /// admit at once).
    Limiter(E),
}

impl<E: fmt::Display> fmt::Display for WaitError<E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Deadline { decision: Some(d) } => {
                write!(f, "not admitted by the deadline (admissible in {:?})", d.retry_after().unwrap_or_default())
            }
            Self::Deadline { decision: None } => f.write_str("the deadline passed while waiting in line"),
            Self::Limiter(e) => write!(f, "the limiter failed: {e}"),
        }
    }
}

impl<E: fmt::Debug + fmt::Display> std::error::Error for WaitError<E> {}

/// How long to sleep after `denial` before checking again, or the error if that is
/// past `deadline`.
fn sleep_for<E>(denial: Decision, deadline: Instant) -> Result<Duration, WaitError<E>> {
    // A denial with no time to wait (a store full of keys, say) is checked again
    // after a millisecond rather than at once.
    let wait = denial.retry_after().unwrap_or_default().max(Duration::from_millis(1));
    match Instant::now().checked_add(wait) {
        Some(at) if at <= deadline => Ok(wait),
        _ => Err(WaitError::Deadline { decision: Some(denial) }),
    }
}

/// Waits until `limiter` admits a request of cost `n`, up to `deadline` (a tokio
/// [`Instant`], for the reason the [module docs](self) give); returns the
/// admission. Not ordered with other waiters. [`until_ready_timeout`] takes a
/// [`Duration`] instead.
pub async fn until_ready<L: Limiter + ?Sized>(
    limiter: &L,
    n: u64,
    deadline: Instant,
) -> Result<Decision, WaitError<InsufficientCapacity>> {
    loop {
        let decision = limiter.check_n(n).map_err(WaitError::Limiter)?;
        if decision.is_allowed() {
            return Ok(decision);
        }
        tokio::time::sleep(sleep_for(decision, deadline)?).await;
    }
}

/// Waits until `store` admits a request of cost `n` for `key`, up to `deadline` (a
/// tokio [`Instant`], as for [`until_ready`]); returns the admission. Not ordered
/// with other waiters (see [`FifoWait`]). [`until_key_ready_timeout`] takes a
/// [`Duration`] instead.
pub async fn until_key_ready<K, S>(
    store: &S,
    key: &K,
    n: u64,
    deadline: Instant,
) -> Result<Decision, WaitError<S::Error>>
where
    K: ?Sized + Sync,
    S: AsyncKeyedLimiter<K> + ?Sized,
{
    loop {
        let decision = store.check_n(key, n).await.map_err(WaitError::Limiter)?;
        if decision.is_allowed() {
            return Ok(decision);
        }
        tokio::time::sleep(sleep_for(decision, deadline)?).await;
    }
}

/// The deadline `timeout` from now; a timeout too long for an `Instant` is 30 years.
fn deadline_in(timeout: Duration) -> Instant {
    let now = Instant::now();
    now.checked_add(timeout).or_else(|| now.checked_add(Duration::from_secs(30 * 365 * 86_400))).unwrap_or(now)
}

/// [`until_ready`] for at most `timeout` from now.
///
/// ```
/// use std::time::Duration;
/// use weir_rl_core::{Limiter, Quota, TokioClock};
/// use weir_gcra::Gcra;
/// use weir_http::wait::{WaitError, until_ready_timeout};
///
/// # #[tokio::main(flavor = "current_thread", start_paused = true)]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let limiter = Gcra::with_clock(Quota::per_second(10)?, TokioClock::new());
/// while limiter.check().is_allowed() {} // the burst, spent
/// until_ready_timeout(&limiter, 1, Duration::from_millis(100)).await?; // its turn: 100 ms
/// let e = until_ready_timeout(&limiter, 1, Duration::from_millis(50)).await.unwrap_err();
/// assert!(matches!(e, WaitError::Deadline { .. })); // next turn in 100 ms: past 50
/// # Ok(())
/// # }
/// ```
pub async fn until_ready_timeout<L: Limiter + ?Sized>(
    limiter: &L,
    n: u64,
    timeout: Duration,
) -> Result<Decision, WaitError<InsufficientCapacity>> {
    until_ready(limiter, n, deadline_in(timeout)).await
}

/// [`until_key_ready`] for at most `timeout` from now.
pub async fn until_key_ready_timeout<K, S>(
    store: &S,
    key: &K,
    n: u64,
    timeout: Duration,
) -> Result<Decision, WaitError<S::Error>>
where
    K: ?Sized + Sync,
    S: AsyncKeyedLimiter<K> + ?Sized,
{
    until_key_ready(store, key, n, deadline_in(timeout)).await
}

/// Per-key lines of waiters: the waiters of one key are admitted in the order they
/// arrived (see the [module docs](self)).
///
/// Lines exist only while someone waits in them: a key's line is made by its first
/// waiter and dropped by its last, under a mutex taken twice per wait (waiting is
/// not the hot path).
///
/// ```
/// use std::time::Duration;
/// use weir_rl_core::Quota;
/// use weir_keyed::{KeyedConfig, KeyedGcra};
/// use weir_http::wait::FifoWait;
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let per_user: KeyedGcra<String> = KeyedGcra::gcra(Quota::per_second(1)?, KeyedConfig::builder(10_000).build()?);
/// let lines: FifoWait<String> = FifoWait::new();
/// let deadline = tokio::time::Instant::now() + Duration::from_secs(2);
/// let admitted = lines.until_key_ready(&per_user, "alice", 1, deadline).await?;
/// assert!(admitted.is_allowed());
/// # Ok(())
/// # }
/// ```
pub struct FifoWait<K> {
    lines: Mutex<HashMap<K, Arc<tokio::sync::Mutex<()>>>>,
}

impl<K: Hash + Eq + Clone> FifoWait<K> {
    /// No lines yet.
    pub fn new() -> Self {
        Self { lines: Mutex::new(HashMap::new()) }
    }

    /// `key`'s line, joined (made if needed).
    fn join<Q>(&self, key: &Q) -> Arc<tokio::sync::Mutex<()>>
    where
        K: core::borrow::Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
    {
        let mut lines = self.lines.lock().unwrap_or_else(PoisonError::into_inner);
        match lines.get(key) {
            Some(line) => Arc::clone(line),
            None => {
                let line = Arc::new(tokio::sync::Mutex::new(()));
                lines.insert(key.to_owned(), Arc::clone(&line));
                line
            }
        }
    }

    /// Waits in `key`'s line, then (at its head) until `store` admits a request of
    /// cost `n`, all up to `deadline`.
    pub async fn until_key_ready<Q, S>(
        &self,
        store: &S,
        key: &Q,
        n: u64,
        deadline: Instant,
    ) -> Result<Decision, WaitError<S::Error>>
    where
        K: core::borrow::Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + Sync + ?Sized,
        S: AsyncKeyedLimiter<Q> + ?Sized,
    {
        let line = Place { lines: self, key, line: Some(self.join(key)) };
        let Some(head) = line.line.as_ref() else {
            return Err(WaitError::Deadline { decision: None });
        };
        // `timeout_at` polls the lock first: a free line is taken even past the deadline.
        let Ok(_head) = tokio::time::timeout_at(deadline, head.lock()).await else {
            return Err(WaitError::Deadline { decision: None });
        };
        until_key_ready(store, key, n, deadline).await
    }

    /// Keys with a line now (someone waiting or checking through it).
    pub fn len(&self) -> usize {
        self.lines.lock().unwrap_or_else(PoisonError::into_inner).len()
    }

    /// Whether nobody waits.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl<K: Hash + Eq + Clone> Default for FifoWait<K> {
    fn default() -> Self {
        Self::new()
    }
}

impl<K> fmt::Debug for FifoWait<K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let lines = self.lines.lock().unwrap_or_else(PoisonError::into_inner).len();
        f.debug_struct("FifoWait").field("lines", &lines).finish()
    }
}

/// A waiter's place in a key's line; on drop, the line is dropped with its last
/// waiter.
struct Place<'a, K, Q>
where
    K: Hash + Eq + core::borrow::Borrow<Q>,
    Q: Hash + Eq + ?Sized,
{
    lines: &'a FifoWait<K>,
    key: &'a Q,
    line: Option<Arc<tokio::sync::Mutex<()>>>,
}

impl<K, Q> Drop for Place<'_, K, Q>
where
    K: Hash + Eq + core::borrow::Borrow<Q>,
    Q: Hash + Eq + ?Sized,
{
    fn drop(&mut self) {
        let Some(line) = self.line.take() else { return };
        let mut lines = self.lines.lines.lock().unwrap_or_else(PoisonError::into_inner);
        // Lines are cloned only under this lock: two references (the map's and this
        // one) mean nobody else is in the line.
        if Arc::strong_count(&line) == 2 {
            lines.remove(self.key);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use weir_keyed::{KeyedConfig, KeyedGcra};
    use weir_rl_core::__private::sync::{AtomicU64, Ordering};
    use weir_rl_core::{KeyedLimiter, Local, Quota, TokioClock};

    /// A weir-keyed GCRA store on tokio's clock, counting its checks.
    struct PerKey {
        store: KeyedGcra<String, TokioClock>,
        checks: AtomicU64,
    }

    impl PerKey {
        fn new(quota: Quota) -> Self {
            let store =
                KeyedGcra::gcra_with_clock(quota, KeyedConfig::builder(100).build().unwrap(), TokioClock::new());
            Self { store, checks: AtomicU64::new(0) }
        }
    }

    impl KeyedLimiter<str> for PerKey {
        fn check_n(&self, key: &str, n: u64) -> Result<Decision, InsufficientCapacity> {
            // Ordering: Relaxed; a count read after the tasks are joined.
            self.checks.fetch_add(1, Ordering::Relaxed);
            KeyedLimiter::check_n(&self.store, key, n)
        }
        fn refund(&self, key: &str, n: u64, admission: &Decision) -> Result<(), InsufficientCapacity> {
            KeyedLimiter::refund(&self.store, key, n, admission)
        }
        fn snapshot(&self, key: &str) -> weir_rl_core::Snapshot {
            KeyedLimiter::snapshot(&self.store, key)
        }
        fn policies(&self) -> &[weir_rl_core::Policy] {
            KeyedLimiter::<str>::policies(&self.store)
        }
    }

    #[tokio::test(flavor = "current_thread", start_paused = true)]
    async fn a_timeout_is_a_deadline_that_far_from_now() {
        let store = Local(PerKey::new(Quota::per_second(2).unwrap()));
        let start = Instant::now();
        for _ in 0..2 {
            assert!(until_key_ready_timeout(&store, "k", 1, Duration::ZERO).await.is_ok());
        }
        let e = until_key_ready_timeout(&store, "k", 1, Duration::from_millis(499)).await.unwrap_err();
        assert!(matches!(e, WaitError::Deadline { decision: Some(_) }), "{e}");
        assert_eq!(start.elapsed(), Duration::ZERO, "gave up at once");
        // A timeout no `Instant` can hold waits as long as it takes.
        assert!(until_key_ready_timeout(&store, "k", 1, Duration::MAX).await.is_ok());
        assert_eq!(start.elapsed(), Duration::from_millis(500));
    }

    #[tokio::test(flavor = "current_thread", start_paused = true)]
    async fn a_key_waits_for_its_retry_time_or_gives_up_at_once() {
        let store = Local(PerKey::new(Quota::per_second(2).unwrap()));
        let start = Instant::now();
        for _ in 0..2 {
            assert!(until_key_ready(&store, "a", 1, start).await.unwrap().is_allowed()); // the burst: no wait
        }
        assert_eq!(start.elapsed(), Duration::ZERO);
        let d = until_key_ready(&store, "a", 1, start + Duration::from_secs(1)).await.unwrap();
        assert!(d.is_allowed());
        assert_eq!(start.elapsed(), Duration::from_millis(500));
        let late = until_key_ready(&store, "a", 1, start + Duration::from_millis(600)).await;
        assert!(matches!(late, Err(WaitError::Deadline { decision: Some(_) })));
        assert_eq!(start.elapsed(), Duration::from_millis(500), "gave up without sleeping");
        let too_big = until_key_ready(&store, "a", 3, start + Duration::from_secs(9)).await;
        assert_eq!(too_big, Err(WaitError::Limiter(InsufficientCapacity { requested: 3, capacity: 2 })));
    }

    #[tokio::test(flavor = "current_thread", start_paused = true)]
    async fn waiters_of_a_key_are_admitted_in_arrival_order() {
        let store = Local(PerKey::new(Quota::per_second(1).unwrap()));
        let lines: Arc<FifoWait<String>> = Arc::new(FifoWait::new());
        let deadline = Instant::now() + Duration::from_secs(10);
        assert!(lines.until_key_ready(&store, "k", 1, deadline).await.unwrap().is_allowed());
        let order = Arc::new(Mutex::new(Vec::new()));
        let store = Arc::new(store);
        let mut tasks = Vec::new();
        for i in 0..4 {
            let (lines, store, order) = (lines.clone(), store.clone(), order.clone());
            tasks.push(tokio::spawn(async move {
                assert!(lines.until_key_ready(&*store, "k", 1, deadline).await.unwrap().is_allowed());
                order.lock().unwrap().push(i);
            }));
            tokio::task::yield_now().await; // arrive in order
        }
        for task in tasks {
            task.await.unwrap();
        }
        assert_eq!(*order.lock().unwrap(), vec![0, 1, 2, 3]);
        // Only heads check: one check per admission, plus the head's denials.
        // Ordering: Relaxed; every task has been joined.
        assert!(store.0.checks.load(Ordering::Relaxed) <= 1 + 4 * 2);
        assert!(lines.is_empty(), "the last waiter dropped the line");
    }

    #[tokio::test(flavor = "current_thread", start_paused = true)]
    async fn a_waiter_dropped_in_line_leaves_it() {
        let store = Local(PerKey::new(Quota::per_second(1).unwrap()));
        let lines: FifoWait<String> = FifoWait::new();
        let far = Instant::now() + Duration::from_secs(100);
        assert!(lines.until_key_ready(&store, "k", 1, far).await.unwrap().is_allowed());
        {
            let head = lines.until_key_ready(&store, "k", 1, far);
            let behind = lines.until_key_ready(&store, "k", 1, far);
            let (mut head, mut behind) = (Box::pin(head), Box::pin(behind));
            assert!(futures_poll(&mut head).await.is_none());
            assert!(futures_poll(&mut behind).await.is_none());
            assert_eq!(lines.len(), 1);
        }
        assert!(lines.is_empty());
        let d = lines.until_key_ready(&store, "k", 1, Instant::now()).await;
        assert!(matches!(d, Err(WaitError::Deadline { .. })), "the bucket is still empty");
        tokio::time::advance(Duration::from_secs(1)).await;
        assert!(lines.until_key_ready(&store, "k", 1, Instant::now()).await.is_ok());
    }

    /// `until_ready`, `until_key_ready` and a `FifoWait` dropped at each of their
    /// awaits: a check that admits completes the wait in the same poll, so a dropped
    /// wait consumed nothing (after each cut, the limiter has as much left as a twin
    /// no one waited on, less the one a finished wait took); no line is left behind.
    #[tokio::test(flavor = "current_thread", start_paused = true)]
    async fn waits_dropped_at_any_await_consume_nothing_and_leave_no_line() {
        let gcra = || weir_gcra::Gcra::with_clock(Quota::per_second(2).unwrap(), TokioClock::new());
        let (limiter, twin) = (gcra(), gcra());
        let store = Local(PerKey::new(Quota::per_second(2).unwrap()));
        let lines: FifoWait<String> = FifoWait::new();
        let far = || Instant::now() + Duration::from_secs(60);
        // Spends everything left; how much that was, of the limiter, its twin, the
        // store's key "k" and its twin key.
        let spend = || {
            let drain = |check: &dyn Fn() -> bool| (0..).take_while(|_| check()).count();
            (
                drain(&|| limiter.check().is_allowed()),
                drain(&|| twin.check().is_allowed()),
                drain(&|| KeyedLimiter::check_n(&store.0, "k", 1).unwrap().is_allowed()),
                drain(&|| KeyedLimiter::check_n(&store.0, "twin", 1).unwrap().is_allowed()),
            )
        };
        spend();
        for wait in 0..3 {
            let cuts = weir_testkit::each_cancellation(
                || async {
                    match wait {
                        0 => until_ready(&limiter, 1, far()).await.map(|_| ()).map_err(|_| ()),
                        1 => until_key_ready(&store, "k", 1, far()).await.map(|_| ()).map_err(|_| ()),
                        _ => lines.until_key_ready(&store, "k", 1, far()).await.map(|_| ()).map_err(|_| ()),
                    }
                },
                async |k, finished| {
                    assert!(lines.is_empty(), "a line left after {k} polls of wait {wait}");
                    let (left, twin_left, key_left, twin_key_left) = spend();
                    let (mine, twins) = if wait == 0 { (left, twin_left) } else { (key_left, twin_key_left) };
                    assert_eq!(mine + usize::from(finished), twins, "wait {wait}, dropped after {k} polls");
                },
            )
            .await;
            assert!(cuts >= 2, "wait {wait}: {cuts}");
        }
    }

    /// A store whose check is charged when it is sent and answered a yield later,
    /// as a remote store's is: a wait dropped with its check in flight consumed what
    /// that check admitted (one unit), no more, and leaves no line.
    #[tokio::test(flavor = "current_thread", start_paused = true)]
    async fn a_wait_over_a_remote_store_dropped_mid_check_consumes_at_most_that_check() {
        #[derive(Clone)]
        struct Charged(Arc<Mutex<u64>>, [weir_rl_core::Policy; 1]);
        impl AsyncKeyedLimiter<str> for Charged {
            type Error = InsufficientCapacity;
            async fn check_n(&self, _: &str, n: u64) -> Result<Decision, InsufficientCapacity> {
                let decision = {
                    let mut used = self.0.lock().unwrap();
                    *used += n;
                    Decision::allowed(weir_rl_core::Snapshot::new(10, 10 - *used, 1_000_000_000))
                };
                tokio::task::yield_now().await;
                Ok(decision)
            }
            async fn refund(&self, _: &str, n: u64, _: &Decision) -> Result<(), InsufficientCapacity> {
                *self.0.lock().unwrap() -= n;
                Ok(())
            }
            fn snapshot(
                &self,
                _: &str,
            ) -> impl core::future::Future<Output = Result<weir_rl_core::Snapshot, InsufficientCapacity>> + Send
            {
                let used = *self.0.lock().unwrap();
                async move { Ok(weir_rl_core::Snapshot::new(10, 10 - used, 0)) }
            }
            fn policies(&self) -> &[weir_rl_core::Policy] {
                &self.1
            }
        }
        let store = Charged(Arc::new(Mutex::new(0)), [weir_rl_core::Policy::new(10, Duration::from_secs(60))]);
        let deadline = Instant::now() + Duration::from_secs(5);
        let mut plain = Box::pin(until_key_ready(&store, "k", 1, deadline));
        assert!(futures_poll(&mut plain).await.is_none(), "its check is in flight");
        drop(plain);
        assert_eq!(*store.0.lock().unwrap(), 1, "the check sent");
        let lines: FifoWait<String> = FifoWait::new();
        let mut lined = Box::pin(lines.until_key_ready(&store, "k", 1, deadline));
        assert!(futures_poll(&mut lined).await.is_none());
        drop(lined);
        assert!(lines.is_empty(), "no line left");
        assert_eq!(*store.0.lock().unwrap(), 2, "one check each, no more");
    }

    async fn futures_poll<F: core::future::Future + Unpin>(f: &mut F) -> Option<F::Output> {
        core::future::poll_fn(|cx| {
            core::task::Poll::Ready(match core::pin::Pin::new(&mut *f).poll(cx) {
                core::task::Poll::Ready(v) => Some(v),
                core::task::Poll::Pending => None,
            })
        })
        .await
    }
}

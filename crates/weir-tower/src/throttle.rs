//! [`KeyedThrottle`]: throttle mode, where a request over the rate waits its turn
//! (FIFO, per key) up to a deadline instead of being rejected.

use crate::key::Key;
use core::fmt;
use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;
use weir_core::{Clock, Quota, TokioClock};
use weir_leaky::{BuildError, Throttle, ThrottleError};

/// Throttle mode for a [`Limit`](crate::Limit): each key gets a
/// [`weir_leaky::Throttle`], so its requests proceed one per emission interval of
/// `quota`, in the order they arrived; at most `capacity` wait per key, and none
/// longer than `max_wait` (by default, as long as its turn takes: at most about
/// `capacity` emission intervals). A request turned away (the line is full, or its
/// turn would come after `max_wait`) is answered 429 with a `Retry-After`.
///
/// A client that disconnects while waiting frees its place: the server drops the
/// request's future, which leaves the line (and gives back its slot, if it was at
/// the head).
///
/// Throttles live in a map of at most `max_keys` keys (default 10 000), under one
/// mutex taken once per request (waiting is not the hot path). When the map is full,
/// throttles nobody is using (no request waiting or holding one, and no slot claimed
/// ahead of now) are dropped, which changes no pacing; if none can be, a new key is
/// turned away.
///
/// Built by [`KeyedThrottle::builder`]. Throttles wait on tokio's timer and read
/// [`TokioClock`], as [`weir_leaky::Throttle`] does by default.
///
/// ```
/// use std::time::Duration;
/// use weir_core::Quota;
/// use weir_tower::KeyedThrottle;
///
/// // Two requests per second per client, up to 10 waiting, none waiting over 5 s.
/// let throttle = KeyedThrottle::builder(Quota::per_second(2)?, 10).max_wait(Duration::from_secs(5)).build()?;
/// # let _ = throttle;
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub struct KeyedThrottle {
    quota: Quota,
    capacity: usize,
    max_wait: Option<Duration>,
    max_keys: usize,
    throttles: Mutex<HashMap<Key, Arc<Throttle>>>,
}

/// Why a throttled request was turned away.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct TurnedAway {
    /// When to try again.
    pub(crate) retry_after: Duration,
}

/// Which [`KeyedThrottleBuilder`] option was refused, and why.
///
/// ```
/// use weir_core::Quota;
/// use weir_tower::{KeyedThrottle, KeyedThrottleError};
///
/// let error = KeyedThrottle::builder(Quota::per_second(2)?, 10).max_keys(0).build().unwrap_err();
/// assert_eq!(error, KeyedThrottleError::ZeroMaxKeys);
/// assert!(error.to_string().starts_with("max_keys"));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum KeyedThrottleError {
    /// The quota cannot pace a line: a burst other than its count, or an emission
    /// interval that is not a whole number of ticks (see the inner error).
    Quota(BuildError),
    /// The capacity was zero: no request could wait.
    Capacity(BuildError),
    /// [`max_keys`](KeyedThrottleBuilder::max_keys) was zero: no key could ever
    /// have a throttle.
    ZeroMaxKeys,
}

impl KeyedThrottleError {
    /// The option refused: `"quota"`, `"capacity"` or `"max_keys"`.
    pub fn option(&self) -> &'static str {
        match self {
            Self::Quota(_) => "quota",
            Self::Capacity(_) => "capacity",
            Self::ZeroMaxKeys => "max_keys",
        }
    }
}

impl fmt::Display for KeyedThrottleError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Quota(e) | Self::Capacity(e) => write!(f, "{}: {e}", self.option()),
            Self::ZeroMaxKeys => f.write_str("max_keys: a keyed throttle keeps at least one key's throttle, not 0"),
        }
    }
}

impl std::error::Error for KeyedThrottleError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Self::Quota(e) | Self::Capacity(e) => Some(e),
            Self::ZeroMaxKeys => None,
        }
    }
}

/// The options of a [`KeyedThrottle`]: setters that never fail, checked together by
/// [`build`](Self::build). From [`KeyedThrottle::builder`].
#[derive(Debug, Clone)]
#[must_use = "a builder does nothing until `build` is called"]
pub struct KeyedThrottleBuilder {
    quota: Quota,
    capacity: usize,
    max_wait: Option<Duration>,
    max_keys: usize,
}

impl KeyedThrottleBuilder {
    /// The longest a request waits for its turn; one whose turn would come later is
    /// turned away at once. Default: no deadline beyond the line's own bound (a
    /// request waits at most about `capacity` emission intervals).
    pub fn max_wait(self, max_wait: Duration) -> Self {
        Self { max_wait: Some(max_wait), ..self }
    }

    /// The most keys whose throttles are kept at once (at least 1). Default: 10 000.
    pub fn max_keys(self, n: usize) -> Self {
        Self { max_keys: n, ..self }
    }

    /// The keyed throttle, or the first option refused: [`KeyedThrottleError::Quota`]
    /// (a burst beyond the count, see [`weir_leaky::BuildError`]),
    /// [`KeyedThrottleError::Capacity`] (zero),
    /// [`KeyedThrottleError::ZeroMaxKeys`].
    pub fn build(self) -> Result<KeyedThrottle, KeyedThrottleError> {
        let Self { quota, capacity, max_wait, max_keys } = self;
        // Validates the quota and capacity once, as every key's throttle will.
        Throttle::with_clock(quota, capacity, weir_core::Nanos::ZERO).map_err(|e| match e {
            BuildError::BurstNotUsed { .. } | BuildError::FractionalInterval { .. } => KeyedThrottleError::Quota(e),
            _ => KeyedThrottleError::Capacity(e),
        })?;
        if max_keys == 0 {
            return Err(KeyedThrottleError::ZeroMaxKeys);
        }
        Ok(KeyedThrottle { quota, capacity, max_wait, max_keys, throttles: Mutex::new(HashMap::new()) })
    }
}

impl KeyedThrottle {
    /// The options of a keyed throttle pacing each key at one request per emission
    /// interval of `quota` (which must have no burst beyond its count), with at most
    /// `capacity` requests waiting per key; the others at their defaults.
    pub fn builder(quota: Quota, capacity: usize) -> KeyedThrottleBuilder {
        KeyedThrottleBuilder { quota, capacity, max_wait: None, max_keys: 10_000 }
    }

    /// The quota's rate.
    pub fn quota(&self) -> Quota {
        self.quota
    }

    /// The most requests waiting per key.
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// The longest a request waits (`None`: no deadline beyond the line's bound).
    pub fn max_wait(&self) -> Option<Duration> {
        self.max_wait
    }

    /// The most keys whose throttles are kept at once.
    pub fn max_keys(&self) -> usize {
        self.max_keys
    }

    /// Requests waiting for `key` now.
    pub fn waiting(&self, key: &Key) -> usize {
        let throttles = self.throttles.lock().unwrap_or_else(PoisonError::into_inner);
        throttles.get(key).map_or(0, |t| t.waiting())
    }

    /// Keys with a throttle now.
    pub fn len(&self) -> usize {
        self.throttles.lock().unwrap_or_else(PoisonError::into_inner).len()
    }

    /// Whether no key has a throttle.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// `key`'s throttle, made if needed; `None` if the map is full of throttles in use.
    fn throttle_of(&self, key: &Key) -> Result<Arc<Throttle>, TurnedAway> {
        let mut throttles = self.throttles.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(throttle) = throttles.get(key) {
            return Ok(Arc::clone(throttle));
        }
        if throttles.len() >= self.max_keys {
            // Clones are only made under this lock, so a count of one is exact: nobody
            // holds the throttle or can get it before it is dropped.
            throttles.retain(|_, t| {
                Arc::strong_count(t) > 1 || t.waiting() > 0 || t.schedule().next_slot(t.clock()) > t.clock().now()
            });
            if throttles.len() >= self.max_keys {
                return Err(TurnedAway { retry_after: self.quota.emission_interval() });
            }
        }
        let throttle = Throttle::with_clock(self.quota, self.capacity, TokioClock::new())
            .map_err(|_| TurnedAway { retry_after: self.quota.emission_interval() })?;
        let throttle = Arc::new(throttle);
        throttles.insert(key.clone(), Arc::clone(&throttle));
        Ok(throttle)
    }

    /// Waits for `key`'s turn, up to `max_wait`.
    pub(crate) async fn acquire(&self, key: &Key) -> Result<(), TurnedAway> {
        let throttle = self.throttle_of(key)?;
        let acquired = match self.max_wait {
            Some(max_wait) => throttle.acquire_timeout(max_wait).await,
            None => throttle.acquire().await,
        };
        match acquired {
            Ok(()) => Ok(()),
            Err(ThrottleError::Full { retry_after }) => Err(TurnedAway { retry_after }),
            Err(_) => {
                // Timed out: its turn would come after the deadline. The next free
                // slot is a fair hint.
                let clock = throttle.clock();
                let wait = throttle.schedule().next_slot(clock).saturating_duration_since(clock.now());
                Err(TurnedAway { retry_after: wait.max(self.quota.emission_interval()) })
            }
        }
    }
}

impl fmt::Debug for KeyedThrottle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("KeyedThrottle")
            .field("quota", &self.quota)
            .field("capacity", &self.capacity)
            .field("max_wait", &self.max_wait)
            .field("max_keys", &self.max_keys)
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(flavor = "current_thread", start_paused = true)]
    async fn requests_wait_their_turn_in_order_up_to_the_deadline() {
        let throttle = KeyedThrottle::builder(Quota::per_second(10).unwrap(), 2)
            .max_wait(Duration::from_millis(150))
            .build()
            .unwrap();
        let key = Key::user("a");
        let start = tokio::time::Instant::now();
        throttle.acquire(&key).await.unwrap(); // idle: at once
        let (b, c, d) = tokio::join!(throttle.acquire(&key), throttle.acquire(&key), throttle.acquire(&key));
        assert_eq!(b, Ok(()), "100 ms later");
        assert!(c.is_err(), "its turn (200 ms) is after its deadline (150 ms)");
        assert!(d.is_err(), "two were waiting: turned away");
        assert!(start.elapsed() <= Duration::from_millis(150));
        // Another key is not delayed.
        let now = tokio::time::Instant::now();
        throttle.acquire(&Key::user("b")).await.unwrap();
        assert_eq!(now.elapsed(), Duration::ZERO);
    }

    #[tokio::test(flavor = "current_thread", start_paused = true)]
    async fn a_waiter_that_goes_away_frees_its_place() {
        let throttle =
            KeyedThrottle::builder(Quota::per_second(1).unwrap(), 1).max_wait(Duration::from_secs(5)).build().unwrap();
        let key = Key::user("a");
        throttle.acquire(&key).await.unwrap();
        {
            let waiting = throttle.acquire(&key);
            let mut waiting = core::pin::pin!(waiting);
            assert!(futures_poll_once(waiting.as_mut()).await.is_none());
            assert_eq!(throttle.waiting(&key), 1);
            assert!(throttle.acquire(&key).await.is_err(), "the one place is taken");
        } // dropped: the client went away
        assert_eq!(throttle.waiting(&key), 0);
        throttle.acquire(&key).await.unwrap();
    }

    #[tokio::test(flavor = "current_thread", start_paused = true)]
    async fn idle_throttles_make_room_for_new_keys() {
        let throttle = KeyedThrottle::builder(Quota::per_second(1).unwrap(), 1)
            .max_wait(Duration::ZERO)
            .max_keys(2)
            .build()
            .unwrap();
        throttle.acquire(&Key::user("a")).await.unwrap();
        throttle.acquire(&Key::user("b")).await.unwrap();
        assert!(throttle.acquire(&Key::user("c")).await.is_err(), "a and b claimed slots ahead of now");
        tokio::time::advance(Duration::from_secs(1)).await;
        throttle.acquire(&Key::user("c")).await.unwrap();
        assert_eq!(throttle.len(), 1);
    }

    #[test]
    fn build_names_the_option_it_refuses() {
        let quota = Quota::per_second(1).unwrap();
        // Was silently raised to one key by `max_keys(0)`.
        assert_eq!(KeyedThrottle::builder(quota, 1).max_keys(0).build().unwrap_err(), KeyedThrottleError::ZeroMaxKeys);
        let e = KeyedThrottle::builder(quota, 0).build().unwrap_err();
        assert_eq!(e, KeyedThrottleError::Capacity(BuildError::ZeroCapacity));
        assert!(e.to_string().starts_with("capacity: "), "{e}");
        let e = KeyedThrottle::builder(quota.with_burst(5).unwrap(), 1).build().unwrap_err();
        assert!(matches!(e, KeyedThrottleError::Quota(BuildError::BurstNotUsed { burst: 5, count: 1 })), "{e:?}");
        assert_eq!(e.option(), "quota");
        let throttle = KeyedThrottle::builder(quota, 3).max_keys(1).build().unwrap();
        assert_eq!((throttle.capacity(), throttle.max_wait(), throttle.max_keys()), (3, None, 1));
    }

    #[tokio::test(flavor = "current_thread", start_paused = true)]
    async fn without_max_wait_a_request_waits_its_turn() {
        let throttle = KeyedThrottle::builder(Quota::per_second(1).unwrap(), 2).build().unwrap();
        let key = Key::user("a");
        let start = tokio::time::Instant::now();
        throttle.acquire(&key).await.unwrap();
        let (b, c) = tokio::join!(throttle.acquire(&key), throttle.acquire(&key));
        assert_eq!((b, c), (Ok(()), Ok(())));
        assert_eq!(start.elapsed(), Duration::from_secs(2), "one per second, in turn");
    }

    /// A wait for a turn dropped at each of its awaits leaves no waiter in line, and
    /// the next request's turn is as if the dropped one had never come: one emission
    /// interval after the last admitted.
    #[tokio::test(flavor = "current_thread", start_paused = true)]
    async fn a_wait_dropped_at_any_await_leaves_no_waiter_behind() {
        let throttle = KeyedThrottle::builder(Quota::per_second(1).unwrap(), 2).build().unwrap();
        let key = Key::user("a");
        let cuts = weir_testkit::each_cancellation(
            || async {
                throttle.acquire(&key).await.unwrap(); // takes the slot now
                throttle.acquire(&key).await // waits its turn
            },
            async |k, finished| {
                assert_eq!(throttle.waiting(&key), 0, "a waiter left after {k} polls");
                let start = tokio::time::Instant::now();
                throttle.acquire(&key).await.unwrap();
                let waited = start.elapsed();
                assert!(waited <= Duration::from_secs(if finished { 1 } else { 2 }), "{waited:?} after {k} polls");
                // Every cut starts on an idle throttle.
                tokio::time::advance(Duration::from_secs(5)).await;
            },
        )
        .await;
        assert!(cuts >= 3, "{cuts}");
    }

    /// Polls `f` once; `Some` if it completed.
    async fn futures_poll_once<F: core::future::Future + Unpin>(mut f: F) -> Option<F::Output> {
        core::future::poll_fn(|cx| {
            core::task::Poll::Ready(match core::pin::Pin::new(&mut f).poll(cx) {
                core::task::Poll::Ready(v) => Some(v),
                core::task::Poll::Pending => None,
            })
        })
        .await
    }
}

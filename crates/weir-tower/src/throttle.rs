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
/// longer than `max_wait`. A request turned away (the line is full, or its turn
/// would come after `max_wait`) is answered 429 with a `Retry-After`.
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
/// ```
/// use std::time::Duration;
/// use weir_core::Quota;
/// use weir_tower::KeyedThrottle;
///
/// // Two requests per second per client, up to 10 waiting, none waiting over 5 s.
/// let throttle = KeyedThrottle::new(Quota::per_second(2)?, 10, Duration::from_secs(5))?;
/// # let _ = throttle;
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub struct KeyedThrottle {
    quota: Quota,
    capacity: usize,
    max_wait: Duration,
    max_keys: usize,
    throttles: Mutex<HashMap<Key, Arc<Throttle>>>,
}

/// Why a throttled request was turned away.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct TurnedAway {
    /// When to try again.
    pub(crate) retry_after: Duration,
}

impl KeyedThrottle {
    /// Per key: one request per emission interval of `quota` (which must have no
    /// burst beyond its count, see [`weir_leaky::BuildError`]), at most `capacity`
    /// waiting, none longer than `max_wait`.
    pub fn new(quota: Quota, capacity: usize, max_wait: Duration) -> Result<Self, BuildError> {
        // Validates the quota and capacity once, as every key's throttle will.
        Throttle::with_clock(quota, capacity, weir_core::Nanos::ZERO)?;
        Ok(Self { quota, capacity, max_wait, max_keys: 10_000, throttles: Mutex::new(HashMap::new()) })
    }

    /// At most `n` keys' throttles kept (default 10 000; at least 1).
    pub fn max_keys(self, n: usize) -> Self {
        Self { max_keys: n.max(1), ..self }
    }

    /// The quota's rate.
    pub fn quota(&self) -> Quota {
        self.quota
    }

    /// The longest a request waits.
    pub fn max_wait(&self) -> Duration {
        self.max_wait
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
        match throttle.acquire_timeout(self.max_wait).await {
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
        let throttle = KeyedThrottle::new(Quota::per_second(10).unwrap(), 2, Duration::from_millis(150)).unwrap();
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
        let throttle = KeyedThrottle::new(Quota::per_second(1).unwrap(), 1, Duration::from_secs(5)).unwrap();
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
        let throttle = KeyedThrottle::new(Quota::per_second(1).unwrap(), 1, Duration::ZERO).unwrap().max_keys(2);
        throttle.acquire(&Key::user("a")).await.unwrap();
        throttle.acquire(&Key::user("b")).await.unwrap();
        assert!(throttle.acquire(&Key::user("c")).await.is_err(), "a and b claimed slots ahead of now");
        tokio::time::advance(Duration::from_secs(1)).await;
        throttle.acquire(&Key::user("c")).await.unwrap();
        assert_eq!(throttle.len(), 1);
        assert!(KeyedThrottle::new(Quota::per_second(1).unwrap(), 0, Duration::ZERO).is_err());
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

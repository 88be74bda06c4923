//! [`KeyedThrottle`]: throttle mode, where a request over the rate waits its turn
//! (FIFO, per key) up to a deadline instead of being rejected.

use crate::key::Key;
use core::fmt;
use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;
use weir_leaky::{BuildError, LeakSchedule, LeakSlot};
use weir_rl_core::__private::sync::{AtomicU64, Ordering};
use weir_rl_core::{Clock, Nanos, Quota, TokioClock};

/// Throttle mode for a [`Limit`](crate::Limit): each key gets a
/// [`weir_leaky::Throttle`], so its requests proceed one per emission interval of
/// `quota`, in the order they arrived; at most `capacity` wait per key, and none
/// longer than `max_wait` (by default, as long as its turn takes: at most about
/// `capacity` emission intervals). A request turned away (the line is full, or its
/// turn would come after `max_wait`) is answered 429 with a `Retry-After`.
///
/// A client that disconnects while waiting frees its place: the server drops the
/// request's future, which leaves the line (and gives back its slot, if it was at
/// the head). A request that has its turn and is then refused, or dropped, before
/// its decision (by a later throttle of its policy: one that turns it away, or in
/// whose line it waits) gives its turn back: the key's next request may go as if
/// it had never come. (Exactly so unless another request of the key has claimed the
/// next turn meanwhile: that one keeps its turn, and the turn given back is lost,
/// which slows the key by one turn, never speeds it up.)
///
/// Throttles live in a map of at most `max_keys` keys (default 10 000), under one
/// mutex taken once per request (waiting is not the hot path). When the map is full,
/// throttles nobody is using (no request waiting or holding one, and no slot claimed
/// ahead of now) are dropped, which changes no pacing; if none can be, a new key is
/// refused as a store full of other keys refuses one: `503 Too Many Clients`, with
/// a `Retry-After` of when the first throttle in use has no slot claimed ahead
/// (one emission interval if that is now), and no `RateLimit` fields.
///
/// Built by [`KeyedThrottle::builder`]. Each key's line is weir-leaky's throttle
/// design ([`weir_leaky::Throttle`]: a [`LeakSchedule`] whose slots only the head of
/// a fair tokio mutex claims), waiting on tokio's timer and reading [`TokioClock`].
///
/// ```
/// use std::time::Duration;
/// use weir_rl_core::Quota;
/// use weir_http::KeyedThrottle;
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
    throttles: Mutex<HashMap<Key, Arc<Line>>>,
}

/// Why a throttled request was not let through.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Away {
    /// Its key's line was full, or its turn would come after `max_wait`: a 429.
    Turned {
        /// When to try again.
        retry_after: Duration,
    },
    /// The map was full of throttles in use by other keys: a 503, as a full store.
    Keys {
        /// When a throttle may have become free.
        retry_after: Duration,
    },
}

/// One key's line: weir-leaky's throttle design ([`weir_leaky::Throttle`], whose
/// module docs say why each property holds), with the slot of a request handed to
/// it as a [`Turn`] that can still be given back.
///
/// - The line is tokio's fair mutex: its holder is the head, the only claimer of
///   slots from `schedule`; a waiter dropped in line leaves it.
/// - The head claims the next slot (within its deadline), sleeps until it still
///   holding the line, then releases the line and returns its slot as a `Turn`.
///   Dropped while it sleeps, it gives the slot back exactly (it is the latest
///   claim: nobody else claims while it holds the line).
/// - `waiting` counts the requests admitted to the line and not yet through: at
///   most `capacity`.
pub(crate) struct Line {
    schedule: LeakSchedule,
    line: tokio::sync::Mutex<()>,
    /// Requests admitted and not yet through: at most `capacity`.
    waiting: AtomicU64,
    capacity: u64,
    clock: TokioClock,
}

/// A request's place among the `waiting`; counted out on drop.
struct Place<'a>(&'a AtomicU64);

impl Drop for Place<'_> {
    fn drop(&mut self) {
        // Ordering: Relaxed; a count of places publishing no other memory (see
        // `Line::admit`).
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

/// A request's turn in a key's line: its slot, given back on drop unless
/// [`keep`](Self::keep) spends it (the request is admitted for good).
pub(crate) struct Turn<'a> {
    schedule: &'a LeakSchedule,
    slot: Option<LeakSlot<'a>>,
}

impl Turn<'_> {
    /// Spends the turn: the request was admitted.
    pub(crate) fn keep(mut self) {
        // A slot dropped is spent.
        let _spent = self.slot.take();
    }
}

impl Drop for Turn<'_> {
    fn drop(&mut self) {
        if let Some(slot) = self.slot.take() {
            // The latest claim is given back exactly; a slot claimed before another
            // comes back in the `Err` and is dropped, spent: the key is slowed by one
            // turn, never sped up.
            let _lost = self.schedule.give_back(slot);
        }
    }
}

impl Line {
    fn new(quota: Quota, capacity: usize) -> Result<Self, BuildError> {
        if capacity == 0 {
            return Err(BuildError::ZeroCapacity);
        }
        let clock = TokioClock::new();
        Ok(Self {
            schedule: LeakSchedule::new(quota, clock.now())?,
            line: tokio::sync::Mutex::new(()),
            waiting: AtomicU64::new(0),
            capacity: capacity as u64,
            clock,
        })
    }

    /// Requests waiting now.
    fn waiting(&self) -> usize {
        // Ordering: Relaxed; a reading.
        self.waiting.load(Ordering::Relaxed) as usize
    }

    /// Whether a slot is claimed ahead of now.
    fn claimed_ahead(&self) -> bool {
        self.schedule.next_slot(&self.clock) > self.clock.now()
    }

    /// Waits for this request's turn (FIFO), up to `max_wait`.
    pub(crate) async fn turn(&self, max_wait: Option<Duration>) -> Result<Turn<'_>, Away> {
        let _place = self.admit()?;
        let deadline = max_wait.map(|wait| self.clock.now() + wait);
        let head = match deadline {
            None => self.line.lock().await,
            Some(deadline) => match self.lock_by(deadline).await {
                Some(head) => head,
                None => return Err(self.timed_out(self.schedule.next_slot(&self.clock))),
            },
        };
        // At the head of the line: the only claimer of slots.
        let slot = match deadline {
            None => self.schedule.claim(&self.clock),
            Some(deadline) => match self.schedule.claim_by(&self.clock, deadline) {
                Ok(slot) => slot,
                Err(at) => return Err(self.timed_out(at)),
            },
        };
        let at = slot.at();
        // Declared after `head`, so dropped (and given back) while the line is still
        // held: the slot is then the latest claim.
        let turn = Turn { schedule: &self.schedule, slot: Some(slot) };
        loop {
            let now = self.clock.now();
            if now >= at {
                break;
            }
            tokio::time::sleep(at.saturating_duration_since(now)).await;
        }
        drop(head);
        Ok(turn)
    }

    /// Counts a request in, unless `capacity` already wait.
    fn admit(&self) -> Result<Place<'_>, Away> {
        // Ordering: Relaxed; a count of places, publishing no other memory; the CAS
        // keeps it at most `capacity`.
        let mut waiting = self.waiting.load(Ordering::Relaxed);
        loop {
            if waiting >= self.capacity {
                return Err(Away::Turned { retry_after: self.until_next_leak() });
            }
            // Ordering: Relaxed on success and failure; see the load above.
            match self.waiting.compare_exchange_weak(waiting, waiting + 1, Ordering::Relaxed, Ordering::Relaxed) {
                Ok(_) => return Ok(Place(&self.waiting)),
                Err(actual) => waiting = actual,
            }
        }
    }

    /// Waits in line until `deadline`; `None` if the head was not reached by then.
    async fn lock_by(&self, deadline: Nanos) -> Option<tokio::sync::MutexGuard<'_, ()>> {
        let lock = self.line.lock();
        let mut lock = core::pin::pin!(lock);
        loop {
            let remaining = deadline.saturating_duration_since(self.clock.now());
            // `timeout` polls the lock before the timer, so a free line is taken even
            // with no time left.
            match tokio::time::timeout(remaining, lock.as_mut()).await {
                Ok(guard) => return Some(guard),
                Err(_) if self.clock.now() >= deadline => return None,
                Err(_) => continue,
            }
        }
    }

    /// A request whose turn (at `at`, or later) would come after its deadline: told
    /// to come back then.
    fn timed_out(&self, at: Nanos) -> Away {
        Away::Turned { retry_after: at.saturating_duration_since(self.clock.now()) }
    }

    /// How long until the next slot boundary, in `(0, T]`: when a place in a full
    /// line frees, while requests keep leaving.
    fn until_next_leak(&self) -> Duration {
        let interval = self.schedule.interval();
        let wait = self.schedule.next_slot(&self.clock).saturating_duration_since(self.clock.now());
        if wait.is_zero() || interval.is_zero() {
            return interval;
        }
        let (wait, interval) = (wait.as_nanos(), interval.as_nanos());
        Duration::from_nanos(u64::try_from((wait - 1) % interval + 1).unwrap_or(u64::MAX))
    }
}

/// Which [`KeyedThrottleBuilder`] option was refused, and why.
///
/// ```
/// use weir_rl_core::Quota;
/// use weir_http::{KeyedThrottle, KeyedThrottleError};
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
        weir_leaky::Throttle::with_clock(quota, capacity, Nanos::ZERO).map_err(|e| match e {
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

    /// `key`'s line, made if needed; [`Away::Keys`] if the map is full of lines in
    /// use.
    pub(crate) fn line_of(&self, key: &Key) -> Result<Arc<Line>, Away> {
        let mut throttles = self.throttles.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(line) = throttles.get(key) {
            return Ok(Arc::clone(line));
        }
        let interval = self.quota.emission_interval();
        if throttles.len() >= self.max_keys {
            // Clones are only made under this lock, so a count of one is exact: nobody
            // holds the line (waits in it, or holds a turn of it) or can get it before
            // it is dropped.
            throttles.retain(|_, t| Arc::strong_count(t) > 1 || t.waiting() > 0 || t.claimed_ahead());
            if throttles.len() >= self.max_keys {
                // The soonest a line in use has no slot claimed ahead of now.
                let soonest = throttles
                    .values()
                    .map(|t| t.schedule.next_slot(&t.clock).saturating_duration_since(t.clock.now()))
                    .filter(|wait| !wait.is_zero())
                    .min();
                return Err(Away::Keys { retry_after: soonest.unwrap_or(interval) });
            }
        }
        let line = Line::new(self.quota, self.capacity).map_err(|_| Away::Turned { retry_after: interval })?;
        let line = Arc::new(line);
        throttles.insert(key.clone(), Arc::clone(&line));
        Ok(line)
    }

    /// Waits for `key`'s turn, up to `max_wait`, and spends it.
    #[cfg(test)]
    async fn acquire(&self, key: &Key) -> Result<(), Away> {
        let line = self.line_of(key)?;
        line.turn(self.max_wait).await.map(Turn::keep)
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

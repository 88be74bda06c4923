//! The sliding window log: the exact sliding window, and the reference the window
//! counters are measured against.
//!
//! # The algorithm
//!
//! The log keeps the timestamp of every admitted request of the last window-length
//! and admits `n` more at time `t` iff fewer than `limit − n + 1` of them are later
//! than `t − P`:
//!
//! ```text
//! live(t)  = |{ admitted timestamps s : s > t − P }|
//! admitted   iff   live(t) + n ≤ limit              (then log n timestamps t)
//! ```
//!
//! It is the textbook "sliding log" (e.g. Figma's "An alternative approach to rate
//! limiting", 2017, and the Redis sorted-set recipe): no window boundaries at all, so
//! no boundary burst and no estimate: **at most `limit` requests in any interval of
//! length `P`**, exactly. The price is memory that grows with the limit: one 8-byte
//! timestamp per request of the limit, allocated once at construction (a ring of
//! `limit` entries; nothing is allocated on the check path). Limits above
//! [`MAX_LOG_LIMIT`] are refused.
//!
//! Worked example: 5 per 60 s, admitted at 12:04:40, 12:05:00, 12:05:10, 12:05:20 and
//! 12:05:25. At 12:05:30 all five are within the last 60 s, so a request is denied;
//! the oldest leaves the window at 12:05:40, which is the denial's `retry_after`.
//!
//! # Concurrency and guarantees
//!
//! The entries are timestamps in a ring, in admission order; because a clock reading
//! earlier than the latest admission is stamped as that admission (no time passing),
//! they never decrease, so `live(t)` is a binary search and admitting `n` only has
//! to look at one entry (the `n`-th oldest of the last `limit`). Admitting writes
//! `n` entries, the count and the newest time together, which one atomic word
//! cannot hold, so the log is guarded by a **sequence lock** (the `seq` word, odd
//! while a write is under way):
//!
//! - a check reads optimistically and validates the sequence number afterwards; a
//!   **denial writes nothing** and never blocks a writer;
//! - an admission claims the write side with one CAS on `seq`, validated against the
//!   number its reads were made under (so it admits only on the state it read), then
//!   writes `n` timestamps and releases it.
//!
//! So the log is **exact and linearizable** (loom model, proptest against a
//! `VecDeque` reference), but **blocking**: a check that finds a write under way
//! waits for it (a few stores, or `n` stores for `check_n(n)`), and a thread
//! preempted inside that write delays every check of the log. It is the reference
//! for accuracy, not for throughput; for hot limits use
//! [`StripedSlidingWindow`](crate::StripedSlidingWindow).
//!
//! A refund ([`SlidingLog::refund`]) removes `n` of the refunded admission's entries
//! (the latest live ones at or before its time) under the write side, moving the
//! entries admitted after them down; the latest admission's time stays the floor of
//! later readings.
//!
//! Times are exact: a denial's `retry_after` is the instant the entry that must
//! expire leaves the window; `reset_after` is when the newest one does. No panic on
//! any input; timestamps count from the limiter's creation (584 years).
//!
//! # Example
//!
//! ```
//! use std::time::Duration;
//! use weir_rl_core::{ManualClock, Nanos, Quota};
//! use weir_window::SlidingLog;
//!
//! let at = |h: u64, m: u64, s: u64| Nanos::new(((h * 60 + m) * 60 + s) * 1_000_000_000);
//! let clock = ManualClock::starting_at(at(12, 4, 40));
//! let limiter = SlidingLog::with_clock(Quota::per_minute(5)?, clock.clone())?;
//! for t in [at(12, 4, 40), at(12, 5, 0), at(12, 5, 10), at(12, 5, 20), at(12, 5, 25)] {
//!     clock.set(t);
//!     assert!(limiter.check().is_allowed());
//! }
//! clock.set(at(12, 5, 30));
//! let denied = limiter.check();
//! assert!(denied.is_denied());
//! assert_eq!(denied.retry_after(), Some(Duration::from_secs(10))); // 12:04:40 + 60 s
//! clock.set(at(12, 5, 40));
//! assert!(limiter.check().is_allowed());
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use crate::WindowError;
use crate::frame;
use alloc::boxed::Box;
use alloc::vec::Vec;
use core::fmt;
use weir_rl_core::__private::sync::{AtomicU64, Backoff, CachePadded, Ordering, fence};
use weir_rl_core::{Algorithm, Clock, Contention, Decision, InsufficientCapacity, Nanos, Quota, Retire, Snapshot};

/// The largest limit a sliding log accepts: 2²⁴ (16,777,216) timestamps, 128 MiB.
pub const MAX_LOG_LIMIT: u64 = 1 << 24;

/// Sliding-log parameters shared by any number of [`SlidingLogState`]s.
///
/// This is the [`Algorithm`] half, for per-key stores (each state allocates
/// `8 × limit` bytes when it is made); most users want [`SlidingLog`].
///
/// ```
/// use weir_rl_core::{Algorithm, Nanos, Quota};
/// use weir_window::SlidingLogAlgorithm;
///
/// let algorithm = SlidingLogAlgorithm::new(Quota::per_second(2)?, Nanos::ZERO)?;
/// let key = algorithm.try_new_state()?;
/// assert!(algorithm.check(&key, &Nanos::new(0)).is_allowed());
/// assert!(algorithm.check(&key, &Nanos::new(600_000_000)).is_allowed());
/// let denied = algorithm.check(&key, &Nanos::new(700_000_000));
/// assert_eq!(denied.retry_after().unwrap().as_millis(), 300); // the first leaves at 1 s
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug)]
pub struct SlidingLogAlgorithm {
    limit: u64,
    period: u64,
    /// The clock reading timestamps count from (the creation reading).
    base: u64,
    /// The latest timestamp used: later readings are clamped to it, so that
    /// `timestamp + period` never overflows.
    last: u64,
    /// What a check does after losing a race or finding a write under way (read
    /// on the retry path only).
    contention: Contention,
}

/// One sliding log: the timestamps (ns since the algorithm's creation) of the last
/// `limit` admitted requests, in a ring, guarded by a sequence lock.
///
/// Made by [`SlidingLogAlgorithm::new_state`] (or `try_new_state`) for that
/// algorithm's limit; using it with another algorithm never panics but decides
/// nonsense.
pub struct SlidingLogState {
    /// Completed writes × 2, plus 1 while a write is under way.
    seq: AtomicU64,
    /// Requests ever admitted: the ring position of the next entry. Written only
    /// under the write side of `seq`.
    head: AtomicU64,
    /// The latest admission's effective time (0 before any): the newest entry's
    /// timestamp, unless a refund removed that entry; never lowered, it is the floor
    /// of later readings (entries never decrease). Written only under `seq`.
    newest: AtomicU64,
    /// Entry `p` (the `p`-th admitted request) is `ring[p % ring.len()]`. Written
    /// only under `seq`.
    ring: Box<[AtomicU64]>,
}

impl fmt::Debug for SlidingLogState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Ordering: Relaxed; a debugging glimpse, not a consistent read.
        f.debug_struct("SlidingLogState")
            .field("capacity", &self.ring.len())
            .field("admitted", &self.head.load(Ordering::Relaxed))
            .field("newest", &self.newest.load(Ordering::Relaxed))
            .finish_non_exhaustive()
    }
}

impl SlidingLogState {
    /// An empty log of `capacity` entries, or `None` if the memory is not there.
    fn try_with_capacity(capacity: u64) -> Option<Self> {
        let capacity = usize::try_from(capacity).ok()?;
        let mut ring = Vec::new();
        ring.try_reserve_exact(capacity).ok()?;
        ring.extend((0..capacity).map(|_| AtomicU64::new(0)));
        Some(Self {
            seq: AtomicU64::new(0),
            head: AtomicU64::new(0),
            newest: AtomicU64::new(0),
            ring: ring.into_boxed_slice(),
        })
    }

    /// Entry `position`, or `None` for an empty ring.
    #[inline]
    fn entry(&self, position: u64) -> Option<&AtomicU64> {
        let len = self.ring.len() as u64; // usize ≤ 64 bits on every supported target
        self.ring.get(usize::try_from(position.checked_rem(len)?).ok()?)
    }

    /// The timestamp of entry `position` (`u64::MAX`, never expiring, for an empty
    /// ring). Read inside a sequence-lock read section, so it may be torn; the
    /// section's validation discards what was read then.
    #[inline]
    fn timestamp(&self, position: u64) -> u64 {
        // Ordering: Relaxed; validated by the sequence lock (see `read_validated`).
        self.entry(position).map_or(u64::MAX, |entry| entry.load(Ordering::Relaxed))
    }
}

/// What a read section found: the log's state at an effective time.
#[derive(Debug, Clone, Copy)]
struct Reading {
    /// The sequence number the reads were made under.
    seq: u64,
    /// Requests ever admitted.
    head: u64,
    /// The effective time: the reading, or the latest admission's if that is later.
    at: u64,
    /// The oldest position whose entry is still in the window at `at`.
    first_live: u64,
}

impl Reading {
    /// Entries still in the window.
    fn live(&self) -> u64 {
        self.head - self.first_live
    }
}

/// The sequence number of a retired log ([`Retire`]): even (readers read it as "no
/// write under way") and never reached by counting (2⁶³ writes), so an admission
/// sees it and denies instead of taking the write side.
const RETIRED_SEQ: u64 = u64::MAX - 1;

impl SlidingLogAlgorithm {
    /// Parameters for `quota` (`count` per `period`), created at the clock reading
    /// `now`.
    ///
    /// Errors: the quota's burst differs from its count; the count is above
    /// [`MAX_LOG_LIMIT`].
    pub fn new(quota: Quota, now: Nanos) -> Result<Self, WindowError> {
        let (limit, period) = frame::limit_and_period(&quota)?;
        if limit > MAX_LOG_LIMIT {
            return Err(WindowError::LogTooLarge { limit, max: MAX_LOG_LIMIT });
        }
        Ok(Self { limit, period, base: now.as_u64(), last: u64::MAX - period, contention: Contention::Fair })
    }

    /// The same parameters, with checks that lose a race to another thread's (or
    /// find its write under way) retrying as `contention` says
    /// ([`Contention::Fair`] by default).
    pub fn with_contention(self, contention: Contention) -> Self {
        Self { contention, ..self }
    }

    /// What a check does after losing a race.
    pub fn contention(&self) -> Contention {
        self.contention
    }

    /// The most requests admitted in any window-length.
    pub fn limit(&self) -> u64 {
        self.limit
    }

    /// The window length.
    pub fn window(&self) -> core::time::Duration {
        core::time::Duration::from_nanos(self.period)
    }

    /// An empty log, or [`WindowError::OutOfMemory`] if its `8 × limit` bytes cannot
    /// be allocated ([`Algorithm::new_state`] aborts instead, like any allocation).
    pub fn try_new_state(&self) -> Result<SlidingLogState, WindowError> {
        SlidingLogState::try_with_capacity(self.limit).ok_or(WindowError::OutOfMemory {
            bytes: usize::try_from(self.limit).unwrap_or(usize::MAX).saturating_mul(8),
        })
    }

    /// A reading in ns since creation, clamped to `[0, last]`.
    #[inline]
    fn rel(&self, now: Nanos) -> u64 {
        now.as_u64().saturating_sub(self.base).min(self.last)
    }

    /// Nanoseconds from the reading `now` to the relative time `target`.
    #[inline]
    fn delay(&self, target: u64, now: Nanos) -> u64 {
        self.base.saturating_add(target).saturating_sub(now.as_u64())
    }

    /// The reading at relative time `rel`: what a decision made at the effective
    /// time `rel` is stamped with.
    #[inline]
    fn reading_at(&self, rel: u64) -> Nanos {
        Nanos::new(self.base.saturating_add(rel))
    }

    /// The newest entry's timestamp in a read section (0 with nothing live, when it
    /// is not used). Validated with the section.
    #[inline]
    fn newest_entry(state: &SlidingLogState, reading: &Reading) -> u64 {
        if reading.live() == 0 { 0 } else { state.timestamp(reading.head - 1) }
    }

    /// One read section: waits out a write under way, then reads the log at `now`.
    /// The result is consistent only if `seq` is unchanged afterwards (the caller
    /// validates, by CAS to admit or by `still_valid` to deny).
    fn read(&self, state: &SlidingLogState, now: Nanos, backoff: &mut Backoff) -> Reading {
        let seq = loop {
            // Ordering: Acquire pairs with the Release store that ended the last
            // write: everything that write stored is visible to the reads below.
            let seq = state.seq.load(Ordering::Acquire);
            if seq & 1 == 0 {
                break seq;
            }
            backoff.wait(); // a write is under way: wait for it (blocking; see the module docs)
        };
        // Ordering: Relaxed; validated by the sequence lock.
        let head = state.head.load(Ordering::Relaxed);
        // Ordering: Relaxed; validated by the sequence lock.
        let newest = state.newest.load(Ordering::Relaxed);
        let at = self.rel(now).max(newest);
        // The oldest live position: entries never decrease, so binary search the last
        // `limit` positions for the first whose timestamp is after `at − period`.
        let (mut lo, mut hi) = (head.saturating_sub(self.limit), head);
        while lo < hi {
            let mid = lo + (hi - lo) / 2;
            if state.timestamp(mid).saturating_add(self.period) > at {
                hi = mid;
            } else {
                lo = mid + 1;
            }
        }
        Reading { seq, head, at, first_live: lo }
    }

    /// Whether nothing was written since `reading` began: its values are a
    /// consistent view of the log.
    #[inline]
    fn still_valid(state: &SlidingLogState, reading: &Reading) -> bool {
        // Ordering: the Acquire fence pairs with the writer's Release fence: if any
        // read of the section saw a value stored by a write that began later, this
        // load sees that write's odd `seq` (or later) and the section is discarded.
        fence(Ordering::Acquire);
        // Ordering: Relaxed; ordered after the section's reads by the fence above.
        state.seq.load(Ordering::Relaxed) == reading.seq
    }

    /// The snapshot of a log with `live` entries in the window, the newest at `newest`.
    fn snapshot_of(&self, live: u64, newest: u64, now: Nanos) -> Snapshot {
        let reset = if live == 0 { 0 } else { self.delay(newest.saturating_add(self.period), now) };
        Snapshot::new(self.limit, self.limit.saturating_sub(live), reset)
    }

    /// The one admission routine: `1 ≤ n ≤ limit` is the caller's to check.
    fn acquire<C: Clock + ?Sized>(&self, state: &SlidingLogState, n: u64, clock: &C) -> Decision {
        let mut backoff = Backoff::retrying(self.contention);
        // One reading for every attempt under `Contention::Fair` (a retry as short as
        // the race it lost: the threads take turns); a fresh one each under
        // `Contention::Greedy`.
        let first = clock.now();
        let mut raced = false;
        loop {
            let now = if raced && self.contention == Contention::Greedy { clock.now() } else { first };
            raced = true;
            let reading = self.read(state, now, &mut backoff);
            if reading.seq == RETIRED_SEQ {
                // Retired: admits nothing; a per-key store retries on a fresh log.
                return Decision::denied(Snapshot::new(self.limit, 0, 0), u64::MAX);
            }
            let live = reading.live();
            if live + n <= self.limit {
                // Ordering: Acquire on success takes the write side after the last
                // writer's Release (its stores are visible); the CAS succeeds only if
                // `seq` is still the number the reads were made under, so nothing was
                // written since and the reading is the state being replaced.
                if state
                    .seq
                    .compare_exchange(reading.seq, reading.seq.wrapping_add(1), Ordering::Acquire, Ordering::Relaxed)
                    .is_err()
                {
                    backoff.spin();
                    continue;
                }
                // Ordering: Release fence before the entry stores pairs with the Acquire
                // fence in `still_valid`: a reader that sees any store below also sees
                // the odd `seq` stored above, and discards its section.
                fence(Ordering::Release);
                // `head` counts admitted requests: it cannot reach 2^64 in practice, and
                // saturates rather than wrapping if it ever did.
                let head = reading.head.saturating_add(n);
                for position in reading.head..head {
                    if let Some(entry) = state.entry(position) {
                        // Ordering: Relaxed; published by the Release store of `seq`.
                        entry.store(reading.at, Ordering::Relaxed);
                    }
                }
                // Ordering: Relaxed; published by the Release store of `seq`.
                state.head.store(head, Ordering::Relaxed);
                // Ordering: Relaxed; published by the Release store of `seq`.
                state.newest.store(reading.at, Ordering::Relaxed);
                // Ordering: Release publishes the write; pairs with the Acquire load in
                // `read` and the Acquire CAS of the next writer.
                state.seq.store(reading.seq.wrapping_add(2), Ordering::Release);
                return Decision::allowed(self.snapshot_of(live + n, reading.at, now)).at(self.reading_at(reading.at));
            }
            // Denied: the entry that must expire first is the (live + n − limit)-th
            // live one; the request fits the instant it leaves the window.
            let blocking = reading.first_live + (live + n - self.limit) - 1;
            let expires = state.timestamp(blocking).saturating_add(self.period);
            let newest = Self::newest_entry(state, &reading);
            if !Self::still_valid(state, &reading) {
                backoff.spin();
                continue;
            }
            let snapshot = self.snapshot_of(live, newest, now);
            return Decision::denied(snapshot, self.delay(expires, now)).at(self.reading_at(reading.at));
        }
    }

    /// A consistent reading at `now` (retrying while writes interfere).
    fn read_consistent(&self, state: &SlidingLogState, now: Nanos) -> Reading {
        let mut backoff = Backoff::new();
        loop {
            let reading = self.read(state, now, &mut backoff);
            if Self::still_valid(state, &reading) {
                return reading;
            }
            backoff.spin();
        }
    }

    /// Removes up to `n` live entries stamped at or before `at` (relative), the
    /// latest of them: the entries after them move down by that many, and the
    /// ring positions that become the oldest get a stand-in timestamp of 0.
    ///
    /// Why the stand-ins are right: the ring holds positions `head − limit ..
    /// head`; after removing `k`, it holds `head − k − limit .. head − k`, whose
    /// first `k` positions were overwritten long ago. Every admission checked that
    /// all positions below `head − limit` (its new head) had expired at its
    /// effective time, and `newest` (the latest such time, never lowered) is at
    /// least `period` once any position has left the ring; so those positions are
    /// expired at every reading from now on, as a stand-in of 0 is.
    fn remove_entries(&self, state: &SlidingLogState, n: u64, at: u64, clock: &(impl Clock + ?Sized)) {
        let mut backoff = Backoff::new();
        loop {
            let reading = self.read(state, clock.now(), &mut backoff);
            if reading.seq == RETIRED_SEQ {
                return; // retired while idle: nothing to remove
            }
            // The end of the live entries at or before `at` (entries never decrease).
            let (mut lo, mut hi) = (reading.first_live, reading.head);
            while lo < hi {
                let mid = lo + (hi - lo) / 2;
                if state.timestamp(mid) > at {
                    hi = mid;
                } else {
                    lo = mid + 1;
                }
            }
            let end = lo;
            let k = n.min(end - reading.first_live);
            if k == 0 {
                if Self::still_valid(state, &reading) {
                    return; // nothing of the admission's time is live
                }
                backoff.spin();
                continue;
            }
            // Ordering: Acquire on success, as in `acquire`: the write side, taken
            // only if nothing was written since the reading.
            if state
                .seq
                .compare_exchange(reading.seq, reading.seq.wrapping_add(1), Ordering::Acquire, Ordering::Relaxed)
                .is_err()
            {
                backoff.spin();
                continue;
            }
            // Ordering: Release fence before the entry stores; see `acquire`.
            fence(Ordering::Release);
            for position in end..reading.head {
                if let Some(entry) = state.entry(position - k) {
                    // Ordering: Relaxed (both); this thread holds the write side, and
                    // the stores are published by the Release store of `seq`.
                    entry.store(state.timestamp(position), Ordering::Relaxed);
                }
            }
            for position in reading.head - k..reading.head {
                if let Some(entry) = state.entry(position) {
                    // Ordering: Relaxed; published by the Release store of `seq`.
                    entry.store(0, Ordering::Relaxed);
                }
            }
            // Ordering: Relaxed; published by the Release store of `seq`. `newest`
            // is kept: it is the latest effective time, and stays the floor of later
            // readings (entries never decrease, stand-ins stay expired).
            state.head.store(reading.head - k, Ordering::Relaxed);
            // Ordering: Release publishes the write; see `acquire`.
            state.seq.store(reading.seq.wrapping_add(2), Ordering::Release);
            return;
        }
    }
}

impl Algorithm for SlidingLogAlgorithm {
    type State = SlidingLogState;

    #[inline]
    fn limit(&self) -> u64 {
        self.limit
    }

    /// An empty log. Allocates `8 × limit` bytes, and aborts if they are not there,
    /// like any allocation; [`try_new_state`](SlidingLogAlgorithm::try_new_state)
    /// reports it instead.
    fn new_state(&self) -> SlidingLogState {
        // The limit fits a usize on every target with 64-bit or 32-bit pointers
        // (it is at most 2^24): the fallback is an empty ring, which denies.
        let capacity = usize::try_from(self.limit).unwrap_or(0);
        SlidingLogState {
            seq: AtomicU64::new(0),
            head: AtomicU64::new(0),
            newest: AtomicU64::new(0),
            ring: (0..capacity).map(|_| AtomicU64::new(0)).collect(),
        }
    }

    fn check_n<C: Clock + ?Sized>(
        &self,
        state: &SlidingLogState,
        n: u64,
        clock: &C,
    ) -> Result<Decision, InsufficientCapacity> {
        if n > self.limit {
            return Err(InsufficientCapacity { requested: n, capacity: self.limit });
        }
        if n == 0 {
            let now = clock.now();
            // Took nothing: a refund against it gives nothing back.
            return Ok(Decision::allowed(self.snapshot(state, now)).at(now).zero_cost());
        }
        Ok(self.acquire(state, n, clock))
    }

    fn check<C: Clock + ?Sized>(&self, state: &SlidingLogState, clock: &C) -> Decision {
        self.acquire(state, 1, clock) // 1 ≤ limit, always
    }

    /// Removes `n` of the entries recorded at the admission's time: the latest live
    /// entries at or before it (an admission's entries are all stamped with its
    /// effective time, the time it is stamped with). Takes the write side of the
    /// sequence lock, like an admission, only if there is something to remove;
    /// moves the entries admitted after it down (at most `limit − 1` stores).
    fn refund<C: Clock + ?Sized>(
        &self,
        state: &SlidingLogState,
        n: u64,
        admission: &Decision,
        clock: &C,
    ) -> Result<(), InsufficientCapacity> {
        if n > self.limit {
            return Err(InsufficientCapacity { requested: n, capacity: self.limit });
        }
        if n > 0 && admission.is_allowed() && !admission.is_zero_cost() {
            self.remove_entries(state, n, self.rel(admission.decided_at()), clock);
        }
        Ok(())
    }

    fn snapshot(&self, state: &SlidingLogState, now: Nanos) -> Snapshot {
        let mut backoff = Backoff::new();
        loop {
            let reading = self.read(state, now, &mut backoff);
            let newest = Self::newest_entry(state, &reading);
            if Self::still_valid(state, &reading) {
                return self.snapshot_of(reading.live(), newest, now);
            }
            backoff.spin();
        }
    }

    fn is_idle(&self, state: &SlidingLogState, now: Nanos) -> bool {
        self.read_consistent(state, now).live() == 0
    }
}

impl Retire for SlidingLogAlgorithm {
    fn try_retire(&self, state: &SlidingLogState, now: Nanos) -> bool {
        let reading = self.read_consistent(state, now);
        if reading.seq == RETIRED_SEQ || reading.live() > 0 {
            return false;
        }
        // Ordering: Relaxed; the CAS succeeds only if no write began since the
        // consistent reading (the sequence number is unchanged), so the log it retires
        // is the idle one that was read; it publishes nothing.
        state.seq.compare_exchange(reading.seq, RETIRED_SEQ, Ordering::Relaxed, Ordering::Relaxed).is_ok()
    }

    fn is_retired(&self, state: &SlidingLogState) -> bool {
        // Ordering: Relaxed; see `try_retire`.
        state.seq.load(Ordering::Relaxed) == RETIRED_SEQ
    }
}

weir_rl_core::__private::single_limiter! {
    /// A sliding window log: the timestamps of the requests admitted in the last
    /// window-length; exact, at `8 × limit` bytes.
    ///
    /// See the [module docs](crate::log) for the algorithm and its guarantees
    /// (exact, but blocking under contention). Share it by reference.
    ///
    /// ```
    /// use weir_rl_core::Quota;
    /// use weir_window::SlidingLog;
    ///
    /// let limiter = SlidingLog::new(Quota::per_hour(3)?)?;
    /// let admitted = (0..10).filter(|_| limiter.check().is_allowed()).count();
    /// assert_eq!(admitted, 3);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub struct SlidingLog { algorithm: SlidingLogAlgorithm, state: SlidingLogState }
}

#[cfg(feature = "std")]
impl SlidingLog<weir_rl_core::MonotonicClock> {
    /// An empty log enforcing `quota` on the default
    /// [`MonotonicClock`](weir_rl_core::MonotonicClock).
    ///
    /// Errors: the burst differs from the count; the count is above
    /// [`MAX_LOG_LIMIT`]; the ring cannot be allocated.
    pub fn new(quota: Quota) -> Result<Self, WindowError> {
        Self::with_clock(quota, weir_rl_core::MonotonicClock::new())
    }
}

impl<C: Clock> SlidingLog<C> {
    /// An empty log enforcing `quota`, reading time from `clock`. A sliding log has
    /// no window boundaries, so there is nothing to align.
    pub fn with_clock(quota: Quota, clock: C) -> Result<Self, WindowError> {
        let algorithm = SlidingLogAlgorithm::new(quota, clock.now())?;
        let state = algorithm.try_new_state()?;
        Ok(Self { algorithm, state: CachePadded::new(state), clock })
    }

    /// The same limiter, whose checks that lose a race to another thread's (or find
    /// its write under way) retry as `contention` says ([`Contention::Fair`] by
    /// default).
    pub fn with_contention(self, contention: Contention) -> Self {
        Self { algorithm: self.algorithm.with_contention(contention), ..self }
    }

    /// The most requests admitted in any window-length.
    pub fn limit(&self) -> u64 {
        self.algorithm.limit()
    }

    /// The window length.
    pub fn window(&self) -> core::time::Duration {
        self.algorithm.window()
    }
}

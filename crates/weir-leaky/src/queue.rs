//! [`BoundedQueue`]: a bounded multi-producer multi-consumer ring in Dmitry Vyukov's
//! style, written for this crate on weir-rl-core's [`sync`](weir_rl_core::__private::sync) facade so that
//! loom can model every atomic operation.
//!
//! # The algorithm
//!
//! Vyukov's bounded MPMC queue ("Bounded MPMC queue", 1024cores.net), as refined in
//! crossbeam-queue's `ArrayQueue` and concurrent-queue's `Bounded` (whose encoding of
//! `close` as a mark bit in the tail this module follows). A fixed array of slots, each
//! with a *stamp*, and two positions, `head` (next to pop) and `tail` (next to push), in
//! their own cache lines. A position is `{ lap, index }` packed into one `u64`; a slot's
//! stamp says which position may use it next:
//!
//! - stamp `== p` (for the tail position `p`): empty, a push at `p` may take it;
//! - stamp `== p + 1` (for the head position `p`): full, a pop at `p` may take it.
//!
//! A push claims its position with one compare-and-swap on `tail`, writes the value and
//! publishes it with a `Release` store of the stamp; a pop claims with one CAS on `head`,
//! reads the value and hands the slot to the next lap with a `Release` store of the stamp.
//! Nothing else is shared.
//!
//! # Guarantees
//!
//! - **Exactly once, FIFO.** Every pushed item is popped exactly once (or dropped with the
//!   queue); items leave in the order their pushes claimed positions, so one producer's
//!   items leave in the order it pushed them (loom-checked in `loom-tests/tests/leaky.rs`,
//!   property-tested against `VecDeque`, stress-tested on real threads, miri-checked).
//! - **Full and empty only when true.** [`try_push`](BoundedQueue::try_push) reports
//!   full only after reading `head` one lap behind `tail`; [`pop`](BoundedQueue::pop)
//!   reports empty only after reading `tail == head`. A slot that is merely still being
//!   written or read by a slower thread is never mistaken for "full" or "empty".
//! - **Progress: lock-free, except in one corner, where it blocks.** A push or pop
//!   retries its CAS only when another push or pop succeeded. But a thread *preempted
//!   between its CAS and its stamp store* holds up whoever comes to that slot next: a
//!   push that finds room (`head` has moved on) but the slot still being read by a
//!   consumer that claimed it, or a pop that finds the queue non-empty but its head slot
//!   still being written, **waits** for that thread (spinning briefly, then yielding its
//!   time slice) rather than answer a false "full" or "empty". Operations on other
//!   slots are not held up, but they queue behind it as the ring comes round. This is
//!   the same trade crossbeam's `ArrayQueue` makes.
//! - **Close.** After [`close`](BoundedQueue::close) returns, no push succeeds; every
//!   item pushed before is still popped exactly once; then pops report
//!   [`PopError::Closed`].
//! - **No panic, no abort on any capacity.** Zero or absurd capacities, and capacities
//!   the allocator refuses, are a [`BuildError`], not a panic or an abort.

use crate::BuildError;
use alloc::boxed::Box;
use alloc::vec::Vec;
use core::fmt;
use core::mem::MaybeUninit;
use weir_rl_core::__private::sync::{AtomicU64, Backoff, CachePadded, Ordering, UnsafeCell, fence, spin_loop};

/// The largest capacity [`BoundedQueue::new`] accepts: 2⁴⁰ slots (2³⁰ on targets with
/// 32-bit pointers, where the address space is smaller still).
///
/// The bound keeps at least 22 bits of every position for the lap count, so positions
/// wrap only after 2⁶² operations (centuries at a billion a second).
pub const MAX_CAPACITY: usize = if usize::BITS >= 64 { (1u64 << 40) as usize } else { 1 << 30 };

/// One cell of the ring.
struct Slot<T> {
    /// Which position may use this slot next: the tail position `p` of the push that
    /// may fill it (empty), or `p + 1` for the head position `p` of the pop that may
    /// take its value (full). Only ever grows, one lap at a time (modulo wrap-around).
    stamp: AtomicU64,
    /// The item, initialized exactly while the stamp says "full" (and while the thread
    /// that claimed the slot is between its CAS and its stamp store).
    value: UnsafeCell<MaybeUninit<T>>,
}

/// A bounded lock-free multi-producer multi-consumer FIFO queue with `close`.
///
/// See the [module docs](self) for the algorithm and its guarantees (in short:
/// lock-free, except that a thread preempted mid-operation makes the next operation
/// on that slot wait; never a false "full" or "empty").
///
/// ```
/// use weir_leaky::{BoundedQueue, PopError, PushError};
///
/// let queue = BoundedQueue::new(2)?;
/// assert!(queue.try_push('a').is_ok());
/// assert!(queue.try_push('b').is_ok());
/// assert_eq!(queue.try_push('c'), Err(PushError::Full('c'))); // the item comes back
/// assert_eq!(queue.pop(), Ok('a'));
///
/// queue.close();
/// assert_eq!(queue.try_push('d'), Err(PushError::Closed('d')));
/// assert_eq!(queue.pop(), Ok('b')); // what was pushed before close is still popped
/// assert_eq!(queue.pop(), Err(PopError::Closed));
/// # Ok::<(), weir_leaky::BuildError>(())
/// ```
pub struct BoundedQueue<T> {
    /// The next position to pop, `{ lap, index }`: the lap in the bits at and above
    /// `one_lap`, the index (below `capacity`) in the bits below `mark_bit`. The mark
    /// bit is always clear here.
    head: CachePadded<AtomicU64>,
    /// The next position to push, encoded as `head`, plus the mark bit: set once, by
    /// [`close`](Self::close), and never cleared.
    tail: CachePadded<AtomicU64>,
    /// The ring; `buffer.len() == capacity`.
    buffer: Box<[Slot<T>]>,
    /// The number of slots, as a `u64` for position arithmetic (`1..=MAX_CAPACITY`).
    capacity: u64,
    /// The smallest power of two above `capacity`: the close mark in `tail`. Indices
    /// are the bits below it.
    mark_bit: u64,
    /// `2 × mark_bit`: position `{ lap: 1, index: 0 }`.
    one_lap: u64,
    /// `log2(one_lap)`: positions shifted right by it give the lap number.
    lap_shift: u32,
}

// SAFETY: the queue owns its items and hands each one, by value, to exactly one thread
// (the one whose CAS claimed its position), so sending or sharing the queue sends items
// between threads: `T: Send` is what that needs. The slots' `UnsafeCell`s are accessed
// only under the stamp protocol described on `Slot`, never concurrently.
unsafe impl<T: Send> Send for BoundedQueue<T> {}
// SAFETY: as for `Send`: through `&BoundedQueue` threads only move whole items in and
// out, each access to a slot's value exclusive by the stamp protocol; `T: Sync` is not
// needed because no `&T` is ever handed out.
unsafe impl<T: Send> Sync for BoundedQueue<T> {}

/// Why [`BoundedQueue::try_push`] did not take an item; the item comes back.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum PushError<T> {
    /// The queue held `capacity` items at some moment during the call.
    Full(T),
    /// The queue had been closed.
    Closed(T),
}

impl<T> PushError<T> {
    /// The item that was not pushed.
    pub fn into_inner(self) -> T {
        match self {
            Self::Full(item) | Self::Closed(item) => item,
        }
    }
}

impl<T> fmt::Debug for PushError<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Full(_) => "Full(..)",
            Self::Closed(_) => "Closed(..)",
        })
    }
}

impl<T> fmt::Display for PushError<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Full(_) => "the queue is full; retry after a consumer has taken an item",
            Self::Closed(_) => "the queue is closed; it takes no new items",
        })
    }
}

#[cfg(feature = "std")]
impl<T> std::error::Error for PushError<T> {}

/// Why [`BoundedQueue::pop`] returned no item.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum PopError {
    /// The queue held no item at some moment during the call.
    Empty,
    /// The queue is closed and every item pushed before the close has been popped.
    Closed,
}

impl fmt::Display for PopError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Empty => "the queue is empty",
            Self::Closed => "the queue is closed and drained",
        })
    }
}

#[cfg(feature = "std")]
impl std::error::Error for PopError {}

/// Waiting for another thread to finish its step on a slot (the queue's one blocking
/// corner): exponential spinning first, then, under `std`, yielding the time slice so
/// that a preempted thread can run. Under loom, every wait is one `yield_now`.
pub(crate) struct Snooze {
    backoff: Backoff,
    #[cfg(all(feature = "std", not(loom)))]
    spins: u32,
}

impl Snooze {
    /// Spins before the first yield (each spin is `Backoff::spin`, up to 2⁶ hints).
    #[cfg(all(feature = "std", not(loom)))]
    const SPINS_BEFORE_YIELD: u32 = 10;

    pub(crate) const fn new() -> Self {
        Self {
            backoff: Backoff::new(),
            #[cfg(all(feature = "std", not(loom)))]
            spins: 0,
        }
    }

    pub(crate) fn snooze(&mut self) {
        #[cfg(all(feature = "std", not(loom)))]
        {
            if self.spins >= Self::SPINS_BEFORE_YIELD {
                std::thread::yield_now();
                return;
            }
            self.spins += 1;
        }
        self.backoff.spin();
    }
}

impl<T> BoundedQueue<T> {
    /// An empty queue holding up to `capacity` items (allocated now, never again).
    ///
    /// `capacity` 0, above [`MAX_CAPACITY`], or more memory than the allocator will
    /// give is an error, never a panic or an abort.
    ///
    /// ```
    /// use weir_leaky::{BoundedQueue, BuildError};
    ///
    /// assert!(BoundedQueue::<u64>::new(1024).is_ok());
    /// assert_eq!(BoundedQueue::<u64>::new(0).unwrap_err(), BuildError::ZeroCapacity);
    /// assert!(matches!(BoundedQueue::<u64>::new(usize::MAX), Err(BuildError::CapacityTooLarge { .. })));
    /// ```
    pub fn new(capacity: usize) -> Result<Self, BuildError> {
        Self::starting_at(capacity, 0)
    }

    /// An empty queue whose head and tail start at `{ lap, index: 0 }` instead of 0,
    /// so that a test can push and pop across the point where positions wrap round
    /// (2⁶² operations or more in a real run).
    #[cfg(test)]
    fn with_start_position(capacity: usize, lap: u64) -> Result<Self, BuildError> {
        let one_lap = ((capacity as u64).saturating_add(1).next_power_of_two()) << 1;
        Self::starting_at(capacity, lap.wrapping_mul(one_lap))
    }

    /// [`new`](Self::new), with head and tail at `start` (a position with index 0).
    fn starting_at(capacity: usize, start: u64) -> Result<Self, BuildError> {
        if capacity == 0 {
            return Err(BuildError::ZeroCapacity);
        }
        if capacity > MAX_CAPACITY {
            return Err(BuildError::CapacityTooLarge { requested: capacity, max: MAX_CAPACITY });
        }
        let mut slots = Vec::new();
        if slots.try_reserve_exact(capacity).is_err() {
            return Err(BuildError::OutOfMemory {
                capacity,
                bytes: capacity.saturating_mul(core::mem::size_of::<Slot<T>>()),
            });
        }
        // Slot `i` starts empty, ready for the push at position `{ lap, index: i }`.
        slots.extend(
            (0..capacity as u64)
                .map(|i| Slot { stamp: AtomicU64::new(start + i), value: UnsafeCell::new(MaybeUninit::uninit()) }),
        );
        let capacity = capacity as u64; // ≤ 2⁴⁰
        let mark_bit = (capacity + 1).next_power_of_two(); // ≤ 2⁴¹
        let one_lap = mark_bit << 1; // ≤ 2⁴²
        Ok(Self {
            head: CachePadded::new(AtomicU64::new(start)),
            tail: CachePadded::new(AtomicU64::new(start)),
            buffer: slots.into_boxed_slice(),
            capacity,
            mark_bit,
            one_lap,
            lap_shift: one_lap.trailing_zeros(),
        })
    }

    /// The slot at `index`.
    #[inline(always)]
    fn slot(&self, index: u64) -> &Slot<T> {
        debug_assert!(index < self.capacity);
        // SAFETY: every index comes from a position, whose index bits are below
        // `capacity` (`new` starts them at 0; `next` wraps them to 0 at `capacity`),
        // and `buffer.len() == capacity`.
        unsafe { self.buffer.get_unchecked(index as usize) }
    }

    /// The position after `position` (which has no mark bit): the next index, or index
    /// 0 of the next lap.
    #[inline(always)]
    fn next(&self, position: u64) -> u64 {
        let index = position & (self.mark_bit - 1);
        if index + 1 < self.capacity {
            position + 1
        } else {
            (position & !(self.one_lap - 1)).wrapping_add(self.one_lap)
        }
    }

    /// How many positions come before `position` (no mark bit): the number of pushes
    /// (for a tail) or pops (for a head) so far. It restarts from 0 when the positions
    /// wrap round, after at least 2⁶² operations; the difference of two ordinals is
    /// meaningful only before that (for the queue's own counts, see
    /// [`distance`](Self::distance)).
    #[inline]
    pub(crate) fn ordinal(&self, position: u64) -> u64 {
        (position >> self.lap_shift).wrapping_mul(self.capacity).wrapping_add(position & (self.mark_bit - 1))
    }

    /// How many positions lie from `head` to `tail` (neither with the mark bit), in
    /// `0..=capacity`, also across the point where positions wrap round: the tail is at
    /// most one lap ahead of the head, so the laps are compared modulo the lap count.
    /// A pair in which the head is ahead of the tail (readings from different moments)
    /// gives 0.
    #[inline]
    fn distance(&self, head: u64, tail: u64) -> u64 {
        let laps = (tail >> self.lap_shift).wrapping_sub(head >> self.lap_shift) & (u64::MAX >> self.lap_shift);
        let (head_index, tail_index) = (head & (self.mark_bit - 1), tail & (self.mark_bit - 1));
        match laps {
            0 => tail_index.saturating_sub(head_index),
            1 => (self.capacity + tail_index).saturating_sub(head_index).min(self.capacity),
            _ => 0,
        }
    }

    /// Pushes `item` at the tail, or gives it back if the queue is full or closed.
    ///
    /// Never reports [`PushError::Full`] while there is room: if the slot at the tail
    /// is still being read by a consumer that has already moved `head` past it, the
    /// push waits for that consumer (see the module docs on progress).
    #[inline]
    pub fn try_push(&self, item: T) -> Result<(), PushError<T>> {
        self.push_at(item).map(|_| ())
    }

    /// [`try_push`](Self::try_push), returning the position the item took.
    #[inline]
    pub(crate) fn push_at(&self, item: T) -> Result<u64, PushError<T>> {
        let mut backoff = Backoff::new();
        let mut snooze = Snooze::new();
        // Ordering: Relaxed; only a guess at the tail, validated by the CAS below.
        let mut tail = self.tail.load(Ordering::Relaxed);
        loop {
            if tail & self.mark_bit != 0 {
                return Err(PushError::Closed(item));
            }
            let slot = self.slot(tail & (self.mark_bit - 1));
            // Ordering: Acquire; pairs with the Release stamp store in `pop` that emptied
            // this slot on the previous lap, so that pop's read of the old value happens
            // before our write of the new one.
            let stamp = slot.stamp.load(Ordering::Acquire);
            if stamp == tail {
                // The slot is empty and ours to claim if the tail is still `tail`.
                // Ordering: SeqCst; a claim takes part in the one total order with the
                // SeqCst fences of the full/empty checks (here and in `pop`), so a check
                // that reads `tail` after its fence sees every claim ordered before it
                // and answers "empty" only if the queue was. Failure: Relaxed, the value
                // is only a new guess.
                match self.tail.compare_exchange_weak(tail, self.next(tail), Ordering::SeqCst, Ordering::Relaxed) {
                    Ok(_) => {
                        slot.value.with_mut(|value| {
                            // SAFETY: our CAS moved the tail past `tail`, so no other push
                            // can claim this slot until a pop of position `tail` hands it
                            // to the next lap; and no pop touches it before our stamp store
                            // below says "full". The Acquire stamp load above ordered the
                            // previous lap's read of this slot before this write.
                            unsafe { value.write(MaybeUninit::new(item)) };
                        });
                        // Ordering: Release; publishes the value written above; pairs with
                        // the Acquire stamp load in `pop`.
                        slot.stamp.store(tail + 1, Ordering::Release);
                        return Ok(tail);
                    }
                    Err(current) => {
                        tail = current;
                        backoff.spin();
                    }
                }
            } else if stamp.wrapping_add(self.one_lap) == tail + 1 {
                // The slot still holds the item pushed one lap ago: either the queue is
                // full, or a consumer has claimed that item (moved `head` on) and is
                // still reading it. Only the counters can tell.
                // Ordering: SeqCst fence; see the CAS above. After it, the `head` load
                // sees every pop claim ordered before the fence.
                fence(Ordering::SeqCst);
                // Ordering: Relaxed; ordered by the fence above.
                let head = self.head.load(Ordering::Relaxed);
                if head.wrapping_add(self.one_lap) == tail {
                    return Err(PushError::Full(item));
                }
                // There is room: wait for the consumer to finish with the slot (the
                // blocking corner), then retry with a fresh tail.
                snooze.snooze();
                // Ordering: Relaxed; a new guess, validated by the CAS.
                tail = self.tail.load(Ordering::Relaxed);
            } else {
                // Our tail is stale (another push already filled this slot): retry.
                backoff.spin();
                // Ordering: Relaxed; a new guess, validated by the CAS.
                tail = self.tail.load(Ordering::Relaxed);
            }
        }
    }

    /// Pops the item at the head, or says why there is none.
    ///
    /// Never reports [`PopError::Empty`] while an item has been pushed and not popped:
    /// if the head slot's push has claimed its position but not yet written the value,
    /// the pop waits for that producer (see the module docs on progress).
    #[inline]
    pub fn pop(&self) -> Result<T, PopError> {
        let mut backoff = Backoff::new();
        let mut snooze = Snooze::new();
        // Ordering: Relaxed; only a guess at the head, validated by the CAS below.
        let mut head = self.head.load(Ordering::Relaxed);
        loop {
            let slot = self.slot(head & (self.mark_bit - 1));
            // Ordering: Acquire; pairs with the Release stamp store in `push_at`, so the
            // value written before it is visible to the read below.
            let stamp = slot.stamp.load(Ordering::Acquire);
            if stamp == head + 1 {
                // The slot is full and ours to take if the head is still `head`.
                // Ordering: SeqCst, for the same reason as the tail CAS in `push_at`
                // (pairs with the fence in its full check). Failure: Relaxed.
                match self.head.compare_exchange_weak(head, self.next(head), Ordering::SeqCst, Ordering::Relaxed) {
                    Ok(_) => {
                        let item = slot.value.with_mut(|value| {
                            // SAFETY: the stamp said "full for position `head`" (the push's
                            // Release store, seen by our Acquire load, made the value
                            // visible), and our CAS made us the only pop of that position;
                            // no push reuses the slot before our stamp store below.
                            unsafe { value.read().assume_init() }
                        });
                        // Ordering: Release; orders our read of the value before the next
                        // lap's write; pairs with the Acquire stamp load in `push_at`.
                        slot.stamp.store(head.wrapping_add(self.one_lap), Ordering::Release);
                        return Ok(item);
                    }
                    Err(current) => {
                        head = current;
                        backoff.spin();
                    }
                }
            } else if stamp == head {
                // The slot has not been filled for this lap: either the queue is empty,
                // or a producer has claimed the position and is still writing.
                // Ordering: SeqCst fence; pairs with the SeqCst tail CAS in `push_at`:
                // the `tail` load below sees every claim ordered before this fence.
                fence(Ordering::SeqCst);
                // Ordering: Relaxed; ordered by the fence above.
                let tail = self.tail.load(Ordering::Relaxed);
                if tail & !self.mark_bit == head {
                    return Err(if tail & self.mark_bit != 0 { PopError::Closed } else { PopError::Empty });
                }
                // Not empty: wait for the producer to finish writing (the blocking corner).
                snooze.snooze();
                // Ordering: Relaxed; a new guess, validated by the CAS.
                head = self.head.load(Ordering::Relaxed);
            } else {
                // Our head is stale (another pop already took this slot): retry.
                backoff.spin();
                // Ordering: Relaxed; a new guess, validated by the CAS.
                head = self.head.load(Ordering::Relaxed);
            }
        }
    }

    /// Closes the queue: from now on every push fails with [`PushError::Closed`]; items
    /// already pushed are still popped, then pops report [`PopError::Closed`].
    ///
    /// Returns `true` if this call closed it, `false` if it already was.
    pub fn close(&self) -> bool {
        // Ordering: SeqCst; the mark joins the tail's modification order, so every push
        // CAS either landed before it (its item will be popped) or fails on the marked
        // value; SeqCst also puts it in the order the fences of the empty check use.
        self.tail.fetch_or(self.mark_bit, Ordering::SeqCst) & self.mark_bit == 0
    }

    /// Whether [`close`](Self::close) has been called.
    pub fn is_closed(&self) -> bool {
        // Ordering: SeqCst; a reading consistent with the other SeqCst operations.
        self.tail.load(Ordering::SeqCst) & self.mark_bit != 0
    }

    /// The number of pushes that have claimed a position so far, and whether the queue
    /// is closed.
    #[inline]
    pub(crate) fn pushed(&self) -> (u64, bool) {
        // Ordering: Relaxed; a count, used by callers between their own SeqCst fences
        // (see `LeakyBucket`'s reservation protocol).
        let tail = self.tail.load(Ordering::Relaxed);
        (self.ordinal(tail & !self.mark_bit), tail & self.mark_bit != 0)
    }

    /// The number of pops that have claimed a position so far.
    #[inline]
    pub(crate) fn popped(&self) -> u64 {
        // Ordering: Relaxed; a count for an estimate (a new item's position).
        self.ordinal(self.head.load(Ordering::Relaxed))
    }

    /// The number of items in the queue, at a moment during the call.
    ///
    /// Items whose push or pop is in progress are counted by their position claims.
    pub fn len(&self) -> usize {
        loop {
            // Ordering: SeqCst (all three loads); reads the two positions as one
            // consistent snapshot: if the tail is unchanged around the head read, both
            // values held at the moment of the head read.
            let tail = self.tail.load(Ordering::SeqCst) & !self.mark_bit;
            let head = self.head.load(Ordering::SeqCst);
            if self.tail.load(Ordering::SeqCst) & !self.mark_bit == tail {
                // Never more than full or less than empty, also across the wrap.
                return self.distance(head, tail) as usize;
            }
            spin_loop();
        }
    }

    /// Whether the queue held no item at a moment during the call.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Whether the queue held `capacity` items at a moment during the call.
    pub fn is_full(&self) -> bool {
        self.len() as u64 == self.capacity
    }

    /// The most items the queue holds.
    pub fn capacity(&self) -> usize {
        self.capacity as usize
    }
}

impl<T> Drop for BoundedQueue<T> {
    fn drop(&mut self) {
        if !core::mem::needs_drop::<T>() {
            return;
        }
        // Ordering: Relaxed; `&mut self` means every other thread's access to the queue
        // happens before this drop (through whatever gave us exclusive ownership), and
        // every push or pop that claimed a position has finished (none is in progress,
        // as they all borrow the queue).
        let head = self.head.load(Ordering::Relaxed);
        // Ordering: Relaxed; as above.
        let tail = self.tail.load(Ordering::Relaxed) & !self.mark_bit;
        let len = self.distance(head, tail);
        let mut position = head;
        for _ in 0..len {
            let slot = self.slot(position & (self.mark_bit - 1));
            slot.value.with_mut(|value| {
                // SAFETY: positions `head..tail` were pushed (each push finished its
                // write, see above) and not popped, so each of these slots holds an
                // initialized item owned by the queue; each is visited once.
                unsafe { (*value).assume_init_drop() };
            });
            position = self.next(position);
        }
    }
}

impl<T> fmt::Debug for BoundedQueue<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("BoundedQueue")
            .field("len", &self.len())
            .field("capacity", &self.capacity)
            .field("closed", &self.is_closed())
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    //! Unit tests of the ring, small enough for miri
    //! (`cargo +nightly miri test -p weir-leaky --lib`).
    use super::*;
    use alloc::sync::Arc;
    use alloc::vec;
    use core::sync::atomic::{AtomicUsize, Ordering as StdOrdering};
    use std::thread;

    /// Counts its drops in a shared counter.
    #[derive(Debug)]
    struct Counted(Arc<AtomicUsize>);

    impl Drop for Counted {
        fn drop(&mut self) {
            self.0.fetch_add(1, StdOrdering::Relaxed);
        }
    }

    #[test]
    fn fifo_through_many_laps() {
        for capacity in [1, 2, 3, 7, 8] {
            let queue = BoundedQueue::new(capacity).unwrap();
            let mut next_in = 0u32;
            let mut next_out = 0u32;
            for round in 0..(4 * capacity as u32 + 3) {
                let pushes = round % (capacity as u32 + 1);
                for _ in 0..pushes {
                    match queue.try_push(next_in) {
                        Ok(()) => next_in += 1,
                        Err(PushError::Full(v)) => {
                            assert_eq!(v, next_in);
                            assert_eq!(queue.len(), capacity);
                        }
                        Err(PushError::Closed(_)) => unreachable!(),
                    }
                }
                assert_eq!(queue.len() as u32, next_in - next_out);
                for _ in 0..round % 3 {
                    if let Ok(v) = queue.pop() {
                        assert_eq!(v, next_out);
                        next_out += 1;
                    }
                }
            }
            while let Ok(v) = queue.pop() {
                assert_eq!(v, next_out);
                next_out += 1;
            }
            assert_eq!(next_in, next_out);
            assert_eq!(queue.pop(), Err(PopError::Empty));
        }
    }

    #[test]
    fn full_and_empty() {
        let queue = BoundedQueue::new(2).unwrap();
        assert!(queue.is_empty() && !queue.is_full());
        assert_eq!(queue.pop(), Err(PopError::Empty));
        queue.try_push(1).unwrap();
        queue.try_push(2).unwrap();
        assert!(queue.is_full());
        assert_eq!(queue.try_push(3), Err(PushError::Full(3)));
        assert_eq!(queue.pop(), Ok(1));
        queue.try_push(3).unwrap();
        assert_eq!((queue.pop(), queue.pop(), queue.pop()), (Ok(2), Ok(3), Err(PopError::Empty)));
    }

    #[test]
    fn close_drains_then_reports_closed() {
        let queue = BoundedQueue::new(3).unwrap();
        queue.try_push('a').unwrap();
        queue.try_push('b').unwrap();
        assert!(queue.close());
        assert!(!queue.close());
        assert!(queue.is_closed());
        assert_eq!(queue.try_push('c'), Err(PushError::Closed('c')));
        assert_eq!(queue.len(), 2);
        assert_eq!(queue.pop(), Ok('a'));
        assert_eq!(queue.pop(), Ok('b'));
        assert_eq!(queue.pop(), Err(PopError::Closed));
        assert_eq!(queue.pop(), Err(PopError::Closed));
    }

    #[test]
    fn drop_releases_every_item_exactly_once() {
        for (capacity, pushes, pops) in [(1, 1, 0), (4, 3, 1), (4, 4, 0), (3, 7, 5), (5, 12, 9)] {
            let drops = Arc::new(AtomicUsize::new(0));
            let queue = BoundedQueue::new(capacity).unwrap();
            let mut accepted = 0;
            let mut popped = 0;
            for i in 0..pushes {
                if queue.try_push(Counted(drops.clone())).is_ok() {
                    accepted += 1;
                } else {
                    // The rejected item came back and was dropped here.
                    assert_eq!(drops.load(StdOrdering::Relaxed), popped + (i as usize + 1 - accepted));
                }
                if i < pops {
                    drop(queue.pop().unwrap());
                    popped += 1;
                }
            }
            let before = drops.load(StdOrdering::Relaxed);
            let left = queue.len();
            drop(queue);
            assert_eq!(drops.load(StdOrdering::Relaxed), before + left, "capacity {capacity}");
        }
    }

    #[test]
    fn close_then_drop_releases_every_item_left_exactly_once() {
        for (capacity, pushes, pops) in [(1, 1, 0), (3, 3, 1), (4, 6, 3), (5, 2, 0)] {
            let drops = Arc::new(AtomicUsize::new(0));
            let queue = BoundedQueue::new(capacity).unwrap();
            for i in 0..pushes {
                queue.try_push(Counted(drops.clone())).unwrap();
                if i < pops {
                    drop(queue.pop().unwrap());
                }
            }
            assert!(queue.close());
            // Turned away after the close: the item comes back and is dropped here.
            drop(queue.try_push(Counted(drops.clone())).unwrap_err().into_inner());
            let before = drops.load(StdOrdering::Relaxed);
            assert_eq!(before, pops + 1);
            assert_eq!(queue.len(), pushes - pops);
            drop(queue);
            assert_eq!(drops.load(StdOrdering::Relaxed), pushes + 1, "capacity {capacity}");
        }
    }

    #[test]
    fn positions_wrap_round_without_losing_or_duplicating_an_item() {
        // Start two laps before the positions wrap to 0 and cross the wrap several
        // times over, with a ring of a non-power-of-two size (where the number of
        // positions is not a multiple of the capacity) and of a power of two.
        for capacity in [1usize, 3, 4] {
            let one_lap = ((capacity as u64 + 1).next_power_of_two()) << 1;
            let last_lap = u64::MAX / one_lap;
            for lap in [last_lap - 1, last_lap] {
                let drops = Arc::new(AtomicUsize::new(0));
                let queue = BoundedQueue::with_start_position(capacity, lap).unwrap();
                let mut model = std::collections::VecDeque::new();
                let mut next = 0u32;
                for round in 0..3 * capacity + 4 {
                    for _ in 0..(round % (capacity + 1)) {
                        match queue.try_push((next, Counted(drops.clone()))) {
                            Ok(()) => model.push_back(next),
                            Err(PushError::Full(_)) => assert_eq!(model.len(), capacity, "a false 'full'"),
                            Err(PushError::Closed(_)) => unreachable!(),
                        }
                        next += 1;
                        assert_eq!(queue.len(), model.len());
                    }
                    for _ in 0..(round % 3) {
                        let popped = queue.pop().map(|(v, _counted)| v).ok();
                        assert_eq!(popped, model.pop_front());
                        assert_eq!(queue.len(), model.len());
                    }
                    assert_eq!(queue.is_full(), model.len() == capacity);
                }
                // Fill it across the wrap and drop it full: every item is dropped
                // once, and no slot that holds none.
                while queue.try_push((next, Counted(drops.clone()))).is_ok() {
                    model.push_back(next);
                    next += 1;
                }
                let before = drops.load(StdOrdering::Relaxed);
                drop(queue);
                assert_eq!(drops.load(StdOrdering::Relaxed), before + model.len(), "capacity {capacity}, lap {lap}");
                // Every item made is gone: the last one was turned away by the full ring.
                assert_eq!(drops.load(StdOrdering::Relaxed), next as usize + 1);
            }
            // Dropped part full, straddling the wrap: the head in the last lap, the tail
            // in lap 0. Only the items between them are dropped, each once.
            let drops = Arc::new(AtomicUsize::new(0));
            let queue = BoundedQueue::with_start_position(capacity, last_lap).unwrap();
            for _ in 0..capacity {
                queue.try_push(Counted(drops.clone())).unwrap();
            }
            for _ in 0..capacity - 1 {
                drop(queue.pop().unwrap());
            }
            let left = if capacity > 1 {
                queue.try_push(Counted(drops.clone())).unwrap(); // the first push of lap 0
                2
            } else {
                1
            };
            assert_eq!(queue.len(), left);
            drop(queue);
            assert_eq!(drops.load(StdOrdering::Relaxed), capacity - 1 + left, "capacity {capacity}");
        }
    }

    #[test]
    fn zero_sized_and_large_items() {
        let queue = BoundedQueue::new(3).unwrap();
        for _ in 0..10 {
            queue.try_push(()).unwrap();
            assert_eq!(queue.pop(), Ok(()));
        }
        let queue = BoundedQueue::new(2).unwrap();
        queue.try_push([7u8; 1000]).unwrap();
        assert_eq!(queue.pop().unwrap()[999], 7);
    }

    #[test]
    fn capacities_are_validated() {
        assert_eq!(BoundedQueue::<u8>::new(0).unwrap_err(), BuildError::ZeroCapacity);
        assert!(matches!(BoundedQueue::<u8>::new(MAX_CAPACITY + 1), Err(BuildError::CapacityTooLarge { .. })));
        assert!(matches!(BoundedQueue::<u8>::new(usize::MAX), Err(BuildError::CapacityTooLarge { .. })));
        assert_eq!(BoundedQueue::<u8>::new(1).unwrap().capacity(), 1);
    }

    #[test]
    fn push_waits_for_a_consumer_still_reading_instead_of_reporting_full() {
        // A consumer that has moved `head` past the only slot but not yet written its
        // stamp (the state a preempted `pop` leaves) must not make a push say "full".
        let queue = BoundedQueue::new(1).unwrap();
        queue.try_push(1u32).unwrap();
        // Play the first half of a pop by hand: claim the head, leave the stamp.
        let head = queue.head.load(Ordering::Relaxed);
        queue.head.store(queue.next(head), Ordering::SeqCst);
        let value = queue.slot(0).value.with_mut(|v| {
            // SAFETY: the slot holds the item pushed above and we just claimed it.
            unsafe { v.read().assume_init() }
        });
        assert_eq!(value, 1);
        assert_eq!(queue.len(), 0, "the counters say there is room");
        let pushed = AtomicUsize::new(0);
        thread::scope(|s| {
            let producer = s.spawn(|| {
                let result = queue.try_push(2u32);
                pushed.store(1, StdOrdering::Release);
                result
            });
            // The producer cannot finish until the "consumer" writes its stamp.
            for _ in 0..100 {
                thread::yield_now();
            }
            assert_eq!(pushed.load(StdOrdering::Acquire), 0, "the push waited");
            queue.slot(0).stamp.store(head.wrapping_add(queue.one_lap), Ordering::Release);
            assert_eq!(producer.join().unwrap(), Ok(()));
        });
        assert_eq!(queue.pop(), Ok(2));
    }

    #[test]
    fn pop_waits_for_a_producer_still_writing_instead_of_reporting_empty() {
        let queue = BoundedQueue::new(2).unwrap();
        // The first half of a push by hand: claim the tail, leave the slot unwritten.
        let tail = queue.tail.load(Ordering::Relaxed);
        queue.tail.store(queue.next(tail), Ordering::SeqCst);
        assert_eq!(queue.len(), 1);
        thread::scope(|s| {
            let consumer = s.spawn(|| queue.pop());
            for _ in 0..100 {
                thread::yield_now();
            }
            assert!(!consumer.is_finished(), "the pop waited");
            queue.slot(0).value.with_mut(|v| {
                // SAFETY: we claimed position `tail` above; nothing else touches the slot.
                unsafe { v.write(MaybeUninit::new(9u32)) }
            });
            queue.slot(0).stamp.store(tail + 1, Ordering::Release);
            assert_eq!(consumer.join().unwrap(), Ok(9));
        });
    }

    #[test]
    fn threads_move_each_item_exactly_once() {
        const PER_PRODUCER: u32 = if cfg!(miri) { 30 } else { 2_000 };
        const PRODUCERS: u32 = 2;
        let queue = BoundedQueue::new(3).unwrap();
        let done = AtomicUsize::new(0);
        let received = thread::scope(|s| {
            for p in 0..PRODUCERS {
                let (queue, done) = (&queue, &done);
                s.spawn(move || {
                    for i in 0..PER_PRODUCER {
                        let mut item = (p, i);
                        while let Err(e) = queue.try_push(item) {
                            item = e.into_inner();
                            thread::yield_now();
                        }
                    }
                    if done.fetch_add(1, StdOrdering::AcqRel) + 1 == PRODUCERS as usize {
                        queue.close();
                    }
                });
            }
            let consumers: Vec<_> = (0..2)
                .map(|_| {
                    s.spawn(|| {
                        let mut got = vec![];
                        loop {
                            match queue.pop() {
                                Ok(item) => got.push(item),
                                Err(PopError::Empty) => thread::yield_now(),
                                Err(PopError::Closed) => return got,
                            }
                        }
                    })
                })
                .collect();
            consumers.into_iter().map(|c| c.join().unwrap()).collect::<Vec<_>>()
        });
        let mut seen = vec![vec![false; PER_PRODUCER as usize]; PRODUCERS as usize];
        for got in &received {
            // Per producer, one consumer sees items in push order.
            let mut last = [None::<u32>; PRODUCERS as usize];
            for &(p, i) in got {
                assert!(last[p as usize].is_none_or(|l| l < i), "reordered");
                last[p as usize] = Some(i);
                assert!(!seen[p as usize][i as usize], "duplicated");
                seen[p as usize][i as usize] = true;
            }
        }
        assert!(seen.iter().flatten().all(|&s| s), "lost");
    }
}

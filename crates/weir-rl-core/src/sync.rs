//! The atomics facade: the one module every weir crate takes its atomics from.
//!
//! Under `RUSTFLAGS="--cfg loom"` everything here is [`loom`]'s, so the model checker
//! sees every atomic operation of every algorithm; otherwise the atomics are
//! [`portable_atomic`]'s, which are core's where the target has them natively and an
//! emulation where it does not (so `AtomicU64` exists on 32-bit targets too).
//!
//! Nothing else in the workspace imports atomics, `UnsafeCell` for shared slots,
//! `Arc` for shared state, or a spin hint from anywhere but here.
//!
//! [`loom`]: https://docs.rs/loom

#[cfg(loom)]
pub use loom::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering, fence};
#[cfg(not(loom))]
pub use portable_atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering, fence};

#[cfg(all(not(loom), feature = "alloc"))]
pub use alloc::sync::Arc;
#[cfg(all(loom, feature = "alloc"))]
pub use loom::sync::Arc;

/// Pads and aligns a value to the length of a cache line, so that two hot values
/// never share one (no false sharing).
pub use crossbeam_utils::CachePadded;

/// Tells the processor (or, under loom, the model checker) that this thread is
/// waiting for another one. Every waiting loop in weir calls it, so that loom
/// explores the other threads instead of spinning forever.
#[inline]
pub fn spin_loop() {
    #[cfg(loom)]
    loom::thread::yield_now();
    #[cfg(not(loom))]
    core::hint::spin_loop();
}

/// Exponential backoff for CAS retry loops: after a lost race, wait a little longer
/// each time (up to 2⁶ spin hints) before retrying, so that contending threads stop
/// stealing the cache line from the one about to succeed. Under loom each wait is one
/// `yield_now`. A limiter's retry loop makes it with [`Backoff::retrying`], which
/// under [`Contention::Fair`](crate::Contention::Fair) does not wait at all.
#[derive(Debug, Default)]
pub struct Backoff {
    step: u32,
    /// Retry at once ([`Contention::Fair`](crate::Contention::Fair)).
    fair: bool,
}

/// The longest backoff wait is 2^`SPIN_LIMIT` spin hints.
#[cfg(not(loom))]
const SPIN_LIMIT: u32 = 6;

impl Backoff {
    /// A fresh backoff.
    #[inline]
    pub const fn new() -> Self {
        Self { step: 0, fair: false }
    }

    /// The backoff of a limiter's CAS retry loop under `contention`: none for
    /// [`Fair`](crate::Contention::Fair), exponential for
    /// [`Greedy`](crate::Contention::Greedy).
    #[inline]
    pub const fn retrying(contention: crate::Contention) -> Self {
        Self { step: 0, fair: matches!(contention, crate::Contention::Fair) }
    }

    /// Waits for another thread to finish what it holds (a write under way):
    /// [`spin`](Self::spin), with at least one spin hint even when retrying at
    /// once, so that a hyperthread sibling holding it runs.
    #[inline]
    pub fn wait(&mut self) {
        #[cfg(not(loom))]
        if self.fair {
            core::hint::spin_loop();
        }
        self.spin();
    }

    /// Waits after a lost race.
    #[inline]
    pub fn spin(&mut self) {
        // Under loom every wait is one yield, fair or not: the models stay small.
        #[cfg(loom)]
        {
            let _ = self.fair;
            loom::thread::yield_now();
        }
        #[cfg(not(loom))]
        if !self.fair {
            for _ in 0..1u32 << self.step.min(SPIN_LIMIT) {
                core::hint::spin_loop();
            }
        }
        self.step = self.step.saturating_add(1);
    }
}

/// Replaces `word` with `target` if, and as long as, `allowed(current)` holds for
/// its current value; returns whether it did. Retries only when another thread
/// changed the word in between, re-judging the new value. This is how a one-word
/// state is retired ([`Retire`](crate::Retire)): `target` is the retired sentinel and
/// `allowed` says "idle".
///
/// Ordering: Relaxed; for a state that is one word, every read-modify-write of it
/// is ordered by that word's modification order alone, and retiring publishes no
/// other memory.
pub fn replace_if(word: &AtomicU64, target: u64, allowed: impl Fn(u64) -> bool) -> bool {
    // Ordering: Relaxed; see above.
    let mut current = word.load(Ordering::Relaxed);
    loop {
        if current == target || !allowed(current) {
            return false;
        }
        // Ordering: Relaxed; see above.
        match word.compare_exchange_weak(current, target, Ordering::Relaxed, Ordering::Relaxed) {
            Ok(_) => return true,
            Err(actual) => current = actual,
        }
    }
}

/// A cell whose contents other threads may access, with the access discipline
/// proven by the code that owns it. Under loom this is loom's `UnsafeCell`, which
/// checks that accesses never race; otherwise it is `core::cell::UnsafeCell` with
/// the same closure-based interface.
#[cfg(loom)]
pub use loom::cell::UnsafeCell;

/// A cell whose contents other threads may access (see the loom variant above).
#[cfg(not(loom))]
#[derive(Debug)]
#[repr(transparent)]
pub struct UnsafeCell<T>(core::cell::UnsafeCell<T>);

#[cfg(not(loom))]
impl<T> UnsafeCell<T> {
    /// Wraps `value`.
    #[inline]
    pub const fn new(value: T) -> Self {
        Self(core::cell::UnsafeCell::new(value))
    }

    /// Calls `f` with a shared raw pointer to the contents.
    #[inline]
    pub fn with<R>(&self, f: impl FnOnce(*const T) -> R) -> R {
        f(self.0.get())
    }

    /// Calls `f` with a mutable raw pointer to the contents.
    #[inline]
    pub fn with_mut<R>(&self, f: impl FnOnce(*mut T) -> R) -> R {
        f(self.0.get())
    }
}

/// A small number for the calling thread, for spreading threads over stripes: the
/// threads of a process are numbered round-robin from 0 on their first call. 0
/// without `std` (no thread-locals) or under loom (models pick stripes explicitly).
#[cfg(all(feature = "std", not(loom)))]
#[inline]
pub fn thread_index() -> usize {
    use std::cell::Cell;
    /// The next thread's number.
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    std::thread_local! {
        static INDEX: Cell<usize> = const { Cell::new(usize::MAX) };
    }
    INDEX
        .try_with(|index| {
            let number = index.get();
            if number != usize::MAX {
                return number;
            }
            // Ordering: Relaxed; only distinct numbers matter, which any ordering gives.
            let number = NEXT.fetch_add(1, Ordering::Relaxed);
            index.set(number);
            number
        })
        .unwrap_or(0) // the thread-local is gone (thread exit): any number is correct
}

/// See the `std` version: without thread-locals, every thread is 0.
#[cfg(not(all(feature = "std", not(loom))))]
#[inline]
pub fn thread_index() -> usize {
    0
}

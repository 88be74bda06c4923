//! Waiting off the hot path: the blocking and async wake-up protocol of a bucket's
//! consumers, and sleeping until a clock time. Nothing here spins a core.
//!
//! # The wake-up protocol
//!
//! A consumer that finds nothing to take registers in `sleepers`, issues a SeqCst
//! fence, checks again, and only then sleeps; whoever makes an item available (a
//! push, a consumer giving its reservation back) or closes the bucket issues a SeqCst
//! fence and then reads `sleepers`. By the fences' total order, either the consumer's
//! second check sees the new item or the waker sees the consumer registered (and
//! takes the lock before notifying, so the notification cannot fall between the
//! consumer's check and its wait). Producers pay one fence and one load of a line
//! that changes only when consumers go to sleep or wake; they touch the lock only
//! when someone sleeps. loom-checked in `loom-tests/tests/leaky.rs`.

#[cfg(loom)]
use loom::sync::{Condvar, Mutex, MutexGuard};
#[cfg(not(loom))]
use std::sync::{Condvar, Mutex, MutexGuard};

use core::time::Duration;
use std::sync::PoisonError;
use weir_rl_core::__private::sync::{AtomicU64, CachePadded, Ordering, fence};
use weir_rl_core::{Clock, Nanos};

/// One blocking sleeper, in `Waiters::sleepers`.
pub(crate) const BLOCKING_ONE: u64 = 1;
/// One async sleeper, in `Waiters::sleepers`.
#[cfg(feature = "tokio")]
pub(crate) const ASYNC_ONE: u64 = 1 << 32;
/// The blocking sleepers' half of `Waiters::sleepers`.
const BLOCKING_MASK: u64 = (1 << 32) - 1;

/// The longest single sleep; longer waits re-read the clock in between.
const MAX_SLEEP: Duration = Duration::from_secs(3_600);

/// The consumers of a bucket that are waiting for an item.
pub(crate) struct Waiters {
    /// How many consumers are registered as (about to be) asleep: blocking ones in the
    /// low 32 bits, async ones in the high 32 bits. Read by every producer, written
    /// only when a consumer goes to sleep or wakes.
    sleepers: CachePadded<AtomicU64>,
    /// Held by a blocking consumer from its last check until its wait begins, and by a
    /// waker around `notify`, so that no notification falls in between.
    lock: Mutex<()>,
    /// Where blocking consumers sleep.
    cond: Condvar,
    /// Where async consumers sleep.
    #[cfg(feature = "tokio")]
    notify: tokio::sync::Notify,
}

impl Waiters {
    pub(crate) fn new() -> Self {
        Self {
            sleepers: CachePadded::new(AtomicU64::new(0)),
            lock: Mutex::new(()),
            cond: Condvar::new(),
            #[cfg(feature = "tokio")]
            notify: tokio::sync::Notify::new(),
        }
    }

    /// Registers one sleeper of kind `one`, then fences: the caller's next check of
    /// the bucket sees every item made available before a waker's fence that did not
    /// see this registration.
    pub(crate) fn register(&self, one: u64) {
        // Ordering: Relaxed; ordered with the wakers' reads by the fence below.
        self.sleepers.fetch_add(one, Ordering::Relaxed);
        // Ordering: SeqCst fence; pairs with the fence in `wake_one`/`wake_all`.
        fence(Ordering::SeqCst);
    }

    /// Unregisters one sleeper of kind `one`.
    pub(crate) fn unregister(&self, one: u64) {
        // Ordering: Relaxed; a waker that still sees the registration only sends a
        // spurious notification.
        self.sleepers.fetch_sub(one, Ordering::Relaxed);
    }

    /// After making one item available: wakes one sleeping consumer of each kind, if
    /// any is registered.
    #[inline]
    pub(crate) fn wake_one(&self) {
        // Ordering: SeqCst fence; pairs with the fence in `register`: either that
        // consumer's check sees our item, or we see its registration.
        fence(Ordering::SeqCst);
        // Ordering: Relaxed; ordered by the fence above.
        let sleepers = self.sleepers.load(Ordering::Relaxed);
        if sleepers == 0 {
            return;
        }
        if sleepers & BLOCKING_MASK != 0 {
            // Taking the lock waits out a consumer between its check and its wait.
            drop(self.lock());
            self.cond.notify_one();
        }
        #[cfg(feature = "tokio")]
        if sleepers > BLOCKING_MASK {
            self.notify.notify_one();
        }
    }

    /// After closing: wakes every sleeping consumer.
    pub(crate) fn wake_all(&self) {
        // Ordering: SeqCst fence; as in `wake_one`.
        fence(Ordering::SeqCst);
        // Ordering: Relaxed; ordered by the fence above.
        if self.sleepers.load(Ordering::Relaxed) == 0 {
            return;
        }
        drop(self.lock());
        self.cond.notify_all();
        #[cfg(feature = "tokio")]
        self.notify.notify_waiters();
    }

    /// The lock (it guards no data, so a poisoned one is as good as any).
    pub(crate) fn lock(&self) -> MutexGuard<'_, ()> {
        self.lock.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Sleeps until notified (or, with `timeout`, until it has passed, or spuriously).
    pub(crate) fn wait<'a>(&self, guard: MutexGuard<'a, ()>, timeout: Option<Duration>) -> MutexGuard<'a, ()> {
        match timeout {
            None => self.cond.wait(guard).unwrap_or_else(PoisonError::into_inner),
            Some(timeout) => match self.cond.wait_timeout(guard, timeout.min(MAX_SLEEP)) {
                Ok((guard, _)) => guard,
                Err(poisoned) => poisoned.into_inner().0,
            },
        }
    }

    /// An async sleeper's notification, to be enabled before its last check.
    #[cfg(feature = "tokio")]
    pub(crate) fn notified(&self) -> tokio::sync::futures::Notified<'_> {
        self.notify.notified()
    }
}

/// Blocks the thread until `clock` reads `at` or later (sleeping, re-reading the
/// clock after each sleep).
pub(crate) fn sleep_until<C: Clock + ?Sized>(clock: &C, at: Nanos) {
    loop {
        let now = clock.now();
        if now >= at {
            return;
        }
        #[cfg(loom)]
        {
            let _ = now;
            loom::thread::yield_now();
        }
        #[cfg(not(loom))]
        std::thread::sleep(at.saturating_duration_since(now).min(MAX_SLEEP));
    }
}

/// Waits (asynchronously, on tokio's timer) until `clock` reads `at` or later.
#[cfg(feature = "tokio")]
pub(crate) async fn sleep_until_async<C: Clock + ?Sized>(clock: &C, at: Nanos) {
    loop {
        let now = clock.now();
        if now >= at {
            return;
        }
        tokio::time::sleep(at.saturating_duration_since(now).min(MAX_SLEEP)).await;
    }
}

//! Test utilities shared by weir's crates.
//!
//! # Cancellation at every await
//!
//! A server drops a request's future when its client disconnects, at whatever await
//! the future was parked on. Every async operation of weir that touches shared state
//! must leave that state as if the operation had never started, or as if it had
//! finished (which, the operation's docs say). [`each_cancellation`] checks that:
//! for `k = 0, 1, 2, …` it makes a fresh operation, polls it `k` times (each poll
//! after the runtime woke it, so real I/O and timers make progress), drops it, and
//! hands `k` to a check of the invariants; it stops at the first `k` at which the
//! operation completes instead, so every await the operation can be parked on is
//! covered once.
//!
//! ```
//! use std::sync::Arc;
//! use std::sync::atomic::{AtomicBool, Ordering};
//! use weir_testkit::each_cancellation;
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() {
//! // An operation that marks a flag before its await and clears it in a guard.
//! let busy = Arc::new(AtomicBool::new(false));
//! let op = |busy: Arc<AtomicBool>| async move {
//!     struct Clear(Arc<AtomicBool>);
//!     impl Drop for Clear {
//!         fn drop(&mut self) { self.0.store(false, Ordering::SeqCst) }
//!     }
//!     busy.store(true, Ordering::SeqCst);
//!     let _clear = Clear(busy.clone());
//!     tokio::task::yield_now().await;
//!     tokio::task::yield_now().await;
//! };
//! let cuts = each_cancellation(
//!     || op(busy.clone()),
//!     async |k, finished| assert!(!busy.load(Ordering::SeqCst), "left busy after {k} polls (finished: {finished})"),
//! )
//! .await;
//! assert_eq!(cuts, 4); // dropped before its first poll, at its first await, at its second; run to the end
//! # }
//! ```

#![warn(missing_docs)]

use core::future::{Future, poll_fn};
use core::pin::pin;
use core::task::Poll;

/// The most polls [`each_cancellation`] gives one operation before it calls the
/// operation a hang.
pub const MAX_POLLS: usize = 100_000;

/// Polls `future` at most `polls` times: its output if it completes within them;
/// `None` if it is still pending after the last of them, when it is dropped. Each
/// poll after the first waits for the future's waker, as an executor would.
pub async fn poll_times<F: Future>(future: F, polls: usize) -> Option<F::Output> {
    let mut future = pin!(future);
    let mut done = 0;
    poll_fn(|cx| {
        if done == polls {
            return Poll::Ready(None);
        }
        done += 1;
        future.as_mut().poll(cx).map(Some)
    })
    .await
}

/// Runs a fresh operation from `make` for `k = 0, 1, 2, …` polls, drops it, and
/// awaits `check(k, false)`; at the first `k` at which the operation completes
/// within its polls, awaits `check(k, true)` and returns `k + 1`: the runs made,
/// the drop before the first poll and one drop at each await included. So `check` sees the state after a drop at every await the
/// operation was parked on, and after a run to completion.
///
/// # Panics
///
/// If an operation is still pending after [`MAX_POLLS`] polls (a hang), or if
/// `check` panics.
pub async fn each_cancellation<Op, Fut>(mut make: Op, mut check: impl AsyncFnMut(usize, bool)) -> usize
where
    Op: FnMut() -> Fut,
    Fut: Future,
{
    for k in 0..=MAX_POLLS {
        let finished = poll_times(make(), k).await.is_some();
        check(k, finished).await;
        if finished {
            return k + 1;
        }
    }
    panic!("the operation was still pending after {MAX_POLLS} polls: a hang");
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    #[tokio::test(flavor = "current_thread")]
    async fn a_future_is_dropped_after_exactly_k_polls() {
        let polled = AtomicUsize::new(0);
        let op = || async {
            polled.fetch_add(1, Ordering::SeqCst);
            tokio::task::yield_now().await;
            polled.fetch_add(1, Ordering::SeqCst);
            tokio::task::yield_now().await;
            polled.fetch_add(1, Ordering::SeqCst);
            7
        };
        assert_eq!(poll_times(op(), 0).await, None);
        assert_eq!(polled.swap(0, Ordering::SeqCst), 0);
        assert_eq!(poll_times(op(), 1).await, None);
        assert_eq!(polled.swap(0, Ordering::SeqCst), 1);
        assert_eq!(poll_times(op(), 2).await, None);
        assert_eq!(polled.swap(0, Ordering::SeqCst), 2);
        assert_eq!(poll_times(op(), 3).await, Some(7));
        assert_eq!(polled.swap(0, Ordering::SeqCst), 3);
    }

    #[tokio::test(flavor = "current_thread", start_paused = true)]
    async fn timers_make_progress_between_polls() {
        let op = || tokio::time::sleep(std::time::Duration::from_secs(60));
        let mut seen = Vec::new();
        let cuts = each_cancellation(op, async |k, finished| seen.push((k, finished))).await;
        // Dropped before its first poll, dropped parked on the timer, run to the end.
        assert_eq!(cuts, 3);
        assert_eq!(seen, [(0, false), (1, false), (2, true)]);
    }
}

/// The README's example, compiled and run as a doc test.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
pub struct ReadmeDoctests;

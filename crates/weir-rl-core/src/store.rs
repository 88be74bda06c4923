//! The per-key contract: what HTTP middleware, in-memory stores and remote (Redis)
//! stores share.
//!
//! A middleware is generic over [`AsyncKeyedLimiter`] and never names a concrete
//! store. In-memory stores implement [`KeyedLimiter`] (synchronous, no I/O) and the
//! async form with futures that are ready at once: no
//! boxing, no allocation, no executor hop on the in-memory path
//! ([`core::future::Ready`] under an `impl Future`). A store that does
//! I/O (Redis) implements only the async form. [`Local`] gives any synchronous
//! limiter the async form.
//!
//! ```
//! use weir_rl_core::{AsyncKeyedLimiter, Decision, InsufficientCapacity, KeyedLimiter, Local, Policy, Snapshot};
//!
//! /// A toy store that admits everything, to show the shape.
//! struct Open([Policy; 1]);
//!
//! impl KeyedLimiter<str> for Open {
//!     fn check_n(&self, _key: &str, n: u64) -> Result<Decision, InsufficientCapacity> {
//!         Ok(Decision::allowed(Snapshot::new(self.0[0].limit(), self.0[0].limit() - n, 0)))
//!     }
//!     fn refund(&self, _: &str, _: u64, _: &Decision) -> Result<(), InsufficientCapacity> {
//!         Ok(())
//!     }
//!     fn snapshot(&self, _key: &str) -> Snapshot {
//!         Snapshot::new(self.0[0].limit(), self.0[0].limit(), 0)
//!     }
//!     fn policies(&self) -> &[Policy] {
//!         &self.0
//!     }
//! }
//!
//! // What a middleware does, generic over any store:
//! async fn admit<S: AsyncKeyedLimiter<str>>(store: &S, client: &str) -> Result<bool, S::Error> {
//!     Ok(store.check_n(client, 1).await?.is_allowed())
//! }
//!
//! let store = Local(Open([Policy::new(100, std::time::Duration::from_secs(60))]));
//! let _future = admit(&store, "203.0.113.7"); // polled by the server's executor
//! ```

use crate::{Decision, InsufficientCapacity, Quota, Snapshot, nanos::ticks};
use core::fmt;
use core::future::{Future, ready};
use core::time::Duration;

/// One quota as a client sees it: at most `limit` per `window`, the `q` and `w` of
/// the `RateLimit-Policy` header.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Policy {
    limit: u64,
    window: Duration,
}

impl Policy {
    /// At most `limit` per `window`.
    pub const fn new(limit: u64, window: Duration) -> Self {
        Self { limit, window }
    }

    /// A token bucket's policy: its burst, per the time an empty bucket takes to
    /// refill (`burst × period / count`; the quota's own period when the burst is
    /// the count, as for `Quota::per_minute(100)`: 100 per 60 s).
    pub const fn of(quota: &Quota) -> Self {
        Self { limit: quota.burst(), window: Duration::from_nanos(ticks::to_nanos_ceil(quota.tolerance_ticks())) }
    }

    /// The most admitted in one window (`q`).
    pub const fn limit(&self) -> u64 {
        self.limit
    }

    /// The window (`w`).
    pub const fn window(&self) -> Duration {
        self.window
    }
}

/// A per-key limiter whose state is in this process's memory: per-IP, per-API-key,
/// per-user limiting, and all-of checks over several quotas.
pub trait KeyedLimiter<K: ?Sized> {
    /// Checks a request of cost `n` for `key`, all or nothing: admitted (consuming
    /// `n`) or denied (consuming nothing). `n` above what the key's limit can ever
    /// admit at once is an error, distinct from "not yet".
    fn check_n(&self, key: &K, n: u64) -> Result<Decision, InsufficientCapacity>;

    /// Gives back `n` units that `admission` (a decision this store returned for
    /// `key`) consumed and the caller did not use: an all-of check that a later quota
    /// denied, or a request the server chose not to count. `n` is trusted: pass at
    /// most what the admission took, and refund an admission once (a store does not
    /// remember its admissions, so a second refund of one credits it again). Never
    /// gives back beyond an empty state (a full bucket, an empty window), nor what
    /// the time since the admission has already given back; a per-window algorithm
    /// gives it back to the window the admission was counted in, and not at all once
    /// that window has stopped mattering.
    fn refund(&self, key: &K, n: u64, admission: &Decision) -> Result<(), InsufficientCapacity>;

    /// `key`'s state now, without consuming anything (a key never seen is full).
    fn snapshot(&self, key: &K) -> Snapshot;

    /// The quotas this store enforces, one per [`Decision::policy_index`]: what the
    /// `RateLimit-Policy` header lists.
    fn policies(&self) -> &[Policy];
}

/// The same contract for stores that may wait on I/O (Redis), and for in-memory
/// stores at no cost: a middleware is generic over this trait alone.
pub trait AsyncKeyedLimiter<K: ?Sized>: Send + Sync {
    /// What can go wrong besides a denial: for in-memory stores only
    /// [`InsufficientCapacity`]; for remote stores also the connection.
    type Error: fmt::Debug + fmt::Display + Send + Sync + 'static;

    /// See [`KeyedLimiter::check_n`].
    fn check_n(&self, key: &K, n: u64) -> impl Future<Output = Result<Decision, Self::Error>> + Send;

    /// See [`KeyedLimiter::refund`].
    fn refund(&self, key: &K, n: u64, admission: &Decision) -> impl Future<Output = Result<(), Self::Error>> + Send;

    /// See [`KeyedLimiter::snapshot`].
    fn snapshot(&self, key: &K) -> impl Future<Output = Result<Snapshot, Self::Error>> + Send;

    /// See [`KeyedLimiter::policies`].
    fn policies(&self) -> &[Policy];
}

/// Any [`KeyedLimiter`] as an [`AsyncKeyedLimiter`] whose futures are ready at once.
///
/// In-memory stores in weir implement [`AsyncKeyedLimiter`] themselves; `Local` is
/// for a limiter of your own.
#[derive(Debug, Clone, Copy, Default)]
pub struct Local<L>(pub L);

impl<K: ?Sized + Sync, L: KeyedLimiter<K> + Send + Sync> AsyncKeyedLimiter<K> for Local<L> {
    type Error = InsufficientCapacity;

    #[inline]
    fn check_n(&self, key: &K, n: u64) -> impl Future<Output = Result<Decision, InsufficientCapacity>> + Send {
        ready(self.0.check_n(key, n))
    }

    #[inline]
    fn refund(
        &self,
        key: &K,
        n: u64,
        admission: &Decision,
    ) -> impl Future<Output = Result<(), InsufficientCapacity>> + Send {
        ready(self.0.refund(key, n, admission))
    }

    #[inline]
    fn snapshot(&self, key: &K) -> impl Future<Output = Result<Snapshot, InsufficientCapacity>> + Send {
        ready(Ok(self.0.snapshot(key)))
    }

    fn policies(&self) -> &[Policy] {
        self.0.policies()
    }
}

/// A reference, a box (a trait object among an [`AllOf`](crate::AllOf)'s members,
/// say) or an `Arc` of a limiter is that limiter.
macro_rules! delegate_keyed_limiter {
    ($($(#[$cfg:meta])* $wrapper:ty),+) => {$(
        $(#[$cfg])*
        impl<K: ?Sized, L: KeyedLimiter<K> + ?Sized> KeyedLimiter<K> for $wrapper {
            #[inline]
            fn check_n(&self, key: &K, n: u64) -> Result<Decision, InsufficientCapacity> {
                (**self).check_n(key, n)
            }
            #[inline]
            fn refund(&self, key: &K, n: u64, admission: &Decision) -> Result<(), InsufficientCapacity> {
                (**self).refund(key, n, admission)
            }
            #[inline]
            fn snapshot(&self, key: &K) -> Snapshot {
                (**self).snapshot(key)
            }
            fn policies(&self) -> &[Policy] {
                (**self).policies()
            }
        }
    )+};
}

delegate_keyed_limiter!(
    &L,
    #[cfg(feature = "alloc")]
    alloc::boxed::Box<L>,
    #[cfg(feature = "alloc")]
    alloc::sync::Arc<L>
);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_token_bucket_policy_is_its_burst_per_refill_time() {
        let q = Quota::per_minute(100).unwrap();
        assert_eq!(Policy::of(&q), Policy::new(100, Duration::from_secs(60)));
        let q = Quota::per_minute(30).unwrap().with_burst(10).unwrap();
        assert_eq!(Policy::of(&q), Policy::new(10, Duration::from_secs(20)));
    }
}

//! [`KeyedAlgorithm`]: what a store asks of the algorithm it applies to each key.

#[cfg(doc)]
use crate::{AtCapacity, Keyed};
use weir_gcra::{GcraAlgorithm, GcraState};
#[cfg(doc)]
use weir_rl_core::KeyedLimiter;
use weir_rl_core::{Algorithm, Nanos, Policy, Retire};

/// An algorithm a [`Keyed`] store can run: any [`Retire`] algorithm. (A GCRA store
/// can also move hot keys to leases, [`Keyed::with_hot_keys`]: a mode of the store,
/// [`HotKeyMode`](crate::HotKeyMode), not of this trait.)
pub trait KeyedAlgorithm: Retire {
    /// The earliest clock reading at which `state`, read at `now`, can be idle
    /// ([`Algorithm::is_idle`]) if nothing more is admitted on it: a lower bound,
    /// never later than the true time (a later one would hide an idle key). A full
    /// store searching for an idle key to evict ([`AtCapacity::EvictIdle`]) skips
    /// each shard, and then the whole store, until the least of its keys' bounds,
    /// so that new keys arriving at a store full of busy keys are denied without a
    /// search each (see the crate docs, "Finding an idle key"). GCRA and the window
    /// algorithms return the exact time (when the state is full again).
    ///
    /// The default, `now`, claims nothing beyond what a search just saw: a full
    /// store of such an algorithm searches all its keys again for every new key
    /// that arrives at a later clock reading.
    ///
    /// ```
    /// use weir_rl_core::{Algorithm, Nanos, Quota};
    /// use weir_gcra::GcraAlgorithm;
    /// use weir_keyed::KeyedAlgorithm;
    ///
    /// let gcra = GcraAlgorithm::new(Quota::per_second(10)?, Nanos::ZERO); // one permit per 100 ms
    /// let state = gcra.new_state();
    /// assert!(gcra.check_n(&state, 3, &Nanos::ZERO)?.is_allowed());
    /// assert_eq!(gcra.earliest_idle(&state, Nanos::ZERO), Nanos::new(300_000_000)); // full again
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    fn earliest_idle(&self, state: &Self::State, now: Nanos) -> Nanos {
        let _ = state;
        now
    }

    /// The quota every key gets, as a client sees it ([`KeyedLimiter::policies`], the
    /// `RateLimit-Policy` header): for GCRA its burst per refill time
    /// ([`Policy::of`]), for a window its limit per window.
    ///
    /// ```
    /// use std::time::Duration;
    /// use weir_rl_core::{Nanos, Policy, Quota};
    /// use weir_gcra::GcraAlgorithm;
    /// use weir_keyed::KeyedAlgorithm;
    ///
    /// let gcra = GcraAlgorithm::new(Quota::per_minute(100)?, Nanos::ZERO);
    /// assert_eq!(gcra.policy(), Policy::new(100, Duration::from_secs(60)));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    fn policy(&self) -> Policy;
}

/// `now` plus the time until `state` is full again by its snapshot, for the
/// algorithms whose states are idle exactly when full: GCRA (a TAT at or before
/// now), the fixed window (an empty or past window), the sliding counter (both
/// counts zero) and the sliding log (no live entry). Each reports as its reset the
/// exact time until then (GCRA rounds up to the next whole ns, when the TAT is
/// reached).
fn idle_after_reset<A: Algorithm>(algorithm: &A, state: &A::State, now: Nanos) -> Nanos {
    let reset = weir_rl_core::__private::duration_as_nanos_saturating(algorithm.snapshot(state, now).reset_after());
    Nanos::new(now.as_u64().saturating_add(reset))
}

impl KeyedAlgorithm for GcraAlgorithm {
    fn earliest_idle(&self, state: &GcraState, now: Nanos) -> Nanos {
        idle_after_reset(self, state, now)
    }
    fn policy(&self) -> Policy {
        Policy::of(&self.quota())
    }
}

#[cfg(feature = "window")]
mod window {
    use super::{KeyedAlgorithm, idle_after_reset};
    use weir_rl_core::{Nanos, Policy};
    use weir_window::fixed::{FixedWindowAlgorithm, FixedWindowState};
    use weir_window::log::{SlidingLogAlgorithm, SlidingLogState};
    use weir_window::sliding::{SlidingWindowAlgorithm, SlidingWindowState};

    /// Per-key fixed windows (no hot mode).
    impl KeyedAlgorithm for FixedWindowAlgorithm {
        fn earliest_idle(&self, state: &FixedWindowState, now: Nanos) -> Nanos {
            idle_after_reset(self, state, now)
        }
        fn policy(&self) -> Policy {
            Policy::new(self.limit(), self.window())
        }
    }
    /// Per-key sliding-window counters (no hot mode).
    impl KeyedAlgorithm for SlidingWindowAlgorithm {
        fn earliest_idle(&self, state: &SlidingWindowState, now: Nanos) -> Nanos {
            idle_after_reset(self, state, now)
        }
        fn policy(&self) -> Policy {
            Policy::new(self.limit(), self.window())
        }
    }
    /// Per-key sliding logs (no hot mode; each key costs `8 × limit` bytes).
    impl KeyedAlgorithm for SlidingLogAlgorithm {
        fn earliest_idle(&self, state: &SlidingLogState, now: Nanos) -> Nanos {
            idle_after_reset(self, state, now)
        }
        fn policy(&self) -> Policy {
            Policy::new(self.limit(), self.window())
        }
    }
}

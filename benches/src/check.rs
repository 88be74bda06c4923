//! One admission attempt, the same call for every limiter the suites measure: weir's
//! and its peers'. Implemented per type so the hot loop is monomorphized and inlined.

use crate::peers::{Governor, GovernorUpkeep, LeakyBucketPeer, MutexTokenBucket, RateLimit};
use weir_gcra::{Gcra, LeasedGcra};
use weir_rl_core::{Clock, Limiter};

/// A limiter the suites can check: one admission attempt, true when admitted.
pub trait Check: Sync {
    /// Checks one request.
    fn check_one(&self) -> bool;
}

// weir's limiters are asked the way a caller that only wants "may this pass?"
// asks: `admit` (as governor's `check` is asked, for a `Result<(), NotUntil>`).

impl<C: Clock + Sync> Check for Gcra<C> {
    #[inline]
    fn check_one(&self) -> bool {
        self.admit().is_ok()
    }
}

impl<C: Clock + Sync> Check for LeasedGcra<C> {
    #[inline]
    fn check_one(&self) -> bool {
        self.admit().is_ok()
    }
}

/// Any weir limiter through the [`Limiter`] trait (the window family).
#[derive(Debug)]
pub struct Weir<L>(pub L);

impl<L: Limiter + Sync> Check for Weir<L> {
    #[inline]
    fn check_one(&self) -> bool {
        self.0.admit().is_ok()
    }
}

impl Check for Governor {
    #[inline]
    fn check_one(&self) -> bool {
        self.check().is_ok()
    }
}

impl Check for GovernorUpkeep {
    #[inline]
    fn check_one(&self) -> bool {
        self.check().is_ok()
    }
}

impl Check for RateLimit {
    #[inline]
    fn check_one(&self) -> bool {
        self.try_wait().is_ok()
    }
}

impl Check for LeakyBucketPeer {
    #[inline]
    fn check_one(&self) -> bool {
        self.try_acquire(1)
    }
}

impl Check for MutexTokenBucket {
    #[inline]
    fn check_one(&self) -> bool {
        self.check()
    }
}

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

impl<C: Clock + Sync> Check for Gcra<C> {
    #[inline]
    fn check_one(&self) -> bool {
        self.check().is_allowed()
    }
}

impl<C: Clock + Sync> Check for LeasedGcra<C> {
    #[inline]
    fn check_one(&self) -> bool {
        self.check().is_allowed()
    }
}

/// Any weir limiter through the [`Limiter`] trait (the window family).
#[derive(Debug)]
pub struct Weir<L>(pub L);

impl<L: Limiter + Sync> Check for Weir<L> {
    #[inline]
    fn check_one(&self) -> bool {
        self.0.check().is_allowed()
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

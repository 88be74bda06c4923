//! What the unit tests of several modules share.

use crate::Key;
use weir_rl_core::{Decision, InsufficientCapacity, KeyedLimiter, Policy, Snapshot};

/// A store that admits everything under one policy.
pub(crate) struct Open(pub(crate) [Policy; 1]);

impl KeyedLimiter<Key> for Open {
    fn check_n(&self, _: &Key, _: u64) -> Result<Decision, InsufficientCapacity> {
        Ok(Decision::allowed(Snapshot::new(1, 1, 0)))
    }
    fn refund(&self, _: &Key, _: u64, _: &Decision) -> Result<(), InsufficientCapacity> {
        Ok(())
    }
    fn snapshot(&self, _: &Key) -> Snapshot {
        Snapshot::new(1, 1, 0)
    }
    fn policies(&self) -> &[Policy] {
        &self.0
    }
}

//! What can go wrong building a store or starting its sweeper.

#[cfg(doc)]
use crate::{HotKeys, Keyed, KeyedConfig};
use std::fmt;

/// Why a [`KeyedConfig`] is invalid.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum KeyedConfigError {
    /// `max_keys` of zero: the store could hold nothing.
    ZeroMaxKeys,
    /// `max_keys` larger than any machine's memory could hold.
    MaxKeysTooLarge(usize),
    /// `sweep_every` of zero.
    ZeroSweepEvery,
    /// Hot-key promotion after zero lost races.
    ZeroLostRaces,
    /// At most zero hot keys.
    ZeroHotKeys,
}

impl fmt::Display for KeyedConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Self::ZeroMaxKeys => f.write_str("max_keys is zero; a per-key store must hold at least one key"),
            Self::MaxKeysTooLarge(n) => {
                write!(f, "max_keys {n} is too large to be a memory bound; use at most usize::MAX / 2")
            }
            Self::ZeroSweepEvery => f.write_str("sweep_every is zero; sweep at least every 1 new key"),
            Self::ZeroLostRaces => f.write_str("after_lost_races is zero; a key turns hot after at least 1 lost race"),
            Self::ZeroHotKeys => f.write_str("max_hot_keys is zero; to disable hot keys, do not call with_hot_keys"),
        }
    }
}

impl std::error::Error for KeyedConfigError {}

/// Why a background sweeper could not start.
#[derive(Debug)]
#[non_exhaustive]
pub enum SweeperError {
    /// A zero interval would make the sweeper spin on a core.
    ZeroInterval,
    /// The operating system refused to start the thread.
    Spawn(std::io::Error),
}

impl fmt::Display for SweeperError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::ZeroInterval => {
                f.write_str("the sweeper's interval is zero; it would spin on a core (1 s is typical)")
            }
            Self::Spawn(e) => write!(f, "could not start the sweeper thread: {e}"),
        }
    }
}

impl std::error::Error for SweeperError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Self::Spawn(e) => Some(e),
            Self::ZeroInterval => None,
        }
    }
}

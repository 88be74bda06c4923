//! Pinning benchmark threads to cores, where the OS allows it (`core_affinity`:
//! Linux, Windows, macOS with caveats), so a thread does not migrate mid-run and
//! thread `t` of a sweep always runs on the same core.
//!
//! Thread `slot` goes to the `slot mod N`-th core this process may run on (its
//! affinity mask, so a `taskset` or a container's CPU set is respected). With more
//! threads than cores, threads share cores round-robin. Helper threads the limiters
//! start themselves (the coarse clocks' upkeep threads) are not pinned.
//!
//! Pinning is on unless the command line says `--no-pin`; it is process-wide, set by
//! the command line before any suite runs ([`set_enabled`]).

use core_affinity::CoreId;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicBool, Ordering};

static ENABLED: AtomicBool = AtomicBool::new(true);

/// Turns pinning on or off for the threads started from now on.
pub fn set_enabled(on: bool) {
    // Ordering: Relaxed; a setting read when a thread starts, publishing nothing else.
    ENABLED.store(on, Ordering::Relaxed);
}

fn enabled() -> bool {
    // Ordering: Relaxed; see `set_enabled`.
    ENABLED.load(Ordering::Relaxed)
}

/// The cores this process may run on, and whether the OS lets a thread pin itself
/// (tried once, on a scratch thread).
fn cores() -> &'static Option<Vec<CoreId>> {
    static CORES: OnceLock<Option<Vec<CoreId>>> = OnceLock::new();
    CORES.get_or_init(|| {
        let ids = core_affinity::get_core_ids().filter(|ids| !ids.is_empty())?;
        let first = ids[0];
        let works = std::thread::spawn(move || core_affinity::set_for_current(first)).join().unwrap_or(false);
        works.then_some(ids)
    })
}

/// Pins the calling thread to the core for `slot` (see the module docs); false when
/// pinning is off or not possible here.
pub fn pin_current(slot: usize) -> bool {
    match cores() {
        Some(ids) if enabled() => core_affinity::set_for_current(ids[slot % ids.len()]),
        _ => false,
    }
}

/// Whether benchmark threads are pinned, for the report's machine line.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub enum Pinning {
    /// Each benchmark thread is pinned to one of this many cores.
    Pinned {
        /// Cores in this process's affinity mask.
        cores: usize,
    },
    /// `--no-pin`: threads float as the scheduler likes.
    Off,
    /// The OS does not let a thread pin itself here.
    Unavailable,
}

/// Whether benchmark threads started now are pinned.
pub fn status() -> Pinning {
    match cores() {
        _ if !enabled() => Pinning::Off,
        Some(ids) => Pinning::Pinned { cores: ids.len() },
        None => Pinning::Unavailable,
    }
}

impl std::fmt::Display for Pinning {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Pinned { cores } => write!(f, "threads pinned to cores (round-robin over {cores})"),
            Self::Off => f.write_str("threads not pinned (--no-pin)"),
            Self::Unavailable => f.write_str("threads not pinned (the OS does not allow it here)"),
        }
    }
}

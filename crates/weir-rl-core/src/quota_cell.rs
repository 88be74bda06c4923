//! [`QuotaCell`]: a [`Quota`] that can be replaced at run time while the hot path
//! reads it without a lock.

use crate::Quota;
use crate::sync::{AtomicBool, AtomicU64, Ordering, fence, spin_loop};

/// Words per stored quota.
const WORDS: usize = 6;

/// A [`Quota`] that a writer replaces at run time while readers on the hot path read
/// it without a lock and without ever waiting for the writer.
///
/// The quota's words are kept in two slots, a double-buffered sequence lock:
/// `version` counts completed writes and slot `version & 1` holds the current
/// quota. A writer fills the *other* slot and then publishes it by bumping
/// `version`; a reader reads the current slot and retries only if `version` moved
/// meanwhile, which means a write *completed*. So readers are lock-free (never
/// blocked by a preempted writer) and always see exactly one quota, never a mix of
/// an old and a new one (mixing a new burst with an old rate could admit more than
/// either quota allows).
///
/// Writers exclude each other with a flag and may wait for one another; writing is
/// not on any check path. Modelled under loom in `loom-tests/tests/quota_cell.rs`.
///
/// ```
/// use weir_rl_core::{Quota, QuotaCell};
///
/// let cell = QuotaCell::new(Quota::per_second(10)?);
/// cell.store(Quota::per_second(100)?);
/// assert_eq!(cell.load().count(), 100);
/// # Ok::<(), weir_rl_core::QuotaError>(())
/// ```
#[derive(Debug)]
pub struct QuotaCell {
    /// Number of completed writes; slot `version & 1` is current. Stored only by the
    /// writer holding `writing`.
    version: AtomicU64,
    /// The two slots; the spare one is written only while `writing` is held.
    slots: [[AtomicU64; WORDS]; 2],
    /// Writer exclusion: true while a writer fills the spare slot.
    writing: AtomicBool,
}

impl QuotaCell {
    /// A cell holding `quota`.
    pub fn new(quota: Quota) -> Self {
        let words = quota.to_words();
        Self {
            version: AtomicU64::new(0),
            slots: [core::array::from_fn(|i| AtomicU64::new(words[i])), core::array::from_fn(|_| AtomicU64::new(0))],
            writing: AtomicBool::new(false),
        }
    }

    /// The quota of the latest completed [`store`](Self::store) (or of [`new`](Self::new)).
    #[inline]
    pub fn load(&self) -> Quota {
        loop {
            // Ordering: Acquire pairs with the Release store of `version` in `store`,
            // so the words that write put in slot `v & 1` are visible below.
            let v = self.version.load(Ordering::Acquire);
            let slot = &self.slots[(v & 1) as usize];
            // Ordering: Relaxed; whether these words come from one write is decided by
            // the version check below, which the fences make sound.
            let words = core::array::from_fn(|i| slot[i].load(Ordering::Relaxed));
            // Ordering: Acquire fence. If a load above read a word stored by a later
            // writer reusing this slot, that writer's Release fence synchronizes with
            // this fence, so the bump of `version` that preceded its writes is visible
            // to the load below, and the check fails.
            fence(Ordering::Acquire);
            // Ordering: Relaxed; ordered after the word loads by the fence above.
            if self.version.load(Ordering::Relaxed) == v {
                return Quota::from_words(words);
            }
            spin_loop();
        }
    }

    /// Replaces the quota. Readers see the old or the new one, never a mix.
    pub fn store(&self, quota: Quota) {
        // Ordering: Acquire pairs with the Release store that ends the previous write,
        // so this writer sees its `version` and its slot contents.
        while self.writing.compare_exchange_weak(false, true, Ordering::Acquire, Ordering::Relaxed).is_err() {
            spin_loop();
        }
        // Ordering: Relaxed; only the writer holding `writing` stores `version`, and
        // the Acquire above made the previous store visible.
        let v = self.version.load(Ordering::Relaxed);
        let spare = &self.slots[((v + 1) & 1) as usize];
        // Ordering: Release fence pairs with the Acquire fence in `load`: a reader that
        // sees any word stored below also sees `version >= v`, so a reader still on
        // the slot it read at `version == v - 1` retries.
        fence(Ordering::Release);
        for (word, value) in spare.iter().zip(quota.to_words()) {
            // Ordering: Relaxed; published by the Release store of `version` below.
            word.store(value, Ordering::Relaxed);
        }
        // Ordering: Release publishes the spare slot; pairs with the Acquire load in `load`.
        self.version.store(v + 1, Ordering::Release);
        // Ordering: Release hands `version` and the slots to the next writer.
        self.writing.store(false, Ordering::Release);
    }
}

//! [`QuotaCell`]: a [`Quota`] that can be replaced at run time while the hot path
//! reads it without a lock.

use crate::sync::{AtomicBool, AtomicU64, Ordering, fence, spin_loop};
use crate::{Clock, Nanos, Quota};

/// Words per stored quota.
const WORDS: usize = 6;

/// `changed_at` of a cell whose quota was never replaced.
const NEVER: u64 = 0;
/// `changed_at` while a replacement is being published, and after a
/// [`QuotaCell::store`] that named no time: the quota may have changed at any time.
const UNKNOWN: u64 = u64::MAX;

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
/// **A quota never replaced costs one load.** The cell keeps the quota it was made
/// with in a plain, never-written field as well: while `version` is 0 (no write has
/// completed) a reader takes that copy, with no slot to pick and no version to read
/// again, and a caller that needs only some of the quota's words has the others
/// optimized away (an atomic load never is). Once the quota has been replaced, every
/// load goes through the two slots (about ten instructions more per load).
///
/// The cell also records when its quota was last replaced
/// ([`store_with_clock`](Self::store_with_clock)), so that a refund of an admission
/// whose charge it does not know can tell whether the quota it was decided under
/// may have been another ([`changed_since`](Self::changed_since)).
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
    /// The quota the cell was made with: what `load` returns while `version` is 0.
    /// Never written after construction, so a reader that saw `version == 0` reads
    /// it with no further check.
    initial: Quota,
    /// The two slots; the spare one is written only while `writing` is held.
    slots: [[AtomicU64; WORDS]; 2],
    /// Writer exclusion: true while a writer fills the spare slot.
    writing: AtomicBool,
    /// When the quota was last replaced: [`NEVER`], [`UNKNOWN`], or the clock
    /// reading (ns) taken after the replacement was published, plus one, saturating
    /// (so [`UNKNOWN`] for a reading of `u64::MAX - 1` or later). Stored
    /// only by the writer holding `writing`.
    changed_at: AtomicU64,
}

impl QuotaCell {
    /// A cell holding `quota`.
    pub fn new(quota: Quota) -> Self {
        let words = quota.to_words();
        Self {
            version: AtomicU64::new(0),
            initial: quota,
            slots: [core::array::from_fn(|i| AtomicU64::new(words[i])), core::array::from_fn(|_| AtomicU64::new(0))],
            writing: AtomicBool::new(false),
            changed_at: AtomicU64::new(NEVER),
        }
    }

    /// The quota of the latest completed [`store`](Self::store) (or of [`new`](Self::new)).
    #[inline(always)]
    pub fn load(&self) -> Quota {
        // Ordering: Relaxed; a 0 means no write has completed at this load, and the
        // quota in force is `initial`, which nothing ever writes (it was written
        // before the cell was shared, which the sharing itself synchronized). A load
        // that reads 0 while a write is under way takes the quota before it, as a
        // slot load that ends before the write's publication does.
        if self.version.load(Ordering::Relaxed) == 0 {
            return self.initial;
        }
        self.load_replaced()
    }

    /// The quota, if it has never been replaced: read with one load and no copy, so
    /// a caller that reads only some of its words loads only those. `None` once a
    /// write has completed ([`load`](Self::load) then).
    ///
    ///
    /// ```
    /// use weir_rl_core::{Quota, QuotaCell};
    ///
    /// let cell = QuotaCell::new(Quota::per_second(10)?);
    /// assert_eq!(cell.unchanged().map(Quota::count), Some(10));
    /// cell.store(Quota::per_second(100)?);
    /// assert!(cell.unchanged().is_none());
    /// # Ok::<(), weir_rl_core::QuotaError>(())
    /// ```
    #[inline(always)]
    pub fn unchanged(&self) -> Option<&Quota> {
        // Ordering: Relaxed, as in `load`.
        if self.version.load(Ordering::Relaxed) == 0 { Some(&self.initial) } else { None }
    }

    /// [`load`](Self::load) once the quota has been replaced: the quota of the
    /// current slot. Inline too: out of line, its result would come back through
    /// memory and the caller's copy of the quota with it (every word of it stored
    /// and loaded again, where the unchanged path loads only the words it uses).
    #[cold]
    #[inline(always)]
    fn load_replaced(&self) -> Quota {
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

    /// Replaces the quota. Readers see the old or the new one, never a mix. The
    /// time of the change is not known, so from now on
    /// [`changed_since`](Self::changed_since) is true for every reading; prefer
    /// [`store_with_clock`](Self::store_with_clock).
    pub fn store(&self, quota: Quota) {
        self.lock();
        self.publish(quota);
        self.unlock();
    }

    /// Replaces the quota, as [`store`](Self::store) does, and records the time of
    /// the change: `clock`'s reading taken once the new quota is published, so that
    /// every check that read the old quota began before it.
    pub fn store_with_clock<C: Clock + ?Sized>(&self, quota: Quota, clock: &C) {
        self.lock();
        self.publish(quota);
        // Ordering: SeqCst fence: the new version is visible to every thread before
        // the clock is read, so a check that began after the reading loads the new
        // quota.
        fence(Ordering::SeqCst);
        // The reading plus one; a reading too late to be stored so is recorded as
        // an unknown time (a change "at any time"), never as an earlier one.
        let at = clock.now().as_u64().saturating_add(1);
        // Ordering: Release, as for the Release store of `UNKNOWN` in `publish`
        // (a reader that sees this reading sees the quota published before it).
        self.changed_at.store(at, Ordering::Release);
        self.unlock();
    }

    /// Whether the quota may have been replaced at or after the clock reading `at`
    /// (in the writer's time base): true if the latest replacement was recorded at
    /// `at` or later, is being published right now, or named no time
    /// ([`store`](Self::store)); false if the quota was never replaced or last
    /// replaced before `at`. Load the quota first: a quota loaded before this call
    /// returns false is the one in force since before `at`.
    #[inline]
    pub fn changed_since(&self, at: Nanos) -> bool {
        // Ordering: Acquire pairs with the Release stores of `changed_at`. A reader
        // that loaded the quota of a replacement reads that replacement's `UNKNOWN`
        // or a later value: the store of `UNKNOWN` precedes the Release store of
        // `version` that the quota load Acquired.
        match self.changed_at.load(Ordering::Acquire) {
            NEVER => false,
            UNKNOWN => true,
            // `changed` is the reading plus one.
            changed => changed > at.as_u64(),
        }
    }

    /// Takes the writer flag.
    fn lock(&self) {
        // Ordering: Acquire pairs with the Release store that ends the previous write,
        // so this writer sees its `version`, its slot contents and its `changed_at`.
        while self.writing.compare_exchange_weak(false, true, Ordering::Acquire, Ordering::Relaxed).is_err() {
            spin_loop();
        }
    }

    /// Releases the writer flag.
    fn unlock(&self) {
        // Ordering: Release hands `version`, the slots and `changed_at` to the next
        // writer.
        self.writing.store(false, Ordering::Release);
    }

    /// Publishes `quota` in the spare slot, marking the time of the change unknown
    /// first. The caller holds the writer flag.
    fn publish(&self, quota: Quota) {
        // Ordering: Relaxed; published by the Release store of `version` below, so a
        // reader that loads the new quota also sees this (or a later) value.
        self.changed_at.store(UNKNOWN, Ordering::Relaxed);
        // Ordering: Relaxed; only the writer holding `writing` stores `version`, and
        // the Acquire in `lock` made the previous store visible.
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
        // Ordering: Release publishes the spare slot (and `changed_at` above); pairs
        // with the Acquire load in `load`.
        self.version.store(v + 1, Ordering::Release);
    }
}

#[cfg(all(test, feature = "std"))]
mod tests {
    use super::*;
    use crate::ManualClock;
    use core::time::Duration;

    #[test]
    fn a_cell_records_when_its_quota_last_changed() {
        let clock = ManualClock::new();
        let cell = QuotaCell::new(Quota::per_second(10).unwrap());
        assert!(!cell.changed_since(Nanos::ZERO), "never changed");
        clock.advance(Duration::from_nanos(100));
        cell.store_with_clock(Quota::per_second(20).unwrap(), &clock);
        assert_eq!(cell.load().count(), 20);
        assert!(cell.changed_since(Nanos::new(100)), "a change at the same reading may be after it");
        assert!(cell.changed_since(Nanos::new(99)));
        assert!(!cell.changed_since(Nanos::new(101)));
        cell.store(Quota::per_second(30).unwrap());
        assert!(cell.changed_since(Nanos::new(u64::MAX)), "a change at an unknown time");
        cell.store_with_clock(Quota::per_second(40).unwrap(), &clock);
        assert!(!cell.changed_since(Nanos::new(101)));
    }

    /// A change at the clock's last readings cannot be recorded as the reading plus
    /// one: it is recorded as made at an unknown time, never as an earlier one (it
    /// was recorded at u64::MAX − 2, so a decision at u64::MAX − 1 looked older
    /// than the change and was credited at the new quota's price).
    #[test]
    fn a_change_at_the_last_readings_is_never_recorded_as_earlier() {
        for reading in [u64::MAX - 2, u64::MAX - 1, u64::MAX] {
            let clock = ManualClock::new();
            clock.set(Nanos::new(reading));
            let cell = QuotaCell::new(Quota::per_second(10).unwrap());
            cell.store_with_clock(Quota::per_second(20).unwrap(), &clock);
            for at in [reading - 1, reading] {
                assert!(cell.changed_since(Nanos::new(at)), "a change at {reading} is at or after {at}");
            }
        }
    }
}

//! The striped window's words: the bit layout of the global words and the
//! stripes' leases, a stripe, the global line, and what a check saw of it.

use weir_rl_core::__private::sync::AtomicU64;

/// The bit layout of the global words and the stripes' lease words:
/// `window << (c + 2) | closed << (c + 1) | drained << c | count`, `c` count bits.
/// `previous` and the lease words use the window and count fields only.
#[derive(Debug, Clone, Copy)]
pub(super) struct Layout {
    pub(super) count_bits: u32,
}

impl Layout {
    #[inline]
    pub(super) fn count(self, word: u64) -> u64 {
        word & (u64::MAX >> (u64::BITS - self.count_bits))
    }
    #[inline]
    pub(super) fn window(self, word: u64) -> u64 {
        word >> (self.count_bits + 2)
    }
    #[inline]
    pub(super) fn closed(self, word: u64) -> bool {
        (word >> (self.count_bits + 1)) & 1 == 1
    }
    #[inline]
    pub(super) fn drained(self, word: u64) -> bool {
        (word >> self.count_bits) & 1 == 1
    }
    #[inline]
    pub(super) fn drained_bit(self) -> u64 {
        1 << self.count_bits
    }
    #[inline]
    pub(super) fn closed_bit(self) -> u64 {
        1 << (self.count_bits + 1)
    }
    /// The word for `window` holding `count` (flags clear). `window` is at most the
    /// largest window number and `count` fits the count field (callers keep both).
    #[inline]
    pub(super) fn pack(self, window: u64, count: u64) -> u64 {
        (window << (self.count_bits + 2)) | count
    }
}

/// One stripe: a lease and the capacity hint of its last grant, on a line of its own.
#[derive(Debug)]
pub(super) struct Stripe {
    /// `window | count`: `count` tokens granted in `window` and not yet spent.
    pub(super) lease: AtomicU64,
    /// The global capacity left (beyond every lease) when this stripe's last lease
    /// was granted: the estimate of `remaining` in fast-path decisions.
    pub(super) hint: AtomicU64,
}

/// Tokens taken out of a stripe and not yet spent or returned.
#[derive(Debug, Clone, Copy)]
pub(super) struct Tokens {
    pub(super) window: u64,
    pub(super) count: u64,
}

impl Tokens {
    pub(super) const NONE: Tokens = Tokens { window: 0, count: 0 };
}

/// The two global words, on one cache line (they are read together).
#[derive(Debug)]
pub(super) struct Global {
    /// `window | closed | drained | count`: the latest window. While open it is the
    /// only window that grants; closing it and opening the next are CASes on this
    /// one word, so two windows are never open at once.
    pub(super) current: AtomicU64,
    /// `window | count`: a closed window's count, copied here after it is closed
    /// and before its successor opens (its window number only grows). The previous
    /// window's count when `window + 1` is the current window.
    pub(super) previous: AtomicU64,
}

/// The global words as one check saw them.
#[derive(Debug, Clone, Copy)]
pub(super) struct GlobalView {
    /// The current word.
    pub(super) word: u64,
    /// Its window number.
    pub(super) window: u64,
    /// Its count: admitted in the window plus leased out (plus held by checks
    /// between taking and returning a lease).
    pub(super) count: u64,
    /// The previous window's count (0 if the other word holds an older window).
    pub(super) prev: u64,
}

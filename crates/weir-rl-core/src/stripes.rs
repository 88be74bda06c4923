//! Stripes: how weir's striped limiters (`LeasedGcra` in weir-gcra, the striped
//! sliding window in weir-window) spread one limit over several cache lines.
//!
//! A striped limiter keeps a few counters, each on its own cache line, and gives
//! every thread one of them, so threads that check the same limit at once seldom
//! write the same line. Threads are numbered round-robin in the order they first
//! check a striped limiter (any limiter: the number is per thread, not per
//! limiter), and thread number `i` uses stripe `i mod stripes`. The stripes are
//! therefore per *thread*, not per core: a thread keeps its stripe wherever the
//! operating system runs it, and more threads than stripes share stripes.
//!
//! Both limiters take their stripe count with the same rules: at least 1, at most
//! [`MAX_STRIPES`], rounded up to a power of two; by default
//! [`default_stripes`], one per hardware thread.
//!
//! ```
//! use weir_rl_core::stripes::{MAX_STRIPES, default_stripes};
//!
//! let stripes = default_stripes();
//! assert!(stripes.is_power_of_two() && stripes <= MAX_STRIPES);
//! ```

/// The most stripes a striped limiter may have: 4 096 (a stripe is a 128-byte
/// line, so the largest limiter holds half a mebibyte of stripes).
pub const MAX_STRIPES: usize = 1 << 12;

/// The default stripe count: the machine's hardware threads
/// ([`available_parallelism`](https://doc.rust-lang.org/std/thread/fn.available_parallelism.html)) rounded up to a power of two, at most
/// [`MAX_STRIPES`]; 1 without the `std` feature.
pub fn default_stripes() -> usize {
    #[cfg(feature = "std")]
    let threads = std::thread::available_parallelism().map_or(1, core::num::NonZeroUsize::get);
    #[cfg(not(feature = "std"))]
    let threads = 1;
    threads.min(MAX_STRIPES).next_power_of_two()
}

//! [`WindowError`]: why a window limiter could not be built.

use core::fmt;
use core::time::Duration;

/// Why a window limiter could not be built. Every constructor in this crate
/// validates its input and answers with one of these instead of panicking later.
///
/// ```
/// use weir_rl_core::Quota;
/// use weir_window::{FixedWindow, WindowError};
///
/// let quota = Quota::per_minute(100)?.with_burst(20)?;
/// let error = FixedWindow::new(quota).unwrap_err();
/// assert_eq!(error, WindowError::BurstIsNotCount { count: 100, burst: 20 });
/// assert!(error.to_string().contains("Quota::per_minute(100)"));
/// # Ok::<(), weir_rl_core::QuotaError>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum WindowError {
    /// The quota's burst differs from its count. A window limiter admits `count`
    /// requests per window and has no separate burst: a quota built with
    /// [`Quota::with_burst`](weir_rl_core::Quota::with_burst) would be silently
    /// misread, so it is refused.
    BurstIsNotCount {
        /// The quota's count (the window's limit).
        count: u64,
        /// The quota's burst.
        burst: u64,
    },
    /// The limit does not fit the algorithm's one-word encoding for the 2⁵⁸ ns
    /// (about 9.1 years) every weir limiter must run after its creation: the window
    /// number and the count(s) share 64 bits, and a larger limit leaves too few bits
    /// to number the windows of that span.
    LimitTooLarge {
        /// The requested limit.
        limit: u64,
        /// The requested window length.
        window: Duration,
        /// The largest limit that fits with this window length (0 if none does).
        /// For a [`StripedSlidingWindow`](crate::StripedSlidingWindow), whose count
        /// fields hold the limit plus the batch, the largest that fits with the
        /// batch asked for (or, where that batch is larger than the limit named, a
        /// batch as large as that limit): a smaller batch fits a larger limit.
        max_limit: u64,
    },
    /// A striped limiter needs at least one stripe.
    ZeroStripes,
    /// More stripes than [`MAX_STRIPES`](crate::striped::MAX_STRIPES) were asked for.
    TooManyStripes {
        /// The requested number of stripes.
        stripes: usize,
        /// The most a limiter may have.
        max: usize,
    },
    /// A striped limiter's batch (the capacity a stripe leases at once) is zero.
    ZeroBatch,
    /// A striped limiter's batch is larger than its limit.
    BatchAboveLimit {
        /// The requested batch.
        batch: u64,
        /// The window's limit.
        limit: u64,
    },
    /// A sliding log keeps one timestamp per request of its limit, and this limit is
    /// above [`MAX_LOG_LIMIT`](crate::log::MAX_LOG_LIMIT).
    LogTooLarge {
        /// The requested limit.
        limit: u64,
        /// The largest limit a sliding log accepts.
        max: u64,
    },
    /// The memory for a sliding log's timestamps could not be allocated.
    OutOfMemory {
        /// The bytes that were asked for.
        bytes: usize,
    },
}

impl fmt::Display for WindowError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Self::BurstIsNotCount { count, burst } => write!(
                f,
                "the quota's burst ({burst}) differs from its count ({count}); a window limiter admits \
                 `count` requests per window and has no separate burst: build the quota without \
                 `with_burst` (e.g. `Quota::per_minute({count})`), or use weir-gcra for a burst"
            ),
            Self::LimitTooLarge { limit, window, max_limit } => write!(
                f,
                "a limit of {limit} per {window:?} does not fit this algorithm's one-word encoding for \
                 the 9 years every weir limiter must run; use at most {max_limit} per {window:?} (for \
                 StripedSlidingWindow, whose counts hold the limit plus the batch: with the batch asked \
                 for, or one no larger than the limit; a smaller batch fits a larger limit), or a \
                 shorter window (the same rate in shorter windows needs fewer bits), or, for the other \
                 windows, StripedSlidingWindow, whose encoding holds far larger limits"
            ),
            Self::ZeroStripes => f.write_str("a striped limiter needs at least 1 stripe; use 1 for no striping"),
            Self::TooManyStripes { stripes, max } => {
                write!(f, "{stripes} stripes asked for but at most {max} are supported; one stripe per core is enough")
            }
            Self::ZeroBatch => {
                f.write_str("a striped limiter's batch is zero; use at least 1 (1 leases nothing ahead)")
            }
            Self::BatchAboveLimit { batch, limit } => write!(
                f,
                "a batch of {batch} is larger than the limit of {limit}; use at most {limit} \
                 (about limit / 1024 keeps the approximate mode within 0.1%)"
            ),
            Self::LogTooLarge { limit, max } => write!(
                f,
                "a sliding log keeps one 8-byte timestamp per request of its limit, and {limit} is above \
                 the {max} it accepts; use SlidingWindow or StripedSlidingWindow (8 bytes and \
                 128 bytes per stripe, whatever the limit)"
            ),
            Self::OutOfMemory { bytes } => {
                write!(f, "could not allocate {bytes} bytes for a sliding log's timestamps; lower the limit")
            }
        }
    }
}

#[cfg(feature = "std")]
impl std::error::Error for WindowError {}

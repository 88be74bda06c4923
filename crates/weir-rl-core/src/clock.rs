//! Clocks: where limiters read the time.
//!
//! | clock | a reading costs | precision | use it for |
//! |---|---|---|---|
//! | [`MonotonicClock`] | one TSC read and a multiply (1×) | nanoseconds | the default |
//! | [`InstantClock`] | one `clock_gettime` (vDSO), about 3× | nanoseconds | when the TSC is not trusted |
//! | [`CoarseClock`] | one atomic load, about 1/35× | the upkeep interval you choose (plus scheduling delay) | the hottest paths |
//! | [`ManualClock`] | one atomic load, about 1/20× | exactly what the test sets | tests, simulations |
//! | [`TokioClock`] (`tokio`) | one `tokio::time::Instant` read | nanoseconds; under paused time, exactly the runtime's time | limiters tested under tokio's paused time |
//! | [`Nanos`] | none | frozen | explicit time (`check_n(state, n, &now)`) |
//!
//! The costs are ratios to a [`MonotonicClock`] reading, measured on x86-64 with an
//! invariant TSC (BENCHMARKS.md has the figures and the machine). With the precise
//! clocks the reading is most of what an uncontended check costs; that is what the
//! coarse clock is for.
//!
//! Every limiter in weir is generic over its clock, so every behaviour can be tested
//! without sleeping.
//!
//! (Clocks of a feature that is off link to their docs.rs pages.)
//!
#![cfg_attr(feature = "std", doc = "[`MonotonicClock`]: MonotonicClock")]
#![cfg_attr(feature = "std", doc = "[`InstantClock`]: InstantClock")]
#![cfg_attr(all(feature = "std", not(loom)), doc = "[`CoarseClock`]: CoarseClock")]
#![cfg_attr(feature = "alloc", doc = "[`ManualClock`]: ManualClock")]
#![cfg_attr(feature = "tokio", doc = "[`TokioClock`]: TokioClock")]
#![cfg_attr(
    not(feature = "std"),
    doc = "[`MonotonicClock`]: https://docs.rs/weir-rl-core/latest/weir_rl_core/struct.MonotonicClock.html"
)]
#![cfg_attr(
    not(feature = "std"),
    doc = "[`InstantClock`]: https://docs.rs/weir-rl-core/latest/weir_rl_core/struct.InstantClock.html"
)]
#![cfg_attr(
    not(all(feature = "std", not(loom))),
    doc = "[`CoarseClock`]: https://docs.rs/weir-rl-core/latest/weir_rl_core/struct.CoarseClock.html"
)]
#![cfg_attr(
    not(feature = "alloc"),
    doc = "[`ManualClock`]: https://docs.rs/weir-rl-core/latest/weir_rl_core/struct.ManualClock.html"
)]
#![cfg_attr(
    not(feature = "tokio"),
    doc = "[`TokioClock`]: https://docs.rs/weir-rl-core/latest/weir_rl_core/struct.TokioClock.html"
)]

use crate::Nanos;

/// A source of monotonic time: [`Nanos`] since the clock's origin.
///
/// Limiters tolerate a clock that steps backwards: a reading earlier than one already
/// used is treated as no time having passed (decisions are as strict as at the latest
/// reading or stricter, never looser), never a panic.
///
/// ```
/// use weir_rl_core::{Clock, ManualClock, Nanos};
/// use core::time::Duration;
///
/// let clock = ManualClock::new();
/// let shared = clock.clone(); // clones share one time
/// shared.advance(Duration::from_millis(5));
/// assert_eq!(clock.now(), Nanos::new(5_000_000));
/// ```
pub trait Clock {
    /// The current time.
    fn now(&self) -> Nanos;
}

/// A frozen clock: always reads `self`. This is how explicit times are passed to
/// algorithms that take a clock.
impl Clock for Nanos {
    #[inline]
    fn now(&self) -> Nanos {
        *self
    }
}

impl<C: Clock + ?Sized> Clock for &C {
    #[inline]
    fn now(&self) -> Nanos {
        (**self).now()
    }
}

#[cfg(feature = "alloc")]
impl<C: Clock + ?Sized> Clock for alloc::sync::Arc<C> {
    #[inline]
    fn now(&self) -> Nanos {
        (**self).now()
    }
}

#[cfg(feature = "alloc")]
impl<C: Clock + ?Sized> Clock for alloc::boxed::Box<C> {
    #[inline]
    fn now(&self) -> Nanos {
        (**self).now()
    }
}

#[cfg(feature = "alloc")]
mod manual {
    use crate::sync::{Arc, AtomicU64, Ordering};
    use crate::{Clock, Nanos};
    use core::time::Duration;

    /// A clock that moves only when told to. Clones share one time, so a test can
    /// hand a clone to a limiter (or to many threads) and advance it from outside.
    ///
    /// ```
    /// use weir_rl_core::{Clock, ManualClock, Nanos};
    /// use core::time::Duration;
    ///
    /// let clock = ManualClock::new();
    /// assert_eq!(clock.now(), Nanos::ZERO);
    /// clock.advance(Duration::from_secs(2));
    /// clock.set(Nanos::new(1)); // stepping backwards is allowed, to test it
    /// assert_eq!(clock.now(), Nanos::new(1));
    /// ```
    #[derive(Debug, Clone, Default)]
    pub struct ManualClock {
        now: Arc<AtomicU64>,
    }

    impl ManualClock {
        /// A clock at its origin, [`Nanos::ZERO`].
        pub fn new() -> Self {
            Self::starting_at(Nanos::ZERO)
        }

        /// A clock reading `start`.
        pub fn starting_at(start: Nanos) -> Self {
            Self { now: Arc::new(AtomicU64::new(start.as_u64())) }
        }

        /// Moves the time forward by `by`, saturating at [`Nanos::MAX`]; returns the new time.
        pub fn advance(&self, by: Duration) -> Nanos {
            let by = crate::nanos::duration_as_nanos_saturating(by);
            // Ordering: Relaxed; the clock's value publishes no other memory.
            let previous = self.now.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |t| Some(t.saturating_add(by)));
            let previous = match previous {
                Ok(t) | Err(t) => t,
            };
            Nanos::new(previous.saturating_add(by))
        }

        /// Sets the time to `to`, which may be earlier than now.
        pub fn set(&self, to: Nanos) {
            // Ordering: Relaxed; the clock's value publishes no other memory.
            self.now.store(to.as_u64(), Ordering::Relaxed);
        }
    }

    impl Clock for ManualClock {
        #[inline]
        fn now(&self) -> Nanos {
            // Ordering: Relaxed; a reading needs only this word's latest value.
            Nanos::new(self.now.load(Ordering::Relaxed))
        }
    }
}

#[cfg(feature = "alloc")]
pub use manual::ManualClock;

#[cfg(feature = "std")]
mod os {
    use crate::{Clock, Nanos};
    use core::fmt;
    use std::sync::OnceLock;
    use std::time::Instant;

    /// The process-wide origin shared by every [`MonotonicClock`], so that their
    /// readings are comparable.
    fn quanta_origin() -> &'static (quanta::Clock, u64) {
        static ORIGIN: OnceLock<(quanta::Clock, u64)> = OnceLock::new();
        ORIGIN.get_or_init(|| {
            let clock = quanta::Clock::new();
            let raw = clock.raw();
            (clock, raw)
        })
    }

    /// The process-wide origin shared by every [`InstantClock`].
    fn instant_origin() -> Instant {
        static ORIGIN: OnceLock<Instant> = OnceLock::new();
        *ORIGIN.get_or_init(Instant::now)
    }

    /// weir's default clock: monotonic nanoseconds from the processor's time-stamp
    /// counter, through [`quanta`](https://docs.rs/quanta), scaled by a calibration made
    /// once per process.
    ///
    /// A reading costs about a third of an [`InstantClock`] reading on x86-64 with an
    /// invariant TSC (the measurement behind the choice is in
    /// [DESIGN.md](https://github.com/weir-rs/weir/blob/main/DESIGN.md#the-default-clock-the-tsc-through-quanta)).
    /// Where the TSC is unusable quanta falls back to the OS clock by itself. All
    /// `MonotonicClock`s of a process share one origin, the first one's creation.
    #[derive(Clone)]
    pub struct MonotonicClock {
        clock: quanta::Clock,
        origin: u64,
    }

    impl MonotonicClock {
        /// The process's monotonic clock. The first call calibrates (a few ms, once).
        pub fn new() -> Self {
            let (clock, origin) = quanta_origin();
            Self { clock: clock.clone(), origin: *origin }
        }
    }

    impl Default for MonotonicClock {
        fn default() -> Self {
            Self::new()
        }
    }

    impl fmt::Debug for MonotonicClock {
        fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.debug_struct("MonotonicClock").field("now", &self.now()).finish()
        }
    }

    impl Clock for MonotonicClock {
        #[inline]
        fn now(&self) -> Nanos {
            Nanos::new(self.clock.delta_as_nanos(self.origin, self.clock.raw()))
        }
    }

    /// A monotonic clock from [`std::time::Instant`] (`clock_gettime(CLOCK_MONOTONIC)`
    /// on Linux). All `InstantClock`s of a process share one origin.
    #[derive(Clone, Copy)]
    pub struct InstantClock {
        origin: Instant,
    }

    impl InstantClock {
        /// The process's `Instant`-based clock.
        pub fn new() -> Self {
            Self { origin: instant_origin() }
        }
    }

    impl Default for InstantClock {
        fn default() -> Self {
            Self::new()
        }
    }

    impl fmt::Debug for InstantClock {
        fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.debug_struct("InstantClock").field("now", &self.now()).finish()
        }
    }

    impl Clock for InstantClock {
        #[inline]
        fn now(&self) -> Nanos {
            Nanos::new(crate::nanos::duration_as_nanos_saturating(self.origin.elapsed()))
        }
    }

    /// Why a coarse clock could not be made.
    #[derive(Debug)]
    #[non_exhaustive]
    pub enum CoarseClockError {
        /// The upkeep interval was zero: the upkeep thread would never sleep.
        ZeroInterval,
        /// The operating system refused to start the upkeep thread.
        Spawn(std::io::Error),
    }

    impl fmt::Display for CoarseClockError {
        fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            match self {
                Self::ZeroInterval => {
                    f.write_str("the coarse clock's upkeep interval is zero; use at least 1 µs (1 ms is typical)")
                }
                Self::Spawn(e) => write!(f, "could not start the coarse clock's upkeep thread: {e}"),
            }
        }
    }

    impl std::error::Error for CoarseClockError {
        fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
            match self {
                Self::Spawn(e) => Some(e),
                Self::ZeroInterval => None,
            }
        }
    }

    #[cfg(not(loom))]
    pub use coarse::CoarseClock;

    /// The coarse clock: a process-wide cached time (not available under loom, whose
    /// atomics cannot live in statics; models pass time explicitly).
    #[cfg(not(loom))]
    mod coarse {
        use super::{CoarseClockError, MonotonicClock};
        use crate::sync::{AtomicU64, CachePadded, Ordering};
        use crate::{Clock, Nanos};
        use core::fmt;
        use core::time::Duration;
        use std::sync::{Arc, Mutex, PoisonError, Weak};

        /// The cached time every [`CoarseClock`] in the process reads: ns since
        /// [`MonotonicClock`]'s origin. Only grows.
        static COARSE_NOW: CachePadded<AtomicU64> = CachePadded::new(AtomicU64::new(0));

        /// The running upkeep thread's token, if any: the thread exits once every clock
        /// holding the token is dropped.
        static UPKEEP: Mutex<Weak<UpkeepToken>> = Mutex::new(Weak::new());

        #[derive(Debug)]
        struct UpkeepToken {
            /// The shortest interval any holder asked for, in ns; read by the thread on
            /// every turn.
            interval_ns: AtomicU64,
        }

        /// A clock whose reading costs one atomic load: a process-wide cached
        /// [`MonotonicClock`] reading, refreshed by an upkeep thread
        /// ([`CoarseClock::with_upkeep`]) or by whoever calls [`CoarseClock::refresh`].
        ///
        /// **Precision.** A reading lags the true time by at most `L`, the upkeep
        /// interval plus the upkeep thread's scheduling delay. For a limiter this means
        /// refills arrive up to `L` late, and, because the lag varies, a real interval can
        /// look up to `L` longer to the limiter than it was (lagging by `L` at its start
        /// and by nothing at its end): in any real interval the limiter admits at most
        /// what the precise clock would in an interval `L` longer, i.e. at most
        /// `L × rate` more. Over long runs the rate is the same. Readings never go
        /// backwards.
        ///
        /// Every `CoarseClock` in a process reads one cached time (so the read is a single
        /// load from a static, no pointer to follow); with several upkeep intervals asked
        /// for, the shortest is used. Its origin is [`MonotonicClock`]'s, so the two clocks'
        /// readings are comparable. Not available under `cfg(loom)` (models pass time
        /// explicitly).
        ///
        /// ```
        /// use weir_rl_core::{Clock, CoarseClock};
        /// use std::time::Duration;
        ///
        /// // Refreshed every millisecond by a background thread, which exits soon after
        /// // the last clock holding it is dropped.
        /// let clock = CoarseClock::with_upkeep(Duration::from_millis(1))?;
        /// let t = clock.now(); // one atomic load
        /// assert!(clock.refresh() >= t); // readings never go backwards
        /// # Ok::<(), weir_rl_core::CoarseClockError>(())
        /// ```
        #[derive(Clone)]
        pub struct CoarseClock {
            /// Keeps the upkeep thread running while this clock lives.
            _upkeep: Option<Arc<UpkeepToken>>,
        }

        impl CoarseClock {
            /// A coarse clock with no upkeep thread of its own: it moves only when some
            /// caller runs [`refresh`](Self::refresh) (a server might call it once per
            /// event-loop turn), or while another clock's upkeep thread runs.
            pub fn manual_refresh() -> Self {
                refresh();
                Self { _upkeep: None }
            }

            /// A coarse clock refreshed every `interval` (or more often, if another clock
            /// asked for a shorter one) by a background thread, started on first use and
            /// stopped within one interval after the last clock holding it is dropped.
            pub fn with_upkeep(interval: Duration) -> Result<Self, CoarseClockError> {
                if interval.is_zero() {
                    return Err(CoarseClockError::ZeroInterval);
                }
                let interval_ns = crate::nanos::duration_as_nanos_saturating(interval);
                let mut running = UPKEEP.lock().unwrap_or_else(PoisonError::into_inner);
                if let Some(token) = running.upgrade() {
                    // Ordering: Relaxed; the thread reads the interval on its next turn.
                    token.interval_ns.fetch_min(interval_ns, Ordering::Relaxed);
                    refresh();
                    return Ok(Self { _upkeep: Some(token) });
                }
                let token = Arc::new(UpkeepToken { interval_ns: AtomicU64::new(interval_ns) });
                let weak = Arc::downgrade(&token);
                std::thread::Builder::new()
                    .name("weir-coarse-clock".into())
                    .spawn(move || {
                        while let Some(token) = weak.upgrade() {
                            refresh();
                            // Ordering: Relaxed; see `fetch_min` above.
                            let interval = Duration::from_nanos(token.interval_ns.load(Ordering::Relaxed));
                            drop(token);
                            std::thread::sleep(interval);
                        }
                    })
                    .map_err(CoarseClockError::Spawn)?;
                *running = Arc::downgrade(&token);
                refresh();
                Ok(Self { _upkeep: Some(token) })
            }

            /// Reads the precise clock, stores it as the cached time, and returns it.
            pub fn refresh(&self) -> Nanos {
                refresh()
            }
        }

        fn refresh() -> Nanos {
            let now = MonotonicClock::new().now().as_u64();
            // Ordering: Relaxed; the cached time publishes no other memory, and fetch_max
            // keeps it from going backwards when refreshers race.
            let previous = COARSE_NOW.fetch_max(now, Ordering::Relaxed);
            Nanos::new(previous.max(now))
        }

        impl Clock for CoarseClock {
            #[inline]
            fn now(&self) -> Nanos {
                // Ordering: Relaxed; a reading needs only this word's latest value.
                Nanos::new(COARSE_NOW.load(Ordering::Relaxed))
            }
        }

        impl fmt::Debug for CoarseClock {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.debug_struct("CoarseClock").field("upkeep", &self._upkeep.is_some()).finish()
            }
        }
    }
}

#[cfg(all(feature = "std", not(loom)))]
pub use os::CoarseClock;
#[cfg(feature = "std")]
pub use os::{CoarseClockError, InstantClock, MonotonicClock};

/// The clock a limiter reads when its type is named without one: `FixedWindow`
/// is `FixedWindow<DefaultClock>`, and `new` constructors build it.
///
/// With `std` (the default) it is [`MonotonicClock`]. Without `std` there is no
/// clock to default to: `DefaultClock` is then the uninhabited
/// [`Infallible`](core::convert::Infallible), so a limiter type named without its
/// clock cannot be built, and a `no_std` program names its clock
/// (`FixedWindow<ManualClock>`, `FixedWindow<Nanos>` for explicit time, or its own
/// [`Clock`]). Turning `std` on elsewhere in the build therefore changes no type a
/// `no_std` program can hold.
#[cfg(feature = "std")]
pub type DefaultClock = MonotonicClock;

/// The clock a limiter reads when its type is named without one: without `std`,
/// none (see the `std` build's docs). `DefaultClock` is the uninhabited
/// [`Infallible`](core::convert::Infallible), so a limiter type named without its
/// clock cannot be built: a `no_std` program names its clock
/// (`FixedWindow<ManualClock>`, `FixedWindow<Nanos>` for explicit time, or its own
/// [`Clock`]). With `std` it is
/// [`MonotonicClock`](https://docs.rs/weir-rl-core/latest/weir_rl_core/struct.MonotonicClock.html).
#[cfg(not(feature = "std"))]
pub type DefaultClock = core::convert::Infallible;

#[cfg(feature = "tokio")]
mod tokio_time {
    use crate::{Clock, Nanos};

    /// A [`Clock`] read from tokio's time: [`tokio::time::Instant`] since the clock's
    /// creation. Under tokio's paused time (`#[tokio::test(start_paused = true)]`) it
    /// moves only as the runtime advances time, so any limiter, throttle or async
    /// consumer built on it can be tested to the nanosecond without sleeping.
    ///
    /// Reading it needs no runtime; under paused time it must be read inside the
    /// runtime whose time is paused. Clones share the origin.
    ///
    /// ```
    /// use weir_rl_core::{Clock, Nanos, TokioClock};
    /// use std::time::Duration;
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() {
    /// // In a `#[tokio::test(start_paused = true)]`:
    /// let clock = TokioClock::new();
    /// tokio::time::sleep(Duration::from_millis(250)).await; // no real time passes
    /// assert_eq!(clock.now(), Nanos::new(250_000_000));
    /// # }
    /// ```
    #[derive(Debug, Clone, Copy)]
    pub struct TokioClock {
        origin: tokio::time::Instant,
    }

    impl TokioClock {
        /// A clock reading zero now.
        pub fn new() -> Self {
            Self { origin: tokio::time::Instant::now() }
        }
    }

    impl Default for TokioClock {
        fn default() -> Self {
            Self::new()
        }
    }

    impl Clock for TokioClock {
        #[inline]
        fn now(&self) -> Nanos {
            Nanos::new(crate::nanos::duration_as_nanos_saturating(self.origin.elapsed()))
        }
    }
}

#[cfg(feature = "tokio")]
pub use tokio_time::TokioClock;

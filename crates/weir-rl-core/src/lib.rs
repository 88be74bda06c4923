//! The shared contract of the weir rate limiters.
//!
//! **What to use when.** To limit requests, depend on the `weir` crate: it re-exports
//! what a program needs from here (clocks, quotas, decisions, the traits) next to the
//! algorithms. Depend on `weir-rl-core` itself to write an algorithm, a per-key store or
//! middleware that works with any weir limiter.
//!
//! ```
//! use std::time::Duration;
//! use weir_rl_core::{Clock, ManualClock, Nanos, Quota, QuotaError};
//!
//! // "100 per minute, at most 20 at once". Invalid input is a typed error at
//! // construction, never a panic later.
//! let quota = Quota::per_minute(100)?.with_burst(20)?;
//! assert_eq!((quota.count(), quota.burst()), (100, 20));
//! assert_eq!(Quota::per_second(0), Err(QuotaError::ZeroCount));
//!
//! // Every limiter is generic over its clock; tests move time by hand.
//! let clock = ManualClock::new();
//! clock.advance(Duration::from_millis(600));
//! assert_eq!(clock.now(), Nanos::new(600_000_000));
//! # Ok::<(), QuotaError>(())
//! ```
//!
//! Every weir algorithm crate builds on these pieces, so that per-key stores, HTTP
//! middleware, the Redis back end and the benchmarks treat all algorithms alike:
//!
//! - [`Clock`]: where time comes from ([`MonotonicClock`] by default, [`CoarseClock`]
//!   for the hottest paths, [`ManualClock`] for tests, a fixed [`Nanos`] for explicit time);
//! - [`Quota`]: "N per period with a burst", validated at construction ([`QuotaError`]);
//! - [`Decision`] and [`Snapshot`]: admitted or not, with limit, remaining, reset and
//!   retry-after; asking for more than can ever be admitted is [`InsufficientCapacity`];
//! - [`Limiter`] (one limiter) and [`Algorithm`] (parameters applied to separately
//!   stored states, for per-key stores);
//! - [`KeyedLimiter`] and [`AsyncKeyedLimiter`]: the per-key contract that HTTP
//!   middleware is generic over, for in-memory and remote (Redis) stores alike;
//! - [`AllOf`] (`alloc`): several quotas at once (per minute, per day, a burst), a
//!   request denied by one consuming nothing from the others;
//! - [`QuotaCell`]: a quota replaced at run time while checks read it lock-free;
//! - [`stripes`]: the stripe counts of weir's striped limiters, and how threads are
//!   spread over them.
//!
//! With the `tokio` feature, [`TokioClock`] reads tokio's (pausable) time, so any
//! limiter can be tested under `#[tokio::test(start_paused = true)]`.
//!
//! A limiter type named without its clock (`FixedWindow`, `Gcra`) reads the
//! [`DefaultClock`]: [`MonotonicClock`] with `std`.
//!
//! `no_std`: without the default `std` feature the crate needs only `core` (and `alloc`
//! with the `alloc` feature, for [`ManualClock`] and [`AllOf`]). The OS clocks need
//! `std`; without them there is no default clock, and a `no_std` program names the
//! clock of each limiter (`FixedWindow<ManualClock>`, its own [`Clock`], or a fixed
//! [`Nanos`] for explicit time).
//!
//! Why it is built this way (the clocks' costs, the quota's encoding, the facade's
//! surface): [DESIGN.md, "weir-rl-core"](https://github.com/weir-rs/weir/blob/main/DESIGN.md#weir-rl-core).
//!
//! (Items of a feature that is off link to their docs.rs pages.)
//!
#![cfg_attr(feature = "std", doc = "[`MonotonicClock`]: MonotonicClock")]
#![cfg_attr(all(feature = "std", not(loom)), doc = "[`CoarseClock`]: CoarseClock")]
#![cfg_attr(feature = "alloc", doc = "[`ManualClock`]: ManualClock")]
#![cfg_attr(feature = "alloc", doc = "[`AllOf`]: AllOf")]
#![cfg_attr(feature = "tokio", doc = "[`TokioClock`]: TokioClock")]
#![cfg_attr(
    not(feature = "std"),
    doc = "[`MonotonicClock`]: https://docs.rs/weir-rl-core/latest/weir_rl_core/struct.MonotonicClock.html"
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
    not(feature = "alloc"),
    doc = "[`AllOf`]: https://docs.rs/weir-rl-core/latest/weir_rl_core/struct.AllOf.html"
)]
#![cfg_attr(
    not(feature = "tokio"),
    doc = "[`TokioClock`]: https://docs.rs/weir-rl-core/latest/weir_rl_core/struct.TokioClock.html"
)]
#![no_std]
#![cfg_attr(docsrs, feature(doc_cfg))]

#[cfg(feature = "alloc")]
extern crate alloc;
#[cfg(feature = "std")]
extern crate std;

#[cfg(feature = "alloc")]
mod all_of;
pub mod clock;
mod contention;
mod decision;
mod limiter;
#[cfg(feature = "long-keys")]
mod long_key;
mod nanos;
mod quota;
mod quota_cell;
mod single;
mod store;
pub mod stripes;
mod sync;

/// Not part of weir's public API and not covered by its semver promises: what
/// weir's own crates share with each other. Hidden from the docs; a program that
/// uses weir never needs it.
#[doc(hidden)]
pub mod __private {
    /// The atomics facade every weir crate takes its atomics from (loom's under
    /// `cfg(loom)`, so the model checker sees every atomic operation).
    pub mod sync {
        pub use crate::sync::*;
    }
    pub use crate::nanos::{duration_as_nanos_saturating, ticks};
    pub use crate::quota::MAX_TOLERANCE_TICKS;
    /// Declares a limiter type over an algorithm (see the macro's docs).
    pub use crate::single_limiter;
    use crate::stripes::MAX_STRIPES;

    /// The stripe count for a request of `stripes`: rounded up to a power of two, or
    /// `None` when it is 0 or above [`MAX_STRIPES`](crate::stripes::MAX_STRIPES) (each limiter turns that into its
    /// own typed error).
    pub fn checked_stripes(stripes: usize) -> Option<usize> {
        if stripes == 0 || stripes > MAX_STRIPES { None } else { Some(stripes.next_power_of_two()) }
    }

    /// The calling thread's stripe number before the modulo: its round-robin thread
    /// number (0 without `std`, and under loom, whose models pick stripes explicitly).
    #[inline]
    pub fn thread_stripe() -> usize {
        crate::sync::thread_index()
    }
}

#[cfg(feature = "alloc")]
pub use all_of::{AllOf, AllOfError, AllOfMembers};
#[cfg(all(feature = "std", not(loom)))]
pub use clock::CoarseClock;
#[cfg(feature = "alloc")]
pub use clock::ManualClock;
#[cfg(feature = "tokio")]
pub use clock::TokioClock;
pub use clock::{Clock, DefaultClock};
#[cfg(feature = "std")]
pub use clock::{CoarseClockError, InstantClock, MonotonicClock};
pub use contention::Contention;
pub use decision::{Decision, DenyReason, InsufficientCapacity, Snapshot, Wait};
pub use limiter::{Algorithm, Limiter, Retire};
#[cfg(feature = "long-keys")]
pub use long_key::{LONG_KEY_HASH_BYTES, LongKeys, long_key_hash};
pub use nanos::Nanos;
// Kept at the root, hidden, for crates that still name it there; weir's crates use
// `__private::MAX_TOLERANCE_TICKS`.
#[doc(hidden)]
pub use quota::MAX_TOLERANCE_TICKS;
pub use quota::{Quota, QuotaError};
pub use quota_cell::QuotaCell;
pub use store::{AsyncKeyedLimiter, KeyedLimiter, Local, Policy};

/// The README's example, compiled and run as a doc test.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
pub struct ReadmeDoctests;

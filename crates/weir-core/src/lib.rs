//! The shared contract of the weir rate limiters.
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
//! - [`sync`]: the one module weir's crates take atomics from (loom's under `cfg(loom)`).
//!
//! With the `tokio` feature, [`TokioClock`] reads tokio's (pausable) time, so any
//! limiter can be tested under `#[tokio::test(start_paused = true)]`.
//!
//! `no_std`: without the default `std` feature the crate needs only `core` (and `alloc`
//! with the `alloc` feature, for [`ManualClock`]). The OS clocks need `std`.

#![no_std]
#![cfg_attr(docsrs, feature(doc_cfg))]

#[cfg(feature = "alloc")]
extern crate alloc;
#[cfg(feature = "std")]
extern crate std;

#[cfg(feature = "alloc")]
mod all_of;
pub mod clock;
mod decision;
mod limiter;
pub mod nanos;
mod quota;
mod quota_cell;
mod single;
mod store;
pub mod sync;

#[cfg(feature = "alloc")]
pub use all_of::{AllOf, AllOfError, AllOfMembers};
pub use clock::Clock;
#[cfg(all(feature = "std", not(loom)))]
pub use clock::CoarseClock;
#[cfg(feature = "alloc")]
pub use clock::ManualClock;
#[cfg(feature = "tokio")]
pub use clock::TokioClock;
#[cfg(feature = "std")]
pub use clock::{CoarseClockError, InstantClock, MonotonicClock};
pub use decision::{Decision, DenyReason, InsufficientCapacity, Snapshot};
pub use limiter::{Algorithm, Limiter, Retire};
pub use nanos::{Nanos, ticks};
pub use quota::{MAX_TOLERANCE_TICKS, Quota, QuotaError};
pub use quota_cell::QuotaCell;
pub use store::{AsyncKeyedLimiter, KeyedLimiter, Local, Policy};

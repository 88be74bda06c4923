//! weir: lock-free concurrent rate limiters for the hot path of high-throughput servers.
//!
//! This is the crate to add first. It names, at its root, the types every limiter
//! shares (clocks, [`Quota`], [`Decision`], the [`Limiter`] and per-key traits, one
//! [`Error`]), and each algorithm as a module behind a feature:
//!
//! | feature | module | what |
//! |---|---|---|
//! | `gcra` (default) | [`gcra`] | token bucket in GCRA encoding: one atomic word, one CAS per admission; `LeasedGcra` for one limit hit by every core |
//! | `window` (default) | [`window`] | fixed window, sliding counter, exact sliding log, striped sliding window |
//! | `leaky` (default) | [`leaky`] | bounded MPMC queue drained at a constant rate: throttling by delay |
//! | `keyed` (default) | [`keyed`] | per-key limiting: bounded memory, exact idle eviction, hot keys |
//! | `std` (default) | | OS clocks ([`MonotonicClock`], [`InstantClock`], [`CoarseClock`]), `std::error::Error` impls; without it the crate is `no_std` + `alloc` |
//! | `tokio` | [`leaky`] | the leaky bucket's async consumers, the request throttle, and [`TokioClock`] |
//! | `tower` | [`tower`] | rate-limiting middleware for tower, axum and hyper servers (`axum`: the client address from axum's `ConnectInfo`) |
//! | `redis` | [`redis`] | limits kept in Redis, shared by every instance of a service (`redis-tls`: `rediss://` URLs) |
//!
//! ```
//! use weir::{Quota, gcra::Gcra};
//!
//! fn limiter() -> Result<Gcra, weir::Error> {
//!     // 50 per second, at most 10 at once.
//!     Ok(Gcra::new(Quota::per_second(50)?.with_burst(10)?))
//! }
//!
//! let limiter = limiter()?;
//! let decision = limiter.check();
//! if decision.is_denied() {
//!     println!("429, retry after {:?}", decision.retry_after());
//! }
//! # Ok::<(), weir::Error>(())
//! ```
//!
//! What the facade leaves out on purpose: the atomics facade, the limiter-declaring
//! macro and the fixed-point time helpers that weir's crates share among themselves
//! (they live in `weir-core`'s hidden `__private` module, and are not part of
//! weir's stable surface). Why: [DESIGN.md, "The facade names what users
//! need"](https://github.com/weir-rs/weir/blob/main/DESIGN.md#the-facade-names-what-users-need).
//!
//! (Items of a feature that is off link to their docs.rs pages.)
//!

#![no_std]
#![cfg_attr(docsrs, feature(doc_cfg))]
// Where the crate docs' links go: to the item when its feature is on, to docs.rs
// (built with every feature) when it is off.
#![cfg_attr(feature = "gcra", doc = "[`gcra`]: gcra")]
#![cfg_attr(not(feature = "gcra"), doc = "[`gcra`]: https://docs.rs/weir/latest/weir/gcra/index.html")]
#![cfg_attr(feature = "window", doc = "[`window`]: window")]
#![cfg_attr(not(feature = "window"), doc = "[`window`]: https://docs.rs/weir/latest/weir/window/index.html")]
#![cfg_attr(feature = "leaky", doc = "[`leaky`]: leaky")]
#![cfg_attr(not(feature = "leaky"), doc = "[`leaky`]: https://docs.rs/weir/latest/weir/leaky/index.html")]
#![cfg_attr(feature = "keyed", doc = "[`keyed`]: keyed")]
#![cfg_attr(not(feature = "keyed"), doc = "[`keyed`]: https://docs.rs/weir/latest/weir/keyed/index.html")]
#![cfg_attr(feature = "std", doc = "[`MonotonicClock`]: MonotonicClock")]
#![cfg_attr(
    not(feature = "std"),
    doc = "[`MonotonicClock`]: https://docs.rs/weir/latest/weir/struct.MonotonicClock.html"
)]
#![cfg_attr(feature = "std", doc = "[`InstantClock`]: InstantClock")]
#![cfg_attr(not(feature = "std"), doc = "[`InstantClock`]: https://docs.rs/weir/latest/weir/struct.InstantClock.html")]
#![cfg_attr(feature = "std", doc = "[`CoarseClock`]: CoarseClock")]
#![cfg_attr(not(feature = "std"), doc = "[`CoarseClock`]: https://docs.rs/weir/latest/weir/struct.CoarseClock.html")]
#![cfg_attr(feature = "tower", doc = "[`tower`]: tower")]
#![cfg_attr(not(feature = "tower"), doc = "[`tower`]: https://docs.rs/weir/latest/weir/tower/index.html")]
#![cfg_attr(feature = "redis", doc = "[`redis`]: redis")]
#![cfg_attr(not(feature = "redis"), doc = "[`redis`]: https://docs.rs/weir/latest/weir/redis/index.html")]
#![cfg_attr(feature = "tokio", doc = "[`TokioClock`]: TokioClock")]
#![cfg_attr(not(feature = "tokio"), doc = "[`TokioClock`]: https://docs.rs/weir/latest/weir/struct.TokioClock.html")]

#[cfg(feature = "std")]
extern crate std;

mod error;

pub use error::Error;

// Time.
#[cfg(all(feature = "std", not(loom)))]
pub use weir_core::CoarseClock;
#[cfg(feature = "std")]
pub use weir_core::CoarseClockError;
#[cfg(feature = "tokio")]
pub use weir_core::TokioClock;
pub use weir_core::{Clock, DefaultClock, ManualClock, Nanos};
#[cfg(feature = "std")]
pub use weir_core::{InstantClock, MonotonicClock};

// Quotas, decisions and the limiter traits.
pub use weir_core::{Algorithm, Limiter, Retire};
pub use weir_core::{Decision, DenyReason, InsufficientCapacity, Snapshot};
pub use weir_core::{Quota, QuotaError};

// The per-key contract and all-of checks.
pub use weir_core::{AllOf, AllOfError, AllOfMembers};
pub use weir_core::{AsyncKeyedLimiter, KeyedLimiter, Local, Policy};

/// Token bucket in GCRA encoding (the `weir-gcra` crate).
#[cfg(feature = "gcra")]
pub mod gcra {
    pub use weir_gcra::*;
}

/// Window limiters (the `weir-window` crate).
#[cfg(feature = "window")]
pub mod window {
    pub use weir_window::*;
}

/// Throttling by queueing and delay (the `weir-leaky` crate).
#[cfg(feature = "leaky")]
pub mod leaky {
    pub use weir_leaky::*;
}

/// Per-key limiting (the `weir-keyed` crate).
#[cfg(feature = "keyed")]
pub mod keyed {
    pub use weir_keyed::*;
}

/// Rate-limiting middleware for tower, axum and hyper (the `weir-tower` crate).
#[cfg(feature = "tower")]
pub mod tower {
    pub use weir_tower::*;
}

/// Limits kept in Redis, for a fleet of instances (the `weir-redis` crate).
#[cfg(feature = "redis")]
pub mod redis {
    pub use weir_redis::*;
}

/// The README's Rust example, compiled and run as a doc test.
#[doc = include_str!("../../../README.md")]
#[cfg(doctest)]
pub struct ReadmeDoctests;

/// What weir's crates share among themselves is not part of the facade: each of
/// these fails to compile.
///
/// ```compile_fail
/// use weir::sync::Backoff; // the atomics facade
/// ```
///
/// ```compile_fail
/// use weir::single_limiter; // the macro that declares a limiter type
/// ```
///
/// ```compile_fail
/// use weir::ticks; // fixed-point time arithmetic
/// ```
///
/// ```compile_fail
/// use weir::QuotaCell; // the lock-free quota slot of the algorithms
/// ```
///
/// What a user names does compile:
///
/// ```
/// use weir::{AllOf, Clock, Decision, Error, KeyedLimiter, Limiter, ManualClock, Nanos, Quota, Snapshot};
/// ```
#[cfg(doctest)]
pub struct InternalsAreNotExported;

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
//! | `tower` | [`tower`] | rate-limiting middleware for tower, axum and hyper servers (`axum`: the client address from axum's `ConnectInfo`; an axum server limited per IP needs it, since `tower` alone cannot read axum's `ConnectInfo`; `grpc`: refusals a tonic client reads as `RESOURCE_EXHAUSTED` with a retry pushback, and a tonic server's peer address) |
//! | `actix` | `actix` | rate-limiting middleware for actix-web 4 (the same configuration file and answers as `tower`'s) |
//! | `redis` | [`redis`] | limits kept in Redis, shared by every instance of a service (`redis-tls`: `rediss://` URLs) |
//! | `metrics` | | counters, gauges and histograms through the [`metrics`](https://docs.rs/metrics) facade from each enabled crate that has them (`keyed`, `tower`, `actix`, `redis`): decisions by outcome, keys stored, evictions, throttle waits, Redis paths and latency; names and labels in each crate's docs |
//!
//! ```
//! use weir_rl::{Quota, gcra::Gcra};
//!
//! fn limiter() -> Result<Gcra, weir_rl::Error> {
//!     // 50 per second, at most 10 at once.
//!     Ok(Gcra::new(Quota::per_second(50)?.with_burst(10)?))
//! }
//!
//! let limiter = limiter()?;
//! let decision = limiter.check();
//! if decision.is_denied() {
//!     println!("429, retry after {:?}", decision.retry_after());
//! }
//! # Ok::<(), weir_rl::Error>(())
//! ```
//!
//! **Several quotas at once** (a tier: per minute, per day and a burst), all or
//! nothing, with the quota that decided named in the decision. With `String` keys,
//! name the borrowed key type the members are checked with (`AllOf::new::<str>`):
//!
//! ```
//! use weir_rl::keyed::{KeyedConfig, KeyedFixedWindow, KeyedGcra, KeyedSlidingWindow};
//! use weir_rl::{AllOf, KeyedLimiter, Quota};
//!
//! # fn main() -> Result<(), weir_rl::Error> {
//! let config = || KeyedConfig::builder(100_000).build();
//! let burst: KeyedGcra<String> = KeyedGcra::gcra(Quota::per_minute(30)?.with_burst(10)?, config()?);
//! let minute: KeyedSlidingWindow<String> = KeyedSlidingWindow::sliding_window(Quota::per_minute(30)?, config()?)?;
//! let day: KeyedFixedWindow<String> = KeyedFixedWindow::fixed_window(Quota::per_day(1_000)?, config()?)?;
//! let tier = AllOf::new::<str>((burst, minute, day))?;
//!
//! let decision = tier.check_n("api-key-123", 1)?;
//! assert!(decision.is_allowed());
//! let binding = &tier.policies()[decision.policy_index()]; // the quota with the least left
//! assert_eq!(binding.limit(), 10);
//! # Ok(())
//! # }
//! ```
//!
//! **Reading the module pages.** Each module is one of weir's crates, re-exported
//! whole, and its pages are that crate's own docs: their examples name the crate
//! (`weir_keyed::Keyed` is `weir_rl::keyed::Keyed`, `weir_rl_core::Quota` is
//! `weir_rl::Quota`). With only `weir` in `Cargo.toml`, write `weir_rl::` paths:
//!
//! | in the examples | with the facade |
//! |---|---|
//! | `weir_rl_core::X` | `weir_rl::X` |
//! | `weir_gcra::X` | `weir_rl::gcra::X` |
//! | `weir_window::X` | `weir_rl::window::X` |
//! | `weir_leaky::X` | `weir_rl::leaky::X` |
//! | `weir_keyed::X` | `weir_rl::keyed::X` |
//! | `weir_tower::X` | `weir_rl::tower::X` |
//! | `weir_redis::X` | `weir_rl::redis::X` |
//!
//! What the facade leaves out on purpose: the atomics facade, the limiter-declaring
//! macro and the fixed-point time helpers that weir's crates share among themselves
//! (they live in `weir-rl-core`'s hidden `__private` module, and are not part of
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
#![cfg_attr(not(feature = "gcra"), doc = "[`gcra`]: https://docs.rs/weir-rl/latest/weir_rl/gcra/index.html")]
#![cfg_attr(feature = "window", doc = "[`window`]: window")]
#![cfg_attr(not(feature = "window"), doc = "[`window`]: https://docs.rs/weir-rl/latest/weir_rl/window/index.html")]
#![cfg_attr(feature = "leaky", doc = "[`leaky`]: leaky")]
#![cfg_attr(not(feature = "leaky"), doc = "[`leaky`]: https://docs.rs/weir-rl/latest/weir_rl/leaky/index.html")]
#![cfg_attr(feature = "keyed", doc = "[`keyed`]: keyed")]
#![cfg_attr(not(feature = "keyed"), doc = "[`keyed`]: https://docs.rs/weir-rl/latest/weir_rl/keyed/index.html")]
#![cfg_attr(feature = "std", doc = "[`MonotonicClock`]: MonotonicClock")]
#![cfg_attr(
    not(feature = "std"),
    doc = "[`MonotonicClock`]: https://docs.rs/weir-rl/latest/weir_rl/struct.MonotonicClock.html"
)]
#![cfg_attr(feature = "std", doc = "[`InstantClock`]: InstantClock")]
#![cfg_attr(
    not(feature = "std"),
    doc = "[`InstantClock`]: https://docs.rs/weir-rl/latest/weir_rl/struct.InstantClock.html"
)]
#![cfg_attr(feature = "std", doc = "[`CoarseClock`]: CoarseClock")]
#![cfg_attr(
    not(feature = "std"),
    doc = "[`CoarseClock`]: https://docs.rs/weir-rl/latest/weir_rl/struct.CoarseClock.html"
)]
#![cfg_attr(feature = "tower", doc = "[`tower`]: tower")]
#![cfg_attr(not(feature = "tower"), doc = "[`tower`]: https://docs.rs/weir-rl/latest/weir_rl/tower/index.html")]
#![cfg_attr(feature = "redis", doc = "[`redis`]: redis")]
#![cfg_attr(not(feature = "redis"), doc = "[`redis`]: https://docs.rs/weir-rl/latest/weir_rl/redis/index.html")]
#![cfg_attr(feature = "tokio", doc = "[`TokioClock`]: TokioClock")]
#![cfg_attr(
    not(feature = "tokio"),
    doc = "[`TokioClock`]: https://docs.rs/weir-rl/latest/weir_rl/struct.TokioClock.html"
)]

#[cfg(feature = "std")]
extern crate std;

mod error;

pub use error::Error;

// Time.
#[cfg(all(feature = "std", not(loom)))]
pub use weir_rl_core::CoarseClock;
#[cfg(feature = "std")]
pub use weir_rl_core::CoarseClockError;
#[cfg(feature = "tokio")]
pub use weir_rl_core::TokioClock;
pub use weir_rl_core::{Clock, DefaultClock, ManualClock, Nanos};
#[cfg(feature = "std")]
pub use weir_rl_core::{InstantClock, MonotonicClock};

// Quotas, decisions and the limiter traits.
pub use weir_rl_core::{Algorithm, Limiter, Retire};
pub use weir_rl_core::{Contention, Decision, DenyReason, InsufficientCapacity, Snapshot, Wait};
pub use weir_rl_core::{Quota, QuotaError};

// The per-key contract and all-of checks.
pub use weir_rl_core::{AllOf, AllOfError, AllOfMembers};
pub use weir_rl_core::{AsyncKeyedLimiter, KeyedLimiter, Local, Policy};

/// Token bucket in GCRA encoding (the `weir-gcra` crate): `Gcra` for
/// a limit with a burst (one atomic word, one CAS per admission, nothing written on
/// a denial), `LeasedGcra` for one limit that every thread hits
/// at once (per-thread leases, a stated over-admission bound). The algorithm, its
/// guarantees and costs: [weir-gcra's guide](https://docs.rs/weir-gcra).
#[cfg(feature = "gcra")]
pub mod gcra {
    pub use weir_gcra::*;
}

/// Window limiters (the `weir-window` crate): `SlidingWindow`
/// for "N per minute" as users read it, `FixedWindow` where a
/// 2× burst across a boundary is acceptable, `SlidingLog` for
/// never more than N in any interval, and
/// `StripedSlidingWindow` for one hot limit checked
/// by every thread. Choosing between them: [weir-window's
/// guide](https://docs.rs/weir-window).
#[cfg(feature = "window")]
pub mod window {
    pub use weir_window::*;
}

/// Throttling by queueing and delay (the `weir-leaky` crate):
/// `LeakyBucket` releases queued items at a constant rate;
/// with `tokio`, `Throttle` makes request handlers wait their
/// turn, FIFO, up to a deadline, instead of being refused. Pacing, tolerance and
/// capacity: [weir-leaky's guide](https://docs.rs/weir-leaky).
#[cfg(feature = "leaky")]
pub mod leaky {
    pub use weir_leaky::*;
}

/// Per-key limiting (the `weir-keyed` crate): one limiter per client (IP, API
/// key, user) with a hard bound on keys (`KeyedConfig`, a
/// policy at capacity), idle keys evicted without changing a decision, and hot keys
/// moved to per-thread leases; `KeyedGcra` and the window
/// aliases name the store types. Sizing `max_keys`, eviction and memory:
/// [weir-keyed's guide](https://docs.rs/weir-keyed).
#[cfg(feature = "keyed")]
pub mod keyed {
    pub use weir_keyed::*;
}

/// Rate-limiting middleware for tower, axum and hyper (the `weir-tower` crate):
/// `RateLimitLayer` with keys (peer IP behind trusted
/// proxies, API key, user), policies per route, tiers, RateLimit headers and 429
/// with problem+json; or a TOML file. With axum, turn on the `axum` feature (the
/// peer address comes from axum's `ConnectInfo`). Setup and configuration:
/// [weir-tower's guide](https://docs.rs/weir-tower).
#[cfg(feature = "tower")]
pub mod tower {
    pub use weir_tower::*;
}

/// Rate-limiting middleware for actix-web 4 (the `weir-actix` crate):
/// `App::new().wrap(RateLimit::from_config(config)?)`, with the keys, policies,
/// tiers, throttles, shadow mode, reload, headers and answers of `tower`, from the
/// same TOML file. Setup: [weir-actix's guide](https://docs.rs/weir-actix).
#[cfg(feature = "actix")]
pub mod actix {
    pub use weir_actix::*;
}

/// Limits kept in Redis, shared by every instance of a service (the `weir-redis`
/// crate): the same algorithms as Lua scripts, tiers in one round trip, fail
/// policies and token leases. Deployment and costs: [weir-redis's
/// guide](https://docs.rs/weir-redis).
#[cfg(feature = "redis")]
pub mod redis {
    pub use weir_redis::*;
}

/// The README's Rust example, compiled and run as a doc test.
#[doc = include_str!("../README.md")]
#[cfg(doctest)]
pub struct ReadmeDoctests;

/// What weir's crates share among themselves is not part of the facade: each of
/// these fails to compile.
///
/// ```compile_fail
/// use weir_rl::sync::Backoff; // the atomics facade
/// ```
///
/// ```compile_fail
/// use weir_rl::single_limiter; // the macro that declares a limiter type
/// ```
///
/// ```compile_fail
/// use weir_rl::ticks; // fixed-point time arithmetic
/// ```
///
/// ```compile_fail
/// use weir_rl::QuotaCell; // the lock-free quota slot of the algorithms
/// ```
///
/// What a user names does compile:
///
/// ```
/// use weir_rl::{AllOf, Clock, Decision, Error, KeyedLimiter, Limiter, ManualClock, Nanos, Quota, Snapshot};
/// ```
#[cfg(doctest)]
pub struct InternalsAreNotExported;

//! weir: lock-free concurrent rate limiters for the hot path of high-throughput servers.
//!
//! This is the facade: it re-exports the shared contract ([`weir_core`]) and, behind
//! features, each algorithm crate.
//!
//! | feature | crate | what |
//! |---|---|---|
//! | `gcra` (default) | [`gcra`] | token bucket in GCRA encoding: one atomic word, one CAS per admission; `LeasedGcra` for one limit hit by every core |
//! | `window` (default) | [`window`] | fixed window, sliding counter, exact sliding log, striped sliding window |
//! | `leaky` (default) | [`leaky`] | bounded MPMC queue drained at a constant rate: throttling by delay |
//! | `tokio` | [`leaky`] | the leaky bucket's async consumers and the request throttle |
//! | `keyed` (default) | [`keyed`] | per-key limiting: bounded memory, exact idle eviction, hot keys |
//! | `std` (default) | | OS clocks ([`MonotonicClock`], [`CoarseClock`]) |
//!
//! ```
//! use weir::{Quota, gcra::Gcra};
//!
//! let limiter = Gcra::new(Quota::per_second(50)?.with_burst(10)?);
//! let decision = limiter.check();
//! if decision.is_denied() {
//!     println!("429, retry after {:?}", decision.retry_after());
//! }
//! # Ok::<(), weir::QuotaError>(())
//! ```

#![no_std]

pub use weir_core::*;

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

/// The README's Rust example, compiled and run as a doc test.
#[doc = include_str!("../../../README.md")]
#[cfg(doctest)]
pub struct ReadmeDoctests;

//! The request path of weir's rate-limiting middleware, for any server framework:
//! who the client is (behind trusted proxies, IPv6 grouped), which limits apply
//! (per route, per tier, per IP and per user at once), the decision across them
//! (all or nothing), and what the client is told (the IETF `RateLimit` fields, a
//! `Retry-After` in whole seconds, an RFC 9457 problem+json body, a gRPC status),
//! as data. No framework type is in its API: an adapter reads its framework's
//! request through [`Request`] and writes the answer in its framework's types.
//!
//! - **weir-tower**: tower, axum, hyper and tonic (gRPC).
//! - **weir-actix**: actix-web 4.
//!
//! Both read the same TOML file ([`Config`]) and answer alike: one behavioural
//! suite runs against each over real servers.
//!
//! # How a request flows
//!
//! ```text
//! request ─► skip? (`/health`, OPTIONS) ─► route policy (longest path prefix, or the default)
//!         ─► a key per limit: client IP / API key / user / global / your closure
//!         ─► tier (cached lookup) ─► stores, in order, all or nothing
//!         ─► admitted: the service's response + RateLimit fields of the strictest limit
//!            refused: 429 + Retry-After + problem+json (400 unidentified, 503 store full
//!            or unavailable); a gRPC call: a gRPC status
//! ```
//!
//! [`Limits::check`] runs it top to bottom (`limits.rs`); what needs waiting (a
//! remote store, a tier lookup, a throttle) is [`Pending::decide`]. The policies
//! ([`Policy`], [`Limit`]), keys ([`KeySource`], [`ClientIp`], [`Key`]), tiers
//! ([`Tiers`]), stores ([`Store`]) and throttles ([`KeyedThrottle`]) are those the
//! adapters' docs describe: weir-tower's crate docs are the guide.
//!
//! ```
//! use weir_http::{Check, Config, Verdict};
//!
//! let toml = r#"
//! skip = ["/health"]
//! [[policy]]
//! name = "api"
//! default = true
//! [[policy.limit]]
//! key = "ip"
//! quotas = [{ algorithm = "gcra", limit = 100, window = "1m" }]
//! "#;
//! let limits = Config::from_toml(toml)?.limits()?;
//! # struct R;
//! # impl weir_http::Request for R {
//! #     fn method(&self) -> &str { "GET" }
//! #     fn path(&self) -> &str { "/" }
//! #     fn header(&self, _: &str) -> Option<&[u8]> { None }
//! #     fn header_lines_rev(&self, _: &str, _: &mut dyn FnMut(&[u8]) -> std::ops::ControlFlow<()>) {}
//! #     fn peer_ip(&self) -> Option<std::net::IpAddr> { "192.0.2.7".parse().ok() }
//! #     fn user(&self) -> Option<weir_http::User> { None }
//! # }
//! # let request = R;
//! match limits.check(&request) {
//!     Check::Unlimited | Check::Skipped => { /* call the service */ }
//!     Check::Decided(Verdict::Allowed(fields)) => { /* call the service, add `fields` */ let _ = fields; }
//!     Check::Decided(Verdict::Refused(refusal)) => {
//!         let answer = limits.refused(&request, refusal);
//!         let (status, body) = (answer.status(), answer.problem_json());
//!         # let _ = (status, body);
//!     }
//!     Check::Pending(pending) => { /* pending.decide(&limits).await, then as above */ let _ = pending; }
//! }
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! # Without HTTP: [`check_all`]
//!
//! A caller that names its keys itself (an Envoy rate-limit service, a queue, a
//! method of your own) checks a set of limits, each a [`Store`], a [`Key`] and a
//! cost, all or nothing with [`check_all`]: each limit's [`Decision`](weir_rl_core::Decision)
//! and the verdict ([`Outcome`]), with refunds, the longest wait, a cost of 0 that
//! reads without charging, shadow limits, and cancellation safety. The HTTP path
//! decides a policy's limits with the same code.
//!
//! # Shadow mode
//!
//! A [`Limit`] or a whole [`Policy`] in shadow mode (`shadow = true` in the file) is
//! decided and counted, and its refusals logged, but the client sees nothing of it:
//! no refusal, and no header it would not have had without it. See
//! [`Limit::shadow`].
//!
//! # Metrics
//!
//! With the `metrics` feature, decisions, throttle waits and tier lookups are
//! counted through the [`metrics`](https://docs.rs/metrics) facade, under the names
//! weir-tower's docs list (`weir_tower_decisions_total` and the others: the names
//! dashboards already use, the same for every adapter).

#![cfg_attr(docsrs, feature(doc_cfg))]

mod all_or_nothing;
pub mod config;
mod grpc;
mod ip;
mod key;
mod limits;
mod memory;
#[cfg(feature = "metrics")]
mod metrics;
mod policy;
mod reload;
mod request;
mod response;
mod store;
#[cfg(test)]
mod test_support;
mod throttle;
mod tier;
pub mod wait;

pub use all_or_nothing::{Charge, Checked, Outcome, check_all};
pub use config::{Config, ConfigError};
pub use grpc::{GrpcCode, GrpcStatus};
pub use ip::{Cidr, CidrError, ClientIp, ClientIpBuilder, ClientIpError, ForwardedHeader, PeerAddr};
pub use key::{Key, KeyKind, KeySource, LongKeys, MAX_KEY_BYTES, MissingKey, User};
pub use limits::{BuildError, Check, Limits, LimitsBuilder, Pending, PolicyId, Refusal, Refused, Verdict};
pub use policy::{Limit, MAX_LIMITS, Policy, PolicyBuilder, PolicyError};
pub use reload::Reloadable;
pub use request::{AsRequest, HeaderLines, Request};
pub use response::{
    Cause, Denied, Legacy, PROBLEM_JSON, RATELIMIT, RATELIMIT_POLICY, RETRY_AFTER, RateLimitFields, Rejection,
    X_RATELIMIT_LIMIT, X_RATELIMIT_REMAINING, X_RATELIMIT_RESET, ceil_secs, digits, policy_item, retry_after_secs,
    sf_string, small_number,
};
pub use store::{Store, StoreError};
pub use throttle::{KeyedThrottle, KeyedThrottleBuilder, KeyedThrottleError};
pub use tier::{LookupFailed, OnLookupError, Tiers, TiersBuilder, TiersError};

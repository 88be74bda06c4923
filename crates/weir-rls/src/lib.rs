//! Envoy's rate-limit service (`envoy.service.ratelimit.v3.RateLimitService`) on
//! weir's limiters: a drop-in for envoyproxy/ratelimit that reads its YAML config
//! files unchanged.
//!
//! ```
//! use weir_rls::{Config, Descriptor, DescriptorMatch, LoadOptions};
//!
//! let yaml = "
//! domain: messaging
//! descriptors:
//!   ## Only allow 5 marketing messages a day (`##`: a YAML comment in a doc test)
//!   - key: message_type
//!     value: marketing
//!     descriptors:
//!       - key: to_number
//!         rate_limit:
//!           unit: day
//!           requests_per_unit: 5
//!   ## weir's additions: a token bucket of 100 per day, 10 at once
//!   - key: to_number
//!     rate_limit:
//!       unit: day
//!       requests_per_unit: 100
//!       algorithm: gcra
//!       burst: 10
//! ";
//! let config = Config::from_yaml("messaging.yaml", yaml, &LoadOptions::default())?;
//! let marketing = Descriptor::new([("message_type", "marketing"), ("to_number", "2061111111")]);
//! let DescriptorMatch::Limited(limited) = config.match_descriptor("messaging", &marketing).unwrap() else {
//!     unreachable!()
//! };
//! assert_eq!(limited.metric_key(), "messaging.message_type_marketing.to_number");
//! assert_eq!(limited.limit().requests_per_unit(), 5);
//! # Ok::<(), weir_rls::ConfigError>(())
//! ```
//!
//! # The parts
//!
//! - [`Config`]: loads one file or a directory of envoyproxy/ratelimit YAML files
//!   ([`config`] module docs: which files, bounds), checks them as upstream does,
//!   with errors ([`ConfigError`]) that name the file, line and field, and compiles
//!   each domain's descriptors into a tree.
//! - Matching ([`Config::match_request`], [`matching`] module docs): which rule each
//!   descriptor of a request falls under, as upstream decides it, and the counter
//!   ([`CounterKey`], bounded in bytes) it is counted on.
//! - [`Request`]: a `RateLimitRequest` checked into bounded form, or refused with a
//!   [`RequestError`] (a gRPC status with its message).
//! - [`Decide`]: the seam to the counters: every counted descriptor of a request,
//!   decided all or nothing. [`decider::StoreDecider`] is weir's: a store per rule,
//!   in memory ([`backend`]), checked with weir-http's `check_all`, or in Redis,
//!   one script (one round trip) per request, all or nothing;
//!   windows aligned to the Unix epoch ([`windows`]).
//! - [`build_response`]: the `RateLimitResponse` from the decisions.
//! - [`RlsService`]: all of it behind tonic's `RateLimitService` trait, answering
//!   from a [`Generation`] (a config and its decider) of a [`ConfigSource`]: one
//!   for good, or a [`Reloadable`] that follows the config files.
//! - [`Server`] ([`server`] module docs): the service on the network, gRPC with
//!   `grpc.health.v1` and HTTP (`/healthcheck`, `/json` in proto3 JSON ([`json`]),
//!   `/metrics`), stopped gracefully. [`stats`]: the metrics, under upstream's names.
//! - The `weir-rls` binary: all of the above from a command line (the README).
//!
//! # weir's additions to the config
//!
//! In a rule's `rate_limit:`, besides upstream's keys:
//!
//! - `algorithm`: `fixed_window` (the default, what upstream does), `sliding_window`,
//!   `sliding_log` or `gcra`. The service-wide default is
//!   [`LoadOptions::default_algorithm`].
//! - `burst`: a `gcra` rule's bucket (how many at once); the limit when absent.
//! - `window`: any whole number of seconds (`30s`, `5m`, `1h30m`, `2d`, `1w`) instead
//!   of `unit`. `current_limit.unit` then reports the unit of that length, or
//!   `UNKNOWN` when no unit is that long (`RateLimit-Policy` carries the window).
//!
//! # Where weir differs from envoyproxy/ratelimit, on purpose
//!
//! Config files:
//!
//! - **Strict by default** ([`Compatibility::Strict`]): a key twice in one mapping,
//!   a key of another level (`shadow_mode` inside `rate_limit`), and an invalid
//!   `unit` on an `unlimited` rule are errors; upstream keeps the last key and
//!   ignores the others. [`Compatibility::Upstream`] accepts them as upstream does
//!   (with a [`ConfigWarning`] each).
//! - A file with two YAML documents is refused; upstream reads the first.
//! - A directory load skips names that start with `.`, and reads files in path
//!   order (upstream's order is random).
//! - Matching is by key and value, not by upstream's joined string `key_value`:
//!   key `a_b` never matches an entry `a`/`b`, and `*` is a wildcard in values
//!   only. Two descriptors that upstream would confuse this way are still refused as
//!   duplicates, as upstream refuses them.
//! - `metadata` is accepted and ignored (no dynamic metadata), `quota_mode` is read
//!   but not acted on yet (each with a [`ConfigWarning`]).
//!
//! Requests (each refused with a gRPC status and a message, where upstream answers
//! `UNKNOWN`, ignores the problem, or crashes):
//!
//! - An unknown domain is `NOT_FOUND` (upstream: OK, no limit;
//!   [`UnknownDomainPolicy::Allow`] answers as upstream does).
//! - A descriptor without entries, an empty entry key, keys, values or counts
//!   beyond [`RequestLimits`], a `hits_addend` above [`MAX_HITS_ADDEND`], and a
//!   `limit` override of unit `UNKNOWN` (upstream crashes) are `INVALID_ARGUMENT`;
//!   `is_negative_hits` is `UNIMPLEMENTED` (upstream counts the hits as positive).
//!
//! Answers:
//!
//! - **All or nothing:** a request over on any descriptor charges no other (upstream
//!   charges every counter, even when refusing).
//! - `limit_remaining` of a refused descriptor is what its counter has left (0 for
//!   a request of one hit, as upstream answers; upstream says 0 for any refusal).
//! - `duration_until_reset` is the time until the limit is whole again, rounded up
//!   to whole seconds.
//! - Response headers are `RateLimit`/`RateLimit-Policy` and optionally
//!   `X-RateLimit-*` ([`ResponseOptions`]), where upstream's are `RateLimit-Limit`,
//!   `RateLimit-Remaining` and `RateLimit-Reset`; both are off by default.
//! - A store full of other clients' live counters is `RESOURCE_EXHAUSTED`, a store
//!   that failed `UNAVAILABLE` ([`decider`] module docs); upstream answers every
//!   failure `UNKNOWN`.
//!
//! The service:
//!
//! - `/json` answers a refused request with its cause's HTTP status (400, 404, 501,
//!   503) and message, where upstream answers 400 `Bad Request` to all.
//! - SIGHUP reloads the config; upstream shuts down on it.
//! - Metrics are Prometheus's only (upstream's Prometheus names and labels, plus a
//!   `key` label naming the rule's whole path); no StatsD.

pub mod backend;
pub mod config;
mod decide;
pub mod decider;
pub mod json;
pub mod matching;
mod reload;
mod request;
mod response;
mod rule;
pub mod server;
mod service;
pub mod stats;
pub mod windows;

pub use config::{Compatibility, Config, ConfigError, ConfigErrorKind, ConfigWarning, Limits, LoadOptions};
pub use decide::{Check, Decide, DecideError, DecideErrorKind};
pub use matching::{
    CounterKey, DescriptorMatch, LimitSource, Limited, MAX_COUNTER_KEY_BYTES, MAX_METRIC_VALUE_BYTES, Matches,
    UnknownDomain,
};
pub use reload::{BuildDecider, ReloadError, Reloadable, RuleStores, Watch};
pub use request::{Descriptor, Entry, LimitOverride, MAX_HITS_ADDEND, Request, RequestError, RequestLimits};
pub use response::{ResponseOptions, build_response};
pub use rule::{Algorithm, RateLimit, Rule, RuleId, RuleLimit, Unit};
pub use server::{Health, Server};
pub use service::{ConfigSource, Generation, RlsService, ServiceError, UnknownDomainPolicy};

/// The protobuf types of Envoy's rate-limit protocol this crate speaks (from the
/// `envoy-types` crate).
pub mod proto {
    pub use envoy_types::pb::envoy::config::core::v3::HeaderValue;
    pub use envoy_types::pb::envoy::extensions::common::ratelimit::v3::{RateLimitDescriptor, rate_limit_descriptor};
    pub use envoy_types::pb::envoy::service::ratelimit::v3::{
        RateLimitRequest, RateLimitResponse, rate_limit_response, rate_limit_service_client, rate_limit_service_server,
    };
    pub use envoy_types::pb::google::protobuf::{Duration, UInt64Value};
}

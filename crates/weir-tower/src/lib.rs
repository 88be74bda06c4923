//! Rate-limiting middleware for tower, axum and hyper servers.

pub mod config;
mod ip;
mod key;
mod layer;
mod memory;
mod policy;
mod response;
mod store;
mod throttle;
mod tier;
pub mod wait;

pub use config::{Config, ConfigError};
pub use ip::{Cidr, CidrError, ClientIp, ClientIpError, ForwardedHeader, PeerAddr};
pub use key::{Key, KeyKind, KeySource, MissingKey, User};
pub use layer::{BuildError, LimitEvent, RateLimit, RateLimitLayer, RateLimitLayerBuilder, ResponseFuture};
pub use policy::{Limit, MAX_LIMITS, Policy};
pub use response::{
    Denied, DenyBody, RATELIMIT, RATELIMIT_POLICY, Rejection, ResponseBody, X_RATELIMIT_LIMIT, X_RATELIMIT_REMAINING,
    X_RATELIMIT_RESET,
};
pub use store::{Store, StoreError};
pub use throttle::KeyedThrottle;
pub use tier::{LookupFailed, OnLookupError, Tiers};

//! weir's rate limiters with their state in Redis.

mod connection;
mod error;
pub mod fail;
pub mod lease;
mod limiter;
mod math;
mod scripts;

pub use connection::{Redis, RedisOptions};
pub use error::{ConfigError, Error};
pub use fail::{Backoff, Checked, FailPolicy, Path, Resilient};
pub use lease::{LeaseConfig, Leased};
pub use limiter::{Backend, DEFAULT_PREFIX, MAX_LOG_LIMIT, MAX_TIER, RedisLimiter};

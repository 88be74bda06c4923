//! Envoy's rate-limit service (`envoy.service.ratelimit.v3.RateLimitService`) on
//! weir's limiters.

//! Peer limiters and hardware references, wrapped as their documentation intends.

use std::sync::Mutex;
use std::time::Instant;

/// The naive baseline: a token bucket behind a `std::sync::Mutex`, refilled from
/// `Instant::now()` on every check (what a team writes by hand).
#[derive(Debug)]
pub struct MutexTokenBucket {
    state: Mutex<(f64, Instant)>,
    per_sec: f64,
    burst: f64,
}

impl MutexTokenBucket {
    /// A full bucket of `burst` tokens refilled at `per_sec`.
    pub fn new(per_sec: f64, burst: f64) -> Self {
        Self { state: Mutex::new((burst, Instant::now())), per_sec, burst }
    }

    /// Takes one token if there is one.
    pub fn check(&self) -> bool {
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        let now = Instant::now();
        let refill = now.saturating_duration_since(state.1).as_secs_f64() * self.per_sec;
        state.0 = (state.0 + refill).min(self.burst);
        state.1 = now;
        if state.0 >= 1.0 {
            state.0 -= 1.0;
            true
        } else {
            false
        }
    }

    /// Empties the bucket.
    pub fn drain(&self) {
        self.state.lock().unwrap_or_else(|e| e.into_inner()).0 = 0.0;
    }
}

/// governor's direct (un-keyed) limiter with its default clock.
pub type Governor = governor::DefaultDirectRateLimiter;

/// governor's direct limiter on its coarse clock: quanta's cached time, refreshed by
/// quanta's upkeep thread (the counterpart of weir's `CoarseClock`).
pub type GovernorUpkeep = governor::RateLimiter<
    governor::state::NotKeyed,
    governor::state::InMemoryState,
    governor::clock::QuantaUpkeepClock,
    governor::middleware::NoOpMiddleware<governor::clock::QuantaInstant>,
>;

fn governor_quota(per_sec: u32, burst: u32) -> governor::Quota {
    use std::num::NonZeroU32;
    let nz = |v: u32| NonZeroU32::new(v).expect("benchmark quotas are non-zero");
    governor::Quota::per_second(nz(per_sec)).allow_burst(nz(burst))
}

/// A governor limiter admitting `per_sec` per second with burst `burst`.
pub fn governor(per_sec: u32, burst: u32) -> Governor {
    governor::RateLimiter::direct(governor_quota(per_sec, burst))
}

/// The same on governor's upkeep clock, refreshed every millisecond. quanta allows
/// one upkeep thread per process, so every such limiter shares one clock, started on
/// first use and kept for the life of the process.
pub fn governor_upkeep(per_sec: u32, burst: u32) -> GovernorUpkeep {
    static CLOCK: std::sync::OnceLock<governor::clock::QuantaUpkeepClock> = std::sync::OnceLock::new();
    let clock = CLOCK.get_or_init(|| {
        governor::clock::QuantaUpkeepClock::from_interval(std::time::Duration::from_millis(1))
            .expect("quanta's upkeep thread starts")
    });
    governor::RateLimiter::direct_with_clock(governor_quota(per_sec, burst), clock.clone())
}

/// The `ratelimit` crate's lock-free token bucket (std clock).
pub type RateLimit = ratelimit::Ratelimiter;

/// A `ratelimit` bucket of `burst` tokens refilled at `per_sec`, full at the start;
/// `per_sec == 0` makes a bucket that never refills (1 per hour, empty).
pub fn ratelimit(per_sec: u64, burst: u64) -> RateLimit {
    let builder = if per_sec == 0 {
        ratelimit::Ratelimiter::builder(1)
            .period(std::time::Duration::from_secs(3_600))
            .max_tokens(1)
            .initial_available(0)
    } else {
        ratelimit::Ratelimiter::builder(per_sec).max_tokens(burst).initial_available(burst)
    };
    builder.build().expect("benchmark rates are valid")
}

/// The `leaky-bucket` crate's limiter, checked with `try_acquire(1)`.
pub type LeakyBucketPeer = leaky_bucket::RateLimiter;

/// A `leaky-bucket` limiter holding up to `max` permits, full at the start, refilled
/// `refill` per `interval`; `refill == 0` makes one that never refills (1 per hour,
/// empty).
pub fn leaky_bucket(max: usize, refill: usize, interval: std::time::Duration) -> LeakyBucketPeer {
    if refill == 0 {
        leaky_bucket::RateLimiter::builder()
            .max(1)
            .initial(0)
            .refill(1)
            .interval(std::time::Duration::from_secs(3_600))
            .build()
    } else {
        leaky_bucket::RateLimiter::builder().max(max).initial(max).refill(refill).interval(interval).build()
    }
}

//! [`Leased`]: token leases, many decisions per round trip, with a bounded
//! overshoot.
//!
//! # How it works
//!
//! An instance takes a *lease* of `L` permits from a key's GCRA bucket in Redis in
//! one round trip (the bucket is charged `L` requests at once, as `check_n(L)`
//! would), then serves the next requests for that key from the lease in memory,
//! without asking Redis, until it runs out or its lifetime ends
//! ([`LeaseConfigBuilder::lifetime`]). The round trip that takes a lease also decides the request that asked for it; when
//! a whole lease does not fit, the request alone is asked for (exact behaviour), and
//! when that does not fit either, Redis's denial is returned.
//!
//! The lease size adapts to the headroom: after each grant, the next lease for the
//! key is `clamp(headroom ÷ (2 × instances), 1, max_lease)`, where `headroom` is
//! what the bucket still held after the grant. A key far from its limit is served
//! in batches of `max_lease`; near the limit leases shrink to single permits, so
//! the last permits of a burst are not stranded in one instance's lease while
//! another instance is denied. Only one lease per key is in flight per instance;
//! requests that find the lease empty while it is being renewed ask Redis for
//! themselves alone.
//!
//! # What a dropped or late check costs
//!
//! A check dropped while it renews a lease (a client that disconnects), or whose
//! renewal has no reply within the call timeout, hands the round trip still in
//! flight to a detached tokio task. That task waits at most one more call
//! timeout for the reply and delivers the grant into the lease (the whole grant:
//! the request that asked for it was never answered), then clears the key's
//! renewal mark and wakes the requests waiting for it, which are served from
//! that lease. So a dropped renewal that Redis ran costs nothing beyond what any
//! lease costs (permits left unspent when it expires). The grant is lost only
//! when its reply does not come within one call timeout of the check's end (its
//! drop, or its own timeout: two call timeouts after sending), the connection
//! fails, or the check is dropped outside a tokio runtime (the mark is then
//! cleared at once): at most `max(max_lease, n)` permits charged in Redis and
//! never served, which the bucket refills at the quota's rate. A check
//! that is not a renewal (it asks Redis for its own `n` alone) costs at most
//! that `n` when dropped after Redis ran it, as [`RedisLimiter::check_n`] does;
//! one dropped while it waits for a renewal leaves nothing behind. No key is
//! left marked with nobody renewing it.
//!
//! # The overshoot bound
//!
//! Every request served from a lease spends a permit that Redis admitted when the
//! lease was taken, so leases never admit more permits than Redis granted: at a
//! frozen time, all instances together admit at most the burst `B`, exactly as
//! without leases. What leases change is *when* permits are spent: a permit taken
//! at time `t` can be spent until `t + lifetime` (the lifetime counts from a
//! reading of the lease clock taken before the grant is sent, so a reply that
//! arrives late shortens it, never lengthens it). So, with `N` instances holding leases
//! on one key, `r` the quota's rate and `L` = `max_lease`, the requests admitted in
//! any interval of length `τ` are at most
//!
//! ```text
//! B + r·τ + min(N·L, r·lifetime)
//! ```
//!
//! against `B + r·τ` for the exact limiter: the overshoot is at most the permits
//! held in leases when the interval starts (`N·L`), and no more than a `lifetime`'s
//! worth of refill. Permits left in an expired lease are dropped (the limiter then
//! admits *less* than the quota, never more); so are those left in a lease when
//! a renewal replaces it (fewer than the request that renewed it). A refund
//! ([`Leased::refund`]) goes back into the live lease only for an admission
//! decided no earlier than that lease was granted, and is otherwise refunded in
//! Redis less the time since the admission (weir-gcra's rule), so refunds never
//! lift the bound either. `tests/leases.rs` asserts the bound with several
//! clients, and with refunds of admissions older than the live lease.
//!
//! # Costs
//!
//! A decision served from a lease costs a short critical section on a sharded
//! lock (no I/O, no allocation for a key already leased); one that takes a lease
//! costs one round trip, the same as [`RedisLimiter::check_n`]. Round trips per
//! decision fall towards `1 / max_lease` for keys far from their limit
//! ([`Leased::round_trips`], measured in BENCHMARKS.md). Denied requests always go
//! to Redis.

use crate::math::{GcraMicros, NS};
use crate::{ConfigError, Error, RedisLimiter, scripts};
use core::fmt;
use core::pin::Pin;
use core::task::{Context, Poll};
use core::time::Duration;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use tokio::sync::Notify;
use weir_rl_core::__private::sync::{AtomicU64, AtomicUsize, Ordering};
use weir_rl_core::{AsyncKeyedLimiter, Clock, Decision, InsufficientCapacity, MonotonicClock, Nanos, Policy, Snapshot};

/// How leases are sized and how long they live: built with
/// [`LeaseConfig::builder`], or [`LeaseConfig::default()`] (leases of at most 64
/// permits, for 1 instance, spendable for 1 s, for at most 10 000 keys at once).
///
/// ```
/// use std::time::Duration;
/// use weir_redis::LeaseConfig;
///
/// let config = LeaseConfig::builder().max_lease(64).instances(8).lifetime(Duration::from_millis(500)).build()?;
/// assert_eq!((config.max_lease(), config.instances()), (64, 8));
/// # Ok::<(), weir_redis::ConfigError>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LeaseConfig {
    max_lease: u64,
    instances: u32,
    lifetime: Duration,
    max_keys: usize,
}

impl Default for LeaseConfig {
    /// Leases of at most 64 permits, for 1 instance, spendable for 1 s, for at most
    /// 10 000 keys at once.
    fn default() -> Self {
        Self { max_lease: 64, instances: 1, lifetime: Duration::from_secs(1), max_keys: 10_000 }
    }
}

impl LeaseConfig {
    /// The options, at their defaults (those of [`LeaseConfig::default()`]).
    pub const fn builder() -> LeaseConfigBuilder {
        LeaseConfigBuilder { max_lease: 64, instances: 1, lifetime: Duration::from_secs(1), max_keys: 10_000 }
    }

    /// The largest lease.
    pub const fn max_lease(&self) -> u64 {
        self.max_lease
    }

    /// How many instances share each key.
    pub const fn instances(&self) -> u32 {
        self.instances
    }

    /// How long a lease's permits may be spent after it was taken.
    pub const fn lifetime(&self) -> Duration {
        self.lifetime
    }

    /// The most keys holding a lease at once in this instance.
    pub const fn max_keys(&self) -> usize {
        self.max_keys
    }
}

/// The options of a [`LeaseConfig`]: setters that never fail, checked together by
/// [`build`](Self::build). From [`LeaseConfig::builder`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[must_use = "a builder does nothing until `build` is called"]
pub struct LeaseConfigBuilder {
    max_lease: u64,
    instances: u32,
    lifetime: Duration,
    max_keys: usize,
}

impl LeaseConfigBuilder {
    /// Leases of at most `n` permits (at least 1; 1 takes every permit from Redis
    /// one at a time). Default: 64.
    pub const fn max_lease(self, n: u64) -> Self {
        Self { max_lease: n, ..self }
    }

    /// How many instances share each key (at least 1; sizes leases:
    /// `headroom ÷ (2 × instances)`). Default: 1.
    pub const fn instances(self, n: u32) -> Self {
        Self { instances: n, ..self }
    }

    /// How long a lease's permits may be spent after it was taken. Default: 1 s.
    pub const fn lifetime(self, lifetime: Duration) -> Self {
        Self { lifetime, ..self }
    }

    /// The most keys holding a lease at once in this instance, exactly (others
    /// are decided in Redis one request at a time; a full table drops idle
    /// entries, of the new key's shard and of one other shard in turn, so idle
    /// entries anywhere make room within 16 new keys; 0 takes no lease at all).
    /// Default: 10 000.
    pub const fn max_keys(self, n: usize) -> Self {
        Self { max_keys: n, ..self }
    }

    /// The configuration, or [`ConfigError::Zero`] naming the first option that is
    /// zero and must not be (`max_lease`, `instances`).
    ///
    /// ```
    /// use weir_redis::{ConfigError, LeaseConfig};
    ///
    /// let e = LeaseConfig::builder().instances(0).build().unwrap_err();
    /// assert_eq!(e, ConfigError::Zero { what: "instances" });
    /// assert_eq!(e.to_string(), "instances must not be zero");
    /// ```
    pub const fn build(self) -> Result<LeaseConfig, ConfigError> {
        if self.max_lease == 0 {
            return Err(ConfigError::Zero { what: "max_lease" });
        }
        if self.instances == 0 {
            return Err(ConfigError::Zero { what: "instances" });
        }
        Ok(LeaseConfig {
            max_lease: self.max_lease,
            instances: self.instances,
            lifetime: self.lifetime,
            max_keys: self.max_keys,
        })
    }
}

/// One key's lease in this instance.
#[derive(Debug)]
struct Lease {
    /// Permits left to serve.
    permits: u64,
    /// Clock reading (ns) after which the permits are dropped.
    expires_ns: u64,
    /// The size of the next lease.
    next_size: u64,
    /// Set while a grant for this key is in flight: woken when it lands.
    renewal: Option<Arc<Notify>>,
    /// After a denial from Redis: until when (clock ns) requests of at least
    /// `denied_n` are denied locally.
    denied_until_ns: u64,
    denied_n: u64,
    /// What Redis said at the grant: remaining after it, and the reset time (ns).
    headroom: u64,
    reset_ns: u64,
    /// The grant's decision time (for refunds and `decided_at`).
    granted_at: Nanos,
}

const SHARDS: usize = 16;

/// One shard of the lease table: keys to their leases, behind a lock held only
/// for a few field updates (never across I/O).
type Shard = Mutex<HashMap<Vec<u8>, Lease>>;

/// A GCRA [`RedisLimiter`] that takes permits from Redis in leases and serves
/// them locally (see the [module docs](crate::lease) for the overshoot bound).
///
/// ```no_run
/// # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
/// use weir_rl_core::Quota;
/// use weir_redis::{LeaseConfig, Leased, Redis, RedisLimiter};
///
/// let redis = Redis::connect("redis://127.0.0.1:6379").await?;
/// let limiter = RedisLimiter::builder(&redis, Quota::per_second(10_000)?).build()?;
/// let leased = Leased::new(limiter, LeaseConfig::builder().max_lease(100).instances(4).build()?)?;
/// let decision = leased.check("tenant-7").await?; // one round trip per ~100 decisions
/// # Ok(()) }
/// ```
pub struct Leased<C: Clock = MonotonicClock> {
    limiter: RedisLimiter,
    quota: GcraMicros,
    config: LeaseConfig,
    clock: C,
    shards: Arc<[Shard]>,
    decisions: AtomicU64,
    round_trips: AtomicU64,
    /// Entries in all shards together, at most `config.max_keys`.
    keys: AtomicUsize,
    /// The next shard a full table drops idle entries from.
    sweep_cursor: AtomicUsize,
}

impl<C: Clock> fmt::Debug for Leased<C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Leased")
            .field("limiter", &self.limiter)
            .field("config", &self.config)
            .field("decisions", &self.decisions())
            .field("round_trips", &self.round_trips())
            .finish_non_exhaustive()
    }
}

impl Leased<MonotonicClock> {
    /// Leases over `limiter`, which must be a single-quota GCRA limiter.
    pub fn new(limiter: RedisLimiter, config: LeaseConfig) -> Result<Self, ConfigError> {
        Self::with_clock(limiter, config, MonotonicClock::new())
    }
}

impl<C: Clock> Leased<C> {
    /// Leases over `limiter`, timing lease expiry with `clock`.
    pub fn with_clock(limiter: RedisLimiter, config: LeaseConfig, clock: C) -> Result<Self, ConfigError> {
        let quota = limiter.single_gcra().ok_or(ConfigError::LeaseNeedsGcra)?;
        let shards = (0..SHARDS).map(|_| Mutex::new(HashMap::new())).collect();
        Ok(Self {
            limiter,
            quota,
            config,
            clock,
            shards,
            decisions: AtomicU64::new(0),
            round_trips: AtomicU64::new(0),
            keys: AtomicUsize::new(0),
            sweep_cursor: AtomicUsize::new(0),
        })
    }

    /// The limiter leases are taken from.
    pub fn limiter(&self) -> &RedisLimiter {
        &self.limiter
    }

    /// Decisions made so far (served locally or by Redis).
    pub fn decisions(&self) -> u64 {
        // Ordering: Relaxed; a statistic.
        self.decisions.load(Ordering::Relaxed)
    }

    /// Round trips to Redis made so far by checks.
    pub fn round_trips(&self) -> u64 {
        // Ordering: Relaxed; a statistic.
        self.round_trips.load(Ordering::Relaxed)
    }

    fn shard_index(&self, key: &[u8]) -> usize {
        use std::hash::{BuildHasher, BuildHasherDefault, DefaultHasher};
        let hash = BuildHasherDefault::<DefaultHasher>::default().hash_one(key);
        (hash as usize) % SHARDS
    }

    fn shard(&self, key: &[u8]) -> &Shard {
        &self.shards[self.shard_index(key)]
    }

    fn lock<'a>(shard: &'a Mutex<HashMap<Vec<u8>, Lease>>) -> std::sync::MutexGuard<'a, HashMap<Vec<u8>, Lease>> {
        // A panic while holding the lock cannot leave a lease half-written (every
        // update is a plain field store), so a poisoned lock is still usable.
        shard.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Takes one of the `max_keys` places of the lease table, if one is free.
    fn reserve_key(&self) -> bool {
        // Ordering: Relaxed; the count publishes nothing (each entry is written
        // under its shard's lock), and the read-modify-write alone keeps it at
        // most `max_keys`.
        self.keys
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| (n < self.config.max_keys).then_some(n + 1))
            .is_ok()
    }

    /// Drops a shard's idle entries (no renewal in flight, lease expired, no
    /// denial held), giving their places back.
    fn drop_idle(&self, leases: &mut HashMap<Vec<u8>, Lease>, now: u64) {
        let before = leases.len();
        leases.retain(|_, lease| lease.renewal.is_some() || lease.expires_ns > now || lease.denied_until_ns > now);
        // Ordering: Relaxed; see `reserve_key`.
        self.keys.fetch_sub(before - leases.len(), Ordering::Relaxed);
    }

    /// Whether a renewal of `key`'s lease is in flight (see
    /// `__private::renewal_pending`).
    pub(crate) fn renewal_pending(&self, key: &[u8]) -> bool {
        let Ok(name) = self.limiter.key_name(key) else { return false };
        let key = name.as_bytes();
        Self::lock(self.shard(key)).get(key).is_some_and(|lease| lease.renewal.is_some())
    }

    /// See `__private::renewal_settled`.
    pub(crate) async fn renewal_settled(&self, key: &[u8]) {
        let Ok(name) = self.limiter.key_name(key) else { return };
        let key = name.as_bytes();
        // Registered under the lock, so a release after it wakes it.
        let settled =
            Self::lock(self.shard(key)).get(key).and_then(|lease| lease.renewal.clone()).map(Notify::notified_owned);
        if let Some(settled) = settled {
            // A detached delivery ends within one call timeout of its handing on.
            let _ = tokio::time::timeout(self.limiter.redis().call_timeout().saturating_mul(2), settled).await;
        }
    }

    /// The bytes of the keys the lease table holds (see
    /// `__private::lease_table_key_bytes`).
    pub(crate) fn table_key_bytes(&self) -> usize {
        self.shards.iter().map(|shard| Self::lock(shard).keys().map(Vec::len).sum::<usize>()).sum()
    }

    /// Checks one request. See [`check_n`](Self::check_n).
    pub async fn check(&self, key: &(impl AsRef<[u8]> + ?Sized)) -> Result<Decision, Error> {
        self.check_n(key, 1).await
    }

    /// Checks a request of cost `n` for `key`: from this instance's lease when it
    /// holds `n` permits, else in Redis, taking a new lease if it fits. While one
    /// task renews a key's lease, the others wait for it (one round trip) rather
    /// than each asking Redis; after a denial from Redis, requests for at least as
    /// much are denied locally until its `retry_after` has passed.
    pub async fn check_n(&self, key: &(impl AsRef<[u8]> + ?Sized), n: u64) -> Result<Decision, Error> {
        let key = key.as_ref();
        let burst = self.quota.burst();
        if n > burst {
            return Err(Error::InsufficientCapacity(InsufficientCapacity { requested: n, capacity: burst }));
        }
        if n == 0 {
            return self.limiter.check_n(key, 0).await;
        }
        // The table keeps the key's name (at most 3 × max_key_bytes bytes, or a
        // hash), never the key itself.
        let name = self.limiter.key_name(key)?;
        let key = name.as_bytes();
        // Ordering: Relaxed; a statistic.
        self.decisions.fetch_add(1, Ordering::Relaxed);
        let shard = self.shard(key);
        // Waiting for renewals (other tasks may take the renewed permits first) is
        // bounded by one call timeout in all.
        let timeout = self.limiter.redis().call_timeout();
        let mut waited = Duration::ZERO;
        let lease_size = loop {
            let now = self.clock.now().as_u64();
            let wait = {
                let mut leases = Self::lock(shard);
                if !leases.contains_key(key) {
                    // A table at `max_keys` drops the idle entries of this shard,
                    // then of one other shard in turn (never two locks at once),
                    // so idle entries anywhere make room within `SHARDS` new keys;
                    // a key that still finds no room is decided in Redis alone.
                    let mut reserved = self.reserve_key();
                    if !reserved {
                        self.drop_idle(&mut leases, now);
                        reserved = self.reserve_key();
                    }
                    if !reserved {
                        drop(leases);
                        // Ordering: Relaxed; a cursor, any value will do.
                        let other = self.sweep_cursor.fetch_add(1, Ordering::Relaxed) % SHARDS;
                        self.drop_idle(&mut Self::lock(&self.shards[other]), now);
                        leases = Self::lock(shard);
                        reserved = self.reserve_key();
                        if reserved && leases.contains_key(key) {
                            // Another task inserted the key meanwhile.
                            // Ordering: Relaxed; see `reserve_key`.
                            self.keys.fetch_sub(1, Ordering::Relaxed);
                            reserved = false;
                        }
                    }
                    if reserved {
                        leases.insert(key.to_vec(), Lease::new(self.config.max_lease));
                    }
                }
                let Some(lease) = leases.get_mut(key) else {
                    break None; // the table is full: this request alone, in Redis
                };
                if lease.expires_ns > now && lease.permits >= n {
                    lease.permits -= n;
                    let remaining = lease.permits.saturating_add(lease.headroom).min(burst);
                    let snapshot = Snapshot::new(burst, remaining, lease.reset_ns);
                    self.limiter.metrics.decided(crate::metrics::LEASE, true);
                    self.limiter.metrics.saved_round_trip();
                    return Ok(Decision::allowed(snapshot).at(lease.granted_at));
                }
                if lease.denied_until_ns > now && n >= lease.denied_n {
                    let snapshot = Snapshot::new(burst, 0, lease.reset_ns);
                    self.limiter.metrics.decided(crate::metrics::LEASE, false);
                    self.limiter.metrics.saved_round_trip();
                    return Ok(Decision::denied(snapshot, lease.denied_until_ns - now).at(lease.granted_at));
                }
                match &lease.renewal {
                    None => {
                        let renewal = Arc::new(Notify::new());
                        lease.renewal = Some(renewal.clone());
                        break Some((lease.next_size, renewal));
                    }
                    Some(renewal) if waited < timeout => Some(renewal.clone().notified_owned()),
                    Some(_) => break None, // waited a whole timeout already: this request alone
                }
            };
            if let Some(wait) = wait {
                let started = tokio::time::Instant::now();
                let _ = tokio::time::timeout(timeout - waited, wait).await;
                waited += started.elapsed();
            }
        };
        let want = lease_size.as_ref().map_or(n, |(size, _)| *size).clamp(n, burst);
        // The lease's lifetime (and a denial's local hold) counts from this reading,
        // taken before the request is sent, so no later than Redis charged the
        // grant: a reply read late (a slow network, a stalled task) cannot stretch
        // the time its permits may be spent past `charged + lifetime`.
        let sent = self.clock.now().as_u64();
        // Held across the round trip: however this future ends (an answer, an
        // error, a timeout, or dropped at the await), the renewal mark is cleared
        // and its waiters are woken. A renewal whose reply is not in yet when this
        // future ends (dropped, or past the call timeout) is handed to a detached
        // task that delivers its grant into the lease table (see `Delivery`).
        let mut delivery = Delivery {
            shards: self.shards.clone(),
            index: self.shard_index(key),
            key: key.to_vec(),
            notify: lease_size.map(|(_, notify)| notify),
            grant: Some(self.grant(&name, want, n)),
            quota: self.quota,
            config: self.config,
            sent,
            want,
            n,
            timeout,
            detached: false,
        };
        let reply = match tokio::time::timeout(timeout, &mut delivery).await {
            Ok(reply) => reply,
            // `delivery` hands the grant still in flight to a detached task.
            Err(_) => return Err(Error::Timeout { after: timeout }),
        };
        delivery.grant = None;
        let decision = delivery.settle(reply, true);
        if let Ok(decision) = &decision {
            self.limiter.metrics.decided_by(crate::Path::Redis, decision.is_allowed());
        }
        decision
    }

    /// One round trip: `want` permits if they fit, else `n`, else none. Resolves
    /// to (units granted, Redis's time in µs, capacity in use in µs). Owns what
    /// it needs (no borrow of `self`), so a detached task can finish it; it has
    /// no time limit of its own (the caller bounds it).
    fn grant(&self, name: &str, want: u64, n: u64) -> Grant {
        // Ordering: Relaxed; a statistic.
        self.round_trips.fetch_add(1, Ordering::Relaxed);
        let keys = self.limiter.keys_named(name);
        let now = self.limiter.now_arg();
        let redis = self.limiter.redis().clone();
        let metrics = self.limiter.metrics.clone();
        let quota = self.quota;
        Box::pin(async move {
            let mut invocation = scripts::LEASE.prepare_invoke();
            invocation.key(&keys[0]).arg(now).arg(quota.cost_us(want)).arg(quota.cost_us(n)).arg(quota.tolerance_us());
            let reply: Vec<u64> = redis.invoke_unbounded(&invocation, &metrics).await?;
            match *reply.as_slice() {
                [granted, now, used] => Ok((
                    match granted {
                        2 => want,
                        1 => n,
                        _ => 0,
                    },
                    now,
                    used,
                )),
                _ => Err(Error::reply(format_args!("lease script replied {reply:?}"))),
            }
        })
    }

    /// Gives back `n` units that `admission` (a decision of this limiter for
    /// `key`) took and the caller did not use, once per admission (`n` is
    /// trusted).
    ///
    /// If the admission was decided no earlier than this instance's live lease
    /// for `key` was granted (it was served from that lease, or charged in Redis
    /// after it), the units go back into the lease (up to the largest lease), with
    /// no round trip: they are spent, if at all, before the lease expires, within
    /// a lifetime of the time they were charged, so the overshoot bound holds.
    /// Otherwise (the lease has expired or been renewed since) they are refunded
    /// in Redis by [`RedisLimiter::refund`]'s rule: what they are worth less the
    /// time since the admission, so capacity that a later admission took, or a
    /// later lease holds, is never given back.
    pub async fn refund(&self, key: &(impl AsRef<[u8]> + ?Sized), n: u64, admission: &Decision) -> Result<(), Error> {
        let burst = self.quota.burst();
        if n > burst {
            return Err(Error::InsufficientCapacity(InsufficientCapacity { requested: n, capacity: burst }));
        }
        if admission.is_denied() || n == 0 {
            return Ok(());
        }
        let now = self.clock.now().as_u64();
        let key = key.as_ref();
        let name = self.limiter.key_name(key)?;
        {
            let mut leases = Self::lock(self.shard(name.as_bytes()));
            if let Some(lease) = leases.get_mut(name.as_bytes())
                && lease.expires_ns > now
                && admission.decided_at() >= lease.granted_at
            {
                lease.permits = lease.permits.saturating_add(n).min(self.config.max_lease);
                return Ok(());
            }
        }
        self.limiter.refund(key, n, admission).await
    }

    /// `key`'s state in Redis (permits held in leases count as used).
    pub async fn snapshot(&self, key: &(impl AsRef<[u8]> + ?Sized)) -> Result<Snapshot, Error> {
        self.limiter.snapshot(key).await
    }
}

/// A grant's round trip in flight (see [`Leased::grant`]).
type Grant = Pin<Box<dyn Future<Output = Result<(u64, u64, u64), Error>> + Send>>;

/// One round trip of a check, from the request to its reply applied to the
/// lease table; for a renewal, it also owns the key's renewal mark
/// (`Lease::renewal`).
///
/// Awaited (it is a future of the grant's reply), then [`settle`](Self::settle)d
/// by the check. If it is dropped with the grant still in flight (the check's
/// future dropped at the await, a client that disconnects; or past the call
/// timeout), a renewal is handed to a detached tokio task that waits at most one
/// more call timeout for the reply and delivers the grant into the lease (all of
/// it: the request that asked for it was never answered), then clears the mark
/// and wakes the waiters, who are served from it. So a renewal that Redis ran is
/// not lost when its check is dropped. Without a tokio runtime at the drop, or
/// with no reply within that time, the mark is cleared at once (or at the
/// task's end) and the grant is lost: at most `max(max_lease, n)` permits
/// charged in Redis and never served. A check that is not a renewal (no mark)
/// costs at most its own `n` when dropped after Redis ran it, as
/// [`RedisLimiter::check_n`] does.
struct Delivery {
    shards: Arc<[Shard]>,
    index: usize,
    key: Vec<u8>,
    /// The renewal mark this round trip set; `None` for a request decided alone
    /// in Redis, and once released.
    notify: Option<Arc<Notify>>,
    /// The round trip; `None` once its reply is in.
    grant: Option<Grant>,
    quota: GcraMicros,
    config: LeaseConfig,
    /// The lease clock's reading before the request was sent (ns).
    sent: u64,
    want: u64,
    n: u64,
    timeout: Duration,
    /// Whether this is the detached task's: it never hands itself on again.
    detached: bool,
}

impl Future for Delivery {
    type Output = Result<(u64, u64, u64), Error>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        match self.grant.as_mut() {
            Some(grant) => {
                let reply = std::task::ready!(grant.as_mut().poll(cx));
                self.grant = None;
                Poll::Ready(reply)
            }
            None => Poll::Ready(Err(Error::reply("a lease grant was polled after its reply"))),
        }
    }
}

impl Delivery {
    /// Applies the grant's `reply` to the lease table and clears the renewal
    /// mark. `answered`: whether the check that asked is answered with the
    /// decision (it then takes its `n` of the grant), or was dropped (the lease
    /// gets the whole grant).
    fn settle(&mut self, reply: Result<(u64, u64, u64), Error>, answered: bool) -> Result<Decision, Error> {
        let shards = self.shards.clone();
        let mut leases = shards[self.index].lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let lease = leases.get_mut(&self.key[..]);
        let (granted, now_us, used) = match reply {
            Ok(reply) => reply,
            Err(e) => {
                if let Some(lease) = lease {
                    self.release(lease);
                }
                return Err(e);
            }
        };
        let (quota, config, n) = (self.quota, self.config, self.n);
        let granted_at = Nanos::new(now_us.saturating_mul(NS));
        let decision = quota.decision(granted > 0, used, quota.cost_us(n));
        if let Some(lease) = lease {
            let snapshot = decision.snapshot();
            lease.headroom = snapshot.remaining();
            lease.reset_ns = u64::try_from(snapshot.reset_after().as_nanos()).unwrap_or(u64::MAX);
            if let Some(retry) = decision.retry_after() {
                lease.denied_until_ns = self.sent.saturating_add(u64::try_from(retry.as_nanos()).unwrap_or(u64::MAX));
                lease.denied_n = n;
            }
            if self.notify.is_some() {
                let extra = match (answered, granted == self.want) {
                    (false, _) => granted,
                    (true, true) => self.want - n,
                    (true, false) => 0,
                };
                if extra > 0 {
                    // Permits left from the lease this one replaces (fewer than the
                    // request that renewed it) are dropped: kept, they would live a
                    // lifetime past the new grant, beyond the overshoot bound.
                    lease.permits = extra.min(config.max_lease);
                    lease.expires_ns =
                        self.sent.saturating_add(u64::try_from(config.lifetime.as_nanos()).unwrap_or(u64::MAX));
                    lease.granted_at = granted_at;
                }
                let share = lease.headroom / (2 * u64::from(config.instances));
                lease.next_size = share.clamp(1, config.max_lease);
                self.release(lease);
            }
        }
        drop(leases);
        self.release_detached(); // released above, under the lock; or the entry is gone
        Ok(decision.at(granted_at))
    }

    /// Clears `lease`'s mark if it is still this round trip's, and wakes its
    /// waiters.
    fn release(&mut self, lease: &mut Lease) {
        let Some(notify) = self.notify.take() else { return };
        if lease.renewal.as_ref().is_some_and(|mark| Arc::ptr_eq(mark, &notify)) {
            lease.renewal = None;
        }
        // Wakes every waiter that registered on this mark, even if the mark was
        // replaced meanwhile.
        notify.notify_waiters();
    }

    /// Releases the mark, if still held, under the shard's lock.
    fn release_detached(&mut self) {
        if self.notify.is_none() {
            return;
        }
        let shards = self.shards.clone();
        let mut leases = shards[self.index].lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        match leases.get_mut(&self.key[..]) {
            Some(lease) => self.release(lease),
            None => {
                if let Some(notify) = self.notify.take() {
                    notify.notify_waiters();
                }
            }
        }
    }
}

impl Drop for Delivery {
    fn drop(&mut self) {
        if !self.detached
            && self.notify.is_some()
            && let Some(grant) = self.grant.take()
            && let Ok(runtime) = tokio::runtime::Handle::try_current()
        {
            // The mark moves to the detached task, whose own `Delivery` releases
            // it however that task ends (a reply, no reply in time, or the runtime
            // shutting down).
            let mut detached = Delivery {
                shards: self.shards.clone(),
                index: self.index,
                key: core::mem::take(&mut self.key),
                notify: self.notify.take(),
                grant: Some(grant),
                quota: self.quota,
                config: self.config,
                sent: self.sent,
                want: self.want,
                n: self.n,
                timeout: self.timeout,
                detached: true,
            };
            runtime.spawn(async move {
                if let Ok(reply) = tokio::time::timeout(detached.timeout, &mut detached).await {
                    let _ = detached.settle(reply, false);
                }
            });
            return;
        }
        self.release_detached();
    }
}

impl Lease {
    fn new(next_size: u64) -> Self {
        Self {
            permits: 0,
            expires_ns: 0,
            next_size,
            renewal: None,
            denied_until_ns: 0,
            denied_n: 0,
            headroom: 0,
            reset_ns: 0,
            granted_at: Nanos::ZERO,
        }
    }
}

impl<K: AsRef<[u8]> + ?Sized + Sync, C: Clock + Send + Sync> AsyncKeyedLimiter<K> for Leased<C> {
    type Error = Error;

    fn check_n(&self, key: &K, n: u64) -> impl Future<Output = Result<Decision, Error>> + Send {
        Leased::check_n(self, key, n)
    }

    fn refund(&self, key: &K, n: u64, admission: &Decision) -> impl Future<Output = Result<(), Error>> + Send {
        Leased::refund(self, key, n, admission)
    }

    fn snapshot(&self, key: &K) -> impl Future<Output = Result<Snapshot, Error>> + Send {
        Leased::snapshot(self, key)
    }

    fn policies(&self) -> &[Policy] {
        self.limiter.policies()
    }
}

//! [`Error`]: every weir error in one type, so `?` works across crates.

use core::fmt;

/// Declares [`Error`] from one list of the errors it wraps: for each, its variant
/// (with its docs and the feature that brings its crate), `Display` as the wrapped
/// error, `source` as the wrapped error's source, and `From` the wrapped error (for
/// `?`), except for the variants marked `(item dropped)`, whose generic `From` is
/// written below.
macro_rules! errors {
    (
        $(#[$meta:meta])*
        pub enum Error {
            $(
                $(#[doc = $doc:literal])*
                $(#[cfg($cfg:meta)])?
                $variant:ident($ty:ty) $(($($item:tt)*))?,
            )*
        }
    ) => {
        $(#[$meta])*
        pub enum Error {
            $(
                $(#[doc = $doc])*
                $(#[cfg($cfg)])?
                $variant($ty),
            )*
        }

        $(
            errors!(@from [$($($item)*)?] $(#[cfg($cfg)])? $variant($ty));
        )*

        impl fmt::Display for Error {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                match self {
                    $(
                        $(#[cfg($cfg)])?
                        Self::$variant(error) => fmt::Display::fmt(error, f),
                    )*
                }
            }
        }

        #[cfg(feature = "std")]
        impl std::error::Error for Error {
            fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
                match self {
                    $(
                        $(#[cfg($cfg)])?
                        Self::$variant(error) => std::error::Error::source(error),
                    )*
                }
            }
        }
    };
    (@from [] $(#[cfg($cfg:meta)])? $variant:ident($ty:ty)) => {
        $(#[cfg($cfg)])?
        impl From<$ty> for Error {
            #[inline]
            fn from(error: $ty) -> Self {
                Self::$variant(error)
            }
        }
    };
    (@from [item dropped] $(#[cfg($cfg:meta)])? $variant:ident($ty:ty)) => {};
}

errors! {
    /// Any weir error: each crate's error type converts into it with `From`, so a
    /// function that builds quotas, limiters and stores returns one error type and uses
    /// `?` throughout.
    ///
    /// [`Display`](fmt::Display) is the wrapped error's own message (what went wrong and
    /// what to do about it), and [`source`](core::error::Error::source) is the wrapped
    /// error's own cause (an I/O or Redis error, where there is one), so an error
    /// reporter that walks the chain prints each message once. To act on a particular
    /// error, match its variant. Variants appear with the features that bring their
    /// crates; the enum is `#[non_exhaustive]`, so a `match` needs a `_` arm.
    ///
    /// ```
    /// use weir_rl::keyed::{Keyed, KeyedConfig, KeyedGcra};
    /// use weir_rl::window::SlidingWindow;
    /// use weir_rl::{Error, Quota, QuotaError};
    ///
    /// fn build(per_minute: u64) -> Result<(SlidingWindow, KeyedGcra<String>), Error> {
    ///     let quota = Quota::per_minute(per_minute)?; // QuotaError
    ///     let window = SlidingWindow::new(quota)?; // WindowError
    ///     let per_user = Keyed::gcra(quota, KeyedConfig::builder(10_000).build()?); // KeyedConfigError
    ///     Ok((window, per_user))
    /// }
    ///
    /// assert!(build(100).is_ok());
    /// let error = build(0).unwrap_err();
    /// assert!(matches!(error, Error::Quota(QuotaError::ZeroCount)));
    /// // The wrapped error's message, which says what to do:
    /// assert_eq!(error.to_string(), QuotaError::ZeroCount.to_string());
    /// ```
    ///
    /// A check that asks for more than a limiter can ever admit converts too:
    ///
    /// ```
    /// use weir_rl::{Error, Limiter, Quota, gcra::Gcra};
    ///
    /// fn admit_batch(limiter: &impl Limiter, items: u64) -> Result<bool, Error> {
    ///     Ok(limiter.check_n(items)?.is_allowed()) // InsufficientCapacity
    /// }
    ///
    /// let limiter = Gcra::new(Quota::per_second(10)?);
    /// assert!(admit_batch(&limiter, 4)?);
    /// assert!(matches!(admit_batch(&limiter, 11), Err(Error::InsufficientCapacity(e)) if e.capacity == 10));
    /// # Ok::<(), Error>(())
    /// ```
    #[derive(Debug)]
    #[non_exhaustive]
    pub enum Error {
        /// A quota could not be built.
        Quota(weir_rl_core::QuotaError),
        /// A request asked for more than the limiter can ever admit at once.
        InsufficientCapacity(weir_rl_core::InsufficientCapacity),
        /// An all-of limiter could not be built.
        AllOf(weir_rl_core::AllOfError),
        /// A coarse clock could not be started.
        #[cfg(feature = "std")]
        CoarseClock(weir_rl_core::CoarseClockError),
        /// A leased GCRA limiter's configuration is invalid.
        #[cfg(feature = "gcra")]
        LeaseConfig(weir_gcra::LeaseConfigError),
        /// A window limiter could not be built.
        #[cfg(feature = "window")]
        Window(weir_window::WindowError),
        /// A leaky bucket, queue, schedule or throttle could not be built.
        #[cfg(feature = "leaky")]
        LeakyBuild(weir_leaky::BuildError),
        /// A leaky bucket turned an item away (full or closed). Converting drops the
        /// item; to keep it, handle the [`OfferError`](weir_leaky::OfferError) before `?`.
        #[cfg(feature = "leaky")]
        Offer(weir_leaky::OfferError<()>) (item dropped),
        /// A leaky bucket had no item ready, or was closed and drained.
        #[cfg(feature = "leaky")]
        TryRecv(weir_leaky::TryRecvError),
        /// A leaky bucket was closed and drained.
        #[cfg(feature = "leaky")]
        Recv(weir_leaky::RecvError),
        /// A leaky bucket gave no item by the deadline, or was closed and drained.
        #[cfg(feature = "leaky")]
        RecvTimeout(weir_leaky::RecvTimeoutError),
        /// A bounded queue turned an item away (full or closed). Converting drops the
        /// item; to keep it, handle the [`PushError`](weir_leaky::PushError) before `?`.
        #[cfg(feature = "leaky")]
        Push(weir_leaky::PushError<()>) (item dropped),
        /// A bounded queue was empty, or closed and drained.
        #[cfg(feature = "leaky")]
        Pop(weir_leaky::PopError),
        /// A throttle turned a request away (full, or not by its deadline).
        #[cfg(feature = "tokio")]
        Throttle(weir_leaky::ThrottleError),
        /// A per-key store's configuration is invalid.
        #[cfg(feature = "keyed")]
        KeyedConfig(weir_keyed::KeyedConfigError),
        /// A per-key store's background sweeper could not be started.
        #[cfg(feature = "keyed")]
        Sweeper(weir_keyed::SweeperError),
        /// A rate-limiting layer could not be built.
        #[cfg(feature = "tower")]
        TowerBuild(weir_tower::BuildError),
        /// A rate-limiting policy could not be built.
        #[cfg(feature = "tower")]
        TowerPolicy(weir_tower::PolicyError),
        /// Tiers (plans chosen by a lookup) could not be built.
        #[cfg(feature = "tower")]
        TowerTiers(weir_tower::TiersError),
        /// A per-key throttle could not be built.
        #[cfg(feature = "tower")]
        TowerThrottle(weir_tower::KeyedThrottleError),
        /// A rate-limiting layer's configuration (TOML) is invalid.
        #[cfg(feature = "tower")]
        TowerConfig(weir_tower::ConfigError),
        /// A trusted-proxy network could not be parsed.
        #[cfg(feature = "tower")]
        Cidr(weir_tower::CidrError),
        /// A client-address setting was refused.
        #[cfg(feature = "tower")]
        ClientIp(weir_tower::ClientIpError),
        /// A store behind the middleware failed.
        #[cfg(feature = "tower")]
        Store(weir_tower::StoreError),
        /// A tier lookup failed.
        #[cfg(feature = "tower")]
        TierLookup(weir_tower::LookupFailed),
        /// A wait for an in-memory limiter
        /// ([`until_ready`](weir_tower::wait::until_ready),
        /// [`until_key_ready`](weir_tower::wait::until_key_ready) or
        /// [`FifoWait`](weir_tower::wait::FifoWait) over a weir-keyed store) ended
        /// without an admission.
        #[cfg(feature = "tower")]
        Wait(weir_tower::wait::WaitError<weir_rl_core::InsufficientCapacity>),
        /// A Redis-backed check, refund or snapshot has no answer.
        #[cfg(feature = "redis")]
        Redis(weir_redis::Error),
        /// A Redis limiter, connection or policy cannot be built as asked.
        #[cfg(feature = "redis")]
        RedisConfig(weir_redis::ConfigError),
        /// A wait for a Redis limiter
        /// ([`until_key_ready`](weir_tower::wait::until_key_ready)) ended without an
        /// admission.
        #[cfg(all(feature = "tower", feature = "redis"))]
        RedisWait(weir_tower::wait::WaitError<weir_redis::Error>),
    }
}

/// An offer's error without its item (dropped): the item may be of any type, and
/// `Error` holds no type parameter.
#[cfg(feature = "leaky")]
impl<T> From<weir_leaky::OfferError<T>> for Error {
    fn from(error: weir_leaky::OfferError<T>) -> Self {
        use weir_leaky::OfferError;
        Self::Offer(match error {
            OfferError::Full { item: _, retry_after } => OfferError::Full { item: (), retry_after },
            OfferError::Closed(_) => OfferError::Closed(()),
        })
    }
}

/// A push's error without its item (dropped), as for offers.
#[cfg(feature = "leaky")]
impl<T> From<weir_leaky::PushError<T>> for Error {
    fn from(error: weir_leaky::PushError<T>) -> Self {
        use weir_leaky::PushError;
        Self::Push(match error {
            PushError::Full(_) => PushError::Full(()),
            PushError::Closed(_) => PushError::Closed(()),
        })
    }
}

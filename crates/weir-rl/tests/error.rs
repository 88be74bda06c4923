//! `weir_rl::Error`: every weir error converts into it, prints as itself, and hands
//! on its own cause.
#![cfg(all(feature = "gcra", feature = "window", feature = "leaky", feature = "keyed"))]

use std::error::Error as _;
use std::time::Duration;
use weir_rl::Error;

/// `?` from `E` into `weir_rl::Error`.
fn question_mark<E>(error: E) -> Result<(), Error>
where
    Error: From<E>,
{
    Err(error)?
}

/// Converts `error`, checks the message is the wrapped error's own, and returns it.
fn converted<E: std::fmt::Display>(error: E) -> Error
where
    Error: From<E>,
{
    let message = error.to_string();
    let converted = question_mark(error).unwrap_err();
    assert_eq!(converted.to_string(), message);
    converted
}

#[test]
fn every_weir_error_converts_and_prints_as_itself() {
    use weir_rl::{AllOfError, CoarseClockError, InsufficientCapacity, QuotaError};

    assert!(matches!(converted(QuotaError::ZeroCount), Error::Quota(QuotaError::ZeroCount)));
    let e = InsufficientCapacity { requested: 3, capacity: 2 };
    assert!(matches!(converted(e), Error::InsufficientCapacity(got) if got == e));
    assert!(matches!(converted(AllOfError::NoMembers), Error::AllOf(AllOfError::NoMembers)));
    assert!(matches!(converted(CoarseClockError::ZeroInterval), Error::CoarseClock(_)));

    let e = weir_rl::gcra::LeaseConfigError::ZeroStripes;
    assert!(matches!(converted(e), Error::LeaseConfig(got) if got == e));
    let e = weir_rl::window::WindowError::ZeroStripes;
    assert!(matches!(converted(e), Error::Window(got) if got == e));

    let e = weir_rl::leaky::BuildError::ZeroCapacity;
    assert!(matches!(converted(e), Error::LeakyBuild(got) if got == e));
    let e = weir_rl::leaky::TryRecvError::Empty;
    assert!(matches!(converted(e), Error::TryRecv(got) if got == e));
    assert!(matches!(converted(weir_rl::leaky::RecvError), Error::Recv(_)));
    let e = weir_rl::leaky::RecvTimeoutError::Timeout;
    assert!(matches!(converted(e), Error::RecvTimeout(got) if got == e));
    let e = weir_rl::leaky::PopError::Closed;
    assert!(matches!(converted(e), Error::Pop(got) if got == e));

    let e = weir_rl::keyed::KeyedConfigError::ZeroMaxKeys;
    assert!(matches!(converted(e), Error::KeyedConfig(got) if got == e));
    assert!(matches!(converted(weir_rl::keyed::SweeperError::ZeroInterval), Error::Sweeper(_)));
}

#[cfg(feature = "tokio")]
#[test]
fn a_throttle_error_converts() {
    let e = weir_rl::leaky::ThrottleError::TimedOut;
    assert!(matches!(converted(e), Error::Throttle(got) if got == e));
}

#[test]
fn an_offer_or_push_error_converts_without_its_item() {
    use weir_rl::leaky::{OfferError, PushError};

    let retry_after = Duration::from_millis(100);
    let e = OfferError::Full { item: String::from("request"), retry_after };
    assert!(matches!(converted(e), Error::Offer(OfferError::Full { item: (), retry_after: r }) if r == retry_after));
    assert!(matches!(converted(OfferError::Closed(7u32)), Error::Offer(OfferError::Closed(()))));
    assert!(matches!(converted(PushError::Full(vec![1u8])), Error::Push(PushError::Full(()))));
    assert!(matches!(converted(PushError::Closed('x')), Error::Push(PushError::Closed(()))));
}

#[test]
fn the_source_is_the_wrapped_errors_own_cause() {
    use weir_rl::CoarseClockError;

    // A cause-less error has none: its message is already the whole story.
    assert!(Error::from(weir_rl::QuotaError::ZeroPeriod).source().is_none());

    // An error with a cause hands it on, so a reporter prints each message once.
    let spawn = CoarseClockError::Spawn(std::io::Error::other("no threads left"));
    let error = Error::from(spawn);
    let source = error.source().expect("the I/O error");
    assert_eq!(source.to_string(), "no threads left");
    assert!(source.downcast_ref::<std::io::Error>().is_some());
    assert!(error.to_string().contains("no threads left"));

    let sweeper = weir_rl::keyed::SweeperError::Spawn(std::io::Error::other("EAGAIN"));
    assert_eq!(Error::from(sweeper).source().map(|e| e.to_string()).as_deref(), Some("EAGAIN"));
}

#[test]
fn it_is_a_thread_safe_static_error() {
    fn assert_error<E: std::error::Error + Send + Sync + 'static>() {}
    assert_error::<Error>();

    // So it boxes into the usual error types.
    let boxed: Box<dyn std::error::Error + Send + Sync> = Error::from(weir_rl::QuotaError::ZeroBurst).into();
    assert_eq!(boxed.to_string(), weir_rl::QuotaError::ZeroBurst.to_string());
}

#[cfg(feature = "tower")]
#[test]
fn the_middlewares_errors_convert() {
    use weir_rl::tower::{
        Cidr, ClientIp, Config, Key, KeyedThrottle, LookupFailed, Policy, RateLimitLayer, StoreError, Tiers,
    };

    let e = "not a network".parse::<Cidr>().unwrap_err();
    assert!(matches!(converted(e.clone()), Error::Cidr(got) if got == e));
    let e = ClientIp::builder().ipv4_prefix(33).build().unwrap_err();
    assert!(matches!(converted(e.clone()), Error::ClientIp(got) if got == e));
    let e = Config::from_toml("[[[").unwrap_err();
    assert!(matches!(converted(e.clone()), Error::TowerConfig(got) if got == e));
    let e = LookupFailed("the tier service timed out".into());
    assert!(matches!(converted(e.clone()), Error::TierLookup(got) if got == e));
    assert!(matches!(converted(StoreError::new("connection reset")), Error::Store(_)));
    let e = RateLimitLayer::builder().route("api", Policy::builder("api").build().unwrap()).build().unwrap_err();
    assert!(matches!(converted(e.clone()), Error::TowerBuild(got) if got == e));
    let e = Policy::builder("api").cost(0).build().unwrap_err();
    assert!(matches!(converted(e.clone()), Error::TowerPolicy(got) if got == e));
    let e = Tiers::builder(|_: Key| async { Ok::<_, String>("free") }).build().unwrap_err();
    assert!(matches!(converted(e.clone()), Error::TowerTiers(got) if got == e));
    let e = KeyedThrottle::builder(weir_rl::Quota::per_second(1).unwrap(), 1).max_keys(0).build().unwrap_err();
    assert!(matches!(converted(e.clone()), Error::TowerThrottle(got) if got == e));
}

#[cfg(feature = "tower")]
#[test]
fn a_wait_converts() {
    use weir_rl::InsufficientCapacity;
    use weir_rl::tower::wait::WaitError;

    let e: WaitError<InsufficientCapacity> = WaitError::Deadline { decision: None };
    assert!(matches!(converted(e.clone()), Error::Wait(got) if got == e));
    let e: WaitError<InsufficientCapacity> = WaitError::Limiter(InsufficientCapacity { requested: 11, capacity: 10 });
    assert!(matches!(converted(e.clone()), Error::Wait(got) if got == e));
}

/// `until_ready(..).await?` in a function that returns `weir_rl::Error`.
#[cfg(feature = "tower")]
#[test]
fn until_ready_works_with_question_mark() {
    use std::future::Future;
    use std::task::{Context, Poll, Waker};
    use weir_rl::tower::wait::{Instant, until_ready, until_ready_timeout};

    async fn admit(limiter: &weir_rl::gcra::Gcra) -> Result<(), Error> {
        let first = until_ready(limiter, 1, Instant::now()).await?;
        let second = until_ready_timeout(limiter, 1, Duration::ZERO).await?;
        assert!(first.is_allowed() && second.is_allowed());
        Ok(())
    }
    // One an hour: the second's turn is an hour away however long the test takes.
    let limiter = weir_rl::gcra::Gcra::new(weir_rl::Quota::per_hour(1).unwrap());
    // The first is admitted at once; the second is refused at once (its turn is past
    // the deadline): decided at the first poll, with no sleep, so no runtime.
    let mut future = std::pin::pin!(admit(&limiter));
    let outcome = future.as_mut().poll(&mut Context::from_waker(Waker::noop()));
    assert!(matches!(outcome, Poll::Ready(Err(Error::Wait(_)))), "{outcome:?}");
}

#[cfg(all(feature = "tower", feature = "redis"))]
#[test]
fn a_wait_on_redis_converts() {
    use weir_rl::tower::wait::WaitError;

    let e: WaitError<weir_rl::redis::Error> = WaitError::Deadline { decision: None };
    assert!(matches!(converted(e), Error::RedisWait(WaitError::Deadline { decision: None })));
}

#[cfg(feature = "redis")]
#[test]
fn the_redis_errors_convert() {
    use weir_rl::redis::ConfigError;

    let e = ConfigError::Zero { what: "max_lease" };
    assert!(matches!(converted(e.clone()), Error::RedisConfig(got) if got == e));
    let timeout = Duration::from_millis(50);
    assert!(matches!(
        converted(weir_rl::redis::Error::Timeout { after: timeout }),
        Error::Redis(weir_rl::redis::Error::Timeout { after }) if after == timeout
    ));
}

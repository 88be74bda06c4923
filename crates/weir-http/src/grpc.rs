//! The gRPC status a refused gRPC call is answered with, as data: an adapter that
//! serves gRPC (weir-tower's `grpc` feature) writes it as a trailers-only
//! response.

use crate::response::{Cause, Denied};
use std::time::Duration;

/// A gRPC status code (the numbers of `google.rpc.Code`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum GrpcCode {
    /// 8: a limit denied the call, its throttle turned it away, or a store is full
    /// of other clients' keys.
    ResourceExhausted,
    /// 16: no key from its limit's source, or a key too long.
    Unauthenticated,
    /// 13: a per-IP limit and no peer address (the server's setup).
    Internal,
    /// 14: a store or the tier lookup failed, or a store decided by its fail policy.
    Unavailable,
}

impl GrpcCode {
    /// The code's number (`grpc-status`).
    pub fn number(self) -> i32 {
        match self {
            Self::ResourceExhausted => 8,
            Self::Internal => 13,
            Self::Unavailable => 14,
            Self::Unauthenticated => 16,
        }
    }
}

/// The gRPC status of a refusal: its code, its `grpc-message` (unencoded: gRPC
/// percent-encodes it on the wire) naming the policy and quota and when to retry,
/// and the delay as `grpc-retry-pushback-ms` (gRFC A6) and a `google.rpc.RetryInfo`
/// when the limiter knows when the call would be admitted.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct GrpcStatus {
    /// The code.
    pub code: GrpcCode,
    /// The message.
    pub message: String,
    /// When the call would be admitted, if known: exact, for a `RetryInfo`.
    pub retry_after: Option<Duration>,
}

impl GrpcStatus {
    pub(crate) fn new(cause: Cause, denied: &Denied<'_>, retry_after: Option<Duration>) -> Self {
        let code = match cause {
            Cause::RateLimited | Cause::KeyCapacity => GrpcCode::ResourceExhausted,
            Cause::Unidentified => GrpcCode::Unauthenticated,
            Cause::NoPeerAddress => GrpcCode::Internal,
            Cause::Unavailable => GrpcCode::Unavailable,
        };
        let (title, _) = cause.words();
        let mut message = format!("{title}: {}", denied.detail);
        if let Some(retry) = retry_after {
            message.push_str(&format!(" Retry after {} ms.", pushback_ms(retry)));
        }
        match (denied.policy, denied.quota) {
            ("", "") => {}
            (policy, "") => message.push_str(&format!(" (policy \"{policy}\")")),
            ("", quota) => message.push_str(&format!(" (quota \"{quota}\")")),
            (policy, quota) => message.push_str(&format!(" (policy \"{policy}\", quota \"{quota}\")")),
        }
        Self { code, message, retry_after }
    }

    /// `grpc-retry-pushback-ms`: the delay in whole milliseconds, rounded up, at
    /// least 1 (a pushback of 0 is a retry at once, which is refused again).
    pub fn pushback_ms(&self) -> Option<u64> {
        self.retry_after.map(pushback_ms)
    }
}

/// Whole milliseconds, rounded up, and at least 1.
pub(crate) fn pushback_ms(d: Duration) -> u64 {
    u64::try_from(d.as_nanos().div_ceil(1_000_000)).unwrap_or(u64::MAX).max(1)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::response::Rejection;

    #[test]
    fn pushback_is_whole_milliseconds_rounded_up() {
        assert_eq!(pushback_ms(Duration::from_nanos(1)), 1);
        assert_eq!(pushback_ms(Duration::ZERO), 1);
        assert_eq!(pushback_ms(Duration::from_millis(1500)), 1500);
        assert_eq!(pushback_ms(Duration::from_micros(1_500_001)), 1501);
        assert_eq!(pushback_ms(Duration::MAX), u64::MAX);
    }

    #[test]
    fn statuses_name_the_policy_the_quota_and_the_retry() {
        let denied = Denied {
            rejection: Rejection::RateLimited,
            policy: "api",
            quota: "minute",
            retry_after_secs: Some(2),
            decision: None,
            detail: Cause::RateLimited.words().1,
        };
        let status = GrpcStatus::new(Cause::RateLimited, &denied, Some(Duration::from_millis(1250)));
        assert_eq!((status.code.number(), status.pushback_ms()), (8, Some(1250)));
        assert_eq!(
            status.message,
            "Too Many Requests: The rate limit for this client is exhausted. Retry after 1250 ms. (policy \"api\", \
             quota \"minute\")"
        );
        for (cause, want) in
            [(Cause::Unidentified, 16), (Cause::NoPeerAddress, 13), (Cause::Unavailable, 14), (Cause::KeyCapacity, 8)]
        {
            let status = GrpcStatus::new(cause, &Denied { detail: cause.words().1, ..denied }, None);
            assert_eq!((status.code.number(), status.pushback_ms()), (want, None), "{cause:?}");
        }
    }
}

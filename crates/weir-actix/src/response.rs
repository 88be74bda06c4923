//! What the middleware writes, in actix-web's types: the `RateLimit` fields weir-http
//! decided, on limited responses, and the 429 (or 400, 503) it answers with itself.

use actix_web::HttpResponse;
use actix_web::body::BoxBody;
use actix_web::http::StatusCode;
use actix_web::http::header::{CONTENT_TYPE, HeaderMap, HeaderName, HeaderValue, RETRY_AFTER};
use bytes::Bytes;
use std::sync::LazyLock;
use weir_http::{Legacy, Limits, RateLimitFields, Refused};

/// `RateLimit-Policy` (draft-ietf-httpapi-ratelimit-headers-10).
pub const RATELIMIT_POLICY: HeaderName = HeaderName::from_static("ratelimit-policy");
/// `RateLimit` (draft-ietf-httpapi-ratelimit-headers-10).
pub const RATELIMIT: HeaderName = HeaderName::from_static("ratelimit");
/// The legacy `X-RateLimit-Limit`.
pub const X_RATELIMIT_LIMIT: HeaderName = HeaderName::from_static("x-ratelimit-limit");
/// The legacy `X-RateLimit-Remaining`.
pub const X_RATELIMIT_REMAINING: HeaderName = HeaderName::from_static("x-ratelimit-remaining");
/// The legacy `X-RateLimit-Reset` (seconds until the quota is full again).
pub const X_RATELIMIT_RESET: HeaderName = HeaderName::from_static("x-ratelimit-reset");

const PROBLEM_JSON: HeaderValue = HeaderValue::from_static(weir_http::PROBLEM_JSON);

/// The header values of 0 to 999, made once: a value of a `&'static str` is cloned
/// without allocating or touching a shared counter. (The strings live as long as
/// the process: 2 890 bytes.)
static SMALL_NUMBERS: LazyLock<Box<[HeaderValue]>> = LazyLock::new(|| {
    (0..1000u64)
        .map(|n| {
            let digits: &'static str = Box::leak(n.to_string().into_boxed_str());
            HeaderValue::from_static(digits)
        })
        .collect()
});

/// `n` as a header value: below 1000 from the table, else one allocation of
/// exactly its digits (`HeaderValue::from(u64)` goes through a `BytesMut`, at
/// several times the cost).
#[inline]
pub(crate) fn number(n: u64) -> HeaderValue {
    match SMALL_NUMBERS.get(n as usize) {
        Some(value) if n < 1000 => value.clone(),
        _ => {
            let mut buf = [0u8; 20];
            let digits = Bytes::copy_from_slice(weir_http::digits(n, &mut buf));
            HeaderValue::from_maybe_shared(digits).unwrap_or(HeaderValue::from_static("0"))
        }
    }
}

/// A field's value, as weir-http made it (visible ASCII: never refused), moved.
#[inline]
fn value(bytes: Bytes) -> HeaderValue {
    HeaderValue::from_maybe_shared(bytes).unwrap_or(HeaderValue::from_static(""))
}

/// Each policy's `RateLimit-Policy` value made when the configuration was built
/// ([`Limits::policy_field`]), as a header value: converted once, cloned per request.
pub(crate) struct PolicyValues(Vec<Option<HeaderValue>>);

impl PolicyValues {
    fn of(limits: &Limits) -> Self {
        Self(limits.policies().map(|policy| limits.policy_field(policy).cloned().map(value)).collect())
    }
}

/// The `RateLimit` fields of a decided request as header values.
#[derive(Debug, Clone)]
pub(crate) struct Fields {
    policy: HeaderValue,
    ratelimit: HeaderValue,
    legacy: Option<Legacy>,
}

impl Fields {
    /// `fields` as header values, for a request `limits` decided.
    #[inline]
    pub(crate) fn new(limits: &Limits, fields: RateLimitFields) -> Self {
        let precomputed = fields.precomputed_policy().and_then(|policy| {
            let values = limits.adapter_data(PolicyValues::of)?;
            values.0.get(policy.index())?.clone()
        });
        let (policy, ratelimit, legacy) = fields.into_parts();
        Self { policy: precomputed.unwrap_or_else(|| value(policy)), ratelimit: value(ratelimit), legacy }
    }

    /// Writes the fields into `headers`, replacing any of the same names the
    /// service set: the limiter's decision is what the client is told.
    pub(crate) fn write(self, headers: &mut HeaderMap) {
        headers.reserve(if self.legacy.is_some() { 5 } else { 2 });
        headers.insert(RATELIMIT_POLICY, self.policy);
        headers.insert(RATELIMIT, self.ratelimit);
        if let Some(legacy) = self.legacy {
            headers.insert(X_RATELIMIT_LIMIT, number(legacy.limit));
            headers.insert(X_RATELIMIT_REMAINING, number(legacy.remaining));
            headers.insert(X_RATELIMIT_RESET, number(legacy.reset_secs));
        }
    }
}

/// The refusal's response: its status, `Retry-After`, `RateLimit` fields (when the
/// refusal has them) and problem+json body.
pub(crate) fn refusal(limits: &Limits, mut refused: Refused<'_>) -> HttpResponse<BoxBody> {
    let status = StatusCode::from_u16(refused.status()).unwrap_or(StatusCode::TOO_MANY_REQUESTS);
    let mut response = HttpResponse::with_body(status, refused.problem_json());
    let headers = response.headers_mut();
    headers.insert(CONTENT_TYPE, PROBLEM_JSON);
    if let Some(secs) = refused.retry_after_secs() {
        headers.insert(RETRY_AFTER, number(secs));
    }
    if let Some(fields) = refused.take_fields() {
        Fields::new(limits, fields).write(headers);
    }
    response.map_into_boxed_body()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_are_header_values() {
        for n in [0, 1, 9, 10, 42, 99, 100, 567, 999, 1000, 1001, 86_400, u64::MAX] {
            assert_eq!(number(n), n.to_string().as_str());
        }
    }
}

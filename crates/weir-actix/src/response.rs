//! What the middleware writes, in actix-web's types: the `RateLimit` fields weir-http
//! decided, on limited responses, and the 429 (or 400, 503) it answers with itself.

use actix_web::HttpResponse;
use actix_web::body::BoxBody;
use actix_web::http::StatusCode;
use actix_web::http::header::{CONTENT_TYPE, HeaderMap, HeaderName, HeaderValue, RETRY_AFTER};
use bytes::Bytes;
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

/// The header values of 0 to 999, made at compile time: a `HeaderValue` of a
/// `&'static str` is cloned without allocating or touching a shared counter, and the
/// table is read without a check that it was made.
static SMALL_NUMBERS: [HeaderValue; 1000] = small_numbers();

const fn small_numbers() -> [HeaderValue; 1000] {
    let mut out = [const { HeaderValue::from_static("0") }; 1000];
    let mut n = 0;
    while n < 1000 {
        let digits = match weir_http::small_number(n as u64) {
            Some(digits) => digits,
            None => "0",
        };
        // The value replaced is a static "0": nothing to drop.
        core::mem::forget(core::mem::replace(&mut out[n], HeaderValue::from_static(digits)));
        n += 1;
    }
    out
}

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

/// A value made once per configuration, checked.
fn checked(bytes: Bytes) -> HeaderValue {
    HeaderValue::from_maybe_shared(bytes).unwrap_or(HeaderValue::from_static(""))
}

/// Policy `policy`'s `RateLimit-Policy` value made when `limits` were built: the
/// header value converted once, cloned (no allocation, no byte copied); converted
/// now where `limits` keep another adapter's data.
#[inline]
fn precomputed_value(limits: &Limits, policy: weir_http::PolicyId) -> HeaderValue {
    let once = limits.adapter_data(PolicyValues::of).and_then(|values| values.0.get(policy.index())?.clone());
    once.unwrap_or_else(|| limits.policy_field(policy).cloned().map_or(HeaderValue::from_static(""), checked))
}

/// A field's value, as weir-http made it, moved: not checked again (the check
/// reads every byte).
#[inline]
fn value(bytes: Bytes) -> HeaderValue {
    // SAFETY: weir-http's `RateLimit` and `RateLimit-Policy` values are visible
    // ASCII (see `RateLimitFields`: names are structured-field strings with every
    // other character dropped, numbers are digits), a valid header value and valid
    // UTF-8, which is what `from_maybe_shared_unchecked` asks (a debug build checks).
    unsafe { HeaderValue::from_maybe_shared_unchecked(bytes) }
}

/// Each policy's `RateLimit-Policy` value made when the configuration was built
/// ([`Limits::policy_field`]), as a header value: converted once, cloned per request.
pub(crate) struct PolicyValues(Vec<Option<HeaderValue>>);

impl PolicyValues {
    fn of(limits: &Limits) -> Self {
        Self(limits.policies().map(|policy| limits.policy_field(policy).cloned().map(checked)).collect())
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
        let precomputed = fields.precomputed_policy();
        let (policy, ratelimit, legacy) = fields.into_parts();
        let policy = match (policy, precomputed) {
            (Some(made), _) => value(made),
            (None, Some(policy)) => precomputed_value(limits, policy),
            (None, None) => HeaderValue::from_static(""),
        };
        Self { policy, ratelimit: value(ratelimit), legacy }
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

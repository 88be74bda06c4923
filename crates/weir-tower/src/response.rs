//! What the middleware writes, in `http`'s types: the `RateLimit` fields weir-http
//! decided, on limited responses, and the 429 (or 400, 503) it answers with itself.

use bytes::Bytes;
use http::header::{CONTENT_TYPE, HeaderName, HeaderValue, RETRY_AFTER};
use http::{HeaderMap, Response, StatusCode};
use std::sync::{Arc, LazyLock};
use weir_http::{Denied, Limits, RateLimitFields, Refused};

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

const PROBLEM_JSON: HeaderValue = HeaderValue::from_static("application/problem+json");

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

/// `n` as a header value: below 1000 from the static table (no allocation), else
/// one allocation of exactly its digits.
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

/// The `RateLimit` fields of a decided request as header values: the
/// `RateLimit-Policy` value made once per policy (see [`PolicyValues`]), the
/// `RateLimit` value as weir-http made it, the legacy numbers made as they are
/// written.
#[derive(Debug, Clone)]
pub(crate) struct Fields {
    policy: HeaderValue,
    ratelimit: HeaderValue,
    /// `X-RateLimit-Limit`, `-Remaining`, `-Reset`, when switched on.
    legacy: Option<[u64; 3]>,
}

/// Each policy's `RateLimit-Policy` value made when the configuration was built
/// ([`Limits::policy_field`]), as a header value: converted once, cloned per request.
pub(crate) struct PolicyValues(Vec<Option<HeaderValue>>);

impl PolicyValues {
    fn of(limits: &Limits) -> Self {
        Self(limits.policies().map(|policy| limits.policy_field(policy).cloned().map(checked)).collect())
    }
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
        Self { policy, ratelimit: value(ratelimit), legacy: legacy.map(|l| [l.limit, l.remaining, l.reset_secs]) }
    }

    /// How many headers [`write`](Self::write) adds.
    pub(crate) fn len(&self) -> usize {
        if self.legacy.is_some() { 5 } else { 2 }
    }

    /// Writes the fields into `headers`, replacing any of the same names the
    /// service set: the limiter's decision is what the client is told.
    ///
    /// A map with room for the fields (and for the `content-length` axum's router
    /// adds after the layer) takes them in place. Otherwise, rather than grow it
    /// (allocate, move every entry, rebuild its index) and then hash each field's
    /// name: a map made once per process with the fields' names and room to spare
    /// is cloned, the values set in its order (no name hashed), and the service's
    /// headers (a handler's one or two) moved into it.
    pub(crate) fn write(self, headers: &mut HeaderMap) {
        let fields = self.len();
        if headers.len() + fields < headers.capacity() {
            self.insert(headers);
            return;
        }
        let legacy = self.legacy.is_some();
        let template = field_map(legacy);
        if headers.len() + fields >= template.capacity() {
            headers.reserve(fields + 1);
            self.insert(headers);
            return;
        }
        let mut map = template.clone();
        let mut slots = map.values_mut();
        self.into_values(|value| {
            if let Some(slot) = slots.next() {
                *slot = value;
            }
        });
        let service = core::mem::replace(headers, map);
        let mut name: Option<HeaderName> = None;
        for (next, value) in service {
            if let Some(next) = next {
                // A field the service set is replaced by the limiter's.
                name = (!is_field(&next, legacy)).then_some(next);
            }
            if let Some(name) = &name {
                headers.append(name, value);
            }
        }
    }

    /// Inserts the fields into `headers`, which has room for them.
    fn insert(self, headers: &mut HeaderMap) {
        headers.insert(RATELIMIT_POLICY, self.policy);
        headers.insert(RATELIMIT, self.ratelimit);
        if let Some([limit, remaining, reset]) = self.legacy {
            headers.insert(X_RATELIMIT_LIMIT, number(limit));
            headers.insert(X_RATELIMIT_REMAINING, number(remaining));
            headers.insert(X_RATELIMIT_RESET, number(reset));
        }
    }

    /// The values, in the order [`write`](Self::write) inserts them.
    fn into_values(self, mut set: impl FnMut(HeaderValue)) {
        set(self.policy);
        set(self.ratelimit);
        if let Some([limit, remaining, reset]) = self.legacy {
            set(number(limit));
            set(number(remaining));
            set(number(reset));
        }
    }
}

/// Whether `name` is one of the fields the layer writes (the legacy ones too, if
/// `legacy`).
fn is_field(name: &HeaderName, legacy: bool) -> bool {
    let fields = [&RATELIMIT_POLICY, &RATELIMIT, &X_RATELIMIT_LIMIT, &X_RATELIMIT_REMAINING, &X_RATELIMIT_RESET];
    fields[..if legacy { 5 } else { 2 }].contains(&name)
}

/// The maps admitted responses' fields are written into when the service's map
/// has no room for them (see [`Fields::write`]), made once per process: the fields
/// (2, or 5 with the legacy ones) in the order [`Fields::into_values`] sets them,
/// with placeholder values, and room for 12 headers.
static FIELD_MAPS: LazyLock<[HeaderMap; 2]> = LazyLock::new(|| {
    let map = |legacy: bool| {
        let mut map = HeaderMap::with_capacity(12);
        let names = [RATELIMIT_POLICY, RATELIMIT, X_RATELIMIT_LIMIT, X_RATELIMIT_REMAINING, X_RATELIMIT_RESET];
        for name in names.into_iter().take(if legacy { 5 } else { 2 }) {
            map.insert(name, HeaderValue::from_static("0"));
        }
        map
    };
    [map(false), map(true)]
});

fn field_map(legacy: bool) -> &'static HeaderMap {
    let [ietf, all] = &*FIELD_MAPS;
    if legacy { all } else { ietf }
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

/// A rejection's body and its content type.
#[derive(Debug, Clone)]
pub struct DenyBody {
    /// The `Content-Type`.
    pub content_type: HeaderValue,
    /// The body.
    pub body: Bytes,
}

type DenyBodyFn = dyn Fn(&Denied<'_>) -> DenyBody + Send + Sync;

/// How rejection bodies are written: weir-http's RFC 9457 problem details by
/// default, or your own function.
#[derive(Clone, Default)]
pub(crate) enum BodyStyle {
    #[default]
    Problem,
    Custom(Arc<DenyBodyFn>),
}

impl BodyStyle {
    pub(crate) fn custom(f: impl Fn(&Denied<'_>) -> DenyBody + Send + Sync + 'static) -> Self {
        Self::Custom(Arc::new(f))
    }

    /// The rejection response: status, `Retry-After`, body, and the `RateLimit`
    /// fields when the refusal has them.
    pub(crate) fn response(&self, limits: &Limits, mut refused: Refused<'_>) -> Response<Bytes> {
        let DenyBody { content_type, body } = match self {
            Self::Problem => DenyBody { content_type: PROBLEM_JSON, body: refused.problem_json() },
            Self::Custom(f) => f(&refused.denied()),
        };
        let mut response = Response::new(body);
        *response.status_mut() = StatusCode::from_u16(refused.status()).unwrap_or(StatusCode::TOO_MANY_REQUESTS);
        // The map of the refusal's shape, cloned, its values set in its order: no
        // header name is hashed.
        let retry = refused.retry_after_secs();
        let fields = refused.take_fields().map(|fields| Fields::new(limits, fields));
        let mut map = refusal_map(retry.is_some(), fields.as_ref().map_or(0, Fields::len)).clone();
        let mut slots = map.values_mut();
        let mut set = |value: HeaderValue| {
            if let Some(slot) = slots.next() {
                *slot = value;
            }
        };
        set(content_type);
        if let Some(secs) = retry {
            set(number(secs));
        }
        if let Some(fields) = fields {
            fields.into_values(set);
        }
        *response.headers_mut() = map;
        response
    }
}

/// The header maps of refusals, one per shape, made once per process: every header
/// a refusal carries, in the order its values are set (`Content-Type`,
/// `Retry-After`, then those of [`Fields::into_values`]), with placeholder
/// values. A clone keeps the index's room (cloned whole) but its entries fit only
/// these headers: the `content-length` axum's router adds after the layer moves them
/// once, which costs less than hashing every name again.
static REFUSAL_MAPS: LazyLock<[HeaderMap; 6]> = LazyLock::new(|| {
    let shape = |i: usize| {
        let (retry, headers) = (i >= 3, [0, 2, 5][i % 3]);
        let mut map = HeaderMap::with_capacity(2 + headers + 1);
        map.insert(CONTENT_TYPE, PROBLEM_JSON);
        if retry {
            map.insert(RETRY_AFTER, HeaderValue::from_static("1"));
        }
        let names = [RATELIMIT_POLICY, RATELIMIT, X_RATELIMIT_LIMIT, X_RATELIMIT_REMAINING, X_RATELIMIT_RESET];
        for name in names.into_iter().take(headers) {
            map.insert(name, HeaderValue::from_static("0"));
        }
        map
    };
    core::array::from_fn(shape)
});

/// The map of a refusal with `Retry-After` or not, and `headers` rate-limit headers
/// (0, 2 or 5).
fn refusal_map(retry: bool, headers: usize) -> &'static HeaderMap {
    let [none, two, all, retry_none, retry_two, retry_all] = &*REFUSAL_MAPS;
    match (retry, headers) {
        (false, 0) => none,
        (false, 2) => two,
        (false, _) => all,
        (true, 0) => retry_none,
        (true, 2) => retry_two,
        (true, _) => retry_all,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Written into a map with no room (a clone of the fields' map, the service's
    /// headers moved in) or in place, the fields replace those of the same names
    /// the service set, and the service's other headers are kept, every value of
    /// each, in order.
    #[test]
    fn fields_replace_the_services_and_keep_its_other_headers() {
        for (legacy, room) in [(true, 0), (false, 0), (true, 32), (false, 32)] {
            let mut headers = HeaderMap::with_capacity(room);
            headers.insert(CONTENT_TYPE, HeaderValue::from_static("text/plain"));
            headers.append("set-cookie", HeaderValue::from_static("a=1"));
            headers.append("set-cookie", HeaderValue::from_static("b=2"));
            headers.insert(RATELIMIT, HeaderValue::from_static("the service's"));
            headers.append(X_RATELIMIT_RESET, HeaderValue::from_static("1"));
            headers.append(X_RATELIMIT_RESET, HeaderValue::from_static("2"));
            let fields = Fields {
                policy: HeaderValue::from_static("\"minute\";q=10;w=60"),
                ratelimit: HeaderValue::from_static("\"minute\";r=9;t=6"),
                legacy: legacy.then_some([10, 9, 6]),
            };
            fields.write(&mut headers);
            let all = |name: &str| -> Vec<&str> { headers.get_all(name).iter().map(|v| v.to_str().unwrap()).collect() };
            assert_eq!(all("content-type"), ["text/plain"], "legacy {legacy}, room {room}");
            assert_eq!(all("set-cookie"), ["a=1", "b=2"], "legacy {legacy}, room {room}");
            assert_eq!(all("ratelimit"), ["\"minute\";r=9;t=6"], "legacy {legacy}, room {room}");
            assert_eq!(all("ratelimit-policy"), ["\"minute\";q=10;w=60"], "legacy {legacy}, room {room}");
            let legacy_fields = if legacy { vec!["6"] } else { vec!["1", "2"] };
            assert_eq!(all("x-ratelimit-reset"), legacy_fields, "legacy {legacy}, room {room}");
            assert_eq!(all("x-ratelimit-limit"), if legacy { vec!["10"] } else { vec![] }, "legacy {legacy}");
        }
    }

    #[test]
    fn numbers_are_header_values() {
        for n in [0, 1, 9, 10, 42, 99, 100, 567, 999, 1000, 1001, 9999, 10_000, 86_400, 123_456, u64::MAX - 1, u64::MAX]
        {
            assert_eq!(number(n), n.to_string().as_str());
        }
    }
}

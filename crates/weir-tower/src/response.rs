//! What the middleware writes: the `RateLimit` headers on limited responses, and the
//! 429 (or 400, 503) it answers with itself, with an `application/problem+json` body.

use bytes::Bytes;
use core::fmt::Write as _;
use http::header::{CONTENT_TYPE, HeaderName, HeaderValue, RETRY_AFTER};
use http::{HeaderMap, Response, StatusCode};
use std::sync::{Arc, LazyLock};
use std::time::Duration;
use weir_rl_core::Decision;

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

/// Whole seconds, rounded up: a wait of 1 ns is 1 s, never 0.
pub(crate) fn ceil_secs(d: Duration) -> u64 {
    d.as_secs() + u64::from(d.subsec_nanos() > 0)
}

/// `Retry-After` seconds for a wait: rounded up, and at least 1 (a denied client told
/// `0` retries at once, and is denied again).
pub(crate) fn retry_after_secs(d: Duration) -> u64 {
    ceil_secs(d).max(1)
}

/// `name` as a structured-field string: quoted, `"` and `\` escaped, characters
/// outside printable ASCII dropped.
pub(crate) fn sf_string(name: &str) -> String {
    let mut out = String::with_capacity(name.len() + 2);
    out.push('"');
    for c in name.chars().filter(|c| (' '..='~').contains(c)) {
        if c == '"' || c == '\\' {
            out.push('\\');
        }
        out.push(c);
    }
    out.push('"');
    out
}

/// One `RateLimit-Policy` item: `"name";q=limit;w=window` (the window in whole
/// seconds, rounded up).
pub(crate) fn policy_item(quoted_name: &str, limit: u64, window: Duration) -> String {
    format!("{quoted_name};q={limit};w={}", ceil_secs(window).max(1))
}

/// "0" to "999", one after the other.
static SMALL_DIGITS: [u8; 2890] = small_digits();

const fn small_digits() -> [u8; 2890] {
    let mut out = [0u8; 2890];
    let (mut n, mut at) = (0usize, 0usize);
    while n < 1000 {
        if n >= 100 {
            out[at] = b'0' + (n / 100) as u8;
            at += 1;
        }
        if n >= 10 {
            out[at] = b'0' + (n / 10 % 10) as u8;
            at += 1;
        }
        out[at] = b'0' + (n % 10) as u8;
        at += 1;
        n += 1;
    }
    out
}

/// The header values of 0 to 999, made at compile time: a `HeaderValue` of a
/// `&'static str` is cloned without allocating or touching a shared counter, and the
/// table is read without a check that it was made.
static SMALL_NUMBERS: [HeaderValue; 1000] = small_numbers();

const fn small_numbers() -> [HeaderValue; 1000] {
    let mut out = [const { HeaderValue::from_static("0") }; 1000];
    let mut n = 0;
    while n < 1000 {
        let (start, len) = small_digits_at(n);
        let digits = SMALL_DIGITS.split_at(start).1.split_at(len).0;
        let digits = match core::str::from_utf8(digits) {
            Ok(digits) => digits,
            Err(_) => "0",
        };
        // The value replaced is a static "0": nothing to drop.
        core::mem::forget(core::mem::replace(&mut out[n], HeaderValue::from_static(digits)));
        n += 1;
    }
    out
}

/// Where the digits of `n < 1000` start in `SMALL_DIGITS`, and how many there are.
const fn small_digits_at(n: usize) -> (usize, usize) {
    match n {
        0..10 => (n, 1),
        10..100 => (10 + (n - 10) * 2, 2),
        _ => (190 + (n - 100) * 3, 3),
    }
}

/// The decimal digits of `n`: below 1000 from the static table, else written at the
/// end of `buf`.
#[inline]
fn digits(n: u64, buf: &mut [u8; 20]) -> &[u8] {
    if n < 1000 {
        let (start, len) = small_digits_at(n as usize);
        return SMALL_DIGITS.get(start..start + len).unwrap_or(b"0");
    }
    // Two digits at a time, from the last, as `itoa` does.
    let (mut n, mut at) = (n, buf.len());
    while n >= 100 {
        let pair = (n % 100) as usize * 2;
        n /= 100;
        at -= 2;
        buf[at] = PAIRS[pair];
        buf[at + 1] = PAIRS[pair + 1];
    }
    if n >= 10 {
        let pair = n as usize * 2;
        at -= 2;
        buf[at] = PAIRS[pair];
        buf[at + 1] = PAIRS[pair + 1];
    } else {
        at -= 1;
        buf[at] = b'0' + n as u8;
    }
    &buf[at..]
}

/// "00" to "99", one after the other.
static PAIRS: [u8; 200] = {
    let mut out = [0u8; 200];
    let mut n = 0;
    while n < 100 {
        out[2 * n] = b'0' + (n / 10) as u8;
        out[2 * n + 1] = b'0' + (n % 10) as u8;
        n += 1;
    }
    out
};

/// `n` as a header value: below 1000 from the static table (no allocation), else
/// one allocation of exactly its digits.
#[inline]
pub(crate) fn number(n: u64) -> HeaderValue {
    match SMALL_NUMBERS.get(n as usize) {
        Some(value) if n < 1000 => value.clone(),
        _ => {
            let mut buf = [0u8; 20];
            let digits = Bytes::copy_from_slice(digits(n, &mut buf));
            HeaderValue::from_maybe_shared(digits).unwrap_or(HeaderValue::from_static("0"))
        }
    }
}

/// `"name";r=remaining;t=reset`, from the quota's prefix `"name";r=` (made when the
/// policy is compiled): one allocation, of exactly its length.
fn ratelimit_value(prefix: &[u8], remaining: u64, reset: u64) -> HeaderValue {
    let (mut r, mut t) = ([0u8; 20], [0u8; 20]);
    let (r, t) = (digits(remaining, &mut r), digits(reset, &mut t));
    let mut value = Vec::with_capacity(prefix.len() + 3 + r.len() + t.len());
    value.extend_from_slice(prefix);
    value.extend_from_slice(r);
    value.extend_from_slice(b";t=");
    value.extend_from_slice(t);
    HeaderValue::from_maybe_shared(Bytes::from(value)).unwrap_or(HeaderValue::from_static(""))
}

/// The legacy headers' numbers, as the limiter decided them; made header values as
/// they are written (numbers below 1000 from a static table), so that the response's
/// future carries three integers, not three header values.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Legacy {
    /// `X-RateLimit-Limit`.
    pub(crate) limit: u64,
    /// `X-RateLimit-Remaining`.
    pub(crate) remaining: u64,
    /// `X-RateLimit-Reset`: whole seconds until the quota is full again.
    pub(crate) reset_secs: u64,
}

/// The headers for one decided request, from the decision as the limiter made it.
#[derive(Debug, Clone)]
pub(crate) struct RateLimitHeaders {
    /// `RateLimit-Policy`: every quota applied to the request (made when the layer is
    /// built, cloned here).
    pub(crate) policy: HeaderValue,
    /// `RateLimit`: the deciding quota's remaining and reset.
    pub(crate) ratelimit: HeaderValue,
    /// `X-RateLimit-Limit`, `-Remaining`, `-Reset`, when switched on.
    pub(crate) legacy: Option<Legacy>,
}

impl RateLimitHeaders {
    /// The headers for `decision`, made by the quota whose `RateLimit` prefix
    /// (`"name";r=`, the name an sf-string) is `prefix`, under the quotas listed in
    /// `policy`.
    pub(crate) fn new(policy: HeaderValue, prefix: &[u8], decision: &Decision, legacy: bool) -> Self {
        // `t`: when more quota comes back: for a denial, when this request would be
        // admitted; for an admission, when the quota is whole again.
        let t = match decision.retry_after() {
            Some(retry) => retry_after_secs(retry),
            None => ceil_secs(decision.reset_after()),
        };
        let ratelimit = ratelimit_value(prefix, decision.remaining(), t);
        let legacy = legacy.then(|| Legacy {
            limit: decision.limit(),
            remaining: decision.remaining(),
            reset_secs: ceil_secs(decision.reset_after()),
        });
        Self { policy, ratelimit, legacy }
    }

    /// How many headers [`write`](Self::write) adds.
    pub(crate) fn len(&self) -> usize {
        if self.legacy.is_some() { 5 } else { 2 }
    }

    /// The values, in the order [`write`](Self::write) inserts them.
    pub(crate) fn into_values(self, mut f: impl FnMut(HeaderValue)) {
        f(self.policy);
        f(self.ratelimit);
        if let Some(Legacy { limit, remaining, reset_secs }) = self.legacy {
            f(number(limit));
            f(number(remaining));
            f(number(reset_secs));
        }
    }

    /// Writes the headers into `headers`, replacing any of the same names the
    /// service set: the limiter's decision is what the client is told.
    pub(crate) fn write(self, headers: &mut HeaderMap) {
        // Room for these and one more (the `content-length` axum's router adds after
        // the layer), made before they go in: one growth at most, while the map
        // holds only the service's own headers.
        headers.reserve(self.len() + 1);
        headers.insert(RATELIMIT_POLICY, self.policy);
        headers.insert(RATELIMIT, self.ratelimit);
        if let Some(Legacy { limit, remaining, reset_secs }) = self.legacy {
            headers.insert(X_RATELIMIT_LIMIT, number(limit));
            headers.insert(X_RATELIMIT_REMAINING, number(remaining));
            headers.insert(X_RATELIMIT_RESET, number(reset_secs));
        }
    }
}

/// Why the middleware answered a request itself.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Rejection {
    /// A limit denied the request (or its throttle turned it away): 429.
    RateLimited,
    /// The request had no usable key and its limit says [`MissingKey::Deny`](crate::MissingKey::Deny): 400.
    Unidentified,
    /// A store or the tier lookup failed: 503. So is a denial a store's fail policy
    /// made ([`Decision::is_from_fallback`](weir_rl_core::Decision::is_from_fallback):
    /// weir-redis's `Resilient` while Redis is down, or a full store's overflow
    /// limiter), with the store's `Retry-After` and no `RateLimit` fields: the
    /// store, not the client's quota, refused.
    Unavailable,
    /// A store is full of other clients' keys and refuses a new one
    /// ([`DenyReason::KeyCapacity`](weir_rl_core::DenyReason::KeyCapacity)): 503, with
    /// the store's `Retry-After` and no `RateLimit` fields (the client has no bucket
    /// they could describe). The client did nothing wrong: the server's capacity is
    /// what refuses.
    KeyCapacity,
}

impl Rejection {
    /// The status the middleware answers an HTTP request with. (A gRPC call, with
    /// the `grpc` feature, is answered HTTP 200 with a `grpc-status`: see the
    /// `grpc` module.)
    pub fn status(self) -> StatusCode {
        match self {
            Self::RateLimited => StatusCode::TOO_MANY_REQUESTS,
            Self::Unidentified => StatusCode::BAD_REQUEST,
            Self::Unavailable | Self::KeyCapacity => StatusCode::SERVICE_UNAVAILABLE,
        }
    }
}

/// Why the middleware answers, finer than [`Rejection`]: which words the body says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Cause {
    /// 429.
    RateLimited,
    /// 400: the request has no key from its limit's source.
    Unidentified,
    /// 400: the limit's key is the client IP, and the request carries no peer
    /// address (a server set up without one, not the client's doing).
    NoPeerAddress,
    /// 503.
    Unavailable,
    /// 503: a store full of other clients' keys.
    KeyCapacity,
}

/// The `detail` of a 400 for a limit keyed by the client IP when the request
/// carries no peer address: the server's setup is at fault, and this says how to
/// fix it.
pub(crate) const NO_PEER_ADDRESS: &str = "This rate limit is per client IP, and the request reached it without the \
     address of its peer, so the server cannot tell its clients apart. To the server's operator: serve the axum app \
     with `into_make_service_with_connect_info::<SocketAddr>()`, with the `axum` feature of weir-tower (or of weir) \
     on, so that axum's `ConnectInfo` is read; with tonic, serve over TCP with the `grpc` feature of weir-tower on, \
     so that tonic's `TcpConnectInfo` is read; with hyper or tower, insert the connection's peer address \
     (`weir_tower::PeerAddr` or a `std::net::SocketAddr`) into each request's extensions.";

/// The `detail` of a refusal by a store full of other clients' keys.
pub(crate) const KEY_CAPACITY: &str = "The rate limiter keeps as many clients as it can hold, and this client is not \
     among them: the server's capacity refuses the request, not this client's rate.";

impl Cause {
    const ALL: [Self; 5] =
        [Self::RateLimited, Self::Unidentified, Self::NoPeerAddress, Self::Unavailable, Self::KeyCapacity];

    /// The rejection it is.
    pub(crate) fn rejection(self) -> Rejection {
        match self {
            Self::RateLimited => Rejection::RateLimited,
            Self::Unidentified | Self::NoPeerAddress => Rejection::Unidentified,
            Self::Unavailable => Rejection::Unavailable,
            Self::KeyCapacity => Rejection::KeyCapacity,
        }
    }

    /// The problem body's `title` and `detail`. (A 400 for a missing key says, after
    /// these words, where its limit reads the key: see `KeySource::describe`.)
    pub(crate) fn words(self) -> (&'static str, &'static str) {
        match self {
            Self::RateLimited => ("Too Many Requests", "The rate limit for this client is exhausted."),
            Self::Unidentified => ("Client Not Identified", "The request does not say which client it is from."),
            Self::NoPeerAddress => ("Client Not Identified", NO_PEER_ADDRESS),
            Self::Unavailable => ("Rate Limiter Unavailable", "The rate limiter could not decide; try again."),
            Self::KeyCapacity => ("Too Many Clients", KEY_CAPACITY),
        }
    }
}

/// What a rejection body is built from.
#[derive(Debug, Clone, Copy)]
pub struct Denied<'a> {
    /// Why.
    pub rejection: Rejection,
    /// The route policy's name.
    pub policy: &'a str,
    /// The deciding quota's name (empty when no quota decided).
    pub quota: &'a str,
    /// `Retry-After`, in whole seconds (at least 1), when there is one.
    pub retry_after_secs: Option<u64>,
    /// The limiter's decision, when one denied.
    pub decision: Option<&'a Decision>,
    /// What went wrong, in a sentence (the problem body's `detail`, before any
    /// retry time). For a 400 of a request without its key, it names where the
    /// limit reads the key (``the `x-api-key` header``, the authenticated user); for
    /// a 400 of a per-IP limit on a request with no peer address, it says how the
    /// server gives one; for a full store, that the server's capacity refuses.
    pub detail: &'a str,
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

/// How rejection bodies are written: RFC 9457 problem details by default, or your
/// own function.
#[derive(Clone)]
pub(crate) enum BodyStyle {
    Problem(Arc<ProblemHeads>),
    Custom(Arc<DenyBodyFn>),
}

impl Default for BodyStyle {
    fn default() -> Self {
        Self::problem("about:blank")
    }
}

/// The start of each rejection's problem body, made once per layer: `type`,
/// `title`, `status`, and `detail` up to where a retry time may follow; one per
/// [`Cause`], in the order of [`Cause::ALL`].
#[derive(Debug)]
pub(crate) struct ProblemHeads([Box<[u8]>; 5]);

impl ProblemHeads {
    fn new(type_uri: &str) -> Self {
        let head = |cause: Cause| {
            let (title, detail) = cause.words();
            let mut out = String::from("{\"type\":");
            json_string(&mut out, type_uri);
            out.push_str(",\"title\":\"");
            out.push_str(title);
            out.push_str("\",\"status\":");
            out.push_str(cause.rejection().status().as_str());
            out.push_str(",\"detail\":\"");
            // A missing key's detail names the key's source, written per response.
            if cause != Cause::Unidentified {
                out.push_str(detail);
            }
            out.into_bytes().into_boxed_slice()
        };
        Self(Cause::ALL.map(head))
    }

    fn head(&self, cause: Cause) -> &[u8] {
        let [limited, unidentified, no_peer, unavailable, capacity] = &self.0;
        match cause {
            Cause::RateLimited => limited,
            Cause::Unidentified => unidentified,
            Cause::NoPeerAddress => no_peer,
            Cause::Unavailable => unavailable,
            Cause::KeyCapacity => capacity,
        }
    }
}

impl BodyStyle {
    pub(crate) fn problem(type_uri: &str) -> Self {
        Self::Problem(Arc::new(ProblemHeads::new(type_uri)))
    }

    pub(crate) fn custom(f: impl Fn(&Denied<'_>) -> DenyBody + Send + Sync + 'static) -> Self {
        Self::Custom(Arc::new(f))
    }

    /// The rejection response for `cause`: status, `Retry-After`, body; `headers`
    /// too if given.
    /// `tail` is the end of the problem body for `denied`'s policy and quota, if it
    /// was made beforehand (see [`problem_tail`]).
    pub(crate) fn response(
        &self,
        cause: Cause,
        denied: &Denied<'_>,
        headers: Option<RateLimitHeaders>,
        tail: Option<&[u8]>,
    ) -> Response<Bytes> {
        let DenyBody { content_type, body } = match self {
            Self::Problem(heads) => {
                let made;
                let tail = match tail {
                    Some(tail) => tail,
                    None => {
                        made = problem_tail(denied.policy, denied.quota);
                        made.as_bytes()
                    }
                };
                let head = heads.head(cause);
                let body = if cause == Cause::Unidentified {
                    // The head ends where the detail starts: the detail names where
                    // the limit reads its key.
                    let mut detail = String::new();
                    json_string(&mut detail, denied.detail);
                    let detail = detail.get(1..detail.len() - 1).unwrap_or("");
                    problem_json(&[head, detail.as_bytes()].concat(), denied, tail)
                } else {
                    problem_json(head, denied, tail)
                };
                DenyBody { content_type: PROBLEM_JSON, body }
            }
            Self::Custom(f) => f(denied),
        };
        let mut response = Response::new(body);
        *response.status_mut() = denied.rejection.status();
        // The map of the refusal's shape, cloned, its values set in its order: no
        // header name is hashed.
        let retry = denied.retry_after_secs;
        let mut map = refusal_map(retry.is_some(), headers.as_ref().map_or(0, RateLimitHeaders::len)).clone();
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
        if let Some(headers) = headers {
            headers.into_values(set);
        }
        *response.headers_mut() = map;
        response
    }
}

/// The header maps of refusals, one per shape, made once per process: every header
/// a refusal carries, in the order its values are set (`Content-Type`,
/// `Retry-After`, then those of [`RateLimitHeaders::into_values`]), with placeholder
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

/// The end of a problem body: the extension members `policy` and `quota` (each
/// only if not empty), and the closing brace.
pub(crate) fn problem_tail(policy: &str, quota: &str) -> String {
    let mut out = String::with_capacity(24 + policy.len() + quota.len());
    if !policy.is_empty() {
        out.push_str(",\"policy\":");
        json_string(&mut out, policy);
    }
    if !quota.is_empty() {
        out.push_str(",\"quota\":");
        json_string(&mut out, quota);
    }
    out.push('}');
    out
}

/// An RFC 9457 problem: `type`, `title`, `status`, `detail` (from `head`), the
/// extension member `retry_after` (seconds), and `tail` (`policy`, `quota`): written
/// into one buffer of exactly its length, which becomes the body without a copy.
fn problem_json(head: &[u8], denied: &Denied<'_>, tail: &[u8]) -> Bytes {
    let mut buf = [0u8; 20];
    let retry = denied.retry_after_secs.map(|secs| (secs, digits(secs, &mut buf)));
    const RETRY_AFTER_TEXT: &[u8] = b" Retry after ";
    const RETRY_AFTER_MEMBER: &[u8] = b",\"retry_after\":";
    let (seconds, retry_len) = match retry {
        Some((1, digits)) => (&b" second.\""[..], 2 * digits.len()),
        Some((_, digits)) => (&b" seconds.\""[..], 2 * digits.len()),
        None => (&b"\""[..], 0),
    };
    let retry_len = retry_len + if retry.is_some() { RETRY_AFTER_TEXT.len() + RETRY_AFTER_MEMBER.len() } else { 0 };
    let mut out = Vec::with_capacity(head.len() + retry_len + seconds.len() + tail.len());
    out.extend_from_slice(head);
    if let Some((_, digits)) = retry {
        out.extend_from_slice(RETRY_AFTER_TEXT);
        out.extend_from_slice(digits);
        out.extend_from_slice(seconds);
        out.extend_from_slice(RETRY_AFTER_MEMBER);
        out.extend_from_slice(digits);
    } else {
        out.extend_from_slice(seconds);
    }
    out.extend_from_slice(tail);
    Bytes::from(out)
}

/// `s` as a JSON string.
pub(crate) fn json_string(out: &mut String, s: &str) {
    out.push('"');
    if !s.bytes().any(|b| b < 0x20 || b == b'"' || b == b'\\') {
        out.push_str(s);
        out.push('"');
        return;
    }
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if (c as u32) < 0x20 => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

#[cfg(test)]
mod tests {
    use super::*;
    use weir_rl_core::Snapshot;

    #[test]
    fn waits_round_up_to_whole_seconds_never_zero() {
        assert_eq!(retry_after_secs(Duration::from_nanos(1)), 1);
        assert_eq!(retry_after_secs(Duration::ZERO), 1);
        assert_eq!(retry_after_secs(Duration::from_millis(1001)), 2);
        assert_eq!(retry_after_secs(Duration::from_secs(18)), 18);
        assert_eq!(ceil_secs(Duration::ZERO), 0);
    }

    #[test]
    fn numbers_are_header_values() {
        for n in [0, 1, 9, 10, 42, 99, 100, 567, 999, 1000, 1001, 9999, 10_000, 86_400, 123_456, u64::MAX - 1, u64::MAX]
        {
            assert_eq!(number(n), n.to_string().as_str());
        }
        for n in (0..100_000).chain((1..64).map(|shift| 1u64 << shift)).chain((1..20).map(|e| 10u64.pow(e) - 1)) {
            assert_eq!(digits(n, &mut [0; 20]), n.to_string().as_bytes(), "{n}");
        }
        let long = ratelimit_value(format!("{};r=", "n".repeat(90)).as_bytes(), 1234567, 0);
        assert_eq!(long, format!("{};r=1234567;t=0", "n".repeat(90)).as_str());
    }

    #[test]
    fn names_are_structured_field_strings() {
        assert_eq!(sf_string("minute"), "\"minute\"");
        assert_eq!(sf_string("a\"b\\c\u{e9}\n"), "\"a\\\"b\\\\c\"");
        assert_eq!(policy_item("\"minute\"", 100, Duration::from_secs(60)), "\"minute\";q=100;w=60");
        assert_eq!(policy_item("\"b\"", 10, Duration::from_millis(1)), "\"b\";q=10;w=1");
    }

    #[test]
    fn headers_carry_the_decision_as_made() {
        let d = Decision::allowed(Snapshot::new(100, 42, 17_200_000_000));
        let h = RateLimitHeaders::new(HeaderValue::from_static("\"minute\";q=100;w=60"), b"\"minute\";r=", &d, true);
        let mut map = HeaderMap::new();
        h.write(&mut map);
        assert_eq!(map["ratelimit"], "\"minute\";r=42;t=18");
        assert_eq!(map["ratelimit-policy"], "\"minute\";q=100;w=60");
        assert_eq!(map["x-ratelimit-limit"], "100");
        assert_eq!(map["x-ratelimit-remaining"], "42");
        assert_eq!(map["x-ratelimit-reset"], "18");
        let denied = Decision::denied(Snapshot::new(100, 0, 60_000_000_000), 300_000_000);
        let h = RateLimitHeaders::new(HeaderValue::from_static("x"), b"\"minute\";r=", &denied, false);
        assert_eq!(h.ratelimit, "\"minute\";r=0;t=1");
        assert!(h.legacy.is_none());
    }

    #[test]
    fn the_limiters_headers_replace_those_the_service_set() {
        let d = Decision::allowed(Snapshot::new(100, 42, 17_200_000_000));
        let mut map = HeaderMap::new();
        map.insert(CONTENT_TYPE, HeaderValue::from_static("text/plain"));
        map.insert(RATELIMIT, HeaderValue::from_static("\"own\";r=1;t=1"));
        map.append(X_RATELIMIT_LIMIT, HeaderValue::from_static("1"));
        map.append(X_RATELIMIT_LIMIT, HeaderValue::from_static("2"));
        RateLimitHeaders::new(HeaderValue::from_static("\"minute\";q=100;w=60"), b"\"minute\";r=", &d, true)
            .write(&mut map);
        assert_eq!(map.get_all(RATELIMIT).iter().collect::<Vec<_>>(), ["\"minute\";r=42;t=18"]);
        assert_eq!(map.get_all(X_RATELIMIT_LIMIT).iter().collect::<Vec<_>>(), ["100"]);
        assert_eq!(map[CONTENT_TYPE], "text/plain");
        assert_eq!(map.len(), 6);
        // With the legacy headers off, the service's own legacy headers stay.
        let mut map = HeaderMap::new();
        map.insert(X_RATELIMIT_LIMIT, HeaderValue::from_static("7"));
        RateLimitHeaders::new(HeaderValue::from_static("x"), b"\"minute\";r=", &d, false).write(&mut map);
        assert_eq!(map[X_RATELIMIT_LIMIT], "7");
        assert_eq!(map[RATELIMIT], "\"minute\";r=42;t=18");
    }

    #[test]
    fn refusals_carry_every_header_in_order_as_the_limiter_decided() {
        let d = Decision::denied(Snapshot::new(100, 0, 86_400_000_000_000), 3_600_000_000_000);
        let denied = |retry: Option<u64>| Denied {
            rejection: Rejection::RateLimited,
            policy: "api",
            quota: "day",
            retry_after_secs: retry,
            decision: Some(&d),
            detail: Cause::RateLimited.words().1,
        };
        let policy = HeaderValue::from_static("\"day\";q=100;w=86400");
        for legacy in [false, true] {
            for retry in [None, Some(3600)] {
                let headers = RateLimitHeaders::new(policy.clone(), b"\"day\";r=", &d, legacy);
                let response = BodyStyle::default().response(Cause::RateLimited, &denied(retry), Some(headers), None);
                let got: Vec<(&str, &str)> =
                    response.headers().iter().map(|(n, v)| (n.as_str(), v.to_str().unwrap())).collect();
                let mut want = vec![("content-type", "application/problem+json")];
                want.extend(retry.map(|_| ("retry-after", "3600")));
                want.extend([("ratelimit-policy", "\"day\";q=100;w=86400"), ("ratelimit", "\"day\";r=0;t=3600")]);
                if legacy {
                    want.extend([
                        ("x-ratelimit-limit", "100"),
                        ("x-ratelimit-remaining", "0"),
                        ("x-ratelimit-reset", "86400"),
                    ]);
                }
                assert_eq!(got, want, "legacy {legacy}, retry {retry:?}");
            }
            let custom = BodyStyle::custom(|_| DenyBody {
                content_type: HeaderValue::from_static("text/plain"),
                body: Bytes::new(),
            });
            let response = custom.response(Cause::RateLimited, &denied(Some(1)), None, None);
            let got: Vec<(&str, &str)> =
                response.headers().iter().map(|(n, v)| (n.as_str(), v.to_str().unwrap())).collect();
            assert_eq!(got, [("content-type", "text/plain"), ("retry-after", "1")]);
        }
    }

    #[test]
    fn problem_bodies_are_valid_json() {
        let d = Decision::denied(Snapshot::new(5, 0, 1), 1);
        let denied = Denied {
            rejection: Rejection::RateLimited,
            policy: "auth \"strict\"",
            quota: "5m",
            retry_after_secs: Some(1),
            decision: Some(&d),
            detail: Cause::RateLimited.words().1,
        };
        let heads = ProblemHeads::new("about:blank");
        let tail = problem_tail(denied.policy, denied.quota);
        let body = problem_json(heads.head(Cause::RateLimited), &denied, tail.as_bytes());
        assert_eq!(
            body,
            "{\"type\":\"about:blank\",\"title\":\"Too Many Requests\",\"status\":429,\"detail\":\"The rate limit for \
             this client is exhausted. Retry after 1 second.\",\"retry_after\":1,\"policy\":\"auth \\\"strict\\\"\",\"quota\":\"5m\"}"
        );
        let v: serde_json::Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(v["status"], 429);
        assert_eq!(v["retry_after"], 1);
        assert_eq!(v["policy"], "auth \"strict\"");
        assert_eq!(v["detail"], "The rate limit for this client is exhausted. Retry after 1 second.");
        let mut s = String::new();
        json_string(&mut s, "\u{1}");
        assert_eq!(s, "\"\\u0001\"");
    }
}

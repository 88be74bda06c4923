//! What the middleware writes: the `RateLimit` headers on limited responses, and the
//! 429 (or 400, 503) it answers with itself, with an `application/problem+json` body.

use bytes::Bytes;
use core::fmt::Write as _;
use std::time::Duration;
use weir_rl_core::Decision;

/// `RateLimit-Policy` (draft-ietf-httpapi-ratelimit-headers-10), as HTTP/2 spells it.
pub const RATELIMIT_POLICY: &str = "ratelimit-policy";
/// `RateLimit` (draft-ietf-httpapi-ratelimit-headers-10).
pub const RATELIMIT: &str = "ratelimit";
/// The legacy `X-RateLimit-Limit`.
pub const X_RATELIMIT_LIMIT: &str = "x-ratelimit-limit";
/// The legacy `X-RateLimit-Remaining`.
pub const X_RATELIMIT_REMAINING: &str = "x-ratelimit-remaining";
/// The legacy `X-RateLimit-Reset` (seconds until the quota is full again).
pub const X_RATELIMIT_RESET: &str = "x-ratelimit-reset";
/// `Retry-After`.
pub const RETRY_AFTER: &str = "retry-after";
/// The content type of the problem bodies (RFC 9457).
pub const PROBLEM_JSON: &str = "application/problem+json";

/// Whole seconds, rounded up: a wait of 1 ns is 1 s, never 0 (how every header
/// and status of weir's front doors writes a duration).
///
/// ```
/// use std::time::Duration;
///
/// assert_eq!(weir_http::ceil_secs(Duration::from_nanos(1)), 1);
/// assert_eq!(weir_http::ceil_secs(Duration::from_secs(58)), 58);
/// assert_eq!(weir_http::ceil_secs(Duration::ZERO), 0);
/// ```
#[inline]
pub fn ceil_secs(d: Duration) -> u64 {
    d.as_secs() + u64::from(d.subsec_nanos() > 0)
}

/// `Retry-After` seconds for a wait: rounded up, and at least 1 (a denied client told
/// `0` retries at once, and is denied again).
///
/// ```
/// use std::time::Duration;
///
/// assert_eq!(weir_http::retry_after_secs(Duration::ZERO), 1);
/// assert_eq!(weir_http::retry_after_secs(Duration::from_millis(1_500)), 2);
/// ```
#[inline]
pub fn retry_after_secs(d: Duration) -> u64 {
    ceil_secs(d).max(1)
}

/// `name` as a structured-field string (RFC 8941), as a `RateLimit` or
/// `RateLimit-Policy` item names its policy: quoted, `"` and `\` escaped,
/// characters outside printable ASCII dropped.
///
/// ```
/// assert_eq!(weir_http::sf_string("per-ip"), r#""per-ip""#);
/// assert_eq!(weir_http::sf_string("a\"b\\c\u{e9}\n"), r#""a\"b\\c""#);
/// ```
pub fn sf_string(name: &str) -> String {
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

/// One `RateLimit-Policy` item: `"name";q=limit;w=window`, the name already
/// quoted ([`sf_string`]), the window in whole seconds, rounded up, at least 1.
///
/// ```
/// use std::time::Duration;
///
/// let item = weir_http::policy_item(&weir_http::sf_string("per-ip"), 100, Duration::from_millis(60_001));
/// assert_eq!(item, r#""per-ip";q=100;w=61"#);
/// ```
pub fn policy_item(quoted_name: &str, limit: u64, window: Duration) -> String {
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

/// Where the digits of `n < 1000` start in `SMALL_DIGITS`, and how many there are.
const fn small_digits_at(n: usize) -> (usize, usize) {
    match n {
        0..10 => (n, 1),
        10..100 => (10 + (n - 10) * 2, 2),
        _ => (190 + (n - 100) * 3, 3),
    }
}

/// The decimal digits of `n`, for `n` below 1000 (`None` above), from a static
/// table: what an adapter makes its header values of small numbers from, at
/// compile time (a value of a `&'static str` is cloned without allocating).
///
/// ```
/// const SECONDS: Option<&str> = weir_http::small_number(60);
/// assert_eq!(SECONDS, Some("60"));
/// assert_eq!(weir_http::small_number(1000), None);
/// ```
pub const fn small_number(n: u64) -> Option<&'static str> {
    if n >= 1000 {
        return None;
    }
    let (start, len) = small_digits_at(n as usize);
    let digits = SMALL_DIGITS.split_at(start).1.split_at(len).0;
    match core::str::from_utf8(digits) {
        Ok(digits) => Some(digits),
        Err(_) => None,
    }
}

/// The decimal digits of `n`: below 1000 from a static table, else written at the
/// end of `buf` (no allocation).
///
/// ```
/// assert_eq!(weir_http::digits(86_400, &mut [0; 20]), b"86400");
/// ```
#[inline]
pub fn digits(n: u64, buf: &mut [u8; 20]) -> &[u8] {
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

/// `"name";r=remaining;t=reset`, from the quota's prefix `"name";r=` (made when the
/// policy is compiled): one allocation, of exactly its length.
fn ratelimit_value(prefix: &[u8], remaining: u64, reset: u64) -> Bytes {
    let (mut r, mut t) = ([0u8; 20], [0u8; 20]);
    let (r, t) = (digits(remaining, &mut r), digits(reset, &mut t));
    let mut value = Vec::with_capacity(prefix.len() + 3 + r.len() + t.len());
    value.extend_from_slice(prefix);
    value.extend_from_slice(r);
    value.extend_from_slice(b";t=");
    value.extend_from_slice(t);
    Bytes::from(value)
}

/// The legacy headers' numbers, as the limiter decided them; an adapter writes
/// them as header values (`X-RateLimit-Limit`, `-Remaining`, `-Reset`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct Legacy {
    /// `X-RateLimit-Limit`.
    pub limit: u64,
    /// `X-RateLimit-Remaining`.
    pub remaining: u64,
    /// `X-RateLimit-Reset`: whole seconds until the quota is full again.
    pub reset_secs: u64,
}

/// A request's `RateLimit-Policy` value: its policy's own, made when the
/// configuration was built and not copied per request, or one made for it.
#[derive(Debug, Clone)]
pub(crate) enum PolicyValue {
    /// [`Limits::policy_field`](crate::Limits::policy_field) of this policy: every
    /// limit of it applied.
    Precomputed(crate::PolicyId),
    /// Made for this request (a tier's quotas, a limit the request skipped).
    Made(Bytes),
}

/// The value [`RateLimitFields::policy`] gives for a policy the limits asked know
/// nothing of.
static NO_POLICY: Bytes = Bytes::new();

/// The `RateLimit` fields of one decided request, from the decision as the
/// limiter made it (never recomputed): what an adapter writes on an admitted
/// response (and on a 429), replacing any of the same names the service set.
///
/// Every value is visible ASCII (quota names are structured-field strings with
/// other characters dropped): a valid HTTP field value as it is.
///
/// ```
/// use weir_http::{Limits, RateLimitFields};
///
/// fn write(limits: &Limits, fields: &RateLimitFields, headers: &mut Vec<(&'static str, Vec<u8>)>) {
///     fields.for_each(limits, |name, value| headers.push((name, value.to_vec())));
/// }
/// # let _ = write;
/// ```
#[derive(Debug, Clone)]
pub struct RateLimitFields {
    /// `RateLimit-Policy`: every quota applied to the request.
    pub(crate) policy: PolicyValue,
    /// `RateLimit`: the deciding quota's remaining and reset.
    pub(crate) ratelimit: Bytes,
    /// `X-RateLimit-Limit`, `-Remaining`, `-Reset`, when switched on.
    pub(crate) legacy: Option<Legacy>,
}

impl RateLimitFields {
    /// The fields for `decision`, made by the quota whose `RateLimit` prefix
    /// (`"name";r=`, the name an sf-string) is `prefix`, under the quotas `policy`
    /// lists.
    pub(crate) fn new(policy: PolicyValue, prefix: &[u8], decision: &Decision, legacy: bool) -> Self {
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

    /// The policy whose `RateLimit-Policy` value, made when the configuration was
    /// built ([`Limits::policy_field`](crate::Limits::policy_field)), is these
    /// fields': an adapter that converted that value once writes its own copy
    /// (the fields hold none: see [`into_parts`](Self::into_parts)).
    pub fn precomputed_policy(&self) -> Option<crate::PolicyId> {
        match self.policy {
            PolicyValue::Precomputed(policy) => Some(policy),
            PolicyValue::Made(_) => None,
        }
    }

    /// `RateLimit-Policy`'s value: `"minute";q=100;w=60`, one item per quota that
    /// applied. For a policy whose limits all applied, the value `limits` (those
    /// that decided the request) made when they were built, never copied per
    /// request (see [`precomputed_policy`](Self::precomputed_policy)).
    pub fn policy<'a>(&'a self, limits: &'a crate::Limits) -> &'a Bytes {
        match &self.policy {
            PolicyValue::Precomputed(policy) => limits.policy_field(*policy).unwrap_or(&NO_POLICY),
            PolicyValue::Made(value) => value,
        }
    }

    /// `RateLimit`'s value: `"minute";r=42;t=18`.
    pub fn ratelimit(&self) -> &Bytes {
        &self.ratelimit
    }

    /// The legacy fields' numbers, when switched on.
    pub fn legacy(&self) -> Option<Legacy> {
        self.legacy
    }

    /// The values, taken out: `RateLimit-Policy`'s (`None` when it is the
    /// [`precomputed_policy`](Self::precomputed_policy)'s, which the fields do not
    /// copy), `RateLimit`'s, and the legacy numbers. An adapter that moves the
    /// `Bytes` into its header values copies nothing (a clone of the `RateLimit`
    /// value, made for this request alone, would allocate the count the two copies
    /// share).
    pub fn into_parts(self) -> (Option<Bytes>, Bytes, Option<Legacy>) {
        let policy = match self.policy {
            PolicyValue::Precomputed(_) => None,
            PolicyValue::Made(value) => Some(value),
        };
        (policy, self.ratelimit, self.legacy)
    }

    /// How many fields [`for_each`](Self::for_each) gives: 2, or 5 with the legacy ones.
    pub fn len(&self) -> usize {
        if self.legacy.is_some() { 5 } else { 2 }
    }

    /// Never: there are always the two IETF fields.
    pub fn is_empty(&self) -> bool {
        false
    }

    /// Each field's name (lowercase) and value, in order: `RateLimit-Policy`,
    /// `RateLimit`, then the legacy ones; `limits` those that decided the request.
    pub fn for_each(&self, limits: &crate::Limits, mut f: impl FnMut(&'static str, &[u8])) {
        f(RATELIMIT_POLICY, self.policy(limits));
        f(RATELIMIT, &self.ratelimit);
        if let Some(Legacy { limit, remaining, reset_secs }) = self.legacy {
            let mut buf = [0u8; 20];
            f(X_RATELIMIT_LIMIT, digits(limit, &mut buf));
            f(X_RATELIMIT_REMAINING, digits(remaining, &mut buf));
            f(X_RATELIMIT_RESET, digits(reset_secs, &mut buf));
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
    /// The status an HTTP request is answered with: 429, 400 or 503. (A gRPC call
    /// is answered HTTP 200 with a `grpc-status`: see [`Refused::grpc`](crate::Refused::grpc).)
    pub fn status(self) -> u16 {
        match self {
            Self::RateLimited => 429,
            Self::Unidentified => 400,
            Self::Unavailable | Self::KeyCapacity => 503,
        }
    }
}

/// Why the middleware answers, finer than [`Rejection`]: which words the body says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Cause {
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
     address of its peer, so the server cannot tell its clients apart. To the server's operator: give the rate \
     limiter each connection's peer address, as its adapter's documentation says.";

/// The `detail` of a refusal by a store full of other clients' keys.
pub(crate) const KEY_CAPACITY: &str = "The rate limiter keeps as many clients as it can hold, and this client is not \
     among them: the server's capacity refuses the request, not this client's rate.";

impl Cause {
    const ALL: [Self; 5] =
        [Self::RateLimited, Self::Unidentified, Self::NoPeerAddress, Self::Unavailable, Self::KeyCapacity];

    /// The rejection it is.
    pub fn rejection(self) -> Rejection {
        match self {
            Self::RateLimited => Rejection::RateLimited,
            Self::Unidentified | Self::NoPeerAddress => Rejection::Unidentified,
            Self::Unavailable => Rejection::Unavailable,
            Self::KeyCapacity => Rejection::KeyCapacity,
        }
    }

    /// The problem body's `title` and `detail`. (A 400 for a missing key says, after
    /// these words, where its limit reads the key.)
    pub fn words(self) -> (&'static str, &'static str) {
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

/// The start of each rejection's problem body, made once per layer: `type`,
/// `title`, `status`, and `detail` up to where a retry time may follow; one per
/// [`Cause`], in the order of [`Cause::ALL`].
#[derive(Debug)]
pub(crate) struct ProblemHeads([Box<[u8]>; 5]);

impl ProblemHeads {
    pub(crate) fn new(type_uri: &str, no_peer: &str) -> Self {
        let head = |cause: Cause| {
            let (title, detail) = cause.words();
            let mut out = String::from("{\"type\":");
            json_string(&mut out, type_uri);
            out.push_str(",\"title\":\"");
            out.push_str(title);
            out.push_str("\",\"status\":");
            let _ = write!(out, "{}", cause.rejection().status());
            out.push_str(",\"detail\":\"");
            // A missing key's detail names the key's source, written per response.
            match cause {
                Cause::Unidentified => {}
                Cause::NoPeerAddress => {
                    let mut escaped = String::new();
                    json_string(&mut escaped, no_peer);
                    out.push_str(escaped.get(1..escaped.len() - 1).unwrap_or(""));
                }
                _ => out.push_str(detail),
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

/// The problem+json body (RFC 9457) of a refusal for `cause`: the head made once
/// per configuration, `denied`'s detail (for a missing key, which names where its
/// limit reads the key) and retry time, and `tail` (the policy and quota; made
/// here when not made beforehand).
pub(crate) fn problem_body(heads: &ProblemHeads, cause: Cause, denied: &Denied<'_>, tail: Option<&[u8]>) -> Bytes {
    let made;
    let tail = match tail {
        Some(tail) => tail,
        None => {
            made = problem_tail(denied.policy, denied.quota);
            made.as_bytes()
        }
    };
    let head = heads.head(cause);
    if cause == Cause::Unidentified {
        // The head ends where the detail starts: the detail names where the limit
        // reads its key.
        let mut detail = String::new();
        json_string(&mut detail, denied.detail);
        let detail = detail.get(1..detail.len() - 1).unwrap_or("");
        problem_json(&[head, detail.as_bytes()].concat(), denied, tail)
    } else {
        problem_json(head, denied, tail)
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
    fn numbers_are_their_digits() {
        for n in (0..100_000).chain((1..64).map(|shift| 1u64 << shift)).chain((1..20).map(|e| 10u64.pow(e) - 1)) {
            assert_eq!(digits(n, &mut [0; 20]), n.to_string().as_bytes(), "{n}");
        }
        assert_eq!(digits(u64::MAX, &mut [0; 20]), u64::MAX.to_string().as_bytes());
        let long = ratelimit_value(format!("{};r=", "n".repeat(90)).as_bytes(), 1234567, 0);
        assert_eq!(long, format!("{};r=1234567;t=0", "n".repeat(90)).as_bytes());
    }

    #[test]
    fn names_are_structured_field_strings() {
        assert_eq!(sf_string("minute"), "\"minute\"");
        assert_eq!(sf_string("a\"b\\c\u{e9}\n"), "\"a\\\"b\\\\c\"");
        assert_eq!(policy_item("\"minute\"", 100, Duration::from_secs(60)), "\"minute\";q=100;w=60");
        assert_eq!(policy_item("\"b\"", 10, Duration::from_millis(1)), "\"b\";q=10;w=1");
    }

    /// Every value is visible ASCII, whatever the quota's name: an adapter writes it
    /// as a header value without checking it again.
    #[test]
    fn values_are_visible_ascii() {
        let visible = |bytes: &[u8]| bytes.iter().all(|b| (b' '..=b'~').contains(b));
        for name in ["minute", "a\"b\\c\u{e9}\n\t\u{7f}\0", "", "\u{1F600} day"] {
            let quoted = sf_string(name);
            let prefix = format!("{quoted};r=");
            for n in [0, 7, 999, 1000, u64::MAX] {
                assert!(visible(&ratelimit_value(prefix.as_bytes(), n, n)), "{name:?} {n}");
                assert!(visible(policy_item(&quoted, n, Duration::from_secs(n)).as_bytes()), "{name:?} {n}");
            }
        }
    }

    #[test]
    fn fields_carry_the_decision_as_made() {
        let d = Decision::allowed(Snapshot::new(100, 42, 17_200_000_000));
        let policy = PolicyValue::Made(Bytes::from_static(b"\"minute\";q=100;w=60"));
        let h = RateLimitFields::new(policy, b"\"minute\";r=", &d, true);
        let limits = crate::Limits::builder().build().unwrap();
        let mut got = Vec::new();
        h.for_each(&limits, |name, value| got.push((name, String::from_utf8(value.to_vec()).unwrap())));
        let want = [
            ("ratelimit-policy", "\"minute\";q=100;w=60"),
            ("ratelimit", "\"minute\";r=42;t=18"),
            ("x-ratelimit-limit", "100"),
            ("x-ratelimit-remaining", "42"),
            ("x-ratelimit-reset", "18"),
        ];
        assert_eq!(got, want.map(|(n, v)| (n, v.to_owned())));
        let denied = Decision::denied(Snapshot::new(100, 0, 60_000_000_000), 300_000_000);
        let h = RateLimitFields::new(PolicyValue::Made(Bytes::from_static(b"x")), b"\"minute\";r=", &denied, false);
        assert_eq!(h.ratelimit(), "\"minute\";r=0;t=1".as_bytes());
        assert!(h.legacy().is_none());
        assert_eq!(h.len(), 2);
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
        let heads = ProblemHeads::new("about:blank", NO_PEER_ADDRESS);
        let body = problem_body(&heads, Cause::RateLimited, &denied, None);
        assert_eq!(
            body,
            "{\"type\":\"about:blank\",\"title\":\"Too Many Requests\",\"status\":429,\"detail\":\"The rate limit for \
             this client is exhausted. Retry after 1 second.\",\"retry_after\":1,\"policy\":\"auth \\\"strict\\\"\",\"quota\":\"5m\"}"
        );
        let v: serde_json::Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(v["status"], 429);
        assert_eq!(v["retry_after"], 1);
        assert_eq!(v["policy"], "auth \"strict\"");
        for cause in Cause::ALL {
            let body = problem_body(&heads, cause, &Denied { detail: "a \"quoted\" detail", ..denied }, None);
            let v: serde_json::Value = serde_json::from_slice(&body).unwrap();
            assert_eq!(v["status"], cause.rejection().status(), "{cause:?}");
        }
        let mut s = String::new();
        json_string(&mut s, "\u{1}");
        assert_eq!(s, "\"\\u0001\"");
    }
}

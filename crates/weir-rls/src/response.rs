//! The `RateLimitResponse` for a decided request: one status per descriptor, in
//! request order, the overall code, and (when switched on) the `RateLimit`
//! headers for Envoy to add to the client's response.

use crate::matching::{DescriptorMatch, Limited, Matches};
use crate::proto::{self, rate_limit_response as pb};
use core::fmt::Write as _;
use weir_http::{ceil_secs, policy_item, retry_after_secs, sf_string};
use weir_rl_core::Decision;

/// Which headers the response asks Envoy to add (`response_headers_to_add`).
///
/// Both are off by default, as upstream's are (`LIMIT_RESPONSE_HEADERS_ENABLED`): a
/// client sees the same responses as before the swap until they are switched on.
/// Envoy's own `enable_x_ratelimit_headers` builds its headers from the statuses'
/// fields, which are always set.
///
/// ```
/// use weir_rls::ResponseOptions;
///
/// let options = ResponseOptions::default().ratelimit_headers(true);
/// assert!(options.ratelimit && !options.legacy);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub struct ResponseOptions {
    /// `RateLimit-Policy` (every limit that applied: `"name";q=limit;w=window`) and
    /// `RateLimit` (the deciding limit: `"name";r=remaining;t=seconds`), after
    /// draft-ietf-httpapi-ratelimit-headers-10.
    pub ratelimit: bool,
    /// `X-RateLimit-Limit`, `X-RateLimit-Remaining` and `X-RateLimit-Reset` (seconds)
    /// of the deciding limit.
    pub legacy: bool,
}

impl ResponseOptions {
    /// With or without `RateLimit` and `RateLimit-Policy`.
    pub fn ratelimit_headers(mut self, on: bool) -> Self {
        self.ratelimit = on;
        self
    }

    /// With or without `X-RateLimit-*`.
    pub fn legacy_headers(mut self, on: bool) -> Self {
        self.legacy = on;
        self
    }
}

/// Builds the response for `matches`, with `decisions[i]` the decision of
/// descriptor `i` (`Some` exactly for the [`Limited`](DescriptorMatch::Limited)
/// ones; a limited descriptor without one is reported as not limited).
///
/// Per descriptor:
///
/// | match | code | `current_limit` | `limit_remaining` | `duration_until_reset` |
/// |---|---|---|---|---|
/// | no limit, replaced | OK | — | 0 | — |
/// | unlimited | OK | — | 4 294 967 295 | — |
/// | limited, admitted | OK | set | remaining | until the limit is whole again (whole seconds, rounded up) |
/// | limited, denied | OVER_LIMIT | set | remaining | the same |
/// | limited, denied, shadow mode | OK | set | remaining | the same |
///
/// The overall code is OVER_LIMIT when any status is.
pub fn build_response(
    matches: &Matches<'_>,
    decisions: &[Option<Decision>],
    options: &ResponseOptions,
) -> proto::RateLimitResponse {
    let mut statuses = Vec::with_capacity(matches.descriptors().len());
    let mut over = false;
    for (i, m) in matches.descriptors().iter().enumerate() {
        let status = match (m, decisions.get(i).copied().flatten()) {
            (DescriptorMatch::Limited(limited), Some(decision)) => {
                let denied = decision.is_denied() && !limited.shadow();
                over |= denied;
                limited_status(limited, &decision, denied)
            }
            (DescriptorMatch::Unlimited(_), _) => {
                pb::DescriptorStatus { code: pb::Code::Ok.into(), limit_remaining: u32::MAX, ..Default::default() }
            }
            _ => pb::DescriptorStatus { code: pb::Code::Ok.into(), ..Default::default() },
        };
        statuses.push(status);
    }
    let response_headers_to_add =
        if options.ratelimit || options.legacy { headers(matches, decisions, options) } else { Vec::new() };
    proto::RateLimitResponse {
        overall_code: if over { pb::Code::OverLimit } else { pb::Code::Ok }.into(),
        statuses,
        response_headers_to_add,
        ..Default::default()
    }
}

fn limited_status(limited: &Limited<'_>, decision: &Decision, denied: bool) -> pb::DescriptorStatus {
    let limit = limited.limit();
    pb::DescriptorStatus {
        code: if denied { pb::Code::OverLimit } else { pb::Code::Ok }.into(),
        current_limit: Some(pb::RateLimit {
            name: limited.name().unwrap_or_default().to_owned(),
            requests_per_unit: limit.requests_per_unit(),
            unit: limit.unit().map_or(0, |unit| unit.response_code()),
        }),
        limit_remaining: u32::try_from(decision.remaining()).unwrap_or(u32::MAX),
        duration_until_reset: Some(proto::Duration {
            seconds: i64::try_from(ceil_secs(decision.reset_after())).unwrap_or(i64::MAX),
            nanos: 0,
        }),
        quota: None,
    }
}

/// The headers: `RateLimit-Policy` lists every limit that applied; `RateLimit`
/// and `X-RateLimit-*` describe the deciding one: the refusing limit with the
/// longest wait, or, if none refuses, the one with the fewest requests left (the
/// first of equals).
fn headers(
    matches: &Matches<'_>,
    decisions: &[Option<Decision>],
    options: &ResponseOptions,
) -> Vec<proto::HeaderValue> {
    let mut items: Vec<String> = Vec::new();
    let mut deciding: Option<(&Limited<'_>, Decision, bool)> = None;
    for (m, decision) in matches.descriptors().iter().zip(decisions) {
        let (DescriptorMatch::Limited(limited), Some(decision)) = (m, decision) else {
            continue;
        };
        let item = policy_item(
            &sf_string(policy_name(limited)),
            u64::from(limited.limit().requests_per_unit()),
            limited.limit().window(),
        );
        if !items.contains(&item) {
            items.push(item);
        }
        let refuses = decision.is_denied() && !limited.shadow();
        let better = match &deciding {
            None => true,
            Some((_, best, best_refuses)) => match (refuses, best_refuses) {
                (true, false) => true,
                (false, true) => false,
                (true, true) => decision.retry_after() > best.retry_after(),
                (false, false) => decision.remaining() < best.remaining(),
            },
        };
        if better {
            deciding = Some((limited, *decision, refuses));
        }
    }
    let Some((limited, decision, refuses)) = deciding else {
        return Vec::new();
    };
    let mut out = Vec::with_capacity(5);
    if options.ratelimit {
        out.push(header("RateLimit-Policy", items.join(", ")));
        let t = match decision.retry_after() {
            Some(wait) if refuses => retry_after_secs(wait),
            _ => ceil_secs(decision.reset_after()),
        };
        let mut value = sf_string(policy_name(limited));
        let _ = write!(value, ";r={};t={t}", decision.remaining());
        out.push(header("RateLimit", value));
    }
    if options.legacy {
        out.push(header("X-RateLimit-Limit", decision.limit().to_string()));
        out.push(header("X-RateLimit-Remaining", decision.remaining().to_string()));
        out.push(header("X-RateLimit-Reset", ceil_secs(decision.reset_after()).to_string()));
    }
    out
}

/// A limit's name in the headers: the rule's `name`, else its key path; for an
/// override, `override`.
fn policy_name<'a>(limited: &'a Limited<'_>) -> &'a str {
    match limited.rule() {
        Some(rule) => rule.name().unwrap_or(rule.key_path()),
        None => "override",
    }
}

fn header(key: &str, value: String) -> proto::HeaderValue {
    proto::HeaderValue { key: key.to_owned(), value, raw_value: Vec::new() }
}

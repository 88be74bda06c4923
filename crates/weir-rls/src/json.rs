//! The `/json` endpoint's bodies: a `RateLimitRequest` and a `RateLimitResponse` in
//! proto3 JSON, as envoyproxy/ratelimit reads and writes them (protojson): field
//! names in lowerCamelCase or as in the proto, unknown fields refused, 64-bit
//! numbers as numbers or strings, enums by name or number, default values left
//! out of the response, durations as `"58s"`.

use crate::proto::{self, rate_limit_descriptor, rate_limit_response as pb};
use core::fmt;
use serde::de::{self, Deserializer};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

/// A `/json` body that is not a `RateLimitRequest` in proto3 JSON.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JsonError(String);

impl fmt::Display for JsonError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "not a RateLimitRequest in proto3 JSON: {}", self.0)
    }
}

impl std::error::Error for JsonError {}

/// Reads a `RateLimitRequest` from proto3 JSON.
///
/// ```
/// let body = br#"{"domain": "edge", "descriptors": [{"entries": [{"key": "remote_address", "value": "10.0.0.1"}],
///                 "hitsAddend": "2", "limit": {"requestsPerUnit": 5, "unit": "MINUTE"}}], "hits_addend": 1}"#;
/// let request = weir_rls::json::request_from_json(body)?;
/// assert_eq!((request.domain.as_str(), request.hits_addend), ("edge", 1));
/// let descriptor = &request.descriptors[0];
/// assert_eq!(descriptor.hits_addend.map(|h| h.value), Some(2));
/// assert_eq!(descriptor.limit.map(|l| (l.requests_per_unit, l.unit)), Some((5, 2)));
///
/// let err = weir_rls::json::request_from_json(br#"{"domain": "edge", "colour": "red"}"#).unwrap_err();
/// assert!(err.to_string().contains("unknown field `colour`"), "{err}");
/// # Ok::<(), weir_rls::json::JsonError>(())
/// ```
pub fn request_from_json(body: &[u8]) -> Result<proto::RateLimitRequest, JsonError> {
    let request: JsonRequest = serde_json::from_slice(body).map_err(|e| JsonError(e.to_string()))?;
    Ok(proto::RateLimitRequest {
        domain: request.domain.unwrap_or_default(),
        descriptors: request
            .descriptors
            .unwrap_or_default()
            .into_iter()
            .map(|d| proto::RateLimitDescriptor {
                entries: d
                    .entries
                    .unwrap_or_default()
                    .into_iter()
                    .map(|e| rate_limit_descriptor::Entry {
                        key: e.key.unwrap_or_default(),
                        value: e.value.unwrap_or_default(),
                    })
                    .collect(),
                limit: d.limit.map(|l| rate_limit_descriptor::RateLimitOverride {
                    requests_per_unit: l.requests_per_unit.map_or(0, |n| n.0),
                    unit: l.unit.map_or(0, |u| u.0),
                }),
                hits_addend: d.hits_addend.map(|n| proto::UInt64Value { value: n.0 }),
                is_negative_hits: d.is_negative_hits.unwrap_or(false),
            })
            .collect(),
        hits_addend: request.hits_addend.map_or(0, |n| n.0),
    })
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct JsonRequest {
    domain: Option<String>,
    descriptors: Option<Vec<JsonDescriptor>>,
    #[serde(alias = "hitsAddend")]
    hits_addend: Option<Number<u32>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct JsonDescriptor {
    entries: Option<Vec<JsonEntry>>,
    limit: Option<JsonOverride>,
    #[serde(alias = "hitsAddend")]
    hits_addend: Option<Number<u64>>,
    #[serde(alias = "isNegativeHits")]
    is_negative_hits: Option<bool>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct JsonEntry {
    key: Option<String>,
    value: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct JsonOverride {
    #[serde(alias = "requestsPerUnit")]
    requests_per_unit: Option<Number<u32>>,
    unit: Option<UnitCode>,
}

/// An unsigned integer as proto3 JSON writes it: a number, or a string of one.
struct Number<T>(T);

impl<'de, T: TryFrom<u64> + fmt::Display> Deserialize<'de> for Number<T> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let n = match Value::deserialize(deserializer)? {
            Value::Number(n) => n.as_u64().or_else(|| {
                // protojson accepts an integral float (`5.0`, `1e3`).
                n.as_f64()
                    .filter(|f| f.fract() == 0.0 && *f >= 0.0 && *f < 18_446_744_073_709_551_616.0)
                    .map(|f| f as u64)
            }),
            Value::String(s) => s.parse::<u64>().ok(),
            other => return Err(de::Error::custom(format!("expected an unsigned integer, found {other}"))),
        };
        let n = n.ok_or_else(|| de::Error::custom("not an unsigned integer in range"))?;
        T::try_from(n).map(Number).map_err(|_| de::Error::custom(format!("{n} is out of range")))
    }
}

/// A `RateLimitUnit`, by name (`MINUTE`) or number.
struct UnitCode(i32);

impl<'de> Deserialize<'de> for UnitCode {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        match Value::deserialize(deserializer)? {
            Value::Number(n) => n
                .as_i64()
                .and_then(|n| i32::try_from(n).ok())
                .map(UnitCode)
                .ok_or_else(|| de::Error::custom("the unit's number is out of range")),
            Value::String(name) => match name.as_str() {
                "UNKNOWN" => Ok(UnitCode(0)),
                other => crate::Unit::ALL
                    .into_iter()
                    .find(|unit| unit.name() == other)
                    .map(|unit| UnitCode(unit.response_code()))
                    .ok_or_else(|| de::Error::custom(format!("unknown unit {other:?}"))),
            },
            other => Err(de::Error::custom(format!("expected a unit, found {other}"))),
        }
    }
}

/// Writes a `RateLimitResponse` as proto3 JSON, as protojson does: fields in the
/// proto's order, default values left out, enums by name, durations as
/// `"<seconds>s"`.
///
/// ```
/// use weir_rls::proto::{RateLimitResponse, rate_limit_response as pb};
///
/// let response = RateLimitResponse {
///     overall_code: pb::Code::OverLimit.into(),
///     statuses: vec![pb::DescriptorStatus {
///         code: pb::Code::OverLimit.into(),
///         current_limit: Some(pb::RateLimit { name: String::new(), requests_per_unit: 10, unit: 2 }),
///         limit_remaining: 0,
///         duration_until_reset: Some(weir_rls::proto::Duration { seconds: 58, nanos: 0 }),
///         quota: None,
///     }],
///     ..Default::default()
/// };
/// assert_eq!(
///     weir_rls::json::response_to_json(&response),
///     r#"{"overallCode":"OVER_LIMIT","statuses":[{"code":"OVER_LIMIT","currentLimit":{"requestsPerUnit":10,"unit":"MINUTE"},"durationUntilReset":"58s"}]}"#
/// );
/// ```
pub fn response_to_json(response: &proto::RateLimitResponse) -> String {
    let out = JsonResponse {
        overall_code: (response.overall_code != 0).then(|| code_name(response.overall_code)),
        statuses: response.statuses.iter().map(status_to_json).collect(),
        response_headers_to_add: headers(&response.response_headers_to_add),
        request_headers_to_add: headers(&response.request_headers_to_add),
    };
    // Plain data with string keys: serializing cannot fail.
    serde_json::to_string(&out).unwrap_or_default()
}

fn headers(headers: &[proto::HeaderValue]) -> Vec<JsonHeader<'_>> {
    headers.iter().map(|h| JsonHeader { key: nonempty(&h.key), value: nonempty(&h.value) }).collect()
}

fn nonempty(s: &str) -> Option<&str> {
    (!s.is_empty()).then_some(s)
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct JsonResponse<'a> {
    #[serde(skip_serializing_if = "Option::is_none")]
    overall_code: Option<Value>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    statuses: Vec<JsonStatus<'a>>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    response_headers_to_add: Vec<JsonHeader<'a>>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    request_headers_to_add: Vec<JsonHeader<'a>>,
}

#[derive(Serialize)]
struct JsonHeader<'a> {
    #[serde(skip_serializing_if = "Option::is_none")]
    key: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    value: Option<&'a str>,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct JsonStatus<'a> {
    #[serde(skip_serializing_if = "Option::is_none")]
    code: Option<Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    current_limit: Option<JsonLimit<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    limit_remaining: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    duration_until_reset: Option<String>,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct JsonLimit<'a> {
    #[serde(skip_serializing_if = "Option::is_none")]
    name: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    requests_per_unit: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    unit: Option<Value>,
}

fn status_to_json(status: &pb::DescriptorStatus) -> JsonStatus<'_> {
    JsonStatus {
        code: (status.code != 0).then(|| code_name(status.code)),
        current_limit: status.current_limit.as_ref().map(|limit| JsonLimit {
            name: nonempty(&limit.name),
            requests_per_unit: (limit.requests_per_unit != 0).then_some(limit.requests_per_unit),
            unit: (limit.unit != 0).then(|| {
                crate::Unit::from_response_code(limit.unit).map_or_else(|| json!(limit.unit), |u| json!(u.name()))
            }),
        }),
        limit_remaining: (status.limit_remaining != 0).then_some(status.limit_remaining),
        duration_until_reset: status.duration_until_reset.as_ref().map(duration),
    }
}

fn code_name(code: i32) -> Value {
    match pb::Code::try_from(code) {
        Ok(pb::Code::Ok) => json!("OK"),
        Ok(pb::Code::OverLimit) => json!("OVER_LIMIT"),
        Ok(pb::Code::Unknown) => json!("UNKNOWN"),
        Err(_) => json!(code),
    }
}

/// A duration as protojson writes it: seconds, then 0, 3, 6 or 9 fractional digits.
fn duration(d: &proto::Duration) -> String {
    let nanos = d.nanos.unsigned_abs();
    let sign = if d.seconds < 0 || d.nanos < 0 { "-" } else { "" };
    let seconds = d.seconds.unsigned_abs();
    if nanos == 0 {
        format!("{sign}{seconds}s")
    } else if nanos.is_multiple_of(1_000_000) {
        format!("{sign}{seconds}.{:03}s", nanos / 1_000_000)
    } else if nanos.is_multiple_of(1_000) {
        format!("{sign}{seconds}.{:06}s", nanos / 1_000)
    } else {
        format!("{sign}{seconds}.{nanos:09}s")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_come_as_numbers_or_strings_within_range() {
        let ok = |body: &str| request_from_json(body.as_bytes());
        assert_eq!(ok(r#"{"hitsAddend": "7"}"#).unwrap().hits_addend, 7);
        assert_eq!(ok(r#"{"hits_addend": 7.0}"#).unwrap().hits_addend, 7);
        assert_eq!(ok(r#"{"hits_addend": null}"#).unwrap().hits_addend, 0);
        for bad in [
            r#"{"hitsAddend": 4294967296}"#,
            r#"{"hitsAddend": -1}"#,
            r#"{"hitsAddend": 1.5}"#,
            r#"{"hitsAddend": "x"}"#,
            r#"{"hitsAddend": 1, "hits_addend": 2}"#,
            r#"{"descriptors": [{"limit": {"unit": "FORTNIGHT"}}]}"#,
            r#"{"descriptors": [{"entries": [{"key": "k", "value": 5}]}]}"#,
            r#"[]"#,
            "",
        ] {
            assert!(ok(bad).is_err(), "{bad}");
        }
        let d = &ok(r#"{"descriptors": [{"hitsAddend": "18446744073709551615", "limit": {"unit": 7}}]}"#)
            .unwrap()
            .descriptors[0];
        assert_eq!((d.hits_addend.map(|h| h.value), d.limit.map(|l| l.unit)), (Some(u64::MAX), Some(7)));
    }

    #[test]
    fn durations_are_written_as_protojson_writes_them() {
        let d = |seconds, nanos| duration(&proto::Duration { seconds, nanos });
        assert_eq!(
            [d(0, 0), d(58, 0), d(1, 500_000_000), d(1, 1_000), d(1, 1)],
            ["0s", "58s", "1.500s", "1.000001s", "1.000000001s"]
        );
    }

    #[test]
    fn unlimited_statuses_and_headers_are_written() {
        let response = proto::RateLimitResponse {
            overall_code: pb::Code::Ok.into(),
            statuses: vec![
                pb::DescriptorStatus { code: pb::Code::Ok.into(), limit_remaining: u32::MAX, ..Default::default() },
                pb::DescriptorStatus { code: pb::Code::Ok.into(), ..Default::default() },
            ],
            response_headers_to_add: vec![proto::HeaderValue {
                key: "RateLimit".into(),
                value: "\"k\";r=1;t=2".into(),
                raw_value: Vec::new(),
            }],
            ..Default::default()
        };
        assert_eq!(
            response_to_json(&response),
            r#"{"overallCode":"OK","statuses":[{"code":"OK","limitRemaining":4294967295},{"code":"OK"}],"responseHeadersToAdd":[{"key":"RateLimit","value":"\"k\";r=1;t=2"}]}"#
        );
    }
}

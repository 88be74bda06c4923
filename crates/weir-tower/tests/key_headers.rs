//! Arbitrary bytes in the API-key header (one line or several, any length) and
//! arbitrary user ids: reading a key never panics, the key keeps at most
//! `MAX_KEY_BYTES` of payload, distinct values are distinct keys (up to the hash),
//! and a request with no value, or only spaces, gets the documented 400 naming the
//! header.

use bytes::Bytes;
use core::convert::Infallible;
use http::{HeaderValue, Request, Response, StatusCode};
use proptest::prelude::*;
use std::sync::LazyLock;
use tower::{ServiceExt, service_fn};
use weir_keyed::{KeyedConfig, KeyedGcra};
use weir_rl_core::{ManualClock, Quota};
use weir_tower::{Key, KeySource, Limit, LongKeys, MAX_KEY_BYTES, Policy, RateLimitLayer, Store, User};

/// Header-value bytes of any length: mostly short, sometimes past `MAX_KEY_BYTES`,
/// now and then far past it; any byte a header value may hold.
fn value() -> impl Strategy<Value = Vec<u8>> {
    let byte = prop_oneof![4 => 0x20u8..0x7f, 1 => Just(b'\t'), 2 => 0x80u8..=0xff, 1 => Just(b' ')];
    prop_oneof![
        6 => proptest::collection::vec(byte.clone(), 0..40),
        3 => proptest::collection::vec(byte.clone(), MAX_KEY_BYTES - 2..MAX_KEY_BYTES + 3),
        2 => proptest::collection::vec(byte, 0..2_000),
        1 => (any::<u8>(), 1usize..200_000).prop_map(|(b, n)| vec![b | 0x41; n]),
    ]
}

/// The header's lines, as a client sends them: one or several.
fn lines() -> impl Strategy<Value = Vec<Vec<u8>>> {
    proptest::collection::vec(value(), 0..4)
}

fn parts(lines: &[Vec<u8>]) -> Option<http::request::Parts> {
    let mut request = Request::get("/").body(()).unwrap();
    for line in lines {
        // Bytes a header value cannot hold never reach a server.
        let value = HeaderValue::from_bytes(line).ok()?;
        request.headers_mut().append("x-api-key", value);
    }
    Some(request.into_parts().0)
}

/// The payload a key keeps: never more than `MAX_KEY_BYTES`.
fn bounded(key: &Key) -> bool {
    key.payload().len() <= MAX_KEY_BYTES && (!key.is_hashed() || key.payload().len() == 16)
}

static LAYER: LazyLock<RateLimitLayer> = LazyLock::new(|| {
    let store = KeyedGcra::gcra_with_clock(
        Quota::per_minute(1_000_000).unwrap(),
        KeyedConfig::builder(100_000).build().unwrap(),
        ManualClock::new(),
    );
    RateLimitLayer::new(
        Policy::builder("api").limit(Limit::new(KeySource::header("x-api-key"), Store::local(store))).build().unwrap(),
    )
});

fn send(lines: &[Vec<u8>]) -> Option<Response<Bytes>> {
    let parts = parts(lines)?;
    let service = tower::Layer::layer(
        &*LAYER,
        service_fn(|_: Request<()>| async { Ok::<_, Infallible>(Response::new(Bytes::from_static(b"ok"))) }),
    );
    let runtime = tokio::runtime::Builder::new_current_thread().build().unwrap();
    Some(runtime.block_on(service.oneshot(Request::from_parts(parts, ()))).unwrap())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    /// The key is the first line's value without its surrounding spaces and tabs,
    /// bounded; none when that is empty; whatever the other lines say.
    #[test]
    fn the_key_is_the_first_lines_value_bounded(lines in lines()) {
        let Some(parts) = parts(&lines) else { return Ok(()) };
        let source = KeySource::header("x-api-key");
        let key = source.key(&parts);
        let first = lines.first().map(|l| l.trim_ascii()).unwrap_or(b"");
        if first.is_empty() {
            prop_assert_eq!(key, None);
        } else {
            let key = key.unwrap();
            prop_assert!(bounded(&key), "{} bytes", key.payload().len());
            prop_assert_eq!(key.is_hashed(), first.len() > MAX_KEY_BYTES);
            prop_assert_eq!(&key, &Key::api_key(first));
            if first.len() <= MAX_KEY_BYTES {
                prop_assert_eq!(key.payload(), first);
            }
        }
        // Refusing long values: refused exactly when the first value is long.
        let refusing = source.long_keys(LongKeys::Refuse).key(&parts);
        prop_assert_eq!(refusing.is_none(), first.is_empty() || first.len() > MAX_KEY_BYTES);
    }

    /// Distinct values are distinct keys, long ones up to the 128-bit hash.
    #[test]
    fn distinct_values_are_distinct_keys(a in value(), b in value()) {
        let (a, b) = (a.trim_ascii(), b.trim_ascii());
        prop_assume!(!a.is_empty() && !b.is_empty());
        prop_assert_eq!(Key::api_key(a) == Key::api_key(b), a == b);
    }

    /// User ids of any text: bounded, distinct, never equal to an API key.
    #[test]
    fn user_ids_are_bounded_and_distinct(a in ".{0,300}", b in ".{0,300}") {
        let (ka, kb) = (Key::user(&a), Key::user(&b));
        prop_assert!(bounded(&ka) && bounded(&kb));
        prop_assert_eq!(ka == kb, a == b);
        prop_assert_ne!(ka, Key::api_key(a.as_bytes()));
        let mut request = Request::get("/").body(()).unwrap();
        request.extensions_mut().insert(User::from(a.as_str()));
        let (parts, ()) = request.into_parts();
        prop_assert_eq!(KeySource::user().key(&parts), Some(Key::user(&a)));
    }

    /// Through the layer: a request with a key is limited (200 here: the limit is
    /// far away), one without (no line, or a first line of spaces) gets the 400
    /// whose detail names the header; never a panic.
    #[test]
    fn the_layer_answers_every_header(lines in lines()) {
        let Some(response) = send(&lines) else { return Ok(()) };
        let first = lines.first().map(|l| l.trim_ascii()).unwrap_or(b"");
        if first.is_empty() {
            prop_assert_eq!(response.status(), StatusCode::BAD_REQUEST);
            let body: serde_json::Value = serde_json::from_slice(response.body()).unwrap();
            let detail = body["detail"].as_str().unwrap_or("");
            prop_assert!(detail.contains("`x-api-key` header"), "{}", detail);
        } else {
            prop_assert_eq!(response.status(), StatusCode::OK);
            prop_assert!(response.headers().contains_key("ratelimit"));
        }
    }
}

//! The client address read from `X-Forwarded-For` and `Forwarded` lines of arbitrary
//! bytes.
//!
//! A trusted proxy that appends to a forwarding header keeps whatever the client sent
//! on the same line, left of the hop it adds. The invariant: nothing left of the
//! client hop changes the result, whatever its bytes (non-ASCII, unbalanced quotes,
//! stray backslashes, whole earlier lines); the result is the rightmost untrusted hop
//! the trusted proxies wrote, or "unidentified" (`None`) when the hop that must be
//! read is not an address. From an untrusted peer, no header is read at all.

use axum::Router;
use axum::body::Body;
use axum::extract::ConnectInfo;
use axum::routing::get;
use http::header::{FORWARDED, HeaderName};
use http::{HeaderMap, HeaderValue, Request, StatusCode};
use std::net::{IpAddr, SocketAddr};
use tower::ServiceExt as _;
use weir_core::{ManualClock, Quota};
use weir_keyed::{KeyedConfig, KeyedGcra};
use weir_tower::{ClientIp, ForwardedHeader, KeySource, Limit, MissingKey, Policy, RateLimitLayer, Store};

const XFF: HeaderName = HeaderName::from_static("x-forwarded-for");

fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}

/// Trusts `10.0.0.0/8` and `fd00::/8`, reading `header`.
fn client(header: ForwardedHeader) -> ClientIp {
    ClientIp::builder().trust_proxies(["10.0.0.0/8", "fd00::/8"]).forwarded_header(header).build().unwrap()
}

fn name_of(header: ForwardedHeader) -> HeaderName {
    match header {
        ForwardedHeader::Forwarded => FORWARDED,
        _ => XFF,
    }
}

/// The header `name` with these lines, in order (the last is the nearest proxy's).
fn lines(name: &HeaderName, lines: &[&[u8]]) -> HeaderMap {
    let mut map = HeaderMap::new();
    for line in lines {
        map.append(name.clone(), HeaderValue::from_bytes(line).unwrap());
    }
    map
}

/// What `client` resolves for a request from the trusted proxy `10.0.0.1`.
fn from_proxy(client: &ClientIp, name: &HeaderName, header_lines: &[&[u8]]) -> Option<IpAddr> {
    client.resolve(ip("10.0.0.1"), &lines(name, header_lines))
}

#[test]
fn a_non_ascii_byte_left_of_the_client_in_x_forwarded_for_does_not_hide_it() {
    let xff = client(ForwardedHeader::XForwardedFor);
    assert_eq!(from_proxy(&xff, &XFF, &[b"\xff, 203.0.113.5"]), Some(ip("203.0.113.5")));
    assert_eq!(from_proxy(&xff, &XFF, &[b"6.6.6.6\x80\xfe, 203.0.113.5:8080"]), Some(ip("203.0.113.5")));
    // The client's line, the first proxy's hop appended to it, then a second trusted
    // proxy's line.
    assert_eq!(from_proxy(&xff, &XFF, &[b"\xff, 203.0.113.5", b"10.0.0.7"]), Some(ip("203.0.113.5")));
    // A whole earlier line of the client's.
    assert_eq!(from_proxy(&xff, &XFF, &[b"\xff\xfe", b"203.0.113.5, 10.0.0.7"]), Some(ip("203.0.113.5")));
    // A non-ASCII byte in the hop that must be read: not an address.
    assert_eq!(from_proxy(&xff, &XFF, &[b"203.0.113.5, 10.0.0.7\xff"]), None);
    assert_eq!(from_proxy(&xff, &XFF, &[b"\xff", b"10.0.0.7"]), None);
}

#[test]
fn a_non_ascii_byte_left_of_the_client_in_forwarded_does_not_hide_it() {
    let fwd = client(ForwardedHeader::Forwarded);
    assert_eq!(from_proxy(&fwd, &FORWARDED, &[b"for=\"\xff\", for=203.0.113.5"]), Some(ip("203.0.113.5")));
    assert_eq!(from_proxy(&fwd, &FORWARDED, &[b"for=\xff, for=203.0.113.5;proto=https"]), Some(ip("203.0.113.5")));
    assert_eq!(
        from_proxy(&fwd, &FORWARDED, &[b"for=\"\xff\"", b"for=203.0.113.5", b"for=10.0.0.7"]),
        Some(ip("203.0.113.5"))
    );
}

#[test]
fn a_quoted_semicolon_or_comma_does_not_split_a_forwarded_element() {
    let fwd = client(ForwardedHeader::Forwarded);
    // The proxy quoted the client's Host; the `;for=` inside the quotes is text.
    assert_eq!(from_proxy(&fwd, &FORWARDED, &[b"host=\"x;for=6.6.6.6;y=\";for=203.0.113.5"]), Some(ip("203.0.113.5")));
    assert_eq!(from_proxy(&fwd, &FORWARDED, &[b"for=203.0.113.5;host=\"a,for=6.6.6.6\""]), Some(ip("203.0.113.5")));
    assert_eq!(
        from_proxy(&fwd, &FORWARDED, &[b"host=\"a, for=6.6.6.6\";for=\"203.0.113.5\", for=10.0.0.7"]),
        Some(ip("203.0.113.5"))
    );
    // An escaped quote inside a quoted string does not end it.
    assert_eq!(from_proxy(&fwd, &FORWARDED, &[b"host=\"a\\\";for=6.6.6.6\";for=203.0.113.5"]), Some(ip("203.0.113.5")));
    // An escaped backslash before the closing quote does not escape it.
    assert_eq!(
        from_proxy(&fwd, &FORWARDED, &[b"host=\"a\\\\\";for=203.0.113.5;by=\"b\\\\\""]),
        Some(ip("203.0.113.5"))
    );
}

#[test]
fn quoted_pairs_in_a_forwarded_value_are_unescaped() {
    let fwd = client(ForwardedHeader::Forwarded);
    // All hops trusted: the leftmost, 10.0.0.1, is the client.
    assert_eq!(from_proxy(&fwd, &FORWARDED, &[b"for=\"\\10.0.0.1\""]), Some(ip("10.0.0.1")));
    assert_eq!(from_proxy(&fwd, &FORWARDED, &[b"for=\"\\2\\0\\3.0.113.5\""]), Some(ip("203.0.113.5")));
    assert_eq!(from_proxy(&fwd, &FORWARDED, &[b"for=\"[2001:db8::1\\]:\\_x\""]), Some(ip("2001:db8::1")));
}

#[test]
fn obfuscated_ports_are_accepted_for_both_families() {
    let fwd = client(ForwardedHeader::Forwarded);
    assert_eq!(from_proxy(&fwd, &FORWARDED, &[b"for=\"10.0.0.1:_p0rt\""]), Some(ip("10.0.0.1")));
    assert_eq!(from_proxy(&fwd, &FORWARDED, &[b"for=\"[2001:db8::1]:_x\""]), Some(ip("2001:db8::1")));
    assert_eq!(
        from_proxy(&fwd, &FORWARDED, &[b"for=\"203.0.113.5:_p0rt\", for=\"[fd00::3]:_a.b-c_d\""]),
        Some(ip("203.0.113.5"))
    );
    assert_eq!(from_proxy(&fwd, &FORWARDED, &[b"for=\"203.0.113.5:4711\""]), Some(ip("203.0.113.5")));
    // An obfuscated node (not only a port) is not an address.
    assert_eq!(from_proxy(&fwd, &FORWARDED, &[b"for=\"_node:_p0rt\""]), None);
    assert_eq!(from_proxy(&fwd, &FORWARDED, &[b"for=\"203.0.113.5:_\""]), None);
    assert_eq!(from_proxy(&fwd, &FORWARDED, &[b"for=\"203.0.113.5:\""]), None);
}

#[test]
fn a_client_quote_or_backslash_does_not_swallow_the_hops_a_proxy_appended() {
    let fwd = client(ForwardedHeader::Forwarded);
    let cases: [&[u8]; 7] = [
        b"for=\"6.6.6.6, for=203.0.113.5",
        b"for=\"6.6.6.6, for=\"203.0.113.5\"",
        b"\"\\, for=\"203.0.113.5\";proto=https",
        b"for=\"\\\", for=203.0.113.5",
        b"\\\", for=\"203.0.113.5:_p\"",
        b"for=6.6.6.6\\, for=203.0.113.5",
        b"\"\"\"\xff\\;for=\"6.6.6.6;host=\", for=203.0.113.5, for=\"[fd00::9]\"",
    ];
    for line in cases {
        assert_eq!(from_proxy(&fwd, &FORWARDED, &[line]), Some(ip("203.0.113.5")), "{}", line.escape_ascii());
    }
    // A client line with an unbalanced quote before the proxy's own line.
    assert_eq!(from_proxy(&fwd, &FORWARDED, &[b"for=\"", b"for=203.0.113.5"]), Some(ip("203.0.113.5")));
}

#[test]
fn a_forwarded_element_that_must_be_read_and_names_no_address_is_unidentified() {
    let fwd = client(ForwardedHeader::Forwarded);
    let cases: [&[u8]; 9] = [
        b"for=unknown",
        b"for=\"unknown\"",
        b"for=_hidden",
        b"for=203.0.113.5;for=6.6.6.6",
        b"proto=https;by=10.0.0.9",
        b"for=\"203.0.113.5",
        b"for=\"203.0.113.5\"x",
        b"for=6.6.6.6, for=\"10.0.0.7",
        b"for=\"203.0.113.5\\\"",
    ];
    for line in cases {
        assert_eq!(from_proxy(&fwd, &FORWARDED, &[line]), None, "{}", line.escape_ascii());
    }
}

#[test]
fn empty_list_elements_are_ignored() {
    let xff = client(ForwardedHeader::XForwardedFor);
    assert_eq!(from_proxy(&xff, &XFF, &[b"203.0.113.5, , 10.0.0.7,"]), Some(ip("203.0.113.5")));
    let fwd = client(ForwardedHeader::Forwarded);
    assert_eq!(from_proxy(&fwd, &FORWARDED, &[b"for=203.0.113.5, ,for=10.0.0.7, "]), Some(ip("203.0.113.5")));
}

/// `key = "ip"`, `on_missing_key = "skip"`, 10.0.0.0/8 trusted, 1 request per minute:
/// the requests of one client through the trusted proxy, each with `header: value`;
/// how many were admitted.
async fn admitted_of_twenty(header: ForwardedHeader, value: &[u8]) -> usize {
    let store = KeyedGcra::gcra_with_clock(
        Quota::per_minute(1).unwrap(),
        KeyedConfig::builder(100).build().unwrap(),
        ManualClock::new(),
    );
    let client_ip = ClientIp::builder().trust_proxies(["10.0.0.0/8"]).forwarded_header(header).build().unwrap();
    let layer = RateLimitLayer::new(
        Policy::builder("ip")
            .limit(Limit::new(KeySource::ip(client_ip), Store::local(store)).on_missing_key(MissingKey::Skip))
            .build()
            .unwrap(),
    );
    let app = Router::new().route("/", get(|| async { "ok" })).layer(layer);
    let mut admitted = 0;
    for _ in 0..20 {
        let mut request = Request::get("/").body(Body::empty()).unwrap();
        request.headers_mut().insert(name_of(header), HeaderValue::from_bytes(value).unwrap());
        request.extensions_mut().insert(ConnectInfo("10.0.0.1:4000".parse::<SocketAddr>().unwrap()));
        if app.clone().oneshot(request).await.unwrap().status() == StatusCode::OK {
            admitted += 1;
        }
    }
    admitted
}

#[tokio::test(flavor = "current_thread")]
async fn a_client_byte_left_of_its_hop_does_not_escape_the_per_ip_limit() {
    let xff = ForwardedHeader::XForwardedFor;
    assert_eq!(admitted_of_twenty(xff, b"203.0.113.5").await, 1, "control");
    assert_eq!(admitted_of_twenty(xff, b"\xff, 203.0.113.5").await, 1);
    let fwd = ForwardedHeader::Forwarded;
    assert_eq!(admitted_of_twenty(fwd, b"for=\"\xff\", for=203.0.113.5").await, 1);
    assert_eq!(admitted_of_twenty(fwd, b"for=\"6.6.6.6, for=203.0.113.5").await, 1);
}

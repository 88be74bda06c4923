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
use proptest::prelude::*;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use tower::ServiceExt as _;
use weir_keyed::{KeyedConfig, KeyedGcra};
use weir_rl_core::{ManualClock, Quota};
use weir_tower::{
    ClientIp, ForwardedHeader, Key, KeySource, Limit, MissingKey, PeerAddr, Policy, RateLimitLayer, Store,
};

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

// ---- Property tests -------------------------------------------------------------

fn is_trusted(client: &ClientIp, ip: IpAddr) -> bool {
    client.trusted_proxies().iter().any(|net| net.contains(ip))
}

/// An address outside `10.0.0.0/8` and `fd00::/8`: IPv4, IPv6 or IPv4-mapped IPv6.
fn untrusted_ip() -> impl Strategy<Value = IpAddr> {
    let trust = client(ForwardedHeader::XForwardedFor);
    prop_oneof![
        any::<u32>().prop_map(|v| IpAddr::V4(Ipv4Addr::from(v))),
        any::<u128>().prop_map(|v| IpAddr::V6(Ipv6Addr::from(v))),
        any::<u32>().prop_map(|v| IpAddr::V6(Ipv4Addr::from(v).to_ipv6_mapped())),
    ]
    .prop_filter("an untrusted address", move |ip| !is_trusted(&trust, *ip))
}

/// An address in `10.0.0.0/8` or `fd00::/8`: IPv4, IPv6 or IPv4-mapped IPv6.
fn trusted_ip() -> impl Strategy<Value = IpAddr> {
    prop_oneof![
        any::<[u8; 3]>().prop_map(|[a, b, c]| IpAddr::V4(Ipv4Addr::new(10, a, b, c))),
        any::<u128>().prop_map(|v| IpAddr::V6(Ipv6Addr::from((v >> 8) | (0xfd << 120)))),
        any::<[u8; 3]>().prop_map(|[a, b, c]| IpAddr::V6(Ipv4Addr::new(10, a, b, c).to_ipv6_mapped())),
    ]
}

/// Pieces of text a client might send to confuse a parser.
const CLIENT_PIECES: &[&[u8]] = &[
    b",",
    b";",
    b"\"",
    b"\\",
    b"=",
    b" ",
    b"\t",
    b"[",
    b"]",
    b":",
    b"\xff",
    b"\x80",
    b"\xc3\xa9",
    b"for=",
    b"For=\"",
    b"6.6.6.6",
    b"10.0.0.9",
    b"[fd00::1]",
    b"2001:db8::6",
    b"unknown",
    b"_hidden",
    b"for=\"6.6.6.6\"",
    b", for=6.6.6.6",
    b";for=6.6.6.6;",
    b"host=\"x;for=6.6.6.6;y=\"",
    b"\\\"",
    b"\\\\",
];

/// One line of client bytes: pieces and raw bytes, any byte a header value allows.
fn client_line() -> impl Strategy<Value = Vec<u8>> {
    let piece = prop_oneof![
        3 => prop::sample::select(CLIENT_PIECES).prop_map(<[u8]>::to_vec),
        2 => (0x20u8..0x7f).prop_map(|b| vec![b]),
        1 => (0x80u8..=0xff).prop_map(|b| vec![b]),
        1 => any::<u8>().prop_map(|b| vec![b]),
    ];
    prop::collection::vec(piece, 0..12)
        .prop_map(|pieces| pieces.concat())
        .prop_filter("a header value", |line| HeaderValue::from_bytes(line).is_ok())
}

/// Optional whitespace.
fn ows() -> impl Strategy<Value = &'static str> {
    prop::sample::select(&["", "", " ", "  ", "\t", " \t"][..])
}

/// A port: digits or (in `Forwarded` only) an obfuscated port.
#[derive(Debug, Clone)]
enum Port {
    None,
    Number(u16),
    Obfuscated(String),
}

fn port(obfuscated: bool) -> BoxedStrategy<Port> {
    if obfuscated {
        prop_oneof![
            2 => Just(Port::None),
            1 => any::<u16>().prop_map(Port::Number),
            1 => "_[a-zA-Z0-9._-]{1,8}".prop_map(Port::Obfuscated),
        ]
        .boxed()
    } else {
        prop_oneof![2 => Just(Port::None), 1 => any::<u16>().prop_map(Port::Number)].boxed()
    }
}

/// A node as a proxy writes it: `192.0.2.1`, `192.0.2.1:80`, `2001:db8::1` (bare,
/// without a port), `[2001:db8::1]`, `[2001:db8::1]:80`.
fn node_text(ip: IpAddr, port: &Port, bare_v6: bool) -> String {
    let port = match port {
        Port::None => String::new(),
        Port::Number(n) => format!(":{n}"),
        Port::Obfuscated(o) => format!(":{o}"),
    };
    match ip {
        IpAddr::V4(v4) => format!("{v4}{port}"),
        IpAddr::V6(v6) if bare_v6 && port.is_empty() => format!("{v6}"),
        IpAddr::V6(v6) => format!("[{v6}]{port}"),
    }
}

/// One `X-Forwarded-For` hop written by a proxy, with optional whitespace around it.
fn xff_hop(ip: IpAddr) -> impl Strategy<Value = Vec<u8>> {
    (port(false), any::<bool>(), ows(), ows()).prop_map(move |(port, bare, before, after)| {
        format!("{before}{}{after}", node_text(ip, &port, bare)).into_bytes()
    })
}

/// An `X-Forwarded-For` hop, where the client must be read, that is not an address.
fn xff_non_address() -> impl Strategy<Value = Vec<u8>> {
    let texts: &[&[u8]] =
        &[b"unknown", b"nonsense", b"_hidden", b"1.2.3", b"[2001:db8::1", b"203.0.113.5:", b"\xff", b"203.0.113.5\xff"];
    prop::sample::select(texts).prop_map(<[u8]>::to_vec)
}

/// `text` as a quoted string, each `"` and `\` escaped, other bytes escaped at random.
fn quote(text: &[u8], escape_more: &[bool]) -> Vec<u8> {
    let mut out = vec![b'"'];
    for (i, &b) in text.iter().enumerate() {
        if b == b'"' || b == b'\\' || escape_more.get(i).copied().unwrap_or(false) {
            out.push(b'\\');
        }
        out.push(b);
    }
    out.push(b'"');
    out
}

/// The `for=` pair of a `Forwarded` element naming `ip`: a token for a bare IPv4
/// address, else a quoted string (with random quoted-pair escapes).
fn for_pair(ip: IpAddr) -> impl Strategy<Value = Vec<u8>> {
    let name = prop::sample::select(&["for", "For", "FOR"][..]);
    (name, port(true), any::<bool>(), prop::collection::vec(prop::bool::weighted(0.2), 0..48)).prop_map(
        move |(name, port, quoted, escapes)| {
            let node = node_text(ip, &port, false);
            let value = if ip.is_ipv4() && matches!(port, Port::None) && !quoted {
                node.into_bytes()
            } else {
                quote(node.as_bytes(), &escapes)
            };
            [format!("{name}=").into_bytes(), value].concat()
        },
    )
}

/// A `for=` pair (or none) that names no address, where the client must be read.
fn forwarded_non_address() -> impl Strategy<Value = Option<Vec<u8>>> {
    let texts: &[&[u8]] = &[
        b"for=unknown",
        b"for=\"unknown\"",
        b"for=_hidden",
        b"for=\"_x:80\"",
        b"for=\"\"",
        b"for=\"1.2.3\"",
        b"for=\"\xff\"",
        b"for=\"203.0.113.5:\"",
        b"for=203.0.113.5;for=198.51.100.1",
    ];
    prop_oneof![4 => prop::sample::select(texts).prop_map(|t| Some(t.to_vec())), 1 => Just(None)]
}

/// Another pair of a `Forwarded` element: `proto`, `by`, or a `host` the proxy copied
/// from the client (any bytes, quoted).
fn other_pair() -> impl Strategy<Value = Vec<u8>> {
    let host_text = prop::collection::vec(
        prop_oneof![
            2 => prop::sample::select(CLIENT_PIECES).prop_map(<[u8]>::to_vec),
            1 => (0x20u8..0x7f).prop_map(|b| vec![b]),
            1 => (0x80u8..=0xff).prop_map(|b| vec![b]),
            1 => Just(vec![b'\t']),
        ],
        0..10,
    )
    .prop_map(|p| p.concat());
    prop_oneof![
        Just(b"proto=https".to_vec()),
        Just(b"by=\"[fd00::1]:443\"".to_vec()),
        trusted_ip().prop_map(|ip| format!("by=\"{}\"", node_text(ip, &Port::None, false)).into_bytes()),
        (host_text, prop::collection::vec(prop::bool::weighted(0.2), 0..48)).prop_map(|(text, escapes)| [
            b"host=".to_vec(),
            quote(&text, &escapes)
        ]
        .concat()),
    ]
}

/// A `Forwarded` element: `for` (if any) among other pairs, in any order, pairs
/// separated by `;` with optional whitespace.
fn element(for_pair: Option<Vec<u8>>) -> impl Strategy<Value = Vec<u8>> {
    (prop::collection::vec(other_pair(), 0..3), any::<prop::sample::Index>(), ows(), ows()).prop_map(
        move |(mut pairs, at, before, after)| {
            match &for_pair {
                Some(pair) => pairs.insert(at.index(pairs.len() + 1), pair.clone()),
                // An element with no `for` is not an empty element.
                None if pairs.is_empty() => pairs.push(b"proto=https".to_vec()),
                None => {}
            }
            let separator = format!("{before};{after}");
            pairs.join(separator.as_bytes())
        },
    )
}

/// Where a proxy's hop goes: appended to the line so far, or on a line of its own.
/// `true`: a new line.
fn new_line() -> impl Strategy<Value = bool> {
    prop::bool::weighted(0.3)
}

/// A list separator: `,` with optional whitespace.
fn comma() -> impl Strategy<Value = String> {
    (ows(), ows()).prop_map(|(before, after)| format!("{before},{after}"))
}

/// The hops proxies wrote, each `(text, on a line of its own, the comma before it)`.
type Hops = Vec<(Vec<u8>, bool, String)>;

/// Header lines: the client's lines, then each proxy's hop, `(text, on a new line,
/// comma)`, appended to the last line after the comma or on a line of its own.
fn assemble(client_lines: &[Vec<u8>], hops: &Hops) -> Vec<Vec<u8>> {
    let mut lines: Vec<Vec<u8>> = client_lines.to_vec();
    for (hop, on_new_line, comma) in hops {
        match lines.last_mut() {
            Some(last) if !on_new_line => {
                last.extend_from_slice(comma.as_bytes());
                last.extend_from_slice(hop);
            }
            _ => lines.push(hop.clone()),
        }
    }
    lines
}

/// A suffix of hops written by trusted proxies, as `(text, on a new line, comma)`: the
/// first proxy's hop for the client (`client_hop`), then each further trusted proxy's.
fn suffix(header: ForwardedHeader, client_hop: BoxedStrategy<Vec<u8>>) -> impl Strategy<Value = Hops> {
    let proxy_hop = trusted_ip().prop_flat_map(move |ip| hop_naming(header, ip));
    let placed = |hop: BoxedStrategy<Vec<u8>>| (hop, new_line(), comma());
    (placed(client_hop), prop::collection::vec(placed(proxy_hop.boxed()), 0..4)).prop_map(|(first, rest)| {
        let mut hops = vec![first];
        hops.extend(rest);
        hops
    })
}

fn header_kind() -> impl Strategy<Value = ForwardedHeader> {
    prop_oneof![Just(ForwardedHeader::XForwardedFor), Just(ForwardedHeader::Forwarded)]
}

/// A hop naming `ip`, as a proxy writes it in `header`.
fn hop_naming(header: ForwardedHeader, ip: IpAddr) -> BoxedStrategy<Vec<u8>> {
    match header {
        ForwardedHeader::Forwarded => for_pair(ip).prop_flat_map(|p| element(Some(p))).boxed(),
        _ => xff_hop(ip).boxed(),
    }
}

/// A client hop that is not an address.
fn non_address_hop(header: ForwardedHeader) -> BoxedStrategy<Vec<u8>> {
    match header {
        ForwardedHeader::Forwarded => forwarded_non_address().prop_flat_map(element).boxed(),
        _ => xff_non_address().boxed(),
    }
}

/// A request's key for `peer` and `header_lines`, through `ClientIp::key`.
fn key_for(client: &ClientIp, peer: IpAddr, name: &HeaderName, header_lines: &[Vec<u8>]) -> Option<Key> {
    let mut request = Request::new(());
    for line in header_lines {
        request.headers_mut().append(name.clone(), HeaderValue::from_bytes(line).unwrap());
    }
    request.extensions_mut().insert(PeerAddr(SocketAddr::new(peer, 4000)));
    client.key(&request.into_parts().0)
}

fn as_slices(lines: &[Vec<u8>]) -> Vec<&[u8]> {
    lines.iter().map(Vec::as_slice).collect()
}

/// A well-formed suffix whose client hop is `X`, after arbitrary client lines.
fn identified_case() -> impl Strategy<Value = (ForwardedHeader, IpAddr, Vec<Vec<u8>>, Hops)> {
    (header_kind(), untrusted_ip()).prop_flat_map(|(header, x)| {
        (Just(header), Just(x), prop::collection::vec(client_line(), 0..3), suffix(header, hop_naming(header, x)))
    })
}

/// A well-formed suffix whose client hop is not an address, after arbitrary client
/// lines.
fn unidentified_case() -> impl Strategy<Value = (ForwardedHeader, Vec<Vec<u8>>, Hops)> {
    header_kind().prop_flat_map(|header| {
        (Just(header), prop::collection::vec(client_line(), 0..3), suffix(header, non_address_hop(header)))
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(1_000))]

    /// Any bytes, any lines, either header, any peer: no panic; an untrusted peer is
    /// the client whatever it sends; the key is always the resolved address's.
    #[test]
    fn any_bytes_never_panic_and_an_untrusted_peer_is_itself(
        header in header_kind(),
        header_lines in prop::collection::vec(client_line(), 0..4),
        trusted_peer in trusted_ip(),
        untrusted_peer in untrusted_ip(),
    ) {
        let client = client(header);
        let name = name_of(header);
        let map = lines(&name, &as_slices(&header_lines));
        prop_assert_eq!(client.resolve(untrusted_peer, &map), Some(untrusted_peer.to_canonical()));
        prop_assert_eq!(
            key_for(&client, untrusted_peer, &name, &header_lines),
            Some(client.key_of(untrusted_peer))
        );
        let resolved = client.resolve(trusted_peer, &map);
        prop_assert_eq!(key_for(&client, trusted_peer, &name, &header_lines), resolved.map(|ip| client.key_of(ip)));
    }

    /// Arbitrary client lines, then the hops trusted proxies wrote whose rightmost
    /// untrusted one is `X`: the result is `X` (grouped by prefix in the key), the same
    /// as with no client bytes at all.
    #[test]
    fn the_rightmost_untrusted_hop_is_the_client_whatever_is_left_of_it(
        (header, x, client_lines, hops) in identified_case(),
        (ipv4_prefix, ipv6_prefix) in (0u8..=32, 0u8..=128),
        peer in trusted_ip(),
    ) {
        let client = ClientIp::builder()
            .trust_proxies(["10.0.0.0/8", "fd00::/8"])
            .forwarded_header(header)
            .ipv4_prefix(ipv4_prefix)
            .ipv6_prefix(ipv6_prefix)
            .build()
            .unwrap();
        let name = name_of(header);
        let header_lines = assemble(&client_lines, &hops);
        let shown: Vec<String> = header_lines.iter().map(|l| l.escape_ascii().to_string()).collect();
        prop_assert_eq!(client.resolve(peer, &lines(&name, &as_slices(&header_lines))), Some(x.to_canonical()), "{:?}", shown);
        prop_assert_eq!(key_for(&client, peer, &name, &header_lines), Some(client.key_of(x)), "{:?}", shown);
        let without_client = assemble(&[], &hops);
        prop_assert_eq!(client.resolve(peer, &lines(&name, &as_slices(&without_client))), Some(x.to_canonical()));
    }

    /// Arbitrary client lines, then hops trusted proxies wrote where the one that must
    /// be read is not an address: unidentified, whatever is left of it.
    #[test]
    fn a_client_hop_that_is_not_an_address_is_unidentified_whatever_is_left_of_it(
        (header, client_lines, hops) in unidentified_case(),
        peer in trusted_ip(),
    ) {
        let client = client(header);
        let name = name_of(header);
        let header_lines = assemble(&client_lines, &hops);
        let shown: Vec<String> = header_lines.iter().map(|l| l.escape_ascii().to_string()).collect();
        prop_assert_eq!(client.resolve(peer, &lines(&name, &as_slices(&header_lines))), None, "{:?}", shown);
        prop_assert_eq!(key_for(&client, peer, &name, &header_lines), None);
    }
}

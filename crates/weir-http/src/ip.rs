//! The client's IP address: the peer, or behind trusted proxies the rightmost
//! untrusted forwarded hop; IPv6 clients grouped by prefix.
//!
//! # Why the rightmost untrusted hop
//!
//! `X-Forwarded-For: a, b, c` lists the addresses each proxy saw, oldest first: the
//! client wrote `a` (or anything it liked), the first proxy appended what it saw, and
//! so on; the last proxy's own address is the TCP peer. Every hop left of the first
//! proxy you operate is the client's to choose, so the leftmost entry is whatever an
//! attacker wants it to be (a fresh fake address per request defeats a per-IP limit).
//! The only address no client can forge is the one your own proxies saw: walking from
//! the right, skip the hops that are your proxies; the first one that is not is the
//! client. A header from a peer that is not a trusted proxy is not read at all.
//!
//! # Reading from the right, as raw bytes
//!
//! A proxy that appends (nginx's `$proxy_add_x_forwarded_for`, a cloud load
//! balancer) keeps the client's own text on the line it appends its hop to. That text
//! may hold any byte a header value allows (obs-text, `0x80..=0xFF`, unbalanced
//! quotes, stray backslashes), so no line is decoded whole: each is read as bytes from
//! its right end, one hop at a time, and only the hops that are read are decoded.
//! `Forwarded` is tokenized from the right too: a quoted string is read from its
//! closing quote leftwards to the nearest unescaped opening quote, which for a
//! well-formed quoted string is where a left-to-right parser finds it, and which never
//! looks left of the string. So finding a well-formed hop (as a proxy writes it) reads
//! no byte left of the `,` before it, and once the client's hop is found reading
//! stops: **nothing left of the client's hop can change the result, whatever its
//! bytes.** What exactly is parsed is in
//! [`ClientIp::resolve`]'s docs; `tests/client_ip_headers.rs` holds it against
//! arbitrary bytes (proptest).
//!
//! # What your proxies must do
//!
//! The guarantee covers what the client writes *left of* the hop your proxy adds.
//! What a trusted proxy writes itself is trusted, so it must be well-formed:
//!
//! - **Configure the header your proxies write.** If they write `X-Forwarded-For`
//!   and the rule reads `Forwarded` (or the other way round), the header read is the
//!   client's own, whole.
//! - **A proxy that copies a client value into `Forwarded` must quote and escape it**
//!   (RFC 9110 §5.6.4: `\"` and `\\` inside a quoted string). A template such as
//!   `for=$remote_addr;host="$host"` that does not escape lets a `Host` of
//!   `x",for=6.6.6.6;a="` write a new element to the right of the real hop, and the
//!   client chooses its address; an unquoted copy (`host=%[req.hdr(host)]`) lets a
//!   `Host` of `x;for=6.6.6.6` make the element unreadable, so the client is
//!   unidentified. No parser can tell such an element from one the proxy meant.
//! - **A trusted hop that is not an address makes every client behind it
//!   unidentified**: `for=unknown` (what nginx writes for a Unix-socket peer) or an
//!   obfuscated identifier. Trust only proxies that write addresses.
//!
//! An unidentified client is answered by the limit's
//! [`MissingKey`](crate::MissingKey): `Deny` (the default) refuses it; `Shared`
//! puts it in one shared bucket; `Skip` lets it through unlimited, so under `Skip` a
//! client that can make itself unidentified (through a proxy that copies its values
//! unescaped, above) is not limited at all. Prefer `Deny` or `Shared` for a limit that
//! protects anything.

use crate::key::{Key, mask32, mask128};
use crate::request::{AsRequest, HeaderLines, Request};
use core::fmt;
use core::ops::ControlFlow;
use core::str::FromStr;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;

/// An IP network: an address and a prefix length (`10.0.0.0/8`, `fd00::/8`, or one
/// address, `192.0.2.7`, which is `/32` or `/128`).
///
/// ```
/// use weir_http::Cidr;
///
/// let net: Cidr = "10.0.0.0/8".parse()?;
/// assert!(net.contains("10.20.30.40".parse()?));
/// assert!(!net.contains("11.0.0.1".parse()?));
/// assert!(net.contains("::ffff:10.0.0.1".parse()?)); // IPv4-mapped IPv6 is IPv4
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Cidr {
    addr: IpAddr,
    prefix: u8,
}

impl Cidr {
    /// The network of `prefix` bits around `addr`, or an error if the prefix is
    /// longer than the address (33+ for IPv4, 129+ for IPv6). An IPv4-mapped IPv6
    /// address is taken as its IPv4 address.
    ///
    /// ```
    /// use std::net::{IpAddr, Ipv4Addr};
    /// use weir_http::Cidr;
    ///
    /// let net = Cidr::new(IpAddr::V4(Ipv4Addr::new(10, 0, 0, 0)), 8)?;
    /// assert_eq!(net.to_string(), "10.0.0.0/8");
    /// assert!(Cidr::new(IpAddr::V4(Ipv4Addr::new(10, 0, 0, 0)), 33).is_err());
    /// # Ok::<(), weir_http::CidrError>(())
    /// ```
    pub fn new(addr: IpAddr, prefix: u8) -> Result<Self, CidrError> {
        let addr = addr.to_canonical();
        let width = if addr.is_ipv4() { 32 } else { 128 };
        if prefix > width {
            return Err(CidrError { input: format!("{addr}/{prefix}") });
        }
        Ok(Self { addr, prefix })
    }

    /// Whether `ip` is in this network.
    pub fn contains(&self, ip: IpAddr) -> bool {
        match (self.addr, ip.to_canonical()) {
            (IpAddr::V4(net), IpAddr::V4(ip)) => {
                let mask = mask32(self.prefix);
                u32::from(net) & mask == u32::from(ip) & mask
            }
            (IpAddr::V6(net), IpAddr::V6(ip)) => {
                let mask = mask128(self.prefix);
                u128::from(net) & mask == u128::from(ip) & mask
            }
            _ => false,
        }
    }
}

impl fmt::Display for Cidr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.addr, self.prefix)
    }
}

/// Why a network did not parse, or a prefix is longer than its address.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CidrError {
    input: String,
}

impl fmt::Display for CidrError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "`{}` is not an IP network; write an address (`192.0.2.7`, `::1`) or an address and \
             prefix length (`10.0.0.0/8`, `fd00::/8`)",
            self.input
        )
    }
}

impl std::error::Error for CidrError {}

impl FromStr for Cidr {
    type Err = CidrError;

    fn from_str(s: &str) -> Result<Self, CidrError> {
        let error = || CidrError { input: s.to_owned() };
        let s = s.trim();
        let (addr, prefix) = match s.split_once('/') {
            Some((addr, prefix)) => {
                let addr: IpAddr = addr.parse().map_err(|_| error())?;
                (addr, Some(prefix.parse::<u8>().map_err(|_| error())?))
            }
            None => (s.parse().map_err(|_| error())?, None),
        };
        // A mapped address's prefix counts the 96 mapping bits.
        let (addr, prefix) = match (addr, prefix) {
            (IpAddr::V6(v6), Some(p)) if v6.to_ipv4_mapped().is_some() => {
                (addr, Some(p.checked_sub(96).ok_or_else(error)?))
            }
            _ => (addr, prefix),
        };
        let addr = addr.to_canonical();
        let prefix = prefix.unwrap_or(if addr.is_ipv4() { 32 } else { 128 });
        Self::new(addr, prefix).map_err(|_| error())
    }
}

/// Which forwarding header trusted proxies write.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[non_exhaustive]
pub enum ForwardedHeader {
    /// `X-Forwarded-For: client, proxy1, proxy2` (the default).
    #[default]
    XForwardedFor,
    /// RFC 7239 `Forwarded: for=client, for=proxy1` (the `for` parameter of each
    /// element, a token or a quoted string; `unknown` and obfuscated node names are
    /// not addresses, an obfuscated port is ignored). See [`ClientIp::resolve`].
    Forwarded,
}

/// The peer address of a connection, as a server that is not axum's or tonic's
/// puts it in each request's extensions for weir-tower (see weir-tower's
/// `PeerAddr` docs); a [`Request`] gives it as [`peer_ip`](Request::peer_ip).
///
/// ```
/// use std::net::SocketAddr;
/// use weir_http::{ClientIp, Key, PeerAddr};
///
/// let peer: SocketAddr = "192.0.2.7:50000".parse()?;
/// let PeerAddr(addr) = PeerAddr(peer);
/// assert_eq!(ClientIp::default().key_of(addr.ip()), Key::ip(peer.ip()));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct PeerAddr(pub SocketAddr);

/// How to find the client's IP address: the peer, or the rightmost untrusted hop of
/// a forwarding header when the peer is a trusted proxy; and how IPv6 clients are
/// grouped (one key per `/64` by default: a single host usually holds a whole `/64`,
/// and would otherwise have 2⁶⁴ keys to rotate through).
///
/// [`ClientIp::default()`] is the peer address, no proxy trusted; anything else is
/// built with [`ClientIp::builder`], whose [`build`](ClientIpBuilder::build) checks
/// every option.
///
/// ```
/// use weir_http::{ClientIp, ForwardedHeader};
///
/// let client = ClientIp::builder()
///     .trust_proxies(["10.0.0.0/8", "fd00::/8"])
///     .forwarded_header(ForwardedHeader::XForwardedFor)
///     .ipv6_prefix(56)
///     .build()?;
/// let peer = "10.0.0.2".parse()?;
/// let headers = [("x-forwarded-for", "203.0.113.9, 198.51.100.4, 10.0.0.7")];
/// // 10.0.0.7 is a trusted proxy; 198.51.100.4 is not: it is the client. The
/// // leftmost entry is whatever the client wrote.
/// assert_eq!(client.resolve(peer, &headers), Some("198.51.100.4".parse()?));
/// // A header from an untrusted peer is ignored.
/// assert_eq!(client.resolve("192.0.2.1".parse()?, &headers), Some("192.0.2.1".parse()?));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone)]
pub struct ClientIp {
    trusted: Arc<[Cidr]>,
    header: ForwardedHeader,
    ipv4_prefix: u8,
    ipv6_prefix: u8,
}

/// Which [`ClientIpBuilder`] option was refused, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum ClientIpError {
    /// [`trust_proxies`](ClientIpBuilder::trust_proxies): an entry that is not a
    /// network.
    Proxy(CidrError),
    /// [`ipv4_prefix`](ClientIpBuilder::ipv4_prefix) above 32, or
    /// [`ipv6_prefix`](ClientIpBuilder::ipv6_prefix) above 128.
    Prefix {
        /// `4` (`ipv4_prefix`) or `6` (`ipv6_prefix`).
        version: u8,
        /// The prefix asked for.
        prefix: u8,
    },
}

impl fmt::Display for ClientIpError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Proxy(e) => write!(f, "trust_proxies: {e}"),
            Self::Prefix { version, prefix } => {
                let max = if *version == 4 { 32 } else { 128 };
                write!(
                    f,
                    "ipv{version}_prefix: a prefix of {prefix} bits is longer than an IPv{version} address; use at \
                     most {max}"
                )
            }
        }
    }
}

impl std::error::Error for ClientIpError {}

/// The options of a [`ClientIp`]: setters that never fail, checked together by
/// [`build`](Self::build). From [`ClientIp::builder`].
#[derive(Debug, Clone)]
#[must_use = "a builder does nothing until `build` is called"]
pub struct ClientIpBuilder {
    proxies: Vec<String>,
    networks: Vec<Cidr>,
    header: ForwardedHeader,
    ipv4_prefix: u8,
    ipv6_prefix: u8,
}

impl ClientIpBuilder {
    /// Trusts these proxies (addresses or networks, as text: `10.0.0.0/8`,
    /// `192.0.2.7`, `fd00::/8`): when the peer is one of them, the forwarding
    /// header names the client. Replaces any proxies given to this setter before;
    /// adds to the networks of [`trust_networks`](Self::trust_networks). Each entry
    /// is parsed by [`build`](Self::build). Default: none.
    pub fn trust_proxies<I, S>(self, proxies: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        Self { proxies: proxies.into_iter().map(|p| p.as_ref().to_owned()).collect(), ..self }
    }

    /// Trusts these networks, already parsed (see
    /// [`trust_proxies`](Self::trust_proxies)). Replaces any networks given to this
    /// setter before. Default: none.
    pub fn trust_networks(self, networks: impl IntoIterator<Item = Cidr>) -> Self {
        Self { networks: networks.into_iter().collect(), ..self }
    }

    /// Which header the trusted proxies write. Default: `X-Forwarded-For`.
    pub fn forwarded_header(self, header: ForwardedHeader) -> Self {
        Self { header, ..self }
    }

    /// Groups IPv6 clients by their first `prefix` bits (0 ..= 128; 128 for one
    /// key per address). Default: 64.
    pub fn ipv6_prefix(self, prefix: u8) -> Self {
        Self { ipv6_prefix: prefix, ..self }
    }

    /// Groups IPv4 clients by their first `prefix` bits (0 ..= 32). Default: 32, one
    /// key per address.
    pub fn ipv4_prefix(self, prefix: u8) -> Self {
        Self { ipv4_prefix: prefix, ..self }
    }

    /// The client-address rule, or the first option out of its range: an IPv4
    /// prefix above 32, an IPv6 prefix above 128, a trusted proxy that is not a
    /// network.
    ///
    /// ```
    /// use weir_http::{ClientIp, ClientIpError};
    ///
    /// let e = ClientIp::builder().ipv4_prefix(33).build().unwrap_err();
    /// assert_eq!(e, ClientIpError::Prefix { version: 4, prefix: 33 });
    /// assert!(e.to_string().starts_with("ipv4_prefix: "));
    /// let e = ClientIp::builder().trust_proxies(["10.0.0.0/99"]).build().unwrap_err();
    /// assert!(e.to_string().starts_with("trust_proxies: "));
    /// ```
    pub fn build(self) -> Result<ClientIp, ClientIpError> {
        if self.ipv4_prefix > 32 {
            return Err(ClientIpError::Prefix { version: 4, prefix: self.ipv4_prefix });
        }
        if self.ipv6_prefix > 128 {
            return Err(ClientIpError::Prefix { version: 6, prefix: self.ipv6_prefix });
        }
        let mut trusted = self.networks;
        for proxy in &self.proxies {
            trusted.push(proxy.parse::<Cidr>().map_err(ClientIpError::Proxy)?);
        }
        Ok(ClientIp {
            trusted: trusted.into(),
            header: self.header,
            ipv4_prefix: self.ipv4_prefix,
            ipv6_prefix: self.ipv6_prefix,
        })
    }
}

impl ClientIp {
    /// The options, at their defaults: the peer address, no proxy trusted,
    /// `X-Forwarded-For`, IPv4 clients by address, IPv6 clients by `/64`.
    pub fn builder() -> ClientIpBuilder {
        ClientIpBuilder {
            proxies: Vec::new(),
            networks: Vec::new(),
            header: ForwardedHeader::XForwardedFor,
            ipv4_prefix: 32,
            ipv6_prefix: 64,
        }
    }

    /// The trusted proxies.
    pub fn trusted_proxies(&self) -> &[Cidr] {
        &self.trusted
    }

    fn is_trusted(&self, ip: IpAddr) -> bool {
        self.trusted.iter().any(|net| net.contains(ip))
    }

    /// The client's address for a request from `peer` with `headers`: `peer` itself
    /// unless it is a trusted proxy; then, walking the forwarding header from the
    /// right, the first hop that is not a trusted proxy (or the leftmost hop, if all
    /// are; `peer`, if there is no hop). `None` when a hop that must be read is not
    /// an address: the client cannot be told.
    ///
    /// # What is read
    ///
    /// Only the configured header, and only from a trusted peer: its lines from the
    /// last (the nearest proxy's) to the first, each line from its right end, hop by
    /// hop, until a hop that is not a trusted proxy. A line is raw bytes; a hop is
    /// decoded only when it is read.
    ///
    /// - `X-Forwarded-For`: hops are separated by `,`, with optional spaces and tabs
    ///   around each.
    /// - `Forwarded` (RFC 7239): elements are separated by `,` and the `name=value`
    ///   pairs of an element by `;`, both only outside quoted strings (RFC 9110
    ///   §5.6.4: `"…"`, in which `\x` stands for `x`, so `for="\10.0.0.1"` is
    ///   `10.0.0.1`). An element's hop is its one `for` pair (the name in any case),
    ///   whose value is a token or a quoted string. Spaces and tabs around `,`, `;`
    ///   and `=` are allowed.
    /// - A hop is an address: `192.0.2.1`, `2001:db8::1` or `[2001:db8::1]`; an IPv4
    ///   or bracketed IPv6 address may carry a port, digits (`192.0.2.1:8080`,
    ///   `[2001:db8::1]:443`) or obfuscated (`192.0.2.1:_p0rt`, RFC 7239 §6.3), which
    ///   is ignored. An IPv4-mapped IPv6 address is its IPv4 address.
    /// - An empty list element (`a, , b`, or a line of only whitespace) is skipped,
    ///   as RFC 9110 §5.6.1 has a recipient do.
    ///
    /// # What holds, whatever the bytes of the headers
    ///
    /// - From a peer that is not a trusted proxy, the result is the peer.
    /// - Nothing left of the hop that decides is read: no byte of it, on its line or
    ///   on an earlier line, can change the result. Behind proxies that append, a
    ///   client is its own address whatever it sends before it (a byte `0x80..=0xFF`,
    ///   an unbalanced quote, a quoted-looking `;for=` or a stray backslash).
    /// - `None` ("unidentified") where the hop that must be read is not an address:
    ///   `unknown`, an obfuscated node (`_hidden`), non-ASCII bytes, a zone index,
    ///   garbage; in `Forwarded` also an element with no `for` or with two, a pair
    ///   that is not `token=value`, or a quote nothing closes. The limit's
    ///   [`MissingKey`](crate::MissingKey) choice applies; never an address the client
    ///   chose.
    /// - A host in a trusted network is trusted as a proxy: what it forwards is read.
    ///   Trust only the networks of your proxies.
    /// - No panic, no allocation; each byte read is looked at a bounded number of
    ///   times.
    ///
    /// ```
    /// use weir_http::{ClientIp, ForwardedHeader};
    ///
    /// let proxy = "10.0.0.1".parse()?;
    /// let xff = ClientIp::builder().trust_proxies(["10.0.0.0/8"]).build()?;
    /// // The client sent `\xff`; the proxy appended the address it saw.
    /// let headers = [("x-forwarded-for", &b"\xff, 203.0.113.5"[..])];
    /// assert_eq!(xff.resolve(proxy, &headers), Some("203.0.113.5".parse()?));
    ///
    /// let forwarded = ClientIp::builder()
    ///     .trust_proxies(["10.0.0.0/8"])
    ///     .forwarded_header(ForwardedHeader::Forwarded)
    ///     .build()?;
    /// // The proxy quoted the client's Host: the `;for=` inside it is text.
    /// let headers = [("forwarded", r#"host="x;for=6.6.6.6;y=";for=203.0.113.5"#)];
    /// assert_eq!(forwarded.resolve(proxy, &headers), Some("203.0.113.5".parse()?));
    /// let headers = [("forwarded", r#"for="unknown", for=10.0.0.7"#)];
    /// assert_eq!(forwarded.resolve(proxy, &headers), None);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn resolve<M>(&self, peer: IpAddr, headers: &(impl HeaderLines<M> + ?Sized)) -> Option<IpAddr> {
        self.resolve_lines(peer, |name, each| headers.lines_rev(name, each))
    }

    /// [`resolve`](Self::resolve), the header's lines given by `lines_rev` (its
    /// name, then a function to call with each line from the last, until it breaks).
    fn resolve_lines(
        &self,
        peer: IpAddr,
        lines_rev: impl FnOnce(&str, &mut dyn FnMut(&[u8]) -> ControlFlow<()>),
    ) -> Option<IpAddr> {
        let peer = peer.to_canonical();
        if !self.is_trusted(peer) {
            return Some(peer);
        }
        let name = match self.header {
            ForwardedHeader::XForwardedFor => "x-forwarded-for",
            ForwardedHeader::Forwarded => "forwarded",
        };
        // Header lines in reverse, each line's hops in reverse: the hops from the
        // nearest proxy outwards. Each line is read as raw bytes, lazily from its right
        // end, and reading stops at the client's hop: nothing left of it is looked at.
        let mut client = Some(peer);
        lines_rev(name, &mut |line| {
            for hop in hops(self.header, line) {
                client = hop;
                match hop {
                    Some(ip) if self.is_trusted(ip) => {}
                    _ => return ControlFlow::Break(()),
                }
            }
            ControlFlow::Continue(())
        });
        client
    }

    /// The client's key: its address, grouped by the prefix for its family.
    pub fn key_of(&self, client: IpAddr) -> Key {
        match client.to_canonical() {
            ip @ IpAddr::V4(_) => Key::ip_grouped(ip, self.ipv4_prefix),
            ip @ IpAddr::V6(_) => Key::ip_grouped(ip, self.ipv6_prefix),
        }
    }

    /// The request's key: the client resolved from its peer address and headers.
    /// `None` if the request carries no peer address or the client cannot be told.
    /// Takes a [`Request`], or a framework's request its adapter reads
    /// ([`AsRequest`]: weir-tower's `http::request::Parts`).
    pub fn key<M>(&self, request: &impl AsRequest<M>) -> Option<Key> {
        self.key_of_request(&request.as_request())
    }

    /// [`key`](Self::key) of a [`Request`].
    #[inline]
    pub(crate) fn key_of_request<R: Request + ?Sized>(&self, request: &R) -> Option<Key> {
        let peer = request.peer_ip()?;
        let peer = peer.to_canonical();
        if self.trusted.is_empty() || !self.is_trusted(peer) {
            return Some(self.key_of(peer));
        }
        Some(self.key_of(self.resolve_lines(peer, |name, each| request.header_lines_rev(name, each))?))
    }
}

/// The hops of one header line, from the right: each the address it names, or `None`
/// where it names none. Empty list elements (only whitespace) are skipped, as RFC 9110
/// §5.6.1 has a recipient do. Lazy: a hop is parsed only when it is asked for, and
/// finding a well-formed one reads no byte left of the separator before it.
fn hops(header: ForwardedHeader, line: &[u8]) -> impl Iterator<Item = Option<IpAddr>> + '_ {
    let (x_forwarded_for, forwarded) = match header {
        ForwardedHeader::XForwardedFor => (Some(line), None),
        ForwardedHeader::Forwarded => (None, Some(line)),
    };
    let x_forwarded_for = x_forwarded_for.into_iter().flat_map(|line| {
        line.rsplit(|&b| b == b',')
            .map(trim_ows)
            .filter(|hop| !hop.is_empty())
            .map(|hop| parse_node(hop.iter().copied()))
    });
    let forwarded = forwarded.into_iter().flat_map(|line| {
        RightToLeft::new(line, b',').filter_map(|element| match element {
            Ok(element) => {
                let element = trim_ows(element);
                (!element.is_empty()).then(|| forwarded_for(element))
            }
            Err(Unbalanced) => Some(None),
        })
    });
    x_forwarded_for.chain(forwarded)
}

/// `bytes` without the optional whitespace (RFC 9110 `OWS`: spaces and tabs) at either
/// end.
fn trim_ows(mut bytes: &[u8]) -> &[u8] {
    while let [b' ' | b'\t', rest @ ..] = bytes {
        bytes = rest;
    }
    while let [rest @ .., b' ' | b'\t'] = bytes {
        bytes = rest;
    }
    bytes
}

/// A quote with no quote to open it, or a quoted string whose closing quote is escaped.
#[derive(Debug)]
struct Unbalanced;

/// The parts of `bytes` between `separator`s outside quoted strings, from the right.
///
/// Reading from the right, a `"` outside a quoted string closes one; the string opens
/// at the nearest `"` to its left that is not escaped, that is, not preceded by an odd
/// run of backslashes (in a well-formed quoted string, RFC 9110 §5.6.4, a backslash
/// always starts a quoted-pair, so a run of `n` backslashes before a quote is `n / 2`
/// escaped backslashes, and one more escapes the quote when `n` is odd). This reads a
/// well-formed quoted string exactly as a left-to-right parser does, and it never
/// looks further left than the byte before the string's opening quote (in a pair, its
/// `=`), nor past the separator that ends a part: a part is found from the bytes right
/// of that separator alone. Each byte is looked at a bounded number of times: linear
/// in the length of `bytes`.
///
/// A quote that nothing opens, or an escaped closing quote, ends the iteration with
/// [`Unbalanced`].
struct RightToLeft<'a> {
    /// What is left to read, or `None` once the leftmost part (or an error) was given.
    rest: Option<&'a [u8]>,
    separator: u8,
}

impl<'a> RightToLeft<'a> {
    fn new(bytes: &'a [u8], separator: u8) -> Self {
        Self { rest: Some(bytes), separator }
    }
}

impl<'a> Iterator for RightToLeft<'a> {
    type Item = Result<&'a [u8], Unbalanced>;

    fn next(&mut self) -> Option<Self::Item> {
        let bytes = self.rest?;
        let mut i = bytes.len();
        while i > 0 {
            i -= 1;
            if bytes[i] == self.separator {
                self.rest = Some(&bytes[..i]);
                return Some(Ok(&bytes[i + 1..]));
            }
            if bytes[i] == b'"' {
                match opening_quote(bytes, i) {
                    Some(open) => i = open,
                    None => {
                        self.rest = None;
                        return Some(Err(Unbalanced));
                    }
                }
            }
        }
        self.rest = None;
        Some(Ok(bytes))
    }
}

/// The number of backslashes right before `bytes[at]`.
fn backslashes_before(bytes: &[u8], at: usize) -> usize {
    bytes[..at].iter().rev().take_while(|&&b| b == b'\\').count()
}

/// The index of the quote that opens the quoted string closed by the quote at
/// `close`: the nearest unescaped quote left of it. `None` when the quote at `close`
/// is itself escaped, or no quote opens it.
fn opening_quote(bytes: &[u8], close: usize) -> Option<usize> {
    if !backslashes_before(bytes, close).is_multiple_of(2) {
        return None;
    }
    let mut i = close;
    while i > 0 {
        i -= 1;
        if bytes[i] == b'"' {
            let run = backslashes_before(bytes, i);
            if run.is_multiple_of(2) {
                return Some(i);
            }
            // An escaped quote: its backslashes are text of the string too.
            i -= run;
        }
    }
    None
}

/// A parameter value: a token as written, or the content of a quoted string, whose
/// quoted-pairs (`\x`) stand for `x`.
#[derive(Clone, Copy)]
struct Value<'a> {
    bytes: &'a [u8],
    quoted: bool,
}

impl<'a> Value<'a> {
    /// A token (any bytes but `"`: what a proxy writes unquoted is read leniently, as
    /// `for=[2001:db8::1]`), or exactly one well-formed quoted string. `None` for
    /// anything else (a quote inside a token, text after a closing quote, a quoted
    /// string that does not close).
    fn parse(value: &'a [u8]) -> Option<Self> {
        match value {
            [b'"', content @ .., b'"'] => {
                let mut escaped = false;
                for &b in content {
                    match (escaped, b) {
                        (true, _) => escaped = false,
                        (false, b'\\') => escaped = true,
                        (false, b'"') => return None,
                        (false, _) => {}
                    }
                }
                (!escaped).then_some(Self { bytes: content, quoted: true })
            }
            _ if value.contains(&b'"') => None,
            _ => Some(Self { bytes: value, quoted: false }),
        }
    }

    /// The value's bytes, unescaped.
    fn unescaped(self) -> impl Iterator<Item = u8> + 'a {
        let mut bytes = self.bytes.iter().copied();
        core::iter::from_fn(move || match bytes.next()? {
            b'\\' if self.quoted => bytes.next(),
            b => Some(b),
        })
    }
}

/// Whether `b` may be part of a token (RFC 9110 §5.6.2).
fn is_tchar(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b)
}

/// The address named by the `for` parameter of one `Forwarded` element (RFC 7239
/// §4): pairs `name=value` separated by `;` outside quoted strings (empty pairs and
/// whitespace around `;` and `=` allowed), the name a token matched without regard to
/// case, the value a token or a quoted string. `None` when the element has no `for`,
/// more than one, a pair that is not `token=value`, or a `for` that is not an address.
fn forwarded_for(element: &[u8]) -> Option<IpAddr> {
    let mut node = None;
    for pair in RightToLeft::new(element, b';') {
        let pair = trim_ows(pair.ok()?);
        if pair.is_empty() {
            continue;
        }
        let equals = pair.iter().position(|&b| b == b'=')?;
        let name = trim_ows(&pair[..equals]);
        if name.is_empty() || !name.iter().copied().all(is_tchar) {
            return None;
        }
        let value = Value::parse(trim_ows(&pair[equals + 1..]))?;
        if name.eq_ignore_ascii_case(b"for") {
            if node.is_some() {
                return None;
            }
            node = Some(value);
        }
    }
    parse_node(node?.unescaped())
}

/// The longest text of an address this parser accepts: an IPv6 address with an IPv4
/// tail, `ffff:ffff:ffff:ffff:ffff:ffff:255.255.255.255`.
const ADDRESS_MAX: usize = 45;

/// A node as an address (RFC 7239 §6, and what `X-Forwarded-For` writers use):
/// `192.0.2.1`, `2001:db8::1`, `[2001:db8::1]`, each bracketed or IPv4 one with an
/// optional port, `192.0.2.1:80` or `[2001:db8::1]:80`, or an obfuscated port,
/// `192.0.2.1:_p0rt`. `None` for anything else: `unknown`, an obfuscated node
/// (`_hidden`), a zone index, non-ASCII bytes. Reads the node once, keeping at most
/// [`ADDRESS_MAX`] bytes of it.
fn parse_node(mut node: impl Iterator<Item = u8>) -> Option<IpAddr> {
    fn parse<T: FromStr>(text: &[u8]) -> Option<T> {
        core::str::from_utf8(text).ok()?.parse().ok()
    }
    let mut address = [0u8; ADDRESS_MAX];
    let mut len = 0;
    let first = node.next()?;
    if first == b'[' {
        loop {
            match node.next()? {
                b']' => break,
                b => {
                    *address.get_mut(len)? = b;
                    len += 1;
                }
            }
        }
        let ip = IpAddr::V6(parse::<std::net::Ipv6Addr>(&address[..len])?);
        return match node.next() {
            None => Some(ip.to_canonical()),
            Some(b':') => is_port(node).then(|| ip.to_canonical()),
            Some(_) => None,
        };
    }
    let mut next = Some(first);
    while let Some(b) = next {
        // A colon after an IPv4 address starts its port; any other is part of an
        // IPv6 address.
        if b == b':'
            && let Some(v4) = parse::<std::net::Ipv4Addr>(&address[..len])
        {
            return is_port(node).then_some(IpAddr::V4(v4));
        }
        *address.get_mut(len)? = b;
        len += 1;
        next = node.next();
    }
    parse::<IpAddr>(&address[..len]).map(|ip| ip.to_canonical())
}

/// Whether the rest of a node is a port (RFC 7239 §6: `1*5DIGIT`, or an obfuscated
/// port, `_` then letters, digits, `.`, `_`, `-`).
fn is_port(mut port: impl Iterator<Item = u8>) -> bool {
    match port.next() {
        Some(b'_') => {
            let mut any = false;
            for b in port {
                if !(b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-')) {
                    return false;
                }
                any = true;
            }
            any
        }
        Some(b) if b.is_ascii_digit() => {
            port.try_fold(1, |digits, b| (b.is_ascii_digit() && digits < 5).then_some(digits + 1)).is_some()
        }
        _ => false,
    }
}

impl fmt::Debug for ClientIp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ClientIp")
            .field("trusted", &self.trusted)
            .field("header", &self.header)
            .field("ipv4_prefix", &self.ipv4_prefix)
            .field("ipv6_prefix", &self.ipv6_prefix)
            .finish()
    }
}

impl Default for ClientIp {
    /// The peer address, no proxy trusted; IPv4 clients by address, IPv6 clients by
    /// `/64`.
    fn default() -> Self {
        Self { trusted: Arc::from([]), header: ForwardedHeader::XForwardedFor, ipv4_prefix: 32, ipv6_prefix: 64 }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    fn headers(name: &str, lines: &[&str]) -> Vec<(String, String)> {
        lines.iter().map(|line| (name.to_owned(), (*line).to_owned())).collect()
    }

    #[test]
    fn networks_parse_and_contain() {
        assert_eq!("10.0.0.0/8".parse::<Cidr>().unwrap().to_string(), "10.0.0.0/8");
        assert_eq!("::1".parse::<Cidr>().unwrap().to_string(), "::1/128");
        assert_eq!("::ffff:10.0.0.0/104".parse::<Cidr>().unwrap().to_string(), "10.0.0.0/8");
        for bad in ["10.0.0.0/33", "::/129", "x", "10.0.0.0/", "10.0.0.0/-1", "::ffff:10.0.0.0/90"] {
            assert!(bad.parse::<Cidr>().is_err(), "{bad}");
        }
        let net: Cidr = "2001:db8::/32".parse().unwrap();
        assert!(net.contains(ip("2001:db8:ffff::1")));
        assert!(!net.contains(ip("2001:db9::1")));
        assert!(!net.contains(ip("10.0.0.1")));
        assert!("0.0.0.0/0".parse::<Cidr>().unwrap().contains(ip("1.2.3.4")));
    }

    #[test]
    fn an_untrusted_peer_is_the_client_whatever_it_sends() {
        let client = ClientIp::builder().trust_proxies(["10.0.0.1"]).build().unwrap();
        let spoofed = headers("x-forwarded-for", &["1.2.3.4"]);
        assert_eq!(client.resolve(ip("192.0.2.9"), &spoofed), Some(ip("192.0.2.9")));
        // With no proxy trusted at all, the header is never read.
        assert_eq!(ClientIp::default().resolve(ip("10.0.0.1"), &spoofed), Some(ip("10.0.0.1")));
    }

    #[test]
    fn proxies_as_text_and_as_networks_are_all_trusted() {
        let client = ClientIp::builder()
            .trust_networks(["10.0.0.0/8".parse().unwrap()])
            .trust_proxies(["192.0.2.1"])
            .build()
            .unwrap();
        let shown: Vec<String> = client.trusted_proxies().iter().map(ToString::to_string).collect();
        assert_eq!(shown, ["10.0.0.0/8", "192.0.2.1/32"]);
        let e = ClientIp::builder().trust_proxies(["10.0.0.0/8", "nonsense"]).build().unwrap_err();
        assert!(matches!(e, ClientIpError::Proxy(_)), "{e}");
        assert!(e.to_string().starts_with("trust_proxies: `nonsense`"), "{e}");
    }

    #[test]
    fn the_client_is_the_rightmost_untrusted_hop() {
        let client = ClientIp::builder().trust_proxies(["10.0.0.0/8"]).build().unwrap();
        let h = headers("x-forwarded-for", &["6.6.6.6, 203.0.113.5", "10.1.1.1, 10.2.2.2"]);
        assert_eq!(client.resolve(ip("10.0.0.1"), &h), Some(ip("203.0.113.5")));
        // All hops trusted: the leftmost is the client.
        let h = headers("x-forwarded-for", &["10.9.9.9, 10.2.2.2"]);
        assert_eq!(client.resolve(ip("10.0.0.1"), &h), Some(ip("10.9.9.9")));
        // No header: the proxy itself.
        assert_eq!(client.resolve(ip("10.0.0.1"), &Vec::<(String, String)>::new()), Some(ip("10.0.0.1")));
        // Ports and brackets.
        let h = headers("x-forwarded-for", &["[2001:db8::7]:443, 203.0.113.5:8080"]);
        assert_eq!(client.resolve(ip("10.0.0.1"), &h), Some(ip("203.0.113.5")));
        let h = headers("x-forwarded-for", &["[2001:db8::7]:443"]);
        assert_eq!(client.resolve(ip("10.0.0.1"), &h), Some(ip("2001:db8::7")));
        // Garbage where the client must be read: unknown.
        let h = headers("x-forwarded-for", &["1.2.3.4, nonsense"]);
        assert_eq!(client.resolve(ip("10.0.0.1"), &h), None);
        // Garbage left of the client is never read.
        let h = headers("x-forwarded-for", &["nonsense, 1.2.3.4"]);
        assert_eq!(client.resolve(ip("10.0.0.1"), &h), Some(ip("1.2.3.4")));
    }

    #[test]
    fn forwarded_elements_are_read_by_their_for_parameter() {
        let client = ClientIp::builder()
            .trust_proxies(["10.0.0.0/8"])
            .forwarded_header(ForwardedHeader::Forwarded)
            .build()
            .unwrap();
        let h = headers(
            "forwarded",
            &["for=6.6.6.6, For=\"[2001:db8:cafe::17]:4711\";proto=https", "by=10.0.0.9;for=10.3.3.3"],
        );
        assert_eq!(client.resolve(ip("10.0.0.1"), &h), Some(ip("2001:db8:cafe::17")));
        let h = headers("forwarded", &["for=unknown"]);
        assert_eq!(client.resolve(ip("10.0.0.1"), &h), None);
        let h = headers("forwarded", &["for=_hidden, for=192.0.2.60"]);
        assert_eq!(client.resolve(ip("10.0.0.1"), &h), Some(ip("192.0.2.60")));
        // X-Forwarded-For is not read when Forwarded is configured.
        let h = headers("x-forwarded-for", &["6.6.6.6"]);
        assert_eq!(client.resolve(ip("10.0.0.1"), &h), Some(ip("10.0.0.1")));
    }

    #[test]
    fn keys_group_by_family_prefix() {
        let client = ClientIp::builder().ipv4_prefix(24).ipv6_prefix(48).build().unwrap();
        assert_eq!(client.key_of(ip("192.0.2.77")).to_string(), "192.0.2.0/24");
        assert_eq!(client.key_of(ip("::ffff:192.0.2.77")).to_string(), "192.0.2.0/24");
        assert_eq!(client.key_of(ip("2001:db8:1:2::1")).to_string(), "2001:db8:1::/48");
        assert_eq!(
            ClientIp::builder().ipv6_prefix(129).build().unwrap_err(),
            ClientIpError::Prefix { version: 6, prefix: 129 }
        );
        assert_eq!(
            ClientIp::builder().ipv4_prefix(33).build().unwrap_err(),
            ClientIpError::Prefix { version: 4, prefix: 33 }
        );
        let all = ClientIp::builder().ipv4_prefix(32).ipv6_prefix(128).build().unwrap();
        assert_eq!(all.key_of(ip("2001:db8::1")).to_string(), "2001:db8::1");
        assert_eq!(ClientIp::default().key_of(ip("2001:db8::1")).to_string(), "2001:db8::/64");
    }

    #[test]
    fn the_peer_is_read_from_the_request() {
        use crate::test_support::TestRequest;
        assert_eq!(ClientIp::default().key(&TestRequest::get("/")), None);
        let request = TestRequest::get("/").peer("192.0.2.1");
        assert_eq!(ClientIp::default().key(&request), Some(Key::ip(ip("192.0.2.1"))));
        let behind = ClientIp::builder().trust_proxies(["192.0.2.0/24"]).build().unwrap();
        let request = request.header("x-forwarded-for", "203.0.113.9, 192.0.2.8");
        assert_eq!(behind.key(&request), Some(Key::ip(ip("203.0.113.9"))));
    }
}

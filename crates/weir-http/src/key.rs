//! [`Key`]: who a request counts against, and [`KeySource`]: where it is read from.

use crate::ip::ClientIp;
use crate::request::{AsRequest, Request, is_header_name};
use core::fmt;
use core::hash::{Hash, Hasher};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::sync::Arc;

/// Bytes a key keeps inline: every IP key, and API keys and user ids up to 45 bytes,
/// are built without allocating.
const INLINE: usize = 46;

/// The most bytes of a key's payload kept as they are. An API key, user id or custom
/// key longer than this is kept as its 128-bit hash (see [`Key`], "Long keys"), or,
/// for a header whose source says [`LongKeys::Refuse`], refused with a 400.
pub const MAX_KEY_BYTES: usize = 128;

/// The flag in a key's tag byte that says its payload is the hash of a long key.
const HASHED: u8 = 0x80;

/// What a source does with a header value longer than [`MAX_KEY_BYTES`]: keep its
/// 128-bit hash ([`LongKeys::Hash`], the default: the client is still told apart from
/// every other, up to the hash, and costs no more than a short key), or refuse the
/// request ([`LongKeys::Refuse`]: `400 Bad Request`, with a problem+json `detail`
/// that names the header and the size, whatever the limit's [`MissingKey`] says: a
/// refused key is not a missing one). weir-rl-core's type, shared with weir-redis.
pub use weir_rl_core::LongKeys;

/// What a key is made of; the first byte of its encoding, so keys of different kinds
/// never collide in one store.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum KeyKind {
    /// A client IP address (an IPv6 address grouped by its prefix).
    Ip,
    /// The value of an API-key header.
    ApiKey,
    /// An authenticated user.
    User,
    /// Every request: one key for all.
    Global,
    /// A key built by your own code.
    Custom,
}

impl KeyKind {
    const fn tag(self) -> u8 {
        match self {
            Self::Ip => 1,
            Self::ApiKey => 2,
            Self::User => 3,
            Self::Global => 4,
            Self::Custom => 5,
        }
    }
}

/// Who a request counts against: a client IP address (IPv6 grouped by prefix), an API
/// key, a user, one global key, or bytes of your own.
///
/// Keys of different kinds never collide (an API key that spells an IP address is a
/// different key). IP keys, and other keys up to 45 bytes, are kept inline: building
/// and comparing them allocates nothing.
///
/// # Long keys
///
/// A client chooses its API key (or any header value), and a key is kept wherever
/// the client is counted (a store, the tier cache, a throttle's map) and sent (a
/// remote store's key name). So a key costs at most [`MAX_KEY_BYTES`] bytes of
/// payload: an API key, user id or custom key longer than that is kept as its
/// 128-bit hash ([`weir_rl_core::long_key_hash`]: the first 16 bytes of its SHA-256),
/// the same on every instance of a fleet that shares a Redis, so a fleet maps the
/// same client to the same key. Such a key says
/// [`is_hashed`](Self::is_hashed); its [`payload`](Self::payload) is the 16 bytes
/// of the hash; its kind is kept (a hashed API key never equals a hashed user id,
/// nor any short key). Distinct long keys are distinct keys up to the hash: among
/// 2³² long keys, any two share a hash with a chance below 2⁻⁶⁴, and choosing a key
/// that lands on another client's would take a SHA-256 collision. The hash has no
/// secret, so it hides nothing and is no MAC: it bounds memory and keeps a fleet
/// consistent. **A tier
/// lookup sees this key**: for an API key over
/// [`MAX_KEY_BYTES`], only its hash; a lookup that needs the whole key must then use
/// keys no longer than that (or refuse longer ones with [`LongKeys::Refuse`]).
///
/// ```
/// use weir_http::{Key, MAX_KEY_BYTES};
///
/// let long = vec![b'k'; 100 * 1024];
/// let key = Key::api_key(&long);
/// assert!(key.is_hashed());
/// assert_eq!(key.payload().len(), 16);
/// assert_eq!(key, Key::api_key(&long)); // the same key on every instance
/// assert_ne!(key, Key::api_key(&long[1..]));
/// assert!(!Key::api_key(&long[..MAX_KEY_BYTES]).is_hashed());
/// ```
///
/// ```
/// use std::net::IpAddr;
/// use weir_http::{Key, KeyKind};
///
/// let ip: IpAddr = "2001:db8::1".parse()?;
/// let grouped = Key::ip_grouped(ip, 64);
/// assert_eq!(grouped, Key::ip_grouped("2001:db8::ffff:2".parse()?, 64)); // same /64
/// assert_eq!(grouped.to_string(), "2001:db8::/64");
/// assert_eq!(Key::api_key(b"k-123").kind(), KeyKind::ApiKey);
/// assert_ne!(Key::user("1.2.3.4"), Key::ip("1.2.3.4".parse()?));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone)]
pub struct Key(Repr);

#[derive(Clone)]
enum Repr {
    /// `bytes[..len]` is the encoding: the kind's tag, then the kind's bytes (for an
    /// IP: the prefix length, then 4 or 16 address bytes).
    Inline { len: u8, bytes: [u8; INLINE] },
    /// The same encoding, for keys longer than `INLINE`.
    Heap(Box<[u8]>),
}

impl Key {
    /// The key of `kind` made of `payload`: inline up to `INLINE - 1` bytes, on the
    /// heap up to [`MAX_KEY_BYTES`], else its hash (inline).
    fn encode(kind: KeyKind, payload: &[u8]) -> Self {
        if payload.len() > MAX_KEY_BYTES {
            let hash = weir_rl_core::long_key_hash(payload);
            let mut encoding = [0u8; 17];
            encoding[0] = kind.tag() | HASHED;
            encoding[1..].copy_from_slice(&hash);
            return Self::inline(encoding);
        }
        let len = 1 + payload.len();
        if len <= INLINE {
            let mut bytes = [0u8; INLINE];
            bytes[0] = kind.tag();
            bytes[1..len].copy_from_slice(payload);
            // `len <= INLINE < 256`.
            Self(Repr::Inline { len: len as u8, bytes })
        } else {
            let mut bytes = Vec::with_capacity(len);
            bytes.push(kind.tag());
            bytes.extend_from_slice(payload);
            Self(Repr::Heap(bytes.into_boxed_slice()))
        }
    }

    /// A key of `N` bytes of encoding, known to fit inline (the bytes past them are
    /// zero, as [`encode`](Self::encode) leaves them).
    #[inline]
    fn inline<const N: usize>(encoding: [u8; N]) -> Self {
        const { assert!(N <= INLINE) };
        let mut bytes = [0u8; INLINE];
        bytes[..N].copy_from_slice(&encoding);
        // `N <= INLINE < 256`.
        Self(Repr::Inline { len: N as u8, bytes })
    }

    /// The client address `ip`, as is (an IPv4-mapped IPv6 address is its IPv4
    /// address).
    pub fn ip(ip: IpAddr) -> Self {
        match ip.to_canonical() {
            IpAddr::V4(v4) => Self::ip_grouped(IpAddr::V4(v4), 32),
            IpAddr::V6(v6) => Self::ip_grouped(IpAddr::V6(v6), 128),
        }
    }

    /// The network of `prefix` bits that `ip` is in: all addresses of one `/64` are
    /// one key with `prefix = 64`. The prefix is clamped to the address's width; an
    /// IPv4-mapped IPv6 address is its IPv4 address, grouped by `prefix - 96`.
    pub fn ip_grouped(ip: IpAddr, prefix: u8) -> Self {
        match ip {
            IpAddr::V4(v4) => {
                let prefix = prefix.min(32);
                let [a, b, c, d] = (u32::from(v4) & mask32(prefix)).to_be_bytes();
                Self::inline([KeyKind::Ip.tag(), prefix, a, b, c, d])
            }
            IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
                Some(v4) => Self::ip_grouped(IpAddr::V4(v4), prefix.saturating_sub(96)),
                None => {
                    let prefix = prefix.min(128);
                    let mut encoding = [0u8; 18];
                    encoding[0] = KeyKind::Ip.tag();
                    encoding[1] = prefix;
                    encoding[2..].copy_from_slice(&(u128::from(v6) & mask128(prefix)).to_be_bytes());
                    Self::inline(encoding)
                }
            },
        }
    }

    /// An API key (the raw header value; over [`MAX_KEY_BYTES`], its hash).
    pub fn api_key(key: &[u8]) -> Self {
        Self::encode(KeyKind::ApiKey, key)
    }

    /// An authenticated user (an id over [`MAX_KEY_BYTES`]: its hash).
    pub fn user(id: &str) -> Self {
        Self::encode(KeyKind::User, id.as_bytes())
    }

    /// The one key every request shares.
    pub fn global() -> Self {
        Self::encode(KeyKind::Global, &[])
    }

    /// A key of your own making (distinct from every other kind; over
    /// [`MAX_KEY_BYTES`], its hash).
    pub fn custom(bytes: &[u8]) -> Self {
        Self::encode(KeyKind::Custom, bytes)
    }

    /// Whether this key is the hash of a payload longer than [`MAX_KEY_BYTES`] (its
    /// [`payload`](Self::payload) is then the 16 bytes of the hash).
    pub fn is_hashed(&self) -> bool {
        self.bytes().first().is_some_and(|tag| tag & HASHED != 0)
    }

    /// The encoding: the kind's tag, then the kind's bytes.
    #[inline]
    fn bytes(&self) -> &[u8] {
        match &self.0 {
            Repr::Inline { len, bytes } => &bytes[..usize::from(*len)],
            Repr::Heap(bytes) => bytes,
        }
    }

    /// What this key is made of.
    pub fn kind(&self) -> KeyKind {
        match self.bytes().first().map(|tag| tag & !HASHED) {
            Some(1) => KeyKind::Ip,
            Some(2) => KeyKind::ApiKey,
            Some(3) => KeyKind::User,
            Some(4) => KeyKind::Global,
            _ => KeyKind::Custom,
        }
    }

    /// The bytes the key was made of, without the kind (for an IP key: the prefix
    /// length, then the address bytes; for a [hashed](Self::is_hashed) key, the 16
    /// bytes of the hash). At most [`MAX_KEY_BYTES`].
    pub fn payload(&self) -> &[u8] {
        self.bytes().get(1..).unwrap_or(&[])
    }

    /// For an IP key, the (grouped) address and its prefix length.
    pub fn ip_network(&self) -> Option<(IpAddr, u8)> {
        if self.kind() != KeyKind::Ip {
            return None;
        }
        match self.payload() {
            [prefix, a, b, c, d] => Some((IpAddr::V4(Ipv4Addr::new(*a, *b, *c, *d)), *prefix)),
            [prefix, rest @ ..] => {
                let octets: [u8; 16] = rest.try_into().ok()?;
                Some((IpAddr::V6(Ipv6Addr::from(octets)), *prefix))
            }
            [] => None,
        }
    }
}

pub(crate) fn mask32(prefix: u8) -> u32 {
    u32::MAX.checked_shl(32 - u32::from(prefix.min(32))).unwrap_or(0)
}

pub(crate) fn mask128(prefix: u8) -> u128 {
    u128::MAX.checked_shl(128 - u32::from(prefix.min(128))).unwrap_or(0)
}

impl PartialEq for Key {
    #[inline]
    fn eq(&self, other: &Self) -> bool {
        self.bytes() == other.bytes()
    }
}

impl Eq for Key {}

/// The key's encoding: one byte for its kind (and whether it is
/// [hashed](Key::is_hashed)), then its [`payload`](Key::payload); at most
/// `1 + MAX_KEY_BYTES` bytes. What a remote store names the key by (weir-redis
/// takes any `AsRef<[u8]>` key): keys of different kinds never share a name, and a
/// long key is sent as its hash, never whole.
///
/// ```
/// use weir_http::Key;
///
/// assert_eq!(Key::api_key(b"k-1").as_ref(), b"\x02k-1");
/// assert_eq!(Key::api_key(&[b'k'; 100 * 1024]).as_ref().len(), 17);
/// ```
impl AsRef<[u8]> for Key {
    fn as_ref(&self) -> &[u8] {
        self.bytes()
    }
}

/// One `write` of the encoding, without a length before it: a keyed store hashes a
/// key on every check, and the store's hasher mixes the length in anyway. (Keys that are a
/// prefix of one another hash alike only under a hasher that ignores the length;
/// they are still told apart by `Eq`.)
impl Hash for Key {
    #[inline]
    fn hash<H: Hasher>(&self, state: &mut H) {
        state.write(self.bytes());
    }
}

/// How a key is shown in logs and events: an IP as its address (`/prefix` when
/// grouped), a user as `user:<id>`, an API key as `api-key:` and its first four
/// characters only (the key is a secret), the global key as `global`; a
/// [hashed](Key::is_hashed) key as its kind and the first 4 bytes of its hash in hex
/// (`api-key:#1a2b3c4d…`).
impl fmt::Display for Key {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.is_hashed() {
            let kind = match self.kind() {
                KeyKind::ApiKey => "api-key",
                KeyKind::User => "user",
                _ => "custom",
            };
            let hash: String = self.payload().iter().take(4).map(|b| format!("{b:02x}")).collect();
            return write!(f, "{kind}:#{hash}…");
        }
        match self.kind() {
            KeyKind::Ip => match self.ip_network() {
                Some((IpAddr::V4(ip), 32)) => write!(f, "{ip}"),
                Some((IpAddr::V6(ip), 128)) => write!(f, "{ip}"),
                Some((ip, prefix)) => write!(f, "{ip}/{prefix}"),
                None => f.write_str("ip:?"),
            },
            KeyKind::ApiKey => {
                let shown: String = String::from_utf8_lossy(self.payload()).chars().take(4).collect();
                write!(f, "api-key:{shown}…")
            }
            KeyKind::User => write!(f, "user:{}", String::from_utf8_lossy(self.payload())),
            KeyKind::Global => f.write_str("global"),
            KeyKind::Custom => write!(f, "custom:{}", String::from_utf8_lossy(self.payload())),
        }
    }
}

impl fmt::Debug for Key {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Key({self})")
    }
}

/// The authenticated user, as an authentication layer attaches it to the request
/// (weir-tower and weir-actix read it from the request's extensions);
/// [`KeySource::user`] reads it, through [`Request::user`].
///
/// ```
/// use weir_http::{Key, User};
///
/// let user = User::from("alice");
/// assert_eq!(Key::user(&user.0), Key::user("alice"));
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct User(pub Arc<str>);

impl From<&str> for User {
    fn from(id: &str) -> Self {
        Self(Arc::from(id))
    }
}

impl From<String> for User {
    fn from(id: String) -> Self {
        Self(Arc::from(id))
    }
}

type KeyFn = dyn Fn(&dyn Request) -> Option<Key> + Send + Sync;

/// Where a limit reads a request's [`Key`] from.
///
/// ```
/// use weir_http::{ClientIp, KeySource};
///
/// // The API key if the request has one, else the client's IP address.
/// let client = KeySource::first_of([KeySource::header("x-api-key"), KeySource::ip(ClientIp::default())]);
/// # let _ = client;
/// ```
#[derive(Clone)]
pub struct KeySource(Source);

#[derive(Clone)]
enum Source {
    Ip(ClientIp),
    /// The header's name, lowercase.
    Header(Box<str>, LongKeys),
    User,
    Global,
    Custom(Arc<KeyFn>),
    FirstOf(Arc<[KeySource]>),
}

impl KeySource {
    /// The client's IP address: the peer address, or behind trusted proxies the
    /// rightmost untrusted forwarded hop (see [`ClientIp`]).
    pub fn ip(client: ClientIp) -> Self {
        Self(Source::Ip(client))
    }

    /// The value of header `name` (an API key). A name that is not a valid header
    /// name never matches (every request then has no key from this source).
    pub fn header(name: &str) -> Self {
        if is_header_name(name) {
            Self(Source::Header(name.to_ascii_lowercase().into(), LongKeys::Hash))
        } else {
            Self(Source::Custom(Arc::new(|_: &dyn Request| None)))
        }
    }

    /// What a [`header`](Self::header) source (or each header source of a
    /// [`first_of`](Self::first_of)) does with a value longer than
    /// [`MAX_KEY_BYTES`]: keep its hash ([`LongKeys::Hash`], the default) or refuse
    /// the request ([`LongKeys::Refuse`]).
    ///
    /// ```
    /// use weir_http::{KeySource, LongKeys};
    ///
    /// let api_key = KeySource::header("x-api-key").long_keys(LongKeys::Refuse);
    /// # let _ = api_key;
    /// ```
    pub fn long_keys(self, long: LongKeys) -> Self {
        match self.0 {
            Source::Header(name, _) => Self(Source::Header(name, long)),
            Source::FirstOf(sources) => {
                Self(Source::FirstOf(sources.iter().cloned().map(|source| source.long_keys(long)).collect()))
            }
            other => Self(other),
        }
    }

    /// The authenticated [`User`] in the request's extensions.
    pub fn user() -> Self {
        Self(Source::User)
    }

    /// One key for every request: a limit on the whole route.
    pub fn global() -> Self {
        Self(Source::Global)
    }

    /// Your own: `None` when the request has no usable key. The closure reads the
    /// request through [`Request`]; for what only your framework's request has (an
    /// extension your authentication layer inserted), [`native`](trait.Request.html#method.native-1)
    /// gives that request: `request.native::<http::request::Parts>()` under
    /// weir-tower.
    ///
    /// ```
    /// use weir_http::{Key, KeySource};
    ///
    /// // The tenant named in a header, lowercased, one key per tenant.
    /// let tenant = KeySource::custom(|request| {
    ///     let tenant = request.header("x-tenant")?;
    ///     Some(Key::custom(&tenant.to_ascii_lowercase()))
    /// });
    /// # let _ = tenant;
    /// ```
    pub fn custom(key: impl Fn(&dyn Request) -> Option<Key> + Send + Sync + 'static) -> Self {
        Self(Source::Custom(Arc::new(key)))
    }

    /// The first of `sources` that has a key for the request.
    pub fn first_of(sources: impl IntoIterator<Item = KeySource>) -> Self {
        Self(Source::FirstOf(sources.into_iter().collect()))
    }

    /// Whether this source reads the client IP (itself, or one of its
    /// [`first_of`](Self::first_of) sources does).
    pub(crate) fn reads_peer_address(&self) -> bool {
        match &self.0 {
            Source::Ip(_) => true,
            Source::FirstOf(sources) => sources.iter().any(KeySource::reads_peer_address),
            _ => false,
        }
    }

    /// Where the key is read from, in words a client can act on: ``the `x-api-key`
    /// header``, `the authenticated user`, ....
    pub(crate) fn describe(&self) -> String {
        match &self.0 {
            Source::Ip(_) => "the client's IP address".into(),
            Source::Header(name, _) => format!("the `{name}` header"),
            Source::User => "the authenticated user".into(),
            Source::Global => "one key for every request".into(),
            Source::Custom(_) => "a key the server reads from the request".into(),
            Source::FirstOf(sources) => {
                let each: Vec<String> = sources.iter().map(KeySource::describe).collect();
                format!("the first of: {}", each.join(", "))
            }
        }
    }

    /// The request's key, or `None` when it has none from this source (or a header
    /// value this source refuses: see [`long_keys`](Self::long_keys)). A header
    /// with several lines is read by its first; surrounding spaces and tabs are not
    /// part of the key.
    pub fn key<M>(&self, request: &impl AsRequest<M>) -> Option<Key> {
        self.read(&request.as_request()).ok().flatten()
    }

    /// The request's key; `Ok(None)` when it has none from this source; `Err` with
    /// the header's name when a header value is over [`MAX_KEY_BYTES`] and this
    /// source refuses long keys.
    pub(crate) fn read<R: Request + ?Sized>(&self, request: &R) -> Result<Option<Key>, &str> {
        Ok(match &self.0 {
            Source::Ip(client) => client.key_of_request(request),
            Source::Header(name, long) => {
                let Some(value) = request.header(name) else { return Ok(None) };
                let value = value.trim_ascii();
                if value.len() > MAX_KEY_BYTES && *long == LongKeys::Refuse {
                    return Err(name);
                }
                (!value.is_empty()).then(|| Key::api_key(value))
            }
            Source::User => request.user().map(|user| Key::user(&user.0)),
            Source::Global => Some(Key::global()),
            Source::Custom(key) => key(&request),
            Source::FirstOf(sources) => {
                for source in sources.iter() {
                    if let Some(key) = source.read(request)? {
                        return Ok(Some(key));
                    }
                }
                None
            }
        })
    }
}

impl fmt::Debug for KeySource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.0 {
            Source::Ip(client) => f.debug_tuple("Ip").field(client).finish(),
            Source::Header(name, long) => f.debug_tuple("Header").field(name).field(long).finish(),
            Source::User => f.write_str("User"),
            Source::Global => f.write_str("Global"),
            Source::Custom(_) => f.write_str("Custom(..)"),
            Source::FirstOf(sources) => f.debug_tuple("FirstOf").field(sources).finish(),
        }
    }
}

/// What a limit does with a request that has no usable key (no peer address, no API
/// key header, no authenticated user).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum MissingKey {
    /// Refuse the request: `400 Bad Request` with a problem+json body saying the client
    /// could not be identified. The default: a server that cannot tell its clients
    /// apart should say so rather than guess.
    Deny,
    /// Count it against this one key, shared by every unidentified request.
    Shared(Key),
    /// Let it through this limit unchecked (other limits still apply).
    Skip,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_keys_live_on_the_heap_and_compare_by_content() {
        let long = "u".repeat(100);
        assert_eq!(Key::user(&long), Key::user(&long));
        assert_ne!(Key::user(&long), Key::user(&long[1..]));
        assert!(matches!(Key::user(&long).0, Repr::Heap(_)));
        assert!(matches!(Key::user(&long[..45]).0, Repr::Inline { .. }));
        assert!(matches!(Key::ip("2001:db8::1".parse().unwrap()).0, Repr::Inline { .. }));
    }

    /// The bytes a key keeps, inline or on the heap.
    fn kept(key: &Key) -> usize {
        match &key.0 {
            Repr::Inline { .. } => 0,
            Repr::Heap(bytes) => bytes.len(),
        }
    }

    #[test]
    fn a_key_a_client_chose_keeps_a_bounded_number_of_bytes() {
        let huge = vec![b'k'; 100 * 1024];
        for key in [Key::api_key(&huge), Key::user(&"u".repeat(100 * 1024)), Key::custom(&huge)] {
            assert!(kept(&key) <= 1 + MAX_KEY_BYTES, "{} bytes kept for {key:?}", kept(&key));
            assert!(key.payload().len() <= MAX_KEY_BYTES);
        }
    }

    #[test]
    fn long_keys_are_kept_as_the_shared_long_key_hash() {
        // The same long key is the same key in every process and version.
        let long = Key::api_key(&[b'k'; 200]);
        assert_eq!(long.to_string(), "api-key:#".to_owned() + &long.to_string()[9..]);
        assert_eq!(long.payload(), weir_rl_core::long_key_hash(&[b'k'; 200]));
    }

    #[test]
    fn hashed_keys_keep_their_kind_and_never_equal_short_ones() {
        let long = vec![b'x'; MAX_KEY_BYTES + 1];
        let (api, user) = (Key::api_key(&long), Key::user(core::str::from_utf8(&long).unwrap()));
        assert!(api.is_hashed() && user.is_hashed());
        assert_eq!((api.kind(), user.kind()), (KeyKind::ApiKey, KeyKind::User));
        assert_ne!(api, user);
        assert_ne!(api, Key::api_key(api.payload()), "a short key spelling the hash is another key");
        assert!(!Key::api_key(&long[..MAX_KEY_BYTES]).is_hashed());
        assert!(api.to_string().starts_with("api-key:#"), "{api}");
    }

    #[test]
    fn kinds_never_collide() {
        assert_ne!(Key::api_key(b"x"), Key::user("x"));
        assert_ne!(Key::custom(b""), Key::global());
        assert_eq!(Key::global().kind(), KeyKind::Global);
        assert_eq!(Key::custom(b"a").payload(), b"a");
    }

    #[test]
    fn ip_keys_group_by_prefix() {
        let a = Key::ip_grouped("2001:db8:1:2:3:4:5:6".parse().unwrap(), 64);
        let b = Key::ip_grouped("2001:db8:1:2::9".parse().unwrap(), 64);
        let c = Key::ip_grouped("2001:db8:1:3::9".parse().unwrap(), 64);
        assert_eq!(a, b);
        assert_ne!(a, c);
        assert_eq!(a.to_string(), "2001:db8:1:2::/64");
        assert_eq!(Key::ip_grouped("10.1.2.3".parse().unwrap(), 24).to_string(), "10.1.2.0/24");
        assert_eq!(Key::ip_grouped("10.1.2.3".parse().unwrap(), 0).to_string(), "0.0.0.0/0");
        assert_eq!(Key::ip_grouped("10.1.2.3".parse().unwrap(), 200), Key::ip("10.1.2.3".parse().unwrap()));
        // An IPv4-mapped IPv6 address is its IPv4 address.
        assert_eq!(Key::ip("::ffff:10.1.2.3".parse().unwrap()), Key::ip("10.1.2.3".parse().unwrap()));
        assert_eq!(Key::ip_grouped("::ffff:10.1.2.3".parse().unwrap(), 64).to_string(), "0.0.0.0/0");
    }

    #[test]
    fn api_keys_are_not_logged_whole() {
        assert_eq!(Key::api_key(b"secret-key-123").to_string(), "api-key:secr…");
        assert_eq!(Key::user("alice").to_string(), "user:alice");
    }

    #[test]
    fn sources_read_headers_the_user_and_fall_back() {
        let request = crate::test_support::TestRequest::get("/").header("X-Api-Key", "  k1 ").user("bob");
        assert_eq!(KeySource::header("x-api-key").key(&request), Some(Key::api_key(b"k1")));
        assert_eq!(KeySource::header("X-API-KEY").key(&request), Some(Key::api_key(b"k1")));
        assert_eq!(KeySource::header("x-other").key(&request), None);
        assert_eq!(KeySource::header("bad header").key(&request), None);
        assert_eq!(KeySource::user().key(&request), Some(Key::user("bob")));
        let first = KeySource::first_of([KeySource::header("x-other"), KeySource::user()]);
        assert_eq!(first.key(&request), Some(Key::user("bob")));
        let custom = KeySource::custom(|r| r.user().map(|u| Key::custom(u.0.as_bytes())));
        assert_eq!(custom.key(&request), Some(Key::custom(b"bob")));
        assert_eq!(KeySource::global().key(&request), Some(Key::global()));
    }
}

//! A `RateLimitRequest`, checked: the domain and every entry within bounds, each
//! descriptor's cost resolved, a `limit` override's unit known. Bad input is a
//! [`RequestError`], answered as a gRPC status with its message.

use crate::proto;
use crate::rule::Unit;
use core::fmt;

/// Bounds on what one request may carry, in bytes and counts. Every bound crossed
/// is refused with `INVALID_ARGUMENT`, never cut short.
///
/// ```
/// use weir_rls::RequestLimits;
///
/// let limits = RequestLimits::default();
/// assert_eq!((limits.max_key_bytes, limits.max_value_bytes), (256, 1_024));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct RequestLimits {
    /// The longest domain. Default: 256 bytes.
    pub max_domain_bytes: usize,
    /// The most descriptors in one request. Default: 64.
    pub max_descriptors: usize,
    /// The most entries in one descriptor. Default: 32.
    pub max_entries: usize,
    /// The longest entry key. Default: 256 bytes.
    pub max_key_bytes: usize,
    /// The longest entry value. Default: 1 024 bytes (a URL path, a JWT claim).
    pub max_value_bytes: usize,
}

impl Default for RequestLimits {
    fn default() -> Self {
        Self { max_domain_bytes: 256, max_descriptors: 64, max_entries: 32, max_key_bytes: 256, max_value_bytes: 1_024 }
    }
}

impl RequestLimits {
    /// With this [`max_domain_bytes`](Self::max_domain_bytes).
    pub fn max_domain_bytes(mut self, bytes: usize) -> Self {
        self.max_domain_bytes = bytes;
        self
    }

    /// With this [`max_descriptors`](Self::max_descriptors).
    pub fn max_descriptors(mut self, descriptors: usize) -> Self {
        self.max_descriptors = descriptors;
        self
    }

    /// With this [`max_entries`](Self::max_entries).
    pub fn max_entries(mut self, entries: usize) -> Self {
        self.max_entries = entries;
        self
    }

    /// With this [`max_key_bytes`](Self::max_key_bytes).
    pub fn max_key_bytes(mut self, bytes: usize) -> Self {
        self.max_key_bytes = bytes;
        self
    }

    /// With this [`max_value_bytes`](Self::max_value_bytes).
    pub fn max_value_bytes(mut self, bytes: usize) -> Self {
        self.max_value_bytes = bytes;
        self
    }
}

/// The largest `hits_addend` accepted: `u32::MAX`, the largest limit the protocol
/// can state (`requests_per_unit` and `limit_remaining` are 32-bit). A larger one
/// overflows what any counter could answer, and is refused.
pub const MAX_HITS_ADDEND: u64 = u32::MAX as u64;

/// One entry of a descriptor: a key and a value (possibly empty).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Entry {
    key: String,
    value: String,
}

impl Entry {
    /// The key (never empty).
    pub fn key(&self) -> &str {
        &self.key
    }

    /// The value.
    pub fn value(&self) -> &str {
        &self.value
    }
}

/// A descriptor's `limit`: Envoy's override of the config's limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct LimitOverride {
    /// Requests per unit.
    pub requests_per_unit: u32,
    /// The unit.
    pub unit: Unit,
}

/// One descriptor of a checked request.
///
/// ```
/// use weir_rls::Descriptor;
///
/// let d = Descriptor::new([("remote_address", "10.0.0.1"), ("path", "/login")]).hits(3);
/// assert_eq!(d.entries().map(|e| e.key()).collect::<Vec<_>>(), ["remote_address", "path"]);
/// assert_eq!(d.cost(), 3);
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Descriptor {
    entries: Vec<Entry>,
    limit: Option<LimitOverride>,
    /// The descriptor's own `hits_addend`; `None`: the request's.
    hits: Option<u64>,
    /// What this descriptor costs: its own `hits_addend`, else the request's (0 or
    /// unset counting 1). Set when the request is checked.
    cost: u64,
}

impl Descriptor {
    /// A descriptor of these entries, in order.
    pub fn new<K: Into<String>, V: Into<String>>(entries: impl IntoIterator<Item = (K, V)>) -> Self {
        let entries = entries.into_iter().map(|(k, v)| Entry { key: k.into(), value: v.into() }).collect();
        Self { entries, limit: None, hits: None, cost: 1 }
    }

    /// With its own `hits_addend` (0: check without counting).
    pub fn hits(mut self, hits: u64) -> Self {
        self.hits = Some(hits);
        self.cost = hits;
        self
    }

    /// With a `limit` override.
    pub fn limit(mut self, limit: LimitOverride) -> Self {
        self.limit = Some(limit);
        self
    }

    /// The entries, in order.
    pub fn entries(&self) -> impl ExactSizeIterator<Item = &Entry> {
        self.entries.iter()
    }

    /// The entry at `index`.
    pub fn entry(&self, index: usize) -> Option<&Entry> {
        self.entries.get(index)
    }

    /// The number of entries.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether there are no entries (never, in a checked request).
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The `limit` override.
    pub fn limit_override(&self) -> Option<LimitOverride> {
        self.limit
    }

    /// The descriptor's own `hits_addend`, if it has one.
    pub fn own_hits(&self) -> Option<u64> {
        self.hits
    }

    /// What the descriptor costs: its own `hits_addend`; without one, in a checked
    /// [`Request`], the request's (0 or unset counting 1), else 1.
    pub fn cost(&self) -> u64 {
        self.cost
    }
}

/// A checked request: a domain, and one or more descriptors within
/// [`RequestLimits`], each with its cost.
///
/// ```
/// use weir_rls::{Descriptor, Request, RequestError, RequestLimits};
///
/// let limits = RequestLimits::default();
/// let request = Request::new("edge", vec![Descriptor::new([("remote_address", "10.0.0.1")])], 0, &limits)?;
/// assert_eq!(request.descriptors()[0].cost(), 1); // unset counts 1
///
/// let err = Request::new("edge", vec![Descriptor::new([("", "x")])], 1, &limits).unwrap_err();
/// assert_eq!(err, RequestError::EmptyKey { descriptor: 0, entry: 0 });
/// assert_eq!(err.to_string(), "descriptor 0, entry 0: the key is empty");
/// # Ok::<(), RequestError>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Request {
    domain: String,
    descriptors: Vec<Descriptor>,
}

impl Request {
    /// Checks a request: `hits_addend` is the request's own (0 counts 1), used by
    /// every descriptor without its own.
    pub fn new(
        domain: impl Into<String>,
        mut descriptors: Vec<Descriptor>,
        hits_addend: u32,
        limits: &RequestLimits,
    ) -> Result<Self, RequestError> {
        let domain = domain.into();
        if domain.is_empty() {
            return Err(RequestError::EmptyDomain);
        }
        if domain.len() > limits.max_domain_bytes {
            return Err(RequestError::DomainTooLong { bytes: domain.len(), max: limits.max_domain_bytes });
        }
        if descriptors.is_empty() {
            return Err(RequestError::NoDescriptors);
        }
        if descriptors.len() > limits.max_descriptors {
            return Err(RequestError::TooManyDescriptors { count: descriptors.len(), max: limits.max_descriptors });
        }
        let default_cost = u64::from(hits_addend.max(1));
        for (index, descriptor) in descriptors.iter_mut().enumerate() {
            check_descriptor(index, descriptor, limits)?;
            descriptor.cost = descriptor.hits.unwrap_or(default_cost);
        }
        Ok(Self { domain, descriptors })
    }

    /// Checks a request as Envoy sends it, taking its strings without copying them.
    pub fn from_proto(request: proto::RateLimitRequest, limits: &RequestLimits) -> Result<Self, RequestError> {
        let proto::RateLimitRequest { domain, descriptors, hits_addend } = request;
        // Counted before converting anything: a request of a million descriptors is
        // refused without a million conversions.
        if descriptors.len() > limits.max_descriptors {
            return Err(RequestError::TooManyDescriptors { count: descriptors.len(), max: limits.max_descriptors });
        }
        let mut checked = Vec::with_capacity(descriptors.len());
        for (index, descriptor) in descriptors.into_iter().enumerate() {
            if descriptor.is_negative_hits {
                return Err(RequestError::NegativeHits { descriptor: index });
            }
            let limit = match descriptor.limit {
                Some(o) => match Unit::from_response_code(o.unit) {
                    Some(unit) => Some(LimitOverride { requests_per_unit: o.requests_per_unit, unit }),
                    None => return Err(RequestError::OverrideUnit { descriptor: index, unit: o.unit }),
                },
                None => None,
            };
            if descriptor.entries.len() > limits.max_entries {
                let count = descriptor.entries.len();
                return Err(RequestError::TooManyEntries { descriptor: index, count, max: limits.max_entries });
            }
            let entries = descriptor.entries.into_iter().map(|e| Entry { key: e.key, value: e.value }).collect();
            let hits = descriptor.hits_addend.map(|h| h.value);
            checked.push(Descriptor { entries, limit, hits, cost: 1 });
        }
        Self::new(domain, checked, hits_addend, limits)
    }

    /// The domain.
    pub fn domain(&self) -> &str {
        &self.domain
    }

    /// The descriptors, in order.
    pub fn descriptors(&self) -> &[Descriptor] {
        &self.descriptors
    }
}

fn check_descriptor(index: usize, descriptor: &Descriptor, limits: &RequestLimits) -> Result<(), RequestError> {
    if descriptor.entries.is_empty() {
        return Err(RequestError::NoEntries { descriptor: index });
    }
    if descriptor.entries.len() > limits.max_entries {
        let count = descriptor.entries.len();
        return Err(RequestError::TooManyEntries { descriptor: index, count, max: limits.max_entries });
    }
    for (entry, e) in descriptor.entries.iter().enumerate() {
        if e.key.is_empty() {
            return Err(RequestError::EmptyKey { descriptor: index, entry });
        }
        if e.key.len() > limits.max_key_bytes {
            return Err(RequestError::KeyTooLong {
                descriptor: index,
                entry,
                bytes: e.key.len(),
                max: limits.max_key_bytes,
            });
        }
        if e.value.len() > limits.max_value_bytes {
            let (bytes, max) = (e.value.len(), limits.max_value_bytes);
            return Err(RequestError::ValueTooLong { descriptor: index, entry, bytes, max });
        }
    }
    if let Some(hits) = descriptor.hits
        && hits > MAX_HITS_ADDEND
    {
        return Err(RequestError::HitsAddendTooLarge { descriptor: index, hits });
    }
    Ok(())
}

/// Why a request was refused. [`code`](RequestError::code) is the gRPC status it
/// is answered with (`INVALID_ARGUMENT`, or `UNIMPLEMENTED` for negative hits), and
/// the message is its `Display`.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum RequestError {
    /// The domain is empty.
    EmptyDomain,
    /// The domain is longer than [`RequestLimits::max_domain_bytes`].
    DomainTooLong {
        /// Its length.
        bytes: usize,
        /// The bound.
        max: usize,
    },
    /// No descriptors.
    NoDescriptors,
    /// More descriptors than [`RequestLimits::max_descriptors`].
    TooManyDescriptors {
        /// How many.
        count: usize,
        /// The bound.
        max: usize,
    },
    /// A descriptor without entries.
    NoEntries {
        /// The descriptor's index.
        descriptor: usize,
    },
    /// More entries than [`RequestLimits::max_entries`].
    TooManyEntries {
        /// The descriptor's index.
        descriptor: usize,
        /// How many.
        count: usize,
        /// The bound.
        max: usize,
    },
    /// An entry with an empty key.
    EmptyKey {
        /// The descriptor's index.
        descriptor: usize,
        /// The entry's index.
        entry: usize,
    },
    /// A key longer than [`RequestLimits::max_key_bytes`].
    KeyTooLong {
        /// The descriptor's index.
        descriptor: usize,
        /// The entry's index.
        entry: usize,
        /// Its length.
        bytes: usize,
        /// The bound.
        max: usize,
    },
    /// A value longer than [`RequestLimits::max_value_bytes`].
    ValueTooLong {
        /// The descriptor's index.
        descriptor: usize,
        /// The entry's index.
        entry: usize,
        /// Its length.
        bytes: usize,
        /// The bound.
        max: usize,
    },
    /// A `hits_addend` above [`MAX_HITS_ADDEND`].
    HitsAddendTooLarge {
        /// The descriptor's index.
        descriptor: usize,
        /// The number sent.
        hits: u64,
    },
    /// A `limit` override whose unit is `UNKNOWN` or no unit at all.
    OverrideUnit {
        /// The descriptor's index.
        descriptor: usize,
        /// The unit's number.
        unit: i32,
    },
    /// `is_negative_hits` (giving hits back), which weir-rls does not do.
    NegativeHits {
        /// The descriptor's index.
        descriptor: usize,
    },
}

impl RequestError {
    /// The gRPC status code the request is answered with.
    pub fn code(&self) -> tonic::Code {
        match self {
            Self::NegativeHits { .. } => tonic::Code::Unimplemented,
            _ => tonic::Code::InvalidArgument,
        }
    }
}

impl fmt::Display for RequestError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::EmptyDomain => f.write_str("rate limit domain must not be empty"),
            Self::DomainTooLong { bytes, max } => {
                write!(f, "the domain has {bytes} bytes, more than the {max} accepted")
            }
            Self::NoDescriptors => f.write_str("rate limit descriptor list must not be empty"),
            Self::TooManyDescriptors { count, max } => write!(f, "{count} descriptors, more than the {max} accepted"),
            Self::NoEntries { descriptor } => write!(f, "descriptor {descriptor} has no entries"),
            Self::TooManyEntries { descriptor, count, max } => {
                write!(f, "descriptor {descriptor} has {count} entries, more than the {max} accepted")
            }
            Self::EmptyKey { descriptor, entry } => {
                write!(f, "descriptor {descriptor}, entry {entry}: the key is empty")
            }
            Self::KeyTooLong { descriptor, entry, bytes, max } => {
                write!(
                    f,
                    "descriptor {descriptor}, entry {entry}: the key has {bytes} bytes, more than the {max} accepted"
                )
            }
            Self::ValueTooLong { descriptor, entry, bytes, max } => write!(
                f,
                "descriptor {descriptor}, entry {entry}: the value has {bytes} bytes, more than the {max} accepted"
            ),
            Self::HitsAddendTooLarge { descriptor, hits } => write!(
                f,
                "descriptor {descriptor}: hits_addend {hits} is more than any limit can be ({MAX_HITS_ADDEND})"
            ),
            Self::OverrideUnit { descriptor, unit } => {
                write!(f, "descriptor {descriptor}: the limit override's unit ({unit}) is not a unit")
            }
            Self::NegativeHits { descriptor } => {
                write!(f, "descriptor {descriptor}: is_negative_hits is not supported")
            }
        }
    }
}

impl std::error::Error for RequestError {}

impl From<RequestError> for tonic::Status {
    fn from(e: RequestError) -> Self {
        tonic::Status::new(e.code(), e.to_string())
    }
}

//! Which rule a request's descriptor falls under, as envoyproxy/ratelimit decides
//! it, and the counter it is counted on.
//!
//! # Matching one descriptor
//!
//! A descriptor's entries are walked down the domain's tree, one level per entry.
//! At each level the entry's key picks the config descriptors with that key, and of
//! those the entry matches, in this order:
//!
//! 1. the one whose `value` is the entry's value;
//! 2. else the first, in file order, whose `value` has a `*` that matches it (each
//!    `*` matching any run of characters, possibly empty: `/api/*/action`);
//! 3. else the one without a `value` (any value).
//!
//! If nothing matches, or the entries run out above a descriptor with children, or
//! a descriptor without children is reached before the last entry, there is no
//! limit: the walk never goes back to try a sibling. The limit is that of the
//! descriptor the last entry matches, if it has one. (A descriptor without
//! `rate_limit` and without children thus allows what it matches.)
//!
//! A descriptor with a `limit` (Envoy's override) is not walked: it gets that limit,
//! counted on its own entries, if its domain is configured.
//!
//! # Counters
//!
//! A rule counts each distinct value that an entry matched through a value-less or
//! wildcard descriptor separately (one counter per phone number under `to_number`),
//! except where the wildcard has `share_threshold: true`: all the values it matches
//! share one counter. The [`CounterKey`] is those values, and names a counter
//! within its rule; it costs at most [`MAX_COUNTER_KEY_BYTES`] bytes whatever the
//! request sent: a longer one is kept as its [`weir_rl_core::long_key_hash`].
//!
//! # Replaces
//!
//! Over the whole request, a rule named in the `replaces` of another matched rule
//! is dropped ([`DescriptorMatch::Replaced`]): neither counted nor reported.

use crate::config::Config;
use crate::request::{Descriptor, Request};
use crate::rule::{RateLimit, Rule, RuleId, RuleLimit};
use core::fmt;
use std::borrow::Cow;
use std::collections::{HashMap, HashSet};

/// The most bytes of a [`CounterKey`]'s values; longer keys are kept as their
/// 16-byte hash.
pub const MAX_COUNTER_KEY_BYTES: usize = 128;

/// The most bytes of a request's value written into a metric name (a
/// `detailed_metric` or `value_to_metric` rule's); a longer value is written as
/// `#` and its hash in hex.
pub const MAX_METRIC_VALUE_BYTES: usize = 64;

/// The counter a descriptor is counted on, within its rule: the values the rule
/// counts separately, each prefixed by its length. At most
/// 1 + [`MAX_COUNTER_KEY_BYTES`] bytes, kept inline (no allocation): a tag byte (0:
/// the values, 1: their hash), then the values or the first 16 bytes of their
/// SHA-256 ([`weir_rl_core::long_key_hash`]). Two keys are equal exactly when the
/// values are (up to a SHA-256 collision).
///
/// ```
/// use weir_rls::{Config, Descriptor, DescriptorMatch, LoadOptions, MAX_COUNTER_KEY_BYTES};
///
/// let yaml = "domain: d\ndescriptors:\n  - key: user\n    rate_limit: {unit: second, requests_per_unit: 5}\n";
/// let config = Config::from_yaml("d.yaml", yaml, &LoadOptions::default())?;
/// let key = |value: &str| match config.match_descriptor("d", &Descriptor::new([("user", value)])) {
///     Ok(DescriptorMatch::Limited(limited)) => *limited.key(),
///     other => panic!("{other:?}"),
/// };
/// assert_eq!(key("alice").as_bytes(), b"\0\x05alice");
/// assert_ne!(key("alice"), key("bob"));
/// let long = key(&"x".repeat(1_000));
/// assert!(long.is_hashed());
/// assert!(long.as_bytes().len() <= 1 + MAX_COUNTER_KEY_BYTES);
/// # Ok::<(), weir_rls::ConfigError>(())
/// ```
#[derive(Clone, Copy)]
pub struct CounterKey {
    /// Bytes used in `bytes`, the tag included (1 to 1 + MAX_COUNTER_KEY_BYTES).
    len: u8,
    bytes: [u8; 1 + MAX_COUNTER_KEY_BYTES],
}

const TAG_VALUES: u8 = 0;
const TAG_HASHED: u8 = 1;

impl CounterKey {
    const fn empty() -> Self {
        Self { len: 1, bytes: [TAG_VALUES; 1 + MAX_COUNTER_KEY_BYTES] }
    }

    fn hashed(payload: &[u8]) -> Self {
        let hash = weir_rl_core::long_key_hash(payload);
        let mut key = Self::empty();
        key.bytes[0] = TAG_HASHED;
        key.bytes[1..1 + hash.len()].copy_from_slice(&hash);
        key.len = (1 + hash.len()) as u8;
        key
    }

    /// The key's bytes: the tag, then the values or their hash.
    pub fn as_bytes(&self) -> &[u8] {
        &self.bytes[..usize::from(self.len)]
    }

    /// Whether the values were longer than [`MAX_COUNTER_KEY_BYTES`] and are kept as
    /// their hash.
    pub fn is_hashed(&self) -> bool {
        self.bytes[0] == TAG_HASHED
    }
}

impl PartialEq for CounterKey {
    fn eq(&self, other: &Self) -> bool {
        self.as_bytes() == other.as_bytes()
    }
}

impl Eq for CounterKey {}

impl core::hash::Hash for CounterKey {
    fn hash<H: core::hash::Hasher>(&self, state: &mut H) {
        self.as_bytes().hash(state);
    }
}

impl fmt::Debug for CounterKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "CounterKey(\"{}\")", self.as_bytes().escape_ascii())
    }
}

/// Builds a [`CounterKey`] value by value: inline while the values fit, else
/// collected (once) and hashed.
struct KeyBuilder {
    key: CounterKey,
    spill: Option<Vec<u8>>,
}

impl KeyBuilder {
    fn new() -> Self {
        Self { key: CounterKey::empty(), spill: None }
    }

    fn push(&mut self, value: &[u8]) {
        let mut prefix = [0u8; 10];
        let prefix = varint(value.len() as u64, &mut prefix);
        if let Some(spill) = &mut self.spill {
            spill.extend_from_slice(prefix);
            spill.extend_from_slice(value);
            return;
        }
        let at = usize::from(self.key.len);
        let end = at + prefix.len() + value.len();
        if end <= self.key.bytes.len() {
            self.key.bytes[at..at + prefix.len()].copy_from_slice(prefix);
            self.key.bytes[at + prefix.len()..end].copy_from_slice(value);
            self.key.len = end as u8;
        } else {
            let mut spill = Vec::with_capacity(end);
            spill.extend_from_slice(&self.key.bytes[1..at]);
            spill.extend_from_slice(prefix);
            spill.extend_from_slice(value);
            self.spill = Some(spill);
        }
    }

    fn finish(self) -> CounterKey {
        match self.spill {
            Some(payload) => CounterKey::hashed(&payload),
            None => self.key,
        }
    }
}

/// `n` as LEB128, written into `buf`.
fn varint(mut n: u64, buf: &mut [u8; 10]) -> &[u8] {
    let mut len = 0;
    loop {
        let byte = (n & 0x7f) as u8;
        n >>= 7;
        if n == 0 {
            buf[len] = byte;
            return &buf[..=len];
        }
        buf[len] = byte | 0x80;
        len += 1;
    }
}

/// Where a matched limit comes from.
#[derive(Debug, Clone, Copy)]
pub enum LimitSource<'c> {
    /// A rule of the config.
    Rule(&'c Rule),
    /// The descriptor's own `limit` override.
    Override,
}

/// A descriptor that is counted: against which limit, on which counter, for how
/// much.
#[derive(Debug, Clone)]
pub struct Limited<'c> {
    source: LimitSource<'c>,
    limit: RateLimit,
    key: CounterKey,
    cost: u64,
    shadow: bool,
    metric_key: Cow<'c, str>,
}

impl<'c> Limited<'c> {
    /// The rule, or the override.
    pub fn source(&self) -> LimitSource<'c> {
        self.source
    }

    /// The rule, unless the limit is an override.
    pub fn rule(&self) -> Option<&'c Rule> {
        match self.source {
            LimitSource::Rule(rule) => Some(rule),
            LimitSource::Override => None,
        }
    }

    /// The limit.
    pub fn limit(&self) -> &RateLimit {
        &self.limit
    }

    /// The counter, within the rule (or, for an override, within the domain's
    /// overrides of this limit).
    pub fn key(&self) -> &CounterKey {
        &self.key
    }

    /// What the descriptor costs (its `hits_addend`; 0: check without counting).
    pub fn cost(&self) -> u64 {
        self.cost
    }

    /// Whether the rule is in shadow mode: counted, but never refusing.
    pub fn shadow(&self) -> bool {
        self.shadow
    }

    /// The rule's name for metrics: its [`full_key`](Rule::full_key), or for a
    /// `detailed_metric` or `value_to_metric` rule the same with the request's
    /// values (each at most [`MAX_METRIC_VALUE_BYTES`]); `<domain>.<override>` for an
    /// override.
    pub fn metric_key(&self) -> &str {
        &self.metric_key
    }

    /// `current_limit.name`: the rule's `name`, if any.
    pub fn name(&self) -> Option<&'c str> {
        self.rule().and_then(Rule::name)
    }
}

/// What one descriptor of a request matched.
// The counter key is kept inline (no allocation per descriptor); the matches of a
// request are one vector, whatever the size of a variant.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Clone)]
pub enum DescriptorMatch<'c> {
    /// No limit: nothing matched, or the matched descriptor has no `rate_limit`.
    NoLimit,
    /// An `unlimited: true` rule.
    Unlimited(&'c Rule),
    /// A rule that another rule matched by the same request `replaces`.
    Replaced(&'c Rule),
    /// Counted against a limit.
    Limited(Limited<'c>),
}

impl<'c> DescriptorMatch<'c> {
    /// The rule matched (for [`Limited`](Self::Limited), unless an override).
    pub fn rule(&self) -> Option<&'c Rule> {
        match self {
            Self::NoLimit => None,
            Self::Unlimited(rule) | Self::Replaced(rule) => Some(rule),
            Self::Limited(limited) => limited.rule(),
        }
    }
}

/// What every descriptor of a request matched, in request order.
#[derive(Debug, Clone)]
pub struct Matches<'c> {
    domain: &'c str,
    items: Vec<DescriptorMatch<'c>>,
}

impl<'c> Matches<'c> {
    /// The domain.
    pub fn domain(&self) -> &'c str {
        self.domain
    }

    /// One match per descriptor, in request order.
    pub fn descriptors(&self) -> &[DescriptorMatch<'c>] {
        &self.items
    }
}

/// A request for a domain the config does not have.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnknownDomain {
    /// The domain.
    pub domain: String,
}

impl fmt::Display for UnknownDomain {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "unknown domain '{}': no config file has it", self.domain)
    }
}

impl std::error::Error for UnknownDomain {}

impl Config {
    /// Matches every descriptor of `request`, then drops the rules that others
    /// replace.
    ///
    /// ```
    /// use weir_rls::{Config, Descriptor, DescriptorMatch, LoadOptions, Request, RequestLimits};
    ///
    /// let yaml = "
    /// domain: example7
    /// descriptors:
    ///   - key: key_1
    ///     value: value_1
    ///     descriptors:
    ///       - key: user
    ///         value: bkthomps
    ///         rate_limit: {name: specific_limit, requests_per_unit: 5, unit: second}
    ///   - key: key_2
    ///     value: value_2
    ///     descriptors:
    ///       - key: user
    ///         value: bkthomps
    ///         rate_limit:
    ///           replaces: [{name: specific_limit}]
    ///           requests_per_unit: 10
    ///           unit: second
    /// ";
    /// let config = Config::from_yaml("example7.yaml", yaml, &LoadOptions::default())?;
    /// let request = Request::new("example7", vec![
    ///     Descriptor::new([("key_1", "value_1"), ("user", "bkthomps")]),
    ///     Descriptor::new([("key_2", "value_2"), ("user", "bkthomps")]),
    /// ], 1, &RequestLimits::default()).unwrap();
    /// let matches = config.match_request(&request).unwrap();
    /// assert!(matches!(matches.descriptors()[0], DescriptorMatch::Replaced(_)));
    /// let DescriptorMatch::Limited(limited) = &matches.descriptors()[1] else { unreachable!() };
    /// assert_eq!(limited.limit().requests_per_unit(), 10);
    /// # Ok::<(), weir_rls::ConfigError>(())
    /// ```
    pub fn match_request<'c>(&'c self, request: &Request) -> Result<Matches<'c>, UnknownDomain> {
        let tree = self.tree(request.domain())?;
        let mut items: Vec<DescriptorMatch<'c>> =
            request.descriptors().iter().map(|d| self.match_in(tree, d)).collect();
        if items.iter().any(|m| m.rule().is_some_and(|r| !r.replaces.is_empty())) {
            let replaced: HashSet<&str> = items
                .iter()
                .filter(|m| !matches!(m, DescriptorMatch::Replaced(_)))
                .filter_map(DescriptorMatch::rule)
                .flat_map(Rule::replaces)
                .collect();
            for item in &mut items {
                if let DescriptorMatch::Limited(limited) = item
                    && let Some(rule) = limited.rule()
                    && rule.name().is_some_and(|name| replaced.contains(name))
                {
                    *item = DescriptorMatch::Replaced(rule);
                }
            }
        }
        Ok(Matches { domain: &tree.name, items })
    }

    /// Matches one descriptor (without `replaces`, which needs the whole request).
    pub fn match_descriptor<'c>(
        &'c self,
        domain: &str,
        descriptor: &Descriptor,
    ) -> Result<DescriptorMatch<'c>, UnknownDomain> {
        let tree = self.tree(domain)?;
        Ok(self.match_in(tree, descriptor))
    }

    fn tree(&self, domain: &str) -> Result<&DomainTree, UnknownDomain> {
        self.domains.get(domain).ok_or_else(|| UnknownDomain { domain: domain.to_owned() })
    }

    fn match_in<'c>(&'c self, tree: &'c DomainTree, descriptor: &Descriptor) -> DescriptorMatch<'c> {
        if let Some(o) = descriptor.limit_override() {
            let Ok(limit) = RateLimit::per_unit(o.requests_per_unit, o.unit, self.default_algorithm) else {
                // Cannot happen: at most 2^32 per second, over at most a year.
                return DescriptorMatch::NoLimit;
            };
            let mut key = KeyBuilder::new();
            for entry in descriptor.entries() {
                key.push(entry.key().as_bytes());
                key.push(entry.value().as_bytes());
            }
            return DescriptorMatch::Limited(Limited {
                source: LimitSource::Override,
                limit,
                key: key.finish(),
                cost: descriptor.cost(),
                shadow: false,
                metric_key: Cow::Borrowed(&tree.override_metric_key),
            });
        }
        let Some((node, key)) = tree.walk(descriptor) else {
            return DescriptorMatch::NoLimit;
        };
        let Some(rule) = node.rule.and_then(|id| self.rule(id)) else {
            return DescriptorMatch::NoLimit;
        };
        match rule.limit {
            RuleLimit::Unlimited => DescriptorMatch::Unlimited(rule),
            RuleLimit::Limited(limit) => DescriptorMatch::Limited(Limited {
                source: LimitSource::Rule(rule),
                limit,
                key,
                cost: descriptor.cost(),
                shadow: rule.shadow_mode,
                metric_key: if node.dynamic_metric {
                    Cow::Owned(tree.metric_key(rule, descriptor))
                } else {
                    Cow::Borrowed(&rule.full_key)
                },
            }),
        }
    }
}

/// A domain's descriptors, compiled.
#[derive(Debug)]
pub(crate) struct DomainTree {
    pub(crate) name: Box<str>,
    pub(crate) nodes: Vec<TreeNode>,
    pub(crate) root: Level,
    /// The top level's composite keys (`key` or `key_value`), for the duplicate
    /// check when another file's descriptors are merged into the domain.
    pub(crate) root_composites: HashSet<Box<str>>,
    override_metric_key: Box<str>,
}

/// One config descriptor.
#[derive(Debug)]
pub(crate) struct TreeNode {
    pub(crate) value: NodeValue,
    pub(crate) rule: Option<RuleId>,
    pub(crate) children: Level,
    pub(crate) value_to_metric: bool,
    pub(crate) share_threshold: bool,
    /// Whether a rule here names its metrics with the request's values
    /// (`detailed_metric`, or a `value_to_metric` on a non-exact descriptor on the
    /// way here).
    pub(crate) dynamic_metric: bool,
}

/// A config descriptor's `value`.
#[derive(Debug)]
pub(crate) enum NodeValue {
    Exact(Box<str>),
    Wildcard(Pattern),
    Any,
}

/// How an entry matched a node.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum How {
    Exact,
    Wildcard,
    Any,
}

/// A map of the config's names (domains, keys, values), looked up with a
/// request's: foldhash, seeded per process. Only a config inserts into these maps
/// (a request's strings are looked up, never stored), so there is nothing to flood
/// and no need for SipHash's cost on every entry of every request.
pub(crate) type NameMap<V> = HashMap<Box<str>, V, foldhash::fast::RandomState>;

/// The descriptors of one level, by key.
#[derive(Debug, Default)]
pub(crate) struct Level {
    by_key: NameMap<KeyNodes>,
}

/// The descriptors of one level with one key: by value, the wildcards in file
/// order, and the one without a value.
#[derive(Debug, Default)]
struct KeyNodes {
    exact: NameMap<u32>,
    wildcards: Vec<u32>,
    any: Option<u32>,
}

impl Level {
    pub(crate) fn insert(&mut self, key: &str, index: u32, value: &NodeValue) {
        let nodes = match self.by_key.get_mut(key) {
            Some(nodes) => nodes,
            None => self.by_key.entry(key.into()).or_default(),
        };
        match value {
            NodeValue::Exact(v) => {
                nodes.exact.insert(v.clone(), index);
            }
            NodeValue::Wildcard(_) => nodes.wildcards.push(index),
            NodeValue::Any => nodes.any = Some(index),
        }
    }

    fn is_empty(&self) -> bool {
        self.by_key.is_empty()
    }
}

/// A `value` with `*`s: each matches any run of characters, possibly empty.
#[derive(Debug)]
pub(crate) struct Pattern {
    /// The text between the `*`s (two or more parts).
    parts: Box<[Box<str>]>,
    /// The bytes of all parts together.
    fixed: usize,
}

impl Pattern {
    pub(crate) fn new(text: &str) -> Self {
        let parts: Box<[Box<str>]> = text.split('*').map(Box::from).collect();
        let fixed = parts.iter().map(|p| p.len()).sum();
        Self { parts, fixed }
    }

    /// Whether `value` is the first part, then the middle parts in order (each
    /// after any run of characters), then any run, then the last part.
    pub(crate) fn matches(&self, value: &str) -> bool {
        let [first, middle @ .., last] = &*self.parts else {
            return false;
        };
        if value.len() < self.fixed || !value.starts_with(&**first) || !value.ends_with(&**last) {
            return false;
        }
        // Both cuts are at character boundaries (after a prefix, before a suffix),
        // and in order, since the value holds at least the fixed bytes.
        let Some(mut rest) = value.get(first.len()..value.len() - last.len()) else {
            return false;
        };
        for part in middle {
            match rest.find(&**part) {
                Some(at) => rest = &rest[at + part.len()..],
                None => return false,
            }
        }
        true
    }
}

impl DomainTree {
    pub(crate) fn new(name: &str) -> Self {
        Self {
            name: name.into(),
            nodes: Vec::new(),
            root: Level::default(),
            root_composites: HashSet::new(),
            override_metric_key: format!("{name}.<override>").into_boxed_str(),
        }
    }

    pub(crate) fn push(&mut self, node: TreeNode) -> u32 {
        self.nodes.push(node);
        u32::try_from(self.nodes.len() - 1).unwrap_or(u32::MAX)
    }

    pub(crate) fn set_children(&mut self, index: u32, children: Level) {
        if let Some(node) = self.nodes.get_mut(index as usize) {
            node.children = children;
        }
    }

    pub(crate) fn value_of(&self, index: u32) -> &NodeValue {
        self.nodes.get(index as usize).map_or(&NodeValue::Any, |n| &n.value)
    }

    fn node(&self, index: u32) -> Option<&TreeNode> {
        self.nodes.get(index as usize)
    }

    /// The node of `level` that an entry `key`/`value` matches, and how.
    fn find(&self, level: &Level, key: &str, value: &str) -> Option<(&TreeNode, How)> {
        let nodes = level.by_key.get(key)?;
        if let Some(&index) = nodes.exact.get(value) {
            return Some((self.node(index)?, How::Exact));
        }
        for &index in &nodes.wildcards {
            let node = self.node(index)?;
            if let NodeValue::Wildcard(pattern) = &node.value
                && pattern.matches(value)
            {
                return Some((node, How::Wildcard));
            }
        }
        Some((self.node(nodes.any?)?, How::Any))
    }

    /// The node the descriptor's last entry matches (if the walk gets there), and
    /// the counter key of the values counted separately on the way.
    fn walk(&self, descriptor: &Descriptor) -> Option<(&TreeNode, CounterKey)> {
        let mut level = &self.root;
        let mut key = KeyBuilder::new();
        let last = descriptor.len().checked_sub(1)?;
        for (i, entry) in descriptor.entries().enumerate() {
            let (node, how) = self.find(level, entry.key(), entry.value())?;
            let shared = how == How::Wildcard && node.share_threshold;
            if how != How::Exact && !shared {
                key.push(entry.value().as_bytes());
            }
            if i == last {
                return Some((node, key.finish()));
            }
            if node.children.is_empty() {
                return None;
            }
            level = &node.children;
        }
        None
    }

    /// The metric name of `rule` as `descriptor` matched it (upstream's detailed or
    /// value-to-metric stats key), each request value at most
    /// [`MAX_METRIC_VALUE_BYTES`].
    fn metric_key(&self, rule: &Rule, descriptor: &Descriptor) -> String {
        let mut out = String::from(&*self.name);
        let mut level = &self.root;
        for entry in descriptor.entries() {
            let Some((node, how)) = self.find(level, entry.key(), entry.value()) else {
                break;
            };
            out.push('.');
            out.push_str(entry.key());
            let pattern = || match &node.value {
                NodeValue::Wildcard(pattern) => pattern.parts.join("*"),
                _ => String::new(),
            };
            match how {
                How::Wildcard if node.share_threshold => {
                    out.push('_');
                    out.push_str(&pattern());
                }
                _ if rule.detailed_metric || how == How::Exact || node.value_to_metric => {
                    if !entry.value().is_empty() {
                        out.push('_');
                        push_bounded(&mut out, entry.value());
                    }
                }
                How::Wildcard => {
                    out.push('_');
                    out.push_str(&pattern());
                }
                How::Exact | How::Any => {}
            }
            level = &node.children;
        }
        out
    }
}

/// Writes `value`, or, if longer than [`MAX_METRIC_VALUE_BYTES`], `#` and the hex of
/// its hash.
fn push_bounded(out: &mut String, value: &str) {
    if value.len() <= MAX_METRIC_VALUE_BYTES {
        out.push_str(value);
        return;
    }
    out.push('#');
    for byte in weir_rl_core::long_key_hash(value.as_bytes()) {
        use fmt::Write as _;
        let _ = write!(out, "{byte:02x}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn patterns_match_as_upstream_describes() {
        let cases: [(&str, &str, bool); 14] = [
            ("value*", "value1", true),
            ("value*", "value", true),
            ("value*", "valu", false),
            ("value*", "xvalue1", false),
            ("/api/*/action", "/api/123/action", true),
            ("/api/*/action", "/api//action", true),
            ("/api/*/action", "/api/123/other", false),
            ("/api/*/resource/*/action", "/api/v1/resource/123/action", true),
            ("/api/*/resource/*/action", "/api/v1/resourc/123/action", false),
            ("bar*b", "barb", true),
            ("ab*ba", "aba", false),
            ("*", "", true),
            ("*x*", "x", true),
            ("é*é", "éé", true),
        ];
        for (pattern, value, want) in cases {
            assert_eq!(Pattern::new(pattern).matches(value), want, "{pattern:?} ~ {value:?}");
        }
    }

    #[test]
    fn keys_are_length_prefixed_and_bounded() {
        let mut a = KeyBuilder::new();
        a.push(b"ab");
        a.push(b"c");
        let mut b = KeyBuilder::new();
        b.push(b"a");
        b.push(b"bc");
        assert_ne!(a.finish(), b.finish());
        let mut long = KeyBuilder::new();
        long.push(&[b'x'; 100]);
        long.push(&[b'y'; 100]);
        let long = long.finish();
        assert!(long.is_hashed());
        assert_eq!(long.as_bytes().len(), 17);
        // Exactly full: 1 tag + 1 prefix byte + 127 bytes.
        let mut full = KeyBuilder::new();
        full.push(&[b'z'; 127]);
        let full = full.finish();
        assert!(!full.is_hashed());
        assert_eq!(full.as_bytes().len(), 1 + MAX_COUNTER_KEY_BYTES);
    }

    #[test]
    fn varints_round_trip() {
        let mut buf = [0u8; 10];
        assert_eq!(varint(0, &mut buf), [0]);
        assert_eq!(varint(127, &mut buf), [127]);
        assert_eq!(varint(128, &mut buf), [0x80, 1]);
        assert_eq!(varint(u64::MAX, &mut buf).len(), 10);
    }

    #[test]
    fn long_metric_values_are_hashed() {
        let mut out = String::new();
        push_bounded(&mut out, &"v".repeat(MAX_METRIC_VALUE_BYTES));
        assert_eq!(out.len(), MAX_METRIC_VALUE_BYTES);
        let mut out = String::new();
        push_bounded(&mut out, &"v".repeat(MAX_METRIC_VALUE_BYTES + 1));
        assert_eq!(out.len(), 33);
        assert!(out.starts_with('#'));
    }
}

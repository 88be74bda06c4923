//! What a config file's `rate_limit:` becomes: a [`Rule`] with its [`RateLimit`]
//! (requests per unit or per window, the algorithm that enforces it, its
//! [`Quota`]).

use core::fmt;
use core::time::Duration;
use weir_rl_core::Quota;

/// A unit of envoyproxy/ratelimit's `rate_limit.unit`, matched case-insensitively
/// (`second`, `MINUTE`, `Hour`...). Months are 30 days and years 365 days, as
/// upstream counts them.
///
/// ```
/// use weir_rls::Unit;
///
/// assert_eq!(Unit::parse("minute"), Some(Unit::Minute));
/// assert_eq!(Unit::parse("WEEK").map(Unit::seconds), Some(604_800));
/// assert_eq!(Unit::parse("fortnight"), None);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Unit {
    /// 1 second.
    Second,
    /// 60 seconds.
    Minute,
    /// 3 600 seconds.
    Hour,
    /// 86 400 seconds.
    Day,
    /// 7 days.
    Week,
    /// 30 days.
    Month,
    /// 365 days.
    Year,
}

impl Unit {
    /// Every unit, shortest first.
    pub const ALL: [Unit; 7] = [Unit::Second, Unit::Minute, Unit::Hour, Unit::Day, Unit::Week, Unit::Month, Unit::Year];

    /// The unit named `name`, in any case; `None` for any other name (including
    /// `unknown`, which upstream refuses as well).
    pub fn parse(name: &str) -> Option<Unit> {
        Unit::ALL.into_iter().find(|unit| unit.name().eq_ignore_ascii_case(name))
    }

    /// The unit's name as the protocol spells it (`SECOND`, `MINUTE`...).
    pub const fn name(self) -> &'static str {
        match self {
            Unit::Second => "SECOND",
            Unit::Minute => "MINUTE",
            Unit::Hour => "HOUR",
            Unit::Day => "DAY",
            Unit::Week => "WEEK",
            Unit::Month => "MONTH",
            Unit::Year => "YEAR",
        }
    }

    /// The unit's length in seconds.
    pub const fn seconds(self) -> u64 {
        match self {
            Unit::Second => 1,
            Unit::Minute => 60,
            Unit::Hour => 3_600,
            Unit::Day => 86_400,
            Unit::Week => 604_800,
            Unit::Month => 2_592_000,
            Unit::Year => 31_536_000,
        }
    }

    /// The unit's length.
    pub const fn duration(self) -> Duration {
        Duration::from_secs(self.seconds())
    }

    /// The unit whose length is exactly `window`, if any.
    pub fn of_length(window: Duration) -> Option<Unit> {
        Unit::ALL.into_iter().find(|unit| unit.duration() == window)
    }

    /// The unit's number in the response's `RateLimit.Unit` enum (which numbers
    /// `WEEK` 7, after `YEAR`).
    pub const fn response_code(self) -> i32 {
        match self {
            Unit::Second => 1,
            Unit::Minute => 2,
            Unit::Hour => 3,
            Unit::Day => 4,
            Unit::Month => 5,
            Unit::Year => 6,
            Unit::Week => 7,
        }
    }

    /// The unit numbered `code` in the response's `RateLimit.Unit` enum (the
    /// request's `RateLimitUnit` numbers 1 to 6 alike); `None` for `UNKNOWN` (0) and
    /// numbers no unit has.
    pub const fn from_response_code(code: i32) -> Option<Unit> {
        match code {
            1 => Some(Unit::Second),
            2 => Some(Unit::Minute),
            3 => Some(Unit::Hour),
            4 => Some(Unit::Day),
            5 => Some(Unit::Month),
            6 => Some(Unit::Year),
            7 => Some(Unit::Week),
            _ => None,
        }
    }
}

impl fmt::Display for Unit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// The algorithm that enforces a rule: weir's `algorithm:` key in a rule's
/// `rate_limit:`, or the service-wide default
/// ([`LoadOptions::default_algorithm`](crate::LoadOptions::default_algorithm)).
///
/// The default is [`FixedWindow`](Algorithm::FixedWindow), what envoyproxy/ratelimit
/// does: a service that replaces it answers as it did until a rule asks for another.
///
/// ```
/// use weir_rls::Algorithm;
///
/// assert_eq!(Algorithm::default(), Algorithm::FixedWindow);
/// assert_eq!(Algorithm::parse("sliding_window"), Some(Algorithm::SlidingWindow));
/// assert_eq!(Algorithm::Gcra.name(), "gcra");
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[non_exhaustive]
pub enum Algorithm {
    /// `fixed_window`: a counter per window of the unit (`weir_window::FixedWindow`).
    #[default]
    FixedWindow,
    /// `sliding_window`: the sliding-window counter (`weir_window::SlidingWindow`).
    SlidingWindow,
    /// `sliding_log`: the exact sliding log (`weir_window::SlidingLog`).
    SlidingLog,
    /// `gcra`: a token bucket (`weir_gcra`), the only one with a `burst` of its own.
    Gcra,
}

impl Algorithm {
    /// Every algorithm.
    pub const ALL: [Algorithm; 4] =
        [Algorithm::FixedWindow, Algorithm::SlidingWindow, Algorithm::SlidingLog, Algorithm::Gcra];

    /// The algorithm named `name` as the config spells it (`gcra`, `sliding_window`,
    /// `fixed_window`, `sliding_log`; exact case).
    pub fn parse(name: &str) -> Option<Algorithm> {
        Algorithm::ALL.into_iter().find(|algorithm| algorithm.name() == name)
    }

    /// The algorithm's name in the config.
    pub const fn name(self) -> &'static str {
        match self {
            Algorithm::FixedWindow => "fixed_window",
            Algorithm::SlidingWindow => "sliding_window",
            Algorithm::SlidingLog => "sliding_log",
            Algorithm::Gcra => "gcra",
        }
    }
}

impl fmt::Display for Algorithm {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A limit: `requests_per_unit` per window, enforced by an algorithm.
///
/// The window is the rule's `unit`, or weir's `window:` (any whole number of
/// seconds). The [`Quota`] is built (and validated) when the config is loaded; a
/// limit of 0 requests has none: it refuses every request that costs anything,
/// as upstream's "black list" rules do.
///
/// ```
/// use std::time::Duration;
/// use weir_rls::{Algorithm, RateLimit, Unit};
///
/// let limit = RateLimit::per_unit(100, Unit::Minute, Algorithm::FixedWindow)?;
/// assert_eq!(limit.window(), Duration::from_secs(60));
/// assert_eq!(limit.quota().map(|q| q.burst()), Some(100));
///
/// let blocked = RateLimit::per_unit(0, Unit::Second, Algorithm::FixedWindow)?;
/// assert!(blocked.quota().is_none());
/// # Ok::<(), weir_rl_core::QuotaError>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct RateLimit {
    requests_per_unit: u32,
    /// The unit reported in `current_limit`: the rule's unit, or the unit whose
    /// length the `window:` is; `None` for other windows (reported as `UNKNOWN`).
    unit: Option<Unit>,
    window: Duration,
    algorithm: Algorithm,
    /// `None` exactly when `requests_per_unit` is 0.
    quota: Option<Quota>,
}

impl RateLimit {
    /// `requests_per_unit` per `unit`, the burst equal to the limit.
    pub fn per_unit(
        requests_per_unit: u32,
        unit: Unit,
        algorithm: Algorithm,
    ) -> Result<Self, weir_rl_core::QuotaError> {
        Self::new(requests_per_unit, unit.duration(), algorithm, None)
    }

    /// `requests_per_unit` per `window`, with an optional burst (a token bucket's
    /// capacity; the limit when `None`).
    pub fn new(
        requests_per_unit: u32,
        window: Duration,
        algorithm: Algorithm,
        burst: Option<u32>,
    ) -> Result<Self, weir_rl_core::QuotaError> {
        let quota = match requests_per_unit {
            0 => {
                if window.is_zero() {
                    return Err(weir_rl_core::QuotaError::ZeroPeriod);
                }
                None
            }
            n => {
                let quota = Quota::new(u64::from(n), window)?;
                Some(match burst {
                    Some(burst) => quota.with_burst(u64::from(burst))?,
                    None => quota,
                })
            }
        };
        Ok(Self { requests_per_unit, unit: Unit::of_length(window), window, algorithm, quota })
    }

    /// Requests admitted per window (`current_limit.requests_per_unit`).
    pub const fn requests_per_unit(&self) -> u32 {
        self.requests_per_unit
    }

    /// The unit reported in `current_limit`: `None` for a `window:` that is no
    /// unit's length.
    pub const fn unit(&self) -> Option<Unit> {
        self.unit
    }

    /// The window the requests are counted over.
    pub const fn window(&self) -> Duration {
        self.window
    }

    /// The algorithm that enforces the limit.
    pub const fn algorithm(&self) -> Algorithm {
        self.algorithm
    }

    /// The limit as a [`Quota`]; `None` for a limit of 0 (every request that costs
    /// anything is over).
    pub const fn quota(&self) -> Option<Quota> {
        self.quota
    }
}

/// A rule's index in its [`Config`](crate::Config) ([`Config::rule`](crate::Config::rule)).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct RuleId(pub(crate) u32);

impl RuleId {
    /// The index in [`Config::rules`](crate::Config::rules).
    pub const fn index(self) -> usize {
        self.0 as usize
    }
}

/// What a rule does when it is the one a descriptor matches.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RuleLimit {
    /// Counted against a limit.
    Limited(RateLimit),
    /// `unlimited: true`: always allowed, never counted.
    Unlimited,
}

/// One descriptor of a config file that has a `rate_limit:`.
///
/// Its place in the tree is its [`key_path`](Rule::key_path): the descriptors from
/// the domain down, each written `key` or `key_value` (a wildcard written as its
/// pattern), joined by `.`, as envoyproxy/ratelimit names its statistics
/// (`to_number`, `message_type_marketing.to_number`). The domain and the path name
/// the rule uniquely within a [`Config`](crate::Config), and
/// [`full_key`](Rule::full_key) is both, joined by `.`: the name metrics label the
/// rule with.
#[derive(Debug, Clone)]
pub struct Rule {
    pub(crate) id: RuleId,
    pub(crate) domain: Box<str>,
    pub(crate) key_path: Box<str>,
    pub(crate) full_key: Box<str>,
    pub(crate) name: Option<Box<str>>,
    pub(crate) limit: RuleLimit,
    pub(crate) replaces: Box<[Box<str>]>,
    pub(crate) shadow_mode: bool,
    pub(crate) detailed_metric: bool,
    pub(crate) quota_mode: bool,
    pub(crate) file: Box<str>,
    pub(crate) line: u64,
}

impl Rule {
    /// The rule's index in its config.
    pub const fn id(&self) -> RuleId {
        self.id
    }

    /// The domain the rule is in.
    pub fn domain(&self) -> &str {
        &self.domain
    }

    /// The rule's descriptors from the domain down (`message_type_marketing.to_number`).
    pub fn key_path(&self) -> &str {
        &self.key_path
    }

    /// `domain.key_path`: the rule's name in metrics, as upstream's statistics name it.
    pub fn full_key(&self) -> &str {
        &self.full_key
    }

    /// `rate_limit.name`, when set (reported in `current_limit.name`, and what other
    /// rules' `replaces` name).
    pub fn name(&self) -> Option<&str> {
        self.name.as_deref()
    }

    /// The limit, or `Unlimited`.
    pub const fn limit(&self) -> &RuleLimit {
        &self.limit
    }

    /// The names of the rules this one replaces when both apply to one request.
    pub fn replaces(&self) -> impl ExactSizeIterator<Item = &str> {
        self.replaces.iter().map(|name| &**name)
    }

    /// `shadow_mode: true`: counted, but an over-limit answer is reported as OK.
    pub const fn shadow_mode(&self) -> bool {
        self.shadow_mode
    }

    /// `detailed_metric: true`: metrics name the request's values (bounded), not
    /// the rule's path.
    pub const fn detailed_metric(&self) -> bool {
        self.detailed_metric
    }

    /// `quota_mode: true` (read, not yet acted on: see the crate docs).
    pub const fn quota_mode(&self) -> bool {
        self.quota_mode
    }

    /// The config file the rule is in.
    pub fn file(&self) -> &str {
        &self.file
    }

    /// The line of the rule's descriptor (its `key:`) in that file.
    pub const fn line(&self) -> u64 {
        self.line
    }

    /// Whether `other` counts the same way: same domain, same place in the tree,
    /// same limit and algorithm. A reloaded config can keep such a rule's counters.
    pub fn counts_like(&self, other: &Rule) -> bool {
        self.domain == other.domain && self.key_path == other.key_path && self.limit == other.limit
    }
}

/// Parses weir's `window:`: a whole number of seconds written as one or more
/// numbers each followed by a unit, `s`, `m`, `h`, `d` or `w` (`30s`, `1m30s`,
/// `2h`, `7d`). `None` for anything else, and for a window of 0.
pub(crate) fn parse_window(text: &str) -> Option<Duration> {
    let mut total: u64 = 0;
    let mut digits: Option<u64> = None;
    for c in text.trim().chars() {
        match c {
            '0'..='9' => {
                let d = u64::from(c as u8 - b'0');
                digits = Some(digits.unwrap_or(0).checked_mul(10)?.checked_add(d)?);
            }
            's' | 'm' | 'h' | 'd' | 'w' => {
                let n = digits.take()?;
                let unit = match c {
                    's' => 1,
                    'm' => 60,
                    'h' => 3_600,
                    'd' => 86_400,
                    _ => 604_800,
                };
                total = total.checked_add(n.checked_mul(unit)?)?;
            }
            _ => return None,
        }
    }
    if digits.is_some() || total == 0 {
        return None;
    }
    Some(Duration::from_secs(total))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn windows_parse_as_whole_seconds() {
        assert_eq!(parse_window("30s"), Some(Duration::from_secs(30)));
        assert_eq!(parse_window("1m30s"), Some(Duration::from_secs(90)));
        assert_eq!(parse_window("2h"), Some(Duration::from_secs(7_200)));
        assert_eq!(parse_window("1w"), Some(Duration::from_secs(604_800)));
        for bad in ["", "30", "s", "0s", "1.5s", "30 s", "-1s", "1ms", "99999999999999999999s", "1x"] {
            assert_eq!(parse_window(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn units_round_trip_through_their_response_codes() {
        for unit in Unit::ALL {
            assert_eq!(Unit::from_response_code(unit.response_code()), Some(unit));
            assert_eq!(Unit::parse(&unit.name().to_lowercase()), Some(unit));
            assert_eq!(Unit::of_length(unit.duration()), Some(unit));
        }
        assert_eq!(Unit::from_response_code(0), None);
        assert_eq!(Unit::parse("unknown"), None);
    }

    #[test]
    fn a_window_that_is_no_unit_reports_none() {
        let limit = RateLimit::new(10, Duration::from_secs(30), Algorithm::Gcra, Some(3)).unwrap();
        assert_eq!(limit.unit(), None);
        assert_eq!(limit.quota().unwrap().burst(), 3);
        assert_eq!(RateLimit::per_unit(5, Unit::Hour, Algorithm::SlidingLog).unwrap().unit(), Some(Unit::Hour));
    }
}

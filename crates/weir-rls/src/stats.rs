//! The service's metrics, under envoyproxy/ratelimit's Prometheus names, through
//! the [`metrics`](https://docs.rs/metrics) facade (the binary renders them with
//! metrics-exporter-prometheus on `/metrics`; a library user installs any recorder).
//!
//! # Per rule
//!
//! Counted for every descriptor a rule (or a `limit` override) decided, labelled
//! `domain`, `key1`, `key2` (the first two levels of the rule's path, as upstream's
//! statsd-to-Prometheus mapping labels them) and `key` (the whole path, which tells
//! apart rules deeper than two levels):
//!
//! | name | adds |
//! |---|---|
//! | [`TOTAL_HITS`] | the descriptor's cost, on every check |
//! | [`WITHIN_LIMIT`] | the cost, when admitted |
//! | [`NEAR_LIMIT`] | the part of the cost above the near-limit threshold (⌊limit × [`MetricsOptions::near_limit_ratio`]⌋, 80% by default) and at most the limit |
//! | [`OVER_LIMIT`] | the part of the cost above the limit, when refused |
//! | [`SHADOW_MODE`] | the same, when a shadow-mode rule refused (and answered OK) |
//!
//! These are upstream's formulas, from what the counter had before the request
//! (`limit - remaining`, as the store answered it).
//!
//! The labels come from the config only: the rule's path, never a request's value
//! — except on a `detailed_metric` or `value_to_metric` rule, whose path holds the
//! request's values (each at most [`MAX_METRIC_VALUE_BYTES`](crate::MAX_METRIC_VALUE_BYTES)
//! bytes). Such series are bounded in count ([`MetricsOptions::max_detailed_series`],
//! across the service): once that many exist, a new value is counted under the
//! rule's own path instead. A `limit` override is counted under
//! `<domain>.<override>` (among those series).
//!
//! # Per service
//!
//! | name | labels | what |
//! |---|---|---|
//! | [`TOTAL_REQUESTS`] | `grpc_method="ShouldRateLimit"` | requests answered or refused |
//! | [`RESPONSE_TIME`] | `grpc_method="ShouldRateLimit"` | seconds from the request to its answer (a histogram) |
//! | [`SHOULD_RATE_LIMIT_ERROR`] | `err_type` | requests refused: `service_error` (the request, its domain, no config) or the backend's ([`MetricsOptions::backend_error`]: `redis_error`, `memory_error`) |
//! | [`CONFIG_LOAD_SUCCESS`], [`CONFIG_LOAD_ERROR`] | | config loads and reloads, accepted or refused |
//! | [`GLOBAL_SHADOW_MODE`] | | requests over a limit answered OK in global shadow mode |

use crate::matching::Limited;
use crate::rule::Rule;
use metrics::{Counter, Histogram, Label};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use weir_rl_core::Decision;

/// Hits counted against a rule.
pub const TOTAL_HITS: &str = "ratelimit_service_rate_limit_total_hits";
/// Hits admitted.
pub const WITHIN_LIMIT: &str = "ratelimit_service_rate_limit_within_limit";
/// Hits above the near-limit threshold.
pub const NEAR_LIMIT: &str = "ratelimit_service_rate_limit_near_limit";
/// Hits above the limit.
pub const OVER_LIMIT: &str = "ratelimit_service_rate_limit_over_limit";
/// Hits above the limit of a shadow-mode rule.
pub const SHADOW_MODE: &str = "ratelimit_service_rate_limit_shadow_mode";
/// Requests answered or refused.
pub const TOTAL_REQUESTS: &str = "ratelimit_service_total_requests";
/// Seconds from a request to its answer.
pub const RESPONSE_TIME: &str = "ratelimit_service_response_time_seconds";
/// The bucket bounds, in seconds, of the binary's [`RESPONSE_TIME`] histogram
/// (50 µs to 1 s).
pub const RESPONSE_TIME_BUCKETS: [f64; 13] =
    [0.000_05, 0.000_1, 0.000_25, 0.000_5, 0.001, 0.002_5, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1.0];
/// Requests refused, by `err_type`.
pub const SHOULD_RATE_LIMIT_ERROR: &str = "ratelimit_service_should_rate_limit_error";
/// Config loads accepted.
pub const CONFIG_LOAD_SUCCESS: &str = "ratelimit_service_config_load_success";
/// Config loads refused.
pub const CONFIG_LOAD_ERROR: &str = "ratelimit_service_config_load_error";
/// Requests global shadow mode answered OK that were over a limit.
pub const GLOBAL_SHADOW_MODE: &str = "ratelimit_service_global_shadow_mode";

/// How the service counts.
///
/// ```
/// use weir_rls::stats::MetricsOptions;
///
/// let options = MetricsOptions::default().near_limit_ratio(0.9)?.backend_error("redis_error");
/// assert_eq!(options.max_detailed_series, 10_000);
/// # Ok::<(), weir_rls::stats::InvalidRatio>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq)]
#[non_exhaustive]
pub struct MetricsOptions {
    /// The share of a limit above which admitted hits count as near the limit
    /// (upstream's `NEAR_LIMIT_RATIO`). Default: 0.8.
    pub near_limit_ratio: f64,
    /// The most series of `detailed_metric` and `value_to_metric` rules (each a
    /// request's values) across the service. Default: 10 000.
    pub max_detailed_series: usize,
    /// The `err_type` of a backend failure. Default: `backend_error`; the binary
    /// sets `redis_error` (upstream's name) or `memory_error`.
    pub backend_error: &'static str,
}

impl Default for MetricsOptions {
    fn default() -> Self {
        Self { near_limit_ratio: 0.8, max_detailed_series: 10_000, backend_error: "backend_error" }
    }
}

/// A near-limit ratio outside `(0, 1]`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct InvalidRatio(pub f64);

impl core::fmt::Display for InvalidRatio {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(f, "the near-limit ratio {} is not above 0 and at most 1", self.0)
    }
}

impl std::error::Error for InvalidRatio {}

impl MetricsOptions {
    /// With this near-limit ratio, which must be above 0 and at most 1.
    pub fn near_limit_ratio(mut self, ratio: f64) -> Result<Self, InvalidRatio> {
        if !(ratio > 0.0 && ratio <= 1.0) {
            return Err(InvalidRatio(ratio));
        }
        self.near_limit_ratio = ratio;
        Ok(self)
    }

    /// With at most this many detailed series.
    pub fn max_detailed_series(mut self, max: usize) -> Self {
        self.max_detailed_series = max;
        self
    }

    /// With this `err_type` for backend failures.
    pub fn backend_error(mut self, err_type: &'static str) -> Self {
        self.backend_error = err_type;
        self
    }
}

/// A rule's five counters, registered once (when its config is loaded, or its
/// detailed series first seen).
#[derive(Debug)]
pub(crate) struct RuleCounters {
    total_hits: Counter,
    within_limit: Counter,
    near_limit: Counter,
    over_limit: Counter,
    shadow_mode: Counter,
}

impl RuleCounters {
    /// The counters of the metric key `domain.path`.
    pub(crate) fn register(domain: &str, metric_key: &str) -> Self {
        let path = metric_key.strip_prefix(domain).and_then(|p| p.strip_prefix('.')).unwrap_or(metric_key);
        let mut levels = path.splitn(3, '.');
        let mut labels = vec![Label::new("domain", domain.to_owned())];
        if let Some(key1) = levels.next() {
            labels.push(Label::new("key1", key1.to_owned()));
        }
        if let Some(key2) = levels.next() {
            labels.push(Label::new("key2", key2.to_owned()));
        }
        labels.push(Label::new("key", path.to_owned()));
        let counter = |name: &'static str| metrics::counter!(name, labels.iter());
        Self {
            total_hits: counter(TOTAL_HITS),
            within_limit: counter(WITHIN_LIMIT),
            near_limit: counter(NEAR_LIMIT),
            over_limit: counter(OVER_LIMIT),
            shadow_mode: counter(SHADOW_MODE),
        }
    }

    /// Counts one decided descriptor, with upstream's formulas.
    fn record(&self, cost: u64, decision: &Decision, shadow: bool, near_ratio: f64) {
        let limit = decision.limit();
        let remaining = decision.remaining().min(limit);
        // Truncated towards zero, as upstream's threshold is.
        let near = ((limit as f64) * near_ratio) as u64;
        self.total_hits.increment(cost);
        if decision.is_allowed() {
            let after = limit - remaining;
            let before = after.saturating_sub(cost);
            self.within_limit.increment(cost);
            if after > near {
                self.near_limit.increment(if before >= near { cost } else { after - near });
            }
        } else {
            let before = limit - remaining;
            let after = before.saturating_add(cost);
            let over = if before >= limit { cost } else { after.saturating_sub(limit) };
            self.over_limit.increment(over);
            if before < limit {
                self.near_limit.increment(limit - near.max(before));
            }
            if shadow {
                self.shadow_mode.increment(over);
            }
        }
    }
}

/// The counters of one config: one set per rule with a limit.
#[derive(Debug, Default)]
pub(crate) struct ConfigCounters {
    rules: Box<[Option<RuleCounters>]>,
}

impl ConfigCounters {
    /// Registers the counters of every limited rule of `config` with the recorder
    /// in force.
    pub(crate) fn register(config: &crate::Config) -> Self {
        let rules = config
            .rules()
            .iter()
            .map(|rule| {
                matches!(rule.limit(), crate::RuleLimit::Limited(_))
                    .then(|| RuleCounters::register(rule.domain(), rule.full_key()))
            })
            .collect();
        Self { rules }
    }

    fn rule(&self, rule: &Rule) -> Option<&RuleCounters> {
        self.rules.get(rule.id().index()).and_then(Option::as_ref)
    }
}

/// The service-wide metrics: request counts, latency, errors, and the bounded
/// detailed series.
#[derive(Debug)]
pub(crate) struct ServiceStats {
    options: MetricsOptions,
    total_requests: Counter,
    response_time: Histogram,
    service_error: Counter,
    global_shadow: Counter,
    /// Registered at the first backend failure: a service that never fails shows
    /// no series of its backend's errors.
    backend_error: std::sync::OnceLock<Counter>,
    detailed: Mutex<HashMap<Box<str>, Arc<RuleCounters>>>,
}

const METHOD: [(&str, &str); 1] = [("grpc_method", "ShouldRateLimit")];

impl ServiceStats {
    pub(crate) fn new(options: MetricsOptions) -> Self {
        Self {
            options,
            total_requests: metrics::counter!(TOTAL_REQUESTS, &METHOD),
            response_time: metrics::histogram!(RESPONSE_TIME, &METHOD),
            service_error: metrics::counter!(SHOULD_RATE_LIMIT_ERROR, "err_type" => "service_error"),
            backend_error: std::sync::OnceLock::new(),
            global_shadow: metrics::counter!(GLOBAL_SHADOW_MODE),
            detailed: Mutex::new(HashMap::new()),
        }
    }

    /// Counts one decided descriptor on its rule's series (or its detailed one).
    pub(crate) fn record(&self, counters: &ConfigCounters, domain: &str, limited: &Limited<'_>, decision: &Decision) {
        let ratio = self.options.near_limit_ratio;
        let record = |c: &RuleCounters| c.record(limited.cost(), decision, limited.shadow(), ratio);
        let Some(rule) = limited.rule() else {
            // `<domain>.<override>`: one series per domain, among the bounded ones.
            if let Some(c) = self.detailed(domain, limited.metric_key()) {
                record(&c);
            }
            return;
        };
        if limited.metric_key() == rule.full_key() {
            if let Some(c) = counters.rule(rule) {
                record(c);
            }
            return;
        }
        match self.detailed(domain, limited.metric_key()) {
            Some(c) => record(&c),
            None => {
                if let Some(c) = counters.rule(rule) {
                    record(c);
                }
            }
        }
    }

    /// The detailed series `metric_key`, registered on first sight while fewer than
    /// the bound exist; `None` past the bound.
    fn detailed(&self, domain: &str, metric_key: &str) -> Option<Arc<RuleCounters>> {
        // A poisoned map is still a map of counters: keep counting.
        let mut map = self.detailed.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(c) = map.get(metric_key) {
            return Some(Arc::clone(c));
        }
        if map.len() >= self.options.max_detailed_series {
            return None;
        }
        let c = Arc::new(RuleCounters::register(domain, metric_key));
        map.insert(metric_key.into(), Arc::clone(&c));
        Some(c)
    }

    /// Counts a request over a limit answered OK in global shadow mode.
    pub(crate) fn global_shadow(&self) {
        self.global_shadow.increment(1);
    }

    /// Counts one request, its time, and its error if it was refused.
    pub(crate) fn finished(&self, started: std::time::Instant, error: Option<&crate::ServiceError>) {
        self.total_requests.increment(1);
        self.response_time.record(started.elapsed().as_secs_f64());
        match error {
            Some(crate::ServiceError::Decide(_)) => self
                .backend_error
                .get_or_init(|| metrics::counter!(SHOULD_RATE_LIMIT_ERROR, "err_type" => self.options.backend_error))
                .increment(1),
            Some(_) => self.service_error.increment(1),
            None => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use metrics_util::debugging::{DebugValue, DebuggingRecorder};
    use weir_rl_core::Snapshot;

    /// `(name, value)` of every counter whose labels include `key`.
    fn counts(recorder: &DebuggingRecorder) -> Vec<(String, u64)> {
        let mut out: Vec<(String, u64)> = recorder
            .snapshotter()
            .snapshot()
            .into_vec()
            .into_iter()
            .filter_map(|(key, _, _, value)| match value {
                DebugValue::Counter(n) if n > 0 => Some((key.key().name().to_owned(), n)),
                _ => None,
            })
            .collect();
        out.sort();
        out
    }

    fn allowed(limit: u64, remaining: u64) -> Decision {
        Decision::allowed(Snapshot::new(limit, remaining, 0))
    }

    fn denied(limit: u64, remaining: u64) -> Decision {
        Decision::denied(Snapshot::new(limit, remaining, 0), 1)
    }

    #[test]
    fn hits_are_split_as_upstream_splits_them() {
        // Limit 10, near at 8. (cost, decision, shadow) → counters.
        type Case = (u64, Decision, bool, Vec<(&'static str, u64)>);
        let cases: Vec<Case> = vec![
            // 1 → 5: within.
            (4, allowed(10, 5), false, vec![(TOTAL_HITS, 4), (WITHIN_LIMIT, 4)]),
            // 6 → 9: within, 1 above 8.
            (3, allowed(10, 1), false, vec![(NEAR_LIMIT, 1), (TOTAL_HITS, 3), (WITHIN_LIMIT, 3)]),
            // 9 → 10: within, all of it near.
            (1, allowed(10, 0), false, vec![(NEAR_LIMIT, 1), (TOTAL_HITS, 1), (WITHIN_LIMIT, 1)]),
            // 7 + 5 = 12: 2 over, 8..10 near (2).
            (5, denied(10, 3), false, vec![(NEAR_LIMIT, 2), (OVER_LIMIT, 2), (TOTAL_HITS, 5)]),
            // 10 + 2: all over.
            (2, denied(10, 0), false, vec![(OVER_LIMIT, 2), (TOTAL_HITS, 2)]),
            // Shadow: over, and shadow the same.
            (2, denied(10, 0), true, vec![(OVER_LIMIT, 2), (SHADOW_MODE, 2), (TOTAL_HITS, 2)]),
        ];
        for (cost, decision, shadow, want) in cases {
            let recorder = DebuggingRecorder::new();
            metrics::with_local_recorder(&recorder, || {
                RuleCounters::register("d", "d.k").record(cost, &decision, shadow, 0.8);
            });
            let want: Vec<(String, u64)> = want.into_iter().map(|(n, v)| (n.to_owned(), v)).collect();
            assert_eq!(counts(&recorder), want, "cost {cost}, {decision:?}");
        }
    }

    #[test]
    fn labels_are_upstreams_and_the_whole_path() {
        let recorder = DebuggingRecorder::new();
        metrics::with_local_recorder(&recorder, || {
            RuleCounters::register("d", "d.a_b.c.e").total_hits.increment(1);
            RuleCounters::register("d", "d.a").total_hits.increment(1);
        });
        let mut labels: Vec<Vec<(String, String)>> = recorder
            .snapshotter()
            .snapshot()
            .into_vec()
            .into_iter()
            .filter(|(key, ..)| key.key().name() == TOTAL_HITS)
            .map(|(key, ..)| key.key().labels().map(|l| (l.key().to_owned(), l.value().to_owned())).collect())
            .collect();
        labels.sort();
        let pairs = |v: &[(&str, &str)]| v.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect::<Vec<_>>();
        assert_eq!(
            labels,
            [
                pairs(&[("domain", "d"), ("key1", "a"), ("key", "a")]),
                pairs(&[("domain", "d"), ("key1", "a_b"), ("key2", "c"), ("key", "a_b.c.e")]),
            ]
        );
    }

    #[test]
    fn ratios_outside_zero_to_one_are_refused() {
        for bad in [0.0, -0.5, 1.5, f64::NAN] {
            assert!(MetricsOptions::default().near_limit_ratio(bad).is_err(), "{bad}");
        }
        assert_eq!(MetricsOptions::default().near_limit_ratio(1.0).map(|o| o.near_limit_ratio), Ok(1.0));
    }
}

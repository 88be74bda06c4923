//! What each fuzz target runs on one input, shared by the cargo-fuzz targets
//! (`fuzz_targets/*.rs`) and by the test that replays the kept corpus on the
//! stable toolchain (`tests/fuzz_corpus.rs`). Each function panics exactly when a
//! property is broken: a panic in weir-rls, or an answer out of its bounds.

#![allow(dead_code)]

use core::future::Future;
use core::pin::pin;
use core::task::{Context, Poll, Waker};
use prost::Message as _;
use std::sync::Arc;
use weir_rl_core::{Decision, Snapshot};
use weir_rls::proto;
use weir_rls::{
    Check, Compatibility, Config, Decide, DecideError, DescriptorMatch, Limits, LoadOptions, MAX_COUNTER_KEY_BYTES,
    MAX_METRIC_VALUE_BYTES, Request, RequestLimits, ResponseOptions, RlsService, build_response,
};

/// Bounds small enough that a fuzzer crosses them cheaply, large enough for every
/// shape a config can take.
fn load_limits() -> Limits {
    Limits::default().max_file_bytes(64 << 10).max_descriptors(2_000).max_depth(8)
}

/// The most descriptors of a loaded config that are matched per input.
const MAX_PROBES: usize = 32;

/// Loads `data` as one config file, strictly and as upstream reads it; a loaded
/// config has every rule matched by a request walking its path, and answered.
pub fn config(data: &[u8]) {
    let Ok(text) = core::str::from_utf8(data) else { return };
    for compatibility in [Compatibility::Strict, Compatibility::Upstream] {
        let options = LoadOptions::default().limits(load_limits()).compatibility(compatibility);
        let config = match Config::from_yaml("fuzz.yaml", text, &options) {
            Ok(config) => config,
            Err(e) => {
                // Every error names its file and renders.
                let message = e.to_string();
                assert!(message.starts_with("fuzz.yaml"), "{message}");
                continue;
            }
        };
        assert!(config.rules().len() <= 2_000);
        probe(&config);
    }
}

/// A request per rule (at most [`MAX_PROBES`]) whose entries are the rule's path,
/// each `key_value` read back as key and value: matched, and answered as admitted.
fn probe(config: &Config) {
    for rule in config.rules().iter().take(MAX_PROBES) {
        let entries: Vec<(String, String)> = rule
            .key_path()
            .split('.')
            .map(|part| match part.split_once('_') {
                Some((key, value)) => (key.to_owned(), value.to_owned()),
                None => (part.to_owned(), "v".to_owned()),
            })
            .collect();
        let Ok(request) =
            Request::new(rule.domain(), vec![weir_rls::Descriptor::new(entries)], 1, &RequestLimits::default())
        else {
            continue;
        };
        let Ok(matches) = config.match_request(&request) else {
            panic!("domain {:?} of a loaded rule is unknown", rule.domain())
        };
        check_matches(&matches, &request);
        let decisions = admit_all(&matches);
        let response = build_response(&matches, &decisions, &ResponseOptions::default().ratelimit_headers(true));
        assert_eq!(response.statuses.len(), 1);
    }
}

/// Every counter key and metric name of `matches` within its bound.
fn check_matches(matches: &weir_rls::Matches<'_>, request: &Request) {
    assert_eq!(matches.descriptors().len(), request.descriptors().len());
    for (m, d) in matches.descriptors().iter().zip(request.descriptors()) {
        if let DescriptorMatch::Limited(limited) = m {
            assert!(limited.key().as_bytes().len() <= 1 + MAX_COUNTER_KEY_BYTES);
            let base = limited.rule().map_or(0, |r| r.full_key().len()) + request.domain().len() + ".<override>".len();
            let per_entry = d.entries().map(|e| e.key().len() + 2 + MAX_METRIC_VALUE_BYTES).sum::<usize>();
            assert!(limited.metric_key().len() <= base + per_entry, "{}", limited.metric_key());
            assert_eq!(limited.cost(), d.cost());
        }
    }
}

fn admit_all(matches: &weir_rls::Matches<'_>) -> Vec<Option<Decision>> {
    matches
        .descriptors()
        .iter()
        .map(|m| match m {
            DescriptorMatch::Limited(l) => {
                let limit = u64::from(l.limit().requests_per_unit());
                Some(Decision::allowed(Snapshot::new(limit, limit.saturating_sub(1), 1_000_000_000)))
            }
            _ => None,
        })
        .collect()
}

/// The config the request target matches against: every kind of descriptor
/// (exact, wildcard, shared wildcard, any value, nested, unlimited, blocked,
/// shadow, replaces, detailed and value-to-metric names).
pub const REQUEST_CONFIG: &str = "
domain: d
descriptors:
  - key: user
    detailed_metric: true
    rate_limit: {unit: minute, requests_per_unit: 3}
    descriptors:
      - key: route
        value_to_metric: true
        descriptors:
          - key: method
            rate_limit: {unit: second, requests_per_unit: 2, algorithm: gcra, burst: 1}
  - key: files
    value: f/*
    share_threshold: true
    rate_limit: {unit: hour, requests_per_unit: 5, name: files, replaces: [{name: ips}]}
  - key: files
    value: g*h*
    shadow_mode: true
    rate_limit: {window: 30s, requests_per_unit: 1}
  - key: ip
    rate_limit: {unit: day, requests_per_unit: 0, name: ips}
  - key: free
    rate_limit: {unlimited: true}
  - key: open
  - key: path
    value: /api/*/x
    rate_limit: {unit: second, requests_per_unit: 10, algorithm: sliding_window}
";

/// Small request bounds, so that arbitrary input crosses them.
fn request_limits() -> RequestLimits {
    RequestLimits::default().max_descriptors(8).max_entries(8).max_key_bytes(32).max_value_bytes(256)
}

/// Admits every check, as a store with room would.
#[derive(Debug)]
struct AdmitAll;

impl Decide for AdmitAll {
    async fn decide(&self, checks: &[Check<'_>]) -> Result<Vec<Decision>, DecideError> {
        Ok(checks
            .iter()
            .map(|c| {
                let limit = u64::from(c.limit.requests_per_unit());
                Decision::allowed(Snapshot::new(limit, limit.saturating_sub(c.cost.min(limit)), 1_000_000_000))
            })
            .collect())
    }
}

/// Polls a future that never waits (the service over [`AdmitAll`]) to its end.
fn run<F: Future>(future: F) -> F::Output {
    let mut future = pin!(future);
    let mut cx = Context::from_waker(Waker::noop());
    for _ in 0..1_000 {
        if let Poll::Ready(output) = future.as_mut().poll(&mut cx) {
            return output;
        }
    }
    panic!("the service waited on a decider that never waits");
}

/// Decodes `data` as a protobuf `RateLimitRequest` and answers it: checked,
/// matched (keys and names within bounds), decided, answered with one status per
/// descriptor, or refused with a client's error code.
pub fn request(data: &[u8]) {
    let Ok(req) = proto::RateLimitRequest::decode(data) else { return };
    answer(req);
}

fn answer(req: proto::RateLimitRequest) {
    thread_local! {
        static CONFIG: Arc<Config> =
            Arc::new(Config::from_yaml("d.yaml", REQUEST_CONFIG, &LoadOptions::default()).expect("the config loads"));
    }
    let config = CONFIG.with(Arc::clone);
    if let Ok(checked) = Request::from_proto(req.clone(), &request_limits())
        && let Ok(matches) = config.match_request(&checked)
    {
        check_matches(&matches, &checked);
    }
    let descriptors = req.descriptors.len();
    let service = RlsService::new(config, AdmitAll)
        .request_limits(request_limits())
        .response_options(ResponseOptions::default().ratelimit_headers(true).legacy_headers(true));
    match run(service.respond(req)) {
        Ok(response) => assert_eq!(response.statuses.len(), descriptors),
        Err(e) => assert!(
            matches!(e.code(), tonic::Code::InvalidArgument | tonic::Code::NotFound | tonic::Code::Unimplemented),
            "{:?}: {e}",
            e.code()
        ),
    }
}

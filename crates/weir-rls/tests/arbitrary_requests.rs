//! Arbitrary requests (keys, values, costs, overrides) never panic, are answered
//! with one status per descriptor or refused with an input error, and cost bounded
//! bytes wherever the service keeps or names them.

mod common;

use common::FakeCounters;
use proptest::prelude::*;
use std::sync::Arc;
use weir_rls::proto::{self, UInt64Value, rate_limit_descriptor};
use weir_rls::{
    Config, DescriptorMatch, LoadOptions, MAX_COUNTER_KEY_BYTES, MAX_METRIC_VALUE_BYTES, Request, RequestLimits,
    RlsService,
};

const CONFIG: &str = "
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
";

/// Small bounds, so that arbitrary input crosses them cheaply.
fn limits() -> RequestLimits {
    RequestLimits::default().max_descriptors(4).max_entries(4).max_key_bytes(16).max_value_bytes(64).max_domain_bytes(8)
}

fn text(names: &'static [&'static str], max: usize) -> impl Strategy<Value = String> {
    prop_oneof![3 => proptest::sample::select(names).prop_map(str::to_owned), 1 => proptest::string::string_regex(&format!("(?s).{{0,{max}}}")).unwrap()]
}

fn descriptor() -> impl Strategy<Value = proto::RateLimitDescriptor> {
    let entry = (
        text(&["user", "route", "method", "files", "ip", "free", "open", ""], 20),
        text(&["a", "f/x", "ghh", "", "f/"], 80),
    )
        .prop_map(|(key, value)| rate_limit_descriptor::Entry { key, value });
    let hits = prop_oneof![2 => Just(None), 2 => (0u64..4).prop_map(Some), 1 => any::<u64>().prop_map(Some)];
    let limit = proptest::option::weighted(0.1, (any::<u32>(), -1i32..9));
    (proptest::collection::vec(entry, 0..6), hits, limit, proptest::bool::weighted(0.05)).prop_map(
        |(entries, hits, limit, is_negative_hits)| proto::RateLimitDescriptor {
            entries,
            hits_addend: hits.map(|value| UInt64Value { value }),
            limit: limit
                .map(|(requests_per_unit, unit)| rate_limit_descriptor::RateLimitOverride { requests_per_unit, unit }),
            is_negative_hits,
        },
    )
}

fn request() -> impl Strategy<Value = proto::RateLimitRequest> {
    (text(&["d", "", "other"], 12), proptest::collection::vec(descriptor(), 0..6), any::<u32>())
        .prop_map(|(domain, descriptors, hits_addend)| proto::RateLimitRequest { domain, descriptors, hits_addend })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    #[test]
    fn every_request_is_answered_or_refused_and_bounded(requests in proptest::collection::vec(request(), 1..8)) {
        let config = Arc::new(Config::from_yaml("p.yaml", CONFIG, &LoadOptions::default()).unwrap());
        let service = RlsService::new(Arc::clone(&config), FakeCounters::new()).request_limits(limits());
        let runtime = tokio::runtime::Builder::new_current_thread().build().unwrap();
        for req in requests {
            // Matching: every counter key and metric name within its bound.
            if let Ok(checked) = Request::from_proto(req.clone(), &limits())
                && let Ok(matches) = config.match_request(&checked)
            {
                prop_assert_eq!(matches.descriptors().len(), checked.descriptors().len());
                for (m, d) in matches.descriptors().iter().zip(checked.descriptors()) {
                    if let DescriptorMatch::Limited(limited) = m {
                        prop_assert!(limited.key().as_bytes().len() <= 1 + MAX_COUNTER_KEY_BYTES);
                        let base = limited.rule().map_or(0, |r| r.full_key().len()) + "d.<override>".len();
                        prop_assert!(limited.metric_key().len() <= base + d.len() * (2 + MAX_METRIC_VALUE_BYTES));
                        prop_assert_eq!(limited.cost(), d.cost());
                    }
                }
            }
            let descriptors = req.descriptors.len();
            match runtime.block_on(service.respond(req)) {
                Ok(response) => prop_assert_eq!(response.statuses.len(), descriptors),
                Err(e) => {
                    let code = e.code();
                    prop_assert!(
                        matches!(code, tonic::Code::InvalidArgument | tonic::Code::NotFound | tonic::Code::Unimplemented),
                        "{:?}: {}", code, e
                    );
                }
            }
        }
    }
}

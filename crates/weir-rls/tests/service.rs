//! The service end to end on fake counters: bad input as gRPC statuses with their
//! messages, costs, overrides, all or nothing, headers, and the tonic trait.

mod common;

use common::{FakeCounters, FakeService, brief, config, descriptor, overall, request, service};
use std::sync::Arc;
use weir_rl_core::Decision;
use weir_rls::proto::rate_limit_response::Code;
use weir_rls::proto::rate_limit_service_server::RateLimitService as _;
use weir_rls::proto::{self, UInt64Value, rate_limit_descriptor};
use weir_rls::{
    Check, ConfigSource, Decide, DecideError, Generation, MAX_HITS_ADDEND, ResponseOptions, RlsService, ServiceError,
    Unit, UnknownDomainPolicy,
};

const CONFIG: &str = "
domain: d
descriptors:
  - key: user
    rate_limit: {unit: minute, requests_per_unit: 3}
  - key: ip
    rate_limit: {unit: hour, requests_per_unit: 10, name: per_ip}
  - key: blocked
    rate_limit: {unit: second, requests_per_unit: 0}
  - key: free
    rate_limit: {unlimited: true}
  - key: thirty
    rate_limit: {window: 30s, requests_per_unit: 2}
";

fn with_hits(mut d: proto::RateLimitDescriptor, hits: u64) -> proto::RateLimitDescriptor {
    d.hits_addend = Some(UInt64Value { value: hits });
    d
}

async fn status_of(service: &FakeService, req: proto::RateLimitRequest) -> tonic::Status {
    tonic::Status::from(service.respond(req).await.expect_err("refused"))
}

#[tokio::test]
async fn bad_input_is_a_status_with_a_message() {
    let (service, _) = service(CONFIG);
    let cases: Vec<(proto::RateLimitRequest, tonic::Code, &str)> = vec![
        (
            request("", vec![descriptor(&[("user", "a")])]),
            tonic::Code::InvalidArgument,
            "rate limit domain must not be empty",
        ),
        (request("d", vec![]), tonic::Code::InvalidArgument, "rate limit descriptor list must not be empty"),
        (
            request("nope", vec![descriptor(&[("user", "a")])]),
            tonic::Code::NotFound,
            "unknown domain 'nope': no config file has it",
        ),
        (request("d", vec![descriptor(&[])]), tonic::Code::InvalidArgument, "descriptor 0 has no entries"),
        (
            request("d", vec![descriptor(&[("user", "a")]), descriptor(&[("user", "a"), ("", "x")])]),
            tonic::Code::InvalidArgument,
            "descriptor 1, entry 1: the key is empty",
        ),
        (
            request("d", vec![with_hits(descriptor(&[("user", "a")]), MAX_HITS_ADDEND + 1)]),
            tonic::Code::InvalidArgument,
            "descriptor 0: hits_addend 4294967296 is more than any limit can be (4294967295)",
        ),
        (
            request("d", vec![descriptor(&[("user", &"v".repeat(1_025))])]),
            tonic::Code::InvalidArgument,
            "descriptor 0, entry 0: the value has 1025 bytes, more than the 1024 accepted",
        ),
        (
            request("d", vec![descriptor(&[(&"k".repeat(257), "v")])]),
            tonic::Code::InvalidArgument,
            "descriptor 0, entry 0: the key has 257 bytes, more than the 256 accepted",
        ),
        (
            request(&"d".repeat(257), vec![descriptor(&[("user", "a")])]),
            tonic::Code::InvalidArgument,
            "the domain has 257 bytes, more than the 256 accepted",
        ),
        (
            request("d", vec![descriptor(&[("user", "a")]); 65]),
            tonic::Code::InvalidArgument,
            "65 descriptors, more than the 64 accepted",
        ),
        (
            request("d", vec![descriptor(&[("user", "a"); 33])]),
            tonic::Code::InvalidArgument,
            "descriptor 0 has 33 entries, more than the 32 accepted",
        ),
        (
            request("d", vec![proto::RateLimitDescriptor { is_negative_hits: true, ..descriptor(&[("user", "a")]) }]),
            tonic::Code::Unimplemented,
            "descriptor 0: is_negative_hits is not supported",
        ),
        (
            request(
                "d",
                vec![proto::RateLimitDescriptor {
                    limit: Some(rate_limit_descriptor::RateLimitOverride { requests_per_unit: 5, unit: 0 }),
                    ..descriptor(&[("user", "a")])
                }],
            ),
            tonic::Code::InvalidArgument,
            "descriptor 0: the limit override's unit (0) is not a unit",
        ),
    ];
    for (req, code, message) in cases {
        let status = status_of(&service, req).await;
        assert_eq!((status.code(), status.message()), (code, message));
    }
}

#[tokio::test]
async fn unknown_domains_may_be_allowed_as_upstream_allows_them() {
    let (service, _) = service(CONFIG);
    let service = service.unknown_domain(UnknownDomainPolicy::Allow);
    let r =
        service.respond(request("nope", vec![descriptor(&[("user", "a")]), descriptor(&[("x", "y")])])).await.unwrap();
    assert_eq!(overall(&r), Code::Ok);
    assert_eq!(r.statuses.iter().map(brief).collect::<Vec<_>>(), [(Code::Ok, None, 0); 2]);
}

#[tokio::test]
async fn no_config_is_unavailable() {
    struct Nothing;
    impl ConfigSource for Nothing {
        type Decider = Arc<FakeCounters>;
        fn current(&self) -> Option<Arc<Generation<Arc<FakeCounters>>>> {
            None
        }
    }
    let service = RlsService::with_source(Nothing);
    let status =
        tonic::Status::from(service.respond(request("d", vec![descriptor(&[("user", "a")])])).await.unwrap_err());
    assert_eq!((status.code(), status.message()), (tonic::Code::Unavailable, "no rate limit configuration loaded"));
}

#[tokio::test]
async fn costs_come_from_the_descriptor_then_the_request() {
    let (service, _) = service(CONFIG);
    let user = || descriptor(&[("user", "a")]);
    // A descriptor's 0 checks without counting.
    let r = service.respond(request("d", vec![with_hits(user(), 0)])).await.unwrap();
    assert_eq!(brief(&r.statuses[0]), (Code::Ok, Some(3), 3));
    // The request's 0 (or unset) counts 1; its 2 counts 2.
    let r = service.respond(request("d", vec![user()])).await.unwrap();
    assert_eq!(brief(&r.statuses[0]), (Code::Ok, Some(3), 2));
    let r = service.respond(proto::RateLimitRequest { hits_addend: 2, ..request("d", vec![user()]) }).await.unwrap();
    assert_eq!(brief(&r.statuses[0]), (Code::Ok, Some(3), 0));
    let r = service.respond(request("d", vec![with_hits(user(), 0)])).await.unwrap();
    assert_eq!(brief(&r.statuses[0]), (Code::Ok, Some(3), 0));
    let r = service.respond(request("d", vec![user()])).await.unwrap();
    assert_eq!(brief(&r.statuses[0]), (Code::OverLimit, Some(3), 0));
    // More than the limit at once is over, not an error.
    let r = service.respond(request("d", vec![with_hits(descriptor(&[("user", "b")]), 4)])).await.unwrap();
    assert_eq!(overall(&r), Code::OverLimit);
}

#[tokio::test]
async fn over_on_one_descriptor_charges_no_other() {
    let (service, _) = service(CONFIG);
    let ip = || descriptor(&[("ip", "10.0.0.1")]);
    for _ in 0..3 {
        service.respond(request("d", vec![descriptor(&[("user", "a")]), ip()])).await.unwrap();
    }
    for _ in 0..5 {
        let r = service.respond(request("d", vec![descriptor(&[("user", "a")]), ip()])).await.unwrap();
        assert_eq!(overall(&r), Code::OverLimit);
    }
    let r = service.respond(request("d", vec![ip()])).await.unwrap();
    assert_eq!(brief(&r.statuses[0]), (Code::Ok, Some(10), 6), "3 charged, then nothing while refused");
    assert_eq!(r.statuses[0].current_limit.as_ref().unwrap().name, "per_ip");

    // A limit of 0 refuses, and the counters it comes with are only read.
    let r = service.respond(request("d", vec![ip(), descriptor(&[("blocked", "x")])])).await.unwrap();
    assert_eq!(overall(&r), Code::OverLimit);
    assert_eq!(brief(&r.statuses[0]), (Code::Ok, Some(10), 6));
    assert_eq!(brief(&r.statuses[1]), (Code::OverLimit, Some(0), 0));
    let r = service.respond(request("d", vec![ip()])).await.unwrap();
    assert_eq!(brief(&r.statuses[0]), (Code::Ok, Some(10), 5));
    // Checked without cost, a limit of 0 is not over.
    let r = service.respond(request("d", vec![with_hits(descriptor(&[("blocked", "x")]), 0)])).await.unwrap();
    assert_eq!(overall(&r), Code::Ok);
}

#[tokio::test]
async fn windows_that_are_no_unit_report_unknown() {
    let (service, counters) = service(CONFIG);
    let r = service.respond(request("d", vec![descriptor(&[("thirty", "x")])])).await.unwrap();
    let limit = r.statuses[0].current_limit.as_ref().unwrap();
    assert_eq!((limit.requests_per_unit, limit.unit), (2, 0));
    assert_eq!(r.statuses[0].duration_until_reset.as_ref().unwrap().seconds, 30);
    counters.advance(20);
    let r = service.respond(request("d", vec![descriptor(&[("thirty", "x")])])).await.unwrap();
    assert_eq!(brief(&r.statuses[0]), (Code::Ok, Some(2), 0));
    assert_eq!(r.statuses[0].duration_until_reset.as_ref().unwrap().seconds, 10);
}

#[tokio::test]
async fn a_limit_override_replaces_the_tree() {
    let (service, _) = service(CONFIG);
    let overridden = |entries: &[(&str, &str)]| proto::RateLimitDescriptor {
        limit: Some(rate_limit_descriptor::RateLimitOverride { requests_per_unit: 1, unit: Unit::Day.response_code() }),
        ..descriptor(entries)
    };
    let r = service.respond(request("d", vec![overridden(&[("anything", "x"), ("else", "y")])])).await.unwrap();
    let limit = r.statuses[0].current_limit.as_ref().unwrap();
    assert_eq!((limit.requests_per_unit, limit.unit, limit.name.as_str()), (1, Unit::Day.response_code(), ""));
    let r = service.respond(request("d", vec![overridden(&[("anything", "x"), ("else", "y")])])).await.unwrap();
    assert_eq!(overall(&r), Code::OverLimit);
    // Counted per descriptor, and apart from the rule the tree would pick.
    let r = service.respond(request("d", vec![overridden(&[("anything", "x"), ("else", "z")])])).await.unwrap();
    assert_eq!(overall(&r), Code::Ok);
    let r = service.respond(request("d", vec![overridden(&[("user", "a")])])).await.unwrap();
    assert_eq!(overall(&r), Code::Ok);
    let r = service.respond(request("d", vec![descriptor(&[("user", "a")])])).await.unwrap();
    assert_eq!(brief(&r.statuses[0]), (Code::Ok, Some(3), 2));
    // WEEK, which the request's unit enum lacks, is read as the response's 7.
    let week = proto::RateLimitDescriptor {
        limit: Some(rate_limit_descriptor::RateLimitOverride { requests_per_unit: 1, unit: 7 }),
        ..descriptor(&[("w", "x")])
    };
    let r = service.respond(request("d", vec![week])).await.unwrap();
    assert_eq!(r.statuses[0].current_limit.as_ref().unwrap().unit, Unit::Week.response_code());
}

#[tokio::test]
async fn headers_are_off_unless_asked_for() {
    let (service, counters) = service(CONFIG);
    let both = || request("d", vec![descriptor(&[("user", "a")]), descriptor(&[("ip", "1")])]);
    assert!(service.respond(both()).await.unwrap().response_headers_to_add.is_empty());

    let service = RlsService::new(Arc::new(config(CONFIG)), Arc::clone(&counters))
        .response_options(ResponseOptions::default().ratelimit_headers(true).legacy_headers(true));
    let headers = |r: &proto::RateLimitResponse| {
        r.response_headers_to_add.iter().map(|h| (h.key.clone(), h.value.clone())).collect::<Vec<_>>()
    };
    let r = service.respond(both()).await.unwrap();
    let want = |ratelimit: &str, remaining: &str, reset: &str| {
        vec![
            ("RateLimit-Policy".to_owned(), "\"user\";q=3;w=60, \"per_ip\";q=10;w=3600".to_owned()),
            ("RateLimit".to_owned(), ratelimit.to_owned()),
            ("X-RateLimit-Limit".to_owned(), "3".to_owned()),
            ("X-RateLimit-Remaining".to_owned(), remaining.to_owned()),
            ("X-RateLimit-Reset".to_owned(), reset.to_owned()),
        ]
    };
    // The deciding limit: the one with the fewest left.
    assert_eq!(headers(&r), want("\"user\";r=1;t=60", "1", "60"));
    counters.advance(15);
    service.respond(both()).await.unwrap();
    service.respond(both()).await.unwrap();
    // Refused: the refusing limit, and its wait.
    let r = service.respond(both()).await.unwrap();
    assert_eq!(overall(&r), Code::OverLimit);
    assert_eq!(headers(&r), want("\"user\";r=0;t=45", "0", "45"));
    // No limit that applied: no headers.
    let r = service.respond(request("d", vec![descriptor(&[("free", "x")])])).await.unwrap();
    assert!(r.response_headers_to_add.is_empty());
}

#[tokio::test]
async fn backend_failures_are_statuses() {
    struct Down;
    impl Decide for Down {
        async fn decide(&self, _: &[Check<'_>]) -> Result<Vec<Decision>, DecideError> {
            Err(DecideError::unavailable("redis: connection refused"))
        }
    }
    struct Short;
    impl Decide for Short {
        async fn decide(&self, _: &[Check<'_>]) -> Result<Vec<Decision>, DecideError> {
            Ok(Vec::new())
        }
    }
    let cfg = Arc::new(config(CONFIG));
    let hit = || request("d", vec![descriptor(&[("user", "a")])]);
    let status = tonic::Status::from(RlsService::new(Arc::clone(&cfg), Down).respond(hit()).await.unwrap_err());
    assert_eq!(
        (status.code(), status.message()),
        (tonic::Code::Unavailable, "the counters could not be decided: redis: connection refused")
    );
    let err = RlsService::new(Arc::clone(&cfg), Short).respond(hit()).await.unwrap_err();
    assert_eq!(err, ServiceError::DecisionCount { checks: 1, decisions: 0 });
    assert_eq!(err.code(), tonic::Code::Internal);
    // Nothing to count: the store is not asked.
    let free = request("d", vec![descriptor(&[("free", "x")]), descriptor(&[("nothing", "here")])]);
    let r = RlsService::new(cfg, Down).respond(free).await.unwrap();
    assert_eq!(r.statuses.iter().map(brief).collect::<Vec<_>>(), [(Code::Ok, None, u32::MAX), (Code::Ok, None, 0)]);
}

#[tokio::test]
async fn the_grpc_method_answers_the_same() {
    let (service, _) = service(CONFIG);
    let r =
        service.should_rate_limit(tonic::Request::new(request("d", vec![descriptor(&[("user", "a")])]))).await.unwrap();
    assert_eq!(brief(&r.get_ref().statuses[0]), (Code::Ok, Some(3), 2));
    let status = service.should_rate_limit(tonic::Request::new(request("", vec![]))).await.unwrap_err();
    assert_eq!(status.code(), tonic::Code::InvalidArgument);
}

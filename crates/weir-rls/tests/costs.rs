//! Costs above what a limit ever admits at once, on weir's in-memory stores.

mod common;

use common::{brief, descriptor, overall, real_service, request};
use weir_rls::proto::rate_limit_response::Code;
use weir_rls::proto::{self, UInt64Value};

const CONFIG: &str = "
domain: d
descriptors:
  - key: a
    rate_limit: {unit: minute, requests_per_unit: 3}
  - key: b
    rate_limit: {unit: minute, requests_per_unit: 3}
  - key: c
    rate_limit: {unit: minute, requests_per_unit: 10}
";

fn with_hits(mut d: proto::RateLimitDescriptor, hits: u64) -> proto::RateLimitDescriptor {
    d.hits_addend = Some(UInt64Value { value: hits });
    d
}

/// Every descriptor whose cost is above its limit is over, not only the first of
/// them; the others are read, not charged. The second such descriptor was
/// answered OK.
#[tokio::test]
async fn every_descriptor_above_its_limit_is_over() {
    let (service, _) = real_service(CONFIG);
    let r = service
        .respond(request(
            "d",
            vec![
                with_hits(descriptor(&[("a", "x")]), 5),
                with_hits(descriptor(&[("b", "x")]), 4),
                descriptor(&[("c", "x")]),
            ],
        ))
        .await
        .expect("answered");
    assert_eq!(overall(&r), Code::OverLimit);
    let codes: Vec<Code> = r.statuses.iter().map(|s| brief(s).0).collect();
    assert_eq!(codes, [Code::OverLimit, Code::OverLimit, Code::Ok]);
    // Nothing was charged: each limit still has its whole quota.
    let r = service
        .respond(request("d", vec![descriptor(&[("a", "x")]), descriptor(&[("b", "x")]), descriptor(&[("c", "x")])]))
        .await
        .expect("answered");
    assert_eq!(overall(&r), Code::Ok);
    let remaining: Vec<u32> = r.statuses.iter().map(|s| s.limit_remaining).collect();
    assert_eq!(remaining, [2, 2, 9]);
}

//! Windows aligned to the Unix epoch, as envoyproxy/ratelimit's: a counter resets
//! on the minute, the hour, at 00:00 UTC, and `duration_until_reset` counts down
//! to it, whenever the service started.

mod common;

use common::{brief, config, descriptor, overall, request};
use std::sync::Arc;
use std::time::Duration;
use weir_rl_core::{Clock, ManualClock, Nanos};
use weir_rls::RlsService;
use weir_rls::backend::MemoryBackend;
use weir_rls::decider::{MemoryStores, StoreDecider};
use weir_rls::proto::rate_limit_response::Code;
use weir_rls::windows::EpochOffset;

const CONFIG: &str = "
domain: d
descriptors:
  - key: m
    rate_limit: {unit: minute, requests_per_unit: 1}
  - key: day
    rate_limit: {unit: day, requests_per_unit: 1}
";

#[tokio::test]
async fn counters_reset_on_the_epochs_boundaries() {
    // The service's clock reads 123.4 s at 2026-12-03 17:45:40 UTC.
    let unix = Duration::from_secs(1_796_233_540);
    let clock = ManualClock::new();
    clock.set(Nanos::new(123_400_000_000));
    let stores = MemoryStores::with_epoch(MemoryBackend::default(), clock.clone(), EpochOffset::at(clock.now(), unix));
    let config = Arc::new(config(CONFIG));
    let service = RlsService::new(Arc::clone(&config), StoreDecider::build(Arc::new(stores), &config, None).unwrap());
    let reset =
        |r: &weir_rls::proto::RateLimitResponse, i: usize| r.statuses[i].duration_until_reset.as_ref().unwrap().seconds;

    let both = || request("d", vec![descriptor(&[("m", "x")]), descriptor(&[("day", "x")])]);
    let r = service.respond(both()).await.unwrap();
    // 20 s to 17:46:00; 6 h 14 min 20 s to 00:00 UTC.
    assert_eq!((reset(&r, 0), reset(&r, 1)), (20, 6 * 3_600 + 14 * 60 + 20));
    clock.advance(Duration::from_secs(19));
    let r = service.respond(request("d", vec![descriptor(&[("m", "x")])])).await.unwrap();
    assert_eq!((overall(&r), reset(&r, 0)), (Code::OverLimit, 1));
    // 17:46:00: a new minute.
    clock.advance(Duration::from_secs(1));
    let r = service.respond(request("d", vec![descriptor(&[("m", "x")])])).await.unwrap();
    assert_eq!((brief(&r.statuses[0]), reset(&r, 0)), ((Code::Ok, Some(1), 0), 60));
}

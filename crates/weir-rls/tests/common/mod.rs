//! What the integration tests share: configs from text, requests from entries, and
//! an in-memory fixed-window [`Decide`] on a clock the test moves by hand.

#![allow(dead_code)]

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use weir_rl_core::{Decision, ManualClock, Nanos, Snapshot};
use weir_rls::backend::MemoryBackend;
use weir_rls::decider::{MemoryStores, StoreDecider};
use weir_rls::proto::{self, rate_limit_descriptor, rate_limit_response as pb};
use weir_rls::windows::EpochOffset;
use weir_rls::{Check, Config, Decide, DecideError, Generation, LimitSource, LoadOptions, RlsService, ServiceError};

/// A config from one YAML text, loaded with the default options.
pub fn config(yaml: &str) -> Config {
    Config::from_yaml("test.yaml", yaml, &LoadOptions::default()).unwrap_or_else(|e| panic!("{e}"))
}

/// A proto descriptor of these entries.
pub fn descriptor(entries: &[(&str, &str)]) -> proto::RateLimitDescriptor {
    proto::RateLimitDescriptor {
        entries: entries
            .iter()
            .map(|(k, v)| rate_limit_descriptor::Entry { key: (*k).to_owned(), value: (*v).to_owned() })
            .collect(),
        ..Default::default()
    }
}

/// A proto request of these descriptors.
pub fn request(domain: &str, descriptors: Vec<proto::RateLimitDescriptor>) -> proto::RateLimitRequest {
    proto::RateLimitRequest { domain: domain.to_owned(), descriptors, hits_addend: 0 }
}

/// Fixed windows of each limit's length, aligned to the fake clock's origin,
/// decided all or nothing as [`Decide`] says.
#[derive(Debug, Default)]
pub struct FakeCounters {
    state: Mutex<State>,
}

#[derive(Debug, Default)]
struct State {
    now_secs: u64,
    /// (counter identity, window start) → hits counted.
    counts: HashMap<(String, u64), u64>,
}

impl FakeCounters {
    pub fn new() -> Arc<Self> {
        Arc::new(Self::default())
    }

    /// Moves the clock on.
    pub fn advance(&self, secs: u64) {
        self.state.lock().unwrap().now_secs += secs;
    }

    /// How many counters hold a count.
    pub fn counters(&self) -> usize {
        self.state.lock().unwrap().counts.len()
    }
}

fn identity(check: &Check<'_>) -> String {
    let source = match check.source {
        LimitSource::Rule(rule) => format!("rule {}", rule.full_key()),
        LimitSource::Override => format!("override {}/{:?}", check.limit.requests_per_unit(), check.limit.window()),
    };
    format!("{} {source} {:?}", check.domain, check.key)
}

impl Decide for FakeCounters {
    async fn decide(&self, checks: &[Check<'_>]) -> Result<Vec<Decision>, DecideError> {
        let mut state = self.state.lock().map_err(|_| DecideError::internal("poisoned"))?;
        let now = state.now_secs;
        let mut decisions = Vec::with_capacity(checks.len());
        let mut pending: Vec<((String, u64), u64)> = Vec::new();
        for check in checks {
            let window = check.limit.window().as_secs();
            let start = now / window * window;
            let reset_ns = (start + window - now) * 1_000_000_000;
            let id = (identity(check), start);
            let earlier: u64 = pending.iter().filter(|(k, _)| *k == id).map(|(_, n)| n).sum();
            let used = state.counts.get(&id).copied().unwrap_or(0) + earlier;
            let limit = u64::from(check.limit.requests_per_unit());
            let after = used + check.cost;
            if after > limit {
                decisions.push(Decision::denied(Snapshot::new(limit, limit.saturating_sub(used), reset_ns), reset_ns));
            } else {
                decisions.push(Decision::allowed(Snapshot::new(limit, limit - after, reset_ns)));
                pending.push((id, check.cost));
            }
        }
        let refused = checks.iter().zip(&decisions).any(|(c, d)| d.is_denied() && !c.shadow);
        if !refused {
            for (id, cost) in pending {
                if cost > 0 {
                    *state.counts.entry(id).or_default() += cost;
                }
            }
        }
        Ok(decisions)
    }
}

/// A service that answers from one config with fake counters.
pub type FakeService = RlsService<Arc<Generation<Arc<FakeCounters>>>>;

/// A service over `yaml` and fake counters.
pub fn service(yaml: &str) -> (FakeService, Arc<FakeCounters>) {
    let counters = FakeCounters::new();
    (RlsService::new(Arc::new(config(yaml)), Arc::clone(&counters)), counters)
}

/// One status, shortly: (code, requests_per_unit if a limit, remaining).
pub fn brief(status: &pb::DescriptorStatus) -> (pb::Code, Option<u32>, u32) {
    (
        pb::Code::try_from(status.code).unwrap_or(pb::Code::Unknown),
        status.current_limit.as_ref().map(|l| l.requests_per_unit),
        status.limit_remaining,
    )
}

/// The overall code.
pub fn overall(response: &proto::RateLimitResponse) -> pb::Code {
    pb::Code::try_from(response.overall_code).unwrap_or(pb::Code::Unknown)
}

/// The service over weir's in-memory stores ([`StoreDecider`] on [`MemoryStores`]),
/// reading a manual clock whose reading 0 is a window boundary (as the fake's).
pub type RealService = RlsService<Arc<Generation<StoreDecider>>>;

/// A service over `yaml` and real in-memory stores, and its clock.
pub fn real_service(yaml: &str) -> (RealService, ManualClock) {
    let config = Arc::new(config(yaml));
    let clock = ManualClock::new();
    let stores =
        MemoryStores::with_epoch(MemoryBackend::default(), clock.clone(), EpochOffset::at(Nanos::ZERO, Duration::ZERO));
    let decider = StoreDecider::build(Arc::new(stores), &config, None).unwrap_or_else(|e| panic!("{e}"));
    (RlsService::new(config, decider), clock)
}

/// Both services on one config, asked the same requests: every answer of the real
/// stores must be the fake's (the reference), field by field.
pub struct Paired {
    fake: FakeService,
    real: RealService,
}

/// Both services' clocks.
pub struct PairedClocks {
    fake: Arc<FakeCounters>,
    real: ManualClock,
}

impl PairedClocks {
    /// Moves both clocks on.
    pub fn advance(&self, secs: u64) {
        self.fake.advance(secs);
        self.real.advance(Duration::from_secs(secs));
    }

    /// How many counters hold a count (the fake's).
    pub fn counters(&self) -> usize {
        self.fake.counters()
    }
}

impl Paired {
    /// Answers `request` on both; panics if they differ.
    pub async fn respond(&self, request: proto::RateLimitRequest) -> Result<proto::RateLimitResponse, ServiceError> {
        let fake = self.fake.respond(request.clone()).await;
        let real = self.real.respond(request.clone()).await;
        assert_eq!(fake, real, "the real stores answered {request:?} unlike the reference");
        fake
    }
}

/// Both services over `yaml`, and their clocks.
pub fn paired(yaml: &str) -> (Paired, PairedClocks) {
    let (fake, counters) = service(yaml);
    let (real, clock) = real_service(yaml);
    (Paired { fake, real }, PairedClocks { fake: counters, real: clock })
}

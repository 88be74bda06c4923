//! The load of an Envoy rate-limit service (`envoy.service.ratelimit.v3`; the `rls`
//! feature): the requests of each scenario, shared by the load generator
//! (`rls-loadgen`, against weir-rls, Limitador or envoyproxy/ratelimit over gRPC)
//! and by `examples/rls_instructions.rs` (weir-rls's own path, in process, under
//! callgrind).
//!
//! Every scenario asks the domain `bench`; the configs that give it the same
//! limits in weir-rls and in Limitador are in `benches/rls/`.
//!
//! | scenario | each request |
//! |---|---|
//! | `spread` | one descriptor, `client_id` drawn uniformly from `values` (100 000) values: admitted |
//! | `hot` | one descriptor, `client_id` = `hot`: one counter, refused once its limit (1 000 a minute) is spent |
//! | `three` | three descriptors: `client_id` as in `spread`, `path` (one of 100), `tenant` (one of 1 000) |

use weir_rls::proto::{RateLimitDescriptor, RateLimitRequest, rate_limit_descriptor};

/// What each request asks (see the [module docs](self)).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Scenario {
    /// One descriptor, a value among many.
    Spread,
    /// One descriptor, one value.
    Hot,
    /// Three descriptors.
    Three,
}

impl Scenario {
    /// Every scenario, in the order the reports list them.
    pub const ALL: [Scenario; 3] = [Scenario::Spread, Scenario::Hot, Scenario::Three];

    /// The scenario's name on the command line.
    pub fn name(self) -> &'static str {
        match self {
            Scenario::Spread => "spread",
            Scenario::Hot => "hot",
            Scenario::Three => "three",
        }
    }
}

/// The requests of one scenario, one caller's sequence: the same seed gives the
/// same sequence.
#[derive(Debug, Clone)]
pub struct Requests {
    scenario: Scenario,
    values: u64,
    domain: String,
    /// xorshift64* state (never 0): the load's values need no quality.
    state: u64,
}

impl Requests {
    /// Requests of `scenario` for `domain`, client values drawn from `values`
    /// (at least 1), the sequence chosen by `seed`.
    pub fn new(scenario: Scenario, values: u64, domain: &str, seed: u64) -> Self {
        Self { scenario, values: values.max(1), domain: domain.to_owned(), state: seed | 1 }
    }

    /// A value below `n`.
    fn below(&mut self, n: u64) -> u64 {
        self.state ^= self.state >> 12;
        self.state ^= self.state << 25;
        self.state ^= self.state >> 27;
        self.state.wrapping_mul(0x2545_f491_4f6c_dd1d) % n
    }

    /// The next request.
    pub fn next_request(&mut self) -> RateLimitRequest {
        let descriptors = match self.scenario {
            Scenario::Spread => vec![descriptor("client_id", format!("c{}", self.below(self.values)))],
            Scenario::Hot => vec![descriptor("client_id", "hot".to_owned())],
            Scenario::Three => vec![
                descriptor("client_id", format!("c{}", self.below(self.values))),
                descriptor("path", format!("/api/{}", self.below(100))),
                descriptor("tenant", format!("t{}", self.below(1_000))),
            ],
        };
        RateLimitRequest { domain: self.domain.clone(), descriptors, hits_addend: 0 }
    }
}

fn descriptor(key: &str, value: String) -> RateLimitDescriptor {
    RateLimitDescriptor {
        entries: vec![rate_limit_descriptor::Entry { key: key.to_owned(), value }],
        ..Default::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_scenario_asks_what_its_config_limits() {
        let mut spread = Requests::new(Scenario::Spread, 10, "bench", 7);
        let mut hot = Requests::new(Scenario::Hot, 10, "bench", 7);
        let mut three = Requests::new(Scenario::Three, 10, "bench", 7);
        for _ in 0..100 {
            let r = spread.next_request();
            assert_eq!((r.domain.as_str(), r.descriptors.len()), ("bench", 1));
            let value: u64 = r.descriptors[0].entries[0].value[1..].parse().unwrap();
            assert!(value < 10);
            assert_eq!(hot.next_request().descriptors[0].entries[0].value, "hot");
            let keys: Vec<String> = three.next_request().descriptors.iter().map(|d| d.entries[0].key.clone()).collect();
            assert_eq!(keys, ["client_id", "path", "tenant"]);
        }
        // The same seed, the same sequence.
        let a: Vec<_> = (0..5).map(|_| Requests::new(Scenario::Spread, 1_000, "b", 3).next_request()).collect();
        assert!(a.windows(2).all(|w| w[0] == w[1]));
    }
}

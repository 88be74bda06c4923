//! `envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit`: check the
//! request, match it against the current config, decide its counters all or
//! nothing, answer.

use crate::config::Config;
use crate::decide::{Check, Decide, DecideError};
use crate::matching::{DescriptorMatch, UnknownDomain};
use crate::proto::{self, rate_limit_response as pb};
use crate::request::{Request, RequestError, RequestLimits};
use crate::response::{ResponseOptions, build_response};
use crate::stats::{ConfigCounters, MetricsOptions, ServiceStats};
use core::fmt;
use std::sync::Arc;
use weir_rl_core::{Decision, Snapshot};

/// A config and the decider that counts its rules, swapped together on reload: a
/// request is matched and decided on one generation from start to end, whatever
/// is loaded meanwhile.
///
/// Building one registers the config's per-rule counters ([`stats`](crate::stats))
/// with the metrics recorder in force.
#[derive(Debug)]
pub struct Generation<D> {
    config: Arc<Config>,
    decider: D,
    counters: ConfigCounters,
}

impl<D> Generation<D> {
    /// `config`, counted by `decider`.
    pub fn new(config: Arc<Config>, decider: D) -> Self {
        let counters = ConfigCounters::register(&config);
        Self { config, decider, counters }
    }

    /// The config.
    pub fn config(&self) -> &Arc<Config> {
        &self.config
    }

    /// The decider.
    pub fn decider(&self) -> &D {
        &self.decider
    }
}

/// Where the service gets the generation (config and decider) each request is
/// answered with. A request keeps the generation it started with until it is
/// answered.
pub trait ConfigSource: Send + Sync {
    /// The decider of the generations.
    type Decider: Decide;

    /// The generation now; `None` while no config has been loaded (requests are
    /// then answered `UNAVAILABLE`).
    fn current(&self) -> Option<Arc<Generation<Self::Decider>>>;
}

/// A generation that never changes.
impl<D: Decide> ConfigSource for Arc<Generation<D>> {
    type Decider = D;

    fn current(&self) -> Option<Arc<Generation<D>>> {
        Some(Arc::clone(self))
    }
}

/// What a request for a domain no config file has is answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum UnknownDomainPolicy {
    /// `NOT_FOUND`, naming the domain (the default): a misspelt domain in Envoy's
    /// config shows at once, rather than as traffic that is never limited.
    #[default]
    Refuse,
    /// OK with no limit for every descriptor, as envoyproxy/ratelimit answers.
    Allow,
}

/// The rate-limit service: a [`ConfigSource`] and a [`Decide`], behind tonic's
/// `RateLimitService` trait.
///
/// ```
/// # use weir_rls::{Check, Decide, DecideError};
/// # use weir_rl_core::{Decision, Snapshot};
/// # struct AlwaysAdmit;
/// # impl Decide for AlwaysAdmit {
/// #     async fn decide(&self, checks: &[Check<'_>]) -> Result<Vec<Decision>, DecideError> {
/// #         Ok(checks.iter().map(|c| Decision::allowed(Snapshot::new(u64::from(c.limit.requests_per_unit()), 1, 0))).collect())
/// #     }
/// # }
/// use std::sync::Arc;
/// use weir_rls::proto::rate_limit_service_server::RateLimitServiceServer;
/// use weir_rls::{Config, LoadOptions, RlsService};
///
/// let yaml = "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 5}\n";
/// let config = Arc::new(Config::from_yaml("d.yaml", yaml, &LoadOptions::default())?);
/// let service = RlsService::new(config, AlwaysAdmit);
/// let _server = RateLimitServiceServer::new(service); // add to a tonic Server
/// # Ok::<(), weir_rls::ConfigError>(())
/// ```
#[derive(Debug)]
pub struct RlsService<S> {
    source: S,
    stats: ServiceStats,
    request_limits: RequestLimits,
    response: ResponseOptions,
    unknown_domain: UnknownDomainPolicy,
    global_shadow: bool,
}

impl<D: Decide> RlsService<Arc<Generation<D>>> {
    /// A service answering from `config`, counting with `decider`, for good.
    pub fn new(config: Arc<Config>, decider: D) -> Self {
        Self::with_source(Arc::new(Generation::new(config, decider)))
    }
}

impl<S: ConfigSource> RlsService<S> {
    /// A service answering from `source`'s current generation (a
    /// [`Reloadable`](crate::Reloadable), to follow config changes).
    pub fn with_source(source: S) -> Self {
        Self {
            source,
            stats: ServiceStats::new(MetricsOptions::default()),
            request_limits: RequestLimits::default(),
            response: ResponseOptions::default(),
            unknown_domain: UnknownDomainPolicy::default(),
            global_shadow: false,
        }
    }

    /// Counting with these options (registering the service's metrics with the
    /// recorder in force).
    pub fn metrics_options(mut self, options: MetricsOptions) -> Self {
        self.stats = ServiceStats::new(options);
        self
    }

    /// The source of generations.
    pub fn source(&self) -> &S {
        &self.source
    }

    /// With these request bounds.
    pub fn request_limits(mut self, limits: RequestLimits) -> Self {
        self.request_limits = limits;
        self
    }

    /// With these response headers.
    pub fn response_options(mut self, options: ResponseOptions) -> Self {
        self.response = options;
        self
    }

    /// Answering unknown domains so.
    pub fn unknown_domain(mut self, policy: UnknownDomainPolicy) -> Self {
        self.unknown_domain = policy;
        self
    }

    /// In global shadow mode (upstream's `SHADOW_MODE`): every request is decided
    /// and counted as usual, each descriptor's status says what it says, but the
    /// overall code is always OK; each request that would have been refused is
    /// counted in `ratelimit_service_global_shadow_mode`.
    ///
    /// ```
    /// # use std::sync::Arc;
    /// # use weir_rls::{Config, LoadOptions, RlsService};
    /// # use weir_rls::proto::{RateLimitRequest, RateLimitDescriptor, rate_limit_descriptor::Entry, rate_limit_response::Code};
    /// # use weir_rls::backend::MemoryBackend;
    /// # use weir_rls::decider::{MemoryStores, StoreDecider};
    /// # use weir_rls::windows::WindowAlignment;
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let yaml = "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: year, requests_per_unit: 0}\n";
    /// let config = Arc::new(Config::from_yaml("d.yaml", yaml, &LoadOptions::default())?);
    /// let stores = Arc::new(MemoryStores::new(MemoryBackend::default(), WindowAlignment::Epoch));
    /// let service = RlsService::new(Arc::clone(&config), StoreDecider::build(stores, &config, None)?).global_shadow_mode(true);
    /// let entry = Entry { key: "k".into(), value: "v".into() };
    /// let request = RateLimitRequest { domain: "d".into(), descriptors: vec![RateLimitDescriptor { entries: vec![entry], ..Default::default() }], hits_addend: 0 };
    /// let response = service.respond(request).await?;
    /// assert_eq!((response.overall_code, response.statuses[0].code), (Code::Ok as i32, Code::OverLimit as i32));
    /// # Ok(()) }
    /// ```
    pub fn global_shadow_mode(mut self, on: bool) -> Self {
        self.global_shadow = on;
        self
    }

    /// Answers one request: what the gRPC method and the `/json` endpoint both do.
    ///
    /// Cancellation: dropping the future leaves nothing behind that the decider's
    /// own cancellation does not undo (see [`Decide`]).
    pub async fn respond(&self, request: proto::RateLimitRequest) -> Result<proto::RateLimitResponse, ServiceError> {
        let started = std::time::Instant::now();
        let result = self.answer(request).await;
        self.stats.finished(started, result.as_ref().err());
        result
    }

    async fn answer(&self, request: proto::RateLimitRequest) -> Result<proto::RateLimitResponse, ServiceError> {
        let request = Request::from_proto(request, &self.request_limits)?;
        let generation = self.source.current().ok_or(ServiceError::NoConfig)?;
        let config = &generation.config;
        let matches = match config.match_request(&request) {
            Ok(matches) => matches,
            Err(unknown) => {
                return match self.unknown_domain {
                    UnknownDomainPolicy::Allow => Ok(all_ok(request.descriptors().len())),
                    UnknownDomainPolicy::Refuse => Err(ServiceError::UnknownDomain(unknown)),
                };
            }
        };

        // A limit of 0 refuses whatever costs anything, without a counter. If one
        // does (outside shadow mode), the request is over whatever the counters
        // say: they are read, not charged.
        let mut checks = Vec::new();
        let mut blocked = false;
        for (descriptor, m) in matches.descriptors().iter().enumerate() {
            let DescriptorMatch::Limited(limited) = m else { continue };
            match limited.limit().quota() {
                Some(quota) => checks.push(Check {
                    descriptor,
                    domain: matches.domain(),
                    source: limited.source(),
                    limit: *limited.limit(),
                    quota,
                    key: limited.key(),
                    cost: limited.cost(),
                    shadow: limited.shadow(),
                }),
                None => blocked |= limited.cost() > 0 && !limited.shadow(),
            }
        }
        if blocked {
            for check in &mut checks {
                check.cost = 0;
            }
        }
        // The decider's future is boxed: the service's own future stays small (a
        // few hundred bytes), so that the one tonic boxes per call is a small,
        // cached allocation, not a large one copied in and out.
        let decided = if checks.is_empty() { Vec::new() } else { Box::pin(generation.decider.decide(&checks)).await? };
        if decided.len() != checks.len() {
            return Err(ServiceError::DecisionCount { checks: checks.len(), decisions: decided.len() });
        }

        let mut decisions: Vec<Option<Decision>> = vec![None; matches.descriptors().len()];
        for (check, decision) in checks.iter().zip(decided) {
            decisions[check.descriptor] = Some(decision);
        }
        for (m, decision) in matches.descriptors().iter().zip(&mut decisions) {
            if let DescriptorMatch::Limited(limited) = m
                && limited.limit().quota().is_none()
            {
                let window_ns = u64::try_from(limited.limit().window().as_nanos()).unwrap_or(u64::MAX);
                let snapshot = Snapshot::new(0, 0, window_ns);
                *decision = Some(if limited.cost() == 0 {
                    Decision::allowed(snapshot)
                } else {
                    Decision::denied(snapshot, window_ns)
                });
            }
        }
        for (m, decision) in matches.descriptors().iter().zip(&decisions) {
            if let (DescriptorMatch::Limited(limited), Some(decision)) = (m, decision) {
                self.stats.record(&generation.counters, matches.domain(), limited, decision);
            }
        }
        let mut response = build_response(&matches, &decisions, &self.response);
        if self.global_shadow && response.overall_code == i32::from(pb::Code::OverLimit) {
            response.overall_code = pb::Code::Ok.into();
            self.stats.global_shadow();
        }
        Ok(response)
    }
}

/// OK with no limit for each of `n` descriptors.
fn all_ok(n: usize) -> proto::RateLimitResponse {
    proto::RateLimitResponse {
        overall_code: pb::Code::Ok.into(),
        statuses: vec![pb::DescriptorStatus { code: pb::Code::Ok.into(), ..Default::default() }; n],
        ..Default::default()
    }
}

/// The future of one call, as tonic's trait has it.
pub(crate) type CallFuture<'a> = core::pin::Pin<
    Box<dyn Future<Output = Result<tonic::Response<proto::RateLimitResponse>, tonic::Status>> + Send + 'a>,
>;

/// Written out rather than with `async_trait`: the request's metadata is dropped
/// before the call's future is made, which then holds the message and
/// [`respond`](RlsService::respond)'s future alone.
impl<S> proto::rate_limit_service_server::RateLimitService for RlsService<S>
where
    S: ConfigSource + 'static,
{
    fn should_rate_limit<'life0, 'async_trait>(
        &'life0 self,
        request: tonic::Request<proto::RateLimitRequest>,
    ) -> core::pin::Pin<
        Box<
            dyn Future<Output = Result<tonic::Response<proto::RateLimitResponse>, tonic::Status>> + Send + 'async_trait,
        >,
    >
    where
        'life0: 'async_trait,
        Self: 'async_trait,
    {
        // `respond` is called inside: a future made outside and awaited in here would
        // be held twice (as captured, and as awaited), 616 bytes where this is 376.
        let request = request.into_inner();
        Box::pin(async move { self.respond(request).await.map(tonic::Response::new).map_err(tonic::Status::from) })
    }
}

/// Why a request was not answered with statuses.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum ServiceError {
    /// The request is malformed or out of bounds (`INVALID_ARGUMENT`).
    Request(RequestError),
    /// No config file has the domain (`NOT_FOUND`).
    UnknownDomain(UnknownDomain),
    /// No config has been loaded yet (`UNAVAILABLE`).
    NoConfig,
    /// The counters could not be decided (`UNAVAILABLE` or `INTERNAL`).
    Decide(DecideError),
    /// The [`Decide`] answered a different number of decisions than it was given
    /// checks (`INTERNAL`).
    DecisionCount {
        /// Checks given.
        checks: usize,
        /// Decisions answered.
        decisions: usize,
    },
}

impl ServiceError {
    /// The gRPC status code the request is answered with.
    pub fn code(&self) -> tonic::Code {
        match self {
            Self::Request(e) => e.code(),
            Self::UnknownDomain(_) => tonic::Code::NotFound,
            Self::NoConfig => tonic::Code::Unavailable,
            Self::Decide(e) => e.code(),
            Self::DecisionCount { .. } => tonic::Code::Internal,
        }
    }
}

impl fmt::Display for ServiceError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Request(e) => e.fmt(f),
            Self::UnknownDomain(e) => e.fmt(f),
            Self::NoConfig => f.write_str("no rate limit configuration loaded"),
            Self::Decide(e) => write!(f, "the counters could not be decided: {e}"),
            Self::DecisionCount { checks, decisions } => {
                write!(f, "the counters answered {decisions} decisions for {checks} checks")
            }
        }
    }
}

impl std::error::Error for ServiceError {}

impl From<RequestError> for ServiceError {
    fn from(e: RequestError) -> Self {
        Self::Request(e)
    }
}

impl From<DecideError> for ServiceError {
    fn from(e: DecideError) -> Self {
        Self::Decide(e)
    }
}

impl From<ServiceError> for tonic::Status {
    fn from(e: ServiceError) -> Self {
        tonic::Status::new(e.code(), e.to_string())
    }
}

//! `weir-rls`: Envoy's rate-limit service on weir's limiters, serving
//! envoyproxy/ratelimit config files unchanged. `weir-rls --help` lists every
//! option; the crate's README is the guide.

use clap::{Parser, ValueEnum};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;
use weir_rls::backend::{BackendConfig, FailPolicy, LeaseOptions, MemoryBackend, RedisBackend};
use weir_rls::decider::{StoreDecider, make_stores};
use weir_rls::stats::MetricsOptions;
use weir_rls::windows::WindowAlignment;
use weir_rls::{
    Algorithm, Compatibility, Config, LoadOptions, Reloadable, RequestLimits, ResponseOptions, RlsService, Server,
    UnknownDomainPolicy,
};

const ABOUT: &str = "Envoy's rate-limit service (envoy.service.ratelimit.v3) on weir's limiters.

Serves envoyproxy/ratelimit's YAML config files unchanged: point Envoy's rate-limit
cluster at --grpc-addr instead of envoyproxy/ratelimit's, and nothing else changes.";

const AFTER_HELP: &str = "Examples:
  weir-rls --config /etc/ratelimit/config
      In memory, gRPC on 0.0.0.0:8081, HTTP (/healthcheck, /json, /metrics) on 0.0.0.0:8080.
  weir-rls --config config/ --backend redis --redis-url redis://10.0.0.5:6379 --fail-policy local --instances 4
      A fleet of 4 sharing its counters in Redis; while Redis is away each enforces a quarter.
  weir-rls --check-config config/
      Checks every file; prints each error as file:line:column: field: problem, and exits 1 if any.

Every option can be set by its environment variable instead (shown with each option).

Reload: the config is reloaded when a file in it changes (and on SIGHUP, which
envoyproxy/ratelimit answers by shutting down). A config with an error is refused, logged
and counted (ratelimit_service_config_load_error); the config in force keeps serving.
SIGTERM or SIGINT: report unhealthy, wait --drain, stop accepting, answer the calls in
flight, exit.";

/// The command line; every option also reads its `WEIR_RLS_*` variable.
#[derive(Debug, Parser)]
#[command(name = "weir-rls", version, about = ABOUT, after_help = AFTER_HELP, max_term_width = 100)]
struct Cli {
    /// The config: a YAML file, or a directory of them (read recursively, names
    /// starting with '.' skipped, as a Kubernetes ConfigMap mounts them).
    #[arg(long, env = "WEIR_RLS_CONFIG", value_name = "FILE|DIR", required_unless_present = "check_config")]
    config: Option<PathBuf>,

    /// Check the config and exit: each error as file:line:column: field: problem;
    /// exit status 1 if any.
    #[arg(long, value_name = "FILE|DIR", conflicts_with = "config")]
    check_config: Option<PathBuf>,

    /// Where gRPC listens (RateLimitService and grpc.health.v1).
    #[arg(long, env = "WEIR_RLS_GRPC_ADDR", default_value = "0.0.0.0:8081", help_heading = "Listeners")]
    grpc_addr: SocketAddr,

    /// Where HTTP listens (/healthcheck, /json, /metrics).
    #[arg(long, env = "WEIR_RLS_HTTP_ADDR", default_value = "0.0.0.0:8080", help_heading = "Listeners")]
    http_addr: SocketAddr,

    /// The largest request accepted (a gRPC message or a /json body), in bytes.
    #[arg(long, env = "WEIR_RLS_MAX_REQUEST_BYTES", default_value_t = weir_rls::server::DEFAULT_MAX_REQUEST_BYTES, help_heading = "Listeners")]
    max_request_bytes: usize,

    /// Where the counters live.
    #[arg(long, env = "WEIR_RLS_BACKEND", value_enum, default_value_t = BackendKind::Memory, help_heading = "Backend")]
    backend: BackendKind,

    /// memory: the most counters a rule keeps (one per value it counts apart);
    /// idle ones are evicted, and a rule full of live ones answers RESOURCE_EXHAUSTED.
    #[arg(long, env = "WEIR_RLS_MAX_KEYS", default_value_t = 100_000, help_heading = "Backend")]
    max_keys: usize,

    /// redis: redis:// or rediss:// (TLS) URL; with --redis-cluster, the nodes,
    /// comma-separated.
    #[arg(long, env = "WEIR_RLS_REDIS_URL", value_delimiter = ',', help_heading = "Backend")]
    redis_url: Vec<String>,

    /// redis: the URLs are a Redis Cluster's nodes.
    #[arg(long, env = "WEIR_RLS_REDIS_CLUSTER", help_heading = "Backend")]
    redis_cluster: bool,

    /// redis: a PEM file of a private CA to trust for rediss://.
    #[arg(long, env = "WEIR_RLS_REDIS_CA_FILE", value_name = "PEM", help_heading = "Backend")]
    redis_ca_file: Option<PathBuf>,

    /// redis: how long a call may take before the fail policy decides.
    #[arg(long, env = "WEIR_RLS_REDIS_TIMEOUT", value_parser = humantime::parse_duration, default_value = "250ms", help_heading = "Backend")]
    redis_timeout: Duration,

    /// redis: the prefix of every key weir-rls writes.
    #[arg(long, env = "WEIR_RLS_REDIS_PREFIX", default_value = "weir-rls:", help_heading = "Backend")]
    redis_prefix: String,

    /// redis: what decides while Redis does not answer: open (admit all), closed
    /// (OVER_LIMIT), local (each instance enforces the limit / --instances in memory).
    #[arg(long, env = "WEIR_RLS_FAIL_POLICY", value_enum, default_value_t = FailKind::Closed, help_heading = "Backend")]
    fail_policy: FailKind,

    /// redis: how many instances share the counters (the local fallback's divisor,
    /// and the leases' N).
    #[arg(long, env = "WEIR_RLS_INSTANCES", default_value_t = 1, help_heading = "Backend")]
    instances: u32,

    /// redis: leases of up to this many permits for gcra rules (0: off). In any
    /// interval t a leased rule admits at most burst + rate*t + min(N*L, rate*lifetime)
    /// across N instances, against burst + rate*t without. Not with --fail-policy
    /// open or local.
    #[arg(long, env = "WEIR_RLS_LEASE", value_name = "L", default_value_t = 0, help_heading = "Backend")]
    lease: u32,

    /// redis: how long a lease's permits may be spent.
    #[arg(long, env = "WEIR_RLS_LEASE_LIFETIME", value_parser = humantime::parse_duration, default_value = "1s", help_heading = "Backend")]
    lease_lifetime: Duration,

    /// The algorithm of rules without an `algorithm:` of their own, and of Envoy's
    /// limit overrides (fixed_window counts as envoyproxy/ratelimit does).
    #[arg(long, env = "WEIR_RLS_DEFAULT_ALGORITHM", value_enum, default_value_t = AlgorithmArg::FixedWindow, help_heading = "Config")]
    default_algorithm: AlgorithmArg,

    /// Where fixed and sliding windows start: epoch (on the minute, the hour, 00:00
    /// UTC, as envoyproxy/ratelimit's) or start (when each counter is made).
    #[arg(long, env = "WEIR_RLS_WINDOW_ALIGNMENT", value_enum, default_value_t = AlignmentArg::Epoch, help_heading = "Config")]
    window_alignment: AlignmentArg,

    /// Merge files of the same domain (envoyproxy/ratelimit's MERGE_DOMAIN_CONFIG)
    /// rather than refuse them.
    #[arg(long, env = "WEIR_RLS_MERGE_DOMAINS", help_heading = "Config")]
    merge_domains: bool,

    /// strict refuses what envoyproxy/ratelimit ignores (a key twice, a key at the
    /// wrong level); upstream accepts every file it accepts, with a warning each.
    #[arg(long, env = "WEIR_RLS_COMPATIBILITY", value_enum, default_value_t = CompatibilityArg::Strict, help_heading = "Config")]
    compatibility: CompatibilityArg,

    /// Reload when the config changes.
    #[arg(long, env = "WEIR_RLS_WATCH", default_value_t = true, action = clap::ArgAction::Set, value_name = "BOOL", help_heading = "Config")]
    watch: bool,

    /// How long the config must be quiet before a change is reloaded.
    #[arg(long, env = "WEIR_RLS_RELOAD_DEBOUNCE", value_parser = humantime::parse_duration, default_value = "200ms", help_heading = "Config")]
    reload_debounce: Duration,

    /// A domain no file has: refuse (NOT_FOUND, naming it) or allow (OK, no limit,
    /// as envoyproxy/ratelimit answers).
    #[arg(long, env = "WEIR_RLS_UNKNOWN_DOMAIN", value_enum, default_value_t = UnknownDomainArg::Refuse, help_heading = "Answers")]
    unknown_domain: UnknownDomainArg,

    /// Headers for Envoy to add to the client's response: none, ratelimit
    /// (RateLimit, RateLimit-Policy), legacy (X-RateLimit-*), both.
    #[arg(long, env = "WEIR_RLS_RESPONSE_HEADERS", value_enum, default_value_t = HeadersArg::None, help_heading = "Answers")]
    response_headers: HeadersArg,

    /// Decide and count as usual, but answer every request OK (each descriptor's
    /// status still says OVER_LIMIT): envoyproxy/ratelimit's SHADOW_MODE.
    #[arg(long, env = "WEIR_RLS_SHADOW_MODE", help_heading = "Answers")]
    shadow_mode: bool,

    /// The share of a limit above which hits count as near_limit.
    #[arg(long, env = "WEIR_RLS_NEAR_LIMIT_RATIO", default_value_t = 0.8, help_heading = "Metrics and logs")]
    near_limit_ratio: f64,

    /// The most metric series of detailed_metric and value_to_metric rules (their
    /// label values are requests' values).
    #[arg(long, env = "WEIR_RLS_MAX_DETAILED_SERIES", default_value_t = 10_000, help_heading = "Metrics and logs")]
    max_detailed_series: usize,

    /// What is logged: a level (error, warn, info, debug, trace) or a tracing
    /// filter (weir_rls=debug,info).
    #[arg(long, env = "WEIR_RLS_LOG", default_value = "info", help_heading = "Metrics and logs")]
    log: String,

    /// How logs are written.
    #[arg(long, env = "WEIR_RLS_LOG_FORMAT", value_enum, default_value_t = LogFormat::Text, help_heading = "Metrics and logs")]
    log_format: LogFormat,

    /// On SIGTERM, how long to report unhealthy while still answering, before
    /// stopping (so that load balancers stop sending first).
    #[arg(long, env = "WEIR_RLS_DRAIN", value_parser = humantime::parse_duration, default_value = "0s", help_heading = "Listeners")]
    drain: Duration,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum BackendKind {
    /// In this process.
    Memory,
    /// In Redis, shared by every instance that uses it.
    Redis,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum FailKind {
    Open,
    Closed,
    Local,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum AlgorithmArg {
    FixedWindow,
    SlidingWindow,
    SlidingLog,
    Gcra,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum AlignmentArg {
    Epoch,
    Start,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum CompatibilityArg {
    Strict,
    Upstream,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum UnknownDomainArg {
    Refuse,
    Allow,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum HeadersArg {
    None,
    Ratelimit,
    Legacy,
    Both,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum LogFormat {
    Text,
    Json,
}

impl Cli {
    fn load_options(&self) -> LoadOptions {
        let algorithm = match self.default_algorithm {
            AlgorithmArg::FixedWindow => Algorithm::FixedWindow,
            AlgorithmArg::SlidingWindow => Algorithm::SlidingWindow,
            AlgorithmArg::SlidingLog => Algorithm::SlidingLog,
            AlgorithmArg::Gcra => Algorithm::Gcra,
        };
        let compatibility = match self.compatibility {
            CompatibilityArg::Strict => Compatibility::Strict,
            CompatibilityArg::Upstream => Compatibility::Upstream,
        };
        LoadOptions::default()
            .default_algorithm(algorithm)
            .merge_domains(self.merge_domains)
            .compatibility(compatibility)
    }

    fn backend(&self) -> Result<BackendConfig, String> {
        match self.backend {
            BackendKind::Memory => {
                if !self.redis_url.is_empty() {
                    return Err("--redis-url is for --backend redis".into());
                }
                Ok(BackendConfig::Memory(MemoryBackend::new(self.max_keys).map_err(|e| e.to_string())?))
            }
            BackendKind::Redis => {
                let e = |e: weir_rls::backend::BackendError| e.to_string();
                let mut redis = RedisBackend::new(self.redis_url.clone(), self.redis_cluster)
                    .map_err(e)?
                    .timeouts(self.redis_timeout, Duration::from_secs(5))
                    .map_err(e)?;
                let policy = match self.fail_policy {
                    FailKind::Open => FailPolicy::Open,
                    FailKind::Closed => FailPolicy::Closed,
                    FailKind::Local => FailPolicy::Local { instances: self.instances, max_keys: self.max_keys },
                };
                redis = redis.fail_policy(policy).map_err(e)?;
                if self.lease > 0 {
                    if self.fail_policy != FailKind::Closed {
                        return Err("--lease needs --fail-policy closed: a leased counter has no fail policy".into());
                    }
                    let lease = LeaseOptions::new(self.lease, self.lease_lifetime, self.instances).map_err(e)?;
                    redis = redis.lease(lease);
                }
                if let Some(path) = &self.redis_ca_file {
                    let pem =
                        std::fs::read(path).map_err(|err| format!("--redis-ca-file {}: {err}", path.display()))?;
                    redis = redis.root_certificate(pem);
                }
                Ok(BackendConfig::Redis(redis))
            }
        }
    }

    fn metrics_options(&self, backend: &BackendConfig) -> Result<MetricsOptions, String> {
        Ok(MetricsOptions::default()
            .near_limit_ratio(self.near_limit_ratio)
            .map_err(|e| e.to_string())?
            .max_detailed_series(self.max_detailed_series)
            .backend_error(backend.error_type()))
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    if let Some(path) = &cli.check_config {
        return check_config(path, &cli.load_options());
    }
    if let Err(message) = init_logs(&cli) {
        eprintln!("weir-rls: {message}");
        return ExitCode::from(2);
    }
    let runtime = match tokio::runtime::Builder::new_multi_thread().enable_all().build() {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("weir-rls: cannot start the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(run(cli)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            tracing::error!("{message}");
            eprintln!("weir-rls: {message}");
            ExitCode::FAILURE
        }
    }
}

/// `--check-config`: every file on its own (its first error), then all together
/// (errors across files: a domain in two).
fn check_config(path: &Path, options: &LoadOptions) -> ExitCode {
    let files = match weir_rls::config::config_files(path, &options.limits) {
        Ok(files) => files,
        Err(e) => {
            println!("{e}");
            return ExitCode::FAILURE;
        }
    };
    let mut errors = 0;
    let mut rules = 0;
    for file in &files {
        match Config::load_file(file, options) {
            Ok(config) => {
                rules += config.rules().len();
                for warning in config.warnings() {
                    println!("warning: {warning}");
                }
            }
            Err(e) => {
                println!("{e}");
                errors += 1;
            }
        }
    }
    if errors == 0
        && let Err(e) = Config::load(path, options)
    {
        println!("{e}");
        errors += 1;
    }
    if errors > 0 {
        println!("{errors} error{} in {}", if errors == 1 { "" } else { "s" }, path.display());
        ExitCode::FAILURE
    } else {
        println!(
            "{}: {} file{}, {rules} rules: OK",
            path.display(),
            files.len(),
            if files.len() == 1 { "" } else { "s" }
        );
        ExitCode::SUCCESS
    }
}

fn init_logs(cli: &Cli) -> Result<(), String> {
    let filter = tracing_subscriber::EnvFilter::try_new(&cli.log).map_err(|e| format!("--log {:?}: {e}", cli.log))?;
    let builder = tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr);
    match cli.log_format {
        LogFormat::Text => builder.try_init(),
        LogFormat::Json => builder.json().try_init(),
    }
    .map_err(|e| e.to_string())
}

async fn run(cli: Cli) -> Result<(), String> {
    let backend = cli.backend()?;
    let metrics = cli.metrics_options(&backend)?;
    // Installed first: every counter is registered with it as it is made.
    let prometheus = metrics_exporter_prometheus::PrometheusBuilder::new()
        .set_buckets_for_metric(
            metrics_exporter_prometheus::Matcher::Full(weir_rls::stats::RESPONSE_TIME.to_owned()),
            &weir_rls::stats::RESPONSE_TIME_BUCKETS,
        )
        .map_err(|e| e.to_string())?
        .install_recorder()
        .map_err(|e| format!("cannot install the metrics recorder: {e}"))?;

    let alignment = match cli.window_alignment {
        AlignmentArg::Epoch => WindowAlignment::Epoch,
        AlignmentArg::Start => WindowAlignment::Start,
    };
    let stores = make_stores(&backend, alignment, &cli.redis_prefix).await.map_err(|e| format!("backend: {e}"))?;
    let config_path = cli.config.clone().ok_or("--config is required")?;
    let build = move |config: &Arc<Config>, previous: Option<&StoreDecider>| {
        StoreDecider::build(Arc::clone(&stores), config, previous)
    };
    let live = Arc::new(Reloadable::load(&config_path, cli.load_options(), build).map_err(|e| e.to_string())?);
    if let Some(config) = live.config() {
        for warning in config.warnings() {
            tracing::warn!(%warning, "config");
        }
        tracing::info!(path = %config_path.display(), files = config.files().len(), rules = config.rules().len(), "config loaded");
    }

    let response = match cli.response_headers {
        HeadersArg::None => ResponseOptions::default(),
        HeadersArg::Ratelimit => ResponseOptions::default().ratelimit_headers(true),
        HeadersArg::Legacy => ResponseOptions::default().legacy_headers(true),
        HeadersArg::Both => ResponseOptions::default().ratelimit_headers(true).legacy_headers(true),
    };
    let unknown = match cli.unknown_domain {
        UnknownDomainArg::Refuse => UnknownDomainPolicy::Refuse,
        UnknownDomainArg::Allow => UnknownDomainPolicy::Allow,
    };
    let service = RlsService::with_source(Arc::clone(&live))
        .request_limits(RequestLimits::default())
        .response_options(response)
        .unknown_domain(unknown)
        .global_shadow_mode(cli.shadow_mode)
        .metrics_options(metrics);

    let _watch = if cli.watch {
        let watch = live
            .watch(cli.reload_debounce, log_reload)
            .map_err(|e| format!("cannot watch {}: {e}", config_path.display()))?;
        Some(watch)
    } else {
        None
    };
    let hup = tokio::spawn(reload_on_hangup(Arc::clone(&live)));

    let grpc =
        tokio::net::TcpListener::bind(cli.grpc_addr).await.map_err(|e| format!("gRPC {}: {e}", cli.grpc_addr))?;
    let http =
        tokio::net::TcpListener::bind(cli.http_addr).await.map_err(|e| format!("HTTP {}: {e}", cli.http_addr))?;
    tracing::info!(
        grpc = %grpc.local_addr().map_err(|e| e.to_string())?,
        http = %http.local_addr().map_err(|e| e.to_string())?,
        backend = backend.error_type().trim_end_matches("_error"),
        "serving"
    );
    let result = Server::new(Arc::new(service))
        .prometheus(prometheus)
        .max_request_bytes(cli.max_request_bytes)
        .drain(cli.drain)
        .run(grpc, http, terminated())
        .await;
    hup.abort();
    tracing::info!("stopped");
    result.map_err(|e| format!("serving: {e}"))
}

fn log_reload(outcome: Result<Arc<Config>, weir_rls::ReloadError>) {
    match outcome {
        Ok(config) => tracing::info!(files = config.files().len(), rules = config.rules().len(), "config reloaded"),
        Err(error) => tracing::error!(%error, "config refused; the config in force keeps serving"),
    }
}

/// SIGHUP: reload (envoyproxy/ratelimit shuts down on it instead).
async fn reload_on_hangup<D: weir_rls::Decide + 'static>(live: Arc<Reloadable<D>>) {
    let Ok(mut hangup) = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup()) else {
        tracing::warn!("cannot listen for SIGHUP: reload by changing the config");
        return;
    };
    while hangup.recv().await.is_some() {
        let live = Arc::clone(&live);
        match tokio::task::spawn_blocking(move || live.reload()).await {
            Ok(outcome) => log_reload(outcome),
            Err(e) => tracing::error!(error = %e, "the reload stopped"),
        }
    }
}

/// SIGTERM or SIGINT.
async fn terminated() {
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut term) => {
                term.recv().await;
            }
            Err(_) => std::future::pending().await,
        }
    };
    tokio::select! {
        () = term => tracing::info!("SIGTERM: stopping"),
        _ = tokio::signal::ctrl_c() => tracing::info!("SIGINT: stopping"),
    }
}

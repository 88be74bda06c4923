//! Rate-limiting middleware for tower, axum and hyper servers: who the client is
//! (behind trusted proxies, IPv6 grouped), which limits apply (per route, per tier,
//! per IP and per user at once), and what the client is told (the IETF `RateLimit`
//! headers, a `Retry-After` in whole seconds, an RFC 9457 problem+json 429).
//!
//! ```
//! use axum::{Router, routing::get};
//! use weir_rl_core::Quota;
//! use weir_keyed::{KeyedConfig, KeyedGcra};
//! use weir_tower::{Key, RateLimitLayer};
//!
//! // 100 requests per minute per client IP, 20 at once; at most 100 000 clients kept.
//! let per_ip: KeyedGcra<Key> = KeyedGcra::gcra(Quota::per_minute(100)?.with_burst(20)?, KeyedConfig::builder(100_000).build()?);
//! let app: Router = Router::new().route("/", get(|| async { "hello" })).layer(RateLimitLayer::per_ip(per_ip));
//! // Serve it with `app.into_make_service_with_connect_info::<SocketAddr>()`: the peer
//! // address is how clients are told apart.
//! # let _ = app;
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! **Give the layer the peer address.** A per-IP limit tells clients apart by the
//! connection's peer address, which the server must put in each request:
//!
//! - axum: serve with `axum::serve(listener, app.into_make_service_with_connect_info::<SocketAddr>())`
//!   (plain `axum::serve(listener, app)` gives no address), with this crate's `axum`
//!   feature on (the default; through the facade, weir's `axum` feature: `tower`
//!   alone does not read axum's `ConnectInfo`);
//! - tonic (the `grpc` feature): nothing to do, the layer reads the
//!   `TcpConnectInfo` tonic's server puts in each request (TLS connections carry
//!   it too);
//! - hyper or any tower server: insert a [`PeerAddr`] (or a `SocketAddr`) into each
//!   request's extensions.
//!
//! Without it, every request to a per-IP limit is answered `400 Client Not
//! Identified`, with a problem+json `detail` that says the above, and the layer
//! emits one `tracing` warning (target `weir_tower`) the first time.
//!
//! The request path is weir-http's, framework-neutral (weir-actix runs the same over
//! actix-web); this crate reads an `http` request into it and writes its answer in
//! `http`'s types. The types below are weir-http's, re-exported.
//!
//! # How a request flows
//!
//! ```text
//! request ─► skip? (`/health`, OPTIONS) ─► route policy (longest path prefix, or the default)
//!         ─► a key per limit: client IP / API key / user / global / your closure
//!         ─► tier (cached lookup) ─► stores, in order, all or nothing
//!         ─► admitted: the service's response + RateLimit headers of the strictest limit
//!            refused: 429 + Retry-After + problem+json (400 unidentified, 503 store full
//!            or unavailable); a gRPC call: a trailers-only gRPC status
//! ```
//!
//! **What counts.** Every request a policy matches counts, whatever the service
//! answers (a 404 or a 405 too: the limit decides before the service runs), and
//! whatever its method (`HEAD`, and `OPTIONS`: CORS preflights). Exempt methods with
//! [`skip_methods`](RateLimitLayerBuilder::skip_methods) (`skip_methods =
//! ["OPTIONS"]` in the file), paths with
//! [`skip_path`](RateLimitLayerBuilder::skip_path), anything with
//! [`skip`](RateLimitLayerBuilder::skip); an exempted request carries no
//! `RateLimit` headers. Do not exempt `HEAD`: axum answers it with the `GET`
//! handler, which would then run unlimited.
//!
//! # Keys: who the client is
//!
//! [`KeySource`] reads a [`Key`] from the request: the client IP ([`ClientIp`]: the
//! peer address from axum's `ConnectInfo`, or behind proxies you trust the
//! rightmost untrusted hop of `X-Forwarded-For` or `Forwarded`, never the spoofable
//! leftmost; IPv6 clients grouped by `/64` by default), an API-key header, the
//! authenticated [`User`] an auth layer put in the extensions, one global key, or a
//! closure; or the first of several ("the API key, else the IP"). A request with no
//! usable key gets its limit's [`MissingKey`] choice: refused (400, the default,
//! whose detail names where the limit reads its key: ``the `x-api-key` header``),
//! counted under one shared key, or let through that limit.
//!
//! **A key costs at most [`MAX_KEY_BYTES`] of payload**, wherever it is kept (a
//! store, the tier cache, a throttle's map) or sent (a remote store): an API key,
//! user id or custom key longer than 128 bytes is kept as its 128-bit hash
//! ([`weir_rl_core::long_key_hash`], from SHA-256), the same on every instance of a
//! fleet and in weir-redis ([`Key`], "Long keys"), so a store's `max_keys` bounds its memory whatever its clients send. A
//! tier lookup receives that hashed key for such a client.
//! [`KeySource::long_keys`]`(`[`LongKeys::Refuse`]`)` (`long_keys = "refuse"` in
//! the file) refuses such a header with a 400 instead. A remote store names a key
//! by its encoding (`Key: AsRef<[u8]>`), bounded alike.
//!
//! # Policies: which limits apply
//!
//! A [`Policy`] is the set of [`Limit`]s a route group applies (`/auth`: 5 per 5
//! minutes per IP; everything else: 100 per minute); a skip rule exempts paths; an
//! on-limit hook sees every refusal ([`LimitEvent`]), and a `tracing` event is
//! emitted for each (target `weir_http`). Each limit checks its key in a [`Store`]:
//! in memory (any [`KeyedLimiter`](weir_rl_core::KeyedLimiter): `weir_keyed::Keyed`
//! over GCRA, the sliding window, the sliding log or the fixed window), or remote
//! (any [`AsyncKeyedLimiter`](weir_rl_core::AsyncKeyedLimiter), such as Redis). Or a
//! limit throttles ([`KeyedThrottle`], weir-leaky's FIFO throttle per key):
//! requests over the rate wait their turn up to a deadline instead of being refused,
//! and a client that disconnects while waiting frees its place.
//!
//! **All or nothing.** A policy's limits (per IP and per user, say) and a tier's
//! quotas (per minute, per day, a burst: an [`AllOf`](weir_rl_core::AllOf)) are checked
//! in order; a request refused by one consumes nothing from the others, because the
//! earlier admissions are refunded before the answer is sent. The one transient: a
//! concurrent request that checks while capacity is held for a request about to be
//! refused may be refused too, never over-admitted. Of the admissions, the one with
//! the least remaining is what the headers report. A refusal reports, of every limit
//! and quota that refuses the request, the one with the longest wait: a per-second
//! and a per-minute limit both spent say the minute's wait, not the second's after
//! which the retry would be refused again. The in-memory limits after the first
//! that refuses are asked for their wait without consuming anything (one whose
//! snapshot has room is passed over; another is checked, and an admission given
//! back at once). What would cost more than a read of memory is not asked, so that
//! a refused request makes no work a refusal did not make before: a later remote
//! store (a round trip per refusal, and an admission there may not be given back)
//! and a tier not in the cache (a lookup) say nothing, and `Retry-After` is the
//! longest wait of the limits asked.
//!
//! **Shadow mode.** A limit or a policy in shadow mode ([`Limit::shadow`],
//! [`PolicyBuilder::shadow`]; `shadow = true` in the file) is decided and counted,
//! and what it would have refused is logged (`info`, target `weir_http`, "shadow:
//! would have refused") and counted (`outcome="shadow_denied"`), but the client
//! sees nothing of it: no refusal, and no header it would not have had.
//!
//! **Tiers.** [`Tiers`] map a client to a plan (free / pro / enterprise) with your
//! async lookup, cached (300 s by default, bounded, with a failure policy).
//!
//! # The response
//!
//! Every limited response carries, from the decision the limiter made (never
//! recomputed), the fields of draft-ietf-httpapi-ratelimit-headers-10:
//! `RateLimit-Policy: "minute";q=100;w=60` (one item per quota that applied) and
//! `RateLimit: "minute";r=42;t=18` (the deciding quota: remaining, and seconds until
//! more quota: on a refusal, until this request would be admitted; on an admission,
//! until the quota is whole again). The legacy `X-RateLimit-Limit`,
//! `X-RateLimit-Remaining` and `X-RateLimit-Reset` (seconds) are added only when
//! switched on ([`legacy_headers(true)`](RateLimitLayerBuilder::legacy_headers),
//! `legacy_headers = true` in the file), for clients that read only those. A
//! refusal is `429 Too Many Requests` with `Retry-After` in whole seconds, rounded
//! up and at least 1 (a 100 ms wait is `1`, never `0`), and an
//! `application/problem+json` body (RFC 9457) with `retry_after`; the body is
//! configurable ([`RateLimitLayerBuilder::deny_body`]). A store full of other
//! clients' keys ([`DenyReason::KeyCapacity`](weir_rl_core::DenyReason::KeyCapacity)) is not this
//! client's rate: it is answered `503 Too Many Clients` ([`Rejection::KeyCapacity`]),
//! with the store's `Retry-After` and no `RateLimit` fields (the client has no
//! bucket they could describe); so is a new client of a [`KeyedThrottle`] whose map
//! is full of throttles in use. A decision a store's fail policy made
//! ([`Decision::is_from_fallback`](weir_rl_core::Decision::is_from_fallback): weir-redis's
//! `Resilient` while Redis is down) says nothing of the client's quota: a denial is
//! answered as the store's outage, `503 Rate Limiter Unavailable` with the store's
//! `Retry-After` (until Redis is tried again) and no `RateLimit` fields (gRPC:
//! `UNAVAILABLE`); an admission carries no `RateLimit` fields of its own (those of
//! another limit of the policy, if one decided from its own state).
//!
//! # gRPC (tonic)
//!
//! With the `grpc` feature, the layer limits a tonic server:
//! `Server::builder().layer(weir_tower::grpc::layer(limits))` (the `grpc` module's
//! `layer` puts a response body under the layer that tonic's routes can be turned
//! into). The answer is chosen per request, by its `content-type`: a refused gRPC
//! call (`application/grpc*`) is a trailers-only gRPC response, `grpc-status: 8`
//! (`RESOURCE_EXHAUSTED`) with a `grpc-message` naming the policy, the quota and
//! the retry time, and the delay as `grpc-retry-pushback-ms` (gRFC A6) and as a
//! `google.rpc.RetryInfo` in `grpc-status-details-bin` (tonic-types:
//! `StatusExt::get_details_retry_info` reads it); an HTTP request on the same layer
//! gets the 429 above. A missing key is `UNAUTHENTICATED`, a store full of other
//! clients' keys `RESOURCE_EXHAUSTED`, a store outage `UNAVAILABLE` (the table is in
//! the `grpc` module). Admitted calls carry the `RateLimit` fields as initial
//! metadata; keys come from metadata (`KeySource::header("x-api-key")`) or the
//! peer. Route prefixes name a method (`/package.Service/Method`) or a service
//! (`/package.Service/`). A limit applies when a call starts: a streaming call
//! counts once, whatever it streams. `examples/grpc.rs` is a server to run.
//!
//! ```
//! # #[cfg(feature = "grpc")] {
//! use weir_rl_core::Quota;
//! use weir_keyed::{KeyedConfig, KeyedGcra};
//! use weir_tower::{Key, Limit, Policy, RateLimitLayer};
//!
//! let per_ip = |n| -> Result<KeyedGcra<Key>, Box<dyn std::error::Error>> {
//!     Ok(KeyedGcra::gcra(Quota::per_minute(n)?, KeyedConfig::builder(10_000).build()?))
//! };
//! let limits = RateLimitLayer::builder()
//!     .route("/shop.Orders/Create", Policy::builder("create").limit(Limit::per_ip(per_ip(10)?)).build()?)
//!     .route("/shop.Orders/", Policy::builder("orders").limit(Limit::per_ip(per_ip(600)?)).build()?)
//!     .build()?;
//! let server = tonic::transport::Server::builder().layer(weir_tower::grpc::layer(limits));
//! // server.add_service(OrdersServer::new(orders)).serve(addr).await?;
//! # let _ = server;
//! # }
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! # Cancellation
//!
//! A request's future may be dropped at any await (its client went away). What it
//! leaves: no place in a throttle's line (a waiter at the head gives its slot
//! back), no turn in an earlier throttle of its policy (given back, as is the turn
//! of a request a later throttle turns away; see [`KeyedThrottle`]); nothing in an
//! in-memory store, whose admissions made before the decision are given back by
//! the drop; nothing in a remote store once the task the drop hands them to has
//! run (the admissions it made for the request are given back, and a check sent
//! and not yet answered is awaited, then given back if it admitted; the task is
//! spawned on the current tokio runtime). Once the service is called, the request
//! is admitted for good. [`until_ready`](wait::until_ready),
//! [`until_key_ready`](wait::until_key_ready) and [`FifoWait`](wait::FifoWait)
//! dropped leave no line; over an in-memory limiter they consume nothing (an
//! admitting check ends the wait in the same poll), over a remote store at most
//! what a check already sent admits (see [`wait`], "Cancellation"). Each is dropped
//! at every await in the tests (`weir_testkit::each_cancellation`).
//!
//! # Metrics
//!
//! With the `metrics` feature, the layer reports through the [`metrics`](https://docs.rs/metrics)
//! facade (any recorder: `metrics-exporter-prometheus`, say; `examples/server.rs`
//! serves `/metrics` with it):
//!
//! | metric | type | labels | what |
//! |---|---|---|---|
//! | `weir_tower_decisions_total` | counter | `policy`, `limit`, `tier`, `quota`, `outcome` | requests a policy matched, by what became of them: `outcome` is `allowed`, `denied` (a rate limit, or a throttle that turned it away: `quota="throttle"`), `key_capacity` (a store or throttle full of other clients), `unidentified` (no key for `limit`), `unavailable` (a store or tier lookup failed), `skipped` (a skip rule), and for a limit in shadow mode `shadow_denied` (a refusal it would have made: the request went on), `shadow_unidentified`, `shadow_unavailable`; `limit` and `quota` are those that decided (the admission with the least left, the refusal with the longest wait; empty when none did), `tier` the client's tier for a tiered limit |
//! | `weir_tower_throttle_wait_seconds` | histogram | `policy`, `limit` | how long a request a throttle admitted waited for its turn |
//! | `weir_tower_throttle_give_ups_total` | counter | `policy`, `limit` | requests a throttle turned away (their turn would come after `max_wait`, or its line was full) |
//! | `weir_tower_tier_lookups_total` | counter | `tiers` | tier lookups run (cache misses; concurrent misses for one key share one) |
//! | `weir_tower_tier_lookup_failures_total` | counter | `tiers` | lookups that failed or named no tier |
//! | `weir_tower_tier_cache_hits_total` | counter | `tiers` | requests whose tier the cache held |
//!
//! Every label value comes from configuration, never from a request: `policy` is the
//! policy's name, `limit` the limit's ([`Limit::named`], `name` in the file; by default
//! its place in its policy, from 1), `quota` the quota's (as in the `RateLimit`
//! headers), `tiers` the [`TiersBuilder::name`] (default `default`), `tier` the tier's.
//! With the feature, weir-keyed's store metrics are on too (`weir_keyed_keys`,
//! evictions, capacity denials; a store built from the file is named
//! `<policy>.<limit>.<quota>` or `tiers.<tier>.<quota>`, one of your own by its
//! `KeyedConfigBuilder::name`).
//!
//! **Install the recorder before building the layer** (before the builder's `policy`
//! and `route` calls, and before building the stores and tiers): the handles are
//! registered then, once, and kept, so a request increments a counter and builds no
//! key. A layer built before the recorder is installed records nothing. With no
//! recorder, every handle is a no-op (one branch each); without the feature, no
//! metric code is compiled.
//!
//! ```
//! # #[cfg(feature = "metrics")] {
//! use weir_tower::Config;
//!
//! // Install the recorder first (`PrometheusBuilder::new().install_recorder()?`,
//! // whose handle's `render()` a `/metrics` route returns); then build the layer.
//! let toml = "[[policy]]\nname = \"api\"\ndefault = true\n[[policy.limit]]\nname = \"per_ip\"\nkey = \"ip\"\n\
//!             quotas = [{ algorithm = \"gcra\", limit = 100, window = \"1m\" }]\n";
//! let layer = Config::from_toml(toml)?.layer()?;
//! // Counts weir_tower_decisions_total{policy="api",limit="per_ip",quota="minute",outcome="allowed"|...}
//! # let _ = layer;
//! # }
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! # Configuration
//!
//! [`Config`] reads policies and tiers from TOML (see [`config`]), with errors that
//! name the field and the line. `examples/server.rs` and `examples/tiers.toml` are a
//! server to run and curl.
//!
//! # Costs
//!
//! In-memory stores are checked inside the service's `call`: no future is boxed and
//! no lock taken, and an admitted request of a client the store holds allocates the
//! `RateLimit` header's value and nothing else of its own (the response's header map
//! may grow to take the headers). A remote store, a tier lookup that misses the
//! cache, or a throttle make the decision a boxed future.
//!
//! Against `tower_governor` in the same run (callgrind, instructions per request
//! over a bare axum router, `cargo bench -p weir-tower --bench layer -- --quick
//! --only N`): by default (the two IETF fields), weir adds 0.81× what
//! tower_governor adds with its two headers (3 220 against 3 985). With the legacy
//! ones switched on, all five add 1.16× (4 632), most of it in the `HeaderMap`:
//! seven headers where axum's map has room for six. Such a map is not grown: the
//! fields go into a copy of a map made once per process with their names already
//! in it (no name hashed) and room to spare, and the handler's headers are moved
//! over. The figures, and the time they take, are in
//! [DESIGN.md, "weir-tower"](https://github.com/weir-rs/weir/blob/main/DESIGN.md#weir-tower).
//! The limiter's headers replace any of the same names the service set.
//!
//! # Waiting in handlers
//!
//! [`wait`] has [`until_ready`](wait::until_ready) and
//! [`until_key_ready`](wait::until_key_ready) (wait until a limiter admits, up to a
//! deadline, a tokio [`Instant`](wait::Instant)), their `_timeout` forms (up to a
//! `Duration` from now), and [`FifoWait`](wait::FifoWait) (the waiters of a key in
//! arrival order). With the `weir-rl` facade, their errors convert into `weir_rl::Error`
//! with `?`.

#![cfg_attr(docsrs, feature(doc_cfg))]

pub mod config;
#[cfg(feature = "grpc")]
#[cfg_attr(docsrs, doc(cfg(feature = "grpc")))]
pub mod grpc;
mod layer;
mod request;
mod response;

pub use config::{Config, ConfigError};
pub use layer::{LimitEvent, RateLimit, RateLimitLayer, RateLimitLayerBuilder, ResponseFuture};
pub use request::Http1;
pub use response::{
    DenyBody, RATELIMIT, RATELIMIT_POLICY, X_RATELIMIT_LIMIT, X_RATELIMIT_REMAINING, X_RATELIMIT_RESET,
};
/// Waiting in handlers (weir-http's `wait`).
pub use weir_http::wait;
pub use weir_http::{
    BuildError, Cidr, CidrError, ClientIp, ClientIpBuilder, ClientIpError, Denied, ForwardedHeader, Key, KeyKind,
    KeySource, KeyedThrottle, KeyedThrottleBuilder, KeyedThrottleError, Limit, Limits, LimitsBuilder, LongKeys,
    LookupFailed, MAX_KEY_BYTES, MAX_LIMITS, MissingKey, OnLookupError, PeerAddr, Policy, PolicyBuilder, PolicyError,
    Rejection, Reloadable, Store, StoreError, Tiers, TiersBuilder, TiersError, User,
};

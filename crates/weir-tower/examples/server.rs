//! A rate-limited axum server, its limits read from `tiers.toml` beside this file.
//!
//! ```text
//! cargo run -p weir-tower --example server
//! curl -i localhost:3000/api/hello                          # 100/min per IP: RateLimit headers
//! curl -i -H 'x-api-key: free-123' localhost:3000/api/hello # + the free tier (burst 10)
//! curl -i -H 'x-api-key: pro-123' localhost:3000/api/hello  # + the pro tier
//! for i in $(seq 6); do curl -s -o /dev/null -w '%{http_code}\n' -X POST localhost:3000/auth/login; done
//! curl -i localhost:3000/health                             # never limited
//! ```
//!
//! With the `metrics` feature, `/metrics` serves the limiter's metrics (and its
//! stores') in the Prometheus text format:
//!
//! ```text
//! cargo run -p weir-tower --features metrics --example server
//! curl -s localhost:3000/metrics | grep weir_
//! ```
//!
//! `WEIR_ADDR` sets the address (default `127.0.0.1:3000`).

use axum::Router;
use axum::routing::{get, post};
use std::net::SocketAddr;
use std::time::Duration;
use weir_tower::{Config, Key};

/// Which plan an API key is on. A real server asks its database; this one reads
/// the key's prefix, after a pretend round trip.
async fn plan_of(key: Key) -> Result<&'static str, std::io::Error> {
    tokio::time::sleep(Duration::from_millis(5)).await;
    let key = key.payload();
    Ok(if key.starts_with(b"ent-") {
        "enterprise"
    } else if key.starts_with(b"pro-") {
        "pro"
    } else {
        "free"
    })
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    // The recorder first: the layer and its stores register their metrics when
    // they are built.
    #[cfg(feature = "metrics")]
    let prometheus = prometheus()?;

    let layer = Config::from_toml(include_str!("tiers.toml"))?
        .tier_lookup(plan_of)
        .builder()?
        .on_limit(|event| {
            let key = event.key.map(ToString::to_string).unwrap_or_default();
            eprintln!(
                "{} {}: {key} refused by {} ({:?})",
                event.request.method, event.request.uri, event.policy, event.rejection
            );
        })
        .build()?;

    let app = Router::new()
        .route("/health", get(|| async { "ok\n" }))
        .route("/auth/login", post(|| async { "logged in\n" }))
        .route("/reports", get(|| async { "a report\n" }))
        .route("/api/hello", get(|| async { "hello\n" }))
        .layer(layer);
    // Added after the layer: the scrape itself is not limited.
    #[cfg(feature = "metrics")]
    let app = app.route("/metrics", get(move || std::future::ready(prometheus.render())));

    let addr = std::env::var("WEIR_ADDR").unwrap_or_else(|_| "127.0.0.1:3000".into());
    let listener = tokio::net::TcpListener::bind(&addr).await?;
    println!("listening on http://{}; try: curl -i http://{0}/api/hello", listener.local_addr()?);
    // The peer address is how clients are told apart: serve with ConnectInfo.
    axum::serve(listener, app.into_make_service_with_connect_info::<SocketAddr>()).await?;
    Ok(())
}

/// Installs the Prometheus recorder (histograms in seconds, with buckets from
/// 100 µs to 10 s) and keeps its histograms' windows fresh.
#[cfg(feature = "metrics")]
fn prometheus() -> Result<metrics_exporter_prometheus::PrometheusHandle, Box<dyn std::error::Error>> {
    use metrics_exporter_prometheus::{Matcher, PrometheusBuilder};
    let buckets = [0.0001, 0.0005, 0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1.0, 5.0, 10.0];
    let handle = PrometheusBuilder::new()
        .set_buckets_for_metric(Matcher::Suffix("_seconds".into()), &buckets)?
        .install_recorder()?;
    let upkeep = handle.clone();
    tokio::spawn(async move {
        loop {
            tokio::time::sleep(Duration::from_secs(5)).await;
            upkeep.run_upkeep();
        }
    });
    Ok(handle)
}

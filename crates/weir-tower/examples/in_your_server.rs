//! The "In your server" code of crates/weir-tower/README.md, whole: the README shows
//! this file from its first `use` on, and a test (`tests/readme.rs`) checks that the
//! two agree, so the README's code is the code `cargo test` builds.
//!
//! ```text
//! cd crates/weir-tower/examples && cargo run -p weir-tower --example in_your_server
//! curl -i -H 'x-api-key: pro-123' localhost:3000/api/hello
//! curl -i localhost:3000/
//! ```

use axum::{Router, routing::get};
use std::net::SocketAddr;
use std::sync::Arc;
use weir_keyed::{KeyedConfig, KeyedGcra};
use weir_rl_core::Quota;
use weir_tower::{Config, Key, RateLimitLayer};

/// Your database: which plan an API key is on.
struct Database;

impl Database {
    async fn plan_of(&self, api_key: Key) -> Result<&'static str, std::io::Error> {
        Ok(if api_key.payload().starts_with(b"pro-") { "pro" } else { "free" })
    }
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let database = Arc::new(Database);

    // From a file: policies, tiers, trusted proxies (see the `config` module docs).
    // The lookup is called once per uncached client: it owns its handle (`move`).
    let from_file = Config::from_toml(&std::fs::read_to_string("tiers.toml")?)?
        .tier_lookup(move |api_key| {
            let database = Arc::clone(&database);
            async move { database.plan_of(api_key).await }
        })
        .layer()?;

    // Or in code: each client IP, 100 per minute, 20 at once.
    let per_ip: KeyedGcra<Key> =
        KeyedGcra::gcra(Quota::per_minute(100)?.with_burst(20)?, KeyedConfig::builder(100_000).build()?);
    let in_code = RateLimitLayer::per_ip(per_ip);

    let app = Router::new()
        .nest("/api", Router::new().route("/hello", get(|| async { "hello\n" })).layer(from_file))
        .route("/", get(|| async { "home\n" }).layer(in_code));

    let listener = tokio::net::TcpListener::bind("127.0.0.1:3000").await?;
    // The peer address is how clients are told apart: without `ConnectInfo`, every
    // request to a per-IP limit is answered 400.
    axum::serve(listener, app.into_make_service_with_connect_info::<SocketAddr>()).await?;
    Ok(())
}

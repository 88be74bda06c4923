//! The first example of weir's README: limit each client IP of an axum server. The
//! README shows this file's code; `cargo test` builds it, so the README's code
//! compiles.
//!
//! ```text
//! cargo run -p weir-rl --features axum --example readme
//! curl -i localhost:3000/
//! ```

use axum::{Router, routing::get};
use std::net::SocketAddr;
use weir_rl::Quota;
use weir_rl::keyed::{KeyedConfig, KeyedGcra};
use weir_rl::tower::{Key, RateLimitLayer};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    // Each client IP: 100 requests per minute, 20 at once; at most 100 000 clients kept.
    let per_ip: KeyedGcra<Key> =
        KeyedGcra::gcra(Quota::per_minute(100)?.with_burst(20)?, KeyedConfig::builder(100_000).build()?);

    let app = Router::new()
        .route("/", get(|| async { "hello\n" }))
        // RateLimit headers on every response; over the limit, 429 with Retry-After.
        .layer(RateLimitLayer::per_ip(per_ip));

    let listener = tokio::net::TcpListener::bind("127.0.0.1:3000").await?;
    // The peer address is how clients are told apart.
    axum::serve(listener, app.into_make_service_with_connect_info::<SocketAddr>()).await?;
    Ok(())
}

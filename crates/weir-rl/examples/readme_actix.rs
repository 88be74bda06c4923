//! Limit each client IP of an actix-web server: the README's actix-web example,
//! which CI builds (dependencies: weir-rl with the `actix` feature, actix-web).

use actix_web::{App, HttpResponse, HttpServer, web};
use weir_rl::Quota;
use weir_rl::actix::{Key, RateLimit};
use weir_rl::keyed::{KeyedConfig, KeyedGcra};

#[actix_web::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let per_ip: KeyedGcra<Key> =
        KeyedGcra::gcra(Quota::per_minute(100)?.with_burst(20)?, KeyedConfig::builder(100_000).build()?);
    let limit = RateLimit::per_ip(per_ip); // built once, cloned into each worker
    HttpServer::new(move || App::new().wrap(limit.clone()).route("/", web::get().to(HttpResponse::Ok)))
        .bind(("127.0.0.1", 8080))?
        .run()
        .await?;
    Ok(())
}

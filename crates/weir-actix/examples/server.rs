//! An actix-web server limited by `examples/limits.toml` (the same file format as
//! weir-tower's), with Prometheus metrics at `/metrics`, and the configuration
//! re-read on `POST /reload` (a server would do it on SIGHUP).
//!
//! ```text
//! cargo run -p weir-actix --features metrics --example server
//! curl -i http://127.0.0.1:8080/                         # RateLimit headers
//! for i in $(seq 8); do curl -s -o /dev/null -w '%{http_code} ' http://127.0.0.1:8080/auth/login; done
//! curl -i -H 'x-api-key: k-123' http://127.0.0.1:8080/api/orders
//! curl http://127.0.0.1:8080/metrics
//! ```

use actix_web::{App, HttpResponse, HttpServer, web};
use metrics_exporter_prometheus::PrometheusBuilder;
use std::path::PathBuf;
use weir_actix::{Config, RateLimit, Reloadable};

#[actix_web::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    // The recorder first: the middleware registers its metrics when it is built.
    let prometheus = PrometheusBuilder::new().install_recorder()?;
    let file = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("examples/limits.toml");
    let limits = Reloadable::from_config(Config::from_file(&file)?)?;
    // Built once, cloned into each worker: one set of limits for the whole server.
    let limit = RateLimit::reloadable(limits.clone());
    let addr = std::env::var("ADDR").unwrap_or_else(|_| "127.0.0.1:8080".into());
    eprintln!("listening on http://{addr}/ (limits: {})", file.display());
    HttpServer::new(move || {
        let (prometheus, limits, file) = (prometheus.clone(), limits.clone(), file.clone());
        App::new()
            .route(
                "/metrics",
                web::get().to(move || {
                    let body = prometheus.render();
                    async move { HttpResponse::Ok().content_type("text/plain; version=0.0.4").body(body) }
                }),
            )
            .route(
                "/reload",
                web::post().to(move || {
                    let answer = match limits.reload_file(&file, |config| config) {
                        Ok(()) => HttpResponse::Ok().body("reloaded\n"),
                        Err(error) => HttpResponse::BadRequest().body(format!("{error}\n")),
                    };
                    async move { answer }
                }),
            )
            .service(
                web::scope("")
                    .wrap(limit.clone())
                    .route("/health", web::get().to(|| async { "ok" }))
                    .route("/auth/login", web::get().to(|| async { "logged in" }))
                    .route("/api/{tail:.*}", web::get().to(|| async { "api" }))
                    .route("/", web::get().to(|| async { "hello" })),
            )
    })
    .bind(addr)?
    .run()
    .await?;
    Ok(())
}

//! What weir-actix adds to an actix-web request, beside actix-governor: see
//! `benches/middleware.rs`. Benchmarks only; never published.

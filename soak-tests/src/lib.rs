//! A soak of weir's whole server path, in `tests/soak.rs`: a real axum server on
//! 127.0.0.1 with a tiered, a per-IP and a per-user limit, and a million requests
//! (60 000 in debug builds) each from a new client. Run it optimized with
//! `cargo test --profile fast -p soak-tests` (CI does).

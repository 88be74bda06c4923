//! `rediss://`: a TLS-only redis-server with a self-signed certificate.
#![cfg(feature = "tls")]

mod support;

use std::time::Duration;
use support::RedisServer;
use weir_redis::{Error, Redis, RedisLimiter, RedisOptions};
use weir_rl_core::Quota;

#[tokio::test]
async fn a_limiter_runs_over_tls() {
    let (server, certificate) = RedisServer::start_tls();
    let url = format!("rediss://127.0.0.1:{}", server.port());
    let redis = Redis::connect_with(
        &url,
        RedisOptions::builder().root_certificate(certificate).call_timeout(Duration::from_secs(10)).build().unwrap(),
    )
    .await
    .unwrap();
    let limiter = RedisLimiter::builder(&redis, Quota::per_minute(2).unwrap()).build().unwrap();
    assert!(limiter.check_n("k", 2).await.unwrap().is_allowed());
    assert!(limiter.check("k").await.unwrap().is_denied());
    // Without trusting the certificate the connection is refused at construction.
    let e = Redis::connect(&url).await.unwrap_err();
    assert!(!matches!(e, Error::Timeout { .. }), "{e:?}");
    // A plain connection to the TLS port gets no Redis answers.
    let plain = format!("redis://127.0.0.1:{}", server.port());
    assert!(Redis::connect_with(&plain, RedisOptions::default()).await.is_err());
}

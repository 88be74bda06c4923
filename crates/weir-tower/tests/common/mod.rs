//! A real axum server on a loopback port, a real HTTP client, and stores on a
//! manual clock.

#![allow(dead_code)]

use axum::Router;
use bytes::Bytes;
use http::{HeaderMap, Request, StatusCode};
use http_body_util::{BodyExt, Empty};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use std::net::SocketAddr;
use std::time::Duration;

/// Serves `app` on 127.0.0.1 (an ephemeral port), with the peer address in
/// `ConnectInfo`.
pub async fn serve(app: Router) -> SocketAddr {
    serve_on("127.0.0.1:0", app).await
}

/// Serves `app` on `bind`.
pub async fn serve_on(bind: &str, app: Router) -> SocketAddr {
    let listener = tokio::net::TcpListener::bind(bind).await.expect("bind a loopback port");
    let addr = listener.local_addr().expect("the bound address");
    tokio::spawn(async move {
        let _ = axum::serve(listener, app.into_make_service_with_connect_info::<SocketAddr>()).await;
    });
    addr
}

/// Serves `app` on 127.0.0.1 with plain `axum::serve(listener, app)`: no
/// `ConnectInfo`, so the layer sees no peer address.
pub async fn serve_without_connect_info(app: Router) -> SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind a loopback port");
    let addr = listener.local_addr().expect("the bound address");
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    addr
}

/// A response, read whole.
#[derive(Debug)]
pub struct Reply {
    pub status: StatusCode,
    pub headers: HeaderMap,
    pub body: Bytes,
}

impl Reply {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|v| v.to_str().ok())
    }

    pub fn json(&self) -> serde_json::Value {
        serde_json::from_slice(&self.body).expect("a JSON body")
    }
}

/// An HTTP/1 client over a connection pool.
#[derive(Clone)]
pub struct HttpClient(Client<HttpConnector, Empty<Bytes>>);

impl HttpClient {
    pub fn new() -> Self {
        Self(Client::builder(TokioExecutor::new()).build_http())
    }

    /// `GET http://addr/path` with `headers`. The 60 s bound is a guard against a
    /// hang, not a timing claim: no test depends on how fast a response comes.
    pub async fn get(&self, addr: SocketAddr, path: &str, headers: &[(&str, &str)]) -> Reply {
        let mut request = Request::get(format!("http://{addr}{path}"));
        for (name, value) in headers {
            request = request.header(*name, *value);
        }
        let request = request.body(Empty::new()).expect("a request");
        let response = tokio::time::timeout(Duration::from_secs(60), self.0.request(request))
            .await
            .expect("a response within 60 s")
            .expect("a response");
        let (parts, body) = response.into_parts();
        let body = body.collect().await.expect("the body").to_bytes();
        Reply { status: parts.status, headers: parts.headers, body }
    }
}

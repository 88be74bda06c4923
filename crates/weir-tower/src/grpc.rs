//! gRPC (the `grpc` feature): refusals a gRPC client understands, tonic's peer
//! address, and the response body that lets the layer sit in tonic's
//! `Server::builder().layer(..)`.
//!
//! Put the layer in tonic's server with [`layer`]:
//! `Server::builder().layer(weir_tower::grpc::layer(limits)).add_service(..)`. It
//! is the same [`RateLimitLayer`](crate::RateLimitLayer), over a
//! [`GrpcBodyLayer`] that makes tonic's response body one the layer's own answers
//! can be written in. Policies, keys and tiers are those of HTTP: a method's path
//! `/package.Service/Method` is a route prefix, `/package.Service/` one for the
//! whole service; [`KeySource::header`](crate::KeySource::header) reads gRPC
//! metadata (`x-api-key`); a per-IP limit reads the peer address tonic's server
//! puts in each request (`TcpConnectInfo`; a TLS connection carries it too).
//!
//! A request is gRPC when its `content-type` is `application/grpc` or starts with
//! `application/grpc+`, `application/grpc;` or `application/grpc-` (gRPC-Web too).
//! The layer answers such a request it refuses with a *trailers-only* gRPC
//! response: HTTP 200, an empty body, the request's own `content-type`, and in its
//! one header block
//!
//! | refusal ([`Rejection`]) | `grpc-status` |
//! | --- | --- |
//! | a limit denied it, or its throttle turned it away | 8 `RESOURCE_EXHAUSTED` |
//! | a store full of other clients' keys (HTTP's 503 "Too Many Clients") | 8 `RESOURCE_EXHAUSTED` |
//! | no key from its limit's source, or a key too long (HTTP's 400) | 16 `UNAUTHENTICATED` |
//! | a per-IP limit and no peer address (the server's setup, HTTP's 400) | 13 `INTERNAL` |
//! | a store or the tier lookup failed (HTTP's 503 "Unavailable") | 14 `UNAVAILABLE` |
//!
//! with a `grpc-message` (percent-encoded, as gRPC requires) that names the
//! policy and quota and says when to retry, and, when the limiter knows when the
//! call would be admitted, that delay twice: as `grpc-retry-pushback-ms` (whole
//! milliseconds, rounded up: gRFC A6, read by gRPC clients' retry policies) and as
//! a `google.rpc.RetryInfo` inside the `google.rpc.Status` of
//! `grpc-status-details-bin` (exact to the nanosecond, encoded by `tonic-types`:
//! read it with `tonic_types::StatusExt::get_details_retry_info`). A denial by a
//! limit also carries the `RateLimit-Policy` and `RateLimit` fields (and the
//! legacy ones, when switched on), as metadata. A missing key is `UNAUTHENTICATED`
//! rather than `INVALID_ARGUMENT`: the call lacks the credential (an API key, a
//! user) that says who it is from. A custom [`deny_body`] applies to HTTP
//! requests only: a gRPC refusal has no body.
//!
//! An admitted call carries the `RateLimit` fields as response headers, which a
//! gRPC client reads as initial metadata. A limit applies when a call starts: a
//! streaming call (client, server or bidirectional) counts once, when its request
//! headers arrive, and its messages are not counted. A throttled call waits before
//! it reaches the service, as an HTTP request does.
//!
//! tonic's own client has no retry policy; gRPC clients that implement gRFC A6
//! (grpc-go, grpc-java, grpc-core with a `retryPolicy` in the service config) wait
//! the pushback before they retry. A tonic client reads the delay from the
//! status's metadata or its details, as `tests/grpc.rs` does.
//!
//! [`deny_body`]: crate::RateLimitLayerBuilder::deny_body
//! [`Rejection`]: crate::Rejection

use crate::response::{Fields, number};
use bytes::Bytes;
use core::pin::Pin;
use core::task::{Context, Poll};
use http::header::{CONTENT_TYPE, HeaderName, HeaderValue};
use http::request::Parts;
use http::{HeaderMap, Response};
use tonic::Code;
use tonic_types::{ErrorDetails, StatusExt as _};
use tower_layer::Layer;
use tower_service::Service;
use weir_http::{GrpcCode, Limits, Refused};

/// `grpc-retry-pushback-ms` (gRFC A6): how long a client's retry policy waits
/// before it retries, in milliseconds.
pub const GRPC_RETRY_PUSHBACK_MS: HeaderName = HeaderName::from_static("grpc-retry-pushback-ms");

const GRPC_STATUS: HeaderName = HeaderName::from_static("grpc-status");

/// The request's `content-type` if it is a gRPC call's: `application/grpc`, or
/// that followed by `+`, `;` or `-`.
pub(crate) fn grpc_content_type(parts: &Parts) -> Option<&HeaderValue> {
    parts.headers.get(CONTENT_TYPE).filter(|value| {
        let value = value.as_bytes();
        value.len() >= 16
            && value[..16].eq_ignore_ascii_case(b"application/grpc")
            && matches!(value.get(16), None | Some(b'+' | b';' | b'-'))
    })
}

/// tonic's code for weir-http's.
fn code(code: GrpcCode) -> Code {
    match code {
        GrpcCode::ResourceExhausted => Code::ResourceExhausted,
        GrpcCode::Unauthenticated => Code::Unauthenticated,
        GrpcCode::Internal => Code::Internal,
        GrpcCode::Unavailable => Code::Unavailable,
        _ => Code::from_i32(code.number()),
    }
}

/// The trailers-only gRPC response refusing a call, of the call's own
/// `content_type` (`application/grpc+proto`, `application/grpc-web`: the client
/// reads the framing it asked for).
pub(crate) fn refusal(limits: &Limits, content_type: HeaderValue, mut refused: Refused<'_>) -> Response<Bytes> {
    let grpc = refused.grpc();
    let fields = refused.take_fields().map(|fields| Fields::new(limits, fields));
    let code = code(grpc.code);
    let pushback = grpc.pushback_ms();
    let status = match grpc.retry_after {
        Some(retry) => {
            tonic::Status::with_error_details(code, grpc.message, ErrorDetails::with_retry_info(Some(retry)))
        }
        None => tonic::Status::new(code, grpc.message),
    };
    let mut map = HeaderMap::with_capacity(6 + fields.as_ref().map_or(0, |f| f.len()));
    map.insert(CONTENT_TYPE, content_type);
    if status.add_header(&mut map).is_err() {
        // Only a header value tonic could not write (it percent-encodes the message
        // and base64-encodes the details, so this is not expected): the code alone
        // still tells the client what happened.
        map.insert(GRPC_STATUS, number(code as i32 as u64));
    }
    if let Some(pushback) = pushback {
        map.insert(GRPC_RETRY_PUSHBACK_MS, number(pushback));
    }
    if let Some(fields) = fields {
        fields.write(&mut map);
    }
    let mut response = Response::new(Bytes::new());
    *response.headers_mut() = map;
    response
}

/// The connection's peer address as tonic's server gives it: `TcpConnectInfo` (a
/// TLS connection carries it too, beside its `TlsConnectInfo`).
pub(crate) fn peer_addr(parts: &Parts) -> Option<std::net::SocketAddr> {
    parts.extensions.get::<tonic::transport::server::TcpConnectInfo>()?.remote_addr()
}

/// The response body of a tonic server under the layer: tonic's own body, or the
/// bytes of a refusal the layer wrote. tonic's `Body` cannot be made from
/// [`Bytes`], which the layer's refusals are made of; [`GrpcBodyLayer`] (or
/// [`layer`]) puts this body in its place.
#[derive(Debug)]
pub struct GrpcBody(Inner);

#[derive(Debug)]
enum Inner {
    Tonic(tonic::body::Body),
    Bytes(Option<Bytes>),
}

impl From<Bytes> for GrpcBody {
    fn from(bytes: Bytes) -> Self {
        Self(Inner::Bytes((!bytes.is_empty()).then_some(bytes)))
    }
}

impl From<tonic::body::Body> for GrpcBody {
    fn from(body: tonic::body::Body) -> Self {
        Self(Inner::Tonic(body))
    }
}

impl http_body::Body for GrpcBody {
    type Data = Bytes;
    type Error = tonic::Status;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<Bytes>, tonic::Status>>> {
        match &mut self.get_mut().0 {
            Inner::Tonic(body) => Pin::new(body).poll_frame(cx),
            Inner::Bytes(bytes) => Poll::Ready(bytes.take().map(|bytes| Ok(http_body::Frame::data(bytes)))),
        }
    }

    fn is_end_stream(&self) -> bool {
        match &self.0 {
            Inner::Tonic(body) => body.is_end_stream(),
            Inner::Bytes(bytes) => bytes.is_none(),
        }
    }

    fn size_hint(&self) -> http_body::SizeHint {
        match &self.0 {
            Inner::Tonic(body) => body.size_hint(),
            Inner::Bytes(bytes) => http_body::SizeHint::with_exact(bytes.as_ref().map_or(0, |b| b.len() as u64)),
        }
    }
}

/// Turns the response body of the service it wraps (tonic's `Routes`) into a
/// [`GrpcBody`], so that a [`RateLimitLayer`](crate::RateLimitLayer) can wrap it.
#[derive(Debug, Clone, Copy, Default)]
pub struct GrpcBodyLayer;

impl<S> Layer<S> for GrpcBodyLayer {
    type Service = GrpcBodyService<S>;

    fn layer(&self, inner: S) -> Self::Service {
        GrpcBodyService { inner }
    }
}

/// The service of [`GrpcBodyLayer`].
#[derive(Debug, Clone)]
pub struct GrpcBodyService<S> {
    inner: S,
}

impl<S, R, B> Service<R> for GrpcBodyService<S>
where
    S: Service<R, Response = Response<B>>,
    B: Into<GrpcBody>,
{
    type Response = Response<GrpcBody>;
    type Error = S::Error;
    type Future = GrpcBodyFuture<S::Future>;

    #[inline]
    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: R) -> Self::Future {
        GrpcBodyFuture { future: self.inner.call(request) }
    }
}

pin_project_lite::pin_project! {
    /// The future of a [`GrpcBodyService`]'s response.
    #[derive(Debug)]
    pub struct GrpcBodyFuture<F> {
        #[pin]
        future: F,
    }
}

impl<F, B, E> Future for GrpcBodyFuture<F>
where
    F: Future<Output = Result<Response<B>, E>>,
    B: Into<GrpcBody>,
{
    type Output = Result<Response<GrpcBody>, E>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        self.project().future.poll(cx).map_ok(|response| response.map(Into::into))
    }
}

/// `limits` for tonic's `Server::builder().layer(..)`: the layer over a
/// [`GrpcBodyLayer`], so that it wraps tonic's routes.
///
/// ```
/// use std::time::Duration;
/// use weir_rl_core::Quota;
/// use weir_keyed::{KeyedConfig, KeyedGcra};
/// use weir_tower::{Key, RateLimitLayer};
///
/// let per_ip: KeyedGcra<Key> = KeyedGcra::gcra(Quota::per_second(10)?, KeyedConfig::builder(10_000).build()?);
/// let server = tonic::transport::Server::builder()
///     .timeout(Duration::from_secs(30))
///     .layer(weir_tower::grpc::layer(RateLimitLayer::per_ip(per_ip)));
/// // .add_service(GreeterServer::new(greeter)).serve(addr).await
/// # let _ = server;
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn layer(limits: crate::RateLimitLayer) -> tower_layer::Stack<GrpcBodyLayer, crate::RateLimitLayer> {
    tower_layer::Stack::new(GrpcBodyLayer, limits)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parts(content_type: &'static str) -> Parts {
        let mut request = http::Request::new(());
        request.headers_mut().insert(CONTENT_TYPE, HeaderValue::from_static(content_type));
        request.into_parts().0
    }

    #[test]
    fn grpc_requests_are_told_by_their_content_type() {
        for grpc in ["application/grpc", "application/grpc+proto", "Application/GRPC;x=1", "application/grpc-web"] {
            assert_eq!(grpc_content_type(&parts(grpc)).unwrap(), grpc);
        }
        for http in ["application/json", "application/grpcx", "application/grp", "text/plain"] {
            assert!(grpc_content_type(&parts(http)).is_none(), "{http}");
        }
        assert!(grpc_content_type(&http::Request::new(()).into_parts().0).is_none());
    }
}

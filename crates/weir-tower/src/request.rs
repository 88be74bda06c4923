//! A request as weir-http reads it: `http` 1's [`Parts`], its peer address from
//! the extensions a server puts there.

use core::any::Any;
use core::ops::ControlFlow;
use http::HeaderMap;
use http::request::Parts;
use std::net::{IpAddr, SocketAddr};
use weir_http::{AsRequest, HeaderLines, PeerAddr, Request, User};

/// The marker under which weir-tower implements weir-http's [`AsRequest`] for
/// `http::request::Parts` and [`HeaderLines`] for `http::HeaderMap`, so that
/// [`KeySource::key`](crate::KeySource::key), [`ClientIp::key`](crate::ClientIp::key)
/// and [`ClientIp::resolve`](crate::ClientIp::resolve) take them as they are.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Http1;

/// [`Parts`] read as a [`Request`]: what the layer checks.
#[derive(Clone, Copy)]
pub(crate) struct View<'a>(pub(crate) &'a Parts);

impl Request for View<'_> {
    #[inline]
    fn method(&self) -> &str {
        self.0.method.as_str()
    }

    #[inline]
    fn path(&self) -> &str {
        self.0.uri.path()
    }

    #[inline]
    fn header(&self, name: &str) -> Option<&[u8]> {
        self.0.headers.get(name).map(|value| value.as_bytes())
    }

    fn header_lines_rev(&self, name: &str, each: &mut dyn FnMut(&[u8]) -> ControlFlow<()>) {
        self.0.headers.lines_rev(name, each)
    }

    #[inline]
    fn peer_ip(&self) -> Option<IpAddr> {
        peer_addr(self.0)
    }

    #[inline]
    fn user(&self) -> Option<User> {
        self.0.extensions.get::<User>().cloned()
    }

    fn native_any(&self) -> Option<&dyn Any> {
        Some(self.0)
    }
}

impl AsRequest<Http1> for Parts {
    #[inline]
    fn as_request(&self) -> impl Request + '_ {
        View(self)
    }
}

impl HeaderLines<Http1> for HeaderMap {
    fn lines_rev(&self, name: &str, each: &mut dyn FnMut(&[u8]) -> ControlFlow<()>) {
        for line in self.get_all(name).iter().rev() {
            if each(line.as_bytes()).is_break() {
                return;
            }
        }
    }
}

/// The peer address in a request's extensions: axum's `ConnectInfo<SocketAddr>`
/// (the `axum` feature), a [`PeerAddr`], tonic's `TcpConnectInfo` (the `grpc`
/// feature), or a [`SocketAddr`].
pub(crate) fn peer_addr(parts: &Parts) -> Option<IpAddr> {
    #[cfg(feature = "axum")]
    if let Some(info) = parts.extensions.get::<axum::extract::ConnectInfo<SocketAddr>>() {
        return Some(info.0.ip());
    }
    if let Some(PeerAddr(addr)) = parts.extensions.get::<PeerAddr>() {
        return Some(addr.ip());
    }
    #[cfg(feature = "grpc")]
    if let Some(addr) = crate::grpc::peer_addr(parts) {
        return Some(addr.ip());
    }
    parts.extensions.get::<SocketAddr>().map(SocketAddr::ip)
}

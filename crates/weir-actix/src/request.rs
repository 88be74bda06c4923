//! A request as weir-http reads it: actix-web's [`ServiceRequest`], its peer address
//! the connection's (`ServiceRequest::peer_addr`).

use actix_web::HttpMessage;
use actix_web::dev::ServiceRequest;
use actix_web::http::header::HeaderMap;
use core::any::Any;
use core::ops::ControlFlow;
use std::net::IpAddr;
use weir_http::{AsRequest, HeaderLines, Request, User};

/// The marker under which weir-actix implements weir-http's [`AsRequest`] for
/// actix-web's [`ServiceRequest`] and [`HeaderLines`] for its `HeaderMap`, so that
/// [`KeySource::key`](crate::KeySource::key), [`ClientIp::key`](crate::ClientIp::key)
/// and [`ClientIp::resolve`](crate::ClientIp::resolve) take them as they are.
///
/// ```
/// use actix_web::test::TestRequest;
/// use weir_actix::{ClientIp, Key};
///
/// let request = TestRequest::get().peer_addr("192.0.2.7:4000".parse()?).to_srv_request();
/// assert_eq!(ClientIp::default().key(&request), Some(Key::ip("192.0.2.7".parse()?)));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Actix;

/// A [`ServiceRequest`] read as a [`Request`]: what the middleware checks.
///
/// The client's address is the connection's peer (`ServiceRequest::peer_addr`),
/// behind the proxies the configuration trusts (weir's rules: the rightmost hop
/// not added by a trusted proxy), never actix-web's `realip_remote_addr`, which
/// believes any `Forwarded` or `X-Forwarded-For` header a client sends.
#[derive(Clone, Copy)]
pub(crate) struct View<'a>(pub(crate) &'a ServiceRequest);

impl Request for View<'_> {
    #[inline]
    fn method(&self) -> &str {
        self.0.method().as_str()
    }

    #[inline]
    fn path(&self) -> &str {
        self.0.path()
    }

    #[inline]
    fn header(&self, name: &str) -> Option<&[u8]> {
        self.0.headers().get(name).map(|value| value.as_bytes())
    }

    fn header_lines_rev(&self, name: &str, each: &mut dyn FnMut(&[u8]) -> ControlFlow<()>) {
        self.0.headers().lines_rev(name, each)
    }

    #[inline]
    fn peer_ip(&self) -> Option<IpAddr> {
        self.0.peer_addr().map(|addr| addr.ip())
    }

    #[inline]
    fn user(&self) -> Option<User> {
        self.0.extensions().get::<User>().cloned()
    }

    fn native_any(&self) -> Option<&dyn Any> {
        Some(self.0)
    }
}

impl AsRequest<Actix> for ServiceRequest {
    #[inline]
    fn as_request(&self) -> impl Request + '_ {
        View(self)
    }
}

impl HeaderLines<Actix> for HeaderMap {
    fn lines_rev(&self, name: &str, each: &mut dyn FnMut(&[u8]) -> ControlFlow<()>) {
        for line in self.get_all(name).rev() {
            if each(line.as_bytes()).is_break() {
                return;
            }
        }
    }
}

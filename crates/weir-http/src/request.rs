//! [`Request`]: what the core reads of a request, whatever the framework.

use crate::key::User;
use core::any::Any;
use core::ops::ControlFlow;
use std::net::IpAddr;

/// A request as the rate limiter reads it: its method, path, headers (as raw
/// bytes), the peer address of its connection, and the user an authentication
/// layer attached. An adapter (weir-tower, weir-actix) implements it over its
/// framework's request; nothing else of the request is read.
///
/// Header names are given in lowercase (`x-api-key`), as both `http` crates and
/// HTTP/2 spell them; an adapter looks them up case-insensitively.
///
/// ```
/// use std::net::IpAddr;
/// use std::ops::ControlFlow;
/// use weir_http::{Request, User};
///
/// /// A request of a framework of your own.
/// struct Mine {
///     path: String,
///     headers: Vec<(String, Vec<u8>)>,
///     peer: IpAddr,
/// }
///
/// impl Request for Mine {
///     fn method(&self) -> &str {
///         "GET"
///     }
///     fn path(&self) -> &str {
///         &self.path
///     }
///     fn header(&self, name: &str) -> Option<&[u8]> {
///         self.headers.iter().find(|(n, _)| n.eq_ignore_ascii_case(name)).map(|(_, v)| &v[..])
///     }
///     fn header_lines_rev(&self, name: &str, each: &mut dyn FnMut(&[u8]) -> ControlFlow<()>) {
///         for (_, value) in self.headers.iter().rev().filter(|(n, _)| n.eq_ignore_ascii_case(name)) {
///             if each(value).is_break() {
///                 return;
///             }
///         }
///     }
///     fn peer_ip(&self) -> Option<IpAddr> {
///         Some(self.peer)
///     }
///     fn user(&self) -> Option<User> {
///         None
///     }
/// }
/// ```
pub trait Request {
    /// The method, as sent (`GET`; methods are case-sensitive).
    fn method(&self) -> &str;

    /// The path, without the query (`/api/orders`).
    fn path(&self) -> &str;

    /// The first line of header `name` (lowercase), as raw bytes.
    fn header(&self, name: &str) -> Option<&[u8]>;

    /// Every line of header `name` (lowercase), from the last to the first, each
    /// passed to `each` until it breaks: a forwarding header is read from the
    /// right (see [`ClientIp::resolve`](crate::ClientIp::resolve)).
    fn header_lines_rev(&self, name: &str, each: &mut dyn FnMut(&[u8]) -> ControlFlow<()>);

    /// The address of the connection's peer, if the server gave one.
    fn peer_ip(&self) -> Option<IpAddr>;

    /// The authenticated user an authentication layer attached, if any.
    fn user(&self) -> Option<User>;

    /// The framework's own request behind this view (tower's `http::request::Parts`,
    /// actix-web's `ServiceRequest`), for a [`KeySource::custom`](crate::KeySource::custom)
    /// closure written against it: see [`native`](trait.Request.html#method.native-1).
    fn native_any(&self) -> Option<&dyn Any> {
        None
    }
}

impl dyn Request + '_ {
    /// The framework's own request, if it is a `T`: `request.native::<http::request::Parts>()`
    /// under weir-tower, `request.native::<actix_web::dev::ServiceRequest>()` under
    /// weir-actix.
    pub fn native<T: Any>(&self) -> Option<&T> {
        self.native_any()?.downcast_ref()
    }
}

impl<R: Request + ?Sized> Request for &R {
    #[inline]
    fn method(&self) -> &str {
        (**self).method()
    }
    #[inline]
    fn path(&self) -> &str {
        (**self).path()
    }
    #[inline]
    fn header(&self, name: &str) -> Option<&[u8]> {
        (**self).header(name)
    }
    #[inline]
    fn header_lines_rev(&self, name: &str, each: &mut dyn FnMut(&[u8]) -> ControlFlow<()>) {
        (**self).header_lines_rev(name, each)
    }
    #[inline]
    fn peer_ip(&self) -> Option<IpAddr> {
        (**self).peer_ip()
    }
    #[inline]
    fn user(&self) -> Option<User> {
        (**self).user()
    }
    #[inline]
    fn native_any(&self) -> Option<&dyn Any> {
        (**self).native_any()
    }
}

/// What can be read as a [`Request`]: every `Request`, and the request types of a
/// framework whose adapter implements this for them under a marker of its own `M`
/// (weir-tower: `http::request::Parts`; weir-actix: `ServiceRequest`), so that
/// [`KeySource::key`](crate::KeySource::key) and
/// [`ClientIp::key`](crate::ClientIp::key) take the framework's request as it is.
pub trait AsRequest<M = ()> {
    /// The view.
    fn as_request(&self) -> impl Request + '_;
}

impl<R: Request + ?Sized> AsRequest<()> for R {
    #[inline]
    fn as_request(&self) -> impl Request + '_ {
        self
    }
}

/// Header lines a [`ClientIp`](crate::ClientIp) reads from the right: a
/// [`Request`]'s, a list of `(name, value)` pairs, or a framework's header map
/// whose adapter implements this under a marker of its own `M` (weir-tower:
/// `http::HeaderMap`).
pub trait HeaderLines<M = ()> {
    /// Every line of header `name` (lowercase), from the last to the first, each
    /// passed to `each` until it breaks.
    fn lines_rev(&self, name: &str, each: &mut dyn FnMut(&[u8]) -> ControlFlow<()>);
}

impl<N: AsRef<str>, V: AsRef<[u8]>> HeaderLines<()> for [(N, V)] {
    fn lines_rev(&self, name: &str, each: &mut dyn FnMut(&[u8]) -> ControlFlow<()>) {
        for (_, value) in self.iter().rev().filter(|(n, _)| n.as_ref().eq_ignore_ascii_case(name)) {
            if each(value.as_ref()).is_break() {
                return;
            }
        }
    }
}

impl<N: AsRef<str>, V: AsRef<[u8]>, const K: usize> HeaderLines<()> for [(N, V); K] {
    fn lines_rev(&self, name: &str, each: &mut dyn FnMut(&[u8]) -> ControlFlow<()>) {
        self[..].lines_rev(name, each)
    }
}

impl<N: AsRef<str>, V: AsRef<[u8]>> HeaderLines<()> for Vec<(N, V)> {
    fn lines_rev(&self, name: &str, each: &mut dyn FnMut(&[u8]) -> ControlFlow<()>) {
        self[..].lines_rev(name, each)
    }
}

/// Whether `name` is a header name as HTTP spells it: one or more token characters
/// (RFC 9110 §5.6.2).
pub(crate) fn is_header_name(name: &str) -> bool {
    !name.is_empty() && name.bytes().all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b))
}

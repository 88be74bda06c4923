//! [`Store`]: the per-key limiter a [`Limit`](crate::Limit) checks, in memory or
//! remote, with the names its quotas carry in the `RateLimit` headers.

use crate::key::Key;
use core::fmt;
use core::future::Future;
use core::pin::Pin;
use core::task::{Context, Poll};
use std::sync::Arc;
use std::time::Duration;
use weir_rl_core::{AsyncKeyedLimiter, Decision, KeyedLimiter, Policy as Quota};

pub(crate) type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// A per-key limiter the middleware checks, and the names of its quotas.
///
/// - **In memory**: any [`KeyedLimiter<Key>`](KeyedLimiter) (a `weir_keyed::Keyed`
///   store, an [`AllOf`](weir_rl_core::AllOf) of them, your own): checked synchronously
///   inside the middleware's `call`, with no future, no boxing and no allocation.
/// - **Remote**: any [`AsyncKeyedLimiter<Key>`](AsyncKeyedLimiter) (a Redis store):
///   each check is one boxed future, awaited before the request goes on.
///
/// Each quota of the store ([`KeyedLimiter::policies`]) has a name, the item name of
/// the `RateLimit-Policy` and `RateLimit` headers: by default its window in words
/// (`second`, `minute`, `hour`, `day`, else `60s`-style), or the names you give
/// with [`named`](Self::named).
#[derive(Clone)]
pub struct Store {
    backend: Backend,
    names: Arc<[Arc<str>]>,
}

#[derive(Clone)]
enum Backend {
    Local(Arc<dyn KeyedLimiter<Key> + Send + Sync>),
    Remote(Arc<dyn ErasedStore>),
}

impl Store {
    /// An in-memory store, checked synchronously.
    pub fn local(store: impl KeyedLimiter<Key> + Send + Sync + 'static) -> Self {
        let names = default_names(store.policies());
        Self { backend: Backend::Local(Arc::new(store)), names }
    }

    /// A store that does I/O, checked by awaiting its futures (one boxed future per
    /// check).
    pub fn remote<S: AsyncKeyedLimiter<Key> + 'static>(store: S) -> Self {
        let names = default_names(store.policies());
        Self { backend: Backend::Remote(Arc::new(store)), names }
    }

    /// Names the store's quotas, in the order of its policies; quotas beyond the
    /// names given keep their default names. A `"` or `\` in a name is escaped in the
    /// headers; characters outside printable ASCII are dropped.
    pub fn named<I, S>(mut self, names: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        let mut all: Vec<Arc<str>> = self.names.to_vec();
        for (slot, name) in all.iter_mut().zip(names) {
            *slot = Arc::from(name.as_ref());
        }
        self.names = all.into();
        self
    }

    /// The quotas this store enforces, one per [`Decision::policy_index`].
    pub fn policies(&self) -> &[Quota] {
        match &self.backend {
            Backend::Local(store) => store.policies(),
            Backend::Remote(store) => store.policies(),
        }
    }

    /// The quotas' names, one per policy.
    pub fn names(&self) -> &[Arc<str>] {
        &self.names
    }

    /// Whether checks complete without waiting.
    pub fn is_local(&self) -> bool {
        matches!(self.backend, Backend::Local(_))
    }

    /// The in-memory store, checked without a future.
    pub(crate) fn as_local(&self) -> Option<&(dyn KeyedLimiter<Key> + Send + Sync)> {
        match &self.backend {
            Backend::Local(store) => Some(&**store),
            Backend::Remote(_) => None,
        }
    }

    /// A check of cost `n` for `key` by a remote store, as a future that owns what it
    /// needs (the store and a copy of the key): one that can finish on a task of its
    /// own when the request that sent it is dropped (see `Ledger`). `None` for an
    /// in-memory store, checked without a future.
    pub(crate) fn check_owned(&self, key: &Key, n: u64) -> Option<BoxFuture<'static, Result<Decision, StoreError>>> {
        match &self.backend {
            Backend::Local(_) => None,
            Backend::Remote(store) => Some(Arc::clone(store).check_owned(key.clone(), n)),
        }
    }

    /// Gives back what `admission` took.
    pub(crate) fn refund<'a>(&'a self, key: &'a Key, n: u64, admission: &'a Decision) -> StoreFuture<'a, ()> {
        match &self.backend {
            Backend::Local(store) => StoreFuture::ready(store.refund(key, n, admission).map_err(StoreError::new)),
            Backend::Remote(store) => StoreFuture(Inner::Boxed(store.refund(key, n, admission))),
        }
    }
}

impl fmt::Debug for Store {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Store")
            .field("local", &self.is_local())
            .field("policies", &self.policies())
            .field("names", &self.names)
            .finish()
    }
}

/// The default name of a quota: its window in words.
pub(crate) fn window_name(window: Duration) -> String {
    match window.as_secs() {
        1 if window.subsec_nanos() == 0 => "second".into(),
        60 if window.subsec_nanos() == 0 => "minute".into(),
        3_600 if window.subsec_nanos() == 0 => "hour".into(),
        86_400 if window.subsec_nanos() == 0 => "day".into(),
        _ if window.subsec_nanos() == 0 => format!("{}s", window.as_secs()),
        _ => format!("{}ms", window.as_millis().max(1)),
    }
}

fn default_names(policies: &[Quota]) -> Arc<[Arc<str>]> {
    policies.iter().map(|p| Arc::from(window_name(p.window()))).collect()
}

/// A store's failure (a lost connection, a request above what can ever be
/// admitted): the request is answered `503 Service Unavailable`.
#[derive(Clone)]
pub struct StoreError(Arc<dyn ErrorObject>);

trait ErrorObject: fmt::Debug + fmt::Display + Send + Sync {}
impl<E: fmt::Debug + fmt::Display + Send + Sync> ErrorObject for E {}

impl StoreError {
    /// Wraps a store's error.
    pub fn new(error: impl fmt::Debug + fmt::Display + Send + Sync + 'static) -> Self {
        Self(Arc::new(error))
    }
}

impl fmt::Debug for StoreError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&*self.0, f)
    }
}

impl fmt::Display for StoreError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&*self.0, f)
    }
}

impl std::error::Error for StoreError {}

/// A store operation: ready at once for an in-memory store, boxed for a remote one.
pub(crate) struct StoreFuture<'a, T>(Inner<'a, T>);

enum Inner<'a, T> {
    Ready(Option<Result<T, StoreError>>),
    Boxed(BoxFuture<'a, Result<T, StoreError>>),
}

impl<T> StoreFuture<'_, T> {
    fn ready(result: Result<T, StoreError>) -> Self {
        Self(Inner::Ready(Some(result)))
    }
}

impl<T: Unpin> Future for StoreFuture<'_, T> {
    type Output = Result<T, StoreError>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        match &mut self.get_mut().0 {
            Inner::Ready(result) => match result.take() {
                Some(result) => Poll::Ready(result),
                None => Poll::Ready(Err(StoreError::new("a store future was polled after it completed"))),
            },
            Inner::Boxed(future) => future.as_mut().poll(cx),
        }
    }
}

/// [`AsyncKeyedLimiter`] with its futures boxed: what lets stores of different
/// types (and with unnameable future types) sit behind one [`Store`].
trait ErasedStore: Send + Sync {
    fn refund<'a>(&'a self, key: &'a Key, n: u64, admission: &'a Decision) -> BoxFuture<'a, Result<(), StoreError>>;
    fn check_owned(self: Arc<Self>, key: Key, n: u64) -> BoxFuture<'static, Result<Decision, StoreError>>;
    fn policies(&self) -> &[Quota];
}

impl<S: AsyncKeyedLimiter<Key> + 'static> ErasedStore for S {
    fn refund<'a>(&'a self, key: &'a Key, n: u64, admission: &'a Decision) -> BoxFuture<'a, Result<(), StoreError>> {
        Box::pin(async move { AsyncKeyedLimiter::refund(self, key, n, admission).await.map_err(StoreError::new) })
    }

    fn check_owned(self: Arc<Self>, key: Key, n: u64) -> BoxFuture<'static, Result<Decision, StoreError>> {
        Box::pin(async move { AsyncKeyedLimiter::check_n(&*self, &key, n).await.map_err(StoreError::new) })
    }

    fn policies(&self) -> &[Quota] {
        AsyncKeyedLimiter::policies(self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn windows_are_named_in_words() {
        assert_eq!(window_name(Duration::from_secs(1)), "second");
        assert_eq!(window_name(Duration::from_secs(60)), "minute");
        assert_eq!(window_name(Duration::from_secs(3600)), "hour");
        assert_eq!(window_name(Duration::from_secs(86_400)), "day");
        assert_eq!(window_name(Duration::from_secs(20)), "20s");
        assert_eq!(window_name(Duration::from_millis(1500)), "1500ms");
        assert_eq!(window_name(Duration::from_nanos(1)), "1ms");
    }
}

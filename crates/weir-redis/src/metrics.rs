//! A limiter's metric handles. With the `metrics` feature they are registered once,
//! when the limiter is built, with the recorder installed then, and kept (a check
//! increments handles, never builds a key); without it, [`Metrics`] is empty and
//! every method does nothing.

use crate::Path;

/// The paths of `weir_redis_decisions_total`, in the order of [`path_index`].
#[cfg(feature = "metrics")]
const PATHS: [&str; 5] = ["redis", "fail_open", "fail_closed", "local_fallback", "lease"];

#[cfg(feature = "metrics")]
fn path_index(path: Path) -> usize {
    match path {
        Path::Redis => 0,
        Path::FailOpen => 1,
        Path::FailClosed => 2,
        Path::LocalFallback => 3,
    }
}

/// Where a [`Leased`](crate::Leased) decision came from.
pub(crate) const LEASE: usize = 4;

/// The handles of one limiter (cheap to clone: one `Arc`).
#[derive(Debug, Clone, Default)]
pub(crate) struct Metrics {
    #[cfg(feature = "metrics")]
    inner: Option<std::sync::Arc<Handles>>,
}

#[cfg(feature = "metrics")]
#[derive(Debug)]
struct Handles {
    /// `weir_redis_decisions_total{limiter, path, outcome}`: per path, allowed then denied.
    decisions: [[metrics::Counter; 2]; 5],
    /// `weir_redis_call_duration_seconds{limiter}`.
    call_seconds: metrics::Histogram,
    /// `weir_redis_timeouts_total{limiter}`.
    timeouts: metrics::Counter,
    /// `weir_redis_script_reloads_total{limiter}`.
    reloads: metrics::Counter,
    /// `weir_redis_lease_round_trips_saved_total{limiter}`.
    saved: metrics::Counter,
}

impl Metrics {
    /// The handles of limiter `name`, registered with the recorder installed now.
    pub(crate) fn register(name: &str) -> Self {
        #[cfg(feature = "metrics")]
        {
            let limiter = metrics::SharedString::from(name.to_owned());
            let decision = |path: &'static str, outcome: &'static str| {
                metrics::counter!("weir_redis_decisions_total", "limiter" => limiter.clone(), "path" => path,
                    "outcome" => outcome)
            };
            let handles = Handles {
                decisions: PATHS.map(|path| [decision(path, "allowed"), decision(path, "denied")]),
                call_seconds: metrics::histogram!("weir_redis_call_duration_seconds", "limiter" => limiter.clone()),
                timeouts: metrics::counter!("weir_redis_timeouts_total", "limiter" => limiter.clone()),
                reloads: metrics::counter!("weir_redis_script_reloads_total", "limiter" => limiter.clone()),
                saved: metrics::counter!("weir_redis_lease_round_trips_saved_total", "limiter" => limiter),
            };
            Self { inner: Some(std::sync::Arc::new(handles)) }
        }
        #[cfg(not(feature = "metrics"))]
        {
            let _ = name;
            Self {}
        }
    }

    /// A decision made by `path` (a [`Path`] index, or [`LEASE`]).
    #[inline]
    pub(crate) fn decided(&self, path: usize, allowed: bool) {
        #[cfg(feature = "metrics")]
        if let Some(h) = &self.inner
            && let Some(counters) = h.decisions.get(path)
        {
            counters[usize::from(!allowed)].increment(1);
        }
        let _ = (path, allowed);
    }

    /// A decision made by `path`.
    #[inline]
    pub(crate) fn decided_by(&self, path: Path, allowed: bool) {
        #[cfg(feature = "metrics")]
        self.decided(path_index(path), allowed);
        let _ = (path, allowed);
    }

    /// A decision served from a lease, with no round trip.
    #[inline]
    pub(crate) fn saved_round_trip(&self) {
        #[cfg(feature = "metrics")]
        if let Some(h) = &self.inner {
            h.saved.increment(1);
        }
    }

    /// A call that took `seconds` and ended in `result`.
    #[inline]
    pub(crate) fn called<T>(&self, seconds: f64, result: &Result<T, crate::Error>) {
        #[cfg(feature = "metrics")]
        if let Some(h) = &self.inner {
            h.call_seconds.record(seconds);
            if matches!(result, Err(crate::Error::Timeout { .. })) {
                h.timeouts.increment(1);
            }
        }
        let _ = (seconds, result);
    }

    /// The counter of script reloads (`SCRIPT LOAD` after a `NOSCRIPT`), if any.
    #[cfg(feature = "metrics")]
    pub(crate) fn reloads(&self) -> Option<&metrics::Counter> {
        self.inner.as_ref().map(|h| &h.reloads)
    }

    /// Whether any handle records (the feature is on): calls are timed only then.
    #[inline]
    pub(crate) fn is_on(&self) -> bool {
        #[cfg(feature = "metrics")]
        return self.inner.is_some();
        #[cfg(not(feature = "metrics"))]
        false
    }
}

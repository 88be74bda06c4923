//! The seam between the service and the counters: [`Decide`] takes every counted
//! descriptor of one request and decides them all or nothing.

use crate::matching::{CounterKey, LimitSource};
use crate::rule::RateLimit;
use core::fmt;
use core::future::Future;
use weir_rl_core::{Decision, Quota};

/// One counter to check, and charge, for one descriptor of a request.
#[derive(Debug, Clone, Copy)]
pub struct Check<'a> {
    /// The descriptor's index in the request.
    pub descriptor: usize,
    /// The request's domain.
    pub domain: &'a str,
    /// The rule, or the descriptor's `limit` override.
    pub source: LimitSource<'a>,
    /// The limit (its window and algorithm).
    pub limit: RateLimit,
    /// The limit's quota (a limit of 0 never reaches a [`Decide`]: the service
    /// refuses what it costs itself).
    pub quota: Quota,
    /// The counter, within the rule (or within the domain's overrides of this limit).
    pub key: &'a CounterKey,
    /// What to charge; 0: check without charging.
    pub cost: u64,
    /// The rule is in shadow mode: its denial refuses nothing.
    pub shadow: bool,
}

/// Decides the counted descriptors of one request, all or nothing.
///
/// `decide` answers one [`Decision`] per check, in the order given, such that:
///
/// - a check is denied when its counter cannot take its cost now (asking for more
///   than the quota's burst is denied too);
/// - if any check that is not `shadow` is denied, **no** check is charged: what
///   the others were charged is given back before `decide` returns;
/// - otherwise every admitted check is charged its cost, the denied shadow checks
///   nothing;
/// - a check of cost 0 is decided (and reported) without charging.
///
/// Its errors are the store's (Redis unreachable, a store that refuses new keys),
/// answered as a gRPC status with the error's message.
///
/// ```
/// use std::sync::Mutex;
/// use std::collections::HashMap;
/// use weir_rls::{Check, Decide, DecideError};
/// use weir_rl_core::{Decision, Snapshot};
///
/// /// Counts forever (no windows): enough to show the contract.
/// #[derive(Default)]
/// struct Totals(Mutex<HashMap<Vec<u8>, u64>>);
///
/// impl Decide for Totals {
///     async fn decide(&self, checks: &[Check<'_>]) -> Result<Vec<Decision>, DecideError> {
///         let mut totals = self.0.lock().map_err(|_| DecideError::internal("poisoned"))?;
///         let decisions: Vec<Decision> = checks.iter().map(|c| {
///             let used = totals.get(c.key.as_bytes()).copied().unwrap_or(0);
///             let limit = u64::from(c.limit.requests_per_unit());
///             let after = used + c.cost;
///             let snapshot = Snapshot::new(limit, limit.saturating_sub(after.min(limit)), 0);
///             if after > limit { Decision::denied(snapshot, 0) } else { Decision::allowed(snapshot) }
///         }).collect();
///         let refused = checks.iter().zip(&decisions).any(|(c, d)| d.is_denied() && !c.shadow);
///         if !refused {
///             for (c, d) in checks.iter().zip(&decisions) {
///                 if d.is_allowed() {
///                     *totals.entry(c.key.as_bytes().to_vec()).or_default() += c.cost;
///                 }
///             }
///         }
///         Ok(decisions)
///     }
/// }
/// ```
pub trait Decide: Send + Sync {
    /// Decides `checks` together (see the trait's docs).
    fn decide<'a>(
        &'a self,
        checks: &'a [Check<'a>],
    ) -> impl Future<Output = Result<Vec<Decision>, DecideError>> + Send + 'a;
}

impl<D: Decide + ?Sized> Decide for std::sync::Arc<D> {
    fn decide<'a>(
        &'a self,
        checks: &'a [Check<'a>],
    ) -> impl Future<Output = Result<Vec<Decision>, DecideError>> + Send + 'a {
        (**self).decide(checks)
    }
}

/// Why a [`Decide`] could not decide.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DecideError {
    kind: DecideErrorKind,
    message: String,
}

/// What kind of failure a [`DecideError`] is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum DecideErrorKind {
    /// The store cannot be reached or cannot answer now (`UNAVAILABLE`).
    Unavailable,
    /// The store has no room for another counter (`RESOURCE_EXHAUSTED`): a
    /// capacity refusal, not the client's rate.
    Exhausted,
    /// Anything else (`INTERNAL`).
    Internal,
}

impl DecideError {
    /// The store cannot answer now.
    pub fn unavailable(message: impl Into<String>) -> Self {
        Self { kind: DecideErrorKind::Unavailable, message: message.into() }
    }

    /// The store has no room for another counter.
    pub fn exhausted(message: impl Into<String>) -> Self {
        Self { kind: DecideErrorKind::Exhausted, message: message.into() }
    }

    /// Any other failure.
    pub fn internal(message: impl Into<String>) -> Self {
        Self { kind: DecideErrorKind::Internal, message: message.into() }
    }

    /// The kind.
    pub fn kind(&self) -> DecideErrorKind {
        self.kind
    }

    /// The message.
    pub fn message(&self) -> &str {
        &self.message
    }

    /// The gRPC status code it is answered with.
    pub fn code(&self) -> tonic::Code {
        match self.kind {
            DecideErrorKind::Unavailable => tonic::Code::Unavailable,
            DecideErrorKind::Exhausted => tonic::Code::ResourceExhausted,
            DecideErrorKind::Internal => tonic::Code::Internal,
        }
    }
}

impl fmt::Display for DecideError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for DecideError {}

//! All or nothing: a set of limits, each a store, a key and a cost, checked
//! together so that a request refused by one consumes nothing from the others.
//!
//! [`check_all`] is the entry point for callers that are not HTTP middleware (an
//! Envoy rate-limit service, a job queue, a gRPC method of your own): they name the
//! keys themselves. [`Ledger`] is what it and the HTTP path
//! ([`Limits::check`](crate::Limits::check)) share: the admissions a request holds
//! while it is being decided, given back when it is refused or dropped.

use crate::key::Key;
use crate::store::{BoxFuture, Store, StoreError};
use core::fmt;
use core::future::poll_fn;
use core::task::Poll;
use std::time::Duration;
use weir_rl_core::{Decision, DenyReason};

/// One limit of an all-or-nothing check ([`check_all`]): `cost` charged to `key` in
/// `store`.
///
/// - A cost of **0** checks without charging: the limit's state is read (its
///   decision says how much is left), nothing is taken, and it never refuses.
/// - A **shadow** limit is decided and charged like any other, and its refusal is
///   reported (and logged: a `tracing` event at `info`, target `weir_http`), but it
///   never refuses the request: what a limit about to be enforced would do, seen
///   before it does it.
#[derive(Debug, Clone, Copy)]
pub struct Charge<'a> {
    store: &'a Store,
    key: &'a Key,
    cost: u64,
    shadow: bool,
}

impl<'a> Charge<'a> {
    /// `cost` charged to `key` in `store` (0: checked without charging).
    pub fn new(store: &'a Store, key: &'a Key, cost: u64) -> Self {
        Self { store, key, cost, shadow: false }
    }

    /// The same charge, in shadow mode or not: decided and charged, never refusing.
    pub fn shadow(self, shadow: bool) -> Self {
        Self { shadow, ..self }
    }

    /// The store.
    pub fn store(&self) -> &'a Store {
        self.store
    }

    /// The key.
    pub fn key(&self) -> &'a Key {
        self.key
    }

    /// The cost.
    pub fn cost(&self) -> u64 {
        self.cost
    }

    /// Whether the limit is in shadow mode.
    pub fn is_shadow(&self) -> bool {
        self.shadow
    }
}

/// What [`check_all`] decided: each limit's [`Decision`], and the verdict.
#[derive(Debug, Clone)]
#[must_use = "the outcome says whether the request goes on"]
pub struct Checked {
    decisions: Vec<Option<Decision>>,
    outcome: Outcome,
}

impl Checked {
    /// The verdict.
    pub fn outcome(&self) -> &Outcome {
        &self.outcome
    }

    /// Whether every limit that is not in shadow mode admitted the request (each
    /// admission is then charged for good).
    pub fn is_admitted(&self) -> bool {
        matches!(self.outcome, Outcome::Admitted)
    }

    /// Each limit's decision, in the order the charges were given: `None` for a
    /// limit not decided (its store failed, its cost is above its quota, or the
    /// check stopped at an earlier limit's failure). An admission of a request
    /// refused was given back.
    pub fn decisions(&self) -> &[Option<Decision>] {
        &self.decisions
    }

    /// The decision of the `i`-th limit (see [`decisions`](Self::decisions)).
    pub fn decision(&self, i: usize) -> Option<&Decision> {
        self.decisions.get(i)?.as_ref()
    }

    /// The decisions and the verdict.
    pub fn into_parts(self) -> (Vec<Option<Decision>>, Outcome) {
        (self.decisions, self.outcome)
    }
}

/// The verdict of an all-or-nothing check. Only a limit not in shadow mode refuses.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub enum Outcome {
    /// Every limit admitted the request (or is in shadow mode): each admission is
    /// charged.
    Admitted,
    /// A limit refused: nothing is charged. Of the refusing limits, `limit` is the
    /// one with the longest wait, `retry_after` (its decision says whether it is the
    /// key's rate, [`DenyReason::RateLimited`], or a store full of other keys,
    /// [`DenyReason::KeyCapacity`]).
    Refused {
        /// The refusing limit with the longest wait.
        limit: usize,
        /// Its wait: when the request may be admitted.
        retry_after: Duration,
    },
    /// A limit's cost is above what its store admits at once: the request can never
    /// be admitted. Nothing is charged.
    AboveQuota {
        /// The limit.
        limit: usize,
        /// Its cost.
        cost: u64,
        /// The most its store admits at once (the smallest of its quotas' limits).
        most: u64,
    },
    /// A limit's store failed, or decided by its fail policy while its backend is
    /// unreachable (then `retry_after` is the store's: until it is tried again):
    /// nothing is charged.
    Unavailable {
        /// The limit.
        limit: usize,
        /// What failed.
        error: StoreError,
        /// When the store will be tried again, if it said.
        retry_after: Option<Duration>,
    },
}

/// Checks every limit of `charges`, all or nothing, and says what each decided.
///
/// ```text
/// pub async fn check_all(charges: &[Charge<'_>]) -> Checked
/// ```
///
/// - **In order.** Each limit is checked in the order given, its store's
///   check charging `cost` to `key` (an in-memory store at once, a remote one with a
///   round trip). Every limit is decided, also after a refusal, so that each has
///   its [`Decision`] (limit, remaining, reset, retry-after).
/// - **All or nothing.** If a limit that is not in shadow mode refuses, every
///   admission made for the request is given back before `check_all` returns
///   ([`Outcome::Refused`]); otherwise every admission stays charged
///   ([`Outcome::Admitted`]). The one transient: a concurrent check of the same key
///   while an admission is held for a request about to be refused may be refused
///   too; nothing is ever over-admitted.
/// - **The longest wait.** Of the refusing limits, the one with the longest wait is
///   reported: a request retried after a shorter one would be refused again.
/// - **A cost of 0** reads the limit without charging it (it never refuses).
/// - **Shadow limits** ([`Charge::shadow`]) are decided and charged, and never
///   refuse: a shadow refusal is reported in its decision and logged (`info`,
///   target `weir_http`), a shadow store's failure logged (`warn`) and its decision
///   `None`.
/// - **Failures.** A store that fails, or decides by its fail policy (a remote
///   store whose backend is down), makes the request
///   [`Outcome::Unavailable`]; a cost above what a store ever admits at once,
///   [`Outcome::AboveQuota`]. Either stops the check there, and gives back what was
///   charged. (After a refusal, a failure changes nothing: the refusal stands.)
/// - **Cancellation-safe.** The future may be dropped at any await (the caller
///   went away). Whatever it charged is then given back: in-memory admissions at
///   once, in the drop; remote ones, and a remote check in flight (awaited to its
///   answer, then given back if it admitted), by a task spawned on the current
///   tokio runtime (with no runtime, they stay spent, and a warning is logged).
///
/// The HTTP path ([`Limits::check`](crate::Limits::check)) decides a policy's limits
/// with the same code, and the same rules, except that it stops at the first
/// refusal and asks the later limits only for their waits (an in-memory store's
/// without charging; a remote store not at all), so that a refused request costs no
/// round trip.
///
/// ```
/// use std::time::Duration;
/// use weir_http::{Charge, Key, Outcome, Store, check_all};
/// use weir_keyed::{KeyedConfig, KeyedFixedWindow};
/// use weir_rl_core::Quota;
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let store = |quota| -> Result<Store, Box<dyn std::error::Error>> {
///     Ok(Store::local(KeyedFixedWindow::<Key>::fixed_window(quota, KeyedConfig::builder(10_000).build()?)?))
/// };
/// // Per tenant: 3 uploads a minute, 1 000 an hour; a per-path limit in shadow mode.
/// let (per_minute, per_hour, per_path) =
///     (store(Quota::per_minute(3)?)?, store(Quota::per_hour(1_000)?)?, store(Quota::per_minute(1)?)?);
/// let (tenant, path) = (Key::custom(b"tenant-7"), Key::custom(b"tenant-7/uploads"));
/// let charges = [
///     Charge::new(&per_minute, &tenant, 1),
///     Charge::new(&per_hour, &tenant, 1),
///     Charge::new(&per_path, &path, 1).shadow(true),
/// ];
/// for _ in 0..3 {
///     let checked = check_all(&charges).await;
///     assert!(checked.is_admitted()); // the shadow limit refuses the 2nd and 3rd: logged, never enforced
/// }
/// let checked = check_all(&charges).await;
/// let Outcome::Refused { limit, retry_after } = *checked.outcome() else { panic!() };
/// assert_eq!(limit, 0); // the per-minute quota
/// assert!(retry_after <= Duration::from_secs(60));
/// assert_eq!(checked.decision(1).map(|d| d.remaining()), Some(996)); // decided, then given back
/// // Nothing was charged: the hourly quota still has 997 left.
/// let read = check_all(&[Charge::new(&per_hour, &tenant, 0)]).await;
/// assert_eq!(read.decision(0).map(|d| d.remaining()), Some(997));
/// # Ok(())
/// # }
/// ```
pub async fn check_all(charges: &[Charge<'_>]) -> Checked {
    let mut ledger = Ledger::new(charges, vec![None; charges.len()]);
    let mut decisions: Vec<Option<Decision>> = vec![None; charges.len()];
    let mut refused: Option<(usize, Duration)> = None;
    for (i, charge) in charges.iter().enumerate() {
        let most = charge.store.policies().iter().map(|q| q.limit()).min().unwrap_or(u64::MAX);
        if charge.cost > most {
            if charge.shadow || refused.is_some() {
                tracing::info!(
                    target: "weir_http", limit = i, key = %charge.key, cost = charge.cost, most,
                    "shadow: would have refused: the cost is above what the store admits at once"
                );
                continue;
            }
            ledger.give_back().await;
            return Checked { decisions, outcome: Outcome::AboveQuota { limit: i, cost: charge.cost, most } };
        }
        let step = Step::of(ledger.check(i).await);
        match step {
            Step::Admitted(decision) => decisions[i] = Some(decision),
            Step::Denied(decision) | Step::Outage(decision) if charge.shadow => {
                tracing::info!(
                    target: "weir_http", limit = i, key = %charge.key, cause = %Cause(&decision),
                    retry_after_ms = wait_of(&decision).as_millis() as u64, "shadow: would have refused"
                );
                decisions[i] = Some(decision);
            }
            Step::Denied(decision) => {
                let wait = wait_of(&decision);
                if refused.is_none_or(|(_, longest)| wait > longest) {
                    refused = Some((i, wait));
                }
                decisions[i] = Some(decision);
            }
            Step::Outage(decision) if refused.is_none() => {
                decisions[i] = Some(decision);
                ledger.give_back().await;
                let error = StoreError::new(OUTAGE);
                let outcome = Outcome::Unavailable { limit: i, error, retry_after: decision.retry_after() };
                return Checked { decisions, outcome };
            }
            Step::Outage(decision) => decisions[i] = Some(decision),
            Step::Failed(error) if charge.shadow || refused.is_some() => {
                tracing::warn!(target: "weir_http", limit = i, key = %charge.key, %error, "a store failed");
            }
            Step::Failed(error) => {
                ledger.give_back().await;
                return Checked { decisions, outcome: Outcome::Unavailable { limit: i, error, retry_after: None } };
            }
        }
    }
    match refused {
        Some((limit, retry_after)) => {
            ledger.give_back().await;
            Checked { decisions, outcome: Outcome::Refused { limit, retry_after } }
        }
        None => {
            ledger.keep();
            Checked { decisions, outcome: Outcome::Admitted }
        }
    }
}

/// What the error of an outage (a denial by a store's fail policy) says.
pub(crate) const OUTAGE: &str = "the store decided by its fail policy: its backend is unavailable";

/// A denial's wait.
fn wait_of(decision: &Decision) -> Duration {
    decision.retry_after().unwrap_or(Duration::ZERO)
}

/// A refusal's cause, in words, for an event.
struct Cause<'a>(&'a Decision);

impl fmt::Display for Cause<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (self.0.deny_reason(), is_outage(self.0)) {
            (_, true) => f.write_str("the store is unavailable"),
            (Some(DenyReason::KeyCapacity), _) => f.write_str("the store is full of other keys"),
            _ => f.write_str("rate limited"),
        }
    }
}

/// What a store's check of one limit came to.
#[derive(Debug)]
pub(crate) enum Step {
    /// Admitted (charged, unless its cost was 0).
    Admitted(Decision),
    /// Refused by the key's own state, or by a store full of other keys
    /// ([`DenyReason::KeyCapacity`]).
    Denied(Decision),
    /// Refused by the store's fail policy (see [`is_outage`]): the store's outage.
    Outage(Decision),
    /// The store failed.
    Failed(StoreError),
}

impl Step {
    #[inline]
    pub(crate) fn of(result: Result<Decision, StoreError>) -> Self {
        match result {
            Ok(decision) if decision.is_allowed() => Self::Admitted(decision),
            Ok(decision) if is_outage(&decision) => Self::Outage(decision),
            Ok(decision) => Self::Denied(decision),
            Err(error) => Self::Failed(error),
        }
    }
}

/// Whether `decision` was made from the key's own state, not by a store's fallback
/// ([`Decision::is_from_fallback`]: a remote store's fail policy while its backend
/// is down, a full store's overflow limiter): only such a decision describes the
/// client's quota in the `RateLimit` fields.
#[inline]
pub(crate) fn is_own(decision: &Decision) -> bool {
    !decision.is_from_fallback()
}

/// Whether `decision` is a denial made by a store's fallback (see [`is_own`]), not
/// a full store's refusal of a new key (whose overflow limiter denies for
/// [`DenyReason::KeyCapacity`]): the store's outage, answered 503 Unavailable.
#[inline]
pub(crate) fn is_outage(decision: &Decision) -> bool {
    decision.is_denied() && decision.is_from_fallback() && decision.deny_reason() != Some(DenyReason::KeyCapacity)
}

/// What a [`Ledger`] reads of the limits it checks: each one's store, key and cost.
pub(crate) trait Charges {
    /// Limit `i`'s store, key and cost; `None` if it has none (skipped).
    fn charge(&self, i: usize) -> Option<(&Store, &Key, u64)>;

    /// What events name the limits by (a policy's name).
    fn name(&self) -> &str {
        ""
    }
}

impl Charges for &[Charge<'_>] {
    #[inline]
    fn charge(&self, i: usize) -> Option<(&Store, &Key, u64)> {
        self.get(i).map(|c| (c.store, c.key, c.cost))
    }
}

/// A remote check sent and not yet answered.
struct InFlight {
    limit: usize,
    check: BoxFuture<'static, Result<Decision, StoreError>>,
}

/// The admissions a request holds while it is decided, one slot per limit, and how
/// they are given back: [`refund_now`](Self::refund_now) (in-memory stores, at
/// once), [`give_back`](Self::give_back) (every one, awaiting remote stores), or on
/// drop, if the request's future is dropped before it is decided (its client went
/// away): the in-memory ones at once, the remote ones (and a remote check in flight,
/// awaited to its answer) by a task spawned on the current tokio runtime.
/// [`keep`](Self::keep) makes them final.
pub(crate) struct Ledger<C: Charges, A: AsMut<[Option<Decision>]>> {
    pub(crate) charges: C,
    admitted: A,
    in_flight: Option<InFlight>,
}

impl<C: Charges, A: AsMut<[Option<Decision>]>> Ledger<C, A> {
    /// A ledger of `charges` holding nothing yet (`admitted`: a slot per limit, all
    /// `None`).
    #[inline]
    pub(crate) fn new(charges: C, admitted: A) -> Self {
        Self { charges, admitted, in_flight: None }
    }

    /// Checks limit `i`, and holds its admission: an in-memory store's at once
    /// (`None` for a remote store, or a limit with no charge).
    #[inline]
    pub(crate) fn check_now(&mut self, i: usize) -> Option<Result<Decision, StoreError>> {
        let (store, key, n) = self.charges.charge(i)?;
        let result = store.as_local()?.check_n(key, n).map_err(StoreError::new);
        if let Ok(decision) = &result
            && decision.is_allowed()
            && n > 0
            && let Some(slot) = self.admitted.as_mut().get_mut(i)
        {
            *slot = Some(*decision);
        }
        Some(result)
    }

    /// Checks limit `i` (awaiting a remote store), and holds its admission.
    pub(crate) async fn check(&mut self, i: usize) -> Result<Decision, StoreError> {
        if let Some(result) = self.check_now(i) {
            return result;
        }
        let Some((store, key, n)) = self.charges.charge(i) else {
            return Err(StoreError::new("no store to check"));
        };
        let Some(check) = store.check_owned(key, n) else { return Err(StoreError::new("no store to check")) };
        // Kept here while it is awaited, so that a drop meanwhile hands it to a task
        // that gives back what it admits.
        self.in_flight = Some(InFlight { limit: i, check });
        let in_flight = &mut self.in_flight;
        let result = poll_fn(|cx| match in_flight {
            Some(f) => f.check.as_mut().poll(cx),
            None => Poll::Ready(Err(StoreError::new("a check was polled after it completed"))),
        })
        .await;
        self.in_flight = None;
        if let Ok(decision) = &result
            && decision.is_allowed()
            && n > 0
            && let Some(slot) = self.admitted.as_mut().get_mut(i)
        {
            *slot = Some(*decision);
        }
        result
    }

    /// Gives back the admissions in-memory stores made (and forgets them).
    pub(crate) fn refund_now(&mut self) {
        for (i, slot) in self.admitted.as_mut().iter_mut().enumerate() {
            let Some(admission) = &*slot else { continue };
            let Some((store, key, n)) = self.charges.charge(i) else { continue };
            let Some(local) = store.as_local() else { continue };
            if let Err(error) = local.refund(key, n, admission) {
                tracing::warn!(target: "weir_http", policy = self.charges.name(), key = %key, %error, "refund failed");
            }
            *slot = None;
        }
    }

    /// Gives back every admission: the in-memory ones at once, then the remote ones,
    /// each forgotten before it is awaited (so that a drop meanwhile gives nothing
    /// back twice; the drop hands the rest to a task).
    pub(crate) async fn give_back(&mut self) {
        self.refund_now();
        for i in 0..self.admitted.as_mut().len() {
            let Some(admission) = self.admitted.as_mut().get_mut(i).and_then(Option::take) else { continue };
            let Some((store, key, n)) = self.charges.charge(i) else { continue };
            if let Err(error) = store.refund(key, n, &admission).await {
                tracing::warn!(target: "weir_http", policy = self.charges.name(), key = %key, %error, "refund failed");
            }
        }
    }

    /// The admissions are final: the request is admitted.
    #[inline]
    pub(crate) fn keep(&mut self) {
        for slot in self.admitted.as_mut() {
            *slot = None;
        }
    }

    /// Hands the remote admissions held, and a remote check in flight, to a task
    /// that gives them back.
    fn spawn_give_back(&mut self) {
        let mut owned: Vec<(Store, Key, u64, Decision)> = Vec::new();
        for (i, slot) in self.admitted.as_mut().iter_mut().enumerate() {
            let Some(admission) = slot.take() else { continue };
            let Some((store, key, n)) = self.charges.charge(i) else { continue };
            owned.push((store.clone(), key.clone(), n, admission));
        }
        let in_flight = self.in_flight.take().and_then(|f| {
            let (store, key, n) = self.charges.charge(f.limit)?;
            Some((store.clone(), key.clone(), n, f.check))
        });
        if owned.is_empty() && in_flight.is_none() {
            return;
        }
        let policy = self.charges.name().to_owned();
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            tracing::warn!(
                target: "weir_http", policy, admissions = owned.len() + usize::from(in_flight.is_some()),
                "a request dropped while it was decided holds remote admissions, and no tokio runtime is \
                 running to give them back: they stay spent"
            );
            return;
        };
        runtime.spawn(async move {
            if let Some((store, key, n, check)) = in_flight
                && let Ok(admission) = check.await
                && admission.is_allowed()
                && n > 0
            {
                owned.push((store, key, n, admission));
            }
            for (store, key, n, admission) in owned {
                if let Err(error) = store.refund(&key, n, &admission).await {
                    tracing::warn!(target: "weir_http", policy, key = %key, %error, "refund failed");
                }
            }
        });
    }
}

impl<C: Charges, A: AsMut<[Option<Decision>]>> Drop for Ledger<C, A> {
    fn drop(&mut self) {
        self.refund_now();
        self.spawn_give_back();
    }
}

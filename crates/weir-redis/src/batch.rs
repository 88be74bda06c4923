//! Batches: checks of several limiters and keys, decided together in one round
//! trip, all or nothing.
//!
//! A request that is counted against several limits (an Envoy rate-limit
//! request with three descriptors; a per-client, per-route and per-tenant limit
//! of one API call) needs every one of them decided, and charged only if all of
//! them admit it. Checked one by one that is a round trip per limit, plus one
//! per refund when a later limit refuses. A batch is one script, run atomically
//! by Redis:
//!
//! 1. every item is read and decided, in order, by the same Lua as its own
//!    limiter's script (any algorithm: GCRA tiers, windows, logs, side by side);
//! 2. if every item that is not in shadow mode fits, every item that fits is
//!    written; otherwise nothing is.
//!
//! ```no_run
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! use weir_rl_core::Quota;
//! use weir_redis::{Backend, BatchItem, Redis, RedisLimiter};
//!
//! let redis = Redis::connect("redis://127.0.0.1:6379").await?;
//! let per_client = RedisLimiter::builder(&redis, Quota::per_minute(100)?).prefix("rl:client:").build()?;
//! let per_tenant = RedisLimiter::builder(&redis, Quota::per_hour(100_000)?)
//!     .backend(Backend::FixedWindow)
//!     .prefix("rl:tenant:")
//!     .build()?;
//! let checked = RedisLimiter::check_batch(&[
//!     BatchItem::new(&per_client, "client-7", 1),
//!     BatchItem::new(&per_tenant, "acme", 1),
//! ])
//! .await?;
//! if !checked.is_admitted() {
//!     // Refused by one of them: neither was charged. Each item says why.
//!     for item in checked.items() {
//!         println!("{:?} after {:?}", item.decision.is_allowed(), item.decision.retry_after());
//!     }
//! }
//! # Ok(()) }
//! ```
//!
//! # What each item is answered
//!
//! Each item gets the [`Decision`] its own [`check_n`](RedisLimiter::check_n)
//! would have given at that point of the batch: allowed with what is left after
//! it (whether or not the batch as a whole was admitted, as an all-or-nothing
//! check that charges and then gives back reports it), or denied with its own
//! `retry_after`. An item whose Redis key an earlier item of the batch also
//! charges (one client counted twice against one limit) is decided on the state
//! that earlier item leaves, exactly as two calls one after the other would be.
//! A cost of 0 reads the limit (never refusing, never written); an item in shadow
//! mode ([`BatchItem::shadow`]) is decided and charged like any other, but its
//! denial refuses nothing.
//!
//! [`preview_batch`](RedisLimiter::preview_batch) decides the same way and writes
//! nothing, whatever the decisions: what the batch would be answered now.
//!
//! # One connection, one time
//!
//! A batch is one script on one connection: every item's limiter must be built
//! from clones of one [`Redis`](crate::Redis) ([`Error::Batch`] with
//! [`BatchMismatch::Connection`] otherwise). It is decided at one time: Redis's
//! `TIME`, read once by the script, or, for limiters built with
//! [`build_with_clock`](crate::RedisLimiterBuilder::build_with_clock), the first
//! item's clock, read once (client clocks are taken to agree: they are Unix
//! time). Items on Redis's time and items on a client clock cannot share a batch
//! ([`BatchMismatch::TimeSource`]). Each item's keys keep its own limiter's
//! [`Expiry`](crate::Expiry).
//!
//! # Redis Cluster
//!
//! A script may only touch keys of one hash slot, and the items of a batch are
//! usually in different ones (each client key is its own hash tag, so that
//! clients spread over the cluster). On a cluster
//! ([`Redis::connect_cluster`](crate::Redis::connect_cluster)) the items are
//! grouped by slot, one script per slot, all sent at once (one round trip of
//! latency; as many scripts as slots). Each group is atomic and all or nothing on
//! its own. Across groups the batch stays all or nothing by giving back: when
//! any group refuses, the items the other groups admitted are refunded (a refund
//! per admitted item, one after another, on refusals only) before the batch
//! returns. So a cluster never over-admits,
//! but in the moment between a group's admission and its refund, a concurrent
//! check of one of its keys may be refused by capacity the refused batch held
//! (the transient of any all-or-nothing check made of separate steps). On one
//! server there is no such moment: one script decides the whole batch.
//!
//! # Cancellation
//!
//! A batch dropped at any await (its caller gone) takes no capacity that no
//! answer reported: a script still in flight is handed, with what it needs, to a
//! task on the current tokio runtime, which waits for its reply (bounded by the
//! call timeout) and refunds what it admitted; so are the admissions of a cluster
//! batch being given back. Without a tokio runtime they stay spent.
//!
//! A script whose reply comes after the call timeout (a slow Redis, not a down
//! one) may still run: whatever it admitted stays spent, unreported, until it
//! expires (the GCRA time it charged passes, or its window ends). That is
//! capacity lost, never capacity added, and single checks share it: Redis offers
//! no way to withdraw a script it has been sent. Refunds follow
//! [`RedisLimiter::refund`]'s rule (GCRA credits less the time since the
//! admission), so a refund never gives back capacity a later admission took.
//!
//! # Costs
//!
//! One `EVALSHA` whose arguments are every item's (a few numbers and its keys),
//! whatever the number of items; in Redis, the reads of every item, and the
//! writes of every item when admitted (a refused batch writes nothing). The
//! script builds no table per item unless a key appears twice.

use crate::connection::Slot;
use crate::fail::{CallPermit, Checked, LocalHeld, Path};
use crate::{Error, RedisLimiter, Resilient, scripts};
use core::fmt;
use core::future::{Future, poll_fn};
use core::pin::Pin;
use core::task::Poll;
use redis::ScriptInvocation;
use weir_rl_core::__private::sync::{AtomicUsize, Ordering};
use weir_rl_core::{Clock, Decision};

/// One check of a batch: `n` for `key` by `limiter` (a [`RedisLimiter`], or a
/// [`Resilient`] for [`Resilient::check_batch`]).
///
/// - `n` = 0 reads the limit: decided, never charged, never refusing.
/// - [`shadow`](Self::shadow): decided, and charged when it fits and the batch is
///   admitted, but its denial refuses nothing (a limit about to be enforced,
///   watched first).
///
/// ```
/// # fn demo(limiter: &weir_redis::RedisLimiter) {
/// use weir_redis::BatchItem;
///
/// let item = BatchItem::new(limiter, "client-7", 2).shadow(true);
/// assert_eq!((item.key(), item.n(), item.is_shadow()), (&b"client-7"[..], 2, true));
/// # }
/// ```
pub struct BatchItem<'a, L = RedisLimiter> {
    limiter: &'a L,
    key: &'a [u8],
    n: u64,
    shadow: bool,
}

impl<L> Clone for BatchItem<'_, L> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<L> Copy for BatchItem<'_, L> {}

impl<L> fmt::Debug for BatchItem<'_, L> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Never the key: it may be a client's secret (an API key).
        f.debug_struct("BatchItem")
            .field("key_bytes", &self.key.len())
            .field("n", &self.n)
            .field("shadow", &self.shadow)
            .finish_non_exhaustive()
    }
}

impl<'a, L> BatchItem<'a, L> {
    /// `n` for `key` by `limiter`.
    pub fn new(limiter: &'a L, key: &'a (impl AsRef<[u8]> + ?Sized), n: u64) -> Self {
        Self { limiter, key: key.as_ref(), n, shadow: false }
    }

    /// The same check, in shadow mode or not (see the type's docs).
    pub fn shadow(self, shadow: bool) -> Self {
        Self { shadow, ..self }
    }

    /// The limiter.
    pub fn limiter(&self) -> &'a L {
        self.limiter
    }

    /// The client key.
    pub fn key(&self) -> &'a [u8] {
        self.key
    }

    /// The cost.
    pub fn n(&self) -> u64 {
        self.n
    }

    /// Whether its denial refuses nothing.
    pub fn is_shadow(&self) -> bool {
        self.shadow
    }

    /// The same check by another limiter (a [`Resilient`]'s own).
    pub(crate) fn on<M>(&self, limiter: &'a M) -> BatchItem<'a, M> {
        BatchItem { limiter, key: self.key, n: self.n, shadow: self.shadow }
    }

    /// Whether this item's decision refuses the batch: it costs something, is
    /// not in shadow mode, and was denied.
    pub(crate) fn refuses(&self, decision: &Decision) -> bool {
        self.n > 0 && !self.shadow && decision.is_denied()
    }
}

/// What a batch decided: each item's decision and who made it, in the order of
/// the items, and the verdict.
#[derive(Debug, Clone, PartialEq, Eq)]
#[must_use = "the verdict says whether the batch was charged"]
pub struct BatchChecked {
    items: Vec<Checked>,
    admitted: bool,
}

impl BatchChecked {
    pub(crate) fn new(items: Vec<Checked>, admitted: bool) -> Self {
        Self { items, admitted }
    }

    /// Whether every item not in shadow mode admitted its cost: then a
    /// [`check_batch`](RedisLimiter::check_batch) charged every item that fit,
    /// and otherwise none. (A [`preview_batch`](RedisLimiter::preview_batch)
    /// charges nothing either way.) An empty batch is admitted.
    pub fn is_admitted(&self) -> bool {
        self.admitted
    }

    /// Each item's decision, and the path that made it ([`Path::Redis`], or a
    /// [`Resilient`]'s fail policy).
    pub fn items(&self) -> &[Checked] {
        &self.items
    }

    /// The decision of item `i`.
    pub fn decision(&self, i: usize) -> Option<&Decision> {
        self.items.get(i).map(|checked| &checked.decision)
    }

    /// The items' decisions and paths.
    pub fn into_items(self) -> Vec<Checked> {
        self.items
    }
}

/// Why an item cannot be decided in one script with the first item of its
/// batch ([`Error::Batch`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum BatchMismatch {
    /// Its limiter was built on another connection (a [`Redis`](crate::Redis) not
    /// cloned from the first item's): a batch is one script on one connection.
    Connection,
    /// One of the two decides at Redis's `TIME`, the other at a client clock
    /// ([`build_with_clock`](crate::RedisLimiterBuilder::build_with_clock)): a
    /// batch is decided at one time.
    TimeSource,
}

impl RedisLimiter {
    /// Checks every item of `items` in one round trip, all or nothing (see the
    /// [module docs](crate::batch)): a script reads and decides each item in
    /// order, then writes them all if every item not in shadow mode fits, and
    /// nothing otherwise. Each item is answered what its own
    /// [`check_n`](Self::check_n) would have said at its place in the batch.
    ///
    /// Before anything is sent, the first item (in order) that cannot be sent is
    /// the error: its own [`Error::InsufficientCapacity`] (`n` above its
    /// limiter's [`capacity`](Self::capacity)) or [`Error::KeyTooLong`], or
    /// [`Error::Batch`] for a limiter on another connection or time source.
    /// A key of another Redis type or an unreadable state in any item fails the
    /// whole batch ([`Error::WrongType`], [`Error::CorruptState`]), writing
    /// nothing. Redis unreachable: [`Error::Timeout`] or [`Error::Unavailable`]
    /// ([`Resilient::check_batch`] decides by its
    /// fail policy instead).
    ///
    /// Metrics: each item of `n` > 0 counts as a decision of its own limiter
    /// (`path="redis"`); the round trip is timed once, under the first item's
    /// limiter.
    pub async fn check_batch(items: &[BatchItem<'_>]) -> Result<BatchChecked, Error> {
        Plan::new(items)?.run(true).await
    }

    /// Decides `items` as [`check_batch`](Self::check_batch) would, and writes
    /// nothing: what the batch would be answered now (each item allowed with what
    /// would be left after it, or denied), without charging any of it. One round
    /// trip; not counted in the decision metrics.
    pub async fn preview_batch(items: &[BatchItem<'_>]) -> Result<BatchChecked, Error> {
        Plan::new(items)?.run(false).await
    }
}

impl<C: Clock> Resilient<C> {
    /// Checks every item of `items` in one round trip, all or nothing, as
    /// [`RedisLimiter::check_batch`] does, and decides by each limiter's
    /// [`FailPolicy`](crate::FailPolicy) what Redis does not:
    ///
    /// - an item whose limiter is leaving Redis alone (an outage's back-off) is
    ///   decided by its policy, without a call;
    /// - the others are sent to Redis in one batch; when it does not answer
    ///   ([`Error::is_unavailable`]) they are decided by their policies too, and
    ///   their limiters leave Redis alone for a back-off (one of them probes it
    ///   after, as [`check_traced`](Self::check_traced) does);
    /// - when an item decided by its policy refuses the batch (fail closed, or
    ///   the local fallback's denial), the items for Redis are only read
    ///   ([`RedisLimiter::preview_batch`]): nothing is charged in Redis.
    ///
    /// A refused batch keeps nothing anywhere: what a local fallback admitted for
    /// it is given back (weir-gcra's rule: less the time since), and Redis wrote
    /// nothing, or gave back what it admitted (a cluster's groups). So does a
    /// batch dropped at its await. One exception: a batch whose script timed out
    /// (Redis slow, not down) is decided by the fail policies, and the script may
    /// still run when Redis catches up; what it admits then stays spent until it
    /// expires (see the module's "Cancellation": capacity lost, never added). Errors are those a retry would not fix, as for
    /// [`RedisLimiter::check_batch`] (checked before anything is taken); an
    /// unavailable Redis is never an error here.
    ///
    /// Each item's [`Checked::path`] says who decided it.
    pub async fn check_batch(items: &[BatchItem<'_, Resilient<C>>]) -> Result<BatchChecked, Error> {
        // Every item is checked before anything is taken, in the order
        // `RedisLimiter::check_batch` checks them (the first error wins, named by
        // its place in `items`), whichever items go on to Redis.
        if let Some(first) = items.first().map(|item| item.limiter.limiter()) {
            for (i, item) in items.iter().enumerate() {
                let limiter = item.limiter.limiter();
                if !limiter.redis().is_same(first.redis()) {
                    return Err(Error::Batch { item: i, mismatch: BatchMismatch::Connection });
                }
                if limiter.uses_server_time() != first.uses_server_time() {
                    return Err(Error::Batch { item: i, mismatch: BatchMismatch::TimeSource });
                }
                limiter.too_many(item.n)?;
                limiter.key_name(item.key)?;
            }
        }
        // One route per limiter (an item repeating an earlier item's limiter
        // takes its route): `Some` holds the leave to call Redis, a probe's
        // flag included, released however this future ends.
        let mut permits: Vec<Option<CallPermit<'_>>> = Vec::with_capacity(items.len());
        let mut remote = Vec::with_capacity(items.len());
        for (i, item) in items.iter().enumerate() {
            let earlier = items[..i].iter().position(|other| core::ptr::eq(other.limiter, item.limiter));
            let to_redis = match earlier {
                Some(j) => remote.contains(&j),
                None => {
                    let permit = item.limiter.may_call();
                    let to_redis = permit.is_some();
                    permits.push(permit);
                    to_redis
                }
            };
            if to_redis {
                remote.push(i);
            }
        }
        let mut decided: Vec<Option<Checked>> = vec![None; items.len()];
        let mut local = Taken { items, held: Vec::new() };
        let mut refused = false;
        for i in 0..items.len() {
            if !remote.contains(&i) {
                refused |= local.decide(i, &mut decided)?;
            }
        }
        if !remote.is_empty() {
            let batch: Vec<BatchItem<'_>> = remote.iter().map(|&i| items[i].on(items[i].limiter.limiter())).collect();
            let commit = !refused;
            let reply = if commit {
                RedisLimiter::check_batch(&batch).await
            } else {
                RedisLimiter::preview_batch(&batch).await
            };
            match reply {
                Ok(checked) => {
                    refused |= !checked.is_admitted();
                    for (&i, item) in remote.iter().zip(checked.into_items()) {
                        items[i].limiter.succeeded();
                        if !commit && items[i].n > 0 {
                            // Counted as `check_batch` counts its items.
                            items[i].limiter.limiter().metrics.decided_by(Path::Redis, item.decision.is_allowed());
                        }
                        decided[i] = Some(item);
                    }
                }
                Err(e) if e.is_unavailable() => {
                    for &i in &remote {
                        items[i].limiter.failed();
                    }
                    for &i in &remote {
                        refused |= local.decide(i, &mut decided)?;
                    }
                }
                Err(e) => return Err(e),
            }
        }
        drop(permits);
        if !refused {
            local.held.clear();
        }
        let checked: Option<Vec<Checked>> = decided.into_iter().collect();
        let checked = checked.ok_or_else(|| Error::reply("a batch left an item undecided"))?;
        Ok(BatchChecked::new(checked, !refused))
    }
}

/// A [`Resilient`] batch's decisions by the fail policies, and what the local
/// fallbacks took for it: given back when dropped (the batch refused, failed
/// or dropped) unless cleared (the batch admitted).
struct Taken<'i, 'a, C: Clock> {
    items: &'i [BatchItem<'a, Resilient<C>>],
    /// The item, and what its limiter's fallback took.
    held: Vec<(usize, LocalHeld)>,
}

impl<C: Clock> Taken<'_, '_, C> {
    /// Decides item `i` by its limiter's policy into `decided`: whether it
    /// refuses the batch.
    fn decide(&mut self, i: usize, decided: &mut [Option<Checked>]) -> Result<bool, Error> {
        let item = &self.items[i];
        let (checked, held) = item.limiter.decide_locally_held(item.key, item.n)?;
        if let Some(held) = held {
            self.held.push((i, held));
        }
        let checked = item.limiter.counted(Ok(checked), item.n)?;
        decided[i] = Some(checked);
        Ok(item.refuses(&checked.decision))
    }
}

impl<C: Clock> Drop for Taken<'_, '_, C> {
    fn drop(&mut self) {
        for (i, held) in self.held.drain(..) {
            self.items[i].limiter.give_back_locally(&held);
        }
    }
}

/// A script call in flight: a future that owns what it needs.
type Call = Pin<Box<dyn Future<Output = Result<Vec<u64>, Error>> + Send>>;

/// A batch checked, named and grouped: what is sent.
pub(crate) struct Plan<'i, 'a> {
    items: &'i [BatchItem<'a>],
    /// Each item's Redis keys.
    keys: Vec<Vec<String>>,
    /// `ARGV[1]`: empty for Redis's `TIME`, else the client time (µs).
    now: String,
    /// The items of each script: one group on one server, one per hash slot on
    /// a cluster, in the order of their first item.
    groups: Vec<Vec<usize>>,
}

impl<'i, 'a> Plan<'i, 'a> {
    /// The plan of `items`, or the first item's error that keeps the batch from
    /// being sent (see [`RedisLimiter::check_batch`]).
    pub(crate) fn new(items: &'i [BatchItem<'a>]) -> Result<Self, Error> {
        let mut keys = Vec::with_capacity(items.len());
        let Some(first) = items.first().map(|item| item.limiter) else {
            return Ok(Self { items, keys, now: String::new(), groups: Vec::new() });
        };
        let redis = first.redis();
        for (i, item) in items.iter().enumerate() {
            let limiter = item.limiter;
            if !limiter.redis().is_same(redis) {
                return Err(Error::Batch { item: i, mismatch: BatchMismatch::Connection });
            }
            if limiter.uses_server_time() != first.uses_server_time() {
                return Err(Error::Batch { item: i, mismatch: BatchMismatch::TimeSource });
            }
            limiter.too_many(item.n)?;
            keys.push(limiter.keys_of(item.key)?);
        }
        let now = first.client_time_us().map_or_else(String::new, |us| us.to_string());
        let mut groups: Vec<(Option<Slot>, Vec<usize>)> = Vec::new();
        for (i, item_keys) in keys.iter().enumerate() {
            // A limiter's keys share the client's hash tag: one slot per item.
            let slot = item_keys.first().and_then(|key| redis.slot_of(key));
            match groups.iter_mut().find(|(s, _)| *s == slot) {
                Some((_, group)) => group.push(i),
                None => groups.push((slot, vec![i])),
            }
        }
        Ok(Self { items, keys, now, groups: groups.into_iter().map(|(_, group)| group).collect() })
    }

    /// Whether a Redis key appears in more than one item of `group`.
    fn repeats(&self, group: &[usize]) -> bool {
        let mut seen: Vec<&str> = Vec::new();
        for &i in group {
            for key in &self.keys[i] {
                if seen.contains(&key.as_str()) {
                    return true;
                }
                seen.push(key);
            }
        }
        false
    }

    /// The script call of `group` (see `scripts::BATCH`).
    fn invocation(&self, group: &[usize], commit: bool) -> ScriptInvocation<'static> {
        let mut invocation = scripts::BATCH.prepare_invoke();
        invocation.arg(&self.now).arg(if commit { "1" } else { "0" }).arg(if self.repeats(group) { "1" } else { "0" });
        for &i in group {
            let item = &self.items[i];
            item.limiter.batch_record(&mut invocation, &self.keys[i], item.n, item.shadow);
        }
        invocation
    }

    /// Sends the batch (`commit`: to be written if it fits; else a preview) and
    /// reads its answers.
    pub(crate) async fn run(self, commit: bool) -> Result<BatchChecked, Error> {
        let Some(first) = self.items.first().map(|item| item.limiter) else {
            return Ok(BatchChecked::new(Vec::new(), true));
        };
        let mut flight = Flight {
            items: self.items,
            groups: &self.groups,
            calls: Vec::with_capacity(self.groups.len()),
            decisions: vec![None; self.items.len()],
            held: Vec::new(),
            commit,
        };
        for group in &self.groups {
            let call = first.redis().invoke_owned(self.invocation(group, commit), first.metrics.clone());
            flight.calls.push(Some(call));
        }
        // Every group's script at once: on a cluster, one round trip of latency
        // for all of them. A reply is read into `flight` as soon as it is in, so
        // that a drop after it gives back what it admitted.
        let mut outcomes: Vec<Option<Result<bool, Error>>> = (0..self.groups.len()).map(|_| None).collect();
        poll_fn(|cx| {
            let mut waiting = false;
            for (g, outcome) in outcomes.iter_mut().enumerate() {
                let Some(call) = flight.calls[g].as_mut() else { continue };
                match call.as_mut().poll(cx) {
                    Poll::Ready(reply) => {
                        flight.calls[g] = None;
                        *outcome = Some(reply.and_then(|reply| flight.settle(&self.groups[g], &reply)));
                    }
                    Poll::Pending => waiting = true,
                }
            }
            if waiting { Poll::Pending } else { Poll::Ready(()) }
        })
        .await;
        let mut admitted = true;
        let mut failed = None;
        for outcome in outcomes {
            match outcome {
                Some(Ok(group_admitted)) => admitted &= group_admitted,
                Some(Err(e)) => {
                    failed.get_or_insert(e);
                }
                None => {
                    failed.get_or_insert_with(|| Error::reply("a batch's script was not answered"));
                }
            }
        }
        if let Some(error) = failed {
            flight.give_back().await;
            return Err(error);
        }
        let mut checked = Vec::with_capacity(self.items.len());
        for (item, decision) in self.items.iter().zip(&flight.decisions) {
            let Some(decision) = *decision else {
                flight.give_back().await;
                return Err(Error::reply("a batch's reply left an item undecided"));
            };
            checked.push(Checked { decision, path: Path::Redis });
            if commit && item.n > 0 {
                item.limiter.metrics.decided_by(Path::Redis, decision.is_allowed());
            }
        }
        if !commit {
            admitted = self.items.iter().zip(&checked).all(|(item, c)| !item.refuses(&c.decision));
        } else if !admitted {
            // A group refused (a cluster's other groups may have admitted).
            flight.give_back().await;
        }
        flight.held.clear();
        Ok(BatchChecked::new(checked, admitted))
    }
}

/// An item's index in its batch, its decision, and whether Redis charged it.
type ItemDecision = (usize, Decision, bool);

/// The items' decisions from the reply of the script of `group`: whether it
/// was admitted (written), and for each item its index, its decision, and
/// whether it was charged (it fit, its cost above 0, the script admitted).
fn read_reply<'l>(
    reply: &[u64],
    group: &[usize],
    item: impl Fn(usize) -> (&'l RedisLimiter, u64),
) -> Result<(bool, Vec<ItemDecision>), Error> {
    let bad = || Error::reply(format_args!("batch script replied {reply:?}"));
    let [admitted, now, rest @ ..] = reply else { return Err(bad()) };
    let mut decided = Vec::with_capacity(group.len());
    let mut at = 0;
    for &i in group {
        let (limiter, n) = item(i);
        let fields = rest.get(at..at + 1 + limiter.reply_fields()).ok_or_else(bad)?;
        let fits = fields[0] == 1;
        let decision = limiter.decision_from(n, fits, *now, &fields[1..])?;
        decided.push((i, decision, *admitted == 1 && fits && n > 0));
        at += fields.len();
    }
    if at != rest.len() {
        return Err(bad());
    }
    Ok((*admitted == 1, decided))
}

/// A batch being decided: its scripts in flight, the decisions read so far, and
/// the admissions made in Redis that are not final yet. Dropped with a script
/// in flight or admissions held, it hands them to a task that gives back what
/// they admitted.
struct Flight<'i, 'a> {
    items: &'i [BatchItem<'a>],
    /// The items of each group (see [`Plan`]).
    groups: &'i [Vec<usize>],
    /// Each group's script while it is in flight.
    calls: Vec<Option<Call>>,
    decisions: Vec<Option<Decision>>,
    /// Items charged in Redis, given back unless the batch is admitted.
    held: Vec<usize>,
    /// A check (written when it fits), not a preview.
    commit: bool,
}

impl Flight<'_, '_> {
    /// Reads a group's reply: each item's decision, and what it charged.
    fn settle(&mut self, group: &[usize], reply: &[u64]) -> Result<bool, Error> {
        let items = self.items;
        let (admitted, decided) = read_reply(reply, group, |i| (items[i].limiter, items[i].n))?;
        for (i, decision, charged) in decided {
            self.decisions[i] = Some(decision);
            if charged && self.commit {
                self.held.push(i);
            }
        }
        Ok(admitted)
    }

    /// Refunds the admissions held, each forgotten before its refund is awaited
    /// (so that a drop meanwhile gives nothing back twice; a refund dropped in
    /// flight is applied whole or not at all, and at worst leaves its units
    /// spent). A refund that fails leaves its units spent: less admitted, never
    /// more.
    async fn give_back(&mut self) {
        while let Some(i) = self.held.pop() {
            let (item, Some(decision)) = (&self.items[i], self.decisions[i]) else { continue };
            let _ = item.limiter.refund(item.key, item.n, &decision).await;
        }
    }
}

impl Drop for Flight<'_, '_> {
    fn drop(&mut self) {
        if !self.commit {
            return;
        }
        let in_flight: Vec<(usize, Call)> =
            self.calls.iter_mut().enumerate().filter_map(|(g, call)| Some((g, call.take()?))).collect();
        if in_flight.is_empty() && self.held.is_empty() {
            return;
        }
        let Ok(runtime) = tokio::runtime::Handle::try_current() else { return };
        // Owned copies of what the task needs (only a dropped batch pays for them).
        let owned: Vec<(RedisLimiter, Vec<u8>, u64)> =
            self.items.iter().map(|item| (item.limiter.clone(), item.key.to_vec(), item.n)).collect();
        let in_flight: Vec<(Vec<usize>, Call)> =
            in_flight.into_iter().map(|(g, call)| (self.groups[g].clone(), call)).collect();
        let mut refunds: Vec<(usize, Decision)> =
            self.held.drain(..).filter_map(|i| Some((i, self.decisions[i]?))).collect();
        // Ordering: Relaxed; a count read by tests alone, with the `Notify`
        // (which orders its own wake-ups) telling them when it may have fallen.
        GIVING_BACK.fetch_add(1, Ordering::Relaxed);
        // Moved into the task: counted out when it ends, or when it is dropped
        // unpolled (a runtime shutting down).
        let ended = GivingBack;
        runtime.spawn(async move {
            let _ended = ended;
            for (group, call) in in_flight {
                // Bounded: the call has the connection's call timeout.
                let Ok(reply) = call.await else { continue };
                let Ok((_, decided)) = read_reply(&reply, &group, |i| (&owned[i].0, owned[i].2)) else { continue };
                refunds.extend(decided.into_iter().filter(|(_, _, charged)| *charged).map(|(i, d, _)| (i, d)));
            }
            for (i, decision) in refunds {
                let (limiter, key, n) = &owned[i];
                let _ = limiter.refund(key, *n, &decision).await;
            }
        });
    }
}

/// Give-back tasks of dropped batches that have not ended (see
/// `__private::batch_give_backs_settled`).
static GIVING_BACK: AtomicUsize = AtomicUsize::new(0);
/// Woken when a give-back task ends.
static GIVEN_BACK: tokio::sync::Notify = tokio::sync::Notify::const_new();

/// Held by a give-back task: counts it out however it ends.
struct GivingBack;

impl Drop for GivingBack {
    fn drop(&mut self) {
        // Ordering: Relaxed; see where it is counted in.
        GIVING_BACK.fetch_sub(1, Ordering::Relaxed);
        GIVEN_BACK.notify_waiters();
    }
}

/// Waits until every give-back task of a dropped batch has ended, at most
/// `limit` (see `__private::batch_give_backs_settled`).
pub(crate) async fn give_backs_settled(limit: core::time::Duration) {
    let _ = tokio::time::timeout(limit, async {
        loop {
            let ended = GIVEN_BACK.notified();
            // Ordering: Relaxed; a task that ends after this read wakes `ended`.
            if GIVING_BACK.load(Ordering::Relaxed) == 0 {
                return;
            }
            ended.await;
        }
    })
    .await;
}

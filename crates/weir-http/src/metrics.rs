//! The layer's metric handles (the `metrics` feature): registered once, when a
//! layer (its policies) or [`Tiers`](crate::Tiers) are built, with the recorder
//! installed then, and kept; a request increments handles, never builds a key.

use metrics::{Counter, Histogram, SharedString, counter, histogram};

/// The name of the decision counter.
pub(crate) const DECISIONS: &str = "weir_tower_decisions_total";

fn label(s: &str) -> SharedString {
    SharedString::from(s.to_owned())
}

/// `weir_tower_decisions_total{policy, limit, tier, quota, outcome}`.
pub(crate) fn decisions(policy: &str, limit: &str, tier: &str, quota: &str, outcome: &'static str) -> Counter {
    counter!(DECISIONS, "policy" => label(policy), "limit" => label(limit), "tier" => label(tier),
        "quota" => label(quota), "outcome" => outcome)
}

/// The decisions one quota (of one limit, in one tier) makes.
#[derive(Debug)]
pub(crate) struct QuotaMetrics {
    pub(crate) allowed: Counter,
    pub(crate) denied: Counter,
    pub(crate) key_capacity: Counter,
    /// `outcome="shadow_denied"`: a refusal by a limit in shadow mode (the request
    /// went on).
    pub(crate) shadow_denied: Counter,
}

impl QuotaMetrics {
    pub(crate) fn register(policy: &str, limit: &str, tier: &str, quota: &str) -> Self {
        Self {
            allowed: decisions(policy, limit, tier, quota, "allowed"),
            denied: decisions(policy, limit, tier, quota, "denied"),
            key_capacity: decisions(policy, limit, tier, quota, "key_capacity"),
            shadow_denied: decisions(policy, limit, tier, quota, "shadow_denied"),
        }
    }
}

/// What one limit of a policy answers beside its quotas' decisions.
#[derive(Debug)]
pub(crate) struct LimitMetrics {
    /// `outcome="unidentified"`: no key for this limit.
    pub(crate) unidentified: Counter,
    /// `outcome="unavailable"`: its store or tier lookup failed.
    pub(crate) unavailable: Counter,
    /// `outcome="shadow_unidentified"`: no key for this limit, in shadow mode.
    pub(crate) shadow_unidentified: Counter,
    /// `outcome="shadow_unavailable"`: its store or tier lookup failed, in shadow
    /// mode.
    pub(crate) shadow_unavailable: Counter,
    /// A throttle's `outcome="denied"` (`quota="throttle"`): turned away.
    pub(crate) turned_away: Counter,
    /// A throttle's `outcome="key_capacity"`: its map full of other keys.
    pub(crate) throttle_full: Counter,
    /// A throttle's `outcome="allowed"`: given its turn.
    pub(crate) throttled: Counter,
    /// `weir_tower_throttle_wait_seconds`: how long an admitted request waited.
    pub(crate) wait: Histogram,
    /// `weir_tower_throttle_give_ups_total`: requests the throttle turned away.
    pub(crate) give_ups: Counter,
}

impl LimitMetrics {
    pub(crate) fn register(policy: &str, limit: &str, throttle: bool) -> Self {
        let outcome = |outcome| decisions(policy, limit, "", "", outcome);
        let throttle_outcome =
            |outcome| if throttle { decisions(policy, limit, "", "throttle", outcome) } else { Counter::noop() };
        Self {
            unidentified: outcome("unidentified"),
            unavailable: outcome("unavailable"),
            shadow_unidentified: outcome("shadow_unidentified"),
            shadow_unavailable: outcome("shadow_unavailable"),
            turned_away: throttle_outcome("denied"),
            throttle_full: throttle_outcome("key_capacity"),
            throttled: throttle_outcome("allowed"),
            wait: if throttle {
                histogram!("weir_tower_throttle_wait_seconds", "policy" => label(policy), "limit" => label(limit))
            } else {
                Histogram::noop()
            },
            give_ups: if throttle {
                counter!("weir_tower_throttle_give_ups_total", "policy" => label(policy), "limit" => label(limit))
            } else {
                Counter::noop()
            },
        }
    }
}

/// What a policy answers beside its limits'.
#[derive(Debug)]
pub(crate) struct PolicyMetrics {
    /// `outcome="skipped"`: exempted by a skip rule.
    pub(crate) skipped: Counter,
    /// `outcome="allowed"` with no limit applied (every key skipped).
    pub(crate) unlimited: Counter,
}

impl PolicyMetrics {
    pub(crate) fn register(policy: &str) -> Self {
        Self { skipped: decisions(policy, "", "", "", "skipped"), unlimited: decisions(policy, "", "", "", "allowed") }
    }
}

/// A [`Tiers`](crate::Tiers)' cache and lookups, labelled `tiers` with its name.
#[derive(Debug)]
pub(crate) struct TierMetrics {
    /// `weir_tower_tier_cache_hits_total`.
    pub(crate) hits: Counter,
    /// `weir_tower_tier_lookups_total`.
    pub(crate) lookups: Counter,
    /// `weir_tower_tier_lookup_failures_total`.
    pub(crate) failures: Counter,
}

impl TierMetrics {
    pub(crate) fn register(name: &str) -> Self {
        Self {
            hits: counter!("weir_tower_tier_cache_hits_total", "tiers" => label(name)),
            lookups: counter!("weir_tower_tier_lookups_total", "tiers" => label(name)),
            failures: counter!("weir_tower_tier_lookup_failures_total", "tiers" => label(name)),
        }
    }
}

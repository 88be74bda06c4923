//! loom model: a refund of a decision that records no charge (what `AllOf` hands
//! the members that did not decide it) never credits more than was charged when
//! the quota changes while the check is made. A check reads its clock, then the
//! quota, with nothing ordering the two: a check stamped after the change's
//! recorded reading could still load the old quota, and such a refund was credited
//! at the new, slower quota's price, giving back another admission's debt.
#![cfg(loom)]

use loom::sync::Arc;
use loom::thread;
use weir_gcra::GcraAlgorithm;
use weir_rl_core::{Algorithm, ManualClock, Nanos, Quota};

fn old() -> Quota {
    Quota::per_second(100_000_000).unwrap().with_burst(2).unwrap() // T = 10 ns
}

fn new() -> Quota {
    Quota::per_second(50_000_000).unwrap().with_burst(3).unwrap() // T = 20 ns
}

/// The consequence: a decision handed back without its charge (what `AllOf` gives
/// its non-deciding members) is credited at the new, slower quota's price, more
/// than the old quota charged it, giving back another admission's debt.
#[test]
fn a_no_charge_refund_across_a_quota_change_credits_no_more_than_was_charged() {
    loom::model(|| {
        let clock = ManualClock::new();
        let alg = Arc::new(GcraAlgorithm::new(old(), Nanos::ZERO));
        let state = Arc::new(alg.new_state());
        // At reading 0, under the old quota: 10 ns of debt.
        assert!(alg.check(&state, &clock).is_allowed());
        let writer = {
            let (alg, clock) = (alg.clone(), clock.clone());
            thread::spawn(move || {
                // Recorded at a constant reading: a model whose writer reads the
                // loom-atomic clock after its SeqCst fence explores one execution.
                alg.set_quota_with_clock(new(), &Nanos::ZERO);
                clock.set(Nanos::new(5));
            })
        };
        let d = alg.check(&state, &clock);
        if d.is_allowed() {
            Algorithm::refund(&*alg, &state, 1, &d.without_charge(), &clock).unwrap();
        }
        writer.join().unwrap();
        // The first admission's debt left at 5 ns: 10 − 5 = 5 ns, whatever the refund.
        let left = alg.snapshot(&state, Nanos::new(5)).reset_after();
        assert!(
            left >= std::time::Duration::from_nanos(5),
            "{left:?} in use at 5 ns: the refund of {d:?} (no charge) gave back the first admission's debt"
        );
    });
}

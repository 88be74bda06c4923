//! loom model of `QuotaCell`, the double-buffered sequence lock that lets a quota
//! change while the hot path reads it.
#![cfg(loom)]

use loom::sync::Arc;
use loom::thread;
use weir_rl_core::{Nanos, Quota, QuotaCell};

fn q(count: u64, burst: u64) -> Quota {
    Quota::per_second(count).unwrap().with_burst(burst).unwrap()
}

#[test]
fn readers_see_exactly_one_written_quota_never_a_mix() {
    // Two writes from two writers reuse both slots while a reader reads twice: every
    // read returns one of the three quotas whole, and reads never go back in time.
    let quotas = [q(1, 1), q(2, 2), q(3, 3)];
    loom::model(move || {
        let cell = Arc::new(QuotaCell::new(quotas[0]));
        let w1 = {
            let cell = cell.clone();
            thread::spawn(move || cell.store(quotas[1]))
        };
        let w2 = {
            let cell = cell.clone();
            thread::spawn(move || cell.store(quotas[2]))
        };
        let first = cell.load();
        let second = cell.load();
        for read in [first, second] {
            assert!(quotas.contains(&read), "torn read: {read:?}");
        }
        if first != second {
            assert_ne!(second, quotas[0], "a read went back to the initial quota");
        }
        w1.join().unwrap();
        w2.join().unwrap();
        let last = cell.load();
        assert!(last == quotas[1] || last == quotas[2]);
    });
}

#[test]
fn a_reader_racing_one_writer_reads_old_or_new() {
    loom::model(|| {
        let cell = Arc::new(QuotaCell::new(q(1, 1)));
        let writer = {
            let cell = cell.clone();
            thread::spawn(move || {
                cell.store(q(2, 2));
                cell.store(q(3, 3));
            })
        };
        let read = cell.load();
        assert!([q(1, 1), q(2, 2), q(3, 3)].contains(&read), "torn read: {read:?}");
        writer.join().unwrap();
        assert_eq!(cell.load(), q(3, 3));
    });
}

#[test]
fn a_reader_that_loads_a_new_quota_sees_its_change_recorded() {
    // A change recorded at reading 5 and one at an unknown time race a reader. A
    // reader that loaded either new quota must find the quota changed at or after 5
    // (`changed_since` false there would let a refund credit another limiter's
    // decision at the new price). Once both are done, the cell says no change since
    // 6 exactly when the timed change was the last.
    loom::model(|| {
        let cell = Arc::new(QuotaCell::new(q(1, 1)));
        let timed = {
            let cell = cell.clone();
            thread::spawn(move || cell.store_with_clock(q(2, 2), &Nanos::new(5)))
        };
        let untimed = {
            let cell = cell.clone();
            thread::spawn(move || cell.store(q(3, 3)))
        };
        let read = cell.load();
        let changed = cell.changed_since(Nanos::new(5));
        if read != q(1, 1) {
            assert!(changed, "loaded {read:?}, yet no change at or after 5");
        }
        timed.join().unwrap();
        untimed.join().unwrap();
        assert!(cell.changed_since(Nanos::new(5)));
        assert_eq!(cell.load() == q(2, 2), !cell.changed_since(Nanos::new(6)));
    });
}

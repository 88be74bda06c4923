//! Batches against a real redis-server: one script per batch, all or nothing (a
//! refused batch writes nothing, read back with raw commands), the same
//! decisions as single checks one after the other (proptest, every algorithm,
//! repeated keys, peeks, shadow items), typed errors for what cannot be sent or
//! read, the fail policies of `Resilient::check_batch`, and batches dropped at
//! any await.

mod support;

use proptest::prelude::*;
use std::future::Future;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::task::{Context, Waker};
use std::time::Duration;
use support::{FakeMode, FakeRedis, RedisServer};
use weir_redis::__private::{batch_give_backs_settled, is_probing};
use weir_redis::{
    Backend, BatchItem, BatchMismatch, Error, FailPolicy, LocalFallback, Path, Redis, RedisLimiter, RedisOptions,
    Resilient,
};
use weir_rl_core::{Decision, ManualClock, Nanos, Quota};
use weir_testkit::each_cancellation;

const T0: u64 = 1_700_000_000_000_000_000;

async fn patient(server: &RedisServer) -> Redis {
    Redis::connect_with(&server.url(), support::patient()).await.expect("connect")
}

/// One limiter per algorithm, under `prefix`: a GCRA tier (4 a minute, 6 an
/// hour), a fixed window (4 a minute), a sliding window (4 a minute) and a
/// sliding log (3 a minute). With `clock`, decided at it (keys never expire);
/// else at Redis's `TIME`.
fn limiters(redis: &Redis, prefix: &str, clock: Option<&ManualClock>) -> Vec<RedisLimiter> {
    let minute = |n| Quota::per_minute(n).unwrap();
    let builders = [
        RedisLimiter::builder(redis, minute(4)).and_quota(Quota::per_hour(6).unwrap()).prefix(&format!("{prefix}g:")),
        RedisLimiter::builder(redis, minute(4)).backend(Backend::FixedWindow).prefix(&format!("{prefix}f:")),
        RedisLimiter::builder(redis, minute(4)).backend(Backend::SlidingWindow).prefix(&format!("{prefix}s:")),
        RedisLimiter::builder(redis, minute(3)).backend(Backend::SlidingLog).prefix(&format!("{prefix}l:")),
    ];
    builders
        .into_iter()
        .map(|b| match clock {
            Some(clock) => b.build_with_clock(clock.clone()).unwrap(),
            None => b.build().unwrap(),
        })
        .collect()
}

/// Every Redis key of `key` in every limiter, as raw Redis holds it: a string's
/// value, a sorted set's members and scores, or nothing.
fn raw(server: &RedisServer, limiters: &[RedisLimiter], key: &str) -> Vec<String> {
    let mut out = Vec::new();
    for limiter in limiters {
        for redis_key in limiter.redis_keys(key) {
            let kind = server.cli(&["TYPE", &redis_key]);
            let value = match kind.trim() {
                "string" => server.cli(&["GET", &redis_key]),
                "zset" => server.cli(&["ZRANGE", &redis_key, "0", "-1", "WITHSCORES"]),
                "none" => String::new(),
                other => panic!("{redis_key} holds a {other}"),
            };
            out.push(format!("{redis_key} = {value}"));
        }
    }
    out
}

fn evalsha_calls(server: &RedisServer) -> u64 {
    let stats = server.cli(&["INFO", "commandstats"]);
    stats
        .lines()
        .find_map(|line| line.strip_prefix("cmdstat_evalsha:calls="))
        .and_then(|rest| rest.split(',').next())
        .map_or(0, |calls| calls.trim().parse().unwrap())
}

fn items<'a>(limiters: &'a [RedisLimiter], key: &'a str, costs: &[u64]) -> Vec<BatchItem<'a>> {
    limiters.iter().zip(costs).map(|(limiter, &n)| BatchItem::new(limiter, key, n)).collect()
}

#[tokio::test]
async fn a_batch_refused_by_any_algorithm_writes_nothing_in_one_script() {
    let server = RedisServer::start();
    let redis = patient(&server).await;
    let limiters = limiters(&redis, "r:", None);
    // One admission each (and the script loaded).
    let first = RedisLimiter::check_batch(&items(&limiters, "k", &[1, 1, 1, 1])).await.unwrap();
    assert!(first.is_admitted());
    assert!(first.items().iter().all(|c| c.decision.is_allowed() && c.path == Path::Redis));
    let left: Vec<u64> = first.items().iter().map(|c| c.decision.remaining()).collect();
    assert_eq!(left, vec![3, 3, 3, 2]);
    let written = raw(&server, &limiters, "k");
    assert!(written.iter().all(|line| !line.ends_with("= ")), "every algorithm wrote its key: {written:?}");
    // Each algorithm in turn asks for more than it has left: refused, nothing
    // written by any, in one script; the others are answered as if charged.
    for refusing in 0..4 {
        let mut costs = vec![1, 1, 1, 1];
        costs[refusing] = limiters[refusing].capacity();
        let calls = evalsha_calls(&server);
        let checked = RedisLimiter::check_batch(&items(&limiters, "k", &costs)).await.unwrap();
        assert_eq!(evalsha_calls(&server) - calls, 1, "one script, no refunds (item {refusing} refusing)");
        assert!(!checked.is_admitted(), "item {refusing} refusing");
        for (i, c) in checked.items().iter().enumerate() {
            assert_eq!(c.decision.is_denied(), i == refusing, "item {i} (item {refusing} refusing)");
        }
        assert_eq!(raw(&server, &limiters, "k"), written, "item {refusing} refusing wrote something");
    }
    // A preview writes nothing, however it would be decided.
    let preview = RedisLimiter::preview_batch(&items(&limiters, "k", &[1, 1, 1, 1])).await.unwrap();
    assert!(preview.is_admitted());
    assert_eq!(raw(&server, &limiters, "k"), written);
}

#[tokio::test]
async fn peeks_and_shadow_items_refuse_nothing() {
    let server = RedisServer::start();
    let redis = patient(&server).await;
    let limiters = limiters(&redis, "p:", None);
    // The log spent by its own checks.
    for _ in 0..3 {
        assert!(limiters[3].check("k").await.unwrap().is_allowed());
    }
    // A peek of the spent log: read, not refusing; the others charged.
    let checked = RedisLimiter::check_batch(&items(&limiters, "k", &[1, 1, 1, 0])).await.unwrap();
    assert!(checked.is_admitted());
    assert_eq!(checked.decision(3).unwrap().remaining(), 0);
    // The spent log in shadow mode: denied, refusing nothing; the others charged.
    let mut batch = items(&limiters, "k", &[1, 1, 1, 1]);
    batch[3] = batch[3].shadow(true);
    let checked = RedisLimiter::check_batch(&batch).await.unwrap();
    assert!(checked.is_admitted());
    assert!(checked.decision(3).unwrap().is_denied());
    let left: Vec<u64> = checked.items().iter().take(3).map(|c| c.decision.remaining()).collect();
    assert_eq!(left, vec![2, 2, 2]);
    assert_eq!(limiters[3].snapshot("k").await.unwrap().remaining(), 0);
    // A shadow item that fits is charged with the batch.
    let batch = [BatchItem::new(&limiters[0], "k", 1).shadow(true), BatchItem::new(&limiters[1], "k", 1)];
    assert!(RedisLimiter::check_batch(&batch).await.unwrap().is_admitted());
    assert_eq!(limiters[0].snapshot("k").await.unwrap().remaining(), 1);
    // An empty batch is admitted, without a call.
    let calls = evalsha_calls(&server);
    assert!(RedisLimiter::check_batch(&[]).await.unwrap().is_admitted());
    assert_eq!(evalsha_calls(&server), calls);
}

#[tokio::test]
async fn a_key_repeated_in_a_batch_is_decided_on_what_the_earlier_items_take() {
    let server = RedisServer::start();
    let redis = patient(&server).await;
    let limiters = limiters(&redis, "d:", None);
    for (i, limiter) in limiters.iter().enumerate() {
        let capacity = limiter.capacity();
        // Two halves fit together (capacity 4: 2 + 2; the log's 3: 1 + 2).
        let (a, b) = (capacity / 2, capacity - capacity / 2);
        let key = format!("k{i}");
        let batch = [BatchItem::new(limiter, &key, a), BatchItem::new(limiter, &key, b)];
        let checked = RedisLimiter::check_batch(&batch).await.unwrap();
        assert!(checked.is_admitted(), "limiter {i}");
        let left: Vec<u64> = checked.items().iter().map(|c| c.decision.remaining()).collect();
        assert_eq!(left, vec![capacity - a, 0], "limiter {i}");
        assert_eq!(limiter.snapshot(&key).await.unwrap().remaining(), 0, "limiter {i}: both charged");
        // One more than fits: the second refuses, and neither is charged.
        let key = format!("j{i}");
        let batch = [BatchItem::new(limiter, &key, a), BatchItem::new(limiter, &key, b + 1)];
        let before = raw(&server, &limiters, &key);
        let checked = RedisLimiter::check_batch(&batch).await.unwrap();
        assert!(!checked.is_admitted(), "limiter {i}");
        assert!(checked.decision(0).unwrap().is_allowed() && checked.decision(1).unwrap().is_denied());
        assert_eq!(raw(&server, &limiters, &key), before, "limiter {i}: nothing written");
    }
}

#[tokio::test]
async fn what_cannot_be_sent_or_read_is_a_typed_error_and_writes_nothing() {
    let server = RedisServer::start();
    let redis = patient(&server).await;
    let other = patient(&server).await;
    let clock = ManualClock::starting_at(Nanos::new(T0));
    let on_server = limiters(&redis, "e:", None);
    let on_clock = limiters(&redis, "c:", Some(&clock));
    let elsewhere = limiters(&other, "e:", None);
    // Warm: the script loaded.
    assert!(RedisLimiter::check_batch(&items(&on_server, "warm", &[1])).await.unwrap().is_admitted());
    let calls = evalsha_calls(&server);
    let mixed = [BatchItem::new(&on_server[0], "k", 1), BatchItem::new(&elsewhere[1], "k", 1)];
    assert!(matches!(
        RedisLimiter::check_batch(&mixed).await,
        Err(Error::Batch { item: 1, mismatch: BatchMismatch::Connection })
    ));
    let mixed = [BatchItem::new(&on_clock[0], "k", 1), BatchItem::new(&on_server[1], "k", 1)];
    let e = RedisLimiter::check_batch(&mixed).await.unwrap_err();
    assert!(matches!(e, Error::Batch { item: 1, mismatch: BatchMismatch::TimeSource }), "{e}");
    assert!(e.to_string().contains("batch item 1"), "{e}");
    let too_many = [BatchItem::new(&on_server[0], "k", 1), BatchItem::new(&on_server[3], "k", 4)];
    assert!(matches!(RedisLimiter::check_batch(&too_many).await, Err(Error::InsufficientCapacity(_))));
    let refusing = RedisLimiter::builder(&redis, Quota::per_minute(4).unwrap())
        .prefix("long:")
        .max_key_bytes(8)
        .long_keys(weir_redis::LongKeys::Refuse)
        .build()
        .unwrap();
    let too_long = [BatchItem::new(&on_server[0], "k", 1), BatchItem::new(&refusing, "123456789", 1)];
    assert!(matches!(RedisLimiter::check_batch(&too_long).await, Err(Error::KeyTooLong { len: 9, max: 8 })));
    assert_eq!(evalsha_calls(&server), calls, "nothing sent");
    // A key of another type fails the whole batch; the others are not written.
    let fixed_key = on_server[1].redis_keys("w").remove(0);
    server.cli(&["LPUSH", &fixed_key, "x"]);
    let e = RedisLimiter::check_batch(&items(&on_server, "w", &[1, 1, 1, 1])).await.unwrap_err();
    assert!(matches!(e, Error::WrongType { .. }), "{e}");
    let raw_state = raw(&server, &[on_server[0].clone(), on_server[2].clone(), on_server[3].clone()], "w");
    assert!(raw_state.iter().all(|line| line.ends_with("= ")), "{raw_state:?}");
    // A state the script cannot read fails it, typed.
    let gcra_key = on_server[0].redis_keys("v").remove(0);
    server.cli(&["SET", &gcra_key, "not a time"]);
    let e = RedisLimiter::check_batch(&items(&on_server, "v", &[1, 1])).await.unwrap_err();
    assert!(matches!(e, Error::CorruptState { .. }), "{e}");
}

#[tokio::test]
async fn a_reply_of_the_wrong_shape_is_a_reply_error() {
    let fake = FakeRedis::start();
    let redis = Redis::connect_with(&fake.url(), support::patient()).await.unwrap();
    let limiters = limiters(&redis, "b:", None);
    for reply in [
        b"*1\r\n:1\r\n".to_vec(),                               // no time, no items
        b"*4\r\n:1\r\n:5\r\n:1\r\n:3\r\n".to_vec(),             // the tier's second quota missing
        b"*6\r\n:1\r\n:5\r\n:1\r\n:3\r\n:3\r\n:9\r\n".to_vec(), // a field too many
        b"$2\r\nno\r\n".to_vec(),
    ] {
        fake.set_mode(FakeMode::Reply(reply.clone()));
        let e = RedisLimiter::check_batch(&items(&limiters, "k", &[1])).await.unwrap_err();
        assert!(matches!(e, Error::Reply { .. }), "{e} for {:?}", String::from_utf8_lossy(&reply));
    }
}

/// One check of a batch, as the property generates it: which limiter, which key
/// (of two), what cost, in shadow mode or not.
type Step = (u64, Vec<(usize, usize, u64, bool)>);

fn steps() -> impl Strategy<Value = Vec<Step>> {
    let item = (0..4usize, 0..2usize, 0..=3u64, proptest::bool::weighted(0.2));
    let advance = prop_oneof![Just(0u64), 0..20_000u64];
    proptest::collection::vec((advance, proptest::collection::vec(item, 1..6)), 1..8)
}

#[test]
fn a_batch_decides_as_single_checks_one_after_the_other_with_refunds() {
    let server = RedisServer::start();
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let redis = runtime.block_on(patient(&server));
    let case = AtomicUsize::new(0);
    let config = ProptestConfig { cases: 48, failure_persistence: None, ..ProptestConfig::default() };
    proptest!(config, |(steps in steps())| {
        let case = case.fetch_add(1, Ordering::Relaxed);
        let clock = ManualClock::starting_at(Nanos::new(T0));
        let batched = limiters(&redis, &format!("q{case}a:"), Some(&clock));
        let single = limiters(&redis, &format!("q{case}b:"), Some(&clock));
        let keys = ["x", "y"];
        runtime.block_on(async {
            for (s, (advance_ms, checks)) in steps.iter().enumerate() {
                clock.advance(Duration::from_millis(*advance_ms));
                let batch: Vec<BatchItem<'_>> = checks
                    .iter()
                    .map(|&(l, k, n, shadow)| BatchItem::new(&batched[l], keys[k], n).shadow(shadow))
                    .collect();
                let checked = RedisLimiter::check_batch(&batch).await.unwrap();
                // The reference: each check alone, in order; all given back if
                // one that counts is denied.
                let mut decisions: Vec<Decision> = Vec::new();
                for &(l, k, n, _) in checks {
                    decisions.push(single[l].check_n(keys[k], n).await.unwrap());
                }
                let refused = checks.iter().zip(&decisions).any(|(&(_, _, n, shadow), d)| n > 0 && !shadow && d.is_denied());
                if refused {
                    for (&(l, k, n, _), d) in checks.iter().zip(&decisions).rev() {
                        single[l].refund(keys[k], n, d).await.unwrap();
                    }
                }
                let got: Vec<Decision> = checked.items().iter().map(|c| c.decision).collect();
                prop_assert_eq!(&got, &decisions, "step {} of {:?}", s, steps);
                prop_assert_eq!(checked.is_admitted(), !refused, "step {} of {:?}", s, steps);
            }
            // The states left read alike.
            for (l, (a, b)) in batched.iter().zip(&single).enumerate() {
                for key in keys {
                    let (a, b) = (a.snapshot(key).await.unwrap(), b.snapshot(key).await.unwrap());
                    prop_assert_eq!(a, b, "limiter {} key {} after {:?}", l, key, steps);
                }
            }
            Ok::<(), TestCaseError>(())
        })?;
    });
}

#[tokio::test]
async fn a_batch_dropped_at_any_await_keeps_nothing_no_answer_reported() {
    let server = RedisServer::start();
    let redis = patient(&server).await;
    let limiters = limiters(&redis, "x:", None);
    // Warm: the scripts loaded, so that a drop after one poll is a drop after
    // the batch was sent.
    assert!(RedisLimiter::check_batch(&items(&limiters, "warm", &[1, 1, 1, 1])).await.unwrap().is_admitted());
    let run = AtomicUsize::new(0);
    let key = |run: &AtomicUsize| format!("k{}", run.load(Ordering::SeqCst));
    let cuts = each_cancellation(
        || {
            run.fetch_add(1, Ordering::SeqCst);
            let (key, limiters) = (key(&run), &limiters);
            async move {
                let checked = RedisLimiter::check_batch(&items(limiters, &key, &[2, 2, 2, 2])).await.unwrap();
                assert!(checked.is_admitted());
            }
        },
        async |k, finished| {
            batch_give_backs_settled(Duration::from_secs(20)).await;
            let key = key(&run);
            let left: Vec<u64> = {
                let mut left = Vec::new();
                for limiter in &limiters {
                    left.push(limiter.snapshot(&key).await.unwrap().remaining());
                }
                left
            };
            let expected = if finished { vec![2, 2, 2, 1] } else { vec![4, 4, 4, 3] };
            assert_eq!(left, expected, "after a drop after {k} polls (finished: {finished})");
        },
    )
    .await;
    assert!(cuts >= 2, "the batch was parked on Redis at least once ({cuts} runs)");
}

#[tokio::test]
async fn a_batch_dropped_while_redis_is_stopped_is_given_back_when_it_answers() {
    let mut server = RedisServer::start();
    let redis = patient(&server).await;
    let limiters = limiters(&redis, "z:", None);
    assert!(RedisLimiter::check_batch(&items(&limiters, "warm", &[1, 1, 1, 1])).await.unwrap().is_admitted());
    // The refund scripts loaded too: each refund below is one EVALSHA.
    for limiter in &limiters {
        let admission = limiter.check("warm-refund").await.unwrap();
        limiter.refund("warm-refund", 1, &admission).await.unwrap();
    }
    let calls = evalsha_calls(&server);
    server.pause();
    {
        let batch = items(&limiters, "k", &[3, 3, 3, 3]);
        let mut call = Box::pin(RedisLimiter::check_batch(&batch));
        // Polled once (sent), then dropped: its caller gone.
        assert!(call.as_mut().poll(&mut Context::from_waker(Waker::noop())).is_pending());
        tokio::task::yield_now().await;
    }
    server.resume();
    batch_give_backs_settled(Duration::from_secs(30)).await;
    // The script ran (it admitted all four), and each admission was refunded.
    assert_eq!(evalsha_calls(&server) - calls, 1 + 4, "the batch and four refunds");
    for (i, limiter) in limiters.iter().enumerate() {
        assert_eq!(limiter.snapshot("k").await.unwrap().remaining(), limiter.capacity(), "limiter {i}");
    }
    assert!(raw(&server, &limiters, "k").iter().all(|line| line.ends_with("= ")));
}

fn resilient(limiter: &RedisLimiter, policy: FailPolicy, clock: &ManualClock) -> Resilient<ManualClock> {
    let backoff = weir_redis::Backoff::new(Duration::from_millis(100), Duration::from_secs(1)).unwrap();
    Resilient::builder(limiter.clone(), policy).backoff(backoff).build_with_clock(clock.clone()).unwrap()
}

#[tokio::test]
async fn a_resilient_batch_decides_by_its_fail_policies_while_redis_is_stopped() {
    let mut server = RedisServer::start();
    let options = RedisOptions::builder().call_timeout(Duration::from_millis(500)).build().unwrap();
    let redis = support::connect_retrying(&server.url(), options).await;
    let clock = ManualClock::starting_at(Nanos::new(T0));
    let two = RedisLimiter::builder(&redis, Quota::per_minute(2).unwrap()).prefix("two:").build().unwrap();
    let one = RedisLimiter::builder(&redis, Quota::per_minute(1).unwrap()).prefix("one:").build().unwrap();
    let local = FailPolicy::LocalFallback(LocalFallback::new(1, 100).unwrap());
    let (open, closed) = (resilient(&two, FailPolicy::Open, &clock), resilient(&one, FailPolicy::Closed, &clock));
    let (local_two, local_one) = (resilient(&two, local, &clock), resilient(&one, local, &clock));
    server.pause();
    // Open: admitted by the policy.
    let checked = Resilient::check_batch(&[BatchItem::new(&open, "k", 1)]).await.unwrap();
    assert!(checked.is_admitted());
    assert_eq!(checked.items()[0].path, Path::FailOpen);
    // Closed: refused, and the open item beside it is admitted by its policy.
    let batch = [BatchItem::new(&open, "k", 1), BatchItem::new(&closed, "k", 1)];
    let checked = Resilient::check_batch(&batch).await.unwrap();
    assert!(!checked.is_admitted());
    assert_eq!((checked.items()[1].path, checked.items()[1].decision.is_denied()), (Path::FailClosed, true));
    assert!(!is_probing(&closed) && !is_probing(&open));
    // The local fallback: a refused batch gives back what the others took.
    let batch = [BatchItem::new(&local_two, "k", 1), BatchItem::new(&local_one, "k", 1)];
    let checked = Resilient::check_batch(&batch).await.unwrap();
    assert!(checked.is_admitted(), "{checked:?}");
    assert!(checked.items().iter().all(|c| c.path == Path::LocalFallback));
    let checked = Resilient::check_batch(&batch).await.unwrap();
    assert!(!checked.is_admitted(), "the per-minute 1 is spent");
    assert_eq!(checked.decision(0).unwrap().remaining(), 0, "answered as if charged");
    // Given back: the per-minute 2 has its second unit still.
    let alone = Resilient::check_batch(&[BatchItem::new(&local_two, "k", 1)]).await.unwrap();
    assert!(alone.is_admitted() && alone.items()[0].path == Path::LocalFallback);
    let alone = Resilient::check_batch(&[BatchItem::new(&local_two, "k", 1)]).await.unwrap();
    assert!(!alone.is_admitted());
    server.resume();
    // After the back-off, Redis decides again (one probe brings it back).
    clock.advance(Duration::from_secs(2));
    let mut back = false;
    for _ in 0..20 {
        let checked = Resilient::check_batch(&batch).await.unwrap();
        if checked.items().iter().all(|c| c.path == Path::Redis) {
            back = true;
            break;
        }
        clock.advance(Duration::from_secs(2));
    }
    assert!(back, "Redis decides the batch again");
    assert!(local_two.is_healthy() && local_one.is_healthy());
}

#[tokio::test]
async fn a_resilient_batch_refused_by_a_policy_only_reads_redis() {
    let mut server = RedisServer::start();
    let options = RedisOptions::builder().call_timeout(Duration::from_millis(500)).build().unwrap();
    let redis = support::connect_retrying(&server.url(), options).await;
    let clock = ManualClock::starting_at(Nanos::new(T0));
    let limiters = limiters(&redis, "m:", None);
    let closed = resilient(&limiters[0], FailPolicy::Closed, &clock);
    let healthy = resilient(&limiters[1], FailPolicy::Closed, &clock);
    // An outage seen by `closed` alone: it leaves Redis alone for its back-off.
    server.pause();
    assert_eq!(closed.check_traced("o", 1).await.unwrap().path, Path::FailClosed);
    server.resume();
    assert!(!closed.is_healthy());
    let batch = [BatchItem::new(&closed, "k", 1), BatchItem::new(&healthy, "k", 1)];
    let checked = Resilient::check_batch(&batch).await.unwrap();
    assert!(!checked.is_admitted());
    assert_eq!(checked.items()[0].path, Path::FailClosed);
    // Read in Redis, not charged.
    assert_eq!((checked.items()[1].path, checked.items()[1].decision.remaining()), (Path::Redis, 3));
    assert_eq!(raw(&server, &limiters[1..2], "k"), vec![format!("{} = ", limiters[1].redis_keys("k")[0])]);
}

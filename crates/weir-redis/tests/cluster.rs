//! Redis Cluster: three masters on loopback; a tier's keys hash to different slots
//! without the client hash tag and to one slot with it, so the tier script runs.

mod support;

use std::collections::HashSet;
use support::RedisCluster;
use weir_redis::{Redis, RedisLimiter};
use weir_rl_core::Quota;

fn slot(cluster: &RedisCluster, key: &str) -> u16 {
    cluster.nodes[0].cli(&["CLUSTER", "KEYSLOT", key]).trim().parse().expect("a slot number")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tier_runs_as_one_script_on_a_cluster() {
    let cluster = RedisCluster::start();
    let urls = cluster.urls();
    let urls: Vec<&str> = urls.iter().map(String::as_str).collect();
    let redis = Redis::connect_cluster(&urls, support::patient()).await.unwrap();
    // The first quota binds, and refills one unit per 4.8 hours of the
    // server's clock: a burst it has spent stays spent however slowly the test
    // runs (and its keys expire in days).
    let quotas = [
        Quota::per_day(5).unwrap().with_burst(10).unwrap(),
        Quota::per_minute(20).unwrap(),
        Quota::per_day(1_000).unwrap(),
    ];
    let tier = RedisLimiter::builder(&redis, quotas[0])
        .and_quota(quotas[1])
        .and_quota(quotas[2])
        .prefix("rl:")
        .build()
        .unwrap();
    let mut masters_used = HashSet::new();
    for client in 0..24 {
        let key = format!("client-{client}");
        // Without the tag the tier's keys spread over slots (and masters)...
        let untagged: HashSet<u16> = (0..3).map(|i| slot(&cluster, &format!("rl:{key}:g{i}"))).collect();
        assert!(untagged.len() > 1, "{key}: untagged keys in slots {untagged:?}");
        // ...with it they share one.
        let keys = tier.redis_keys(&key);
        let tagged: HashSet<u16> = keys.iter().map(|k| slot(&cluster, k)).collect();
        assert_eq!(tagged.len(), 1, "{key}: tagged keys {keys:?} in slots {tagged:?}");
        masters_used.insert(*tagged.iter().next().unwrap() / 5_462);
        let d = tier.check_n(&key, 10).await.unwrap();
        assert!(d.is_allowed(), "{key}: {d:?}");
        let d = tier.check(&key).await.unwrap();
        assert!(d.is_denied() && d.policy_index() == 0, "{key}: {d:?}");
        let d = tier.check_n(&key, 0).await.unwrap();
        assert_eq!(d.remaining(), 0);
    }
    assert!(masters_used.len() > 1, "clients spread over the masters: {masters_used:?}");
    // The same script on untagged keys is refused by the cluster (CROSSSLOT).
    let mut untagged_key = None;
    for client in 0..100 {
        let k0 = format!("plain-{client}:g0");
        let k1 = format!("plain-{client}:g1");
        if slot(&cluster, &k0) != slot(&cluster, &k1) {
            untagged_key = Some((k0, k1));
            break;
        }
    }
    let (k0, k1) = untagged_key.expect("two untagged keys in different slots");
    let reply = cluster.nodes[0].cli(&["-c", "EVAL", "return redis.call('GET', KEYS[1])", "2", &k0, &k1]);
    assert!(reply.contains("CROSSSLOT"), "untagged multi-key script: {reply}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn odd_and_empty_client_keys_keep_a_tier_in_one_slot() {
    let cluster = RedisCluster::start();
    let urls = cluster.urls();
    let urls: Vec<&str> = urls.iter().map(String::as_str).collect();
    let redis = Redis::connect_cluster(&urls, support::patient()).await.unwrap();
    let tier = RedisLimiter::builder(&redis, Quota::per_second(5).unwrap())
        .and_quota(Quota::per_minute(20).unwrap())
        .and_quota(Quota::per_day(1_000).unwrap())
        .build()
        .unwrap();
    // `{}` is no hash tag for Redis Cluster: the empty key must not be named so.
    let odd: [&[u8]; 9] = [b"", b"a}b", b"}", b"{", b"{}", b"%7D", b"%", b"a:b:g:1", &[0xff, b'}', 0xfe]];
    for key in odd {
        let keys = tier.redis_keys(key);
        let slots: HashSet<u16> = keys.iter().map(|k| slot(&cluster, k)).collect();
        assert_eq!(slots.len(), 1, "{key:?}: {keys:?} in slots {slots:?}");
        let checked = tier.check(key).await;
        assert!(checked.is_ok(), "{key:?}: {checked:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_over_slots_is_all_or_nothing_on_a_cluster() {
    use weir_redis::{Backend, BatchItem};
    let cluster = RedisCluster::start();
    let urls = cluster.urls();
    let urls: Vec<&str> = urls.iter().map(String::as_str).collect();
    let redis = Redis::connect_cluster(&urls, support::patient()).await.unwrap();
    // A clock that stands still: the refunds of the slots that admitted give
    // back all they took (a refund credits the units less the time since the
    // admission, none here), and no window boundary falls within the test.
    let clock = weir_rl_core::ManualClock::starting_at(weir_rl_core::Nanos::new(1_700_000_000_000_000_000));
    let day = Quota::per_day(4).unwrap();
    let gcra = RedisLimiter::builder(&redis, day).prefix("g:").build_with_clock(clock.clone()).unwrap();
    let fixed = RedisLimiter::builder(&redis, day)
        .backend(Backend::FixedWindow)
        .prefix("f:")
        .build_with_clock(clock.clone())
        .unwrap();
    let log =
        RedisLimiter::builder(&redis, day).backend(Backend::SlidingLog).prefix("l:").build_with_clock(clock).unwrap();
    // Client keys in three different slots (each key is its own hash tag), and
    // one repeated: the repeated key's items are in one script.
    let keys = ["alpha", "bravo", "charlie"];
    let slots: HashSet<u16> = keys.iter().map(|k| slot(&cluster, &gcra.redis_keys(k)[0])).collect();
    assert_eq!(slots.len(), 3, "{slots:?}");
    let batch = |n: u64| {
        [
            BatchItem::new(&gcra, keys[0], 1),
            BatchItem::new(&fixed, keys[1], 1),
            BatchItem::new(&log, keys[2], n),
            BatchItem::new(&gcra, keys[0], 1),
        ]
    };
    let checked = RedisLimiter::check_batch(&batch(1)).await.unwrap();
    assert!(checked.is_admitted());
    let left: Vec<u64> = checked.items().iter().map(|c| c.decision.remaining()).collect();
    assert_eq!(left, vec![3, 3, 3, 2]);
    // The log asks for 4 of its 3 left: refused in its slot; the other slots'
    // admissions are given back before the batch returns.
    let checked = RedisLimiter::check_batch(&batch(4)).await.unwrap();
    assert!(!checked.is_admitted());
    assert!(checked.decision(2).unwrap().is_denied());
    assert_eq!(gcra.snapshot(keys[0]).await.unwrap().remaining(), 2);
    assert_eq!(fixed.snapshot(keys[1]).await.unwrap().remaining(), 3);
    assert_eq!(log.snapshot(keys[2]).await.unwrap().remaining(), 3);
    // A preview in every slot writes nothing.
    let preview = RedisLimiter::preview_batch(&batch(3)).await.unwrap();
    assert!(preview.is_admitted());
    assert_eq!(log.snapshot(keys[2]).await.unwrap().remaining(), 3);
}

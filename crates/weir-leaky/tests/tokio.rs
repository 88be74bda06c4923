//! Async consumers and the throttle, on tokio's paused time: waits take no real time
//! and every instant is exact, so times are asserted to the millisecond without
//! any risk of flakiness.
#![cfg(feature = "tokio")]

use std::sync::Arc;
use std::time::Duration;
use tokio::time::{Instant, sleep, timeout};
use weir_leaky::{LeakyBucket, RecvError, RecvTimeoutError, Throttle, ThrottleError, TryRecvError};
use weir_rl_core::{Quota, TokioClock};

const MS: Duration = Duration::from_millis(1);

fn bucket(per_second: u64, capacity: usize) -> Arc<LeakyBucket<u32, TokioClock>> {
    Arc::new(LeakyBucket::with_clock(Quota::per_second(per_second).unwrap(), capacity, TokioClock::new()).unwrap())
}

/// Awaits `future`, failing (instead of hanging) if a lost wake-up leaves it pending:
/// under paused time, an idle runtime jumps straight to the time-out.
async fn within<F: std::future::Future>(future: F) -> F::Output {
    timeout(Duration::from_secs(3_600), future).await.expect("a consumer was never woken")
}

fn ms_since(start: Instant) -> u64 {
    start.elapsed().as_millis() as u64
}

#[tokio::test(start_paused = true)]
async fn async_consumers_together_leak_at_the_rate() {
    let bucket = bucket(10, 50);
    let start = Instant::now();
    for i in 0..10 {
        bucket.offer(i).unwrap();
    }
    let consumers: Vec<_> = (0..3)
        .map(|_| {
            let bucket = bucket.clone();
            tokio::spawn(async move {
                let mut got = Vec::new();
                while let Ok(item) = bucket.recv_async().await {
                    got.push((ms_since(start), item));
                }
                got
            })
        })
        .collect();
    sleep(Duration::from_secs(2)).await;
    bucket.close();
    let mut all = Vec::new();
    for consumer in consumers {
        all.extend(within(consumer).await.unwrap());
    }
    all.sort();
    let times: Vec<u64> = all.iter().map(|r| r.0).collect();
    assert_eq!(times, (0..10).map(|i| i * 100).collect::<Vec<_>>(), "one every 100 ms, all consumers together");
    let mut items: Vec<u32> = all.iter().map(|r| r.1).collect();
    items.sort();
    assert_eq!(items, (0..10).collect::<Vec<_>>());
}

#[tokio::test(start_paused = true)]
async fn an_async_consumer_sleeps_until_an_item_comes() {
    let bucket = bucket(10, 4);
    let start = Instant::now();
    let consumer = {
        let bucket = bucket.clone();
        tokio::spawn(async move {
            let first = bucket.recv_async().await.map(|item| (ms_since(start), item));
            let second = bucket.recv_async().await.map(|item| (ms_since(start), item));
            (first, second, bucket.recv_async().await)
        })
    };
    sleep(250 * MS).await;
    bucket.offer(1).unwrap();
    bucket.offer(2).unwrap();
    sleep(MS).await;
    bucket.close();
    assert_eq!(within(consumer).await.unwrap(), (Ok((250, 1)), Ok((350, 2)), Err(RecvError)));
}

#[tokio::test(start_paused = true)]
async fn recv_async_timeout_gives_up_in_time_and_spends_nothing() {
    let bucket = bucket(10, 4);
    let start = Instant::now();
    assert_eq!(bucket.recv_async_timeout(30 * MS).await, Err(RecvTimeoutError::Timeout));
    assert_eq!(ms_since(start), 30);
    bucket.offer(1).unwrap();
    bucket.offer(2).unwrap();
    assert_eq!(bucket.recv_async_timeout(MS).await, Ok(1));
    // The next slot is 100 ms after the first: 50 ms is not enough, and we know at once.
    let before = Instant::now();
    assert_eq!(bucket.recv_async_timeout(50 * MS).await, Err(RecvTimeoutError::Timeout));
    assert_eq!(before.elapsed(), Duration::ZERO);
    assert_eq!(bucket.recv_async_timeout(200 * MS).await, Ok(2));
    assert_eq!(ms_since(start), 130, "the slot at 30 + 100 ms was not spent by the time-out");
}

#[tokio::test(start_paused = true)]
async fn a_cancelled_recv_async_loses_no_item_and_gives_its_slot_back() {
    let bucket = bucket(10, 4);
    let start = Instant::now();
    bucket.offer(1).unwrap();
    bucket.offer(2).unwrap();
    assert_eq!(bucket.recv_async().await, Ok(1));
    // Cancelled while waiting for its slot at 100 ms.
    assert!(timeout(40 * MS, bucket.recv_async()).await.is_err());
    assert_eq!(bucket.len(), 1, "the item is still in the bucket");
    assert!(matches!(bucket.try_recv(), Err(TryRecvError::NotYet { retry_after }) if retry_after == 60 * MS));
    // The slot at 100 ms was given back: the item leaves then, not at 200 ms.
    assert_eq!(bucket.recv_async().await, Ok(2));
    assert_eq!(ms_since(start), 100);
}

#[tokio::test(start_paused = true)]
async fn a_cancelled_recv_async_hands_its_item_to_a_sleeping_consumer() {
    let bucket = bucket(10, 4);
    let start = Instant::now();
    bucket.offer(1).unwrap();
    assert_eq!(bucket.recv_async().await, Ok(1));
    bucket.offer(2).unwrap();
    // A reserves item 2 (slot 100 ms); B finds nothing left to reserve and sleeps.
    let a = tokio::spawn({
        let bucket = bucket.clone();
        async move { timeout(20 * MS, bucket.recv_async()).await }
    });
    sleep(MS).await;
    let b = tokio::spawn({
        let bucket = bucket.clone();
        async move { bucket.recv_async().await.map(|item| (ms_since(start), item)) }
    });
    assert!(a.await.unwrap().is_err(), "A was cancelled");
    assert_eq!(within(b).await.unwrap(), Ok((100, 2)), "B was woken, took the item and A's slot");
}

#[tokio::test(start_paused = true)]
async fn close_wakes_sleeping_async_consumers() {
    let bucket = bucket(10, 4);
    let consumers: Vec<_> = (0..3)
        .map(|_| {
            let bucket = bucket.clone();
            tokio::spawn(async move { bucket.recv_async().await })
        })
        .collect();
    sleep(10 * MS).await;
    bucket.close();
    for consumer in consumers {
        assert_eq!(within(consumer).await.unwrap(), Err(RecvError));
    }
}

fn throttle(per_second: u64, capacity: usize) -> Arc<Throttle> {
    Arc::new(Throttle::new(Quota::per_second(per_second).unwrap(), capacity).unwrap())
}

#[tokio::test(start_paused = true)]
async fn throttle_lets_requests_through_in_fifo_order_at_the_rate() {
    let throttle = throttle(10, 10);
    let start = Instant::now();
    let order = Arc::new(std::sync::Mutex::new(Vec::new()));
    let request = |i: u32| {
        let (throttle, order) = (throttle.clone(), order.clone());
        async move {
            throttle.acquire().await.unwrap();
            order.lock().unwrap().push((i, ms_since(start)));
        }
    };
    tokio::join!(request(0), request(1), request(2), request(3), request(4), request(5));
    let order = order.lock().unwrap().clone();
    assert_eq!(order, (0..6).map(|i| (i, 100 * i as u64)).collect::<Vec<_>>());
    assert_eq!(throttle.waiting(), 0);
}

#[tokio::test(start_paused = true)]
async fn a_full_throttle_turns_requests_away_at_once() {
    let throttle = throttle(10, 2);
    throttle.acquire().await.unwrap(); // slot 0
    let (a, b, c) = tokio::join!(throttle.acquire(), throttle.acquire(), async {
        // Two are waiting (slots 100 and 200 ms): full.
        let result = throttle.acquire().await;
        assert_eq!(throttle.waiting(), 2);
        result
    });
    assert_eq!((a, b), (Ok(()), Ok(())));
    assert_eq!(c, Err(ThrottleError::Full { retry_after: 100 * MS }));
    assert!(c.unwrap_err().to_string().contains("retry after"));
}

#[tokio::test(start_paused = true)]
async fn a_deadline_gives_up_in_time_without_spending_a_slot() {
    let throttle = throttle(10, 10);
    let start = Instant::now();
    throttle.acquire().await.unwrap(); // slot 0
    let (a, b, c) = tokio::join!(
        throttle.acquire(),                 // slot 100
        throttle.acquire_timeout(150 * MS), // its slot would be 200: gives up
        async {
            let r = throttle.acquire().await; // gets slot 200
            (r, ms_since(start))
        },
    );
    assert_eq!(a, Ok(()));
    assert_eq!(b, Err(ThrottleError::TimedOut));
    assert_eq!(c, (Ok(()), 200), "the timed-out request's slot went to the next in line");
    // Waiting in line past the deadline: gives up at the deadline.
    let throttle = self::throttle(10, 10);
    let start = Instant::now();
    throttle.acquire().await.unwrap();
    let (_, b) = tokio::join!(throttle.acquire(), async {
        let r = throttle.acquire_timeout(50 * MS).await;
        (r, ms_since(start))
    });
    assert_eq!(b, (Err(ThrottleError::TimedOut), 50));
}

#[tokio::test(start_paused = true)]
async fn cancelling_the_head_of_the_line_gives_its_slot_to_the_next() {
    let throttle = throttle(10, 10);
    let start = Instant::now();
    throttle.acquire().await.unwrap(); // slot 0
    let (head, next) = tokio::join!(
        timeout(60 * MS, throttle.acquire()), // holds slot 100; dropped at 60 ms
        async {
            throttle.acquire().await.unwrap();
            ms_since(start)
        },
    );
    assert!(head.is_err());
    assert_eq!(next, 100, "the next request got the cancelled one's slot: nothing leaked");
    assert_eq!(throttle.waiting(), 0);
}

#[tokio::test(start_paused = true)]
async fn a_head_cancelled_after_an_outside_claim_neither_panics_nor_wastes_its_slot() {
    // The schedule is public: a caller may claim from it while the head of the line
    // waits for its slot. The head, cancelled then, cannot give its slot back (it is
    // no longer the latest claim); its slot goes to the next request in line instead.
    let throttle = throttle(10, 10);
    let start = Instant::now();
    throttle.acquire().await.unwrap(); // slot 0
    let (head, next, outside, last) = tokio::join!(
        timeout(60 * MS, throttle.acquire()), // holds slot 100; dropped at 60 ms
        async {
            sleep(10 * MS).await; // in line behind the head
            throttle.acquire().await.unwrap();
            ms_since(start)
        },
        async {
            sleep(20 * MS).await;
            let slot = throttle.schedule().claim(throttle.clock()); // slot 200, from outside
            slot.at().as_u64() / 1_000_000
        },
        async {
            sleep(30 * MS).await; // in line behind `next`
            throttle.acquire().await.unwrap();
            ms_since(start)
        },
    );
    assert!(head.is_err());
    assert_eq!(outside, 200);
    assert_eq!(next, 100, "the cancelled head's slot went to the next in line");
    assert_eq!(last, 300, "after the outside claim");
    assert_eq!(throttle.waiting(), 0);
}

#[tokio::test(start_paused = true)]
async fn cancelling_in_the_middle_keeps_order_and_frees_the_place() {
    let throttle = throttle(10, 3);
    let start = Instant::now();
    throttle.acquire().await.unwrap(); // slot 0
    let (a, b, c, d) = tokio::join!(
        async {
            throttle.acquire().await.unwrap();
            ms_since(start)
        },
        timeout(50 * MS, throttle.acquire()), // in line behind a; dropped at 50 ms
        async {
            throttle.acquire().await.unwrap();
            ms_since(start)
        },
        async {
            // At 60 ms the cancelled request's place is free again.
            sleep(60 * MS).await;
            throttle.acquire().await.unwrap();
            ms_since(start)
        },
    );
    assert!(b.is_err());
    assert_eq!((a, c, d), (100, 200, 300));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn throttle_on_real_threads_lets_every_request_through_once() {
    // 100 000 per second of real time: a few milliseconds in all.
    let throttle = Arc::new(Throttle::new(Quota::per_second(100_000).unwrap(), 64).unwrap());
    let through = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let tasks: Vec<_> = (0..40)
        .map(|_| {
            let (throttle, through) = (throttle.clone(), through.clone());
            tokio::spawn(async move {
                throttle.acquire().await.unwrap();
                through.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            })
        })
        .collect();
    for task in tasks {
        task.await.unwrap();
    }
    assert_eq!(through.load(std::sync::atomic::Ordering::Relaxed), 40);
    assert_eq!(throttle.waiting(), 0);
}

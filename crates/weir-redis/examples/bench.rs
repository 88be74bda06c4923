//! Measures weir-redis on loopback: decisions per second and p50/p99 latency per
//! back end, one call at a time and 64 concurrent tasks on one multiplexed
//! connection, over 10 000 uniform keys and over one hot key; the same for token
//! leases (round trips per decision, overshoot); and, in the same run, a bare
//! `PING` and a bare `EVALSHA` of the GCRA script through redis-rs alone.
//!
//! ```text
//! cargo run --release -p weir-redis --example bench              # starts its own redis-server
//! cargo run --release -p weir-redis --example bench -- --secs 3 --url redis://127.0.0.1:6379
//! ```
//!
//! Measurements, not tests: nothing here asserts a time.

use std::net::TcpListener;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};
use weir_redis::{Backend, LeaseConfig, Leased, Redis, RedisLimiter, RedisOptions};
use weir_rl_core::Quota;

const KEYS: usize = 10_000;
const TASKS: usize = 64;

struct Server(Child);

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn start_server() -> (Server, String) {
    let port = TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let child = Command::new("redis-server")
        .args(["--port", &port.to_string(), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("redis-server on PATH (apt-get install redis-server, or .ci/redis-server install)");
    let url = format!("redis://127.0.0.1:{port}");
    for _ in 0..500 {
        if std::net::TcpStream::connect(("127.0.0.1", port)).is_ok() {
            break;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    (Server(child), url)
}

/// Throughput and latency of one run.
struct Run {
    decisions: u64,
    elapsed: Duration,
    p50_us: f64,
    p99_us: f64,
}

impl Run {
    fn per_second(&self) -> f64 {
        self.decisions as f64 / self.elapsed.as_secs_f64()
    }
}

/// Runs `op(i)` from `tasks` concurrent tasks for `secs`, timing every call.
async fn measure<F, Fut>(tasks: usize, secs: f64, op: F) -> Run
where
    F: Fn(u64) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = ()> + Send,
{
    let op = Arc::new(op);
    let deadline = Instant::now() + Duration::from_secs_f64(secs);
    let started = Instant::now();
    let handles: Vec<_> = (0..tasks)
        .map(|t| {
            let op = op.clone();
            tokio::spawn(async move {
                let mut latencies = Vec::with_capacity(100_000);
                let mut i = t as u64 * 7_919;
                while Instant::now() < deadline {
                    let start = Instant::now();
                    op(i).await;
                    latencies.push(start.elapsed().as_nanos() as u64);
                    i = i.wrapping_add(1);
                }
                latencies
            })
        })
        .collect();
    let mut all = Vec::new();
    for h in handles {
        all.extend(h.await.unwrap());
    }
    let elapsed = started.elapsed();
    all.sort_unstable();
    let pick = |q: f64| all.get(((all.len() as f64 * q) as usize).min(all.len().saturating_sub(1))).copied();
    Run {
        decisions: all.len() as u64,
        elapsed,
        p50_us: pick(0.50).unwrap_or(0) as f64 / 1e3,
        p99_us: pick(0.99).unwrap_or(0) as f64 / 1e3,
    }
}

fn row(name: &str, serial: &Run, concurrent: &Run, reference: f64) {
    println!(
        "| {name} | {:>8.0} | {:>6.1} | {:>6.1} | {:>8.0} | {:>6.1} | {:>6.1} | {:>4.1}× | {:>4.2} |",
        serial.per_second(),
        serial.p50_us,
        serial.p99_us,
        concurrent.per_second(),
        concurrent.p50_us,
        concurrent.p99_us,
        concurrent.per_second() / serial.per_second(),
        reference / serial.p50_us.max(1e-9),
    );
}

fn key_of(i: u64, hot: bool) -> String {
    if hot { "hot".to_owned() } else { format!("user:{}", (i.wrapping_mul(2_654_435_761)) % KEYS as u64) }
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let arg = |name: &str| args.iter().position(|a| a == name).and_then(|i| args.get(i + 1)).cloned();
    let secs: f64 = arg("--secs").and_then(|s| s.parse().ok()).unwrap_or(1.5);
    let (_server, url) = match arg("--url") {
        Some(url) => (None, url),
        None => {
            let (server, url) = start_server();
            (Some(server), url)
        }
    };
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    runtime.block_on(run(url, secs));
}

async fn run(url: String, secs: f64) {
    let options = RedisOptions::builder().call_timeout(Duration::from_secs(2)).build().expect("a non-zero timeout");
    let redis = Redis::connect_with(&url, options).await.expect("connect");
    let info: String = weir_redis::__private::command(&redis, redis::cmd("INFO").arg("server")).await.unwrap();
    let version = info.lines().find_map(|l| l.strip_prefix("redis_version:")).unwrap_or("?").to_owned();
    println!(
        "redis-server {version} on {url}; {secs} s per run; serial = 1 task, concurrent = {TASKS} tasks on one connection"
    );
    println!();

    // References: redis-rs alone, no weir code.
    let client = redis::Client::open(url.as_str()).unwrap();
    let bare = client.get_multiplexed_async_connection().await.unwrap();
    let quota = Quota::per_second(100).unwrap();
    let gcra = RedisLimiter::builder(&redis, quota).prefix("bench:gcra:").build().unwrap();
    let _ = gcra.check("warm-up").await.unwrap(); // loads the script
    let sha = weir_redis::__private::script_sha(&gcra).to_owned();
    let ping = |tasks| {
        let bare = bare.clone();
        measure(tasks, secs, move |_| {
            let mut c = bare.clone();
            async move {
                let _: String = redis::cmd("PING").query_async(&mut c).await.unwrap();
            }
        })
    };
    let (ping_serial, ping_concurrent) = (ping(1).await, ping(TASKS).await);
    let evalsha = |tasks| {
        let bare = bare.clone();
        let sha = sha.clone();
        measure(tasks, secs, move |i| {
            let mut c = bare.clone();
            let mut cmd = redis::cmd("EVALSHA");
            cmd.arg(&sha).arg(1).arg(format!("bench:bare:{{{}}}:g:bare", key_of(i, false))).arg("").arg("1");
            cmd.arg(10_000).arg(1_000_000);
            async move {
                let _: Vec<u64> = cmd.query_async(&mut c).await.unwrap();
            }
        })
    };
    let (eval_serial, eval_concurrent) = (evalsha(1).await, evalsha(TASKS).await);
    let reference = eval_serial.p50_us;

    println!(
        "| what | serial /s | p50 µs | p99 µs | {TASKS} tasks /s | p50 µs | p99 µs | speed-up | bare EVALSHA p50 ÷ p50 |"
    );
    println!("|---|---:|---:|---:|---:|---:|---:|---:|---:|");
    row("PING (redis-rs)", &ping_serial, &ping_concurrent, reference);
    row("EVALSHA of the GCRA script (redis-rs)", &eval_serial, &eval_concurrent, reference);

    let window_quota = Quota::per_second(100).unwrap();
    let window =
        |backend, prefix| RedisLimiter::builder(&redis, window_quota).backend(backend).prefix(prefix).build().unwrap();
    let limiters = [
        ("GCRA", gcra.clone()),
        (
            "tier (3 GCRA quotas)",
            RedisLimiter::builder(&redis, quota)
                .and_quota(Quota::per_minute(3_000).unwrap())
                .and_quota(Quota::per_day(100_000).unwrap())
                .prefix("bench:tier:")
                .build()
                .unwrap(),
        ),
        ("fixed window", window(Backend::FixedWindow, "bench:fw:")),
        ("sliding window", window(Backend::SlidingWindow, "bench:sw:")),
        ("sliding log", window(Backend::SlidingLog, "bench:sl:")),
    ];
    for hot in [false, true] {
        for (name, limiter) in &limiters {
            let go = |tasks| {
                let limiter = limiter.clone();
                measure(tasks, secs, move |i| {
                    let limiter = limiter.clone();
                    async move {
                        let _ = limiter.check(&key_of(i, hot)).await.unwrap();
                    }
                })
            };
            let (serial, concurrent) = (go(1).await, go(TASKS).await);
            let keys = if hot { "one hot key (mostly denied)" } else { "10 000 keys" };
            row(&format!("{name}, {keys}"), &serial, &concurrent, reference);
        }
    }
    println!();
    leases(&url, secs).await;
}

/// Leases: round trips per decision on a key under its limit, and the overshoot of
/// four leased instances sharing an overloaded key.
async fn leases(url: &str, secs: f64) {
    println!("| leases | decisions /s ({TASKS} tasks) | p50 µs | p99 µs | round trips per decision |");
    println!("|---|---:|---:|---:|---:|");
    let redis = Redis::connect(url).await.unwrap();
    for max_lease in [16u64, 64] {
        let limiter = RedisLimiter::builder(&redis, Quota::per_second(1_000_000).unwrap())
            .prefix(&format!("bench:lease{max_lease}:"))
            .build()
            .unwrap();
        let config = LeaseConfig::builder().max_lease(max_lease).build().unwrap();
        let leased = Arc::new(Leased::new(limiter, config).unwrap());
        let l = leased.clone();
        let run = measure(TASKS, secs, move |_| {
            let l = l.clone();
            async move {
                let _ = l.check("hot").await.unwrap();
            }
        })
        .await;
        let per = leased.round_trips() as f64 / leased.decisions().max(1) as f64;
        println!(
            "| one hot key under its limit (10⁶/s), max lease {max_lease} | {:.0} | {:.1} | {:.1} | {per:.3} |",
            run.per_second(),
            run.p50_us,
            run.p99_us
        );
    }
    // Overshoot: 4 instances (own connections), one key at 2 000/s, burst 200,
    // max lease 32, lifetime 1 s, all overloaded; admitted vs the exact B + r·t.
    let (instances, max_lease, rate, burst) = (4u32, 32u64, 2_000.0, 200.0);
    let quota = Quota::per_second(2_000).unwrap().with_burst(200).unwrap();
    let config = LeaseConfig::builder().max_lease(max_lease).instances(instances).build().unwrap();
    let mut clients = Vec::new();
    for _ in 0..instances {
        let redis = Redis::connect(url).await.unwrap();
        let limiter = RedisLimiter::builder(&redis, quota).prefix("bench:overshoot:").build().unwrap();
        clients.push(Arc::new(Leased::new(limiter, config).unwrap()));
    }
    let admitted = Arc::new(weir_rl_core::__private::sync::AtomicU64::new(0));
    let started = Instant::now();
    let mut handles = Vec::new();
    for c in &clients {
        for _ in 0..TASKS / instances as usize {
            let (c, admitted) = (c.clone(), admitted.clone());
            handles.push(tokio::spawn(async move {
                let deadline = Instant::now() + Duration::from_secs_f64(secs);
                while Instant::now() < deadline {
                    if c.check("shared").await.unwrap().is_allowed() {
                        // Ordering: Relaxed; a count read after the tasks are joined.
                        admitted.fetch_add(1, weir_rl_core::__private::sync::Ordering::Relaxed);
                    }
                }
            }));
        }
    }
    for h in handles {
        h.await.unwrap();
    }
    let elapsed = started.elapsed().as_secs_f64();
    // Ordering: Relaxed; the tasks are joined.
    let admitted = admitted.load(weir_rl_core::__private::sync::Ordering::Relaxed) as f64;
    let exact = burst + rate * elapsed;
    let (decisions, trips): (u64, u64) =
        clients.iter().map(|c| (c.decisions(), c.round_trips())).fold((0, 0), |a, b| (a.0 + b.0, a.1 + b.1));
    println!(
        "| 4 instances, one overloaded key (2 000/s, burst 200), max lease 32 | {:.0} | | | {:.3} |",
        decisions as f64 / elapsed,
        trips as f64 / decisions.max(1) as f64
    );
    println!();
    println!(
        "overshoot: admitted {admitted:.0} in {elapsed:.2} s against the exact {exact:.0} (B + r·t): {:+.0} \
         (bound min(N·L, r·lifetime) = {:.0})",
        admitted - exact,
        (f64::from(instances) * max_lease as f64).min(rate)
    );
}

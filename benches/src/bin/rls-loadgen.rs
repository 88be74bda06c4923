//! `rls-loadgen`: a load generator for Envoy rate-limit services (weir-rls,
//! Limitador, envoyproxy/ratelimit: anything that serves
//! `envoy.service.ratelimit.v3.RateLimitService`). Many gRPC connections, many calls
//! in flight on each; reports decisions per second, latency percentiles, the
//! answers' codes, and the server's CPU time per decision (user + system, read from
//! `/proc/<pid>/stat` before and after the run, when given the server's pid).
//!
//! ```text
//! cargo run --release -p weir-bench --features rls --bin rls-loadgen -- \
//!     --target 127.0.0.1:8081 --pid $(pgrep -n weir-rls) --scenario spread --connections 2 --in-flight 16 --duration 5s
//! ```
//!
//! The scenarios are those of `weir_bench::rls` (domain `bench`; the configs for
//! weir-rls and Limitador, and `run.sh`, the comparison, are in `benches/rls/`).
//! `--requests N` sends N calls and stops (for a server run under callgrind: its
//! instructions over a known number of decisions).

use clap::Parser;
use hdrhistogram::Histogram;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};
use weir_bench::rls::{Requests, Scenario};
use weir_rls::proto::rate_limit_response::Code;
use weir_rls::proto::rate_limit_service_client::RateLimitServiceClient;

#[derive(Debug, Parser)]
#[command(name = "rls-loadgen", about = "Load for Envoy rate-limit services (gRPC v3)")]
struct Args {
    /// The service's gRPC address.
    #[arg(long, default_value = "127.0.0.1:8081")]
    target: String,
    /// The server's process id, for its CPU time (Linux /proc).
    #[arg(long)]
    pid: Option<u32>,
    /// What each request asks.
    #[arg(long, value_enum, default_value_t = Scenario::Spread)]
    scenario: Scenario,
    /// gRPC connections (HTTP/2).
    #[arg(long, default_value_t = 2)]
    connections: usize,
    /// Calls in flight on each connection.
    #[arg(long, default_value_t = 16)]
    in_flight: usize,
    /// How long to measure.
    #[arg(long, value_parser = humantime::parse_duration, default_value = "5s")]
    duration: Duration,
    /// Measure this many calls instead of a duration (then stop).
    #[arg(long)]
    requests: Option<u64>,
    /// Load before measuring (connections warm, counters made), not counted.
    #[arg(long, value_parser = humantime::parse_duration, default_value = "1s")]
    warmup: Duration,
    /// How many client values `spread` and `three` draw from.
    #[arg(long, default_value_t = 100_000)]
    values: u64,
    /// The domain.
    #[arg(long, default_value = "bench")]
    domain: String,
    /// A name for the target in the report.
    #[arg(long, default_value = "target")]
    label: String,
    /// One CSV line instead of the text report (header with --csv-header).
    #[arg(long)]
    csv: bool,
    /// Print the CSV header first.
    #[arg(long)]
    csv_header: bool,
}

/// What one caller saw.
struct Tally {
    latency_us: Histogram<u64>,
    ok: u64,
    over: u64,
    errors: u64,
    first_error: Option<String>,
}

impl Tally {
    fn new() -> Self {
        Self {
            latency_us: Histogram::new_with_bounds(1, 60_000_000, 3).expect("histogram bounds"),
            ok: 0,
            over: 0,
            errors: 0,
            first_error: None,
        }
    }

    fn add(&mut self, other: Tally) {
        let _ = self.latency_us.add(&other.latency_us);
        self.ok += other.ok;
        self.over += other.over;
        self.errors += other.errors;
        if self.first_error.is_none() {
            self.first_error = other.first_error;
        }
    }
}

/// When the callers stop: at a time, or once the measured calls are all sent.
struct Stop {
    end: Instant,
    /// With `--requests`: how many measured calls may still be sent.
    left: Option<AtomicU64>,
}

impl Stop {
    /// Whether to stop rather than send a call at `sent` (`measured`: after the
    /// warm-up; with `--requests`, a measured call takes a ticket).
    fn reached(&self, sent: Instant, measured: bool) -> bool {
        match &self.left {
            // Ordering: a count of tickets; nothing else is published through it.
            Some(left) => {
                measured && left.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| n.checked_sub(1)).is_err()
            }
            None => sent >= self.end,
        }
    }
}

/// One caller: calls back to back on `client` until `stop`, counting from `start`.
async fn caller(
    mut requests: Requests,
    mut client: RateLimitServiceClient<tonic::transport::Channel>,
    start: Instant,
    stop: Arc<Stop>,
) -> Tally {
    let mut tally = Tally::new();
    loop {
        let request = requests.next_request();
        let sent = Instant::now();
        if stop.reached(sent, sent >= start) {
            return tally;
        }
        let result = client.should_rate_limit(request).await;
        let done = Instant::now();
        if sent < start {
            continue;
        }
        let us = u64::try_from(done.duration_since(sent).as_micros()).unwrap_or(u64::MAX).max(1);
        let _ = tally.latency_us.record(us.min(60_000_000));
        match result.map(|r| Code::try_from(r.into_inner().overall_code)) {
            Ok(Ok(Code::Ok)) => tally.ok += 1,
            Ok(Ok(Code::OverLimit)) => tally.over += 1,
            Ok(_) => tally.errors += 1,
            Err(status) => {
                tally.errors += 1;
                if tally.first_error.is_none() {
                    tally.first_error = Some(format!("{:?}: {}", status.code(), status.message()));
                }
            }
        }
    }
}

/// The process's user + system CPU time (`/proc/<pid>/stat`, fields 14 and 15, in
/// clock ticks of 1/100 s, Linux's USER_HZ).
fn cpu_time(pid: u32) -> Option<Duration> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name (field 2) is in parentheses and may hold spaces.
    let rest = &stat[stat.rfind(')')? + 2..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // `rest` starts at field 3 (state): utime is field 14, stime 15.
    let utime: u64 = fields.get(11)?.parse().ok()?;
    let stime: u64 = fields.get(12)?.parse().ok()?;
    Some(Duration::from_millis((utime + stime) * 10))
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args = Args::parse();
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
    runtime.block_on(async move {
        let endpoint = tonic::transport::Endpoint::from_shared(format!("http://{}", args.target))?;
        let mut channels = Vec::with_capacity(args.connections);
        for _ in 0..args.connections {
            // One channel per connection: tonic multiplexes a channel's calls on one
            // HTTP/2 connection.
            channels.push(endpoint.connect().await?);
        }
        let start = Instant::now() + args.warmup;
        let stop = Arc::new(Stop { end: start + args.duration, left: args.requests.map(AtomicU64::new) });
        let mut tasks = Vec::new();
        for (c, channel) in channels.iter().enumerate() {
            for i in 0..args.in_flight {
                let client = RateLimitServiceClient::new(channel.clone());
                let seed = 0x9e37_79b9_7f4a_7c15_u64.wrapping_mul((c * args.in_flight + i + 1) as u64);
                let requests = Requests::new(args.scenario, args.values, &args.domain, seed);
                tasks.push(tokio::spawn(caller(requests, client, start, Arc::clone(&stop))));
            }
        }
        tokio::time::sleep_until(start.into()).await;
        let cpu_before = args.pid.and_then(cpu_time);
        let measured_from = Instant::now();
        let mut total = Tally::new();
        for task in tasks {
            total.add(task.await?);
        }
        let elapsed = match args.requests {
            Some(_) => measured_from.elapsed(),
            None => measured_from.elapsed().min(args.duration + Duration::from_millis(100)),
        };
        let cpu_after = args.pid.and_then(cpu_time);
        let decisions = total.ok + total.over;
        let per_second = decisions as f64 / elapsed.as_secs_f64();
        let cpu = cpu_before.zip(cpu_after).map(|(b, a)| a.saturating_sub(b));
        let cpu_us_per_decision = cpu.map(|c| c.as_secs_f64() * 1e6 / decisions.max(1) as f64);
        let p = |q: f64| total.latency_us.value_at_quantile(q);
        if args.csv {
            if args.csv_header {
                println!(
                    "label,scenario,connections,in_flight,seconds,decisions_per_s,ok,over_limit,errors,p50_us,p99_us,p999_us,server_cpu_s,server_cpu_us_per_decision"
                );
            }
            println!(
                "{},{},{},{},{:.2},{:.0},{},{},{},{},{},{},{},{}",
                args.label,
                args.scenario.name(),
                args.connections,
                args.in_flight,
                elapsed.as_secs_f64(),
                per_second,
                total.ok,
                total.over,
                total.errors,
                p(0.5),
                p(0.99),
                p(0.999),
                cpu.map_or(String::new(), |c| format!("{:.2}", c.as_secs_f64())),
                cpu_us_per_decision.map_or(String::new(), |c| format!("{c:.1}")),
            );
        } else {
            println!(
                "{} {}: {} connections x {} in flight, {:.1} s",
                args.label,
                args.scenario.name(),
                args.connections,
                args.in_flight,
                elapsed.as_secs_f64()
            );
            println!(
                "  {per_second:.0} decisions/s ({} OK, {} OVER_LIMIT, {} errors)",
                total.ok, total.over, total.errors
            );
            println!("  latency p50 {} us, p99 {} us, p99.9 {} us", p(0.5), p(0.99), p(0.999));
            match (cpu, cpu_us_per_decision) {
                (Some(cpu), Some(per)) => {
                    println!("  server CPU {:.2} s (user + system): {per:.1} us per decision", cpu.as_secs_f64())
                }
                _ => println!("  server CPU: not measured (--pid)"),
            }
            if let Some(error) = &total.first_error {
                println!("  first error: {error}");
            }
        }
        Ok(())
    })
}

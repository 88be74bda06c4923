//! What the middleware adds to a request, in process: an axum `Router` called as a
//! tower `Service` on freshly built requests (no network), with and without the
//! layer, against `tower_governor` on the same handler in the same run.
//!
//! ```text
//! cargo bench -p weir-tower --bench layer            # 5 rounds of 200 000 requests per case
//! cargo bench -p weir-tower --bench layer -- --quick # 5 rounds of 20 000
//! cargo bench -p weir-tower --bench layer -- --serve 2 127.0.0.1:3000   # case 2 on a port, for wrk
//! cargo bench -p weir-tower --features metrics --bench layer   # + the layer under a Prometheus recorder
//! ```
//!
//! With the `metrics` feature, the weir cases run with the feature's handles and no
//! recorder (every handle a no-op), and two more cases run a layer built under a
//! Prometheus recorder (`metrics-exporter-prometheus`, as a server would install
//! it): the difference is what counting a decision costs.
//!
//! Each round runs every case in turn, each in 20 slices that alternate with slices
//! of the bare router; "added" is the median of the paired differences in a round,
//! and each figure is the median over the rounds (so load that drifts on a shared
//! machine cancels out). Allocations per request are counted by a counting global
//! allocator (same cases, one extra pass).
//! Measurements, not tests: nothing here asserts a time.

use axum::Router;
use axum::body::Body;
use axum::extract::ConnectInfo;
use axum::routing::get;
use http::{Request, StatusCode};
use std::alloc::{GlobalAlloc, Layout, System};
use std::hint::black_box;
use std::net::SocketAddr;
use std::time::{Duration, Instant};
use tower::Service;
use weir_rl_core::__private::sync::{AtomicU64, Ordering};

/// Counts allocations (all threads; the benchmark runs on one).
struct Counting;

static ALLOCATIONS: AtomicU64 = AtomicU64::new(0);

// SAFETY: every method forwards to `System`, which upholds `GlobalAlloc`'s contract;
// the counter only observes.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // Ordering: Relaxed; a statistic.
        ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        // SAFETY: the caller's contract is `System::alloc`'s.
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: the caller's contract is `System::dealloc`'s.
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // Ordering: Relaxed; a statistic.
        ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        // SAFETY: the caller's contract is `System::realloc`'s.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

struct Case {
    name: &'static str,
    router: Router,
    peer: SocketAddr,
    expect: StatusCode,
}

fn request(peer: SocketAddr) -> Request<Body> {
    let mut request = Request::get("/").body(Body::empty()).expect("a request");
    request.extensions_mut().insert(ConnectInfo(peer));
    request
}

fn handler() -> Router {
    Router::new().route("/", get(|| async { "hello" }))
}

/// The weir layer: one client IP per store key, GCRA with a burst of 999 (three
/// digits in the headers) refilled faster than one thread can ask, so the allowed
/// cases never run out; with `deny`, one per day, exhausted first. `legacy`: the
/// file says nothing of the legacy headers (the default: `RateLimit` and
/// `RateLimit-Policy`), or `legacy_headers = true` (all five).
fn weir(legacy: bool, deny: bool) -> Router {
    let quota = if deny { "limit = 1, window = \"1d\"" } else { "limit = 1000000000, window = \"1m\", burst = 999" };
    let legacy = if legacy { "legacy_headers = true\n" } else { "" };
    let toml = format!(
        "{legacy}[[policy]]\nname = \"api\"\ndefault = true\n[[policy.limit]]\nkey = \"ip\"\n\
         quotas = [{{ name = \"minute\", algorithm = \"gcra\", {quota} }}]\n"
    );
    let layer = weir_tower::Config::from_toml(&toml).and_then(|c| c.layer()).expect("a valid configuration");
    handler().layer(layer)
}

fn governor(headers: bool, deny: bool) -> Router {
    use tower_governor::GovernorLayer;
    use tower_governor::governor::GovernorConfigBuilder;
    let mut builder = GovernorConfigBuilder::default();
    if deny {
        builder.period(Duration::from_secs(86_400)).burst_size(1);
    } else {
        builder.per_nanosecond(1).burst_size(999);
    }
    if headers {
        let config = builder.use_headers().finish().expect("a governor config");
        handler().layer(GovernorLayer::new(config))
    } else {
        let config = builder.finish().expect("a governor config");
        handler().layer(GovernorLayer::new(config))
    }
}

/// As `axum::serve` does (`into_make_service` calls `with_state`), every router is
/// finished before it serves: handlers and layers are turned into routes once, not on
/// every request.
fn finished(router: Router) -> Router {
    router.with_state(())
}

async fn run(case: &Case, n: u32) -> Duration {
    let mut service = case.router.clone();
    let start = Instant::now();
    for _ in 0..n {
        let response = service.call(request(case.peer)).await.expect("infallible");
        black_box(response);
    }
    start.elapsed() / n
}

fn median(mut xs: Vec<Duration>) -> Duration {
    xs.sort();
    xs[xs.len() / 2]
}

fn main() {
    let quick = std::env::args().any(|a| a == "--quick");
    let n: u32 = if quick { 20_000 } else { 200_000 };
    let rounds = 5;
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("a runtime");
    let allowed: SocketAddr = "192.0.2.1:5000".parse().expect("an address");
    let denied: SocketAddr = "192.0.2.2:5000".parse().expect("an address");

    #[allow(unused_mut)] // pushed to with the `metrics` feature
    let mut cases = vec![
        Case { name: "bare router (baseline)", router: finished(handler()), peer: allowed, expect: StatusCode::OK },
        Case {
            name: "empty Identity layer",
            router: finished(handler().layer(tower::layer::util::Identity::new())),
            peer: allowed,
            expect: StatusCode::OK,
        },
        Case {
            name: "weir, allowed, default (RateLimit, RateLimit-Policy)",
            router: finished(weir(false, false)),
            peer: allowed,
            expect: StatusCode::OK,
        },
        Case {
            name: "weir, allowed, legacy_headers = true (all five)",
            router: finished(weir(true, false)),
            peer: allowed,
            expect: StatusCode::OK,
        },
        Case {
            name: "weir, 429 + problem+json, default",
            router: finished(weir(false, true)),
            peer: denied,
            expect: StatusCode::TOO_MANY_REQUESTS,
        },
        Case {
            name: "weir, 429 + problem+json, legacy_headers = true",
            router: finished(weir(true, true)),
            peer: denied,
            expect: StatusCode::TOO_MANY_REQUESTS,
        },
        Case {
            name: "tower_governor, allowed, no headers",
            router: finished(governor(false, false)),
            peer: allowed,
            expect: StatusCode::OK,
        },
        Case {
            name: "tower_governor, allowed, headers",
            router: finished(governor(true, false)),
            peer: allowed,
            expect: StatusCode::OK,
        },
        Case {
            name: "tower_governor, 429",
            router: finished(governor(false, true)),
            peer: denied,
            expect: StatusCode::TOO_MANY_REQUESTS,
        },
    ];
    // The layer's handles registered with a Prometheus recorder, as a server that
    // installs one before building its layer has them (the other cases are built
    // with no recorder: their handles are no-ops).
    #[cfg(feature = "metrics")]
    let prometheus = metrics_exporter_prometheus::PrometheusBuilder::new().build_recorder();
    #[cfg(feature = "metrics")]
    for (name, (legacy, deny), peer, expect) in [
        ("weir, allowed, default, Prometheus recorder", (false, false), allowed, StatusCode::OK),
        (
            "weir, 429 + problem+json, default, Prometheus recorder",
            (false, true),
            denied,
            StatusCode::TOO_MANY_REQUESTS,
        ),
    ] {
        let router = metrics::with_local_recorder(&prometheus, || finished(weir(legacy, deny)));
        cases.push(Case { name, router, peer, expect });
    }

    if let Some(serve) = std::env::args().skip_while(|a| a != "--serve").nth(1) {
        // One case on a loopback port, for a load generator in another process:
        // `-- --serve 2 127.0.0.1:3000`, then `wrk -t2 -c32 -d10s http://127.0.0.1:3000/`.
        let case = &cases[serve.parse::<usize>().expect("a case index")];
        let addr = std::env::args().skip_while(|a| a != "--serve").nth(2).unwrap_or_else(|| "127.0.0.1:3000".into());
        let server = tokio::runtime::Builder::new_multi_thread().enable_all().build().expect("a runtime");
        server.block_on(async {
            let listener = tokio::net::TcpListener::bind(&addr).await.expect("the address");
            eprintln!("{} on http://{addr}/", case.name);
            let app = case.router.clone().into_make_service_with_connect_info::<SocketAddr>();
            axum::serve(listener, app).await.expect("serve");
        });
        return;
    }

    if let Some(only) = std::env::args().skip_while(|a| a != "--only").nth(1) {
        // One case, for a profiler: `-- --only 2`.
        let case = &cases[only.parse::<usize>().expect("a case index")];
        runtime.block_on(async {
            let _ = case.router.clone().call(request(case.peer)).await;
            let t = run(case, n * 10).await;
            println!("{}: {} ns per request", case.name, t.as_nanos());
        });
        return;
    }

    runtime.block_on(async {
        // Exhaust the denied peers, check every case answers as expected, warm up.
        for case in &cases {
            let mut service = case.router.clone();
            let _ = service.call(request(case.peer)).await;
            let response = service.call(request(case.peer)).await.expect("infallible");
            assert_eq!(response.status(), case.expect, "{}", case.name);
            run(case, n / 10).await;
        }
        // A round runs each case in 20 slices, each right after a slice of the bare
        // router: "added" is the median of the paired differences, so a load that
        // drifts over seconds (a shared machine) cancels out.
        let slices = 20;
        let mut times: Vec<Vec<Duration>> = vec![Vec::new(); cases.len()];
        let mut added: Vec<Vec<i128>> = vec![Vec::new(); cases.len()];
        for round in 0..rounds {
            for (i, case) in cases.iter().enumerate() {
                let (mut own, mut diffs) = (Vec::new(), Vec::new());
                for _ in 0..slices {
                    let bare = run(&cases[0], n / slices).await;
                    let this = run(case, n / slices).await;
                    own.push(this);
                    diffs.push(this.as_nanos() as i128 - bare.as_nanos() as i128);
                }
                times[i].push(median(own));
                diffs.sort();
                added[i].push(diffs[diffs.len() / 2]);
            }
            eprintln!("round {}/{rounds} done", round + 1);
        }
        let mut allocations = Vec::new();
        for case in &cases {
            let mut service = case.router.clone();
            let requests: Vec<_> = (0..1000).map(|_| request(case.peer)).collect();
            // Ordering: Relaxed; a statistic read on the only thread that allocates.
            let before = ALLOCATIONS.load(Ordering::Relaxed);
            for request in requests {
                black_box(service.call(request).await.expect("infallible"));
            }
            // Ordering: Relaxed; see above.
            allocations.push((ALLOCATIONS.load(Ordering::Relaxed) - before) as f64 / 1000.0);
        }

        println!(
            "| case | ns per request (median of {rounds}) | added over the bare router (median of {rounds}) | allocations per request |"
        );
        println!("|---|---:|---:|---:|");
        for (i, case) in cases.iter().enumerate() {
            let m = median(times[i].clone());
            let mut a = added[i].clone();
            a.sort();
            let a = if i == 0 { "—".to_owned() } else { format!("{:+}", a[a.len() / 2]) };
            println!("| {} | {} | {a} | {:.1} |", case.name, m.as_nanos(), allocations[i]);
        }
        println!("\n{n} requests per case per round in {slices} slices, each after a slice of the bare router; {rounds} rounds; one thread.");
    });
}

//! What the middleware adds to a request, in process: an actix-web app called as a
//! service on freshly built requests (no network), with and without the middleware,
//! against actix-governor on the same handler in the same run.
//!
//! ```text
//! cargo bench -p weir-actix-bench --bench middleware             # 5 rounds of 200 000 requests per case
//! cargo bench -p weir-actix-bench --bench middleware -- --quick  # 5 rounds of 20 000
//! cargo bench -p weir-actix-bench --bench middleware -- --quick --only 1   # one case (200 001 requests), for callgrind
//! ```
//!
//! Each round runs every case in turn, each in 20 slices that alternate with slices
//! of the bare app; "added" is the median of the paired differences in a round, and
//! each figure is the median over the rounds (so load that drifts on a shared
//! machine cancels out). Measurements, not tests: nothing here asserts a time.

use actix_web::body::MessageBody;
use actix_web::dev::{Service, ServiceResponse};
use actix_web::http::StatusCode;
use actix_web::test::{TestRequest, init_service};
use actix_web::{App, HttpResponse, web};
use std::future::Future;
use std::hint::black_box;
use std::net::SocketAddr;
use std::pin::Pin;
use std::rc::Rc;
use std::time::{Duration, Instant};

/// Runs `n` requests through one case's app: the time per request, and the last
/// status.
type Runner = Box<dyn Fn(u32) -> Pin<Box<dyn Future<Output = (Duration, StatusCode)>>>>;

fn runner<S, B>(service: S, peer: SocketAddr) -> Runner
where
    S: Service<actix_http::Request, Response = ServiceResponse<B>, Error = actix_web::Error> + 'static,
    B: MessageBody + 'static,
{
    let service = Rc::new(service);
    Box::new(move |n| {
        let service = Rc::clone(&service);
        Box::pin(async move {
            let mut status = StatusCode::OK;
            let start = Instant::now();
            for _ in 0..n {
                let request = TestRequest::get().uri("/").peer_addr(peer).to_request();
                let response = service.call(request).await.expect("a response");
                status = response.status();
                black_box(response);
            }
            (start.elapsed() / n.max(1), status)
        })
    })
}

async fn hello() -> HttpResponse {
    HttpResponse::Ok().body("hello")
}

/// weir: one client IP per store key, GCRA with a burst of 999 (three digits in
/// the headers) refilled faster than one thread can ask, so the allowed cases never
/// run out; with `deny`, one a day, exhausted first. `legacy`: the file says nothing
/// of the legacy headers (the default: `RateLimit` and `RateLimit-Policy`), or
/// `legacy_headers = true` (all five).
fn weir(legacy: bool, deny: bool) -> weir_actix::RateLimit {
    let quota = if deny { "limit = 1, window = \"1d\"" } else { "limit = 1000000000, window = \"1m\", burst = 999" };
    let legacy = if legacy { "legacy_headers = true\n" } else { "" };
    let toml = format!(
        "{legacy}[[policy]]\nname = \"api\"\ndefault = true\n[[policy.limit]]\nkey = \"ip\"\n\
         quotas = [{{ name = \"minute\", algorithm = \"gcra\", {quota} }}]\n"
    );
    weir_actix::RateLimit::from_config(weir_actix::Config::from_toml(&toml).expect("a valid file")).expect("limits")
}

fn governor(
    deny: bool,
) -> actix_governor::GovernorConfigBuilder<
    actix_governor::PeerIpKeyExtractor,
    actix_governor::governor::middleware::NoOpMiddleware,
> {
    let mut builder = actix_governor::GovernorConfigBuilder::default();
    if deny {
        builder.period(Duration::from_secs(86_400)).burst_size(1);
    } else {
        builder.nanoseconds_per_request(1).burst_size(999);
    }
    builder
}

const NAMES: [&str; 8] = [
    "bare app (baseline)",
    "weir, allowed, default (RateLimit, RateLimit-Policy)",
    "weir, allowed, legacy_headers = true (all five)",
    "weir, 429 + problem+json, default",
    "weir, 429 + problem+json, legacy_headers = true",
    "actix-governor, allowed, no headers",
    "actix-governor, allowed, headers",
    "actix-governor, 429",
];

async fn case(i: usize, allowed: SocketAddr, denied: SocketAddr) -> (Runner, StatusCode) {
    use actix_governor::Governor;
    let ok = StatusCode::OK;
    let limited = StatusCode::TOO_MANY_REQUESTS;
    macro_rules! app {
        ($app:expr, $peer:expr, $expect:expr) => {{
            let service = init_service($app.route("/", web::get().to(hello))).await;
            (runner(service, $peer), $expect)
        }};
    }
    match i {
        0 => app!(App::new(), allowed, ok),
        1 => app!(App::new().wrap(weir(false, false)), allowed, ok),
        2 => app!(App::new().wrap(weir(true, false)), allowed, ok),
        3 => app!(App::new().wrap(weir(false, true)), denied, limited),
        4 => app!(App::new().wrap(weir(true, true)), denied, limited),
        5 => app!(App::new().wrap(Governor::new(&governor(false).finish().expect("a config"))), allowed, ok),
        6 => {
            let config = governor(false).use_headers().finish().expect("a config");
            app!(App::new().wrap(Governor::new(&config)), allowed, ok)
        }
        _ => app!(App::new().wrap(Governor::new(&governor(true).finish().expect("a config"))), denied, limited),
    }
}

fn median(mut xs: Vec<Duration>) -> Duration {
    xs.sort();
    xs[xs.len() / 2]
}

fn main() {
    let quick = std::env::args().any(|a| a == "--quick");
    let n: u32 = if quick { 20_000 } else { 200_000 };
    let rounds = 5;
    let allowed: SocketAddr = "192.0.2.1:5000".parse().expect("an address");
    let denied: SocketAddr = "192.0.2.2:5000".parse().expect("an address");
    actix_web::rt::System::new().block_on(async move {
        if let Some(only) = std::env::args().skip_while(|a| a != "--only").nth(1) {
            // One case, for a profiler: `-- --only 1`.
            let i = only.parse::<usize>().expect("a case index");
            let (run, _) = case(i, allowed, denied).await;
            let _ = run(1).await;
            let (t, _) = run(n * 10).await;
            println!("{}: {} ns per request", NAMES[i], t.as_nanos());
            return;
        }
        let mut cases = Vec::new();
        for (i, name) in NAMES.iter().enumerate() {
            let (run, expect) = case(i, allowed, denied).await;
            // Exhaust the denied peer, check the answer, warm up.
            let _ = run(1).await;
            let (_, status) = run(1).await;
            assert_eq!(status, expect, "{name}");
            run(n / 10).await;
            cases.push(run);
        }
        let slices = 20;
        let mut times: Vec<Vec<Duration>> = vec![Vec::new(); cases.len()];
        let mut added: Vec<Vec<i128>> = vec![Vec::new(); cases.len()];
        for round in 0..rounds {
            for (i, run) in cases.iter().enumerate() {
                let (mut own, mut diffs) = (Vec::new(), Vec::new());
                for _ in 0..slices {
                    let (bare, _) = cases[0](n / slices).await;
                    let (this, _) = run(n / slices).await;
                    own.push(this);
                    diffs.push(this.as_nanos() as i128 - bare.as_nanos() as i128);
                }
                times[i].push(median(own));
                diffs.sort();
                added[i].push(diffs[diffs.len() / 2]);
            }
            eprintln!("round {}/{rounds} done", round + 1);
        }
        println!("| case | ns per request (median of {rounds}) | added over the bare app (median of {rounds}) |");
        println!("|---|---:|---:|");
        for (i, name) in NAMES.iter().enumerate() {
            let m = median(times[i].clone());
            let mut a = added[i].clone();
            a.sort();
            let a = if i == 0 { "—".to_owned() } else { format!("{:+}", a[a.len() / 2]) };
            println!("| {name} | {} | {a} |", m.as_nanos());
        }
        println!("\n{n} requests per case per round in {slices} slices, each after a slice of the bare app; {rounds} rounds; one thread.");
    });
}

//! A soak of the whole server path: a real axum server on 127.0.0.1 with a tiered
//! limit (API key), a per-IP limit (the client behind a trusted loopback proxy, read
//! from `X-Forwarded-For`) and a per-user limit, driven by a hyper client over a few
//! keep-alive connections, every request from a new client: a fresh API key, a fresh
//! address and a fresh user (a few returning API keys among them).
//!
//! What holds, checked at the end: every request was answered (a request unanswered
//! after [`REQUEST_TIMEOUT`] is a failure, and stops the run), and admitted (every
//! key is new, and a full store evicts a key gone idle, as they all are a
//! millisecond after their request); the process's resident memory (`VmRSS`) never
//! rose above [`RSS_BOUND_BYTES`]; the tier cache holds at most its 10 000 answers
//! and their bytes, and kept the returning keys; the stores hold at most their
//! 100 000 keys.
//!
//! 1 million requests in optimized builds (`cargo test --profile fast -p soak-tests`,
//! which CI runs), 60 000 in debug builds: both past the 38 000 or so
//! distinct keys after which a tier cache trimmed by hand once hung the server.
//!
//! The server runs on a runtime of its own, shut down in the background at the end,
//! so a server that hangs fails this test instead of hanging it.

use axum::Router;
use axum::routing::get;
use bytes::Bytes;
use http::{Request, StatusCode};
use http_body_util::{BodyExt, Empty};
use hyper_util::rt::TokioIo;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};
use weir_keyed::{KeyedConfig, KeyedGcra};
use weir_rl_core::Quota;
use weir_tower::{ClientIp, Key, KeySource, Limit, Policy, RateLimitLayer, Store, Tiers, User};

/// Requests sent, all told.
const REQUESTS: u64 = if cfg!(debug_assertions) { 60_000 } else { 1_000_000 };
/// Keep-alive connections, each sending its requests one after another.
const CONNECTIONS: u64 = 4;
/// The keys each store holds at most.
const MAX_KEYS: usize = 100_000;
/// The answers the tier cache holds at most (its default).
const TIER_CACHE: usize = 10_000;
/// Every `RETURNING_EVERY`-th request carries one of `RETURNING` API keys that come
/// back, the others a new one.
const RETURNING_EVERY: u64 = 8;
const RETURNING: u64 = 64;
/// A request unanswered after this long is a failure: a hang, not a slow answer
/// (the run shares its cores with other work, and a paused process answers late).
const REQUEST_TIMEOUT: Duration = Duration::from_secs(60);
/// The process's resident memory at most, sampled every 50 ms: the test binary, the
/// runtimes and the connections' buffers (about 20 MB); four stores of 100 000 keys
/// (about 160 bytes a key with its table, so 64 MB); the tier cache (at most
/// 5.12 MB). Measured: a peak of about 40 MB. A cache that grows without bound
/// passes it within a second.
const RSS_BOUND_BYTES: u64 = 128 << 20;

/// A per-key GCRA store of 100 000 keys on the monotonic clock: a thousand requests a
/// second a key, so a key is idle (and can be evicted for a new one) a millisecond
/// after its request.
fn store() -> Arc<KeyedGcra<Key>> {
    let config = KeyedConfig::builder(MAX_KEYS).build().expect("a store of 100 000 keys");
    Arc::new(KeyedGcra::gcra(Quota::per_second(1_000).expect("1 000 a second"), config))
}

/// The resident memory of this process, from `/proc/self/status`.
fn rss_bytes() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").expect("/proc/self/status");
    let kb = status
        .lines()
        .find_map(|line| line.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().strip_suffix("kB"))
        .and_then(|v| v.trim().parse::<u64>().ok())
        .expect("a VmRSS line in kB");
    kb * 1024
}

/// Request `i`'s headers: a fresh API key (or a returning one), a fresh client
/// address (IPv4 from 100.64.0.0/10, or one IPv6 /64 of 2001:db8::/32 each), a fresh
/// user.
fn headers(i: u64) -> [(&'static str, String); 3] {
    let api_key = if i.is_multiple_of(RETURNING_EVERY) {
        format!("returning-{}", (i / RETURNING_EVERY) % RETURNING)
    } else if i.is_multiple_of(2) {
        format!("pro-{i}")
    } else {
        format!("free-{i}")
    };
    let ip = if i.is_multiple_of(2) {
        let n = 0x6440_0000u32 | (i as u32 & 0x003f_ffff); // 100.64.0.0/10
        std::net::Ipv4Addr::from(n).to_string()
    } else {
        format!("2001:db8:{:x}:{:x}::1", (i >> 16) & 0xffff, i & 0xffff)
    };
    [("x-api-key", api_key), ("x-forwarded-for", ip), ("x-user", format!("user-{i}"))]
}

/// What the run saw.
struct Seen {
    ok: AtomicU64,
    other_status: AtomicU64,
    failures: AtomicU64,
    first_failure: std::sync::Mutex<Option<String>>,
    peak_rss: AtomicU64,
    /// Set at the first failure (or the end): every connection stops, even one
    /// waiting on an answer.
    stop: tokio::sync::watch::Sender<bool>,
}

impl Seen {
    fn new() -> Self {
        Self {
            ok: AtomicU64::new(0),
            other_status: AtomicU64::new(0),
            failures: AtomicU64::new(0),
            first_failure: std::sync::Mutex::new(None),
            peak_rss: AtomicU64::new(0),
            stop: tokio::sync::watch::Sender::new(false),
        }
    }

    fn fail(&self, why: String) {
        self.failures.fetch_add(1, Ordering::Relaxed);
        self.first_failure.lock().unwrap().get_or_insert(why);
        self.stop.send_replace(true);
    }

    fn stopped(&self) -> bool {
        *self.stop.borrow()
    }
}

/// Sends requests `conn`, `conn + CONNECTIONS`, … over one keep-alive connection.
async fn drive(addr: SocketAddr, conn: u64, seen: Arc<Seen>) {
    let stream = match tokio::net::TcpStream::connect(addr).await {
        Ok(stream) => stream,
        Err(e) => return seen.fail(format!("connection {conn}: {e}")),
    };
    let _ = stream.set_nodelay(true);
    let (mut sender, connection) = match hyper::client::conn::http1::handshake(TokioIo::new(stream)).await {
        Ok(pair) => pair,
        Err(e) => return seen.fail(format!("connection {conn}: handshake: {e}")),
    };
    let connection = tokio::spawn(connection);
    let mut stop = seen.stop.subscribe();
    let mut i = conn;
    while i < REQUESTS && !seen.stopped() {
        let mut request = Request::get("/api/data").header("host", "127.0.0.1");
        for (name, value) in headers(i) {
            request = request.header(name, value);
        }
        let request = request.body(Empty::<Bytes>::new()).expect("a request");
        let exchange = tokio::time::timeout(REQUEST_TIMEOUT, async {
            if let Err(e) = sender.ready().await {
                return Err(format!("not ready: {e}"));
            }
            let response = sender.send_request(request).await.map_err(|e| format!("{e}"))?;
            let status = response.status();
            let body = response.into_body().collect().await.map_err(|e| format!("the body: {e}"))?.to_bytes();
            Ok((status, body))
        });
        let answered = tokio::select! {
            answered = exchange => answered,
            _ = stop.wait_for(|stop| *stop) => break,
        };
        match answered {
            Ok(Ok((StatusCode::OK, _))) => seen.ok.fetch_add(1, Ordering::Relaxed),
            Ok(Ok((status, body))) => {
                if seen.other_status.fetch_add(1, Ordering::Relaxed) == 0 {
                    let body = String::from_utf8_lossy(&body);
                    seen.first_failure.lock().unwrap().get_or_insert(format!("request {i}: {status} {body}"));
                }
                0
            }
            Ok(Err(e)) => return seen.fail(format!("request {i}: {e}")),
            Err(_) => return seen.fail(format!("request {i}: no answer within {REQUEST_TIMEOUT:?}")),
        };
        i += CONNECTIONS;
    }
    drop(sender);
    connection.abort();
}

#[test]
fn a_million_new_clients_are_all_answered_within_bounded_memory() {
    let started = Instant::now();
    let server = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .thread_name("soak-server")
        .enable_all()
        .build()
        .expect("the server's runtime");
    let client = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .thread_name("soak-client")
        .enable_all()
        .build()
        .expect("the client's runtime");

    let (free, pro, per_ip, per_user) = (store(), store(), store(), store());
    let returning_lookups = Arc::new(AtomicUsize::new(0));
    let counted = Arc::clone(&returning_lookups);
    let tiers = Arc::new(
        Tiers::builder(move |key: Key| {
            let payload = key.payload();
            if payload.starts_with(b"returning-") {
                counted.fetch_add(1, Ordering::Relaxed);
            }
            let tier = if payload.starts_with(b"pro-") { "pro" } else { "free" };
            async move { Ok::<_, String>(tier) }
        })
        .tier("free", Store::local(Arc::clone(&free)))
        .tier("pro", Store::local(Arc::clone(&pro)))
        .max_entries(TIER_CACHE)
        // A day, not the default 300 s: the returning keys' answers must still be
        // cached at the end however long the run takes on a loaded machine.
        .ttl(Duration::from_secs(86_400))
        .build()
        .expect("the tiers"),
    );
    let client_ip = ClientIp::builder().trust_proxies(["127.0.0.1"]).build().expect("trust the loopback proxy");
    let layer = RateLimitLayer::new(
        Policy::builder("api")
            .limit(Limit::tiered_shared(KeySource::header("x-api-key"), Arc::clone(&tiers)))
            .limit(Limit::new(KeySource::ip(client_ip), Store::local(Arc::clone(&per_ip))))
            .limit(Limit::new(KeySource::user(), Store::local(Arc::clone(&per_user))))
            .build()
            .expect("the policy"),
    );
    let app = Router::new()
        .route("/api/data", get(|| async { "data" }))
        .layer(layer)
        // Authentication: the `x-user` header is the user.
        .layer(axum::middleware::from_fn(|mut request: axum::extract::Request, next: axum::middleware::Next| async {
            let user = request.headers().get("x-user").and_then(|v| v.to_str().ok()).map(User::from);
            if let Some(user) = user {
                request.extensions_mut().insert(user);
            }
            next.run(request).await
        }));
    let addr = server.block_on(async {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind a loopback port");
        let addr = listener.local_addr().expect("the bound address");
        tokio::spawn(async move {
            let _ = axum::serve(listener, app.into_make_service_with_connect_info::<SocketAddr>()).await;
        });
        addr
    });

    let seen = Arc::new(Seen::new());
    client.block_on(async {
        let monitor = {
            let seen = Arc::clone(&seen);
            tokio::spawn(async move {
                let mut stop = seen.stop.subscribe();
                while !seen.stopped() {
                    let rss = rss_bytes();
                    seen.peak_rss.fetch_max(rss, Ordering::Relaxed);
                    if rss > RSS_BOUND_BYTES {
                        seen.fail(format!("resident memory {} MB, above the bound", rss >> 20));
                    }
                    let _ = tokio::time::timeout(Duration::from_millis(50), stop.wait_for(|stop| *stop)).await;
                }
            })
        };
        let drivers: Vec<_> = (0..CONNECTIONS).map(|conn| tokio::spawn(drive(addr, conn, Arc::clone(&seen)))).collect();
        for driver in drivers {
            driver.await.expect("a connection's driver");
        }
        seen.stop.send_replace(true);
        monitor.await.expect("the memory monitor");
    });
    let peak = seen.peak_rss.load(Ordering::Relaxed);
    // A server that hung keeps its worker; the process ends with the test binary.
    server.shutdown_background();
    client.shutdown_background();

    let (ok, other, failures) = (
        seen.ok.load(Ordering::Relaxed),
        seen.other_status.load(Ordering::Relaxed),
        seen.failures.load(Ordering::Relaxed),
    );
    let lens = [free.len(), pro.len(), per_ip.len(), per_user.len()];
    eprintln!(
        "{REQUESTS} requests over {CONNECTIONS} connections in {:.1} s: {ok} admitted, {other} otherwise answered, \
         {failures} failed; peak RSS {} MB (bound {} MB); tier cache {} answers, {} bytes; stores {lens:?}; \
         returning keys looked up {} times",
        started.elapsed().as_secs_f64(),
        peak >> 20,
        RSS_BOUND_BYTES >> 20,
        tiers.cached_len(),
        tiers.cached_bytes(),
        returning_lookups.load(Ordering::Relaxed),
    );
    let first = seen.first_failure.lock().unwrap().clone();
    assert_eq!(failures, 0, "requests unanswered: first {first:?}");
    assert_eq!((ok, other), (REQUESTS, 0), "every request is admitted: first refusal {first:?}");
    assert!(peak <= RSS_BOUND_BYTES, "peak RSS {peak} B above the bound {RSS_BOUND_BYTES} B");
    assert!(tiers.cached_len() <= TIER_CACHE, "{} answers cached", tiers.cached_len());
    assert!(tiers.cached_bytes() <= TIER_CACHE as u64 * 256, "{} bytes cached", tiers.cached_bytes());
    assert!(lens.iter().all(|&len| len <= MAX_KEYS), "store sizes {lens:?}");
    for r in 0..RETURNING {
        let key = Key::api_key(format!("returning-{r}").as_bytes());
        assert!(tiers.cached(&key).is_some(), "returning key {r} was evicted by one-off keys");
    }
    // Each returning key is looked up once, or twice when its first answer was
    // evicted before it came back (it then counts as asked for again).
    let looked_up = returning_lookups.load(Ordering::Relaxed);
    assert!(looked_up <= 2 * RETURNING as usize, "returning keys looked up {looked_up} times");
}

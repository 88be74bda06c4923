//! The scenarios, each written once against [`Harness`]: what any adapter of
//! weir-http answers, over a real server on loopback and a real HTTP client. Time
//! that matters is a manual clock, moved by the test; order is awaited, never
//! raced.

use super::harness::{Harness, HttpClient, Served, until};
use http::StatusCode;
use std::sync::Arc;
use std::time::Duration;
use weir_http::{Config, Key, KeySource, KeyedThrottle, Limit, Limits, Policy, Reloadable, Store};
use weir_keyed::{KeyedConfig, KeyedFixedWindow};
use weir_rl_core::{KeyedLimiter, ManualClock, Quota};

const HOUR: Duration = Duration::from_secs(3_600);

/// The limits of `toml`, on a clock that moves only when a test moves it.
fn limits(toml: &str) -> Limits {
    Config::from_toml(toml).expect("a valid file").clock(ManualClock::new()).limits().expect("limits")
}

fn fixed(toml: &str) -> Served {
    Served::Fixed(limits(toml))
}

/// One policy for every request: `limit` key `key` with `quotas`.
fn one(key: &str, quotas: &str) -> String {
    format!("[[policy]]\nname = \"api\"\ndefault = true\n[[policy.limit]]\nkey = {key}\nquotas = [{quotas}]\n")
}

const TWO_PER_MINUTE: &str = "{ algorithm = \"fixed_window\", limit = 2, window = \"1m\" }";

/// By default, the IETF fields alone: `RateLimit-Policy` and `RateLimit`.
pub async fn admitted_and_refused_responses_carry_the_headers_and_a_problem_body<H: Harness>() {
    let addr = H::serve(fixed(&one("\"ip\"", TWO_PER_MINUTE)));
    let client = HttpClient::new();
    let first = client.get(addr, "/", &[]).await;
    assert_eq!(first.status, StatusCode::OK, "{}", H::NAME);
    let fields = [("ratelimit", "\"minute\";r=1;t=60"), ("ratelimit-policy", "\"minute\";q=2;w=60")];
    assert_eq!(first.limit_headers(), fields.map(|(n, v)| (n.to_owned(), v.to_owned())), "{}", H::NAME);
    assert_eq!(&first.body[..], b"ok");
    assert_eq!(client.get(addr, "/", &[]).await.status, StatusCode::OK);
    let refused = client.get(addr, "/", &[]).await;
    assert_eq!(refused.status, StatusCode::TOO_MANY_REQUESTS, "{}", H::NAME);
    assert_eq!(refused.header("retry-after"), Some("60"), "{}", H::NAME);
    assert_eq!(refused.header("content-type"), Some("application/problem+json"), "{}", H::NAME);
    assert_eq!(refused.header("ratelimit"), Some("\"minute\";r=0;t=60"), "{}", H::NAME);
    assert_eq!(refused.header("ratelimit-policy"), Some("\"minute\";q=2;w=60"), "{}", H::NAME);
    assert_eq!(refused.header("x-ratelimit-remaining"), None, "{}: the legacy fields are off by default", H::NAME);
    let body = refused.json();
    assert_eq!((body["status"].as_u64(), body["title"].as_str()), (Some(429), Some("Too Many Requests")));
    assert_eq!((body["retry_after"].as_u64(), body["policy"].as_str()), (Some(60), Some("api")));
    assert_eq!(body["quota"], "minute");
}

/// `legacy_headers = true` adds `X-RateLimit-Limit`, `-Remaining` and `-Reset`
/// (seconds until the quota is whole again), on admissions and refusals;
/// `legacy_headers = false` is the default.
pub async fn the_legacy_headers_are_written_when_switched_on<H: Harness>() {
    let addr = H::serve(fixed(&format!("legacy_headers = true\n{}", one("\"ip\"", TWO_PER_MINUTE))));
    let client = HttpClient::new();
    let first = client.get(addr, "/", &[]).await;
    assert_eq!(first.status, StatusCode::OK, "{}", H::NAME);
    assert_eq!(first.header("ratelimit"), Some("\"minute\";r=1;t=60"), "{}", H::NAME);
    assert_eq!(
        (first.header("x-ratelimit-limit"), first.header("x-ratelimit-remaining"), first.header("x-ratelimit-reset")),
        (Some("2"), Some("1"), Some("60")),
        "{}",
        H::NAME
    );
    assert_eq!(client.get(addr, "/", &[]).await.status, StatusCode::OK);
    let refused = client.get(addr, "/", &[]).await;
    assert_eq!(refused.status, StatusCode::TOO_MANY_REQUESTS, "{}", H::NAME);
    let names: Vec<String> = refused.limit_headers().into_iter().map(|(name, _)| name).collect();
    let all = [
        "ratelimit",
        "ratelimit-policy",
        "retry-after",
        "x-ratelimit-limit",
        "x-ratelimit-remaining",
        "x-ratelimit-reset",
    ];
    assert_eq!(names, all, "{}", H::NAME);
    assert_eq!(refused.header("x-ratelimit-remaining"), Some("0"), "{}", H::NAME);

    let addr = H::serve(fixed(&format!("legacy_headers = false\n{}", one("\"ip\"", TWO_PER_MINUTE))));
    let reply = HttpClient::new().get(addr, "/", &[]).await;
    let names: Vec<String> = reply.limit_headers().into_iter().map(|(name, _)| name).collect();
    assert_eq!(names, ["ratelimit", "ratelimit-policy"], "{}", H::NAME);
}

pub async fn skip_paths_and_methods_are_not_limited_nor_counted<H: Harness>() {
    let toml = format!("skip = [\"/health\"]\nskip_methods = [\"OPTIONS\"]\n{}", one("\"ip\"", TWO_PER_MINUTE));
    let addr = H::serve(fixed(&toml));
    let client = HttpClient::new();
    for _ in 0..5 {
        let health = client.get(addr, "/health", &[]).await;
        assert_eq!((health.status, health.limit_headers().len()), (StatusCode::OK, 0), "{}", H::NAME);
        let options = client.send("OPTIONS", addr, "/", &[]).await;
        assert!(options.limit_headers().is_empty(), "{}: {options:?}", H::NAME);
        assert_ne!(options.status, StatusCode::TOO_MANY_REQUESTS, "{}", H::NAME);
    }
    // Nothing was counted: two requests left.
    assert_eq!(client.get(addr, "/", &[]).await.header("ratelimit"), Some("\"minute\";r=1;t=60"), "{}", H::NAME);
}

pub async fn the_longest_route_prefix_picks_the_policy<H: Harness>() {
    let toml = r#"
[[policy]]
name = "auth"
routes = ["/auth"]
[[policy.limit]]
key = "ip"
quotas = [{ name = "login", algorithm = "sliding_log", limit = 1, window = "5m" }]
[[policy]]
name = "site"
default = true
[[policy.limit]]
key = "ip"
quotas = [{ algorithm = "gcra", limit = 100, window = "1m" }]
"#;
    let addr = H::serve(fixed(toml));
    let client = HttpClient::new();
    assert_eq!(client.get(addr, "/auth/login", &[]).await.status, StatusCode::OK);
    let refused = client.get(addr, "/auth/login", &[]).await;
    assert_eq!(refused.status, StatusCode::TOO_MANY_REQUESTS, "{}", H::NAME);
    assert_eq!((refused.json()["policy"].as_str(), refused.json()["quota"].as_str()), (Some("auth"), Some("login")));
    let site = client.get(addr, "/api/orders", &[]).await;
    assert_eq!(site.status, StatusCode::OK, "{}", H::NAME);
    assert_eq!(site.header("ratelimit-policy"), Some("\"minute\";q=100;w=60"), "{}", H::NAME);
}

/// The peer (127.0.0.1) is no trusted proxy: a forwarding header it sends names
/// nobody. Trusted, the rightmost hop it did not add is the client.
pub async fn forwarding_headers_count_only_from_trusted_proxies<H: Harness>() {
    let untrusted = H::serve(fixed(&one("\"ip\"", TWO_PER_MINUTE)));
    let client = HttpClient::new();
    for spoof in ["192.0.2.1", "192.0.2.2", "192.0.2.3"] {
        let reply = client.get(untrusted, "/", &[("x-forwarded-for", spoof), ("forwarded", "for=192.0.2.9")]).await;
        let expected = if spoof == "192.0.2.3" { StatusCode::TOO_MANY_REQUESTS } else { StatusCode::OK };
        assert_eq!(reply.status, expected, "{}: spoofed {spoof}", H::NAME);
    }
    let trusted = format!("[client]\ntrusted_proxies = [\"127.0.0.0/8\"]\n{}", one("\"ip\"", TWO_PER_MINUTE));
    let behind_proxy = H::serve(fixed(&trusted));
    for client_ip in ["192.0.2.1", "192.0.2.2", "192.0.2.3"] {
        // The client may write anything left of its own hop.
        let xff = format!("203.0.113.9, {client_ip}");
        for _ in 0..2 {
            let reply = client.get(behind_proxy, "/", &[("x-forwarded-for", &xff)]).await;
            assert_eq!(reply.status, StatusCode::OK, "{}: {client_ip}", H::NAME);
        }
        let reply = client.get(behind_proxy, "/", &[("x-forwarded-for", &xff)]).await;
        assert_eq!(reply.status, StatusCode::TOO_MANY_REQUESTS, "{}: {client_ip}", H::NAME);
    }
}

pub async fn api_keys_are_counted_apart_and_a_missing_key_is_told_where_to_go<H: Harness>() {
    let toml = one("\"header:x-api-key\"", TWO_PER_MINUTE)
        .replace("key = \"header:x-api-key\"", "key = \"header:x-api-key\"\nlong_keys = \"refuse\"");
    let addr = H::serve(fixed(&toml));
    let client = HttpClient::new();
    for key in ["k-1", "k-2"] {
        for _ in 0..2 {
            assert_eq!(client.get(addr, "/", &[("x-api-key", key)]).await.status, StatusCode::OK, "{}", H::NAME);
        }
        let refused = client.get(addr, "/", &[("x-api-key", key)]).await;
        assert_eq!(refused.status, StatusCode::TOO_MANY_REQUESTS, "{}", H::NAME);
    }
    let missing = client.get(addr, "/", &[]).await;
    assert_eq!(missing.status, StatusCode::BAD_REQUEST, "{}", H::NAME);
    assert_eq!(missing.json()["title"], "Client Not Identified");
    assert!(missing.json()["detail"].as_str().unwrap_or("").contains("`x-api-key`"), "{}", missing.json());
    let long = "k".repeat(200);
    let refused = client.get(addr, "/", &[("x-api-key", &long)]).await;
    assert_eq!(refused.status, StatusCode::BAD_REQUEST, "{}", H::NAME);
    assert!(refused.json()["detail"].as_str().unwrap_or("").contains("longer than 128 bytes"), "{}", refused.json());
}

/// A key over 128 bytes is kept as its hash: still counted, by the hash.
pub async fn a_long_key_is_counted_as_its_hash<H: Harness>() {
    let addr = H::serve(fixed(&one("\"header:x-api-key\"", TWO_PER_MINUTE)));
    let client = HttpClient::new();
    let (long, other) = ("a".repeat(10_000), "b".repeat(10_000));
    for _ in 0..2 {
        assert_eq!(client.get(addr, "/", &[("x-api-key", &long)]).await.status, StatusCode::OK, "{}", H::NAME);
    }
    assert_eq!(client.get(addr, "/", &[("x-api-key", &long)]).await.status, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(client.get(addr, "/", &[("x-api-key", &other)]).await.status, StatusCode::OK, "{}", H::NAME);
}

/// Per IP and per user at once: a request passes only if both admit it, and one
/// refused by either takes nothing from the other. Without a user, the user limit
/// is skipped.
pub async fn per_ip_and_per_user_limits_layer_all_or_nothing<H: Harness>() {
    let toml = r#"
[[policy]]
name = "api"
default = true
[[policy.limit]]
name = "per_ip"
key = "ip"
quotas = [{ name = "ip", algorithm = "fixed_window", limit = 3, window = "1m" }]
[[policy.limit]]
name = "per_user"
key = "user"
on_missing_key = "skip"
quotas = [{ name = "user", algorithm = "fixed_window", limit = 1, window = "1m" }]
"#;
    let addr = H::serve(fixed(toml));
    let client = HttpClient::new();
    let alice = client.get(addr, "/", &[("x-user", "alice")]).await;
    assert_eq!(alice.status, StatusCode::OK, "{}", H::NAME);
    // The admission with the least left goes in the headers.
    assert_eq!(alice.header("ratelimit"), Some("\"user\";r=0;t=60"), "{}", H::NAME);
    let refused = client.get(addr, "/", &[("x-user", "alice")]).await;
    assert_eq!((refused.status, refused.json()["quota"].as_str()), (StatusCode::TOO_MANY_REQUESTS, Some("user")));
    // The refusal took nothing from the IP's limit: two left.
    let anonymous = client.get(addr, "/", &[]).await;
    assert_eq!(anonymous.header("ratelimit"), Some("\"ip\";r=1;t=60"), "{}", H::NAME);
    assert_eq!(client.get(addr, "/", &[("x-user", "bob")]).await.status, StatusCode::OK);
    assert_eq!(client.get(addr, "/", &[("x-user", "carol")]).await.status, StatusCode::TOO_MANY_REQUESTS);
}

/// A tier's quotas are checked together: the strictest refuses; the tier comes
/// from the lookup, by key.
pub async fn tiers_decide_by_the_clients_plan<H: Harness>() {
    let toml = r#"
[[policy]]
name = "api"
default = true
[[policy.limit]]
key = "header:x-api-key"
tiered = true
[tiers.free]
quotas = [{ name = "free", algorithm = "fixed_window", limit = 1, window = "1m" }]
[tiers.pro]
quotas = [
  { name = "pro-minute", algorithm = "fixed_window", limit = 3, window = "1m" },
  { name = "pro-day", algorithm = "fixed_window", limit = 2, window = "1d" },
]
"#;
    let config = Config::from_toml(toml)
        .unwrap()
        .clock(ManualClock::new())
        .tier_lookup(|key: Key| async move { Ok::<_, String>(if key.payload() == b"paid" { "pro" } else { "free" }) });
    let addr = H::serve(Served::Fixed(config.limits().unwrap()));
    let client = HttpClient::new();
    assert_eq!(client.get(addr, "/", &[("x-api-key", "cheap")]).await.status, StatusCode::OK);
    let free = client.get(addr, "/", &[("x-api-key", "cheap")]).await;
    assert_eq!((free.status, free.json()["quota"].as_str()), (StatusCode::TOO_MANY_REQUESTS, Some("free")));
    for _ in 0..2 {
        assert_eq!(client.get(addr, "/", &[("x-api-key", "paid")]).await.status, StatusCode::OK, "{}", H::NAME);
    }
    let pro = client.get(addr, "/", &[("x-api-key", "paid")]).await;
    assert_eq!((pro.status, pro.json()["quota"].as_str()), (StatusCode::TOO_MANY_REQUESTS, Some("pro-day")));
    assert_eq!(pro.header("ratelimit-policy"), Some("\"pro-minute\";q=3;w=60, \"pro-day\";q=2;w=86400"));
}

/// A store full of other clients refuses a new one for its capacity: 503 Too
/// Many Clients, no `RateLimit` fields.
pub async fn a_full_store_answers_too_many_clients<H: Harness>() {
    // The legacy fields on: none of them either.
    let toml = one("\"header:x-api-key\"", TWO_PER_MINUTE)
        .replace("key = \"header:x-api-key\"", "key = \"header:x-api-key\"\nmax_keys = 1");
    let toml = format!("legacy_headers = true\n{toml}");
    let addr = H::serve(fixed(&toml));
    let client = HttpClient::new();
    assert_eq!(client.get(addr, "/", &[("x-api-key", "first")]).await.status, StatusCode::OK);
    let full = client.get(addr, "/", &[("x-api-key", "second")]).await;
    assert_eq!(full.status, StatusCode::SERVICE_UNAVAILABLE, "{}", H::NAME);
    assert_eq!(full.json()["title"], "Too Many Clients");
    assert!(full.header("retry-after").is_some());
    assert!(full.header("ratelimit").is_none() && full.header("x-ratelimit-remaining").is_none(), "{}", H::NAME);
}

/// A shadow limit refuses nothing and adds no header: the client sees what it sees
/// without it.
pub async fn a_shadow_limit_is_invisible_to_the_client<H: Harness>() {
    let enforced = one("\"ip\"", "{ algorithm = \"fixed_window\", limit = 3, window = \"1m\" }");
    let shadow = format!(
        "{enforced}[[policy.limit]]\nkey = \"ip\"\nshadow = true\nquotas = [{{ name = \"strict\", algorithm = \"fixed_window\", limit = 1, window = \"1m\" }}]\n"
    );
    let (with, without) = (H::serve(fixed(&shadow)), H::serve(fixed(&enforced)));
    let client = HttpClient::new();
    for n in 1..=4 {
        let (a, b) = (client.get(with, "/", &[]).await, client.get(without, "/", &[]).await);
        assert_eq!(a.status, b.status, "{}: request {n}", H::NAME);
        assert_eq!(a.limit_headers(), b.limit_headers(), "{}: request {n}", H::NAME);
    }
}

/// A reload is in force for the next request; the store of an unchanged quota is
/// kept (its clients keep what they spent); an invalid file is refused, naming its
/// line and field, and the limits in force go on serving.
pub async fn reload_swaps_the_limits_and_keeps_what_was_spent<H: Harness>() {
    let clock = ManualClock::new();
    let config = |toml: &str| Config::from_toml(toml).unwrap().clock(clock.clone());
    let v1 = format!(
        "{}[[policy]]\nname = \"auth\"\nroutes = [\"/auth\"]\n[[policy.limit]]\nkey = \"ip\"\nquotas = [{{ algorithm = \"fixed_window\", limit = 1, window = \"1h\" }}]\n",
        one("\"ip\"", TWO_PER_MINUTE)
    );
    let reloadable = Reloadable::from_config(config(&v1)).unwrap();
    let addr = H::serve(Served::Reloadable(reloadable.clone()));
    let client = HttpClient::new();
    assert_eq!(client.get(addr, "/auth/login", &[]).await.status, StatusCode::OK);
    assert_eq!(client.get(addr, "/", &[]).await.header("ratelimit"), Some("\"minute\";r=1;t=60"));
    // The site's quota doubles; the auth quota is unchanged, and stays spent.
    reloadable.reload(config(&v1.replacen("limit = 2", "limit = 4", 1))).unwrap();
    let site = client.get(addr, "/", &[]).await;
    assert_eq!(site.header("ratelimit-policy"), Some("\"minute\";q=4;w=60"), "{}", H::NAME);
    assert_eq!(site.header("ratelimit"), Some("\"minute\";r=3;t=60"), "{}: a new quota starts empty", H::NAME);
    assert_eq!(client.get(addr, "/auth/login", &[]).await.status, StatusCode::TOO_MANY_REQUESTS, "{}", H::NAME);
    let path = std::env::temp_dir().join(format!("weir-behaviour-reload-{}.toml", H::NAME));
    std::fs::write(&path, v1.replace("\"1m\"", "\"a minute\"")).unwrap();
    let bad = reloadable.reload_file(&path, |config| config.clock(clock.clone())).unwrap_err();
    assert_eq!((bad.file.as_deref(), bad.line), (Some(path.as_path()), Some(6)), "{bad}");
    assert_eq!(bad.field.as_deref(), Some("policy[0].limit[0].quotas[0].window"), "{bad}");
    assert_eq!(client.get(addr, "/", &[]).await.header("ratelimit-policy"), Some("\"minute\";q=4;w=60"));
}

/// Throttle mode: requests over the rate wait their turn instead of being refused.
pub async fn a_throttle_makes_requests_wait_their_turn<H: Harness>() {
    let toml = "[[policy]]\nname = \"paced\"\ndefault = true\n[[policy.limit]]\nkey = \"ip\"\n\
                throttle = { rate = 50, per = \"1s\", capacity = 10, max_wait = \"30s\" }\n";
    let addr = H::serve(Served::Fixed(Config::from_toml(toml).unwrap().limits().unwrap()));
    let client = HttpClient::new();
    let requests: Vec<_> = (0..5)
        .map(|_| {
            let client = client.clone();
            tokio::spawn(async move { client.get(addr, "/", &[]).await.status })
        })
        .collect();
    for request in requests {
        assert_eq!(request.await.unwrap(), StatusCode::OK, "{}: over the rate, waited instead of refused", H::NAME);
    }
}

fn store(limit: u64) -> Arc<KeyedFixedWindow<Key, ManualClock>> {
    let config = KeyedConfig::builder(100).build().unwrap();
    Arc::new(
        KeyedFixedWindow::fixed_window_with_clock(Quota::per_minute(limit).unwrap(), config, ManualClock::new())
            .unwrap(),
    )
}

fn used(store: &KeyedFixedWindow<Key, ManualClock>, key: &Key) -> u64 {
    KeyedLimiter::policies(store)[0].limit() - KeyedLimiter::snapshot(store, key).remaining()
}

/// A client that goes away while it waits in a throttle's line frees its place,
/// and gives back what the policy's other limit admitted: the server drops the
/// request's future. The client resets its connection: a clean close (a FIN) is,
/// to actix-web 4's `HttpServer`, a half-closed connection whose request it goes on
/// serving (it allows half-closed HTTP/1 connections and offers no way to refuse
/// them), so it drops the request's future only when its response cannot be
/// written; weir-tower's tests (`server.rs`) cover the clean close under hyper.
pub async fn a_client_that_disconnects_while_waiting_frees_its_place<H: Harness>() {
    use tokio::io::AsyncWriteExt as _;
    // One request an hour, one waiting at most: a waiter's turn does not come
    // during the test.
    let throttle =
        Arc::new(KeyedThrottle::builder(Quota::new(1, HOUR).unwrap(), 1).max_wait(2 * HOUR).build().unwrap());
    let counted = store(10);
    let ip = || KeySource::ip(weir_http::ClientIp::default());
    let policy = Policy::builder("paced")
        .limit(Limit::throttle_shared(ip(), Arc::clone(&throttle)))
        .limit(Limit::new(ip(), Store::local(Arc::clone(&counted))))
        .build()
        .unwrap();
    let addr = H::serve(Served::Fixed(Limits::new(policy)));
    let key = Key::ip("127.0.0.1".parse().unwrap());
    let client = HttpClient::new();
    assert_eq!(client.get(addr, "/", &[]).await.status, StatusCode::OK, "{}: the first goes through", H::NAME);

    let mut waiter = tokio::net::TcpStream::connect(addr).await.unwrap();
    waiter.write_all(b"GET / HTTP/1.1\r\nhost: test\r\n\r\n").await.unwrap();
    until("the waiter is in line", || throttle.waiting(&key) == 1).await;
    assert_eq!(used(&counted, &key), 2, "{}: admitted by the store, waiting in the throttle", H::NAME);
    let full = client.get(addr, "/", &[]).await;
    assert_eq!(full.status, StatusCode::TOO_MANY_REQUESTS, "{}: the one place is taken", H::NAME);

    waiter.set_zero_linger().unwrap();
    drop(waiter); // the client goes away: its connection reset
    until("the waiter's place is freed", || throttle.waiting(&key) == 0).await;
    until("the waiter's admission is given back", || used(&counted, &key) == 1).await;
}

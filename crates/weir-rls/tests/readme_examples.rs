//! Every example of envoyproxy/ratelimit's README, as config, descriptors and the
//! rule each descriptor falls under, and as request sequences with the answers the
//! README describes: each answered by weir's in-memory stores and by a fake
//! fixed-window model alike (`common::paired`).

mod common;

use common::{brief, config, descriptor, overall, paired as service, request};
use weir_rls::proto::rate_limit_response::Code;
use weir_rls::{Config, CounterKey, Descriptor, DescriptorMatch, Request, RequestLimits, Unit};

/// What one descriptor of `domain` matched, shortly.
#[derive(Debug, PartialEq, Eq)]
enum Got {
    NoLimit,
    Unlimited(String),
    Replaced(String),
    Limited { rule: String, per: (u32, Option<Unit>), metric: String, shadow: bool },
}

fn got(m: &DescriptorMatch<'_>) -> Got {
    match m {
        DescriptorMatch::NoLimit => Got::NoLimit,
        DescriptorMatch::Unlimited(rule) => Got::Unlimited(rule.full_key().to_owned()),
        DescriptorMatch::Replaced(rule) => Got::Replaced(rule.full_key().to_owned()),
        DescriptorMatch::Limited(l) => Got::Limited {
            rule: l.rule().map_or("<override>".to_owned(), |r| r.full_key().to_owned()),
            per: (l.limit().requests_per_unit(), l.limit().unit()),
            metric: l.metric_key().to_owned(),
            shadow: l.shadow(),
        },
    }
}

fn matched(config: &Config, domain: &str, entries: &[(&str, &str)]) -> Got {
    got(&config.match_descriptor(domain, &Descriptor::new(entries.iter().copied())).unwrap())
}

fn key(config: &Config, domain: &str, entries: &[(&str, &str)]) -> CounterKey {
    match config.match_descriptor(domain, &Descriptor::new(entries.iter().copied())).unwrap() {
        DescriptorMatch::Limited(l) => *l.key(),
        other => panic!("{entries:?}: {other:?}"),
    }
}

fn limited(rule: &str, per: (u32, Unit), metric: &str) -> Got {
    Got::Limited { rule: rule.to_owned(), per: (per.0, Some(per.1)), metric: metric.to_owned(), shadow: false }
}

const EX1: &str = "
domain: mongo_cps
descriptors:
  - key: database
    value: users
    rate_limit:
      unit: second
      requests_per_unit: 500

  - key: database
    value: default
    rate_limit:
      unit: second
      requests_per_unit: 500
";

#[test]
fn ex1_two_values_of_one_key() {
    let c = config(EX1);
    let users = limited("mongo_cps.database_users", (500, Unit::Second), "mongo_cps.database_users");
    assert_eq!(matched(&c, "mongo_cps", &[("database", "users")]), users);
    let default = limited("mongo_cps.database_default", (500, Unit::Second), "mongo_cps.database_default");
    assert_eq!(matched(&c, "mongo_cps", &[("database", "default")]), default);
    assert_eq!(matched(&c, "mongo_cps", &[("database", "other")]), Got::NoLimit);
}

#[tokio::test]
async fn ex1_answers_501_hits_in_one_second() {
    let (service, _) = service(EX1);
    let hit = || request("mongo_cps", vec![descriptor(&[("database", "users")])]);
    let first = service.respond(hit()).await.unwrap();
    assert_eq!(brief(&first.statuses[0]), (Code::Ok, Some(500), 499));
    let limit = first.statuses[0].current_limit.as_ref().unwrap();
    assert_eq!(limit.unit, Unit::Second.response_code());
    assert_eq!(first.statuses[0].duration_until_reset.as_ref().map(|d| (d.seconds, d.nanos)), Some((1, 0)));
    for _ in 2..500 {
        service.respond(hit()).await.unwrap();
    }
    let last = service.respond(hit()).await.unwrap();
    assert_eq!(brief(&last.statuses[0]), (Code::Ok, Some(500), 0));
    let over = service.respond(hit()).await.unwrap();
    assert_eq!(brief(&over.statuses[0]), (Code::OverLimit, Some(500), 0));
    assert_eq!(overall(&over), Code::OverLimit);
    // The other value has its own counter.
    let other = service.respond(request("mongo_cps", vec![descriptor(&[("database", "default")])])).await.unwrap();
    assert_eq!(brief(&other.statuses[0]), (Code::Ok, Some(500), 499));
}

const EX2: &str = "
domain: messaging
descriptors:
  # Only allow 5 marketing messages a day
  - key: message_type
    value: marketing
    descriptors:
      - key: to_number
        rate_limit:
          unit: day
          requests_per_unit: 5

  # Only allow 100 messages a day to any unique phone number
  - key: to_number
    rate_limit:
      unit: day
      requests_per_unit: 100
";

#[test]
fn ex2_nested_descriptors_and_a_key_without_value() {
    let c = config(EX2);
    let marketing = limited(
        "messaging.message_type_marketing.to_number",
        (5, Unit::Day),
        "messaging.message_type_marketing.to_number",
    );
    let a = [("message_type", "marketing"), ("to_number", "2061111111")];
    let b = [("message_type", "marketing"), ("to_number", "2062222222")];
    assert_eq!(matched(&c, "messaging", &a), marketing);
    assert_eq!(matched(&c, "messaging", &b), marketing);
    assert_ne!(key(&c, "messaging", &a), key(&c, "messaging", &b), "a counter per number");
    let any = limited("messaging.to_number", (100, Unit::Day), "messaging.to_number");
    assert_eq!(matched(&c, "messaging", &[("to_number", "2061111111")]), any);
    assert_ne!(key(&c, "messaging", &[("to_number", "1")]), key(&c, "messaging", &[("to_number", "2")]));
    assert_eq!(matched(&c, "messaging", &[("message_type", "marketing")]), Got::NoLimit);
    assert_eq!(matched(&c, "messaging", &[("message_type", "transactional"), ("to_number", "1")]), Got::NoLimit);
}

#[tokio::test]
async fn ex2_the_sixth_marketing_message_is_over_and_charges_nothing() {
    let (service, _) = service(EX2);
    let both = || {
        request(
            "messaging",
            vec![
                descriptor(&[("message_type", "marketing"), ("to_number", "2061111111")]),
                descriptor(&[("to_number", "2061111111")]),
            ],
        )
    };
    for n in 1..=5 {
        let r = service.respond(both()).await.unwrap();
        assert_eq!(overall(&r), Code::Ok);
        assert_eq!(brief(&r.statuses[1]), (Code::Ok, Some(100), 100 - n));
    }
    let sixth = service.respond(both()).await.unwrap();
    assert_eq!(overall(&sixth), Code::OverLimit);
    assert_eq!(brief(&sixth.statuses[0]), (Code::OverLimit, Some(5), 0));
    // Upstream says 94 (it charges the 100/day counter anyway); all or nothing
    // leaves it at 95 and reports what the request would have left it at.
    assert_eq!(brief(&sixth.statuses[1]), (Code::Ok, Some(100), 94));
    let alone = service.respond(request("messaging", vec![descriptor(&[("to_number", "2061111111")])])).await.unwrap();
    assert_eq!(brief(&alone.statuses[0]), (Code::Ok, Some(100), 94));
}

const EX3: &str = "
domain: edge_proxy_per_ip
descriptors:
  - key: remote_address
    rate_limit:
      unit: second
      requests_per_unit: 10

  # Black list IP
  - key: remote_address
    value: 50.0.0.5
    rate_limit:
      unit: second
      requests_per_unit: 0
";

#[tokio::test]
async fn ex3_a_value_beats_the_key_alone_and_zero_refuses_everything() {
    let c = config(EX3);
    assert_eq!(
        matched(&c, "edge_proxy_per_ip", &[("remote_address", "50.0.0.1")]),
        limited("edge_proxy_per_ip.remote_address", (10, Unit::Second), "edge_proxy_per_ip.remote_address")
    );
    assert_eq!(
        matched(&c, "edge_proxy_per_ip", &[("remote_address", "50.0.0.5")]),
        limited(
            "edge_proxy_per_ip.remote_address_50.0.0.5",
            (0, Unit::Second),
            "edge_proxy_per_ip.remote_address_50.0.0.5"
        )
    );
    // The order of the two in the file does not matter.
    let (first, second) = EX3.split_at(EX3.find("  # Black").unwrap());
    let swapped =
        format!("domain: edge_proxy_per_ip\ndescriptors:\n{}{}", second, &first[first.find("  - key").unwrap()..]);
    assert_eq!(
        matched(&config(&swapped), "edge_proxy_per_ip", &[("remote_address", "50.0.0.5")]),
        matched(&c, "edge_proxy_per_ip", &[("remote_address", "50.0.0.5")])
    );

    let (service, _) = service(EX3);
    let blocked = service
        .respond(request("edge_proxy_per_ip", vec![descriptor(&[("remote_address", "50.0.0.5")])]))
        .await
        .unwrap();
    assert_eq!(brief(&blocked.statuses[0]), (Code::OverLimit, Some(0), 0));
    assert_eq!(overall(&blocked), Code::OverLimit);
}

#[test]
fn ex4_the_request_must_reach_the_rule_exactly() {
    let a = config(
        "
domain: example4
descriptors:
  - key: key
    value: value
    rate_limit:
      requests_per_unit: 300
      unit: second
",
    );
    assert_eq!(matched(&a, "example4", &[("key", "value"), ("subkey", "subvalue")]), Got::NoLimit);
    assert_eq!(
        matched(&a, "example4", &[("key", "value")]),
        limited("example4.key_value", (300, Unit::Second), "example4.key_value")
    );
    let b = config(
        "
domain: example4
descriptors:
  - key: key
    value: value
    descriptors:
      - key: subkey
        rate_limit:
          requests_per_unit: 300
          unit: second
",
    );
    assert_eq!(
        matched(&b, "example4", &[("key", "value"), ("subkey", "subvalue")]),
        limited("example4.key_value.subkey", (300, Unit::Second), "example4.key_value.subkey")
    );
    assert_ne!(
        key(&b, "example4", &[("key", "value"), ("subkey", "a")]),
        key(&b, "example4", &[("key", "value"), ("subkey", "b")])
    );
}

const EX5: &str = "
domain: internal
descriptors:
  - key: ldap
    rate_limit:
      unlimited: true

  - key: azure
    rate_limit:
      unit: minute
      requests_per_unit: 100
";

#[tokio::test]
async fn ex5_unlimited() {
    let c = config(EX5);
    assert_eq!(matched(&c, "internal", &[("ldap", "anything")]), Got::Unlimited("internal.ldap".to_owned()));
    assert_eq!(
        matched(&c, "internal", &[("azure", "x")]),
        limited("internal.azure", (100, Unit::Minute), "internal.azure")
    );
    let (service, counters) = service(EX5);
    let r = service.respond(request("internal", vec![descriptor(&[("ldap", "anything")])])).await.unwrap();
    assert_eq!(brief(&r.statuses[0]), (Code::Ok, None, u32::MAX));
    assert!(r.statuses[0].duration_until_reset.is_none());
    assert_eq!(counters.counters(), 0, "an unlimited rule touches no counter");
}

const EX6: &str = "
domain: example6
descriptors:
  - key: service
    descriptors:
      - key: user
        value: user-a
        rate_limit:
          requests_per_unit: 10
          unit: second
        shadow_mode: true
      - key: user
        value: user-b
        rate_limit:
          requests_per_unit: 20
          unit: second
";

#[tokio::test]
async fn ex6_shadow_mode_never_limits() {
    let c = config(EX6);
    let Got::Limited { shadow, per, .. } = matched(&c, "example6", &[("service", "auth-service"), ("user", "user-a")])
    else {
        panic!()
    };
    assert!(shadow);
    assert_eq!(per, (10, Some(Unit::Second)));
    let Got::Limited { shadow, per, .. } = matched(&c, "example6", &[("service", "auth-service"), ("user", "user-b")])
    else {
        panic!()
    };
    assert!(!shadow);
    assert_eq!(per, (20, Some(Unit::Second)));
    assert_eq!(matched(&c, "example6", &[("service", "x"), ("user", "user-c")]), Got::NoLimit);

    let (service, _) = service(EX6);
    let a = || request("example6", vec![descriptor(&[("service", "auth-service"), ("user", "user-a")])]);
    for _ in 0..10 {
        assert_eq!(overall(&service.respond(a()).await.unwrap()), Code::Ok);
    }
    let eleventh = service.respond(a()).await.unwrap();
    assert_eq!(brief(&eleventh.statuses[0]), (Code::Ok, Some(10), 0));
    assert_eq!(overall(&eleventh), Code::Ok);
    // A shadowed refusal does not undo the request's other counters.
    let both = request(
        "example6",
        vec![
            descriptor(&[("service", "auth-service"), ("user", "user-a")]),
            descriptor(&[("service", "auth-service"), ("user", "user-b")]),
        ],
    );
    let r = service.respond(both).await.unwrap();
    assert_eq!(brief(&r.statuses[1]), (Code::Ok, Some(20), 19));
    let b = service
        .respond(request("example6", vec![descriptor(&[("service", "auth-service"), ("user", "user-b")])]))
        .await
        .unwrap();
    assert_eq!(brief(&b.statuses[0]), (Code::Ok, Some(20), 18));
}

const EX7: &str = "
domain: example7
descriptors:
  - key: key_1
    value: value_1
    descriptors:
      - key: user
        value: bkthomps
        rate_limit:
          name: specific_limit
          requests_per_unit: 5
          unit: second
  - key: key_2
    value: value_2
    descriptors:
      - key: user
        value: bkthomps
        rate_limit:
          replaces:
            - name: specific_limit
          requests_per_unit: 10
          unit: second
";

#[tokio::test]
async fn ex7_replaces() {
    let c = config(EX7);
    let one = [("key_1", "value_1"), ("user", "bkthomps")];
    let two = [("key_2", "value_2"), ("user", "bkthomps")];
    let request_of = |ds: &[&[(&str, &str)]]| {
        Request::new(
            "example7",
            ds.iter().map(|d| Descriptor::new(d.iter().copied())).collect(),
            1,
            &RequestLimits::default(),
        )
        .unwrap()
    };
    let alone = c.match_request(&request_of(&[&one])).unwrap();
    assert!(matches!(got(&alone.descriptors()[0]), Got::Limited { per: (5, _), .. }));
    let alone = c.match_request(&request_of(&[&two])).unwrap();
    assert!(matches!(got(&alone.descriptors()[0]), Got::Limited { per: (10, _), .. }));
    let both = c.match_request(&request_of(&[&one, &two])).unwrap();
    assert_eq!(got(&both.descriptors()[0]), Got::Replaced("example7.key_1_value_1.user_bkthomps".to_owned()));
    assert!(matches!(got(&both.descriptors()[1]), Got::Limited { per: (10, _), .. }));

    let (service, _) = service(EX7);
    let combined = || request("example7", vec![descriptor(&one), descriptor(&two)]);
    for n in 1..=10 {
        let r = service.respond(combined()).await.unwrap();
        assert_eq!(brief(&r.statuses[0]), (Code::Ok, None, 0), "the replaced rule is not reported");
        assert_eq!(brief(&r.statuses[1]), (Code::Ok, Some(10), 10 - n));
    }
    assert_eq!(overall(&service.respond(combined()).await.unwrap()), Code::OverLimit);
    // The replaced rule's counter was never charged: the first descriptor alone
    // still gets its full 5, under its name.
    let r = service.respond(request("example7", vec![descriptor(&one)])).await.unwrap();
    assert_eq!(brief(&r.statuses[0]), (Code::Ok, Some(5), 4));
    assert_eq!(r.statuses[0].current_limit.as_ref().unwrap().name, "specific_limit");
}

#[test]
fn ex8_detailed_metric() {
    let c = config(
        "
domain: example8
descriptors:
  - key: key1
    detailed_metric: true
    rate_limit:
      unit: minute
      requests_per_unit: 10
  - key: key1
    value: value1
    rate_limit:
      unit: minute
      requests_per_unit: 20
",
    );
    assert_eq!(
        matched(&c, "example8", &[("key1", "unspecified_value")]),
        limited("example8.key1", (10, Unit::Minute), "example8.key1_unspecified_value")
    );
    assert_eq!(
        matched(&c, "example8", &[("key1", "unspecified_value2")]),
        limited("example8.key1", (10, Unit::Minute), "example8.key1_unspecified_value2")
    );
    assert_ne!(key(&c, "example8", &[("key1", "a")]), key(&c, "example8", &[("key1", "b")]));
    assert_eq!(
        matched(&c, "example8", &[("key1", "value1")]),
        limited("example8.key1_value1", (20, Unit::Minute), "example8.key1_value1")
    );
}

#[test]
fn ex9_wildcards() {
    let prefix = config(
        "
domain: example9
descriptors:
  - key: key1
    value: value*
    rate_limit:
      unit: minute
      requests_per_unit: 20
",
    );
    let rule = limited("example9.key1_value*", (20, Unit::Minute), "example9.key1_value*");
    for value in ["value1", "value2", "valueXYZ", "value"] {
        assert_eq!(matched(&prefix, "example9", &[("key1", value)]), rule, "{value}");
    }
    for value in ["valu", "xvalue1"] {
        assert_eq!(matched(&prefix, "example9", &[("key1", value)]), Got::NoLimit, "{value}");
    }
    assert_ne!(key(&prefix, "example9", &[("key1", "value1")]), key(&prefix, "example9", &[("key1", "value2")]));

    let middle = config(
        "
domain: example9
descriptors:
  - key: path
    value: /api/*/action
    rate_limit:
      unit: minute
      requests_per_unit: 20
",
    );
    for value in ["/api/123/action", "/api/user-id/action"] {
        assert!(matches!(matched(&middle, "example9", &[("path", value)]), Got::Limited { .. }), "{value}");
    }
    assert_eq!(matched(&middle, "example9", &[("path", "/api/123/other")]), Got::NoLimit);

    let two = config(
        "
domain: example9
descriptors:
  - key: route
    value: /api/*/resource/*/action
    rate_limit:
      unit: minute
      requests_per_unit: 20
",
    );
    for value in ["/api/v1/resource/123/action", "/api/v2/resource/456/action"] {
        assert!(matches!(matched(&two, "example9", &[("route", value)]), Got::Limited { .. }), "{value}");
    }
    assert_eq!(matched(&two, "example9", &[("route", "/api/v1/resource/123/other")]), Got::NoLimit);
}

#[test]
fn ex10_value_to_metric() {
    let c = config(
        "
domain: example10
descriptors:
  - key: route
    value_to_metric: true
    descriptors:
      - key: http_method
        value_to_metric: true
        descriptors:
          - key: subject_id
            rate_limit:
              unit: minute
              requests_per_unit: 60
",
    );
    let rule = "example10.route.http_method.subject_id";
    assert_eq!(
        matched(&c, "example10", &[("route", "api"), ("http_method", "GET"), ("subject_id", "123")]),
        limited(rule, (60, Unit::Minute), "example10.route_api.http_method_GET.subject_id")
    );
    assert_eq!(
        matched(&c, "example10", &[("route", "web"), ("http_method", "POST"), ("subject_id", "456")]),
        limited(rule, (60, Unit::Minute), "example10.route_web.http_method_POST.subject_id")
    );
    let wildcard = config(
        "
domain: example10_wildcard
descriptors:
  - key: user
    value_to_metric: true
    descriptors:
      - key: action
        value: read*
        value_to_metric: true
        descriptors:
          - key: resource
            rate_limit:
              unit: minute
              requests_per_unit: 100
",
    );
    assert_eq!(
        matched(
            &wildcard,
            "example10_wildcard",
            &[("user", "alice"), ("action", "readfile"), ("resource", "documents")]
        ),
        limited(
            "example10_wildcard.user.action_read*.resource",
            (100, Unit::Minute),
            "example10_wildcard.user_alice.action_readfile.resource"
        )
    );
}

const EX11: &str = "
domain: example11
descriptors:
  # With share_threshold: true, all files/* matches share the same threshold
  - key: files
    value: files/*
    share_threshold: true
    rate_limit:
      unit: hour
      requests_per_unit: 10

  # Without share_threshold, each files_no_share/* match has its own isolated threshold
  - key: files_no_share
    value: files_no_share/*
    share_threshold: false
    rate_limit:
      unit: hour
      requests_per_unit: 10
";

#[tokio::test]
async fn ex11_share_threshold() {
    let c = config(EX11);
    assert_eq!(key(&c, "example11", &[("files", "files/a.pdf")]), key(&c, "example11", &[("files", "files/b.csv")]));
    assert_ne!(
        key(&c, "example11", &[("files_no_share", "files_no_share/a.pdf")]),
        key(&c, "example11", &[("files_no_share", "files_no_share/b.csv")])
    );

    let (service, _) = service(EX11);
    let hit = |k: &str, v: &str| request("example11", vec![descriptor(&[(k, v)])]);
    for v in ["files/a.pdf"; 5].into_iter().chain(["files/b.csv"; 5]) {
        assert_eq!(overall(&service.respond(hit("files", v)).await.unwrap()), Code::Ok);
    }
    assert_eq!(overall(&service.respond(hit("files", "files/c.txt")).await.unwrap()), Code::OverLimit);
    for _ in 0..10 {
        assert_eq!(overall(&service.respond(hit("files_no_share", "files_no_share/a.pdf")).await.unwrap()), Code::Ok);
    }
    assert_eq!(overall(&service.respond(hit("files_no_share", "files_no_share/b.csv")).await.unwrap()), Code::Ok);
    assert_eq!(
        overall(&service.respond(hit("files_no_share", "files_no_share/a.pdf")).await.unwrap()),
        Code::OverLimit
    );

    let metrics = config(
        "
domain: example11_metrics
descriptors:
  - key: route
    value: api/*
    share_threshold: true
    value_to_metric: true
    descriptors:
      - key: method
        rate_limit:
          unit: minute
          requests_per_unit: 60
",
    );
    // The metric name follows upstream's code (the pattern, with its `*`), not its
    // README (`route_api.method_GET`).
    assert_eq!(
        matched(&metrics, "example11_metrics", &[("route", "api/v1"), ("method", "GET")]),
        limited("example11_metrics.route_api/*.method", (60, Unit::Minute), "example11_metrics.route_api/*.method")
    );
    assert_eq!(
        key(&metrics, "example11_metrics", &[("route", "api/v1"), ("method", "GET")]),
        key(&metrics, "example11_metrics", &[("route", "api/v2"), ("method", "GET")]),
    );
    assert_ne!(
        key(&metrics, "example11_metrics", &[("route", "api/v1"), ("method", "GET")]),
        key(&metrics, "example11_metrics", &[("route", "api/v1"), ("method", "PUT")]),
    );
}

#[tokio::test]
async fn the_json_endpoint_sample() {
    // The README's /json sample: one descriptor over (1 a minute), one not (2 a minute).
    let (service, _) = service(
        "
domain: dummy
descriptors:
  - key: one_per_minute
    rate_limit: {unit: minute, requests_per_unit: 1}
  - key: two_per_minute
    rate_limit: {unit: minute, requests_per_unit: 2}
",
    );
    let sample = || {
        request("dummy", vec![descriptor(&[("one_per_minute", "something")]), descriptor(&[("two_per_minute", "x")])])
    };
    service.respond(request("dummy", vec![descriptor(&[("one_per_minute", "something")])])).await.unwrap();
    let r = service.respond(sample()).await.unwrap();
    assert_eq!(overall(&r), Code::OverLimit);
    assert_eq!(brief(&r.statuses[0]), (Code::OverLimit, Some(1), 0));
    // Upstream: OK, remaining 1 (its counter charged anyway); here: what it would be.
    assert_eq!(brief(&r.statuses[1]), (Code::Ok, Some(2), 1));
}

const DEMO: &str = "
domain: rl
descriptors:
  - key: source_cluster
    value: proxy
    descriptors:
      - key: destination_cluster
        value: mock
        rate_limit: {unit: minute, requests_per_unit: 1}
  - key: foo
    rate_limit: {unit: minute, requests_per_unit: 2}
    descriptors:
      - key: bar
        rate_limit: {unit: minute, requests_per_unit: 3}
      - key: bar
        value: banned
        rate_limit: {name: banned_limit, unit: minute, requests_per_unit: 0}
      - key: baz
        rate_limit: {unit: second, requests_per_unit: 1}
      - key: baz
        value: shady
        rate_limit: {unit: minute, requests_per_unit: 3}
        shadow_mode: true
      - key: baz
        value: not-so-shady
        rate_limit: {unit: minute, requests_per_unit: 3}
";

#[tokio::test]
async fn the_demo_environment() {
    // A config of the same shape as the README's demo (`domain: rl`), and its curls.
    let (service, _) = service(DEMO);
    let answers = async |entries: &[(&str, &str)], n: usize| {
        let mut codes = Vec::new();
        for _ in 0..n {
            codes.push(overall(&service.respond(request("rl", vec![descriptor(entries)])).await.unwrap()));
        }
        codes
    };
    use Code::{Ok, OverLimit};
    assert_eq!(answers(&[("source_cluster", "proxy"), ("destination_cluster", "mock")], 2).await, [Ok, OverLimit]);
    assert_eq!(answers(&[("foo", "foo")], 3).await, [Ok, Ok, OverLimit]);
    assert_eq!(answers(&[("foo", "foo"), ("bar", "bar")], 4).await, [Ok, Ok, Ok, OverLimit]);
    assert_eq!(answers(&[("foo", "foo"), ("baz", "baz")], 2).await, [Ok, OverLimit]);
    assert_eq!(answers(&[("foo", "foo"), ("bar", "banned")], 1).await, [OverLimit]);
    assert_eq!(answers(&[("foo", "foo"), ("baz", "shady")], 5).await, [Ok; 5]);
    assert_eq!(answers(&[("foo", "foo"), ("baz", "not-so-shady")], 4).await, [Ok, Ok, Ok, OverLimit]);
}

#[test]
fn the_crate_readmes_config_loads() {
    let readme = include_str!("../README.md");
    let start = readme.find("```yaml\n").unwrap() + "```yaml\n".len();
    let yaml = &readme[start..start + readme[start..].find("```").unwrap()];
    let c = config(yaml);
    let Got::Limited { per, .. } = matched(&c, "api", &[("api_key", "k")]) else { panic!() };
    assert_eq!(per, (600, Some(Unit::Minute)));
    let Got::Limited { per, .. } = matched(&c, "api", &[("remote_address", "10.0.0.1")]) else { panic!() };
    assert_eq!(per, (50, None));
}

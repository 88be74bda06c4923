//! The `weir-rls` binary as a user runs it: `--help`, `--check-config`, serving
//! with metrics under upstream's names, reload on SIGHUP (an invalid config refused
//! and counted while the old one serves), and a clean exit on SIGTERM.

mod support;

use std::process::Command;
use support::{WeirRls, http, http_get, signal, temp_dir};

const CONFIG: &str = "
domain: d
descriptors:
  - key: user
    rate_limit: {unit: year, requests_per_unit: 2}
";

fn json(rls: &WeirRls, user: &str) -> (u16, String) {
    let body = format!(r#"{{"domain":"d","descriptors":[{{"entries":[{{"key":"user","value":"{user}"}}]}}]}}"#);
    http(rls.http, "POST", "/json", body.as_bytes()).expect("an answer")
}

#[test]
fn help_names_every_option_a_new_user_needs() {
    let output = Command::new(env!("CARGO_BIN_EXE_weir-rls")).arg("--help").output().unwrap();
    assert!(output.status.success());
    let help = String::from_utf8(output.stdout).unwrap();
    for option in [
        "--config",
        "--check-config",
        "--grpc-addr",
        "--http-addr",
        "--backend",
        "--max-keys",
        "--redis-url",
        "--redis-cluster",
        "--fail-policy",
        "--instances",
        "--lease",
        "--default-algorithm",
        "--window-alignment",
        "WEIR_RLS_CONFIG",
        "SIGHUP",
        "Examples:",
    ] {
        assert!(help.contains(option), "--help lacks {option}");
    }
    // No config: a usage error naming what is missing.
    let output = Command::new(env!("CARGO_BIN_EXE_weir-rls")).env_remove("WEIR_RLS_CONFIG").output().unwrap();
    assert_eq!(output.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&output.stderr).contains("--config"));
}

#[test]
fn check_config_prints_each_error_with_its_place_and_fails() {
    let dir = temp_dir("check");
    std::fs::write(dir.join("a.yaml"), "domain: a\ndescriptors:\n  - key: k\n    rate_limit: {unit: fortnight}\n")
        .unwrap();
    std::fs::write(
        dir.join("b.yaml"),
        "domain: b\ndescriptors:\n  - key: k\n    rate_limit:\n      unit: second\n      requests_per_unit: -1\n",
    )
    .unwrap();
    std::fs::write(dir.join("c.yaml"), CONFIG).unwrap();
    let output = Command::new(env!("CARGO_BIN_EXE_weir-rls")).arg("--check-config").arg(&dir).output().unwrap();
    assert_eq!(output.status.code(), Some(1));
    let stdout = String::from_utf8(output.stdout).unwrap();
    let lines: Vec<&str> = stdout.lines().collect();
    let a = dir.join("a.yaml").display().to_string();
    let b = dir.join("b.yaml").display().to_string();
    assert_eq!(lines.len(), 3, "{stdout}");
    assert!(
        lines[0].starts_with(&format!("{a}:4:24: descriptors[0].rate_limit.unit: invalid rate limit unit")),
        "{stdout}"
    );
    assert!(
        lines[1].starts_with(&format!("{b}:6:26: descriptors[0].rate_limit.requests_per_unit: -1 is out of range")),
        "{stdout}"
    );
    assert_eq!(lines[2], format!("2 errors in {}", dir.display()));

    std::fs::remove_file(dir.join("a.yaml")).unwrap();
    std::fs::remove_file(dir.join("b.yaml")).unwrap();
    let output = Command::new(env!("CARGO_BIN_EXE_weir-rls")).arg("--check-config").arg(&dir).output().unwrap();
    assert!(output.status.success(), "{output:?}");
    assert_eq!(String::from_utf8(output.stdout).unwrap(), format!("{}: 1 file, 1 rules: OK\n", dir.display()));
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn serves_reloads_on_sighup_and_stops_on_sigterm() {
    let dir = temp_dir("binary");
    std::fs::write(dir.join("d.yaml"), CONFIG).unwrap();
    // Reload on SIGHUP only: no file watch, so that each reload is the signal's.
    let rls = WeirRls::start(&dir, &["--watch", "false"]);
    assert_eq!(json(&rls, "a").0, 200);
    assert_eq!(json(&rls, "a").0, 200);
    let (status, body) = json(&rls, "a");
    assert_eq!(status, 429, "{body}");

    // An invalid config: refused, counted; the old one serves.
    std::fs::write(dir.join("d.yaml"), CONFIG.replace("unit: year", "unit: fortnight")).unwrap();
    signal(rls.pid(), "-HUP");
    let metric = |name: &str| {
        let (_, text) = http_get(rls.http, "/metrics").expect("metrics");
        text.lines().find(|l| l.starts_with(name)).map(|l| l.rsplit(' ').next().unwrap_or("").to_owned())
    };
    let deadline = std::time::Instant::now() + support::START_TIMEOUT;
    while metric("ratelimit_service_config_load_error ").as_deref() != Some("1") {
        assert!(std::time::Instant::now() < deadline, "no refused reload counted: {}", rls.log());
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    assert_eq!(json(&rls, "a").0, 429, "the old config's counters");
    assert!(rls.log().contains("invalid rate limit unit 'fortnight'"), "{}", rls.log());

    // A valid one: in force; the rule changed, so its counters start anew.
    std::fs::write(dir.join("d.yaml"), CONFIG.replace("requests_per_unit: 2", "requests_per_unit: 3")).unwrap();
    signal(rls.pid(), "-HUP");
    while metric("ratelimit_service_config_load_success ").as_deref() != Some("2") {
        assert!(std::time::Instant::now() < deadline, "no reload counted: {}", rls.log());
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let (status, body) = json(&rls, "a");
    assert_eq!(status, 200, "{body}");
    assert!(body.contains(r#""requestsPerUnit":3"#), "{body}");

    // Upstream's names, labelled from the config.
    let (_, text) = http_get(rls.http, "/metrics").unwrap();
    for line in [
        r#"ratelimit_service_rate_limit_total_hits{domain="d",key1="user",key="user"} 5"#,
        r#"ratelimit_service_rate_limit_over_limit{domain="d",key1="user",key="user"} 2"#,
        r#"ratelimit_service_rate_limit_within_limit{domain="d",key1="user",key="user"} 3"#,
        r#"ratelimit_service_total_requests{grpc_method="ShouldRateLimit"} 5"#,
    ] {
        assert!(text.lines().any(|l| l == line), "no {line} in\n{text}");
    }
    assert!(text.contains("ratelimit_service_response_time_seconds_bucket"), "{text}");

    let status = rls.terminate();
    assert!(status.success(), "{status}");
    std::fs::remove_dir_all(&dir).unwrap();
}

//! Reloading a configuration: counters of unchanged quotas kept, a changed quota
//! afresh, requests in flight on the limits they started with, an invalid file
//! refused while the old limits serve. Manual clocks: no time passes.

use std::net::IpAddr;
use std::ops::ControlFlow;
use weir_http::{Check, Config, Limits, Reloadable, Request, User, Verdict};
use weir_rl_core::ManualClock;

struct Get(&'static str);

impl Request for Get {
    fn method(&self) -> &str {
        "GET"
    }
    fn path(&self) -> &str {
        self.0
    }
    fn header(&self, _: &str) -> Option<&[u8]> {
        None
    }
    fn header_lines_rev(&self, _: &str, _: &mut dyn FnMut(&[u8]) -> ControlFlow<()>) {}
    fn peer_ip(&self) -> Option<IpAddr> {
        "192.0.2.7".parse().ok()
    }
    fn user(&self) -> Option<User> {
        None
    }
}

fn config(api: u64, auth: u64) -> String {
    format!(
        "[[policy]]\nname = \"api\"\ndefault = true\n[[policy.limit]]\nname = \"per_ip\"\nkey = \"ip\"\n\
         quotas = [{{ algorithm = \"fixed_window\", limit = {api}, window = \"1m\" }}]\n\
         [[policy]]\nname = \"auth\"\nroutes = [\"/auth\"]\n[[policy.limit]]\nname = \"per_ip\"\nkey = \"ip\"\n\
         quotas = [{{ algorithm = \"fixed_window\", limit = {auth}, window = \"1m\" }}]\n"
    )
}

fn parsed(text: &str, clock: &ManualClock) -> Config {
    Config::from_toml(text).unwrap().clock(clock.clone())
}

/// Admitted, refused, or the remaining of the admission.
fn remaining(limits: &Limits, path: &'static str) -> Option<u64> {
    match limits.check(&Get(path)) {
        Check::Decided(Verdict::Allowed(Some(fields))) => {
            let value = String::from_utf8(fields.ratelimit().to_vec()).unwrap();
            let r = value.split(";r=").nth(1).unwrap().split(';').next().unwrap();
            Some(r.parse().unwrap())
        }
        Check::Decided(Verdict::Refused(_)) => None,
        other => panic!("{other:?}"),
    }
}

#[test]
fn unchanged_quotas_keep_their_counters_and_changed_ones_start_afresh() {
    let clock = ManualClock::new();
    let limits = Reloadable::from_config(parsed(&config(10, 3), &clock)).unwrap();
    for want in [9, 8] {
        assert_eq!(limits.with(|l| remaining(l, "/")), Some(want));
    }
    assert_eq!(limits.with(|l| remaining(l, "/auth")), Some(2));
    // `auth` changes (3 → 5); `api` does not.
    limits.reload(parsed(&config(10, 5), &clock)).unwrap();
    assert_eq!(limits.with(|l| remaining(l, "/")), Some(7), "api kept what its client spent");
    assert_eq!(limits.with(|l| remaining(l, "/auth")), Some(4), "auth's new quota starts afresh");
}

#[test]
fn a_request_in_flight_finishes_on_the_limits_it_started_with() {
    let clock = ManualClock::new();
    let limits = Reloadable::from_config(parsed(&config(1, 1), &clock)).unwrap();
    let started = limits.load();
    limits.reload(parsed(&config(100, 100), &clock)).unwrap();
    // The old limits are whole for the request that holds them: their own store.
    assert_eq!(remaining(&started, "/"), Some(0));
    assert_eq!(remaining(&started, "/"), None);
    assert_eq!(limits.with(|l| remaining(l, "/")), Some(99));
}

#[test]
fn an_invalid_configuration_is_refused_and_the_old_limits_serve() {
    let clock = ManualClock::new();
    let limits = Reloadable::from_config(parsed(&config(2, 2), &clock)).unwrap();
    assert_eq!(limits.with(|l| remaining(l, "/")), Some(1));
    let path = std::env::temp_dir().join(format!("weir-http-reload-{}.toml", std::process::id()));
    std::fs::write(&path, config(2, 2).replace("limit = 2", "limit = 0")).unwrap();
    let error = limits.reload_file(&path, |c| c.clock(clock.clone())).unwrap_err();
    assert_eq!(error.file.as_deref(), Some(path.as_path()));
    assert_eq!((error.line, error.field.as_deref()), (Some(7), Some("policy[0].limit[0].quotas[0].limit")), "{error}");
    assert_eq!(limits.with(|l| remaining(l, "/")), Some(0), "the old limits, their counters as they were");
    // A file that cannot be read names itself too.
    let missing = path.with_extension("missing");
    assert_eq!(limits.reload_file(&missing, |c| c).unwrap_err().file.as_deref(), Some(missing.as_path()));
    std::fs::remove_file(&path).unwrap();
}

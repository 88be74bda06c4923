//! Config files upstream refuses, refused here with the file, line and field named;
//! weir's additions and bounds; what strict mode refuses and upstream mode accepts.

use std::path::PathBuf;
use weir_rls::{
    Algorithm, Compatibility, Config, ConfigError, ConfigErrorKind, Descriptor, DescriptorMatch, Limits, LoadOptions,
    RuleLimit, Unit,
};

fn load(yaml: &str) -> Result<Config, ConfigError> {
    Config::from_yaml("f.yaml", yaml, &LoadOptions::default())
}

fn upstream(yaml: &str) -> Result<Config, ConfigError> {
    Config::from_yaml("f.yaml", yaml, &LoadOptions::default().compatibility(Compatibility::Upstream))
}

/// The error, checked to be at `line`, in `field`.
#[track_caller]
fn refused(result: Result<Config, ConfigError>, line: u64, field: &str) -> ConfigError {
    let err = result.expect_err("refused");
    assert_eq!((err.file(), err.line(), err.field()), ("f.yaml", Some(line), field), "{err}");
    assert!(err.to_string().starts_with(&format!("f.yaml:{line}:")), "{err}");
    err
}

/// The error's message, checked to be at `line`, in `field`.
#[track_caller]
fn message(result: Result<Config, ConfigError>, line: u64, field: &str) -> String {
    refused(result, line, field).kind().to_string()
}

#[test]
fn an_empty_file_or_domain_is_refused() {
    for (yaml, line) in [("", 1), ("# nothing\n", 2), ("domain: \"\"\n", 1), ("descriptors: []\n", 1)] {
        let err = refused(load(yaml), line, "domain");
        assert!(matches!(err.kind(), ConfigErrorKind::EmptyDomain), "{err}");
    }
    assert_eq!(load("domain: d\n").unwrap().rules().len(), 0);
    assert_eq!(load("domain: d\ndescriptors:\n").unwrap().rules().len(), 0);
}

#[test]
fn upstreams_load_errors() {
    let cases: [(&str, u64, &str, &str); 12] = [
        ("domain: d\ndescriptors:\n  - value: v\n", 3, "descriptors[0].key", "descriptor has empty key"),
        (
            "domain: d\ndescriptors:\n  - key: k\n    value: v\n  - key: k\n    value: v\n",
            5,
            "descriptors[1]",
            "duplicate descriptor composite key 'd.k_v'",
        ),
        (
            "domain: d\ndescriptors:\n  - key: a\n    descriptors:\n      - key: b_c\n      - key: b\n        value: c\n",
            6,
            "descriptors[0].descriptors[1]",
            "duplicate descriptor composite key 'd.a.b_c'",
        ),
        (
            "domain: d\ndescriptors:\n  - key: k\n    rate_limit:\n      unit: fortnight\n",
            5,
            "descriptors[0].rate_limit.unit",
            "invalid rate limit unit 'fortnight' (second, minute, hour, day, week, month or year)",
        ),
        (
            "domain: d\ndescriptors:\n  - key: k\n    rate_limit:\n      requests_per_unit: 5\n",
            5,
            "descriptors[0].rate_limit.unit",
            "invalid rate limit unit '' (second, minute, hour, day, week, month or year)",
        ),
        (
            "domain: d\ndescriptors:\n  - key: k\n    rate_limit:\n      unlimited: true\n      unit: day\n",
            6,
            "descriptors[0].rate_limit.unit",
            "should not specify rate limit unit when unlimited",
        ),
        (
            "domain: d\ndescriptors:\n  - key: k\n    rate_limit:\n      unit: day\n      replaces:\n        - name: \"\"\n",
            7,
            "descriptors[0].rate_limit.replaces[0].name",
            "should not have an empty replaces entry",
        ),
        (
            "domain: d\ndescriptors:\n  - key: k\n    rate_limit:\n      name: me\n      unit: day\n      replaces:\n        - name: me\n",
            8,
            "descriptors[0].rate_limit.replaces[0].name",
            "replaces should not contain name of same descriptor ('me')",
        ),
        (
            "domain: d\ndescriptors:\n  - key: k\n    ratelimit: {}\n",
            4,
            "descriptors[0].ratelimit",
            "unknown key 'ratelimit'",
        ),
        (
            "domain: d\ndescriptors:\n  - key: k\n    rate_limit:\n      unit: day\n      requests_per_unt: 5\n",
            6,
            "descriptors[0].rate_limit.requests_per_unt",
            "unknown key 'requests_per_unt'",
        ),
        ("domain: d\ndescriptors:\n  - key: k\n    1: x\n", 4, "descriptors[0]", "key is not of type string: 1"),
        ("domain: d\ndescriptors:\n  - a\n", 3, "descriptors[0]", "list of type other than map"),
    ];
    for (yaml, line, field, want) in cases {
        assert_eq!(message(load(yaml), line, field), want, "{yaml}");
        // Upstream mode refuses them alike.
        assert_eq!(message(upstream(yaml), line, field), want, "{yaml}");
    }
}

#[test]
fn share_threshold_needs_a_wildcard() {
    let yaml = "domain: d\ndescriptors:\n  - key: k\n    value: v\n    share_threshold: true\n";
    assert_eq!(
        message(load(yaml), 3, "descriptors[0].share_threshold"),
        "share_threshold can only be used with wildcard values (containing '*'), but found key 'k_v'"
    );
}

#[test]
fn scalars_are_typed_as_upstream_types_them() {
    let cases: [(&str, u64, &str, &str); 6] = [
        (
            "domain: d\ndescriptors:\n  - key: k\n    value: 1.5\n",
            4,
            "descriptors[0].value",
            "floating-point number 1.5 is not accepted; quote it to make it a string",
        ),
        (
            "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: day, requests_per_unit: 5.0}\n",
            4,
            "descriptors[0].rate_limit.requests_per_unit",
            "floating-point number 5.0 is not accepted; quote it to make it a string",
        ),
        (
            "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: day, requests_per_unit: -1}\n",
            4,
            "descriptors[0].rate_limit.requests_per_unit",
            "-1 is out of range (0 to 4294967295)",
        ),
        (
            "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: day, requests_per_unit: 4294967296}\n",
            4,
            "descriptors[0].rate_limit.requests_per_unit",
            "4294967296 is out of range (0 to 4294967295)",
        ),
        (
            "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: day, requests_per_unit: \"5\"}\n",
            4,
            "descriptors[0].rate_limit.requests_per_unit",
            "expected an integer, found a string",
        ),
        (
            "domain: d\ndescriptors:\n  - key: k\n    shadow_mode: \"true\"\n",
            4,
            "descriptors[0].shadow_mode",
            "expected true or false, found a string",
        ),
    ];
    for (yaml, line, field, want) in cases {
        assert_eq!(message(load(yaml), line, field), want, "{yaml}");
    }
    // Plain scalars are strings as written, in any string field.
    let config = load(
        "domain: 123\ndescriptors:\n  - key: on\n    value: yes\n    rate_limit: {unit: Day, requests_per_unit: 0x10, name: 50.0.0.5}\n    shadow_mode: on\n",
    )
    .unwrap();
    let m = config.match_descriptor("123", &Descriptor::new([("on", "yes")])).unwrap();
    let DescriptorMatch::Limited(limited) = m else { panic!("{m:?}") };
    assert_eq!((limited.limit().requests_per_unit(), limited.limit().unit()), (16, Some(Unit::Day)));
    assert_eq!(limited.name(), Some("50.0.0.5"));
    assert!(limited.shadow());
    // `value: ~` and `value: ""` are no value.
    let config = load(
        "domain: d\ndescriptors:\n  - key: k\n    value: ~\n    rate_limit: {unit: second, requests_per_unit: 1}\n",
    )
    .unwrap();
    assert_eq!(config.rules()[0].key_path(), "k");
}

#[test]
fn yaml_syntax_errors_name_the_line() {
    let err = load("domain: d\ndescriptors:\n  - key: [k\n").unwrap_err();
    assert!(matches!(err.kind(), ConfigErrorKind::Yaml(_)), "{err}");
    assert!(err.line().is_some(), "{err}");
    let err = load("domain: d\n---\ndomain: e\n").unwrap_err();
    assert!(matches!(err.kind(), ConfigErrorKind::MultipleDocuments), "{err}");
}

#[test]
fn strict_mode_refuses_what_upstream_ignores() {
    // A key twice: upstream keeps the last.
    let twice = "domain: d\ndescriptors:\n  - key: k\n    rate_limit:\n      unit: day\n      unit: second\n      requests_per_unit: 1\n";
    assert_eq!(message(load(twice), 6, "descriptors[0].rate_limit.unit"), "duplicate key 'unit' (first on line 5)");
    let config = upstream(twice).unwrap();
    let RuleLimit::Limited(limit) = config.rules()[0].limit() else { panic!() };
    assert_eq!(limit.unit(), Some(Unit::Second));

    // A key of another level: upstream ignores it there.
    let misplaced = "domain: d\ndescriptors:\n  - key: k\n    rate_limit:\n      unit: day\n      shadow_mode: true\n";
    assert_eq!(
        message(load(misplaced), 6, "descriptors[0].rate_limit.shadow_mode"),
        "'shadow_mode' belongs in a descriptor"
    );
    let config = upstream(misplaced).unwrap();
    assert!(!config.rules()[0].shadow_mode());
    assert_eq!(config.warnings().len(), 1);
    assert_eq!(config.warnings()[0].line(), 6);
    // Upstream still checks the keys of what it ignores.
    let nested = "domain: d\nunit:\n  - bogus: 1\n";
    assert_eq!(message(upstream(nested), 3, "unit[0].bogus"), "unknown key 'bogus'");

    // An invalid unit on an unlimited rule: upstream ignores it.
    let unlimited =
        "domain: d\ndescriptors:\n  - key: k\n    rate_limit:\n      unlimited: true\n      unit: fortnight\n";
    assert_eq!(
        message(load(unlimited), 6, "descriptors[0].rate_limit.unit"),
        "invalid rate limit unit 'fortnight' on an unlimited rule (remove it)"
    );
    assert_eq!(upstream(unlimited).unwrap().rules()[0].limit(), &RuleLimit::Unlimited);
}

#[test]
fn metadata_and_quota_mode_are_accepted_with_a_warning() {
    let config = load(
        "domain: d\ndescriptors:\n  - key: k\n    quota_mode: true\n    metadata:\n      any: [1.5, {x: y}]\n    rate_limit: {unit: day, requests_per_unit: 1}\n",
    )
    .unwrap();
    let warnings: Vec<_> = config.warnings().iter().map(|w| (w.line(), w.field().to_owned())).collect();
    assert_eq!(warnings, [(4, "descriptors[0].quota_mode".to_owned()), (5, "descriptors[0].metadata".to_owned())]);
    assert!(config.rules()[0].quota_mode());
}

#[test]
fn weirs_additions() {
    let rule = |yaml: &str| {
        let config = load(&format!("domain: d\ndescriptors:\n  - key: k\n    rate_limit: {yaml}\n")).unwrap();
        let RuleLimit::Limited(limit) = *config.rules()[0].limit() else { panic!() };
        limit
    };
    let gcra = rule("{unit: minute, requests_per_unit: 100, algorithm: gcra, burst: 10}");
    assert_eq!((gcra.algorithm(), gcra.quota().unwrap().burst()), (Algorithm::Gcra, 10));
    let window = rule("{window: 30s, requests_per_unit: 10, algorithm: sliding_window}");
    assert_eq!((window.window().as_secs(), window.unit(), window.algorithm()), (30, None, Algorithm::SlidingWindow));
    assert_eq!(rule("{window: 1m, requests_per_unit: 10}").unit(), Some(Unit::Minute));
    assert_eq!(rule("{unit: hour, requests_per_unit: 10}").algorithm(), Algorithm::FixedWindow);

    // The service-wide default.
    let options = LoadOptions::default().default_algorithm(Algorithm::SlidingLog);
    let config = Config::from_yaml(
        "f.yaml",
        "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: day, requests_per_unit: 3}\n",
        &options,
    )
    .unwrap();
    let RuleLimit::Limited(limit) = config.rules()[0].limit() else { panic!() };
    assert_eq!(limit.algorithm(), Algorithm::SlidingLog);

    let bad = |yaml: &str| load(&format!("domain: d\ndescriptors:\n  - key: k\n    rate_limit: {yaml}\n")).unwrap_err();
    let cases: [(&str, &str, &str); 8] = [
        (
            "{unit: day, requests_per_unit: 1, algorithm: leaky}",
            "descriptors[0].rate_limit.algorithm",
            "invalid algorithm 'leaky' (fixed_window, sliding_window, sliding_log or gcra)",
        ),
        (
            "{unit: day, requests_per_unit: 1, burst: 5}",
            "descriptors[0].rate_limit.burst",
            "burst applies to the gcra algorithm only (this rule is fixed_window)",
        ),
        (
            "{unit: day, requests_per_unit: 0, algorithm: gcra, burst: 5}",
            "descriptors[0].rate_limit.burst",
            "burst on a limit of 0 requests",
        ),
        (
            "{unit: day, requests_per_unit: 1, algorithm: gcra, burst: 0}",
            "descriptors[0].rate_limit",
            "the limit cannot be enforced: a quota's burst is zero; it must admit at least 1 request at once",
        ),
        (
            "{window: 1.5s, requests_per_unit: 1}",
            "descriptors[0].rate_limit.window",
            "invalid window '1.5s' (a whole number of seconds such as 30s, 5m, 1h30m, 1d or 1w)",
        ),
        (
            "{window: 0s, requests_per_unit: 1}",
            "descriptors[0].rate_limit.window",
            "invalid window '0s' (a whole number of seconds such as 30s, 5m, 1h30m, 1d or 1w)",
        ),
        (
            "{unit: day, window: 30s, requests_per_unit: 1}",
            "descriptors[0].rate_limit.window",
            "both unit and window; give one",
        ),
        ("{unlimited: true, algorithm: gcra}", "descriptors[0].rate_limit.algorithm", "algorithm on an unlimited rule"),
    ];
    for (yaml, field, want) in cases {
        let err = bad(yaml);
        assert_eq!((err.line(), err.field(), err.kind().to_string().as_str()), (Some(4), field, want), "{yaml}");
    }
    // weir's keys anywhere else.
    let err = load("domain: d\ndescriptors:\n  - key: k\n    burst: 5\n").unwrap_err();
    assert_eq!(
        (err.field(), err.kind().to_string().as_str()),
        ("descriptors[0].burst", "'burst' belongs in a rate_limit")
    );
    // A refill longer than weir's arithmetic spans.
    let err = bad("{window: 520w, requests_per_unit: 1}");
    assert!(matches!(err.kind(), ConfigErrorKind::Quota(_)), "{err}");
}

#[test]
fn bounds_are_typed_errors() {
    let deep = |levels: usize| {
        let mut yaml = String::from("domain: d\ndescriptors:\n");
        for level in 0..levels {
            let pad = "    ".repeat(level);
            yaml += &format!("{pad}  - key: k{level}\n{pad}    descriptors:\n");
        }
        yaml
    };
    let options = LoadOptions::default().limits(Limits::default().max_depth(4));
    assert!(Config::from_yaml("f.yaml", &deep(4), &options).is_ok());
    let err = Config::from_yaml("f.yaml", &deep(5), &options).unwrap_err();
    assert!(matches!(err.kind(), ConfigErrorKind::TooDeep { max: 4 }), "{err}");
    assert_eq!(
        (err.line(), err.field()),
        (Some(11), "descriptors[0].descriptors[0].descriptors[0].descriptors[0].descriptors[0]")
    );
    // YAML nested far deeper than any descriptor tree is refused by the reader.
    let err = Config::from_yaml("f.yaml", &deep(200), &options).unwrap_err();
    assert!(matches!(err.kind(), ConfigErrorKind::TooDeep { max: 4 }), "{err}");

    let many =
        "domain: d\ndescriptors:\n".to_owned() + &(0..11).map(|i| format!("  - key: k{i}\n")).collect::<String>();
    let options = LoadOptions::default().limits(Limits::default().max_descriptors(10));
    let err = Config::from_yaml("f.yaml", &many, &options).unwrap_err();
    assert!(matches!(err.kind(), ConfigErrorKind::TooManyDescriptors { max: 10 }), "{err}");
    assert_eq!(err.line(), Some(13));
    // Across files.
    let five = |d: &str| {
        format!("domain: {d}\ndescriptors:\n") + &(0..6).map(|i| format!("  - key: k{i}\n")).collect::<String>()
    };
    let err =
        Config::from_sources([("a.yaml", five("a").as_str()), ("b.yaml", five("b").as_str())], &options).unwrap_err();
    assert_eq!(err.file(), "b.yaml");

    let options = LoadOptions::default().limits(Limits::default().max_file_bytes(16));
    let err = Config::from_yaml("f.yaml", "domain: a-long-domain-name\n", &options).unwrap_err();
    assert!(matches!(err.kind(), ConfigErrorKind::FileTooLarge { bytes: 27, max: 16 }), "{err}");
}

/// A fresh directory under the system's temporary directory, removed on drop.
struct Scratch(PathBuf);

impl Scratch {
    fn new(name: &str) -> Self {
        let dir = std::env::temp_dir().join(format!("weir-rls-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        Self(dir)
    }

    fn write(&self, path: &str, text: &str) -> PathBuf {
        let path = self.0.join(path);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, text).unwrap();
        path
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

#[test]
fn a_directory_is_every_file_under_it_but_dotfiles() {
    let dir = Scratch::new("dir");
    dir.write("b.yaml", "domain: b\n");
    dir.write("a.conf", "domain: a\n");
    dir.write("sub/c.yml", "domain: c\n");
    dir.write(".hidden.yaml", "domain: b\n");
    dir.write("..data/b.yaml", "domain: b\n");
    dir.write(".swp/x", "not yaml: [\n");
    let config = Config::load(&dir.0, &LoadOptions::default()).unwrap();
    let mut domains: Vec<_> = config.domains().collect();
    domains.sort_unstable();
    assert_eq!(domains, ["a", "b", "c"]);
    let files: Vec<_> = config.files().iter().map(|f| f.strip_prefix(dir.0.to_str().unwrap()).unwrap()).collect();
    assert_eq!(files, ["/a.conf", "/b.yaml", "/sub/c.yml"]);

    // An error names the file.
    let bad = dir.write("sub/d.yaml", "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: eon}\n");
    let err = Config::load(&dir.0, &LoadOptions::default()).unwrap_err();
    assert_eq!((err.file(), err.line()), (bad.to_str().unwrap(), Some(4)));
    std::fs::remove_file(bad).unwrap();

    // The same domain twice, named in both files.
    let second = dir.write("sub/e.yaml", "domain: a\n");
    let err = Config::load(&dir.0, &LoadOptions::default()).unwrap_err();
    assert_eq!(err.file(), second.to_str().unwrap());
    assert!(err.to_string().contains("duplicate domain 'a' in config file (first in"), "{err}");
    assert!(Config::load(&dir.0, &LoadOptions::default().merge_domains(true)).is_ok());
    std::fs::remove_file(second).unwrap();

    let options = LoadOptions::default().limits(Limits::default().max_files(2));
    let err = Config::load(&dir.0, &options).unwrap_err();
    assert!(matches!(err.kind(), ConfigErrorKind::TooManyFiles { max: 2 }), "{err}");

    // One file, and a path that is not there.
    assert_eq!(Config::load(dir.0.join("a.conf"), &LoadOptions::default()).unwrap().rules().len(), 0);
    let err = Config::load(dir.0.join("missing"), &LoadOptions::default()).unwrap_err();
    assert!(matches!(err.kind(), ConfigErrorKind::Io(_)), "{err}");
}

#[test]
fn merged_domains_refuse_the_same_top_level_descriptor() {
    let a = "domain: d\ndescriptors:\n  - key: k\n    descriptors:\n      - key: x\n";
    let b = "domain: d\ndescriptors:\n  - key: k\n    descriptors:\n      - key: y\n";
    let c = "domain: d\ndescriptors:\n  - key: other\n    rate_limit: {unit: day, requests_per_unit: 1}\n";
    let options = LoadOptions::default().merge_domains(true);
    let err = Config::from_sources([("a.yaml", a), ("b.yaml", b)], &options).unwrap_err();
    assert_eq!((err.file(), err.line()), ("b.yaml", Some(3)));
    assert_eq!(err.kind().to_string(), "duplicate descriptor composite key 'd.k'");
    let merged = Config::from_sources([("a.yaml", a), ("c.yaml", c)], &options).unwrap();
    assert!(matches!(
        merged.match_descriptor("d", &Descriptor::new([("other", "v")])),
        Ok(DescriptorMatch::Limited(_))
    ));
}

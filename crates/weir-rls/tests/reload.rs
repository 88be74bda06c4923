//! Reload: a valid change takes effect, an invalid one is refused and counted
//! while the old rules serve, unchanged rules keep their counters, calls in flight
//! finish on the config they started on, and a change to the files is seen.

mod common;

use common::{brief, descriptor, overall, request};
use metrics_util::debugging::{DebugValue, DebuggingRecorder};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;
use tokio::sync::Notify;
use weir_rl_core::{Decision, ManualClock, Nanos, Snapshot};
use weir_rls::backend::MemoryBackend;
use weir_rls::decider::{MemoryStores, StoreDecider};
use weir_rls::proto::rate_limit_response::Code;
use weir_rls::stats::{CONFIG_LOAD_ERROR, CONFIG_LOAD_SUCCESS};
use weir_rls::windows::EpochOffset;
use weir_rls::{Check, Config, Decide, DecideError, LoadOptions, Reloadable, RlsService};

/// A fresh directory for one test.
fn temp_dir(name: &str) -> PathBuf {
    static N: AtomicUsize = AtomicUsize::new(0);
    let dir = std::env::temp_dir().join(format!(
        "weir-rls-{name}-{}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    ));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn write(dir: &Path, file: &str, yaml: &str) {
    std::fs::write(dir.join(file), yaml).unwrap();
}

const V1: &str = "
domain: d
descriptors:
  - key: kept
    rate_limit: {unit: minute, requests_per_unit: 5}
  - key: changed
    rate_limit: {unit: minute, requests_per_unit: 5}
";

/// V1 with `changed` at 10, and a new rule.
const V2: &str = "
domain: d
descriptors:
  - key: kept
    rate_limit: {unit: minute, requests_per_unit: 5}
  - key: changed
    rate_limit: {unit: minute, requests_per_unit: 10}
  - key: new
    rate_limit: {unit: hour, requests_per_unit: 1}
";

type Live = Arc<Reloadable<StoreDecider>>;

fn live(dir: &Path) -> Live {
    let clock = ManualClock::new();
    let stores = Arc::new(MemoryStores::with_epoch(
        MemoryBackend::default(),
        clock,
        EpochOffset::at(Nanos::ZERO, Duration::ZERO),
    ));
    let build = move |config: &Arc<Config>, previous: Option<&StoreDecider>| {
        StoreDecider::build(Arc::clone(&stores) as _, config, previous)
    };
    Arc::new(Reloadable::load(dir, LoadOptions::default(), build).unwrap())
}

fn hit(key: &str) -> weir_rls::proto::RateLimitRequest {
    request("d", vec![descriptor(&[(key, "a")])])
}

/// The counters `names`, from one snapshot (a snapshot takes what it reads).
fn counters<const N: usize>(recorder: &DebuggingRecorder, names: [&str; N]) -> [u64; N] {
    let snapshot = recorder.snapshotter().snapshot().into_vec();
    names.map(|name| {
        snapshot
            .iter()
            .find_map(|(key, _, _, value)| match value {
                DebugValue::Counter(n) if key.key().name() == name => Some(*n),
                _ => None,
            })
            .unwrap_or(0)
    })
}

#[tokio::test]
async fn a_valid_change_takes_effect_and_unchanged_rules_keep_their_counters() {
    let dir = temp_dir("valid");
    write(&dir, "d.yaml", V1);
    let live = live(&dir);
    let service = RlsService::with_source(Arc::clone(&live));
    for _ in 0..3 {
        service.respond(hit("kept")).await.unwrap();
        service.respond(hit("changed")).await.unwrap();
    }
    assert_eq!(overall(&service.respond(hit("new")).await.unwrap()), Code::Ok, "no rule: no limit");

    write(&dir, "d.yaml", V2);
    live.reload().unwrap();
    // Unchanged: 3 spent before, 1 now.
    assert_eq!(brief(&service.respond(hit("kept")).await.unwrap().statuses[0]), (Code::Ok, Some(5), 1));
    // Changed: a new counter of the new limit.
    assert_eq!(brief(&service.respond(hit("changed")).await.unwrap().statuses[0]), (Code::Ok, Some(10), 9));
    assert_eq!(brief(&service.respond(hit("new")).await.unwrap().statuses[0]), (Code::Ok, Some(1), 0));
    assert_eq!(overall(&service.respond(hit("new")).await.unwrap()), Code::OverLimit);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[tokio::test]
async fn an_invalid_change_is_refused_and_counted_while_the_old_rules_serve() {
    let dir = temp_dir("invalid");
    write(&dir, "d.yaml", V1);
    let recorder = DebuggingRecorder::new();
    let live = metrics::with_local_recorder(&recorder, || live(&dir));
    let service = RlsService::with_source(Arc::clone(&live));
    service.respond(hit("kept")).await.unwrap();

    write(&dir, "d.yaml", &V2.replace("unit: hour", "unit: fortnight"));
    let error = live.reload().unwrap_err();
    assert!(error.to_string().contains("d.yaml:9:"), "{error}");
    assert!(error.to_string().contains("invalid rate limit unit 'fortnight'"), "{error}");
    write(&dir, "d.yaml", V2);
    write(&dir, "e.yaml", "domain: d\n");
    let error = live.reload().unwrap_err();
    assert!(error.to_string().contains("duplicate domain 'd'"), "{error}");
    assert_eq!(counters(&recorder, [CONFIG_LOAD_SUCCESS, CONFIG_LOAD_ERROR]), [1, 2]);

    // V1 serves on, its counters too.
    assert_eq!(brief(&service.respond(hit("kept")).await.unwrap().statuses[0]), (Code::Ok, Some(5), 3));
    assert_eq!(brief(&service.respond(hit("changed")).await.unwrap().statuses[0]), (Code::Ok, Some(5), 4));
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Admits everything once let through, saying so with a limit of 7.
#[derive(Default)]
struct Gate {
    entered: Notify,
    open: Notify,
}

impl Decide for Gate {
    async fn decide(&self, checks: &[Check<'_>]) -> Result<Vec<Decision>, DecideError> {
        self.entered.notify_one();
        self.open.notified().await;
        Ok(checks.iter().map(|c| Decision::allowed(Snapshot::new(c.quota.burst(), 7, 0))).collect())
    }
}

#[tokio::test]
async fn a_call_in_flight_finishes_on_the_config_it_started_on() {
    let dir = temp_dir("in-flight");
    write(&dir, "d.yaml", V1);
    let gate = Arc::new(Gate::default());
    let decider = Arc::clone(&gate);
    let live = Arc::new(Reloadable::load(&dir, LoadOptions::default(), move |_, _| Ok(Arc::clone(&decider))).unwrap());
    let service = Arc::new(RlsService::with_source(Arc::clone(&live)));
    let in_flight = tokio::spawn({
        let service = Arc::clone(&service);
        async move { service.respond(hit("changed")).await }
    });
    gate.entered.notified().await;

    write(&dir, "d.yaml", "domain: other\n");
    live.reload().unwrap();
    gate.open.notify_one();
    let answer = in_flight.await.unwrap().unwrap();
    assert_eq!(brief(&answer.statuses[0]), (Code::Ok, Some(5), 7), "answered on V1");
    let status = tonic::Status::from(service.respond(hit("changed")).await.unwrap_err());
    assert_eq!(status.code(), tonic::Code::NotFound, "the next call is on the new config");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[tokio::test]
async fn a_change_to_the_files_is_reloaded() {
    let dir = temp_dir("watch");
    write(&dir, "d.yaml", V1);
    let live = live(&dir);
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let _watch = live
        .watch(Duration::from_millis(50), move |outcome| {
            let _ = tx.send(outcome.map(|config| config.rules().len()).map_err(|e| e.to_string()));
        })
        .unwrap();
    let next = async |rx: &mut tokio::sync::mpsc::UnboundedReceiver<Result<usize, String>>| {
        // A hang guard, not a timing claim.
        tokio::time::timeout(Duration::from_secs(60), rx.recv()).await.expect("no reload seen").unwrap()
    };
    write(&dir, "d.yaml", V2);
    assert_eq!(next(&mut rx).await, Ok(3));
    // A file added in a subdirectory, then a bad one.
    std::fs::create_dir(dir.join("more")).unwrap();
    write(
        &dir.join("more"),
        "e.yaml",
        "domain: e\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 1}\n",
    );
    while next(&mut rx).await != Ok(4) {}
    write(&dir, "d.yaml", "domain: [");
    loop {
        if let Err(error) = next(&mut rx).await {
            assert!(error.contains("d.yaml"), "{error}");
            break;
        }
    }
    assert_eq!(live.config().map(|c| c.rules().len()), Some(4), "the last valid config serves");
    std::fs::remove_dir_all(&dir).unwrap();
}

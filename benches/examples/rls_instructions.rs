//! weir-rls's own path per decision, in process, for callgrind: the service the
//! binary serves (the load generator's config, `benches/rls/weir-rls.yaml`, in
//! memory, reloadable, Prometheus's recorder as the binary installs it) answering
//! prebuilt requests of a scenario (`weir_bench::rls`), without the network.
//!
//! `WARM` calls first (counters made, the hot one spent), then `N` requests, each:
//!
//! - `service`: given to `RateLimitService::should_rate_limit` (the request checked,
//!   matched, decided, counted in the metrics, answered);
//! - `codec`: decoded from its protobuf bytes first and the answer encoded after
//!   (what tonic's codec adds);
//! - `none`: dropped (the baseline).
//!
//! Every run makes the same requests and bytes. Callgrind counts the measured
//! calls alone (the poll of [`measure`]'s future); the difference of two modes,
//! divided by `N`, is what a decision costs:
//!
//! ```sh
//! cargo build --release -p weir-bench --features rls --example rls_instructions
//! for scenario in spread hot three; do for mode in none service codec; do
//!   valgrind --tool=callgrind --toggle-collect='rls_instructions::measure::{{closure}}' \
//!     --callgrind-out-file=$scenario-$mode.out \
//!     target/release/examples/rls_instructions $scenario $mode 100000 50000 2>&1 | grep Collected
//! done; done
//! callgrind_annotate spread-service.out   # where a decision's instructions go
//! ```

use prost::Message;
use std::hint::black_box;
use std::sync::Arc;
use weir_bench::rls::{Requests, Scenario};
use weir_rls::backend::MemoryBackend;
use weir_rls::decider::{MakeStore, MemoryStores, StoreDecider};
use weir_rls::proto::RateLimitRequest;
use weir_rls::proto::rate_limit_response::Code;
use weir_rls::proto::rate_limit_service_server::RateLimitService;
use weir_rls::windows::WindowAlignment;
use weir_rls::{Config, LoadOptions, Reloadable, RlsService};

/// The load generator's config for weir-rls.
const CONFIG: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/rls/weir-rls.yaml");

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    Service,
    Codec,
    None,
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let usage = "usage: rls_instructions spread|hot|three service|codec|none WARM N";
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [scenario, mode, warm, n] = args.as_slice() else {
        return Err(usage.into());
    };
    let scenario = Scenario::ALL.into_iter().find(|s| s.name() == scenario).ok_or(usage)?;
    let mode = match mode.as_str() {
        "service" => Mode::Service,
        "codec" => Mode::Codec,
        "none" => Mode::None,
        _ => return Err(usage.into()),
    };
    let (warm, n): (usize, usize) = (warm.parse()?, n.parse()?);

    // As the binary: the recorder first, its response-time histogram in buckets.
    metrics_exporter_prometheus::PrometheusBuilder::new()
        .set_buckets_for_metric(
            metrics_exporter_prometheus::Matcher::Full(weir_rls::stats::RESPONSE_TIME.to_owned()),
            &weir_rls::stats::RESPONSE_TIME_BUCKETS,
        )?
        .install_recorder()?;
    let stores: Arc<dyn MakeStore> = Arc::new(MemoryStores::new(MemoryBackend::default(), WindowAlignment::Epoch));
    let build = move |config: &Arc<Config>, previous: Option<&StoreDecider>| {
        StoreDecider::build(Arc::clone(&stores), config, previous)
    };
    let live = Arc::new(Reloadable::load(CONFIG, LoadOptions::default(), build)?);
    let service = RlsService::with_source(live);

    // The same requests and bytes in every run, whatever the mode.
    let mut requests = Requests::new(scenario, 100_000, "bench", 0x9e37_79b9_7f4a_7c15);
    let warm_up: Vec<RateLimitRequest> = (0..warm).map(|_| requests.next_request()).collect();
    let measured: Vec<RateLimitRequest> = (0..n).map(|_| requests.next_request()).collect();
    let encoded: Vec<Vec<u8>> = measured.iter().map(Message::encode_to_vec).collect();

    let runtime = tokio::runtime::Builder::new_current_thread().build()?;
    runtime.block_on(async {
        for request in warm_up {
            service.should_rate_limit(tonic::Request::new(request)).await?;
        }
        Ok::<_, tonic::Status>(())
    })?;
    let (ok, over) = measure(&runtime, &service, mode, measured, &encoded)?;
    println!("{} {mode:?}: {warm} warm-up calls, {n} requests: {ok} OK, {over} OVER_LIMIT", scenario.name());
    Ok(())
}

/// The measured calls, in a future of their own so that callgrind can count them
/// alone (`--toggle-collect='rls_instructions::measure::{{closure}}'`): `(OK,
/// OVER_LIMIT)`.
#[inline(never)]
fn measure<S: RateLimitService>(
    runtime: &tokio::runtime::Runtime,
    service: &S,
    mode: Mode,
    measured: Vec<RateLimitRequest>,
    encoded: &[Vec<u8>],
) -> Result<(u64, u64), tonic::Status> {
    runtime.block_on(async {
        let (mut ok, mut over) = (0u64, 0u64);
        let mut out = Vec::with_capacity(256);
        for (request, bytes) in measured.into_iter().zip(encoded) {
            let request = match mode {
                Mode::None => {
                    drop(black_box(request));
                    black_box(bytes);
                    continue;
                }
                Mode::Service => request,
                Mode::Codec => {
                    drop(black_box(request));
                    RateLimitRequest::decode(bytes.as_slice()).map_err(|e| tonic::Status::internal(e.to_string()))?
                }
            };
            let response = service.should_rate_limit(tonic::Request::new(request)).await?.into_inner();
            if mode == Mode::Codec {
                out.clear();
                response.encode(&mut out).map_err(|e| tonic::Status::internal(e.to_string()))?;
                black_box(&out);
            }
            if response.overall_code == i32::from(Code::Ok) {
                ok += 1;
            } else {
                over += 1;
            }
        }
        Ok((ok, over))
    })
}

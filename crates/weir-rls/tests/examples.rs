//! The files of `examples/`: the config loads, and the descriptors the Envoy
//! filter of `envoy.yaml` sends are answered as the config's comments say.

mod common;

use common::{brief, descriptor, overall, real_service, request};
use weir_rls::proto::rate_limit_response::Code;

fn example(path: &str) -> String {
    std::fs::read_to_string(std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("examples").join(path)).unwrap()
}

#[tokio::test]
async fn the_example_config_answers_as_its_comments_say() {
    let (service, _) = real_service(&example("config/edge.yaml"));
    let ask = |entries: &[(&str, &str)]| request("edge", vec![descriptor(entries)]);
    let r = service.respond(ask(&[("remote_address", "192.0.2.7")])).await.unwrap();
    assert_eq!(brief(&r.statuses[0]), (Code::Ok, Some(100), 99));
    let api = [("header_match", "api"), ("api_key", "k-123")];
    let r = service.respond(ask(&api)).await.unwrap();
    assert_eq!(brief(&r.statuses[0]), (Code::Ok, Some(1_000), 999));
    let exempt = [("header_match", "api"), ("api_key", "internal-batch-key")];
    let r = service.respond(ask(&exempt)).await.unwrap();
    assert_eq!((overall(&r), r.statuses[0].limit_remaining), (Code::Ok, u32::MAX));
}

#[test]
fn the_envoy_snippet_points_the_unchanged_filter_at_weir_rls() {
    let envoy = example("envoy.yaml");
    let parsed: serde_json::Value = serde_saphyr::from_str(&envoy).expect("envoy.yaml is YAML");
    let clusters = parsed["static_resources"]["clusters"].as_array().unwrap();
    let ratelimit = clusters.iter().find(|c| c["name"] == "ratelimit").expect("the ratelimit cluster");
    let address =
        &ratelimit["load_assignment"]["endpoints"][0]["lb_endpoints"][0]["endpoint"]["address"]["socket_address"];
    assert_eq!((address["address"].as_str(), address["port_value"].as_u64()), (Some("weir-rls"), Some(8081)));
    assert!(envoy.contains("domain: edge"), "the filter's domain is the config's");
}

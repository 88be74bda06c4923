//! One behavioural suite for every adapter of weir-http: each scenario
//! (`behaviour/scenarios.rs`) is written once against the harness
//! (`behaviour/harness.rs`: a server from limits on 127.0.0.1:0, its address
//! back) and runs against weir-tower (an axum server) and weir-actix (an actix-web
//! `HttpServer`), over real connections with a real HTTP client.

mod behaviour {
    pub mod harness;
    pub mod scenarios;
}

/// Runs each scenario against each adapter: `tower::<name>` and `actix::<name>`.
macro_rules! suite {
    ($($scenario:ident),* $(,)?) => {
        mod tower {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $scenario() {
                    super::behaviour::scenarios::$scenario::<super::behaviour::harness::Tower>().await;
                }
            )*
        }
        mod actix {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $scenario() {
                    super::behaviour::scenarios::$scenario::<super::behaviour::harness::Actix>().await;
                }
            )*
        }
    };
}

suite!(
    admitted_and_refused_responses_carry_the_headers_and_a_problem_body,
    the_legacy_headers_are_written_when_switched_on,
    skip_paths_and_methods_are_not_limited_nor_counted,
    the_longest_route_prefix_picks_the_policy,
    forwarding_headers_count_only_from_trusted_proxies,
    api_keys_are_counted_apart_and_a_missing_key_is_told_where_to_go,
    a_long_key_is_counted_as_its_hash,
    per_ip_and_per_user_limits_layer_all_or_nothing,
    tiers_decide_by_the_clients_plan,
    a_full_store_answers_too_many_clients,
    a_shadow_limit_is_invisible_to_the_client,
    reload_swaps_the_limits_and_keeps_what_was_spent,
    a_throttle_makes_requests_wait_their_turn,
    a_client_that_disconnects_while_waiting_frees_its_place,
);

//! A rate-limited tonic server: the echo service of `tests/proto/echo.proto`
//! (its Rust code checked in beside it), limited per method and per service.
//!
//! ```text
//! cargo run -p weir-tower --features grpc --example grpc
//! # In another terminal, with grpcurl: the fourth call at once is refused.
//! for i in $(seq 4); do grpcurl -plaintext -v -import-path crates/weir-tower/tests/proto -proto echo.proto \
//!     -d '{"text": "hi"}' 127.0.0.1:50051 weir.echo.v1.Echo/Say; done
//! # ERROR: Code: ResourceExhausted, Message: Too Many Requests: The rate limit for this client is
//! #   exhausted. Retry after 5995 ms. (policy "say", quota "say")   [about 6 s: 10 a minute, 3 at once]
//! # and, in the trailers-only response, grpc-retry-pushback-ms: 5995, the RateLimit fields, and
//! # grpc-status-details-bin, a google.rpc.Status whose RetryInfo says the same delay.
//! ```
//!
//! `WEIR_ADDR` sets the address (default `127.0.0.1:50051`).

#[path = "../tests/proto/echo.rs"]
mod echo;

use echo::echo_server::{Echo, EchoServer};
use echo::{CountRequest, SayReply, SayRequest};
use tonic::codegen::tokio_stream::{self, Iter};
use tonic::transport::Server;
use tonic::{Request, Response, Status};
use weir_tower::Config;

struct EchoService;

#[tonic::async_trait]
impl Echo for EchoService {
    async fn say(&self, request: Request<SayRequest>) -> Result<Response<SayReply>, Status> {
        Ok(Response::new(SayReply { text: request.into_inner().text }))
    }

    type CountStream = Iter<std::vec::IntoIter<Result<SayReply, Status>>>;

    async fn count(&self, request: Request<CountRequest>) -> Result<Response<Self::CountStream>, Status> {
        let replies: Vec<_> =
            (0..request.into_inner().n.min(100)).map(|i| Ok(SayReply { text: i.to_string() })).collect();
        Ok(Response::new(tokio_stream::iter(replies)))
    }
}

/// A method's path is `/package.Service/Method`: route prefixes name a method, or a
/// whole service (ending in `/`). A limit applies when a call starts: a stream
/// counts once.
const LIMITS: &str = r#"
[[policy]]
name = "say"
routes = ["/weir.echo.v1.Echo/Say"]
[[policy.limit]]
key = "ip"              # the peer address tonic gives (TcpConnectInfo)
quotas = [{ name = "say", algorithm = "gcra", limit = 10, window = "1m", burst = 3 }]

[[policy]]
name = "echo"
routes = ["/weir.echo.v1.Echo/"]
[[policy.limit]]
key = ["header:x-api-key", "ip"]  # gRPC metadata, or else the peer
quotas = [{ name = "minute", algorithm = "sliding_window", limit = 100, window = "1m" }]
"#;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let limits = Config::from_toml(LIMITS)?.layer()?;
    let addr = std::env::var("WEIR_ADDR").unwrap_or_else(|_| "127.0.0.1:50051".into()).parse()?;
    println!("serving weir.echo.v1.Echo on {addr}");
    Server::builder()
        // Refusals to gRPC calls are gRPC statuses: RESOURCE_EXHAUSTED, with the
        // retry delay as grpc-retry-pushback-ms and a google.rpc.RetryInfo.
        .layer(weir_tower::grpc::layer(limits))
        .add_service(EchoServer::new(EchoService))
        .serve(addr)
        .await?;
    Ok(())
}

// The Rust code of echo.proto: prost's messages and tonic's client and server, as
// tonic-prost-build 0.14 writes them (trimmed of the options the tests do not use:
// compression, message size limits). Checked in, so that no build needs protoc.
#![allow(dead_code, missing_docs, missing_debug_implementations, clippy::all)]

#[derive(Clone, PartialEq, Eq, Hash, ::prost::Message)]
pub struct SayRequest {
    #[prost(string, tag = "1")]
    pub text: ::prost::alloc::string::String,
}

#[derive(Clone, Copy, PartialEq, Eq, Hash, ::prost::Message)]
pub struct CountRequest {
    #[prost(uint32, tag = "1")]
    pub n: u32,
}

#[derive(Clone, PartialEq, Eq, Hash, ::prost::Message)]
pub struct SayReply {
    #[prost(string, tag = "1")]
    pub text: ::prost::alloc::string::String,
}

pub mod echo_client {
    use tonic::codegen::http::Uri;
    use tonic::codegen::*;

    #[derive(Debug, Clone)]
    pub struct EchoClient<T> {
        inner: tonic::client::Grpc<T>,
    }

    impl EchoClient<tonic::transport::Channel> {
        /// Attempt to create a new client by connecting to a given endpoint.
        pub async fn connect<D>(dst: D) -> Result<Self, tonic::transport::Error>
        where
            D: TryInto<tonic::transport::Endpoint>,
            D::Error: Into<StdError>,
        {
            let conn = tonic::transport::Endpoint::new(dst)?.connect().await?;
            Ok(Self::new(conn))
        }
    }

    impl<T> EchoClient<T>
    where
        T: tonic::client::GrpcService<tonic::body::Body>,
        T::Error: Into<StdError>,
        T::ResponseBody: Body<Data = Bytes> + std::marker::Send + 'static,
        <T::ResponseBody as Body>::Error: Into<StdError> + std::marker::Send,
    {
        pub fn new(inner: T) -> Self {
            let inner = tonic::client::Grpc::new(inner);
            Self { inner }
        }

        pub fn with_origin(inner: T, origin: Uri) -> Self {
            let inner = tonic::client::Grpc::with_origin(inner, origin);
            Self { inner }
        }

        pub async fn say(
            &mut self,
            request: impl tonic::IntoRequest<super::SayRequest>,
        ) -> std::result::Result<tonic::Response<super::SayReply>, tonic::Status> {
            self.inner
                .ready()
                .await
                .map_err(|e| tonic::Status::unknown(format!("Service was not ready: {}", e.into())))?;
            let codec = tonic_prost::ProstCodec::default();
            let path = http::uri::PathAndQuery::from_static("/weir.echo.v1.Echo/Say");
            let mut req = request.into_request();
            req.extensions_mut().insert(GrpcMethod::new("weir.echo.v1.Echo", "Say"));
            self.inner.unary(req, path, codec).await
        }

        pub async fn count(
            &mut self,
            request: impl tonic::IntoRequest<super::CountRequest>,
        ) -> std::result::Result<tonic::Response<tonic::codec::Streaming<super::SayReply>>, tonic::Status> {
            self.inner
                .ready()
                .await
                .map_err(|e| tonic::Status::unknown(format!("Service was not ready: {}", e.into())))?;
            let codec = tonic_prost::ProstCodec::default();
            let path = http::uri::PathAndQuery::from_static("/weir.echo.v1.Echo/Count");
            let mut req = request.into_request();
            req.extensions_mut().insert(GrpcMethod::new("weir.echo.v1.Echo", "Count"));
            self.inner.server_streaming(req, path, codec).await
        }
    }
}

pub mod echo_server {
    use tonic::codegen::*;

    /// Generated trait containing gRPC methods that should be implemented for use with EchoServer.
    #[async_trait]
    pub trait Echo: std::marker::Send + std::marker::Sync + 'static {
        async fn say(
            &self,
            request: tonic::Request<super::SayRequest>,
        ) -> std::result::Result<tonic::Response<super::SayReply>, tonic::Status>;

        /// Server streaming response type for the Count method.
        type CountStream: tonic::codegen::tokio_stream::Stream<Item = std::result::Result<super::SayReply, tonic::Status>>
            + std::marker::Send
            + 'static;

        async fn count(
            &self,
            request: tonic::Request<super::CountRequest>,
        ) -> std::result::Result<tonic::Response<Self::CountStream>, tonic::Status>;
    }

    #[derive(Debug)]
    pub struct EchoServer<T> {
        inner: Arc<T>,
    }

    impl<T> EchoServer<T> {
        pub fn new(inner: T) -> Self {
            Self::from_arc(Arc::new(inner))
        }

        pub fn from_arc(inner: Arc<T>) -> Self {
            Self { inner }
        }
    }

    impl<T, B> tonic::codegen::Service<http::Request<B>> for EchoServer<T>
    where
        T: Echo,
        B: Body + std::marker::Send + 'static,
        B::Error: Into<StdError> + std::marker::Send + 'static,
    {
        type Response = http::Response<tonic::body::Body>;
        type Error = std::convert::Infallible;
        type Future = BoxFuture<Self::Response, Self::Error>;

        fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<std::result::Result<(), Self::Error>> {
            Poll::Ready(Ok(()))
        }

        fn call(&mut self, req: http::Request<B>) -> Self::Future {
            match req.uri().path() {
                "/weir.echo.v1.Echo/Say" => {
                    #[allow(non_camel_case_types)]
                    struct SaySvc<T: Echo>(pub Arc<T>);
                    impl<T: Echo> tonic::server::UnaryService<super::SayRequest> for SaySvc<T> {
                        type Response = super::SayReply;
                        type Future = BoxFuture<tonic::Response<Self::Response>, tonic::Status>;
                        fn call(&mut self, request: tonic::Request<super::SayRequest>) -> Self::Future {
                            let inner = Arc::clone(&self.0);
                            let fut = async move { <T as Echo>::say(&inner, request).await };
                            Box::pin(fut)
                        }
                    }
                    let inner = self.inner.clone();
                    let fut = async move {
                        let method = SaySvc(inner);
                        let codec = tonic_prost::ProstCodec::default();
                        let mut grpc = tonic::server::Grpc::new(codec);
                        let res = grpc.unary(method, req).await;
                        Ok(res)
                    };
                    Box::pin(fut)
                }
                "/weir.echo.v1.Echo/Count" => {
                    #[allow(non_camel_case_types)]
                    struct CountSvc<T: Echo>(pub Arc<T>);
                    impl<T: Echo> tonic::server::ServerStreamingService<super::CountRequest> for CountSvc<T> {
                        type Response = super::SayReply;
                        type ResponseStream = T::CountStream;
                        type Future = BoxFuture<tonic::Response<Self::ResponseStream>, tonic::Status>;
                        fn call(&mut self, request: tonic::Request<super::CountRequest>) -> Self::Future {
                            let inner = Arc::clone(&self.0);
                            let fut = async move { <T as Echo>::count(&inner, request).await };
                            Box::pin(fut)
                        }
                    }
                    let inner = self.inner.clone();
                    let fut = async move {
                        let method = CountSvc(inner);
                        let codec = tonic_prost::ProstCodec::default();
                        let mut grpc = tonic::server::Grpc::new(codec);
                        let res = grpc.server_streaming(method, req).await;
                        Ok(res)
                    };
                    Box::pin(fut)
                }
                _ => Box::pin(async move {
                    let mut response = http::Response::new(tonic::body::Body::default());
                    let headers = response.headers_mut();
                    headers.insert(tonic::Status::GRPC_STATUS, (tonic::Code::Unimplemented as i32).into());
                    headers.insert(http::header::CONTENT_TYPE, tonic::metadata::GRPC_CONTENT_TYPE);
                    Ok(response)
                }),
            }
        }
    }

    impl<T> Clone for EchoServer<T> {
        fn clone(&self) -> Self {
            let inner = self.inner.clone();
            Self { inner }
        }
    }

    /// Generated gRPC service name
    pub const SERVICE_NAME: &str = "weir.echo.v1.Echo";

    impl<T> tonic::server::NamedService for EchoServer<T> {
        const NAME: &'static str = SERVICE_NAME;
    }
}

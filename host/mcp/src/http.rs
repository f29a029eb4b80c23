//! Streamable HTTP: one endpoint, `/mcp`, served by hyper.
//!
//! The `Host` header must name a loopback host unless other hosts are
//! allowed, and a browser's `Origin` must be a loopback origin: together
//! they stop DNS-rebinding pages from reaching a local server. With a
//! bearer token set, every request must carry `Authorization: Bearer
//! <token>`.

use std::convert::Infallible;
use std::sync::Arc;

use bytes::Bytes;
use http_body_util::{BodyExt, Full, combinators::BoxBody};
use hyper::body::Incoming;
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::{TokioExecutor, TokioIo};
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use tokio::net::TcpListener;

use crate::RyeServer;

/// The path MCP is served on.
pub const ENDPOINT: &str = "/mcp";

/// How the HTTP server admits requests.
#[derive(Debug, Clone, Default)]
pub struct HttpOptions {
    /// Require `Authorization: Bearer <token>`.
    pub bearer_token: Option<String>,
    /// Hosts accepted in `Host` besides the loopback ones.
    pub extra_hosts: Vec<String>,
}

type Body = BoxBody<Bytes, Infallible>;

fn plain(status: StatusCode, text: &'static str) -> Response<Body> {
    let mut response = Response::new(Full::new(Bytes::from_static(text.as_bytes())).boxed());
    *response.status_mut() = status;
    response
}

/// Serves MCP over streamable HTTP on `listener` until the task is dropped.
pub async fn serve_http(
    server: RyeServer,
    listener: TcpListener,
    options: HttpOptions,
) -> anyhow::Result<()> {
    let mut hosts = vec![
        "localhost".to_owned(),
        "127.0.0.1".to_owned(),
        "::1".to_owned(),
    ];
    hosts.extend(options.extra_hosts.iter().cloned());
    let config = StreamableHttpServerConfig::default()
        .with_allowed_hosts(hosts)
        .with_allowed_origins(["http://localhost:*", "http://127.0.0.1:*", "http://[::1]:*"]);
    let service = StreamableHttpService::new(
        move || Ok(server.clone()),
        Arc::new(LocalSessionManager::default()),
        config,
    );
    let token: Option<Arc<str>> = options.bearer_token.map(Arc::from);
    loop {
        let (stream, _) = listener.accept().await?;
        let service = service.clone();
        let token = token.clone();
        tokio::spawn(async move {
            let handler = hyper::service::service_fn(move |request: Request<Incoming>| {
                let mut service = service.clone();
                let token = token.clone();
                async move {
                    if request.uri().path() != ENDPOINT {
                        return Ok::<_, Infallible>(plain(
                            StatusCode::NOT_FOUND,
                            "MCP is served at /mcp\n",
                        ));
                    }
                    if let Some(token) = &token {
                        let presented = request
                            .headers()
                            .get(hyper::header::AUTHORIZATION)
                            .and_then(|v| v.to_str().ok())
                            .and_then(|v| v.strip_prefix("Bearer "));
                        if presented != Some(token.as_ref()) {
                            let mut response = plain(
                                StatusCode::UNAUTHORIZED,
                                "a valid bearer token is required\n",
                            );
                            response.headers_mut().insert(
                                hyper::header::WWW_AUTHENTICATE,
                                hyper::header::HeaderValue::from_static("Bearer"),
                            );
                            return Ok(response);
                        }
                    }
                    let response = tower_service::Service::call(&mut service, request).await;
                    Ok(match response {
                        Ok(response) => response,
                        Err(never) => match never {},
                    })
                }
            });
            let served = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new())
                .serve_connection(TokioIo::new(stream), handler)
                .await;
            if let Err(e) = served {
                tracing::debug!("HTTP connection ended: {e}");
            }
        });
    }
}

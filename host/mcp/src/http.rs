//! Streamable HTTP: one endpoint, `/mcp`, served by hyper.
//!
//! The `Host` header must name a loopback host unless other hosts are
//! allowed, and a browser's `Origin` must be a loopback origin: together
//! they stop DNS-rebinding pages from reaching a local server. With a
//! bearer token set, every request must carry `Authorization: Bearer
//! <token>`.
//!
//! The server holds up against clients that misbehave: a connection that
//! does not finish its headers within [`HttpOptions::header_timeout`], or
//! its body within [`HttpOptions::body_timeout`], is closed; running out of
//! file descriptors backs off and retries rather than ending the server;
//! a body that is not JSON gets 400 with a JSON-RPC parse error. Sessions
//! idle for [`HttpOptions::session_idle`] are closed and their memory
//! freed, and past [`HttpOptions::max_sessions`] a new session is refused
//! with 503 and `Retry-After`. A client that disconnects while a call runs
//! cancels it, as a `notifications/cancelled` would.

use std::collections::HashMap;
use std::convert::Infallible;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Full, Limited, combinators::BoxBody};
use hyper::body::{Body as _, Frame, Incoming, SizeHint};
use hyper::header::{HeaderValue, RETRY_AFTER};
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};
use rmcp::model::ClientJsonRpcMessage;
use rmcp::transport::streamable_http_server::session::SessionManager;
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use serde_json::{Value, json};
use tokio::net::TcpListener;

use crate::RyeServer;
use crate::jsonrpc;

/// The path MCP is served on.
pub const ENDPOINT: &str = "/mcp";

const SESSION_HEADER: &str = "mcp-session-id";

/// How the HTTP server admits requests and keeps sessions.
#[derive(Debug, Clone)]
pub struct HttpOptions {
    /// Require `Authorization: Bearer <token>`.
    pub bearer_token: Option<String>,
    /// Hosts accepted in `Host` besides the loopback ones.
    pub extra_hosts: Vec<String>,
    /// A session with no request for this long (and none running) is
    /// closed.
    pub session_idle: Duration,
    /// At most this many sessions at once; a new one beyond it gets 503.
    pub max_sessions: usize,
    /// A connection must send a request's headers within this time.
    pub header_timeout: Duration,
    /// A request's body must arrive within this time.
    pub body_timeout: Duration,
    /// The largest request body accepted (413 beyond it).
    pub max_body: usize,
}

impl Default for HttpOptions {
    fn default() -> Self {
        Self {
            bearer_token: None,
            extra_hosts: Vec::new(),
            session_idle: Duration::from_secs(300),
            max_sessions: 1000,
            header_timeout: Duration::from_secs(10),
            body_timeout: Duration::from_secs(30),
            max_body: 16 << 20,
        }
    }
}

type Body = BoxBody<Bytes, Infallible>;

fn plain(status: StatusCode, text: &'static str) -> Response<Body> {
    let mut response = Response::new(Full::new(Bytes::from_static(text.as_bytes())).boxed());
    *response.status_mut() = status;
    response
}

fn json_response(status: StatusCode, body: &Value) -> Response<Body> {
    let bytes = serde_json::to_vec(body).unwrap_or_default();
    let mut response = Response::new(Full::new(Bytes::from(bytes)).boxed());
    *response.status_mut() = status;
    response.headers_mut().insert(
        hyper::header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    response
}

/// The sessions this server has handed out, with when each was last used
/// and how many of its requests are still answering.
#[derive(Default)]
struct Sessions {
    live: Mutex<HashMap<String, Activity>>,
    /// Sessions being made (an `initialize` in flight), counted against
    /// the cap with the live ones; changed only under `live`'s lock.
    making: std::sync::atomic::AtomicUsize,
}

struct Activity {
    last_seen: Instant,
    in_flight: usize,
}

impl Sessions {
    /// Holds a place for a session about to be made, until the returned
    /// guard is dropped (by then the session is live or was not made);
    /// `None` at the cap.
    fn reserve(&self, max: usize) -> Option<Reservation<'_>> {
        use std::sync::atomic::Ordering::SeqCst;
        let live = self.live.lock().expect("sessions lock");
        if live.len() + self.making.load(SeqCst) >= max {
            return None;
        }
        self.making.fetch_add(1, SeqCst);
        Some(Reservation(self))
    }

    fn contains(&self, id: &str) -> bool {
        self.live.lock().expect("sessions lock").contains_key(id)
    }

    /// Notes a request of session `id` starting (`insert` for a session
    /// just made).
    fn begin(&self, id: &str, insert: bool) {
        let mut live = self.live.lock().expect("sessions lock");
        let activity = match live.get_mut(id) {
            Some(activity) => activity,
            None if insert => live.entry(id.to_owned()).or_insert(Activity {
                last_seen: Instant::now(),
                in_flight: 0,
            }),
            None => return,
        };
        activity.last_seen = Instant::now();
        activity.in_flight += 1;
    }

    fn end(&self, id: &str) {
        if let Some(activity) = self.live.lock().expect("sessions lock").get_mut(id) {
            activity.last_seen = Instant::now();
            activity.in_flight = activity.in_flight.saturating_sub(1);
        }
    }

    fn remove(&self, id: &str) {
        self.live.lock().expect("sessions lock").remove(id);
    }

    /// Takes out the sessions idle for longer than `idle`.
    fn take_idle(&self, idle: Duration) -> Vec<String> {
        let mut live = self.live.lock().expect("sessions lock");
        let expired: Vec<String> = live
            .iter()
            .filter(|(_, a)| a.in_flight == 0 && a.last_seen.elapsed() > idle)
            .map(|(id, _)| id.clone())
            .collect();
        for id in &expired {
            live.remove(id);
        }
        expired
    }
}

/// A place held for a session being made.
struct Reservation<'a>(&'a Sessions);

impl Drop for Reservation<'_> {
    fn drop(&mut self) {
        let _live = self.0.live.lock().expect("sessions lock");
        self.0
            .making
            .fetch_sub(1, std::sync::atomic::Ordering::SeqCst);
    }
}

/// Everything a connection's handler shares.
struct Shared {
    service: StreamableHttpService<RyeServer, LocalSessionManager>,
    manager: Arc<LocalSessionManager>,
    sessions: Sessions,
    token: Option<String>,
    options: HttpOptions,
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
        .with_allowed_origins(["http://localhost:*", "http://127.0.0.1:*", "http://[::1]:*"])
        .with_max_request_body_bytes(options.max_body);
    let mut manager = LocalSessionManager::default();
    // The worker's own idle limit is a backstop; the sweep below closes
    // idle sessions and frees what they hold.
    manager.session_config.keep_alive = Some(options.session_idle + options.session_idle / 2);
    let manager = Arc::new(manager);
    let shared_rye = server.rye.clone();
    let service =
        StreamableHttpService::new(move || Ok(server.for_session()), manager.clone(), config);
    let shared = Arc::new(Shared {
        service,
        manager,
        sessions: Sessions::default(),
        token: options.bearer_token.clone(),
        options,
    });
    tokio::spawn(sweep(Arc::downgrade(&shared)));
    crate::sweep_mcp_sessions(&shared_rye);

    let mut backoff = Duration::ZERO;
    loop {
        let stream = match listener.accept().await {
            Ok((stream, _)) => {
                backoff = Duration::ZERO;
                stream
            }
            Err(e) => {
                // Out of descriptors or memory, or a connection reset
                // before it was accepted: wait and go on serving.
                backoff = (backoff * 2).clamp(Duration::from_millis(5), Duration::from_secs(1));
                tracing::warn!("accepting a connection failed ({e}); retrying in {backoff:?}");
                tokio::time::sleep(backoff).await;
                continue;
            }
        };
        let shared = shared.clone();
        tokio::spawn(async move {
            let header_timeout = shared.options.header_timeout;
            let handler = hyper::service::service_fn(move |request: Request<Incoming>| {
                let shared = shared.clone();
                async move { Ok::<_, Infallible>(handle(&shared, request).await) }
            });
            // HTTP/1.1 only: the header timeout then runs from the moment
            // the connection is accepted, so a client that sends nothing,
            // or one byte, is closed too (protocol detection for HTTP/2
            // would wait for bytes with no limit).
            let served = hyper::server::conn::http1::Builder::new()
                .timer(TokioTimer::new())
                .header_read_timeout(header_timeout)
                .serve_connection(TokioIo::new(stream), handler)
                .await;
            if let Err(e) = served {
                tracing::debug!("HTTP connection ended: {e}");
            }
        });
    }
}

/// Closes sessions that have been idle too long, until the server is gone.
async fn sweep(shared: std::sync::Weak<Shared>) {
    let every = {
        let Some(shared) = shared.upgrade() else {
            return;
        };
        (shared.options.session_idle / 4).clamp(Duration::from_millis(50), Duration::from_secs(5))
    };
    loop {
        tokio::time::sleep(every).await;
        let Some(shared) = shared.upgrade() else {
            return;
        };
        for id in shared.sessions.take_idle(shared.options.session_idle) {
            tracing::debug!(session = %id, "closing an idle session");
            let _ = shared.manager.close_session(&id.into()).await;
        }
    }
}

async fn handle(shared: &Arc<Shared>, request: Request<Incoming>) -> Response<Body> {
    if request.uri().path() != ENDPOINT {
        return plain(StatusCode::NOT_FOUND, "MCP is served at /mcp\n");
    }
    if let Some(token) = &shared.token {
        let presented = request
            .headers()
            .get(hyper::header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "));
        if presented != Some(token.as_str()) {
            let mut response = plain(
                StatusCode::UNAUTHORIZED,
                "a valid bearer token is required\n",
            );
            response.headers_mut().insert(
                hyper::header::WWW_AUTHENTICATE,
                HeaderValue::from_static("Bearer"),
            );
            return response;
        }
    }
    let session = request
        .headers()
        .get(SESSION_HEADER)
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    match *request.method() {
        Method::POST => post(shared, request, session).await,
        Method::DELETE => delete(shared, request, session).await,
        _ => {
            let response = call(shared, request).await;
            track(shared, response, session, None)
        }
    }
}

async fn post(
    shared: &Arc<Shared>,
    request: Request<Incoming>,
    session: Option<String>,
) -> Response<Body> {
    let (parts, body) = request.into_parts();
    let limit = shared.options.max_body;
    let collected = tokio::time::timeout(
        shared.options.body_timeout,
        Limited::new(body, limit).collect(),
    )
    .await;
    let bytes = match collected {
        Err(_) => {
            return plain(
                StatusCode::REQUEST_TIMEOUT,
                "the request body did not arrive in time\n",
            );
        }
        Ok(Err(e)) if e.is::<http_body_util::LengthLimitError>() => {
            return json_response(
                StatusCode::PAYLOAD_TOO_LARGE,
                &jsonrpc::error_body(
                    None,
                    jsonrpc::INVALID_REQUEST,
                    &format!("the request body is larger than {limit} bytes"),
                ),
            );
        }
        Ok(Err(_)) => return plain(StatusCode::BAD_REQUEST, "the request body was cut off\n"),
        Ok(Ok(collected)) => collected.to_bytes(),
    };
    let message: Value = match serde_json::from_slice(&bytes) {
        Ok(message) => message,
        Err(e) => {
            return json_response(StatusCode::BAD_REQUEST, &jsonrpc::parse_error(&bytes, &e));
        }
    };
    let reservation = match session {
        Some(_) => None,
        None => match shared.sessions.reserve(shared.options.max_sessions) {
            Some(reservation) => Some(reservation),
            None => return busy(shared, &message),
        },
    };
    // A request (not a notification or response) may be cancelled if its
    // client goes away before the answer is complete.
    let request_id = message
        .get("method")
        .and(message.get("id"))
        .filter(|id| id.is_string() || id.is_number())
        .cloned();
    let request = Request::from_parts(parts, Full::new(bytes));
    if let Some(id) = &session {
        shared.sessions.begin(id, false);
    }
    let response = call(shared, request).await;
    let session = session.or_else(|| {
        response
            .headers()
            .get(SESSION_HEADER)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned)
    });
    if let Some(reservation) = reservation {
        if let Some(id) = &session {
            shared.sessions.begin(id, true);
        }
        drop(reservation);
    }
    match session {
        Some(id) => wrap(shared, response, id, request_id),
        None => response,
    }
}

/// 503 with `Retry-After`: the server holds its limit of sessions.
fn busy(shared: &Shared, message: &Value) -> Response<Body> {
    let mut response = json_response(
        StatusCode::SERVICE_UNAVAILABLE,
        &jsonrpc::error_body(
            message.get("id").cloned(),
            jsonrpc::SERVER_BUSY,
            &format!(
                "this server holds its limit of {} sessions; retry later",
                shared.options.max_sessions
            ),
        ),
    );
    response
        .headers_mut()
        .insert(RETRY_AFTER, HeaderValue::from_static("5"));
    response
}

async fn delete(
    shared: &Arc<Shared>,
    request: Request<Incoming>,
    session: Option<String>,
) -> Response<Body> {
    let Some(id) = session else {
        return plain(StatusCode::BAD_REQUEST, "DELETE needs an Mcp-Session-Id\n");
    };
    let known = shared
        .manager
        .has_session(&id.clone().into())
        .await
        .unwrap_or(false);
    if !known {
        return plain(StatusCode::NOT_FOUND, "no such session\n");
    }
    let mut response = call(shared, request).await;
    if response.status() == StatusCode::ACCEPTED {
        shared.sessions.remove(&id);
        *response.status_mut() = StatusCode::NO_CONTENT;
        *response.body_mut() = Full::new(Bytes::new()).boxed();
    }
    response
}

/// Hands a request to the MCP service.
async fn call<B>(shared: &Shared, request: Request<B>) -> Response<Body>
where
    B: hyper::body::Body<Data = Bytes> + Send + 'static,
    B::Error: std::fmt::Display,
{
    let mut service = shared.service.clone();
    match tower_service::Service::call(&mut service, request).await {
        Ok(response) => response,
        Err(never) => match never {},
    }
}

/// Counts a GET stream as activity of its session while it is open.
fn track(
    shared: &Arc<Shared>,
    response: Response<Body>,
    session: Option<String>,
    request_id: Option<Value>,
) -> Response<Body> {
    match session {
        Some(id) if shared.sessions.contains(&id) => {
            shared.sessions.begin(&id, false);
            wrap(shared, response, id, request_id)
        }
        _ => response,
    }
}

/// Wraps a response body of session `session` so that its end (or its
/// drop by a client that went away) is noted, and an unfinished answer to
/// request `request_id` cancels that request.
fn wrap(
    shared: &Arc<Shared>,
    response: Response<Body>,
    session: String,
    request_id: Option<Value>,
) -> Response<Body> {
    response.map(|inner| {
        Guarded {
            inner,
            shared: shared.clone(),
            session,
            request_id,
            finished: false,
        }
        .boxed()
    })
}

struct Guarded {
    inner: Body,
    shared: Arc<Shared>,
    session: String,
    request_id: Option<Value>,
    finished: bool,
}

impl hyper::body::Body for Guarded {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        let polled = Pin::new(&mut self.inner).poll_frame(cx);
        if let Poll::Ready(None) = polled {
            self.finished = true;
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

impl Drop for Guarded {
    fn drop(&mut self) {
        self.shared.sessions.end(&self.session);
        let Some(request_id) = self.request_id.take() else {
            return;
        };
        if self.finished || self.inner.is_end_stream() {
            return;
        }
        let cancel = json!({
            "jsonrpc": "2.0",
            "method": "notifications/cancelled",
            "params": {"requestId": request_id, "reason": "the client disconnected"},
        });
        let Ok(cancel) = serde_json::from_value::<ClientJsonRpcMessage>(cancel) else {
            return;
        };
        let manager = self.shared.manager.clone();
        let session = self.session.clone();
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            runtime.spawn(async move {
                let _ = manager.accept_message(&session.into(), cancel).await;
            });
        }
    }
}

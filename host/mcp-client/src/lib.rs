//! Rye's MCP client primitive: a session with one MCP server, its tool
//! definitions, and calls to its tools.
//!
//! - **stdio**: the server is a child started by the host's one spawner
//!   ([`rye_process::attach`]): the environment its plan gives and nothing
//!   else, contained with everything it starts, killed when the session
//!   goes. Only the last [`STDERR_TAIL`] bytes of its stderr are kept (and
//!   shown in errors); a line of stdout longer than 16 MiB is dropped as
//!   it arrives rather than growing a buffer ([`StdioLines`]).
//! - **streamable HTTP**: the server's URL with the headers the plan gives,
//!   no proxy.
//!
//! Starting (spawn or connect, and `initialize`) has its own deadline, and
//! each request its own; a session whose request timed out is not trusted
//! again (the caller drops it, which kills a stdio server). A tool's
//! definition ([`ToolDefinition`]) has a hash over its name, description
//! and input schema, so a definition approved once can be told apart from
//! one the server changed since.

mod lines;
mod pool;

use std::borrow::Cow;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rmcp::model::{CallToolRequestParams, ContentBlock};
use rmcp::service::RunningService;
use rmcp::service::{MaybeSendFuture, NotificationContext};
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::{ClientHandler, RoleClient, ServiceExt};
use serde_json::{Map, Value, json};
use sha2::{Digest, Sha256};

pub use lines::{LineRead, LineReader, MAX_LINE, StdioLines};
pub use pool::{Pool, PoolKey};

/// Bytes of a stdio server's stderr kept for error messages.
pub const STDERR_TAIL: usize = 64 * 1024;
/// How much of that tail an error quotes.
const QUOTED_STDERR: usize = 2048;

/// How to reach a server.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Transport {
    /// A child speaking MCP on its stdin and stdout; the plan's environment
    /// is its whole environment.
    Stdio(rye_process::Plan),
    /// A streamable HTTP endpoint.
    Http {
        url: String,
        headers: Vec<(String, String)>,
    },
}

/// Why a server could not be used.
#[derive(Debug, Clone, thiserror::Error)]
pub enum McpError {
    #[error("MCP server {server}: cannot start: {message}")]
    Start { server: String, message: String },
    #[error("MCP server {server}: no answer to initialize within {} s{}", .after.as_secs_f64(), quote(.stderr))]
    StartupTimeout {
        server: String,
        after: Duration,
        stderr: String,
    },
    #[error("MCP server {server}: initialize failed: {message}{}", quote(.stderr))]
    Initialize {
        server: String,
        message: String,
        stderr: String,
    },
    #[error("MCP server {server}: no answer to {request} within {} s; the session was ended{}", .after.as_secs_f64(), quote(.stderr))]
    Timeout {
        server: String,
        request: String,
        after: Duration,
        stderr: String,
    },
    #[error("MCP server {server}: {request} failed: {message}{}", quote(.stderr))]
    Request {
        server: String,
        request: String,
        message: String,
        stderr: String,
    },
}

impl McpError {
    /// Whether the session can no longer be trusted and must be ended.
    pub fn ends_session(&self) -> bool {
        !matches!(self, McpError::Request { stderr, .. } if stderr.is_empty())
    }
}

fn quote(stderr: &str) -> String {
    let text = stderr.trim();
    if text.is_empty() {
        return String::new();
    }
    let start = text
        .char_indices()
        .map(|(i, _)| i)
        .find(|i| text.len() - i <= QUOTED_STDERR)
        .unwrap_or(text.len());
    format!("; its stderr ends: {}", &text[start..])
}

/// One tool a server offers, as `tools/list` gave it.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolDefinition {
    pub name: String,
    pub title: Option<String>,
    pub description: Option<String>,
    pub input_schema: Value,
    pub output_schema: Option<Value>,
}

impl ToolDefinition {
    /// The part of the definition an approval pins: name, description and
    /// input schema, as one JSON object.
    pub fn pinned(&self) -> Value {
        json!({
            "name": self.name,
            "description": self.description,
            "inputSchema": self.input_schema,
        })
    }

    /// SHA-256 of [`ToolDefinition::pinned`] as canonical JSON (keys
    /// sorted, no spaces), in hex.
    pub fn hash(&self) -> String {
        definition_hash(&self.pinned())
    }
}

/// A tool as a session last listed it, with the hash an approval pins,
/// worked out once per listing rather than on every call.
#[derive(Debug, Clone, PartialEq)]
pub struct Listed {
    pub definition: ToolDefinition,
    /// [`ToolDefinition::hash`] of `definition`.
    pub hash: String,
}

impl From<ToolDefinition> for Listed {
    fn from(definition: ToolDefinition) -> Self {
        let hash = definition.hash();
        Self { definition, hash }
    }
}

/// SHA-256 in hex of `value` as canonical JSON (the store's: keys sorted,
/// no spaces, ASCII only; see [`rye_cas::canonical`]).
pub fn definition_hash(value: &Value) -> String {
    hex::encode(Sha256::digest(rye_cas::canonical::to_vec(value)))
}

/// What a tool call gave.
#[derive(Debug, Clone, PartialEq)]
pub struct CallOutcome {
    /// `structuredContent`, if the server sent it.
    pub structured: Option<Value>,
    /// The text items of `content`, joined by newlines.
    pub text: String,
    /// `content` as sent.
    pub content: Value,
    /// The server said the call failed (`isError`).
    pub is_error: bool,
}

impl CallOutcome {
    /// The call's data: the structured content; else the text parsed as
    /// JSON when it is JSON; else `{"text", "content"}`.
    pub fn data(&self) -> Value {
        if let Some(structured) = &self.structured {
            return structured.clone();
        }
        if let Ok(parsed) = serde_json::from_str::<Value>(self.text.trim())
            && !self.text.trim().is_empty()
        {
            return parsed;
        }
        json!({"text": self.text, "content": self.content})
    }
}

/// A live session with one server.
pub struct Connection {
    server: String,
    service: RunningService<RoleClient, Watcher>,
    child: Option<rye_process::Attached>,
    /// The server's tools as last listed, until it says they changed.
    definitions: Mutex<Option<Arc<Vec<Listed>>>>,
    changed: Arc<AtomicBool>,
}

/// The client side of a session: notes when the server says its tools
/// changed.
#[derive(Clone, Default)]
struct Watcher {
    changed: Arc<AtomicBool>,
}

impl ClientHandler for Watcher {
    fn on_tool_list_changed(
        &self,
        _context: NotificationContext<RoleClient>,
    ) -> impl Future<Output = ()> + MaybeSendFuture + '_ {
        self.changed.store(true, Ordering::SeqCst);
        std::future::ready(())
    }
}

impl Connection {
    /// Starts or reaches the server and completes `initialize` within
    /// `startup`. `server` names it in errors.
    pub async fn open(
        server: &str,
        transport: &Transport,
        startup: Duration,
    ) -> Result<Self, McpError> {
        let server = server.to_owned();
        let watcher = Watcher::default();
        let changed = watcher.changed.clone();
        let connection = |service, child| Connection {
            server: server.clone(),
            service,
            child,
            definitions: Mutex::new(None),
            changed: changed.clone(),
        };
        match transport {
            Transport::Stdio(plan) => {
                let mut child =
                    rye_process::attach(plan, STDERR_TAIL).map_err(|e| McpError::Start {
                        server: server.clone(),
                        message: e.to_string(),
                    })?;
                let (stdin, stdout) = child.take_stdio().ok_or_else(|| McpError::Start {
                    server: server.clone(),
                    message: "the child has no stdin or stdout".into(),
                })?;
                let started =
                    tokio::time::timeout(startup, watcher.serve(StdioLines::new(stdout, stdin)))
                        .await;

                match started {
                    Err(_) => Err(McpError::StartupTimeout {
                        server,
                        after: startup,
                        stderr: last_words(&child),
                    }),
                    Ok(Err(e)) => {
                        // Let an exit be seen before saying why it failed.
                        let _ =
                            tokio::time::timeout(Duration::from_millis(50), child.exited()).await;
                        Err(McpError::Initialize {
                            server,
                            message: e.to_string(),
                            stderr: last_words(&child),
                        })
                    }
                    Ok(Ok(service)) => Ok(connection(service, Some(child))),
                }
            }
            Transport::Http { url, headers } => {
                let mut config = StreamableHttpClientTransportConfig::with_uri(url.clone());
                for (name, value) in headers {
                    let name =
                        reqwest::header::HeaderName::from_bytes(name.as_bytes()).map_err(|_| {
                            McpError::Start {
                                server: server.clone(),
                                message: format!("{name:?} is not a header name"),
                            }
                        })?;
                    let value = reqwest::header::HeaderValue::from_str(value).map_err(|_| {
                        McpError::Start {
                            server: server.clone(),
                            message: format!("header {name} holds a character a header may not"),
                        }
                    })?;
                    config.custom_headers.insert(name, value);
                }
                let client = http_client().map_err(|message| McpError::Start {
                    server: server.clone(),
                    message,
                })?;
                let transport = StreamableHttpClientTransport::with_client(client, config);
                match tokio::time::timeout(startup, watcher.serve(transport)).await {
                    Err(_) => Err(McpError::StartupTimeout {
                        server,
                        after: startup,
                        stderr: String::new(),
                    }),
                    Ok(Err(e)) => Err(McpError::Initialize {
                        server,
                        message: e.to_string(),
                        stderr: String::new(),
                    }),
                    Ok(Ok(service)) => Ok(connection(service, None)),
                }
            }
        }
    }

    /// Whether the session can still take requests.
    pub fn is_open(&self) -> bool {
        !self.service.is_closed()
            && self
                .child
                .as_ref()
                .is_none_or(|child| child.exit().is_none())
    }

    /// The stdio server's process id.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().and_then(rye_process::Attached::pid)
    }

    /// What the server's stderr says lately, and how it ended if it has.
    fn stderr(&self) -> String {
        self.child.as_ref().map(last_words).unwrap_or_default()
    }

    async fn within<T, E: std::fmt::Display>(
        &self,
        request: &str,
        timeout: Duration,
        work: impl std::future::Future<Output = Result<T, E>>,
    ) -> Result<T, McpError> {
        match tokio::time::timeout(timeout, work).await {
            Err(_) => Err(McpError::Timeout {
                server: self.server.clone(),
                request: request.to_owned(),
                after: timeout,
                stderr: self.stderr(),
            }),
            Ok(Err(e)) => {
                // A server that died mid-request: give its exit a moment to
                // be seen, so the error says how it ended.
                if let Some(child) = &self.child {
                    let _ = tokio::time::timeout(Duration::from_millis(50), child.exited()).await;
                }
                Err(McpError::Request {
                    server: self.server.clone(),
                    request: request.to_owned(),
                    message: e.to_string(),
                    stderr: if self.is_open() {
                        String::new()
                    } else {
                        self.stderr()
                    },
                })
            }
            Ok(Ok(value)) => Ok(value),
        }
    }

    /// Every tool the server offers (all pages of `tools/list`).
    pub async fn tools(&self, timeout: Duration) -> Result<Vec<ToolDefinition>, McpError> {
        let tools = self
            .within("tools/list", timeout, self.service.peer().list_all_tools())
            .await?;
        Ok(tools
            .into_iter()
            .map(|tool| ToolDefinition {
                name: tool.name.to_string(),
                title: tool.title.clone(),
                description: tool.description.as_ref().map(|d| d.to_string()),
                input_schema: Value::Object((*tool.input_schema).clone()),
                output_schema: tool
                    .output_schema
                    .as_ref()
                    .map(|s| Value::Object((**s).clone())),
            })
            .collect())
    }

    /// The server's tools, listed once per session and again only after
    /// the server says they changed.
    pub async fn definitions(&self, timeout: Duration) -> Result<Arc<Vec<Listed>>, McpError> {
        let cached = self
            .definitions
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        if let Some(cached) = cached
            && !self.changed.load(Ordering::SeqCst)
        {
            return Ok(cached);
        }
        self.changed.store(false, Ordering::SeqCst);
        // Boxed, as listing is rare: inline, its future would be part of
        // every warm call's.
        let tools = Box::pin(self.tools(timeout)).await?;
        let listed: Arc<Vec<Listed>> = Arc::new(tools.into_iter().map(Listed::from).collect());
        *self.definitions.lock().unwrap_or_else(|e| e.into_inner()) = Some(listed.clone());
        Ok(listed)
    }

    /// Calls tool `name` with `arguments` (a JSON object).
    pub async fn call(
        &self,
        name: &str,
        arguments: Map<String, Value>,
        timeout: Duration,
    ) -> Result<CallOutcome, McpError> {
        let mut params = CallToolRequestParams::new(Cow::Owned(name.to_owned()));
        params.arguments = Some(arguments);
        let result = self
            .within(
                &format!("tools/call {name}"),
                timeout,
                // Boxed where it is made: rmcp's request future is some
                // 9 KB, and inline it would be part of every future that
                // awaits a call, each moved whole.
                Box::pin(self.service.peer().call_tool(params)),
            )
            .await?;
        let text = result
            .content
            .iter()
            .filter_map(|c| match c {
                ContentBlock::Text(t) => Some(t.text.as_str()),
                _ => None,
            })
            .collect::<Vec<_>>()
            .join("\n");
        Ok(CallOutcome {
            structured: result.structured_content.clone(),
            text,
            content: serde_json::to_value(&result.content).unwrap_or(Value::Null),
            is_error: result.is_error == Some(true),
        })
    }
}

/// What a stdio server's stderr says lately, and how it ended if it has.
fn last_words(child: &rye_process::Attached) -> String {
    let (tail, _) = child.stderr_tail();
    match child.exit() {
        Some(exit) => format!("{tail}\n(the server {exit})"),
        None => tail,
    }
}

/// The HTTP client for streamable-HTTP servers: no proxy, the process's
/// TLS provider.
fn http_client() -> Result<reqwest::Client, String> {
    static CLIENT: std::sync::OnceLock<Result<reqwest::Client, String>> =
        std::sync::OnceLock::new();
    CLIENT
        .get_or_init(|| {
            let _ = rustls::crypto::ring::default_provider().install_default();
            reqwest::Client::builder()
                .no_proxy()
                .build()
                .map_err(|e| format!("the HTTP client cannot be built: {e}"))
        })
        .clone()
}

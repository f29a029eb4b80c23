//! Rye as an MCP server: the tools `execute`, `search`, `load` and `sign`
//! (input schemas as the original system's), each answering with its result
//! as JSON text and as structured content.
//!
//! A failed item (a tool that exits non-zero, a refused signature, an item
//! not found) is a tool result with `isError`; only arguments that do not
//! fit the schema are a protocol error (invalid params). One server serves
//! any number of projects: each call names its `project_path`, and the
//! host's caches and compiled components are shared by all of them.
//! Nothing but JSON-RPC goes to stdout: logs go to stderr, components'
//! output is discarded and tools' output captured.
//!
//! ```no_run
//! # async fn run() -> anyhow::Result<()> {
//! use std::sync::Arc;
//! let rye = Arc::new(rye_host::Rye::new(rye_host::RyeConfig::from_env()?)?);
//! rye_mcp::serve_stdio(rye_mcp::RyeServer::new(rye)).await
//! # }
//! ```

mod args;
mod catalog;
mod framing;
mod http;
pub mod jsonrpc;
mod schema;
mod threads;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, GetPromptRequestParams,
    GetPromptResponse, Implementation, ListPromptsResult, ListResourceTemplatesResult,
    ListResourcesResult, ListToolsResult, PaginatedRequestParams, ProgressNotificationParam,
    ReadResourceRequestParams, ReadResourceResponse, ServerCapabilities, ServerConfig,
    SubscribeRequestParams, Tool, UnsubscribeRequestParams,
};
use rmcp::service::{NotificationContext, RequestContext};
use rmcp::{ErrorData as McpError, RoleServer, ServerHandler, ServiceExt};
use rye_host::{
    ErrorReply, ExecuteRequest, ItemKind, LoadRequest, Rye, SignAllReply, SignReply, Space,
};
use serde_json::{Value, json};

pub use args::{ExecuteArgs, LoadArgs, SearchArgs, SignArgs};
pub use catalog::KNOWLEDGE_URI;
pub use framing::{LineTransport, MAX_LINE};
pub use http::{ENDPOINT, HttpOptions, serve_http};
pub use threads::THREAD_URI;

/// How often a long `execute` reports progress to a client that asked.
const PROGRESS_EVERY: Duration = Duration::from_secs(1);

/// The MCP server over one host.
#[derive(Clone)]
pub struct RyeServer {
    rye: Arc<Rye>,
    /// The project whose directives and knowledge are listed as prompts
    /// and resources (tools name theirs per call), and whose threads are
    /// resources.
    project: Option<PathBuf>,
    /// The thread resources this client subscribed to.
    subscriptions: threads::Subscriptions,
}

impl RyeServer {
    pub fn new(rye: Arc<Rye>) -> Self {
        Self {
            rye,
            project: None,
            subscriptions: threads::Subscriptions::default(),
        }
    }

    /// The server for a new client: the same host and project, no
    /// subscriptions.
    pub(crate) fn for_session(&self) -> Self {
        Self {
            subscriptions: threads::Subscriptions::default(),
            ..self.clone()
        }
    }

    /// Lists this project's directives and knowledge (with the user and
    /// system ones) as prompts and resources.
    pub fn with_project(mut self, project: PathBuf) -> Self {
        self.project = Some(project);
        self
    }

    /// The four tools, in the original order.
    pub fn tools() -> Vec<Tool> {
        schema::tools()
    }

    async fn execute(&self, args: ExecuteArgs, context: &RequestContext<RoleServer>) -> Value {
        let target = match args.target() {
            Ok(target) => target,
            Err(refusal) => return ErrorReply::new(refusal).of_id(&args.item_id).to_value(),
        };
        // The remote and async arms are boxed: their futures, inline,
        // would be part of every local run's, which moves whole.
        if let args::Target::Remote(remote) = target {
            return Box::pin(self.execute_remote(&args, remote)).await;
        }
        let request = ExecuteRequest {
            parameters: args.parameters.clone().unwrap_or_else(|| json!({})),
            project: Some(PathBuf::from(&args.project_path)),
            dry_run: args.dry_run,
            ..ExecuteRequest::new(args.item_type, args.item_id.clone())
        };
        if args.run_async {
            // The run goes on in a runner of its own, past this request
            // and this client.
            return Box::pin(self.rye.execute_async(&request)).await;
        }
        let started = Instant::now();
        let token = context.meta.get_progress_token();
        // Pinned where it is made: `tokio::pin!` moves the future into a
        // second local, and the state of this future kept both.
        let mut run = std::pin::pin!(self.rye.execute(&request));
        // The first tick a full period from now: an interval's immediate
        // first tick still waits for the timer wheel (up to a millisecond).
        let mut ticks =
            tokio::time::interval_at(tokio::time::Instant::now() + PROGRESS_EVERY, PROGRESS_EVERY);
        loop {
            tokio::select! {
                result = &mut run => return result,
                () = context.ct.cancelled() => {
                    // Dropping the run kills its process group.
                    return ErrorReply::new("cancelled by the client; the tool's processes were killed")
                        .of_id(&args.item_id)
                        .to_value();
                }
                _ = ticks.tick(), if token.is_some() => {
                    let token = token.clone().expect("guarded");
                    let seconds = started.elapsed().as_secs_f64();
                    let _ = context
                        .peer
                        .notify_progress(
                            ProgressNotificationParam::new(token, seconds)
                                .with_message(format!("{} running for {seconds:.0} s", args.item_id)),
                        )
                        .await;
                }
            }
        }
    }

    /// Runs the tool on a node through the system tool
    /// `rye/core/remote/remote`; its answer with `execution_mode: remote`.
    async fn execute_remote(&self, args: &ExecuteArgs, remote: Option<String>) -> Value {
        let mut parameters = json!({
            "action": "execute",
            "item_type": args.item_type.to_string(),
            "item_id": args.item_id,
            "parameters": args.parameters.clone().unwrap_or_else(|| json!({})),
            "async": args.run_async,
        });
        if let Some(remote) = remote {
            parameters["remote"] = json!(remote);
        }
        let request = ExecuteRequest {
            parameters,
            project: Some(PathBuf::from(&args.project_path)),
            ..ExecuteRequest::new(ItemKind::Tool, REMOTE_TOOL.to_owned())
        };
        let ran = self.rye.execute(&request).await;
        remote_reply(args, ran)
    }

    /// Runs blocking host work (parsing, signing) off the reactor.
    async fn blocking<T: Send + 'static>(
        &self,
        work: impl FnOnce(&Rye) -> T + Send + 'static,
    ) -> Result<T, McpError> {
        let rye = self.rye.clone();
        tokio::task::spawn_blocking(move || work(&rye))
            .await
            .map_err(|e| McpError::internal_error(format!("the call failed: {e}"), None))
    }

    async fn search(&self, args: SearchArgs) -> Result<Value, McpError> {
        let request = args.request().map_err(|e| invalid(&e))?;
        self.blocking(move |rye| match rye.search(&request) {
            Ok(response) => serde_json::to_value(response).unwrap_or_default(),
            Err(e) => ErrorReply::host(&e).of_query(&request.query).to_value(),
        })
        .await
    }

    async fn load(&self, args: LoadArgs) -> Result<Value, McpError> {
        let request = LoadRequest {
            source: args.source,
            destination: args.destination,
            force: args.force,
            project: Some(PathBuf::from(&args.project_path)),
            ..LoadRequest::new(args.item_type, args.item_id.clone())
        };
        self.blocking(move |rye| match rye.load(&request) {
            Ok(loaded) => loaded.reply(rye_host::LOAD_REPLY_TEXT),
            Err(e) => ErrorReply::host(&e)
                .of_item(request.kind, &request.id)
                .to_value(),
        })
        .await
    }

    async fn sign(&self, args: SignArgs) -> Result<Value, McpError> {
        let what: rye_host::Signable = args
            .item_type
            .parse()
            .map_err(|e: rye_host::HostError| invalid(&e.to_string()))?;
        let project = PathBuf::from(&args.project_path);
        let space = args.source;
        self.blocking(move |rye| {
            if space == Space::System {
                return ErrorReply::new("System space items are immutable and cannot be signed. Copy them to the project or user space first.").to_value();
            }
            if args.item_id == "*" {
                return match rye.sign_all(Some(&project), space) {
                    Ok(outcomes) => json!(SignAllReply::new(&outcomes)),
                    Err(e) => ErrorReply::host(&e).to_value(),
                };
            }
            match rye.sign(Some(&project), what, &args.item_id, space) {
                Ok(signed) => json!(SignReply::new(&args.item_id, space, signed)),
                Err(e) => ErrorReply::host(&e).of_id(&args.item_id).to_value(),
            }
        })
        .await
    }
}

/// The system tool that runs items on nodes.
const REMOTE_TOOL: &str = "rye/core/remote/remote";

/// The reply to a remote execution, from what the remote tool returned:
/// the node's record (its status `success` unless the run failed, the
/// node's own as `remote_status`) with `execution_mode: remote`; a
/// failure of the tool itself as it is, naming the item asked for.
fn remote_reply(args: &ExecuteArgs, ran: Value) -> Value {
    let mut reply = serde_json::Map::new();
    let data = match ran.get("status").and_then(Value::as_str) {
        Some("success") => ran.get("data").cloned().unwrap_or(Value::Null),
        _ => {
            let mut failed = ran;
            failed["item_id"] = json!(args.item_id);
            failed["execution_mode"] = json!("remote");
            return failed;
        }
    };
    let remote_status = data
        .get("status")
        .and_then(Value::as_str)
        .unwrap_or("success");
    reply.insert(
        "status".into(),
        json!(if remote_status == "error" {
            "error"
        } else {
            "success"
        }),
    );
    reply.insert("type".into(), json!(args.item_type.to_string()));
    reply.insert("item_id".into(), json!(args.item_id));
    reply.insert("execution_mode".into(), json!("remote"));
    reply.insert("remote_status".into(), json!(remote_status));
    if let Value::Object(fields) = data {
        for (key, value) in fields {
            if !matches!(key.as_str(), "status" | "success" | "item_id") {
                reply.insert(key, value);
            }
        }
    }
    if let Some(metadata) = ran.get("metadata") {
        reply.insert("metadata".into(), metadata.clone());
    }
    Value::Object(reply)
}

fn invalid(message: &str) -> McpError {
    McpError::invalid_params(message.to_owned(), None)
}

/// A result document as a tool result: JSON text plus structured content,
/// `isError` when its status is "error" (or it is a bare error).
fn tool_result(result: Value) -> CallToolResult {
    let failed = result.get("status").and_then(Value::as_str) == Some("error")
        || (result.get("status").is_none() && result.get("error").is_some());
    let text = serde_json::to_string(&result).unwrap_or_default();
    let mut out = if failed {
        CallToolResult::error(vec![ContentBlock::text(text)])
    } else {
        CallToolResult::success(vec![ContentBlock::text(text)])
    };
    out.structured_content = Some(result);
    out
}

impl ServerHandler for RyeServer {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(
            ServerCapabilities::builder()
                .enable_tools()
                .enable_prompts()
                .enable_prompts_list_changed()
                .enable_resources()
                .enable_resources_list_changed()
                .enable_resources_subscribe()
                .build(),
        )
            .with_server_info(Implementation::new("rye", env!("CARGO_PKG_VERSION")))
            .with_instructions(
                "Rye finds, loads, runs and signs the directives, tools and knowledge kept in .ai/ \
                 folders of the project, user and system spaces. Search first, load to read an item, \
                 execute to run a tool or follow a directive.",
            )
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, McpError> {
        Ok(ListToolsResult::with_all_items(Self::tools()))
    }

    async fn list_prompts(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListPromptsResult, McpError> {
        let project = self.project.clone();
        let prompts = self
            .blocking(move |rye| catalog::prompts(rye, project.as_ref()))
            .await?;
        Ok(ListPromptsResult::with_all_items(prompts))
    }

    async fn get_prompt(
        &self,
        request: GetPromptRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<GetPromptResponse, McpError> {
        let arguments = request
            .arguments
            .map(|args| args.into_iter().collect::<serde_json::Map<String, Value>>());
        Box::pin(catalog::prompt(
            &self.rye,
            self.project.as_ref(),
            &request.name,
            arguments,
        ))
        .await
        .map(Into::into)
    }

    async fn list_resources(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListResourcesResult, McpError> {
        let project = self.project.clone();
        let resources = self
            .blocking(move |rye| catalog::resources(rye, project.as_ref()))
            .await?;
        Ok(ListResourcesResult::with_all_items(resources))
    }

    async fn list_resource_templates(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListResourceTemplatesResult, McpError> {
        Ok(ListResourceTemplatesResult::with_all_items(vec![
            threads::template(),
        ]))
    }

    async fn read_resource(
        &self,
        request: ReadResourceRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<ReadResourceResponse, McpError> {
        if threads::is_thread(&request.uri) {
            return Box::pin(threads::read(
                &self.rye,
                self.project.as_ref(),
                &request.uri,
            ))
            .await
            .map(Into::into);
        }
        Box::pin(catalog::resource(
            &self.rye,
            self.project.as_ref(),
            &request.uri,
        ))
        .await
        .map(Into::into)
    }

    /// `resources/subscribe`, as the clients of the protocol versions
    /// before 2026-07-28 send it.
    async fn subscribe(
        &self,
        request: SubscribeRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<(), McpError> {
        if !threads::is_thread(&request.uri) {
            return Err(McpError::invalid_params(
                format!(
                    "{:?}: only threads ({THREAD_URI}<id>) can be subscribed to",
                    request.uri
                ),
                None,
            ));
        }
        self.subscriptions
            .subscribe(
                self.rye.clone(),
                self.project.as_ref(),
                request.uri,
                context.peer,
            )
            .await
    }

    async fn unsubscribe(
        &self,
        request: UnsubscribeRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<(), McpError> {
        self.subscriptions.unsubscribe(&request.uri);
        Ok(())
    }

    async fn on_initialized(&self, context: NotificationContext<RoleServer>) {
        tokio::spawn(catalog::watch(
            self.rye.clone(),
            self.project.clone(),
            context.peer,
        ));
    }

    fn get_tool(&self, name: &str) -> Option<Tool> {
        Self::tools().into_iter().find(|t| t.name == name)
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, McpError> {
        // Each tool's future is boxed: rmcp moves the handler's future
        // several times before and as it spawns it, and a future holding
        // an execute inline is kilobytes long.
        let arguments = Value::Object(request.arguments.unwrap_or_default());
        let result = match request.name.as_ref() {
            "execute" => {
                let args: ExecuteArgs = args::parse("execute", arguments)?;
                Box::pin(self.execute(args, &context)).await
            }
            "search" => Box::pin(self.search(args::parse("search", arguments)?)).await?,
            "load" => Box::pin(self.load(args::parse("load", arguments)?)).await?,
            "sign" => Box::pin(self.sign(args::parse("sign", arguments)?)).await?,
            other => {
                return Err(invalid(&format!(
                    "unknown tool {other:?}: this server has execute, search, load and sign"
                )));
            }
        };
        Ok(tool_result(result).into())
    }
}

/// Closes the idle sessions with other MCP servers every half minute,
/// while the host lives.
pub(crate) fn sweep_mcp_sessions(rye: &Arc<Rye>) {
    let rye = Arc::downgrade(rye);
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(std::time::Duration::from_secs(30));
        loop {
            tick.tick().await;
            match rye.upgrade() {
                Some(rye) => rye.close_idle_mcp_sessions(),
                None => return,
            }
        }
    });
}

type Reader = Box<dyn tokio::io::AsyncRead + Unpin + Send>;
type Writer = Box<dyn tokio::io::AsyncWrite + Unpin + Send>;

/// Stdin and stdout for the transport. When they are pipes or sockets (as
/// an MCP client starts a server) the reactor waits on them itself;
/// otherwise (a terminal, a file) tokio's stdin and stdout, which hand
/// every read and write to a thread of the blocking pool, a wake-up each
/// way on every message.
fn stdio() -> (Reader, Writer) {
    use std::os::fd::AsFd;
    let read = match std::io::stdin().as_fd().try_clone_to_owned() {
        Ok(fd) => match reactor_fd(fd) {
            Some(Watched::Pipe(fd)) => tokio::net::unix::pipe::Receiver::from_owned_fd(fd)
                .map_or_else(|_| Box::new(tokio::io::stdin()) as Reader, |p| Box::new(p)),
            Some(Watched::Socket(socket)) => Box::new(socket),
            None => Box::new(tokio::io::stdin()),
        },
        Err(_) => Box::new(tokio::io::stdin()),
    };
    let write = match std::io::stdout().as_fd().try_clone_to_owned() {
        Ok(fd) => match reactor_fd(fd) {
            Some(Watched::Pipe(fd)) => tokio::net::unix::pipe::Sender::from_owned_fd(fd)
                .map_or_else(|_| Box::new(tokio::io::stdout()) as Writer, |p| Box::new(p)),
            Some(Watched::Socket(socket)) => Box::new(socket),
            None => Box::new(tokio::io::stdout()),
        },
        Err(_) => Box::new(tokio::io::stdout()),
    };
    (read, write)
}

enum Watched {
    Pipe(std::os::fd::OwnedFd),
    /// Whole, never split: a split stream shuts its write side down when
    /// the unused half drops, and stdin and stdout may be one socket.
    Socket(tokio::net::UnixStream),
}

/// What the reactor can wait on of `fd`: a pipe or a socket.
fn reactor_fd(fd: std::os::fd::OwnedFd) -> Option<Watched> {
    use std::os::unix::fs::FileTypeExt;
    let kind = std::fs::File::from(fd.try_clone().ok()?)
        .metadata()
        .ok()?
        .file_type();
    if kind.is_fifo() {
        Some(Watched::Pipe(fd))
    } else if kind.is_socket() {
        let socket = std::os::unix::net::UnixStream::from(fd);
        socket.set_nonblocking(true).ok()?;
        tokio::net::UnixStream::from_std(socket)
            .ok()
            .map(Watched::Socket)
    } else {
        None
    }
}

/// Serves MCP on stdin/stdout until the client closes the stream. A line
/// that is no MCP message is answered with a JSON-RPC error, and the
/// server goes on serving.
pub async fn serve_stdio(server: RyeServer) -> anyhow::Result<()> {
    sweep_mcp_sessions(&server.rye);
    let (read, write) = stdio();
    let transport = LineTransport::new(read, write);
    let rye = server.rye.clone();
    let service = server.serve(transport).await?;
    service.waiting().await?;
    // The records of the runs it answered are written before it ends.
    rye.flush_threads().await;
    Ok(())
}

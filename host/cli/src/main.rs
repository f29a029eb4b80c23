//! `rye`: the command line of the Rye host.

mod component;
mod init;
mod output;
mod remote;
mod report;

use std::path::PathBuf;
use std::process::ExitCode;

use std::io::Write;

use anyhow::Context;
use clap::{Parser, Subcommand};
use rye_host::{
    ExecuteRequest, ItemKind, LoadRequest, Rye, RyeConfig, SearchRequest, SourceFilter, Space,
};

/// Find, inspect, run and sign the items of `.ai/` folders.
///
/// Items live in three spaces, searched in order: the project
/// (`<project>/.ai`), the user (`~/.ai`, or `$USER_SPACE/.ai`) and the
/// system space bundled with rye (or `$RYE_SYSTEM_SPACE/.ai`).
#[derive(Parser)]
#[command(name = "rye", version, max_term_width = 100)]
struct Cli {
    /// The project folder (the one holding `.ai/`).
    #[arg(long, global = true, default_value = ".", value_name = "DIR")]
    project: PathBuf,

    /// Print JSON instead of text.
    #[arg(long, global = true)]
    json: bool,

    /// Let unsigned project items and components run (for development;
    /// every result that uses one says so). Also RYE_ALLOW_UNSIGNED_PROJECT=1.
    #[arg(long, global = true)]
    allow_unsigned_project: bool,

    /// Trust this public key (PEM or trusted-key TOML file) for this run,
    /// beside the system key and the spaces' trusted keys. Repeatable.
    #[arg(long = "trusted-key", global = true, value_name = "FILE")]
    trusted_keys: Vec<PathBuf>,

    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Start a project: .ai/ with a sample tool, directive and knowledge
    /// entry, a signing key made and trusted if there is none, everything
    /// it wrote signed, and the entry for MCP clients. Never replaces a
    /// file.
    Init {
        /// The project folder (default: --project).
        dir: Option<PathBuf>,
        /// Also write the MCP client entry to DIR/.mcp.json (kept if the
        /// file exists).
        #[arg(long)]
        mcp_config: bool,
    },
    /// Search items by keyword across the spaces.
    ///
    /// Terms match as substrings, case-insensitively; `*` and `?` are
    /// wildcards over words; "quoted phrases" match as written; AND (the
    /// default between terms), OR, NOT and parentheses combine them;
    /// `field:term` matches one field (`name:bash`, `category:rye/core`,
    /// any metadata key such as `tool_type:runtime`).
    Search {
        /// directive, tool, knowledge or all; narrow with a namespace, as
        /// in tool.rye.core.*
        scope: String,
        /// The query; empty lists everything in scope.
        query: Vec<String>,
        /// all, project, user or system.
        #[arg(long, default_value = "all")]
        source: String,
        #[arg(long, default_value_t = 10)]
        limit: usize,
        #[arg(long, default_value_t = 0)]
        offset: usize,
        /// A field must match a query: NAME=QUERY (as name:QUERY in the
        /// query). Repeatable.
        #[arg(long = "field", value_name = "NAME=QUERY")]
        fields: Vec<String>,
        /// Keep results whose KEY (a field or metadata key) meets VALUE: a
        /// value, !value, >=1.2 / <=, > and < (versions), a JSON list
        /// (membership), or date_from / date_to (ISO, against
        /// created_at). Repeatable.
        #[arg(long = "filter", value_name = "KEY=VALUE")]
        filters: Vec<String>,
        /// score, date (newest first) or name.
        #[arg(long, default_value = "score")]
        sort_by: String,
        /// Let terms match words a few edits away: N edits, or by the
        /// term's length when N is not given.
        #[arg(long, value_name = "N", num_args = 0..=1, default_missing_value = "auto")]
        fuzzy: Option<String>,
        /// Terms must stand within N words of one another (default 5).
        #[arg(long, value_name = "N", num_args = 0..=1, default_missing_value = "5")]
        proximity: Option<usize>,
    },
    /// Show an item, optionally copying it into the project or user space.
    Load {
        /// directive, tool or knowledge.
        kind: ItemKind,
        /// The item id: its path under .ai/<kind folder>/ without extension.
        id: String,
        /// Look only in this space: project, user or system.
        #[arg(long)]
        source: Option<Space>,
        /// Copy the item into this space: project or user.
        #[arg(long, value_name = "SPACE")]
        to: Option<Space>,
        /// Overwrite the file at the destination if there is one.
        #[arg(long)]
        force: bool,
    },
    /// Run a tool through its chain, or return a directive or knowledge
    /// entry ready to follow. Prints the result as JSON; exits 1 when its
    /// status is "error".
    Execute {
        /// tool, directive or knowledge.
        kind: ItemKind,
        /// The item id.
        id: String,
        /// The parameters, a JSON object.
        #[arg(long, default_value = "{}", value_name = "JSON")]
        params: String,
        /// Read the parameters from a file (`-` for stdin) instead.
        #[arg(long, value_name = "FILE", conflicts_with = "params")]
        params_file: Option<PathBuf>,
        /// Build and validate the chain; run nothing.
        #[arg(long)]
        dry_run: bool,
        /// Include every step's events in the result.
        #[arg(long)]
        trace: bool,
        /// Start the run and return at once with its thread id; the run
        /// goes on in a process of its own (see `rye threads`).
        #[arg(long = "async", conflicts_with = "dry_run")]
        run_async: bool,
    },
    /// Serve MCP (the tools execute, search, load and sign) on stdin and
    /// stdout, or over streamable HTTP with --http. Logs go to stderr
    /// (level by RYE_LOG).
    Serve {
        /// Serve streamable HTTP at ADDR (e.g. 127.0.0.1:8765; port 0 picks
        /// one) on the path /mcp, instead of stdio. The address served is
        /// printed on stderr.
        #[arg(long, value_name = "ADDR")]
        http: Option<std::net::SocketAddr>,
        /// Require `Authorization: Bearer <TOKEN>` on every HTTP request.
        #[arg(
            long,
            env = "RYE_MCP_TOKEN",
            value_name = "TOKEN",
            hide_env_values = true
        )]
        token: Option<String>,
        /// Accept this host in the Host header besides the loopback names
        /// (needed to serve beyond loopback). Repeatable.
        #[arg(long = "allow-host", value_name = "HOST")]
        allow_hosts: Vec<String>,
        /// Close an HTTP session after this many seconds without a request.
        #[arg(long, value_name = "SECONDS", default_value_t = 300)]
        session_idle: u64,
        /// Hold at most this many HTTP sessions; a new one beyond gets 503
        /// with Retry-After.
        #[arg(long, value_name = "N", default_value_t = 1000)]
        max_sessions: usize,
        /// Close an HTTP connection that has not sent a request's headers
        /// within this many seconds (its body gets three times as long).
        #[arg(long, value_name = "SECONDS", default_value_t = 10)]
        header_timeout: u64,
    },
    /// Check a whole .ai/ tree without running anything: every item
    /// parses, every tool's chain builds and validates, every signature
    /// holds. Exits 0 when clean, 1 with errors, 2 when the check itself
    /// could not run.
    Validate {
        /// The folder holding .ai/, or the .ai/ folder itself (default:
        /// --project).
        path: Option<PathBuf>,
        /// Unsigned items are errors, not warnings (config items, which
        /// may stay unsigned, still only warn).
        #[arg(long)]
        require_signed: bool,
        /// human, json, sarif (SARIF 2.1.0, for code-scanning views), junit
        /// (JUnit XML) or github (annotations in a GitHub Actions run).
        #[arg(long, default_value = "human")]
        format: String,
        /// No progress bar (there is none in CI or off a terminal anyway).
        #[arg(long, short)]
        quiet: bool,
    },
    /// Write, build and inspect plugin components.
    Component {
        #[command(subcommand)]
        action: ComponentAction,
    },
    /// Reach tools on other MCP servers through signed items: add a
    /// server, discover its tools (one signed item each, pinning the
    /// definition approved), list and remove servers.
    Mcp {
        #[command(subcommand)]
        action: McpAction,
    },
    /// The project's runs: every tool run is a thread, recorded in
    /// .ai/state/threads/ with its result.
    Threads {
        #[command(subcommand)]
        action: ThreadsAction,
    },
    /// Serve this machine as a remote node that projects are pushed to
    /// and items run on, or manage its keys.
    Node {
        #[command(subcommand)]
        action: remote::NodeAction,
    },
    /// Push the project to a node, run items there, list its runs and
    /// history, and pull what they changed (.ai/config/remotes/remotes.yaml).
    Remote {
        #[command(subcommand)]
        action: remote::RemoteAction,
    },
    /// Make, show and trust signing keys.
    Keys {
        #[command(subcommand)]
        action: KeysAction,
    },
    /// Sign an item (after its parser reads it as valid) or a component
    /// (a detached `.sig` beside it), or every one of a space with --all.
    Sign {
        /// directive, tool, knowledge, config, parser, adapter or validator.
        #[arg(required_unless_present = "all")]
        kind: Option<String>,
        /// The item id, or the component's name under its folder.
        #[arg(required_unless_present = "all")]
        id: Option<String>,
        /// The space of the item: project or user.
        #[arg(long, default_value = "project")]
        space: Space,
        /// Sign every item and component of the space.
        #[arg(long, conflicts_with_all = ["kind", "id"])]
        all: bool,
    },
    /// Check signatures of files or of every file under folders; exits 1
    /// when any fails.
    Verify {
        #[arg(required = true)]
        paths: Vec<PathBuf>,
    },
    /// Pin a tool's chain in a lockfile (replacing any), or refresh every
    /// lockfile of the project with --refresh and no tool.
    Lock {
        /// The tool id (its lockfile is replaced).
        #[arg(required_unless_present = "refresh", conflicts_with = "refresh")]
        tool: Option<String>,
        /// Re-pin every tool that has a lockfile in the project.
        #[arg(long)]
        refresh: bool,
    },
}

#[derive(Subcommand)]
enum ComponentAction {
    /// Write a new component crate on the guest SDK: parser,
    /// runtime-adapter, validator, graph-walker or tool.
    New {
        world: String,
        name: String,
        /// Where to write it (default: ./NAME).
        #[arg(long)]
        dir: Option<PathBuf>,
    },
    /// Build the crate in DIR for wasm32-wasip2, check that it loads as its
    /// world, install it under the space's .ai/ and sign it when a signing
    /// key exists.
    Build {
        #[arg(default_value = ".")]
        dir: PathBuf,
        /// project or user.
        #[arg(long, default_value = "project")]
        space: Space,
        /// The name to install it under (default: the crate's name).
        #[arg(long)]
        name: Option<String>,
    },
    /// Show a component's world, contract version, imports, exports and
    /// size, and whether this host would load it.
    Inspect { file: PathBuf },
}

#[derive(Subcommand)]
enum McpAction {
    /// Write and sign the server item .ai/tools/mcp/servers/NAME.yaml.
    /// A stdio server gets PATH and HOME from the host's environment and
    /// the --env variables; nothing else of the host's reaches it.
    Add {
        name: String,
        /// A streamable HTTP server at this URL.
        #[arg(long, conflicts_with = "stdio", required_unless_present = "stdio")]
        http: Option<String>,
        /// A header for an HTTP server, NAME=VALUE (the value may use
        /// ${VAR}). Repeatable.
        #[arg(long = "header", value_name = "NAME=VALUE")]
        headers: Vec<String>,
        /// The variable holding an HTTP server's bearer token (read at
        /// each connection, never written in the item).
        #[arg(long, value_name = "VAR")]
        bearer_token_env: Option<String>,
        /// A variable of a stdio server, NAME=VALUE (the value may use
        /// ${VAR}). Repeatable.
        #[arg(long = "env", value_name = "NAME=VALUE")]
        env: Vec<String>,
        /// project or user.
        #[arg(long, default_value = "project")]
        space: Space,
        /// Replace an existing server item.
        #[arg(long)]
        force: bool,
        /// A stdio server: the command and its arguments (give it last).
        #[arg(long, num_args = 1.., allow_hyphen_values = true, value_name = "COMMAND")]
        stdio: Vec<String>,
    },
    /// Start or reach the server, and write and sign one tool item per
    /// tool it offers under .ai/tools/mcp/NAME/, removing those it no
    /// longer offers.
    Discover { name: String },
    /// As discover: approves the server's tools as they are now, after a
    /// changed definition was refused.
    Refresh { name: String },
    /// The server items of the project and user spaces.
    List,
    /// Remove a server item and its tools' items.
    Remove {
        name: String,
        /// project or user.
        #[arg(long, default_value = "project")]
        space: Space,
    },
    /// Any of the above as one JSON request on stdin, answered in JSON:
    /// {"action": "add", "name": …, "stdio": [COMMAND, ARG…] | "http": URL,
    /// "headers": {…}, "env": {…}, "bearer_token_env", "space", "force"},
    /// or "discover", "refresh", "list", "remove" with what they take. The
    /// system tool rye/mcp/manager runs this.
    Manage,
}

/// The request `rye mcp manage` reads.
#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct ManageRequest {
    action: String,
    #[serde(default)]
    name: Option<String>,
    #[serde(default)]
    stdio: Vec<String>,
    #[serde(default)]
    http: Option<String>,
    #[serde(default)]
    headers: std::collections::BTreeMap<String, String>,
    #[serde(default)]
    env: std::collections::BTreeMap<String, String>,
    #[serde(default)]
    bearer_token_env: Option<String>,
    #[serde(default)]
    space: Option<String>,
    #[serde(default)]
    force: bool,
}

/// The most `rye mcp manage` reads from stdin.
const MANAGE_REQUEST_BYTES: u64 = 1 << 20;

impl ManageRequest {
    fn read(input: impl std::io::Read) -> anyhow::Result<McpAction> {
        use std::io::Read as _;
        let mut text = String::new();
        input
            .take(MANAGE_REQUEST_BYTES + 1)
            .read_to_string(&mut text)
            .context("reading the request on stdin")?;
        anyhow::ensure!(
            text.len() as u64 <= MANAGE_REQUEST_BYTES,
            "the request on stdin is over {MANAGE_REQUEST_BYTES} bytes"
        );
        let request: Self =
            serde_json::from_str(&text).context("the request on stdin is not a valid request")?;
        request.action()
    }

    fn action(self) -> anyhow::Result<McpAction> {
        let name = || {
            self.name
                .clone()
                .with_context(|| format!("{:?} needs a \"name\"", self.action))
        };
        let space = match self.space.as_deref() {
            None | Some("project") => Space::Project,
            Some("user") => Space::User,
            Some(other) => anyhow::bail!("\"space\" is project or user, not {other:?}"),
        };
        let pairs = |map: &std::collections::BTreeMap<String, String>| {
            map.iter().map(|(k, v)| format!("{k}={v}")).collect()
        };
        Ok(match self.action.as_str() {
            "add" => {
                anyhow::ensure!(
                    self.http.is_some() == self.stdio.is_empty(),
                    "\"add\" takes either \"stdio\" (the command and its arguments) or \"http\" (a URL)"
                );
                McpAction::Add {
                    name: name()?,
                    http: self.http.clone(),
                    headers: pairs(&self.headers),
                    bearer_token_env: self.bearer_token_env.clone(),
                    env: pairs(&self.env),
                    space,
                    force: self.force,
                    stdio: self.stdio.clone(),
                }
            }
            "discover" => McpAction::Discover { name: name()? },
            "refresh" => McpAction::Refresh { name: name()? },
            "list" => McpAction::List,
            "remove" => McpAction::Remove {
                name: name()?,
                space,
            },
            other => {
                anyhow::bail!("\"action\" is add, discover, refresh, list or remove, not {other:?}")
            }
        })
    }
}

#[derive(Subcommand)]
enum ThreadsAction {
    /// The newest threads first.
    List {
        /// Only threads in this state: running, completed, error,
        /// cancelled, killed, timed_out.
        #[arg(long)]
        status: Option<String>,
        #[arg(long, default_value_t = 20)]
        limit: u32,
    },
    /// One thread: its record, its stored result and its events.
    Show { thread_id: String },
    /// A thread's events, in order.
    Steps { thread_id: String },
    /// Print a thread's events as they are written, one JSON line each,
    /// until it ends (or the timeout passes).
    Tail {
        thread_id: String,
        /// Seconds to follow at most.
        #[arg(long, default_value_t = 3600.0)]
        timeout: f64,
    },
    /// Remove the threads that finished longer ago than --older-than,
    /// with their events and stored results (never a running one).
    Prune {
        /// An age: a number with s, m, h or d (30d, 12h, 90m, 45s).
        #[arg(long, default_value = "30d", value_name = "AGE")]
        older_than: String,
    },
    /// Wait until a thread ends (or the timeout passes); show it.
    Wait {
        thread_id: String,
        /// Seconds to wait at most.
        #[arg(long, default_value_t = 600.0)]
        timeout: f64,
    },
    /// Cancel a running async thread: its runner is asked to stop, and
    /// killed with all its processes if it has not within the grace.
    Cancel {
        thread_id: String,
        /// Seconds the runner gets to stop before it is killed.
        #[arg(long, default_value_t = 5.0)]
        grace: f64,
    },
    /// Go on with the graph run a thread walked: from its last
    /// checkpoint after a crash or a stop, or with --inputs for a run
    /// waiting at an interrupt node.
    Resume {
        thread_id: String,
        /// What the waiting run is sent, a JSON object.
        #[arg(long, value_name = "JSON")]
        inputs: Option<String>,
        /// Show each step of the run as it was walked.
        #[arg(long)]
        trace: bool,
    },
    /// Run an async thread handed over on stdin (started by the host that
    /// recorded it).
    #[command(hide = true)]
    Run { thread_id: String },
    /// One of list, status, cancel or steps with its parameters as JSON on
    /// stdin ({"status", "limit"} / {"run_id"} / {"run_id", "grace"} /
    /// {"run_id"}), answered in JSON. The system tools
    /// rye/core/processes/* run this.
    Manage { action: String },
}

/// The parameters `rye threads manage` reads.
#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct ThreadsRequest {
    #[serde(default)]
    run_id: Option<String>,
    #[serde(default)]
    status: Option<String>,
    #[serde(default)]
    limit: Option<u32>,
    #[serde(default)]
    grace: Option<f64>,
}

impl ThreadsRequest {
    /// The action `action` asks for with the parameters on `input`.
    fn read(action: &str, input: impl std::io::Read) -> anyhow::Result<ThreadsAction> {
        use std::io::Read as _;
        let mut text = String::new();
        input
            .take(MANAGE_REQUEST_BYTES + 1)
            .read_to_string(&mut text)
            .context("reading the parameters on stdin")?;
        anyhow::ensure!(
            text.len() as u64 <= MANAGE_REQUEST_BYTES,
            "the parameters on stdin are over {MANAGE_REQUEST_BYTES} bytes"
        );
        let request: Self = if text.trim().is_empty() {
            serde_json::from_str("{}")?
        } else {
            serde_json::from_str(&text).context("the parameters on stdin are not valid")?
        };
        let run_id = || {
            request
                .run_id
                .clone()
                .with_context(|| format!("{action} needs a \"run_id\""))
        };
        Ok(match action {
            "list" => ThreadsAction::List {
                status: request.status.clone(),
                limit: request.limit.unwrap_or(20),
            },
            "status" => ThreadsAction::Show {
                thread_id: run_id()?,
            },
            "steps" => ThreadsAction::Steps {
                thread_id: run_id()?,
            },
            "cancel" => ThreadsAction::Cancel {
                thread_id: run_id()?,
                grace: request.grace.unwrap_or(5.0),
            },
            other => anyhow::bail!("the action is list, status, cancel or steps, not {other:?}"),
        })
    }
}

#[derive(Subcommand)]
enum KeysAction {
    /// Make a signing keypair (never overwrites one).
    Generate,
    /// Show the signing key and the keys trusted here.
    Show,
    /// Trust a public key: write a trusted-key file signed by your key.
    Trust {
        /// A PEM text, or a file holding a PEM or a trusted-key TOML; your
        /// own public key when omitted.
        key: Option<String>,
        /// user or project.
        #[arg(long, default_value = "user")]
        space: Space,
        /// Who the key belongs to.
        #[arg(long, default_value = "local")]
        owner: String,
    },
    /// Stop trusting a key: remove its trusted-key file.
    Untrust {
        fingerprint: String,
        /// user or project.
        #[arg(long, default_value = "user")]
        space: Space,
    },
}

fn main() -> ExitCode {
    quiet_library_backtraces();
    let cli = Cli::parse();
    // A node serving logs its requests, runs and collections; every other
    // command only what went wrong.
    let (json_logs, quiet) = match &cli.command {
        Command::Node {
            action: remote::NodeAction::Serve { log_format, .. },
        } => (
            *log_format == remote::LogFormat::Json,
            "warn,rye_node=info,rye=info",
        ),
        _ => (false, "warn,rmcp=error"),
    };
    let filter =
        tracing_subscriber::EnvFilter::try_from_env("RYE_LOG").unwrap_or_else(|_| quiet.into());
    let logs = tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_env_filter(filter);
    if json_logs {
        logs.json().with_current_span(false).init();
    } else {
        logs.with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
            .init();
    }
    match run(cli) {
        Ok(()) => ExitCode::SUCCESS,
        // The reader went away (`rye search … | head`): nothing to report.
        Err(e)
            if e.downcast_ref::<std::io::Error>()
                .is_some_and(|e| e.kind() == std::io::ErrorKind::BrokenPipe) =>
        {
            ExitCode::SUCCESS
        }
        Err(e) if e.downcast_ref::<Failed>().is_some() => ExitCode::FAILURE,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

/// `RUST_BACKTRACE=1` also makes every library error capture a stack trace,
/// and the WASI layer builds an error for each file a component looks for
/// and does not find: a measurable cost on every component call. Panics
/// keep their backtraces; an explicit `RUST_LIB_BACKTRACE` is respected.
fn quiet_library_backtraces() {
    if std::env::var_os("RUST_LIB_BACKTRACE").is_none() {
        // SAFETY: called first thing in main, before any other thread
        // exists, so nothing can read the environment concurrently.
        unsafe { std::env::set_var("RUST_LIB_BACKTRACE", "0") };
    }
}

/// Records live runs under the state folder and stops those that hosts
/// killed before they could stop them.
fn contain_runs() {
    let runs = rye_host::state_dir_from_env().map(|d| d.join("runs"));
    let stopped = rye_host::runs::init(runs);
    if stopped > 0 {
        eprintln!("rye: stopped {stopped} run(s) left behind by a rye that was killed");
    }
}

/// The number of the first of SIGTERM, SIGHUP or SIGINT to arrive (never,
/// where they cannot be caught).
async fn stop_signal() -> i32 {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        if let (Ok(mut term), Ok(mut hup), Ok(mut int)) = (
            signal(SignalKind::terminate()),
            signal(SignalKind::hangup()),
            signal(SignalKind::interrupt()),
        ) {
            return tokio::select! {
                _ = term.recv() => 15,
                _ = hup.recv() => 1,
                _ = int.recv() => 2,
            };
        }
    }
    std::future::pending().await
}

/// On SIGTERM, SIGHUP or SIGINT, writes the records of the runs that
/// answered (waiting at most [`FLUSH_ON_STOP`]: another process may hold
/// the registry) and kills every live run before exiting, so no tool
/// outlives the host.
async fn stop_runs_on_signal(rye: std::sync::Arc<Rye>) {
    let number = stop_signal().await;
    let _ = tokio::time::timeout(FLUSH_ON_STOP, rye.flush_threads()).await;
    rye_host::runs::stop_all();
    std::process::exit(128 + number);
}

/// How long a server told to stop waits for its runs' records.
const FLUSH_ON_STOP: std::time::Duration = std::time::Duration::from_secs(2);

/// Runs `work` unless a stop signal comes first; then the work is dropped
/// (which kills its processes), its thread recorded as cancelled, every
/// live run killed, and the process ends.
async fn until_signal<T>(rye: &Rye, work: impl std::future::Future<Output = T>) -> T {
    let number = tokio::select! {
        done = work => return done,
        number = stop_signal() => number,
    };
    rye.flush_threads().await;
    rye_host::runs::stop_all();
    std::process::exit(128 + number);
}

fn run(cli: Cli) -> anyhow::Result<()> {
    let stdout = std::io::stdout();
    let mut out = std::io::BufWriter::new(stdout.lock());
    let mut config = RyeConfig::from_env()?;
    // One command per process: watching trees would cost more (the kernel
    // tears the watches down at exit) than it could save. A server keeps
    // its watches.
    config.watch = matches!(cli.command, Command::Serve { .. });
    config.snapshot = !config.watch;
    config.components.spares = config.watch;
    if cli.allow_unsigned_project {
        config.integrity.allow_unsigned_project = true;
    }
    if let Command::Validate { require_signed, .. } = &cli.command {
        // Unsigned project items are reported as such, not as broken chains.
        config.integrity.allow_unsigned_project = !require_signed;
    }
    for file in &cli.trusted_keys {
        let text = std::fs::read_to_string(file)
            .with_context(|| format!("reading the trusted key {}", file.display()))?;
        let (key, owner) =
            rye_integrity::read_public_key(&text).with_context(|| format!("{}", file.display()))?;
        config
            .trusted_keys
            .push((key, owner.unwrap_or_else(|| "given".into())));
    }
    config.executable = std::env::current_exe().ok();
    // A runner takes over the settings of the host that handed it its run.
    let handed = match &cli.command {
        Command::Threads {
            action: ThreadsAction::Run { .. },
        } => match rye_host::DetachedRun::read(std::io::stdin().lock())
            .map_err(anyhow::Error::msg)?
        {
            Some(run) => {
                run.configure(&mut config).map_err(anyhow::Error::msg)?;
                Some(run)
            }
            // Its host went away before handing the run over.
            None => return Ok(()),
        },
        _ => None,
    };
    let key_dir = config.key_dir();
    let cache_dir = config.cache_dir.clone();
    let user_base = config.user_base.clone();
    let rye = Rye::new(config).context("failed to start the host")?;
    let project = Some(std::path::absolute(&cli.project).context("the --project folder")?);
    match cli.command {
        Command::Node { action } => {
            let project = project.context("a project folder")?;
            let cx = remote::Settings {
                cache_dir: &cache_dir,
                user_base: user_base.as_deref(),
                system_base: rye.system_base(),
                key_dir: key_dir.as_deref(),
                project: &project,
            };
            remote::node(action, &cx, &mut out)?;
        }
        Command::Remote { action } => {
            let project = project.context("a project folder")?;
            let cx = remote::Settings {
                cache_dir: &cache_dir,
                user_base: user_base.as_deref(),
                system_base: rye.system_base(),
                key_dir: key_dir.as_deref(),
                project: &project,
            };
            remote::remote(action, &cx, &mut out)?;
        }
        Command::Search {
            scope,
            query,
            source,
            limit,
            offset,
            fields,
            filters,
            sort_by,
            fuzzy,
            proximity,
        } => {
            let pair = |what: &str, text: &str| -> anyhow::Result<(String, String)> {
                let (key, value) = text
                    .split_once('=')
                    .with_context(|| format!("--{what} {text:?} is not KEY=VALUE"))?;
                Ok((key.to_owned(), value.to_owned()))
            };
            let fields = fields
                .iter()
                .map(|f| pair("field", f))
                .collect::<anyhow::Result<Vec<_>>>()?;
            let mut filter_map = serde_json::Map::new();
            for filter in &filters {
                let (key, value) = pair("filter", filter)?;
                // A JSON list is a list; anything else is the text given.
                let value = match serde_json::from_str::<serde_json::Value>(&value) {
                    Ok(list @ serde_json::Value::Array(_)) => list,
                    _ => serde_json::Value::String(value),
                };
                filter_map.insert(key, value);
            }
            let fuzzy = match fuzzy.as_deref() {
                None => rye_host::Fuzzy::Off,
                Some("auto") => rye_host::Fuzzy::Auto,
                Some(n) => rye_host::Fuzzy::Edits(
                    n.parse()
                        .with_context(|| format!("--fuzzy {n:?} is not a number of edits"))?,
                ),
            };
            let request = SearchRequest {
                source: SourceFilter::parse(&source)?,
                limit,
                offset,
                project,
                fields,
                filters: rye_host::Filters::from_object(&filter_map),
                sort_by: sort_by.parse()?,
                matching: rye_host::Matching { fuzzy, proximity },
                ..SearchRequest::new(scope, query.join(" "))
            };
            let response = rye.search(&request)?;
            if cli.json {
                output::json(&mut out, &response)?;
            } else {
                output::search(&mut out, &response)?;
            }
        }
        Command::Init { dir, mcp_config } => {
            let dir = match dir {
                Some(dir) => std::path::absolute(dir).context("the folder to start")?,
                None => project.clone().unwrap_or_default(),
            };
            std::fs::create_dir_all(&dir).with_context(|| format!("making {}", dir.display()))?;
            let report = rye.init_project(&dir)?;
            let program = std::env::current_exe().context("finding the rye binary")?;
            let mcp = init::McpEntry::new(&program, &dir);
            let written = if mcp_config {
                Some(mcp.write(&dir)?)
            } else {
                None
            };
            if cli.json {
                output::json(
                    &mut out,
                    &serde_json::json!({
                        "init": report,
                        "mcp": mcp.servers(),
                        "mcp_config": written,
                    }),
                )?;
            } else {
                init::human(&mut out, &report, &mcp, written.as_ref())?;
            }
        }
        Command::Load {
            kind,
            id,
            source,
            to,
            force,
        } => {
            let loaded = rye.load(&LoadRequest {
                kind,
                id,
                source,
                destination: to,
                force,
                project,
            })?;
            if cli.json {
                output::json(&mut out, &loaded.reply(rye_host::LOAD_REPLY_TEXT))?;
            } else {
                output::load(&mut out, &loaded)?;
            }
        }
        Command::Execute {
            kind,
            id,
            params,
            params_file,
            dry_run,
            trace,
            run_async,
        } => {
            let text = match params_file {
                Some(path) if path.as_os_str() == "-" => std::io::read_to_string(std::io::stdin())
                    .context("reading parameters from stdin")?,
                Some(path) => std::fs::read_to_string(&path)
                    .with_context(|| format!("reading {}", path.display()))?,
                None => params,
            };
            let parameters: serde_json::Value =
                serde_json::from_str(&text).context("the parameters are not JSON")?;
            let request = ExecuteRequest {
                parameters,
                project,
                dry_run,
                trace,
                ..ExecuteRequest::new(kind, id)
            };
            let rye = std::sync::Arc::new(rye);
            contain_runs();
            let runtime = one_thread_runtime()?;
            execute_and_report(&runtime, &rye, &request, run_async, &mut out)?;
        }
        Command::Serve {
            http,
            token,
            allow_hosts,
            session_idle,
            max_sessions,
            header_timeout,
        } => {
            drop(out);
            contain_runs();
            // Over stdio one client's requests arrive one line at a time:
            // one worker reads each, runs it and writes its answer. With
            // more, a hand-off between rmcp's tasks wakes a parked worker
            // on the answer's path, dearest after an idle spell (see
            // BENCHMARKS.md, "One worker for a stdio server"). Work that
            // may go on leaves the worker (a component's run or plan at
            // its first epoch tick, a wait through `block_in_place` or the
            // blocking pool), so the worker keeps reading; a request's own
            // CPU work (a search, a parse) does not, and two such requests
            // take turns. Over HTTP there may be many clients: a worker per
            // core.
            let mut runtime = tokio::runtime::Builder::new_multi_thread();
            if http.is_none() {
                runtime.worker_threads(1);
            }
            // A worker about to go idle, once no call is under way,
            // hands the calls' spent instances to the spares' thread,
            // which a call would otherwise wake before its answer is out.
            let runtime = runtime
                .enable_all()
                .on_thread_park(rye_host::idle_chores)
                .build()
                .context("starting the async runtime")?;
            rye_host::chores_when_idle();
            let rye = std::sync::Arc::new(rye);
            runtime.spawn(stop_runs_on_signal(rye.clone()));
            let mut server = rye_mcp::RyeServer::new(rye);
            if let Some(project) = project {
                server = server.with_project(project);
            }
            match http {
                None => runtime.block_on(rye_mcp::serve_stdio(server))?,
                Some(addr) => runtime.block_on(async {
                    if !addr.ip().is_loopback() && allow_hosts.is_empty() {
                        anyhow::bail!(
                            "{addr} is not a loopback address: name the hosts clients will use with --allow-host (and set a --token)"
                        );
                    }
                    let listener = tokio::net::TcpListener::bind(addr)
                        .await
                        .with_context(|| format!("binding {addr}"))?;
                    let bound = listener.local_addr()?;
                    eprintln!("serving MCP at http://{bound}{}", rye_mcp::ENDPOINT);
                    let header_timeout = std::time::Duration::from_secs(header_timeout.max(1));
                    let options = rye_mcp::HttpOptions {
                        bearer_token: token,
                        extra_hosts: allow_hosts,
                        session_idle: std::time::Duration::from_secs(session_idle.max(1)),
                        max_sessions: max_sessions.max(1),
                        header_timeout,
                        body_timeout: header_timeout * 3,
                        ..rye_mcp::HttpOptions::default()
                    };
                    rye_mcp::serve_http(server, listener, options).await
                })?,
            }
            return Ok(());
        }
        Command::Validate {
            path,
            require_signed,
            format,
            quiet,
        } => {
            let root = match path {
                Some(path) => std::path::absolute(path).context("the folder to validate")?,
                None => project.clone().unwrap_or_default(),
            };
            // The .ai/ folder itself names the project that holds it.
            let root = match (root.file_name(), root.parent()) {
                (Some(name), Some(parent)) if name == ".ai" && root.is_dir() => parent.to_owned(),
                _ => root,
            };
            if !["human", "json", "sarif", "junit", "github"].contains(&format.as_str()) {
                eprintln!("error: unknown format {format:?} (human, json, sarif, junit or github)");
                std::process::exit(2);
            }
            let bar = output::ProgressBar::new(!quiet);
            let show = |done, total| bar.show(done, total);
            let options = rye_host::ValidateOptions {
                require_signed,
                progress: bar.enabled().then_some(&show),
            };
            let validated = rye.validate_tree(&root, options);
            bar.finish();
            let report = match validated {
                Ok(report) => report,
                Err(e) => {
                    eprintln!("error: {e}");
                    std::process::exit(2);
                }
            };
            match format.as_str() {
                "json" => output::json(&mut out, &report)?,
                "sarif" => report::sarif(&mut out, &report)?,
                "junit" => report::junit(&mut out, &report)?,
                "github" => {
                    let base = std::env::current_dir().unwrap_or_else(|_| root.clone());
                    report::github(&mut out, &report, &base)?
                }
                _ => report::human(&mut out, &report)?,
            }
            out.flush()?;
            if report.has_errors() {
                return Err(Failed.into());
            }
        }
        Command::Component { action } => match action {
            ComponentAction::New { world, name, dir } => {
                let world = component::world_named(&world)?;
                let dir = dir.unwrap_or_else(|| PathBuf::from(&name));
                component::new(world, &name, &dir, &mut out)?;
            }
            ComponentAction::Build { dir, space, name } => {
                component::build(
                    &rye,
                    project.as_deref(),
                    &dir,
                    space,
                    name.as_deref(),
                    &mut out,
                )?;
            }
            ComponentAction::Inspect { file } => {
                component::inspect(rye.components(), &file, cli.json, &mut out)?;
            }
        },
        Command::Mcp { action } => mcp(rye, project.as_deref(), action, &mut out, cli.json)?,
        Command::Threads {
            action: ThreadsAction::Run { thread_id },
        } => {
            let run = handed.context("the run's request")?;
            let rye = std::sync::Arc::new(rye);
            contain_runs();
            let runtime = one_thread_runtime()?;
            runtime
                .block_on(until_signal(&rye, rye.run_detached(&thread_id, &run)))
                .map_err(anyhow::Error::msg)?;
            rye_host::runs::settle(std::time::Duration::from_secs(2));
        }
        Command::Threads {
            action:
                ThreadsAction::Resume {
                    thread_id,
                    inputs,
                    trace,
                },
        } => {
            let project = project.context("a project folder")?;
            let inputs = inputs
                .map(|text| serde_json::from_str::<serde_json::Value>(&text))
                .transpose()
                .context("--inputs is not JSON")?;
            let rye = std::sync::Arc::new(rye);
            contain_runs();
            let runtime = one_thread_runtime()?;
            let mut request = runtime
                .block_on(rye.resume_request(&project, &thread_id, inputs))
                .map_err(anyhow::Error::msg)?;
            request.trace = trace;
            execute_and_report(&runtime, &rye, &request, false, &mut out)?;
        }
        Command::Threads {
            action: ThreadsAction::Manage { action },
        } => {
            let project = project.context("a project folder")?;
            let action = ThreadsRequest::read(&action, std::io::stdin().lock())?;
            contain_runs();
            threads(&rye, &project, action, &mut out, true)?;
        }
        Command::Threads { action } => {
            let project = project.context("a project folder")?;
            contain_runs();
            threads(&rye, &project, action, &mut out, cli.json)?;
        }
        Command::Keys { action } => keys(
            &rye,
            key_dir,
            project.as_deref(),
            action,
            &mut out,
            cli.json,
        )?,
        Command::Sign {
            kind,
            id,
            space,
            all,
        } => {
            let outcomes = if all {
                rye.sign_all(project.as_deref(), space)?
            } else {
                let what: rye_host::Signable = kind.unwrap_or_default().parse()?;
                let id = id.unwrap_or_default();
                vec![
                    rye.sign(project.as_deref(), what, &id, space)
                        .map_err(|e| (PathBuf::from(&id), e)),
                ]
            };
            let failed = outcomes.iter().filter(|o| o.is_err()).count();
            if cli.json {
                let report: Vec<rye_host::SignEntry> =
                    outcomes.iter().map(rye_host::SignEntry::of).collect();
                output::json(&mut out, &report)?;
            } else {
                output::signed(&mut out, &outcomes)?;
            }
            out.flush()?;
            if failed > 0 {
                return Err(Failed.into());
            }
        }
        Command::Verify { paths } => {
            let checks = rye.verify_paths(project.as_deref(), &paths);
            if cli.json {
                output::json(&mut out, &checks)?;
            } else {
                output::verified(&mut out, &checks)?;
            }
            out.flush()?;
            if checks.iter().any(|c| c.failed()) {
                return Err(Failed.into());
            }
        }
        Command::Lock { tool, refresh: _ } => {
            // clap makes the tool and --refresh exclusive, and one of them
            // is given: no tool means --refresh.
            let tools = match tool {
                Some(tool) => vec![tool],
                None => rye.locked_tools(project.as_deref())?,
            };
            let mut failed = false;
            for tool in tools {
                match rye.lock(project.as_deref(), &tool) {
                    Ok(path) => writeln!(out, "locked {tool}: {}", path.display())?,
                    Err(e) => {
                        failed = true;
                        writeln!(out, "failed {tool}: {e}")?;
                    }
                }
            }
            out.flush()?;
            if failed {
                return Err(Failed.into());
            }
        }
    }
    out.flush()?;
    Ok(())
}

fn keys(
    rye: &Rye,
    key_dir: Option<PathBuf>,
    project: Option<&std::path::Path>,
    action: KeysAction,
    out: &mut impl Write,
    json: bool,
) -> anyhow::Result<()> {
    let key_dir = key_dir.context("no signing key folder: set RYE_SIGNING_KEY_DIR or HOME")?;
    match action {
        KeysAction::Generate => {
            let keypair = rye_integrity::Keypair::generate()?;
            keypair.save(&key_dir)?;
            writeln!(
                out,
                "made signing key {} in {}",
                keypair.fingerprint(),
                key_dir.display()
            )?;
            writeln!(out, "trust it with: rye keys trust")?;
        }
        KeysAction::Show => {
            let spaces = rye.spaces(project);
            let trust = rye.trust_store(&spaces);
            let own = rye.signing_key().ok();
            if json {
                let keys: Vec<serde_json::Value> = trust
                    .keys()
                    .map(|k| serde_json::json!({"fingerprint": k.key.fingerprint(), "owner": k.owner, "source": k.source}))
                    .collect();
                let ignored: Vec<serde_json::Value> = trust
                    .ignored()
                    .iter()
                    .map(|(p, why)| serde_json::json!({"path": p, "reason": why}))
                    .collect();
                output::json(
                    out,
                    &serde_json::json!({
                        "signing_key": own.as_ref().map(|k| serde_json::json!({"fingerprint": k.fingerprint(), "public_pem": k.public().pem(), "dir": key_dir})),
                        "trusted": keys,
                        "ignored": ignored,
                    }),
                )?;
                return Ok(());
            }
            match &own {
                Some(k) => {
                    writeln!(
                        out,
                        "signing key {} ({})",
                        k.fingerprint(),
                        key_dir.display()
                    )?;
                    write!(out, "{}", k.public().pem())?;
                }
                None => writeln!(
                    out,
                    "no signing key in {} (rye keys generate)",
                    key_dir.display()
                )?,
            }
            writeln!(out, "\ntrusted keys:")?;
            for k in trust.keys() {
                let from = match &k.source {
                    rye_integrity::KeySource::Builtin => "built in".to_owned(),
                    rye_integrity::KeySource::Given => "given".to_owned(),
                    rye_integrity::KeySource::File { space, path } => {
                        format!("{space}: {}", path.display())
                    }
                };
                writeln!(out, "  {}  {:<12} {from}", k.key.fingerprint(), k.owner)?;
            }
            for (path, why) in trust.ignored() {
                writeln!(out, "  ignored {}: {why}", path.display())?;
            }
        }
        KeysAction::Trust { key, space, owner } => {
            let public = match key {
                None => rye.signing_key()?.public().clone(),
                Some(text) if text.trim_start().starts_with("-----BEGIN") => {
                    rye_integrity::read_public_key(&text)?.0
                }
                Some(file) => {
                    let text = std::fs::read_to_string(&file)
                        .with_context(|| format!("reading {file}"))?;
                    rye_integrity::read_public_key(&text)
                        .with_context(|| file.clone())?
                        .0
                }
            };
            let path = rye.trust_key(project, &public, &owner, space)?;
            writeln!(
                out,
                "trusted {} ({owner}): {}",
                public.fingerprint(),
                path.display()
            )?;
        }
        KeysAction::Untrust { fingerprint, space } => {
            let path = rye.untrust_key(project, &fingerprint, space)?;
            writeln!(out, "removed {}", path.display())?;
        }
    }
    Ok(())
}

/// The item ran and failed; its result, already printed, says why.
#[derive(Debug)]
struct Failed;

impl std::fmt::Display for Failed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("the execution failed")
    }
}

impl std::error::Error for Failed {}

/// `rye mcp …`.
fn mcp(
    rye: Rye,
    project: Option<&std::path::Path>,
    action: McpAction,
    out: &mut impl Write,
    json: bool,
) -> anyhow::Result<()> {
    let pairs = |what: &str, items: &[String]| -> anyhow::Result<Vec<(String, String)>> {
        items
            .iter()
            .map(|item| {
                item.split_once('=')
                    .map(|(k, v)| (k.to_owned(), v.to_owned()))
                    .with_context(|| format!("--{what} {item:?} is not NAME=VALUE"))
            })
            .collect()
    };
    match action {
        McpAction::Add {
            name,
            http,
            headers,
            bearer_token_env,
            env,
            space,
            force,
            stdio,
        } => {
            let server = match http {
                Some(url) => rye_host::NewServer::Http {
                    url,
                    headers: pairs("header", &headers)?,
                    bearer_token_env,
                },
                None => {
                    let (command, args) = stdio.split_first().context("--stdio needs a command")?;
                    rye_host::NewServer::Stdio {
                        command: command.clone(),
                        args: args.to_vec(),
                        env: pairs("env", &env)?,
                    }
                }
            };
            let path = rye
                .mcp_add(project, space, &name, &server, force)
                .map_err(anyhow::Error::msg)?;
            if json {
                output::json(
                    out,
                    &serde_json::json!({"server": format!("mcp/servers/{name}"), "path": path}),
                )?;
            } else {
                writeln!(out, "wrote and signed {}", path.display())?;
                writeln!(out, "next: rye mcp discover {name}")?;
            }
        }
        McpAction::Discover { name } | McpAction::Refresh { name } => {
            let rye = std::sync::Arc::new(rye);
            contain_runs();
            let runtime = one_thread_runtime()?;
            let report = runtime
                .block_on(rye.mcp_discover(project, &name))
                .map_err(anyhow::Error::msg)?;
            if json {
                output::json(out, &report)?;
            } else {
                for (what, names) in [
                    ("added", &report.added),
                    ("updated", &report.updated),
                    ("unchanged", &report.unchanged),
                    ("removed", &report.removed),
                ] {
                    if !names.is_empty() {
                        writeln!(out, "{what}: {}", names.join(", "))?;
                    }
                }
                writeln!(
                    out,
                    "{} tools of {} as items mcp/{name}/<tool>",
                    report.added.len() + report.updated.len() + report.unchanged.len(),
                    report.server
                )?;
            }
            drop(runtime);
            rye_host::runs::settle(std::time::Duration::from_secs(2));
        }
        McpAction::Manage => {
            let action = ManageRequest::read(std::io::stdin().lock())?;
            return mcp(rye, project, action, out, true);
        }
        McpAction::List => {
            let servers = rye.mcp_list(project);
            if json {
                output::json(out, &servers)?;
            } else if servers.is_empty() {
                writeln!(out, "no MCP servers; add one with rye mcp add")?;
            } else {
                for server in servers {
                    writeln!(
                        out,
                        "{}  ({} space, {}, {} tools)  {}",
                        server.name, server.space, server.transport, server.tools, server.target
                    )?;
                }
            }
        }
        McpAction::Remove { name, space } => {
            let removed = rye
                .mcp_remove(project, space, &name)
                .map_err(anyhow::Error::msg)?;
            if json {
                output::json(out, &serde_json::json!({"removed": removed}))?;
            } else {
                for path in removed {
                    writeln!(out, "removed {}", path.display())?;
                }
            }
        }
    }
    Ok(())
}

/// `rye threads …`.
fn threads(
    rye: &Rye,
    project: &std::path::Path,
    action: ThreadsAction,
    out: &mut impl Write,
    json: bool,
) -> anyhow::Result<()> {
    let runtime = one_thread_runtime()?;
    match action {
        ThreadsAction::List { status, limit } => {
            let status = status
                .map(|s| s.parse::<rye_host::ThreadStatus>())
                .transpose()
                .map_err(|e| anyhow::anyhow!("{e}"))?;
            let threads = runtime
                .block_on(rye.threads(project, status, limit))
                .map_err(anyhow::Error::msg)?;
            if json {
                output::json(out, &threads)?;
            } else if threads.is_empty() {
                writeln!(out, "no threads")?;
            } else {
                for thread in threads {
                    let took = thread
                        .finished_at
                        .map(|end| format!("{} ms", end - thread.created_at))
                        .unwrap_or_else(|| "…".into());
                    writeln!(
                        out,
                        "{}  {:<9}  {:>8}  {}",
                        thread.thread_id, thread.status, took, thread.item_id
                    )?;
                }
            }
        }
        ThreadsAction::Show { thread_id } => {
            let view = runtime
                .block_on(rye.thread(project, &thread_id))
                .map_err(anyhow::Error::msg)?;
            output::json(out, &view)?;
        }
        ThreadsAction::Wait { thread_id, timeout } => {
            let view = runtime
                .block_on(rye.wait_thread(project, &thread_id, seconds("timeout", timeout)?))
                .map_err(anyhow::Error::msg)?;
            output::json(out, &view)?;
            out.flush()?;
            if view.thread.status == rye_host::ThreadStatus::Running {
                anyhow::bail!("thread {thread_id} is still running after {timeout} s");
            }
        }
        ThreadsAction::Cancel { thread_id, grace } => {
            let cancelled = runtime
                .block_on(rye.cancel_thread(project, &thread_id, seconds("grace", grace)?))
                .map_err(anyhow::Error::msg)?;
            output::json(out, &cancelled)?;
        }
        ThreadsAction::Steps { thread_id } => {
            let view = runtime
                .block_on(rye.thread(project, &thread_id))
                .map_err(anyhow::Error::msg)?;
            output::json(
                out,
                &serde_json::json!({"run_id": thread_id, "status": view.thread.status, "steps": view.events}),
            )?;
        }
        ThreadsAction::Tail { thread_id, timeout } => {
            let thread = runtime
                .block_on(rye.tail_thread(
                    project,
                    &thread_id,
                    0,
                    seconds("timeout", timeout)?,
                    |event| {
                        serde_json::to_writer(&mut *out, event)?;
                        writeln!(out)?;
                        out.flush()
                    },
                ))
                .map_err(anyhow::Error::msg)?;
            if thread.status == rye_host::ThreadStatus::Running {
                anyhow::bail!("thread {thread_id} is still running after {timeout} s");
            }
        }
        ThreadsAction::Prune { older_than } => {
            let pruned = runtime
                .block_on(rye.prune_threads(project, age(&older_than)?))
                .map_err(anyhow::Error::msg)?;
            if json {
                output::json(out, &pruned)?;
            } else {
                writeln!(
                    out,
                    "removed {} thread(s) and {} stored result(s)",
                    pruned.threads, pruned.objects
                )?;
            }
        }
        ThreadsAction::Run { .. } | ThreadsAction::Manage { .. } | ThreadsAction::Resume { .. } => {
            unreachable!("handled before")
        }
    }
    Ok(())
}

/// A number of seconds given on the command line, as a duration.
fn seconds(what: &str, value: f64) -> anyhow::Result<std::time::Duration> {
    std::time::Duration::try_from_secs_f64(value)
        .ok()
        .filter(|d| d.as_secs() <= 86_400 * 365)
        .with_context(|| format!("--{what} {value} is not a number of seconds"))
}

/// An age given as a number and a unit: `30d`, `12h`, `90m`, `45s`.
fn age(text: &str) -> anyhow::Result<std::time::Duration> {
    let bad = || format!("--older-than {text:?} is not an age such as 30d, 12h, 90m or 45s");
    let unit = text.chars().last().with_context(bad)?;
    let scale = match unit {
        's' => 1.0,
        'm' => 60.0,
        'h' => 3600.0,
        'd' => 86_400.0,
        _ => anyhow::bail!(bad()),
    };
    let number: f64 = text[..text.len() - 1]
        .trim()
        .parse()
        .ok()
        .with_context(bad)?;
    std::time::Duration::try_from_secs_f64(number * scale)
        .ok()
        .with_context(bad)
}

/// The runtime a one-shot command runs on.
/// Runs `request` (in the background with `run_async`) and prints its
/// result; returns once the run's record is written and what it left for
/// the reaper (a sweep, a cgroup to remove) is done, an error when the run
/// failed.
fn execute_and_report(
    runtime: &tokio::runtime::Runtime,
    rye: &std::sync::Arc<rye_host::Rye>,
    request: &ExecuteRequest,
    run_async: bool,
    out: &mut impl Write,
) -> anyhow::Result<()> {
    let result = if run_async {
        runtime.block_on(rye.execute_async(request))
    } else {
        runtime.block_on(until_signal(rye, rye.execute(request)))
    };
    output::json(&mut *out, &result)?;
    out.flush()?;
    runtime.block_on(rye.flush_threads());
    rye_host::runs::settle(std::time::Duration::from_secs(2));
    if result["status"] == "error" {
        return Err(Failed.into());
    }
    Ok(())
}

fn one_thread_runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")
}

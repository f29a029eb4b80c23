//! The events of an execution, typed. Each serializes as the object
//! `--trace` shows: `{"step": <name>, ...}`.

use std::path::PathBuf;

use rye_components::PluginSpace;
use rye_space::{Location, Space};
use serde::Serialize;
use serde_json::Value;

use crate::Signed;

/// One event of an execution's trace.
#[derive(Debug, Clone, Serialize)]
#[serde(untagged)]
pub enum Event {
    /// A step the host took.
    Host(Step),
    /// A note of the runtime adapter's plan, as the adapter gave it (its
    /// own `step` name included).
    Adapter(Value),
}

impl From<Step> for Event {
    fn from(step: Step) -> Self {
        Event::Host(step)
    }
}

/// A step the host took, in the order an execution takes them: resolve →
/// lockfile → validate → plan (with the adapter's questions) → verify
/// dependencies → run → record.
#[derive(Debug, Clone, Serialize)]
#[serde(tag = "step", rename_all = "snake_case")]
pub enum Step {
    /// A chain element found, and the files it shadows.
    Resolve {
        item_id: String,
        path: PathBuf,
        space: Space,
        shadowed: Vec<Location>,
    },
    /// How a file the execution uses stands.
    VerifyIntegrity {
        item: String,
        path: PathBuf,
        #[serde(flatten)]
        signed: Signed,
    },
    /// A lockfile pinned the chain, or was written for it.
    Lockfile {
        item_id: String,
        path: PathBuf,
        status: LockfileStatus,
    },
    /// Validators ran over the tool and its chain.
    Validate { item_id: String, findings: usize },
    /// Variables of the host environment not shown to the adapter.
    Environment { withheld: Vec<String> },
    /// The adapter looked a binary up on `PATH`.
    Which {
        binary: String,
        found: Option<String>,
    },
    /// The adapter ran an element's declared resolve command.
    ResolveCommand {
        item_id: String,
        argv: Vec<String>,
        result: CommandResult,
    },
    /// The adapter read a config file.
    ReadConfig {
        space: PluginSpace,
        path: PathBuf,
        found: bool,
        signature: Value,
    },
    /// The runtime adapter that planned the process; `reused` when the
    /// plan was one it made earlier for the same chain with other
    /// parameters, which it said could be (the adapter was not run).
    Adapter {
        path: PathBuf,
        #[serde(skip_serializing_if = "std::ops::Not::not")]
        reused: bool,
    },
    /// The process planned.
    Plan {
        command: String,
        args: Vec<String>,
        cwd: Option<String>,
        env_keys: Vec<String>,
        stdin_bytes: usize,
        timeout_ms: Option<u64>,
    },
    /// The HTTP request planned. Header values are not shown: they may
    /// carry credentials.
    Request {
        method: String,
        url: String,
        header_names: Vec<String>,
        body_bytes: usize,
        timeout_ms: Option<u64>,
        max_response_bytes: Option<u64>,
        max_redirects: Option<u32>,
        /// Which non-public addresses the chain's runtime allows.
        private_addresses: String,
    },
    /// The MCP tool call planned. Argument values are not shown.
    Call {
        server: String,
        tool_name: String,
        argument_keys: Vec<String>,
        startup_timeout_ms: Option<u64>,
        timeout_ms: Option<u64>,
    },
    /// The graph walker that walked a graph tool.
    Walker { path: PathBuf },
    /// A component tool and what it was granted: its folders, the names
    /// of its variables (never their values), the hosts it may reach, its
    /// limits.
    Component {
        path: PathBuf,
        files: Vec<serde_json::Value>,
        env_keys: Vec<String>,
        hosts: Vec<String>,
        deadline_ms: u64,
        memory_bytes: u64,
        output_bytes: u64,
    },
    /// One decision of the walker and what the host did about it: the
    /// node the run is at after it, the steps taken, what came next
    /// (`dispatch`, `proceed` or `finished`), the walker's time and the
    /// actions' time.
    GraphStep {
        node: Option<String>,
        steps: u32,
        next: &'static str,
        actions: Vec<String>,
        walker_us: u64,
        actions_us: u64,
    },
    /// The files under the tool's anchor, verified.
    VerifyDeps { anchor_path: PathBuf, files: usize },
    /// The process ran.
    Primitive {
        containment: &'static str,
        return_code: Option<i32>,
        signal: Option<i32>,
        timed_out: bool,
        duration_ms: u64,
        stdout_bytes: u64,
        stderr_bytes: u64,
    },
    /// The MCP tool was called.
    Mcp {
        server: String,
        server_path: PathBuf,
        transport: &'static str,
        /// `started` for this call, or `reused` from an earlier one.
        session: &'static str,
        pid: Option<u32>,
        definition_hash: Option<String>,
        duration_ms: u64,
        is_error: bool,
        error: Option<String>,
    },
    /// The request was sent.
    Http {
        status_code: Option<u16>,
        url: Option<String>,
        remote: Option<String>,
        attempts: u32,
        redirects: u32,
        response_bytes: u64,
        duration_ms: u64,
        error: Option<String>,
    },
}

#[derive(Debug, Clone, Copy, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum LockfileStatus {
    Used,
    Created,
}

/// What a resolve command gave: its first line, or why not.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum CommandResult {
    Ok(String),
    Error(String),
}

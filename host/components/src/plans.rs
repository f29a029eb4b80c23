//! What an adapter is asked and what it answers, in the host's terms,
//! and the tool calls kept to answer later asks without it.

use std::path::PathBuf;
use std::sync::Arc;

use serde_json::Value;

use crate::services::PluginSpace;

/// One element of the chain an adapter plans for.
#[derive(Debug, Clone)]
pub struct PlanElement {
    pub item_id: String,
    pub space: PluginSpace,
    pub path: PathBuf,
    /// The element's normalized metadata, a JSON object as text.
    pub metadata: Arc<str>,
}

/// What an adapter is asked to plan.
#[derive(Debug, Clone)]
pub struct PlanRequest {
    /// Tool first, primitive last.
    pub chain: Vec<PlanElement>,
    /// The caller's parameters, a JSON object.
    pub parameters: Value,
    pub project_path: PathBuf,
    pub user_space: PathBuf,
    pub system_space: PathBuf,
}

/// What an adapter planned, and the notes it left for the trace.
#[derive(Debug, Clone, PartialEq)]
pub struct Planned {
    pub action: PlannedAction,
    pub notes: Vec<(String, Value)>,
    /// Made from an earlier plan of the same input with other parameters,
    /// which its adapter said could be (see `ReusablePlans`), rather than
    /// by asking the adapter.
    pub reused: bool,
}

/// The work the chain's primitive is to do.
#[derive(Debug, Clone, PartialEq)]
pub enum PlannedAction {
    Process(PlannedProcess),
    Http(PlannedRequest),
    Mcp(PlannedCall),
}

/// A process for the subprocess primitive.
#[derive(Debug, Clone, PartialEq)]
pub struct PlannedProcess {
    pub command: String,
    pub args: Vec<String>,
    pub env: Vec<(String, String)>,
    pub cwd: Option<String>,
    pub stdin: Option<Vec<u8>>,
    pub timeout_ms: Option<u64>,
}

/// A tool call for the MCP primitive.
#[derive(Debug, Clone, PartialEq)]
pub struct PlannedCall {
    /// The server item's id.
    pub server: String,
    pub tool_name: String,
    /// A JSON object.
    pub arguments: Value,
    pub startup_timeout_ms: Option<u64>,
    pub timeout_ms: Option<u64>,
}

/// A request for the HTTP primitive.
#[derive(Debug, Clone, PartialEq)]
pub struct PlannedRequest {
    pub method: String,
    pub url: String,
    pub headers: Vec<(String, String)>,
    pub body: Option<Vec<u8>>,
    pub timeout_ms: Option<u64>,
    pub max_response_bytes: Option<u64>,
    pub max_redirects: Option<u32>,
    /// Attempts in all and the first wait between them, in milliseconds.
    pub retry: Option<(u32, u64)>,
}

/// An adapter's verdict that the chain cannot be planned.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PlanFailure {
    #[error("{item_id}: invalid configuration: {message}")]
    Config { item_id: String, message: String },
    #[error("{item_id}: interpreter not found: {message}")]
    InterpreterNotFound { item_id: String, message: String },
    #[error("{item_id}: template error: {message}")]
    Template { item_id: String, message: String },
    #[error("the adapter cannot plan this chain: {0}")]
    Unsupported(String),
}

/// Tool calls an adapter planned and marked reusable (`reusable` in
/// `rye:plugin/planning`): the plan depends on its input less the
/// parameters, which enter it only as the call's arguments. An execution
/// whose input is the same but for its parameters (the same adapter, by
/// hash; the same chain, element by element with its metadata; the same
/// paths and views) is answered from it, those parameters as the
/// arguments, without instantiating the adapter. It is kept only when
/// the adapter asked the host nothing while planning. A changed item,
/// adapter or path makes the input differ, and the adapter is asked.
#[derive(Default)]
pub(crate) struct ReusablePlans {
    plans: std::sync::Mutex<Vec<ReusablePlan>>,
}

/// How many reusable plans are kept; past this the oldest goes.
const REUSABLE_PLANS: usize = 64;

struct ReusablePlan {
    adapter: [u8; 32],
    grants: Vec<PathBuf>,
    /// The input, its parameters `null`.
    input: PlanRequest,
    /// The plan, its arguments `null`.
    planned: Planned,
}

impl ReusablePlan {
    fn answers(&self, adapter: &[u8; 32], request: &PlanRequest, grants: &[PathBuf]) -> bool {
        let same_element = |(a, b): (&PlanElement, &PlanElement)| {
            a.item_id == b.item_id
                && a.space == b.space
                && a.path == b.path
                && (Arc::ptr_eq(&a.metadata, &b.metadata) || a.metadata == b.metadata)
        };
        self.adapter == *adapter
            && self.input.chain.len() == request.chain.len()
            && self
                .input
                .chain
                .iter()
                .zip(&request.chain)
                .all(same_element)
            && self.input.project_path == request.project_path
            && self.input.user_space == request.user_space
            && self.input.system_space == request.system_space
            && self.grants == grants
    }
}

impl ReusablePlans {
    /// The plan for `request`, made from a kept one, if one answers it.
    /// Parameters that are not an object are left for the adapter to
    /// refuse.
    pub(crate) fn reuse(
        &self,
        adapter: &[u8; 32],
        request: &PlanRequest,
        grants: &[PathBuf],
    ) -> Option<Planned> {
        if !request.parameters.is_object() {
            return None;
        }
        let plans = self.plans.lock().expect("reusable plans lock");
        let kept = plans
            .iter()
            .rev()
            .find(|p| p.answers(adapter, request, grants))?;
        let mut planned = kept.planned.clone();
        if let PlannedAction::Mcp(call) = &mut planned.action {
            call.arguments = request.parameters.clone();
        }
        planned.reused = true;
        Some(planned)
    }

    /// Keeps `planned`, made for `request`, in place of any plan kept for
    /// the same adapter (by hash) and tool.
    pub(crate) fn keep(
        &self,
        adapter: [u8; 32],
        request: &PlanRequest,
        grants: &[PathBuf],
        planned: &Planned,
    ) {
        let mut planned = planned.clone();
        if let PlannedAction::Mcp(call) = &mut planned.action {
            call.arguments = Value::Null;
        }
        let kept = ReusablePlan {
            adapter,
            grants: grants.to_vec(),
            input: PlanRequest {
                chain: request.chain.clone(),
                parameters: Value::Null,
                project_path: request.project_path.clone(),
                user_space: request.user_space.clone(),
                system_space: request.system_space.clone(),
            },
            planned,
        };
        let mut plans = self.plans.lock().expect("reusable plans lock");
        fn tool(plan: &ReusablePlan) -> Option<&str> {
            plan.input.chain.first().map(|e| e.item_id.as_str())
        }
        plans.retain(|p| p.adapter != kept.adapter || tool(p) != tool(&kept));
        if plans.len() >= REUSABLE_PLANS {
            plans.remove(0);
        }
        plans.push(kept);
    }
}

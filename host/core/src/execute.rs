//! Executing items.
//!
//! A **tool** runs through its chain: the chain is built and validated, a
//! runtime adapter component plans the work (the first element naming
//! `adapter: <name>`, else the standard adapter `rye/standard`, found at
//! `.ai/adapters/<name>.wasm` through the spaces), and the native primitive
//! the chain ends in carries it out.
//!
//! - The subprocess primitive (`rye/core/primitives/execute`) runs a
//!   process. Any JSON the tool prints is its `data` (`{}`, `[]`, `0` and
//!   `null` included); an object with `"success": false` makes the run an
//!   error; other output comes back as `stdout`, `stderr` and
//!   `return_code`.
//! - The HTTP primitive (`rye/core/primitives/http_client`) sends a
//!   request. `data` is `{status_code, body, headers}`, `body` parsed when
//!   the answer is JSON; a status of 400 or more makes the run an error.
//!   Which non-public addresses it may reach is the chain's runtimes' to
//!   say (`allow_private_addresses` in a runtime's signed config), never
//!   the tool's, its parameters' or the adapter's.
//!
//! A **directive** returns its parsed structure, its inputs checked and
//! filled into its text, and the instruction to follow it. **Knowledge**
//! returns its parsed content.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use rye_components::{
    ComponentError, PlanElement, PlanRequest, Planned, PlannedAction, PlannedCall, PlannedProcess,
    PlannedRequest, World,
};
use rye_process::{Capture, Outcome, Plan};
use rye_space::{ItemKind, Space};
use serde_json::{Map, Value, json};

use crate::chain::Chain;
use crate::chain_rules::{
    COMPONENT_PRIMITIVE, EXECUTE_PRIMITIVE, GRAPH_PRIMITIVE, HTTP_PRIMITIVE, MCP_PRIMITIVE,
};
use crate::lockfile::LockState;
use crate::reply::{
    DryRunReply, ItemMetadata, ItemReply, Took, ToolMetadata, ToolReply, Truncated, to_value,
};
use crate::services::HostServices;
use crate::session::Session;
use crate::trace::{Event, LockfileStatus, Step};
use crate::{ChainSummary, ErrorReply, HostError, LoadRequest, Rye, Signed};

/// The adapter used when no element of a chain names one.
pub const STANDARD_ADAPTER: &str = "rye/standard";

/// The variable that tells a runtime, and the process it plans, which
/// program this host is (when the host knows: see `RyeConfig::executable`).
pub const EXECUTABLE_VAR: &str = "RYE_EXECUTABLE";

/// An execution.
#[derive(Debug, Clone)]
pub struct ExecuteRequest {
    pub kind: ItemKind,
    pub id: String,
    /// The caller's parameters, a JSON object.
    pub parameters: Value,
    pub project: Option<PathBuf>,
    /// Build and validate only; run nothing.
    pub dry_run: bool,
    /// Return the events of the execution.
    pub trace: bool,
    /// The thread of the run this one is part of (a graph's step).
    pub parent_thread: Option<String>,
    /// The permissions of the graphs this run is part of, outermost first:
    /// a graph run here may ask only for what each of them allows.
    pub grants: Vec<Arc<[String]>>,
}

impl ExecuteRequest {
    /// The project folder the request is about: the one given, else the
    /// working directory.
    pub fn project_dir(&self) -> PathBuf {
        crate::session::project_dir(self.project.as_deref())
    }

    pub fn new(kind: ItemKind, id: impl Into<String>) -> Self {
        Self {
            kind,
            id: id.into(),
            parameters: Value::Object(Map::new()),
            project: None,
            dry_run: false,
            trace: false,
            parent_thread: None,
            grants: Vec::new(),
        }
    }
}

fn error_result(
    kind: ItemKind,
    id: &str,
    error: impl std::fmt::Display,
    started: Instant,
) -> Value {
    ErrorReply::new(error)
        .of_execution(kind, id)
        .took(started)
        .to_value()
}

/// The error result for a host error, with its `error_type`.
fn failure(kind: ItemKind, id: &str, error: &HostError, started: Instant) -> Value {
    ErrorReply::host(error)
        .of_execution(kind, id)
        .took(started)
        .to_value()
}

/// The result of a directive or knowledge entry handed to the agent.
fn item_reply(
    request: &ExecuteRequest,
    started: Instant,
    loaded: crate::Loaded,
    status: &'static str,
    data: Value,
    inputs: Option<Map<String, Value>>,
    your_directions: String,
) -> Value {
    to_value(ItemReply {
        status,
        kind: request.kind,
        item_id: request.id.clone(),
        data,
        inputs,
        your_directions,
        metadata: ItemMetadata {
            duration_ms: started.elapsed().as_millis() as u64,
            path: loaded.path,
            source: loaded.source,
        },
        signature: loaded.signature,
        warnings: loaded.warnings,
    })
}

impl Rye {
    /// Executes an item and returns the result document (see the module
    /// docs). Failures of the item are results with `"status": "error"`;
    /// the host itself does not fail.
    pub async fn execute(self: &Arc<Self>, request: &ExecuteRequest) -> Value {
        let started = Instant::now();
        let _busy = rye_components::Busy::new();
        if let Err(e) = rye_space::validate_id(&request.id) {
            return failure(request.kind, &request.id, &e.into(), started);
        }
        if !request.parameters.is_object() {
            return error_result(
                request.kind,
                &request.id,
                "parameters must be a JSON object",
                started,
            );
        }
        match request.kind {
            ItemKind::Tool => self.execute_tool(request, started).await,
            ItemKind::Directive => self.execute_directive(request, started),
            ItemKind::Knowledge => self.execute_knowledge(request, started),
            ItemKind::Config => error_result(
                request.kind,
                &request.id,
                "config items are not executable",
                started,
            ),
        }
    }

    async fn execute_tool(self: &Arc<Self>, request: &ExecuteRequest, started: Instant) -> Value {
        // A dry run runs nothing, so it is no thread.
        let recording = if request.dry_run || !self.threads.enabled() {
            None
        } else {
            Some(self.threads.start(
                &request.project_dir(),
                &request.id,
                &request.parameters,
                request.parent_thread.clone(),
            ))
        };
        self.run_tool(request, started, recording, None).await
    }

    /// Runs a tool, ending `recording` (if any) with the result.
    pub(crate) async fn run_tool(
        self: &Arc<Self>,
        request: &ExecuteRequest,
        started: Instant,
        recording: Option<crate::threads::Recording>,
        counts: Option<Arc<rye_process::OutputCounts>>,
    ) -> Value {
        let mut run = ToolRun::new(self, request, started);
        run.counts = counts;
        run.begun = recording.as_ref().map(crate::threads::Recording::begun);
        run.thread_id = recording.as_ref().map(|r| r.id().to_owned());
        let mut result = match run.stages().await {
            Ok(result) | Err(result) => result,
        };
        let unrecorded = match recording {
            None => None,
            Some(recording) => {
                let id = recording.id().to_owned();
                let ended = recording.end(&result, run.timed_out).await;
                if ended.is_ok()
                    && let Some(Value::Object(metadata)) = result.get_mut("metadata")
                {
                    metadata.insert("thread_id".into(), json!(id));
                }
                ended.err()
            }
        };
        if let (Some(why), Value::Object(reply)) = (unrecorded, &mut result) {
            let warning = json!(format!("this run was not recorded as a thread: {why}"));
            match reply.entry("warnings").or_insert_with(|| json!([])) {
                Value::Array(warnings) => warnings.push(warning),
                other => *other = json!([warning]),
            }
        }
        result
    }

    /// What a tool's execution would do, without doing it: the chain is
    /// built and its adapter asked for the plan (which may run the chain's
    /// declared interpreter resolve commands). Returns the chain, the plan
    /// and the host's answers to the adapter.
    pub fn plan(
        &self,
        project: Option<&Path>,
        tool_id: &str,
        parameters: Value,
    ) -> Result<(Chain, Planned, Vec<Event>), HostError> {
        let session = self.session(project);
        let chain = self.build_chain(&session, tool_id)?;
        let log = Arc::new(Mutex::new(Vec::new()));
        let (_, _, plan) = self.plan_chain(&session, &chain, parameters, log.clone())?;
        let answers = std::mem::take(&mut *log.lock().expect("trace log lock"));
        Ok((chain, plan, answers))
    }

    /// What the gate lets adapters see of the host environment.
    pub(crate) fn adapter_env(&self) -> Result<Arc<crate::rye::AdapterEnv>, HostError> {
        let exposed = self.adapter_env.get_or_init(|| {
            let policy = match std::env::var(rye_gate::WITHHOLD_VAR) {
                Ok(setting) => rye_gate::EnvPolicy::parse(&setting)?,
                Err(_) => rye_gate::EnvPolicy::default(),
            };
            let mut exposed = policy.expose(std::env::vars());
            if let Some(executable) = &self.executable {
                let value = executable.display().to_string();
                exposed.visible.retain(|(name, _)| name != EXECUTABLE_VAR);
                exposed.visible.push((EXECUTABLE_VAR.to_owned(), value));
            }
            Ok(Arc::new(crate::rye::AdapterEnv {
                visible: Arc::new(exposed.visible),
                withheld: exposed.withheld,
            }))
        });
        Ok(exposed.clone()?)
    }

    /// Finds the chain's adapter and asks it for the plan, blocking until
    /// it is made.
    fn plan_chain(
        &self,
        session: &Session,
        chain: &Chain,
        parameters: Value,
        log: Arc<Mutex<Vec<Event>>>,
    ) -> Result<(PathBuf, Signed, Planned), HostError> {
        let asking = self.plan_request(session, chain, parameters, log)?;
        let planned = self.components.plan(
            &asking.adapter,
            &asking.request,
            &asking.grants,
            Box::new(asking.services),
        );
        asking.answer.checked(chain, planned)
    }

    /// What asking the chain's adapter for the plan takes: the adapter,
    /// found and verified, and what it is shown.
    fn plan_request(
        &self,
        session: &Session,
        chain: &Chain,
        parameters: Value,
        log: Arc<Mutex<Vec<Event>>>,
    ) -> Result<Asking, HostError> {
        let (spaces, trust) = (&session.spaces, session.trust(self));
        let named = chain.elements.iter().find_map(|e| {
            e.metadata
                .get("adapter")
                .and_then(Value::as_str)
                .map(|a| (e, a))
        });
        let name = named.map_or(STANDARD_ADAPTER, |(_, name)| name);
        let found = match self.find_component(spaces, &trust, name, World::RuntimeAdapter)? {
            Ok(found) => found,
            Err(searched) => {
                return Err(HostError::AdapterNotFound {
                    name: name.to_owned(),
                    searched,
                    named_by: named.map(|(e, _)| e.item_id.clone()),
                });
            }
        };
        let adapter = found.component;
        let path = adapter.path.clone();

        let project_path = session.project_dir();
        // The adapter is told the project by the path it is shown it at.
        let project_path = rye_gate::lexical(&project_path).unwrap_or(project_path);
        // What the adapter sees is the gate's to say: the folders, and the
        // host environment less what the user withholds.
        let home = std::env::var_os("HOME").map(PathBuf::from);
        let views = rye_gate::ViewRequest {
            project: Some(&project_path),
            tool_file: Some(&chain.tool().path),
            home: home.as_deref(),
        };
        // Those that are not folders are left out as the views are opened.
        let grants: Vec<PathBuf> = rye_gate::file_views(World::RuntimeAdapter, &views);
        let exposed = self.adapter_env()?;
        if !exposed.withheld.is_empty() {
            log.lock().expect("trace log lock").push(
                Step::Environment {
                    withheld: exposed.withheld.clone(),
                }
                .into(),
            );
        }
        let services = HostServices {
            env: exposed.visible.clone(),
            commands: chain
                .elements
                .iter()
                .filter_map(|e| {
                    let argv = e
                        .metadata
                        .get("env_config")?
                        .get("interpreter")?
                        .get("resolve_cmd")?
                        .as_array()?;
                    let argv: Vec<String> = argv
                        .iter()
                        .filter_map(Value::as_str)
                        .map(str::to_owned)
                        .collect();
                    Some((e.item_id.clone(), argv))
                })
                .collect(),
            config_dirs: spaces
                .roots()
                .iter()
                .map(|r| {
                    (
                        crate::validators::plugin_space(r.space),
                        r.ai_dir.join("config"),
                    )
                })
                .collect::<HashMap<_, _>>(),
            log,
            trust: self.integrity.policy.enforce.then(|| trust.clone()),
        };
        let request = PlanRequest {
            chain: chain
                .elements
                .iter()
                .map(|e| PlanElement {
                    item_id: e.item_id.clone(),
                    space: crate::validators::plugin_space(e.space),
                    path: e.path.clone(),
                    metadata: e.metadata_json.clone(),
                })
                .collect(),
            parameters,
            project_path,
            user_space: spaces
                .root(Space::User)
                .map(|r| r.base.clone())
                .unwrap_or_default(),
            system_space: self.system_base().to_owned(),
        };
        Ok(Asking {
            adapter,
            request,
            grants,
            services,
            answer: Answer {
                path,
                signed: found.signed,
            },
        })
    }
    /// The item, parsed, or the error result saying why it cannot be.
    fn load_parsed(
        &self,
        request: &ExecuteRequest,
        started: Instant,
    ) -> Result<crate::Loaded, Value> {
        let loaded = self
            .load(&LoadRequest {
                project: request.project.clone(),
                ..LoadRequest::new(request.kind, request.id.clone())
            })
            .map_err(|e| failure(request.kind, &request.id, &e, started))?;
        if let Some((refused, error_type)) = &loaded.refused {
            return Err(ErrorReply::new(refused)
                .class(error_type)
                .of_execution(request.kind, &request.id)
                .took(started)
                .to_value());
        }
        if let Some(error) = &loaded.parse_error {
            return Err(error_result(request.kind, &request.id, error, started));
        }
        let validated = self.enforce_validators(
            &self.session(request.project.as_deref()),
            crate::validators::ItemRef {
                kind: request.kind,
                id: &request.id,
                space: loaded.source,
                path: &loaded.path,
                content_hash: loaded.content_hash,
            },
            None,
        );
        match validated.map(|findings| crate::validators::refusal(&findings)) {
            Ok(None) => Ok(loaded),
            Ok(Some(refused)) | Err(refused) => {
                Err(failure(request.kind, &request.id, &refused, started))
            }
        }
    }

    fn execute_directive(&self, request: &ExecuteRequest, started: Instant) -> Value {
        let loaded = match self.load_parsed(request, started) {
            Ok(loaded) => loaded,
            Err(result) => return result,
        };
        let parameters = request.parameters.as_object().cloned().unwrap_or_default();
        let declared: Vec<&Map<String, Value>> = loaded
            .parsed
            .get("inputs")
            .and_then(Value::as_array)
            .map(|inputs| inputs.iter().filter_map(Value::as_object).collect())
            .unwrap_or_default();
        let names: Vec<&str> = declared
            .iter()
            .filter_map(|i| i.get("name").and_then(Value::as_str))
            .collect();
        let unknown: Vec<&str> = parameters
            .keys()
            .map(String::as_str)
            .filter(|k| !names.contains(k))
            .collect();
        let refuse = |error: String| {
            ErrorReply::new(error)
                .of_execution(ItemKind::Directive, &request.id)
                .took(started)
                .declared_inputs(json!(declared))
                .to_value()
        };
        if !unknown.is_empty() {
            return refuse(format!(
                "unknown parameters: {}; valid inputs: {}",
                unknown.join(", "),
                names.join(", ")
            ));
        }
        let mut inputs = Map::new();
        let mut missing = Vec::new();
        for input in &declared {
            let Some(name) = input.get("name").and_then(Value::as_str) else {
                continue;
            };
            match (parameters.get(name), input.get("default")) {
                (Some(value), _) => {
                    inputs.insert(name.to_owned(), value.clone());
                }
                (None, Some(default)) => {
                    inputs.insert(name.to_owned(), default.clone());
                }
                (None, None) if input.get("required").and_then(Value::as_bool) == Some(true) => {
                    missing.push(name)
                }
                (None, None) => {}
            }
        }
        if !missing.is_empty() {
            return refuse(format!("missing required inputs: {}", missing.join(", ")));
        }
        let body = fill_inputs(
            loaded
                .parsed
                .get("body")
                .and_then(Value::as_str)
                .unwrap_or_default(),
            &inputs,
        );
        let mut data = Value::Object(loaded.parsed.clone());
        fill_values(&mut data, &inputs);
        let status = if request.dry_run {
            "validation_passed"
        } else {
            "success"
        };
        let directions = format!(
            "Follow the directive {:?}: carry out its process steps in order with the inputs given, and \
             meet its success criteria.{}",
            request.id,
            if body.is_empty() {
                String::new()
            } else {
                format!("\n\n{body}")
            }
        );
        item_reply(
            request,
            started,
            loaded,
            status,
            data,
            Some(inputs),
            directions,
        )
    }

    fn execute_knowledge(&self, request: &ExecuteRequest, started: Instant) -> Value {
        let loaded = match self.load_parsed(request, started) {
            Ok(loaded) => loaded,
            Err(result) => return result,
        };
        let mut data = loaded.parsed.clone();
        data.entry("name").or_insert_with(|| json!(request.id));
        let directions = "Use this knowledge to inform your decisions.".to_owned();
        item_reply(
            request,
            started,
            loaded,
            "success",
            Value::Object(data),
            None,
            directions,
        )
    }
}

/// An adapter about to be asked for a plan (see [`Rye::plan_request`]).
struct Asking {
    adapter: Arc<rye_components::LoadedComponent>,
    request: PlanRequest,
    grants: Vec<PathBuf>,
    services: HostServices,
    answer: Answer,
}

/// The adapter asked, and its verdict on its signature.
struct Answer {
    path: PathBuf,
    signed: Signed,
}

impl Answer {
    /// The adapter's answer, checked against the chain it was for.
    fn checked(
        self,
        chain: &Chain,
        planned: Result<Result<Planned, rye_components::PlanFailure>, ComponentError>,
    ) -> Result<(PathBuf, Signed, Planned), HostError> {
        let path = self.path;
        let planned =
            planned
                .map_err(HostError::Component)?
                .map_err(|failure| HostError::AdapterFailed {
                    path: path.clone(),
                    failure: failure.to_string(),
                })?;
        let (planned_kind, primitive) = match &planned.action {
            PlannedAction::Process(_) => ("a process", EXECUTE_PRIMITIVE),
            PlannedAction::Http(_) => ("an HTTP request", HTTP_PRIMITIVE),
            PlannedAction::Mcp(_) => ("an MCP tool call", MCP_PRIMITIVE),
        };
        if chain.primitive().item_id != primitive {
            return Err(HostError::AdapterFailed {
                path,
                failure: format!(
                    "it planned {planned_kind} for a chain that ends in {}",
                    chain.primitive().item_id
                ),
            });
        }
        Ok((path, self.signed, planned))
    }
}

/// Runs blocking work (a component call) without stalling the reactor. On
/// a multi-threaded runtime the worker hands its other tasks off for the
/// duration (cheaper than a trip to the blocking pool). On a current-thread
/// runtime it runs on a thread of its own: WASI's synchronous calls may
/// not run inside a runtime's context. Outside any runtime it just runs.
fn blocking<T: Send>(work: impl FnOnce() -> T + Send) -> T {
    match tokio::runtime::Handle::try_current().map(|h| h.runtime_flavor()) {
        Ok(tokio::runtime::RuntimeFlavor::MultiThread) => tokio::task::block_in_place(work),
        Ok(_) => std::thread::scope(|scope| {
            scope
                .spawn(work)
                .join()
                .expect("component call thread panicked")
        }),
        Err(_) => work(),
    }
}

/// The tool's data and, if the run failed, why.
fn tool_output(outcome: &Outcome, timeout_ms: Option<u64>) -> (Value, Option<String>) {
    let stdout = String::from_utf8_lossy(&outcome.stdout);
    let stderr = String::from_utf8_lossy(&outcome.stderr);
    let parsed = if stdout.trim().is_empty() || outcome.stdout_dropped > 0 {
        None
    } else {
        serde_json::from_str::<Value>(stdout.trim()).ok()
    };
    let data = parsed.clone().unwrap_or_else(
        || json!({"stdout": stdout, "stderr": stderr, "return_code": outcome.code}),
    );
    let error = if outcome.timed_out {
        Some(format!(
            "timed out after {} s; the process and everything it started were killed",
            timeout_ms.unwrap_or_default() as f64 / 1000.0
        ))
    } else if !outcome.success() {
        let detail = stderr.trim();
        Some(match (outcome.code, outcome.signal) {
            (_, _) if !detail.is_empty() => detail.to_owned(),
            (Some(code), _) => format!("exited with code {code}"),
            (None, Some(signal)) => format!("killed by signal {signal}"),
            (None, None) => "ended without a status".to_owned(),
        })
    } else {
        match parsed.as_ref().and_then(Value::as_object) {
            Some(object) if object.get("success") == Some(&Value::Bool(false)) => Some(
                object
                    .get("error")
                    .and_then(Value::as_str)
                    .map(str::to_owned)
                    .filter(|e| !e.is_empty())
                    .or_else(|| (!stderr.trim().is_empty()).then(|| stderr.trim().to_owned()))
                    .unwrap_or_else(|| "the tool reported failure".to_owned()),
            ),
            _ => None,
        }
    };
    (data, error)
}

/// `text` with its input placeholders filled: `{name}` and `{input:name}`
/// take the input's value and stay as written when it is missing;
/// `{input:name?}` becomes empty when it is missing; `{input:name:default}`
/// and `{input:name|default}` fall back to the default. A string value is
/// put in as it is, any other as JSON.
fn fill_inputs(text: &str, inputs: &Map<String, Value>) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(open) = rest.find('{') {
        out.push_str(&rest[..open]);
        let after = &rest[open + 1..];
        let filled = after
            .find('}')
            .and_then(|close| Some((placeholder(&after[..close], inputs)?, close)));
        match filled {
            Some((value, close)) => {
                out.push_str(&value);
                rest = &after[close + 1..];
            }
            None => {
                out.push('{');
                rest = after;
            }
        }
    }
    out.push_str(rest);
    out
}

/// What the placeholder `{inner}` becomes, or `None` to keep it as written.
fn placeholder(inner: &str, inputs: &Map<String, Value>) -> Option<String> {
    let text = |value: &Value| match value {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    };
    let Some(spec) = inner.strip_prefix("input:") else {
        return inputs.get(inner).map(text);
    };
    let (name, missing) = if let Some(name) = spec.strip_suffix('?') {
        (name, Some(""))
    } else if let Some(at) = spec.find([':', '|']) {
        (&spec[..at], Some(&spec[at + 1..]))
    } else {
        (spec, None)
    };
    let plain = !name.is_empty()
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-');
    if !plain {
        return None;
    }
    match (inputs.get(name), missing) {
        (Some(value), _) => Some(text(value)),
        (None, Some(fallback)) => Some(fallback.to_owned()),
        (None, None) => None,
    }
}

fn fill_values(value: &mut Value, inputs: &Map<String, Value>) {
    match value {
        Value::String(s) => *s = fill_inputs(s, inputs),
        Value::Array(items) => items.iter_mut().for_each(|v| fill_values(v, inputs)),
        Value::Object(map) => map.values_mut().for_each(|v| fill_values(v, inputs)),
        _ => {}
    }
}

mod component;
mod graph;

/// A result that ends the execution early: the error result, complete.
type Stage<T> = Result<T, Value>;

/// One tool execution on its way through its stages — resolve → lock →
/// validate → plan → verify dependencies → run → record — each of which
/// moves it on or ends it with the error result.
struct ToolRun<'a> {
    rye: &'a Arc<Rye>,
    request: &'a ExecuteRequest,
    started: Instant,
    session: Session,
    trace: Vec<Event>,
    warnings: Vec<String>,
    /// The chain as results show it, once it is built.
    summaries: Option<Vec<ChainSummary>>,
    timings: Timings,
    /// The tool's process ran out of time.
    timed_out: bool,
    /// Where the process's output is counted as it runs, for a watcher.
    counts: Option<Arc<rye_process::OutputCounts>>,
    /// The run's thread record being written, waited for before the run
    /// acts on the world.
    begun: Option<crate::threads::Begun>,
    /// The run's thread, when it is recorded.
    thread_id: Option<String>,
}

#[derive(Default)]
struct Timings {
    chain_us: u64,
    validate_us: u64,
    plan_us: u64,
}

impl<'a> ToolRun<'a> {
    fn new(rye: &'a Arc<Rye>, request: &'a ExecuteRequest, started: Instant) -> Self {
        Self {
            rye,
            request,
            started,
            session: rye.session(request.project.as_deref()),
            trace: Vec::new(),
            warnings: Vec::new(),
            summaries: None,
            timings: Timings::default(),
            timed_out: false,
            counts: None,
            begun: None,
            thread_id: None,
        }
    }

    async fn stages(&mut self) -> Stage<Value> {
        let (chain, lock) = self.checked()?;
        if self.request.dry_run {
            return Ok(self.dry_run_result(&chain));
        }
        if chain.primitive().item_id == GRAPH_PRIMITIVE {
            // The walk logs its steps to the thread as it goes.
            if let Some(begun) = self.begun.take() {
                begun.recorded().await;
            }
            let ran = self.walk(&chain).await?;
            return Ok(self.record(&chain, &lock, ran));
        }
        if chain.primitive().item_id == COMPONENT_PRIMITIVE {
            // It waits for the record itself, if it can have effects.
            let ran = self.run_component(&chain).await?;
            return Ok(self.record(&chain, &lock, ran));
        }
        let planned = self.plan(&chain).await?;
        self.verify_deps(&chain, &planned.notes)?;
        // The record was being written while the chain was checked and
        // planned; the run's effects start once it names them.
        if let Some(begun) = self.begun.take() {
            begun.wait().await;
        }
        let ran = match &planned.action {
            PlannedAction::Process(plan) => {
                let outcome = self.run(plan).await?;
                self.timed_out = outcome.timed_out;
                Ran::process(&outcome, plan.timeout_ms)
            }
            PlannedAction::Http(request) => self.send(&chain, request).await?,
            PlannedAction::Mcp(call) => self.call_mcp(&chain, call).await?,
        };
        Ok(self.record(&chain, &lock, ran))
    }

    /// The chain, its lock and its validators' verdict, under one reading
    /// of the spaces' watches (see [`rye_space::RequestScope`]).
    fn checked(&mut self) -> Stage<(Chain, LockState)> {
        let _request = rye_space::RequestScope::begin();
        let chain = self.resolve()?;
        let lock = self.lock(&chain)?;
        self.validate(&chain)?;
        Ok((chain, lock))
    }

    fn step(&mut self, step: Step) {
        self.trace.push(step.into());
    }

    /// The error result for `error`, with what the execution knows so far.
    fn fail(&mut self, error: ErrorReply) -> Value {
        let mut reply = error
            .of_execution(ItemKind::Tool, &self.request.id)
            .took(self.started);
        if let Some(summaries) = self.summaries.take() {
            let (warnings, trace) = self.finish();
            reply = reply.so_far(summaries, warnings, trace);
        }
        reply.to_value()
    }

    fn host_failure(&mut self, error: &HostError) -> Value {
        self.fail(ErrorReply::host(error))
    }

    /// The warnings, and the trace when it was asked for.
    fn finish(&mut self) -> (Vec<String>, Option<Vec<Event>>) {
        let trace = self.request.trace.then(|| std::mem::take(&mut self.trace));
        (std::mem::take(&mut self.warnings), trace)
    }

    /// The chain, from the tool to the primitive, each element verified.
    fn resolve(&mut self) -> Stage<Chain> {
        let built = self.rye.build_chain(&self.session, &self.request.id);
        let chain = built.map_err(|e| self.host_failure(&e))?;
        self.timings.chain_us = self.started.elapsed().as_micros() as u64;
        for element in &chain.elements {
            self.step(Step::Resolve {
                item_id: element.item_id.clone(),
                path: element.path.clone(),
                space: element.space,
                shadowed: element.shadowed.clone(),
            });
        }
        if self.request.trace {
            for element in &chain.elements {
                self.step(Step::VerifyIntegrity {
                    item: element.item_id.clone(),
                    path: element.path.clone(),
                    signed: element.signed.clone(),
                });
            }
        }
        self.summaries = Some(chain.summaries());
        self.warnings = chain.warnings.clone();
        Ok(chain)
    }

    /// The project's lockfile for the tool, if one pins this chain.
    fn lock(&mut self, chain: &Chain) -> Stage<LockState> {
        let lock = self
            .rye
            .check_lock(&self.session.spaces, chain)
            .map_err(|e| self.host_failure(&e))?;
        if let LockState::Used(path) = &lock {
            self.step(Step::Lockfile {
                item_id: self.request.id.clone(),
                path: path.clone(),
                status: LockfileStatus::Used,
            });
        }
        Ok(lock)
    }

    /// The validators' verdict on the tool and its chain. Inline, like the
    /// chain build's parser calls: a warm run is a cache lookup, and
    /// handing the worker off would cost more.
    fn validate(&mut self, chain: &Chain) -> Stage<()> {
        let started = Instant::now();
        let tool = chain.tool();
        let validated = self.rye.enforce_validators(
            &self.session,
            crate::validators::ItemRef {
                kind: ItemKind::Tool,
                id: &tool.item_id,
                space: tool.space,
                path: &tool.path,
                content_hash: tool.content_hash,
            },
            Some(chain),
        );
        let findings = validated.map_err(|e| self.host_failure(&e))?;
        if let Some(refused) = crate::validators::refusal(&findings) {
            return Err(self.host_failure(&refused));
        }
        if self.request.trace {
            self.step(Step::Validate {
                item_id: self.request.id.clone(),
                findings: findings.len(),
            });
        }
        self.timings.validate_us = started.elapsed().as_micros() as u64;
        Ok(())
    }

    fn dry_run_result(&mut self, chain: &Chain) -> Value {
        let (warnings, trace) = self.finish();
        to_value(DryRunReply {
            status: "validation_passed",
            message: "Tool chain validation passed (dry run)",
            kind: ItemKind::Tool,
            item_id: self.request.id.clone(),
            chain: self.summaries.take().unwrap_or_default(),
            validated_pairs: chain.elements.len() - 1,
            metadata: Took::since(self.started),
            warnings,
            trace,
        })
    }

    /// The work, as the chain's runtime adapter plans it.
    async fn plan(&mut self, chain: &Chain) -> Stage<Planned> {
        let started = Instant::now();
        let log = Arc::new(Mutex::new(Vec::new()));
        let parameters = self.request.parameters.clone();
        let asking = {
            let _request = rye_space::RequestScope::begin();
            (self.rye).plan_request(&self.session, chain, parameters, log.clone())
        };
        let planned = match asking {
            Err(e) => Err(e),
            // Made on this task where it can be (see `plan_on_task`).
            Ok(Asking {
                adapter,
                request,
                grants,
                services,
                answer,
            }) => {
                let planned = (self.rye.components)
                    .plan_on_task(&adapter, request, grants, Box::new(services))
                    .await;
                answer.checked(chain, planned)
            }
        };
        self.trace
            .extend(log.lock().expect("trace log lock").drain(..));
        self.timings.plan_us = started.elapsed().as_micros() as u64;
        let (adapter, adapter_signed, plan) = planned.map_err(|e| self.host_failure(&e))?;
        if self.request.trace {
            self.step(Step::VerifyIntegrity {
                item: "adapter".into(),
                path: adapter.clone(),
                signed: adapter_signed.clone(),
            });
        }
        self.warnings
            .extend(adapter_signed.warning(&format!("adapter {}", adapter.display())));
        self.step(Step::Adapter {
            path: adapter,
            reused: plan.reused,
        });
        for (step, detail) in &plan.notes {
            let mut event = json!({"step": step});
            if let (Value::Object(event), Value::Object(detail)) = (&mut event, detail) {
                event.extend(detail.clone());
            }
            self.trace.push(Event::Adapter(event));
        }
        match &plan.action {
            PlannedAction::Process(process) => self.step(Step::Plan {
                command: process.command.clone(),
                args: process.args.clone(),
                cwd: process.cwd.clone(),
                env_keys: process.env.iter().map(|(k, _)| k.clone()).collect(),
                stdin_bytes: process.stdin.as_ref().map_or(0, Vec::len),
                timeout_ms: process.timeout_ms,
            }),
            PlannedAction::Http(request) => {
                let private = private_addresses(chain)
                    .map_or_else(|e| format!("invalid: {e}"), |p| describe(&p));
                self.step(Step::Request {
                    method: request.method.clone(),
                    url: request.url.clone(),
                    header_names: request.headers.iter().map(|(n, _)| n.clone()).collect(),
                    body_bytes: request.body.as_ref().map_or(0, Vec::len),
                    timeout_ms: request.timeout_ms,
                    max_response_bytes: request.max_response_bytes,
                    max_redirects: request.max_redirects,
                    private_addresses: private,
                })
            }
            PlannedAction::Mcp(call) => self.step(Step::Call {
                server: call.server.clone(),
                tool_name: call.tool_name.clone(),
                argument_keys: call
                    .arguments
                    .as_object()
                    .map(|a| a.keys().cloned().collect())
                    .unwrap_or_default(),
                startup_timeout_ms: call.startup_timeout_ms,
                timeout_ms: call.timeout_ms,
            }),
        }
        Ok(plan)
    }

    /// The files under the anchor the plan activated, verified.
    fn verify_deps(&mut self, chain: &Chain, notes: &[(String, Value)]) -> Stage<()> {
        let anchor = notes
            .iter()
            .find(|(step, detail)| step == "anchor" && detail["active"] == true)
            .and_then(|(_, detail)| detail["anchor_path"].as_str())
            .map(PathBuf::from);
        let deps = self
            .rye
            .verify_deps(&self.session.trust(self.rye), chain, anchor.as_deref())
            .map_err(|e| self.host_failure(&e))?;
        if let Some(anchor) = anchor {
            self.step(Step::VerifyDeps {
                anchor_path: anchor,
                files: deps.len(),
            });
        }
        for (path, signed) in &deps {
            self.warnings
                .extend(signed.warning(&format!("dependency {}", path.display())));
        }
        Ok(())
    }

    /// The planned process, run by the primitive.
    async fn run(&mut self, plan: &PlannedProcess) -> Stage<Outcome> {
        let process = Plan {
            command: plan.command.clone(),
            args: plan.args.clone(),
            env: plan.env.clone(),
            cwd: plan.cwd.as_ref().map(PathBuf::from),
            stdin: plan.stdin.clone(),
            timeout: plan.timeout_ms.map(std::time::Duration::from_millis),
        };
        let outcome =
            rye_process::run_watched(&process, &Capture::default(), self.counts.as_deref())
                .await
                .map_err(|e| self.fail(ErrorReply::new(e)))?;
        self.step(Step::Primitive {
            containment: rye_process::containment().as_str(),
            return_code: outcome.code,
            signal: outcome.signal,
            timed_out: outcome.timed_out,
            duration_ms: outcome.duration.as_millis() as u64,
            stdout_bytes: outcome.stdout.len() as u64 + outcome.stdout_dropped,
            stderr_bytes: outcome.stderr.len() as u64 + outcome.stderr_dropped,
        });
        Ok(outcome)
    }

    /// The planned request, sent by the HTTP primitive under the chain's
    /// address policy.
    async fn send(&mut self, chain: &Chain, plan: &PlannedRequest) -> Stage<Ran> {
        let private = private_addresses(chain).map_err(|e| self.fail(ErrorReply::new(e)))?;
        let request = rye_http::Request {
            method: plan.method.clone(),
            url: plan.url.clone(),
            headers: plan.headers.clone(),
            body: plan.body.clone(),
            timeout: plan.timeout_ms.map(std::time::Duration::from_millis),
            max_response_bytes: plan.max_response_bytes,
            max_redirects: plan.max_redirects,
            retry: plan
                .retry
                .map(|(n, ms)| (n, std::time::Duration::from_millis(ms))),
            private,
        };
        let started = Instant::now();
        let sent = rye_http::send(&request).await;
        let duration = started.elapsed();
        self.step(match &sent {
            Ok(response) => Step::Http {
                status_code: Some(response.status),
                url: Some(response.url.clone()),
                remote: response.remote.map(|a| a.to_string()),
                attempts: response.attempts,
                redirects: response.redirects,
                response_bytes: response.body.len() as u64,
                duration_ms: duration.as_millis() as u64,
                error: None,
            },
            Err(error) => Step::Http {
                status_code: None,
                url: None,
                remote: None,
                attempts: 0,
                redirects: 0,
                response_bytes: 0,
                duration_ms: duration.as_millis() as u64,
                error: Some(error.to_string()),
            },
        });
        Ok(Ran::http(sent, duration))
    }

    /// The planned call, made by the MCP primitive on a warm session where
    /// there is one, once the server's definition of the tool is the one
    /// the tool item pins.
    async fn call_mcp(&mut self, chain: &Chain, call: &PlannedCall) -> Stage<Ran> {
        let tool = chain.tool();
        let server = self
            .rye
            .mcp_server(&self.session, tool.space, &call.server)
            .map_err(|e| self.fail(ErrorReply::new(e)))?;
        let startup = call
            .startup_timeout_ms
            .map_or(server.startup, std::time::Duration::from_millis);
        let timeout = std::time::Duration::from_millis(call.timeout_ms.unwrap_or(60_000));
        let started = Instant::now();
        let pool = &self.rye.mcp;
        let (session, fresh) = pool
            .session(&server.key, &server.id, &server.transport, startup)
            .await
            .map_err(|e| self.fail(ErrorReply::new(e)))?;
        let end = |e: &rye_mcp_client::McpError| {
            if e.ends_session() {
                pool.discard(&server.key, &session);
            }
        };
        let definitions = match session.definitions(timeout).await {
            Ok(definitions) => definitions,
            Err(e) => {
                end(&e);
                return Err(self.fail(ErrorReply::new(e)));
            }
        };
        let current = definitions
            .iter()
            .find(|d| d.definition.name == call.tool_name);
        if crate::mcp::pin_mismatch(&tool.metadata, current, &call.tool_name, &server.id).is_some()
        {
            // Said against the item's whole document, not its summary.
            let document = self
                .rye
                .load(&LoadRequest {
                    source: Some(tool.space),
                    project: self.request.project.clone(),
                    ..LoadRequest::new(ItemKind::Tool, tool.item_id.clone())
                })
                .map(|loaded| loaded.parsed)
                .unwrap_or_else(|_| (*tool.metadata).clone());
            let reason = crate::mcp::pin_mismatch(&document, current, &call.tool_name, &server.id)
                .unwrap_or_else(|| "the server's definition changed".into());
            return Err(self.fail(ErrorReply::new(reason)));
        }
        let arguments = call.arguments.as_object().cloned().unwrap_or_default();
        let called = session.call(&call.tool_name, arguments, timeout).await;
        if let Err(e) = &called {
            end(e);
        }
        let duration = started.elapsed();
        self.step(Step::Mcp {
            server: server.id.clone(),
            server_path: server.path.clone(),
            transport: match server.transport {
                rye_mcp_client::Transport::Stdio(_) => "stdio",
                rye_mcp_client::Transport::Http { .. } => "http",
            },
            session: if fresh { "started" } else { "reused" },
            pid: session.pid(),
            definition_hash: current.map(|d| d.hash.clone()),
            duration_ms: duration.as_millis() as u64,
            is_error: called.as_ref().is_ok_and(|c| c.is_error),
            error: called.as_ref().err().map(ToString::to_string),
        });
        Ok(Ran::mcp(called, duration))
    }

    /// The result, and the lockfile of a first successful run.
    fn record(&mut self, chain: &Chain, lock: &LockState, ran: Ran) -> Value {
        let Ran {
            data,
            error,
            duration,
            return_code,
            status_code,
            truncated,
        } = ran;
        let mut lockfile_created = false;
        if error.is_none() && *lock == LockState::Absent {
            match self.rye.write_lock(&self.session.spaces, chain) {
                Ok(path) => {
                    self.step(Step::Lockfile {
                        item_id: self.request.id.clone(),
                        path,
                        status: LockfileStatus::Created,
                    });
                    lockfile_created = true;
                }
                Err(e) => self
                    .warnings
                    .push(format!("the lockfile could not be written: {e}")),
            }
        }
        let (warnings, trace) = self.finish();
        to_value(ToolReply {
            status: if error.is_none() { "success" } else { "error" },
            kind: ItemKind::Tool,
            item_id: self.request.id.clone(),
            data,
            chain: self.summaries.take().unwrap_or_default(),
            metadata: ToolMetadata {
                duration_ms: self.started.elapsed().as_millis() as u64,
                chain_us: self.timings.chain_us,
                validate_us: self.timings.validate_us,
                plan_us: self.timings.plan_us,
                process_us: duration.as_micros() as u64,
                return_code,
                status_code,
                lockfile_used: matches!(lock, LockState::Used(_)),
                lockfile_created,
                truncated,
            },
            warnings,
            error,
            trace,
        })
    }
}

/// What the primitive gave, ready for the result.
struct Ran {
    data: Value,
    error: Option<String>,
    duration: std::time::Duration,
    return_code: Option<i32>,
    status_code: Option<u16>,
    truncated: Option<Truncated>,
}

impl Ran {
    fn process(outcome: &Outcome, timeout_ms: Option<u64>) -> Self {
        let (data, error) = tool_output(outcome, timeout_ms);
        Ran {
            data,
            error,
            duration: outcome.duration,
            return_code: outcome.code,
            status_code: None,
            truncated: (outcome.stdout_dropped > 0 || outcome.stderr_dropped > 0).then_some(
                Truncated {
                    stdout_bytes: outcome.stdout_dropped,
                    stderr_bytes: outcome.stderr_dropped,
                },
            ),
        }
    }

    /// `{status_code, body, headers}`: the body parsed when the answer
    /// says it is JSON, text when it is UTF-8, else base64 with
    /// `body_encoding`. A status of 400 or more is an error naming it.
    fn http(
        sent: Result<rye_http::Response, rye_http::HttpError>,
        duration: std::time::Duration,
    ) -> Self {
        let response = match sent {
            Ok(response) => response,
            Err(error) => {
                return Ran {
                    data: Value::Null,
                    error: Some(error.to_string()),
                    duration,
                    return_code: None,
                    status_code: None,
                    truncated: None,
                };
            }
        };
        let json_type = response
            .header("content-type")
            .is_some_and(|t| t.to_ascii_lowercase().contains("json"));
        let parsed = json_type
            .then(|| serde_json::from_slice::<Value>(&response.body).ok())
            .flatten();
        let mut data = Map::new();
        data.insert("status_code".into(), json!(response.status));
        match (parsed, std::str::from_utf8(&response.body)) {
            (Some(json), _) => {
                data.insert("body".into(), json);
            }
            (None, Ok(text)) => {
                data.insert("body".into(), json!(text));
            }
            (None, Err(_)) => {
                use base64::Engine as _;
                let encoded = base64::engine::general_purpose::STANDARD.encode(&response.body);
                data.insert("body".into(), json!(encoded));
                data.insert("body_encoding".into(), json!("base64"));
            }
        }
        let mut headers = Map::new();
        for (name, value) in &response.headers {
            match headers.get_mut(name) {
                Some(Value::String(existing)) => {
                    existing.push_str(", ");
                    existing.push_str(value);
                }
                _ => {
                    headers.insert(name.clone(), json!(value));
                }
            }
        }
        data.insert("headers".into(), Value::Object(headers));
        if response.redirects > 0 {
            data.insert("url".into(), json!(response.url));
        }
        let error = (response.status >= 400).then(|| {
            let text = String::from_utf8_lossy(&response.body);
            let text = text.trim();
            let mut error = format!(
                "HTTP {}{}",
                response.status,
                response.reason.map(|r| format!(" {r}")).unwrap_or_default()
            );
            if !text.is_empty() {
                let cut = text.char_indices().nth(300).map_or(text.len(), |(i, _)| i);
                error.push_str(": ");
                error.push_str(&text[..cut]);
            }
            error
        });
        Ran {
            data: Value::Object(data),
            error,
            duration,
            return_code: None,
            status_code: Some(response.status),
            truncated: None,
        }
    }
}

impl Ran {
    /// The call's data (see [`rye_mcp_client::CallOutcome::data`]); a call
    /// the server says failed is an error with the server's text.
    fn mcp(
        called: Result<rye_mcp_client::CallOutcome, rye_mcp_client::McpError>,
        duration: std::time::Duration,
    ) -> Self {
        let (data, error) = match called {
            Ok(outcome) => {
                let error = outcome.is_error.then(|| {
                    let text = outcome.text.trim();
                    if text.is_empty() {
                        "the MCP tool reported an error".to_owned()
                    } else {
                        text.to_owned()
                    }
                });
                (outcome.data(), error)
            }
            Err(e) => (Value::Null, Some(e.to_string())),
        };
        Ran {
            data,
            error,
            duration,
            return_code: None,
            status_code: None,
            truncated: None,
        }
    }
}

/// Which non-public addresses the chain's requests may reach: the
/// `allow_private_addresses` of the runtime nearest the tool that sets it
/// (`true`, or a list of addresses). The tool itself has no say, nor do
/// the caller's parameters.
fn private_addresses(chain: &Chain) -> Result<rye_http::Private, String> {
    let Some((element, setting)) = chain.elements.iter().skip(1).find_map(|e| {
        let setting = e.metadata.get("config")?.get("allow_private_addresses")?;
        Some((e, setting))
    }) else {
        return Ok(rye_http::Private::Refused);
    };
    let invalid = |what: String| {
        format!(
            "{} ({}): config.allow_private_addresses must be true, false or a list of IP addresses; {what}",
            element.item_id,
            element.path.display()
        )
    };
    match setting {
        Value::Bool(true) => Ok(rye_http::Private::Allowed),
        Value::Bool(false) | Value::Null => Ok(rye_http::Private::Refused),
        Value::Array(items) => items
            .iter()
            .map(|item| {
                item.as_str()
                    .and_then(|text| text.trim().parse().ok())
                    .ok_or_else(|| invalid(format!("{item} is not an IP address")))
            })
            .collect::<Result<_, _>>()
            .map(rye_http::Private::Only),
        other => Err(invalid(format!("found {other}"))),
    }
}

fn describe(private: &rye_http::Private) -> String {
    match private {
        rye_http::Private::Refused => "refused".into(),
        rye_http::Private::Allowed => "allowed".into(),
        rye_http::Private::Only(listed) => listed
            .iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>()
            .join(", "),
    }
}

//! One run of a graph, a step per call.
//!
//! Each call does one thing and says what it changed: `start` sets the
//! first state; each `advance` either begins the step at the current node
//! (a `return` ends the run; a `gate` assigns and moves on; an action
//! node, or a `foreach` item, asks for its action) or takes the results of
//! the action it asked for and ends the step (`assign`, then the edges).
//! A `foreach` in order asks for one item at a time; a parallel one asks
//! for all of them at once. An `interrupt` node pauses the run until a
//! caller resumes it with inputs, which its `assign` and edges read as
//! `result`. Hooks (`config.hooks`) are actions asked for on an event,
//! before the run goes on; an `error` hook may ask for the failed node to
//! run again.
//!
//! Where the seed's walker differs (`../shared/spec/graphs.md`): a node
//! with no `next` ends the run as completed, with the state; edges of
//! which none matches are an error naming the node, not "max steps
//! exceeded".

use rye_guest::serde_json::{self, Map, Value, json};
use rye_guest::walker::{Action, Change, Clock, Dispatch, Event, Next, Outcome, WalkInput};

use crate::condition;
use crate::template::{self, drop_nulls, fill};

/// Keys of an execution's result that never reach a graph's state.
const ENVELOPE_ONLY: [&str; 5] = ["chain", "metadata", "path", "source", "resolved_env_keys"];

/// What a run waits for.
#[derive(Debug, Clone, PartialEq)]
enum Pending {
    /// Nothing: the next call begins the step at `node`.
    Idle,
    /// The result of the action node `node`.
    Action { node: String },
    /// Results of a `foreach`: in order, the item at `index`; in parallel,
    /// all of them.
    Foreach {
        node: String,
        items: Vec<Value>,
        index: usize,
        collected: Vec<Value>,
        parallel: bool,
    },
    /// A caller's inputs, for the `interrupt` node `node`.
    Waiting { node: String },
    /// The results of the `event` hooks' actions (kept as JSON), and then
    /// `then`.
    Hooks {
        event: String,
        actions: Vec<Value>,
        then: Then,
    },
    /// The run is over.
    Ended,
}

/// What a run does once an event's hooks have run.
#[derive(Debug, Clone, PartialEq)]
enum Then {
    /// Goes on at the current node (in single-step mode, after a step,
    /// stops).
    Proceed,
    /// Ends as completed: the node that ended had no `next`.
    Complete,
    /// Ends with this result once the `graph_completed` hooks have run.
    Finish(Value),
    /// Ends with this result.
    End(Value),
    /// Node `node` failed with `result`: an `error` hook may ask for it
    /// to run again, else its error handling follows.
    Failed { node: String, result: Value },
}

impl Then {
    fn to_json(&self) -> Value {
        match self {
            Then::Proceed => json!({"then": "proceed"}),
            Then::Complete => json!({"then": "complete"}),
            Then::Finish(result) => json!({"then": "finish", "result": result}),
            Then::End(result) => json!({"then": "end", "result": result}),
            Then::Failed { node, result } => {
                json!({"then": "failed", "node": node, "result": result})
            }
        }
    }

    fn from_json(value: &Value) -> Result<Then, String> {
        let result = || value.get("result").cloned().unwrap_or(Value::Null);
        Ok(match value.get("then").and_then(Value::as_str) {
            Some("proceed") => Then::Proceed,
            Some("complete") => Then::Complete,
            Some("finish") => Then::Finish(result()),
            Some("end") => Then::End(result()),
            Some("failed") => Then::Failed {
                node: value
                    .get("node")
                    .and_then(Value::as_str)
                    .ok_or("the cursor's failed node is not named")?
                    .to_owned(),
                result: result(),
            },
            other => {
                return Err(format!(
                    "the cursor's hooks go on to {other:?}, which is nothing a run does"
                ));
            }
        })
    }
}

pub struct Run {
    graph_id: String,
    run_id: String,
    nodes: Map<String, Value>,
    /// The graph's `on_error`: `continue` goes on past a failed node.
    keep_going: bool,
    max_steps: u64,
    max_concurrency: u32,
    state: Map<String, Value>,
    node: Option<String>,
    steps: u32,
    pending: Pending,
    /// Errors the graph went on past (`on_error: continue`).
    suppressed: Vec<Value>,
    /// `config.hooks`.
    hooks: Vec<Value>,
    /// Single-step mode (the `node` parameter): the run ends after one
    /// step, with the state.
    single_step: bool,
    /// The node the last step began at.
    stepped: Option<String>,
    /// The time of the call under way.
    now: (u64, String),
    /// State keys this call changed.
    changed: Vec<String>,
    events: Vec<Event>,
}

/// The graph's `config`, which a walk cannot do without.
fn config(graph: &Value) -> Result<&Map<String, Value>, String> {
    graph
        .get("config")
        .and_then(Value::as_object)
        .ok_or_else(|| "the graph has no config (a map with start and nodes)".to_owned())
}

fn parse_object(text: &str, what: &str) -> Result<Map<String, Value>, String> {
    match serde_json::from_str(text) {
        Ok(Value::Object(map)) => Ok(map),
        Ok(Value::Null) => Ok(Map::new()),
        _ => Err(format!("{what} is not a JSON object")),
    }
}

/// A positive whole number from a setting (`"100"` too).
fn count(value: Option<&Value>) -> Option<u64> {
    match value? {
        Value::Number(n) => n.as_u64(),
        Value::String(s) => s.trim().parse().ok(),
        _ => None,
    }
}

impl Run {
    /// A run of `input` before its first state: the graph read, its
    /// settings resolved. `parameters` are the caller's, from which the
    /// execution's own settings are taken out.
    fn open(input: &WalkInput, parameters: &mut Map<String, Value>) -> Result<Run, String> {
        let graph: Value = serde_json::from_str(&input.graph)
            .map_err(|e| format!("the graph is not JSON: {e}"))?;
        let defaults = parse_object(&input.defaults, "the runtime's config")?;
        let config = config(&graph)?;
        let nodes = config
            .get("nodes")
            .and_then(Value::as_object)
            .cloned()
            .ok_or_else(|| "config.nodes is missing or not a map".to_owned())?;
        let mut setting = |name: &str| {
            let given = parameters.remove(name);
            count(given.as_ref())
                .or_else(|| count(config.get(name)))
                .or_else(|| count(defaults.get(name)))
        };
        let max_steps = setting("max_steps").ok_or_else(|| {
            "max_steps not configured (in the graph's config or its runtime's)".to_owned()
        })?;
        let max_concurrency = setting("max_concurrency").unwrap_or(4).clamp(1, 1024) as u32;
        let keep_going = match config.get("on_error").and_then(Value::as_str) {
            None | Some("fail") => false,
            Some("continue") => true,
            Some(other) => {
                return Err(format!(
                    "config.on_error {other:?} is neither \"fail\" nor \"continue\""
                ));
            }
        };
        Ok(Run {
            graph_id: input.graph_id.clone(),
            run_id: input.run_id.clone(),
            nodes,
            keep_going,
            max_steps,
            max_concurrency,
            state: Map::new(),
            node: None,
            steps: 0,
            pending: Pending::Idle,
            suppressed: Vec::new(),
            hooks: match config.get("hooks") {
                None | Some(Value::Null) => Vec::new(),
                Some(Value::Array(hooks)) => hooks.clone(),
                Some(_) => return Err("config.hooks is not a list".into()),
            },
            single_step: false,
            stepped: None,
            now: (0, String::new()),
            changed: Vec::new(),
            events: Vec::new(),
        })
    }

    /// A new run: the caller's parameters checked against the graph's
    /// `config_schema` (defaults filled, required ones present), its
    /// `permissions` and `env_requires` checked, and the first state set.
    pub fn start(input: &WalkInput, now: &Clock) -> Result<(Run, Outcome), String> {
        let mut parameters = parse_object(&input.parameters, "the parameters")?;
        let graph: Value = serde_json::from_str(&input.graph)
            .map_err(|e| format!("the graph is not JSON: {e}"))?;
        if !graph.get("permissions").is_some_and(Value::is_array) {
            return Err("the graph declares no permissions (a list of capabilities)".into());
        }
        let inject = parameters.remove("inject_state");
        let single = match parameters.remove("node") {
            None | Some(Value::Null) => None,
            Some(Value::String(node)) => Some(node),
            Some(other) => {
                return Err(format!(
                    "node (the one step to take) is not a name: {other}"
                ));
            }
        };
        let mut run = Run::open(input, &mut parameters)?;
        run.at(now);
        let config = config(&graph)?;
        let missing_env: Vec<&str> = graph
            .get("env_requires")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
            .filter(|name| !input.env_names.iter().any(|n| n == name))
            .collect();
        if !missing_env.is_empty() {
            return Err(format!(
                "the graph needs environment variables that are not set: {}",
                missing_env.join(", ")
            ));
        }
        if let Some(schema) = graph.get("config_schema") {
            if let Some(properties) = schema.get("properties").and_then(Value::as_object) {
                for (name, property) in properties {
                    if let Some(default) = property.get("default")
                        && !parameters.contains_key(name)
                    {
                        parameters.insert(name.clone(), default.clone());
                    }
                }
            }
            let missing = absent(schema.get("required"), |name| parameters.get(name));
            if !missing.is_empty() {
                return Err(format!(
                    "required inputs are missing: {}",
                    missing.join(", ")
                ));
            }
        }
        let start = match &single {
            Some(node) => {
                if !run.nodes.contains_key(node) {
                    return Err(format!(
                        "node {node:?} (the one step to take) is not in the graph"
                    ));
                }
                run.single_step = true;
                node.as_str()
            }
            None => config
                .get("start")
                .and_then(Value::as_str)
                .ok_or_else(|| "config.start (the first node's name) is missing".to_owned())?,
        };
        if !run.nodes.contains_key(start) {
            return Err(format!(
                "config.start names node {start:?}, which the graph lacks"
            ));
        }
        if let Some(initial) = config.get("state") {
            let Value::Object(initial) = initial else {
                return Err("config.state is not a map".into());
            };
            for (key, value) in initial {
                run.set(key, value.clone());
            }
        }
        if let Some(Value::Object(injected)) = inject {
            for (key, value) in injected {
                run.set(&key, value);
            }
        }
        run.set("inputs", Value::Object(parameters));
        run.node = Some(start.to_owned());
        run.event(
            "graph_started",
            json!({"graph_id": run.graph_id, "graph_run_id": run.run_id, "start": start, "max_steps": run.max_steps}),
        );
        let context = json!({"graph_id": run.graph_id, "graph_run_id": run.run_id});
        let next = run.hooked("graph_started", context, Then::Proceed)?;
        let outcome = run.outcome(next);
        Ok((run, outcome))
    }

    /// A run rebuilt from its last stored outcome, and the dispatch it was
    /// waiting for asked again (its results, if the host kept them, stand
    /// in for running it twice); or, for a run waiting at an `interrupt`
    /// node, that node's step ended with `inputs` (a JSON object; `null`
    /// for a run that was stopped rather than waiting).
    pub fn resume(
        input: &WalkInput,
        state: Vec<(String, String)>,
        cursor: &str,
        inputs: &str,
        now: &Clock,
    ) -> Result<(Run, Outcome), String> {
        let inputs: Value =
            serde_json::from_str(inputs).map_err(|e| format!("the inputs are not JSON: {e}"))?;
        let mut ignored = Map::new();
        let mut run = Run::open(input, &mut ignored)?;
        run.at(now);
        for (key, text) in state {
            let value = serde_json::from_str(&text)
                .map_err(|e| format!("state key {key:?} is not JSON: {e}"))?;
            run.state.insert(key, value);
        }
        let cursor: Value =
            serde_json::from_str(cursor).map_err(|e| format!("the cursor is not JSON: {e}"))?;
        run.node = cursor
            .get("node")
            .and_then(Value::as_str)
            .map(str::to_owned);
        run.steps = count(cursor.get("steps")).unwrap_or(0) as u32;
        if let Some(max) = count(cursor.get("max_steps")) {
            run.max_steps = max;
        }
        if let Some(max) = count(cursor.get("max_concurrency")) {
            run.max_concurrency = max.clamp(1, 1024) as u32;
        }
        run.suppressed = cursor
            .get("suppressed")
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default();
        run.single_step = cursor.get("single_step") == Some(&Value::Bool(true));
        run.stepped = cursor
            .get("stepped")
            .and_then(Value::as_str)
            .map(str::to_owned);
        run.pending = pending_from(cursor.get("pending").unwrap_or(&Value::Null))?;
        match (&run.pending, &inputs) {
            (Pending::Waiting { node }, Value::Null) => {
                return Err(format!(
                    "the run waits for input at node {node:?}: resume it with inputs (a JSON object)"
                ));
            }
            (Pending::Waiting { .. }, Value::Object(_)) | (_, Value::Null) => {}
            (Pending::Waiting { .. }, other) => {
                return Err(format!("the inputs are not a JSON object but {other}"));
            }
            (_, _) => return Err("the run is not waiting for inputs".into()),
        }
        let next = match run.pending.clone() {
            Pending::Idle => Next::Proceed,
            Pending::Ended => return Err("the run has already ended".into()),
            Pending::Waiting { node } => {
                run.pending = Pending::Idle;
                run.given(&node, inputs)?
            }
            Pending::Hooks { actions, .. } => Next::Dispatch(Dispatch {
                actions: actions
                    .iter()
                    .map(action_from_json)
                    .collect::<Result<_, _>>()?,
                concurrency: 1,
                stop_after_failures: None,
            }),
            Pending::Action { node } => {
                run.pending = Pending::Idle;
                let spec = run.node_spec(&node)?;
                let context = run.context();
                run.ask_action(&node, &spec, &context)?
            }
            Pending::Foreach {
                node,
                items,
                index,
                parallel,
                collected,
            } => {
                run.pending = Pending::Idle;
                let spec = run.node_spec(&node)?;
                let next = run.foreach_dispatch(&node, &spec, &items, index, parallel)?;
                if matches!(next, Next::Dispatch(_)) {
                    run.pending = Pending::Foreach {
                        node,
                        items,
                        index,
                        collected,
                        parallel,
                    };
                }
                next
            }
        };
        let outcome = run.outcome(next);
        Ok((run, outcome))
    }

    /// The next thing: the results of what the run waited for, or the
    /// step at the current node.
    pub fn advance(&mut self, results: Vec<String>, now: &Clock) -> Result<Outcome, String> {
        self.at(now);
        let results = results
            .iter()
            .map(|text| serde_json::from_str::<Value>(text))
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| format!("a result is not JSON: {e}"))?;
        let next = match std::mem::replace(&mut self.pending, Pending::Idle) {
            Pending::Ended => return Err("the run has already ended".into()),
            Pending::Waiting { node } => {
                self.pending = Pending::Waiting { node: node.clone() };
                return Err(format!(
                    "the run waits for input at node {node:?}; it goes on when resumed with inputs"
                ));
            }
            Pending::Hooks {
                event,
                actions,
                then,
            } => {
                if results.len() != actions.len() {
                    return Err(format!(
                        "the hooks asked for {} results and were given {}",
                        actions.len(),
                        results.len()
                    ));
                }
                let results: Vec<Value> = results.iter().map(unwrap).collect();
                let failed: Vec<String> = results
                    .iter()
                    .filter(|r| is_error(r))
                    .map(error_text)
                    .collect();
                self.event(
                    "hooks_completed",
                    json!({"event": event, "actions": actions.len(), "failed": failed}),
                );
                self.resolve(then, results)?
            }
            Pending::Idle => self.begin()?,
            Pending::Action { node } => {
                let [result] = <[Value; 1]>::try_from(results).map_err(|r| {
                    format!(
                        "node {node:?} asked for one result and was given {}",
                        r.len()
                    )
                })?;
                self.end_action(&node, unwrap(&result))?
            }
            Pending::Foreach {
                node,
                items,
                index,
                mut collected,
                parallel,
            } => {
                let expected = if parallel { items.len() } else { 1 };
                if results.len() != expected {
                    return Err(format!(
                        "node {node:?} asked for {expected} results and was given {}",
                        results.len()
                    ));
                }
                collected.extend(results.iter().map(|r| iteration_value(unwrap(r))));
                let next_index = if parallel { items.len() } else { index + 1 };
                let spec = self.node_spec(&node)?;
                let failures = collected.iter().filter(|v| is_error(v)).count();
                let too_many = tolerance(&spec, items.len())?.is_some_and(|t| failures > t);
                if next_index < items.len() && !too_many {
                    let next = self.foreach_dispatch(&node, &spec, &items, next_index, false)?;
                    if matches!(next, Next::Dispatch(_)) {
                        self.pending = Pending::Foreach {
                            node,
                            items,
                            index: next_index,
                            collected,
                            parallel,
                        };
                    }
                    next
                } else {
                    self.end_foreach(&node, collected, items.len())?
                }
            }
        };
        Ok(self.outcome(next))
    }

    fn node_spec(&self, name: &str) -> Result<Map<String, Value>, String> {
        match self.nodes.get(name) {
            Some(Value::Object(spec)) => Ok(spec.clone()),
            Some(_) => Err(format!("node {name:?} is not a map")),
            None => Err(format!("Node '{name}' not found in graph")),
        }
    }

    /// Begins the step at the current node.
    fn begin(&mut self) -> Result<Next, String> {
        let Some(name) = self.node.clone() else {
            return Ok(self.completed(None));
        };
        if u64::from(self.steps) >= self.max_steps {
            let error = format!("Max steps exceeded ({})", self.max_steps);
            let result = self.failure(&error, Some(&name));
            let context =
                json!({"node": name, "max_steps": self.max_steps, "step_count": self.steps});
            return self.hooked("limit", context, Then::Finish(result));
        }
        let spec = match self.node_spec(&name) {
            Ok(spec) => spec,
            Err(error) => return Ok(self.failed(&error, Some(&name))),
        };
        self.steps += 1;
        self.stepped = Some(name.clone());
        self.event("step_started", json!({"node": name, "step": self.steps}));
        let context = self.context();
        match spec.get("type").and_then(Value::as_str) {
            Some("return") => {
                let output = spec
                    .get("output")
                    .map(|o| fill(o, &context))
                    .unwrap_or_else(|| json!({}));
                Ok(self.completed(Some(output)))
            }
            Some("gate") => {
                self.assign(&spec, &context);
                self.follow(&name, &spec, &Value::Null)
            }
            Some("interrupt") => Ok(self.interrupt(&name, &spec, &context)),
            Some("foreach") => self.begin_foreach(&name, &spec, &context),
            None | Some("action") => self.ask_action(&name, &spec, &context),
            Some(other) => {
                let error = format!("node {name:?} has an unknown type {other:?}");
                Ok(self.failed(&error, Some(&name)))
            }
        }
    }

    /// Asks for the action of node `name`; an action that cannot be made
    /// (no item, no kind) is the node's error.
    fn ask_action(
        &mut self,
        name: &str,
        spec: &Map<String, Value>,
        context: &Value,
    ) -> Result<Next, String> {
        match self.action(name, spec, context) {
            Ok(action) => {
                self.pending = Pending::Action {
                    node: name.to_owned(),
                };
                Ok(Next::Dispatch(Dispatch {
                    actions: vec![action],
                    concurrency: 1,
                    stop_after_failures: None,
                }))
            }
            Err(error) => {
                let result = json!({"status": "error", "error": error});
                self.end_action(name, result)
            }
        }
    }

    /// Takes the time of the call under way.
    fn at(&mut self, now: &Clock) {
        self.now = (now.epoch_ms, now.iso.clone());
    }

    /// What templates see: the state, `inputs`, `_now` and `_timestamp`.
    fn context(&self) -> Value {
        json!({
            "state": self.state,
            "inputs": self.state.get("inputs").cloned().unwrap_or_else(|| json!({})),
            "_now": self.now.1,
            "_timestamp": self.now.0,
        })
    }

    /// The action of node `name`, its templates filled from `context`.
    fn action(
        &self,
        name: &str,
        spec: &Map<String, Value>,
        context: &Value,
    ) -> Result<Action, String> {
        let cacheable = spec.get("cache_result") == Some(&Value::Bool(true));
        make_action(name, spec.get("action"), cacheable, context)
    }
    /// Ends an action node's step with its (unwrapped) result.
    fn end_action(&mut self, name: &str, result: Value) -> Result<Next, String> {
        let spec = self.node_spec(name)?;
        if is_error(&result) {
            return self.node_failed(name, &result);
        }
        let mut context = self.context();
        context["result"] = result.clone();
        self.assign(&spec, &context);
        self.follow(name, &spec, &result)
    }

    /// A node's error: first its `error` hooks, which may ask for the node
    /// again; then its `on_error` node, else the graph's `on_error`.
    fn node_failed(&mut self, name: &str, result: &Value) -> Result<Next, String> {
        let error = error_text(result);
        self.event(
            "step_failed",
            json!({"node": name, "step": self.steps, "error": error}),
        );
        let retries = self
            .state
            .get("_retries")
            .and_then(|r| r.get(name))
            .cloned()
            .unwrap_or(json!(0));
        let context = json!({"node": name, "error": error, "result": result,
                             "step_count": self.steps, "retries": retries});
        let then = Then::Failed {
            node: name.to_owned(),
            result: result.clone(),
        };
        self.hooked("error", context, then)
    }

    /// A node's error once no hook asked for it again.
    fn handle_failure(&mut self, name: &str, result: &Value) -> Result<Next, String> {
        let spec = self.node_spec(name)?;
        let error = error_text(result);
        self.set("_last_error", json!({"node": name, "error": error}));
        if let Some(target) = spec.get("on_error").and_then(Value::as_str) {
            self.event(
                "step_completed",
                json!({"node": name, "step": self.steps, "next": target, "error": true}),
            );
            self.node = Some(target.to_owned());
            return self.resolve(Then::Proceed, Vec::new());
        }
        if !self.keep_going {
            return Ok(self.failed(&error, Some(name)));
        }
        self.suppressed
            .push(json!({"step": self.steps, "node": name, "error": error}));
        self.follow(name, &spec, result)
    }

    /// Sets each `assign` key to its template filled from `context`.
    fn assign(&mut self, spec: &Map<String, Value>, context: &Value) {
        if let Some(Value::Object(assign)) = spec.get("assign") {
            for (key, template) in assign {
                let value = fill(template, context);
                self.set(key, value);
            }
        }
    }

    /// Follows the node's `next`, ends the step and runs the `after_step`
    /// hooks.
    fn follow(
        &mut self,
        name: &str,
        spec: &Map<String, Value>,
        result: &Value,
    ) -> Result<Next, String> {
        let target = match spec.get("next") {
            None | Some(Value::Null) => None,
            Some(Value::String(target)) => Some(target.clone()),
            Some(Value::Array(edges)) => {
                let document = json!({
                    "state": self.state,
                    "result": result,
                    "inputs": self.state.get("inputs").cloned().unwrap_or(Value::Null),
                });
                let chosen = edges.iter().find_map(|edge| {
                    let to = edge.get("to").and_then(Value::as_str)?;
                    edge.get("when")
                        .is_none_or(|when| condition::holds(when, &document))
                        .then(|| to.to_owned())
                });
                match chosen {
                    Some(target) => Some(target),
                    None => {
                        let error = format!("no edge of node {name:?} matched");
                        return Ok(self.failed(&error, Some(name)));
                    }
                }
            }
            Some(other) => {
                let error = format!(
                    "the next of node {name:?} is neither a name nor a list of edges: {other}"
                );
                return Ok(self.failed(&error, Some(name)));
            }
        };
        self.event(
            "step_completed",
            json!({"node": name, "step": self.steps, "next": target}),
        );
        self.node = target.clone();
        let then = if target.is_some() {
            Then::Proceed
        } else {
            Then::Complete
        };
        let context = json!({"node": name, "next_node": target, "result": result,
                             "step_count": self.steps});
        self.hooked("after_step", context, then)
    }

    /// Pauses the run at `interrupt` node `name` until a caller sends
    /// inputs: what the caller is told names the node, its prompt and the
    /// inputs it needs.
    fn interrupt(&mut self, name: &str, spec: &Map<String, Value>, context: &Value) -> Next {
        let prompt = spec
            .get("prompt")
            .map(|p| fill(p, context))
            .unwrap_or(Value::Null);
        let required = spec.get("required").cloned().unwrap_or_else(|| json!([]));
        self.event(
            "interrupted",
            json!({"node": name, "step": self.steps, "prompt": prompt}),
        );
        self.pending = Pending::Waiting {
            node: name.to_owned(),
        };
        let told = json!({
            "success": true,
            "status": "waiting",
            "graph_run_id": self.run_id,
            "node": name,
            "prompt": prompt,
            "required": required,
            "steps": self.steps,
        });
        Next::Waiting(told.to_string())
    }

    /// Ends the step of `interrupt` node `name` with the inputs a caller
    /// sent, which its `assign` and edges read as `result`.
    fn given(&mut self, name: &str, inputs: Value) -> Result<Next, String> {
        let spec = self.node_spec(name)?;
        let missing = absent(spec.get("required"), |key| inputs.get(key));
        if !missing.is_empty() {
            return Err(format!(
                "node {name:?} needs inputs {}, which were not sent",
                missing.join(", ")
            ));
        }
        let keys: Vec<&String> = inputs
            .as_object()
            .into_iter()
            .flat_map(|m| m.keys())
            .collect();
        self.event("input_received", json!({"node": name, "keys": keys}));
        let mut context = self.context();
        context["result"] = inputs.clone();
        self.assign(&spec, &context);
        self.follow(name, &spec, &inputs)
    }

    /// Asks for the actions of the `event` hooks whose condition holds,
    /// then does `then`; with no such hook, does `then` at once.
    /// `context` (what conditions and templates read) gets the state,
    /// `inputs`, `_now` and `_timestamp` besides what it has.
    fn hooked(&mut self, event: &str, mut context: Value, then: Then) -> Result<Next, String> {
        if !self
            .hooks
            .iter()
            .any(|h| h.get("event").and_then(Value::as_str) == Some(event))
        {
            return self.resolve(then, Vec::new());
        }
        if let (Value::Object(context), Value::Object(base)) = (&mut context, self.context()) {
            for (key, value) in base {
                context.entry(key).or_insert(value);
            }
            context.insert("event".into(), json!(event));
        }
        let mut actions = Vec::new();
        let mut broken = Vec::new();
        for (i, hook) in self.hooks.iter().enumerate() {
            if hook.get("event").and_then(Value::as_str) != Some(event)
                || !hook
                    .get("condition")
                    .is_none_or(|c| c.is_null() || condition::holds(c, &context))
            {
                continue;
            }
            match make_action(
                &format!("hook:{event}"),
                hook.get("action"),
                false,
                &context,
            ) {
                Ok(action) => actions.push(action),
                Err(error) => broken.push(json!({"event": event, "hook": i, "error": error})),
            }
        }
        for failure in broken {
            self.event("hook_failed", failure);
        }
        if actions.is_empty() {
            return self.resolve(then, Vec::new());
        }
        self.event(
            "hooks_started",
            json!({"event": event, "actions": actions.len()}),
        );
        self.pending = Pending::Hooks {
            event: event.to_owned(),
            actions: actions.iter().map(action_json).collect(),
            then,
        };
        Ok(Next::Dispatch(Dispatch {
            actions,
            concurrency: 1,
            stop_after_failures: None,
        }))
    }

    /// Does what follows an event's hooks, given their (unwrapped)
    /// results.
    fn resolve(&mut self, then: Then, results: Vec<Value>) -> Result<Next, String> {
        match then {
            Then::Proceed | Then::Complete if self.single_step && self.steps > 0 => {
                Ok(self.one_step_ended())
            }
            Then::Proceed => Ok(Next::Proceed),
            Then::Complete => Ok(self.completed(None)),
            Then::Finish(result) => Ok(self.end(result)),
            Then::End(result) => {
                self.pending = Pending::Ended;
                Ok(Next::Finished(result.to_string()))
            }
            Then::Failed { node, result } => {
                // The first result that says something is the hooks' word.
                let word = results.iter().find(|r| {
                    r.as_object().is_some_and(|m| !m.is_empty()) && **r != json!({"success": true})
                });
                if let Some(word) = word
                    && word.get("action").and_then(Value::as_str) == Some("retry")
                {
                    let most = count(word.get("max_retries")).unwrap_or(3);
                    let mut retries = self
                        .state
                        .get("_retries")
                        .and_then(Value::as_object)
                        .cloned()
                        .unwrap_or_default();
                    let done = count(retries.get(&node)).unwrap_or(0);
                    if done < most {
                        retries.insert(node.clone(), json!(done + 1));
                        self.set("_retries", Value::Object(retries));
                        self.steps = self.steps.saturating_sub(1);
                        self.event("step_retried", json!({"node": node, "retry": done + 1}));
                        self.node = Some(node);
                        return Ok(Next::Proceed);
                    }
                }
                self.handle_failure(&node, &result)
            }
        }
    }

    fn begin_foreach(
        &mut self,
        name: &str,
        spec: &Map<String, Value>,
        context: &Value,
    ) -> Result<Next, String> {
        let Some(over) = spec.get("over") else {
            return Ok(self.failed(&format!("foreach node {name:?} has no over"), Some(name)));
        };
        if let Err(error) = tolerance(spec, 0) {
            return self.node_failed(name, &json!({"status": "error", "error": error}));
        }
        let items = match fill(over, context) {
            Value::Array(items) => items,
            Value::String(text) => match serde_json::from_str(&text) {
                Ok(Value::Array(items)) => items,
                _ => Vec::new(),
            },
            _ => Vec::new(),
        };
        if items.is_empty() {
            return self.end_foreach(name, Vec::new(), 0);
        }
        let parallel = spec.get("parallel") == Some(&Value::Bool(true));
        let next = self.foreach_dispatch(name, spec, &items, 0, parallel)?;
        if matches!(next, Next::Dispatch(_)) {
            self.pending = Pending::Foreach {
                node: name.to_owned(),
                items,
                index: 0,
                collected: Vec::new(),
                parallel,
            };
        }
        Ok(next)
    }

    /// The actions of a `foreach`: the item at `index`, or all of them.
    fn foreach_dispatch(
        &mut self,
        name: &str,
        spec: &Map<String, Value>,
        items: &[Value],
        index: usize,
        parallel: bool,
    ) -> Result<Next, String> {
        let var = spec
            .get("as")
            .and_then(Value::as_str)
            .unwrap_or("item")
            .to_owned();
        let failed = |error: String| json!({"status": "error", "error": error});
        if parallel {
            // Each item sees the inputs and itself, not the state.
            let inputs = self
                .state
                .get("inputs")
                .cloned()
                .unwrap_or_else(|| json!({}));
            let mut actions = Vec::with_capacity(items.len());
            for item in items {
                let context = json!({
                    "state": {"inputs": inputs, var.as_str(): item},
                    "inputs": inputs,
                    var.as_str(): item,
                    "_now": self.now.1,
                    "_timestamp": self.now.0,
                });
                match self.action(name, spec, &context) {
                    Ok(action) => actions.push(action),
                    Err(error) => {
                        // The node itself cannot be walked: its first
                        // item's error says why for all of them.
                        let all = vec![failed(error); items.len()];
                        return self.end_foreach(name, all, items.len());
                    }
                }
            }
            let concurrency = count(spec.get("max_concurrency"))
                .map_or(self.max_concurrency, |n| n.clamp(1, 1024) as u32);
            let stop_after_failures =
                tolerance(spec, items.len())?.map(|t| u32::try_from(t).unwrap_or(u32::MAX));
            return Ok(Next::Dispatch(Dispatch {
                actions,
                concurrency,
                stop_after_failures,
            }));
        }
        self.set(&var, items[index].clone());
        let mut context = self.context();
        context[var.as_str()] = items[index].clone();
        match self.action(name, spec, &context) {
            Ok(action) => Ok(Next::Dispatch(Dispatch {
                actions: vec![action],
                concurrency: 1,
                stop_after_failures: None,
            })),
            Err(error) => {
                let all = vec![failed(error); items.len()];
                self.end_foreach(name, all, items.len())
            }
        }
    }

    /// Ends a `foreach` with the values of the items taken (of `total`):
    /// `collect` set, then its edges, or its error when more items failed
    /// than its `tolerated_failures`.
    fn end_foreach(
        &mut self,
        name: &str,
        collected: Vec<Value>,
        total: usize,
    ) -> Result<Next, String> {
        let spec = self.node_spec(name)?;
        let var = spec.get("as").and_then(Value::as_str).unwrap_or("item");
        self.unset(var);
        let failures = collected.iter().filter(|v| is_error(v)).count();
        if let Some(key) = spec.get("collect").and_then(Value::as_str) {
            self.set(key, Value::Array(collected));
        }
        self.event(
            "foreach_completed",
            json!({"node": name, "items": total, "failed": failures}),
        );
        if let Some(tolerated) = tolerance(&spec, total)?
            && failures > tolerated
        {
            let error = format!(
                "{failures} of the {total} items of foreach node {name:?} failed, more than the {tolerated} it tolerates"
            );
            return self.node_failed(name, &json!({"status": "error", "error": error}));
        }
        self.follow(name, &spec, &Value::Null)
    }

    fn set(&mut self, key: &str, value: Value) {
        self.state.insert(key.to_owned(), value);
        self.changed.push(key.to_owned());
    }

    fn unset(&mut self, key: &str) {
        if self.state.remove(key).is_some() {
            self.changed.push(key.to_owned());
        }
    }

    fn event(&mut self, event_type: &str, payload: Value) {
        self.events.push(Event {
            event_type: event_type.to_owned(),
            payload: payload.to_string(),
        });
    }

    /// The run's result when it ends well: a `return` node's output, or
    /// (`None`) a node with no `next`, whose result shows the state.
    fn completed(&mut self, output: Option<Value>) -> Next {
        let with_errors = !self.suppressed.is_empty();
        let status = if with_errors {
            "completed_with_errors"
        } else {
            "completed"
        };
        let mut result = json!({
            "success": true,
            "status": status,
            "output": output.clone().unwrap_or_else(|| json!({})),
            "steps": self.steps,
            "graph_run_id": self.run_id,
        });
        if output.is_none() {
            result["state"] = Value::Object(self.state.clone());
        }
        if with_errors {
            result["errors_suppressed"] = json!(self.suppressed.len());
            result["errors"] = Value::Array(self.suppressed.clone());
        }
        self.event(
            "graph_completed",
            json!({"status": status, "steps": self.steps}),
        );
        self.end(result)
    }

    /// Ends the run with `result` once its `graph_completed` hooks have
    /// run.
    fn end(&mut self, result: Value) -> Next {
        let context =
            json!({"status": result["status"], "result": result, "step_count": self.steps});
        match self.hooked("graph_completed", context, Then::End(result.clone())) {
            Ok(next) => next,
            Err(_) => {
                self.pending = Pending::Ended;
                Next::Finished(result.to_string())
            }
        }
    }

    /// Ends the run with `error` (at `node`).
    fn failed(&mut self, error: &str, node: Option<&str>) -> Next {
        let result = self.failure(error, node);
        self.end(result)
    }

    /// The result of a run that failed with `error` (at `node`).
    fn failure(&mut self, error: &str, node: Option<&str>) -> Value {
        let result = json!({
            "success": false,
            "status": "error",
            "error": error,
            "node": node,
            "state": self.state,
            "steps": self.steps,
            "graph_run_id": self.run_id,
        });
        self.event(
            "graph_error",
            json!({"error": error, "node": node, "steps": self.steps}),
        );
        result
    }

    /// A single-step run's result: the node it took, where the graph
    /// would go next, and the state.
    fn one_step_ended(&mut self) -> Next {
        let result = json!({
            "success": true,
            "state": self.state,
            "executed_node": self.stepped,
            "next_node": self.node,
            "step_count": self.steps,
            "graph_run_id": self.run_id,
        });
        self.pending = Pending::Ended;
        Next::Finished(result.to_string())
    }

    /// What this call changed and where the run now is.
    fn outcome(&mut self, next: Next) -> Outcome {
        let mut keys = std::mem::take(&mut self.changed);
        let mut seen = std::collections::HashSet::new();
        keys.retain(|k| seen.insert(k.clone()));
        let changes = keys
            .into_iter()
            .map(|key| Change {
                value: self.state.get(&key).map(Value::to_string),
                key,
            })
            .collect();
        Outcome {
            changes,
            cursor: self.cursor().to_string(),
            node: self.node.clone(),
            steps: self.steps,
            events: std::mem::take(&mut self.events),
            next,
        }
    }

    fn cursor(&self) -> Value {
        let pending = match &self.pending {
            Pending::Idle => json!({"wait": "none"}),
            Pending::Ended => json!({"wait": "ended"}),
            Pending::Action { node } => json!({"wait": "action", "node": node}),
            Pending::Waiting { node } => json!({"wait": "input", "node": node}),
            Pending::Hooks {
                event,
                actions,
                then,
            } => {
                json!({"wait": "hooks", "event": event, "actions": actions, "then": then.to_json()})
            }
            Pending::Foreach {
                node,
                items,
                index,
                collected,
                parallel,
            } => json!({"wait": "foreach", "node": node, "items": items, "index": index,
                        "collected": collected, "parallel": parallel}),
        };
        json!({
            "node": self.node,
            "steps": self.steps,
            "max_steps": self.max_steps,
            "max_concurrency": self.max_concurrency,
            "suppressed": self.suppressed,
            "single_step": self.single_step,
            "stepped": self.stepped,
            "pending": pending,
        })
    }
}

fn pending_from(value: &Value) -> Result<Pending, String> {
    let node = || {
        value
            .get("node")
            .and_then(Value::as_str)
            .map(str::to_owned)
            .ok_or_else(|| "the cursor's wait names no node".to_owned())
    };
    Ok(match value.get("wait").and_then(Value::as_str) {
        None | Some("none") => Pending::Idle,
        Some("ended") => Pending::Ended,
        Some("action") => Pending::Action { node: node()? },
        Some("input") => Pending::Waiting { node: node()? },
        Some("hooks") => Pending::Hooks {
            event: value
                .get("event")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_owned(),
            actions: value
                .get("actions")
                .and_then(Value::as_array)
                .cloned()
                .unwrap_or_default(),
            then: Then::from_json(value.get("then").unwrap_or(&Value::Null))?,
        },
        Some("foreach") => Pending::Foreach {
            node: node()?,
            items: value
                .get("items")
                .and_then(Value::as_array)
                .cloned()
                .unwrap_or_default(),
            index: count(value.get("index")).unwrap_or(0) as usize,
            collected: value
                .get("collected")
                .and_then(Value::as_array)
                .cloned()
                .unwrap_or_default(),
            parallel: value.get("parallel") == Some(&Value::Bool(true)),
        },
        Some(other) => return Err(format!("the cursor waits for {other:?}, which is no wait")),
    })
}

/// An execution's result as a graph sees it: its `data` map (or the whole
/// result when `data` is no map) less what only the envelope carries; an
/// error (the envelope's `status: error`, or `success: false` inside) is
/// marked `status: error` with the envelope's error.
pub fn unwrap(envelope: &Value) -> Value {
    let mut result = match envelope.get("data") {
        Some(Value::Object(data)) => data.clone(),
        _ => envelope.as_object().cloned().unwrap_or_default(),
    };
    for key in ENVELOPE_ONLY {
        result.remove(key);
    }
    let failed = envelope.get("status").and_then(Value::as_str) == Some("error")
        || result.get("success") == Some(&Value::Bool(false));
    if failed {
        result.insert("status".into(), json!("error"));
        if let Some(error) = envelope.get("error")
            && !error.is_null()
        {
            result.insert("error".into(), error.clone());
        }
    }
    Value::Object(result)
}

/// The names in `required` (a list) that `value` gives no value (or
/// `null`) for.
fn absent<'a, 'b>(
    required: Option<&'a Value>,
    value: impl Fn(&str) -> Option<&'b Value>,
) -> Vec<&'a str> {
    required
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .filter(|name| value(name).is_none_or(Value::is_null))
        .collect()
}

/// What a failed result says went wrong.
fn error_text(result: &Value) -> String {
    result
        .get("error")
        .map(|e| template::as_text(Some(e)))
        .filter(|e| !e.is_empty())
        .unwrap_or_else(|| "the action failed".to_owned())
}

/// How many of a `foreach`'s `total` items may fail before the node
/// does: its `tolerated_failures`, a count or a percentage of the items
/// (rounded down); `None` when it has none.
fn tolerance(spec: &Map<String, Value>, total: usize) -> Result<Option<usize>, String> {
    spec.get("tolerated_failures")
        .filter(|v| !v.is_null())
        .map(|v| tolerated(v, total))
        .transpose()
}

/// A `tolerated_failures` value for `total` items.
pub fn tolerated(value: &Value, total: usize) -> Result<usize, String> {
    let bad =
        || format!("tolerated_failures is neither a count nor a percentage (\"10%\"): {value}");
    match value {
        Value::Number(n) => n.as_u64().map(|n| n as usize).ok_or_else(bad),
        Value::String(text) => match text.trim().strip_suffix('%') {
            Some(percent) => {
                let percent: f64 = percent.trim().parse().map_err(|_| bad())?;
                if !(0.0..=100.0).contains(&percent) {
                    return Err(bad());
                }
                Ok((total as f64 * percent / 100.0).floor() as usize)
            }
            None => text.trim().parse().map_err(|_| bad()),
        },
        _ => Err(bad()),
    }
}

fn is_error(result: &Value) -> bool {
    result.get("status").and_then(Value::as_str) == Some("error")
        || result.get("success") == Some(&Value::Bool(false))
}

/// What a `foreach` collects of one item's result.
fn iteration_value(result: Value) -> Value {
    if is_error(&result) {
        return result;
    }
    match result.get("thread_id") {
        Some(id) if !id.is_null() => id.clone(),
        _ => result,
    }
}

/// The action `action` (a node's or a hook's, asked for as `name`), its
/// templates filled from `context`.
fn make_action(
    name: &str,
    action: Option<&Value>,
    cacheable: bool,
    context: &Value,
) -> Result<Action, String> {
    let Some(Value::Object(action)) = action else {
        return Err(format!("node {name:?} has no action"));
    };
    let primary = action
        .get("primary")
        .and_then(Value::as_str)
        .unwrap_or("execute")
        .to_owned();
    let item_id = match action.get("item_id").map(|v| fill(v, context)) {
        Some(Value::String(id)) if !id.trim().is_empty() => id.trim().to_owned(),
        _ => return Err(format!("the action of node {name:?} names no item_id")),
    };
    let named_kind = action
        .get("kind")
        .or_else(|| action.get("item_type"))
        .and_then(Value::as_str)
        .map(str::to_owned);
    let (kind, item_id) = match item_id.split_once(':') {
        Some((kind @ ("tool" | "directive" | "knowledge"), id)) => (kind.to_owned(), id.to_owned()),
        _ => match named_kind {
            Some(kind) => (kind, item_id),
            None => {
                return Err(format!(
                    "the action of node {name:?} gives no kind (kind: tool, or an id such as tool:{item_id})"
                ));
            }
        },
    };
    let params = match action.get("params").map(|p| drop_nulls(fill(p, context))) {
        None => json!({}),
        Some(Value::Object(params)) => Value::Object(params),
        Some(other) => {
            return Err(format!(
                "the params of node {name:?} are not a map but {other}"
            ));
        }
    };
    Ok(Action {
        primary,
        kind,
        item_id,
        params: params.to_string(),
        node: name.to_owned(),
        cacheable,
    })
}

/// An action as a cursor keeps it.
fn action_json(action: &Action) -> Value {
    json!({
        "primary": action.primary,
        "kind": action.kind,
        "item_id": action.item_id,
        "params": action.params,
        "node": action.node,
        "cacheable": action.cacheable,
    })
}

/// An action a cursor kept.
fn action_from_json(value: &Value) -> Result<Action, String> {
    let text = |key: &str| {
        value
            .get(key)
            .and_then(Value::as_str)
            .map(str::to_owned)
            .ok_or_else(|| format!("an action the cursor keeps has no {key}"))
    };
    Ok(Action {
        primary: text("primary")?,
        kind: text("kind")?,
        item_id: text("item_id")?,
        params: text("params")?,
        node: text("node")?,
        cacheable: value.get("cacheable") == Some(&Value::Bool(true)),
    })
}

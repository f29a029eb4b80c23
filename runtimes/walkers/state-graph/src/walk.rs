//! One run of a graph, a step per call.
//!
//! Each call does one thing and says what it changed: `start` sets the
//! first state; each `advance` either begins the step at the current node
//! (a `return` ends the run; a `gate` assigns and moves on; an action
//! node, or a `foreach` item, asks for its action) or takes the results of
//! the action it asked for and ends the step (`assign`, then the edges).
//! A `foreach` in order asks for one item at a time; a parallel one asks
//! for all of them at once.
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
    /// The run is over.
    Ended,
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
        let mut run = Run::open(input, &mut parameters)?;
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
            let missing: Vec<&str> = schema
                .get("required")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .filter_map(Value::as_str)
                .filter(|name| parameters.get(*name).is_none_or(Value::is_null))
                .collect();
            if !missing.is_empty() {
                return Err(format!(
                    "required inputs are missing: {}",
                    missing.join(", ")
                ));
            }
        }
        let start = config
            .get("start")
            .and_then(Value::as_str)
            .ok_or_else(|| "config.start (the first node's name) is missing".to_owned())?;
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
        let _ = now;
        let outcome = run.outcome(Next::Proceed);
        Ok((run, outcome))
    }

    /// A run rebuilt from its last stored outcome, and the dispatch it was
    /// waiting for asked again (its results, if the host kept them, stand
    /// in for running it twice).
    pub fn resume(
        input: &WalkInput,
        state: Vec<(String, String)>,
        cursor: &str,
        now: &Clock,
    ) -> Result<(Run, Outcome), String> {
        let mut ignored = Map::new();
        let mut run = Run::open(input, &mut ignored)?;
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
        run.pending = pending_from(cursor.get("pending").unwrap_or(&Value::Null))?;
        let next = match run.pending.clone() {
            Pending::Idle => Next::Proceed,
            Pending::Ended => return Err("the run has already ended".into()),
            Pending::Action { node } => {
                run.pending = Pending::Idle;
                let spec = run.node_spec(&node)?;
                let context = run.context(now);
                run.ask_action(&node, &spec, &context, now)?
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
                let next = run.foreach_dispatch(&node, &spec, &items, index, parallel, now)?;
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
        let results = results
            .iter()
            .map(|text| serde_json::from_str::<Value>(text))
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| format!("a result is not JSON: {e}"))?;
        let next = match std::mem::replace(&mut self.pending, Pending::Idle) {
            Pending::Ended => return Err("the run has already ended".into()),
            Pending::Idle => self.begin(now)?,
            Pending::Action { node } => {
                let [result] = <[Value; 1]>::try_from(results).map_err(|r| {
                    format!(
                        "node {node:?} asked for one result and was given {}",
                        r.len()
                    )
                })?;
                self.end_action(&node, unwrap(&result), now)?
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
                if next_index < items.len() {
                    let spec = self.node_spec(&node)?;
                    let next =
                        self.foreach_dispatch(&node, &spec, &items, next_index, false, now)?;
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
                    self.end_foreach(&node, collected, now)?
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
    fn begin(&mut self, now: &Clock) -> Result<Next, String> {
        let Some(name) = self.node.clone() else {
            return Ok(self.completed(None));
        };
        if u64::from(self.steps) >= self.max_steps {
            let error = format!("Max steps exceeded ({})", self.max_steps);
            self.event("graph_error", json!({"error": error, "node": name}));
            return Ok(self.failed(&error, Some(&name)));
        }
        let spec = match self.node_spec(&name) {
            Ok(spec) => spec,
            Err(error) => return Ok(self.failed(&error, Some(&name))),
        };
        self.steps += 1;
        self.event("step_started", json!({"node": name, "step": self.steps}));
        let context = self.context(now);
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
                self.route(&name, &spec, &Value::Null, now)
            }
            Some("foreach") => self.begin_foreach(&name, &spec, &context, now),
            None | Some("action") => self.ask_action(&name, &spec, &context, now),
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
        now: &Clock,
    ) -> Result<Next, String> {
        match self.action(name, spec, context, now) {
            Ok(action) => {
                self.pending = Pending::Action {
                    node: name.to_owned(),
                };
                Ok(Next::Dispatch(Dispatch {
                    actions: vec![action],
                    concurrency: 1,
                }))
            }
            Err(error) => {
                let result = json!({"status": "error", "error": error});
                self.end_action(name, result, now)
            }
        }
    }

    /// What templates see: the state, `inputs`, `_now` and `_timestamp`.
    fn context(&self, now: &Clock) -> Value {
        json!({
            "state": self.state,
            "inputs": self.state.get("inputs").cloned().unwrap_or_else(|| json!({})),
            "_now": now.iso,
            "_timestamp": now.epoch_ms,
        })
    }

    /// The action of node `name`, its templates filled from `context`.
    fn action(
        &self,
        name: &str,
        spec: &Map<String, Value>,
        context: &Value,
        _now: &Clock,
    ) -> Result<Action, String> {
        let Some(Value::Object(action)) = spec.get("action") else {
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
            Some((kind @ ("tool" | "directive" | "knowledge"), id)) => {
                (kind.to_owned(), id.to_owned())
            }
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
            cacheable: spec.get("cache_result") == Some(&Value::Bool(true)),
        })
    }

    /// Ends an action node's step with its (unwrapped) result.
    fn end_action(&mut self, name: &str, result: Value, now: &Clock) -> Result<Next, String> {
        let spec = self.node_spec(name)?;
        if is_error(&result) {
            return self.node_failed(name, &spec, &result, now);
        }
        let mut context = self.context(now);
        context["result"] = result.clone();
        self.assign(&spec, &context);
        self.route(name, &spec, &result, now)
    }

    /// A node's error: its `on_error` node, else the graph's `on_error`.
    fn node_failed(
        &mut self,
        name: &str,
        spec: &Map<String, Value>,
        result: &Value,
        now: &Clock,
    ) -> Result<Next, String> {
        let error = result
            .get("error")
            .map(|e| template::as_text(Some(e)))
            .filter(|e| !e.is_empty())
            .unwrap_or_else(|| "the action failed".to_owned());
        self.set("_last_error", json!({"node": name, "error": error}));
        self.event(
            "step_failed",
            json!({"node": name, "step": self.steps, "error": error}),
        );
        if let Some(target) = spec.get("on_error").and_then(Value::as_str) {
            self.event(
                "step_completed",
                json!({"node": name, "step": self.steps, "next": target, "error": true}),
            );
            self.node = Some(target.to_owned());
            return Ok(Next::Proceed);
        }
        if !self.keep_going {
            return Ok(self.failed(&error, Some(name)));
        }
        self.suppressed
            .push(json!({"step": self.steps, "node": name, "error": error}));
        self.route(name, spec, result, now)
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

    /// Follows the node's `next` and ends the step.
    fn route(
        &mut self,
        name: &str,
        spec: &Map<String, Value>,
        result: &Value,
        _now: &Clock,
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
        match target {
            Some(target) => {
                self.node = Some(target);
                Ok(Next::Proceed)
            }
            None => {
                self.node = None;
                Ok(self.completed(None))
            }
        }
    }

    fn begin_foreach(
        &mut self,
        name: &str,
        spec: &Map<String, Value>,
        context: &Value,
        now: &Clock,
    ) -> Result<Next, String> {
        let Some(over) = spec.get("over") else {
            return Ok(self.failed(&format!("foreach node {name:?} has no over"), Some(name)));
        };
        let items = match fill(over, context) {
            Value::Array(items) => items,
            Value::String(text) => match serde_json::from_str(&text) {
                Ok(Value::Array(items)) => items,
                _ => Vec::new(),
            },
            _ => Vec::new(),
        };
        if items.is_empty() {
            return self.end_foreach(name, Vec::new(), now);
        }
        let parallel = spec.get("parallel") == Some(&Value::Bool(true));
        let next = self.foreach_dispatch(name, spec, &items, 0, parallel, now)?;
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
        now: &Clock,
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
                    "_now": now.iso,
                    "_timestamp": now.epoch_ms,
                });
                match self.action(name, spec, &context, now) {
                    Ok(action) => actions.push(action),
                    Err(error) => {
                        // The node itself cannot be walked: its first
                        // item's error says why for all of them.
                        return self.end_foreach(name, vec![failed(error); items.len()], now);
                    }
                }
            }
            let concurrency = count(spec.get("max_concurrency"))
                .map_or(self.max_concurrency, |n| n.clamp(1, 1024) as u32);
            return Ok(Next::Dispatch(Dispatch {
                actions,
                concurrency,
            }));
        }
        self.set(&var, items[index].clone());
        let mut context = self.context(now);
        context[var.as_str()] = items[index].clone();
        match self.action(name, spec, &context, now) {
            Ok(action) => Ok(Next::Dispatch(Dispatch {
                actions: vec![action],
                concurrency: 1,
            })),
            Err(error) => self.end_foreach(name, vec![failed(error); items.len()], now),
        }
    }

    fn end_foreach(
        &mut self,
        name: &str,
        collected: Vec<Value>,
        now: &Clock,
    ) -> Result<Next, String> {
        let spec = self.node_spec(name)?;
        let var = spec.get("as").and_then(Value::as_str).unwrap_or("item");
        self.unset(var);
        let items = collected.len();
        if let Some(key) = spec.get("collect").and_then(Value::as_str) {
            self.set(key, Value::Array(collected));
        }
        self.event("foreach_completed", json!({"node": name, "items": items}));
        self.route(name, &spec, &Value::Null, now)
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
        self.pending = Pending::Ended;
        Next::Finished(result.to_string())
    }

    fn failed(&mut self, error: &str, node: Option<&str>) -> Next {
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

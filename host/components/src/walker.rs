//! Calls into the `graph-walker` world.
//!
//! A walker instance lives as long as the run it walks: each call is one
//! decision, with its own CPU deadline, and the instance's memory (capped
//! by the world's limit) holds the run between calls. A walker may come
//! from a project, so everything it returns is checked here: JSON where
//! the contract says JSON, and bounded counts.

use std::path::PathBuf;

use serde_json::Value;
use wasmtime::Store;

use crate::bindings::walker::GraphWalker;
use crate::bindings::walker::exports::rye::plugin::walking as wit;
use crate::error::{ComponentError, ComponentErrorKind};
use crate::host::{ComponentHost, LoadedComponent, Pre, arm_deadline, classify};
use crate::limits::Limits;
use crate::sandbox::CallState;
use crate::world::World;

/// Actions one dispatch may ask for.
pub const MAX_ACTIONS: usize = 10_000;

/// The run a walker is given.
#[derive(Debug, Clone)]
pub struct WalkRequest {
    pub graph_id: String,
    /// The graph's document, a JSON object.
    pub graph: Value,
    /// The runtimes' merged config, a JSON object.
    pub defaults: Value,
    /// The caller's parameters, a JSON object.
    pub parameters: Value,
    pub run_id: String,
    /// Names of the host environment variables that are set.
    pub env_names: Vec<String>,
}

/// The time of a call.
#[derive(Debug, Clone)]
pub struct WalkClock {
    pub epoch_ms: u64,
    /// ISO-8601 UTC with microseconds.
    pub iso: String,
}

/// An action a graph asks for.
#[derive(Debug, Clone, PartialEq)]
pub struct WalkAction {
    pub primary: String,
    pub kind: String,
    pub item_id: String,
    /// A JSON object.
    pub params: Value,
    pub node: String,
    pub cacheable: bool,
}

/// What the host does next.
#[derive(Debug, Clone, PartialEq)]
pub enum WalkNext {
    Dispatch {
        actions: Vec<WalkAction>,
        concurrency: usize,
        /// Start no more once more than this many have failed.
        stop_after_failures: Option<usize>,
    },
    Proceed,
    /// The run pauses for a caller's inputs; what the caller is told, a
    /// JSON object.
    Waiting(Value),
    /// The run's result, a JSON object.
    Finished(Value),
}

/// One decision of a walker.
#[derive(Debug, Clone, PartialEq)]
pub struct WalkOutcome {
    /// State keys set (`Some`) or removed (`None`).
    pub changes: Vec<(String, Option<Value>)>,
    /// The walker's place in the run, opaque to the host.
    pub cursor: Value,
    pub node: Option<String>,
    pub steps: u32,
    /// Transcript events: type and payload.
    pub events: Vec<(String, Value)>,
    pub next: WalkNext,
}

/// A walker instance, walking one run.
pub struct Walker {
    path: PathBuf,
    store: Store<CallState>,
    instance: GraphWalker,
    limits: Limits,
}

impl ComponentHost {
    /// A new instance of the walker `component`, for one run.
    pub fn walker(&self, component: &LoadedComponent) -> Result<Walker, ComponentError> {
        let fail = |kind| ComponentError {
            path: component.path.clone(),
            kind,
        };
        let Pre::Walker(pre) = &component.pre else {
            return Err(fail(ComponentErrorKind::WrongWorld {
                expected: World::GraphWalker.name().to_owned(),
                found: vec![format!("the {} world", component.world)],
            }));
        };
        let limits = self.config().limits(World::GraphWalker);
        let mut store = self.walker_store().map_err(fail)?;
        let instance = pre
            .instantiate(&mut store)
            .map_err(|e| fail(classify(&store, limits, e)))?;
        Ok(Walker {
            path: component.path.clone(),
            store,
            instance,
            limits,
        })
    }
}

fn wit_input(request: &WalkRequest) -> wit::WalkInput {
    wit::WalkInput {
        graph_id: request.graph_id.clone(),
        graph: request.graph.to_string(),
        defaults: request.defaults.to_string(),
        parameters: request.parameters.to_string(),
        run_id: request.run_id.clone(),
        env_names: request.env_names.clone(),
    }
}

fn wit_clock(clock: &WalkClock) -> wit::Clock {
    wit::Clock {
        epoch_ms: clock.epoch_ms,
        iso: clock.iso.clone(),
    }
}

impl Walker {
    /// Starts the run. The outer error is the walker's failure; the inner
    /// one the walker's refusal of the run (a bad graph, a missing input).
    pub fn start(
        &mut self,
        request: &WalkRequest,
        now: &WalkClock,
    ) -> Result<Result<WalkOutcome, String>, ComponentError> {
        let input = wit_input(request);
        let clock = wit_clock(now);
        self.call(|instance, store| {
            instance
                .rye_plugin_walking()
                .call_start(store, &input, &clock)
        })
    }

    /// Goes on with a run from its last stored state and cursor.
    pub fn resume(
        &mut self,
        request: &WalkRequest,
        state: &[(String, Value)],
        cursor: &Value,
        inputs: &Value,
        now: &WalkClock,
    ) -> Result<Result<WalkOutcome, String>, ComponentError> {
        let input = wit_input(request);
        let clock = wit_clock(now);
        let state: Vec<(String, String)> = state
            .iter()
            .map(|(k, v)| (k.clone(), v.to_string()))
            .collect();
        let (cursor, inputs) = (cursor.to_string(), inputs.to_string());
        self.call(|instance, store| {
            instance
                .rye_plugin_walking()
                .call_resume(store, &input, &state, &cursor, &inputs, &clock)
        })
    }

    /// Hands over the results of the last dispatch (execution results).
    pub fn advance(
        &mut self,
        results: &[Value],
        now: &WalkClock,
    ) -> Result<Result<WalkOutcome, String>, ComponentError> {
        let results: Vec<String> = results.iter().map(Value::to_string).collect();
        let clock = wit_clock(now);
        self.call(|instance, store| {
            instance
                .rye_plugin_walking()
                .call_advance(store, &results, &clock)
        })
    }

    /// The graph's static analysis.
    pub fn analyze(&mut self, request: &WalkRequest) -> Result<Value, ComponentError> {
        let input = wit_input(request);
        arm_deadline(&mut self.store, self.limits);
        let text = self
            .instance
            .rye_plugin_walking()
            .call_analyze(&mut self.store, &input)
            .map_err(|e| self.fail(e))?;
        match serde_json::from_str::<Value>(&text) {
            Ok(report @ Value::Object(_)) => Ok(report),
            _ => Err(ComponentError {
                path: self.path.clone(),
                kind: ComponentErrorKind::BadOutput("its analysis is not a JSON object".into()),
            }),
        }
    }

    fn fail(&self, error: wasmtime::Error) -> ComponentError {
        ComponentError {
            path: self.path.clone(),
            kind: classify(&self.store, self.limits, error),
        }
    }

    fn call(
        &mut self,
        call: impl FnOnce(
            &GraphWalker,
            &mut Store<CallState>,
        ) -> wasmtime::Result<Result<wit::Outcome, String>>,
    ) -> Result<Result<WalkOutcome, String>, ComponentError> {
        arm_deadline(&mut self.store, self.limits);
        let answer = call(&self.instance, &mut self.store).map_err(|e| self.fail(e))?;
        let outcome = match answer {
            Ok(outcome) => outcome,
            Err(refusal) => return Ok(Err(refusal)),
        };
        checked(outcome).map(Ok).map_err(|e| ComponentError {
            path: self.path.clone(),
            kind: ComponentErrorKind::BadOutput(e),
        })
    }
}

fn json(text: &str, what: &str) -> Result<Value, String> {
    serde_json::from_str(text).map_err(|e| format!("{what} is not JSON: {e}"))
}

/// The outcome as the host uses it, or what about it breaks the contract.
fn checked(outcome: wit::Outcome) -> Result<WalkOutcome, String> {
    let changes = outcome
        .changes
        .into_iter()
        .map(|c| {
            let value = match &c.value {
                Some(text) => Some(json(text, &format!("state key {:?}", c.key))?),
                None => None,
            };
            Ok((c.key, value))
        })
        .collect::<Result<Vec<_>, String>>()?;
    let events = outcome
        .events
        .into_iter()
        .map(|e| Ok((e.event_type, json(&e.payload, "an event's payload")?)))
        .collect::<Result<Vec<_>, String>>()?;
    let next = match outcome.next {
        wit::Next::Proceed => WalkNext::Proceed,
        wit::Next::Finished(result) => match json(&result, "the run's result")? {
            result @ Value::Object(_) => WalkNext::Finished(result),
            _ => return Err("the run's result is not a JSON object".into()),
        },
        wit::Next::Waiting(told) => match json(&told, "what a waiting run tells")? {
            told @ Value::Object(_) => WalkNext::Waiting(told),
            _ => return Err("what a waiting run tells is not a JSON object".into()),
        },
        wit::Next::Dispatch(dispatch) => {
            if dispatch.actions.is_empty() {
                return Err("a dispatch asks for no action".into());
            }
            if dispatch.actions.len() > MAX_ACTIONS {
                return Err(format!(
                    "a dispatch asks for {} actions, more than {MAX_ACTIONS}",
                    dispatch.actions.len()
                ));
            }
            let actions = dispatch
                .actions
                .into_iter()
                .map(|a| {
                    let params = match json(&a.params, "an action's params")? {
                        params @ Value::Object(_) => params,
                        _ => return Err("an action's params are not a JSON object".to_owned()),
                    };
                    Ok(WalkAction {
                        primary: a.primary,
                        kind: a.kind,
                        item_id: a.item_id,
                        params,
                        node: a.node,
                        cacheable: a.cacheable,
                    })
                })
                .collect::<Result<Vec<_>, String>>()?;
            WalkNext::Dispatch {
                actions,
                concurrency: dispatch.concurrency.max(1) as usize,
                stop_after_failures: dispatch.stop_after_failures.map(|n| n as usize),
            }
        }
    };
    Ok(WalkOutcome {
        changes,
        cursor: json(&outcome.cursor, "the cursor")?,
        node: outcome.node,
        steps: outcome.steps,
        events,
        next,
    })
}

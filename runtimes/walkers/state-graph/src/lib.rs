//! The state-graph walker: walks graph tools (`tool_type: graph`, run by
//! `rye/core/runtimes/state-graph/runtime`) as the seed's state-graph
//! runtime does, one decided step per call. The host performs the actions
//! and keeps the run; this component only decides.
//!
//! One instance walks one run, so the run lives in a thread-local between
//! calls: the graph is read once, not once per step.

pub mod analyze;
pub mod condition;
pub mod template;
pub mod walk;

#[cfg(target_arch = "wasm32")]
use std::cell::RefCell;

#[cfg(target_arch = "wasm32")]
use rye_guest::serde_json::{self, Value};
#[cfg(target_arch = "wasm32")]
use rye_guest::walker::{Clock, GraphWalker, Outcome, WalkInput};

#[cfg(target_arch = "wasm32")]
use walk::Run;

#[cfg(target_arch = "wasm32")]
thread_local! {
    static RUN: RefCell<Option<Run>> = const { RefCell::new(None) };
}

#[cfg(target_arch = "wasm32")]
struct StateGraph;

#[cfg(target_arch = "wasm32")]
impl GraphWalker for StateGraph {
    fn start(input: WalkInput, now: Clock) -> Result<Outcome, String> {
        let (run, outcome) = Run::start(&input, &now)?;
        RUN.with(|slot| *slot.borrow_mut() = Some(run));
        Ok(outcome)
    }

    fn resume(
        input: WalkInput,
        state: Vec<(String, String)>,
        cursor: String,
        inputs: String,
        now: Clock,
    ) -> Result<Outcome, String> {
        let (run, outcome) = Run::resume(&input, state, &cursor, &inputs, &now)?;
        RUN.with(|slot| *slot.borrow_mut() = Some(run));
        Ok(outcome)
    }

    fn advance(results: Vec<String>, now: Clock) -> Result<Outcome, String> {
        RUN.with(|slot| match slot.borrow_mut().as_mut() {
            Some(run) => run.advance(results, &now),
            None => Err("no run has started in this instance".into()),
        })
    }

    fn analyze(input: WalkInput) -> String {
        match serde_json::from_str::<Value>(&input.graph) {
            Ok(graph) => analyze::analyze(&graph).to_string(),
            Err(e) => serde_json::json!({
                "success": false,
                "errors": [format!("the graph is not JSON: {e}")],
                "warnings": [],
                "node_count": 0,
            })
            .to_string(),
        }
    }
}

rye_guest::export_walker!(StateGraph);

#[cfg(test)]
mod tests;

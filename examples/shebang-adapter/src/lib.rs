//! A runtime adapter that runs a tool with the interpreter named on the
//! tool's own `#!` line, something runtime YAML cannot say:
//!
//! ```yaml
//! # .ai/tools/shebang/runtime.yaml
//! tool_type: runtime
//! executor_id: rye/core/primitives/execute
//! adapter: examples/shebang
//! config:
//!   timeout: 60
//! ```
//!
//! A tool naming that runtime as its `executor_id` runs as
//! `<interpreter> [its arguments] <tool path>`, with the host environment,
//! the project as working directory and the parameters as JSON on stdin.
//! `#!/usr/bin/env name` is looked up on the host's `PATH`.
//!
//! Build it for wasm32-wasip2 and install it as
//! `.ai/adapters/examples/shebang.wasm`.

use rye_guest::adapter::{
    ElementError, PlanError, PlanInput, Planned, ProcessPlan, RuntimeAdapter, host,
};
use rye_guest::serde_json::{Value, json};

struct Shebang;

impl RuntimeAdapter for Shebang {
    fn plan(input: PlanInput) -> Result<Planned, PlanError> {
        let tool = input
            .chain
            .first()
            .ok_or_else(|| PlanError::Unsupported("an empty chain".into()))?;
        // The host grants a read-only view of the tool's folder.
        let text = std::fs::read_to_string(&tool.path).map_err(|e| {
            PlanError::config(&tool.item_id, format!("cannot read {}: {e}", tool.path))
        })?;
        let line = text
            .lines()
            .next()
            .and_then(|l| l.strip_prefix("#!"))
            .ok_or_else(|| {
                PlanError::config(
                    &tool.item_id,
                    "the tool has no #! line naming its interpreter",
                )
            })?;
        let mut words: Vec<String> = line.split_whitespace().map(str::to_owned).collect();
        if words.is_empty() {
            return Err(PlanError::config(&tool.item_id, "the #! line is empty"));
        }
        let mut program = words.remove(0);
        if program.ends_with("/env") && !words.is_empty() {
            let name = words.remove(0);
            program = host::which(&name).ok_or_else(|| {
                PlanError::InterpreterNotFound(ElementError {
                    item_id: tool.item_id.clone(),
                    message: format!("{name} (from the #! line) is not on the host PATH"),
                })
            })?;
        }

        // The runtime's own config may set the timeout.
        let timeout = input
            .chain
            .iter()
            .skip(1)
            .find_map(|e| {
                let metadata: Value = rye_guest::serde_json::from_str(&e.metadata).ok()?;
                metadata.get("config")?.get("timeout")?.as_f64()
            })
            .unwrap_or(60.0);

        let mut plan = ProcessPlan::new(program.clone())
            .cwd(&input.project_path)
            .stdin(input.parameters.clone().into_bytes())
            .timeout_ms((timeout * 1000.0) as u64)
            .note("shebang", json!({"line": line, "interpreter": program}));
        for word in words {
            plan = plan.arg(word);
        }
        plan = plan.arg(&tool.path);
        for (name, value) in host::environment() {
            plan = plan.env(name, value);
        }
        Ok(plan.into())
    }
}

rye_guest::export_adapter!(Shebang);

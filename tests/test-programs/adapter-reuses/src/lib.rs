//! Plans a call of the tool its parameters `name`, on `mcp/servers/probe`,
//! the parameters as its arguments, and marks it reusable although the
//! name comes from the parameters. With `"ask": true` it also asks the
//! host for the environment first. So a plan the host reuses keeps the
//! first plan's name, and one made anew has the new name.

use rye_guest::adapter::{McpPlan, PlanError, PlanInput, Planned, RuntimeAdapter};
use rye_guest::serde_json::{self, Value};

struct Reuses;

impl RuntimeAdapter for Reuses {
    fn plan(input: PlanInput) -> Result<Planned, PlanError> {
        let parameters: Value = serde_json::from_str(&input.parameters)
            .map_err(|e| PlanError::Unsupported(e.to_string()))?;
        if parameters["ask"] == true {
            let _ = rye_guest::adapter::host::environment();
        }
        Ok(McpPlan {
            server: "mcp/servers/probe".into(),
            tool_name: parameters["name"].as_str().unwrap_or("none").to_owned(),
            arguments: input.parameters,
            startup_timeout_ms: None,
            timeout_ms: Some(1000),
            notes: Vec::new(),
            reusable: true,
        }
        .into())
    }
}

rye_guest::export_adapter!(Reuses);

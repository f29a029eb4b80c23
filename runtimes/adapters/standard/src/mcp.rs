//! A tool call for the MCP primitive, from the chain's merged configuration.
//!
//! | key | meaning |
//! |---|---|
//! | `server` | required: the server item's id (`mcp/servers/<name>`) |
//! | `tool_name` | required: the tool's name on the server |
//! | `timeout` | seconds for the call, default 60 |
//! | `startup_timeout` | seconds to start the server and `initialize`; else the server item's `timeout` |
//!
//! The caller's parameters are the call's arguments, exactly as sent. The
//! host resolves and verifies the server item and reaches the server; the
//! adapter never sees how.
//!
//! The plan is marked reusable when none of those four keys holds a
//! placeholder (so no parameter, and nothing of the environment, went
//! into it) and [`crate::plan::plan`] asked the host nothing: the host may
//! then make the next call of the same chain with other parameters from
//! this plan, without asking again.

use rye_guest::adapter::{McpPlan, PlanError};
use rye_guest::serde_json::{Map, Value};

use crate::plan::{Element, any_text, timeout_secs};
use crate::template::{Vars, lone_placeholder};

/// Seconds a call may take when no element says.
const DEFAULT_TIMEOUT_SECS: f64 = 60.0;

/// Plans the call; `root` is the primitive element, named in errors.
pub fn plan(
    root: &Element,
    config: &Map<String, Value>,
    vars: &Vars,
    parameters: &Map<String, Value>,
) -> Result<McpPlan, PlanError> {
    let fixed = ["server", "tool_name", "timeout", "startup_timeout"]
        .iter()
        .all(|key| {
            config
                .get(*key)
                .is_none_or(|v| !any_text(v, &|text| text.contains(['{', '$'])))
        });
    let text = |key: &str| -> Result<String, PlanError> {
        match config.get(key).map(|v| vars.expand(v)) {
            Some(Value::String(s)) if !s.trim().is_empty() && lone_placeholder(&s).is_none() => {
                Ok(s.trim().to_owned())
            }
            Some(other) => Err(root.config_error(format!("{key} {other} is not a name"))),
            None => Err(root.config_error(format!("no element of the chain gives config.{key}"))),
        }
    };
    let server = text("server")?;
    let tool_name = text("tool_name")?;
    let timeout = timeout_secs(root, config, vars, DEFAULT_TIMEOUT_SECS)?;
    // Unless the chain says, the server item's own `timeout` decides.
    let startup = match config.get("startup_timeout") {
        None => None,
        Some(value) => {
            let mut only = Map::new();
            only.insert("timeout".into(), value.clone());
            Some(timeout_secs(root, &only, vars, DEFAULT_TIMEOUT_SECS)?)
        }
    };
    Ok(McpPlan {
        server,
        tool_name,
        arguments: Value::Object(parameters.clone()).to_string(),
        startup_timeout_ms: startup.map(|secs| (secs * 1000.0).round() as u64),
        timeout_ms: Some((timeout * 1000.0).round() as u64),
        notes: Vec::new(),
        reusable: fixed,
    })
}

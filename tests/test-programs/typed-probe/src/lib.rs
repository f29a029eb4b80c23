//! A typed tool whose parameters say what to do, for the host's tests.

use rye_guest::serde_json::{Value, json};
use rye_guest::tool::{Call, Tool, ToolError};

struct Probe;

impl Tool for Probe {
    fn run(call: Call) -> Result<Value, ToolError> {
        let text = |key: &str| call.parameters[key].as_str().unwrap_or_default().to_owned();
        match call.parameters["do"].as_str() {
            Some("echo") => Ok(json!({
                "echo": call.parameters["value"],
                "item_id": call.item_id,
                "project_path": call.project_path,
            })),
            Some("read") => std::fs::read_to_string(text("path"))
                .map(|content| json!({"content": content}))
                .map_err(|e| match e.kind() {
                    std::io::ErrorKind::NotFound => {
                        ToolError::NotFound(format!("{}: {e}", text("path")))
                    }
                    _ => ToolError::Denied(format!("{}: {e}", text("path"))),
                }),
            Some("fail") => Err(ToolError::Failed(text("message"))),
            Some("loop") => loop {
                std::hint::black_box(0);
            },
            Some("big") => Ok(
                json!({"text": "x".repeat(call.parameters["bytes"].as_u64().unwrap_or(0) as usize)}),
            ),
            Some("panic") => panic!("asked to panic"),
            other => Err(ToolError::InvalidParameters(format!(
                "do is {other:?}; it is echo, read, fail, loop, big or panic"
            ))),
        }
    }
}

rye_guest::export_tool!(Probe);

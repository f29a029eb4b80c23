//! The tools as `tools/list` shows them.

use std::sync::Arc;

use rmcp::model::Tool;
use serde_json::{Value, json};

fn tool(name: &'static str, description: &'static str, schema: Value) -> Tool {
    let Value::Object(schema) = schema else {
        unreachable!("schemas are objects")
    };
    Tool::new(name, description, Arc::new(schema))
}

pub(crate) fn tools() -> Vec<Tool> {
    let kinds = json!({"type": "string", "enum": ["directive", "tool", "knowledge"]});
    vec![
        tool(
            "execute",
            "Run a tool through its chain (runtimes down to the subprocess primitive) and return its data; \
             or return a directive, its inputs filled in, ready to follow; or a knowledge entry's content. \
             Every file involved must be signed by a trusted key. dry_run builds and validates without running.",
            json!({
                "type": "object",
                "properties": {
                    "item_type": kinds,
                    "item_id": {"type": "string", "description": "The item's path under .ai/<kind folder>/ without extension, e.g. rye/bash/bash"},
                    "project_path": {"type": "string", "description": "Absolute path of the project folder (the one holding .ai/)"},
                    "parameters": {"type": "object", "description": "The tool's parameters or the directive's inputs"},
                    "dry_run": {"type": "boolean", "default": false},
                    "target": {"type": "string", "default": "local"},
                    "thread": {"type": "string", "enum": ["inline", "fork"], "default": "inline"},
                    "async": {"type": "boolean", "default": false}
                },
                "required": ["item_type", "item_id", "project_path"]
            }),
        ),
        tool(
            "search",
            "Find directives, tools and knowledge by keyword across the project, user and system spaces. \
             scope is an item kind or all, optionally narrowed to a namespace (tool.rye.core.*). The query \
             matches words as substrings; * and ? are wildcards, \"quoted phrases\" match as written, and \
             AND, OR, NOT and parentheses combine terms; field:term matches one field (name:bash, any metadata \
             key). fields adds {field: query} conditions, filters keeps results by value (!x, >=1.2, lists, \
             date_from/date_to), sort_by orders by score, date or name, fuzzy lets terms match words a few \
             edits away and proximity asks terms to stand near each other. Each result says whether it is \
             signed, with its integrity hash. Results are ranked and deterministic.",
            json!({
                "type": "object",
                "properties": {
                    "scope": {"type": "string"},
                    "query": {"type": "string"},
                    "project_path": {"type": "string"},
                    "source": {"type": "string", "enum": ["project", "user", "system", "local", "registry", "all"], "default": "all"},
                    "limit": {"type": "integer", "default": 10},
                    "offset": {"type": "integer", "default": 0},
                    "fields": {"type": "object", "additionalProperties": {"type": "string"}},
                    "filters": {"type": "object"},
                    "sort_by": {"type": "string", "enum": ["score", "date", "name"], "default": "score"},
                    "fuzzy": {"oneOf": [
                        {"type": "boolean"},
                        {"type": "object", "properties": {"enabled": {"type": "boolean"}, "max_distance": {"type": "integer", "minimum": 0, "maximum": 16}}, "additionalProperties": false}
                    ]},
                    "proximity": {"oneOf": [
                        {"type": "boolean"},
                        {"type": "object", "properties": {"enabled": {"type": "boolean"}, "max_distance": {"type": "integer", "minimum": 0, "maximum": 16}}, "additionalProperties": false}
                    ]}
                },
                "required": ["scope", "query", "project_path"]
            }),
        ),
        tool(
            "load",
            "Show an item: its content, metadata, parsed structure and signature status; optionally copy \
             it into the project or user space (destination).",
            json!({
                "type": "object",
                "properties": {
                    "item_type": kinds,
                    "item_id": {"type": "string"},
                    "project_path": {"type": "string"},
                    "source": {"type": "string", "enum": ["project", "user", "system"]},
                    "destination": {"type": "string", "enum": ["project", "user"]},
                    "force": {"type": "boolean", "default": false}
                },
                "required": ["item_type", "item_id", "project_path"]
            }),
        ),
        tool(
            "sign",
            "Validate an item with its parser and sign it with the user's key (item_id \"*\" signs every \
             item and component of the space). Components (parser, adapter, validator) get a detached signature.",
            json!({
                "type": "object",
                "properties": {
                    "item_type": {"type": "string", "enum": ["directive", "tool", "knowledge", "config", "parser", "adapter", "validator"]},
                    "item_id": {"type": "string"},
                    "project_path": {"type": "string"},
                    "source": {"type": "string", "enum": ["project", "user"], "default": "project"}
                },
                "required": ["item_type", "item_id", "project_path"]
            }),
        ),
    ]
}

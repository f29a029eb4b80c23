//! MCP server items (`tool_type: mcp_server`) and the tool items made from
//! their tools (`tool_type: mcp`).

use rye_guest::serde_json::{Map, Value};

use crate::{Report, kind_of};

const SERVER: &str = "rye/mcp/server";
const TOOL: &str = "rye/mcp/tool";

/// A server item's config: how the host reaches the server.
pub(crate) fn server(document: &Map<String, Value>, report: &mut Report) {
    let Some(Value::Object(config)) = document.get("config") else {
        report.error(SERVER, "a server item needs a config mapping", None);
        return;
    };
    let text = |key: &str| config.get(key).and_then(Value::as_str);
    let transport = match config.get("transport") {
        None => "stdio",
        Some(Value::String(t)) if t == "stdio" || t == "http" => t.as_str(),
        Some(other) => {
            report.error(
                SERVER,
                format!("config.transport is {other}; it is stdio or http"),
                Some("config"),
            );
            return;
        }
    };
    if let Some(timeout) = config.get("timeout")
        && !timeout.as_f64().is_some_and(|t| t > 0.0 && t.is_finite())
    {
        report.error(
            SERVER,
            format!("config.timeout is {timeout}; it is a positive number of seconds"),
            Some("config"),
        );
    }
    let scalars = |key: &str, report: &mut Report| match config.get(key) {
        None | Some(Value::Null) => {}
        Some(Value::Object(map)) => {
            for (name, value) in map {
                if !(value.is_string() || value.is_number() || value.is_boolean()) {
                    report.error(
                        SERVER,
                        format!("config.{key}.{name} is {}, not text", kind_of(value)),
                        Some("config"),
                    );
                }
            }
        }
        Some(other) => report.error(
            SERVER,
            format!("config.{key} is {}, not a mapping", kind_of(other)),
            Some("config"),
        ),
    };
    if transport == "stdio" {
        if text("command").is_none_or(|c| c.trim().is_empty()) {
            report.error(
                SERVER,
                "a stdio server needs config.command",
                Some("config"),
            );
        }
        if let Some(args) = config.get("args")
            && !args
                .as_array()
                .is_some_and(|a| a.iter().all(|v| v.is_string() || v.is_number()))
        {
            report.error(
                SERVER,
                "config.args is not a list of strings",
                Some("config"),
            );
        }
        scalars("env", report);
    } else {
        match text("url") {
            Some(url) if url.starts_with("http://") || url.starts_with("https://") => {}
            Some(url) => report.error(
                SERVER,
                format!("config.url {url:?} is not an http or https URL"),
                Some("config"),
            ),
            None => report.error(SERVER, "an http server needs config.url", Some("config")),
        }
        scalars("headers", report);
        if let Some(Value::Object(headers)) = config.get("headers") {
            for (name, value) in headers {
                let literal = value.as_str().is_some_and(|v| !v.contains("${"));
                if name.eq_ignore_ascii_case("authorization") && literal {
                    report.warning(
                        SERVER,
                        format!(
                            "config.headers.{name} holds a credential in the item; name the variable holding it with bearer_token_env, or write ${{VAR}}"
                        ),
                        Some("config"),
                    );
                }
            }
        }
        if let Some(var) = config.get("bearer_token_env") {
            let plain = var.as_str().is_some_and(|v| {
                v.starts_with(|c: char| c.is_ascii_uppercase() || c == '_')
                    && v.chars()
                        .all(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || c == '_')
            });
            if !plain {
                report.error(
                    SERVER,
                    format!("config.bearer_token_env is {var}; it names a variable (A_NAME)"),
                    Some("config"),
                );
            }
        }
    }
}

/// A tool item on an MCP server: which server and tool, and the pinned
/// definition.
pub(crate) fn tool(document: &Map<String, Value>, report: &mut Report) {
    let config = match document.get("config") {
        Some(Value::Object(config)) => config,
        _ => {
            report.error(TOOL, "an MCP tool item needs a config mapping", None);
            return;
        }
    };
    match config.get("server").and_then(Value::as_str) {
        Some(server) if server.starts_with("mcp/servers/") => {}
        Some(server) => report.warning(
            TOOL,
            format!("config.server {server:?} is not under mcp/servers/, where server items live"),
            Some("config"),
        ),
        None => report.error(TOOL, "config.server names no server item", Some("config")),
    }
    if config
        .get("tool_name")
        .and_then(Value::as_str)
        .is_none_or(|t| t.is_empty())
    {
        report.error(TOOL, "config.tool_name names no tool", Some("config"));
    }
    match document.get("definition_hash") {
        None => report.warning(
            TOOL,
            "no definition_hash: calls are refused until `rye mcp refresh` pins the server's definition",
            None,
        ),
        Some(Value::String(hash))
            if hash.len() == 64 && hash.bytes().all(|b| b.is_ascii_hexdigit()) => {}
        Some(other) => report.error(
            TOOL,
            format!("definition_hash is {other}, not a SHA-256 in hex"),
            Some("definition_hash"),
        ),
    }
    if let Some(schema) = document.get("input_schema")
        && !schema.is_object()
    {
        report.error(
            TOOL,
            format!(
                "input_schema is {}, not a JSON Schema object",
                kind_of(schema)
            ),
            Some("input_schema"),
        );
    }
}

//! Runtime YAML against its schema, `rye/runtime@1`.
//!
//! A runtime may name the schema version it is written for with
//! `schema_version: 1`; without it, version 1 is assumed. A version this
//! validator does not know is an error, so a runtime written for a newer
//! host is not silently half-checked.

use rye_guest::serde_json::{Map, Value};

use crate::{Report, kind_of};

/// The schema versions this validator checks.
const KNOWN_VERSIONS: [u64; 1] = [1];

/// Keys of a runtime, with the JSON kind each must have.
const KEYS: &[(&str, Kind)] = &[
    ("schema_version", Kind::Integer),
    ("version", Kind::String),
    ("tool_type", Kind::String),
    ("executor_id", Kind::StringOrNull),
    ("category", Kind::String),
    ("description", Kind::String),
    ("env_config", Kind::Mapping),
    ("config", Kind::Mapping),
    ("config_resolve", Kind::Mapping),
    ("config_schema", Kind::Any),
    ("anchor", Kind::Mapping),
    ("verify_deps", Kind::Mapping),
    ("execution_params", Kind::Strings),
    ("child_constraints", Kind::Mapping),
    ("inputs", Kind::List),
    ("outputs", Kind::List),
    ("adapter", Kind::String),
    ("walker", Kind::String),
    ("execution_owner", Kind::String),
    ("native_async", Kind::Boolean),
    ("native_resume", Kind::Boolean),
];

const CONFIG_KEYS: &[(&str, Kind)] = &[
    ("command", Kind::String),
    ("args", Kind::Strings),
    ("cwd", Kind::String),
    ("input_data", Kind::String),
    ("env", Kind::StringMap),
    ("timeout", Kind::Number),
];

/// The config of a runtime whose executor is the HTTP primitive.
const HTTP_CONFIG_KEYS: &[(&str, Kind)] = &[
    ("method", Kind::String),
    ("url", Kind::String),
    ("headers", Kind::Any),
    ("body", Kind::Any),
    ("auth", Kind::Mapping),
    ("timeout", Kind::Any),
    ("max_response_bytes", Kind::Any),
    ("max_redirects", Kind::Any),
    ("retry", Kind::Mapping),
    ("allow_private_addresses", Kind::Any),
];

/// The config of a runtime whose executor is the MCP primitive.
const MCP_CONFIG_KEYS: &[(&str, Kind)] = &[
    ("server", Kind::String),
    ("tool_name", Kind::String),
    ("timeout", Kind::Number),
    ("startup_timeout", Kind::Number),
];

/// The config of a runtime whose executor is the state-graph primitive:
/// defaults a graph's own config overrides.
const GRAPH_CONFIG_KEYS: &[(&str, Kind)] = &[
    ("max_steps", Kind::Integer),
    ("max_concurrency", Kind::Integer),
];

/// The config of a runtime whose executor is the component primitive:
/// the limits a tool gets when it asks for none, and the most it may ask.
const COMPONENT_CONFIG_KEYS: &[(&str, Kind)] = &[
    ("deadline_ms", Kind::Integer),
    ("memory_bytes", Kind::Integer),
    ("output_bytes", Kind::Integer),
    ("max_deadline_ms", Kind::Integer),
    ("max_memory_bytes", Kind::Integer),
    ("max_output_bytes", Kind::Integer),
];

const INTERPRETER_KEYS: &[(&str, Kind)] = &[
    ("type", Kind::String),
    ("binary", Kind::String),
    ("candidates", Kind::Strings),
    ("search_paths", Kind::Strings),
    ("search_roots", Kind::Strings),
    ("var", Kind::String),
    ("fallback", Kind::String),
    ("resolve_cmd", Kind::Any),
];

const ANCHOR_KEYS: &[(&str, Kind)] = &[
    ("enabled", Kind::Boolean),
    ("mode", Kind::String),
    ("markers_any", Kind::Strings),
    ("root", Kind::String),
    ("lib", Kind::String),
    ("cwd", Kind::String),
    ("env_paths", Kind::Mapping),
];

const VERIFY_DEPS_KEYS: &[(&str, Kind)] = &[
    ("enabled", Kind::Boolean),
    ("scope", Kind::String),
    ("recursive", Kind::Boolean),
    ("extensions", Kind::Strings),
    ("exclude_dirs", Kind::Strings),
];

#[derive(Clone, Copy)]
enum Kind {
    String,
    StringOrNull,
    Integer,
    Number,
    Boolean,
    Mapping,
    List,
    Strings,
    StringMap,
    Any,
}

impl Kind {
    fn admits(self, value: &Value) -> bool {
        match self {
            Kind::String => value.is_string(),
            Kind::StringOrNull => value.is_string() || value.is_null(),
            Kind::Integer => value.is_u64(),
            Kind::Number => value.is_number(),
            Kind::Boolean => value.is_boolean(),
            Kind::Mapping => value.is_object(),
            Kind::List => value.is_array(),
            Kind::Strings => value
                .as_array()
                .is_some_and(|l| l.iter().all(Value::is_string)),
            Kind::StringMap => value.as_object().is_some_and(|m| {
                m.values()
                    .all(|v| v.is_string() || v.is_number() || v.is_boolean())
            }),
            Kind::Any => true,
        }
    }

    fn describe(self) -> &'static str {
        match self {
            Kind::String => "a string",
            Kind::StringOrNull => "a string or null",
            Kind::Integer => "a whole number",
            Kind::Number => "a number",
            Kind::Boolean => "true or false",
            Kind::Mapping => "a mapping",
            Kind::List => "a list",
            Kind::Strings => "a list of strings",
            Kind::StringMap => "a mapping of names to strings",
            Kind::Any => "anything",
        }
    }
}

const RULE: &str = "rye/runtime/schema";

pub(crate) fn check(document: &Map<String, Value>, report: &mut Report) {
    if let Some(version) = document.get("schema_version") {
        match version.as_u64() {
            Some(v) if KNOWN_VERSIONS.contains(&v) => {}
            _ => {
                report.error(
                    RULE,
                    format!("schema_version {version} is not one this host knows (rye/runtime@1)"),
                    Some("schema_version"),
                );
                return;
            }
        }
    }
    // Python runtimes carry their metadata under dunder names; the schema
    // speaks of the YAML form.
    if document.keys().any(|k| k.starts_with("__")) {
        return;
    }
    keys(document, KEYS, "", report);
    if let Some(Value::Object(config)) = document.get("config") {
        let known = match document.get("executor_id").and_then(Value::as_str) {
            Some("rye/core/primitives/http_client") => HTTP_CONFIG_KEYS,
            Some("rye/core/primitives/mcp_client") => MCP_CONFIG_KEYS,
            Some("rye/core/primitives/state_graph") => GRAPH_CONFIG_KEYS,
            Some("rye/core/primitives/wasm_component") => COMPONENT_CONFIG_KEYS,
            _ => CONFIG_KEYS,
        };
        keys(config, known, "config.", report);
    } else if !document.contains_key("adapter") {
        report.error(
            RULE,
            "a runtime needs a config (what to run) or an adapter (a component that plans it)",
            None,
        );
    }
    if !document.contains_key("executor_id") {
        report.error(RULE, "a runtime must name its executor (executor_id)", None);
    }
    if let Some(Value::Object(env_config)) = document.get("env_config") {
        if let Some(interpreter) = env_config.get("interpreter") {
            match interpreter {
                Value::Object(interpreter) => {
                    keys(
                        interpreter,
                        INTERPRETER_KEYS,
                        "env_config.interpreter.",
                        report,
                    );
                    if !interpreter.contains_key("var") {
                        report.error(
                            RULE,
                            "env_config.interpreter needs var",
                            Some("interpreter"),
                        );
                    }
                    let kind = interpreter
                        .get("type")
                        .and_then(Value::as_str)
                        .unwrap_or("system_binary");
                    match kind {
                        "local_binary" | "system_binary" if !interpreter.contains_key("binary") => {
                            report.error(
                                RULE,
                                format!("a {kind} interpreter needs binary"),
                                Some("interpreter"),
                            )
                        }
                        "command" if !interpreter.contains_key("resolve_cmd") => report.error(
                            RULE,
                            "a command interpreter needs resolve_cmd",
                            Some("interpreter"),
                        ),
                        "local_binary" | "system_binary" | "command" => {}
                        other => report.error(
                            RULE,
                            format!(
                                "env_config.interpreter.type {other:?} is not local_binary, system_binary or command"
                            ),
                            Some("type"),
                        ),
                    }
                }
                other => report.error(
                    RULE,
                    format!(
                        "env_config.interpreter is {}, not a mapping",
                        kind_of(other)
                    ),
                    Some("interpreter"),
                ),
            }
        }
        if let Some(env) = env_config.get("env")
            && !Kind::StringMap.admits(env)
        {
            report.error(
                RULE,
                "env_config.env must be a mapping of names to strings",
                Some("env"),
            );
        }
    }
    if let Some(Value::Object(anchor)) = document.get("anchor") {
        keys(anchor, ANCHOR_KEYS, "anchor.", report);
        if let Some(mode) = anchor.get("mode").and_then(Value::as_str)
            && !matches!(mode, "auto" | "always" | "never")
        {
            report.error(
                RULE,
                format!("anchor.mode {mode:?} is not auto, always or never"),
                Some("mode"),
            );
        }
    }
    if let Some(Value::Object(deps)) = document.get("verify_deps") {
        keys(deps, VERIFY_DEPS_KEYS, "verify_deps.", report);
    }
    if let Some(Value::Object(resolve)) = document.get("config_resolve") {
        if !resolve.get("path").is_some_and(Value::is_string) {
            report.error(RULE, "config_resolve needs a path", Some("config_resolve"));
        }
        if let Some(mode) = resolve.get("mode").and_then(Value::as_str)
            && !matches!(mode, "deep_merge" | "first_match")
        {
            report.error(
                RULE,
                format!("config_resolve.mode {mode:?} is not deep_merge or first_match"),
                Some("config_resolve"),
            );
        }
    }
}

/// Checks the kinds of the known keys of `map`; an unknown key is a
/// warning (a typo, or a key for another host).
fn keys(map: &Map<String, Value>, known: &[(&str, Kind)], prefix: &str, report: &mut Report) {
    for (key, value) in map {
        match known.iter().find(|(k, _)| k == key) {
            Some((_, kind)) if !kind.admits(value) => report.error(
                RULE,
                format!(
                    "{prefix}{key} is {}; rye/runtime@1 wants {}",
                    kind_of(value),
                    kind.describe()
                ),
                Some(key),
            ),
            Some(_) => {}
            None => report.warning(
                RULE,
                format!("{prefix}{key} is not a key of rye/runtime@1"),
                Some(key),
            ),
        }
    }
}

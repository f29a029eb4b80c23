//! Structure rules per item kind (the original system's sign-time
//! `validation_schema`): tool metadata, directive fields, knowledge
//! metadata, config items.

use rye_guest::serde_json::{Map, Value};
use rye_guest::validator::{ConfigSchema, ItemKind};

use crate::{Report, first, is_semver, kind_of};

pub(crate) fn check(kind: ItemKind, id: &str, document: &Map<String, Value>, report: &mut Report) {
    let (folder, stem) = match id.rsplit_once('/') {
        Some((folder, stem)) => (folder, stem),
        None => ("", id),
    };
    match kind {
        ItemKind::Tool => {
            tool(folder, document, report);
            if stem.ends_with(".config-schema") {
                config_schema_tool(document, report);
            }
        }
        ItemKind::Directive => directive(folder, stem, document, report),
        ItemKind::Knowledge => knowledge(folder, stem, document, report),
        ItemKind::Config => config(folder, stem, document, report),
    }
}

fn version(
    rule: &str,
    document: &Map<String, Value>,
    keys: &[&str],
    report: &mut Report,
    what: &str,
) {
    match first(document, keys) {
        None => report.warning(
            rule,
            format!("the {what} declares no version (`{}`)", keys[0]),
            None,
        ),
        Some((key, Value::String(v))) if is_semver(v) => {
            let _ = key;
        }
        Some((key, Value::String(v))) => report.error(
            rule,
            format!("{key} {v:?} is not a version of the form MAJOR.MINOR.PATCH"),
            Some(key),
        ),
        Some((key, other)) => report.error(
            rule,
            format!(
                "{key} is {}; write it as a string of the form \"1.0.0\"",
                kind_of(other)
            ),
            Some(key),
        ),
    }
}

fn category(document: &Map<String, Value>, keys: &[&str], folder: &str, report: &mut Report) {
    match first(document, keys) {
        Some((key, Value::String(c))) if c != folder => report.warning(
            "rye/category",
            format!("{key} {c:?} does not match the item's folder {folder:?}"),
            Some(key),
        ),
        Some((key, other)) if !other.is_string() && !other.is_null() => report.error(
            "rye/category",
            format!("{key} is {}, not a string", kind_of(other)),
            Some(key),
        ),
        _ => {}
    }
}

fn text_field(
    rule: &str,
    document: &Map<String, Value>,
    keys: &[&str],
    report: &mut Report,
    what: &str,
) {
    match first(document, keys) {
        None => report.warning(rule, format!("no {what} (`{}`)", keys[0]), None),
        Some((key, Value::String(s))) if s.trim().is_empty() => {
            report.warning(rule, format!("{key} is empty"), Some(key))
        }
        Some((_, Value::String(_))) => {}
        Some((key, other)) => report.error(
            rule,
            format!("{key} is {}, not a string", kind_of(other)),
            Some(key),
        ),
    }
}

fn tool(folder: &str, document: &Map<String, Value>, report: &mut Report) {
    version(
        "rye/tool/version",
        document,
        &["__version__", "version"],
        report,
        "tool",
    );
    category(document, &["__category__", "category"], folder, report);
    let tool_type = match first(document, &["__tool_type__", "tool_type"]) {
        None => {
            report.warning("rye/tool/tool-type", "no tool type (`__tool_type__`)", None);
            None
        }
        Some((_, Value::String(t))) => Some(t.as_str()),
        Some((key, other)) => {
            report.error(
                "rye/tool/tool-type",
                format!("{key} is {}, not a string", kind_of(other)),
                Some(key),
            );
            None
        }
    };
    match first(document, &["__executor_id__", "executor_id"]) {
        None => report.warning(
            "rye/tool/executor-id",
            "no executor id (`__executor_id__`); write null for a primitive",
            None,
        ),
        Some((_, Value::String(_) | Value::Null)) => {}
        Some((key, other)) => report.error(
            "rye/tool/executor-id",
            format!(
                "{key} is {}; it names an executor (a string) or is null",
                kind_of(other)
            ),
            Some(key),
        ),
    }
    if first(
        document,
        &[
            "__tool_description__",
            "tool_description",
            "description",
            "__docstring__",
        ],
    )
    .is_none()
    {
        report.warning(
            "rye/tool/description",
            "no description (`__tool_description__`, `description` or a docstring)",
            None,
        );
    }
    for keys in [
        ["ENV_CONFIG", "env_config"],
        ["CONFIG", "config"],
        ["CONFIG_RESOLVE", "config_resolve"],
    ] {
        if let Some((key, value)) = first(document, &keys)
            && !value.is_object()
            && !value.is_null()
        {
            report.error(
                "rye/tool/field-type",
                format!("{key} is {}, not a mapping", kind_of(value)),
                Some(key),
            );
        }
    }
    if let Some((key, schema)) = first(document, &["CONFIG_SCHEMA", "config_schema"]) {
        schema_findings(key, schema, report);
    }
    match tool_type {
        Some("runtime") => crate::runtime::check(document, report),
        Some("mcp_server") => crate::mcp::server(document, report),
        Some("mcp") => crate::mcp::tool(document, report),
        Some("wasm_component") => crate::component::check(document, report),
        _ => {}
    }
}

/// Findings about a JSON Schema written under `key`.
fn schema_findings(key: &str, schema: &Value, report: &mut Report) {
    use crate::schema::Kind;
    for problem in crate::schema::check(schema) {
        let (rule, is_error, what) = match problem.kind {
            Kind::Invalid => ("rye/tool/config-schema", true, "is not a valid JSON Schema"),
            Kind::Unsatisfiable => (
                "rye/tool/config-schema-unsatisfiable",
                true,
                "can never be satisfied",
            ),
            Kind::TooDeep => (
                "rye/tool/config-schema-depth",
                false,
                "was checked only in part",
            ),
            Kind::UnknownDialect => ("rye/tool/config-schema-dialect", false, "was not checked"),
        };
        let message = format!("{key} {what}: {}", problem.message);
        if is_error {
            report.error_in(rule, message, key, &problem.at);
        } else {
            report.warning_in(rule, message, key, &problem.at);
        }
    }
}

/// A `<name>.config-schema` tool: the schema of config items named
/// `<name>`, under `schema` (or `config_schema`).
fn config_schema_tool(document: &Map<String, Value>, report: &mut Report) {
    match first(document, &["schema", "config_schema"]) {
        None => report.error(
            "rye/tool/config-schema",
            "a config schema tool needs the schema under `schema`",
            None,
        ),
        Some(("schema", schema)) => schema_findings("schema", schema, report),
        // `config_schema` is checked with the tool's other fields.
        Some(_) => {}
    }
}

fn directive(folder: &str, stem: &str, document: &Map<String, Value>, report: &mut Report) {
    match document.get("name") {
        None => report.error(
            "rye/directive/name",
            "the <directive> element has no name",
            None,
        ),
        Some(Value::String(name)) => {
            if name != stem {
                report.error(
                    "rye/directive/name",
                    format!("name {name:?} does not match the file name {stem:?}"),
                    Some("name"),
                );
            }
            if !is_snake_case(name) {
                report.warning(
                    "rye/directive/name",
                    format!("name {name:?} is not snake_case"),
                    Some("name"),
                );
            }
        }
        Some(other) => report.error(
            "rye/directive/name",
            format!("name is {}, not a string", kind_of(other)),
            Some("name"),
        ),
    }
    version(
        "rye/directive/version",
        document,
        &["version"],
        report,
        "directive",
    );
    text_field(
        "rye/directive/description",
        document,
        &["description"],
        report,
        "description",
    );
    text_field(
        "rye/directive/author",
        document,
        &["author"],
        report,
        "author",
    );
    category(document, &["category"], folder, report);
    if let Some(inputs) = document.get("inputs") {
        match inputs {
            Value::Array(inputs) => {
                for (i, input) in inputs.iter().enumerate() {
                    let field = |k: &str| {
                        input
                            .get(k)
                            .and_then(Value::as_str)
                            .filter(|s| !s.is_empty())
                    };
                    if field("name").is_none() {
                        report.error(
                            "rye/directive/inputs",
                            format!("input {} has no name", i + 1),
                            Some("input"),
                        );
                    } else if field("type").is_none() {
                        report.error(
                            "rye/directive/inputs",
                            format!("input {:?} has no type", field("name").unwrap_or_default()),
                            Some("input"),
                        );
                    }
                }
            }
            other => report.error(
                "rye/directive/inputs",
                format!("inputs is {}, not a list", kind_of(other)),
                Some("inputs"),
            ),
        }
    }
    if let Some(permissions) = document.get("permissions") {
        match permissions {
            Value::Array(permissions) => {
                if permissions.iter().any(|p| {
                    p.get("tag")
                        .and_then(Value::as_str)
                        .is_none_or(str::is_empty)
                }) {
                    report.error(
                        "rye/directive/permissions",
                        "every permission needs a tag",
                        Some("permissions"),
                    );
                }
            }
            other => report.error(
                "rye/directive/permissions",
                format!("permissions is {}, not a list", kind_of(other)),
                Some("permissions"),
            ),
        }
    }
}

fn knowledge(folder: &str, stem: &str, document: &Map<String, Value>, report: &mut Report) {
    // A knowledge entry may be named by its whole id as well as its stem.
    let whole = format!("{folder}/{stem}");
    file_name("rye/knowledge/name", document, &[stem, &whole], report);
    text_field("rye/knowledge/title", document, &["title"], report, "title");
    text_field(
        "rye/knowledge/entry-type",
        document,
        &["entry_type"],
        report,
        "entry type",
    );
    version(
        "rye/knowledge/version",
        document,
        &["version"],
        report,
        "entry",
    );
    category(document, &["category"], folder, report);
    if let Some(tags) = document.get("tags")
        && !(tags.is_null()
            || tags
                .as_array()
                .is_some_and(|t| t.iter().all(Value::is_string)))
    {
        report.error(
            "rye/knowledge/tags",
            format!("tags is {}; write a list of words", kind_of(tags)),
            Some("tags"),
        );
    }
}

fn config(folder: &str, stem: &str, document: &Map<String, Value>, report: &mut Report) {
    file_name("rye/config/name", document, &[stem], report);
    version(
        "rye/config/version",
        document,
        &["version"],
        report,
        "config",
    );
    category(document, &["category"], folder, report);
}

/// A config item's content against its schema. The item's own metadata
/// (`name`, `category`, `version`, `description`) is allowed whatever the
/// schema says, as every config item may carry it.
pub(crate) fn config_content(
    schema: &ConfigSchema,
    document: &Map<String, Value>,
    report: &mut Report,
) -> Result<(), String> {
    let parsed: Value = rye_guest::serde_json::from_str(&schema.schema)
        .map_err(|e| format!("the schema of {} is not JSON: {e}", schema.item_id))?;
    let content: Map<String, Value> = document
        .iter()
        .filter(|(k, _)| !METADATA.contains(&k.as_str()) || declares(&parsed, k))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    for problem in crate::instance::problems(&parsed, &Value::Object(content)) {
        let rule = if problem.unchecked {
            "rye/config/schema-unchecked"
        } else {
            "rye/config/schema"
        };
        let place = if problem.at.is_empty() {
            "/"
        } else {
            &problem.at
        };
        let message = format!("{place} {} (schema {})", problem.message, schema.item_id);
        // Place the finding at the top-level key it is about.
        let key = problem.at.strip_prefix('/').map(|rest| {
            rest.split('/')
                .next()
                .unwrap_or(rest)
                .replace("~1", "/")
                .replace("~0", "~")
        });
        match (key, problem.unchecked) {
            (Some(key), false) => {
                let inner = problem.at[1 + escaped_len(&key)..].to_owned();
                report.error_in(rule, message, &key, &inner);
            }
            (Some(key), true) => {
                let inner = problem.at[1 + escaped_len(&key)..].to_owned();
                report.warning_in(rule, message, &key, &inner);
            }
            (None, false) => report.error(rule, message, None),
            (None, true) => report.warning(rule, message, None),
        }
    }
    Ok(())
}

/// The metadata keys of a config item.
const METADATA: [&str; 4] = ["name", "category", "version", "description"];

/// Whether the schema speaks of property `name`, in which case it checks it.
fn declares(schema: &Value, name: &str) -> bool {
    schema
        .get("properties")
        .and_then(Value::as_object)
        .is_some_and(|p| p.contains_key(name))
}

/// The length of `key` as a JSON pointer token.
fn escaped_len(key: &str) -> usize {
    key.replace('~', "~0").replace('/', "~1").len()
}

/// `name` should be one of `accepted` (the file's stem first): missing
/// or different is a warning, not a string an error.
fn file_name(rule: &str, document: &Map<String, Value>, accepted: &[&str], report: &mut Report) {
    match document.get("name") {
        None => report.warning(rule, "no name (`name`)", None),
        Some(Value::String(name)) if !accepted.contains(&name.as_str()) => report.warning(
            rule,
            format!(
                "name {name:?} does not match the file name {:?}",
                accepted[0]
            ),
            Some("name"),
        ),
        Some(Value::String(_)) => {}
        Some(other) => report.error(
            rule,
            format!("name is {}, not a string", kind_of(other)),
            Some("name"),
        ),
    }
}

fn is_snake_case(name: &str) -> bool {
    let mut bytes = name.bytes();
    bytes.next().is_some_and(|b| b.is_ascii_lowercase())
        && bytes.all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_')
}

#[cfg(test)]
mod tests {
    use super::*;
    use rye_guest::serde_json::json;

    fn run(kind: ItemKind, id: &str, content: &str, document: Value) -> Vec<(String, String)> {
        let mut report = Report::new(content);
        check(kind, id, document.as_object().unwrap(), &mut report);
        report
            .found
            .into_iter()
            .map(|d| {
                let severity = match d.severity {
                    rye_guest::validator::Severity::Error => "Error",
                    rye_guest::validator::Severity::Warning => "Warning",
                    rye_guest::validator::Severity::Info => "Info",
                };
                (severity.to_owned(), d.rule)
            })
            .collect()
    }

    #[test]
    fn a_complete_tool_passes() {
        let found = run(
            ItemKind::Tool,
            "demo/text/count",
            "",
            json!({"__version__": "1.0.0", "__tool_type__": "python", "__executor_id__": "x",
                   "__category__": "demo/text", "__docstring__": "Count.",
                   "CONFIG_SCHEMA": {"type": "object", "properties": {"text": {"type": "string"}}}}),
        );
        assert!(found.is_empty(), "{found:?}");
    }

    #[test]
    fn wrong_values_are_errors_and_missing_ones_warnings() {
        let found = run(
            ItemKind::Tool,
            "demo/count",
            "__version__ = '1.0'\n",
            json!({"__version__": "1.0", "__executor_id__": 3, "CONFIG_SCHEMA": {"type": "text"}}),
        );
        let rules: Vec<&str> = found.iter().map(|(_, r)| r.as_str()).collect();
        assert!(rules.contains(&"rye/tool/version"));
        assert!(rules.contains(&"rye/tool/executor-id"));
        assert!(rules.contains(&"rye/tool/config-schema"));
        assert!(rules.contains(&"rye/tool/tool-type"));
        assert!(
            found
                .iter()
                .any(|(s, r)| s == "Warning" && r == "rye/tool/description")
        );
    }

    #[test]
    fn mcp_server_and_tool_items() {
        let base = |config: Value| {
            json!({"version": "1.0.0", "tool_type": "mcp_server", "executor_id": null,
                   "category": "mcp/servers", "description": "A server.", "config": config})
        };
        let rules = |document: Value| run(ItemKind::Tool, "mcp/servers/notes", "", document);
        assert!(
            rules(base(
                json!({"command": "python", "args": ["s.py"], "env": {"PATH": "${PATH}"}})
            ))
            .is_empty()
        );
        assert!(rules(base(json!({"transport": "http", "url": "https://x.test/mcp", "bearer_token_env": "TOKEN"}))).is_empty());
        for (config, severity) in [
            (json!({"args": []}), "Error"),
            (json!({"transport": "carrier-pigeon"}), "Error"),
            (json!({"transport": "http", "url": "ftp://x"}), "Error"),
            (
                json!({"transport": "http", "url": "https://x.test", "bearer_token_env": "lower"}),
                "Error",
            ),
            (json!({"command": "x", "env": {"A": ["list"]}}), "Error"),
            (json!({"command": "x", "timeout": 0}), "Error"),
            (
                json!({"transport": "http", "url": "https://x.test", "headers": {"Authorization": "Bearer s3cret"}}),
                "Warning",
            ),
        ] {
            let found = rules(base(config.clone()));
            assert!(
                found.contains(&(severity.to_owned(), "rye/mcp/server".to_owned())),
                "{config}: {found:?}"
            );
        }

        let tool = |extra: Value| {
            let mut document = json!({"version": "1.0.0", "tool_type": "mcp", "category": "mcp/notes",
                "executor_id": "rye/core/runtimes/mcp/stdio", "description": "Add.",
                "config": {"server": "mcp/servers/notes", "tool_name": "add"},
                "input_schema": {"type": "object"}, "definition_hash": "a".repeat(64)});
            for (k, v) in extra.as_object().unwrap() {
                document[k] = v.clone();
            }
            run(ItemKind::Tool, "mcp/notes/add", "", document)
        };
        assert!(tool(json!({})).is_empty(), "{:?}", tool(json!({})));
        assert!(
            tool(json!({"definition_hash": "xyz"}))
                .contains(&("Error".into(), "rye/mcp/tool".into()))
        );
        assert!(
            tool(json!({"config": {"server": "mcp/servers/notes"}}))
                .contains(&("Error".into(), "rye/mcp/tool".into()))
        );
        assert!(
            tool(json!({"input_schema": "text"}))
                .contains(&("Error".into(), "rye/mcp/tool".into()))
        );
    }

    #[test]
    fn component_tools_name_their_wasm_and_declare_capabilities_in_shape() {
        let tool = |config: Value| {
            run(
                ItemKind::Tool,
                "demo/find",
                "",
                json!({"version": "1.0.0", "tool_type": "wasm_component", "category": "demo",
                       "executor_id": "rye/core/runtimes/wasm/component",
                       "description": "Finds.", "config": config}),
            )
        };
        let good = json!({"component": "find.wasm", "capabilities": {
            "files": [{"path": "{project_path}", "access": "read"},
                      {"path": "{project_path}/.ai/state/find", "access": "write"}],
            "env": ["LANG"],
            "network": {"hosts": ["api.example.com", "127.0.0.1:8080", "*.example.org"]},
            "limits": {"deadline_ms": 2000}}});
        assert!(tool(good.clone()).is_empty(), "{:?}", tool(good));
        for bad in [
            json!({}),
            json!({"component": "../find.wasm"}),
            json!({"component": "find.py"}),
            json!({"component": "f.wasm", "capabilities": ["files"]}),
            json!({"component": "f.wasm", "capabilities": {"sockets": true}}),
            json!({"component": "f.wasm", "capabilities": {"files": [{"path": "/etc"}]}}),
            json!({"component": "f.wasm", "capabilities": {"files": [{"path": "{project_path}/.."}]}}),
            json!({"component": "f.wasm", "capabilities": {"files": [{"path": "{tool_dir}", "access": "all"}]}}),
            json!({"component": "f.wasm", "capabilities": {"env": ["A-B"]}}),
            json!({"component": "f.wasm", "capabilities": {"network": {"hosts": ["https://x.test"]}}}),
            json!({"component": "f.wasm", "capabilities": {"network": {"hosts": "x.test"}}}),
            json!({"component": "f.wasm", "capabilities": {"network": true}}),
            json!({"component": "f.wasm", "capabilities": {"limits": {"deadline_ms": 0}}}),
            json!({"component": "f.wasm", "capabilities": {"limits": {"cpu": 1}}}),
        ] {
            assert!(
                tool(bad.clone()).contains(&("Error".into(), "rye/tool/component".into())),
                "{bad}: {:?}",
                tool(bad.clone())
            );
        }
    }

    #[test]
    fn runtimes_of_the_http_and_mcp_primitives_have_their_own_config_keys() {
        let runtime = |executor: &str, config: Value| {
            run(
                ItemKind::Tool,
                "demo/rt",
                "",
                json!({"version": "1.0.0", "tool_type": "runtime",
                "executor_id": executor, "category": "demo", "description": "A runtime.", "config": config}),
            )
        };
        let http = json!({"method": "GET", "timeout": 30, "max_response_bytes": 10, "allow_private_addresses": ["127.0.0.1"]});
        assert!(runtime("rye/core/primitives/http_client", http.clone()).is_empty());
        assert!(
            !runtime("rye/core/primitives/execute", http).is_empty(),
            "not process keys"
        );
        assert!(
            runtime(
                "rye/core/primitives/mcp_client",
                json!({"timeout": 60, "startup_timeout": 5})
            )
            .is_empty()
        );
    }

    #[test]
    fn directive_name_must_match_the_file() {
        let found = run(
            ItemKind::Directive,
            "demo/greet",
            "",
            json!({"name": "hello", "version": "1.0.0", "description": "d", "author": "a",
                   "inputs": [{"name": "who"}]}),
        );
        assert!(found.contains(&("Error".into(), "rye/directive/name".into())));
        assert!(found.contains(&("Error".into(), "rye/directive/inputs".into())));
    }
}

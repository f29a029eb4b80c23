//! From a parser's document to an item's metadata.
//!
//! Parsers report what a file says in the file's own terms (`__version__`
//! in Python, `version` in YAML). The host maps those to one set of fields
//! per kind; for each field the first key present wins:
//!
//! | kind      | field             | keys                                                          |
//! |-----------|-------------------|---------------------------------------------------------------|
//! | all       | `name`            | directive/knowledge `name`; tools always the file stem        |
//! | all       | `category`        | `__category__`, `category`; else the id's folder              |
//! | all       | `version`         | `__version__`, `version`                                      |
//! | tool      | `description`     | `__tool_description__`, `tool_description`, `description`, `__docstring__` |
//! | tool      | `tool_type`       | `__tool_type__`, `tool_type`                                  |
//! | tool      | `executor_id`     | `__executor_id__`, `executor_id` (`null`: a chain root)       |
//! | tool      | `config_schema`, `env_config`, `config`, `config_resolve` | `CONFIG_SCHEMA`… or the bare lowercase key |
//! | tool      | `anchor`, `verify_deps`, `execution_params`, `child_constraints`, `inputs`, `outputs`, `adapter`, `input_schema`, `definition_hash`, `permissions`, `env_requires`, `limits`, `walker` | bare keys |
//! | directive | `description`, `author`, `title` | same keys                                        |
//! | knowledge | `title`, `entry_type`, `tags`, `description`, `author`, `created_at` | same keys     |

use serde_json::{Map, Value};

use rye_components::PluginKind;
use rye_space::ItemKind;

const TOOL_FIELDS: &[(&str, &[&str])] = &[
    ("version", &["__version__", "version"]),
    ("tool_type", &["__tool_type__", "tool_type"]),
    ("executor_id", &["__executor_id__", "executor_id"]),
    (
        "description",
        &[
            "__tool_description__",
            "tool_description",
            "description",
            "__docstring__",
        ],
    ),
    ("config_schema", &["CONFIG_SCHEMA", "config_schema"]),
    ("env_config", &["ENV_CONFIG", "env_config"]),
    ("config", &["CONFIG", "config"]),
    ("config_resolve", &["CONFIG_RESOLVE", "config_resolve"]),
    ("anchor", &["anchor"]),
    ("verify_deps", &["verify_deps"]),
    ("execution_params", &["execution_params"]),
    ("child_constraints", &["child_constraints"]),
    ("inputs", &["inputs"]),
    ("outputs", &["outputs"]),
    ("adapter", &["adapter"]),
    ("input_schema", &["input_schema"]),
    ("definition_hash", &["definition_hash"]),
    ("permissions", &["permissions"]),
    ("env_requires", &["env_requires"]),
    ("limits", &["limits"]),
    ("walker", &["walker"]),
];

const DIRECTIVE_FIELDS: &[(&str, &[&str])] = &[
    ("version", &["version"]),
    ("title", &["title"]),
    ("description", &["description"]),
    ("author", &["author"]),
];

const KNOWLEDGE_FIELDS: &[(&str, &[&str])] = &[
    ("version", &["version"]),
    ("title", &["title"]),
    ("entry_type", &["entry_type"]),
    ("description", &["description"]),
    ("tags", &["tags"]),
    ("author", &["author"]),
    ("created_at", &["created_at"]),
];

/// The metadata of an item with id `id` whose parser produced `document`.
pub fn normalize(kind: ItemKind, id: &str, document: &Map<String, Value>) -> Map<String, Value> {
    let stem = id.rsplit('/').next().unwrap_or(id);
    let folder = id.rsplit_once('/').map_or("", |(folder, _)| folder);
    let mut out = Map::new();

    let name = match kind {
        ItemKind::Tool => Value::from(stem),
        _ => document
            .get("name")
            .filter(|v| v.is_string())
            .cloned()
            .unwrap_or_else(|| Value::from(stem)),
    };
    out.insert("name".into(), name);
    let category = first(document, &["__category__", "category"])
        .filter(|v| !v.is_null())
        .cloned()
        .unwrap_or_else(|| Value::from(folder));
    out.insert("category".into(), category);

    let fields = match kind {
        ItemKind::Tool => TOOL_FIELDS,
        ItemKind::Directive => DIRECTIVE_FIELDS,
        ItemKind::Knowledge | ItemKind::Config => KNOWLEDGE_FIELDS,
    };
    for (field, keys) in fields {
        if let Some(value) = first(document, keys) {
            out.insert((*field).into(), value.clone());
        }
    }
    if kind == ItemKind::Tool && !out.contains_key("executor_id") {
        out.insert("executor_id".into(), Value::Null);
    }
    if let Some(Value::String(description)) = out.get_mut("description") {
        *description = first_paragraph(description);
    }
    out
}

/// A tool's `field` (`tool_type`, `executor_id`, …) as its document writes
/// it, under whichever of the field's keys comes first.
pub(crate) fn tool_field<'a>(document: &'a Map<String, Value>, field: &str) -> Option<&'a Value> {
    TOOL_FIELDS
        .iter()
        .find(|(name, _)| *name == field)
        .and_then(|(_, keys)| first(document, keys))
}

fn first<'a>(document: &'a Map<String, Value>, keys: &[&str]) -> Option<&'a Value> {
    keys.iter().find_map(|k| document.get(*k))
}

/// A docstring's first paragraph, lines joined: what a listing shows.
fn first_paragraph(text: &str) -> String {
    text.trim()
        .split("\n\n")
        .next()
        .unwrap_or_default()
        .lines()
        .map(str::trim)
        .collect::<Vec<_>>()
        .join(" ")
}

/// An item kind as the component contract names it.
pub(crate) fn plugin_kind(kind: ItemKind) -> PluginKind {
    match kind {
        ItemKind::Directive => PluginKind::Directive,
        ItemKind::Tool => PluginKind::Tool,
        ItemKind::Knowledge => PluginKind::Knowledge,
        ItemKind::Config => PluginKind::Config,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn map(v: Value) -> Map<String, Value> {
        v.as_object().unwrap().clone()
    }

    #[test]
    fn tool_dunders_win_over_bare_keys() {
        let doc = map(
            json!({"__version__": "2.0.0", "version": "1.0.0", "__docstring__": "Counts.\n\nMore.", "CONFIG": {"a": 1}}),
        );
        let m = normalize(ItemKind::Tool, "demo/text/count", &doc);
        assert_eq!(
            Value::Object(m),
            json!({"name": "count", "category": "demo/text", "version": "2.0.0", "executor_id": null, "description": "Counts.", "config": {"a": 1}})
        );
    }

    #[test]
    fn knowledge_keeps_its_own_name() {
        let doc =
            map(json!({"name": "retry-policy", "title": "Retry", "tags": ["http"], "body": "x"}));
        let m = normalize(ItemKind::Knowledge, "patterns/retry", &doc);
        assert_eq!(
            Value::Object(m),
            json!({"name": "retry-policy", "category": "patterns", "title": "Retry", "tags": ["http"]})
        );
    }
}

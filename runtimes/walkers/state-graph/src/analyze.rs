//! A graph's static analysis (`validate: true`): what would stop it, and
//! what looks wrong, without running anything.
//!
//! Errors: no `permissions`; `start` missing or naming no node; a `next`,
//! edge or `on_error` naming no node; a `foreach` without `over` or
//! `action`, or whose action asks to run `async`; a `tolerated_failures`
//! that is neither a count nor a percentage; a node that is no map or of
//! an unknown type; a hook with an unknown event or no action. Warnings: nodes no path from `start` reaches; a
//! `${state.X}` no one assigns; a state key assigned and never read; a
//! node key the format does not have.

use std::collections::{BTreeSet, VecDeque};

use rye_guest::serde_json::{Map, Value, json};

/// The keys a node may have.
const NODE_KEYS: [&str; 21] = [
    "type",
    "action",
    "assign",
    "next",
    "on_error",
    "over",
    "as",
    "collect",
    "parallel",
    "max_concurrency",
    "env_requires",
    "cache_result",
    "remote",
    "output",
    "comment",
    "description",
    "retry",
    "timeout",
    "prompt",
    "required",
    "tolerated_failures",
];

/// The events a hook may run on.
pub const HOOK_EVENTS: [&str; 5] = [
    "graph_started",
    "after_step",
    "error",
    "limit",
    "graph_completed",
];

/// State keys every run has without an `assign`.
const IMPLICIT: [&str; 3] = ["inputs", "_last_error", "_retries"];

pub fn analyze(graph: &Value) -> Value {
    let mut errors: Vec<String> = Vec::new();
    let mut warnings: Vec<String> = Vec::new();
    if !graph.get("permissions").is_some_and(Value::is_array) {
        errors.push("permissions are missing: a graph declares the capabilities it needs".into());
    }
    let empty = Map::new();
    let config = graph.get("config").and_then(Value::as_object);
    if config.is_none() {
        errors.push("config is missing or not a map".into());
    }
    let config = config.unwrap_or(&empty);
    let nodes = match config.get("nodes") {
        Some(Value::Object(nodes)) => nodes,
        _ => {
            errors.push("config.nodes is missing or not a map".into());
            &empty
        }
    };
    let start = config.get("start").and_then(Value::as_str);
    match start {
        None => errors.push("config.start is missing".into()),
        Some(start) if !nodes.contains_key(start) => {
            errors.push(format!("config.start names {start:?}, which is no node"));
        }
        Some(_) => {}
    }

    let mut assigned: BTreeSet<String> = IMPLICIT.iter().map(|k| (*k).to_owned()).collect();
    if let Some(Value::Object(state)) = config.get("state") {
        assigned.extend(state.keys().cloned());
    }
    let mut read: BTreeSet<String> = BTreeSet::new();
    for (name, node) in nodes {
        let Value::Object(node) = node else {
            errors.push(format!("node {name:?} is not a map"));
            continue;
        };
        for key in node.keys() {
            if !NODE_KEYS.contains(&key.as_str()) {
                warnings.push(format!(
                    "node {name:?} has a key the format does not know: {key:?}"
                ));
            }
        }
        match node.get("type").and_then(Value::as_str) {
            None | Some("action" | "return" | "gate" | "interrupt") => {}
            Some("foreach") => {
                if !node.contains_key("over") {
                    errors.push(format!("foreach node {name:?} has no over"));
                }
                match node.get("action") {
                    None => errors.push(format!("foreach node {name:?} has no action")),
                    Some(action) => {
                        if action.get("async").is_some_and(truthy)
                            || action
                                .get("params")
                                .and_then(|p| p.get("async"))
                                .is_some_and(truthy)
                        {
                            errors.push(format!(
                                "foreach node {name:?} runs its action async, which a foreach cannot wait for"
                            ));
                        }
                    }
                }
                if let Some(Value::String(var)) = node.get("as") {
                    assigned.insert(var.clone());
                } else {
                    assigned.insert("item".into());
                }
                if let Some(Value::String(key)) = node.get("collect") {
                    assigned.insert(key.clone());
                }
                if let Some(tolerated) = node.get("tolerated_failures")
                    && crate::walk::tolerated(tolerated, 100).is_err()
                {
                    errors.push(format!(
                        "foreach node {name:?} has a tolerated_failures that is neither a count nor a percentage (\"10%\"): {tolerated}"
                    ));
                }
            }
            Some(other) => errors.push(format!("node {name:?} has an unknown type {other:?}")),
        }
        for target in targets(node) {
            if !nodes.contains_key(&target) {
                errors.push(format!(
                    "node {name:?} leads to {target:?}, which is no node"
                ));
            }
        }
        if let Some(Value::Object(assign)) = node.get("assign") {
            assigned.extend(assign.keys().cloned());
        }
        let mut texts = Vec::new();
        strings(&Value::Object(node.clone()), &mut texts);
        for text in texts {
            state_references(&text, &mut read);
        }
        if let Some(Value::Array(edges)) = node.get("next") {
            for edge in edges {
                condition_paths(edge.get("when").unwrap_or(&Value::Null), &mut read);
            }
        }
    }
    match config.get("hooks") {
        None | Some(Value::Null) => {}
        Some(Value::Array(hooks)) => {
            for (i, hook) in hooks.iter().enumerate() {
                let event = hook.get("event").and_then(Value::as_str);
                if !event.is_some_and(|e| HOOK_EVENTS.contains(&e)) {
                    errors.push(format!(
                        "hook {i} runs on {}, which is none of {}",
                        event.map_or_else(|| "no event".to_owned(), |e| format!("{e:?}")),
                        HOOK_EVENTS.join(", ")
                    ));
                }
                if !hook.get("action").is_some_and(Value::is_object) {
                    errors.push(format!("hook {i} has no action (a map like a node's)"));
                }
                let mut texts = Vec::new();
                strings(hook, &mut texts);
                for text in texts {
                    state_references(&text, &mut read);
                }
                condition_paths(hook.get("condition").unwrap_or(&Value::Null), &mut read);
            }
        }
        Some(_) => errors.push("config.hooks is not a list".into()),
    }
    for key in read.difference(&assigned) {
        warnings.push(format!("state.{key} is read but never assigned"));
    }
    for key in assigned.difference(&read) {
        if IMPLICIT.contains(&key.as_str()) {
            continue;
        }
        warnings.push(format!("state.{key} is assigned but never read"));
    }
    if let Some(start) = start.filter(|s| nodes.contains_key(*s)) {
        let mut seen: BTreeSet<&str> = BTreeSet::from([start]);
        let mut queue = VecDeque::from([start]);
        while let Some(name) = queue.pop_front() {
            let Some(Value::Object(node)) = nodes.get(name) else {
                continue;
            };
            for target in targets(node) {
                if let Some((key, _)) = nodes.get_key_value(&target)
                    && seen.insert(key.as_str())
                {
                    queue.push_back(key.as_str());
                }
            }
        }
        for name in nodes.keys() {
            if !seen.contains(name.as_str()) {
                warnings.push(format!("node {name:?} is unreachable from {start:?}"));
            }
        }
    }
    json!({
        "success": errors.is_empty(),
        "errors": errors,
        "warnings": warnings,
        "node_count": nodes.len(),
    })
}

fn truthy(value: &Value) -> bool {
    !matches!(value, Value::Null | Value::Bool(false))
}

/// The nodes a node may lead to: `next` (a name or edges) and `on_error`.
fn targets(node: &Map<String, Value>) -> Vec<String> {
    let mut found = Vec::new();
    match node.get("next") {
        Some(Value::String(target)) => found.push(target.clone()),
        Some(Value::Array(edges)) => found.extend(
            edges
                .iter()
                .filter_map(|e| e.get("to").and_then(Value::as_str))
                .map(str::to_owned),
        ),
        _ => {}
    }
    if let Some(Value::String(target)) = node.get("on_error") {
        found.push(target.clone());
    }
    found
}

fn strings(value: &Value, out: &mut Vec<String>) {
    match value {
        Value::String(s) => out.push(s.clone()),
        Value::Array(items) => items.iter().for_each(|v| strings(v, out)),
        Value::Object(map) => map.values().for_each(|v| strings(v, out)),
        _ => {}
    }
}

/// The top-level state keys `${…state.X…}` templates in `text` read.
fn state_references(text: &str, read: &mut BTreeSet<String>) {
    let mut rest = text;
    while let Some(at) = rest.find("${") {
        let after = &rest[at + 2..];
        let end = after.find('}').unwrap_or(after.len());
        let inner = &after[..end];
        let mut search = inner;
        while let Some(i) = search.find("state.") {
            let preceded = search[..i]
                .chars()
                .next_back()
                .is_some_and(|c| c.is_alphanumeric() || c == '_' || c == '.');
            let key: String = search[i + 6..]
                .chars()
                .take_while(|c| c.is_alphanumeric() || *c == '_' || *c == '-')
                .collect();
            if !preceded && !key.is_empty() {
                read.insert(key);
            }
            search = &search[i + 6..];
        }
        rest = &after[end.min(after.len())..];
    }
}

/// The top-level state keys a condition's `state.X` paths read.
fn condition_paths(condition: &Value, read: &mut BTreeSet<String>) {
    match condition {
        Value::Object(map) => {
            if let Some(path) = map.get("path").and_then(Value::as_str)
                && let Some(rest) = path.strip_prefix("state.")
            {
                let key: String = rest
                    .chars()
                    .take_while(|c| c.is_alphanumeric() || *c == '_' || *c == '-')
                    .collect();
                if !key.is_empty() {
                    read.insert(key);
                }
            }
            map.values().for_each(|v| condition_paths(v, read));
        }
        Value::Array(items) => items.iter().for_each(|v| condition_paths(v, read)),
        _ => {}
    }
}

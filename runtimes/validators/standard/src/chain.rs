//! The shape of a tool's execution chain. The host has already checked
//! each (child, parent) pair (space precedence, declared inputs and
//! outputs, version constraints); these rules are about the chain as a
//! whole.

use rye_guest::serde_json::{Map, Value};
use rye_guest::validator::{ChainLink, Diagnostic};

pub(crate) fn check(links: &[ChainLink], found: &mut Vec<Diagnostic>) {
    let metadata: Vec<Map<String, Value>> = links
        .iter()
        .map(|l| match rye_guest::serde_json::from_str(&l.metadata) {
            Ok(Value::Object(map)) => map,
            _ => Map::new(),
        })
        .collect();
    let Some((last, last_meta)) = links.last().zip(metadata.last()) else {
        return;
    };
    if !last_meta.get("executor_id").is_none_or(Value::is_null) {
        found.push(Diagnostic::error(
            "rye/chain/terminal",
            format!(
                "the chain ends in {}, which names an executor of its own",
                last.item_id
            ),
        ));
    }
    if links.len() > 1 {
        role(last, last_meta, "primitive", "it ends the chain", found);
    }
    let middle = links.len().saturating_sub(1);
    for (link, meta) in links.iter().zip(&metadata).take(middle).skip(1) {
        role(
            link,
            meta,
            "runtime",
            "another element names it as executor",
            found,
        );
    }
    // Whatever the primitive requires must come from the elements above
    // it, unless an adapter plans the process instead. A chain that starts
    // at a runtime is checked as far as it goes: its tools give the rest.
    let from_runtime = metadata[0].get("tool_type").and_then(Value::as_str) == Some("runtime");
    if links.len() > 1 && !from_runtime && !metadata.iter().any(|m| m.contains_key("adapter")) {
        let required: Vec<&str> = last_meta
            .get("config_schema")
            .and_then(|s| s.get("required"))
            .and_then(Value::as_array)
            .map(|r| r.iter().filter_map(Value::as_str).collect())
            .unwrap_or_default();
        for key in required {
            let given = metadata[..metadata.len() - 1]
                .iter()
                .any(|m| m.get("config").and_then(|c| c.get(key)).is_some());
            if !given {
                found.push(Diagnostic::error(
                    "rye/chain/config",
                    format!(
                        "{} requires config key {key:?}, and no element above it in the chain gives it",
                        last.item_id
                    ),
                ));
            }
        }
    }
}

/// An element in the role of `expected` (`runtime`, `primitive`): another
/// declared tool type is an error; none at all, a warning.
fn role(
    link: &ChainLink,
    meta: &Map<String, Value>,
    expected: &str,
    why: &str,
    found: &mut Vec<Diagnostic>,
) {
    let rule = if expected == "primitive" {
        "rye/chain/terminal"
    } else {
        "rye/chain/runtime"
    };
    match meta.get("tool_type").and_then(Value::as_str) {
        Some(t) if t == expected => {}
        Some(other) => found.push(Diagnostic::error(
            rule,
            format!(
                "{} is a {expected} here ({why}), but its tool_type is {other:?}",
                link.item_id
            ),
        )),
        None => found.push(Diagnostic::warning(
            rule,
            format!(
                "{} is a {expected} here ({why}); declare tool_type: {expected}",
                link.item_id
            ),
        )),
    }
}

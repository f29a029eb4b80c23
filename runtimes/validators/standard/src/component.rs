//! Component tool items (`tool_type: wasm_component`): the `.wasm` they
//! name and the capabilities they declare, in the shapes the host grants.
//! The host checks again at run time (folders must exist, hosts parse);
//! this catches what is wrong in the file before anyone runs it.

use rye_guest::serde_json::{Map, Value};

use crate::{Report, kind_of};

const RULE: &str = "rye/tool/component";

const CAPABILITIES: &[&str] = &["files", "env", "network", "limits"];
const LIMITS: &[&str] = &["deadline_ms", "memory_bytes", "output_bytes"];

pub(crate) fn check(document: &Map<String, Value>, report: &mut Report) {
    let Some(Value::Object(config)) = document.get("config") else {
        report.error(RULE, "a component tool needs a config mapping", None);
        return;
    };
    match config.get("component").and_then(Value::as_str) {
        Some(name)
            if name.ends_with(".wasm")
                && name.len() > ".wasm".len()
                && !name.contains('/')
                && !name.starts_with('.') => {}
        Some(name) => report.error(
            RULE,
            format!("config.component is {name:?}; it is the file name of a .wasm beside the item"),
            Some("config"),
        ),
        None => report.error(
            RULE,
            "config.component names the tool's .wasm (beside the item)",
            Some("config"),
        ),
    }
    let capabilities = match config.get("capabilities") {
        None | Some(Value::Null) => return,
        Some(Value::Object(map)) => map,
        Some(other) => {
            report.error(
                RULE,
                format!("config.capabilities is {}, not a mapping", kind_of(other)),
                Some("config"),
            );
            return;
        }
    };
    let mut error = |message: String| report.error(RULE, message, Some("config"));
    for key in capabilities.keys() {
        if !CAPABILITIES.contains(&key.as_str()) {
            error(format!(
                "capabilities.{key} is not a capability ({})",
                CAPABILITIES.join(", ")
            ));
        }
    }
    for (n, file) in list(capabilities, "files", &mut error).iter().enumerate() {
        let path = file.get("path").and_then(Value::as_str);
        match path {
            Some(path)
                if ["{project_path}", "{tool_dir}"]
                    .iter()
                    .any(|root| path == *root || path.starts_with(&format!("{root}/")))
                    && !path.split('/').any(|part| part == ".." || part == ".") => {}
            _ => error(format!(
                "capabilities.files[{n}].path is {}; it is {{project_path}}, {{tool_dir}} or a \
                 folder under one, without `.` or `..`",
                file.get("path").unwrap_or(&Value::Null)
            )),
        }
        match file.get("access") {
            None => {}
            Some(Value::String(a)) if a == "read" || a == "write" => {}
            Some(other) => error(format!(
                "capabilities.files[{n}].access is {other}; it is read or write"
            )),
        }
    }
    for name in list(capabilities, "env", &mut error) {
        if !name.as_str().is_some_and(|n| {
            !n.is_empty() && n.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_')
        }) {
            error(format!("capabilities.env: {name} is not a variable name"));
        }
    }
    match capabilities.get("network") {
        None | Some(Value::Null) => {}
        Some(Value::Object(network)) => {
            for key in network.keys().filter(|k| *k != "hosts") {
                error(format!("capabilities.network.{key} is not known (hosts)"));
            }
            for host in list(network, "hosts", &mut error) {
                if !host.as_str().is_some_and(|h| {
                    !h.is_empty() && !h.contains("://") && !h.contains('/') && !h.contains(' ')
                }) {
                    error(format!(
                        "capabilities.network.hosts: {host} is not a host (a name, `*.` and a \
                         domain, or an address, with an optional :port; no scheme or path)"
                    ));
                }
            }
        }
        Some(other) => error(format!(
            "capabilities.network is {}, not a mapping",
            kind_of(other)
        )),
    }
    match capabilities.get("limits") {
        None | Some(Value::Null) => {}
        Some(Value::Object(limits)) => {
            for (key, value) in limits {
                if !LIMITS.contains(&key.as_str()) {
                    error(format!(
                        "capabilities.limits.{key} is not a limit ({})",
                        LIMITS.join(", ")
                    ));
                } else if value.as_u64().is_none_or(|n| n == 0) {
                    error(format!(
                        "capabilities.limits.{key} is {value}, not a whole number above 0"
                    ));
                }
            }
        }
        Some(other) => error(format!(
            "capabilities.limits is {}, not a mapping",
            kind_of(other)
        )),
    }
}

/// The list at `key` of `map` (empty when absent), or an error.
fn list<'a>(map: &'a Map<String, Value>, key: &str, error: &mut impl FnMut(String)) -> &'a [Value] {
    match map.get(key) {
        None | Some(Value::Null) => &[],
        Some(Value::Array(items)) => items,
        Some(other) => {
            error(format!("{key} is {}, not a list", kind_of(other)));
            &[]
        }
    }
}

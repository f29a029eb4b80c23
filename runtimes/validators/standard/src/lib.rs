//! The system's own validator: the structure every item kind must have,
//! runtime YAML against its versioned schema, `config_schema` against the
//! JSON Schema meta-schema of its dialect, and the shape of every tool's
//! chain.
//!
//! Missing conventional fields (a description, an author) are warnings;
//! values that are present but wrong (a version that is not semver, a
//! config schema that is not a schema, a runtime key of the wrong type)
//! are errors, which stop `sign` and `execute`.

mod chain;
mod component;
mod instance;
mod items;
mod mcp;
mod regex;
mod report;
mod runtime;
mod schema;

use rye_guest::serde_json::{Map, Value};
use rye_guest::validator::{Diagnostic, ItemKind, Subject, Validator, ValidatorInfo};

pub(crate) use report::Report;

struct Standard;

impl Validator for Standard {
    fn describe() -> ValidatorInfo {
        ValidatorInfo::new("rye/standard", env!("CARGO_PKG_VERSION"))
            .kinds([
                ItemKind::Directive,
                ItemKind::Tool,
                ItemKind::Knowledge,
                ItemKind::Config,
            ])
            .checks_chains()
    }

    fn validate(subject: Subject) -> Result<Vec<Diagnostic>, String> {
        check(subject).map(bounded)
    }
}

/// The host cuts, and stops, a validator that answers with more than 200
/// findings or a message over 2,000 characters. Findings here quote what
/// they are about (a pattern, a value), which a hostile item can make
/// huge, so they are held well inside both bounds.
pub(crate) const MAX_FINDINGS: usize = 100;
const MAX_MESSAGE: usize = 1_000;

fn bounded(mut found: Vec<Diagnostic>) -> Vec<Diagnostic> {
    if found.len() > MAX_FINDINGS {
        let more = found.len() - (MAX_FINDINGS - 1);
        let worst = found
            .iter()
            .skip(MAX_FINDINGS - 1)
            .any(|d| d.severity == rye_guest::validator::Severity::Error);
        found.truncate(MAX_FINDINGS - 1);
        let message = format!("{more} more findings like the ones above are not listed");
        found.push(if worst {
            Diagnostic::error("rye/more", message)
        } else {
            Diagnostic::warning("rye/more", message)
        });
    }
    for d in &mut found {
        if d.message.chars().count() > MAX_MESSAGE {
            d.message = d.message.chars().take(MAX_MESSAGE - 1).collect::<String>() + "…";
        }
    }
    found
}

fn check(subject: Subject) -> Result<Vec<Diagnostic>, String> {
    match subject {
        Subject::Item(item) => {
            let document: Map<String, Value> = match rye_guest::serde_json::from_str(&item.parsed) {
                Ok(Value::Object(map)) => map,
                _ => return Err("the parsed document is not a JSON object".into()),
            };
            let mut report = Report::new(&item.content);
            items::check(item.kind, &item.item_id, &document, &mut report);
            if let Some(schema) = &item.config_schema {
                items::config_content(schema, &document, &mut report)?;
            }
            Ok(report.found)
        }
        Subject::Chain(links) => {
            let mut found = Vec::new();
            chain::check(&links, &mut found);
            Ok(found)
        }
    }
}

rye_guest::export_validator!(Standard);

/// The first of `keys` the document has, with its value.
pub(crate) fn first<'d>(
    document: &'d Map<String, Value>,
    keys: &[&'d str],
) -> Option<(&'d str, &'d Value)> {
    keys.iter().find_map(|k| document.get(*k).map(|v| (*k, v)))
}

/// `MAJOR.MINOR.PATCH`, digits only, as the original system required.
pub(crate) fn is_semver(text: &str) -> bool {
    let parts: Vec<&str> = text.split('.').collect();
    parts.len() == 3
        && parts
            .iter()
            .all(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()))
}

/// `text` for a message: whole when short, else its start and end.
pub(crate) fn short(text: &str) -> String {
    let count = text.chars().count();
    if count <= 80 {
        return text.to_owned();
    }
    let head: String = text.chars().take(48).collect();
    let tail: String = text.chars().skip(count - 24).collect();
    format!("{head}…{tail}")
}

/// A JSON value's kind, for messages.
pub(crate) fn kind_of(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "a list",
        Value::Object(_) => "a mapping",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn findings_stay_inside_the_hosts_bounds() {
        let many: Vec<Diagnostic> = (0..500)
            .map(|i| Diagnostic::warning("r", "x".repeat(if i == 3 { 5_000 } else { 10 })))
            .chain([Diagnostic::error("r", "late")])
            .collect();
        let kept = bounded(many);
        assert_eq!(kept.len(), MAX_FINDINGS);
        assert_eq!(kept[3].message.chars().count(), MAX_MESSAGE);
        let last = kept.last().unwrap();
        assert_eq!(
            last.message,
            "402 more findings like the ones above are not listed"
        );
        assert_eq!(last.severity, rye_guest::validator::Severity::Error);
    }

    #[test]
    fn semver_is_three_numbers() {
        assert!(is_semver("1.0.0"));
        assert!(!is_semver("1.0"));
        assert!(!is_semver("1.0.0-beta"));
        assert!(!is_semver("v1.0.0"));
    }
}

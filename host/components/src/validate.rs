//! Calls into the `validator` world.
//!
//! A validator may come from the very tree it checks, so everything it
//! returns is bounded here: how many findings one call may report and how
//! long each text may be. Going past a bound is a failure of the validator,
//! not of the host, and what fit is kept.

use crate::bindings::validator::exports::rye::plugin::validation as wit;
use crate::bindings::validator::rye::plugin::types as wit_types;
use crate::error::{ComponentError, ComponentErrorKind};
use crate::host::{ComponentHost, LoadedComponent, Pre};
use crate::parse::{Diagnostic, PluginKind, Position, Severity};
use crate::services::PluginSpace;
use crate::world::World;

/// Findings one call may report.
pub const MAX_FINDINGS: usize = 200;
/// Characters of a rule name or message kept.
pub const MAX_TEXT: usize = 2_000;
/// Characters of a validator's name or version.
const MAX_NAME: usize = 100;

/// What a validator says it is and wants to see.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct ValidatorInfo {
    pub name: String,
    pub version: String,
    pub kinds: Vec<PluginKind>,
    pub checks_chains: bool,
}

/// An item handed to a validator.
#[derive(Debug, Clone, Copy)]
pub struct ItemSubject<'a> {
    pub kind: PluginKind,
    pub item_id: &'a str,
    pub space: PluginSpace,
    pub file_name: &'a str,
    pub content: &'a str,
    /// The parser's document, JSON text.
    pub parsed: &'a str,
    /// For a config item, the schema its content must satisfy.
    pub config_schema: Option<SchemaRef<'a>>,
}

/// A config item's schema: the schema tool's id and the schema as JSON
/// text.
#[derive(Debug, Clone, Copy)]
pub struct SchemaRef<'a> {
    pub item_id: &'a str,
    pub schema: &'a str,
}

/// One element of a chain handed to a validator.
#[derive(Debug, Clone)]
pub struct ChainLink {
    pub item_id: String,
    pub space: PluginSpace,
    /// The element's normalized metadata, JSON text.
    pub metadata: String,
}

/// What a validator is asked about.
#[derive(Debug, Clone, Copy)]
pub enum Subject<'a> {
    Item(ItemSubject<'a>),
    /// Tool first.
    Chain(&'a [ChainLink]),
}

/// A validator's answer about one subject.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Validated {
    pub findings: Vec<Diagnostic>,
    /// What went past the output bounds, if anything did; the findings
    /// kept are the ones that fit.
    pub overflow: Option<String>,
}

impl ComponentHost {
    /// Asks a validator what it is and what it wants to see.
    pub fn describe_validator(
        &self,
        component: &LoadedComponent,
    ) -> Result<ValidatorInfo, ComponentError> {
        let fail = |kind| ComponentError {
            path: component.path.clone(),
            kind,
        };
        let pre = validator_pre(component).map_err(fail)?;
        let mut store = self.store(World::Validator);
        let info = pre
            .instantiate(&mut store)
            .and_then(|v| v.rye_plugin_validation().call_describe(&mut store))
            .map_err(|e| fail(self.classify(&store, World::Validator, e)))?;
        let name = bounded_name(&info.name, "name").map_err(fail)?;
        let version = bounded_name(&info.version, "version").map_err(fail)?;
        let mut kinds: Vec<PluginKind> = info.kinds.into_iter().map(plugin_kind).collect();
        kinds.dedup();
        Ok(ValidatorInfo {
            name,
            version,
            kinds,
            checks_chains: info.checks_chains,
        })
    }

    /// Runs a validator on one subject. The outer error is a failure of
    /// the validator (trap, deadline, memory cap); the inner one is the
    /// error the validator itself reported.
    pub fn validate(
        &self,
        component: &LoadedComponent,
        subject: Subject<'_>,
    ) -> Result<Result<Validated, String>, ComponentError> {
        let fail = |kind| ComponentError {
            path: component.path.clone(),
            kind,
        };
        let pre = validator_pre(component).map_err(fail)?;
        let subject = match subject {
            Subject::Item(item) => wit::Subject::Item(wit::Item {
                kind: wit_kind(item.kind),
                item_id: item.item_id.to_owned(),
                space: wit_space(item.space),
                file_name: item.file_name.to_owned(),
                content: item.content.to_owned(),
                parsed: item.parsed.to_owned(),
                config_schema: item.config_schema.map(|s| wit::ConfigSchema {
                    item_id: s.item_id.to_owned(),
                    schema: s.schema.to_owned(),
                }),
            }),
            Subject::Chain(links) => wit::Subject::Chain(
                links
                    .iter()
                    .map(|l| wit::ChainLink {
                        item_id: l.item_id.clone(),
                        space: wit_space(l.space),
                        metadata: l.metadata.clone(),
                    })
                    .collect(),
            ),
        };
        let mut store = self.store(World::Validator);
        let result = pre
            .instantiate(&mut store)
            .and_then(|v| {
                v.rye_plugin_validation()
                    .call_validate(&mut store, &subject)
            })
            .map_err(|e| fail(self.classify(&store, World::Validator, e)))?;
        Ok(match result {
            Ok(found) => Ok(bound(found)),
            Err(message) => Err(truncate(message, MAX_TEXT)),
        })
    }
}

fn validator_pre(
    component: &LoadedComponent,
) -> Result<&crate::bindings::validator::ValidatorPre<crate::sandbox::CallState>, ComponentErrorKind>
{
    match &component.pre {
        Pre::Validator(pre) => Ok(pre),
        _ => Err(ComponentErrorKind::WrongWorld {
            expected: World::Validator.name().to_owned(),
            found: vec![format!("the {} world", component.world)],
        }),
    }
}

fn bound(found: Vec<wit_types::Diagnostic>) -> Validated {
    let total = found.len();
    let mut overflow = Vec::new();
    if total > MAX_FINDINGS {
        overflow.push(format!(
            "it reported {total} findings for one subject; the first {MAX_FINDINGS} are kept"
        ));
    }
    let mut long = 0;
    let findings = found
        .into_iter()
        .take(MAX_FINDINGS)
        .map(|d| {
            if d.message.len() > MAX_TEXT || d.rule.len() > MAX_NAME {
                long += 1;
            }
            Diagnostic {
                severity: match d.severity {
                    wit_types::Severity::Error => Severity::Error,
                    wit_types::Severity::Warning => Severity::Warning,
                    wit_types::Severity::Info => Severity::Info,
                },
                rule: truncate(d.rule, MAX_NAME),
                message: truncate(d.message, MAX_TEXT),
                at: d.at.map(|p| Position {
                    line: p.line,
                    column: p.column,
                }),
            }
        })
        .collect();
    if long > 0 {
        overflow.push(format!(
            "{long} findings had a rule over {MAX_NAME} or a message over {MAX_TEXT} characters; they were cut"
        ));
    }
    Validated {
        findings,
        overflow: (!overflow.is_empty()).then(|| overflow.join("; ")),
    }
}

fn bounded_name(text: &str, what: &str) -> Result<String, ComponentErrorKind> {
    if text.is_empty() || text.len() > MAX_NAME || text.chars().any(char::is_control) {
        return Err(ComponentErrorKind::BadOutput(format!(
            "its {what} must be 1 to {MAX_NAME} printable characters"
        )));
    }
    Ok(text.to_owned())
}

/// `text` cut to at most `max` bytes, on a character boundary, marked as
/// cut.
fn truncate(mut text: String, max: usize) -> String {
    if text.len() <= max {
        return text;
    }
    text.truncate(text.floor_char_boundary(max));
    text.push('…');
    text
}

fn wit_kind(kind: PluginKind) -> wit_types::ItemKind {
    match kind {
        PluginKind::Directive => wit_types::ItemKind::Directive,
        PluginKind::Tool => wit_types::ItemKind::Tool,
        PluginKind::Knowledge => wit_types::ItemKind::Knowledge,
        PluginKind::Config => wit_types::ItemKind::Config,
    }
}

fn plugin_kind(kind: wit_types::ItemKind) -> PluginKind {
    match kind {
        wit_types::ItemKind::Directive => PluginKind::Directive,
        wit_types::ItemKind::Tool => PluginKind::Tool,
        wit_types::ItemKind::Knowledge => PluginKind::Knowledge,
        wit_types::ItemKind::Config => PluginKind::Config,
    }
}

fn wit_space(space: PluginSpace) -> wit_types::Space {
    match space {
        PluginSpace::Project => wit_types::Space::Project,
        PluginSpace::User => wit_types::Space::User,
        PluginSpace::System => wit_types::Space::System,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn truncates_on_a_character_boundary() {
        let cut = truncate("é".repeat(10), 5);
        assert_eq!(cut, "éé…");
        assert_eq!(truncate("short".into(), 10), "short");
    }

    #[test]
    fn keeps_the_first_findings_and_says_so() {
        let many = (0..MAX_FINDINGS + 5)
            .map(|i| wit_types::Diagnostic {
                severity: wit_types::Severity::Warning,
                rule: "r".into(),
                message: format!("finding {i}"),
                at: None,
            })
            .collect();
        let validated = bound(many);
        assert_eq!(validated.findings.len(), MAX_FINDINGS);
        assert!(validated.overflow.unwrap().contains("205 findings"));
    }
}

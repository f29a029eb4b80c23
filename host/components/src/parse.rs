//! Calls into the `parser` world.

use serde_json::{Map, Value};

use crate::bindings::parser::exports::rye::plugin::parsing as wit;
use crate::bindings::parser::rye::plugin::types as wit_types;
use crate::error::{ComponentError, ComponentErrorKind};
use crate::host::{ComponentHost, LoadedComponent, Pre};
use crate::world::World;

/// Item kinds as the contract names them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum PluginKind {
    Directive,
    Tool,
    Knowledge,
    Config,
}

/// What a parser is asked to read.
#[derive(Debug, Clone, Copy)]
pub struct ParseRequest<'a> {
    pub kind: PluginKind,
    pub item_id: &'a str,
    pub file_name: &'a str,
    pub content: &'a str,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Severity {
    Error,
    Warning,
    Info,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct Position {
    pub line: u32,
    pub column: u32,
}

/// A parser's finding about its input.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Diagnostic {
    pub severity: Severity,
    pub rule: String,
    pub message: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub at: Option<Position>,
}

/// A successful parse.
#[derive(Debug, Clone, PartialEq)]
pub struct ParsedDocument {
    pub document: Map<String, Value>,
    pub diagnostics: Vec<Diagnostic>,
}

/// A parser's verdict that its input is not valid, as typed by the
/// contract.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ParseFailure {
    #[error("syntax error{}: {message}", at_suffix(.at))]
    Syntax {
        message: String,
        at: Option<Position>,
    },
    #[error("invalid structure{}: {message}", at_suffix(.at))]
    Structure {
        message: String,
        at: Option<Position>,
    },
    #[error("unsupported: {0}")]
    Unsupported(String),
}

impl ParseFailure {
    pub fn position(&self) -> Option<Position> {
        match self {
            ParseFailure::Syntax { at, .. } | ParseFailure::Structure { at, .. } => *at,
            ParseFailure::Unsupported(_) => None,
        }
    }
}

fn at_suffix(at: &Option<Position>) -> String {
    at.map(|p| format!(" at line {}, column {}", p.line, p.column))
        .unwrap_or_default()
}

impl ComponentHost {
    /// Runs a parser component on one file. The outer error is a failure
    /// of the component itself (trap, deadline, memory cap, malformed
    /// output); the inner one is the parser's verdict on the input.
    pub fn parse(
        &self,
        component: &LoadedComponent,
        request: &ParseRequest<'_>,
    ) -> Result<Result<ParsedDocument, ParseFailure>, ComponentError> {
        let fail = |kind| ComponentError {
            path: component.path.clone(),
            kind,
        };
        let Pre::Parser(pre) = &component.pre else {
            return Err(fail(ComponentErrorKind::WrongWorld {
                expected: World::Parser.name().to_owned(),
                found: vec![format!("the {} world", component.world)],
            }));
        };
        let mut store = self.store(World::Parser);
        let input = wit::ParseInput {
            kind: match request.kind {
                PluginKind::Directive => wit_types::ItemKind::Directive,
                PluginKind::Tool => wit_types::ItemKind::Tool,
                PluginKind::Knowledge => wit_types::ItemKind::Knowledge,
                PluginKind::Config => wit_types::ItemKind::Config,
            },
            item_id: request.item_id.to_owned(),
            file_name: request.file_name.to_owned(),
            content: request.content.to_owned(),
        };
        let result = pre
            .instantiate(&mut store)
            .and_then(|parser| parser.rye_plugin_parsing().call_parse(&mut store, &input));
        let result = result.map_err(|e| fail(self.classify(&store, World::Parser, e)))?;
        match result {
            Ok(parsed) => {
                let document = match serde_json::from_str(&parsed.document) {
                    Ok(Value::Object(map)) => map,
                    Ok(other) => {
                        return Err(fail(ComponentErrorKind::BadOutput(format!(
                            "the document must be a JSON object, not {}",
                            json_kind(&other)
                        ))));
                    }
                    Err(e) => {
                        return Err(fail(ComponentErrorKind::BadOutput(format!(
                            "the document is not valid JSON: {e}"
                        ))));
                    }
                };
                Ok(Ok(ParsedDocument {
                    document,
                    diagnostics: parsed.diagnostics.into_iter().map(diagnostic).collect(),
                }))
            }
            Err(wit::ParseError::Syntax(e)) => Ok(Err(ParseFailure::Syntax {
                message: e.message,
                at: e.at.map(position),
            })),
            Err(wit::ParseError::Structure(e)) => Ok(Err(ParseFailure::Structure {
                message: e.message,
                at: e.at.map(position),
            })),
            Err(wit::ParseError::Unsupported(e)) => Ok(Err(ParseFailure::Unsupported(e))),
        }
    }
}

fn json_kind(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

fn position(p: wit_types::Position) -> Position {
    Position {
        line: p.line,
        column: p.column,
    }
}

fn diagnostic(d: wit_types::Diagnostic) -> Diagnostic {
    Diagnostic {
        severity: match d.severity {
            wit_types::Severity::Error => Severity::Error,
            wit_types::Severity::Warning => Severity::Warning,
            wit_types::Severity::Info => Severity::Info,
        },
        rule: d.rule,
        message: d.message,
        at: d.at.map(position),
    }
}

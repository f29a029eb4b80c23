//! The `python/ast` parser: tool metadata from a Python file.
//!
//! The document holds every module-level `NAME = <literal>` assignment
//! (one plain name on the left; the value a Python literal: string, number,
//! boolean, `None`, list, tuple, dict or set, nested freely), in the order
//! first assigned, with the last literal value, plus `__docstring__`, the
//! module docstring stripped. This is what Python's `ast.literal_eval` would
//! accept, read without running anything.
//!
//! Assignments whose value is not a literal are left out, as the original
//! host does. For the names the host reads as metadata a warning says so,
//! because `__version__ = VERSION` silently losing the version is a bug
//! authors want to hear about. Literals with no JSON form (bytes, complex
//! numbers, integers beyond 64 bits) are left out with a warning naming the
//! reason.

mod lexer;
mod literal;

use lexer::{LogicalLine, StrValue, Tok};
use literal::Rejection;
use rye_guest::parser::{Diagnostic, ParseError, ParseInput, Parsed, Parser};
use rye_guest::serde_json::{Map, Value};
use rye_parse_support::metadata;

/// Keywords that open a compound statement. A line starting with one is
/// not a module-level assignment, even if a `;` follows.
const COMPOUND: &[&str] = &[
    "if", "elif", "else", "for", "while", "def", "class", "with", "try", "except", "finally",
    "async",
];

const KEYWORDS: &[&str] = &[
    "False", "None", "True", "and", "as", "assert", "async", "await", "break", "class", "continue",
    "def", "del", "elif", "else", "except", "finally", "for", "from", "global", "if", "import",
    "in", "is", "lambda", "nonlocal", "not", "or", "pass", "raise", "return", "try", "while",
    "with", "yield",
];

pub struct PythonAst;

impl Parser for PythonAst {
    fn parse(input: ParseInput) -> Result<Parsed, ParseError> {
        parse_source(&input.content)
    }
}

rye_guest::export_parser!(PythonAst);

/// Parses Python source into the metadata document.
pub fn parse_source(source: &str) -> Result<Parsed, ParseError> {
    let source = source.strip_prefix('\u{feff}').unwrap_or(source);
    let mut document = Map::new();
    let mut diagnostics = Vec::new();
    let mut first = true;
    lexer::logical_lines(source, |line| {
        if std::mem::take(&mut first)
            && let Some(doc) = docstring(&line)
        {
            document.insert("__docstring__".into(), Value::String(doc.trim().to_owned()));
        }
        if line.top_level {
            assignments(&line, &mut document, &mut diagnostics);
        }
    })
    .map_err(|e| ParseError::syntax_at(e.message, e.line, e.col))?;

    Ok(Parsed {
        document,
        diagnostics,
    })
}

/// Records the literal assignments of one module-level line.
fn assignments(
    line: &LogicalLine,
    document: &mut Map<String, Value>,
    diagnostics: &mut Vec<Diagnostic>,
) {
    if let Some(Tok::Name(first)) = line.tokens.first().map(|t| &t.tok)
        && COMPOUND.contains(&first.as_str())
    {
        return;
    }
    if matches!(line.tokens.first().map(|t| &t.tok), Some(Tok::Op("@"))) {
        return;
    }
    for statement in line.tokens.split(|t| t.tok == Tok::Op(";")) {
        let [target, equals, value @ ..] = statement else {
            continue;
        };
        let (Tok::Name(name), Tok::Op("=")) = (&target.tok, &equals.tok) else {
            continue;
        };
        if KEYWORDS.contains(&name.as_str()) || value.is_empty() {
            continue;
        }
        match literal::evaluate(value) {
            Ok(json) => {
                document.insert(name.clone(), json);
            }
            Err(Rejection::NotLiteral) => {
                diagnostics.extend(metadata::non_literal(
                    "python",
                    name,
                    target.line,
                    target.col,
                ));
            }
            Err(Rejection::NoJsonForm(reason)) => diagnostics.push(
                Diagnostic::warning(
                    "python/no-json-form",
                    format!("`{name}` is left out: {reason}"),
                )
                .at(target.line, target.col),
            ),
        }
    }
}

/// The module docstring: a first statement made of text string literals
/// only.
fn docstring(line: &LogicalLine) -> Option<String> {
    let first_statement = line.tokens.split(|t| t.tok == Tok::Op(";")).next()?;
    let mut text = String::new();
    for token in first_statement {
        match &token.tok {
            Tok::Str(StrValue::Text(s)) => text.push_str(s),
            _ => return None,
        }
    }
    (!first_statement.is_empty()).then_some(text)
}

#[cfg(test)]
mod tests {
    use super::*;
    use rye_guest::serde_json::json;

    fn doc(src: &str) -> Value {
        Value::Object(parse_source(src).unwrap().document)
    }

    #[test]
    fn typical_tool() {
        let src = r#"# rye:signed:x
"""Count words."""
import json
__version__ = "1.2.0"
__executor_id__ = "rye/core/runtimes/python/function"
CONFIG_SCHEMA = {
    "type": "object",  # a comment
    "properties": {"text": {"type": "string"}},
    "required": ["text"],
}
def execute(params, project_path):
    INNER = 1
    return {"count": len(params["text"].split())}
"#;
        assert_eq!(
            doc(src),
            json!({
                "__docstring__": "Count words.",
                "__version__": "1.2.0",
                "__executor_id__": "rye/core/runtimes/python/function",
                "CONFIG_SCHEMA": {"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]}
            })
        );
    }

    #[test]
    fn compound_lines_and_multi_targets_are_skipped() {
        let d = doc("if True: A = 1; B = 2\nC = D = 3\nE: int = 4\nF = 5; G = 6\n");
        assert_eq!(d, json!({"F": 5, "G": 6}));
    }

    #[test]
    fn last_literal_wins_in_first_position() {
        let d = doc("A = 1\nB = 2\nA = 3\nA = compute()\n");
        assert_eq!(d, json!({"A": 3, "B": 2}));
    }

    #[test]
    fn non_literal_metadata_is_warned_about() {
        let parsed = parse_source("VERSION = '1'\n__version__ = VERSION\n").unwrap();
        assert_eq!(parsed.diagnostics.len(), 1);
        assert_eq!(parsed.diagnostics[0].rule, "python/non-literal-metadata");
        assert_eq!(parsed.diagnostics[0].at.as_ref().map(|p| p.line), Some(2));
    }

    #[test]
    fn syntax_errors_carry_position() {
        let Err(ParseError::Syntax(e)) = parse_source("X = [1,\n") else {
            panic!()
        };
        assert_eq!(e.at.map(|p| (p.line, p.column)), Some((1, 5)));
    }
}

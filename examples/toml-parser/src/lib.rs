//! A parser component for tools whose metadata is a TOML file:
//!
//! ```toml
//! version = "1.0.0"
//! executor_id = "rye/core/runtimes/python/script"
//! description = "Resize images"
//!
//! [config_schema]
//! type = "object"
//! ```
//!
//! The system tool extractor maps `.toml` to the parser name `toml/toml`;
//! no parser of that name ships with Rye. Build this one and install it as
//! `.ai/parsers/toml/toml.wasm` in a project or user space, and `.toml`
//! tools there parse.

use rye_guest::parser::{ParseError, ParseInput, Parsed, Parser};
use rye_guest::serde_json::{Map, Value};

struct Toml;

impl Parser for Toml {
    fn parse(input: ParseInput) -> Result<Parsed, ParseError> {
        // A signature line is a TOML comment, so it needs no special case.
        let table: toml::Table = toml::from_str(&input.content).map_err(|e| {
            let (line, column) = e
                .span()
                .map(|span| line_column(&input.content, span.start))
                .unwrap_or((1, 1));
            ParseError::syntax_at(e.message().to_owned(), line, column)
        })?;
        match to_json(toml::Value::Table(table)) {
            Value::Object(document) => Ok(Parsed::new(document)),
            _ => unreachable!("a table converts to an object"),
        }
    }
}

fn to_json(value: toml::Value) -> Value {
    match value {
        toml::Value::String(s) => Value::String(s),
        toml::Value::Integer(i) => Value::from(i),
        toml::Value::Float(f) => {
            rye_guest::serde_json::Number::from_f64(f).map_or(Value::Null, Value::Number)
        }
        toml::Value::Boolean(b) => Value::Bool(b),
        toml::Value::Datetime(d) => Value::String(d.to_string()),
        toml::Value::Array(items) => Value::Array(items.into_iter().map(to_json).collect()),
        toml::Value::Table(table) => Value::Object(
            table
                .into_iter()
                .map(|(k, v)| (k, to_json(v)))
                .collect::<Map<_, _>>(),
        ),
    }
}

fn line_column(text: &str, offset: usize) -> (u32, u32) {
    let before = &text[..offset.min(text.len())];
    let line = before.matches('\n').count() + 1;
    let column = before.rsplit('\n').next().map_or(0, |l| l.chars().count()) + 1;
    (line as u32, column as u32)
}

rye_guest::export_parser!(Toml);

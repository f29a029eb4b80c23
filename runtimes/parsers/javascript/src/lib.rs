//! The `javascript/javascript` parser: tool metadata from `.js`, `.ts`,
//! `.mjs` and `.cjs` files.
//!
//! The document holds every top-level `const`, `let` or `var` declaration
//! (optionally `export`ed, optionally with a TypeScript type annotation or
//! `as const`) whose value is a literal: a string (or a template without
//! substitutions), number, boolean, `null`, array or object literal, nested
//! freely, with comments and trailing commas allowed. For example:
//!
//! ```js
//! export const __version__ = "1.0.0";
//! export const __executor_id__ = "rye/core/runtimes/node/node";
//! export const CONFIG_SCHEMA = { type: "object", properties: { n: { type: "number" } } };
//! ```
//!
//! Declarations inside functions, blocks or classes are not metadata. A
//! metadata name assigned something other than a literal gets a warning.

mod lexer;

use lexer::{Tok, Token};
use rye_guest::parser::{Diagnostic, ParseError, ParseInput, Parsed, Parser};
use rye_guest::serde_json::{Map, Number, Value};
use rye_parse_support::metadata;

pub struct JavaScript;

impl Parser for JavaScript {
    fn parse(input: ParseInput) -> Result<Parsed, ParseError> {
        parse_source(&input.content)
    }
}

rye_guest::export_parser!(JavaScript);

/// Parses JavaScript or TypeScript source into the metadata document.
pub fn parse_source(source: &str) -> Result<Parsed, ParseError> {
    let source = source.strip_prefix('\u{feff}').unwrap_or(source);
    let tokens =
        lexer::tokenize(source).map_err(|e| ParseError::syntax_at(e.message, e.line, e.col))?;
    let mut document = Map::new();
    let mut diagnostics = Vec::new();

    let mut depth = 0i32;
    let mut i = 0;
    while i < tokens.len() {
        if depth == 0
            && let Some(end) = declaration(&tokens, i, &mut document, &mut diagnostics)
        {
            i = end;
            continue;
        }
        match tokens[i].tok {
            Tok::Punct("{" | "(" | "[") => depth += 1,
            Tok::Punct("}" | ")" | "]") => depth -= 1,
            _ => {}
        }
        i += 1;
    }
    Ok(Parsed {
        document,
        diagnostics,
    })
}

/// If a declaration starts at `start`, records its literal declarators and
/// returns the index just past what it consumed.
fn declaration(
    tokens: &[Token],
    start: usize,
    document: &mut Map<String, Value>,
    diagnostics: &mut Vec<Diagnostic>,
) -> Option<usize> {
    let mut i = start;
    if ident(tokens, i) == Some("export") {
        i += 1;
    }
    if !matches!(ident(tokens, i), Some("const" | "let" | "var")) {
        return None;
    }
    // `const` must begin a statement, not follow e.g. `for (`.
    if start > 0 && !starts_statement(&tokens[start - 1], &tokens[start]) {
        return None;
    }
    i += 1;
    loop {
        let name_token = tokens.get(i)?;
        let Tok::Ident(name) = &name_token.tok else {
            return Some(i);
        };
        i += 1;
        if punct(tokens, i) == Some(":") {
            i = skip_type(tokens, i + 1)?;
        }
        if punct(tokens, i) != Some("=") {
            return Some(i);
        }
        i += 1;
        let value_start = i;
        let mut p = LiteralParser {
            tokens,
            pos: i,
            depth: 0,
        };
        let value = p.value();
        i = p.pos;
        if ident(tokens, i) == Some("as") && ident(tokens, i + 1) == Some("const") {
            i += 2;
        }
        let ends = match tokens.get(i) {
            None => true,
            Some(t) => t.newline_before || matches!(t.tok, Tok::Punct(";" | ",")),
        };
        match value {
            Some(value) if ends => {
                document.insert(name.clone(), value);
            }
            _ => {
                diagnostics.extend(metadata::non_literal(
                    "javascript",
                    name,
                    name_token.line,
                    name_token.col,
                ));
                // Resume at the value so the caller counts its brackets.
                return Some(value_start);
            }
        }
        if punct(tokens, i) != Some(",") {
            return Some(i);
        }
        i += 1;
    }
}

fn starts_statement(previous: &Token, current: &Token) -> bool {
    current.newline_before || matches!(previous.tok, Tok::Punct(";" | "}" | "{"))
}

/// Skips a type annotation up to the `=` that ends it.
fn skip_type(tokens: &[Token], mut i: usize) -> Option<usize> {
    let mut depth = 0i32;
    loop {
        match &tokens.get(i)?.tok {
            Tok::Punct("=") if depth == 0 => return Some(i),
            Tok::Punct(";") if depth == 0 => return Some(i),
            Tok::Punct("{" | "(" | "[" | "<") => depth += 1,
            Tok::Punct("}" | ")" | "]" | ">") => depth -= 1,
            Tok::Punct(">>") => depth -= 2,
            Tok::Punct(">>>") => depth -= 3,
            _ => {}
        }
        i += 1;
    }
}

fn ident(tokens: &[Token], i: usize) -> Option<&str> {
    match &tokens.get(i)?.tok {
        Tok::Ident(s) => Some(s),
        _ => None,
    }
}

fn punct(tokens: &[Token], i: usize) -> Option<&'static str> {
    match tokens.get(i)?.tok {
        Tok::Punct(p) => Some(p),
        _ => None,
    }
}

/// How deeply array and object literals may nest before a value stops
/// counting as metadata; the bound keeps the component's stack small.
const MAX_DEPTH: usize = 100;

struct LiteralParser<'t> {
    tokens: &'t [Token],
    pos: usize,
    depth: usize,
}

impl LiteralParser<'_> {
    fn eat(&mut self, p: &str) -> bool {
        let hit = punct(self.tokens, self.pos) == Some(p);
        if hit {
            self.pos += 1;
        }
        hit
    }

    fn value(&mut self) -> Option<Value> {
        if self.depth >= MAX_DEPTH {
            return None;
        }
        self.depth += 1;
        let value = self.value_inner();
        self.depth -= 1;
        value
    }

    fn value_inner(&mut self) -> Option<Value> {
        let tok = self.tokens.get(self.pos)?.tok.clone();
        self.pos += 1;
        match tok {
            Tok::Str(s) => Some(Value::String(s)),
            Tok::Num(text) => number(&text, false),
            Tok::Punct("-") => match &self.tokens.get(self.pos)?.tok {
                Tok::Num(text) => {
                    self.pos += 1;
                    number(text, true)
                }
                _ => None,
            },
            Tok::Ident(word) => match word.as_str() {
                "true" => Some(Value::Bool(true)),
                "false" => Some(Value::Bool(false)),
                "null" => Some(Value::Null),
                _ => None,
            },
            Tok::Punct("[") => {
                let mut items = Vec::new();
                loop {
                    if self.eat("]") {
                        return Some(Value::Array(items));
                    }
                    items.push(self.value()?);
                    if !self.eat(",") {
                        return self.eat("]").then_some(Value::Array(items));
                    }
                }
            }
            Tok::Punct("{") => {
                let mut map = Map::new();
                loop {
                    if self.eat("}") {
                        return Some(Value::Object(map));
                    }
                    let key = match &self.tokens.get(self.pos)?.tok {
                        Tok::Ident(k) | Tok::Str(k) => k.clone(),
                        Tok::Num(n) => number(n, false)?.to_string(),
                        _ => return None,
                    };
                    self.pos += 1;
                    if !self.eat(":") {
                        return None;
                    }
                    map.insert(key, self.value()?);
                    if !self.eat(",") {
                        return self.eat("}").then_some(Value::Object(map));
                    }
                }
            }
            _ => None,
        }
    }
}

/// A JavaScript numeric literal as JSON: integers stay integers where they
/// fit, everything else is a double (as in JavaScript). BigInts (`10n`)
/// are not literals JSON can hold.
fn number(text: &str, negative: bool) -> Option<Value> {
    let clean: String = text.chars().filter(|c| *c != '_').collect();
    let lower = clean.to_ascii_lowercase();
    if lower.ends_with('n') {
        return None;
    }
    let radix = match lower.get(..2) {
        Some("0x") => Some(16),
        Some("0o") => Some(8),
        Some("0b") => Some(2),
        _ => None,
    };
    let sign = if negative { -1.0 } else { 1.0 };
    if let Some(radix) = radix {
        let magnitude = i64::from_str_radix(&lower[2..], radix).ok()?;
        return Some(Value::from(if negative { -magnitude } else { magnitude }));
    }
    if !lower.contains(['.', 'e'])
        && let Ok(i) = lower.parse::<i64>()
    {
        return Some(Value::from(if negative { -i } else { i }));
    }
    let f: f64 = lower.parse().ok()?;
    Number::from_f64(sign * f).map(Value::Number)
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
        let src = r#"#!/usr/bin/env node
// rye:signed:x
export const __version__ = "1.0.0";
export const __executor_id__ = 'rye/core/runtimes/node/node'
const CONFIG_SCHEMA: Record<string, unknown> = {
  type: "object", // comment
  properties: { n: { type: 'number', default: -1.5e2 } },
  required: ["n",],
} as const;
let LIMIT = 0x10, OTHER = [1, 2]
function main() { const INNER = 1; }
const COMPUTED = LIMIT * 2;
for (const x of [1]) {}
"#;
        assert_eq!(
            doc(src),
            json!({
                "__version__": "1.0.0",
                "__executor_id__": "rye/core/runtimes/node/node",
                "CONFIG_SCHEMA": {"type": "object", "properties": {"n": {"type": "number", "default": -150.0}}, "required": ["n"]},
                "LIMIT": 16,
                "OTHER": [1, 2]
            })
        );
    }

    #[test]
    fn non_literal_metadata_is_warned_about() {
        let parsed = parse_source("const v = '1';\nexport const __version__ = v;\n").unwrap();
        assert_eq!(parsed.diagnostics.len(), 1);
        assert_eq!(parsed.diagnostics[0].at.as_ref().map(|p| p.line), Some(2));
    }

    #[test]
    fn expressions_after_a_literal_are_not_literals() {
        assert_eq!(
            doc("const A = 1 + 2;\nconst B = 'x'.repeat(2)\n"),
            json!({})
        );
    }

    #[test]
    fn syntax_errors_carry_position() {
        let Err(ParseError::Syntax(e)) = parse_source("const A = 1;\nconst B = 'oops\n") else {
            panic!()
        };
        assert_eq!(e.at.map(|p| (p.line, p.column)), Some((2, 11)));
    }
}

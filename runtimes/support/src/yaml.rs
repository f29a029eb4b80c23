//! YAML documents as JSON. The one place the YAML crate is named, so it can
//! be swapped for another maintained fork without touching the parsers.

use rye_guest::parser::ParseError;
use rye_guest::serde_json::{Map, Number, Value};
use serde_yaml_ng::Value as Yaml;

/// Parses one YAML document into JSON. `line_offset` is added to reported
/// line numbers, for YAML embedded in a larger file.
///
/// An empty document is `null`. Keys that are numbers or booleans become
/// their text, as in JSON; other non-string keys, and numbers with no JSON
/// form (`.inf`, `.nan`), are errors naming their line where known.
pub fn to_json(text: &str, line_offset: u32) -> Result<Value, ParseError> {
    let yaml: Yaml = serde_yaml_ng::from_str(text).map_err(|e| {
        // The reader's own text names a line counted from the start of the
        // embedded YAML; the error's position (offset into the file) is
        // the one line reported.
        let text = e.to_string();
        let message = match e.location() {
            Some(_) => format!("invalid YAML: {}", without_position(&text)),
            None => format!("invalid YAML: {text}"),
        };
        match e.location() {
            Some(at) => {
                ParseError::syntax_at(message, at.line() as u32 + line_offset, at.column() as u32)
            }
            None => ParseError::syntax(message),
        }
    })?;
    convert(yaml, 0)
}

/// `text` without the "at line N column M" the reader puts in it.
fn without_position(text: &str) -> String {
    let digits = |s: &str| s.bytes().take_while(u8::is_ascii_digit).count();
    let mut from = 0;
    while let Some(found) = text[from..].find(" at line ") {
        let at = from + found;
        let rest = &text[at + " at line ".len()..];
        let line = digits(rest);
        if line > 0
            && let Some(after) = rest[line..].strip_prefix(" column ")
            && digits(after) > 0
        {
            let end = text.len() - after.len() + digits(after);
            return format!("{}{}", &text[..at], &text[end..]);
        }
        from = at + 1;
    }
    text.to_owned()
}

/// How deeply a document may nest. The YAML reader stops at 128 levels
/// itself; the host reads a parser's answer as JSON, which must stay inside
/// its own limit of 128 levels with the parser's wrapping around it.
pub const MAX_DEPTH: usize = 100;

/// Parses a YAML document that must be a mapping (or empty).
pub fn mapping(text: &str, line_offset: u32) -> Result<Map<String, Value>, ParseError> {
    match to_json(text, line_offset)? {
        Value::Object(map) => Ok(map),
        Value::Null => Ok(Map::new()),
        other => Err(ParseError::structure_at(
            format!(
                "expected a YAML mapping of keys to values, found {}",
                kind(&other)
            ),
            line_offset + 1,
            1,
        )),
    }
}

fn kind(value: &Value) -> &'static str {
    match value {
        Value::Null => "nothing",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "a list",
        Value::Object(_) => "a mapping",
    }
}

fn convert(yaml: Yaml, depth: usize) -> Result<Value, ParseError> {
    let nested = matches!(yaml, Yaml::Sequence(_) | Yaml::Mapping(_));
    if nested && depth >= MAX_DEPTH {
        return Err(ParseError::structure(format!(
            "the document nests lists and mappings more than {MAX_DEPTH} levels deep"
        )));
    }
    Ok(match yaml {
        Yaml::Null => Value::Null,
        Yaml::Bool(b) => Value::Bool(b),
        Yaml::Number(n) => number(&n)?,
        Yaml::String(s) => Value::String(s),
        Yaml::Sequence(items) => Value::Array(
            items
                .into_iter()
                .map(|item| convert(item, depth + 1))
                .collect::<Result<_, _>>()?,
        ),
        Yaml::Mapping(entries) => {
            let mut map = Map::new();
            for (key, value) in entries {
                map.insert(key_text(key)?, convert(value, depth + 1)?);
            }
            Value::Object(map)
        }
        Yaml::Tagged(tagged) => convert(tagged.value, depth)?,
    })
}

fn number(n: &serde_yaml_ng::Number) -> Result<Value, ParseError> {
    if let Some(i) = n.as_i64() {
        return Ok(Value::from(i));
    }
    if let Some(u) = n.as_u64() {
        return Ok(Value::from(u));
    }
    let f = n.as_f64().unwrap_or(f64::NAN);
    Number::from_f64(f)
        .map(Value::Number)
        .ok_or_else(|| ParseError::structure(format!("the number {n} has no JSON form")))
}

fn key_text(key: Yaml) -> Result<String, ParseError> {
    match key {
        Yaml::String(s) => Ok(s),
        Yaml::Number(n) => Ok(n.to_string()),
        Yaml::Bool(b) => Ok(b.to_string()),
        Yaml::Null => Ok("null".into()),
        Yaml::Tagged(tagged) => key_text(tagged.value),
        Yaml::Sequence(_) | Yaml::Mapping(_) => Err(ParseError::structure(
            "a mapping key is a list or mapping; keys must be text, numbers or booleans",
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rye_guest::serde_json::json;

    #[test]
    fn keys_become_text() {
        assert_eq!(
            to_json("1: a\ntrue: b\nx: [1, 2.5, null]\n", 0).unwrap(),
            json!({"1": "a", "true": "b", "x": [1, 2.5, null]})
        );
    }

    #[test]
    fn errors_carry_offset_lines() {
        let Err(ParseError::Syntax(e)) = to_json("a: 1\nb: [\n", 10) else {
            panic!()
        };
        assert!(e.at.unwrap().line > 10);
    }

    #[test]
    fn an_error_names_one_line_the_files() {
        let Err(ParseError::Syntax(e)) = to_json("a: 1\nb: [\n", 10) else {
            panic!()
        };
        let line = e.at.unwrap().line;
        assert!(!e.message.contains(" at line "), "{}", e.message);
        assert!(line > 10, "{line}");
    }

    #[test]
    fn nesting_is_bounded_below_the_hosts_json_limit() {
        let nest = |n: usize| format!("{}1{}", "{a: ".repeat(n), "}".repeat(n));
        assert!(to_json(&nest(MAX_DEPTH), 0).is_ok());
        let Err(ParseError::Structure(e)) = to_json(&nest(MAX_DEPTH + 1), 0) else {
            panic!()
        };
        assert!(e.message.contains("100 levels"), "{}", e.message);
    }

    #[test]
    fn duplicate_keys_are_errors() {
        assert!(to_json("a: 1\na: 2\n", 0).is_err());
    }

    #[test]
    fn non_mapping_is_a_structure_error() {
        assert!(matches!(mapping("- a\n", 0), Err(ParseError::Structure(_))));
        assert_eq!(mapping("", 0).unwrap(), Map::new());
    }
}
